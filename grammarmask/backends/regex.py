"""Regex: Python ``re`` syntax, full match, compiled to a byte DFA and indexed over the vocabulary.

``Regex(pattern)`` validates the pattern at construction (a bad one raises :class:`GrammarError`
with its position). ``compile(vocab)`` builds a :class:`DfaCompiledGrammar`, which is also what
``And`` of regular grammars and other DFA-based backends reuse: its state is a DFA state (int).
"""

from __future__ import annotations

import re
from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from ..automata import DEFAULT_MAX_STATES, DFA, regex_to_dfa
from ..errors import GrammarError
from ..grammar import CompiledGrammar, Grammar
from ..index import DfaTokenIndex
from ..vocab import Vocabulary

__all__ = ["DfaCompiledGrammar", "Regex"]

Words = npt.NDArray[np.uint32]
_FLAG_MASK = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.ASCII | re.UNICODE


class Regex(Grammar):
    """The strings ``s`` with ``re.fullmatch(pattern, s, flags)``, as UTF-8 bytes.

    Parameters
    ----------
    pattern
        A Python ``re`` pattern (``str``). Inline flags work; backreferences, lookaround,
        conditionals, possessive/atomic groups and ``\\b``/``\\B`` are refused.
    flags
        ``re`` flags: ``IGNORECASE``, ``MULTILINE``, ``DOTALL``, ``VERBOSE``, ``ASCII``.
    max_states
        Refuse patterns whose DFA needs more states than this.

    Raises
    ------
    GrammarError
        The pattern does not parse, is not regular, is too large (see
        :func:`grammarmask.automata.regex_to_dfa`), or matches no string at all.
    """

    def __init__(
        self, pattern: str, *, flags: int | re.RegexFlag = 0, max_states: int = DEFAULT_MAX_STATES
    ) -> None:
        if isinstance(pattern, re.Pattern):
            flags = int(flags) | (pattern.flags & _FLAG_MASK)
            pattern = pattern.pattern
        if not isinstance(pattern, str):
            raise GrammarError(f"Regex needs a str pattern, got {type(pattern).__name__}")
        flags = int(flags)
        if flags & ~_FLAG_MASK:
            raise GrammarError(f"unsupported re flags: {re.RegexFlag(flags & ~_FLAG_MASK)!r}")
        self.pattern = pattern
        self.flags = flags
        self.max_states = max_states
        self._dfa = regex_to_dfa(pattern, self.flags, max_states=max_states)
        if self._dfa.is_empty():
            raise GrammarError(f"the pattern {pattern!r} matches no string (its language is empty)")

    def __repr__(self) -> str:
        flags = f", flags={re.RegexFlag(self.flags)!r}" if self.flags else ""
        return f"Regex({self.pattern!r}{flags})"

    def cache_key(self) -> Hashable:
        return (self.pattern, self.flags, self.max_states)

    def to_dfa(self) -> DFA:
        """The minimal byte DFA of the language (used by ``And`` to build one product automaton)."""
        return self._dfa

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        return DfaCompiledGrammar(vocab, self._dfa)


class DfaCompiledGrammar(CompiledGrammar):
    """Any trimmed byte :class:`DFA` bound to a vocabulary. State: the DFA state (int)."""

    def __init__(self, vocab: Vocabulary, dfa: DFA) -> None:
        self.vocab = vocab
        self.dfa = dfa
        self.index = DfaTokenIndex(vocab, dfa)
        self._accepting = dfa.accepting.tolist()
        self._forced: dict[int, bytes] = {}

    def initial_state(self) -> int:
        return self.dfa.start

    def state_mask_words(self, state: int) -> Words:
        return self.index.mask_words(state)

    def advance_state(self, state: int, token_id: int) -> int | None:
        return self.index.next_state(state, token_id) or None

    def is_accepting_state(self, state: int) -> bool:
        return bool(self._accepting[state])

    def forced_bytes(self, state: int) -> bytes:
        """The bytes while the DFA has exactly one live out-byte and the state is not accepting."""
        hit = self._forced.get(state)
        if hit is not None:
            return hit
        out = bytearray()
        s = state
        seen = set()
        while s and not self._accepting[s] and s not in seen:
            seen.add(s)
            live = self.dfa.live_bytes(s)
            if len(live) != 1:
                break
            out.append(live[0])
            s = self.dfa.run(s, bytes(live))
        result = bytes(out)
        self._forced[state] = result
        return result
