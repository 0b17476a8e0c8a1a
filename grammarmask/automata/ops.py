"""Combinators on byte DFAs: literals, string sets, intersection, union, concatenation.

Every function returns a trimmed, minimal :class:`~.dfa.DFA` (dead state 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from ..errors import GrammarError
from . import kernels
from .dfa import DFA, _ranges, minimize_python
from .nfa import NFA, determinize

__all__ = [
    "DEFAULT_PRODUCT_STATES",
    "concat",
    "difference",
    "empty_dfa",
    "from_strings",
    "literal_dfa",
    "product",
    "union",
]

DEFAULT_PRODUCT_STATES = 100_000
_SMALL_TRIE_BYTES = 4096  # from_strings: string sets up to this many bytes take the dict trie


def empty_dfa() -> DFA:
    """The DFA of the empty language (only the dead state)."""
    return DFA(np.zeros((1, 256), np.int32), np.zeros(1, np.bool_), 0)


def literal_dfa(data: bytes) -> DFA:
    """The DFA accepting exactly ``data``."""
    return from_strings([data])


def from_strings(strings: Iterable[bytes]) -> DFA:
    """The minimal DFA of a finite set of byte strings: a trie whose equal suffixes are merged
    (hash-consing by height, children before parents: Revuz 1992, Daciuk et al. 2000) before any
    table is made, so the table has a row per state of the minimal DFA, not per trie node (100,000
    words: ~1,000,000 nodes, ~200,000 states). The trie and the merging are arrays (numpy), with
    no Python object per node: 100,000 words take well under a second."""
    uniq = sorted({bytes(s) for s in strings})
    if not uniq:
        return empty_dfa()
    if kernels.available():  # _small_trie_dfa's, in Rust, for any number of strings
        return kernels.from_strings(uniq)
    if sum(map(len, uniq)) <= _SMALL_TRIE_BYTES:
        return _small_trie_dfa(uniq)
    t = _SortedTrie(uniq)
    cls, n_cls = t.merge()
    # rows: 0 dead, then classes in reverse (the root's class is made last: row 1, parents first)
    row = np.zeros(n_cls + 1, dtype=np.int32)
    row[1:] = np.arange(n_cls, 0, -1, dtype=np.int32)
    table = np.zeros((n_cls + 1, 256), dtype=np.int32)
    src, dst = row[cls[t.parent[1:]]], row[cls[1:]]
    table[src, t.label[1:]] = dst
    acc = np.zeros(n_cls + 1, dtype=np.bool_)
    acc[row[cls[t.final]]] = True
    return DFA(table, acc, int(row[cls[0]]))._known_classes(src, t.label[1:], dst)


def _small_trie_dfa(uniq: list[bytes]) -> DFA:
    """:func:`from_strings` for a few short strings (sorted, distinct, not empty): a trie in Python
    dicts, its equal suffixes merged in one reverse pass. About 100x cheaper than the array path
    below a few thousand bytes (a literal: 0.03 ms against 3.8 ms), where most calls are."""
    # trie in Python dicts: total work is the total length of the strings
    children: list[dict[int, int]] = [{}, {}]
    final = [False, False]
    for s in uniq:
        node = 1
        for b in s:
            nxt = children[node].get(b)
            if nxt is None:
                nxt = len(children)
                children[node][b] = nxt
                children.append({})
                final.append(False)
            node = nxt
        final[node] = True
    # children have larger ids than parents: one reverse pass gives every node its class
    rep = [0] * len(children)
    classes_of: dict[tuple[bool, tuple[tuple[int, int], ...]], int] = {}
    kept: list[int] = []  # a trie node per class, in class order (class c is row c + 1)
    for i in range(len(children) - 1, 0, -1):
        key = (final[i], tuple((b, rep[t]) for b, t in children[i].items()))
        r = classes_of.get(key)
        if r is None:
            r = classes_of[key] = len(kept) + 1
            kept.append(i)
        rep[i] = r
    # rows: 0 dead, then classes in reverse (the start's class is made last: row 1, parents first)
    n = len(kept) + 1
    row = [0] * (n + 1)
    for c in range(1, n):
        row[c] = n - c
    src = [row[c] for c in range(1, n) for _ in children[kept[c - 1]]]
    byt = [b for c in range(1, n) for b in children[kept[c - 1]]]
    dst = [row[rep[t]] for c in range(1, n) for t in children[kept[c - 1]].values()]
    acc = [False] * n
    for c in range(1, n):
        acc[row[c]] = final[kept[c - 1]]
    table = np.zeros((n, 256), dtype=np.int32)
    table[np.array(src, dtype=np.intp), np.array(byt, dtype=np.intp)] = np.array(dst, dtype=np.int32)
    return DFA(table, np.array(acc, dtype=np.bool_), row[rep[1]])


def _splitmix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit mixing function (splitmix64's finaliser), elementwise; overflow wraps."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))  # type: ignore[no-any-return]


class _SortedTrie:
    """The trie of sorted distinct byte strings as arrays: node 0 is the root; string ``i`` adds the
    nodes for its bytes past its longest common prefix with string ``i - 1``, so a node's children
    are made in increasing byte order and every node is made after its parent."""

    def __init__(self, uniq: list[bytes]) -> None:
        n = len(uniq)
        lens = np.fromiter((len(s) for s in uniq), dtype=np.int64, count=n)
        data = np.frombuffer(b"".join(uniq), dtype=np.uint8)
        starts = np.zeros(n, dtype=np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        # lcp[i]: common prefix of strings i - 1 and i (0 for i = 0), one byte position per round
        lcp = np.zeros(n, dtype=np.int64)
        live = np.arange(1, n)
        while live.size:
            d = lcp[live]
            live = live[(d < lens[live - 1]) & (d < lens[live])]
            d = lcp[live]
            live = live[data[starts[live - 1] + d] == data[starts[live] + d]]
            lcp[live] += 1
        new = lens - lcp  # nodes string i adds (sorted and distinct: only the first may add none)
        first = np.zeros(n, dtype=np.int64)  # id of string i's first new node (the root is 0)
        np.cumsum(new[:-1], out=first[1:])
        first += 1
        self.n_nodes = int(first[-1] + new[-1])
        # the node at depth lcp[i] on string i's path was made by the last string j < i with
        # lcp[j] < lcp[i] (the strings between share that prefix): a previous-smaller scan
        anchor = np.zeros(n, dtype=np.int64)
        stack: list[int] = []
        lcp_l = lcp.tolist()
        for i in range(n):
            li = lcp_l[i]
            while stack and lcp_l[stack[-1]] >= li:
                stack.pop()
            if li and stack:
                j = stack[-1]
                anchor[i] = int(first[j]) + li - lcp_l[j] - 1
            stack.append(i)
        # per node: its string, its depth (1-based byte position), parent and label
        owner = np.repeat(np.arange(n), new)
        depth = np.arange(self.n_nodes - 1) - np.repeat(first - 1, new) + np.repeat(lcp, new) + 1
        parent = np.arange(self.n_nodes - 1, dtype=np.int64)  # the previous node of the same string
        head = first[new > 0] - 1  # a string's first new node hangs from its anchor
        parent[head] = anchor[new > 0]
        self.parent = np.concatenate([[0], parent])
        self.label = np.concatenate([[0], data[starts[owner] + depth - 1]]).astype(np.int64)
        self.depth = np.concatenate([[0], depth])
        #: the nodes where a string ends (the root for the empty string)
        self.final = np.where(new > 0, first + new - 1, 0)

    def merge(self) -> tuple[npt.NDArray[np.int64], int]:
        """``(cls, k)``: per node, its state ``1..k`` of the minimal DFA (equal iff the languages
        below the nodes are equal). Nodes are merged level by level of height (the longest path
        down), each level by a hash of (final, {(byte, child's state)}) checked exactly."""
        n = self.n_nodes
        parent = self.parent
        height = np.zeros(n, dtype=np.int64)
        kids = np.arange(1, n)
        by_depth = kids[np.argsort(-self.depth[1:], kind="stable")]
        cuts = np.flatnonzero(np.diff(self.depth[by_depth])) + 1
        for lvl in np.split(by_depth, cuts):
            np.maximum.at(height, parent[lvl], height[lvl] + 1)
        final = np.zeros(n, dtype=np.bool_)
        final[self.final] = True
        # edges grouped by parent (children in byte order: made in that order)
        edges = kids[np.argsort(parent[1:], kind="stable")]
        deg = np.bincount(parent[1:], minlength=n)
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(deg, out=ptr[1:])
        cls = np.zeros(n, dtype=np.int64)
        order = np.argsort(height, kind="stable")
        cuts = np.flatnonzero(np.diff(height[order])) + 1
        next_id = 1
        for group in np.split(order, cuts):
            ids = self._level(group, cls, final, edges, deg, ptr)
            cls[group] = ids + next_id
            next_id += int(ids.max()) + 1
        return cls, next_id - 1

    def _level(
        self,
        group: npt.NDArray[np.int64],
        cls: npt.NDArray[np.int64],
        final: npt.NDArray[np.bool_],
        edges: npt.NDArray[np.int64],
        deg: npt.NDArray[np.int64],
        ptr: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        """Ids ``0..r-1`` for the nodes of one height level, equal iff their states are."""
        if group.size <= 64:  # long single strings: plain Python beats numpy's per-call overhead
            return self._level_exact(group, cls, final, edges, ptr)
        e_idx = _ranges(ptr[group], ptr[group + 1])
        e_node = edges[e_idx]
        key = (self.label[e_node].astype(np.uint64) << np.uint64(40)) | cls[e_node].astype(np.uint64)
        mixed = _splitmix(key)
        has = deg[group] > 0
        h = _splitmix(
            final[group].astype(np.uint64) + np.uint64(1) + (deg[group].astype(np.uint64) << np.uint64(8))
        )
        sums = np.zeros(group.size, dtype=np.uint64)
        if e_idx.size:
            with np.errstate(over="ignore"):
                sums[has] = np.add.reduceat(mixed, _starts(deg[group])[has])
        with np.errstate(over="ignore"):
            h = h + _splitmix(sums)
        _, rep, ids = np.unique(h, return_index=True, return_inverse=True)
        ids = ids.reshape(-1)
        # exact check: every node equals its group's first node
        r = rep[ids]
        same = (final[group] == final[group[r]]) & (deg[group] == deg[group[r]])
        if same.all() and e_idx.size:
            r_idx = _ranges(ptr[group[r]], ptr[group[r]] + deg[group])
            r_node = edges[r_idx]
            same_e = (self.label[e_node] == self.label[r_node]) & (cls[e_node] == cls[r_node])
            if same_e.all():
                return ids.astype(np.int64)
        elif same.all():
            return ids.astype(np.int64)
        return self._level_exact(group, cls, final, edges, ptr)  # a hash collision (never seen)

    def _level_exact(
        self,
        group: npt.NDArray[np.int64],
        cls: npt.NDArray[np.int64],
        final: npt.NDArray[np.bool_],
        edges: npt.NDArray[np.int64],
        ptr: npt.NDArray[np.int64],
    ) -> npt.NDArray[np.int64]:
        seen: dict[tuple[int, ...], int] = {}
        out = []
        label, fin = self.label, final
        for v in group.tolist():
            kids = edges[ptr[v] : ptr[v + 1]]
            key = (int(fin[v]), *label[kids].tolist(), -1, *cls[kids].tolist())
            out.append(seen.setdefault(key, len(seen)))
        return np.array(out, dtype=np.int64)


def _starts(deg: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each run of ``deg[i]`` items starts in their concatenation."""
    out = np.zeros(deg.size, dtype=np.int64)
    np.cumsum(deg[:-1], out=out[1:])
    return out


def _joint_classes(a: DFA, b: DFA) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Byte classes refining both DFAs' classes: (class of each byte, a representative byte per class)."""
    ca, _ = a.byte_classes()
    cb, _ = b.byte_classes()
    key = ca.astype(np.int64) * 256 + cb
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    return inverse.reshape(-1).astype(np.intp), first.astype(np.intp)


def _pair_dfa(a: DFA, b: DFA, accept: Callable[[bool, bool], bool], keep_half_dead: bool, limit: int) -> DFA:
    classes, reps = _joint_classes(a, b)
    ta = a.transitions[:, reps].astype(np.int64)
    tb = b.transitions[:, reps].astype(np.int64)
    nb = b.n_states
    start = a.start * nb + b.start
    if start == 0 or (not keep_half_dead and (a.start == 0 or b.start == 0)):
        return empty_dfa()
    ids: dict[int, int] = {0: 0, start: 1}
    codes_by_id = [0, start]
    rows: list[npt.NDArray[np.int64]] = [np.zeros((1, len(reps)), np.int64)]
    frontier = np.array([start], dtype=np.int64)
    while frontier.size:
        nx = ta[frontier // nb]
        ny = tb[frontier % nb]
        nxt = nx * nb + ny
        if not keep_half_dead:
            nxt[(nx == 0) | (ny == 0)] = 0
        new = []
        for c in np.unique(nxt).tolist():
            if c not in ids:
                ids[c] = len(codes_by_id)
                codes_by_id.append(c)
                new.append(c)
        if len(codes_by_id) > limit:
            raise GrammarError(f"automaton product too large: more than {limit} states")
        rows.append(nxt)
        frontier = np.array(new, dtype=np.int64)
    codes = np.array(codes_by_id, dtype=np.int64)
    order = np.argsort(codes)
    sorted_codes = codes[order]
    all_rows = np.concatenate(rows, axis=0)  # rows are in id order (BFS appends in id order)
    red = order[np.searchsorted(sorted_codes, all_rows)].astype(np.int32)
    acc_a, acc_b = a.accepting, b.accepting
    acc = np.array([accept(bool(acc_a[c // nb]), bool(acc_b[c % nb])) for c in codes_by_id])
    acc[0] = False
    table = red[:, classes]
    return minimize_python(DFA(table, acc, 1), class_bytes=reps)  # bytes of one joint class: equal columns


#: the products: what a pair of states accepts, and whether a pair with one side dead lives on
_PAIRS: dict[str, tuple[Callable[[bool, bool], bool], bool]] = {
    "and": (lambda x, y: x and y, False),
    "or": (lambda x, y: x or y, True),
    "minus": (lambda x, y: x and not y, True),
}


def pair_dfa_python(a: DFA, b: DFA, op: str, limit: int) -> DFA:
    """The product ``L(a) op L(b)`` (``op`` a key of :data:`_PAIRS`) in Python: the specification
    of the Rust kernel the product functions use when the extension imports."""
    accept, keep_half_dead = _PAIRS[op]
    return _pair_dfa(a, b, accept, keep_half_dead, limit)


def _pair(a: DFA, b: DFA, op: str, limit: int) -> DFA:
    if kernels.available():
        return kernels.product(a, b, op, limit)
    return pair_dfa_python(a, b, op, limit)


def product(a: DFA, b: DFA, *, max_states: int = DEFAULT_PRODUCT_STATES) -> DFA:
    """The intersection ``L(a) & L(b)`` (exact; the result never dead-ends, being trimmed)."""
    return _pair(a, b, "and", max_states)


def union(a: DFA, b: DFA, *, max_states: int = DEFAULT_PRODUCT_STATES) -> DFA:
    """The union ``L(a) | L(b)``."""
    return _pair(a, b, "or", max_states)


def difference(a: DFA, b: DFA, *, max_states: int = DEFAULT_PRODUCT_STATES) -> DFA:
    """The difference ``L(a) - L(b)``."""
    return _pair(a, b, "minus", max_states)


def add_dfa_to_nfa(nfa: NFA, dfa: DFA, start: int, end: int) -> None:
    """Embed ``dfa`` into ``nfa`` between ``start`` and ``end`` (epsilon in, epsilon out)."""
    if dfa.start == 0:
        return
    base = [0] * dfa.n_states
    for s in range(1, dfa.n_states):
        base[s] = nfa.new_state()
    nfa.add_eps(start, base[dfa.start])
    t = dfa.transitions
    for s in range(1, dfa.n_states):
        row = t[s]
        cuts = np.flatnonzero(np.diff(row)) + 1
        los = np.concatenate([[0], cuts])
        his = np.concatenate([cuts - 1, [255]])
        for lo, hi in zip(los.tolist(), his.tolist(), strict=True):
            tgt = int(row[lo])
            if tgt:
                nfa.add_range(base[s], lo, hi, base[tgt])
        if dfa.accepting[s]:
            nfa.add_eps(base[s], end)


def concat(a: DFA, b: DFA, *, max_states: int = DEFAULT_PRODUCT_STATES) -> DFA:
    """The concatenation ``L(a) L(b)``."""
    nfa = NFA()
    start, mid, end = nfa.new_state(), nfa.new_state(), nfa.new_state()
    add_dfa_to_nfa(nfa, a, start, mid)
    add_dfa_to_nfa(nfa, b, mid, end)
    return determinize(nfa, start, end, max_states=max_states)


def repeat(a: DFA, lo: int, hi: int | None, *, max_states: int = DEFAULT_PRODUCT_STATES) -> DFA:
    """``L(a){lo,hi}``: ``lo`` to ``hi`` words of ``L(a)`` one after another (``hi`` None: no limit).

    Raises :class:`GrammarError` when the result needs more than ``max_states`` states (or its NFA,
    one copy of ``a`` per repetition, more than the NFA allows).
    """
    chained = _prefix_free_repeat(a, lo, hi, max_states)
    if chained is not None:
        return chained
    nfa = NFA()
    start = node = nfa.new_state()
    end = nfa.new_state()
    for i in range(lo if hi is None else hi):
        if i >= lo:
            nfa.add_eps(node, end)
        nxt = nfa.new_state()
        add_dfa_to_nfa(nfa, a, node, nxt)
        node = nxt
    if hi is None:  # a copy from the last node back to itself: any number more
        add_dfa_to_nfa(nfa, a, node, node)
    nfa.add_eps(node, end)
    return determinize(nfa, start, end, max_states=max_states)


def _prefix_free_repeat(a: DFA, lo: int, hi: int | None, max_states: int) -> DFA | None:
    """``repeat`` built directly when ``L(a)`` is prefix-free (no word of it is a proper prefix of
    another: every accepting row of the trimmed ``a`` is dead) and lacks the empty word, as a JSON
    string's characters or a character class are; None otherwise.

    A word then splits into words of ``L(a)`` in one way only, so the states are pairs (words done
    ``i``, state ``q`` of ``a`` inside the next word): completing a word goes to ``(i + 1, start)``,
    ``(i, start)`` accepts for ``lo <= i <= hi``, and with ``hi`` None copy ``lo`` loops on itself.
    That automaton is minimal when ``a`` is (two pairs differ in their residual language: by the
    number of words left, or by ``a``'s own residuals), so no subset construction or Moore rounds:
    O(states x 256) array work instead of seconds for ``(char){0,256}`` (5,000 states).
    """
    t, acc = np.asarray(a.transitions), np.asarray(a.accepting)
    if a.start == 0 or acc[a.start] or t[acc].any():
        return None
    if hi == 0:
        return literal_dfa(b"")
    inner = np.flatnonzero(~acc)[1:]  # a's states inside a word (dead state 0 and finals left out)
    m = inner.size
    star = hi is None and lo == 0  # a*: one copy looping on itself
    # otherwise copies 0 .. top-1, then a last state L = (top words done, a's start): final for
    # x{lo,hi} (top = hi, L's row dead); for x{lo,} (top = lo) L reads on like (lo - 1, start),
    # since (lo - 1, q) and (lo, q) have the same residual inside a word
    top = 1 if star else hi if hi is not None else lo
    n = 1 + top * m + (not star)
    if n > max_states:
        raise GrammarError(f"repetition too large: its DFA needs {n} states, more than {max_states}")
    index = np.zeros(t.shape[0], np.int64)  # a's inner state -> 1 + its index among them
    index[inner] = np.arange(1, m + 1)
    s0 = int(index[a.start]) - 1
    row = t[inner]  # (m, 256): a's successors of each inner state
    offset = np.arange(top, dtype=np.int64)[:, None, None] * m  # copy i's states: 1 + i*m + ...
    stay = np.where(row == 0, 0, offset + index[row])
    after = np.arange(1, top + 1)  # the copy a completed word leads to
    restart = 1 + after * m + s0
    if star:
        restart[:] = 1 + s0
    else:
        restart[after == top] = n - 1
    table = np.zeros((n, 256), np.int32)
    table[1 : 1 + top * m] = np.where(acc[row][None], restart[:, None, None], stay).reshape(-1, 256)
    firsts = 1 + np.arange(top) * m + s0  # (i, a's start) for each copy i
    if hi is None and not star:
        table[n - 1] = table[firsts[-1]]
    accepting = np.zeros(n, np.bool_)
    accepting[firsts[lo:]] = True
    if not star:
        accepting[n - 1] = True
    return DFA(table, accepting, int(firsts[0]))
