"""Regex on the real tekken 131k vocabulary: compile time and per-step mask time.

    python benchmarks/bench_regex.py [--docs 200] [--runs 3]

For each pattern and each run: all caches are cleared (regex -> DFA, class tries, compiled
grammars), the pattern is compiled from scratch (``Regex(p).compile(vocab)``: regex -> minimal DFA
-> class trie -> token index), then ``--docs`` documents tokenized by the real Tekken tokenizer are
decoded, timing ``Matcher.mask()`` at every step (EOS step included). First visits of DFA states
are part of the figures. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import grammarmask as gm  # noqa: E402
import grammarmask.index as gindex  # noqa: E402
from benchmarks.workloads import taxonomy_labels  # noqa: E402
from grammarmask.automata import regex as gregex  # noqa: E402
from grammarmask.backends.regex import Regex  # noqa: E402
from grammarmask.loaders import mistral_tokenizer  # noqa: E402

EMAIL = r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}"
DATETIME = (
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
)
IPV4 = r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
PHONE = r"\+?1?[ -]?\(?[0-9]{3}\)?[ -]?[0-9]{3}[ -]?[0-9]{4}"


def _email(rng: random.Random) -> str:
    names = ["john", "jane.doe", "a.b-c", "support", "x_y", "mary.ann+news", "dev42", "info"]
    hosts = ["example", "mail.google", "uni-bonn", "a.b.c", "company42"]
    tld = rng.choice(["com", "org", "de", "info"])
    return f"{rng.choice(names)}{rng.randint(0, 99)}@{rng.choice(hosts)}.{tld}"


def _datetime(rng: random.Random) -> str:
    frac = rng.choice(["", f".{rng.randint(0, 999):03d}", f".{rng.randint(0, 999999)}"])
    tz = rng.choice(["Z", f"+{rng.randint(0, 14):02d}:{rng.choice([0, 30, 45]):02d}", "-05:00"])
    return (
        f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}{tz}"
    )


def _ipv4(rng: random.Random) -> str:
    return ".".join(
        str(rng.choice([rng.randint(0, 9), rng.randint(10, 99), rng.randint(100, 255)])) for _ in range(4)
    )


def _phone(rng: random.Random) -> str:
    a, b, c = rng.randint(200, 999), rng.randint(100, 999), rng.randint(0, 9999)
    return rng.choice([f"+1 ({a}) {b}-{c:04d}", f"{a}-{b}-{c:04d}", f"({a}){b}{c:04d}", f"1 {a} {b} {c:04d}"])


def workloads() -> list[tuple[str, str, list[str]]]:
    rng = random.Random(0)
    labels = taxonomy_labels(1000)
    alt = "(?:" + "|".join(re.escape(x) for x in labels) + ")"
    out = []
    for name, pat, gen in [
        ("email", EMAIL, _email),
        ("ISO date-time", DATETIME, _datetime),
        ("IPv4", IPV4, _ipv4),
        ("phone", PHONE, _phone),
    ]:
        out.append((name, pat, [gen(rng) for _ in range(400)]))
    out.append(("1,000-label alternation", alt, labels))
    out.append((r"ISO date-time with \d (Unicode digits)", DATETIME.replace("[0-9]", r"\d"), out[1][2]))
    return out


def clear_caches(vocab: gm.Vocabulary) -> None:
    gregex._cached.cache_clear()
    gindex._TRIE_CACHE.clear()
    vocab.__dict__.pop("_compiled_cache", None)


def pct(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    t0 = time.perf_counter()
    tok = mistral_tokenizer("tekken")
    vocab = gm.Vocabulary.from_mistral(tok)
    _ = vocab.trie
    prep = time.perf_counter() - t0

    rows = []
    for name, pat, docs in workloads():
        for d in docs:
            if not re.fullmatch(pat, d):
                raise SystemExit(f"bad document for {name}: {d!r}")
        rng = random.Random(1)
        compile_ms: list[float] = []
        steps: list[float] = []
        refused = 0
        for _ in range(args.runs):
            clear_caches(vocab)
            gc.collect()
            t0 = time.perf_counter()
            compiled = Regex(pat).compile(vocab)
            compile_ms.append((time.perf_counter() - t0) * 1e3)
            for text in rng.sample(docs, min(args.docs, len(docs))):
                ids = [*tok.encode(text, bos=False, eos=False), vocab.eos_token_id]
                m = compiled.matcher()
                for t in ids:
                    t1 = time.perf_counter()
                    mask = m.mask()
                    steps.append((time.perf_counter() - t1) * 1e6)
                    if t not in mask:
                        refused += 1
                        break
                    m.advance(t)
        st = np.asarray(steps)
        dfa = compiled.dfa  # type: ignore[attr-defined]
        rows.append(
            (
                name,
                dfa.n_states,
                dfa.byte_classes()[1],
                np.median(compile_ms),
                max(compile_ms),
                st.size,
                pct(st, 50),
                pct(st, 99),
                st.max(),
                refused,
            )
        )

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )
    print(f"vocabulary preprocessing (tekken load + trie, once per tokenizer): {prep:.2f} s\n")
    print(
        "| pattern | DFA states | byte classes | compile median (max) | steps | mask p50 | mask p99 "
        "| mask max | refused |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, n, k, cmed, cmax, nsteps, p50, p99, mx, refused in rows:
        print(
            f"| {name} | {n} | {k} | {cmed:.1f} ms ({cmax:.1f}) | {nsteps} | {p50:.1f} us | {p99:.1f} us "
            f"| {mx:.0f} us | {refused} |"
        )


if __name__ == "__main__":
    main()
