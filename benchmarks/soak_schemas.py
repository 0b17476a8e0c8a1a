"""Soak: one process compiles many distinct JSONSchemaBench-like schemas on tekken, 20 steps each.

    python benchmarks/soak_schemas.py [--count 10000] [--minutes M] [--parallel] [--llg-python PY]

The schemas are variants of the JSONSchemaBench sample in the shared corpus (only the sample schemas
grammarmask's front end takes): variant ``i`` of a sample schema renames some property keys (and
their ``required`` entries) with the suffix ``_i``, widens numeric and length bounds, appends a
value to string enums and sets a title, so every schema is distinct and almost all are distinct
grammars. They are written once to a JSON-lines file, and each engine runs them in its own process:

- grammarmask (this checkout, native engine, a fresh on-disk cache from ``cold_cache``):
  ``JsonSchema(schema).compile(tekken)``, then up to 20 steps of ``fill_mask`` and ``advance`` on a
  random legal token (seeded by the schema's index);
- llguidance (``--llg-python``, a venv with llguidance and numpy; tekken's token bytes are handed
  over in a file, so that process never imports grammarmask): ``grammar_from_json_schema``, an
  ``LLMatcher`` and the same 20-step walk.

Every 100 schemas each process reports its RSS (``/proc/self/status``, VmRSS and VmHWM), glibc's
heap in use and free (``mallinfo2``) and the load. The grammarmask process also checks every cache:
each live ``grammarmask.cache.Lru`` within its entry and byte bounds (the process-wide cache of
terminal automata and the vocabulary's compiled-grammar cache among them), and the compiled-grammar
cache within ``Limits.compiled_per_vocabulary``; ``--malloc-trim`` calls glibc's ``malloc_trim(0)``
before each sample. The engines run one after the other, or with ``--parallel`` at
the same time (each in its own process). ``--minutes`` stops an engine early (one after the other,
llguidance then runs the schemas grammarmask got through). Writes
``benchmarks/results/soak_schemas.{json,md}`` and, when matplotlib is importable (``--plot-python``),
``soak_schemas.png``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = Path(os.environ.get("GRAMMARMASK_CORPUS", ROOT.parent / "shared" / "corpus"))
BENCH = CORPUS / "json_schema" / "jsonschemabench"
STEPS = 20
SCHEMA_SECONDS = 60
BOUNDS_UP = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


# ---- the schemas ------------------------------------------------------------------------------------


def _mutate(node: Any, i: int, rng: random.Random) -> int:
    """Vary ``node`` in place (renames, wider bounds, one more enum value); how many changes."""
    changes = 0
    stack = [node]
    while stack:
        s = stack.pop()
        if isinstance(s, list):
            stack.extend(s)
            continue
        if not isinstance(s, dict):
            continue
        props = s.get("properties")
        if isinstance(props, dict) and props and rng.random() < 0.5:
            keys = list(props)
            renamed = {k: f"{k}_{i}" for k in rng.sample(keys, max(1, len(keys) // 3))}
            s["properties"] = {renamed.get(k, k): v for k, v in props.items()}
            if isinstance(s.get("required"), list):
                s["required"] = [renamed.get(k, k) if isinstance(k, str) else k for k in s["required"]]
            changes += 1
        for key in BOUNDS_UP:
            v = s.get(key)
            if type(v) is int and v >= 0 and rng.random() < 0.7:
                s[key] = v + 1 + rng.randrange(3)
                changes += 1
        enum = s.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(x, str) for x in enum):
            s["enum"] = [*enum, f"soak value {i}"]
            changes += 1
        for k, v in s.items():
            if k not in ("enum", "const", "default", "examples", "required"):
                stack.append(v)
    return changes


def variant(base: dict[str, Any], i: int) -> dict[str, Any]:
    """Variant ``i`` of ``base`` (deterministic)."""
    s = copy.deepcopy(base)
    _mutate(s, i, random.Random(i))
    s["title"] = f"soak schema {i}"
    return s


def _alarm(seconds: int) -> None:
    def hit(signum: int, frame: Any) -> None:
        raise TimeoutError(f"over {seconds} s")

    signal.signal(signal.SIGALRM, hit)


def usable_bases() -> list[dict[str, Any]]:
    """The sample's object schemas whose variant 0 grammarmask's front end takes (to_lark) in 10 s."""
    sys.path.insert(0, str(ROOT))
    import grammarmask as gm

    _alarm(10)
    out = []
    for f in sorted(BENCH.rglob("*.json")):
        try:
            base = json.loads(f.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(base, dict):
            continue
        try:
            signal.alarm(10)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                gm.JsonSchema(variant(base, 0)).to_lark()
            out.append(base)
        except Exception:  # noqa: BLE001 - a refused or slow sample schema is left out
            pass
        finally:
            signal.alarm(0)
    return out


def write_schemas(path: Path, count: int) -> int:
    bases = usable_bases()
    seen = set()
    with path.open("w") as fh:
        for i in range(count):
            s = variant(bases[i % len(bases)], i)
            text = json.dumps(s, sort_keys=True)
            assert text not in seen
            seen.add(text)
            fh.write(text + "\n")
    return len(bases)


# ---- the workers ------------------------------------------------------------------------------------


def rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    got = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            got[line.split(":")[0]] = int(line.split()[1]) / 1024
    return got["VmRSS"], got["VmHWM"]


def heap_mb() -> dict[str, float]:
    """glibc's view of this process's heap (``mallinfo2``): MB in use by live allocations (Python's
    and the Rust engine's) and MB free but kept by the allocator; {} where there is no glibc."""
    import ctypes

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
            "keepcost")]

    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = Mallinfo2
    m = fn()
    return {"heap_used": (m.uordblks + m.hblkhd) / 2**20, "heap_free": m.fordblks / 2**20}


