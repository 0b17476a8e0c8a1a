"""A batch of different JSON Schemas beside llguidance and XGrammar: one step of 64 sequences on 1 and
2 threads, and the memory of many compiled schemas after many steps (issue 14's batch and memory
figures), on tekken 131k.

    python benchmarks/bench_batch_engines.py [--batch 64] [--rounds 30] [--memory 100] [--steps 1000]
        [--peer-python llguidance=/venv/bin/python,xgrammar=/other/bin/python] [--out FILE.json]

The parent picks ``--batch`` JSONSchemaBench schemas that every engine compiles, spread over the
sample, with one valid instance each (tokenized by tekken; one that grammarmask's default options
take, which refuse keys out of declared order), and runs each engine in its own
subprocess (its own venv with ``--peer-python``). Each worker compiles the schemas, drives sequence
``i`` along its instance to token ``(7 * i) % len``, so rows hold different states of different
grammars, then times one batch fill of all rows with the engine's own batch call:

- grammarmask: ``gm.fill_masks(matchers, words, executor=ThreadPoolExecutor(n))``;
- llguidance: ``llguidance.numpy.fill_next_token_bitmask_par(LLExecutor(n), ...)``;
- XGrammar: ``BatchGrammarMatcher(max_threads=n).batch_fill_next_token_bitmask(...)``.

*cold*: the first fill at those positions (first visits included), each thread count in its own
fresh process; *warm*: the median of ``--rounds`` fills once states are
cached; *CPU/token*: process CPU time over the warm rounds per row (1 thread). Each engine's rows
are checked equal across thread counts (a hash of the filled rows).

``--memory N``: a separate worker per engine compiles N schemas (the same selection, extended) and
takes ``--steps`` steps on each (walking its valid instances again and again, a fresh matcher per
instance, one mask per step), then reports RSS (current and peak) beside the RSS after loading the
vocabulary and building the engine (every worker loads tekken through grammarmask to get the token
bytes, so the growth column is the engine's own).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ENGINES = ("grammarmask", "llguidance", "xgrammar")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- worker ------------------------------------------------------------------------------------------


def _batch_filler(engine: Any, name: str, threads: int) -> Any:
    """``fill(matchers, words)``: the engine's own batch call on ``threads`` threads."""
    if name == "grammarmask":
        import threading
        from concurrent.futures import ThreadPoolExecutor

        import grammarmask as gm

        pool = ThreadPoolExecutor(threads) if threads > 1 else None
        if pool is not None:  # the workers are started before the clock, as a server's pool would be
            started = threading.Barrier(threads)
            list(pool.map(lambda _: started.wait(), range(threads)))
        fill_masks = gm.fill_masks  # imported before the clock too, as a server would have it
        return lambda ms, words: fill_masks(ms, words, executor=pool)
    if name == "llguidance":
        import llguidance as llg
        import llguidance.numpy as lln

        ex = llg.LLExecutor(num_threads=threads)
        return lambda ms, words: lln.fill_next_token_bitmask_par(ex, list(zip(ms, range(len(ms)))), words)
    if name == "xgrammar":
        import torch
        import xgrammar as xgr

        batch = xgr.BatchGrammarMatcher(max_threads=threads)

        def fill(ms: list[Any], words: np.ndarray) -> None:
            batch.batch_fill_next_token_bitmask(ms, torch.from_numpy(words))

        return fill
    raise ValueError(name)


def _setup(engine: Any, spec: dict[str, Any]) -> tuple[list[Any], float]:
    """Compile every schema and drive each sequence to its position; the compile seconds."""
    t0 = time.perf_counter()
    compiled = [engine.compile("json_schema", s["schema"]) for s in spec["schemas"]]
    compile_s = time.perf_counter() - t0
    matchers = []
    for c, s in zip(compiled, spec["schemas"]):
        m = engine.start(c)
        for t in s["ids"][: s["at"]]:
            if not engine.advance(m, t):
                raise SystemExit(f"{s['name']}: the engine refused token {t} of a valid instance")
        matchers.append(m)
    return matchers, compile_s


