"""Structural tags: masks equal a brute-force oracle on random walks (a small alphabet, tokens that
straddle free text, begins, bodies and ends, special-token begins and ends), the XGrammar/vLLM JSON
forms, their errors, and Reasoning / Grammar.after."""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
from collections.abc import Callable
from typing import Any

import pytest

import grammarmask as gm
from grammarmask.testing import assert_accepts, assert_mask_exact, assert_rejects, byte_vocabulary
from grammarmask.vocab import special_spelling

# --- an independent reference: the structural-tag language decided directly ------------------------

Tagspec = tuple[str, str, str]  # begin, body regex, end (single chars "S"/"E" stand for special tokens)


def member(s: str, tags: list[Tagspec], triggers: list[str], *, at_least_one: bool = False,
           stop_after_first: bool = False) -> bool:
    """Whether ``s`` is free text and tags as the structural tag says: free text holds no trigger
    (nor a special token), so the first trigger (or special begin) starts a tag."""

    def rest(s: str, n_tags: int) -> bool:
        hits = [i for t in triggers if (i := s.find(t)) >= 0] + [i for c in "SE" if (i := s.find(c)) >= 0]
        if not hits:
            free_ok = not (at_least_one and n_tags == 0) and not (stop_after_first and n_tags and s)
            return free_ok
        p = min(hits)
        if p and at_least_one and n_tags == 0:
            return False
        if p and stop_after_first and n_tags:
            return False
        if stop_after_first and n_tags:
            return False
        for begin, body, end in tags:
            if not s.startswith(begin, p):
                continue
            q = p + len(begin)
            for j in range(q, len(s) + 1):
                if re.fullmatch(body, s[q:j]) and s.startswith(end, j) and rest(s[j + len(end):], n_tags + 1):
                    return True
        return False

    return rest(s, 0)


class Oracle:
    """Viability by search: a prefix is viable iff some completion of at most ``k`` characters over
    ``alphabet`` makes a member (every viable prefix of these small languages has one that short)."""

    def __init__(
        self, accept: Callable[[str], bool], alphabet: str, k: int, specials: dict[str, str]
    ) -> None:
        self.accept = functools.lru_cache(maxsize=None)(accept)
        self.spell = {special_spelling(name): ch for ch, name in specials.items()}
        self.tails = ["".join(c) for n in range(k + 1) for c in itertools.product(alphabet, repeat=n)]
        self._viable = functools.lru_cache(maxsize=None)(self._search)

    def _search(self, s: str) -> bool:
        return any(self.accept(s + t) for t in self.tails)

    def _decode(self, data: bytes) -> list[str]:
        """The strings ``data`` may be a prefix of (a cut spelling at the end: every special it starts)."""
        for sp, ch in self.spell.items():
            data = data.replace(sp, ch.encode())
        cut = data.rfind(b"\xff")
        if cut < 0:
            return [data.decode("utf-8", errors="replace")]
        head, tail = data[:cut].decode("utf-8", errors="replace"), data[cut:]
        return [head + ch for sp, ch in self.spell.items() if sp.startswith(tail)]

    def viable(self, data: bytes) -> bool:
        return any(self._viable(s) for s in self._decode(data))

    def complete(self, data: bytes) -> bool:
        for sp, ch in self.spell.items():
            data = data.replace(sp, ch.encode())
        return b"\xff" not in data and bool(self.accept(data.decode("utf-8", errors="replace")))


TOKENS = [b"", b"a", b"b", b"<", b">", b"<a", b"b>", b"a<", b">a", b"<b", b">>", b"ab<a", b"b><", b"\xff",
          b"", b""]
SPECIALS = {"S": "<T>", "E": "</T>"}


def vocab() -> gm.Vocabulary:
    return gm.Vocabulary.from_tokens(TOKENS, eos_token_id=0, special_token_ids=[14, 15],
                                     special_token_names={14: "<T>", 15: "</T>"})


def grammar_of(tags: list[Tagspec], triggers: list[str], **kw: bool) -> gm.Grammar:
    def piece(x: str) -> str | gm.SpecialToken:
        return gm.SpecialToken(SPECIALS[x]) if x in SPECIALS else x

    return gm.StructuralTag([(piece(b), gm.Regex(body), piece(e)) for b, body, e in tags],
                            triggers=triggers, **kw)


