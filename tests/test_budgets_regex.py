"""Adversarial regexes (issues 15 and 19): deep group nesting and subset constructions that explode
end, well within 30 s, in a compiled grammar or a ``gm.BudgetExceeded`` naming the budget, its value,
the position and how to raise it; never Python's recursion limit reported as an invalid regex."""

from __future__ import annotations

import pytest

import grammarmask as gm
from grammarmask.automata import regex_to_dfa
from grammarmask.limits import in_force


def test_groups_nested_500_deep_are_refused_by_the_depth_budget() -> None:
    with pytest.raises(gm.BudgetExceeded, match=r"regex_depth budget \(200\)") as e:
        gm.Regex("(" * 500 + "a" + ")" * 500)
    assert (e.value.budget, e.value.value, e.value.where) == ("regex_depth", 200, "line 1, column 201")
    assert "recursion" not in str(e.value) and "invalid regex" not in str(e.value)


def test_groups_nested_up_to_the_budget_compile() -> None:
    d = regex_to_dfa("(" * 200 + "ab" + ")" * 200)
    assert d.matches(b"ab") and not d.matches(b"a")


def test_a_raised_depth_budget_compiles_deeper_groups() -> None:
    with in_force(gm.Limits(regex_depth=600)):
        d = regex_to_dfa("(" * 500 + "a|b" + ")*" * 500)
    assert d.matches(b"abba") and d.matches(b"")


@pytest.mark.parametrize("pattern", [r"\(" * 300 + "a", "[(]" * 300, "[]((]" * 300, "[^](]" * 300 + "a"])
def test_parentheses_escaped_or_in_classes_are_not_groups(pattern: str) -> None:
    assert not regex_to_dfa(pattern).is_empty()


@pytest.mark.parametrize("n", [4000, 10000])
def test_many_optional_characters_hit_the_subset_budget(n: int) -> None:
    with pytest.raises(gm.BudgetExceeded, match=r"regex_subset_work budget \(2000000\)"):
        gm.Regex("a?" * n)


def test_optional_characters_within_the_budget_are_exact() -> None:
    d = regex_to_dfa("a?" * 300 + "b")
    assert d.matches(b"a" * 300 + b"b") and d.matches(b"b") and not d.matches(b"a" * 301 + b"b")
    with (
        in_force(gm.Limits(regex_subset_work=1000)),
        pytest.raises(gm.BudgetExceeded, match="regex_subset_work"),
    ):
        regex_to_dfa("a?" * 301 + "b")
