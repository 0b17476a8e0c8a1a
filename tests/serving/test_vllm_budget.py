"""Budget-aware masks and token healing in both vLLM paths, inside vLLM's real StructuredOutputManager
(the backend path) and its logits-processor protocol (CPU). The "model" samples uniformly among the
legal tokens (the backend path: vLLM fills masks before the logits exist) or takes the argmax of
random logits (the logits-processor path); a small ``max_tokens`` must end in a valid document."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import jsonschema
import lark
import numpy as np
import pytest
import torch

import grammarmask as gm
from grammarmask.integrations import vllm as gv
from grammarmask.integrations import vllm_logits as gl

from .conftest import Engine
from .test_vllm_backend import CHOICES, GBNF, LARK, PERSON, REGEX, expected_row, legal_ids, own_matcher

BUDGETS = (20, 24, 32, 48)
KINDS: dict[str, dict[str, Any]] = {
    "json": {"json": PERSON},
    "json_object": {"json_object": True},
    "lark": {"grammar": LARK},
    "gbnf": {"grammar": GBNF},
    "regex": {"regex": REGEX},
    "choice": {"choice": CHOICES},
}


def params(engine: Engine, max_tokens: int, extra_args: dict[str, Any] | None = None, **so: Any) -> Any:
    """SamplingParams as vLLM's input processor leaves them (validated, stop tokens set)."""
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    sp = SamplingParams(structured_outputs=StructuredOutputsParams(**so) if so else None,
                        max_tokens=max_tokens, extra_args=extra_args)
    if so:
        sp.verify(engine.model_config, engine.spec_config, engine.so_config, engine.tokenizer)
    sp.update_from_generation_config({}, engine.tokenizer.eos_token_id)
    return sp


def submit(engine: Engine, sp: Any, prompt: list[int] | None = None) -> Any:
    from vllm.v1.request import Request

    rid = f"b{len(engine.requests)}"
    req = Request(rid, prompt or [0, 5, 6], sp, None)
    engine.manager.grammar_init(req)
    future = req.structured_output_request._grammar
    if hasattr(future, "exception"):
        assert future.exception() is None
    engine.requests[rid] = req
    return req


def run(engine: Engine, req: Any, rng: random.Random) -> list[int]:
    """Uniform sampling among the legal tokens of vLLM's rows until a stop token or ``max_tokens``."""
    stops = set(req.sampling_params.all_stop_token_ids)
    taken: list[int] = []
    for _ in range(req.sampling_params.max_tokens):
        legal = legal_ids(engine.bitmask([req.request_id])[0].view(np.uint32))
        t = rng.choice(legal)
        assert engine.manager.accept_tokens(req, [t])
        taken.append(t)
        if t in stops:
            break
    return taken


def check_valid(kind: str, text: str) -> None:
    if kind == "json":
        jsonschema.validate(json.loads(text), PERSON)
    elif kind == "json_object":
        assert isinstance(json.loads(text), dict)
    elif kind == "lark":
        lark.Lark(LARK).parse(text)
    elif kind == "gbnf":
        assert re.fullmatch(r"yes|no|maybe [0-9]+", text), text
    elif kind == "regex":
        assert re.fullmatch(REGEX, text), text
    else:
        assert text in CHOICES


@pytest.mark.parametrize("kind", list(KINDS))
def test_backend_small_budgets_end_in_valid_documents(engine: Engine, kind: str) -> None:
    """Budgets from one more than PERSON's shortest document (19 bytes) up to 48 tokens, 8 samples
    each: every output ends with a stop token within ``max_tokens`` and is a valid document."""
    rng = random.Random(kind)
    ended = narrowed = 0
    for max_tokens in BUDGETS:
        for _ in range(8):
            req = submit(engine, params(engine, max_tokens, **KINDS[kind]))
            g = req.structured_output_request.grammar
            assert isinstance(g, gv.GrammarmaskGrammar) and g.budget is not None
            assert g.budget.max_tokens == max_tokens
            taken = run(engine, req, rng)
            vocab = engine.manager.backend.vocab
            assert taken and taken[-1] in req.sampling_params.all_stop_token_ids, \
                f"{kind} max_tokens={max_tokens}: no stop token in {vocab.decode(taken)!r}"
            assert len(taken) <= max_tokens
            check_valid(kind, vocab.decode(taken[:-1]).decode())
            ended += 1
            narrowed += g.budget.steps
    assert ended == 32 and narrowed > 0
    if kind == "json":  # without the option, uniform sampling rarely closes the object in 20 tokens
        off = [run(engine, submit(engine, params(engine, 20, {gv.BUDGET_ARG: False}, **KINDS[kind])), rng)
               for _ in range(8)]
        stops = set(params(engine, 20, **KINDS[kind]).all_stop_token_ids)
        assert sum(t[-1] in stops for t in off) <= 2


