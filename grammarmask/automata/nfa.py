"""A byte-level Thompson NFA with anchor assertions, and its subset construction.

Zero-width anchors are handled exactly, without lookaround machinery:

* *look-behind* anchors (``\\A``, ``^``, multiline ``^``) depend only on what was already
  read: whether nothing was read yet, or the last byte was ``\\n``. The subset construction
  knows this context when it takes an epsilon closure.
* *look-ahead* anchors (``\\Z``, ``$``, multiline ``$``) put the thread into a *mode* that
  constrains the rest of the input: ``FREE`` (anything), ``NEXT_NL`` (must start with ``\\n``),
  ``REST_NL`` (must be exactly ``\\n``: Python's ``$`` before a final newline) or ``END``
  (must be empty). A DFA state is a set of ``(nfa_state, mode)`` pairs.
"""

from __future__ import annotations

import numpy as np

from ..errors import BudgetExceeded, GrammarError
from . import kernels
from .dfa import DFA, minimize_python

__all__ = ["NFA", "determinize", "determinize_python"]

FREE, NEXT_NL, REST_NL, END = 0, 1, 2, 3
DEAD_MODE = -1
# assertion kinds
A_BEGIN, A_BOL, A_END, A_DOLLAR, A_EOL = range(5)

# _MEET[m][c]: the mode of a thread in mode m that also satisfies constraint c
_MEET = {
    FREE: {FREE: FREE, NEXT_NL: NEXT_NL, REST_NL: REST_NL, END: END},
    NEXT_NL: {FREE: NEXT_NL, NEXT_NL: NEXT_NL, REST_NL: REST_NL, END: DEAD_MODE},
    REST_NL: {FREE: REST_NL, NEXT_NL: REST_NL, REST_NL: REST_NL, END: DEAD_MODE},
    END: {FREE: END, NEXT_NL: DEAD_MODE, REST_NL: DEAD_MODE, END: END},
}
# the rest-of-input constraints each look-ahead anchor allows (a disjunction)
_LOOKAHEAD = {A_END: (END,), A_DOLLAR: (END, REST_NL), A_EOL: (END, NEXT_NL)}


class NFA:
    """A growable Thompson NFA: epsilon edges, byte-range edges, anchor edges."""

    def __init__(self, max_states: int = 1_000_000) -> None:
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[int, int, int]]] = []
        self.asserts: list[list[tuple[int, int]]] = []
        self.max_states = max_states

    def new_state(self) -> int:
        """Add a state and return its id."""
        if len(self.eps) >= self.max_states:
            raise GrammarError(
                f"pattern too large: its automaton needs more than {self.max_states} NFA states"
            )
        self.eps.append([])
        self.edges.append([])
        self.asserts.append([])
        return len(self.eps) - 1

    def add_eps(self, src: int, dst: int) -> None:
        """Add an epsilon edge."""
        self.eps[src].append(dst)

    def add_range(self, src: int, lo: int, hi: int, dst: int) -> None:
        """Add an edge reading one byte in ``lo..hi``."""
        self.edges[src].append((lo, hi, dst))

    def add_assert(self, src: int, kind: int, dst: int) -> None:
        """Add a zero-width anchor edge (``A_BEGIN``, ``A_BOL``, ``A_END``, ``A_DOLLAR``, ``A_EOL``)."""
        self.asserts[src].append((kind, dst))


def _closure(nfa: NFA, kernel: list[int], at_start: bool, prev_nl: bool) -> frozenset[int]:
    """Epsilon closure of configs ``state * 4 + mode`` in the given look-behind context."""
    seen = set(kernel)
    stack = list(kernel)
    eps, asserts = nfa.eps, nfa.asserts
    while stack:
        c = stack.pop()
        q, m = c >> 2, c & 3
        for t in eps[q]:
            tc = (t << 2) | m
            if tc not in seen:
                seen.add(tc)
                stack.append(tc)
        for kind, t in asserts[q]:
            if kind == A_BEGIN:
                modes: tuple[int, ...] = (m,) if at_start else ()
            elif kind == A_BOL:
                modes = (m,) if at_start or prev_nl else ()
            else:
                modes = tuple(_MEET[m][c2] for c2 in _LOOKAHEAD[kind])
            for m2 in modes:
                if m2 == DEAD_MODE:
                    continue
                tc = (t << 2) | m2
                if tc not in seen:
                    seen.add(tc)
                    stack.append(tc)
    return frozenset(seen)


