"""Union, Sequence and And: exact against the `regex` module's partial matching and `re.fullmatch`.

Each grammar is checked on the regular fast path (one DFA) and on the generic path (parts hidden
behind `Opaque`, which refuses `to_dfa()`, plus lark parts), so both implementations meet the oracle.
"""

from __future__ import annotations

import re
from typing import Any

import lark
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from grammarmask.compose import And, Union
from grammarmask.errors import GrammarError, NoLegalContinuation
from grammarmask.frontends.lark import Lark
from grammarmask.frontends.regex import Regex
from grammarmask.grammar import Grammar
from grammarmask.native.regular import NativeDfaCompiledGrammar
from grammarmask.regular import DfaCompiledGrammar
from grammarmask.sequence import Sequence
from grammarmask.strategies import byte_vocab, token_paths
from grammarmask.testing import assert_mask_exact, byte_vocabulary
from grammarmask.vocab import Vocabulary

from .support import Opaque

ONE_DFA = (DfaCompiledGrammar, NativeDfaCompiledGrammar)  # one automaton, by either engine

# multi-byte tokens that straddle part boundaries in the patterns below
VOCAB = byte_vocabulary([b"ab", b"a{", b"}x", b"aa", b"aaa", b"b1", b"1,", b",a", b"{}", b"xy", b"ba"])


def oracle(pattern: str) -> tuple[Any, Any]:
    rx = regex.compile(pattern.encode())
    return (lambda b: rx.fullmatch(b, partial=True) is not None), (lambda b: rx.fullmatch(b) is not None)


PAIRS = [
    ("a*", "a*b"),
    ("(ab)+", "b?1"),
    ("a{0,3}", "[{]x*[}]"),
    ("[0-9]+", ",a|1,"),
    ("x|xy", "y?b"),
]


def _union_pattern(a: str, b: str) -> str:
    return f"(?:{a})|(?:{b})"


def _seq_pattern(a: str, b: str) -> str:
    return f"(?:{a})(?:{b})"


