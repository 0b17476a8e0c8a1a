"""Regex parse trees to DFAs by composing small DFAs, without a subset construction.

Concatenation, repetition and alternation of DFAs are deterministic when the pieces do not compete
for a byte: ``A B`` is built by giving every accepting state of ``A`` the transitions of ``B``'s
start state, which is exact when, in each accepting state of ``A``, the bytes that continue ``A``
and the bytes that start ``B`` are disjoint (then every input splits between ``A`` and ``B`` in
exactly one place, chosen by the next byte). ``X{m,n}`` glues ``n`` numbered copies of ``X`` this
way (numpy tiling: no per-state Python work), and ``A|B`` merges the two start rows when they are
disjoint, else takes the product automaton of the overlapping part. All states live in one arena
and each operation touches only the rows it changes (every parse-tree node is used once), so the
cost is linear in the result, not quadratic in the nesting depth. Where a condition fails, or the
tree uses anything else (anchors, lookaround, ...), :func:`direct_dfa` returns None and the caller
uses the general NFA path. JSON Schema's bounded strings (``"char{0,1024}"``) are the case this is
for: thousands of states, each costing the subset construction a Python loop.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt

from .dfa import DFA, minimize
from .sre import C

__all__ = ["direct_dfa"]

IntArray = npt.NDArray[np.int32]
IdArray = npt.NDArray[np.intp]

_IGNORECASE = int(re.IGNORECASE)  # a plain int: ``int & re.IGNORECASE`` is an enum call (~1 us)


class _Fail(Exception):
    """The tree is outside what this module composes; use the NFA path."""


class _Frag:
    """A sub-automaton in the arena: its ``start``, its accepting states, and the arena range
    ``lo..hi-1`` holding every state it uses (its transitions never leave that range but to 0)."""

    __slots__ = ("acc", "hi", "lo", "start")

    def __init__(self, start: int, acc: IdArray, lo: int, hi: int) -> None:
        self.start, self.acc, self.lo, self.hi = start, acc, lo, hi


class _Arena:
    def __init__(self, limit: int) -> None:
        self.t = np.zeros((256, 256), np.int32)
        self.n = 1  # state 0: dead
        self.limit = limit

    def alloc(self, k: int) -> int:
        """Append ``k`` all-dead rows; returns the first new id."""
        base = self.n
        if base + k > self.limit:
            raise _Fail
        if base + k > self.t.shape[0]:
            grown = np.zeros((min(max(2 * self.t.shape[0], base + k), self.limit), 256), np.int32)
            grown[:base] = self.t[:base]
            self.t = grown
        self.n = base + k
        return base

    def copy_in(self, table: IntArray, states: IdArray) -> int:
        """Copy rows ``states`` of ``table`` (targets renumbered alike); the new id of ``states[0]``."""
        base = self.alloc(len(states))
        remap = np.zeros(table.shape[0], np.int32)
        remap[states] = np.arange(base, base + len(states), dtype=np.int32)
        self.t[base : base + len(states)] = remap[table[states]]
        return base


def _merge(t: IntArray, rows: IdArray, src: IntArray) -> None:
    """Give states ``rows`` the transitions of row(s) ``src`` too; _Fail if a byte is taken twice."""
    block = t[rows]
    if ((block != 0) & (src != 0)).any():
        raise _Fail
    t[rows] = np.where(block != 0, block, src)


# pair states the products of one pattern may create before the subset construction takes over
_PRODUCT_BUDGET = 256


class _Composer:
    def __init__(self, charset: Any, max_rows: int) -> None:
        self.charset = charset  # (op, av, flags) -> minimal DFA of one character
        self.a = _Arena(max_rows)
        self.product_budget = _PRODUCT_BUDGET

    # ---- leaves ----
    def chain(self, data: bytes) -> _Frag:
        a = self.a
        base = a.alloc(len(data) + 1)
        ids = np.arange(base, base + len(data), dtype=np.intp)
        a.t[ids, np.frombuffer(data, np.uint8)] = ids + 1
        return _Frag(base, np.array([base + len(data)], np.intp), base, a.n)

    def eps(self) -> _Frag:
        return self.chain(b"")

    def empty(self) -> _Frag:
        return _Frag(0, np.zeros(0, np.intp), self.a.n, self.a.n)

    def char(self, op: Any, av: Any, flags: int) -> _Frag:
        dfa = self.charset(op, av, flags)
        if dfa.start == 0:
            return self.empty()
        states = np.arange(1, dfa.n_states, dtype=np.intp)
        base = self.a.copy_in(dfa.transitions, states)
        return _Frag(base + dfa.start - 1, np.flatnonzero(dfa.accepting) - 1 + base, base, self.a.n)

    # ---- operations ----
    def concat(self, x: _Frag, y: _Frag) -> _Frag:
        if x.start == 0 or y.start == 0:
            return self.empty()
        t = self.a.t
        _merge(t, x.acc, t[y.start])
        y_eps = bool((y.acc == y.start).any())
        acc = np.concatenate([y.acc, x.acc]) if y_eps else y.acc
        return _Frag(x.start, acc, min(x.lo, y.lo), max(x.hi, y.hi))

    def without_eps(self, x: _Frag) -> _Frag:
        """``x`` minus the empty string: a fresh non-accepting start with the old start's row."""
        if not (x.acc == x.start).any():
            return x
        s = self.a.alloc(1)
        self.a.t[s] = self.a.t[x.start]
        return _Frag(s, x.acc, x.lo, self.a.n)

    def repeat(self, x: _Frag, lo: int, hi: int | None) -> _Frag:
        """``x{lo,hi}`` (``hi`` None: unbounded): numbered copies of ``x`` glued one after the other."""
        if x.start != 0 and (x.acc == x.start).any():  # with "" in x, x{lo,hi} = (x - ""){0,hi}
            x, lo = self.without_eps(x), 0
        if hi == 0 or x.start == 0 or x.acc.size == 0:
            return self.eps() if lo == 0 else self.empty()
        a = self.a
        loop = hi is None
        k = lo + 1 if hi is None else hi  # numbered copies (the last one loops when unbounded)
        if k > 2:
            x = self.minimal(x)
        m = x.hi - x.lo
        base = a.alloc(k * m + 1)
        fresh = base + k * m
        rows = a.t[x.lo : x.hi]
        shift = (base - x.lo + np.arange(k, dtype=np.int32) * m)[:, None, None]
        a.t[base:fresh] = np.where(rows[None] != 0, rows[None] + shift, 0).reshape(k * m, 256)
        acc_x = x.acc - x.lo + base
        starts = x.start - x.lo + base + np.arange(k) * m
        copies_acc = acc_x[None, :] + (np.arange(k) * m)[:, None]  # (k, n_acc)
        nxt = np.minimum(np.arange(k) + 1, k - 1) if loop else np.arange(1, k)
        glued = copies_acc if loop else copies_acc[:-1]
        src = a.t[starts[nxt]]  # (glued copies, 256)
        block = a.t[glued]
        if ((block != 0) & (src[:, None, :] != 0)).any():
            raise _Fail
        a.t[glued] = np.where(block != 0, block, src[:, None, :])
        a.t[fresh] = a.t[starts[0]]
        done = np.arange(k) + 1 >= lo  # copy i completes i+1 repetitions
        if loop:
            done[-1] = True
        acc = copies_acc[done].reshape(-1)
        if lo == 0:
            acc = np.concatenate([acc, [fresh]])
        return _Frag(fresh, acc.astype(np.intp), base, a.n)

    def minimal(self, x: _Frag) -> _Frag:
        """``x`` as a fresh copy of its minimal DFA (before making many copies of it)."""
        rows = self.a.t[x.lo : x.hi]
        local = np.zeros((x.hi - x.lo + 1, 256), np.int32)
        local[1:] = np.where(rows != 0, rows - (x.lo - 1), 0)
        acc = np.zeros(local.shape[0], np.bool_)
        acc[x.acc - (x.lo - 1)] = True
        d = minimize(DFA(local, acc, x.start - x.lo + 1))
        if d.start == 0:
            return self.empty()
        base = self.a.copy_in(d.transitions, np.arange(1, d.n_states, dtype=np.intp))
        return _Frag(base + d.start - 1, np.flatnonzero(d.accepting) - 1 + base, base, self.a.n)

    def union(self, x: _Frag, y: _Frag) -> _Frag:
        if x.start == 0:
            return y
        if y.start == 0:
            return x
        a = self.a
        rx, ry = a.t[x.start], a.t[y.start]
        lo = min(x.lo, y.lo)
        if not ((rx != 0) & (ry != 0)).any():
            s = a.alloc(1)
            a.t[s] = np.where(rx != 0, rx, a.t[y.start])
            acc = np.concatenate([x.acc, y.acc])
            if (x.acc == x.start).any() or (y.acc == y.start).any():
                acc = np.concatenate([acc, [s]])
            return _Frag(s, acc.astype(np.intp), lo, a.n)
        return self.product(x, y, lo)

    def product(self, x: _Frag, y: _Frag, lo: int) -> _Frag:
        """The union by pairs; a pair with one side dead is that side's own state (no copy)."""
        a = self.a
        if self.product_budget <= 0:
            raise _Fail  # many overlapping alternatives: pairwise products grow quadratic
        acc_x, acc_y = set(x.acc.tolist()), set(y.acc.tolist())
        index: dict[tuple[int, int], int] = {}
        todo: list[tuple[int, int]] = []

        def state(p: int, q: int) -> int:
            if p == 0 or q == 0:
                return p or q
            s = index.get((p, q))
            if s is None:
                s = index[(p, q)] = a.alloc(1)
                self.product_budget -= 1
                todo.append((p, q))
            return s

        start = state(x.start, y.start)
        acc = list(acc_x | acc_y)
        while todo:
            p, q = todo.pop()
            s = index[(p, q)]
            if p in acc_x or q in acc_y:
                acc.append(s)
            rp, rq = a.t[p], a.t[q]
            both = np.flatnonzero((rp != 0) & (rq != 0))
            row = np.where(rp != 0, rp, rq)
            for b, pp, qq in zip(both.tolist(), rp[both].tolist(), rq[both].tolist(), strict=True):
                row[b] = state(pp, qq)
            a.t[s] = row
        return _Frag(start, np.array(acc, np.intp), lo, a.n)

    # ---- the tree ----
    def seq(self, items: Any, flags: int) -> _Frag:
        out: _Frag | None = None
        run: list[int] = []

        def flush() -> None:
            nonlocal out
            if run:
                piece = self.chain("".join(map(chr, run)).encode("utf-8"))
                out = piece if out is None else self.concat(out, piece)
                run.clear()

        for op, av in items:
            if op is C.LITERAL and not flags & _IGNORECASE and not 0xD800 <= av <= 0xDFFF:
                run.append(av)
                continue
            flush()
            piece = self.node(op, av, flags)
            out = piece if out is None else self.concat(out, piece)
        flush()
        return out if out is not None else self.eps()

    def node(self, op: Any, av: Any, flags: int) -> _Frag:
        if op in (C.LITERAL, C.NOT_LITERAL, C.IN, C.ANY):
            return self.char(op, av, flags)
        if op is C.SUBPATTERN:
            _, add, delete, sub = av
            return self.seq(sub, (flags | add) & ~delete)
        if op is C.BRANCH:
            alts = av[1]
            out = self.seq(alts[0], flags)
            for alt in alts[1:]:
                out = self.union(out, self.seq(alt, flags))
            return out
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av
            return self.repeat(self.seq(sub, flags), lo, None if hi is C.MAXREPEAT else hi)
        raise _Fail  # anchors, lookaround, backreferences, ...: the NFA path handles or reports them


def direct_dfa(
    tree: Any, flags: int, charset: Any, max_rows: int
) -> tuple[IntArray, npt.NDArray[np.bool_], int] | None:
    """``(table, accepting, start)`` of a parsed pattern by composition (not minimal, may hold
    unreachable states), or None if it does not apply.

    ``charset(op, av, flags)`` returns the minimal :class:`~.dfa.DFA` of one character node;
    more than ``max_rows`` states on the way gives None too.
    """
    c = _Composer(charset, max_rows)
    try:
        frag = c.seq(tree, flags)
    except _Fail:
        return None
    t = c.a.t[: c.a.n]
    acc = np.zeros(c.a.n, np.bool_)
    acc[frag.acc] = True
    acc[0] = False
    return t, acc, frag.start
