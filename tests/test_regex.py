"""Regex backend: exact masks against the independent oracle, walks, real-tokenizer documents, errors."""

from __future__ import annotations

import random
import re
import sys
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.frontends.regex import Regex
from grammarmask.testing import reference_mask

from .support_regex import Oracle, Pattern, patterns

EXTRA = ["ab", "abc", "é", "中文", "😀", "a\n", "  ", "K", "ǅ", "1.", "é中", "\U0001f601\U0001f602"]
PARTIAL = [b"\xe4\xb8", b"\xf0\x9f", b"\xf0\x9f\x98", b"\xc3", b"\x80\x80", b"a\xc3", b"\xa9b"]


@pytest.fixture(scope="module")
def toy() -> gm.Vocabulary:
    """EOS, two specials, every single byte, some multi-byte tokens (some ending mid-character)."""
    tokens = [b"", b"", b"", *[bytes([b]) for b in range(256)], *[x.encode() for x in EXTRA], *PARTIAL]
    return gm.Vocabulary.from_tokens(tokens, eos_token_id=0, special_token_ids=(1, 2), size=len(tokens) + 7)


def check_walk(compiled: gm.CompiledGrammar, oracle: Oracle, rng: random.Random, steps: int) -> bytes:
    """Random walk; before every step the mask must equal the brute-force oracle mask."""
    vocab = compiled.vocab
    m = compiled.matcher()
    out = b""
    for _ in range(steps):
        want = reference_mask(oracle.viable, vocab, out, is_complete=oracle.complete)
        got = m.mask()
        if got != want:
            extra = [vocab.token_bytes[t] for t in (got - want).token_ids()[:5]]
            missing = [vocab.token_bytes[t] for t in (want - got).token_ids()[:5]]
            raise AssertionError(
                f"{oracle.pattern.re_text!r} after {out!r}: wrongly legal {extra}, wrongly illegal {missing}"
            )
        ids = got.token_ids()
        if ids.size == 0:
            break
        t = int(rng.choice(ids.tolist()))
        if t == vocab.eos_token_id:
            assert oracle.complete(out)
            break
        m.advance(t)
        out += vocab.token_bytes[t]
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns(), st.integers(0, 2**32))
def test_mask_is_exact_on_toy_vocab(toy: gm.Vocabulary, p: Pattern, seed: int) -> None:
    oracle = Oracle(p)
    if not oracle.viable(b""):
        with pytest.raises(gm.GrammarError):
            Regex(p.re_text, flags=p.flags)
        return
    compiled = Regex(p.re_text, flags=p.flags).compile(toy)
    check_walk(compiled, oracle, random.Random(seed), steps=6)


FIXED = [
    Pattern(r"[a-z]+@[a-z]+\.(?:com|org)", r"[a-z]+@[a-z]+\.(?:com|org)", 0, {"[a-z]", "@", r"\.", "c", "o"}),
    Pattern(r"\d{4}-\d\d", r"[0-9]{4}-[0-9][0-9]", re.ASCII, {r"\d", "-"}),
    Pattern("(?:ab|中文|😀)+", "(?:ab|中文|😀)+", 0, {"a", "b", "中", "文", "😀"}),
]


@pytest.mark.parametrize("p", FIXED, ids=lambda p: p.re_text)
def test_mask_is_exact_on_tekken(tekken: gm.Vocabulary, p: Pattern) -> None:
    oracle = Oracle(p)
    compiled = Regex(p.re_text, flags=p.flags).compile(tekken)
    check_walk(compiled, oracle, random.Random(0), steps=5)


def test_special_padding_and_eos(toy: gm.Vocabulary) -> None:
    m = Regex("a+").compile(toy).matcher()
    mask = m.mask()
    assert 1 not in mask and 2 not in mask and toy.size - 1 not in mask and 0 not in mask
    m.advance(3 + ord("a"))
    assert 0 in m.mask()
    for bad in (1, 2, toy.size - 1, 3 + ord("b")):
        with pytest.raises(gm.TokenRejected):
            m.advance(bad)
    m.advance(0)
    assert m.is_finished()


WALK_PATTERNS = [
    r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}",
    r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
    r"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)",
    r"(?i)hello,? (world|wörld)!?",
    r"\w+( \w+){0,3}\.",
    r'"([^"\\\n]|\\.)*"',
]


