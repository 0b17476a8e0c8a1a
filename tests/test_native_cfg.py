"""The native CFG engine against its specification: native == Python == brute force, every step.

At each step of a walk the Rust engine (:class:`grammarmask.native.cfg.NativeCompiledCfg`) and the
Python engine (:class:`grammarmask.cfg.CompiledCfg`) must give the same mask words and the same
accepting flag; on small vocabularies the mask must also equal the brute-force mask
(``reference_mask`` over byte-by-byte viability: lark's own parser for the grammars of
tests/test_cfg_exact.py, the Python engine's byte-level ``feed`` for generated grammars). An illegal
token is rejected by both, leaving the state as it was. On tekken: the shipped grammars and JSON
schemas token by token along tokenized documents and random walks.
"""

from __future__ import annotations

import itertools
import json
import random
import string
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.cfg import CompiledCfg
from grammarmask.errors import GrammarError
from grammarmask.frontends.gbnf import Gbnf
from grammarmask.frontends.lark import Lark
from grammarmask.ir.builder import build_cfg
from grammarmask.limits import Limits, in_force
from grammarmask.mask import Mask
from grammarmask.native import native_vocabulary
from grammarmask.native.cfg import NativeCompiledCfg
from grammarmask.testing import reference_mask

from .support_json_schema import BENCH
from .test_cfg_exact import CASES
from .test_cfg_exact import _setup as exact_setup
from .test_cfg_shipped import EXAMPLES

GRAMMARS = Path(__file__).resolve().parents[1] / "grammars"


def cfg_of(grammar: gm.Grammar) -> Any:
    if isinstance(grammar, (Lark, Gbnf)):
        return grammar.cfg
    assert isinstance(grammar, gm.JsonSchema)
    return build_cfg(grammar.rules())


def pair(grammar: gm.Grammar, vocab: gm.Vocabulary, limits: Limits | None = None
         ) -> tuple[NativeCompiledCfg, CompiledCfg]:
    cfg = cfg_of(grammar)
    with in_force(limits) as lim:
        return NativeCompiledCfg(cfg, vocab, lim), CompiledCfg(cfg, vocab, lim)


def legal_ids(words: np.ndarray, vocab: gm.Vocabulary) -> list[int]:
    return [int(t) for t in Mask(words.copy(), vocab.size).token_ids()]


def describe(vocab: gm.Vocabulary, got: Mask, want: Mask) -> str:
    tb = vocab.token_bytes
    extra = [tb[t] for t in (got - want).token_ids()[:6]]
    missing = [tb[t] for t in (want - got).token_ids()[:6]]
    return f"wrongly legal {extra}, wrongly illegal {missing}"


def check_step(nat: NativeCompiledCfg, py: CompiledCfg, sn: Any, sp: Any, out: bytes,
               viable: Callable[[bytes], bool] | None, complete: Callable[[bytes], bool] | None) -> Mask:
    """Masks and accepting flags of the two engines agree (and with brute force when given)."""
    vocab = nat.vocab
    wn, wp = nat.state_mask_words(sn), py.state_mask_words(sp)
    got = Mask(wn.copy(), vocab.size)
    ref = Mask(wp.copy(), vocab.size)
    assert got == ref, f"after {out!r}: native vs python: {describe(vocab, got, ref)}"
    assert nat.is_accepting_state(sn) == py.is_accepting_state(sp), out
    if viable is not None:
        want = reference_mask(viable, vocab, out)
        assert got == want, f"after {out!r}: native vs brute force: {describe(vocab, got, want)}"
        if complete is not None:
            assert nat.is_accepting_state(sn) == complete(out), out
    return got


def walk_both(nat: NativeCompiledCfg, py: CompiledCfg, choose: Callable[[Sequence[int]], int], steps: int,
              viable: Callable[[bytes], bool] | None = None,
              complete: Callable[[bytes], bool] | None = None) -> bytes:
    """A random walk over legal tokens, every answer of both engines checked; an illegal token is
    rejected by both and moves nothing."""
    vocab = nat.vocab
    sn, sp = nat.initial_state(), py.initial_state()
    assert bool(sn) == bool(sp)
    out = b""
    for _ in range(steps):
        got = check_step(nat, py, sn, sp, out, viable, complete)
        ids = legal_ids(got.words, vocab)
        illegal = (~got).token_ids()
        illegal = illegal[illegal != vocab.eos_token_id]
        if illegal.size:
            bad = int(illegal[choose(range(illegal.size)) % illegal.size])
            assert nat.advance_state(sn, bad) is None and py.advance_state(sp, bad) is None
        if not ids:
            break
        t = ids[choose(ids) % len(ids)]
        sn2, sp2 = nat.advance_state(sn, t), py.advance_state(sp, t)
        assert sn2 is not None and sp2 is not None, (out, vocab.token_bytes[t])
        sn, sp = sn2, sp2
        out += vocab.token_bytes[t]
    check_step(nat, py, sn, sp, out, viable, complete)
    return out


# ---- lark's own parser as the oracle (the grammars of test_cfg_exact) ------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_short_prefix_matches_lark(name: str) -> None:
    oracle, vocab, _, alpha = exact_setup(name)
    g = Lark(CASES[name][0])
    nat, py = pair(g, vocab)
    m = CASES[name][3]
    checked = 0
    for n in range(m + 1):
        for p in itertools.product(alpha, repeat=n):
            prefix = "".join(p).encode()
            if prefix and not oracle.viable(prefix[:-1]):
                continue
            sn, sp = nat.feed(nat.initial_state(), prefix), py.feed(py.initial_state(), prefix)
            assert bool(sn) == bool(sp) == oracle.viable(prefix), prefix
            if sn:
                check_step(nat, py, sn, sp, prefix, oracle.viable, oracle.complete)
            checked += 1
    assert checked > m


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CASES)), seed=st.integers(0, 2**32))
def test_random_walks_match_lark(name: str, seed: int) -> None:
    oracle, vocab, _, _ = exact_setup(name)
    nat, py = pair(Lark(CASES[name][0]), vocab)
    rng = random.Random(seed)
    limit = CASES[name][3]
    sn, sp, out = nat.initial_state(), py.initial_state(), b""
    while True:
        got = check_step(nat, py, sn, sp, out, oracle.viable, oracle.complete)
        ids = [t for t in legal_ids(got.words, vocab) if len(out) + len(vocab.token_bytes[t]) <= limit]
        if not ids:
            break
        t = rng.choice(ids)
        sn, sp = nat.advance_state(sn, t), py.advance_state(sp, t)
        out += vocab.token_bytes[t]


