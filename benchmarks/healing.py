"""Token healing on a real model: prompts cut at random byte positions, greedy decoding.

    python benchmarks/healing.py [--prompts 50] [--tokens 12] [--seed 0] [--out benchmarks/results/healing.md]

For each text below (written for this benchmark), a cut point is drawn at a random byte position
inside its second half. The *reference* is the model's greedy continuation of the text up to the
last boundary of its own tokenization at or before the cut (the prompt as the tokenizer would have
written it), decoded from the cut on. The cut prompt (tokenized as given, so its last token is often
one the tokenizer would not have written there) is continued greedily twice, without and with
healing (``gm.generate(..., heal=True)``) under a grammar of any text, and each continuation is
compared with the reference over the bytes they share. The model is SmolLM2-135M-Instruct
(``grammarmask.models.smollm2``), on the CPU.

Reports the rate of continuations that agree with the reference, healed and not, and the cases
where they differ.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import grammarmask as gm  # noqa: E402
from grammarmask.integrations.transformers import HFModel  # noqa: E402
from grammarmask.models import smollm2  # noqa: E402

TEXTS = [
    "The capital of France is Paris, and the capital of Spain is Madrid.",
    'Send the report to https://example.com/reports/2024 before Friday.',
    "Photosynthesis converts sunlight, water and carbon dioxide into glucose.",
    '{"name": "Maria Lopez", "age": 34, "city": "Seville"}',
    "The quick brown fox jumps over the lazy dog near the riverbank.",
    "To install the package, run pip install numpy in your terminal.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "The meeting has been rescheduled to Thursday afternoon at three.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "Shakespeare wrote Hamlet, Macbeth, Othello and King Lear.",
    "The train to Edinburgh departs from platform nine at half past six.",
    "Mount Everest is the highest mountain above sea level on Earth.",
    "Please confirm your email address by clicking the link below.",
    "The mitochondria is often called the powerhouse of the cell.",
    "SELECT name, email FROM customers WHERE country = 'Germany';",
    "The Pacific Ocean is the largest and deepest of the world's oceans.",
    "Our quarterly revenue increased by twelve percent compared to last year.",
    "The library opens at nine in the morning and closes at eight.",
    "Alexander Fleming discovered penicillin in nineteen twenty-eight.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Jupiter is the largest planet in our solar system.",
    "Remember to back up your files before updating the operating system.",
    "The museum's new exhibition features paintings by Claude Monet.",
    "Honeybees communicate the location of flowers through a waggle dance.",
    "The invoice number is INV-2024-00831 and the total is 149.90 euros.",
]

ANY_TEXT = gm.Regex(r"(?s).*")


def greedy(model: HFModel, vocab: gm.Vocabulary, ids: list[int], tokens: int, heal: bool) -> bytes:
    out = gm.generate(model, vocab, ANY_TEXT, ids, max_tokens=tokens, temperature=0.0, heal=heal,
                      budget_aware=False, seed=0)
    return out.text_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prompts", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(1)  # one thread: on a busy 2-core machine several are 5-10x slower
    tok, hf = smollm2()
    vocab = gm.Vocabulary.from_hf(tok)
    model = HFModel(hf)
    rng = random.Random(args.seed)
    rows = []
    agree = {False: 0, True: 0}
    for i in range(args.prompts):
        text = TEXTS[i % len(TEXTS)].encode()
        cut = rng.randrange(len(text) // 2, len(text) - 1)
        whole = tok.encode(text.decode(), add_special_tokens=False)
        # the last boundary of the text's own tokenization at or before the cut
        ends, pos = [0], 0
        for t in whole:
            pos += len(vocab.token_bytes[t])
            ends.append(pos)
        k = max(j for j, e in enumerate(ends) if e <= cut)
        natural = greedy(model, vocab, list(whole[:k]), args.tokens + 4, heal=False)
        reference = natural[cut - ends[k]:]  # what the model writes after the cut, prompted naturally
        if not natural.startswith(text[ends[k]:cut]):
            rows.append((text[:cut], "-", "-", "(its own continuation leaves the text before the cut)"))
            continue
        cut_ids = tok.encode(text[:cut].decode("utf-8", "ignore"), add_special_tokens=False)
        got = {h: greedy(model, vocab, cut_ids, args.tokens, heal=h) for h in (False, True)}
        same = {}
        for h, g in got.items():
            n = min(len(g), len(reference))
            same[h] = n > 0 and g[:n] == reference[:n]
            agree[h] += same[h]
        rows.append((text[:cut], got[False], got[True], reference))
    counted = sum(1 for r in rows if r[1] != "-")
    lines = [
        f"Token healing, SmolLM2-135M-Instruct, greedy, {args.tokens} tokens, seed {args.seed}: "
        f"{counted} of {len(rows)} cut prompts counted (the rest: the model's own continuation of the "
        f"uncut text leaves the text before the cut). Load average {os.getloadavg()[0]:.1f}, "
        f"{time.perf_counter() - t0:.0f} s.",
        "",
        "| | agrees with the reference |",
        "|---|---:|",
        f"| not healed | {agree[False]} / {counted} |",
        f"| healed (`heal=True`) | {agree[True]} / {counted} |",
        "",
        "| prompt (end) | not healed | healed | reference |",
        "|---|---|---|---|",
    ]
    for prompt, plain, healed, ref in rows:
        cells = [c if isinstance(c, str) else repr(c)[1:] for c in (prompt[-24:], plain, healed, ref)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    report = "\n".join(lines)
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
