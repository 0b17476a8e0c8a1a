"""Benchmark the CFG backend (Lark and GBNF) on the tekken 131k vocabulary.

For JSON, arithmetic and SQL documents of about 200 and 2,000 tokens (checked with lark), it reports
the grammar load+compile time (vocabulary preprocessing reported apart), and the per-step mask time
(``Matcher.fill_mask`` into a preallocated row) and advance time: p50 / p99 / max in microseconds.

``cold``: the first document on a freshly compiled grammar (every cache empty); ``warm``: the same
kind of document after three others went through the same compiled grammar (a server's steady
state). ``warm CPU`` is the same steps in thread CPU time, which leaves out time the process spent
descheduled (on a loaded machine the wall-clock p99 is mostly that). Garbage-collector pauses are
included (a full collection of the caches built so far can take tens of ms): ``--gc-freeze`` freezes
what exists after the vocabulary is loaded, as a server would at startup (see docs/lark.md). Run:
``python benchmarks/bench_cfg.py [--quick] [--gc-freeze] [--engine native|python]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from grammarmask.cache import forget  # noqa: E402
from grammarmask.frontends.gbnf import Gbnf  # noqa: E402
from grammarmask.frontends.lark import Lark  # noqa: E402
from grammarmask.loaders import mistral_tokenizer  # noqa: E402
from grammarmask.native import native_vocabulary  # noqa: E402
from grammarmask.vocab import Vocabulary  # noqa: E402

GRAMMARS = os.path.join(os.path.dirname(__file__), "..", "grammars")


def _json_value(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    if depth > 3 or r < 0.35:
        return rng.choice(
            [
                rng.randint(-1000, 10**6),
                round(rng.uniform(-1e3, 1e3), 3),
                True,
                False,
                None,
                "".join(rng.choice("abcdefgh ijk") for _ in range(rng.randint(0, 12))),
            ]
        )
    if r < 0.65:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {f"key_{rng.randint(0, 99)}": _json_value(rng, depth + 1) for _ in range(rng.randint(1, 5))}


def json_doc(rng: random.Random, n_tokens: int, tok: Any) -> str:
    items: list[Any] = []
    while True:
        items.append(_json_value(rng, 1))
        doc = json.dumps({"items": items}, indent=2)
        if len(tok.encode(doc, bos=False, eos=False)) >= n_tokens:
            return doc


def _arith(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if depth > 4 or r < 0.3:
        return rng.choice(
            [
                str(rng.randint(0, 999)),
                f"{rng.randint(0, 99)}.{rng.randint(0, 99)}",
                rng.choice(["x", "y", "rate", "n_items"]),
            ]
        )
    if r < 0.45:
        return f"({_arith(rng, depth + 1)})"
    if r < 0.55:
        return f"{rng.choice(['max', 'f', 'sqrt'])}({_arith(rng, depth + 1)}, {_arith(rng, depth + 1)})"
    return f"{_arith(rng, depth + 1)} {rng.choice(['+', '-', '*', '/', '%', '**'])} {_arith(rng, depth + 1)}"


def arith_doc(rng: random.Random, n_tokens: int, tok: Any) -> str:
    doc = _arith(rng)
    while len(tok.encode(doc, bos=False, eos=False)) < n_tokens:
        doc = f"{doc} + {_arith(rng)}"
    return doc


def sql_doc(rng: random.Random, n_tokens: int, tok: Any) -> str:
    cols = ["id", "name", "price", "qty", "created_at", "region"]

    def cond() -> str:
        c = rng.choice(cols)
        return rng.choice(
            [
                f"{c} > {rng.randint(0, 100)}",
                f"{c} = '{rng.choice(['a', 'EU', 'x y'])}'",
                f"{c} IS NOT NULL",
                f"{c} BETWEEN 1 AND {rng.randint(2, 50)}",
                f"{c} IN (1, 2, {rng.randint(3, 9)})",
            ]
        )

    where = cond()
    while True:
        doc = (
            f"SELECT o.id, sum(o.price * o.qty) AS total, count(*) FROM orders o "
            f"JOIN customers c ON o.customer_id = c.id WHERE {where} GROUP BY o.id "
            f"HAVING count(*) > 1 ORDER BY total DESC LIMIT 10;"
        )
        if len(tok.encode(doc, bos=False, eos=False)) >= n_tokens:
            return doc
        where = f"{where} {rng.choice(['AND', 'OR'])} {cond()}"


def gbnf_json_doc(rng: random.Random, n_tokens: int, tok: Any) -> str:
    return json_doc(rng, n_tokens, tok)


WORKLOADS = [
    ("json.lark", json_doc),
    ("arithmetic.lark", arith_doc),
    ("sql.lark", sql_doc),
    ("json.gbnf", gbnf_json_doc),
]


def load(name: str) -> Any:
    with open(os.path.join(GRAMMARS, name), encoding="utf-8") as f:
        text = f.read()
    return Gbnf(text) if name.endswith(".gbnf") else Lark(text)


def run_doc(compiled: Any, ids: list[int], vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m = compiled.matcher()
    row = np.zeros((1, vocab.n_words), dtype=np.uint32)
    masks, advances, cpu = [], [], []
    for t in ids:
        c0 = time.thread_time()
        t0 = time.perf_counter()
        m.fill_mask(row, 0)
        t1 = time.perf_counter()
        cpu.append(time.thread_time() - c0)
        if not (row[0, t >> 5] >> np.uint32(t & 31)) & 1:
            raise AssertionError(f"token {t} ({vocab.token_bytes[t]!r}) refused")
        m.advance(t)
        t2 = time.perf_counter()
        masks.append(t1 - t0)
        advances.append(t2 - t1)
    m.fill_mask(row, 0)
    assert m.is_accepting()
    return np.array(masks) * 1e6, np.array(advances) * 1e6, np.array(cpu) * 1e6


def stats(a: np.ndarray) -> str:
    return f"{np.percentile(a, 50):7.0f} {np.percentile(a, 99):7.0f} {a.max():7.0f}"


def main() -> None:
    import cold_cache  # benchmarks/ is on sys.path when this runs as a script

    cold_cache.use()  # first compiles: no grammar from an earlier run's disk cache
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="only the 200-token documents")
    ap.add_argument("--gc-freeze", action="store_true",
                    help="gc.freeze() after loading the vocabulary (what a server does at startup): keeps "
                         "the tokenizer's objects out of the collector's full passes")
    ap.add_argument("--engine", choices=["native", "python"], default=None,
                    help="the CFG engine: the Rust one (native) or the Python specification "
                         "(default: the library's default, see grammarmask.engine.native_cfg)")
    args = ap.parse_args()
    if args.engine:
        os.environ["GRAMMARMASK_NATIVE_CFG"] = "1" if args.engine == "native" else "0"
    import lark

    tok = mistral_tokenizer("tekken")
    t0 = time.perf_counter()
    vocab = Vocabulary.from_mistral(tok)
    _ = vocab.trie
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    print(f"vocabulary: tekken {vocab.size} tokens, load + trie {time.perf_counter() - t0:.2f} s (apart)")
    # One-time process costs (lazy imports, Unicode case tables), not per grammar: reported apart.
    t0 = time.perf_counter()
    Lark('start: KW NAME\nKW: "select"i\nNAME: /[a-z_][a-z0-9_]*/\n%ignore " "\n')._compile(vocab)
    Gbnf('root ::= "a" [0-9]+\n')._compile(vocab)
    print(f"process warm-up (imports, case tables): {(time.perf_counter() - t0) * 1e3:.0f} ms (apart)")
    print(
        f"{'grammar':18} {'tokens':>6} {'compile ms':>10} | {'mask us: p50':>12} {'p99':>7} {'max':>7} | "
        f"{'advance p50':>11} {'p99':>7} {'max':>7} | {'warm mask p50':>13} {'p99':>7} {'max':>7} | "
        f"{'CPU p50':>7} {'p99':>7} {'max':>7} | {'cold CPU p50':>12} {'p99':>7} {'max':>7}"
    )
    sizes = [200] if args.quick else [200, 2000]
    for name, make in WORKLOADS:
        checker = None
        if name.endswith(".lark"):
            with open(os.path.join(GRAMMARS, name), encoding="utf-8") as f:
                checker = lark.Lark(f.read(), parser="earley", lexer="dynamic")
        for size in sizes:
            rng = random.Random(size)
            docs = [make(rng, size, tok) for _ in range(5)]
            if checker is not None:
                for d in docs:
                    checker.parse(d)
            # cold: drop the per-vocabulary shared walks and class tries too, the Python engine's
            # and the native one's (the tries' index arrays and the native vocabulary's byte trie
            # and string-body slice stay: they are vocabulary preprocessing, made once per tokenizer)
            forget(vocab, "cfg.shared_walks")
            forget(vocab, "index.class_tries")
            native_vocabulary(vocab).clear_shared()
            gc.collect()  # the previous grammar's mask rows go with it (they are shared weakly)
            t0 = time.perf_counter()
            g = load(name)
            compiled = g._compile(vocab)  # fresh: bypass the content cache
            compile_ms = (time.perf_counter() - t0) * 1e3
            ids = [tok.encode(d, bos=False, eos=False) for d in docs]
            cold_mask, cold_adv, cold_cpu = run_doc(compiled, ids[0], vocab)
            for other in ids[1:4]:
                run_doc(compiled, other, vocab)
            warm_mask, _, warm_cpu = run_doc(compiled, ids[4], vocab)
            print(
                f"{name:18} {len(ids[0]):6d} {compile_ms:10.1f} | {stats(cold_mask):>28} | "
                f"{stats(cold_adv):>27} | {stats(warm_mask):>29} | {stats(warm_cpu):>23} | "
                f"{stats(cold_cpu):>28}"
            )


if __name__ == "__main__":
    main()