# ---- generated grammars (Lark: greedy terminals; GBNF: non-greedy) -----------------------------------------

LARK_TERMS = ['"a"', '"b"', '"ab"', '"aa"', "/a+/", "/[ab]+/", "/b?a/", "/(ab)+/", "/a|ba/", '"c"i']
GBNF_ATOMS = ['"a"', '"b"', '"ab"', "[ab]", "[ab]+", '"c"', "[a-c]?", '"ba"']
SUFFIX = st.sampled_from(["", "", "", "?", "*", "+"])


@st.composite
def lark_grammars(draw: st.DrawFn) -> str:
    names = ["start", "x", "y"][: draw(st.integers(1, 3))]
    terms = draw(st.lists(st.sampled_from(LARK_TERMS), min_size=1, max_size=3, unique=True))
    tnames = [f"T{i}" for i in range(len(terms))]
    symbols = st.sampled_from(tnames + names + ['"c"', '"a"'])
    lines = []
    for n in names:
        alts = []
        for _ in range(draw(st.integers(1, 3))):
            items = draw(st.lists(st.tuples(symbols, SUFFIX), min_size=0, max_size=3))
            alts.append(" ".join(f"{s}{suf}" if suf and s != n else s for s, suf in items))
        lines.append(f"{n}: " + " | ".join(alts))
    lines += [f"{t}: {d}" for t, d in zip(tnames, terms, strict=True)]
    if draw(st.booleans()):
        lines.append('%ignore " "')
    return "\n".join(lines) + "\n"


@st.composite
def gbnf_grammars(draw: st.DrawFn) -> str:
    names = ["root", "x", "y"][: draw(st.integers(1, 3))]
    symbols = st.sampled_from(GBNF_ATOMS + names)
    lines = []
    for n in names:
        alts = []
        for _ in range(draw(st.integers(1, 3))):
            items = draw(st.lists(st.tuples(symbols, SUFFIX), min_size=1, max_size=3))
            alts.append(" ".join(f"{s}{suf}" if not s.endswith(("+", "?")) else s for s, suf in items))
        lines.append(f"{n} ::= " + " | ".join(alts))
    return "\n".join(lines) + "\n"


def small_vocab() -> gm.Vocabulary:
    words = ["".join(p) for n in (1, 2) for p in itertools.product("abc ", repeat=n)]
    words += ["aaa", "aba", "bab", "abab", " a ", "c c", "cab", "A", "C"]
    return gm.Vocabulary.from_tokens([b"", b"<s>", *(w.encode() for w in words)], eos_token_id=0,
                                     special_token_ids=(1,), size=len(words) + 5)


SMALL = small_vocab()


def generated_walk(grammar: gm.Grammar, seed: int) -> None:
    nat, py = pair(grammar, SMALL)

    def viable(d: bytes) -> bool:  # byte by byte through the Python engine: no token walks involved
        return bool(py.feed(py.initial_state(), d))

    def complete(d: bytes) -> bool:
        return py.is_accepting_state(py.feed(py.initial_state(), d))

    rng = random.Random(seed)
    for _ in range(2):
        walk_both(nat, py, lambda o: rng.randrange(len(o)), 8, viable, complete)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=lark_grammars(), seed=st.integers(0, 2**32))
@example(text='start: start T0? y* | x? y T1?\nx: "c"* x T1+\ny: T2 | "a" | start?\n'
              'T0: /b?a/\nT1: "ab"\nT2: "b"\n', seed=0)  # both engines hit a budget at step 5
