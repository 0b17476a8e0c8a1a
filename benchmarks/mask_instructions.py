"""Instructions the native engine spends on masks, counted by callgrind: a figure the noise of a
shared machine does not blur (timings here swing 2x between runs; these repeat to a few parts in a
thousand), for comparing two builds of the engine.

The workload, MaskBench's method: ``--schemas`` JSONSchemaBench schemas spread over the sample
(every 12th that compiles), each compiled afresh, every valid instance fed token by token on tekken
with ``fill_mask`` before each token (first visits included). Only instructions inside the CFG
bindings ``fill`` and ``row`` (a mask: computed, or read from the caches) are counted; ``PYTHONHASHSEED=0``
keeps the grammars the same from run to run. Instructions are not time (a ``rep stosb`` counts one
per byte; a cache miss counts one): confirm a gain with the timed benchmarks, alternated.

Run: ``python benchmarks/mask_instructions.py [--schemas 30] [OTHER_ENGINE.so ...]``. Each extension
file given (``grammarmask/_engine.abi3.so`` built at another commit) is counted in a copy of the
package beside the checkout's own. Needs valgrind (Debian's ``valgrind`` package); about two minutes
per build at 30 schemas.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: the bindings that answer a CFG mask (src/python.rs), where counting is switched on and off:
#: ``fill`` writes ``fill_mask``'s row in place, ``row`` answered it before that binding existed
TOGGLES = ("*PyCfgGrammar*__pymethod_fill__*", "*PyCfgGrammar*__pymethod_row__*")


def work(n_schemas: int) -> int:
    """Compile the schemas and walk their instances; the number of masks asked for."""
    import numpy as np

    import grammarmask as gm  # (before bench_json_schema, which puts this checkout first on the path)
    from grammarmask.loaders import mistral_tokenizer

    sys.path.insert(0, str(HERE))
    from bench_json_schema import load

    tok = mistral_tokenizer("tekken")
    vocab = gm.Vocabulary.from_mistral(tok)
    chosen = []
    for _, _, data in load()[::12]:
        try:
            chosen.append((gm.JsonSchema(data["schema"]), data))
        except gm.GrammarError:
            continue
        if len(chosen) == n_schemas:
            break
    words = np.zeros((1, vocab.n_words), dtype=np.uint32)
    if os.environ.get("GRAMMARMASK_COUNTING"):  # set up: count from here on
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True, check=False)
    steps = 0
    for grammar, data in chosen:
        matcher_of = grammar.compile(vocab).matcher
        for case in data["tests"]:
            if not case["valid"]:
                continue
            m = matcher_of()
            for t in tok.encode(json.dumps(case["data"], ensure_ascii=False), bos=False, eos=False):
                m.fill_mask(words, 0)
                steps += 1
                if not m.try_advance(t):
                    break
    return steps


def count(package: Path, n_schemas: int, scratch: Path) -> tuple[int, int]:
    """Instructions inside the mask binding, and the masks asked for, with ``package`` imported."""
    out = scratch / f"callgrind.{package.parent.name}.out"
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=str(package.parent), GRAMMARMASK_COUNTING="1")
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
           *(f"--toggle-collect={t}" for t in TOGGLES), f"--callgrind-out-file={out}",
           sys.executable, __file__, "--worker", "--schemas", str(n_schemas)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    steps = re.search(r"^steps (\d+)$", run.stdout, re.M)
    if run.returncode != 0 or steps is None or not out.exists():
        raise SystemExit(f"callgrind run failed ({run.returncode}):\n{run.stderr[-2000:]}")
    if f"package {package}\n" not in run.stdout:
        raise SystemExit(f"the worker imported another grammarmask than {package}:\n{run.stdout}")
    totals = re.search(r"^(?:summary|totals): (\d+)", out.read_text(errors="replace"), re.M)
    if totals is None:
        raise SystemExit(f"no totals in {out}")
    return int(totals.group(1)), int(steps.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schemas", type=int, default=30, help="JSONSchemaBench schemas to walk")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("engines", nargs="*", type=Path, help="other builds of grammarmask/_engine.abi3.so")
    args = ap.parse_args()
    if args.worker:
        steps = work(args.schemas)
        import grammarmask

        print(f"package {Path(grammarmask.__file__).parent}\nsteps {steps}")
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("mask_instructions: needs valgrind (apt install valgrind)")
    with tempfile.TemporaryDirectory(prefix="gm-instructions-") as tmp:
        scratch = Path(tmp)
        builds = [("this checkout", ROOT / "grammarmask")]
        for i, so in enumerate(args.engines):
            if not so.is_file():
                raise SystemExit(f"mask_instructions: {so} is not a file")
            package = scratch / f"build{i}" / "grammarmask"
            shutil.copytree(ROOT / "grammarmask", package, ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copyfile(so, package / "_engine.abi3.so")
            builds.append((str(so), package))
        print("| engine | instructions in masks | masks | per mask |\n|---|---|---|---|")
        for name, package in builds:
            total, steps = count(package, args.schemas, scratch)
            print(f"| {name} | {total:,} | {steps:,} | {total // max(1, steps):,} |", flush=True)


if __name__ == "__main__":
    main()
