"""Batch masks on the real tekken 131k vocabulary: ``fill_masks`` over 64 matchers vs one matcher.

    python benchmarks/bench_batch.py [--batch 64] [--rounds 50]

Each of ``--batch`` matchers is driven to its own position by sampling ``RandomModel`` logits under the
grammar (different seeds, different lengths), so rows hold different states. Then, per grammar:

- *single*: ``m.fill_mask(buf1, 0)`` for one matcher at a time, averaged over the batch's matchers;
- *batch*: ``grammarmask.batch.fill_masks(matchers, buf)`` for the whole batch, divided by the batch;
- *batch, 2 threads*: the same with a ``ThreadPoolExecutor(2)`` (the machine has 2 cores).

States are warmed first (each matcher's mask computed once), so this measures the per-step cost a
serving engine pays once its grammar states are cached. The target: batch per sequence <= 1.5x single.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from benchmarks.bench_jump_forward import CONJUGATION, conjugation_regex  # noqa: E402
from grammarmask.batch import allocate_masks, fill_masks  # noqa: E402
from grammarmask.frontends.json_schema import JsonSchema  # noqa: E402
from grammarmask.frontends.lark import Lark  # noqa: E402
from grammarmask.frontends.regex import Regex  # noqa: E402
from grammarmask.grammar import Grammar, Matcher  # noqa: E402
from grammarmask.models import RandomModel  # noqa: E402
from grammarmask.sampling import sample  # noqa: E402
from grammarmask.vocab import Vocabulary  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _drive(matcher: Matcher, steps: int, seed: int) -> None:
    model = RandomModel(matcher.vocab.size, seed=seed)
    rng = np.random.default_rng(seed)
    ids: list[int] = []
    for _ in range(steps):
        mask = matcher.mask()
        if len(mask) == 1 and matcher.vocab.eos_token_id in mask:
            break
        mask_wo_eos = mask - mask.from_token_ids([matcher.vocab.eos_token_id], mask.size)
        if not len(mask_wo_eos):
            break
        t = sample(model(ids), mask_wo_eos, rng=rng)
        matcher.advance(t)
        ids.append(t)


def bench(name: str, grammar: Grammar, vocab: Vocabulary, batch: int, rounds: int) -> dict[str, float]:
    compiled = grammar.compile(vocab)
    matchers = []
    for i in range(batch):
        m = compiled.matcher()
        _drive(m, 3 + i % 24, seed=i)
        matchers.append(m)
    buf = allocate_masks(batch, vocab.n_words)
    buf1 = allocate_masks(1, vocab.n_words)
    fill_masks(matchers, buf)  # warm every state
    t0 = time.perf_counter()
    for _ in range(rounds):
        for m in matchers:
            m.fill_mask(buf1, 0)
    single = (time.perf_counter() - t0) / (rounds * batch)
    t0 = time.perf_counter()
    for _ in range(rounds):
        fill_masks(matchers, buf)
    batched = (time.perf_counter() - t0) / (rounds * batch)
    with ThreadPoolExecutor(2) as pool:
        fill_masks(matchers, buf, executor=pool)
        t0 = time.perf_counter()
        for _ in range(rounds):
            fill_masks(matchers, buf, executor=pool)
        threaded = (time.perf_counter() - t0) / (rounds * batch)
    # the rows equal each matcher's own mask
    for i, m in enumerate(matchers):
        if not np.array_equal(buf[i].view(np.uint32), m.mask().words):
            raise SystemExit(f"{name}: row {i} differs from the matcher's mask")
    return {"single": single, "batch": batched, "threads": threaded}


def main() -> None:
    import cold_cache  # benchmarks/ is on sys.path when this runs as a script

    cold_cache.use()  # first compiles: no grammar from an earlier run's disk cache
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    vocab = Vocabulary.from_mistral("tekken")
    grammars: list[tuple[str, Grammar]] = [
        ("conjugation (Regex)", Regex(conjugation_regex())),
        ("conjugation (JsonSchema)", JsonSchema(CONJUGATION, whitespace="compact")),
        ("json.lark", Lark.from_file(os.path.join(ROOT, "grammars", "json.lark"))),
    ]
    print(f"# fill_masks, batch {args.batch}, tekken ({vocab.size} tokens), {platform.processor() or 'cpu'}")
    print()
    print("| grammar | single (us/seq) | batch (us/seq) | batch / single | 2 threads (us/seq) |")
    print("|---|---:|---:|---:|---:|")
    for name, g in grammars:
        r = bench(name, g, vocab, args.batch, args.rounds)
        print(
            f"| {name} | {r['single'] * 1e6:.1f} | {r['batch'] * 1e6:.1f} | "
            f"{r['batch'] / r['single']:.2f} | {r['threads'] * 1e6:.1f} |"
        )


if __name__ == "__main__":
    main()
