"""Choice on the real tekken 131k vocabulary: vocabulary preprocessing, compile, per-step mask time.

    python benchmarks/bench_choice.py [--labels 1000] [--docs 300] [--engine native|python]

Each run compiles a fresh grammar (no cache), then decodes ``--docs`` labels tokenized by the real
tokenizer (with a leading space, as a model writes them after a prompt), timing ``Matcher.mask()``
at every step, EOS step included. First visits of trie states are part of the figures. ``--engine``
picks the engine (default: native when the extension is built; multi-label mode, ``--separator``,
filters the index's masks in Python either way).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import grammarmask as gm  # noqa: E402
from grammarmask.engine import in_use, resolve  # noqa: E402
from grammarmask.frontends.choice import Choice  # noqa: E402
from grammarmask.loaders import mistral_tokenizer  # noqa: E402
from tests.support import taxonomy_labels  # noqa: E402


def percentiles(us: list[float]) -> str:
    a = np.asarray(us)
    return f"p50 {np.percentile(a, 50):.1f} us, p99 {np.percentile(a, 99):.1f} us, max {a.max():.0f} us"


def main() -> None:
    import cold_cache  # benchmarks/ is on sys.path when this runs as a script

    cold_cache.use()  # first compiles: no grammar from an earlier run's disk cache
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--labels", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--separator", default=None, help="multi-label mode: join 3 labels with this")
    ap.add_argument("--engine", choices=["native", "python"], default=None)
    args = ap.parse_args()
    with in_use(resolve(args.engine)):
        run(args)


def run(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    tok = mistral_tokenizer("tekken")
    vocab = gm.Vocabulary.from_mistral(tok)
    _ = vocab.trie
    prep = time.perf_counter() - t0

    labels = taxonomy_labels(args.labels)
    t0 = time.perf_counter()
    compiled = Choice(labels, leading_space="always", separator=args.separator)._compile(vocab)
    compile_ms = (time.perf_counter() - t0) * 1e3
    later_ms = []  # new label sets in the same process: no one-time warm-up
    for seed in range(1, 6):
        other = taxonomy_labels(args.labels, seed=seed)
        t0 = time.perf_counter()
        Choice(other, leading_space="always", separator=args.separator)._compile(vocab)
        later_ms.append((time.perf_counter() - t0) * 1e3)

    rng = random.Random(0)
    step_us: list[float] = []
    refused = 0
    for _ in range(args.docs):
        if args.separator:
            text = " " + args.separator.join(rng.sample(labels, 3))
        else:
            text = " " + rng.choice(labels)
        ids = [*tok.encode(text, bos=False, eos=False), vocab.eos_token_id]
        m = compiled.matcher()
        for t in ids:
            t0 = time.perf_counter()
            mask = m.mask()
            step_us.append((time.perf_counter() - t0) * 1e6)
            if t not in mask:
                refused += 1
                break
            m.advance(t)

    cpu = platform.processor() or platform.machine()
    print(
        f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"engine {resolve(None)}, load average {os.getloadavg()[0]:.1f}"
    )
    print(f"vocabulary preprocessing (load + trie, once per tokenizer): {prep:.2f} s")
    print(
        f"Choice compile, {args.labels} labels: first in the process {compile_ms:.1f} ms, "
        f"then median {np.median(later_ms):.1f} ms over 5 other label sets"
    )
    print(f"mask over {len(step_us)} steps: {percentiles(step_us)}")
    print(f"document tokens wrongly refused: {refused}")


if __name__ == "__main__":
    main()
