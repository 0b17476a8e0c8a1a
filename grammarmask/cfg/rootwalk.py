"""Broad lexemes started at a token boundary: one dense pass down the trie (DESIGN §5).

A lexeme that starts at the trie root with no shadows (a JSON string body, a NAME, whitespace) is
alive in most of the vocabulary, so pruning the walk saves little and costs an index expansion per
level. Here the state of every trie node is computed level by level instead, straight from its
parent's (``S[m] = delta[C[parent[m]], label[m]]``, where ``C`` is the state a walk continues from),
and the tokens are read off per token id. When the terminal's DFA has few byte classes the pass runs
on its :class:`~grammarmask.regular.index.ClassTrie` (266k tekken nodes become a few thousand); the closes
found there are expanded back to vocabulary-trie nodes one byte below the close, where the greedy
lexeme's shadow has already pruned most of them and the next lexeme starts.

A state whose walk differs from a kept full walk on few nodes (a key that must not spell a few
declared names, one character further on) is walked as an edit of that walk: only the nodes where
the two part are visited, about 0.3 ms instead of 3-5 ms on tekken.

Everything here is in the terminal's local DFA states, so one :class:`RootWalk` serves every grammar
with an equal terminal.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ..automata import DFA
from ..automata.dfa import class_reps, row_ids
from ..limits import Limits
from ..regular.index import _ranges, class_trie
from ..vocab import Vocabulary
from .lexer import reaccepting

__all__ = ["RootWalk", "broad_states"]

I64 = npt.NDArray[np.int64]
Words = npt.NDArray[np.uint32]



class Close(NamedTuple):
    """Where a lexeme walked from the root may close, and what follows."""

    state: int  #: the accepting DFA state the lexeme closes in
    words: Words  #: mask words of the tokens that end exactly there
    nodes: I64  #: the frontier: vocabulary-trie nodes where the next lexeme starts
    byte: I64  #: the byte into each frontier node
    after: I64 | None  #: the shadow state after each (None when no shadow lives on)


class _Walked(NamedTuple):
    """A walk before grouping by closing state."""

    inside: npt.NDArray[np.bool_]  #: per token id: the token stays inside the lexeme
    rows: I64  #: frontier rows (nodes of the walker's trie)
    par_state: npt.NDArray[np.int32]  #: the closing state at each row's parent
    after: npt.NDArray[np.int32]  #: the shadow state after each row
    tids: I64  #: token ids that end in an accepting state
    tid_state: npt.NDArray[np.int32]  #: ... and that state


class _Base(NamedTuple):
    """A full walk kept to be edited (see :meth:`RootWalk._diff_walk`)."""

    q: int
    greedy: bool
    s_all: npt.NDArray[np.int32]
    walked: _Walked


def _by_state(states: npt.NDArray[np.int32]) -> dict[int, I64]:
    """The positions of ``states``, grouped by value."""
    if not states.size:
        return {}
    small = states.astype(np.int16) if int(states.max()) < (1 << 15) else states
    order = np.argsort(small, kind="stable")  # a radix sort for 16-bit keys
    ordered = states[order]
    cuts = (np.flatnonzero(np.diff(ordered)) + 1).tolist()
    return {int(ordered[a]): order[a:b] for a, b in zip([0, *cuts], [*cuts, states.size])}


def broad_states(vocab: Vocabulary, dfa: DFA, above: int) -> npt.NDArray[np.bool_]:
    """Per DFA state: whether the tokens that can start a lexeme there are more than ``above``
    (``Limits.walk_broad_tokens``), enough for the dense pass to beat a pruned walk."""
    ta = vocab.trie
    kids = np.arange(int(ta.child_lo[0]), int(ta.child_hi[0]))
    # by byte class and a block of states at a time: not a (states x 256) matrix made 64-bit by the
    # product (400 MB for a 200,000-state enum)
    classes, k = dfa.byte_classes()
    weight = np.bincount(classes[ta.byte[kids]], weights=ta.sub_count[kids], minlength=k).astype(np.int64)
    live = dfa.transitions[:, class_reps(classes, k)] != 0
    blocks = [live[i : i + 65536].astype(np.int64) @ weight for i in range(0, len(live), 65536)]
    counts = np.concatenate([np.zeros(0, np.int64), *blocks])
    broad: npt.NDArray[np.bool_] = counts > above
    return broad


def walk_classes(table: npt.NDArray[np.int32], acc: npt.NDArray[np.bool_], reaccept: npt.NDArray[np.bool_],
                 depth: int, max_cells: int = 1 << 22) -> I64:
    """Per DFA state, an id equal for two states whose walks give the same tokens and closes: every
    path of at most ``depth`` bytes (no token is longer) leads both to the same accepting state, or
    both to states that can or both to states that cannot still reach one. A string of at most 1,000
    characters counts in its states, but all those more than ``depth`` characters from the limit
    walk alike. A class is named by its smallest state.

    Bounded Moore refinement, ``depth`` rounds, each splitting classes by their members' successor
    classes. Only the predecessors of states relabelled in the last round are looked at again: a
    class keeps its label for its largest part, or for the members none of whose successors was
    relabelled (their keys are unchanged), so a counter costs a few states per round, not all.
    Tables of more than ``max_cells`` cells (``Limits.walk_refine_cells``) get one class per state."""
    n, k = int(table.shape[0]), int(table.shape[1])
    if n * k > max_cells:
        return np.arange(n, dtype=np.int64)
    # round 0: an accepting state is itself; the others are told apart by whether they can go on
    labels = np.where(acc, np.arange(n) + 2, reaccept.astype(np.int64))
    labels[0] = 0
    live = np.where(reaccept[:, None], table, 0).astype(np.int64)  # a walk does not read on from the rest
    # predecessors (CSR by target) along live edges
    pairs = np.unique(live.ravel() * n + np.repeat(np.arange(n, dtype=np.int64), k))
    pred = pairs % n
    ptr = np.searchsorted(pairs // n, np.arange(n + 1))
    fresh = int(labels.max()) + 1
    cand = np.arange(n, dtype=np.int64)
    for _ in range(depth):
        if not cand.size:
            break
        old = labels[cand]
        gid = row_ids(np.concatenate([old[:, None], labels[live[cand]]], axis=1))
        g_old = np.zeros(int(gid.max()) + 1, dtype=np.int64)
        g_old[gid] = old
        g_size = np.bincount(gid)
        others = np.bincount(labels, minlength=fresh) - np.bincount(old, minlength=fresh)
        # the group that keeps its class's label: the largest, if every member was a candidate
        order = np.lexsort((-g_size, g_old))
        first = order[np.r_[True, g_old[order][1:] != g_old[order][:-1]]]
        keep = np.zeros(g_size.size, dtype=bool)
        keep[first[others[g_old[first]] == 0]] = True
        g_new = np.where(keep, g_old, 0)
        g_new[~keep] = fresh + np.arange(int((~keep).sum()))
        fresh += int((~keep).sum())
        new = g_new[gid]
        moved = cand[new != old]
        labels[cand] = new
        lo, hi = ptr[moved], ptr[moved + 1]
        cand = np.unique(pred[_ranges(lo, hi)])
    # name each class by its smallest state (a key into the shared walks must not depend on the
    # order labels were handed out in)
    first_state = np.full(fresh, n, dtype=np.int64)
    np.minimum.at(first_state, labels, np.arange(n, dtype=np.int64))
    named: I64 = first_state[labels]
    return named


@functools.lru_cache(maxsize=64)
def _walk_classes_of(dfa: DFA, depth: int, max_cells: int) -> I64:
    """:func:`walk_classes` of ``dfa`` (kept: walkers are made again after eviction, and equal
    terminals of different grammars share one DFA object)."""
    tr = np.asarray(dfa.transitions, dtype=np.int32)
    classes, k = dfa.byte_classes()
    acc = np.asarray(dfa.accepting, dtype=bool)
    reaccept = reaccepting(tr, acc)
    return walk_classes(np.ascontiguousarray(tr[:, class_reps(classes, k)]), acc, reaccept, depth, max_cells)


def _padded_tok_node(tok_node: I64, n_bits: int, sentinel: int) -> I64:
    """``tok_node`` over every bit of a mask row (``n_bits`` ids): ids past the tokenizer's, padding
    of the model's vocabulary, get the ``sentinel`` node."""
    if tok_node.shape[0] == n_bits:
        return tok_node
    out = np.full(n_bits, sentinel, dtype=np.int64)
    n = min(n_bits, tok_node.shape[0])
    out[:n] = tok_node[:n]
    return out


