"""The regular engine's compiled grammar: any trimmed byte DFA bound to a vocabulary through its
token index (:mod:`.index`). Regexes, label sets and products of regular grammars compile to it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..automata import DFA
from ..grammar import CompiledGrammar
from ..vocab import Vocabulary
from .index import DfaTokenIndex

__all__ = ["DfaCompiledGrammar"]

Words = npt.NDArray[np.uint32]


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
