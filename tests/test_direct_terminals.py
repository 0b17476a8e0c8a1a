"""Terminals built directly instead of from their regex text: the same DFA as the regex, and `json`'s
view of the keys; how a regex terminal is printed for lark; the Lark front end's one-pass rule
positions and GC handling."""

from __future__ import annotations

import gc
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammarmask.automata import DFA, regex_to_dfa
from grammarmask.errors import GrammarError
from grammarmask.frontends import lark as lark_frontend
from grammarmask.frontends.json_schema import JsonSchema
from grammarmask.frontends.jsonschema.strings import key_not_in, key_not_in_dfa, key_not_in_terminal
from grammarmask.ir.builder import Alt, Pat, Rep, Seq, build_cfg

from .support import isomorphic

# characters with every kind of JSON text: raw, short escapes, \u00XX controls, "/" (raw or \/),
# multi-byte UTF-8 sharing lead bytes, U+2028 (raw in JSON, a line terminator in ECMA regexes)
CHARS = ["a", "b", "ab"[0], '"', "\\", "/", "\n", "\x01", "\x1f", "é", "ê", "中", "\u2028", "\U0001f600", " "]
keys = st.lists(st.lists(st.sampled_from(CHARS), max_size=5).map("".join), max_size=6)


def _quoted_regex_dfa(words: list[str]) -> DFA:
    return regex_to_dfa('"' + key_not_in(words) + '"', max_states=100_000)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys, st.lists(st.lists(st.sampled_from(CHARS), max_size=6).map("".join), max_size=20))
def test_key_exclusion_dfa_equals_its_regex(words: list[str], probes: list[str]) -> None:
    built = key_not_in_dfa(tuple(sorted(set(words))))
    assert isomorphic(built, _quoted_regex_dfa(words)), words
    for s in probes + words:
        text = json.dumps(s, ensure_ascii=False)  # the canonical JSON text of the key
        assert built.matches(text.encode("utf-8")) == (s not in words), (words, s)
        # every other canonical spelling of the same key (\/ for /, \u00XX for a control) too
        alt = text.replace("/", "\\/").replace("\\n", "\\u000a")
        assert built.matches(alt.encode("utf-8")) == (s not in words), (words, alt)


def _patterns(e: object) -> list[Pat]:
    if isinstance(e, Pat):
        return [e]
    if isinstance(e, (Seq, Alt)):
        return [p for x in (e.items if isinstance(e, Seq) else e.alts) for p in _patterns(x)]
    if isinstance(e, Rep):
        return _patterns(e.item)
    return []


def test_the_key_exclusion_terminal_carries_the_dfa_of_its_regex() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "née/x": {"type": "integer"}},
        "additionalProperties": {"type": "boolean"},
    }
    rules = JsonSchema(schema).rules()
    built = [p for body in rules.values() for p in _patterns(body) if p.build is not None]
    assert len(built) == 1
    dfa = built[0].build()
    assert isomorphic(dfa, regex_to_dfa(built[0].regex, max_states=100_000))
    assert dfa.matches(b'"other"') and not dfa.matches(b'"name"')
    assert not dfa.matches('"née\\/x"'.encode()) and not dfa.matches('"née/x"'.encode())
    # the compiled grammar uses the built DFA, not one made again from the regex
    assert any(t.dfa is dfa for t in build_cfg(rules).terminals)


def test_surrogate_keys_are_left_to_the_regex() -> None:
    term = key_not_in_terminal(["a\ud800"])
    assert term.build is None and term.regex == '"' + key_not_in(["a\ud800"]) + '"'


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet='ab"/\\\n', max_size=10))
def test_regex_terminal_escapes_quotes_and_slashes(r: str) -> None:
    out = []  # the character loop the printer replaced
    i = 0
    while i < len(r):
        ch = r[i]
        if ch == "\\" and i + 1 < len(r):
            nxt = r[i + 1]
            out.append("\\x22" if nxt == '"' else "\\/" if nxt == "/" else r[i : i + 2])
            i += 2
            continue
        out.append("\\x22" if ch == '"' else "\\/" if ch == "/" else ch)
        i += 1
    assert str(Pat(r)) == "/" + "".join(out) + "/"


@pytest.mark.parametrize(
    "text",
    [
        "start: a b\n  ?a: \"x\"\n\n!b.2: c1\n c1 x\nc1: \"y\"\n?c10: \"z\"\n",
        JsonSchema({"type": "object", "properties": {"a": {"type": "array"}}}).to_lark(),
    ],
)
def test_rule_positions_in_one_pass(text: str) -> None:
    names = set(re.findall(r"\w+", text)) | {"missing"}
    slow = {n: p for n in names if (p := lark_frontend._find_definition(text, n)) is not None}
    assert lark_frontend._definitions(text, names) == slow


def test_gc_state_is_restored() -> None:
    assert gc.isenabled()
    lark_frontend.lark_to_cfg('start: "a"')
    assert gc.isenabled()
    with pytest.raises(GrammarError):
        lark_frontend.lark_to_cfg("start: undefined_rule")
    assert gc.isenabled()
    gc.disable()
    try:
        lark_frontend.lark_to_cfg('start: "a"')
        assert not gc.isenabled()
    finally:
        gc.enable()
