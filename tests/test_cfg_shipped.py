"""The shipped grammars (grammars/*.lark, *.gbnf) on the real tekken vocabulary.

- every valid example parses with lark (for .lark) and is accepted byte by byte and token by token
  (tokenized by the real tokenizer); invalid examples are rejected by lark and by us;
- soundness: random walks over legal tekken tokens, finished by a short search, end in text that
  ``lark.Lark(grammar).parse`` accepts (for .gbnf: the same text, checked with an equivalent .lark);
- no dead ends: after every legal token the mask (EOS included) is non-empty.
"""

from __future__ import annotations

import os
import random
from collections import deque
from typing import Any

import lark
import pytest

from grammarmask.errors import TokenRejected
from grammarmask.frontends.gbnf import Gbnf
from grammarmask.frontends.lark import Lark
from grammarmask.testing import assert_accepts, assert_rejects, byte_vocabulary

from .support_json_schema import parses

GRAMMARS = os.path.join(os.path.dirname(__file__), "..", "grammars")

JSON_VALID = [
    '{"a": 1}',
    '[1, -2.5e3, true, false, null, "x\\"y\\\\z\\u00e9"]',
    '{\n  "name": "Alice",\n  "tags": ["a", "b"],\n  "nested": {"x": [], "y": {}}\n}',
    '"just a string"',
    "  42  ",
    '{"unicode": "h\u00e9llo \u2603 \U0001f600"}',
]
JSON_INVALID = ['{"a": 1,}', "[1 2]", '{"a"}', '"unterminated', "tru", "{'a': 1}"]

EXAMPLES: dict[str, tuple[list[str], list[str]]] = {
    "json.lark": (JSON_VALID, JSON_INVALID),
    "json.gbnf": (JSON_VALID, [*JSON_INVALID, "01", '"a\nb"']),
    "arithmetic.lark": (
        ["1 + 2 * 3", "-(x1 - 4.5) ** 2 ** 3 / y % 7", "f(a, g(b), 3)", "max()", "+-+1"],
        ["1 +", "(1", "1 2", "f(,)", "**2"],
    ),
    "arithmetic.gbnf": (
        ["1+2*3", "-(4.5 - 2) / 3", "((1))", "1 +  2"],
        ["1+", "(1", "1 2", "1.", "a"],
    ),
    "sql.lark": (
        [
            "SELECT * FROM users",
            "select name, count(*) as n from users u join orders o on u.id = o.user_id "
            "where o.total > 10.5 and u.name like 'A%' group by name having count(*) > 2 "
            "order by n desc limit 10 offset 5;",
            "SELECT DISTINCT a.x FROM t a LEFT OUTER JOIN s ON a.id = s.id WHERE a.y IS NOT NULL",
            "select x from (select y as x from t) as sub where x in (1, 2, 3) and z between 1 and 2",
        ],
        ["SELECT FROM t", "SELECT * users", "select * from t where x =", "select * from t limit x"],
    ),
    "csv.lark": (
        ["a,b,c\n1,2,3\n", 'name,quote\n"Smith, J","he said ""hi"""\n', "h\nx\n,\n", "a,b\n1,2"],
        ['a,b\n"x,1\n', 'a\n"x"y\n'],
    ),
    "python_expr.lark": (
        [
            "x + 1",
            "f(a, b=2)[0].attr",
            "[x * 2 for x in range(10) if x % 2]",
            "lambda a, b: a if a > b else b",
            "{'k': (1, 2), \"v\": None} and not True or False",
            "a is not b and c not in d",
        ],
        ["x +", "f(a b)", "lambda: ", "[1, 2", "a if b"],
    ),
}

# For .gbnf soundness: an equivalent .lark grammar (single-character terminals, no ignore).
GBNF_AS_LARK = {
    "arithmetic.gbnf": r"""
start: expr
expr: term (ws /[-+]/ ws term)*
term: factor (ws /[*\/]/ ws factor)*
factor: "-" ws factor | "(" ws expr ws ")" | number
number: DIGIT+ ("." DIGIT+)?
DIGIT: /[0-9]/
ws: (" " (" " " "?)?)?
""",
}

