"""The byte-level DFA value type, trimming and minimisation.

A :class:`DFA` reads bytes. State 0 is the *dead* state: absorbing, non-accepting, its row all
zeros, so vectorised walks (``states = T[states, byte]``) need no ``-1`` checks. Every DFA the
constructors in :mod:`grammarmask.automata` return is *trimmed* (every non-dead state is reachable
from ``start`` and can reach an accepting state) and minimal, so a state that is not 0 always
has a completion, and ``start == 0`` means the language is empty.

Minimisation is Moore's partition refinement (Moore 1956), vectorised with numpy over the
automaton's byte classes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["DFA", "UNREACHABLE", "distances_to_accept", "minimize", "trim"]

#: the distance of a state from which no accepting state can be reached (and of the dead state)
UNREACHABLE = 1 << 40

IntArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, eq=False)
class DFA:
    """A deterministic automaton over bytes with dead state 0.

    ``transitions[s, b]`` is the state after byte ``b`` in state ``s`` (int32, shape
    ``(n_states, 256)``); ``accepting[s]`` says whether ``s`` is final; ``start`` is the
    initial state (0 when the language is empty). Treat instances as immutable.
    """

    transitions: IntArray
    accepting: BoolArray
    start: int

    def __post_init__(self) -> None:
        t = np.ascontiguousarray(self.transitions, dtype=np.int32)
        a = np.ascontiguousarray(self.accepting, dtype=np.bool_)
        if t.ndim != 2 or t.shape[1] != 256 or t.shape[0] < 1 or a.shape != (t.shape[0],):
            raise ValueError("DFA needs transitions of shape (n, 256) and accepting of shape (n,)")
        if t[0].any() or a[0]:
            raise ValueError("DFA state 0 must be the dead state (row of zeros, not accepting)")
        if not 0 <= self.start < t.shape[0]:
            raise ValueError(f"DFA start state {self.start} out of range")
        t.setflags(write=False)
        a.setflags(write=False)
        object.__setattr__(self, "transitions", t)
        object.__setattr__(self, "accepting", a)
        object.__setattr__(self, "start", int(self.start))

    @property
    def n_states(self) -> int:
        """Number of states, the dead state included."""
        return int(self.transitions.shape[0])

    @functools.cached_property
    def _rows(self) -> dict[int, list[int]]:
        """Rows as Python lists, filled on first use of each state (cheap scalar walks)."""
        return {}

    def _row(self, state: int) -> list[int]:
        row = self._rows.get(state)
        if row is None:
            row = self.transitions[state].tolist()
            self._rows[state] = row
        return row

    @functools.cached_property
    def _accepting_list(self) -> list[bool]:
        return self.accepting.tolist()  # type: ignore[no-any-return]

    def run(self, state: int, data: bytes) -> int:
        """The state after reading ``data`` from ``state`` (0 once dead)."""
        rows = self._rows
        for b in data:
            row = rows.get(state)
            if row is None:
                row = self._row(state)
            state = row[b]
            if state == 0:
                return 0
        return state

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` is in the language."""
        return self._accepting_list[self.run(self.start, data)]

    def is_accepting(self, state: int) -> bool:
        """Whether ``state`` is final."""
        return self._accepting_list[state]

    def is_empty(self) -> bool:
        """Whether the language is empty."""
        return self.start == 0

    def byte_classes(self) -> tuple[npt.NDArray[np.int32], int]:
        """``(classes, k)``: ``classes[b]`` in ``0..k-1``, equal iff bytes have identical columns.

        Classes are numbered in order of first appearance, so byte 0's class is 0. Kept on the
        DFA (made once, freed with it).
        """
        got: tuple[npt.NDArray[np.int32], int] | None = self.__dict__.get("_classes")
        if got is None:
            got = column_classes(self.transitions)
            object.__setattr__(self, "_classes", got)
        return got

    def _known_classes(
        self, src: npt.NDArray[np.integer], byte: npt.NDArray[np.integer], dst: npt.NDArray[np.integer]
    ) -> DFA:
        """Set :meth:`byte_classes` from the edges ``src --byte--> dst`` (every non-dead transition,
        repeats allowed) of a DFA built from an edge list: cheaper than reading the dense table."""
        if self.n_states < 1 << 26:  # edge_classes packs a state id in 26 bits
            object.__setattr__(self, "_classes", edge_classes(src, byte, dst))
        return self

    def live_bytes(self, state: int) -> list[int]:
        """The bytes that lead from ``state`` to a non-dead state."""
        return [b for b, t in enumerate(self._row(state)) if t]


