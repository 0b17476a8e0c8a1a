"""Budget-aware generation (issue 18): with a random model, every sample ends in a valid document within
``max_tokens``, checked by the external references (lark, jsonschema, json, re); shortest completions
against brute force; ``budget_aware=False`` keeps the old loop."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import jsonschema
import lark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.completion import shortest_completion
from grammarmask.decoding import generate
from grammarmask.grammar import CompiledGrammar
from grammarmask.testing import byte_vocabulary

GRAMMARS = Path(gm.__file__).parent / "grammars"
BENCH = Path("/work/shared/corpus/json_schema/jsonschemabench")
# multi-byte tokens too, so that tokens can overshoot what is left
VOCAB = byte_vocabulary([b'":', b', "', b"12", b"  ", b"ab", b"true", b"null", b"{\n", b"select", b"\n\n",
                         b"((", b"))", b" + "])  # fmt: skip
SAMPLES = 100

# One schema from each part of JSONSchemaBench that compiles quickly (chosen by a scan of the corpus).
SCHEMAS = [
    "BFCL/BFCL_java_41.json",
    "Github_easy/o33832.json",
    "Github_hard/o81652.json",
    "Github_medium/o33925.json",
    "Github_trivial/o64546.json",
    "Glaiveai2K/calculate_area_8a0868c8.json",
    "JsonSchemaStore/ansible-navigator.json",
    "Kubernetes/kb_1068_Normalized.json",
    "MCPspec/ClientNotification.json",
    "WashingtonPost/wp_20_Normalized.json",
]


def _shipped_reference(name: str) -> Any:
    """The external check for a shipped grammar: lark for .lark; for .gbnf, json / the .lark twin
    (which accepts a superset: lark's %ignore WS is looser than GBNF's bounded ws)."""
    if name == "json.gbnf":
        return json.loads
    twin = GRAMMARS / (name.rsplit(".", 1)[0] + ".lark")
    return lark.Lark(twin.read_text()).parse


def _sample_all(compiled: CompiledGrammar, budget: int, check: Any) -> tuple[int, int]:
    """(samples that ended with EOS within ``budget`` and pass ``check``, samples the budget steered)."""
    ok = steered = 0
    for seed in range(SAMPLES):
        r = generate(gm.RandomModel(VOCAB.size, seed=seed), VOCAB, compiled, max_tokens=budget, seed=seed)
        assert len(r.token_ids) <= budget
        assert r.finished and r.accepted, (seed, r.text)
        check(r.text)
        ok += 1
        steered += r.budget_steps > 0
    return ok, steered


@pytest.mark.parametrize("name", sorted(p.name for p in GRAMMARS.iterdir()))
def test_shipped_grammars_end_within_the_budget(name: str) -> None:
    path = GRAMMARS / name
    g = gm.Lark.from_file(str(path)) if path.suffix == ".lark" else gm.Gbnf(path.read_text())
    compiled = g.compile(VOCAB)
    ok, steered = _sample_all(compiled, 32, _shipped_reference(name))
    assert ok == SAMPLES
    assert steered > 0  # the budget did bind: without it these samples run past 32 tokens


@pytest.mark.parametrize("rel", SCHEMAS)
def test_corpus_schemas_end_within_the_budget(rel: str) -> None:
    schema = json.loads((BENCH / rel).read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # strict=False: some keywords are only warned about
        compiled = gm.JsonSchema(schema, strict=False).compile(VOCAB)
    shortest = shortest_completion(compiled, compiled.initial_state())
    assert shortest is not None
    validator = jsonschema.Draft202012Validator(schema)

    def check(text: str) -> None:
        validator.validate(json.loads(text))

    ok, _ = _sample_all(compiled, len(shortest) + 16, check)
    assert ok == SAMPLES


def test_regex_ends_within_the_budget() -> None:
    pattern = r"[a-z]{3,}(,[0-9]+)*;"

    def check(text: str) -> None:
        assert re.fullmatch(pattern, text), text

    ok, steered = _sample_all(gm.Regex(pattern).compile(VOCAB), 8, check)
    assert ok == SAMPLES and steered > 0


# --- shortest_completion against brute force ----------------------------------------------------------

SMALL_LARK = [
    'start: "(" start ")" | "x"',
    "start: item+\nitem: NAME \";\" | \"{\" item* \"}\"\n%import common.CNAME -> NAME\n%ignore \" \"",
    'start: expr\nexpr: expr "+" atom | atom\natom: /[0-9]+/ | "[" expr? "]"',
    'start: "a"* "b" | "c" start "d"',
]
SMALL_REGEX = [r"(ab|c)*d{2,3}", r"[0-9]{1,3}(\.[0-9]+)?e?", r"x(yz)*|w+"]
_SINGLE = {VOCAB.token_bytes[i]: i for i in range(1, 257)}


def _key(state: Any) -> Any:
    """A hashable name of a state's behaviour (the Python CFG engine's states hold unhashable sets;
    the native engine's are hashable values)."""
    if isinstance(state, tuple):
        return tuple((e.sig, p, sh, f) for e, p, sh, f in state)
    return state


