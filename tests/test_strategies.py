"""The strategies against external references (`re`, `regex` partial matching, `lark`), and rollback
verified against fresh matchers on token paths."""

from __future__ import annotations

import functools
import re
from typing import Any

import lark
import pytest
import regex
from hypothesis import find, given, settings
from hypothesis import strategies as st

from grammarmask.errors import GrammarError
from grammarmask.frontends.choice import Choice
from grammarmask.frontends.lark import Lark
from grammarmask.frontends.regex import Regex
from grammarmask.strategies import byte_vocab, from_grammar, prefixes, token_paths
from grammarmask.testing import byte_vocabulary

PATTERNS = [
    r"[a-z]+(,[a-z]+)*",
    r"-?(0|[1-9][0-9]*)(\.[0-9]+)?",
    r"(ab|cd)*e",
    r"\{\"k\": (true|false)\}",
    r"[α-ω]{1,3}x",
]


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_from_grammar_regex_documents_fullmatch(pattern: str, data: Any) -> None:
    doc = data.draw(from_grammar(Regex(pattern), max_size=12))
    assert re.fullmatch(pattern, doc), doc


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_prefixes_are_viable(pattern: str, data: Any) -> None:
    p = data.draw(prefixes(Regex(pattern), max_size=10))
    assert _viable_text_prefix(pattern, p), p


@functools.cache
def _completions(tail: bytes) -> tuple[str, ...]:
    """The BMP characters whose UTF-8 starts with ``tail`` (a cut-off multi-byte character)."""
    return tuple(c for c in map(chr, range(0x80, 0xD800)) if c.encode().startswith(tail))


def _viable_text_prefix(pattern: str, p: bytes) -> bool:
    """Whether some string matching ``pattern`` starts with the UTF-8 bytes ``p`` (via `regex`)."""
    for cut in range(4):
        try:
            head = p[: len(p) - cut].decode()
        except UnicodeDecodeError:
            continue
        tails = _completions(p[len(p) - cut :]) if cut else ("",)
        return any(regex.fullmatch(pattern, head + c, partial=True) for c in tails)
    return False


CALC = r"""
start: expr
?expr: expr "+" term | term
?term: term "*" atom | atom
?atom: NUMBER | "(" expr ")"
NUMBER: /[0-9]+/
%ignore " "
"""


@settings(max_examples=60, deadline=None)
@given(from_grammar(Lark(CALC), max_size=20))
def test_from_grammar_lark_documents_parse_with_lark(doc: str) -> None:
    lark.Lark(CALC).parse(doc)


@settings(max_examples=30, deadline=None)
@given(from_grammar(Choice(["red", "green", "blue"]), encoding=None))
def test_from_grammar_choice(doc: bytes) -> None:
    assert doc in (b"red", b"green", b"blue")


def test_documents_shrink_toward_short_small_bytes() -> None:
    assert find(from_grammar(Regex(r"[a-z]+")), lambda d: len(d) >= 3) == "aaa"
    assert find(from_grammar(Regex(r"x|yy|zzz")), lambda d: True) == "x"
    # nesting is bounded by max_size: derivations are steered by each rule's shortest completion
    deep = find(from_grammar(Lark(CALC), max_size=5), lambda d: d.count("(") >= 2)
    lark.Lark(CALC).parse(deep)
    assert deep == "((0))"
    assert find(from_grammar(Lark(CALC), max_size=6), lambda d: True) == "0"


def test_from_grammar_refuses_other_vocabularies() -> None:
    other = Regex("a").compile(byte_vocabulary([b"aa"]).__class__.from_tokens([b"", b"a"], eos_token_id=0))
    with pytest.raises(GrammarError):
        from_grammar(other)
    with pytest.raises(GrammarError):
        from_grammar("a")  # type: ignore[arg-type]
    with pytest.raises(GrammarError):
        token_paths(Regex("a"))  # type: ignore[arg-type]


VOCAB = byte_vocabulary([b"ab", b"abc", b"[1", b",2", b"1]", b"  ", b"[[", b"]]", b"12"])
NESTED = Lark(r"""
start: list
list: "[" [item ("," item)*] "]"
?item: list | NUMBER
NUMBER: /[0-9]+/
%ignore " "
""")


@pytest.mark.parametrize("grammar", [Regex(r"(ab|abc)*[0-9]?"), NESTED], ids=["regex", "lark"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_rollback_equals_fresh_matcher(grammar: Any, data: Any) -> None:
    """Speculative decoding: advance k tokens, roll back j; state and masks equal a fresh matcher
    advanced k - j tokens."""
    compiled = grammar.compile(VOCAB)
    path = data.draw(token_paths(compiled, max_tokens=10))
    k = len(path)
    j = data.draw(st.integers(0, k))
    m = compiled.matcher()
    m.advance_many(path)
    m.rollback(j)
    fresh = compiled.matcher()
    fresh.advance_many(path[: k - j])
    assert m.num_tokens == fresh.num_tokens == k - j
    assert m.is_accepting() == fresh.is_accepting()
    assert m.is_finished() == fresh.is_finished()
    assert m.mask() == fresh.mask()
    # and the rest of the path replays identically
    for t in path[k - j :]:
        assert t in m.mask()
        m.advance(t)
        fresh.advance(t)
        assert m.mask() == fresh.mask()
    with pytest.raises(GrammarError):
        m.rollback(k + 1)


@settings(max_examples=30, deadline=None)
@given(token_paths(NESTED.compile(VOCAB), max_tokens=12))
def test_token_paths_are_viable_prefixes_by_lark(path: list[int]) -> None:
    text = VOCAB.decode(path).decode()
    parser = lark.Lark(NESTED_TEXT, parser="lalr")
    if path and path[-1] == VOCAB.eos_token_id:
        parser.parse(text)
    else:  # a viable prefix: lark's interactive parser accepts every lexeme of it... check a completion
        closes = "]" * max(0, text.count("[") - text.count("]"))
        for fix in ("", "1", "]", "[]"):
            try:
                parser.parse(text + fix + closes)
                return
            except lark.exceptions.LarkError:
                continue
        raise AssertionError(f"{text!r} has no completion among the simple ones tried")


NESTED_TEXT = r"""
start: list
list: "[" [item ("," item)*] "]"
?item: list | NUMBER
NUMBER: /[0-9]+/
%ignore " "
"""


def test_byte_vocab_is_shared() -> None:
    assert byte_vocab() is byte_vocab()


CALC_TEXT = 'start: e\n?e: e "+" NUM | NUM | "(" e ")"\nNUM: /[0-9]+/\n%ignore " "'


@pytest.mark.parametrize("kind", ["lark", "regex"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_rollback_on_tekken(tekken: Any, kind: str, data: Any) -> None:
    """Speculative decoding on the real vocabulary: roll back j of k tokens == fresh matcher at k - j."""
    g = Lark(CALC_TEXT) if kind == "lark" else Regex(r"\{\"n\": [0-9]{1,6}(, \"s\": \"[a-z ]*\")?\}")
    compiled = g.compile(tekken)
    path = data.draw(token_paths(compiled, max_tokens=10))
    j = data.draw(st.integers(0, len(path)))
    m = compiled.matcher()
    m.advance_many(path)
    m.rollback(j)
    fresh = compiled.matcher()
    fresh.advance_many(path[: len(path) - j])
    assert m.mask() == fresh.mask() and m.is_accepting() == fresh.is_accepting()
    if kind == "lark":
        text = tekken.decode(path).decode("utf-8", errors="strict")
        if path and path[-1] == tekken.eos_token_id:
            lark.Lark(CALC_TEXT).parse(text)