@pytest.mark.parametrize("pattern", WALK_PATTERNS)
def test_random_walks_on_tekken_end_in_matches(tekken: gm.Vocabulary, pattern: str) -> None:
    """Soundness: constrained random walks that end with EOS spell a full match; the others a prefix."""
    compiled = Regex(pattern).compile(tekken)
    rng = np.random.default_rng(0)
    pad = [False] * (tekken.size - len(tekken.token_bytes))
    single = np.array([len(b) == 1 for b in tekken.token_bytes] + pad)
    finished = 0
    for _ in range(15):
        m = compiled.matcher()
        toks: list[int] = []
        for _ in range(150):
            ids = m.mask().token_ids()
            rest = ids[ids != tekken.eos_token_id]
            if rest.size == 0 or (rest.size < ids.size and rng.random() < 0.5):
                t = tekken.eos_token_id
            else:
                ids = rest
                short = ids[single[ids]]
                t = int(rng.choice(short if short.size and rng.random() < 0.7 else ids))
            m.advance(t)
            if t == tekken.eos_token_id:
                break
            toks.append(t)
        text = tekken.decode(toks)
        if m.is_finished():
            finished += 1
            assert re.fullmatch(pattern, text.decode("utf-8")), text
        else:
            assert oracle_prefix_ok(pattern, text)
    assert finished > 0


def oracle_prefix_ok(pattern: str, data: bytes) -> bool:
    """Unfinished walks must still be prefixes of some match (checked with ``regex`` partial)."""
    import regex

    from .support_regex import explicit

    # regex's \w and \d differ from re's: spell them as the classes re uses
    oracle = pattern.replace(r"\w", explicit(r"\w", 0)).replace(r"\d", explicit(r"\d", 0))
    text = data.decode("utf-8", "ignore")  # a dangling partial character is dropped
    return regex.fullmatch(oracle, text, partial=True) is not None


DOCS = {
    r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}": ["john.doe@example.com", "x_y+z@mail.uni-bonn.de"],
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)": [
        "2024-01-31T23:59:59.123Z",
        "1999-12-31T00:00:00+05:30",
    ],
    r"(?s)\w+(\W+\w+)*\W?": ["Grüße aus Köln, 東京 und 😀 — ça va?", "naïve café\nrésumé."],
    r'\{"name": "[^"]*", "age": \d+\}': ['{"name": "Zoë", "age": 42}'],
}


@pytest.mark.parametrize("pattern", list(DOCS))
def test_tokenized_documents_are_accepted(tekken: gm.Vocabulary, tekken_tokenizer: Any, pattern: str) -> None:
    compiled = Regex(pattern).compile(tekken)
    for doc in DOCS[pattern]:
        assert re.fullmatch(pattern, doc)
        m = compiled.matcher()
        for t in tekken_tokenizer.encode(doc, bos=False, eos=False):
            assert t in m.mask()
            m.advance(t)
        assert tekken.eos_token_id in m.mask()
        m.advance(tekken.eos_token_id)


def test_forced_bytes_and_tokens(tekken: gm.Vocabulary) -> None:
    compiled = Regex(r'\{"verb": "(run|stop)"\}').compile(tekken)
    m = compiled.matcher()
    assert m.forced_bytes() == b'{"verb": "'
    forced = m.forced_tokens()
    assert tekken.decode(forced) == b'{"verb": "'
    m.advance_many(forced)
    assert m.forced_bytes() == b""
    order = Regex(r"ORD-\d{6}").compile(tekken).matcher()
    assert order.forced_bytes() == b"ORD-"
    order.advance_many(order.forced_tokens())
    assert order.forced_bytes() == b""


def test_and_of_regexes_is_one_product_automaton(toy: gm.Vocabulary) -> None:
    g = Regex(r"[a-c]+") & Regex(r".{2,3}")
    compiled = g.compile(toy)
    assert hasattr(compiled, "dfa")
    oracle_re = re.compile(r"(?=.{2,3}\Z)[a-c]+")
    for n in range(5):
        for text in ("a" * n, "abc"[:n], "ax"[:n]):
            m = compiled.matcher()
            ok = True
            for ch in text.encode():
                if 3 + ch not in m.mask():
                    ok = False
                    break
                m.advance(3 + ch)
            complete = ok and m.is_accepting()
            assert complete == bool(oracle_re.fullmatch(text)), text