def test_generated_lark_grammars_agree(text: str, seed: int) -> None:
    try:
        g = Lark(text)
    except GrammarError:
        assume(False)
        return
    try:
        generated_walk(g, seed)
    except gm.BudgetExceeded as e:  # 'start: start T0? y* | ...' with 'y: ... | start?' splits text many ways
        assume(e.budget in ("cfg_configs", "earley_items_per_set", "cfg_walk_visits"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=gbnf_grammars(), seed=st.integers(0, 2**32))
def test_generated_gbnf_grammars_agree(text: str, seed: int) -> None:
    try:
        g = Gbnf(text)
    except GrammarError:
        assume(False)
        return
    try:
        generated_walk(g, seed)
    except gm.BudgetExceeded as e:  # 'x ::= x x | ...' splits text many ways: both engines must say so
        assume(e.budget in ("cfg_configs", "earley_items_per_set", "cfg_walk_visits"))


# ---- the shipped grammars and JSON schemas on tekken -------------------------------------------------------

SHIPPED = sorted(p.name for p in GRAMMARS.iterdir() if p.suffix in (".lark", ".gbnf"))


def shipped(name: str) -> gm.Grammar:
    text = (GRAMMARS / name).read_text("utf-8")
    return Lark(text) if name.endswith(".lark") else Gbnf(text)


def token_by_token(nat: NativeCompiledCfg, py: CompiledCfg, ids: list[int]) -> None:
    sn, sp = nat.initial_state(), py.initial_state()
    for i, t in enumerate(ids):
        got = check_step(nat, py, sn, sp, f"token {i}".encode(), None, None)
        assert t in got, f"token {i} ({nat.vocab.token_bytes[t]!r}) of a valid document is masked out"
        sn, sp = nat.advance_state(sn, t), py.advance_state(sp, t)
        assert sn is not None and sp is not None
    assert nat.is_accepting_state(sn) and py.is_accepting_state(sp)
    check_step(nat, py, sn, sp, b"end", None, None)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_grammars_agree_on_tekken(tekken: gm.Vocabulary, tekken_tokenizer: Any, name: str) -> None:
    nat, py = pair(shipped(name), tekken)
    valid = EXAMPLES.get(name, ([], []))[0]
    for doc in valid[:4]:
        token_by_token(nat, py, tekken_tokenizer.encode(doc, bos=False, eos=False))
    rng = random.Random(name)
    for _ in range(2):
        walk_both(nat, py, lambda o: rng.randrange(len(o)), 12)


REPLAYED = {
    "json.lark": json.dumps({"a": [1, [2, [3, {"b": [4, 5]}]], {"c": {"d": [6, "x"]}}], "e": [[[]]],
                             "f": True, "g": {"h": {"i": {"j": None}}}}),
    "json.gbnf": json.dumps([{"k": [1, {"k": [2, {"k": [3, {"k": []}]}]}]}, {"k": [4, 5]}]),
    "sql.lark": "SELECT a, b FROM t WHERE a = 1 AND (b = 2 OR c = 3) AND d IN (1, 2) ORDER BY a",
}


@pytest.mark.parametrize("name", sorted(REPLAYED))
def test_masks_replayed_from_other_states_are_the_masks_computed(tekken: gm.Vocabulary,
                                                                 tekken_tokenizer: Any, name: str) -> None:
    """States deeper in the nesting, or after another keyword, ask a mask walk's questions alike and
    are served its mask (src/cfg/replay.rs): each is the Python engine's."""
    nat, py = pair(shipped(name), tekken)
    token_by_token(nat, py, tekken_tokenizer.encode(REPLAYED[name], bos=False, eos=False))
    replayed, walked = nat.engine.masks_replayed
    assert replayed > 0 and walked > 0, (replayed, walked)


def test_strings_of_other_bodies_are_sliced(tekken: gm.Vocabulary, tekken_tokenizer: Any) -> None:
    """SQL's `/'[^']*'/` is a body of every character but the quote: its tokens are set aside once
    per vocabulary, in a thread of its own (src/cfg/slice.rs); once they are, the masks inside such
    strings (quotes, backslashes, controls and non-ASCII inside) are still the Python engine's."""
    nat, py = pair(shipped("sql.lark"), tekken)
    native_vocab = native_vocabulary(tekken)
    deadline = time.monotonic() + 60
    while not native_vocab.has_slice(b"'"):
        assert time.monotonic() < deadline, "the slice of SQL's strings was not made in 60 s"
        time.sleep(0.01)
    with pytest.raises(ValueError):
        native_vocab.has_slice("é".encode())
    doc = "SELECT a FROM t WHERE b = 'x \" \\ \t é 😀 -- not a comment' AND c LIKE '%ab%' ORDER BY a"
    token_by_token(nat, py, tekken_tokenizer.encode(doc, bos=False, eos=False))


SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                                      "tags": {"type": "array", "items": {"type": "string"}}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"enum": ["red", "green", 3, None]}, "minItems": 1, "maxItems": 3},
    {"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-z]{2}[0-9]+$"},
                                      "score": {"type": "number"}, "ok": {"type": "boolean"},
                                      "child": {"$ref": "#"}},
     "required": ["id"], "additionalProperties": False},
    {"anyOf": [{"type": "string", "format": "date"},
               {"type": "object", "additionalProperties": {"type": "integer"}}]},
]
DOCS = [
    {"name": "Alice Smith", "age": 31, "tags": ["a b", "\u00e9t\u00e9"]},
    ["red", 3, None],
    {"id": "ab12", "score": -1.5e3, "ok": True, "child": {"id": "zz9"}},
    "2024-02-29",
]


# Lexer states that share what they allow (src/cfg/inside.rs): the lengths of bounded strings, with
# the bound nearer and farther than the longest token (76 bytes on tekken), keys spelled among known
# ones beside any other key, a format.
SHARING: list[dict[str, Any]] = [
    {"type": "object", "properties": {"a": {"type": "string", "maxLength": 3},
                                      "b": {"type": "string", "minLength": 2, "maxLength": 12},
                                      "c": {"type": "string", "maxLength": 40},
                                      "d": {"type": "string", "maxLength": 90}},
     "required": ["a", "b", "c", "d"]},
    {"type": "object", "properties": {"alpha": {"type": "integer"}, "alphabet": {"type": "string"},
                                      "beta": {"type": "boolean"}},
     "additionalProperties": {"type": "string", "maxLength": 20}},
    {"type": "array", "items": {"type": "string", "format": "date-time"}, "minItems": 2, "maxItems": 3},
]
SHARING_DOCS = [
    {"a": "abc", "b": "twelve chars", "c": "x" * 40,
     "d": "The quick brown fox jumps over the lazy dog. " * 2},
    {"alpha": 1, "alphabet": "abc", "beta": True, "alphab": "twenty characters!!", "bet": ""},
    ["2024-02-29T12:30:45.123456789+01:00", "1999-12-31T23:59:59Z"],
]


def long_first(rng: random.Random, vocab: gm.Vocabulary) -> Callable[[Sequence[int]], int]:
    """A choice for walk_both that takes one of the 20 longest legal tokens half of the time (long
    tokens reach the bounds of bounded strings)."""
    def choose(options: Sequence[int]) -> int:
        if isinstance(options, range) or rng.random() < 0.5:
            return rng.randrange(len(options))
        by_length = sorted(range(len(options)), key=lambda i: -len(vocab.token_bytes[options[i]]))
        return rng.choice(by_length[:20])
    return choose


# (schema, document, random walks, walks favour long tokens)
TEKKEN_CASES = ([(s, d, 1, False) for s, d in zip(SCHEMAS, DOCS)]
                + [(s, d, 4, True) for s, d in zip(SHARING, SHARING_DOCS)])