def batch_worker(name: str, spec: dict[str, Any], rounds: int, threads: int) -> dict[str, Any]:
    """One thread count in a fresh process: the cold fill is a first visit of every row's state."""
    import hashlib

    engine = _engine(name, spec)
    matchers, compile_s = _setup(engine, spec)
    fill = _batch_filler(engine, name, threads)
    words = np.zeros((len(matchers), (spec["size"] + 31) // 32), dtype=np.int32)
    t0 = time.perf_counter()
    fill(matchers, words)
    cold = time.perf_counter() - t0
    digest = hashlib.sha256(words.tobytes()).hexdigest()
    warm = []
    c0 = time.process_time()
    for _ in range(rounds):
        t0 = time.perf_counter()
        fill(matchers, words)
        warm.append(time.perf_counter() - t0)
    cpu = time.process_time() - c0
    return {"engine": name, "version": _version(name), "rows": len(matchers), "threads": threads,
            "cold_ms": cold * 1e3, "warm_ms": statistics.median(warm) * 1e3,
            "cpu_us_per_row": cpu / (rounds * len(matchers)) * 1e6, "compile_s": compile_s,
            "rows_sha256": digest}


def memory_worker(name: str, spec: dict[str, Any], steps: int) -> dict[str, Any]:
    base = _rss_mb()
    engine = _engine(name, spec)
    vocab_rss = _rss_mb()
    kept, taken, t0 = [], 0, time.perf_counter()
    for s in spec["schemas"]:
        c = engine.compile("json_schema", s["schema"])
        kept.append(c)  # every compiled schema stays alive, as in a server holding them
        n = 0
        while n < steps:
            for ids in s["all_ids"]:
                m = engine.start(c)
                for t in ids:
                    engine.fill(m)
                    n += 1
                    if n >= steps or not engine.advance(m, t):
                        break
                if n >= steps:
                    break
        taken += n
    return {"engine": name, "version": _version(name), "schemas": len(kept), "steps": taken,
            "s": time.perf_counter() - t0, "rss_start_mb": base, "rss_vocab_mb": vocab_rss,
            "rss_mb": _rss_mb(), "peak_mb": _peak_mb()}


def probe_worker(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The indices of the schemas this engine compiles."""
    engine = _engine(name, spec)
    ok = []
    for i, s in enumerate(spec["schemas"]):
        try:
            engine.compile("json_schema", s["schema"])
        except Exception:  # a refusal: this schema is left out for every engine
            continue
        ok.append(i)
    return {"engine": name, "ok": ok}


def _engine(name: str, spec: dict[str, Any]) -> Any:
    sys.path.insert(0, str(HERE))
    from engines import load

    import grammarmask as gm

    vocab = gm.Vocabulary.from_mistral("tekken")
    specials = sorted(vocab.special_ids - {vocab.eos_token_id})
    return load(name)(list(vocab.token_bytes), vocab.eos_token_id, specials, vocab.size)


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


# --- parent ------------------------------------------------------------------------------------------


def _candidates(n: int) -> list[dict[str, Any]]:
    """``n`` sample schemas (evenly spread) that grammarmask compiles, each with its valid instances."""
    sys.path.insert(0, str(HERE))
    import bench_json_schema as B
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    tok = MistralTokenizer.v3(is_tekken=True).instruct_tokenizer.tokenizer
    import grammarmask as gm

    vocab = gm.Vocabulary.from_mistral("tekken")
    items = [it for it in B.load() if any(c["valid"] for c in it[2]["tests"])]
    items = [it for it in items if B.compiles(it[2]["schema"], "declared")]
    step = max(1, len(items) // n)
    out = []
    for sub, name, data in items[::step][:n]:
        all_ids = [tok.encode(json.dumps(c["data"], ensure_ascii=False), bos=False, eos=False)
                   for c in data["tests"] if c["valid"]]
        # the instances grammarmask's default options take: a valid instance whose keys are out
        # of declared order is refused by its documented key-order narrowing, and a worker stops
        # at a refusal
        compiled = gm.JsonSchema(data["schema"]).compile(vocab)
        all_ids = [ids for ids in all_ids if _takes(compiled, ids)]
        if all_ids:
            out.append({"name": f"{sub}/{name}", "schema": data["schema"], "ids": all_ids[0],
                        "all_ids": all_ids})
    return out


def _takes(compiled: Any, ids: list[int]) -> bool:
    m = compiled.matcher()
    return all(m.try_advance(t) for t in ids) and m.is_accepting()


def _run(python: str, mode: str, name: str, spec_path: str, *args: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    cmd = [python, __file__, "--worker", mode, name, spec_path, *map(str, args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"engine": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, name, spec_path, arg = sys.argv[2:6]
        spec = json.loads(Path(spec_path).read_text())
        res = (batch_worker(name, spec, int(arg), int(sys.argv[6])) if mode == "batch" else
               memory_worker(name, spec, int(arg)) if mode == "memory" else probe_worker(name, spec))
        print(json.dumps(res), flush=True)
        return
    import cold_cache

    cold_cache.use()  # first compiles: no grammar from an earlier run's disk cache
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--memory", type=int, default=100, help="schemas for the memory figure (0: skip)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--memory-engines", default="grammarmask,llguidance",
                    help="engines of the memory run, of those of --engines (XGrammar is slow per step "
                         "here)")
    ap.add_argument("--peer-python", default="", help="engine=python pairs, comma-separated")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    pythons = dict(p.split("=", 1) for p in a.peer_python.split(",") if p)
    engines = a.engines.split(",")
    import grammarmask as gm

    size = gm.Vocabulary.from_mistral("tekken").size
    res: dict[str, Any] = {"machine": f"{platform.processor() or 'cpu'}, {os.cpu_count()} cores",
                           "load_start": os.getloadavg(), "batch": [], "memory": []}
    with tempfile.TemporaryDirectory() as tmp:
        # the schemas every engine compiles (each refuses some keywords the others take)
        pool = _candidates(2 * max(a.batch, a.memory))
        probe_path = os.path.join(tmp, "probe.json")
        Path(probe_path).write_text(json.dumps({"schemas": pool, "size": size}))
        common = set(range(len(pool)))
        for e in engines:
            common &= set(_run(pythons.get(e, sys.executable), "probe", e, probe_path, 0).get("ok", []))
        chosen = [pool[i] for i in sorted(common)]
        for i, c in enumerate(chosen):
            c["at"] = (7 * i) % max(1, len(c["ids"]))
        res["candidates"], res["common"] = len(pool), len(chosen)
        spec_path = os.path.join(tmp, "batch.json")
        Path(spec_path).write_text(json.dumps({"schemas": chosen[: a.batch], "size": size}))
        for e in engines:
            py = pythons.get(e, sys.executable)
            one, two = (_run(py, "batch", e, spec_path, a.rounds, n) for n in (1, 2))
            res["batch"].append({"engine": e, "t1": one, "t2": two})
            print(json.dumps(res["batch"][-1]), flush=True)
        if a.memory:
            mem_path = os.path.join(tmp, "memory.json")
            Path(mem_path).write_text(json.dumps({"schemas": chosen[: a.memory], "size": size}))
            # (the schemas are those the engines of --engines compile: another engine may refuse one)
            for e in (e for e in a.memory_engines.split(",") if e in engines):
                res["memory"].append(_run(pythons.get(e, sys.executable), "memory", e, mem_path, a.steps))
                print(json.dumps(res["memory"][-1]), flush=True)
    res["load_end"] = os.getloadavg()
    print(report(res))
    if a.out:
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        a.out.with_suffix(".md").write_text(report(res))


def report(res: dict[str, Any]) -> str:
    load = f"load {res['load_start'][0]:.2f} at the start, {res['load_end'][0]:.2f} at the end"
    lines = [f"# A batch of different JSON Schemas, tekken 131k ({res['machine']}; {load})", "",
             f"{res['common']} of {res['candidates']} candidate JSONSchemaBench schemas compile on every "
             "engine; the batch takes the first rows of them, the memory run the first schemas.", "",
             "| engine | rows | cold 1 thread (ms) | cold 2 threads (ms) | 2 / 1 | warm 1 thread (ms) | "
             "warm 2 threads (ms) | 2 / 1 | CPU per row, warm (us) | rows equal |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in res["batch"]:
        t1, t2 = r["t1"], r["t2"]
        if "error" in t1 or "error" in t2:
            lines.append(f"| {r['engine']} | error: {t1.get('error') or t2.get('error')} |")
            continue
        lines.append(f"| {r['engine']} {t1['version']} | {t1['rows']} | {t1['cold_ms']:.2f} | "
                     f"{t2['cold_ms']:.2f} | {t2['cold_ms'] / t1['cold_ms']:.2f} | {t1['warm_ms']:.3f} | "
                     f"{t2['warm_ms']:.3f} | {t2['warm_ms'] / t1['warm_ms']:.2f} | "
                     f"{t1['cpu_us_per_row']:.1f} | {t1['rows_sha256'] == t2['rows_sha256']} |")
    if res["memory"]:
        lines += ["", "| engine | schemas kept | steps | s | RSS after the vocabulary (MB) | "
                  "RSS at the end (MB) | growth (MB) | peak (MB) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in res["memory"]:
            if "error" in r:
                lines.append(f"| {r['engine']} | error: {r['error']} |")
                continue
            lines.append(f"| {r['engine']} {r['version']} | {r['schemas']} | {r['steps']} | {r['s']:.0f} | "
                         f"{r['rss_vocab_mb']:.0f} | {r['rss_mb']:.0f} | "
                         f"{r['rss_mb'] - r['rss_vocab_mb']:.0f} | {r['peak_mb']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