def _legal(words: Any, size: int) -> Any:
    import numpy as np

    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:size]
    return np.flatnonzero(bits)


def check_caches(vocab: Any) -> dict[str, Any]:
    """Every live Lru within its bounds, and the vocabulary's compiled-grammar cache within its limit."""
    import gc

    import grammarmask as gm
    from grammarmask import cache

    lrus = [o for o in gc.get_objects() if type(o) is cache.Lru]
    over = [
        (o.limit, len(o), o.max_bytes, o.nbytes)
        for o in lrus
        if len(o) > o.limit or (o.max_bytes is not None and o.nbytes > o.max_bytes and len(o) > 1)
    ]
    store = cache._STORES.get(vocab, {})
    compiled = store.get("compiled")
    limit = gm.Limits().compiled_per_vocabulary
    shared = cache.automata()
    return {
        "lrus": len(lrus),
        "lru_entries": sum(len(o) for o in lrus),
        "lru_bytes": sum(o.nbytes for o in lrus),
        "over_bound": len(over) + (compiled is not None and len(compiled) > limit),
        "compiled_cached": len(compiled) if compiled is not None else 0,
        "compiled_bytes": compiled.nbytes if compiled is not None else 0,
        "automata": len(shared),
        "automata_bytes": shared.nbytes,
        **heap_mb(),
    }


def soak(
    schemas: Path,
    count: int,
    seconds: float,
    every: int,
    walk: Callable[[str, random.Random], int],
    extra: Callable[[], dict[str, Any]] = dict,
) -> None:
    """The loop both workers share: ``walk(line, rng)`` compiles one schema, steps and returns the
    steps taken; a refusal or a timeout is counted. Prints a JSON line every ``every`` schemas (RSS,
    time, counts and ``extra()``) and a final one."""
    t_start = time.monotonic()
    _alarm(SCHEMA_SECONDS)
    done = refused = steps = 0
    print(json.dumps({"n": 0, "rss": rss_mb(), "t": 0.0, **extra()}), flush=True)
    with schemas.open() as fh:
        for i, line in enumerate(fh):
            if i >= count or time.monotonic() - t_start > seconds:
                break
            signal.alarm(SCHEMA_SECONDS)
            try:
                steps += walk(line, random.Random(i))
            except Exception as e:  # noqa: BLE001 - a refusal or a timeout is counted, not fatal
                refused += 1
                if refused <= 20:
                    print(json.dumps({"error": f"{i}: {type(e).__name__}: {str(e)[:160]}"}), flush=True)
            finally:
                signal.alarm(0)
            done += 1
            if done % every == 0:
                row = {"n": done, "rss": rss_mb(), "t": time.monotonic() - t_start}
                row["load"] = os.getloadavg()[0]
                print(json.dumps({**row, "refused": refused, "steps": steps, **extra()}), flush=True)
    final = {"final": done, "refused": refused, "steps": steps, "rss": rss_mb()}
    print(json.dumps({**final, "t": time.monotonic() - t_start}), flush=True)


