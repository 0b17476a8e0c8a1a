"""``SpecialToken``: one special (control) token, by name or id, as a grammar to compose with ``+``."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from .._args import as_int
from ..engine import compile_dfa
from ..errors import GrammarError
from ..grammar import CompiledGrammar, Grammar
from ..special_tokens import require_view, resolve, spelling_dfa
from ..vocab import Vocabulary

__all__ = ["SpecialToken"]


class SpecialToken(Grammar):
    """Exactly one special token: the language is that token and nothing else.

    Compose it with text grammars so the token is legal exactly there, e.g. a tool call::

        call = gm.SpecialToken("<tool_call>") + gm.JsonSchema(args) + gm.SpecialToken("</tool_call>")

    Parameters
    ----------
    token
        The token's name as the tokenizer spells it (``"<|python_tag|>"``, tekken's
        ``"[TOOL_CALLS]"``), or its id.

    Raises
    ------
    GrammarError
        ``token`` is neither a non-empty str nor an int (at construction); at compile time, the
        vocabulary has no special token of that name, the id is not a named special token, or it is
        the EOS token (see :func:`grammarmask.special_tokens.resolve`).
    """

    def __init__(self, token: str | int) -> None:
        if isinstance(token, str):
            if not token:
                raise GrammarError("SpecialToken: the name is empty")
            self.token: str | int = token
        else:
            self.token = as_int(token, "SpecialToken: token")

    def __repr__(self) -> str:
        return f"SpecialToken({self.token!r})"

    def cache_key(self) -> Hashable:
        return self.token

    def special_tokens(self) -> frozenset[str | int]:
        return frozenset({self.token})

    def to_dfa(self) -> Any:
        """The spelling's DFA when the token is named (an id needs the vocabulary: None)."""
        return spelling_dfa(self.token) if isinstance(self.token, str) else None

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        require_view(vocab, repr(self))
        name = resolve(vocab, self.token, where=repr(self))
        return compile_dfa(spelling_dfa(name), vocab)
