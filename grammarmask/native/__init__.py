"""The native engine (Rust, ``grammarmask._engine``) behind the Python engine's interface.

``available()`` says whether the extension imported; :func:`native_vocabulary` gives the native form
of a :class:`~grammarmask.Vocabulary`, built once and shared by every grammar compiled against it
(through :func:`grammarmask.cache.per_vocabulary`). The compiled grammars live beside, one module per
engine part: :mod:`.regular` (byte DFAs) and :mod:`.cfg` (context-free grammars; selected by
``compile`` when :func:`grammarmask.engine.native_cfg` says so, the Python engine otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..cache import per_vocabulary
from ..limits import active

if TYPE_CHECKING:
    from .. import _engine as _engine_t
    from ..vocab import Vocabulary

try:
    from .. import _engine as _engine  # re-exported for the engine modules beside
except ImportError as e:  # a checkout whose extension was never built
    _engine = None  # type: ignore[assignment]
    IMPORT_ERROR: str = str(e)
else:
    IMPORT_ERROR = ""

__all__ = ["IMPORT_ERROR", "available", "native_vocabulary"]


def available() -> bool:
    """Whether the native extension ``grammarmask._engine`` is importable."""
    return _engine is not None


def native_vocabulary(vocab: Vocabulary) -> _engine_t.Vocabulary:
    """The native vocabulary of ``vocab`` with its byte trie (made once per vocabulary; the first
    compile's ``Limits.class_tries_per_vocabulary`` and ``Limits.shared_lexer_walks`` bound the
    class tries and the CFG lexer walks it keeps)."""

    def make() -> _engine_t.Vocabulary:
        tb = vocab.token_bytes
        lengths = np.fromiter(map(len, tb), dtype=np.uint32, count=len(tb))
        made = _engine.Vocabulary(
            b"".join(tb),
            lengths.tobytes(),
            sorted(vocab.special_ids),
            vocab.size,
            active().class_tries_per_vocabulary,
            active().shared_lexer_walks,
        )
        made.byte_trie_nodes  # noqa: B018 - the byte trie, built now: every grammar's trie is it or read off it
        made.slice_tokens  # noqa: B018 - and the string bodies every CFG grammar on the byte trie sets aside
        return made

    return per_vocabulary(vocab, "native.vocab", make)
