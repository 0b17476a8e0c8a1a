"""Regex on the real tekken 131k vocabulary: compile time and per-step mask time.

    python benchmarks/bench_regex.py [--runs 5] [--tokenizer tekken] [--engine native|python|both]

Workloads are the harness's regex workloads (``workloads.build``: email, ISO date-time, IPv4, phone
and the 1,000 taxonomy labels as one alternation, 20 generated documents each) plus the ISO
date-time pattern with ``\\d`` (Python's Unicode digits). For each workload and run: every cache is
cleared (regex -> DFA, class tries, compiled grammars), the pattern is compiled from scratch
(``Regex(p).compile(vocab)``: regex -> minimal DFA -> class trie -> token index), then each document,
tokenized by the real tokenizer, is decoded while timing ``Matcher.fill_mask`` into a preallocated
``[1, ceil(V/32)]`` int32 buffer at every step, EOS step included. First visits of DFA states are
part of the figures (a fresh compiled grammar per run). ``--engine`` picks the engine (default: both,
one row each); the native vocabulary (token bytes copied to Rust once per tokenizer) is kept between
runs like ``vocab.trie``, its class tries are not. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import grammarmask as gm  # noqa: E402
from benchmarks.workloads import build  # noqa: E402
from grammarmask.cache import automata, forget, per_vocabulary  # noqa: E402
from grammarmask.frontends.regex import Regex  # noqa: E402
from grammarmask.loaders import mistral_tokenizer  # noqa: E402
from grammarmask.native import available, native_vocabulary  # noqa: E402


def workloads() -> list[tuple[str, str, list[str]]]:
    out = [(w.name, w.source, list(w.docs)) for w in build(jsb_per_dataset=0) if w.kind == "regex"]
    for name, pattern, docs in list(out):
        if name == "regex-iso-datetime":
            out.append(("regex-iso-datetime, \\d for [0-9]", pattern.replace("[0-9]", r"\d"), docs))
    return out


def clear_caches(vocab: gm.Vocabulary) -> None:
    """Forget every compile-time cache; keep only what is built once per tokenizer."""
    automata().clear()  # the process-wide regex -> DFA cache
    native = native_vocabulary(vocab) if available() else None
    forget(vocab)  # compiled grammars and class tries
    if native is not None:
        native.clear_tries()
        per_vocabulary(vocab, "native.vocab", lambda: native)


def main() -> None:
    import cold_cache  # benchmarks/ is on sys.path when this runs as a script

    cold_cache.use()  # first compiles: no grammar from an earlier run's disk cache
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokenizer", default="tekken")
    ap.add_argument("--engine", choices=["native", "python", "both"], default="both")
    args = ap.parse_args()
    engines = ["native", "python"] if args.engine == "both" else [args.engine]

    t0 = time.perf_counter()
    tok = mistral_tokenizer(args.tokenizer)
    vocab = gm.Vocabulary.from_mistral(tok)
    _ = vocab.trie
    if "native" in engines:
        native_vocabulary(vocab)
    prep = time.perf_counter() - t0
    buf = np.zeros((1, vocab.n_words), dtype=np.int32)

    rows = []
    for (name, pat, docs), engine in ((w, e) for w in workloads() for e in engines):
        encoded = []
        for d in docs:
            ids = tok.encode(d, bos=False, eos=False)
            if re.fullmatch(pat, d) and vocab.decode(ids) == d.encode():
                encoded.append([*ids, vocab.eos_token_id])
        compile_ms: list[float] = []
        steps: list[float] = []
        refused = 0
        compiled = None
        for _ in range(args.runs):
            clear_caches(vocab)
            gc.collect()
            t1 = time.perf_counter()
            compiled = Regex(pat).compile(vocab, engine=engine)
            compile_ms.append((time.perf_counter() - t1) * 1e3)
            for ids in encoded:
                m = compiled.matcher()
                for t in ids:
                    t1 = time.perf_counter()
                    m.fill_mask(buf, 0)
                    steps.append((time.perf_counter() - t1) * 1e6)
                    if not (int(buf[0, t >> 5]) >> (t & 31)) & 1:
                        refused += 1
                        break
                    m.advance(t)
        st = np.asarray(steps)
        dfa = compiled.dfa  # type: ignore[union-attr]
        rows.append(
            (
                name,
                engine,
                dfa.n_states,
                dfa.byte_classes()[1],
                float(np.median(compile_ms)),
                max(compile_ms),
                len(encoded),
                st.size,
                np.percentile(st, 50),
                np.percentile(st, 99),
                st.max(),
                refused,
            )
        )

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"vocabulary preprocessing ({args.tokenizer} load + trie, once per tokenizer): {prep:.2f} s\n")
    print(
        "| workload | engine | DFA states | byte classes | compile median (max) | docs | steps | mask p50 "
        "| mask p99 | mask max | refused |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, engine, n, k, cmed, cmax, ndocs, nsteps, p50, p99, mx, refused in rows:
        print(
            f"| {name} | {engine} | {n} | {k} | {cmed:.1f} ms ({cmax:.1f}) | {ndocs} | {nsteps} "
            f"| {p50:.1f} us | {p99:.1f} us | {mx:.0f} us | {refused} |"
        )


if __name__ == "__main__":
    main()