def test_backend_budget_off_per_request_and_for_the_server(engine: Engine,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Off per request (extra_args, as a bool or as vllm_xargs text) or for the server (environment):
    the rows are grammarmask's exact masks at every step, up to the last token of the budget."""
    for extra in ({gv.BUDGET_ARG: False}, {gv.BUDGET_ARG: "false"}, None):
        if extra is None:
            monkeypatch.setenv(gv.BUDGET_ENV, "0")
        req = submit(engine, params(engine, 6, extra, **KINDS["json"]))
        assert req.structured_output_request.grammar.budget is None
        own = own_matcher(engine, req)
        stops = set(req.sampling_params.all_stop_token_ids)
        rng = random.Random(0)
        for step in range(6):
            row = engine.bitmask([req.request_id])[0].view(np.uint32)
            np.testing.assert_array_equal(row, expected_row(own, stops), err_msg=f"step {step}")
            t = rng.choice([t for t in legal_ids(row) if t not in stops])
            assert engine.manager.accept_tokens(req, [t])
            own.advance(t)


def test_backend_far_from_the_budget_masks_are_exact(engine: Engine) -> None:
    """Budget-aware, with room to spare: the rows equal grammarmask's own masks (nothing narrowed)."""
    req = submit(engine, params(engine, 500, **KINDS["lark"]))
    g = req.structured_output_request.grammar
    own = own_matcher(engine, req)
    stops = set(req.sampling_params.all_stop_token_ids)
    rng = random.Random(1)
    for step in range(30):
        row = engine.bitmask([req.request_id])[0].view(np.uint32)
        np.testing.assert_array_equal(row, expected_row(own, stops), err_msg=f"step {step}")
        t = rng.choice([t for t in legal_ids(row) if t not in stops])
        assert engine.manager.accept_tokens(req, [t])
        own.advance(t)
    assert g.budget.steps == 0


def test_bad_options_are_refused_when_validated(engine: Engine) -> None:
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="grammarmask_heal"):
        params(engine, 8, {gv.HEAL_ARG: "not hex"}, regex="a+")
    with pytest.raises(VLLMValidationError, match="grammarmask_budget_aware"):
        params(engine, 8, {gv.BUDGET_ARG: "maybe"}, regex="a+")
    with pytest.raises(ValueError, match="grammarmask_heal"):
        gl.GrammarmaskLogitsProcessor.validate_params(params(engine, 8, {"grammarmask": {"regex": "a+"},
                                                                         gv.HEAL_ARG: 12}))


def test_the_create_grammar_hook_point_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    monkeypatch.setattr(StructuredOutputManager, "_create_grammar", None)
    monkeypatch.setattr(gv, "installed", lambda: False)
    with pytest.raises(RuntimeError, match=r"StructuredOutputManager\._create_grammar"):
        gv.install()


# --- token healing -------------------------------------------------------------------------------------

CUT = '{"name": "Ada Lovel'  # the tiny tokenizer was trained on "Ada Lovelace": the cut is inside a token


def test_heal_request_backs_off_and_marks_the_request(engine: Engine) -> None:
    sp = params(engine, 32, regex=r'ace", "age": [0-9]{1,2}\}')
    healed = gv.heal_request(engine.tokenizer, CUT, sp)
    ids = engine.tokenizer.encode(CUT)
    assert healed.removed and CUT.encode().endswith(healed.removed)
    assert healed.prompt["prompt_token_ids"] == ids[: len(healed.prompt["prompt_token_ids"])]
    assert healed.params.extra_args[gv.HEAL_ARG] == healed.removed.hex()
    assert sp.extra_args is None or gv.HEAL_ARG not in sp.extra_args  # a copy was marked
    assert healed.strip(healed.removed.decode() + 'ace", "age": 36}') == 'ace", "age": 36}'
    with pytest.raises(gm.GrammarError, match="no constraint"):
        gv.heal_request(engine.tokenizer, CUT, params(engine, 32))


