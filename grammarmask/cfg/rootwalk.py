"""Broad lexemes started at a token boundary: one dense pass down the trie (DESIGN §5).

A lexeme that starts at the trie root with no shadows (a JSON string body, a NAME, whitespace) is
alive in most of the vocabulary, so pruning the walk saves little and costs an index expansion per
level. Here the state of every trie node is computed level by level instead, straight from its
parent's (``S[m] = delta[C[parent[m]], label[m]]``, where ``C`` is the state a walk continues from),
and the tokens are read off per token id. When the terminal's DFA has few byte classes the pass runs
on its :class:`~grammarmask.index.ClassTrie` (266k tekken nodes become a few thousand); the closes
found there are expanded back to vocabulary-trie nodes one byte below the close, where the greedy
lexeme's shadow has already pruned most of them and the next lexeme starts.

Everything here is in the terminal's local DFA states, so one :class:`RootWalk` serves every grammar
with an equal terminal.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..automata import DFA
from ..index import _ranges, class_trie
from ..vocab import Vocabulary
from .walk import trie_arrays

__all__ = ["RootWalk", "broad_states"]

I64 = npt.NDArray[np.int64]
Words = npt.NDArray[np.uint32]

_BROAD_TOKENS = 8192  # a lexeme state whose first bytes start more tokens than this walks densely
_MAX_CLASSES = 12  # more classes compress the trie too little to pay for building a class trie


#: a close: (closing state, mask words of the tokens ending exactly there, the frontier's
#: vocabulary-trie nodes, their bytes, the shadow state after each (None when no shadow lives on))
Close = tuple[int, Words, I64, I64, I64 | None]


def _by_state(states: npt.NDArray[np.int32]) -> dict[int, I64]:
    """The positions of ``states``, grouped by value."""
    if not states.size:
        return {}
    small = states.astype(np.int16) if int(states.max()) < (1 << 15) else states
    order = np.argsort(small, kind="stable")  # a radix sort for 16-bit keys
    ordered = states[order]
    cuts = (np.flatnonzero(np.diff(ordered)) + 1).tolist()
    return {int(ordered[a]): order[a:b] for a, b in zip([0, *cuts], [*cuts, states.size])}


def broad_states(vocab: Vocabulary, dfa: DFA) -> npt.NDArray[np.bool_]:
    """Per DFA state: whether the tokens that can start a lexeme there are many enough for the dense
    pass to beat a pruned walk."""
    trie = vocab.trie
    kids = np.arange(int(trie.child_lo[0]), int(trie.child_hi[0]))
    under = (trie.sub_hi[kids] - trie.sub_lo[kids]).astype(np.int64)
    counts = (dfa.transitions[:, trie.byte[kids].astype(np.intp)] != 0) @ under
    broad: npt.NDArray[np.bool_] = counts > _BROAD_TOKENS
    return broad


class RootWalk:
    """Dense walks from the root for one terminal DFA (local states; see the module docstring)."""

    def __init__(self, vocab: Vocabulary, dfa: DFA, reaccept: npt.NDArray[np.bool_],
                 broad: npt.NDArray[np.bool_]) -> None:
        #: broad[s]: lexemes in local state s are walked here (else by the pruned walker)
        self.broad = broad
        self.acc = np.asarray(dfa.accepting, dtype=bool)
        #: reaccept[s]: some non-empty path from local state s reaches acceptance
        self.reaccept = np.asarray(reaccept, dtype=bool)
        self.n_bits = vocab.n_words * 32
        tr = np.asarray(dfa.transitions, dtype=np.int32)
        cols, inv = np.unique(tr.T, axis=0, return_inverse=True)
        self.by_class = cols.shape[0] <= _MAX_CLASSES
        if self.by_class:
            self.ct = class_trie(vocab, inv.reshape(-1), int(cols.shape[0]))
            self.table = np.ascontiguousarray(cols.T)  # table[s, c]: the state after a byte of class c
            self.parent = self.ct.parent
            self.level_lo = self.ct.level_lo
            self.label = self.ct.cls.astype(np.int64)
            tok_node = np.full(self.n_bits, self.ct.n_nodes, dtype=np.int64)
            n = min(self.n_bits, self.ct.tok_node.shape[0])
            tok_node[:n] = self.ct.tok_node[:n]
            self.tok_node = tok_node
            self.trie_byte = trie_arrays(vocab).byte
        else:
            self.table = tr
            ta = trie_arrays(vocab)
            self.parent, self.level_lo, self.label = ta.parent, ta.level_lo, ta.byte
            self.tok_node = ta.tok_node
        self.n_nodes = int(self.parent.shape[0])
        self._real: tuple[I64, I64] | None = None

    def _states(self, q: int) -> npt.NDArray[np.int32]:
        """The lexeme's state at every node (0 where it died, or below a node it could not continue)."""
        table, parent, label, re_ = self.table, self.parent, self.label, self.reaccept
        s_all = np.zeros(self.n_nodes + 1, dtype=np.int32)  # + the sentinel node, state 0
        cont = np.zeros(self.n_nodes, dtype=np.int32)  # the state a walk continues from
        s_all[0] = cont[0] = q
        lv = self.level_lo
        for d in range(1, lv.shape[0] - 1):
            lo, hi = int(lv[d]), int(lv[d + 1])
            if lo == hi:
                break
            s = table[cont[parent[lo:hi]], label[lo:hi]]
            s_all[lo:hi] = s
            cont[lo:hi] = np.where(re_[s], s, 0)
        s_all[0] = 0  # the root is not a token
        return s_all

    def walk(self, q: int, greedy: bool) -> tuple[Words, list[Close]]:
        """From local state ``q`` at the root: the mask words of the tokens that stay inside the
        lexeme (and can still finish it), and one :data:`Close` per state the lexeme may close in.

        A greedy lexeme closed in a state that can accept again leaves itself as a shadow: the
        frontier keeps only the children where that shadow does not accept (lark's longest match
        would have read on), with the shadow's state after that byte.
        """
        s_all = self._states(q)
        n = self.n_nodes
        at_tok = s_all[self.tok_node]
        inside = self._pack(self.reaccept[at_tok])
        acc, re_ = self.acc, self.reaccept
        # Frontier rows: the children of the nodes where the lexeme may close (never the root).
        par_state = s_all[self.parent[1:n]]
        rows = np.flatnonzero(acc[par_state])
        par_state = par_state[rows]
        rows += 1
        after = np.zeros(rows.size, dtype=np.int32)
        if greedy:
            shadowed = np.flatnonzero(re_[par_state])
            a = self.table[par_state[shadowed], self.label[rows[shadowed]]]
            after[shadowed] = np.where(re_[a], a, 0)
            keep = np.ones(rows.size, dtype=bool)
            keep[shadowed[acc[a]]] = False
            rows, par_state, after = rows[keep], par_state[keep], after[keep]
        by_row = _by_state(par_state)
        tids = np.flatnonzero(acc[at_tok])
        by_tok = _by_state(at_tok[tids])
        closes: list[Close] = []
        for st in np.unique(s_all[:n][acc[s_all[:n]]]).tolist():
            bits = np.zeros(self.n_bits, dtype=bool)
            pos = by_tok.get(st)
            if pos is not None:
                bits[tids[pos]] = True
            pos = by_row.get(st, np.zeros(0, np.int64))
            nodes, byte, aft = self._real_rows(rows[pos], after[pos])
            closes.append((st, self._pack(bits), nodes, byte, aft if greedy and re_[st] else None))
        return inside, closes

    def _real_rows(self, rows: I64, after: npt.NDArray[np.int32]) -> tuple[I64, I64, I64]:
        """Vocabulary-trie nodes, their bytes and shadow states for frontier ``rows`` of this trie."""
        if not self.by_class:
            return rows, self.label[rows], after.astype(np.int64)
        ct = self.ct
        if self._real is None:  # CSR: class node -> vocabulary-trie nodes (made on first use)
            counts = np.bincount(ct.of_trie, minlength=ct.n_nodes)
            ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._real = (ptr, np.argsort(ct.of_trie, kind="stable").astype(np.int64))
        ptr, real = self._real
        lo, hi = ptr[rows], ptr[rows + 1]
        nodes = real[_ranges(lo, hi)]
        return nodes, self.trie_byte[nodes], np.repeat(after.astype(np.int64), hi - lo)

    def _pack(self, bits: npt.NDArray[np.bool_]) -> Words:
        words: Words = np.packbits(bits, bitorder="little").view(np.uint32)
        words.setflags(write=False)
        return words