@pytest.mark.parametrize("generic", [False, True], ids=["dfa", "generic"])
@pytest.mark.parametrize(("a", "b"), PAIRS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_union_and_sequence_masks_match_oracle(a: str, b: str, generic: bool, data: Any) -> None:
    for kind, pattern in (("union", _union_pattern(a, b)), ("seq", _seq_pattern(a, b))):
        ga: Grammar = Opaque(Regex(a)) if generic else Regex(a)
        gb: Grammar = Opaque(Regex(b)) if generic else Regex(b)
        g = Union(ga, gb) if kind == "union" else Sequence(ga, gb)
        compiled = g.compile(VOCAB)
        assert isinstance(compiled, ONE_DFA) != generic
        path = data.draw(token_paths(compiled, max_tokens=8, allow_eos=False), label=kind)
        viable, complete = oracle(pattern)
        assert_mask_exact(compiled, path, viable, complete)


@pytest.mark.parametrize(("a", "b"), PAIRS)
@given(text=st.text(alphabet="ab{}x1,y", max_size=8))
@settings(max_examples=40, deadline=None)
def test_acceptance_is_union_and_concatenation(a: str, b: str, text: str) -> None:
    data = text.encode()
    for generic in (False, True):
        ga: Grammar = Opaque(Regex(a)) if generic else Regex(a)
        gb: Grammar = Opaque(Regex(b)) if generic else Regex(b)
        for g, pattern in ((Union(ga, gb), _union_pattern(a, b)), (Sequence(ga, gb), _seq_pattern(a, b))):
            m = g.compile(byte_vocab()).matcher()
            ok = all(m.try_advance(c + 1) for c in data) and m.is_accepting()
            assert ok == (re.fullmatch(pattern, text) is not None), (g, text)
    # each side's own reference
    u = Union(Opaque(Regex(a)), Opaque(Regex(b))).compile(byte_vocab()).matcher()
    ok = all(u.try_advance(c + 1) for c in data) and u.is_accepting()
    assert ok == bool(re.fullmatch(a, text) or re.fullmatch(b, text))


JSONISH = r"""
start: value
?value: "[" [value ("," value)*] "]" | NUMBER
NUMBER: /[0-9]+/
"""


def test_sequence_of_text_then_lark_matches_lark_and_re() -> None:
    """The structural-tag shape: free text up to a trigger, then a CFG, then a closing tag."""
    head, tail = r"[a-z ]*<t>", r"</t>"
    g = Sequence(Regex(head), Lark(JSONISH), Regex(tail))
    vocab = byte_vocabulary([b"<t>[", b"]</", b"t>", b"1,", b"],[", b"a <"])
    compiled = g.compile(vocab)
    parser = lark.Lark(JSONISH)

    def complete(b: bytes) -> bool:
        m = re.fullmatch(rf"({head})(.*)({tail})".encode(), b)
        if m is None:
            return False
        try:
            parser.parse(m.group(2).decode())
        except lark.exceptions.LarkError:
            return False
        return True

    for text in [b"hi <t>[1,[2]]</t>", b"<t>7</t>", b"a <t>[]</t>"]:
        m = compiled.matcher()
        for c in text:
            m.advance(c + 1)
        assert m.is_accepting() and complete(text)
    for text in [b"hi <t>[1,]</t>", b"<t></t>", b"A<t>1</t>"]:
        m = compiled.matcher()
        assert not (all(m.try_advance(c + 1) for c in text) and m.is_accepting())
        assert not complete(text)
    # crossing tokens: "<t>[" leaves the regex inside the token; "]</" enters the tail
    m = compiled.matcher()
    m.advance_many([ord("a") + 1, vocab.token_bytes.index(b"<t>[")])
    assert vocab.token_bytes.index(b"]</") in m.mask()
    assert vocab.token_bytes.index(b"1,") in m.mask()
    m.advance_many([ord("1") + 1, vocab.token_bytes.index(b"]</"), vocab.token_bytes.index(b"t>")])
    assert m.is_accepting()


def test_union_with_lark_side_drops_dead_side() -> None:
    g = Union(Regex(r"[0-9]+x"), Lark(JSONISH))
    m = g.compile(byte_vocab()).matcher()
    for c in b"12":
        m.advance(c + 1)
    assert m.is_accepting()  # "12" is a NUMBER
    m.advance(ord("x") + 1)
    assert m.is_accepting() and ord("y") + 1 not in m.mask()
    assert m.state[1] is None  # the lark side rejected "12x" and was dropped


def test_forced_bytes_of_union_is_common_prefix() -> None:
    g = Union(Opaque(Regex("abcd")), Opaque(Regex("abxy")))
    m = g.compile(VOCAB).matcher()
    assert m.forced_bytes() == b"ab"
    toks = m.forced_tokens()
    assert VOCAB.decode(toks) == b"ab"


def test_errors() -> None:
    with pytest.raises(GrammarError, match="at least two"):
        Union(Regex("a"))
    with pytest.raises(GrammarError, match="takes grammars"):
        Sequence(Regex("a"), "b")  # type: ignore[arg-type]


# --- And: mask(a & b) == mask(a) & mask(b), and the product of regular grammars never dead-ends --

AND_PAIRS = [("[a-z]*", "a.*b"), ("(ab)*", "a(ba)*b?"), ("a*x", "aaa*[xy]"), ("[0-9]{1,3}", "1[0-9]*")]


@pytest.mark.parametrize(("a", "b"), AND_PAIRS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_and_mask_is_intersection_of_masks(a: str, b: str, data: Any) -> None:
    side = (Opaque(Regex(a)), Opaque(Regex(b)))
    generic = And(*side).compile(VOCAB)
    product = And(Regex(a), Regex(b)).compile(VOCAB)
    assert isinstance(product, ONE_DFA)
    path = data.draw(token_paths(generic, max_tokens=8, allow_eos=False))
    ma, mb, mg, mp = (c.matcher() for c in (*(s.compile(VOCAB) for s in side), generic, product))
    for t in [*path, None]:
        try:
            got = mg.mask()
        except NoLegalContinuation:
            # the side-by-side form dead-ended: then the exact product has no continuation either
            assert not mp.is_accepting()
            break
        assert got == ma.mask() & mb.mask()
        # the product is trimmed: it never dead-ends, and it refines the side-by-side mask
        pm = mp.mask()
        assert len(pm) > 0
        assert (pm - got).token_ids().size == 0
        if t is None:
            break
        for m in (ma, mb, mg):
            m.advance(t)
        if not mp.try_advance(t):
            break  # a token that leads the side-by-side form into a dead end


@pytest.mark.parametrize(("a", "b"), AND_PAIRS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_regular_product_never_dead_ends_and_matches_oracle(a: str, b: str, data: Any) -> None:
    compiled = And(Regex(a), Regex(b)).compile(VOCAB)
    path = data.draw(token_paths(compiled, max_tokens=10))
    rxa, rxb = regex.compile(a.encode()), regex.compile(b.encode())
    viable_a, _ = oracle(a)

    def is_complete(w: bytes) -> bool:
        return rxa.fullmatch(w) is not None and rxb.fullmatch(w) is not None

    # viability of an intersection is not decidable by two partial matches: use the product's own
    # acceptance over bounded extensions as a check that every legal step keeps a completion
    m = compiled.matcher()
    for t in path:
        assert len(m.mask()) > 0
        m.advance(t)
    out = VOCAB.decode(path)
    if m.is_finished():
        assert is_complete(out)
    assert viable_a(out)


def test_intersection_dead_end_raises_no_legal_continuation() -> None:
    g = And(Opaque(Regex("ab*c")), Opaque(Regex("a[xy]")))
    m = g.compile(byte_vocab()).matcher()
    m.advance(ord("a") + 1)
    with pytest.raises(NoLegalContinuation):
        m.mask()
    assert len(And(Regex("ab*c|q"), Regex("a[xy]|q")).compile(byte_vocab()).matcher().mask()) == 1


# --- forced bytes (derived from masks for CFG backends) equal the brute-force definition ----------

FORCED_CASES = [
    ('start: "ab" ("c" | "d") "efg"', r"ab[cd]efg"),
    ('start: "{" KEY ":" ("1" | "22") "}"\nKEY: "\\"k\\""', r'\{"k":(1|22)\}'),
    ('start: ("x" "yz")+', r"(xyz)+"),
]


def oracle_forced(pattern: str, prefix: bytes) -> bytes:
    """The longest f with: every sentence extending prefix starts with prefix + f (by `regex`)."""
    rx = regex.compile(pattern.encode())
    out = b""
    while rx.fullmatch(prefix + out) is None:
        nxt = [c for c in range(256) if rx.fullmatch(prefix + out + bytes([c]), partial=True)]
        if len(nxt) != 1:
            break
        out += bytes(nxt)
    return out


@pytest.mark.parametrize(("text", "pattern"), FORCED_CASES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_jump_forward_forced_bytes_match_oracle(text: str, pattern: str, data: Any) -> None:
    from grammarmask.strategies import prefixes

    g = Lark(text)
    compiled = g.compile(byte_vocab())
    p = data.draw(prefixes(Lark(text), max_size=8))
    m = compiled.matcher()
    for c in p:
        m.advance(c + 1)
    assert m.forced_bytes() == oracle_forced(pattern, p)
    # on a vocabulary with multi-byte tokens, the forced tokens spell a prefix of the forced bytes
    mv = g.compile(VOCAB).matcher()
    mv.advance_many([c + 1 for c in p])
    toks = [t for t in mv.forced_tokens() if t != VOCAB.eos_token_id]
    assert oracle_forced(pattern, p).startswith(VOCAB.decode(toks))


def test_jump_forward_saves_model_calls_with_a_cfg_backend() -> None:
    from grammarmask.decoding import generate
    from grammarmask.models import RandomModel

    text, pattern = FORCED_CASES[1]
    vocab = byte_vocabulary([b'{"', b'k"', b'":', b"22", b"}"])
    r = generate(RandomModel(vocab.size, seed=3), vocab, Lark(text), max_tokens=30, seed=1)
    assert r.finished and re.fullmatch(pattern, r.text)
    assert r.forced_tokens_used >= 4 and r.model_calls <= 2


# --- the real 131k tekken vocabulary ---------------------------------------------------------------


@pytest.mark.parametrize("generic", [False, True], ids=["dfa", "generic"])
def test_sequence_on_tekken_matches_oracle(tekken: Vocabulary, tekken_tokenizer: Any, generic: bool) -> None:
    head, tail = r"[a-z ]{0,12}<t>", r"\[[0-9,]*\]</t>"
    parts = [Opaque(Regex(head)), Opaque(Regex(tail))] if generic else [Regex(head), Regex(tail)]
    compiled = Sequence(*parts).compile(tekken)
    viable, complete = oracle(f"(?:{head})(?:{tail})")
    ids = tekken_tokenizer.encode("call it <t>[1,22,333]</t>", bos=False, eos=False)
    # the real tokenization crosses the boundary inside a token (">[")
    assert_mask_exact(compiled, ids, viable, complete)
    m = compiled.matcher()
    m.advance_many(ids)
    assert m.is_accepting()


@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_union_on_tekken_matches_oracle(tekken: Vocabulary, data: Any) -> None:
    a, b = r"(yes|no)!", r"[0-9]{1,4}"
    compiled = Union(Opaque(Regex(a)), Lark("start: /[0-9]{1,4}/")).compile(tekken)
    path = data.draw(token_paths(compiled, max_tokens=4, allow_eos=False))
    viable, complete = oracle(_union_pattern(a, b))
    assert_mask_exact(compiled, path, viable, complete)


@pytest.mark.parametrize("limit", [0, 10**6], ids=["trie-walk-fallback", "candidates"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_sequence_crossing_paths_agree_with_oracle(limit: int, data: Any) -> None:
    import grammarmask.sequence as sequence

    old = sequence._MAX_CANDIDATES
    sequence._MAX_CANDIDATES = limit
    try:
        a, b = r"(ab|a)*[{]?", r"(}x|x|\}|[0-9]*,a)+"
        compiled = Sequence(Opaque(Regex(a)), Opaque(Regex(b)), Opaque(Regex("b?1,?"))).compile(VOCAB)
        path = data.draw(token_paths(compiled, max_tokens=8, allow_eos=False))
        viable, complete = oracle(f"(?:{a})(?:{b})(?:b?1,?)")
        assert_mask_exact(compiled, path, viable, complete)
    finally:
        sequence._MAX_CANDIDATES = old


BALANCED = 'start: s\ns: ("(" s ")")*'


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_and_with_a_cfg_side_is_intersection_of_masks(data: Any) -> None:
    """Balanced parentheses (not regular) & at most 6 bytes: the side-by-side form, step by step."""
    vocab = byte_vocabulary([b"((", b"))", b"()", b")("])
    a, b = Lark(BALANCED), Regex(r"[()]{0,6}")
    g = And(a, b).compile(vocab)
    path = data.draw(token_paths(g, max_tokens=8))
    ma, mb, mg = a.compile(vocab).matcher(), b.compile(vocab).matcher(), g.matcher()
    for t in [*path, None]:
        if mg.is_finished():
            break
        try:
            got = mg.mask()
        except NoLegalContinuation:
            # a dead end is real: the output is not balanced and cannot be closed within 6 bytes
            out = vocab.decode(path[: mg.num_tokens])
            assert out.count(b"(") - out.count(b")") > 6 - len(out)
            assert len(ma.mask() & mb.mask()) == 0
            break
        assert got == ma.mask() & mb.mask()
        if t is None:
            break
        for m in (ma, mb, mg):
            m.advance(t)
    if path and path[-1] == vocab.eos_token_id:
        out = vocab.decode(path)
        assert len(out) <= 6 and lark.Lark(BALANCED).parse(out.decode()) is not None
    # a dead end on a fixed path: "(((())" is 6 bytes and still open (each step was legal on both sides)
    m = g.matcher()
    m.advance_many([ord(c) + 1 for c in "(((())"])
    with pytest.raises(NoLegalContinuation):
        m.mask()


def test_sequence_forced_bytes_run_across_parts() -> None:
    g = Sequence(Opaque(Regex("ab")), Opaque(Regex("cd")), Opaque(Regex("x|y")))
    m = g.compile(VOCAB).matcher()
    assert m.forced_bytes() == b"ab"
    toks = m.forced_tokens()
    assert VOCAB.decode(toks) == b"abcd"  # then a choice: no EOS
    m.advance_many(toks)
    assert m.forced_bytes() == b"" and len(m.mask()) == 2
    m.advance(ord("y") + 1)
    assert m.forced_tokens() == [VOCAB.eos_token_id]


def test_jump_forward_on_tekken_halves_model_calls(tekken: Vocabulary) -> None:
    """The issue's target on the seeds' conjugation schema, via the CFG-backed JsonSchema."""
    import json

    import jsonschema

    from benchmarks.bench_jump_forward import CONJUGATION
    from grammarmask.decoding import generate
    from grammarmask.frontends.json_schema import JsonSchema
    from grammarmask.models import RandomModel

    g = JsonSchema(CONJUGATION, whitespace="compact").compile(tekken)
    for seed in range(5):
        on = generate(RandomModel(tekken.size, seed=seed), tekken, g, max_tokens=80, seed=seed)
        off = generate(
            RandomModel(tekken.size, seed=seed), tekken, g, max_tokens=80, seed=seed, jump_forward=False
        )
        for r in (on, off):
            assert r.finished
            jsonschema.validate(json.loads(r.text), CONJUGATION)
        assert on.model_calls * 2 <= off.model_calls
