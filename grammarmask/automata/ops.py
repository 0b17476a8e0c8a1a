"""Combinators on byte DFAs: literals, string sets, intersection, union, concatenation.

Every function returns a trimmed, minimal :class:`~.dfa.DFA` (dead state 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import numpy.typing as npt

from ..errors import GrammarError
from .dfa import DFA, column_classes, minimize, minimize_acyclic
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
    """The minimal DFA of a finite set of byte strings (a trie, then suffixes merged)."""
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
    n = len(children)
    src = [i for i in range(n) for _ in children[i]]
    byt = [b for i in range(n) for b in children[i]]
    dst = [t for i in range(n) for t in children[i].values()]
    table = np.zeros((n, 256), dtype=np.int32)
    table[np.array(src, dtype=np.intp), np.array(byt, dtype=np.intp)] = np.array(dst, dtype=np.int32)
    # children have larger ids than parents: heights in one reverse pass
    height = [0] * n
    for s_, d_ in zip(reversed(src), reversed(dst), strict=True):
        if height[d_] + 1 > height[s_]:
            height[s_] = height[d_] + 1
    if n <= 4096:  # small tables: numpy over the dense columns beats the per-byte loop
        classes, _ = column_classes(table)
    else:
        classes = _edge_byte_classes(np.array(src), np.array(byt), np.array(dst))
    return minimize_acyclic(table, np.array(final, dtype=np.bool_), np.array(height, dtype=np.int64), classes)


def _edge_byte_classes(
    src: npt.NDArray[np.int64], byt: npt.NDArray[np.int64], dst: npt.NDArray[np.int64]
) -> npt.NDArray[np.int32]:
    """Byte classes (identical transition columns) of a sparse table given by its edges."""
    classes = np.zeros(256, dtype=np.int32)
    if src.size == 0:
        return classes
    order = np.lexsort((src, byt))
    s, b, d = src[order], byt[order], dst[order]
    cuts = np.searchsorted(b, np.arange(257))
    cols: dict[bytes, int] = {}
    for x in range(256):
        lo, hi = cuts[x], cuts[x + 1]
        key = s[lo:hi].tobytes() + b"|" + d[lo:hi].tobytes()
        classes[x] = cols.setdefault(key, len(cols))
    return classes


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
