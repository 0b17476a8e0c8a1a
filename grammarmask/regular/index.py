"""The token index of a byte DFA: per DFA state, which tokens are legal and where they lead.

A token is legal in DFA state ``s`` iff reading its bytes from ``s`` never reaches the dead state 0
(DFAs are trimmed, so a live state always has a completion: DESIGN §1's exact mask).

Speed (DESIGN §5). Bytes with identical DFA columns are interchangeable, so every token is reduced
to its sequence of byte *classes*, and the vocabulary trie to a *class trie* whose nodes are the
distinct class-sequence prefixes (for a JSON-string-body DFA, 131k tekken tokens collapse to a few
thousand). Walking the class trie level by level with the reduced transition table is vectorised
over all live nodes, prunes dead branches, and can run for many DFA states at once. Results are
scattered back to tokens through a CSR map ``class node -> token ids``.

States that no token can tell apart share one mask. At construction every state is indexed in
batched walks when that fits the budgets (a pruned walk for states with few legal tokens, an
unpruned one for broad states, stored as the tokens they forbid); otherwise states are indexed on
first visit. Mask words are cached with an LRU bound.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..automata import DFA
from ..automata.dfa import row_ids
from ..cache import Lru, per_vocabulary
from ..limits import Limits, active
from ..vocab import Vocabulary

__all__ = ["ClassTrie", "DfaTokenIndex"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
Words = npt.NDArray[np.uint32]


@dataclass(frozen=True, eq=False)
class ClassTrie:
    """The vocabulary trie with bytes replaced by byte classes, duplicates merged.

    The fields that :class:`~grammarmask.vocab.TokenTrie` also has mean the same, with a class
    where it has a byte. Node 0 is the root. ``label[n]`` is the class on the edge into node ``n``;
    the children of ``n`` are ``child_lo[n]:child_hi[n]`` and its parent is ``parent[n]``; the nodes
    at depth ``d`` are ``level_lo[d]:level_lo[d+1]``; the tokens whose class sequence is node ``n``'s
    path are ``tokens[tok_lo[n]:tok_hi[n]]`` (``tok_count[n]`` of them) and ``sub_count[n]`` counts
    the tokens in its subtree;
    ``tok_node[t]`` is token ``t``'s node, or
    ``n_nodes`` (a sentinel that is never live) for special, empty and padding ids;
    ``of_trie[m]`` is the class node of vocabulary-trie node ``m``.
    """

    label: I64
    child_lo: I64
    child_hi: I64
    tok_lo: I64
    tok_hi: I64
    tokens: I64
    tok_count: I64
    tok_node: I64
    parent: I64
    level_lo: I64
    sub_count: I64
    of_trie: I64

    @property
    def n_nodes(self) -> int:
        return int(self.label.shape[0])

    @classmethod
    def build(cls, vocab: Vocabulary, classes: npt.NDArray[np.integer], k: int) -> ClassTrie:
        """Collapse ``vocab.trie`` under the byte-class map ``classes`` (``k`` classes)."""
        trie = vocab.trie
        n_trie = trie.n_nodes
        cn = np.zeros(n_trie, dtype=np.int64)
        byte_cls = np.asarray(classes, dtype=np.int64)[trie.byte.astype(np.intp)]
        cls_parts = [np.zeros(1, np.int64)]
        par_parts = [np.full(1, -1, np.int64)]
        next_id = 1
        levels = trie.level_lo
        for d in range(1, len(levels) - 1):
            lo, hi = int(levels[d]), int(levels[d + 1])
            if lo == hi:
                break
            prev_lo = next_id - int(par_parts[-1].size)
            key = (cn[trie.parent[lo:hi]] - prev_lo) * k + byte_cls[lo:hi]
            span = int(par_parts[-1].size) * k
            if span <= 16 * (hi - lo) + 4096:  # dense dedupe, no sort
                present = np.zeros(span, dtype=np.bool_)
                present[key] = True
                uniq = np.flatnonzero(present)
                rank = np.cumsum(present) - 1
                inverse = rank[key]
            else:
                small = key.astype(np.int32) if span < (1 << 31) else key
                uniq, inverse = np.unique(small, return_inverse=True)
                uniq = uniq.astype(np.int64)
                inverse = inverse.reshape(-1)
            cn[lo:hi] = next_id + inverse
            cls_parts.append(uniq % k)
            par_parts.append(uniq // k + prev_lo)
            next_id += uniq.size
        c_cls = np.concatenate(cls_parts)
        c_par = np.concatenate(par_parts)
        level_lo = np.cumsum([0] + [p.size for p in par_parts]).astype(np.int64)
        ids = np.arange(next_id)
        # parents are non-decreasing in id order (each level is sorted by (parent, class))
        n_kids = np.bincount(c_par[1:], minlength=next_id)
        ch_hi = np.cumsum(n_kids) + 1
        ch_lo = ch_hi - n_kids
        counts = (trie.tok_hi - trie.tok_lo).astype(np.int64)
        entry_cn = np.repeat(cn, counts)  # trie.tokens is grouped by node, in node order
        order = np.argsort(entry_cn, kind="stable")
        tok_ids = trie.tokens.astype(np.int64)[order]
        tok_count = np.bincount(entry_cn, minlength=next_id)
        tok_ptr = np.concatenate([[0], np.cumsum(tok_count)])
        tok_node = np.full(max(vocab.size, len(vocab.token_bytes)), next_id, dtype=np.int64)
        tok_node[tok_ids] = np.repeat(ids, tok_count)
        sub_count = tok_count.astype(np.int64).copy()  # tokens in each node's subtree
        for d in range(level_lo.size - 2, 1, -1):
            lo, hi = int(level_lo[d]), int(level_lo[d + 1])
            plo, phi = int(level_lo[d - 1]), int(level_lo[d])  # the parents' level
            sums = np.bincount(c_par[lo:hi] - plo, weights=sub_count[lo:hi], minlength=phi - plo)
            sub_count[plo:phi] += sums.astype(np.int64)
        return cls(
            c_cls,
            ch_lo,
            ch_hi,
            tok_ptr[:-1],
            tok_ptr[1:],
            tok_ids,
            tok_count,
            tok_node,
            c_par,
            level_lo,
            sub_count,
            cn,
        )


def class_trie(vocab: Vocabulary, classes: npt.NDArray[np.integer], k: int, keep: int = 8) -> ClassTrie:
    """The :class:`ClassTrie` for ``vocab`` under ``classes`` (cached per vocabulary, LRU; the first
    caller's ``keep``, ``Limits.class_tries_per_vocabulary``, bounds how many are kept)."""
    key = np.asarray(classes, dtype=np.int16).tobytes()
    tries: Lru[bytes, ClassTrie] = per_vocabulary(vocab, "index.class_tries", lambda: Lru(keep))
    return tries.get_or_make(key, lambda: ClassTrie.build(vocab, classes, k))


def _ranges(lo: I64, hi: I64) -> I64:
    lens = hi - lo
    total = int(lens.sum())
    starts = np.repeat(lo - (np.cumsum(lens) - lens), lens)
    return starts + np.arange(total)  # type: ignore[no-any-return]


class _BudgetExceeded(Exception):
    pass


def _popcount_rows(words: Words) -> I64:
    """Set bits per row of a 2-D array of uint32 words."""
    return np.unpackbits(words.view(np.uint8), axis=1).sum(axis=1, dtype=np.int64)  # type: ignore[no-any-return]


def _mask_classes(red: I64, depth: int) -> I64:
    """For each DFA state, the smallest state with the same legal tokens (0 if none are legal).

    Two states have the same mask when no byte string of at most ``depth`` bytes (the longest
    token) is live from one and dead from the other: Moore refinement of {dead, live} for at most
    ``depth`` rounds (stopping early at the fixed point).
    """
    n = red.shape[0]
    block = (np.arange(n) != 0).astype(np.int64)
    count = int(block.max()) + 1
    for _ in range(depth):
        block = row_ids(np.concatenate([block[:, None], block[red]], axis=1))
        new_count = int(block.max()) + 1
        if new_count == count:
            break
        count = new_count
    first = np.full(count, n, dtype=np.int64)
    np.minimum.at(first, block, np.arange(n))
    rep = first[block]
    rep[block == block[0]] = 0  # the dead state's class: nothing is legal
    return rep  # type: ignore[no-any-return]


class DfaTokenIndex:
    """Legal tokens and next states of a byte :class:`DFA` over a :class:`Vocabulary`.

    ``mask_words(state)`` gives packed uint32 words (bit ``t % 32`` of word ``t // 32``) of the
    normal tokens legal in ``state`` (never EOS, specials or padding); ``next_state(state, t)``
    the DFA state after token ``t`` (0 when illegal). Thread-safe; the returned arrays are shared
    and must not be mutated.
    """

    def __init__(self, vocab: Vocabulary, dfa: DFA, *, limits: Limits | None = None) -> None:
        self.vocab = vocab
        self.dfa = dfa
        self.limits = limits = limits or active()
        classes, k = dfa.byte_classes()
        reps = np.zeros(k, dtype=np.intp)
        reps[classes[::-1]] = np.arange(255, -1, -1)
        self._red = np.ascontiguousarray(dfa.transitions[:, reps]).astype(np.int64)
        self._trie = class_trie(vocab, classes, k, limits.class_tries_per_vocabulary)
        self._n_words = vocab.n_words
        self._size = vocab.size
        self._tb = vocab.token_bytes
        self._special = vocab.special_ids
        self._cache: Lru[int, Words] = Lru(limits.index_masks)
        self._sparse: dict[int, tuple[I64, Words]] = {}
        self._zeros = np.zeros(self._n_words, dtype=np.uint32)
        self._zeros.setflags(write=False)
        depth = max(len(vocab.trie.level_lo) - 2, 0)
        rep = _mask_classes(self._red, depth)
        self._rep: list[int] = rep.tolist()
        reps = np.unique(rep[rep != 0])
        self._base: Words | None = None  # words of every normal token (for complement storage)
        self._base_count = int(np.count_nonzero(self._trie.tok_node < self._trie.n_nodes))
        self._negative: dict[int, tuple[I64, Words]] = {}
        if 0 < reps.size <= limits.index_eager_states:
            # an upper bound on each state's legal tokens: those whose first class is live
            tr = self._trie
            kids = np.arange(int(tr.child_lo[0]), int(tr.child_hi[0]))
            bound = (self._red[reps][:, tr.label[kids]] != 0).astype(np.int64) @ tr.sub_count[kids]
            broad = bound > len(self._tb) // limits.index_narrow_fraction
            pruned = reps
            if broad.any() and int(broad.sum()) * tr.n_nodes <= limits.index_dense_budget:
                self._eager_dense(reps[broad])  # unpruned walk; broad states stored by complement
                pruned = reps[~broad]
            with contextlib.suppress(_BudgetExceeded):
                self._eager(pruned)  # pruned walk: cheap for narrow states

    # -- public -------------------------------------------------------------------------------

    def mask_words(self, state: int) -> Words:
        """Packed words of the tokens legal in ``state`` (shared array: do not mutate)."""
        state = self._rep[state]  # states with the same legal tokens share one mask
        hit = self._cache.get(state)
        if hit is not None:
            return hit
        if state == 0:
            return self._zeros
        sp = self._sparse.get(state)
        if sp is not None:
            words = np.zeros(self._n_words, dtype=np.uint32)
            words[sp[0]] = sp[1]
        elif (neg := self._negative.get(state)) is not None and self._base is not None:
            words = self._base.copy()
            words[neg[0]] &= ~neg[1]
        else:
            words = self._compute(state)
        words.setflags(write=False)
        self._cache.put(state, words)
        return words

    def next_state(self, state: int, token_id: int) -> int:
        """The DFA state after ``token_id`` from ``state``; 0 if the token is illegal there."""
        if not 0 <= token_id < len(self._tb) or token_id in self._special:
            return 0
        data = self._tb[token_id]
        if not data:
            return 0
        return self.dfa.run(state, data)

    # -- walks --------------------------------------------------------------------------------

    def _walk(self, states: I64) -> tuple[I64, I64]:
        """Live ``(state index, class node)`` pairs whose node has tokens, for all ``states``."""
        tr, red = self._trie, self._red
        root_kids = np.arange(int(tr.child_lo[0]), int(tr.child_hi[0]), dtype=np.int64)
        m = states.size
        p_s = np.repeat(np.arange(m, dtype=np.int64), root_kids.size)
        p_c = np.tile(root_kids, m)
        p_st = red[states[p_s], tr.label[p_c]]
        out_s: list[I64] = []
        out_c: list[I64] = []
        total = 0
        while p_s.size:
            live = p_st != 0
            p_s, p_c, p_st = p_s[live], p_c[live], p_st[live]
            has_tok = tr.tok_count[p_c] > 0
            out_s.append(p_s[has_tok])
            out_c.append(p_c[has_tok])
            total += p_s.size
            if total > self.limits.index_pair_budget:
                raise _BudgetExceeded
            lo, hi = tr.child_lo[p_c], tr.child_hi[p_c]
            nkids = hi - lo
            kids = _ranges(lo, hi)
            rep = np.repeat(np.arange(p_s.size), nkids)
            p_s, p_c = p_s[rep], kids
            p_st = red[p_st[rep], tr.label[kids]]
        if not out_s:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(out_s), np.concatenate(out_c)

    def _eager(self, states: I64) -> None:
        """Index ``states`` with one pruned walk, storing their legal tokens sparsely (all or none,
        raising ``_BudgetExceeded`` when the walk or the storage would be too large)."""
        if states.size == 0:
            return
        ps, pc = self._walk(states)
        if int(self._trie.tok_count[pc].sum()) > 8 * self.limits.index_sparse_budget:
            raise _BudgetExceeded
        self._sparse_words(states, ps, pc, np.ones(states.size, dtype=np.bool_), self._sparse)

    def _eager_dense(self, states: I64) -> None:
        """Index ``states`` by an unpruned walk over every class node, in chunks of states.

        Per state, the smaller of its legal and its illegal token sets is stored as sparse words
        (illegal ones relative to the words of all normal tokens), so every first visit is a
        copy plus a scatter.
        """
        tr, red = self._trie, self._red
        per_chunk = self.limits.index_dense_budget // 8 // max(tr.n_nodes, 1)
        chunk = max(1, min(per_chunk, (1 << 23) // max(self._n_words * 32, 1)))
        lv = tr.level_lo
        term = np.flatnonzero(tr.tok_count > 0)
        weights = tr.tok_count[term]
        total = int(weights.sum())
        kept = 0
        for a in range(0, states.size, chunk):
            if kept > self.limits.index_sparse_budget:
                return  # the remaining states stay lazy
            sts = states[a : a + chunk]
            st = np.zeros((sts.size, tr.n_nodes + 1), dtype=np.int64)  # last column: the sentinel
            st[:, 0] = sts
            for d in range(1, lv.size - 1):
                lo, hi = int(lv[d]), int(lv[d + 1])
                st[:, lo:hi] = red[st[:, tr.parent[lo:hi]], tr.label[lo:hi]]
            alive = st[:, term] != 0
            n_legal = alive.astype(np.int64) @ weights
            negative = n_legal * 2 > total
            expand = int(np.where(negative, total - n_legal, n_legal).sum())
            if expand * 16 < sts.size * self._n_words * 32:  # few tokens to list: scatter them
                if self._base is None:
                    self._base = self._pack(np.arange(tr.n_nodes, dtype=np.int64))
                pos_s, pos_c = np.nonzero(alive & ~negative[:, None])
                kept += self._sparse_words(sts, pos_s, term[pos_c], ~negative, self._sparse)
                neg_s, neg_c = np.nonzero(~alive & negative[:, None])
                kept += self._sparse_words(sts, neg_s, term[neg_c], negative, self._negative)
            else:  # many tokens per state: pack whole rows
                legal = np.zeros((sts.size, self._n_words * 32), dtype=np.bool_)
                legal[:, : tr.tok_node.size] = st[:, tr.tok_node] != 0
                words = np.packbits(legal, axis=1, bitorder="little").view("<u4").astype(np.uint32)
                kept += self._store_rows(sts, words)

    def _store_rows(self, states: I64, words: Words) -> int:
        """Keep each row of mask words sparsely: its nonzero words, or (when the state allows
        more than half of all tokens) the nonzero words of its complement within the base."""
        if self._base is None:
            all_nodes = np.arange(self._trie.n_nodes, dtype=np.int64)
            self._base = self._pack(all_nodes)
        base = self._base
        kept = 0
        half = self._base_count // 2
        counts = _popcount_rows(words)
        for i, s in enumerate(states.tolist()):
            row = words[i]
            if counts[i] > half:
                neg = base & ~row
                nz = np.flatnonzero(neg)
                self._negative[s] = (nz, neg[nz])
            else:
                nz = np.flatnonzero(row)
                self._sparse[s] = (nz, row[nz])
            kept += nz.size
        return kept

    def _sparse_words(
        self,
        states: I64,
        ps: I64,
        pc: I64,
        narrow: npt.NDArray[np.bool_],
        store: dict[int, tuple[I64, Words]] | None = None,
    ) -> int:
        """Store (word index, word) pairs per state for the ``narrow`` states, all at once.

        ``ps`` indexes ``states``, ``pc`` are class nodes whose tokens to set; returns the number
        of entries stored.
        """
        if store is None:
            store = self._sparse
        tr = self._trie
        lens = tr.tok_count[pc]
        ids = tr.tokens[_ranges(tr.tok_lo[pc], tr.tok_lo[pc] + lens)]
        st = np.repeat(ps, lens)
        key = st * (self._n_words + 1) + (ids >> 5)
        order = np.argsort(key, kind="stable")
        key, ids = key[order], ids[order]
        bits = (np.uint32(1) << (ids & 31).astype(np.uint32)).astype(np.uint32)
        if key.size:
            starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
            vals = np.bitwise_or.reduceat(bits, starts)
            gkey = key[starts]
        else:
            vals = np.zeros(0, np.uint32)
            gkey = np.zeros(0, np.int64)
        gstate = gkey // (self._n_words + 1)
        gword = gkey % (self._n_words + 1)
        bounds = np.searchsorted(gstate, np.arange(states.size + 1))
        for i in np.flatnonzero(narrow).tolist():
            a, b = int(bounds[i]), int(bounds[i + 1])
            store[int(states[i])] = (gword[a:b], vals[a:b])
        return int(gkey.size)

    def _pack(self, live_nodes: I64) -> Words:
        tr = self._trie
        alive = np.zeros(tr.n_nodes + 1, dtype=np.bool_)
        alive[live_nodes] = True
        legal = np.zeros(self._n_words * 32, dtype=np.bool_)
        legal[: tr.tok_node.size] = alive[tr.tok_node]
        return np.packbits(legal, bitorder="little").view("<u4").astype(np.uint32)

    def _compute(self, state: int) -> Words:
        """Mask words of one state not indexed at construction (a pruned walk of its own)."""
        tr = self._trie
        _, pc = self._walk(np.array([state], dtype=np.int64))
        n_legal = int(tr.tok_count[pc].sum())
        if n_legal > len(self._tb) // self.limits.index_narrow_fraction:
            return self._pack(pc)
        lens = tr.tok_count[pc]
        ids = tr.tokens[_ranges(tr.tok_lo[pc], tr.tok_lo[pc] + lens)]
        words = np.zeros(self._n_words, dtype=np.uint32)
        np.bitwise_or.at(words, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)).astype(np.uint32))
        return words
