"""Cold vs warm compile in a new process with the on-disk cache (grammarmask.compile_cache).

For each grammar: ``--runs`` times, a fresh cache directory holding only tekken's vocabulary entry,
then two new processes in a row that each construct the grammar, compile it on tekken and compute
the first mask: the first finds no entry and writes it (cold), the second reads it (warm). Module
imports and the vocabulary load are outside the timed part. Prints medians, every run, the entries'
size and the load average (docs/api.md, "Compiled grammars in the cache").

    python benchmarks/disk_cache.py --runs 5 --engine python
    python benchmarks/disk_cache.py --runs 5 --engine native          # the native CFG engine
    python benchmarks/disk_cache.py json:path/to/schema.json lark:my.lark gbnf:my.gbnf
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(os.environ.get("GRAMMARMASK_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
BENCH = CORPUS / "json_schema" / "jsonschemabench"
DEFAULT = [
    f"json:{BENCH}/Github_medium/o9907.json",
    f"json:{BENCH}/Github_hard/o1051.json",
    f"json:{BENCH}/Github_medium/o60842.json",
    f"json:{BENCH}/Kubernetes/kb_1046_Normalized.json",
    f"json:{BENCH}/Glaiveai2K/calculate_area_04e119a4.json",
    f"lark:{CORPUS}/lark/syncode/sql.lark",
    f"lark:{CORPUS}/lark/syncode/java.lark",
    f"gbnf:{CORPUS}/gbnf/llama.cpp/json.gbnf",
    f"gbnf:{CORPUS}/gbnf/llama.cpp/c.gbnf",
]

# one process: imports and the vocabulary first (not timed), then constructor, compile, first mask
CHILD = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
import grammarmask as gm
import grammarmask.cfg, grammarmask.frontends.gbnf, grammarmask.frontends.json_schema  # noqa: F401
import grammarmask.frontends.jsonschema.compiler, grammarmask.frontends.lark, grammarmask.ir.builder  # noqa
import lark.load_grammar  # noqa: F401
vocab = gm.Vocabulary.from_mistral("tekken")
kind, path, engine = sys.argv[1:4]
t = time.perf_counter()
if kind == "json":
    g = gm.JsonSchema(json.loads(open(path).read()), strict=False)
else:
    g = (gm.Lark if kind == "lark" else gm.Gbnf).from_file(path)
g.compile(vocab, engine=engine).matcher().mask()
print(time.perf_counter() - t)
"""


def _run(cache: Path, kind: str, path: str, engine: str, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, path, engine], capture_output=True, text=True,
                         env={**env, "GRAMMARMASK_CACHE_DIR": str(cache)}, check=True)
    return float(out.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("grammars", nargs="*",
                    help="kind:path, kind one of json, lark, gbnf (default: 9 corpus grammars)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--engine", choices=["python", "native"], default="native",
                    help="native: the native CFG engine (GRAMMARMASK_NATIVE_CFG=1); python: the Python one")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.engine == "native":
        env["GRAMMARMASK_NATIVE_CFG"] = "1"
    with tempfile.TemporaryDirectory(prefix="grammarmask-disk-cache-bench-") as tmp:
        vocab_only = Path(tmp) / "vocab"
        load_vocab = "import grammarmask as gm; gm.Vocabulary.from_mistral('tekken')"
        subprocess.run([sys.executable, "-c", load_vocab],
                       env={**env, "GRAMMARMASK_CACHE_DIR": str(vocab_only)}, check=True)
        print(f"| grammar ({args.engine} CFG engine) | entries | cold | warm | load | cold runs | "
              "warm runs |")
        print("|---|---|---|---|---|---|---|")
        for spec in args.grammars or DEFAULT:
            kind, path = spec.split(":", 1)
            cold, warm = [], []
            for _ in range(args.runs):
                cache = Path(tmp) / "run"
                shutil.rmtree(cache, ignore_errors=True)
                shutil.copytree(vocab_only, cache)
                cold.append(_run(cache, kind, path, args.engine, env))
                warm.append(_run(cache, kind, path, args.engine, env))
            size = sum(p.stat().st_size for p in cache.iterdir() if not p.name.startswith("vocabulary-"))
            runs = [" ".join(f"{x:.2f}" for x in xs) for xs in (cold, warm)]
            print(f"| {Path(path).name} | {size / 1024:.0f} KB | {statistics.median(cold):.3f} s | "
                  f"{statistics.median(warm):.3f} s | {os.getloadavg()[0]:.1f} | {runs[0]} | {runs[1]} |",
                  flush=True)


if __name__ == "__main__":
    main()
