"""The IR builder: EBNF expressions lowered in memory mean what lark makes of their printed text."""

from __future__ import annotations

import glob
import itertools

import lark
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.automata import kernels
from grammarmask.automata.regex import _build as regex_build
from grammarmask.cfg import CompiledCfg
from grammarmask.frontends.gbnf import parse_gbnf
from grammarmask.ir import builder
from grammarmask.ir.builder import (
    EMPTY,
    Alt,
    Expr,
    Lit,
    Pat,
    Ref,
    Rep,
    Seq,
    _Program,
    _regex_of,
    alt,
    build_cfg,
    opt,
    seq,
    star,
    to_lark,
)

from .support import CORPUS as SHARED_CORPUS
from .support import isomorphic
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


# --- scannerless runs: their DFA composed from the items equals the regex path's ----------------

def _gbnf_class(text: str) -> Pat:
    """The Pat the GBNF parser makes of a class (its regex, and its DFA from its ranges)."""
    rules, _ = parse_gbnf(f"root ::= {text}")
    pat = rules["root"]
    assert isinstance(pat, Pat) and pat.build is not None, text
    return pat


RUN_LEAVES = [Lit("a"), Lit("é€"), Lit("😀b"), Lit(""), Pat("[ab]"), Ref("inl")] + [
    _gbnf_class(c) for c in ["[a-c]", r"[^a\n]", r"[ \t]", r"[\u00e9-\u20ac]", ".", r"[^\x00-\x7f]",
                              r"[\U0001F600-\U0001F64F0-9]", "[^]"]
]
run_exprs = st.recursive(st.sampled_from(RUN_LEAVES), _extend, max_leaves=8)


def _composed(e: Expr, bodies: dict[str, Expr]) -> object:
    program = _Program(bodies, {"inl": "(?:x)(?:[yz])"})
    assert program.add(e)
    got = kernels.compose(program.words, program.dfas, 100_000, 10_000, None)
    assert not isinstance(got, str), got
    return got


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_exprs)
def test_a_run_composed_from_its_items_is_the_regex_paths_dfa(e: Expr) -> None:
    bodies = {"inl": seq(Lit("x"), Pat("[yz]"))}
    regex = _regex_of(e, {"inl": "(?:x)(?:[yz])"})
    assert regex is not None
    assert isomorphic(_composed(e, bodies), regex_build(regex, 0, 10_000)), regex


def test_every_run_of_the_corpus_gbnf_grammars_composes_to_the_regex_paths_dfa(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[tuple[str, Expr, dict[str, Expr], dict[str, str]]] = []
    real = builder._run_dfa

    def spy(regex: str, e: Expr, bodies: dict[str, Expr], inline: dict[str, str]) -> object:
        runs.append((regex, e, bodies, inline))
        return real(regex, e, bodies, inline)

    monkeypatch.setattr(builder, "_run_dfa", spy)
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", "off")  # every grammar lowered here, none read back
    files = sorted(glob.glob(f"{SHARED_CORPUS}/gbnf/*/*.gbnf"))
    assert files
    for path in files:
        try:
            gm.Gbnf.from_file(path)
        except gm.GrammarError:
            continue  # (test_gbnf.py holds which ones compile)
    composed = 0
    for regex, e, bodies, inline in runs:
        program = _Program(bodies, inline)
        if not program.add(e):  # a pattern left to the regex path (not a class)
            continue
        got = kernels.compose(program.words, program.dfas, 500_000, 10_000, None)
        if isinstance(got, str):
            continue
        composed += 1
        assert isomorphic(got, regex_build(regex, 0, 10_000)), regex
    # (every run of these files is strings and classes)
    assert composed == len(runs) and composed > 50, (composed, len(runs))


def test_runs_past_the_kernels_bounds_or_with_other_patterns_take_the_regex_path() -> None:
    # an NFA past its state bound: the regex path words the refusal, as before the kernel
    with pytest.raises(gm.GrammarError, match="too large"):
        gm.Gbnf("root ::= [a-z]{0,600000}")
    # a pattern the kernel does not take (global flags): read as part of the run's regex, refused
    assert not _Program({}, {}).add(seq(Lit("a"), Pat("(?i)b")))
    with pytest.raises(gm.GrammarError):
        build_cfg({"start": seq(Lit("a"), Pat("(?i)b"))}, scannerless=True)


def test_a_malformed_program_is_an_error_not_a_crash() -> None:
    from array import array

    piece = regex_build("[ab]", 0, 100)
    # empty; a literal shorter than said; no piece 1; too few children; no operation 7; 3 to 2 times
    bad = ([], [0, 2, 0, 5, 97], [1, 1, 0, 4], [2, 2, 0, 8, 1, 0, 0, 4], [7, 0, 0, 4],
           [4, 3, 2, 8, 1, 0, 0, 4])
    for words in bad:
        with pytest.raises(gm.GrammarMaskError, match="compose"):
            kernels.compose(array("I", words), [piece], 100, 100, None)
