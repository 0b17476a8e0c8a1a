"""The native regular engine's compiled grammar: a trimmed byte DFA bound to a vocabulary through
the Rust regular index (``grammarmask._engine.RegularIndex``). Same states, masks and answers as
:class:`grammarmask.regular.DfaCompiledGrammar`, its specification; tests/test_native_regular.py
holds the two (and the brute-force oracle) equal at every step."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..automata import DFA
from ..grammar import CompiledGrammar
from ..limits import active
from ..vocab import Vocabulary
from . import _engine, native_vocabulary

__all__ = ["NativeDfaCompiledGrammar"]

Words = npt.NDArray[np.uint32]


def _read_only_words(data: bytes) -> Words:
    """The native index's mask bytes as the (read-only) uint32 array the engine API hands out."""
    return np.frombuffer(data, dtype=np.uint32)


class NativeDfaCompiledGrammar(CompiledGrammar):
    """Any trimmed byte :class:`DFA` bound to a vocabulary. State: the DFA state (int).

    Masks are computed in Rust without the GIL on first visit and cached (``Limits.index_masks``
    of them); the object is immutable and may be shared by any number of threads.
    """

    def __init__(self, vocab: Vocabulary, dfa: DFA) -> None:
        self.vocab = vocab
        self.dfa = dfa
        # the table by byte class, the map beside (DFA.class_table: the automata kernels' DFAs come
        # with it), whatever its size: no 256-column copy for the engine to find classes in
        classes, _, by_class, accepting = dfa.class_table()
        self.index = _engine.RegularIndex(
            native_vocabulary(vocab),
            by_class,
            accepting,
            dfa.start,
            active().index_masks,
            _read_only_words,
            classes,
        )

    def initial_state(self) -> int:
        return self.dfa.start

    def state_mask_words(self, state: int) -> Words:
        words: Words = self.index.mask(state)
        return words

    def advance_state(self, state: int, token_id: int) -> int | None:
        return self.index.next_state(state, token_id) or None

    def is_accepting_state(self, state: int) -> bool:
        return self.index.is_accepting(state)

    def forced_bytes(self, state: int) -> bytes:
        """The bytes while the DFA has exactly one live out-byte and the state is not accepting."""
        return self.index.forced_bytes(state)
