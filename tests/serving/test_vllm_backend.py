"""grammarmask inside vLLM's real StructuredOutputManager (CPU): every request type, the request's
stop-token set, the padded vocabulary, speculative rows, accept/validate/rollback/terminate/reset,
parallel fills, per-request budgets. Every mask vLLM gets is compared with grammarmask's own."""

from __future__ import annotations

import json
import random
import threading
from typing import Any

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.completion import shortest_completion
from grammarmask.integrations import vllm as gv
from grammarmask.testing import reference_mask

from .conftest import MODEL_VOCAB, Engine

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"enum": ["math", "poetry"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
LARK = """
start: expr
expr: term (("+" | "-") term)*
term: NUMBER | "(" expr ")"
%import common.NUMBER
"""
GBNF = 'root ::= "yes" | "no" | "maybe " [0-9]+'
REGEX = r"[a-z]{1,4}@(example|test)\.com"
CHOICES = ["Technology > AI > NLP", "Science > Physics", "yes", "no"]

REQUESTS: dict[str, dict[str, Any]] = {
    "json": {"json": PERSON},
    "json_object": {"json_object": True},
    "regex": {"regex": REGEX},
    "lark": {"grammar": LARK},
    "gbnf": {"grammar": GBNF},
    "choice": {"choice": CHOICES},
}


def own_matcher(engine: Engine, request: Any) -> gm.Matcher:
    """grammarmask's own matcher for the request, compiled independently of vLLM's path."""
    from vllm.v1.structured_output.request import get_structured_output_key

    kind, spec = get_structured_output_key(request.sampling_params.structured_outputs)
    backend = engine.manager.backend
    return gv.grammar_for(kind, spec).compile(backend.vocab, engine="python").matcher()


def expected_row(own: gm.Matcher, stops: set[int]) -> np.ndarray:
    """The row vLLM must get: grammarmask's mask with the request's stop tokens for EOS."""
    words = own.mask().words.astype(np.uint32).copy()
    eos = own.vocab.eos_token_id
    for t in stops | {eos}:
        words[t >> 5] &= ~np.uint32(1 << (t & 31))
    if own.is_accepting():
        for t in stops:
            words[t >> 5] |= np.uint32(1 << (t & 31))
    return words


def legal_ids(row: np.ndarray) -> list[int]:
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")
    return [int(i) for i in np.flatnonzero(bits)]


def grammar_of(request: Any) -> gv.GrammarmaskGrammar:
    g = request.structured_output_request.grammar
    assert isinstance(g, gv.GrammarmaskGrammar), g
    return g


def walk(engine: Engine, request: Any, rng: random.Random, steps: int = 120, finish_after: int = 12,
         check: Any = None) -> list[int]:
    """Sample through vLLM's manager; at every step the row must equal grammarmask's own mask."""
    rid = request.request_id
    own = own_matcher(engine, request)
    stops = set(request.sampling_params.all_stop_token_ids)
    taken: list[int] = []
    for step in range(steps):
        row = engine.bitmask([rid])[0].view(np.uint32)
        if own.is_finished():
            assert (row == np.uint32(0xFFFFFFFF)).all()  # vLLM's own full row once terminated
            break
        np.testing.assert_array_equal(row, expected_row(own, stops), err_msg=f"step {step}")
        if check is not None:
            check(own, row)
        legal = legal_ids(row)
        assert legal, f"no legal token at step {step}"
        assert max(legal) < engine.manager.backend.vocab.size <= MODEL_VOCAB
        t = _pick(own, legal, stops, rng, finishing=step >= finish_after)
        assert engine.manager.accept_tokens(request, [t])
        own.advance(own.vocab.eos_token_id if t in stops else t)
        taken.append(t)
    return taken


def _pick(own: gm.Matcher, legal: list[int], stops: set[int], rng: random.Random, *, finishing: bool) -> int:
    """A random legal token; once ``finishing``, a stop token if legal, else a step of the shortest
    completion (so walks over unbounded grammars end)."""
    text = [t for t in legal if t not in stops]
    if not finishing or not text:
        return rng.choice(text or legal)
    ending = [t for t in legal if t in stops]
    if ending:
        return rng.choice(ending)
    rest = shortest_completion(own.compiled, own.state) or b""
    tb = own.vocab.token_bytes
    toward = [t for t in text if tb[t] and rest.startswith(tb[t])]
    return max(toward, key=lambda t: len(tb[t])) if toward else rng.choice(text)


def test_the_switch_selected_grammarmask(engine: Engine) -> None:
    req = engine.submit(**REQUESTS["regex"])
    assert gv.installed()
    assert req.sampling_params.structured_outputs._backend == gv.BACKEND_NAME
    assert isinstance(engine.manager.backend, gv.GrammarmaskBackend)
    assert engine.manager.backend_name == gv.BACKEND_NAME


def test_an_explicit_backend_is_left_alone(engine: Engine) -> None:
    from vllm.config import StructuredOutputsConfig
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    sp = SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+"))
    sp.verify(engine.model_config, None, StructuredOutputsConfig(backend="xgrammar"), engine.tokenizer)
    assert sp.structured_outputs._backend == "xgrammar"


def test_padded_vocabulary(engine: Engine) -> None:
    engine.submit(**REQUESTS["json_object"])
    backend = engine.manager.backend
    n_tokenizer = len(engine.tokenizer)
    assert n_tokenizer < MODEL_VOCAB == backend.vocab_size == backend.vocab.size
    bitmask = backend.allocate_token_bitmask(3)
    assert tuple(bitmask.shape) == (3, (MODEL_VOCAB + 31) // 32) and str(bitmask.dtype) == "torch.int32"
    assert (bitmask == -1).all()
    # tokens the tokenizer has are its own; ids past it are never legal (padding)
    assert backend.vocab.decode(engine.tokenizer.encode('{"a"', add_special_tokens=False)) == b'{"a"'
    tb = backend.vocab.token_bytes
    assert all(tb[i] == b"" for i in range(n_tokenizer, len(tb)))


@pytest.mark.parametrize("kind", list(REQUESTS))
def test_masks_equal_grammarmask_own_at_every_step(engine: Engine, kind: str) -> None:
    for seed in range(3):
        req = engine.submit(**REQUESTS[kind])
        taken = walk(engine, req, random.Random(seed))
        g = grammar_of(req)
        assert g.is_terminated(), f"{kind}: the walk did not finish in 120 tokens: {taken}"
        assert taken[-1] in req.sampling_params.all_stop_token_ids
        text = engine.manager.backend.vocab.decode(taken[:-1]).decode()
        if kind == "json":
            doc = json.loads(text)
            assert set(doc) >= {"name", "age"} and set(doc) <= set(PERSON["properties"])
        elif kind == "json_object":
            assert isinstance(json.loads(text), dict)
        elif kind == "choice":
            assert text in CHOICES


def test_regex_masks_equal_the_brute_force_oracle(engine: Engine) -> None:
    import regex as re

    def viable(b: bytes) -> bool:
        return re.fullmatch(REGEX, b.decode("utf-8", "replace"), partial=True) is not None

    req = engine.submit(**REQUESTS["regex"])
    vocab = engine.manager.backend.vocab
    stops = set(req.sampling_params.all_stop_token_ids)
    rng = random.Random(7)
    history: list[int] = []
    for _ in range(40):
        prefix = vocab.decode(history)
        complete = re.fullmatch(REGEX, prefix.decode()) is not None
        oracle = reference_mask(viable, vocab, prefix).words.astype(np.uint32)
        if complete:
            for t in stops:
                oracle[t >> 5] |= np.uint32(1 << (t & 31))
        row = engine.bitmask([req.request_id])[0].view(np.uint32)
        np.testing.assert_array_equal(row, oracle, err_msg=repr(prefix))
        text = [t for t in legal_ids(row) if t not in stops]
        if not text:
            break
        history.append(rng.choice(text))
        assert engine.manager.accept_tokens(req, history[-1:])
    assert len(history) >= 6


def test_stop_token_set_replaces_the_single_eos(engine: Engine) -> None:
    tok = engine.tokenizer
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    dot = tok.encode(".", add_special_tokens=False)
    assert len(dot) == 1
    stops = {im_end, dot[0]}
    req = engine.submit(regex=r"[a-z]+(\.[a-z]+)?", stop_token_ids=sorted(stops))
    assert set(req.sampling_params.all_stop_token_ids) == stops | {tok.eos_token_id}
    g = grammar_of(req)
    assert g.stop_token_ids == stops | {tok.eos_token_id}
    rid = req.request_id
    row = engine.bitmask([rid])[0].view(np.uint32)
    assert not set(legal_ids(row)) & g.stop_token_ids  # nothing written yet: no stop token
    (a,) = tok.encode("a", add_special_tokens=False)
    assert engine.manager.accept_tokens(req, [a])
    legal = set(legal_ids(engine.bitmask([rid])[0].view(np.uint32)))
    assert g.stop_token_ids <= legal  # complete: every stop token, "." only as a stop token
    assert engine.manager.accept_tokens(req, [dot[0]])
    assert g.is_terminated()
    g.rollback(1)  # undoes termination
    assert not g.is_terminated() and g.num_processed_tokens == 1
    assert engine.manager.accept_tokens(req, [im_end]) and g.is_terminated()
    assert engine.manager.accept_tokens(req, [a, a])  # after termination tokens are ignored
    assert g.num_processed_tokens == 2


def test_eos_outside_the_stop_set_is_never_legal(engine: Engine) -> None:
    backend = engine.manager.backend
    im_end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    g = backend.compile_grammar(gv.StructuredOutputOptions.CHOICE, '["yes"]', stop_token_ids={im_end})
    (yes,) = [t for t in engine.tokenizer.encode("yes", add_special_tokens=False)]
    assert g.accept_tokens("x", [yes])
    bitmask = backend.allocate_token_bitmask(1)
    g.fill_bitmask(bitmask, 0)
    assert legal_ids(bitmask[0].numpy().view(np.uint32)) == [im_end]
    assert not g.accept_tokens("x", [backend.vocab.eos_token_id]) and not g.is_terminated()


def test_validate_tokens_changes_nothing(engine: Engine) -> None:
    req = engine.submit(**REQUESTS["choice"])
    g = grammar_of(req)
    yes = engine.tokenizer.encode("yes", add_special_tokens=False)
    eos = engine.tokenizer.eos_token_id
    before = engine.bitmask([req.request_id])[0].copy()
    assert engine.manager.validate_tokens(req, [*yes, eos, *yes]) == [*yes, eos]  # up to the stop token
    (bad,) = engine.tokenizer.encode("}", add_special_tokens=False)
    assert g.validate_tokens([*yes[:1], bad, *yes]) == yes[:1]
    assert g.validate_tokens([*yes[:1], -1, -1]) == yes[:1]  # vLLM's speculative padding ends it
    assert g.num_processed_tokens == 0 and not g.is_terminated()
    np.testing.assert_array_equal(engine.bitmask([req.request_id])[0], before)


def test_reset(engine: Engine) -> None:
    req = engine.submit(**REQUESTS["json"])
    before = engine.bitmask([req.request_id])[0].copy()
    walk(engine, req, random.Random(3), steps=5, finish_after=99)
    g = grammar_of(req)
    assert g.num_processed_tokens == 5
    g.reset()
    assert g.num_processed_tokens == 0 and not g.is_terminated()
    np.testing.assert_array_equal(engine.bitmask([req.request_id])[0], before)


def test_rollback_past_the_start_is_refused(engine: Engine) -> None:
    req = engine.submit(**REQUESTS["gbnf"])
    g = grammar_of(req)
    with pytest.raises(gm.GrammarError):
        g.rollback(1)
    assert g.num_processed_tokens == 0


def _path(engine: Engine, request: Any, n: int, seed: int) -> list[int]:
    """n legal tokens from the start of the request's grammar (stop tokens last if reached)."""
    own = own_matcher(engine, request)
    rng = random.Random(seed)
    out: list[int] = []
    stops = set(request.sampling_params.all_stop_token_ids)
    while len(out) < n and not own.is_finished():
        legal = legal_ids(expected_row(own, stops))
        text = [t for t in legal if t not in stops]
        t = rng.choice(text or legal)
        own.advance(own.vocab.eos_token_id if t in stops else t)
        out.append(t)
    return out


def test_speculative_rows(make_engine: Any) -> None:
    engine: Engine = make_engine(spec_tokens=3)
    assert engine.config.num_speculative_tokens == 3
    reqs = [engine.submit(**REQUESTS[k]) for k in ("json", "lark", "choice")]
    drafts = {r.request_id: _path(engine, r, 3, seed=i) for i, r in enumerate(reqs)}
    rows = engine.bitmask([r.request_id for r in reqs], drafts).view(np.uint32)
    assert rows.shape[0] == 3 * 4  # a block of 1 + 3 rows per request
    for i, r in enumerate(reqs):
        own = own_matcher(engine, r)
        stops = set(r.sampling_params.all_stop_token_ids)
        for j, t in enumerate(drafts[r.request_id]):
            np.testing.assert_array_equal(rows[4 * i + j], expected_row(own, stops), err_msg=f"{i}/{j}")
            own.advance(t)
        np.testing.assert_array_equal(rows[4 * i + 3], expected_row(own, stops))  # the bonus token's row
        g = grammar_of(r)
        assert g.num_processed_tokens == 0  # vLLM rolled the drafts back
    # accept drafts, then roll them back
    r = reqs[0]
    g = grammar_of(r)
    start = engine.bitmask([r.request_id])[:1].copy()
    assert engine.manager.accept_tokens(r, drafts[r.request_id])
    assert g.num_processed_tokens == 3
    g.rollback(3)
    np.testing.assert_array_equal(engine.bitmask([r.request_id])[:1], start)


def test_speculative_rows_after_a_rejected_draft_and_a_stop_token(make_engine: Any) -> None:
    engine: Engine = make_engine(spec_tokens=3)
    tok = engine.tokenizer
    req = engine.submit(choice=["yes", "no"])
    rid = req.request_id
    (bad,) = tok.encode("}", add_special_tokens=False)
    yes = tok.encode("yes", add_special_tokens=False)
    rows = engine.bitmask([rid], {rid: [yes[0], bad, yes[0]]}).view(np.uint32)
    own = own_matcher(engine, req)
    stops = set(req.sampling_params.all_stop_token_ids)
    np.testing.assert_array_equal(rows[0], expected_row(own, stops))
    own.advance(yes[0])
    for j in (1, 2, 3):  # rows after the rejected draft repeat the last valid state's row
        np.testing.assert_array_equal(rows[j], expected_row(own, stops))
    assert grammar_of(req).num_processed_tokens == 0
    # a stop token among the drafts terminates; vLLM's rollback undoes it
    req = engine.submit(choice=["yes", "no"])
    rid = req.request_id
    drafts = [*yes, tok.eos_token_id]
    assert len(drafts) <= 3
    rows = engine.bitmask([rid], {rid: drafts}).view(np.uint32)
    assert legal_ids(rows[len(yes)]) == sorted(req.sampling_params.all_stop_token_ids)
    assert (rows[len(drafts)] == np.uint32(0xFFFFFFFF)).all()  # terminated by the drafts: vLLM's full row
    g = grammar_of(req)
    assert not g.is_terminated() and g.num_processed_tokens == 0


def test_parallel_fill_of_a_large_batch(make_engine: Any) -> None:
    engine: Engine = make_engine(max_num_seqs=256)
    rng = random.Random(11)
    reqs = []
    for i in range(140):  # over vLLM's threshold of 128: rows are filled by its thread pool
        obj = {"type": "object", "properties": {f"key{i}": {"type": "integer"}}, "required": [f"key{i}"]}
        so = ({"regex": f"[a-z]{{1,{i % 9 + 1}}}(-[0-9]{{{i % 5 + 1}}})?"} if i % 3 == 0 else
              {"json": obj} if i % 3 == 1 else {"choice": [f"label {i}", f"other {i}", "yes"]})
        reqs.append(engine.submit(**so))
    owns = {}
    for r in reqs:
        owns[r.request_id] = own_matcher(engine, r)
        for t in _path(engine, r, rng.randrange(0, 4), seed=rng.randrange(1000)):
            if t in r.sampling_params.all_stop_token_ids:
                break
            assert engine.manager.accept_tokens(r, [t])
            owns[r.request_id].advance(t)
    rows = engine.bitmask([r.request_id for r in reqs]).view(np.uint32)
    for i, r in enumerate(reqs):
        np.testing.assert_array_equal(rows[i], expected_row(owns[r.request_id],
                                                            set(r.sampling_params.all_stop_token_ids)))


def test_a_schema_over_budget_fails_only_its_request(make_engine: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gv.LIMITS_ENV, '{"json_schema_enum_values": 10}')
    engine: Engine = make_engine()
    big = engine.submit(json={"enum": [f"v{i}" for i in range(50)]})
    small = engine.submit(json={"enum": [f"v{i}" for i in range(5)]})
    err = big.structured_output_request.grammar
    assert isinstance(err, gm.BudgetExceeded), err
    assert err.budget == "json_schema_enum_values" and gv.LIMITS_ENV in str(err)
    assert isinstance(small.structured_output_request.grammar, gv.GrammarmaskGrammar)
    walk(engine, small, random.Random(0))


def test_a_slow_compile_fails_only_its_request(make_engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gv.COMPILE_TIMEOUT_ENV, "0.05")
    engine: Engine = make_engine()
    release = threading.Event()
    compile_ = gm.JsonSchema.compile

    def slow(self: gm.JsonSchema, *args: Any, **kwargs: Any) -> Any:
        release.wait(10)  # slower than the limit however fast the compile itself is (a microsecond
        return compile_(self, *args, **kwargs)  # limit was not: a compile could finish in one GIL slice)

    monkeypatch.setattr(gm.JsonSchema, "compile", slow)
    req = engine.submit(json={**PERSON, "properties": {**PERSON["properties"], "slow": {"type": "string"}}})
    release.set()
    err = req.structured_output_request.grammar
    assert isinstance(err, gm.GrammarError) and gv.COMPILE_TIMEOUT_ENV in str(err), err


def test_a_mask_time_error_fails_the_request_not_the_engine(engine: Engine) -> None:
    backend = engine.manager.backend
    compiled = gm.Lark('start: "a"+ "b"').compile(backend.vocab, limits=gm.Limits(cfg_walk_visits=0))
    g = gv.GrammarmaskGrammar(compiled, {backend.vocab.eos_token_id})
    bitmask = backend.allocate_token_bitmask(2)
    g.fill_bitmask(bitmask, 1)
    assert isinstance(g.error, gm.BudgetExceeded)
    assert legal_ids(bitmask[1].numpy().view(np.uint32)) == [backend.vocab.eos_token_id]  # stop tokens only
    assert (bitmask[0] == -1).all()
    assert not g.accept_tokens("x", [backend.vocab.eos_token_id])  # vLLM then fails this request


@pytest.mark.parametrize(("so", "message"), [
    ({"regex": "a(b"}, "grammarmask"),
    ({"json": '{"type": "object", "properties": 3}'}, "grammarmask"),
    ({"grammar": "start: undefined_rule"}, "grammarmask"),
    ({"choice": ["a", ""]}, "label 1 is empty"),
    ({"structural_tag": json.dumps({"type": "structural_tag", "format": {"type": "no_such_format"}})},
     "no_such_format"),
])
def test_a_bad_request_is_refused_when_validated(engine: Engine, so: dict[str, Any], message: str) -> None:
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match=message):
        engine.params(**so)


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
           "required": ["city"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}
TOOLS = {  # vLLM's structural_tag request in its legacy form: two tools, free text around the calls
    "type": "structural_tag",
    "structures": [
        {"begin": "<function=get_weather>", "schema": WEATHER, "end": "</function>"},
        {"begin": "<function=get_time>", "schema": TIME, "end": "</function>"},
    ],
    "triggers": ["<function="],
}


def follow(engine: Engine, request: Any, tokens: list[int]) -> None:
    """Accept ``tokens`` through vLLM's manager, checking every row against grammarmask's own mask."""
    own = own_matcher(engine, request)
    stops = set(request.sampling_params.all_stop_token_ids)
    for i, t in enumerate(tokens):
        row = engine.bitmask([request.request_id])[0].view(np.uint32)
        np.testing.assert_array_equal(row, expected_row(own, stops), err_msg=f"token {i}")
        assert t in legal_ids(row), f"token {i} ({t}) is not legal"
        assert engine.manager.accept_tokens(request, [t])
        own.advance(own.vocab.eos_token_id if t in stops else t)


def test_structural_tag_tool_calls(engine: Engine) -> None:
    tok = engine.tokenizer
    text = ('Let me check. <function=get_weather>{"city": "Paris"}</function> and '
            '<function=get_time>{"zone": "CET"}</function> done.')
    req = engine.submit(structural_tag=json.dumps(TOOLS))
    follow(engine, req, [*tok.encode(text, add_special_tokens=False), tok.eos_token_id])
    assert grammar_of(req).is_terminated()
    # a call's arguments must follow its schema: "Paris" is no zone
    req = engine.submit(structural_tag=json.dumps(TOOLS))
    g = grammar_of(req)
    bad = tok.encode('<function=get_time>{"zone": "Paris"', add_special_tokens=False)
    assert len(g.validate_tokens(bad)) < len(bad)
    walk(engine, req, random.Random(5), steps=60)  # random walks: every row equals grammarmask's own


def test_structural_tag_with_special_tokens(engine: Engine) -> None:
    tok = engine.tokenizer
    begin, end = tok.convert_tokens_to_ids("<tool_call>"), tok.convert_tokens_to_ids("</tool_call>")
    spec = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "token", "token": "<tool_call>"},
        {"type": "json_schema", "json_schema": TIME},
        {"type": "token", "token": "</tool_call>"},
    ]}}
    req = engine.submit(structural_tag=json.dumps(spec))
    first = legal_ids(engine.bitmask([req.request_id])[0].view(np.uint32))
    assert first == [begin]  # the marker, nothing else
    body = tok.encode('{"zone": "UTC"}', add_special_tokens=False)
    follow(engine, req, [begin, *body, end, tok.eos_token_id])
    assert grammar_of(req).is_terminated()


def test_an_unreadable_tokenizer_fails_requests_not_the_engine(engine: Engine) -> None:
    """The vocabulary is read off the scheduler's thread; a tokenizer grammarmask cannot read makes
    each compile fail with the reason, where vLLM reports it per request."""
    backend = gv.GrammarmaskBackend(engine.config, tokenizer=object(), vocab_size=MODEL_VOCAB)
    assert tuple(backend.allocate_token_bitmask(2).shape) == (2, (MODEL_VOCAB + 31) // 32)
    with pytest.raises(gm.GrammarError, match="tokenizer"):
        backend.compile_grammar(gv.StructuredOutputOptions.REGEX, "a+")
