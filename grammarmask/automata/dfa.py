"""The byte-level DFA value type, trimming and minimisation.

A :class:`DFA` reads bytes. State 0 is the *dead* state: absorbing, non-accepting, its row all
zeros, so vectorised walks (``states = T[states, byte]``) need no ``-1`` checks. Every DFA the
constructors in :mod:`grammarmask.automata` return is *trimmed* (every non-dead state is reachable
from ``start`` and can reach an accepting state) and minimal, so a state that is not 0 always
has a completion, and ``start == 0`` means the language is empty.

Minimisation is Moore's partition refinement (Moore 1956), vectorised with numpy over the
automaton's byte classes, on the states some cycle reaches; the states no cycle reaches are then
classified bottom up (Revuz 1992).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from . import kernels

__all__ = ["DFA", "UNREACHABLE", "distances_to_accept", "minimize", "minimize_python", "trim"]

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

    @classmethod
    def _trusted(cls, transitions: IntArray, accepting: BoolArray, start: int) -> DFA:
        """A DFA of tables the Rust kernels made, or this package built well-formed (int32
        ``(n, 256)``, C-contiguous and read-only, state 0 dead, every target a state), without
        :meth:`__post_init__`'s checks and copies: they cost 5 us of a keyword's 12, and a JSON
        Schema's compile makes hundreds."""
        d = object.__new__(cls)
        object.__setattr__(d, "transitions", transitions)
        object.__setattr__(d, "accepting", accepting)
        object.__setattr__(d, "start", start)
        return d

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
            by_class = self.__dict__.get("_class_table")  # as the automata kernels made it
            if by_class is not None:
                got = np.frombuffer(by_class[0], dtype=np.uint8).astype(np.int32), by_class[1]
            elif kernels.available():
                got = kernels.byte_classes(self)
            else:
                got = column_classes(self.transitions)
            object.__setattr__(self, "_classes", got)
        return got

    def class_table(self) -> tuple[bytes, int, bytes, bytes]:
        """``(classes, k, table, accepting)`` as bytes: the byte -> class map (256 bytes, see
        :meth:`byte_classes`), the number of classes, the transitions read by class (``n x k``
        int32, native order) and a byte per state (1: final). What the native CFG engine's lexer
        hand-over reads (:func:`grammarmask.native.cfg.flat_tables`); kept on the DFA (``k`` is
        far below 256: a property key's literal has a class per distinct byte and one more)."""
        got: tuple[bytes, int, bytes, bytes] | None = self.__dict__.get("_class_table")
        if got is None:
            classes, k = self.byte_classes()
            table = self.transitions[:, class_reps(classes, k)]
            got = (classes.astype(np.uint8).tobytes(), k, table.tobytes(), self.accepting.tobytes())
            object.__setattr__(self, "_class_table", got)
        return got

    @classmethod
    def from_class_table(cls, classes: bytes, k: int, table: bytes, accepting: bytes, start: int) -> DFA:
        """The DFA that :meth:`class_table` ``(classes, k, table, accepting)`` and ``start`` describe,
        its table made dense again; it keeps that class table."""
        by_class = np.frombuffer(table, dtype=np.int32).reshape(-1, k)
        columns = np.frombuffer(classes, dtype=np.uint8)
        d = cls(by_class[:, columns], np.frombuffer(accepting, dtype=np.bool_), start)
        object.__setattr__(d, "_class_table", (classes, k, table, accepting))  # as class_table() makes it
        return d

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
    return _trim(transitions, accepting, start)[0]


def _trim(transitions: IntArray, accepting: BoolArray, start: int,
          class_bytes: npt.NDArray[np.intp] | None = None) -> tuple[DFA, npt.NDArray[np.intp]]:
    """:func:`trim`, and a representative byte per byte class of ``transitions`` (the trimmed
    table's columns at those bytes tell its states apart as well: :func:`minimize` reads them
    instead of grouping the columns again); ``class_bytes``, when given, are such bytes already."""
    t = np.asarray(transitions, dtype=np.int32)
    acc = np.asarray(accepting, dtype=np.bool_)
    n = t.shape[0]
    if class_bytes is None:
        red, _, class_bytes = _reduced(t)
    else:
        red = t[:, class_bytes]
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
        return DFA(np.zeros((1, 256), np.int32), np.zeros(1, np.bool_), 0), class_bytes
    keep_states = np.flatnonzero(live)
    new_id = np.zeros(n, dtype=np.int32)
    new_id[keep_states] = np.arange(1, keep_states.size + 1, dtype=np.int32)
    new_t = np.zeros((keep_states.size + 1, 256), dtype=np.int32)
    new_t[1:] = new_id[t[keep_states]]
    new_acc = np.zeros(keep_states.size + 1, dtype=np.bool_)
    new_acc[1:] = acc[keep_states]
    return DFA(new_t, new_acc, int(new_id[start])), class_bytes


def _ranges(lo: npt.NDArray[np.intp], hi: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """Concatenate ``arange(lo[i], hi[i])`` for all i, vectorised."""
    lens = hi - lo
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.intp)
    starts = np.repeat(lo - np.cumsum(lens) + lens, lens)
    return starts + np.arange(total)  # type: ignore[no-any-return]


