"""The logits-processor path (grammarmask.integrations.vllm_logits), loaded by vLLM's own builder by
name, driven through vLLM's BatchUpdate protocol on the CPU: constrained and free rows side by side,
rows added, swapped and removed, stop tokens, masks equal grammarmask's own at every step."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch  # vLLM requires it: these tests run only where vLLM is installed

from grammarmask.integrations import vllm_logits as gl

from .conftest import Engine  # noqa: E402
from .test_vllm_backend import CHOICES, REGEX, expected_row, legal_ids  # noqa: E402

FQCN = "grammarmask.integrations.vllm_logits:GrammarmaskLogitsProcessor"


def processor(engine: Engine) -> Any:
    """Loaded by name with vLLM's own loader and built as vLLM builds it (``build_logitsprocs`` itself
    also builds vLLM's built-in processors, which need a CUDA device)."""
    from vllm.v1.sample.logits_processor import _load_custom_logitsprocs

    (cls,) = _load_custom_logitsprocs([FQCN])
    assert cls is gl.GrammarmaskLogitsProcessor
    return cls(engine.config, torch.device("cpu"), False)


def params(engine: Engine, **extra: Any) -> Any:
    from vllm.sampling_params import SamplingParams

    sp = SamplingParams(extra_args={"grammarmask": extra} if extra else None, max_tokens=64)
    gl.GrammarmaskLogitsProcessor.validate_params(sp)
    sp.update_from_generation_config({}, engine.tokenizer.eos_token_id)
    return sp


def own(proc: Any, sp: Any) -> Any:
    from grammarmask.integrations.vllm import grammar_for

    return grammar_for(*gl.request_grammar(sp)).compile(proc.vocab, engine="python").matcher()


def check_rows(proc: Any, logits: Any, rows: dict[int, tuple[Any, Any]], free: list[int],
               before: Any) -> None:
    for index, (sp, m) in rows.items():
        allowed = torch.isfinite(logits[index]).numpy()
        expected = np.zeros(logits.shape[1], bool)
        expected[legal_ids(expected_row(m, set(sp.all_stop_token_ids)))] = True
        np.testing.assert_array_equal(allowed, expected, err_msg=f"row {index}")
    for index in free:
        assert torch.equal(logits[index], before[index])


def test_rows_added_swapped_removed(engine: Engine) -> None:
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    proc = processor(engine)
    assert not proc.is_argmax_invariant()
    sp_regex, sp_free, sp_choice = params(engine, regex=REGEX), params(engine), params(engine, choice=CHOICES)
    outs: list[list[int]] = [[], [], []]
    proc.update_state(BatchUpdate(batch_size=3, removed=[], moved=[], added=[
        (0, sp_regex, [1], outs[0]), (1, sp_free, [1], outs[1]), (2, sp_choice, [1], outs[2])]))
    mats = {0: (sp_regex, own(proc, sp_regex)), 2: (sp_choice, own(proc, sp_choice))}
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    for step in range(40):
        logits = torch.randn(3, proc.vocab.size, generator=gen)
        before = logits.clone()
        out = proc.apply(logits)
        assert out is logits
        check_rows(proc, logits, mats, [1], before)
        if step == 3:  # vLLM swaps rows 0 and 2 of its persistent batch: the grammars follow
            outs[0], outs[2] = outs[2], outs[0]
            mats = {0: mats[2], 2: mats[0]}
            proc.update_state(BatchUpdate(batch_size=3, removed=[], added=[],
                                          moved=[(0, 2, MoveDirectionality.SWAP)]))
            continue
        finished = []
        for index, (sp, m) in mats.items():
            legal = legal_ids(expected_row(m, set(sp.all_stop_token_ids)))
            stops = [t for t in legal if t in sp.all_stop_token_ids]
            t = rng.choice(stops) if stops and step > 8 else rng.choice([t for t in legal if t not in stops])
            outs[index].append(t)
            m.advance(m.vocab.eos_token_id if t in sp.all_stop_token_ids else t)
            if m.is_finished():
                finished.append(index)
        outs[1].append(int(torch.argmax(before[1])))
        proc.update_state(None)
        for index in finished:  # vLLM stops the request and removes it from the batch
            proc.update_state(BatchUpdate(batch_size=3, removed=[index], added=[], moved=[]))
            del mats[index]
        if not mats:
            break
    assert not mats, "both constrained rows end with a stop token"
    text = [proc.vocab.decode(o[:-1]).decode() for o in outs if o and o[-1] in sp_regex.all_stop_token_ids]
    assert any(t in CHOICES for t in text) and any(t.endswith((".com",)) for t in text)
    logits = torch.zeros(3, proc.vocab.size)
    assert torch.equal(proc.apply(logits), torch.zeros(3, proc.vocab.size))  # no grammar left


def test_a_malformed_spec_is_refused_when_validated() -> None:
    from vllm.sampling_params import SamplingParams

    validate = gl.GrammarmaskLogitsProcessor.validate_params
    with pytest.raises(ValueError, match="grammarmask"):
        validate(SamplingParams(extra_args={"grammarmask": {"regex": "a("}}))
    with pytest.raises(ValueError, match="one of the keys"):
        validate(SamplingParams(extra_args={"grammarmask": {"lark": "x"}}))
    with pytest.raises(ValueError, match="not JSON"):
        validate(SamplingParams(extra_args={"grammarmask": "regex: a+"}))
    # a server's vllm_xargs carry strings: the same dict as JSON text
    as_text = SamplingParams(extra_args={"grammarmask": '{"choice": ["yes", "no"]}'})
    assert gl.request_grammar(as_text) == gl.request_grammar(
        SamplingParams(extra_args={"grammarmask": {"choice": ["yes", "no"]}}))


def test_vllm_refuses_it_with_speculative_decoding(make_engine: Any) -> None:
    from vllm.v1.sample.logits_processor import build_logitsprocs

    engine: Engine = make_engine(spec_tokens=2)
    with pytest.raises(ValueError, match="speculative decoding"):
        build_logitsprocs(engine.config, torch.device("cpu"), False, False, custom_logitsprocs=[FQCN])