CASES: list[tuple[list[Tagspec], list[str], dict[str, bool]]] = [
    ([("<a", "b+", ">"), ("<b", "a?", ">>")], ["<"], {}),
    ([("<a", "b+", ">"), ("<b", "a?", ">>")], ["<"], {"at_least_one": True}),
    ([("<a", "b*", ">")], ["<a"], {"stop_after_first": True}),
    ([("<a", "b*", ">")], ["<"], {"at_least_one": True, "stop_after_first": True}),
    ([("S", "a+", "E"), ("<", "b", ">")], ["<"], {}),
]


def _walks(compiled: gm.CompiledGrammar, n: int, length: int, seed: int) -> list[list[int]]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        m, path = compiled.matcher(), []
        for _ in range(length):
            legal = [t for t in m.mask().token_ids().tolist() if t != 0]
            if not legal:
                break
            t = rnd.choice(legal)
            m.advance(t)
            path.append(t)
        out.append(path)
    return out


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize(("tags", "triggers", "kw"), CASES)
def test_masks_equal_the_oracle_on_random_walks(engine: str, tags: list[Tagspec], triggers: list[str],
                                                kw: dict[str, bool]) -> None:
    v = vocab()
    compiled = grammar_of(tags, triggers, **kw).compile(v, engine=engine)
    alphabet = "ab<>SE" if any("S" in t[0] for t in tags) else "ab<>"
    k = 4 if kw.get("at_least_one") else 3  # the longest completion any viable prefix needs
    oracle = Oracle(lambda s: member(s, tags, triggers, **kw), alphabet, k, SPECIALS)
    for path in _walks(compiled, 8, 5, seed=len(tags)):
        assert_mask_exact(compiled, path, oracle.viable, oracle.complete)


def test_the_oracle_is_not_vacuous() -> None:
    tags, trig = CASES[0][0], CASES[0][1]
    assert member("x<abb>y<b>>", tags, trig)
    assert not member("x<ab", tags, trig) and not member("<c", tags, trig) and not member("<a>", tags, trig)


def test_free_text_never_holds_a_trigger_and_tags_repeat() -> None:
    v = byte_vocabulary()
    g = gm.StructuralTag([("<tool>", gm.Regex("[0-9]+"), "</tool>")], triggers=["<tool>"])
    assert_accepts(g, "hi <tool>12</tool> and <tool>3</tool>!", v)
    assert_accepts(g, "no call at all, <tol> is fine", v)
    assert_rejects(g, "<tool>x</tool>", v)
    assert_rejects(g, "<tool>1", v)


# --- JSON forms -------------------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}


def test_legacy_json_as_vllm_sends_it() -> None:
    spec = {"type": "structural_tag", "triggers": ["<f="], "structures": [
        {"begin": "<f=a>", "schema": SCHEMA, "end": "</f>"},
        {"begin": "<f=b>", "schema": {"type": "string"}, "end": "</f>"}]}
    g = gm.StructuralTag.from_json(json.dumps(spec))
    v = byte_vocabulary()
    assert_accepts(g, 'x <f=a>{"a": 1}</f> y <f=b>"q"</f>', v)
    assert_rejects(g, 'x <f=a>{"a": "1"}</f>', v)
    assert_rejects(g, "x <f=c>", v)


def test_format_tree() -> None:
    spec = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"},
        {"type": "triggered_tags", "triggers": ["<f="], "at_least_one": True, "stop_after_first": True,
         "tags": [{"type": "tag", "begin": "<f=a>", "end": "</f>",
                   "content": {"type": "json_schema", "json_schema": SCHEMA}}]}]}}
    g = gm.StructuralTag.from_json(spec)
    v = byte_vocabulary()
    assert_accepts(g, '<think>a < b</think><f=a>{"a":1}</f>', v)
    assert_rejects(g, '<think>a</think> <f=a>{"a":1}</f>', v)  # at_least_one: no leading text
    assert_rejects(g, '<think>a</think><f=a>{"a":1}</f><f=a>{"a":1}</f>', v)  # stop_after_first
    assert_rejects(g, "<think>a</think>b</think>", v)