@pytest.mark.parametrize("i", range(len(TEKKEN_CASES)))
def test_json_schemas_agree_on_tekken(tekken: gm.Vocabulary, tekken_tokenizer: Any, i: int) -> None:
    schema, doc, walks, long = TEKKEN_CASES[i]
    nat, py = pair(gm.JsonSchema(schema), tekken)
    for text in (json.dumps(doc), json.dumps(doc, indent=2)):
        token_by_token(nat, py, tekken_tokenizer.encode(text, bos=False, eos=False))
    rng = random.Random(i)
    for _ in range(walks):
        walk_both(nat, py, long_first(rng, tekken) if long else lambda o: rng.randrange(len(o)), 28)


@pytest.mark.parametrize("bound", [100, 250])
def test_grammars_of_a_vocabulary_share_what_lexer_states_allow(tekken: gm.Vocabulary, tekken_tokenizer: Any,
                                                                bound: int) -> None:
    # a bounded string's lexer state walked for one schema serves the next schema's strings (the
    # vocabulary's shelf, src/cfg/inside.rs) whatever their bound past the longest token (76 bytes on
    # tekken), masks equal to the Python engine's at every step (a string of any character is read
    # off the vocabulary's slice instead, src/cfg/slice.rs: not walked, nothing to share; this one's
    # pattern keeps it walked)
    shelf = native_vocabulary(tekken).shelf
    for i, key in enumerate(["first", "second", "third"]):
        string = {"type": "string", "pattern": "^[^~]*$", "maxLength": bound + 100 * i}
        schema = {"type": "object", "properties": {key: string, "n": {"type": "integer"}},
                  "required": [key, "n"], "additionalProperties": False}
        nat, py = pair(gm.JsonSchema(schema), tekken)
        doc = json.dumps({key: f"value {i} \u00e9", "n": i}, ensure_ascii=False)
        token_by_token(nat, py, tekken_tokenizer.encode(doc, bos=False, eos=False))
        before, shelf = shelf, native_vocabulary(tekken).shelf
        if i > 0:
            assert shelf[1] > before[1], "the string's lexer state was walked again"
    assert shelf[0] >= 1


@pytest.mark.parametrize(("least", "most"), [(0, 5), (1, 12), (3, 80), (0, 240)])
def test_bounded_strings_are_read_off_the_slice(tekken: gm.Vocabulary, tekken_tokenizer: Any, least: int,
                                                most: int) -> None:
    # a string of minLength/maxLength takes every body token of at most the characters it has left
    # (src/cfg/slice.rs, Slice::body_run): masks equal to the Python engine's at every step, across
    # the bound, in characters of several bytes too; the documents' strings walked nowhere (the shelf
    # keeps walks of the trie; a string longer than 256 characters is cut into terminals of 256, and
    # near their ends it is walked)
    from grammarmask.native import native_vocabulary

    string = {"type": "string", "minLength": least, "maxLength": most}
    schema = {"type": "object", "properties": {"s": string, "n": {"type": "integer"}},
              "required": ["s", "n"], "additionalProperties": False}
    nat, py = pair(gm.JsonSchema(schema), tekken)
    shelved = native_vocabulary(tekken).shelf[0]
    for value in ["", "ab", "x" * least, "é€😀 word" * 3, "q" * most, "the longest word there is"[:most]]:
        if least <= len(value) <= most:
            doc = json.dumps({"s": value, "n": 1}, ensure_ascii=False)
            token_by_token(nat, py, tekken_tokenizer.encode(doc, bos=False, eos=False))
    assert native_vocabulary(tekken).shelf[0] == shelved
    rng = random.Random(most)
    for _ in range(3):
        walk_both(nat, py, long_first(rng, tekken), 24)


def test_keys_beside_declared_names_agree_on_tekken(tekken: gm.Vocabulary, tekken_tokenizer: Any) -> None:
    # a key of an object with declared names and others allowed: while it may still spell a declared
    # name its lexer state is read off the string body's (src/cfg/inside.rs, Insides::read_off_body),
    # reached on a byte no declared name takes there; names holding those bytes make it try the next
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in
                                               ["name", "na~me", "~tilde", "^caret", "`tick|", "names"]}}
    doc = {"nam": 1, "name_extra": 2, "na~mX": 3, "~tildeX": 4, "^care": 5, "`tick": 6, "other": 7,
           "name": 8}
    nat, py = pair(gm.JsonSchema(schema, property_order="any"), tekken)
    for text in (json.dumps(doc), json.dumps(doc, indent=2)):
        token_by_token(nat, py, tekken_tokenizer.encode(text, bos=False, eos=False))
    rng = random.Random(5)
    for _ in range(4):
        walk_both(nat, py, long_first(rng, tekken), 28)


def test_masks_kept_packed_are_the_masks_computed(tekken: gm.Vocabulary, tekken_tokenizer: Any) -> None:
    # a grammar keeps whole rows for its last few states only (src/python.rs RECENT_ROWS) and every
    # mask packed (src/packed.rs), large ones shared with the vocabulary's other grammars: a state
    # asked again after many others gets the row it got first, and the packed masks of a document
    # take far less than a row each
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {
        "type": "array", "items": {"type": "string", "maxLength": 12}}, "n": {"type": "integer"}}}
    doc = json.dumps({"name": "grammarmask", "tags": ["a", "bb", "exact"], "n": 42})
    nat = gm.JsonSchema(schema).compile(tekken)
    states, rows = [nat.initial_state()], []
    for t in tekken_tokenizer.encode(doc, bos=False, eos=False):
        rows.append(np.array(nat.state_mask_words(states[-1])))
        states.append(nat.advance_state(states[-1], t))
    assert len(states) > 20
    for s, row in zip(states, rows):
        again = nat.state_mask_words(s)
        assert np.array_equal(again, row)
    packed, whole = nat.engine.mask_bytes
    by_key = {tuple(s.key): row for s, row in zip(states, rows)}
    assert whole <= 8 < nat.engine.masks_cached == len(by_key)
    # a row with fewer than half its words set is kept as (position, word) pairs, 8 bytes each
    set_words = [int(np.count_nonzero(row)) for row in by_key.values()]
    assert packed == sum(8 * k if 2 * k < tekken.n_words else 4 * tekken.n_words for k in set_words)
    assert min(set_words) < 8, "some masks allow a handful of tokens"
    # another grammar of the same language (an annotation apart) is served the same masks, its large
    # ones from the pool the first grammar filled
    other = gm.JsonSchema({**schema, "title": "the same language"}).compile(tekken)
    assert other is not nat
    st = other.initial_state()
    for t, row in zip(tekken_tokenizer.encode(doc, bos=False, eos=False), rows):
        assert np.array_equal(other.state_mask_words(st), row)
        st = other.advance_state(st, t)


