"""Budget-aware generation in SGLang: grammarmask's BudgetLogitProcessor, serialized and loaded the
way SGLang does (``to_str`` / ``from_str``), given SGLang's own ``Req`` (whose ``custom_params`` carry
the ``__req__`` proxy), on logits already masked by SGLang's GrammarMask from our backend."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from grammarmask.integrations import sglang as gs

from .conftest import MODEL_VOCAB, Server

OBJ = {"type": "object",
       "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}},
       "required": ["name", "tags"], "additionalProperties": False}
REGEX = r"[a-z]{1,30}@[a-z]{1,30}\.(com|org)"
LARK = 'start: expr\nexpr: term (("+" | "-") term)*\nterm: NUMBER | "(" expr ")"\n%import common.NUMBER\n'


def make_req(grammar: Any, max_new_tokens: int) -> Any:
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens, custom_params={})
    req = Req("r", "", [1, 2, 3], params, custom_logit_processor=gs.BudgetLogitProcessor.to_str())
    req.grammar = grammar
    return req


def step(req: Any, logits: Any) -> Any:
    """SGLang's order: our grammar's mask applied through GrammarMask, then the custom processor."""
    import torch
    from sglang.srt.constrained.base_grammar_backend import GrammarMask, GrammarRow
    from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor

    g = req.grammar
    mask = g.allocate_vocab_mask(vocab_size=MODEL_VOCAB, batch_size=1, device="cpu")
    type(g).fill_vocab_mask_batched([GrammarRow(row=0, grammar=g)], mask)
    GrammarMask(g, g.move_vocab_mask(mask, "cpu")).apply(logits)
    processor = CustomLogitProcessor.from_str(req.custom_logit_processor)
    assert isinstance(processor, gs.BudgetLogitProcessor)
    params = req.sampling_params.custom_params
    assert "__req__" in params  # SGLang hands the processor the request
    out = processor(logits, [params])
    assert isinstance(out, torch.Tensor) and out.shape == logits.shape
    return out


def generate(server: Server, key: tuple[str, str], max_new_tokens: int, seed: int) -> tuple[Any, bytes]:
    import torch

    g = server.grammar(*key)
    req = make_req(g, max_new_tokens)
    gen = torch.Generator().manual_seed(seed)
    while len(req.output_ids) < max_new_tokens and not g.is_terminated():
        logits = step(req, torch.randn(1, MODEL_VOCAB, generator=gen))
        token = int(torch.argmax(logits[0]))
        assert logits[0, token] > float("-inf")
        g.accept_token(token)
        req.output_ids.append(token)
    tb = server.backend.vocab.token_bytes
    text = b"".join(tb[t] for t in req.output_ids if t not in g.stop_token_ids)
    return g, text


@pytest.mark.parametrize("kind", ["json", "regex", "lark"])
def test_a_small_budget_ends_in_a_valid_document(server: Server, kind: str) -> None:
    import re

    import lark

    key = {"json": ("json", json.dumps(OBJ)), "regex": ("regex", REGEX), "lark": ("ebnf", LARK)}[kind]
    for seed in range(4):
        for budget in (16, 24, 40):
            g, text = generate(server, key, budget, seed)
            assert g.is_terminated(), (kind, budget, seed, text)
            assert g.budget is not None and (g.budget.steps > 0 or kind != "json")
            if kind == "json":
                doc = json.loads(text)
                assert set(doc) == {"name", "tags"} and isinstance(doc["tags"], list)
            elif kind == "regex":
                assert re.fullmatch(REGEX, text.decode())
            else:
                lark.Lark(LARK).parse(text.decode())


def test_without_the_processor_the_same_budget_truncates(server: Server) -> None:
    """The control: argmax of random logits under the grammar alone rarely ends within 16 tokens."""
    import torch
    from sglang.srt.constrained.base_grammar_backend import GrammarMask, GrammarRow

    ended = 0
    for seed in range(4):
        g = server.grammar("json", json.dumps(OBJ))
        gen = torch.Generator().manual_seed(seed)
        for _ in range(16):
            if g.is_terminated():
                break
            logits = torch.randn(1, MODEL_VOCAB, generator=gen)
            mask = g.allocate_vocab_mask(vocab_size=MODEL_VOCAB, batch_size=1, device="cpu")
            type(g).fill_vocab_mask_batched([GrammarRow(row=0, grammar=g)], mask)
            GrammarMask(g, mask).apply(logits)
            g.accept_token(int(torch.argmax(logits[0])))
        ended += g.is_terminated()
    assert ended < 4


def test_far_from_the_budget_the_row_is_unchanged(server: Server) -> None:
    import torch

    for key in (("json", json.dumps(OBJ)), ("regex", REGEX)):
        g = server.grammar(*key)
        req = make_req(g, 4096)
        gen = torch.Generator().manual_seed(7)
        for _ in range(6):
            logits = torch.randn(1, MODEL_VOCAB, generator=gen)
            masked = logits.clone()
            out = step(req, masked)
            before = logits.clone()
            from sglang.srt.constrained.base_grammar_backend import GrammarMask, GrammarRow

            mask = g.allocate_vocab_mask(vocab_size=MODEL_VOCAB, batch_size=1, device="cpu")
            type(g).fill_vocab_mask_batched([GrammarRow(row=0, grammar=g)], mask)
            GrammarMask(g, mask).apply(before)
            assert torch.equal(out, before)
            token = int(torch.argmax(out[0]))
            g.accept_token(token)
            req.output_ids.append(token)
        assert g.budget is not None and g.budget.steps == 0


def test_rows_of_other_backends_and_bad_params_are_left_alone(server: Server) -> None:
    import torch

    req = make_req(None, 3)
    logits = torch.randn(2, MODEL_VOCAB)
    before = logits.clone()
    g = server.grammar("regex", REGEX)
    bad = make_req(g, 3)
    params = [req.sampling_params.custom_params,
              {**bad.sampling_params.custom_params, gs.BUDGET_WINDOW_PARAM: -1}]
    out = gs.BudgetLogitProcessor()(logits, params)
    assert torch.equal(out, before)
    assert np.isfinite(out.numpy()).all()


def test_speculative_rows_are_left_alone(server: Server) -> None:
    """SGLang repeats a request's parameters for each draft token: those rows are not narrowed."""
    import torch

    g = server.grammar("json", json.dumps(OBJ))
    req = make_req(g, 2)
    params = req.sampling_params.custom_params
    logits = torch.randn(3, MODEL_VOCAB)
    before = logits.clone()
    assert torch.equal(gs.BudgetLogitProcessor()(logits, [params] * 3), before)
    assert not torch.equal(gs.BudgetLogitProcessor()(logits[:1].clone(), [params]), before[:1])
