"""BatchedHF (grammarmask.integrations.transformers): a Hugging Face causal LM scoring batches of
equal-length sequences on a shared prompt cache, checked against plain full forward passes with a tiny
randomly initialised Llama (no download). Needs the extras ``torch`` and ``transformers``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install 'grammarmask[torch]')")
transformers = pytest.importorskip(
    "transformers", reason="needs transformers (pip install 'grammarmask[transformers]')"
)

import grammarmask as gm  # noqa: E402
from grammarmask.errors import GrammarError  # noqa: E402
from grammarmask.integrations.transformers import BatchedHF, HFModel  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.transformers]

TOKENS = [bytes([b]) for b in range(256)] + [b"ab", b"ba", b"abc", b""]  # id 259 is EOS
EOS = 259
PROMPT = [10, 20, 30, 40, 50]


@pytest.fixture(scope="module")
def model() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(TOKENS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128, eos_token_id=EOS,
    )
    m = transformers.LlamaForCausalLM(config)
    m.eval()
    return m


def _full(model: Any, seq: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.tensor([seq])).logits[0, -1].float().numpy()  # type: ignore[no-any-return]


def test_batches_equal_full_forward_passes(model: Any) -> None:
    hf = BatchedHF(model)
    levels = [[PROMPT], [PROMPT + [97], PROMPT + [98], PROMPT + [256]],
              [PROMPT + [97, 98], PROMPT + [97, 99], PROMPT + [256, 97]],
              [PROMPT + [97, 98, 259 - 1], PROMPT + [256, 97, 97]]]
    for level in levels:  # each level extends the previous: one token fed per row
        out = hf.batch_logits(level)
        assert out.shape == (len(level), len(TOKENS)) and out.dtype == np.float32
        for seq, row in zip(level, out):
            np.testing.assert_allclose(row, _full(model, seq), atol=1e-4)
    assert hf.rows == 1 + 3 + 3 + 2 and hf.fed == 3 + 3 + 2  # the prompt level costs no row fed
    # a level whose parents were never scored: its tokens past the prompt are fed whole
    fresh = [PROMPT + [1, 2, 3, 4], PROMPT + [5, 6, 7, 8]]
    for seq, row in zip(fresh, hf.batch_logits(fresh)):
        np.testing.assert_allclose(row, _full(model, seq), atol=1e-4)
    assert hf.fed == 8 + 2 * 4
    np.testing.assert_allclose(hf(PROMPT + [97]), _full(model, PROMPT + [97]), atol=1e-4)


def test_a_new_prompt_is_taken_from_the_batch(model: Any) -> None:
    hf = BatchedHF(model, prompt_ids=PROMPT)
    other = [7, 8, 9]
    rows = hf.batch_logits([other + [1], other + [2]])  # common prefix [7, 8, 9, ...] becomes the prompt
    assert hf.prompt == tuple(other)
    for seq, row in zip([other + [1], other + [2]], rows):
        np.testing.assert_allclose(row, _full(model, seq), atol=1e-4)


def test_bad_batches(model: Any) -> None:
    hf = BatchedHF(model)
    with pytest.raises(GrammarError, match="one length"):
        hf.batch_logits([PROMPT, PROMPT + [1]])
    with pytest.raises(GrammarError, match="one length"):
        hf.batch_logits([])
    with pytest.raises(GrammarError, match="no first token"):
        hf.batch_logits([[1, 2], [3, 4]])
    with pytest.raises(GrammarError, match="at least one token"):
        hf.set_prompt([])


def test_aligned_sample_batched_equals_unbatched(model: Any) -> None:
    vocab = gm.Vocabulary.from_tokens(TOKENS, eos_token_id=EOS)
    grammar = gm.Regex("(ab|ba)+c?")
    for seed in range(3):
        fast = gm.aligned_sample(BatchedHF(model), vocab, grammar, PROMPT, n_particles=16, max_tokens=12,
                                 seed=seed, temperature=0.5)
        slow = gm.aligned_sample(HFModel(model), vocab, grammar, PROMPT, n_particles=16, max_tokens=12,
                                 seed=seed, temperature=0.5)
        assert fast.token_ids == slow.token_ids
        assert [p.token_ids for p in fast.particles] == [p.token_ids for p in slow.particles]
        assert abs(fast.log_z - slow.log_z) < 1e-3