# ---- long outputs, budgets, threads, errors ---------------------------------------------------------------

TINY = gm.Vocabulary.from_tokens([b"a", b"b", b"aa", b""], eos_token_id=3)


def test_long_right_recursive_output_stays_cheap_and_frees() -> None:
    """Leo items keep the chart of 'x: "a" x | "b"' flat; a 50,000-lexeme chart is freed without
    recursing once per set."""
    nat = NativeCompiledCfg(Lark('start: x\nx: "a" x | "b"\n').cfg, TINY)
    s = nat.initial_state()
    for _ in range(50_000):
        s = nat.advance_state(s, 0)
    assert not nat.is_accepting_state(s)
    done = nat.advance_state(s, 1)
    assert nat.is_accepting_state(done)
    del s, done


def test_elements_of_a_json_schema_array_share_their_states() -> None:
    """An array's items are a right-recursive list through a unit rule (`a16_1: "," item a16_1?`):
    after the second element every element passes through the same states (the same keys, so
    one mask each), the masks agree with the Python engine's, and the array still closes."""
    vocab = gm.Vocabulary.from_tokens([b"", *(bytes([c]) for c in b'[]{},:" 0123456789a')], eos_token_id=0)
    schema = {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}},
                                         "required": ["a"], "additionalProperties": False}}
    grammar = gm.JsonSchema(schema)
    nat = grammar.compile(vocab)
    assert isinstance(nat, NativeCompiledCfg)
    spec = grammar.compile(vocab, engine="python")
    ids = {vocab.token_bytes[i]: i for i in range(1, vocab.size)}
    s, p = nat.initial_state(), spec.initial_state()
    keys: list[list[tuple[Any, ...]]] = []
    for k in range(12):
        element = (b"[" if k == 0 else b",") + b'{"a":%d}' % (k * 7)
        trail = []
        for ch in element:
            assert np.array_equal(np.asarray(nat.state_mask_words(s)), np.asarray(spec.state_mask_words(p)))
            trail.append(tuple(s.key))
            s, p = nat.advance_state(s, ids[bytes([ch])]), spec.advance_state(p, ids[bytes([ch])])
        keys.append(trail)
    assert keys[1] != keys[0]
    assert all(trail[: len(keys[2])] == keys[2][: len(trail)] for trail in keys[2:])
    done = nat.advance_state(s, ids[b"]"])
    assert nat.is_accepting_state(done)


@pytest.mark.parametrize("text", ['start: s\ns: s s | "a"', 'root ::= root root | "a"'])
def test_item_budget_raises_and_keeps_the_state(text: str) -> None:
    g = Lark(text) if text.startswith("start") else Gbnf(text)
    nat = NativeCompiledCfg(g.cfg, TINY, Limits(earley_items_per_set=2000))
    m = nat.matcher()
    with pytest.raises(gm.BudgetExceeded) as e:
        for _ in range(200):
            m.mask()
            m.advance(0)
    assert e.value.budget == "earley_items_per_set" and e.value.value == 2000
    assert "compile(vocab, limits=grammarmask.Limits(earley_items_per_set=" in str(e.value)
    state, n = m.state, m.num_tokens
    assert 20 < n < 100
    with pytest.raises(gm.BudgetExceeded):
        m.mask()
        m.advance(0)
    assert m.state is state and m.num_tokens == n


def test_configuration_and_visit_budgets_raise() -> None:
    splits = Gbnf('root ::= root root | "a"+ | "a"?')
    vocab = gm.Vocabulary.from_tokens([b"a", b"aa", b"aaaa", b"a" * 16, b""], eos_token_id=4)
    m = NativeCompiledCfg(splits.cfg, vocab, Limits(cfg_configs=256, cfg_walk_visits=10**9)).matcher()
    # (runs of a's split many ways: sets of equal futures are one configuration, so a's come 16 a
    # token here for the distinct splits to pass the budget soon)
    with pytest.raises(gm.BudgetExceeded) as e:
        for _ in range(40):
            m.advance(3)
    assert e.value.budget == "cfg_configs" and e.value.value == 256
    assert 2 <= m.num_tokens <= 8
    nat = NativeCompiledCfg(Lark('start: "a" "b"\n').cfg, TINY, Limits(cfg_walk_visits=0))
    with pytest.raises(gm.BudgetExceeded) as e:
        nat.state_mask_words(nat.initial_state())
    assert e.value.budget == "cfg_walk_visits"


@pytest.mark.parametrize("limit", [0, 1])
def test_tiny_mask_caches_give_the_same_masks(limit: int) -> None:
    g = Lark(CASES["nested_lists"][0])
    _, vocab, _, _ = exact_setup("nested_lists")
    nat, py = pair(g, vocab, Limits(cfg_masks=limit, earley_recent=limit, earley_signatures=limit + 1))
    rng = random.Random(limit)
    for _ in range(5):
        walk_both(nat, py, lambda o: rng.randrange(len(o)), 10)
    assert nat.engine.masks_cached <= limit