FINISHERS: dict[str, list[str]] = {
    "json.lark": ['"', "]", "}", "0"],
    "json.gbnf": ['"', "]", "}", "0"],
    "arithmetic.lark": ["1", ")"],
    "arithmetic.gbnf": ["1", ")"],
    "sql.lark": [" ", "x", ")", "'", "1", " from t", " by x", " and", " on x"],
    "csv.lark": ['"', "\n"],
    "python_expr.lark": ["x", ")", "]", "}", "'", '"', " in x", " else x"],
}


def _grammar(name: str) -> Any:
    path = os.path.join(GRAMMARS, name)
    return Gbnf.from_file(path) if name.endswith(".gbnf") else Lark.from_file(path)


def _lark_parser(name: str) -> lark.Lark | None:
    if name.endswith(".lark"):
        with open(os.path.join(GRAMMARS, name), encoding="utf-8") as f:
            return lark.Lark(f.read(), parser="earley", lexer="dynamic")
    text = GBNF_AS_LARK.get(name)
    return None if text is None else lark.Lark(text, parser="earley", lexer="dynamic")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_agree_with_lark_and_are_accepted(name: str) -> None:
    valid, invalid = EXAMPLES[name]
    parser = _lark_parser(name)
    g = _grammar(name)
    vocab = byte_vocabulary()
    for text in valid:
        if parser is not None:
            assert parses(parser, text), text
        assert_accepts(g, text, vocab)
    for text in invalid:
        if parser is not None:
            assert not parses(parser, text), text
        assert_rejects(g, text, vocab)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_accepted_token_by_token_with_tekken(name: str, tekken: Any, tekken_tokenizer: Any) -> None:
    compiled = _grammar(name).compile(tekken)
    for text in EXAMPLES[name][0]:
        m = compiled.matcher()
        for t in tekken_tokenizer.encode(text, bos=False, eos=False):
            assert t in m.mask(), (text, tekken.token_bytes[t])
            m.advance(t)
        assert m.is_accepting(), text
        assert tekken.eos_token_id in m.mask()


def _finish(compiled: Any, state: Any, atoms: list[str], max_depth: int = 8) -> bytes | None:
    """The shortest completion made of ``atoms`` to an accepting state, if short."""
    todo = deque([(state, b"")])
    seen: set[Any] = set()
    while todo:
        st, out = todo.popleft()
        if compiled.is_accepting_state(st):
            return out
        if len(out) >= max_depth:
            continue
        for atom in atoms:
            nxt = compiled.feed(st, atom.encode())
            if not nxt:
                continue
            key = tuple((e.sig, p, s, f) for e, p, s, f in nxt) if isinstance(nxt, tuple) else nxt
            if key not in seen:
                seen.add(key)
                todo.append((nxt, out + atom.encode()))
    return None


@pytest.mark.parametrize("name", sorted(FINISHERS))
def test_random_walks_are_sound_and_never_dead_end(name: str, tekken: Any) -> None:
    compiled = _grammar(name).compile(tekken)
    parser = _lark_parser(name)
    rng = random.Random(1234)
    eos = tekken.eos_token_id
    finished = 0
    for _walk in range(6):
        m = compiled.matcher()
        out = b""
        for step in range(40):
            legal = m.mask().token_ids().tolist()
            assert legal, f"dead end after {out!r}"
            if eos in legal and rng.random() < 0.3:
                break
            choices = [t for t in legal if t != eos]
            if not choices:
                break
            t = rng.choice(choices)
            m.advance(t)
            out += tekken.token_bytes[t]
            if step > 12 and _is_utf8(out) and rng.random() < 0.3:
                break
        if not _is_utf8(out):
            continue
        tail = _finish(compiled, m.state, FINISHERS[name])
        if tail is None:
            continue
        finished += 1
        text = (out + tail).decode()
        if parser is not None:
            assert parses(parser, text), text
    assert finished >= 3


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_rejected_token_leaves_the_matcher_unchanged(tekken: Any, tekken_tokenizer: Any) -> None:
    m = _grammar("json.lark").compile(tekken).matcher()
    for t in tekken_tokenizer.encode('{"a": [1,', bos=False, eos=False):
        m.advance(t)
    before = m.mask()
    state = m.state
    bad = tekken_tokenizer.encode("}", bos=False, eos=False)[0]
    assert bad not in before
    with pytest.raises(TokenRejected):
        m.advance(bad)
    assert m.state is state and m.mask() == before
    m.advance(tekken_tokenizer.encode(" 2", bos=False, eos=False)[0])
    m.rollback(1)
    assert m.mask() == before
