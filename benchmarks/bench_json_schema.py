"""JSON Schema on the JSONSchemaBench sample: compile time and per-token mask time on tekken 131k.

    python benchmarks/bench_json_schema.py [--full 60] [--mask 30] [--tokenizer tekken]
                                           [--property-order declared|any] [--schemas Sub/id.json,...]

1. Grammar generation (schema -> Lark text, ``JsonSchema.to_lark``) for every schema of the sample
   (``/work/shared/corpus/json_schema/jsonschemabench/*/examples``), text cache cleared each time:
   p50/p90/max, and the refusals (``UnsupportedSchemaError``) per sub-dataset.
2. Full compile (``JsonSchema(s).compile(vocab)``: generation + Lark front end + CFG index) on
   ``--full`` schemas spread evenly over the sample, every cache cleared: p50/p90/max.
3. Mask time: for ``--mask`` compiled schemas, each valid instance (``json.dumps(ensure_ascii=False)``,
   tokenized by the real tokenizer) is decoded while timing ``Matcher.fill_mask`` into a preallocated
   ``[1, ceil(V/32)]`` int32 buffer at every step, EOS step included: p50/p99 over all steps.

``--property-order any`` runs everything with ``JsonSchema(..., property_order="any")``;
``--schemas`` restricts the run to the named schemas (e.g. ``Github_easy/o83258.json``).

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import grammarmask as gm  # noqa: E402
from grammarmask.backends import json_schema as js  # noqa: E402
from grammarmask.backends.json_schema import JsonSchema  # noqa: E402
from grammarmask.errors import GrammarError, UnsupportedSchemaError  # noqa: E402
from grammarmask.loaders import mistral_tokenizer  # noqa: E402

BENCH = Path("/work/shared/corpus/json_schema/jsonschemabench")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def load() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for sub in sorted(p for p in BENCH.iterdir() if p.is_dir()):
        for f in sorted((sub / "examples").glob("*.json")):
            out.append((sub.name, f.name, json.loads(f.read_text())))
    return out


def generation(
    items: list[tuple[str, str, dict[str, Any]]], order: str
) -> tuple[list[float], Counter[str], Counter[str]]:
    times: list[float] = []
    refused: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for sub, _, data in items:
        total[sub] += 1
        js._TEXT_CACHE.clear()
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                JsonSchema(data["schema"], property_order=order).to_lark()
        except (UnsupportedSchemaError, GrammarError):
            refused[sub] += 1
            continue
        times.append(time.perf_counter() - t0)
    return times, refused, total


def compiles(schema: Any, order: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            JsonSchema(schema, property_order=order).to_lark()
    except GrammarError:
        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", type=int, default=60, help="schemas for the full-compile timing")
    ap.add_argument("--mask", type=int, default=30, help="schemas for the mask timing")
    ap.add_argument("--tokenizer", default="tekken")
    ap.add_argument("--property-order", default="declared", choices=["declared", "any"])
    ap.add_argument("--schemas", default="", help="comma-separated Sub/id.json names (default: all)")
    args = ap.parse_args()
    order = args.property_order

    items = load()
    if args.schemas:
        wanted = args.schemas.split(",")
        items = [it for it in items if f"{it[0]}/{it[1]}" in wanted]
    gen, refused, total = generation(items, order)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, property_order={order!r}\n"
    )
    print(f"## Grammar generation ({len(gen)} of {len(items)} schemas compiled)\n")
    print("| p50 | p90 | max |\n|---|---|---|")
    print(f"| {pct(gen, 0.5) * 1e3:.1f} ms | {pct(gen, 0.9) * 1e3:.1f} ms | {max(gen) * 1e3:.1f} ms |\n")
    print("| sub-dataset | schemas | refused |\n|---|---|---|")
    for sub in sorted(total):
        print(f"| {sub} | {total[sub]} | {refused[sub]} |")

    tok = mistral_tokenizer(args.tokenizer)
    vocab = gm.Vocabulary.from_mistral(tok)
    _ = vocab.trie
    ok = [it for it in items if compiles(it[2]["schema"], order)]
    step = max(1, len(ok) // max(1, args.full))
    chosen = ok[::step][: args.full]
    full: list[float] = []
    named: list[tuple[float, str]] = []
    compiled: list[tuple[Any, dict[str, Any]]] = []
    for sub, name, data in chosen:
        js._TEXT_CACHE.clear()
        vocab.__dict__.pop("_compiled_cache", None)
        t0 = time.perf_counter()
        c = JsonSchema(data["schema"], property_order=order).compile(vocab)
        full.append(time.perf_counter() - t0)
        named.append((full[-1], f"{sub}/{name}"))
        compiled.append((c, data))
    print(f"\n## Full compile on {args.tokenizer} ({len(full)} schemas)\n")
    print("| p50 | p90 | max |\n|---|---|---|")
    print(f"| {pct(full, 0.5) * 1e3:.1f} ms | {pct(full, 0.9) * 1e3:.1f} ms | {max(full) * 1e3:.1f} ms |")
    print("\nslowest: " + ", ".join(f"{n} {t * 1e3:.0f} ms" for t, n in sorted(named)[-3:]))

    buf = np.zeros((1, vocab.n_words), dtype=np.int32)
    steps: list[float] = []
    rejected = 0
    for c, data in compiled[: args.mask]:
        for case in data["tests"]:
            if not case["valid"]:
                continue
            m = c.matcher()
            ids = tok.encode(json.dumps(case["data"], ensure_ascii=False), bos=False, eos=False)
            for t in [*ids, None]:
                t0 = time.perf_counter()
                m.fill_mask(buf, 0)
                steps.append(time.perf_counter() - t0)
                if t is None:
                    break
                if not m.try_advance(t):
                    rejected += 1
                    break
    if not steps:
        return
    print(f"\n## Mask per token ({len(steps)} steps, {rejected} instances rejected)\n")
    print("| p50 | p99 | mean |\n|---|---|---|")
    print(
        f"| {pct(steps, 0.5) * 1e6:.0f} us | {pct(steps, 0.99) * 1e6:.0f} us "
        f"| {statistics.mean(steps) * 1e6:.0f} us |"
    )


if __name__ == "__main__":
    main()