@pytest.mark.parametrize("name", ["arithmetic.gbnf", "arithmetic.lark"])
def test_class_and_byte_tries_give_the_same_masks(tekken: gm.Vocabulary, tekken_tokenizer: Any,
                                                   name: str) -> None:
    """Grammars of ASCII text walk a class trie without the tokens of bytes they never take."""
    cfg = shipped(name).cfg
    by_class = NativeCompiledCfg(cfg, tekken, class_trie_max=256)
    by_byte = NativeCompiledCfg(cfg, tekken, class_trie_max=0)
    assert by_class.engine.n_trie_nodes < by_byte.engine.n_trie_nodes
    doc = EXAMPLES[name][0][1]
    sc, sb = by_class.initial_state(), by_byte.initial_state()
    for t in tekken_tokenizer.encode(doc, bos=False, eos=False):
        assert np.array_equal(by_class.state_mask_words(sc), by_byte.state_mask_words(sb))
        sc, sb = by_class.advance_state(sc, t), by_byte.advance_state(sb, t)
    assert by_class.is_accepting_state(sc) and by_byte.is_accepting_state(sb)


# 45 byte classes: 13 capitals and 28 punctuation marks each their own, lowercase, digits, space, the rest
MANY_CLASSES = ("start: item+\nitem: NAME | NUM | "
                + " | ".join(f'"{c}"' for c in "ABCDEFGHIJKLM!#$%&()*+,-./:;<=>?@[]^_{|}~")
                + '\nNAME: /[a-z]+/\nNUM: /[0-9]+/\n%ignore " "\n')
MANY_VOCAB = gm.Vocabulary.from_tokens(
    [b"", *(bytes([b]) for b in range(32, 127)), b"ab", b"a1", b"1 ", b" (", b"+-", b"Ab", b"xyz", b"A(",
     b"  ", b"9]"], eos_token_id=0)  # fmt: skip


@pytest.mark.parametrize("class_trie_max", [0, 256])
def test_class_compressed_lexer_tables_give_the_dense_tables_masks(class_trie_max: int) -> None:
    """The lexer table handed to Rust by byte class (flat_tables, made from the terminals' own
    tables by class) is the terminals' 256-column tables one after another, read by the classes
    every terminal keeps apart; it gives the masks of the 256-column table handed over, of the
    Python engine and of brute force (byte and class tries)."""
    from grammarmask import _engine
    from grammarmask.native import native_vocabulary
    from grammarmask.native.cfg import flat_tables

    g = Lark(MANY_CLASSES)
    flat = flat_tables(g.cfg)
    classes = np.frombuffer(flat["classes"], dtype=np.uint8).astype(np.intp)
    k = int(classes.max()) + 1
    assert k == 45 and classes[ord("a")] == classes[ord("z")] != classes[ord("A")] != classes[ord("B")]
    n = len(flat["accepting"])
    assert len(flat["transitions"]) == 4 * n * k
    table = np.frombuffer(flat["transitions"], dtype=np.int32).reshape(n, k)
    # the dense concatenation: terminal t's state s >= 1 is global offset[t] + s
    terms = g.cfg.terminals
    want, accepting, term_of, starts = [np.zeros((1, 256), np.int32)], [False], [-1], []
    for t, term in enumerate(terms):
        offset = len(accepting) - 1
        rows = term.dfa.transitions[1:]
        want.append(np.where(rows != 0, rows + offset, 0))
        accepting += term.dfa.accepting[1:].tolist()
        term_of += [t] * (term.dfa.n_states - 1)
        starts.append(term.dfa.start + offset if term.dfa.start else 0)
    assert np.array_equal(table[:, classes], np.concatenate(want))
    assert np.frombuffer(flat["accepting"], dtype=np.bool_).tolist() == accepting
    assert np.frombuffer(flat["term_of"], dtype=np.int32).tolist() == term_of
    assert list(flat["starts"]) == starts
    dense = {**flat, "transitions": np.ascontiguousarray(table[:, classes]).tobytes(), "classes": None}
    limits = (10_000, 10_000, 16, 4096, 10_000, 64)
    nv = native_vocabulary(MANY_VOCAB)
    by_class = _engine.CfgGrammar(nv, **flat, limits=limits, class_trie_max=class_trie_max)
    by_byte = _engine.CfgGrammar(nv, **dense, limits=limits, class_trie_max=class_trie_max)
    assert by_class.n_classes == by_byte.n_classes == k
    assert by_class.table_words == by_byte.table_words == n * k
    nat, py = pair(g, MANY_VOCAB)

    def viable(d: bytes) -> bool:
        return bool(py.feed(py.initial_state(), d))

    rng = random.Random(class_trie_max)
    for _ in range(3):
        sc, sb, sp, out = by_class.initial(), by_byte.initial(), py.initial_state(), b""
        for _ in range(12):
            got = np.frombuffer(by_class.mask(sc), dtype=np.uint32)
            assert np.array_equal(got, np.frombuffer(by_byte.mask(sb), dtype=np.uint32)), out
            assert np.array_equal(got, py.state_mask_words(sp)), out
            assert Mask(got.copy(), MANY_VOCAB.size) == reference_mask(viable, MANY_VOCAB, out), out
            ids = legal_ids(got, MANY_VOCAB)
            t = rng.choice(ids)
            sc, sb, sp = by_class.advance(sc, t), by_byte.advance(sb, t), py.advance_state(sp, t)
            out += MANY_VOCAB.token_bytes[t]
    with pytest.raises(gm.GrammarError, match="class"):
        _engine.CfgGrammar(nv, **{**flat, "classes": b"\x00" * 255}, limits=limits)
    with pytest.raises(gm.GrammarError, match="class"):
        _engine.CfgGrammar(nv, **{**flat, "classes": bytes([k]) * 256}, limits=limits)


def test_a_large_enum_hands_rust_a_table_by_class() -> None:
    """A 5,000-word enum's terminal (about 10,000 states) reaches the engine as states x its 28
    byte classes, a ninth of the 256-column table; masks still equal the Python engine's."""
    rng = random.Random(5)
    words = sorted({"".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 12))) for _ in range(5000)})
    g = gm.JsonSchema({"enum": words})
    nat, py = pair(g, MANY_VOCAB)
    n_states = 1 + sum(t.dfa.n_states - 1 for t in nat.cfg.terminals)
    assert n_states > 5000
    assert nat.engine.n_classes <= 30
    assert nat.engine.table_words == n_states * nat.engine.n_classes
    walk_both(nat, py, lambda o: rng.randrange(len(o)), 14)