def determinize(nfa: NFA, start: int, final: int, *, max_states: int, max_work: int | None = None) -> DFA:
    """:func:`determinize_python`'s DFA, built in Rust when the extension imports (:mod:`.kernels`)."""
    if not kernels.available():
        return determinize_python(nfa, start, final, max_states=max_states, max_work=max_work)
    got = kernels.determinize(nfa, start, final, max_states, max_work)
    if got == "states":
        raise GrammarError(_TOO_COMPLEX.format(max_states))
    if isinstance(got, str):  # "work": only with a bound
        raise BudgetExceeded("regex_subset_work", max_work or 0, _TOO_MUCH_WORK)
    return got


_TOO_COMPLEX = ("pattern too complex: its DFA needs more than {} states (raise max_states, or simplify "
                "the pattern)")
_TOO_MUCH_WORK = "the subset construction visits more NFA states than this"


def determinize_python(nfa: NFA, start: int, final: int, *, max_states: int,
                       max_work: int | None = None) -> DFA:
    """Subset construction, then trimming and minimisation.

    Raises :class:`GrammarError` as soon as more than ``max_states`` DFA states are needed, and
    :class:`BudgetExceeded` (``regex_subset_work``) as soon as the NFA states of the DFA states
    built sum to more than ``max_work`` (``"a?" * 4000``: 4,001 states of up to 8,000 NFA states
    each, which took 14 s and 1.6 GB).
    """
    work = 0
    index: dict[frozenset[int], int] = {frozenset(): 0}
    init = _closure(nfa, [start << 2], True, False)
    index[init] = 1
    todo = [init]
    rows_s: list[int] = []
    rows_lo: list[int] = []
    rows_hi: list[int] = []
    rows_t: list[int] = []
    accepting = [False, False]
    fin_free, fin_end = (final << 2) | FREE, (final << 2) | END
    accepting[1] = fin_free in init or fin_end in init
    edges = nfa.edges
    closures: dict[tuple[frozenset[int], bool], frozenset[int]] = {}
    while todo:
        cur = todo.pop()
        sid = index[cur]
        # collect (lo, hi, target config) for all threads
        moves: list[tuple[int, int, int]] = []
        for c in cur:
            q, m = c >> 2, c & 3
            if m == END:
                continue
            for lo, hi, t in edges[q]:
                if m == FREE:
                    moves.append((lo, hi, t << 2))
                elif lo <= 10 <= hi:  # NEXT_NL / REST_NL: only a newline may follow
                    moves.append((10, 10, (t << 2) | (FREE if m == NEXT_NL else END)))
        if not moves:
            continue
        events: dict[int, list[tuple[int, int]]] = {10: [], 11: []}
        for lo, hi, t in moves:
            events.setdefault(lo, []).append((t, 1))
            events.setdefault(hi + 1, []).append((t, -1))
        active: dict[int, int] = {}
        bounds = sorted(events)
        for i in range(len(bounds) - 1):
            a, b = bounds[i], bounds[i + 1]
            for t, delta in events[a]:
                cnt = active.get(t, 0) + delta
                if cnt:
                    active[t] = cnt
                else:
                    del active[t]
            if not active or a > 255:
                continue
            key = (frozenset(active), a == 10)
            closed = closures.get(key)
            if closed is None:
                closed = _closure(nfa, list(active), False, a == 10)
                closures[key] = closed
            tid = index.get(closed)
            if tid is None:
                tid = len(index)
                if tid > max_states:
                    raise GrammarError(_TOO_COMPLEX.format(max_states))
                index[closed] = tid
                work += len(closed)
                if max_work is not None and work > max_work:
                    raise BudgetExceeded("regex_subset_work", max_work, _TOO_MUCH_WORK)
                accepting.append(fin_free in closed or fin_end in closed)
                todo.append(closed)
            rows_s.append(sid)
            rows_lo.append(a)
            rows_hi.append(b - 1)
            rows_t.append(tid)
    n = len(index)
    table = np.zeros((n, 256), dtype=np.int32)
    if rows_s:
        src = np.array(rows_s, dtype=np.intp)
        lo_arr = np.array(rows_lo, dtype=np.intp)
        lens = np.array(rows_hi, dtype=np.intp) - lo_arr + 1
        flat_s = np.repeat(src, lens)
        offs = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        flat_b = np.repeat(lo_arr, lens) + offs
        table[flat_s, flat_b] = np.repeat(np.array(rows_t, dtype=np.int32), lens)
    return minimize_python(DFA(table, np.array(accepting, dtype=np.bool_), 1))