def minimize(dfa: DFA, *, class_bytes: npt.NDArray[np.intp] | None = None) -> DFA:
    """The minimal trimmed DFA of the same language: :func:`minimize_python`'s, computed in Rust
    when the extension imports (:mod:`.kernels`)."""
    if kernels.available():
        return kernels.minimize(dfa)
    return minimize_python(dfa, class_bytes=class_bytes)


def minimize_python(dfa: DFA, *, class_bytes: npt.NDArray[np.intp] | None = None) -> DFA:
    """The minimal trimmed DFA of the same language.

    ``class_bytes``: one byte per class of bytes whose columns of ``dfa.transitions`` are equal,
    when the caller knows them (a product's joint classes): the columns are then not grouped again.

    Moore's partition refinement (Moore 1956) needs as many rounds as the longest chain of states
    it must tell apart, and each round reads the whole table: a 12,000-state key-set complement
    took 0.8 s. So a large DFA is split first: the states no cycle reaches (a JSON Schema's key
    trie, a counted string's chain) form a DAG above the rest; Moore runs on the rest (closed under
    transitions, so its classes are the Nerode classes), and the DAG is classified bottom up, a
    state's class being its (accepting, successors' classes) signature (Revuz 1992's
    minimisation of acyclic automata, over a minimised core).
    """
    d, class_bytes = _trim(dfa.transitions, dfa.accepting, dfa.start, class_bytes)
    if d.start == 0:
        return d
    red = np.ascontiguousarray(d.transitions[:, class_bytes])
    n = d.n_states
    block = _split_classes(red, d.accepting) if n > 256 else _moore(red, d.accepting, max_rounds=64)
    if block is None:  # a long chain in a small DFA
        block = _split_classes(red, d.accepting)
    n_blocks = int(block.max()) + 1
    if n_blocks == n:
        return d
    # renumber: dead state's block -> 0, others in order of first state
    _, first = np.unique(block, return_index=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    block = rank[block]  # state 0 is first, so its block is 0
    reps = first[order]
    new_t = block[d.transitions[reps]].astype(np.int32)
    new_acc = d.accepting[reps]
    return DFA(new_t, new_acc, int(block[d.start]))


def _moore(red: IntArray, accepting: BoolArray,
           max_rounds: int | None = None) -> npt.NDArray[np.int64] | None:
    """Moore's refinement over the class-reduced table ``red`` (dead state 0, never accepting): a
    block id per state, or None after ``max_rounds`` rounds without converging."""
    block = accepting.astype(np.int64) + 1
    block[0] = 0
    n_blocks = len(np.unique(block))
    rounds = 0
    while True:
        rounds += 1
        if max_rounds is not None and rounds > max_rounds:
            return None
        block = row_ids(np.concatenate([block[:, None], block[red]], axis=1))
        count = int(block.max()) + 1
        if count == n_blocks:
            return block
        n_blocks = count


def _split_classes(red: IntArray, accepting: BoolArray) -> npt.NDArray[np.int64]:
    """Nerode class ids of a trimmed DFA's states: Moore on the states some cycle reaches, then the
    others bottom up by signature (see :func:`minimize`). The DAG part is walked in Python: it is
    typically deep and narrow (a counted string's chain: 3,000 levels of one or two states), where a
    numpy pass per level costs more than the states themselves."""
    n = red.shape[0]
    rows = red.tolist()
    srt = np.sort(red, axis=1)  # each state's distinct live successors, as one flat list
    first = np.ones(srt.shape, dtype=np.bool_)
    first[:, 1:] = srt[:, 1:] != srt[:, :-1]
    first &= srt != 0
    succ = srt[first].tolist()
    ptr = np.concatenate([[0], np.cumsum(first.sum(axis=1))]).tolist()
    indeg = np.bincount(srt[first], minlength=n).tolist()
    todo = [s for s in range(1, n) if not indeg[s]]
    order = []  # Kahn: the states no cycle reaches, each after its predecessors
    while todo:
        s = todo.pop()
        order.append(s)
        for c in succ[ptr[s] : ptr[s + 1]]:
            indeg[c] -= 1
            if not indeg[c]:
                todo.append(c)
    dag = np.zeros(n, dtype=np.bool_)
    dag[order] = True
    core = np.flatnonzero(~dag)  # state 0 and the states some cycle reaches (closed under edges)
    new_id = np.zeros(n, dtype=np.int64)
    new_id[core] = np.arange(core.size)
    core_block = _moore(new_id[red[core]].astype(np.int32), accepting[core])
    assert core_block is not None
    cls_arr = np.zeros(n, dtype=np.int64)
    cls_arr[core] = core_block
    cls = cls_arr.tolist()
    acc = accepting.tolist()
    known: dict[tuple[int, ...], int] = {}
    get = cls.__getitem__
    for s, b in zip(core.tolist(), core_block.tolist(), strict=True):
        key = (acc[s], *map(get, rows[s]))
        known[key] = b
    next_id = int(core_block.max()) + 1
    for s in reversed(order):  # successors first
        key = (acc[s], *map(get, rows[s]))
        got = known.get(key)
        if got is None:
            got = known[key] = next_id
            next_id += 1
        cls[s] = got
    return np.array(cls, dtype=np.int64)


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