def worker_grammarmask(schemas: Path, count: int, seconds: float, every: int, trim: bool = False) -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    import cold_cache
    import numpy as np

    cold_cache.use()  # a fresh on-disk cache: no grammar compiled by an earlier run is read back

    import grammarmask as gm

    vocab = gm.Vocabulary.from_mistral("tekken")
    words = np.zeros((1, (vocab.size + 31) // 32), dtype=np.int32)
    eos = vocab.eos_token_id
    warnings.simplefilter("ignore")

    def walk(line: str, rng: random.Random) -> int:
        m = gm.JsonSchema(json.loads(line)).compile(vocab).matcher()
        for step in range(STEPS):
            m.fill_mask(words, 0)
            legal = _legal(words[0], vocab.size)
            legal = legal[legal != eos]
            if not legal.size:
                return step
            m.advance(int(rng.choice(legal)))
        return STEPS

    def sample() -> dict[str, Any]:
        if trim:  # hand the allocator's free pages back before each sample (--malloc-trim)
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        return check_caches(vocab)

    soak(schemas, count, seconds, every, walk, sample)


def worker_llguidance(schemas: Path, count: int, seconds: float, every: int, vocab_file: Path) -> None:
    import llguidance as llg
    import numpy as np

    spec = json.loads(vocab_file.read_text())
    tokens = [bytes.fromhex(h) for h in spec["tokens"]]
    eos, specials = spec["eos"], set(spec["specials"]) | {spec["eos"]}

    class Tok:  # llguidance.TokenizerWrapper's duck type (as benchmarks/engines/llguidance.py)
        def __init__(self, tokens: list[bytes]) -> None:
            self.tokens = [b"\xff[special_%d]" % i if i in specials else b for i, b in enumerate(tokens)]
            self.eos_token_id = eos
            self.bos_token_id = None
            self.special_token_ids = sorted(specials)

            self.by_bytes = {b: i for i, b in enumerate(tokens) if i not in specials and b}

        def __call__(self, s: bytes | str) -> list[int]:  # greedy longest match (forced bytes only)
            data = s.encode() if isinstance(s, str) else s
            out, i = [], 0
            while i < len(data):
                for j in range(min(len(data), i + 32), i, -1):
                    t = self.by_bytes.get(data[i:j])
                    if t is not None:
                        out.append(t)
                        i = j
                        break
                else:
                    i += 1
            return out

    tok = llg.LLTokenizer(llg.TokenizerWrapper(Tok(tokens)), n_vocab=len(tokens))
    del tokens
    words = np.zeros((1, (len(spec["tokens"]) + 31) // 32), dtype=np.int32)
    size = len(spec["tokens"])
    del spec

    def walk(line: str, rng: random.Random) -> int:
        grammar = llg.LLMatcher.grammar_from_json_schema(line)
        is_err, msgs = llg.LLMatcher.validate_grammar_with_warnings(grammar, tok)
        if is_err:
            raise ValueError("; ".join(msgs)[:160])
        m = llg.LLMatcher(tok, grammar, log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        for step in range(STEPS):
            m.unsafe_compute_mask_ptr(words.ctypes.data, words.size * words.itemsize)
            legal = _legal(words[0], size)
            legal = legal[legal != eos]
            if not legal.size:
                return step
            if not m.consume_token(int(rng.choice(legal))):
                raise ValueError(m.get_error())
        return STEPS

    soak(schemas, count, seconds, every, walk, heap_mb)


# ---- the driver -------------------------------------------------------------------------------------


def run_worker(name: str, cmd: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
    """Run one worker; its JSON lines, each also echoed prefixed with ``name``."""
    rows = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None
        for line in p.stdout:
            rows.append(json.loads(line))
            print(name, line.rstrip(), flush=True)
    return rows


def markdown(res: dict[str, Any]) -> str:
    gm_rows = [r for r in res["grammarmask"] if "n" in r]
    llg_rows = {r["n"]: r for r in res["llguidance"] if "n" in r}
    out = [
        "# Soak: distinct JSON Schemas in one process (tekken 131k, 20 steps each)",
        "",
        f"{res['note']}",
        *(["", res["before"]] if res.get("before") else []),
        "",
        "RSS and peak (VmHWM) from /proc; heap: glibc's mallinfo2, MB in use by live allocations (Python's "
        "and the Rust engine's) and MB free but kept by the allocator; automata: the process-wide cache of "
        "terminal DFAs (entries, MB of tables); compiled: the grammars kept per vocabulary (count, MB of "
        "tables); over bound: caches over their entry or byte bound (every live Lru).",
        "",
        "| schemas | grammarmask RSS MB | peak MB | heap used | heap free | s | refused | automata | "
        "compiled | over bound | llguidance RSS MB | peak MB | heap used | s | refused |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    step = max(1, len(gm_rows) // 30)

    def mb(r: dict[str, Any], key: str) -> str:
        return f"{r[key]:.0f}" if key in r else ""

    for k, r in enumerate(gm_rows):
        if k % step and k != len(gm_rows) - 1:
            continue
        lr = llg_rows.get(r["n"], {})
        lrss = lr.get("rss", ["", ""])
        rss, heap = f"{r['rss'][0]:.0f} | {r['rss'][1]:.0f}", f"{mb(r, 'heap_used')} | {mb(r, 'heap_free')}"
        kept = f"{r.get('compiled_cached', '')} ({r.get('compiled_bytes', 0) / 2**20:.0f})"
        automata = f"{r.get('automata', '')} ({r.get('automata_bytes', 0) / 2**20:.0f})"
        out.append(
            f"| {r['n']} | {rss} | {heap} | {r['t']:.0f} | {r.get('refused', 0)} | "
            f"{automata} | {kept} | {r['over_bound']} | "
            + (
                f"{lrss[0]:.0f} | {lrss[1]:.0f} | {mb(lr, 'heap_used')} | {lr['t']:.0f} | "
                f"{lr.get('refused', 0)} |"
                if lr
                else "| | | | |"
            )
        )
    extra = [k for k, v in res.items() if isinstance(v, list) and k not in ("grammarmask", "llguidance")]
    for name in extra:  # added with --replot --add: RSS only
        rows = [r for r in res[name] if "n" in r]
        out += ["", f"{name}:", "", "| schemas | RSS MB | peak MB | s | compiled cached | over bound |"]
        out.append("|---|---|---|---|---|---|")
        out += [
            f"| {r['n']} | {r['rss'][0]:.0f} | {r['rss'][1]:.0f} | {r['t']:.0f} | "
            f"{r.get('compiled_cached', '')} | {r.get('over_bound', '')} |"
            for r in rows
        ]
    for name in ("grammarmask", "llguidance", *extra):
        fin = [r for r in res[name] if "final" in r]
        if fin:
            f = fin[0]
            out.append(
                f"\n{name}: {f['final']} schemas in {f['t']:.0f} s, {f['refused']} refused, "
                f"{f['steps']} steps; final RSS {f['rss'][0]:.0f} MB, peak {f['rss'][1]:.0f} MB."
            )
    return "\n".join(out) + "\n"


PLOT = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
res = json.load(open(sys.argv[1]))
fig, ax = plt.subplots(figsize=(8, 4.5))
for name, rows in res.items():
    rows = [r for r in rows if "n" in r] if isinstance(rows, list) else []
    if rows:
        line, = ax.plot([r["n"] for r in rows], [r["rss"][0] for r in rows], label=name + " RSS")
        heap = [(r["n"], r["heap_used"]) for r in rows if "heap_used" in r]
        if heap:
            ax.plot(*zip(*heap), linestyle="--", color=line.get_color(), label=name + " heap in use")
ax.set_xlabel("distinct schemas compiled (20 steps each)")
ax.set_ylabel("MB (RSS solid, heap in use dashed)")
ax.set_ylim(bottom=0)
ax.set_title("One process, JSONSchemaBench-like schemas, tekken 131k")
ax.legend(fontsize=7, loc="upper right", bbox_to_anchor=(1, 0.9), framealpha=0.9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=10_000)
    ap.add_argument("--minutes", type=float, default=0.0, help="stop each engine after this (0: no limit)")
    ap.add_argument("--llg-python", default="/tmp/benchvenv/bin/python")
    ap.add_argument("--plot-python", default=sys.executable, help="a Python with matplotlib")
    ap.add_argument("--work", type=Path, default=Path("/tmp/grammarmask-soak"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "soak_schemas")
    ap.add_argument("--every", type=int, default=100, help="sample RSS every this many schemas")
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="run the two engines at the same time (each in its own process)",
    )
    ap.add_argument("--nice", type=int, default=19, help="the workers' niceness")
    ap.add_argument("--before", default="", help="a line on an earlier run, kept in the results")
    ap.add_argument(
        "--malloc-trim",
        action="store_true",
        help="grammarmask worker: glibc malloc_trim(0) before each sample (as a server could, now and then)",
    )
    ap.add_argument("--worker", choices=["grammarmask", "llguidance"])
    ap.add_argument("--schemas", type=Path)
    ap.add_argument("--vocab-file", type=Path)
    ap.add_argument(
        "--replot",
        action="store_true",
        help="write the .md and .png again from the .json (after --add); run nothing",
    )
    ap.add_argument(
        "--add",
        nargs=2,
        action="append",
        metavar=("NAME", "LOG"),
        help="with --replot: add a worker's JSON lines (another engine or limits) as curve NAME",
    )
    a = ap.parse_args()
    if a.replot:
        res = json.loads(a.out.with_suffix(".json").read_text())
        for name, log in a.add or []:
            res[name] = [json.loads(x) for x in Path(log).read_text().splitlines() if x.startswith('{"')]
        write_results(res, a.out, a.plot_python)
        return
    seconds = a.minutes * 60 if a.minutes else float("inf")
    if a.worker == "grammarmask":
        worker_grammarmask(a.schemas, a.count, seconds, a.every, a.malloc_trim)
        return
    if a.worker == "llguidance":
        worker_llguidance(a.schemas, a.count, seconds, a.every, a.vocab_file)
        return
    a.work.mkdir(parents=True, exist_ok=True)
    schemas, vocab_file = a.work / "schemas.jsonl", a.work / "tekken.json"
    n_bases = write_schemas(schemas, a.count)
    sys.path.insert(0, str(ROOT))
    import grammarmask as gm

    v = gm.Vocabulary.from_mistral("tekken")
    vocab_file.write_text(
        json.dumps(
            {
                "tokens": [b.hex() for b in v.token_bytes],
                "eos": v.eos_token_id,
                "specials": sorted(v.special_ids),
            }
        )
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    me = [
        str(Path(__file__).resolve()),
        "--schemas",
        str(schemas),
        "--vocab-file",
        str(vocab_file),
        "--every",
        str(a.every),
    ]

    def cmd(name: str, python: str, count: int) -> list[str]:
        worker = ["--worker", name, "--count", str(count), "--minutes", str(a.minutes)]
        return ["nice", "-n", str(a.nice), python, *me, *worker]

    load0 = os.getloadavg()
    res: dict[str, Any] = {}
    if a.parallel:
        with ThreadPoolExecutor(2) as pool:
            gm_run = pool.submit(run_worker, "grammarmask", cmd("grammarmask", sys.executable, a.count), env)
            llg_run = pool.submit(
                run_worker, "llguidance", cmd("llguidance", a.llg_python, a.count), dict(os.environ)
            )
            res["grammarmask"], res["llguidance"] = gm_run.result(), llg_run.result()
    else:
        res["grammarmask"] = run_worker("grammarmask", cmd("grammarmask", sys.executable, a.count), env)
    got = next((r["final"] for r in res["grammarmask"] if "final" in r), a.count)
    if not a.parallel:
        res["llguidance"] = run_worker("llguidance", cmd("llguidance", a.llg_python, got), dict(os.environ))
    load1 = os.getloadavg()
    how = "at the same time, each in its own process" if a.parallel else "one after the other"
    res["note"] = (
        f"{got} of {a.count} schemas (variants of {n_bases} JSONSchemaBench sample schemas); "
        f"machine load (1/5/15 min) {load0[0]:.1f}/{load0[1]:.1f}/{load0[2]:.1f} at the start, "
        f"{load1[0]:.1f}/{load1[1]:.1f}/{load1[2]:.1f} at the end, on 2 cores shared with other "
        f"jobs; both engines run under nice -n {a.nice}, {how}."
    )
    if a.before:
        res["before"] = a.before
    write_results(res, a.out, a.plot_python)


def write_results(res: dict[str, Any], out: Path, plot_python: str) -> None:
    """``out``.json, .md and (with matplotlib in ``plot_python``) .png."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(res))
    plot = subprocess.run(
        [plot_python, "-c", PLOT, str(out.with_suffix(".json")), str(out.with_suffix(".png"))],
        capture_output=True,
        text=True,
    )
    if plot.returncode:
        print("no plot:", plot.stderr.strip().splitlines()[-1:], file=sys.stderr)


if __name__ == "__main__":
    main()
