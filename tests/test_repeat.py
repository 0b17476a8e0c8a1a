"""``g.repeat(min, max)``: exact against ``regex``'s partial matching and against lark, on the one
automaton path (a regular grammar) and on the generic path (parts hidden behind ``Opaque``, or a Lark
grammar), with tokens that span two repetitions."""

from __future__ import annotations

from typing import Any

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.errors import GrammarError
from grammarmask.native.regular import NativeDfaCompiledGrammar
from grammarmask.regular import DfaCompiledGrammar
from grammarmask.strategies import token_paths
from grammarmask.testing import assert_mask_exact, byte_vocabulary

from .support import Opaque

ONE_DFA = (DfaCompiledGrammar, NativeDfaCompiledGrammar)
VOCAB = byte_vocabulary([b"ab", b"aa", b"aaa", b"ba", b"b,", b",a", b"1,", b",1", b"11", b"a1,"])
CASES = [("ab|a", 0, 2), ("ab|a", 2, 3), ("a*", 1, 2), ("[0-9]+,", 1, None), ("b?a", 0, None), ("1,|", 3, 4)]


def oracle(pattern: str) -> tuple[Any, Any]:
    rx = regex.compile(pattern.encode())
    return (lambda b: rx.fullmatch(b, partial=True) is not None), (lambda b: rx.fullmatch(b) is not None)


@pytest.mark.parametrize("generic", [False, True], ids=["dfa", "generic"])
@pytest.mark.parametrize(("pattern", "lo", "hi"), CASES)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_repeated_regex_masks_match_the_oracle(pattern: str, lo: int, hi: int | None, generic: bool,
                                               data: Any) -> None:
    inner: gm.Grammar = Opaque(gm.Regex(pattern)) if generic else gm.Regex(pattern)
    compiled = inner.repeat(lo, hi).compile(VOCAB)
    assert isinstance(compiled, ONE_DFA) != generic
    path = data.draw(token_paths(compiled, max_tokens=8, allow_eos=False))
    count = f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    assert_mask_exact(compiled, path, *oracle(f"(?:{pattern}){count}"))


LIST = r"""
start: "[" [item ("," item)*] "]"
item: "a" | "a" "a"
"""
LIST_RE = r"\[(?:aa?(?:,aa?)*)?\]"  # the same language, for the oracle


@pytest.mark.parametrize(("lo", "hi"), [(0, 2), (1, None), (2, 3)])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_repeated_lark_grammar_matches_the_oracle(lo: int, hi: int | None, data: Any) -> None:
    vocab = byte_vocabulary([b"[a", b"][", b"a]", b"],", b",a", b"[]", b"aa"])
    compiled = gm.Lark(LIST).repeat(lo, hi).compile(vocab)
    assert not isinstance(compiled, ONE_DFA)  # the Earley engine runs each repetition
    path = data.draw(token_paths(compiled, max_tokens=8, allow_eos=False))
    count = f"{{{lo},}}" if hi is None else f"{{{lo},{hi}}}"
    assert_mask_exact(compiled, path, *oracle(f"(?:{LIST_RE}){count}"))


def test_long_chains_share_their_crossing_tokens() -> None:
    """A Lark part repeated 1,000 times: each step costs what one repetition costs (the crossing
    tokens of repetitions far from the end are computed once)."""
    compiled = gm.Lark('start: "ab"').repeat(1, 1000).compile(VOCAB)
    m = compiled.matcher()
    ab, ba = VOCAB.token_bytes.index(b"ab"), VOCAB.token_bytes.index(b"ba")
    m.advance(ord("a") + 1)
    for _ in range(300):
        assert ba in m.mask() and ab not in m.mask()
        m.advance(ba)
    assert len(compiled._cand_cache) <= 2  # type: ignore[attr-defined]


def test_repeat_checks_its_counts() -> None:
    g = gm.Regex("a")
    bad = [(-1, None, "min must be at least 0"), (3, 2, "max must be at least 1 and at least min"),
           (0, 0, "max must be at least 1"), ("2", None, "min must be an int")]
    for lo, hi, what in bad:
        with pytest.raises(GrammarError, match=what):
            g.repeat(lo, hi)  # type: ignore[arg-type]


def test_repeat_composes_and_caches_by_content() -> None:
    g = (gm.Regex("[0-9]") + gm.Choice([","])).repeat(1, 3)
    assert g.cache_key() == (gm.Regex("[0-9]") + gm.Choice([","])).repeat(1, 3).cache_key()
    assert repr(g).endswith(".repeat(1, 3)")
    m = g.compile(VOCAB).matcher()
    for t in [b"11", b","]:
        assert not m.try_advance(VOCAB.token_bytes.index(t)) or t == b","
    m = g.compile(VOCAB).matcher()
    m.advance(ord("1") + 1)
    m.advance(VOCAB.token_bytes.index(b",1"))
    assert not m.is_accepting() and m.try_advance(ord(",") + 1) and m.is_accepting()


# ---- the direct construction for prefix-free units (automata.ops._prefix_free_repeat) ------------------

_UNITS = ["[a-c]", "ab|c", "x[0-9]{2}", "(?:é|ü)", r'(?:[^"\\]|\\["n])']


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(_UNITS), st.integers(0, 12), st.one_of(st.none(), st.integers(0, 12)))
def test_a_prefix_free_unit_repeats_into_the_minimal_dfa(unit: str, lo: int, span: int | None) -> None:
    from grammarmask.automata import regex_to_dfa
    from grammarmask.automata.ops import _prefix_free_repeat

    from .support import isomorphic

    hi = None if span is None else lo + span
    direct = _prefix_free_repeat(regex_to_dfa(unit), lo, hi, 100_000)
    assert direct is not None
    count = "*" if (lo, hi) == (0, None) else f"{{{lo},{'' if hi is None else hi}}}"
    assert isomorphic(direct, regex_to_dfa(f"(?:{unit}){count}", max_states=100_000))


def test_a_unit_that_is_not_prefix_free_takes_the_general_path() -> None:
    from grammarmask.automata import regex_to_dfa
    from grammarmask.automata.ops import _prefix_free_repeat, repeat

    from .support import isomorphic

    a = regex_to_dfa("a|ab")
    assert _prefix_free_repeat(a, 0, 3, 1000) is None
    assert isomorphic(repeat(a, 0, 3), regex_to_dfa("(?:a|ab){0,3}"))


@pytest.mark.parametrize(("lo", "hi"), [(0, None), (3, None), (0, 0), (1, 100), (0, 256), (7, 7)])
def test_a_json_string_of_counted_characters_is_built_directly(lo: int, hi: int | None) -> None:
    from grammarmask.automata import regex_to_dfa
    from grammarmask.frontends.jsonschema.strings import plain_string, quoted_plain_dfa

    from .support import isomorphic

    rx = f'"{plain_string(lo, hi)}"'
    direct = quoted_plain_dfa(rx)
    assert direct is not None and isomorphic(direct, regex_to_dfa(rx))
    assert quoted_plain_dfa('"[a-z]{0,5}"') is None
