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
from ..index import class_trie
from ..vocab import Vocabulary

__all__ = ["RootWalk", "broad_states"]

I64 = npt.NDArray[np.int64]
Words = npt.NDArray[np.uint32]

_BROAD_TOKENS = 8192  # a lexeme state whose first bytes start more tokens than this walks densely
_MAX_CLASSES = 12  # more classes compress the trie too little to pay for building a class trie


def _ranges(lo: I64, hi: I64) -> I64:
    lens = hi - lo
    starts = np.repeat(lo - (np.cumsum(lens) - lens), lens)
    return starts + np.arange(int(lens.sum()))  # type: ignore[no-any-return]


def _by_state(items: npt.NDArray[np.int64], states: npt.NDArray[np.int32]) -> list[tuple[int, I64]]:
    """``items`` grouped by their state, as (state, items) pairs."""
    order = np.argsort(states, kind="stable")
    items, states = items[order], states[order]
    cuts = np.flatnonzero(np.diff(states)) + 1
    return [(int(states[p[0]]), items[p].astype(np.int64)) for p in np.split(np.arange(items.size), cuts)]


def broad_states(vocab: Vocabulary, dfa: DFA) -> npt.NDArray[np.bool_]:
    """Per DFA state: whether the tokens that can start a lexeme there are many enough for the dense
    pass to beat a pruned walk."""
    trie = vocab.trie
    kids = np.arange(int(trie.child_lo[0]), int(trie.child_hi[0]))
    under = (trie.sub_hi[kids] - trie.sub_lo[kids]).astype(np.int64)
    counts = (dfa.transitions[:, trie.byte[kids].astype(np.intp)] != 0) @ under
    broad: npt.NDArray[np.bool_] = counts > _BROAD_TOKENS
    return broad


def _token_nodes(vocab: Vocabulary) -> I64:
    """``out[t]``: the vocabulary-trie node of token ``t`` (the sentinel ``n_nodes`` for ids with no
    node: special, empty and padding), cached on the vocabulary."""
    got: I64 | None = vocab.__dict__.get("_cfg_token_nodes")
    if got is None:
        trie = vocab.trie
        n = int(trie.byte.shape[0])
        got = np.full(vocab.n_words * 32, n, dtype=np.int64)
        counts = (trie.tok_hi - trie.tok_lo).astype(np.int64)
        got[trie.tokens.astype(np.int64)] = np.repeat(np.arange(n), counts)
        vocab.__dict__["_cfg_token_nodes"] = got
    return got


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
        trie = vocab.trie
        self.by_class = cols.shape[0] <= _MAX_CLASSES
        if self.by_class:
            self.ct = class_trie(vocab, inv.reshape(-1), int(cols.shape[0]))
            self.table = np.ascontiguousarray(cols.T)  # table[s, c]: the state after a byte of class c
            self.parent = self.ct.parent
            self.level_lo = self.ct.level_lo
            self.label = self.ct.cls.astype(np.intp)
            tok_node = np.full(self.n_bits, self.ct.n_nodes, dtype=np.int64)
            n = min(self.n_bits, self.ct.tok_node.shape[0])
            tok_node[:n] = self.ct.tok_node[:n]
            self.tok_node = tok_node
            self.trie_byte = trie.byte.astype(np.int64)
        else:
            self.table = tr
            self.parent = trie.parent.astype(np.int64)
            self.level_lo = trie.level_lo.astype(np.int64)
            self.label = trie.byte.astype(np.intp)
            self.tok_node = _token_nodes(vocab)
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

    def walk(self, q: int) -> tuple[Words, list[tuple[int, I64, Words]]]:
        """From local state ``q`` at the root: the mask words of the tokens that stay inside the
        lexeme (and can still finish it), and the closes as (closing state, trie or class nodes,
        mask words of the tokens that end exactly there)."""
        s_all = self._states(q)
        at_tok = s_all[self.tok_node]
        inside = self._pack(self.reaccept[at_tok])
        closes = []
        nodes = np.flatnonzero(self.acc[s_all[: self.n_nodes]])
        if nodes.size:
            node_groups = _by_state(nodes, s_all[nodes])
            tids = np.flatnonzero(self.acc[at_tok])
            tok_groups = dict(_by_state(tids, at_tok[tids]))
            for s, group in node_groups:
                bits = np.zeros(self.n_bits, dtype=bool)
                ids = tok_groups.get(s)
                if ids is not None:
                    bits[ids] = True
                closes.append((s, group, self._pack(bits)))
        return inside, closes

    def _pack(self, bits: npt.NDArray[np.bool_]) -> Words:
        words: Words = np.packbits(bits, bitorder="little").view(np.uint32)
        words.setflags(write=False)
        return words

    def frontier(self, cnodes: I64, shadow: int) -> tuple[I64, I64, I64]:
        """For class-trie closes: the vocabulary-trie nodes one byte below the class nodes ``cnodes``
        that a greedy lexeme closed in local state ``shadow`` (0: none) lets through, their bytes,
        and the shadow after that byte (local, 0 = gone)."""
        ct = self.ct
        kids = _ranges(ct.ch_lo[cnodes], ct.ch_hi[cnodes])
        if shadow:
            after = self.table[shadow, ct.cls[kids]].astype(np.int64)
            ok = ~self.acc[after]
            kids, after = kids[ok], after[ok]
            after = np.where(self.reaccept[after], after, 0)
        else:
            after = np.zeros(kids.size, dtype=np.int64)
        if self._real is None:  # CSR: class node -> vocabulary-trie nodes (made on first use)
            counts = np.bincount(ct.of_trie, minlength=ct.n_nodes)
            ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._real = (ptr, np.argsort(ct.of_trie, kind="stable").astype(np.int64))
        ptr, real = self._real
        lo, hi = ptr[kids], ptr[kids + 1]
        nodes = real[_ranges(lo, hi)]
        return nodes, self.trie_byte[nodes], np.repeat(after, hi - lo)