@pytest.mark.parametrize(("fmt", "accepts", "rejects"), [
    ({"type": "or", "elements": [{"type": "const_string", "value": "yes"},
                                 {"type": "regex", "pattern": "n+"}]},
     ["yes", "nnn"], ["no", ""]),
    ({"type": "optional", "content": {"type": "const_string", "value": "x"}}, ["", "x"], ["xx"]),
    ({"type": "star", "content": {"type": "const_string", "value": "ab"}}, ["", "abab"], ["aba"]),
    ({"type": "plus", "content": {"type": "const_string", "value": "ab"}}, ["ab", "abab"], ["", "a"]),
    ({"type": "repeat", "min": 2, "max": 3, "content": {"type": "const_string", "value": "a"}},
     ["aa", "aaa"], ["a", "aaaa"]),
    ({"type": "repeat", "min": 2, "max": -1, "content": {"type": "const_string", "value": "a"}},
     ["aa", "aaaaa"], ["a"]),
    ({"type": "tags_with_separator", "separator": ",", "tags": [
        {"begin": "<", "content": {"type": "regex", "pattern": "[0-9]"}, "end": ">"}]},
     ["", "<1>", "<1>,<2>"], ["<1><2>", ",<1>"]),
    ({"type": "grammar", "grammar": 'root ::= "a" root | "b"'}, ["b", "aab"], ["a"]),
    ({"type": "dispatch", "rules": [["<a>", {"type": "regex", "pattern": "[0-9]"}],
                                    ["<b>", {"type": "const_string", "value": "!"}]], "excludes": ["#"]},
     ["", "x<a>1y<b>!", "<a>2<a>3"], ["<a>x", "x#", "<b>"]),
    ({"type": "dispatch", "loop": False, "rules": [["<a>", {"type": "regex", "pattern": "[0-9]"}]]},
     ["x<a>1", "x"], ["<a>1y", "<a>1<a>2"]),
    ({"type": "tag", "begin": "[", "content": {"type": "any_text", "excludes": ["x"]}, "end": ["]", ")"]},
     ["[ab]", "[ab)", "[]"], ["[ax]", "[a]b]"]),
])
def test_formats(fmt: dict[str, Any], accepts: list[str], rejects: list[str]) -> None:
    g = gm.StructuralTag.from_json({"type": "structural_tag", "format": fmt})
    v = byte_vocabulary()
    for s in accepts:
        assert_accepts(g, s, v)
    for s in rejects:
        assert_rejects(g, s, v)


