"""JSON Schema on the JSONSchemaBench sample: compile time and per-token mask time on tekken 131k.

    python benchmarks/bench_json_schema.py [--full 60] [--mask 30] [--tokenizer tekken] [--gc-freeze]
                                           [--property-order declared|any] [--schemas Sub/id.json,...]
                                           [--engine native|python]
    python benchmarks/bench_json_schema.py --compare-orders [--schemas Sub/id.json,...]
    python benchmarks/bench_json_schema.py --any-cost 4,6,8,10

1. Grammar generation (schema -> Lark text, ``JsonSchema.to_lark``) for every schema of the sample
   (``/work/shared/corpus/json_schema/jsonschemabench/*/examples``), text cache cleared each time:
   p50/p90/max, and the refusals (``UnsupportedSchemaError``) per sub-dataset.
2. Full compile (``JsonSchema(s).compile(vocab)``: generation + Lark front end + CFG index) on
   ``--full`` schemas spread evenly over the sample, every cache cleared: p50/p90/max, wall clock
   and the process's CPU time (steadier on a shared machine). The vocabulary is prepared first and
   timed apart, as the harness does (the native engine's copy of it and its byte trie, and its
   fingerprint for the disk cache's keys: 50-350 ms the first compile had paid).
3. Mask time: for ``--mask`` compiled schemas, each valid instance (``json.dumps(ensure_ascii=False)``,
   tokenized by the real tokenizer) is decoded while timing ``Matcher.fill_mask`` into a preallocated
   ``[1, ceil(V/32)]`` int32 buffer at every step, EOS step included: p50/p99 over all steps.

``--gc-freeze``: ``gc.collect(); gc.freeze()`` after loading the corpus and the tokenizer, as a server
does at startup (docs/lark.md), so that full collections during the timed steps walk what grammarmask
built, not the benchmark's 773 loaded schemas and instances.
``--property-order any`` runs everything with ``JsonSchema(..., property_order="any")``;
``--schemas`` restricts the run to the named schemas (e.g. ``Github_easy/o83258.json``).
``--compare-orders``: for each named schema, compile time and mask p50/p99 per token in both
orders over the valid instances both accept (each schema cold, then warm over 3 passes), plus
"any" on the same instances with their keys reversed (every object, recursively). Without
``--schemas`` it runs the person/order/event schemas of ``workloads.py`` (20 documents each).
``--any-cost t1,t2,...``: the cost of ``property_order="any"`` against the number t of tracked keys:
one object with t required and 4 optional keys, Lark text size, compile time (cold), mask p50/p99
over 10 documents in random key orders (declared: the same documents in declared order).

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import gc
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
sys.path.insert(0, os.path.dirname(__file__))

import cold_cache  # noqa: E402
from engines.grammarmask import prepare_vocabulary  # noqa: E402

import grammarmask as gm  # noqa: E402
from grammarmask.cache import forget  # noqa: E402
from grammarmask.errors import GrammarError, UnsupportedSchemaError  # noqa: E402
from grammarmask.frontends import json_schema as js  # noqa: E402
from grammarmask.frontends.json_schema import JsonSchema  # noqa: E402
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
        js._RULES_CACHE.clear()
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings(), cold_cache.off():
                warnings.simplefilter("error")
                JsonSchema(data["schema"], property_order=order).to_lark()
        except (UnsupportedSchemaError, GrammarError):
            refused[sub] += 1
            continue
        times.append(time.perf_counter() - t0)
    return times, refused, total


def compiles(schema: Any, order: str) -> bool:
    """Whether the schema compiles (with the on-disk cache off: no entry for a timed compile to read)."""
    try:
        with warnings.catch_warnings(), cold_cache.off():
            warnings.simplefilter("error")
            JsonSchema(schema, property_order=order).to_lark()
    except GrammarError:
        return False
    return True


def _reversed_keys(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _reversed_keys(x[k]) for k in reversed(list(x))}
    if isinstance(x, list):
        return [_reversed_keys(v) for v in x]
    return x


def _timed_feed(c: Any, ids: list[int], buf: Any, steps: list[float]) -> bool:
    m = c.matcher()
    for t in [*ids, None]:
        t0 = time.perf_counter()
        m.fill_mask(buf, 0)
        steps.append(time.perf_counter() - t0)
        if t is None:
            return bool(m.is_accepting())
        if not m.try_advance(t):
            return False
    return False


def _workload_items() -> list[tuple[str, str, dict[str, Any]]]:
    import random

    import workloads as W

    rng = random.Random(0)
    out = []
    for name, schema, make in (
        ("person", W.PERSON, W._person),
        ("order", W.ORDER, W._order),
        ("event", W.EVENT, W._event),
    ):
        tests = [{"data": make(rng), "valid": True} for _ in range(20)]
        out.append(("workloads", name, {"schema": schema, "tests": tests}))
    return out


def compare_orders(items: list[tuple[str, str, dict[str, Any]]], tok: Any, vocab: Any) -> None:
    """Per schema: compile ms and mask p50/p99 (us) in declared and any order, same instances."""
    buf = np.zeros((1, vocab.n_words), dtype=np.int32)
    JsonSchema({"type": "object", "properties": {"a": {"type": "string"}}}).compile(vocab)  # warm-up
    print("| schema | compile declared | compile any | declared p50/p99 | any p50/p99 | any, keys reversed |")
    print("|---|---|---|---|---|---|")
    for sub, name, data in items:
        compiled = {}
        row = [f"{sub}/{name}"]
        for order in ("declared", "any"):
            js._RULES_CACHE.clear()
            forget(vocab, "compiled")
            t0 = time.perf_counter()
            try:
                compiled[order] = JsonSchema(data["schema"], property_order=order).compile(vocab)
            except GrammarError as e:
                row.append(f"refused ({type(e).__name__})")
                continue
            row.append(f"{(time.perf_counter() - t0) * 1e3:.0f} ms")
        if len(compiled) < 2:
            print("| " + " | ".join(row) + " |")
            continue
        docs = [case["data"] for case in data["tests"] if case["valid"]]
        enc = [list(tok.encode(json.dumps(d, ensure_ascii=False), bos=False, eos=False)) for d in docs]
        both = [ids for ids in enc if all(_timed_feed(c, ids, buf, []) for c in compiled.values())]
        rev = [
            list(tok.encode(json.dumps(_reversed_keys(d), ensure_ascii=False), bos=False, eos=False))
            for d in docs
        ]
        for order, seqs in (("declared", both), ("any", both), ("any", rev)):
            js._RULES_CACHE.clear()
            forget(vocab, "compiled")
            c = JsonSchema(data["schema"], property_order=order).compile(vocab)  # cold
            steps: list[float] = []
            for _ in range(3):
                for ids in seqs:
                    _timed_feed(c, ids, buf, steps)
            row.append(f"{pct(steps, 0.5) * 1e6:.0f} / {pct(steps, 0.99) * 1e6:.0f} ({len(seqs)} docs)")
        print("| " + " | ".join(row) + " |")


def any_cost(ts: list[int], tok: Any, vocab: Any) -> None:
    import random

    buf = np.zeros((1, vocab.n_words), dtype=np.int32)
    JsonSchema({"type": "object", "properties": {"a": {"type": "string"}}}).compile(vocab)  # warm-up
    print("| t | order | Lark text | compile | mask p50 / p99 |\n|---|---|---|---|---|")
    for t in ts:
        props = {f"field_{i}": {"type": "string" if i % 2 else "integer"} for i in range(t + 4)}
        schema = {"type": "object", "properties": props, "required": [f"field_{i}" for i in range(t)]}
        for order in ("declared", "any"):
            js._RULES_CACHE.clear()
            forget(vocab, "compiled")
            t0 = time.perf_counter()
            g = JsonSchema(schema, property_order=order)
            text = g.to_lark()
            c = g.compile(vocab)
            took = time.perf_counter() - t0
            rng = random.Random(0)
            steps: list[float] = []
            for _ in range(10):
                keys = list(props)[: t + 2]
                if order == "any":
                    rng.shuffle(keys)
                doc = {k: i if props[k]["type"] == "integer" else f"v{i}" for i, k in enumerate(keys)}
                ids = list(tok.encode(json.dumps(doc), bos=False, eos=False))
                if not _timed_feed(c, ids, buf, steps):
                    raise SystemExit(f"rejected: {doc}")
            print(
                f"| {t} | {order} | {len(text) / 1e3:.0f} kB | {took * 1e3:.0f} ms "
                f"| {pct(steps, 0.5) * 1e6:.0f} / {pct(steps, 0.99) * 1e6:.0f} us |"
            )


def main() -> None:
    cold_cache.use()  # first compiles: no grammar from an earlier run's disk cache
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full", type=int, default=60, help="schemas for the full-compile timing")
    ap.add_argument("--mask", type=int, default=30, help="schemas for the mask timing")
    ap.add_argument("--tokenizer", default="tekken")
    ap.add_argument("--property-order", default="declared", choices=["declared", "any"])
    ap.add_argument("--schemas", default="", help="comma-separated Sub/id.json names (default: all)")
    ap.add_argument("--compare-orders", action="store_true", help="declared vs any order, per schema")
    ap.add_argument("--any-cost", default="", help="comma-separated numbers of tracked keys")
    ap.add_argument("--gc-freeze", action="store_true", help="freeze the corpus and tokenizer's objects")
    ap.add_argument("--engine", choices=["native", "python"], default=None,
                    help="the CFG engine: the Rust one (native) or the Python specification "
                         "(default: the library's default, see grammarmask.engine.native_cfg)")
    args = ap.parse_args()
    if args.engine:
        os.environ["GRAMMARMASK_NATIVE_CFG"] = "1" if args.engine == "native" else "0"
    if args.mask > args.full:
        ap.error("--mask times the first --mask of the --full schemas: --full must be at least --mask")
    order = args.property_order

    items = load()
    if args.schemas:
        wanted = args.schemas.split(",")
        items = [it for it in items if f"{it[0]}/{it[1]}" in wanted]
    if args.any_cost:
        tok = mistral_tokenizer(args.tokenizer)
        vocab = gm.Vocabulary.from_mistral(tok)
        prepare_vocabulary(vocab)
        any_cost([int(t) for t in args.any_cost.split(",")], tok, vocab)
        return
    if args.compare_orders:
        if not args.schemas:
            items = _workload_items()
        tok = mistral_tokenizer(args.tokenizer)
        vocab = gm.Vocabulary.from_mistral(tok)
        prepare_vocabulary(vocab)
        compare_orders(items, tok, vocab)
        return
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
    t0 = time.perf_counter()
    prepare_vocabulary(vocab)  # as the harness does: not the first compile's
    prep = time.perf_counter() - t0
    ok = [it for it in items if compiles(it[2]["schema"], order)]
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    step = max(1, len(ok) // max(1, args.full))
    chosen = ok[::step][: args.full]
    full: list[float] = []
    cpu: list[float] = []
    named: list[tuple[float, str]] = []
    compiled: list[tuple[Any, dict[str, Any]]] = []
    for sub, name, data in chosen:
        js._RULES_CACHE.clear()
        forget(vocab, "compiled")
        t0, c0 = time.perf_counter(), time.process_time()
        c = JsonSchema(data["schema"], property_order=order).compile(vocab)
        full.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        named.append((full[-1], f"{sub}/{name}"))
        compiled.append((c, data))
    print(f"\n## Full compile on {args.tokenizer} ({len(full)} schemas)\n")
    print(f"(the vocabulary's preparation, once per process: {prep * 1e3:.0f} ms, apart)\n")
    print("| clock | p50 | p90 | max |\n|---|---|---|---|")
    for what, xs in (("wall", full), ("CPU", cpu)):
        top = max(xs, default=0.0)
        print(f"| {what} | {pct(xs, 0.5) * 1e3:.1f} ms | {pct(xs, 0.9) * 1e3:.1f} ms | {top * 1e3:.1f} ms |")
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
