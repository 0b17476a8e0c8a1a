"""Combinators on byte DFAs: literals, string sets, intersection, union, concatenation.

Every function returns a trimmed, minimal :class:`~.dfa.DFA` (dead state 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from ..errors import GrammarError
from .dfa import DFA, minimize
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


def empty_dfa() -> DFA:
    """The DFA of the empty language (only the dead state)."""
    return DFA(np.zeros((1, 256), np.int32), np.zeros(1, np.bool_), 0)


def literal_dfa(data: bytes) -> DFA:
    """The DFA accepting exactly ``data``."""
    return from_strings([data])


def from_strings(strings: Iterable[bytes]) -> DFA:
    """The minimal DFA of a finite set of byte strings: a trie whose equal suffixes are merged
    (hash-consing, children before parents: Daciuk et al. 2000) before any table is made, so the
    table has a row per state of the minimal DFA, not per trie node (100,000 words: ~800,000 nodes,
    ~350,000 states)."""
    uniq = sorted({bytes(s) for s in strings})
    if not uniq:
        return empty_dfa()
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
    return minimize(DFA(table, acc, 1))


def product(a: DFA, b: DFA, *, max_states: int = DEFAULT_PRODUCT_STATES) -> DFA:
    """The intersection ``L(a) & L(b)`` (exact; the result never dead-ends, being trimmed)."""
    return _pair_dfa(a, b, lambda x, y: x and y, False, max_states)


def union(a: DFA, b: DFA, *, max_states: int = DEFAULT_PRODUCT_STATES) -> DFA:
    """The union ``L(a) | L(b)``."""
    return _pair_dfa(a, b, lambda x, y: x or y, True, max_states)


def difference(a: DFA, b: DFA, *, max_states: int = DEFAULT_PRODUCT_STATES) -> DFA:
    """The difference ``L(a) - L(b)``."""
    return _pair_dfa(a, b, lambda x, y: x and not y, True, max_states)


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