ERRORS = [
    ("(ab", 1),
    ("ab)", 3),
    ("[a-", 1),
    ("a\\", 2),
    ("a{2,1}", 3),
    ("x(a)\\1", 5),
    ("(?P<n>a)(?P=n)", 9),
    ("(?=a)a", 1),
    ("ab(?<!b)", 3),
    ("a(?!b)", 2),
    ("\\bfoo", 1),
    ("foo\\B", 4),
    # 3.11's possessive repeats and atomic groups (refused where they start); 3.10's parser refuses
    # them as syntax, where it finds the error
    ("a*+", 2 if sys.version_info >= (3, 11) else 3),
    ("(?>ab)", 1 if sys.version_info >= (3, 11) else 2),
    ("a(?i)b", 2),
    ("(a)(?(1)b|c)", 4),
    ("[^\\s\\S]", None),
    ("(" * 2000 + "a" + ")" * 2000, None),
]


@pytest.mark.parametrize(("pattern", "column"), ERRORS)
def test_bad_patterns_raise_grammar_error_with_position(pattern: str, column: int | None) -> None:
    with pytest.raises(gm.GrammarError) as info:
        Regex(pattern)
    assert info.value.__cause__ is None or not isinstance(info.value.__cause__, re.error)
    if column is not None:
        assert info.value.column == column, str(info.value)
        assert info.value.line == 1


def test_state_limit_fails_fast() -> None:
    t0 = time.perf_counter()
    with pytest.raises(gm.GrammarError, match="more than 10000 states"):
        Regex(r"(a|b)*a(a|b){25}")
    assert time.perf_counter() - t0 < 5
    with pytest.raises(gm.GrammarError, match="more than 50 states"):
        Regex(r"\w{60}", max_states=50)


def test_regex_accepts_compiled_patterns_and_flags() -> None:
    g = Regex(re.compile("abc", re.IGNORECASE))
    assert g.to_dfa().matches(b"ABC")
    assert Regex("a.b", flags=re.DOTALL).to_dfa().matches(b"a\nb")
    with pytest.raises(gm.GrammarError):
        Regex("a", flags=re.LOCALE)
    with pytest.raises(gm.GrammarError):
        Regex(b"abc")  # type: ignore[arg-type]
    with pytest.raises(gm.GrammarError, match="incompatible"):
        Regex("a", flags=re.ASCII | re.UNICODE)


def test_sentencepiece_documents_are_accepted(
    sentencepiece: gm.Vocabulary, sentencepiece_tokenizer: Any
) -> None:
    """Completeness on the 32k sentencepiece vocabulary (byte-fallback tokens, "▁" as space)."""
    pattern = r" ?[\w.,'!?😀-]+( [\w.,'!?😀-]+)*"
    compiled = Regex(pattern).compile(sentencepiece)
    for doc in ["Grüße aus Köln, 東京 und ça va?", "Hello, world!", "naïve O'Neil-Smith 😀 42."]:
        ids = sentencepiece_tokenizer.encode(doc, bos=False, eos=False)
        text = sentencepiece.decode(ids).decode("utf-8")
        assert re.fullmatch(pattern, text), text
        m = compiled.matcher()
        for t in ids:
            assert t in m.mask(), (doc, t)
            m.advance(t)
        assert sentencepiece.eos_token_id in m.mask()


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(patterns(max_depth=2), st.integers(0, 2**32))
def test_mask_is_exact_on_tekken_generated(tekken: gm.Vocabulary, p: Pattern, seed: int) -> None:
    """Soak (``-m slow``): generated patterns against the oracle on the real 131k vocabulary."""
    oracle = Oracle(p)
    if not oracle.viable(b""):
        return
    check_walk(Regex(p.re_text, flags=p.flags).compile(tekken), oracle, random.Random(seed), steps=3)


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(alphabet=st.sampled_from(list('ab"-.\\|()é😀 x')), min_size=1, max_size=5),
                      min_size=1, max_size=5),
       group=st.sampled_from(["", "(?:", "("]))
def test_literal_alternations_are_made_from_their_strings_as_re_reads_them(words: list[str],
                                                                           group: str) -> None:
    # a pattern of escaped literals ("port", a Lark keyword) takes the DFA of its strings, not
    # re's parser and the subset construction: the same language as re.fullmatch
    from grammarmask.automata import regex as R

    pattern = "|".join(map(re.escape, words))
    if group:
        pattern = f"{group}{pattern})"
    assert R._plain_alternation(pattern, 0) is not None
    dfa = R._build(pattern, 0, R.DEFAULT_MAX_STATES)
    probes = {w + extra for w in words for extra in ("", "a", "|", words[0])}
    probes |= {w[:k] for w in words for k in range(len(w))} | {"".join(words)}
    for p in probes:
        assert dfa.matches(p.encode("utf-8")) == bool(re.fullmatch(pattern, p)), (pattern, p)
