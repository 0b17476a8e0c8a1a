"""An incremental Earley recognizer over terminal ids with a persistent chart.

Earley (1970), "An efficient context-free parsing algorithm", CACM 13(2); nullable symbols handled as
in Aycock & Horspool (2002), "Practical Earley Parsing", The Computer Journal 45(6): when an item
predicts a nullable nonterminal it is also advanced over it at once, so completions never have to look
back into the set being built. Right recursion uses Leo (1991), "A general context-free parsing
algorithm running in linear time on every LR(k) grammar without using lookahead", TCS 82(1): a
complete item whose origin set has exactly one item waiting on its left-hand side, and that item
becomes complete when advanced, completes the top of the deterministic reduction path directly
(memoised per set and symbol as a "transitive item"), so long right-recursive outputs stay linear.

Notation follows Earley: an item is ``(A -> alpha . beta, j)``, stored as ``(dot, j)`` where ``dot``
numbers the dotted rules (LR(0) items). ``E_k`` (an :class:`EarleySet`) is immutable once built.
``advance(t)`` builds ``E_{k+1}`` from ``E_k`` and terminal ``t``. Items point at their origin sets, so a
state that holds one set holds the part of the chart it needs: fork and rollback are O(1), and sets
built speculatively (for masks) are freed as soon as nothing refers to them.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

from ..errors import BudgetExceeded
from ..ir.cfg import Cfg
from ..limits import Limits, active

__all__ = ["EarleyGrammar", "EarleySet"]


class EarleyGrammar:
    """The dotted-rule tables of a :class:`Cfg`, shared by all sets built from it."""

    def __init__(self, cfg: Cfg, limits: Limits | None = None) -> None:
        self.cfg = cfg
        limits = limits or active()
        self.sig_limit = limits.earley_signatures
        self.items_per_set = limits.earley_items_per_set
        nullable = cfg.nullable()
        # Dotted rules: for rule r with n symbols, dots d = base[r] .. base[r] + n.
        self.next_sym: list[int | None] = []
        self.lhs: list[int] = []
        self.rule_of: list[int] = []
        starts: dict[int, list[int]] = {}
        for ri, r in enumerate(cfg.rules):
            base = len(self.next_sym)
            starts.setdefault(r.lhs, []).append(base)
            for d in range(len(r.rhs) + 1):
                self.next_sym.append(r.rhs[d] if d < len(r.rhs) else None)
                self.lhs.append(r.lhs)
                self.rule_of.append(ri)
        self.starts = starts
        self.nullable = [i in nullable for i in range(len(cfg.nonterminals))]
        self._prediction_tables(len(cfg.nonterminals))
        self.start = cfg.start
        self.n_terminals = len(cfg.terminals)
        #: the sets built last, held so that speculative sets asked again soon (the next steps inside
        #: one lexeme ask the same ones) are not rebuilt; older ones are freed when nothing else holds them
        self.recent: deque[EarleySet] = deque(maxlen=limits.earley_recent)
        self._sigs: dict[Hashable, int] = {}
        self._sig_lock = threading.Lock()
        self._next_sig = 0

    def __getstate__(self) -> dict[str, Any]:
        """The tables alone (for :mod:`grammarmask.compile_cache`): no lock, no sets, no signatures."""
        state = dict(self.__dict__)
        del state["_sig_lock"]
        state.update(recent=self.recent.maxlen, _sigs={}, _next_sig=0)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.recent = deque(maxlen=state["recent"])
        self._sig_lock = threading.Lock()

    def intern(self, key: Hashable) -> int:
        """A small int naming ``key``; equal keys get equal ids (ids are never reused)."""
        with self._sig_lock:
            sid = self._sigs.get(key)
            if sid is None:
                if len(self._sigs) >= self.sig_limit:
                    self._sigs.clear()
                sid = self._sigs[key] = self._next_sig
                self._next_sig += 1
            return sid

    def _prediction_tables(self, n: int) -> None:
        """Static prediction closures: predicting ``Z`` in ``E_k`` always adds the same items.

        ``own[Z]``: the dots of ``Z``'s rules at their start or past a prefix of nullable symbols
        (Aycock-Horspool); ``reach[Z]``: every nonterminal predicted along with ``Z``;
        ``own_scan[Z]`` / ``own_wait[Z]``: those dots keyed by the terminal / nonterminal they expect,
        as items predicted in the set being built (see :data:`Item`). The tables are tuples of ints,
        which the garbage collector stops tracking: as lists they were most of a compiled grammar's
        objects, and every full collection walked them all.
        """
        nxt, nullable = self.next_sym, self.nullable
        own: list[list[int]] = []
        for z in range(n):
            dots = []
            for d in self.starts.get(z, ()):
                dots.append(d)
                while (sym := nxt[d]) is not None and sym >= 0 and nullable[sym]:
                    d += 1
                    dots.append(d)
            own.append(dots)
        self.own_scan: list[tuple[tuple[int, int], ...]] = [
            tuple([(~s, d << _SHIFT) for d in dots if (s := nxt[d]) is not None and s < 0]) for dots in own]
        self.own_wait: list[tuple[tuple[int, int], ...]] = [
            tuple([(s, d << _SHIFT) for d in dots if (s := nxt[d]) is not None and s >= 0]) for dots in own]
        reach: list[tuple[int, ...]] = []
        for z in range(n):
            seen = {z}
            todo = [z]
            while todo:
                y = todo.pop()
                for w, _ in self.own_wait[y]:
                    if w not in seen:
                        seen.add(w)
                        todo.append(w)
            reach.append(tuple(seen))
        self.reach = reach
        self.reach_set = [frozenset(r) for r in reach]
        # Whole-closure contributions, for predictions that overlap nothing predicted yet.
        self.pred_scan: list[tuple[tuple[int, tuple[int, ...]], ...]] = []
        self.pred_wait: list[tuple[tuple[int, tuple[int, ...]], ...]] = []
        for z in range(n):
            sc: dict[int, list[int]] = {}
            wt: dict[int, list[int]] = {}
            for y in reach[z]:
                for t, d in self.own_scan[y]:
                    sc.setdefault(t, []).append(d)
                for w, d in self.own_wait[y]:
                    wt.setdefault(w, []).append(d)
            self.pred_scan.append(tuple([(t, tuple(d)) for t, d in sc.items()]))
            self.pred_wait.append(tuple([(w, tuple(d)) for w, d in wt.items()]))

    def initial(self) -> EarleySet:
        """``E_0``: the predictions of the start symbol."""
        return EarleySet(self, 0, (), predict=self.start)


#: An item ``(dot, origin)`` as one int: ``dot << _SHIFT | k``, where ``k`` is 0 for an item predicted
#: in its own set, else the origin set is ``origins[k - 1]`` of the set that holds the item. Ints, not
#: tuples that point at sets: the collector does not track them (a chart is tens of thousands of items).
Item = int
_SHIFT = 32
_SLOT = (1 << _SHIFT) - 1


class EarleySet:
    """``E_k``: an immutable Earley set. ``allowed`` is the set of terminals it can scan.

    ``accepting`` is true when the terminals read so far form a sentence of the grammar. Items refer
    to their origin sets directly, so a set keeps exactly the part of the chart it can still complete
    into; a set nothing refers to any more is freed by reference counting.
    """

    __slots__ = ("g", "index", "waiting", "scan", "origins", "allowed", "accepting", "predicted", "sig",
                 "size", "reach", "odepth", "_next", "_leo", "memo", "__weakref__")

    waiting: dict[int, tuple[Item, ...]]
    scan: dict[int, tuple[Item, ...]]
    #: the origin sets of this set's items (see :data:`Item`)
    origins: tuple[EarleySet, ...]
    allowed: frozenset[int]
    accepting: bool
    #: the nonterminals predicted here, sorted
    predicted: tuple[int, ...]
    sig: int
    #: number of items besides the predictions (a diagnostic: Leo keeps it flat on right recursion)
    size: int
    #: how far (in origin hops from the set this one was advanced from) building this set looked into
    #: older sets, and how far its items' origins lie: bounds for :meth:`shallow_sig` users
    reach: int
    odepth: int

    def __init__(self, g: EarleyGrammar, index: int, kernel: Iterable[tuple[int, EarleySet, int]],
                 predict: int | None = None) -> None:
        self.g = g
        self.index = index
        self._next: dict[int, Any] = {}
        self._leo: dict[int, tuple[tuple[int, EarleySet] | None, int, int]] = {}
        self.memo: dict[object, object] = {}
        self._close(kernel, predict)

    def _close(self, kernel: Iterable[tuple[int, EarleySet, int]], predict: int | None) -> None:
        """Complete and predict. Items with origin ``k`` (predictions) are kept as the set
        ``predicted`` of nonterminals; their dots come from the grammar's static tables."""
        g = self.g
        next_sym, lhs, nullable = g.next_sym, g.lhs, g.nullable
        reach, own_scan, own_wait = g.reach, g.own_scan, g.own_wait
        reach_set, pred_scan, pred_wait = g.reach_set, g.pred_scan, g.pred_wait
        start = g.start
        items: set[int] = set()
        slot_of: dict[EarleySet, int] = {}  # origin set -> k (see Item); sets hash by identity
        origins: list[EarleySet] = []
        waiting: dict[int, list[Item]] = {}
        scan: dict[int, list[Item]] = {}
        predicted: set[int] = set()

        def predict_(x: int) -> None:
            if predicted.isdisjoint(reach_set[x]):
                predicted.update(reach_set[x])
                for t, its in pred_scan[x]:
                    lst = scan.get(t)
                    if lst is None:
                        scan[t] = list(its)
                    else:
                        lst.extend(its)
                for y, its in pred_wait[x]:
                    lst = waiting.get(y)
                    if lst is None:
                        waiting[y] = list(its)
                    else:
                        lst.extend(its)
                return
            for z in reach[x]:
                if z not in predicted:
                    predicted.add(z)
                    for t, it in own_scan[z]:
                        scan.setdefault(t, []).append(it)
                    for y, it in own_wait[z]:
                        waiting.setdefault(y, []).append(it)

        if predict is not None:
            predict_(predict)
        # Agenda entries carry the depth of the item's origin in origin hops from the parent set.
        agenda: list[tuple[int, EarleySet, int]] = list(kernel)
        accepting = False
        deref = 0
        odepth = 0
        budget = g.items_per_set
        while agenda:
            budget -= 1
            if budget < 0:
                raise BudgetExceeded(
                    "earley_items_per_set", g.items_per_set,
                    "an Earley set needs more items than allowed (a highly ambiguous grammar?)",
                    where=f"lexeme {self.index}", compile_time=True)
            dot, origin, depth = agenda.pop()
            k = slot_of.get(origin)
            if k is None:
                origins.append(origin)
                k = slot_of[origin] = len(origins)
            it = dot << _SHIFT | k
            if it in items:
                continue
            items.add(it)
            sym = next_sym[dot]
            if sym is None:
                x = lhs[dot]
                src = origin
                if depth > deref:
                    deref = depth
                if x == start and src.index == 0:
                    accepting = True
                leo, ldepth, lreach = src._leo_item(x)
                if leo is not None:
                    if depth + lreach > deref:
                        deref = depth + lreach
                    agenda.append((leo[0], leo[1], depth + ldepth))
                    continue
                for it2 in src.waiting.get(x, ()):
                    k2 = it2 & _SLOT
                    if k2:
                        agenda.append(((it2 >> _SHIFT) + 1, src.origins[k2 - 1], depth + 1))
                    else:
                        agenda.append(((it2 >> _SHIFT) + 1, src, depth))
            else:
                if depth > odepth:
                    odepth = depth
                if sym >= 0:
                    waiting.setdefault(sym, []).append(it)
                    if sym not in predicted:
                        predict_(sym)
                    if nullable[sym]:
                        agenda.append((dot + 1, origin, depth))
                else:
                    scan.setdefault(~sym, []).append(it)
        self.reach = deref
        self.odepth = odepth
        self.predicted = tuple(sorted(predicted))
        self.size = len(items)
        self.origins = tuple(origins)
        self.waiting = {y: tuple(v) for y, v in waiting.items()}
        self.scan = {t: tuple(v) for t, v in scan.items()}
        self.allowed = frozenset(scan)
        self.accepting = accepting or (self.index == 0 and nullable[start])
        # Tuples of ints (not frozensets): the garbage collector stops tracking them.
        self.sig = g.intern((tuple(sorted([(it >> _SHIFT, origins[(it & _SLOT) - 1].sig) for it in items])),
                             self.predicted))

    def _leo_item(self, x: int) -> tuple[tuple[int, EarleySet] | None, int, int]:
        """Leo's topmost complete item for completing ``x`` into this set, if the path is deterministic.

        Only non-start, non-nullable items participate; the result is a complete item to add in place of
        the whole chain of completions (intermediate items are skipped: a recognizer never needs them).
        Also returns the depth (origin hops from this set) of the item's origin and the deepest set
        looked at.
        """
        try:
            return self._leo[x]
        except KeyError:
            pass
        result: tuple[tuple[int, EarleySet] | None, int, int] = (None, 0, 0)
        w = self.waiting.get(x, ())
        if len(w) == 1 and w[0] & _SLOT:
            d = w[0] >> _SHIFT
            o = self.origins[(w[0] & _SLOT) - 1]
            g = self.g
            if g.next_sym[d + 1] is None:
                if not (g.lhs[d] == g.start and o.index == 0):
                    up, udepth, ureach = o._leo_item(g.lhs[d])
                    result = (up, udepth + 1, ureach + 1) if up is not None else ((d + 1, o), 1, 1)
                else:
                    result = (None, 0, 1)
        self._leo[x] = result
        return result

    def allowed_terminals(self) -> frozenset[int]:
        """The terminals (ids into ``Cfg.terminals``) this set can scan next."""
        return self.allowed

    def shallow_sig(self, depth: int) -> int:
        """A structural name of this set and the sets within ``depth`` origin hops (deeper: a
        placeholder). Equal values mean equal behaviour for any computation that looks no deeper."""
        if depth <= 0:
            return -1
        key = ("shallow", depth)
        hit = self.memo.get(key)
        if hit is not None:
            return hit  # type: ignore[return-value]
        origins = self.origins
        parts = sorted([(it >> _SHIFT, origins[(it & _SLOT) - 1].shallow_sig(depth - 1))
                        for lst in (*self.scan.values(), *self.waiting.values()) for it in lst if it & _SLOT])
        sid = self.g.intern(("shallow", tuple(parts), self.predicted, self.accepting, self.index == 0))
        self.memo[key] = sid
        return sid

    def advance(self, t: int) -> EarleySet | None:
        """``E_{k+1}`` after terminal ``t``, or None if no item scans ``t``.

        Memoised through a weak reference: a speculative set nobody holds is freed at once.
        """
        ref = self._next.get(t)
        if ref is not None:
            if ref is _NONE:
                return None
            nxt: EarleySet | None = ref()
            if nxt is not None:
                return nxt
        src = self.scan.get(t)
        if src is None:
            self._next[t] = _NONE
            return None
        origins = self.origins
        nxt = EarleySet(self.g, self.index + 1,
                        [((it >> _SHIFT) + 1, origins[k - 1], 1) if (k := it & _SLOT) else
                         ((it >> _SHIFT) + 1, self, 0) for it in src])
        self._next[t] = weakref.ref(nxt)
        self.g.recent.append(nxt)
        return nxt


_NONE: Any = object()
