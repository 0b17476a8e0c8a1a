"""``minimize`` on large DFAs: the Python code (Moore on the states some cycle reaches, the DAG
above them by signature) and the Rust kernel (Hopcroft) the dispatcher uses when the extension imports.

The reference is Moore's refinement run on the whole table (the textbook algorithm, no split): the
same number of states and the same language, state for state (isomorphic), on generated DFAs that
mix long chains, tries and cycles, past the 256 states where the split starts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings

from grammarmask.automata import kernels
from grammarmask.automata.dfa import DFA, _moore, _reduced, minimize_python, trim

from .support import isomorphic
from .support_automata import dfas


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


@pytest.mark.parametrize("minimize_fn", [minimize_python, kernels.minimize], ids=["python", "rust"])
@settings(max_examples=60, deadline=None)
@given(d=dfas())
def test_minimize_equals_plain_moore(minimize_fn: Callable[[DFA], DFA], d: DFA) -> None:
    got, want = minimize_fn(d), moore_minimal(d)
    assert got.n_states == want.n_states
    assert isomorphic(got, want)


@pytest.mark.parametrize("minimize_fn", [minimize_python, kernels.minimize], ids=["python", "rust"])
def test_a_long_chain_over_a_cycle_minimises_to_its_distinct_suffixes(
    minimize_fn: Callable[[DFA], DFA],
) -> None:
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
    d = minimize_fn(DFA(t, acc, 1))
    assert d.n_states == n
    assert d.matches(b"a" * 3000 + b"bb") and not d.matches(b"a" * 3001 + b"b") and not d.matches(b"a")
