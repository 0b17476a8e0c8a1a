"""The Hugging Face LogitsProcessor, with a tiny randomly initialised Llama over the real 32k
sentencepiece vocabulary (no download). Needs the extras ``torch`` and ``transformers``."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (pip install 'grammarmask[torch]')")
transformers = pytest.importorskip(
    "transformers", reason="needs transformers (pip install 'grammarmask[transformers]')"
)

from grammarmask.errors import GrammarError, TokenRejected  # noqa: E402
from grammarmask.frontends.choice import Choice  # noqa: E402
from grammarmask.integrations.transformers import GrammarLogitsProcessor  # noqa: E402
from grammarmask.testing import reference_mask  # noqa: E402
from grammarmask.vocab import Vocabulary  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.transformers]

LABELS = ["Technology > AI > NLP", "Technology > AI > Vision", "Science > Physics", "yes", "no"]


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.from_mistral("sentencepiece")


@pytest.fixture(scope="module")
def model(vocab: Vocabulary) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=vocab.size + 64,  # a model vocabulary wider than the tokenizer's: padding ids
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=vocab.eos_token_id, pad_token_id=0,
    )
    m = transformers.LlamaForCausalLM(config)
    m.eval()
    return m


def _generated(out: Any, prompt_len: int, eos: int) -> list[list[int]]:
    rows = []
    for row in out[:, prompt_len:].tolist():
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows


def _run(model: Any, proc: GrammarLogitsProcessor, prompt: Any, **kw: Any) -> Any:
    with torch.no_grad():
        return model.generate(
            prompt, logits_processor=transformers.LogitsProcessorList([proc]), max_new_tokens=48,
            pad_token_id=0, eos_token_id=model.config.eos_token_id, **kw,
        )


@pytest.mark.parametrize("mode", ["sample", "greedy", "beams"])
def test_generate_output_is_accepted_by_the_grammar(vocab: Vocabulary, model: Any, mode: str) -> None:
    compiled = Choice(LABELS, leading_space="optional").compile(vocab)
    prompt = torch.tensor([[1, 415, 4372, 349]])
    kw: dict[str, Any] = {
        "sample": {"do_sample": True, "num_return_sequences": 4, "top_k": 0},
        "greedy": {"do_sample": False},
        "beams": {"do_sample": False, "num_beams": 3, "num_return_sequences": 2},
    }[mode]
    torch.manual_seed(1)
    proc = GrammarLogitsProcessor(compiled)
    out = _run(model, proc, prompt, **kw)
    rows = _generated(out, prompt.shape[1], vocab.eos_token_id)
    assert len(rows) == kw.get("num_return_sequences", 1)
    for row in rows:
        assert row[-1] == vocab.eos_token_id, row
        assert vocab.decode(row).decode().lstrip(" ") in LABELS


def test_regex_grammar_batched_prompts_of_different_lengths(vocab: Vocabulary, model: Any) -> None:
    regex = pytest.importorskip("grammarmask.frontends.regex")
    pattern = r'\{"n": (0|[1-9][0-9]{0,2}), "ok": (true|false)\}'
    compiled = regex.Regex(pattern).compile(vocab)
    # left-padded batch of two prompts (pad id 0), as a tokenizer would give it
    prompt = torch.tensor([[0, 0, 1, 415], [1, 415, 4372, 349]])
    attention = (prompt != 0).long()
    for seed in range(2):
        torch.manual_seed(seed)
        proc = GrammarLogitsProcessor(compiled)
        out = _run(model, proc, prompt, attention_mask=attention, do_sample=True, top_k=0)
        for row in _generated(out, prompt.shape[1], vocab.eos_token_id):
            text = vocab.decode(row).decode()
            assert row[-1] == vocab.eos_token_id and re.fullmatch(pattern, text), text


def test_masked_scores_equal_the_reference_mask(vocab: Vocabulary) -> None:
    labels = [b"yes", b"no", b"maybe", b" yes"]
    compiled = Choice([s.decode() for s in labels]).compile(vocab)
    proc = GrammarLogitsProcessor(compiled, prompt_length=2)
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    width = vocab.size + 7
    rows = [[1, 5], [1, 5, ids[b"m"]], [1, 5, ids[b" yes"]]]
    prefixes = [b"", b"m", b" yes"]

    def viable(w: bytes) -> bool:
        return any(s.startswith(w) for s in labels)

    def complete(w: bytes) -> bool:
        return w in labels

    # feed rows step by step the way generate() would: same batch, one token longer each call
    for step, row in enumerate(rows):
        ids_t = torch.tensor([row, row])
        scores = torch.randn(2, width)
        out = proc(ids_t, scores.clone())
        ref = reference_mask(viable, vocab, prefixes[step], is_complete=complete).to_bool()
        legal = torch.isfinite(out).numpy()
        assert not legal[:, vocab.size:].any()  # padding columns
        for r in range(2):
            assert np.array_equal(legal[r, : vocab.size], ref)
            assert torch.equal(out[r][legal[r]], scores[r][legal[r]])  # legal scores untouched


def test_rows_that_finished_keep_only_eos(vocab: Vocabulary) -> None:
    compiled = Choice(["yes", "no"]).compile(vocab)
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    eos = vocab.eos_token_id
    proc = GrammarLogitsProcessor(compiled, prompt_length=1)
    yes = ids[b"yes"]
    proc(torch.tensor([[1], [1]]), torch.zeros(2, vocab.size))
    proc(torch.tensor([[1, yes], [1, ids[b"no"]]]), torch.zeros(2, vocab.size))
    proc(torch.tensor([[1, yes, eos], [1, ids[b"no"], eos]]), torch.zeros(2, vocab.size))
    # row 0 is padded after EOS; the matcher ignores padding and only EOS stays legal
    out = proc(torch.tensor([[1, yes, eos, 0], [1, ids[b"no"], eos, 0]]), torch.zeros(2, vocab.size))
    assert torch.isfinite(out).sum(dim=1).tolist() == [1, 1]
    assert torch.isfinite(out[:, eos]).all()


def test_rejected_token_and_bad_shapes(vocab: Vocabulary) -> None:
    compiled = Choice(["yes", "no"]).compile(vocab)
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    proc = GrammarLogitsProcessor(compiled, prompt_length=1)
    with pytest.raises(TokenRejected, match="not allowed"):
        proc(torch.tensor([[1, ids[b"x"]]]), torch.zeros(1, vocab.size))
    with pytest.raises(GrammarError, match=r"10 columns.*32000 tokens"):
        proc(torch.tensor([[1]]), torch.zeros(1, 10))
    with pytest.raises(GrammarError, match="prompt length"):
        GrammarLogitsProcessor(compiled, prompt_length=5)(torch.tensor([[1, 2]]), torch.zeros(1, vocab.size))
    with pytest.raises(GrammarError, match="CompiledGrammar"):
        GrammarLogitsProcessor(Choice(["a"]))  # type: ignore[arg-type]
    # reset() forgets the prompt length taken from the first call
    p = GrammarLogitsProcessor(compiled)
    p(torch.tensor([[1, 2, 3]]), torch.zeros(1, vocab.size))
    p.reset()
    p(torch.tensor([[1]]), torch.zeros(1, vocab.size))
    assert p.prompt_length == 1


def test_importing_grammarmask_does_not_import_torch() -> None:
    code = (
        "import sys, grammarmask, grammarmask.sampling, grammarmask.decoding, grammarmask.models, "
        "grammarmask.loaders, grammarmask.integrations.transformers\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_every_score_dtype_is_masked_alike(vocab: Vocabulary, dtype: str) -> None:
    compiled = Choice(["yes", "no", "maybe"]).compile(vocab)
    ref = compiled.matcher().mask().to_bool()
    scores = torch.randn(3, vocab.size + 5).to(getattr(torch, dtype))
    out = GrammarLogitsProcessor(compiled)(torch.ones(3, 2, dtype=torch.long), scores)
    assert out.dtype == scores.dtype and out.shape == scores.shape
    legal = torch.isfinite(out).numpy()
    assert (legal[:, : vocab.size] == ref).all() and not legal[:, vocab.size:].any()
    assert torch.equal(out[torch.from_numpy(legal)], scores[torch.from_numpy(legal)])