@pytest.mark.parametrize("seed", range(6))
def test_backend_healed_output_writes_the_removed_bytes_back(engine: Engine, seed: int) -> None:
    pattern = r'ace", "age": [0-9]{1,2}\}'
    healed = gv.heal_request(engine.tokenizer, CUT, params(engine, 24, regex=pattern))
    req = submit(engine, healed.params, healed.prompt["prompt_token_ids"])
    taken = run(engine, req, random.Random(seed))
    assert taken[-1] in req.sampling_params.all_stop_token_ids
    text = engine.manager.backend.vocab.decode(taken[:-1])
    assert text.startswith(healed.removed), text
    assert re.fullmatch(pattern, healed.strip(text.decode())), text
    assert (engine.tokenizer.decode(healed.prompt["prompt_token_ids"]) + text.decode()).startswith(CUT)


# --- the logits-processor path --------------------------------------------------------------------------


def processor(engine: Engine) -> Any:
    from vllm.v1.sample.logits_processor import _load_custom_logitsprocs

    (cls,) = _load_custom_logitsprocs(["grammarmask.integrations.vllm_logits:GrammarmaskLogitsProcessor"])
    return cls(engine.config, torch.device("cpu"), False)


def lp_params(engine: Engine, max_tokens: int, **extra: Any) -> Any:
    from vllm.sampling_params import SamplingParams

    sp = SamplingParams(extra_args=extra, max_tokens=max_tokens)
    gl.GrammarmaskLogitsProcessor.validate_params(sp)
    sp.update_from_generation_config({}, engine.tokenizer.eos_token_id)
    return sp


def lp_run(engine: Engine, sps: list[Any], seed: int) -> list[list[int]]:
    """A batch through vLLM's BatchUpdate protocol; each row takes the argmax of random logits under
    the mask, until a stop token or its ``max_tokens``; finished rows are removed as vLLM does."""
    from vllm.v1.sample.logits_processor import BatchUpdate

    proc = processor(engine)
    outs: list[list[int]] = [[] for _ in sps]
    proc.update_state(BatchUpdate(batch_size=len(sps), removed=[], moved=[],
                                  added=[(i, sp, [1], outs[i]) for i, sp in enumerate(sps)]))
    live = set(range(len(sps)))
    gen = torch.Generator().manual_seed(seed)
    while live:
        logits = torch.randn(len(sps), proc.vocab.size, generator=gen) * 3
        proc.apply(logits)
        done = []
        for i in sorted(live):
            t = int(torch.argmax(logits[i]))
            assert torch.isfinite(logits[i, t])
            outs[i].append(t)
            if t in sps[i].all_stop_token_ids or len(outs[i]) >= sps[i].max_tokens:
                done.append(i)
        proc.update_state(None)
        if done:
            proc.update_state(BatchUpdate(batch_size=len(sps), removed=done, added=[], moved=[]))
            live -= set(done)
    return outs


@pytest.mark.parametrize("kind", ["json", "lark", "regex", "choice"])
def test_logits_path_small_budgets_end_in_valid_documents(engine: Engine, kind: str) -> None:
    (key, value), = KINDS[kind].items()
    sps = [lp_params(engine, n, grammarmask={key: value}) for n in BUDGETS]
    vocab = gv.vocabulary_for(engine.tokenizer, engine.model_config.get_vocab_size())
    for seed in range(2):
        for sp, out in zip(sps, lp_run(engine, sps, seed)):
            assert out[-1] in sp.all_stop_token_ids, f"max_tokens={sp.max_tokens}: {vocab.decode(out)!r}"
            check_valid(kind, vocab.decode(out[:-1]).decode())


def test_logits_path_budget_off_and_healing(engine: Engine) -> None:
    """Budget off: the row runs to max_tokens unfinished (random logits rarely close an object);
    healing: the output writes the removed bytes back."""
    vocab = gv.vocabulary_for(engine.tokenizer, engine.model_config.get_vocab_size())
    off = lp_params(engine, 10, grammarmask={"json": PERSON}, **{gv.BUDGET_ARG: False})
    (out,) = lp_run(engine, [off], 0)
    assert len(out) == 10 and out[-1] not in off.all_stop_token_ids
    pattern = r'ace", "age": [0-9]{1,2}\}'
    healed = gv.heal_request(engine.tokenizer, CUT, lp_params(engine, 24, grammarmask={"regex": pattern}))
    for seed in range(3):
        (out,) = lp_run(engine, [healed.params], seed)
        assert out[-1] in healed.params.all_stop_token_ids
        text = vocab.decode(out[:-1])
        assert text.startswith(healed.removed) and re.fullmatch(pattern, healed.strip(text.decode())), text
