"""The HF LogitsProcessor's budget-aware mode (``max_tokens=``): a tiny random Llama over the real 32k
sentencepiece vocabulary ends every sampled row in a valid document within ``max_new_tokens``.
Needs the extras ``torch`` and ``transformers``."""

from __future__ import annotations

from pathlib import Path

import lark
import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install 'grammarmask[torch]')")
transformers = pytest.importorskip(
    "transformers", reason="needs transformers (pip install 'grammarmask[transformers]')"
)

import grammarmask as gm  # noqa: E402
import grammarmask.testing  # noqa: E402
from grammarmask.integrations.transformers import GrammarLogitsProcessor  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.transformers]
JSON_LARK = Path(gm.__file__).parent / "grammars" / "json.lark"


def test_rows_end_in_valid_json_within_max_new_tokens() -> None:
    vocab = gm.Vocabulary.from_mistral("sentencepiece")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab.size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=vocab.eos_token_id, pad_token_id=0,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    compiled = gm.Lark.from_file(str(JSON_LARK)).compile(vocab)
    ref = lark.Lark(JSON_LARK.read_text())
    budget, eos = 20, vocab.eos_token_id
    proc = GrammarLogitsProcessor(compiled, max_tokens=budget)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([[1, 415]]), logits_processor=transformers.LogitsProcessorList([proc]),
            max_new_tokens=budget, do_sample=True, top_k=0, num_return_sequences=8,
            pad_token_id=0, eos_token_id=eos,
        )  # fmt: skip
    for row in out[:, 2:].tolist():
        assert eos in row, vocab.decode(row)
        ref.parse(vocab.decode(row[: row.index(eos)]).decode())


def test_max_tokens_is_checked() -> None:
    vocab = gm.testing.byte_vocabulary()
    with pytest.raises(gm.GrammarError):
        GrammarLogitsProcessor(gm.Regex("a").compile(vocab), max_tokens=-1)
