"""The composed regex DFAs (automata/direct.py) against ``re.fullmatch`` and against the NFA path."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammarmask.automata import DFA, minimize, regex
from grammarmask.automata.direct import direct_dfa
from grammarmask.errors import GrammarError

from .support import isomorphic

ALPHABET = ["a", "b", '"', "\\", "é", "ę", "中", "\U0001f600", "\n"]

_atoms = st.sampled_from(
    [
        "a", "b", "é", "中", r"\\", '"', ".", "[ab]", "[^a]", "[^é]", "[a-é]", r"[^\"\\]", "[\u00e0-\u4e2d]",
        r"\d", r"\w", "[^\U0001f600]", "(?:)",
    ]
)  # fmt: skip


def _regexes() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map(lambda p: f"(?:{p[0]}|{p[1]})"),
            st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{0,3}", "{1,4}", "{2,}", "*?"])).map(
                lambda p: f"(?:{p[0]}){p[1]}"
            ),
        )

    return st.recursive(_atoms, extend, max_leaves=8)


def _composed(pattern: str) -> DFA | None:
    """The composer's DFA (minimised), or None where it declines."""
    raw = direct_dfa(regex.parse(pattern), 0, regex._charset_dfa_of, 60_000)
    return None if raw is None else minimize(DFA(*raw))


def _nfa_path(pattern: str) -> DFA:
    """The DFA the subset construction builds (the composer switched off). Its state limit is raised:
    the subset construction counts states before minimising, so it may refuse a pattern (e.g.
    ``(?:a(?:\\w){0,3}){0,3}``) whose minimal DFA the composer builds within the default limit."""
    saved = regex.direct_dfa
    regex.direct_dfa = lambda *a: None
    try:
        return regex._build(pattern, 0, 20 * regex.DEFAULT_MAX_STATES)
    finally:
        regex.direct_dfa = saved


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_regexes(), st.lists(st.lists(st.sampled_from(ALPHABET), max_size=7).map("".join), max_size=25))
def test_composed_dfa_matches_re_and_nfa_path(pattern: str, samples: list[str]) -> None:
    dfa = _composed(pattern)
    if dfa is None:  # declined (competing pieces): the public path is the NFA path
        try:
            dfa = regex.regex_to_dfa(pattern)
        except GrammarError as e:  # more states than the default limit on the way: refused, clearly
            assert "pattern too complex" in str(e), (pattern, e)
            return
    assert isomorphic(dfa, _nfa_path(pattern)), pattern
    for s in samples:
        assert dfa.matches(s.encode("utf-8")) == bool(re.fullmatch(pattern, s)), (pattern, s)


@pytest.mark.parametrize(
    "pattern",
    [
        r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]){0,300}"',  # JSON string with maxLength: 1,500 states
        r"(?:a|ab)(?:b|c)",  # accepting states compete with what follows: NFA path
        r"(?:é|ę)x{3,40}",  # overlapping UTF-8 lead bytes: product union
        r"(?:ab)*a{0,5}",
        r"x(?:)*y?",
    ],
)
def test_composed_equals_nfa_path(pattern: str) -> None:
    dfa = _composed(pattern) or regex._build(pattern, 0, regex.DEFAULT_MAX_STATES)
    assert isomorphic(dfa, _nfa_path(pattern))
    assert isomorphic(regex._build(pattern, 0, regex.DEFAULT_MAX_STATES), dfa)
    assert dfa.matches(b'"' + b"a" * 300 + b'"') == bool(re.fullmatch(pattern, '"' + "a" * 300 + '"'))


def test_composer_declines_anchors_and_competing_pieces() -> None:
    from grammarmask.automata.regex import _charset_dfa_of, parse

    assert direct_dfa(parse(r"^a$"), 0, _charset_dfa_of, 10_000) is None
    assert direct_dfa(parse(r"(?:a|ab)b"), 0, _charset_dfa_of, 10_000) is None
    assert direct_dfa(parse(r"a{0,300}"), 0, _charset_dfa_of, 10_000) is not None
    # the row budget is respected: too many states on the way means the NFA path decides
    assert direct_dfa(parse(r"[^a]{0,300}"), 0, _charset_dfa_of, 100) is None