def test_threads_share_one_compiled_grammar(tekken: gm.Vocabulary, tekken_tokenizer: Any) -> None:
    nat, py = pair(shipped("json.lark"), tekken, Limits(cfg_masks=2))
    ids = tekken_tokenizer.encode(json.dumps(DOCS[2]), bos=False, eos=False)
    states, sp = [nat.initial_state()], [py.initial_state()]
    for t in ids:
        states.append(nat.advance_state(states[-1], t))
        sp.append(py.advance_state(sp[-1], t))
    want = [py.state_mask_words(s) for s in sp]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(nat.state_mask_words, states * 3))
    for i, w in enumerate(got):
        assert np.array_equal(w, want[i % len(states)]), i


def test_states_are_hashable_values_and_bad_input_is_a_grammar_error() -> None:
    nat = NativeCompiledCfg(Lark('start: "a" "b"\n').cfg, TINY)
    other = NativeCompiledCfg(Lark('start: "a" "b"\n').cfg, TINY)
    s0 = nat.initial_state()
    a, b = nat.advance_state(s0, 0), nat.advance_state(s0, 0)
    assert a == b and hash(a) == hash(b) and a != s0 and len({a, b, s0}) == 2
    assert nat.advance_state(s0, 2) is None  # "aa"
    for bad in (-1, 99, 2**40, 3):  # out of range, EOS (empty bytes)
        assert nat.advance_state(s0, bad) is None
    for bad_state in ((), 0, other.initial_state()):
        with pytest.raises(gm.GrammarError):
            nat.state_mask_words(bad_state)
    with pytest.raises(ValueError):
        nat.state_mask_words(s0)[0] = 1  # shared answers are read-only
    assert nat.forced_bytes(s0) == b"ab"
    assert not nat.feed(s0, b"ba")


def test_the_switch_selects_the_cfg_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from grammarmask.engine import NATIVE_CFG_DEFAULT

    g = Lark('start: "q" "r"\n')
    monkeypatch.delenv("GRAMMARMASK_NATIVE_CFG", raising=False)
    assert isinstance(g._compile(TINY), NativeCompiledCfg if NATIVE_CFG_DEFAULT else CompiledCfg)
    for value, kind in (("1", NativeCompiledCfg), ("0", CompiledCfg), ("no", CompiledCfg)):
        monkeypatch.setenv("GRAMMARMASK_NATIVE_CFG", value)
        assert isinstance(g._compile(TINY), kind)  # type: ignore[arg-type]
    monkeypatch.setenv("GRAMMARMASK_NATIVE_CFG", "1")
    assert isinstance(g.compile(TINY, engine="python"), CompiledCfg)
    # the compile cache keys the switch too: the same grammar compiled under each setting
    on = g.compile(TINY)
    monkeypatch.setenv("GRAMMARMASK_NATIVE_CFG", "0")
    off = g.compile(TINY)
    assert isinstance(on, NativeCompiledCfg) and isinstance(off, CompiledCfg)
    assert g.compile(TINY) is off
    monkeypatch.setenv("GRAMMARMASK_NATIVE_CFG", "1")
    assert g.compile(TINY) is on

# ---- the JSONSchemaBench sample, every instance token by token (slow) -----------------------------------

def _jsb_items() -> list[tuple[str, dict[str, Any]]]:
    return [(f"{sub.name}/{f.name}", json.loads(f.read_text("utf-8")))
            for sub in sorted(p for p in BENCH.iterdir() if p.is_dir())
            for f in sorted((sub / "examples").glob("*.json"))]


@pytest.mark.slow
@pytest.mark.parametrize("order", ["declared", "any"])
def test_jsonschemabench_instances_agree_token_by_token(tekken: gm.Vocabulary, tekken_tokenizer: Any,
                                                        order: str) -> None:
    """Every valid instance of every schema of the sample both engines compile: equal masks and
    accepting flags at every token (a schema refused by the front end is skipped by both)."""
    import warnings

    items = _jsb_items()
    assert items, f"the JSONSchemaBench sample is not at {BENCH}"
    checked = 0
    for name, data in items:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g = gm.JsonSchema(data["schema"], property_order=order)
                nat, py = pair(g, tekken)
        except GrammarError:
            continue
        for case in data["tests"]:
            if not case["valid"]:
                continue
            ids = tekken_tokenizer.encode(json.dumps(case["data"], ensure_ascii=False), bos=False, eos=False)
            sn, sp = nat.initial_state(), py.initial_state()
            for i, t in enumerate(ids):
                got = check_step(nat, py, sn, sp, f"{name} token {i}".encode(), None, None)
                if t not in got:  # an instance the schema's grammar refuses (both engines agree)
                    break
                sn, sp = nat.advance_state(sn, t), py.advance_state(sp, t)
                assert sn is not None and sp is not None, (name, i)
                checked += 1
    assert checked > 1000