@pytest.mark.parametrize(("spec", "message"), [
    ("{not json", "not valid JSON"),
    ({"type": "json_schema"}, '"type" must be "structural_tag"'),
    ({"type": "structural_tag"}, 'expected a "format" object'),
    ({"type": "structural_tag", "format": {"type": "dispatch", "rules": [["", {"type": "any_text"}]]}},
     "format.rules[0] must be a [pattern, format] pair"),
    ({"type": "structural_tag", "format": {"type": "token_triggered_tags"}}, "token-level triggered tags"),
    ({"type": "structural_tag", "format": {"type": "any_tokens"}}, "any_tokens"),
    ({"type": "structural_tag", "format": {"type": "sequence", "elements": [{"type": "nope"}]}},
     "format.elements[0]: unknown format type 'nope'"),
    ({"type": "structural_tag", "format": {"type": "any_text", "max_chars": 5}}, "format.max_chars"),
    ({"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {}, "style": "qwen_xml"}},
     "style 'qwen_xml'"),
    ({"type": "structural_tag", "triggers": ["<x"],
      "structures": [{"begin": "<f>", "schema": {}, "end": "e"}]},
     "starts with none of the triggers"),
    ({"type": "structural_tag", "triggers": "<x", "structures": []}, "triggers must be a list"),
])
def test_json_errors_say_what_and_where(spec: Any, message: str) -> None:
    with pytest.raises(gm.GrammarError, match=re.escape(message)):
        gm.StructuralTag.from_json(spec)


def test_token_format_names_special_tokens() -> None:
    v = vocab()
    spec = {"type": "structural_tag", "format": {"type": "tag", "begin": {"type": "token", "token": "<T>"},
                                                  "content": {"type": "regex", "pattern": "a+"},
                                                  "end": {"type": "token", "token": 15}}}
    m = gm.StructuralTag.from_json(spec).compile(v).matcher()
    assert m.mask().token_ids().tolist() == [14]
    m.advance_many([14, 1, 1])
    assert 15 in m.mask() and 0 not in m.mask()
    m.advance(15)
    assert m.mask().token_ids().tolist() == [0]


def test_reasoning_then_grammar() -> None:
    v = byte_vocabulary([b"</think>"])
    g = gm.Regex("[0-9]+").after("</think>")
    assert_accepts(g, "let me see... </think>42", v)
    assert_rejects(g, "42", v)
    assert_rejects(g, "a</think>b</think>42", v)
    g2 = gm.Reasoning("</think>", start="<think>") + gm.Choice(["yes", "no"])
    assert_accepts(g2, "<think>hm</think>yes", v)
    assert_rejects(g2, "hm</think>yes", v)
    with pytest.raises(gm.GrammarError, match="Reasoning: end"):
        gm.Reasoning("")


# --- the real tekken vocabulary: every step against a DFA of the whole language --------------------


@pytest.fixture(scope="module")
def tekken() -> gm.Vocabulary:
    return gm.Vocabulary.from_mistral("tekken")


def _language_dfa() -> Any:
    """``F (T F)*`` built directly with the automata operations: F any text without ``<call>``, T the
    two tags (one opened by the special token [TOOL_CALLS])."""
    from grammarmask.automata import concat, difference, literal_dfa, regex_to_dfa, repeat, union

    free = difference(regex_to_dfa(r"(?s).*"), regex_to_dfa(r"(?s).*<call>.*"))
    t1 = concat(literal_dfa(special_spelling("[TOOL_CALLS]")), regex_to_dfa(r'\{"n": [0-9]{1,3}\}'))
    t2 = concat(concat(literal_dfa(b"<call>"), regex_to_dfa("[a-z]+")), literal_dfa(b"</call>"))
    return concat(free, repeat(concat(union(t1, t2), free), 0, None))


def _walk_text(m: gm.Matcher, pieces: list[str | int], rnd: random.Random, steps: list[int]) -> None:
    """Advance through ``pieces`` (text, or a special token id), each text by random legal tokens
    that are prefixes of what is left (so tokens straddle the parts' boundaries)."""
    data = b"".join(p.encode() if isinstance(p, str) else b"\x00" for p in pieces)
    ids = {i: p for i, p in enumerate(pieces) if isinstance(p, int)}
    pos = 0
    tb = m.vocab.token_bytes
    while pos < len(data):
        special = next((t for k, t in ids.items() if data[pos:].startswith(b"\x00") and k >= 0), None)
        if data[pos] == 0 and special is not None:
            m.advance(special)
            steps.append(special)
            ids = {k: v for k, v in ids.items() if v != special or k != min(ids)}
            pos += 1
            continue
        rest = data[pos:].split(b"\x00")[0]
        legal = [t for t in m.mask().token_ids().tolist() if tb[t] and rest.startswith(tb[t])]
        t = rnd.choice(legal)
        m.advance(t)
        steps.append(t)
        pos += len(tb[t])


def _dfa_mask(dfa: Any, vocab: gm.Vocabulary, prefix: bytes) -> gm.Mask:
    """Brute force over the whole vocabulary: token t is legal iff the language's DFA is still alive
    after ``prefix + bytes(t)`` (every trie node's state, level by level); EOS iff it accepts."""
    import numpy as np

    start = dfa.run(dfa.start, prefix) if dfa.start else 0
    trie = vocab.trie
    st = np.zeros(trie.n_nodes, np.int64)
    st[0] = start
    for d in range(1, len(trie.level_lo) - 1):
        lo, hi = int(trie.level_lo[d]), int(trie.level_lo[d + 1])
        st[lo:hi] = dfa.transitions[st[trie.parent[lo:hi]], trie.byte[lo:hi]]
    legal = np.zeros(vocab.size, bool)
    node = trie.tok_node[trie.tokens]
    legal[trie.tokens] = st[node] != 0
    legal[vocab.eos_token_id] = bool(start) and bool(dfa.accepting[start])
    return gm.Mask.from_bool(legal)


def test_masks_equal_a_dfa_oracle_on_tekken(tekken: gm.Vocabulary) -> None:
    tc = tekken.special_token_id("[TOOL_CALLS]")
    g = gm.StructuralTag([(gm.SpecialToken("[TOOL_CALLS]"), gm.Regex(r'\{"n": [0-9]{1,3}\}'), ""),
                          ("<call>", gm.Regex("[a-z]+"), "</call>")], triggers=["<call>"])
    compiled = g.compile(tekken)
    dfa = _language_dfa()
    pieces: list[str | int] = ["Let me <cal", "l>abc</call>", " then ", tc, '{"n": 42}', " ok <call>z</call>"]
    rnd = random.Random(7)
    for _ in range(3):
        path: list[int] = []
        _walk_text(compiled.matcher(), pieces, rnd, path)
        m, out = compiled.matcher(), b""
        for t in [*path, None]:
            want, got = _dfa_mask(dfa, compiled.vocab, out), m.mask()
            assert got == want, f"after {out!r}: wrongly legal {(got - want).token_ids()[:5]}, " \
                                f"wrongly illegal {(want - got).token_ids()[:5]}"
            if t is None:
                break
            m.advance(t)
            out += compiled.vocab.token_bytes[t]
        assert m.is_accepting()