def _first_appearance(inverse: npt.NDArray[np.integer]) -> tuple[npt.NDArray[np.int32], int]:
    """Ids renumbered ``0..k-1`` in order of first appearance."""
    _, first = np.unique(inverse, return_index=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inverse].astype(np.int32), int(order.size)


def edge_classes(
    src: npt.NDArray[np.integer], byte: npt.NDArray[np.integer], dst: npt.NDArray[np.integer]
) -> tuple[npt.NDArray[np.int32], int]:
    """:func:`column_classes` of the table whose non-zero cells are the edges ``src --byte--> dst``
    (repeats allowed): two bytes share a class iff they have the same set of (src, dst) pairs."""
    key = np.unique(
        np.asarray(byte, dtype=np.int64) << 52
        | np.asarray(src, dtype=np.int64) << 26
        | np.asarray(dst, dtype=np.int64)
    )  # sorted by byte, then src
    b = key >> 52
    pair = key & ((1 << 52) - 1)
    count = np.bincount(b, minlength=256)
    runs = np.split(pair, np.cumsum(count)[:-1])
    ids: dict[bytes, int] = {}
    inverse = np.array([ids.setdefault(r.tobytes(), len(ids)) for r in runs], dtype=np.int64)
    return _first_appearance(inverse)


def column_classes(t: npt.NDArray[np.integer]) -> tuple[npt.NDArray[np.int32], int]:
    """Group the 256 columns of ``t`` into classes of identical columns (first-appearance order)."""
    return _first_appearance(_column_ids(t))


_RNG = np.random.default_rng(0x5EED)
_CHUNK_ROWS = 1 << 14  # rows of a table read at a time by _column_ids (2 MB of int32 at 256 columns)