def _brute_shortest(compiled: CompiledGrammar, state: Any, limit: int) -> int | None:
    """The length of the shortest accepted continuation of at most ``limit`` bytes, by breadth-first
    search over all 256 bytes (the reference: no knowledge of the grammar's structure)."""
    frontier, seen = [state], {_key(state)}
    for n in range(limit + 1):
        if any(compiled.is_accepting_state(s) for s in frontier):
            return n
        nxt = []
        for s in frontier:
            for b in range(256):
                s2 = compiled.advance_state(s, _SINGLE[bytes([b])])
                if s2 is not None and _key(s2) not in seen:
                    seen.add(_key(s2))
                    nxt.append(s2)
        frontier = nxt
    return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["lark", "regex"]), st.integers(0, 3), st.lists(st.integers(0, 1 << 16), max_size=12),
       st.sampled_from(["native", "python"]))
def test_shortest_completion_matches_brute_force(kind: str, which: int, picks: list[int],
                                                  engine: str) -> None:
    g = gm.Lark(SMALL_LARK[which]) if kind == "lark" else gm.Regex(SMALL_REGEX[which % len(SMALL_REGEX)])
    compiled = g.compile(VOCAB, engine=engine)
    m = compiled.matcher()
    for p in picks:  # a random walk over single-byte tokens
        legal = [int(t) for t in m.mask().token_ids() if 1 <= t <= 256]
        if not legal:
            break
        m.advance(legal[p % len(legal)])
    got = shortest_completion(compiled, m.state)
    assert got is not None
    probe = m.fork()
    probe.advance_many(_SINGLE[bytes([b])] for b in got)
    assert probe.is_accepting()
    assert _brute_shortest(compiled, m.state, len(got)) == len(got)


def test_shortest_completion_is_none_for_compositions() -> None:
    g = (gm.Regex("[a-z]+") & gm.Regex("[a-c]{2}x*")).compile(VOCAB)
    assert shortest_completion(g, g.initial_state()) in (None, b"aa")  # a product DFA may answer
    u = (gm.Lark('start: "a"') | gm.Regex("b+")).compile(VOCAB)
    assert shortest_completion(u, u.initial_state()) is None


# --- budget_aware=False keeps the old loop ---------------------------------------------------------


def test_budget_off_is_the_old_loop_and_far_budgets_change_nothing() -> None:
    compiled = gm.Lark.from_file(str(GRAMMARS / "python_expr.lark")).compile(VOCAB)
    for seed in range(10):
        model = gm.RandomModel(VOCAB.size, seed=seed)
        long_off = generate(model, VOCAB, compiled, max_tokens=400, seed=seed, budget_aware=False)
        short_off = generate(model, VOCAB, compiled, max_tokens=12, seed=seed, budget_aware=False)
        # without the option a budget only cuts: the same tokens, truncated, and no steering
        assert short_off.token_ids == long_off.token_ids[:12] and short_off.budget_steps == 0
        short_on = generate(model, VOCAB, compiled, max_tokens=12, seed=seed)
        assert short_on.finished and len(short_on.token_ids) <= 12
        if long_off.finished and len(long_off.token_ids) <= 100:
            # the budget never bound: the same draws from the same RNG
            far_on = generate(model, VOCAB, compiled, max_tokens=400, seed=seed)
            assert far_on.token_ids == long_off.token_ids and far_on.budget_steps == 0


def test_a_budget_below_the_shortest_document_follows_it() -> None:
    compiled = gm.Regex("abcdefgh").compile(VOCAB)
    r = generate(gm.RandomModel(VOCAB.size), VOCAB, compiled, max_tokens=3, seed=0, jump_forward=False)
    assert "abcdefgh".startswith(r.text) and len(r.token_ids) == 3 and not r.finished
