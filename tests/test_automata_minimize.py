"""``minimize`` on large DFAs: Moore on the states some cycle reaches, the DAG above them by signature.

The reference is Moore's refinement run on the whole table (the textbook algorithm, no split): the
same number of states and the same language, state for state (isomorphic), on generated DFAs that
mix long chains, tries and cycles, past the 256 states where the split starts.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from grammarmask.automata.dfa import DFA, _moore, _reduced, minimize, trim

from .support import isomorphic


def moore_minimal(d: DFA) -> DFA:
    """The minimal DFA by plain Moore refinement over all states, numbered by first state."""
    t = trim(d.transitions, d.accepting, d.start)
    if t.start == 0:
        return t
    red, _, _ = _reduced(t.transitions)
    block = _moore(red, t.accepting)
    assert block is not None
    _, first = np.unique(block, return_index=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    reps = first[order]
    new = rank[block]
    return DFA(new[t.transitions[reps]].astype(np.int32), t.accepting[reps], int(new[t.start]))


@st.composite
def dfas(draw: st.DrawFn) -> DFA:
    """257 to 700 states, each a copy of a state of a small random DFA (a DAG part above a cyclic
    part, or either alone): most states have equivalent copies, so the minimal DFA merges them."""
    m = draw(st.integers(2, 30))
    m_dag = draw(st.integers(1, m))  # types 1..m_dag-1 acyclic (edges to higher types), the rest cyclic
    n = draw(st.integers(257, 700))  # past 256 states, where minimize splits
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    cols = rng.choice(256, size=draw(st.integers(1, 4)), replace=False)
    q = np.zeros((m, len(cols)), dtype=np.int64)
    for s in range(1, m):
        for j in range(len(cols)):
            if rng.random() < 0.15:
                continue
            lo = s + 1 if s < m_dag else m_dag
            q[s, j] = rng.integers(lo, m) if lo < m else 0
    q_acc = rng.random(m) < 0.6
    q_acc[0] = False
    # unfold breadth first from the start: a fresh copy per edge until there are n states, then
    # edges to random existing copies (so every state is reachable and most have twins)
    kind = [0, 1]
    copies: dict[int, list[int]] = {1: [1]}
    edges: list[tuple[int, int, int]] = []
    todo = [1]
    while todo:
        s = todo.pop(0)
        for j, c in enumerate(cols):
            want = int(q[kind[s], j])
            if not want:
                continue
            if len(kind) < n or want not in copies:
                target = len(kind)
                kind.append(want)
                copies.setdefault(want, []).append(target)
                todo.append(target)
            else:
                target = int(rng.choice(copies[want]))
            edges.append((s, int(c), target))
    t = np.zeros((len(kind), 256), dtype=np.int32)
    for s, c, target in edges:
        t[s, c] = target
    return DFA(t, q_acc[np.array(kind)], 1)


@settings(max_examples=60, deadline=None)
@given(d=dfas())
def test_minimize_equals_plain_moore(d: DFA) -> None:
    got, want = minimize(d), moore_minimal(d)
    assert got.n_states == want.n_states
    assert isomorphic(got, want)


def test_a_long_chain_over_a_cycle_minimises_to_its_distinct_suffixes() -> None:
    # "a{0,3000}b+": 3,001 chain states over a one-state cycle; every chain state is distinct
    n = 3003
    t = np.zeros((n, 256), dtype=np.int32)
    for s in range(1, 3002):
        if s < 3001:
            t[s, ord("a")] = s + 1
        t[s, ord("b")] = 3002
    t[3002, ord("b")] = 3002
    acc = np.zeros(n, dtype=bool)
    acc[3002] = True
    d = minimize(DFA(t, acc, 1))
    assert d.n_states == n
    assert d.matches(b"a" * 3000 + b"bb") and not d.matches(b"a" * 3001 + b"b") and not d.matches(b"a")