def test_malformed_tables_are_grammar_errors() -> None:
    from grammarmask import _engine
    from grammarmask.native import native_vocabulary
    from grammarmask.native.cfg import flat_tables

    nv = native_vocabulary(TINY)
    good = flat_tables(Lark('start: "a" x\nx: "b"\n').cfg)
    limits = (100, 100, 4, 16, 100, 4)
    _engine.CfgGrammar(nv, **good, limits=limits)  # the good tables build
    bad_cases = [
        {"transitions": good["transitions"][:-4]},  # not n rows of the classes
        {"term_of": good["term_of"][:-4]},  # a state with no terminal label
        {"starts": [10**6, 0]},  # a start state out of range
        {"rule_rhs": [5, 5]},  # an undefined nonterminal
        {"rule_rhs": [~7, 1]},  # an undefined terminal
        {"rule_ptr": [0, 1]},  # offsets that do not match the rules
        {"start": 9},
        {"greedy": [True]},  # per-terminal tables of different lengths
    ]
    for change in bad_cases:
        with pytest.raises(gm.GrammarError, match="native CFG"):
            _engine.CfgGrammar(nv, **{**good, **change}, limits=limits)
    # a terminal's table by class (flat_tables' parts): the terminal is named
    def cells(*states: int) -> bytes:
        return b"".join(s.to_bytes(4, sys.byteorder) for s in states)

    ok = (bytes(256), 1, cells(0, 1), b"\x00\x01", 1)  # state 1 loops on every byte
    assert _engine.lexer_tables([ok])[2] == b"\x00\x01"
    for i, bad in [(2, cells(0)), (1, 2), (4, 7), (0, b"\x01" * 256), (2, cells(0, 5)), (2, cells(1, 1))]:
        part = list(ok)
        part[i] = bad
        with pytest.raises(gm.GrammarError, match="native CFG lexer: terminal 1"):
            _engine.lexer_tables([ok, tuple(part)])
    with pytest.raises(gm.GrammarError, match="must be >= 0"):
        _engine.CfgGrammar(nv, **good, limits=(100, 100, 4, -1, 100, 4))


# ---- shortest completions (grammarmask.completion) on the native chart ----------------------------------

# multi-byte tokens too, as in tests/test_generate_budget.py
COMPLETION_VOCAB = gm.Vocabulary.from_tokens(
    [b"", *(bytes([b]) for b in range(256)), b'":', b', "', b"12", b"  ", b"ab", b"true", b"null", b"{\n",
     b"select", b"\n\n", b"((", b"))", b" + "], eos_token_id=0)  # fmt: skip


def completions_agree(nat: NativeCompiledCfg, py: CompiledCfg, rng: random.Random, steps: int) -> int:
    """Along a random walk: the native completion and the Python solver's are valid in both engines
    (fed to either grammar they end accepting), the two answer None together, and they are equally
    long, up to the separators a grammar with %ignore puts between lexemes (both are shortest at
    the level of terminals; which of equally cheap derivations each picks may differ, and one may
    need a separator the other does not). Returns the steps checked."""
    from grammarmask.completion import shortest_completion

    vocab = nat.vocab
    sn, sp = nat.initial_state(), py.initial_state()
    n = 0
    for _ in range(steps):
        want, got = shortest_completion(py, sp), shortest_completion(nat, sn)
        if want is None and got is not None:
            # the Python solver answers None when checking its candidate runs out of budget
            # ('root ::= [ab] | root root "b"'); then the native answer must exceed it too
            py.feed(sp, got)  # raises BudgetExceeded, which the caller accepts, or the assert fails
        assert (got is None) == (want is None), (want, got)
        if got is not None:
            assert want is not None
            for c, s in ((nat, sn), (py, sp)):
                for answer in (got, want):
                    end = c.feed(s, answer)
                    assert end and c.is_accepting_state(end), answer
            sep = py.__dict__["_completion_solver"].sep
            if sep is None:
                assert len(got) == len(want), (want, got)
            else:  # each answer: the cheapest terminals, at most one separator between two lexemes
                assert abs(len(got) - len(want)) <= len(sep) * min(len(got), len(want)), (want, got)
        n += 1
        ids = legal_ids(nat.state_mask_words(sn), vocab)
        if not ids:
            break
        t = ids[rng.randrange(len(ids))]
        sn, sp = nat.advance_state(sn, t), py.advance_state(sp, t)
        assert sn is not None and sp is not None
    return n


@pytest.mark.parametrize("name", SHIPPED)
def test_completions_of_the_shipped_grammars(name: str) -> None:
    nat, py = pair(shipped(name), COMPLETION_VOCAB)
    checked = sum(completions_agree(nat, py, random.Random(seed), 40) for seed in range(8))
    assert checked > 40


@pytest.mark.parametrize("i", range(len(SCHEMAS)))
def test_completions_of_json_schemas(i: int) -> None:
    nat, py = pair(gm.JsonSchema(SCHEMAS[i]), COMPLETION_VOCAB)
    assert sum(completions_agree(nat, py, random.Random(seed), 40) for seed in range(4)) > 4


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(lark_grammars(), gbnf_grammars()), seed=st.integers(0, 2**32))
def test_completions_of_generated_grammars(text: str, seed: int) -> None:
    try:
        g = Lark(text) if text.startswith("start") else Gbnf(text)
        nat, py = pair(g, SMALL)
    except GrammarError:
        assume(False)
        return
    try:
        completions_agree(nat, py, random.Random(seed), 10)
    except gm.BudgetExceeded as e:  # 'x ::= x x | ...': masks may run out of budget (completions answer None)
        assume(e.budget in ("cfg_configs", "earley_items_per_set", "cfg_walk_visits"))


def test_completion_needs_its_costs_and_checks_its_input() -> None:
    from grammarmask.completion import shortest_completion

    nat = NativeCompiledCfg(Lark('start: "a" x\nx: "b" | "c" x\n').cfg, TINY)
    s0 = nat.initial_state()
    with pytest.raises(gm.GrammarError, match="costs not set"):
        nat.engine.completion(s0, 0, -1)
    assert shortest_completion(nat, s0) == b"ab"
    assert shortest_completion(nat, (1, 2)) is None  # not a state of this engine
    with pytest.raises(gm.GrammarError, match="configuration 5 of 1"):
        nat.engine.completion(s0, 5, -1)
    with pytest.raises(gm.GrammarError, match="terminal 99"):
        nat.engine.completion(s0, 0, 99)
    with pytest.raises(gm.GrammarError, match="costs"):
        nat.engine.set_completion_costs([1], [1, 1])
    other = NativeCompiledCfg(Lark('start: "a" x\nx: "b" | "c" x\n').cfg, TINY)
    with pytest.raises(gm.GrammarError, match="another compiled grammar"):
        other.engine.configurations(s0)
    assert shortest_completion(nat, nat.feed(s0, b"acc")) == b"b"
