"""Regex: Python ``re`` syntax, full match, compiled to a byte DFA and indexed over the vocabulary.

``Regex(pattern)`` validates the pattern at construction (a bad one raises :class:`GrammarError`
with its position). ``compile(vocab)`` hands the DFA to the regular engine
(:class:`grammarmask.regular.DfaCompiledGrammar`).
"""

from __future__ import annotations

import re
from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from .. import disk_cache
from ..automata import DEFAULT_MAX_STATES, DFA, regex_to_dfa
from ..engine import compile_dfa
from ..errors import GrammarError
from ..grammar import CompiledGrammar, Grammar
from ..limits import active
from ..vocab import Vocabulary

__all__ = ["Regex"]

Words = npt.NDArray[np.uint32]
_FLAG_MASK = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE | re.ASCII | re.UNICODE


#: a pattern's DFA of at least this many states goes into the on-disk cache (a 6,000-state DFA of a
#: pattern with Unicode classes and counted repeats takes most of a second to build; small ones are
#: built faster than an entry is read)
DISK_STATES = 256


def _dfa(pattern: str, flags: int, max_states: int) -> DFA:
    """The pattern's minimal DFA: an earlier process's from the on-disk cache when it was large (errors
    are never stored: a bad pattern is refused the same way every time)."""
    key = (pattern, flags, max_states, active())
    hit = disk_cache.load("regex-dfa", key, packed=True)
    if isinstance(hit, DFA):
        return hit
    dfa = regex_to_dfa(pattern, flags, max_states=max_states)
    if dfa.n_states >= DISK_STATES:
        disk_cache.store_later("regex-dfa", key, dfa, packed=True)
    return dfa


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
        self._dfa = _dfa(pattern, self.flags, max_states)
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
        return compile_dfa(self._dfa, vocab)
