"""The IR builder: EBNF expressions lowered in memory mean what lark makes of their printed text."""

from __future__ import annotations

import itertools

import lark
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.cfg import CompiledCfg
from grammarmask.ir.builder import (
    EMPTY,
    Alt,
    Expr,
    Lit,
    Pat,
    Ref,
    Rep,
    Seq,
    alt,
    build_cfg,
    opt,
    seq,
    star,
    to_lark,
)

from .support_json_schema import parses

VOCAB = gm.Vocabulary.from_tokens([b"a", b"b", b""], eos_token_id=2)
STRINGS = ["".join(p) for n in range(6) for p in itertools.product("ab", repeat=n)]

leaves = st.sampled_from(
    [Lit("a"), Lit("b"), Lit("ab"), Pat("a+"), Pat("b?a"), Pat("[ab]"), Ref("r1"), Ref("r2")]
)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda xs: seq(*xs)),
        st.lists(children, min_size=1, max_size=3).map(alt),
        children.map(opt),
        children.map(star),
        children.map(lambda x: Rep(x, 1, None)),
        st.tuples(children, st.integers(0, 2), st.integers(0, 2), st.booleans()).map(
            lambda a: Rep(a[0], a[1], None if a[3] else a[1] + a[2])
        ),
    )


exprs = st.recursive(leaves, _extend, max_leaves=6)


def _accepts(cfg: object, s: str) -> bool:
    m = CompiledCfg(cfg, VOCAB).matcher()
    for ch in s.encode():
        if not m.try_advance(0 if ch == ord("a") else 1):
            return False
    return m.is_accepting()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs, exprs, exprs)
def test_lowering_agrees_with_lark_on_the_printed_text(start: Expr, r1: Expr, r2: Expr) -> None:
    rules = {"start": start, "r1": r1, "r2": seq(Lit("b"), r2)}  # r2 is never nullable
    try:
        cfg = build_cfg(rules)
    except gm.GrammarError:
        assume(False)  # an empty language (lark would build a parser that accepts nothing)
    parser = lark.Lark(to_lark(rules), parser="earley", lexer="dynamic")
    for s in STRINGS:
        assert _accepts(cfg, s) == parses(parser, s), (to_lark(rules), s)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs, exprs, exprs)
def test_scannerless_lowering_agrees_with_lark_trying_every_lexeme(start: Expr, r1: Expr, r2: Expr) -> None:
    """GBNF's policy (no longest match) is lark's Earley with the dynamic_complete lexer."""
    rules = {"start": start, "r1": r1, "r2": seq(Lit("b"), r2)}
    try:
        cfg = build_cfg(rules, scannerless=True)
    except gm.GrammarError:
        assume(False)
    parser = lark.Lark(to_lark(rules), parser="earley", lexer="dynamic_complete")
    for s in STRINGS:
        assert _accepts(cfg, s) == parses(parser, s), (to_lark(rules), s)


def test_counted_repeats_lower_to_copies_and_a_chain_of_options() -> None:
    for lo, hi in [(0, 0), (0, 1), (0, 3), (2, 2), (1, 3), (2, None), (0, None), (1, None)]:
        for scannerless in (False, True):
            cfg = build_cfg({"start": seq(Rep(seq(Lit("a"), Ref("x")), lo, hi), Lit("b")), "x": Ref("y"),
                             "y": alt([EMPTY, Ref("x")])}, scannerless=scannerless)
            for n in range(6):
                ok = n >= lo and (hi is None or n <= hi)
                assert _accepts(cfg, "a" * n + "b") == ok, (lo, hi, scannerless, n)


def test_printing_brackets_what_binds_looser() -> None:
    rules: dict[str, Expr] = {
        "start": seq(Lit("["), opt(seq(Ref("v"), star(seq(Lit(","), Ref("v"))))), Lit("]")),
        "v": alt([Pat("[0-9]+"), Ref("start")]),
        "w": seq(alt([Lit("x"), Lit("y")]), Rep(Lit('q"'), 1, None)),
    }
    assert to_lark(rules) == (
        'start: "[" (v ("," v)*)? "]"\nv: /[0-9]+/ | start\nw: ("x" | "y") "q\\""+\n'
    )
    assert lark.Lark(to_lark(rules)).parse("[1,[2,3],[]]") is not None


def test_seq_and_alt_flatten_and_deduplicate() -> None:
    a, b = Lit("a"), Lit("b")
    assert seq(a, EMPTY, seq(b, EMPTY)) == Seq((a, b))
    assert seq(EMPTY, a) == a
    assert alt([a, alt([b, a]), b]) == Alt((a, b))
    assert alt([a, a]) == a
    with pytest.raises(ValueError):
        alt([])


def test_equal_subexpressions_share_one_nonterminal() -> None:
    item = star(seq(Lit(","), Ref("v")))
    cfg = build_cfg({"start": seq(Ref("v"), item, Lit(";"), Ref("v"), item), "v": Lit("x")})
    assert sum(1 for n in cfg.nonterminals if n.startswith("__anon")) == 1


def test_errors_name_the_rule_or_terminal() -> None:
    with pytest.raises(gm.GrammarError, match="'nowhere' is used but not defined"):
        build_cfg({"start": Ref("nowhere")})
    with pytest.raises(gm.GrammarError, match="matches the empty string"):
        build_cfg({"start": Pat("a*")})
    with pytest.raises(gm.GrammarError, match="cannot be compiled"):
        build_cfg({"start": Pat("(?=a)a")})


def test_a_deep_chain_of_rules_does_not_recurse() -> None:
    n = 20_000  # far past Python's recursion limit
    rules: dict[str, Expr] = {f"r{i}": seq(Lit("a"), Ref(f"r{i + 1}")) for i in range(n)}
    rules[f"r{n}"] = Lit("b")
    rules["start"] = Ref("r0")
    cfg = build_cfg(rules)
    assert len(cfg.rules) == n + 2


def test_a_built_dfa_is_used_instead_of_the_regex() -> None:
    from grammarmask.automata import regex_to_dfa

    calls = []

    def build() -> object:
        calls.append(1)
        return regex_to_dfa("x+")

    cfg = build_cfg({"start": seq(Pat("(?=x)x+", build), Lit(";"))})  # lark's own form, with lookahead
    assert calls == [1]
    assert parses(lark.Lark(to_lark({"start": seq(Pat("(?=x)x+"), Lit(";"))})), "xx;")
    assert not _accepts(cfg, "ab")