class RootWalk:
    """Dense walks from the root for one terminal DFA (local states; see the module docstring)."""

    def __init__(self, vocab: Vocabulary, dfa: DFA, reaccept: npt.NDArray[np.bool_],
                 broad: npt.NDArray[np.bool_], limits: Limits) -> None:
        self.bases_kept, self.diff_share = limits.walk_bases, limits.walk_diff_share
        #: broad[s]: lexemes in local state s are walked here (else by the pruned walker)
        self.broad = broad
        self.acc = np.asarray(dfa.accepting, dtype=bool)
        #: reaccept[s]: some non-empty path from local state s reaches acceptance
        self.reaccept = np.asarray(reaccept, dtype=bool)
        self.n_bits = vocab.n_words * 32
        tr = np.asarray(dfa.transitions, dtype=np.int32)
        self._tr = tr  # the byte-level table, for walks below a node (always on the byte trie)
        self._ta = ta = vocab.trie
        classes, k = dfa.byte_classes()
        #: walk_class[s]: equal for two states whose walks are equal (see :func:`walk_classes`)
        self.walk_class = _walk_classes_of(dfa, int(ta.level_lo.shape[0]), limits.walk_refine_cells)
        self.by_class = k <= limits.walk_max_classes
        if self.by_class:
            self.ct = class_trie(vocab, classes, k, limits.class_tries_per_vocabulary)
            # table[s, c]: the state after a byte of class c
            self.table = np.ascontiguousarray(tr[:, class_reps(classes, k)])
            self.parent = self.ct.parent
            self.level_lo = self.ct.level_lo
            self.label = self.ct.label
            self.tok_node = _padded_tok_node(self.ct.tok_node, self.n_bits, self.ct.n_nodes)
            self.trie_byte = ta.byte
            self.child_lo, self.child_hi = self.ct.child_lo, self.ct.child_hi
            self.tok_lo, self.tok_hi, self.tokens = self.ct.tok_lo, self.ct.tok_hi, self.ct.tokens
            under = self.ct.sub_count
        else:
            self.table = tr
            self.parent, self.level_lo, self.label = ta.parent, ta.level_lo, ta.label
            self.tok_node = _padded_tok_node(ta.tok_node, self.n_bits, ta.n_nodes)
            self.child_lo, self.child_hi = ta.child_lo, ta.child_hi
            self.tok_lo, self.tok_hi, self.tokens = ta.tok_lo, ta.tok_hi, ta.tokens
            under = ta.sub_count
        self.n_nodes = int(self.parent.shape[0])
        self._real: tuple[I64, I64] | None = None
        self._kids = np.arange(int(self.level_lo[1]), int(self.level_lo[2]))  # the root's children
        self._kid_weight = under[self._kids]
        self._bases: tuple[_Base, ...] = ()  # the last full walks, newest first

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
        base = self._nearest_base(q, greedy)
        got = None if base is None else self._diff_walk(base, q)
        if got is None:
            got = self._full_walk(q, greedy)
        inside, rows, par_state, after, tids, tid_state = got
        return self._pack(inside), self._closes(rows, par_state, after, tids, tid_state, greedy)

    def _full_walk(self, q: int, greedy: bool) -> _Walked:
        s_all = self._states(q)
        n = self.n_nodes
        at_tok = s_all[self.tok_node]
        # Frontier rows: the children of the nodes where the lexeme may close (never the root).
        par_state = s_all[self.parent[1:n]]
        rows = np.flatnonzero(self.acc[par_state]) + 1
        rows, par_state, after = self._shadowed(rows, par_state[rows - 1], s_all[rows], greedy)
        tids = np.flatnonzero(self.acc[at_tok])
        got = _Walked(self.reaccept[at_tok], rows, par_state, after, tids, at_tok[tids])
        if rows.size + tids.size <= n // self.diff_share:  # else too big to keep (and to edit cheaply)
            self._bases = (_Base(q, greedy, s_all, got), *self._bases)[: self.bases_kept]
        return got

    def _nearest_base(self, q: int, greedy: bool) -> _Base | None:
        """The kept full walk whose first-level states differ from ``q``'s over the fewest tokens, if
        that is under a quarter of the vocabulary (a counted string parts at every first byte)."""
        best, cost = None, self.n_bits // 4
        kids, weight = self._kids, self._kid_weight
        sq = self.table[q, self.label[kids]]
        for b in self._bases:
            if b.greedy == greedy:
                c = int(weight[sq != b.s_all[kids]].sum())
                if c < cost:
                    best, cost = b, c
        return best

    def _diff_walk(self, base: _Base, q: int) -> _Walked | None:
        """The walk from ``q`` as an edit of ``base``'s: a node whose state equals the base's has the
        base's subtree below it, so only the nodes where the two walks part are visited (a key that
        excludes a few declared names parts from the free string state only along those names).
        None when they part on too many nodes."""
        S, table, label, re_ = base.s_all, self.table, self.label, self.reaccept
        kids = self._kids
        s = table[q, label[kids]]
        d = s != S[kids]
        nodes, states = [kids[d]], [s[d]]
        total = int(nodes[0].size)
        while nodes[-1].size:
            f, sf = nodes[-1], states[-1]
            cq = np.where(re_[sf], sf, 0)
            sb = S[f]
            live = (cq != 0) | re_[sb]  # both dead: the subtrees below are equal (all dead)
            f, cq = f[live], cq[live]
            lo, hi = self.child_lo[f], self.child_hi[f]
            kids_f = _ranges(lo, hi)
            s = table[np.repeat(cq, hi - lo), label[kids_f]]
            d = s != S[kids_f]
            nodes.append(kids_f[d])
            states.append(s[d])
            total += int(nodes[-1].size)
            if total > self.n_nodes // self.diff_share:
                return None
        D, SD = np.concatenate(nodes), np.concatenate(states)
        b_inside, b_rows, b_par, b_after, b_tids, b_tstate = base.walked
        # Tokens ending on a node that parted.
        lo, hi = self.tok_lo[D], self.tok_hi[D]
        toks = self.tokens[_ranges(lo, hi)]
        tstate = np.repeat(SD, hi - lo)
        inside = b_inside.copy()
        inside[toks] = re_[tstate]
        moved = np.zeros(self.n_bits, dtype=bool)
        moved[toks] = True
        keep = ~moved[b_tids]
        new = self.acc[tstate]
        tids = np.concatenate([b_tids[keep], toks[new]])
        tid_state = np.concatenate([b_tstate[keep], tstate[new]])
        # Frontier rows under a node that parted.
        parted = np.zeros(self.n_nodes + 1, dtype=bool)
        parted[D] = True
        keep = ~parted[self.parent[b_rows]]
        closing = self.acc[SD]
        lo, hi = self.child_lo[D[closing]], self.child_hi[D[closing]]
        rows = _ranges(lo, hi)
        par = np.repeat(SD[closing], hi - lo)
        rows, par, after = self._shadowed(rows, par, table[par, label[rows]], base.greedy)
        rows = np.concatenate([b_rows[keep], rows])
        order = np.argsort(rows, kind="stable")
        par = np.concatenate([b_par[keep], par])[order]
        after = np.concatenate([b_after[keep], after])[order]
        return _Walked(inside, rows[order], par, after, tids, tid_state)

    def walk_below(self, q: int, greedy: bool, below: tuple[int, ...],
                   first: I64) -> tuple[Words, list[Close]]:
        """:meth:`walk` for a lexeme whose first byte is the edge into one of the vocabulary-trie
        nodes ``first`` (children of the nodes ``below``; no shadow lives on): the dense pass over
        those nodes' subtrees, each of which lies in one range per level. Always on the byte trie: a
        class trie merges a node with the others of its class path."""
        ta, tr, re_, acc = self._ta, self._tr, self.reaccept, self.acc
        n = int(ta.parent.shape[0])
        s_all = np.zeros(n + 1, dtype=np.int32)
        cont = np.zeros(n, dtype=np.int32)
        s_all[first] = tr[q, ta.byte[first]]
        los: list[int] = []
        his: list[int] = []
        for v in below:
            lo, hi = int(ta.child_lo[v]), int(ta.child_hi[v])
            cont[lo:hi] = np.where(re_[s_all[lo:hi]], s_all[lo:hi], 0)
            while lo < hi:
                los.append(lo)
                his.append(hi)
                lo, hi = int(ta.child_lo[lo]), int(ta.child_hi[hi - 1])
                s = tr[cont[ta.parent[lo:hi]], ta.byte[lo:hi]]
                s_all[lo:hi] = s
                cont[lo:hi] = np.where(re_[s], s, 0)
        idx = _ranges(np.asarray(los, dtype=np.int64), np.asarray(his, dtype=np.int64))
        st = s_all[idx]
        closing = idx[acc[st]]
        clo, chi = ta.child_lo[closing], ta.child_hi[closing]
        rows = _ranges(clo, chi)
        rows, par, after = self._shadowed(rows, np.repeat(s_all[closing], chi - clo), s_all[rows], greedy)
        tlo, thi = ta.tok_lo[idx], ta.tok_hi[idx]
        toks = ta.tokens[_ranges(tlo, thi)]
        tstate = np.repeat(st, thi - tlo)
        inside = np.zeros(self.n_bits, dtype=bool)
        inside[toks] = re_[tstate]
        ends = acc[tstate]
        return self._pack(inside), self._closes(rows, par, after, toks[ends], tstate[ends], greedy,
                                                byte_trie=True)

    def _shadowed(self, rows: I64, par_state: npt.NDArray[np.int32], row_state: npt.NDArray[np.int32],
                  greedy: bool) -> tuple[I64, npt.NDArray[np.int32], npt.NDArray[np.int32]]:
        """Frontier ``rows`` (children of closing nodes in ``par_state``; ``row_state``: the lexeme's
        state at each row, read on from its parent) with their shadow states; a greedy close drops the
        children where the shadow accepts again."""
        after = np.zeros(rows.size, dtype=np.int32)
        if not greedy:
            return rows, par_state, after
        re_, acc = self.reaccept, self.acc
        shadowed = np.flatnonzero(re_[par_state])
        a = row_state[shadowed]  # a shadowing parent read on, so its row's state is the shadow's
        after[shadowed] = np.where(re_[a], a, 0)
        keep = np.ones(rows.size, dtype=bool)
        keep[shadowed[acc[a]]] = False
        return rows[keep], par_state[keep], after[keep]

    def _closes(self, rows: I64, par_state: npt.NDArray[np.int32], after: npt.NDArray[np.int32],
                tids: I64, tid_state: npt.NDArray[np.int32], greedy: bool,
                byte_trie: bool = False) -> list[Close]:
        """One :data:`Close` per state that ends a token or has frontier rows (``rows`` are nodes of
        this walker's trie, or of the vocabulary trie with ``byte_trie``)."""
        by_row = _by_state(par_state)
        by_tok = _by_state(tid_state)
        closes: list[Close] = []
        none = np.zeros(0, np.int64)
        for st in sorted({*by_row, *by_tok}):
            bits = np.zeros(self.n_bits, dtype=bool)
            pos = by_tok.get(st)
            if pos is not None:
                bits[tids[pos]] = True
            pos = by_row.get(st, none)
            if byte_trie:
                nodes, byte, aft = rows[pos], self._ta.byte[rows[pos]], after[pos].astype(np.int64)
            else:
                nodes, byte, aft = self._real_rows(rows[pos], after[pos])
            shadow = aft if greedy and self.reaccept[st] else None
            closes.append(Close(st, self._pack(bits), nodes, byte, shadow))
        return closes

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
