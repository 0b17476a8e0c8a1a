"""The llama.cpp adapter, driven the way llama-cpp-python drives a logits processor (numpy, one row)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.integrations.llama_cpp import GrammarLogitsProcessor
from grammarmask.testing import byte_vocabulary

PATTERN = r"(yes|no|maybe) \d{1,3}"


def test_greedy_loop_stays_in_the_language_and_rolls_back() -> None:
    vocab = byte_vocabulary([b"yes", b"no ", b" 12", b"may"])
    proc = GrammarLogitsProcessor(gm.Regex(PATTERN).compile(vocab))
    rng = np.random.default_rng(0)
    prompt = [5, 6, 7]
    ids = list(prompt)
    for _ in range(20):
        scores = rng.normal(size=vocab.size).astype(np.float32)
        masked = proc(np.array(ids, dtype=np.intc), scores)
        t = int(np.argmax(masked))
        if t == vocab.eos_token_id:
            break
        ids.append(t)
    text = vocab.decode(ids[len(prompt) :]).decode()
    assert re.fullmatch(PATTERN, text), text
    # llama.cpp may hand back a shorter history (speculative tokens rejected): the mask follows it.
    fresh = gm.Regex(PATTERN).compile(vocab).matcher()
    fresh.advance_many(ids[len(prompt) : len(prompt) + 1])
    masked = proc(np.array(ids[: len(prompt) + 1], dtype=np.intc), np.zeros(vocab.size, np.float32))
    assert np.array_equal(np.isfinite(masked), fresh.mask().to_bool())


def test_bad_inputs() -> None:
    vocab = byte_vocabulary()
    proc = GrammarLogitsProcessor(gm.Regex("ab").compile(vocab), prompt_length=2)
    with pytest.raises(gm.GrammarError, match="fewer than"):
        proc(np.array([1]), np.zeros(vocab.size, np.float32))
    with pytest.raises(gm.TokenRejected):
        proc(np.array([1, 2, ord("z") + 1]), np.zeros(vocab.size, np.float32))
    with pytest.raises(gm.GrammarError, match="CompiledGrammar"):
        GrammarLogitsProcessor(gm.Regex("ab"))  # type: ignore[arg-type]
