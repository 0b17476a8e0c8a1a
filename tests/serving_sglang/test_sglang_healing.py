"""Token healing for SGLang: heal_request backs the prompt off and marks the request's constraint;
the grammarmask backend (built by SGLang's create_grammar_backend, fetched through its cache as the
GrammarManager does) compiles gm.healed(grammar, removed): masks equal to that grammar's own at every
step, and outputs that start with the removed bytes."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.integrations import sglang as gs

from .conftest import MODEL_VOCAB, Server

CUT = '{"name": "Ada Lovel'  # the tiny tokenizer was trained on "Ada Lovelace": the cut is inside a token
PATTERN = r'ace", "age": [0-9]{1,2}\}'
TAIL = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"],
        "additionalProperties": False}


def test_heal_request_backs_off_and_marks_the_constraint(server: Server) -> None:
    ids = server.tokenizer.encode(CUT)
    params = {"max_new_tokens": 24, "regex": PATTERN, "temperature": 0}
    healed = gs.heal_request(server.tokenizer, CUT, params)
    assert healed.removed and CUT.encode().endswith(healed.removed)
    assert healed.input_ids == ids[: len(healed.input_ids)] and len(healed.input_ids) < len(ids)
    assert healed.sampling_params["regex"] == gs.heal_spec(PATTERN, healed.removed)
    assert healed.sampling_params["regex"].startswith(gs.HEAL_PREFIX)
    assert params["regex"] == PATTERN and healed.sampling_params["max_new_tokens"] == 24  # a copy
    assert gs.split_heal(healed.sampling_params["regex"]) == (healed.removed, PATTERN)
    assert healed.strip(healed.removed.decode() + "ace") == "ace"
    with pytest.raises(gm.GrammarError, match="does not start with"):
        healed.strip(str(["nothing"][0]))  # B005 reads a literal as str.strip
    with pytest.raises(gm.GrammarError, match="exactly one constraint"):
        gs.heal_request(server.tokenizer, CUT, {"max_new_tokens": 4})
    with pytest.raises(gm.GrammarError, match="healing mark"):
        gs.split_heal(gs.HEAL_PREFIX + "zz)\n.*")
    # nothing to heal: the spec is left as it was
    whole = gs.heal_request(server.tokenizer, ids[:1], params, vocab=server.backend.vocab)
    assert whole.removed == b"" and whole.sampling_params["regex"] == PATTERN


@pytest.mark.parametrize("kind", ["regex", "json"])
def test_healed_masks_and_output(server: Server, kind: str) -> None:
    import torch

    params = {"max_new_tokens": 24, "regex": PATTERN} if kind == "regex" else {
        "max_new_tokens": 24, "json_schema": json.dumps(TAIL)}
    healed = gs.heal_request(server.tokenizer, CUT, params)
    key_type, field = ("regex", "regex") if kind == "regex" else ("json", "json_schema")
    spec = params[field]
    assert isinstance(spec, str)
    own = gm.healed(gs.grammar_for(key_type, spec), healed.removed).compile(server.backend.vocab).matcher()
    for seed in range(3):
        g = server.grammar(key_type, healed.sampling_params[field])
        probe = own.fork()
        gen = torch.Generator().manual_seed(seed)
        out: list[int] = []
        while not g.is_terminated() and len(out) < 64:
            mask = g.allocate_vocab_mask(vocab_size=MODEL_VOCAB, batch_size=1, device="cpu")
            g.fill_vocab_mask(mask, 0)
            row = mask[0].numpy().view(np.uint32).copy()
            expected = probe.mask().words.astype(np.uint32)
            stops = set(g.stop_token_ids) | {probe.vocab.eos_token_id}
            for t in g.stop_token_ids:  # legal exactly where the healed output is complete
                assert bool(row[t >> 5] >> np.uint32(t & 31) & np.uint32(1)) == probe.is_accepting()
            for t in stops:  # the backend's stop tokens stand for EOS
                for w in (row, expected):
                    w[t >> 5] &= ~np.uint32(1 << (t & 31))
            np.testing.assert_array_equal(row, expected)
            logits = torch.randn(1, MODEL_VOCAB, generator=gen)
            g.apply_vocab_mask(logits, mask)
            token = int(torch.argmax(logits[0]))
            g.accept_token(token)
            if token not in g.stop_token_ids:
                probe.advance(token)
                out.append(token)
        assert g.is_terminated()
        text = b"".join(server.backend.vocab.token_bytes[t] for t in out)
        assert text.startswith(healed.removed), text
        rest = healed.strip(text.decode())
        if kind == "regex":
            assert re.fullmatch(PATTERN, rest)
        else:
            assert set(json.loads(rest)) == {"age"}