def _column_ids(t: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """:func:`row_ids` of the columns of ``t``, read a block of rows at a time: no transposed or
    64-bit copy of the table (a 200,000-state DFA's is 400 MB). A random linear hash per column,
    then each column checked against its group's first; on a collision the exact slow path runs."""
    n, k = t.shape
    coef = _RNG.integers(1, 1 << 62, size=n, dtype=np.int64) | 1
    h = np.zeros(k, dtype=np.int64)
    with np.errstate(over="ignore"):
        for lo in range(0, n, _CHUNK_ROWS):
            h += coef[lo : lo + _CHUNK_ROWS] @ t[lo : lo + _CHUNK_ROWS].astype(np.int64)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    rep = first[inverse]
    blocks = (t[lo : lo + _CHUNK_ROWS] for lo in range(0, n, _CHUNK_ROWS))
    if all(np.array_equal(b, b[:, rep]) for b in blocks):
        return inverse.astype(np.int64)
    return row_ids(np.ascontiguousarray(t.T))


def row_ids(mat: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """Ids ``0..r-1`` for the rows of an int matrix, equal iff the rows are equal.

    Rows are grouped by a random 64-bit linear hash, then every row is checked against its
    group's first row; on a collision (never seen in practice) the exact slow path runs.
    """
    m = np.asarray(mat, dtype=np.int64)
    if m.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    coef = _RNG.integers(1, 1 << 62, size=m.shape[1], dtype=np.int64) | 1
    with np.errstate(over="ignore"):
        h = (m * coef).sum(axis=1)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if np.array_equal(m, m[first[inverse]]):
        return inverse.astype(np.int64)
    _, inverse = np.unique(m, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def class_reps(classes: npt.NDArray[np.integer], k: int) -> npt.NDArray[np.intp]:
    """The first byte of each of the ``k`` byte classes: ``t[:, class_reps(...)]`` reads a transition
    table by class."""
    reps = np.zeros(k, dtype=np.intp)
    reps[classes[::-1]] = np.arange(255, -1, -1)
    return reps


def _reduced(t: IntArray) -> tuple[IntArray, npt.NDArray[np.int32], npt.NDArray[np.intp]]:
    classes, k = column_classes(t)
    reps = class_reps(classes, k)
    return t[:, reps], classes, reps


def trim(transitions: IntArray, accepting: BoolArray, start: int) -> DFA:
    """Drop unreachable and dead-end states, renumber with dead state 0, keep the language."""
    t = np.asarray(transitions, dtype=np.int32)
    acc = np.asarray(accepting, dtype=np.bool_)
    n = t.shape[0]
    red, _, _ = _reduced(t)
    reach = np.zeros(n, dtype=np.bool_)
    reach[start] = True
    frontier = np.array([start])
    while frontier.size:
        nxt = np.unique(red[frontier])
        nxt = nxt[~reach[nxt]]
        reach[nxt] = True
        frontier = nxt
    # co-reachability over reversed edges
    src = np.repeat(np.arange(n), red.shape[1])
    dst = red.reshape(-1)
    keep = reach[src] & (src != dst)
    src, dst = src[keep], dst[keep]
    order = np.argsort(dst, kind="stable")
    src_by_dst = src[order]
    ptr = np.searchsorted(dst[order], np.arange(n + 1))
    live = acc & reach
    live[0] = False
    frontier = np.flatnonzero(live)
    while frontier.size:
        lo, hi = ptr[frontier], ptr[frontier + 1]
        preds = src_by_dst[_ranges(lo, hi)]
        preds = np.unique(preds)
        preds = preds[~live[preds] & reach[preds]]
        preds = preds[preds != 0]
        live[preds] = True
        frontier = preds
    live[0] = False
    if not live[start]:
        return DFA(np.zeros((1, 256), np.int32), np.zeros(1, np.bool_), 0)
    keep_states = np.flatnonzero(live)
    new_id = np.zeros(n, dtype=np.int32)
    new_id[keep_states] = np.arange(1, keep_states.size + 1, dtype=np.int32)
    new_t = np.zeros((keep_states.size + 1, 256), dtype=np.int32)
    new_t[1:] = new_id[t[keep_states]]
    new_acc = np.zeros(keep_states.size + 1, dtype=np.bool_)
    new_acc[1:] = acc[keep_states]
    return DFA(new_t, new_acc, int(new_id[start]))


def _ranges(lo: npt.NDArray[np.intp], hi: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """Concatenate ``arange(lo[i], hi[i])`` for all i, vectorised."""
    lens = hi - lo
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.intp)
    starts = np.repeat(lo - np.cumsum(lens) + lens, lens)
    return starts + np.arange(total)  # type: ignore[no-any-return]


def minimize(dfa: DFA) -> DFA:
    """The minimal trimmed DFA of the same language (Moore partition refinement)."""
    d = trim(dfa.transitions, dfa.accepting, dfa.start)
    if d.start == 0:
        return d
    red, classes, _ = _reduced(d.transitions)
    n = d.n_states
    block = d.accepting.astype(np.int64) + 1
    block[0] = 0
    n_blocks = len(np.unique(block))
    rounds = 0
    while True:
        rounds += 1
        if rounds == 64 or (rounds == 1 and n > 256):
            # long chains need up to n Moore rounds; a finite language needs one pass by height
            height = _acyclic_heights(red)
            if height is not None:
                return minimize_acyclic(d.transitions, d.accepting, height, classes, d.start)
        block = row_ids(np.concatenate([block[:, None], block[red]], axis=1))
        count = int(block.max()) + 1
        if count == n_blocks:
            break
        n_blocks = count
    # renumber: dead state's block -> 0, others in order of first state
    _, first = np.unique(block, return_index=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    block = rank[block]  # state 0 is first, so its block is 0
    reps = first[order]
    new_t = block[d.transitions[reps]].astype(np.int32)
    new_acc = d.accepting[reps]
    if n_blocks == n:
        return d
    return DFA(new_t, new_acc, int(block[d.start]))


def _acyclic_heights(red: IntArray) -> npt.NDArray[np.int64] | None:
    """Longest path from each state to a dead end (state 0 excluded), or None if there is a cycle."""
    n = red.shape[0]
    succ = [sorted(set(row) - {0}) for row in red.tolist()]
    height = [-1] * n  # -1 unvisited, -2 on the stack
    height[0] = 0
    for root in range(1, n):
        if height[root] != -1:
            continue
        stack = [(root, 0)]
        height[root] = -2
        while stack:
            s, i = stack[-1]
            kids = succ[s]
            if i < len(kids):
                stack[-1] = (s, i + 1)
                c = kids[i]
                if height[c] == -2:
                    return None
                if height[c] == -1:
                    height[c] = -2
                    stack.append((c, 0))
            else:
                stack.pop()
                height[s] = 1 + max((height[c] for c in kids), default=-1)
    return np.array(height, dtype=np.int64)


def minimize_acyclic(
    table: IntArray,
    final: BoolArray,
    height: npt.NDArray[np.int64],
    classes: npt.NDArray[np.int32],
    start: int = 1,
) -> DFA:
    """Minimise a trimmed acyclic DFA (dead state 0) level by level of height (Revuz 1992):
    equivalent states have equal heights, and a state's class depends only on lower levels."""
    red = table[:, class_reps(classes, int(classes.max()) + 1)]
    n = table.shape[0]
    cls_of = np.zeros(n, dtype=np.int64)  # dead state keeps class 0
    order = np.argsort(height[1:], kind="stable") + 1
    hs = height[order]
    cuts = [0, *(np.flatnonzero(np.diff(hs)) + 1).tolist(), order.size]
    fin = final.tolist()
    cls_list = [0] * n
    next_id = 1
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        group = order[a:b]
        if b - a > 64:
            sig = np.concatenate([final[group, None].astype(np.int64), cls_of[red[group]]], axis=1)
            ids = row_ids(sig) + next_id
            cls_of[group] = ids
            for st, cid in zip(group.tolist(), ids.tolist(), strict=True):
                cls_list[st] = cid
            next_id = int(ids.max()) + 1
            continue
        # small levels (long chains): plain Python beats numpy's per-call overhead
        seen: dict[tuple[int, ...], int] = {}
        cids = []
        for st in group.tolist():
            key = (fin[st], *[cls_list[x] for x in red[st].tolist()])
            cid = seen.get(key)
            if cid is None:
                cid = seen[key] = next_id
                next_id += 1
            cls_list[st] = cid
            cids.append(cid)
        cls_of[group] = cids
    first = np.full(next_id, -1, dtype=np.int64)
    first[cls_of[::-1]] = np.arange(n - 1, -1, -1)
    rep_states = first[1:]
    new_t = np.zeros((next_id, 256), dtype=np.int32)
    new_t[1:] = cls_of[table[rep_states]]
    new_acc = np.zeros(next_id, dtype=np.bool_)
    new_acc[1:] = final[rep_states]
    return DFA(new_t, new_acc, int(cls_of[start]))


def distances_to_accept(
    table: npt.NDArray[np.integer], accepting: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    """``dist[s]``: the length of the shortest word from state ``s`` of the transition ``table`` (dead
    state 0) to an accepting state (:data:`UNREACHABLE`: none), by a breadth-first search backwards
    over the edges (byte classes first, so the edge list stays small)."""
    n = table.shape[0]
    classes, k = column_classes(table)  # no sorted or 64-bit copy of the whole table
    first = np.unique(classes, return_index=True)[1]
    t = table[:, np.sort(first)]
    src, col = np.nonzero(t)  # the live edges only: no 64-bit copy of the (mostly dead) table
    dst = t[src, col].astype(np.int64)
    order = np.argsort(dst, kind="stable")
    preds = src[order]
    lo = np.searchsorted(dst[order], np.arange(n + 1))
    dist = np.full(n, UNREACHABLE, dtype=np.int64)
    todo = np.flatnonzero(np.asarray(accepting))
    todo = todo[todo != 0]
    dist[todo] = 0
    level = 0
    while todo.size:
        level += 1
        cnt = lo[todo + 1] - lo[todo]
        idx = np.repeat(lo[todo] - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
        nxt = np.unique(preds[idx])
        todo = nxt[dist[nxt] == UNREACHABLE]
        dist[todo] = level
    dist[0] = UNREACHABLE
    return dist
