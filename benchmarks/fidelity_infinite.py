"""The aligned sampler on infinite languages with the real model (issue 17): convergence as the
particles grow, on SmolLM2-135M-Instruct.

An infinite language has no enumerable truth, so consistency is shown the way SMC's is: the estimates
of a few expectations under ``p(y | y in L)`` (the probability of the most likely answer, a length, a
field's value) and of ``log Z = log P(L)`` settle as the particles grow (4 to 1,024) and their spread
across independent runs (seeds) shrinks. The N = 1 rows are the masked sampler (one particle that
samples EOS like any other token): its estimates are where masking lands. Where a length bound
makes the language finite (``bounded``), the bounded language is enumerated exactly with the same
model (every tokenization, :func:`grammarmask.fidelity.exact_distributions`)
and SMC on it is scored by KL against the truth, as benchmarks/fidelity.py does.

Every SMC run here calls the model (:class:`grammarmask.integrations.transformers.BatchedHF`: the
prompt's KV cache once, one token per distinct live particle per step); the bounded SMC runs replay the
recorded distributions of the enumeration. The target is conditioned on finishing within
``max_tokens`` tokens (each task's bound is far above its typical output).

Writes benchmarks/results/fidelity_infinite.json (every run's weighted strings), .md and .png::

    PYTHONPATH=. nice /tmp/fresh/.venv/bin/python benchmarks/fidelity_infinite.py
    PYTHONPATH=. /tmp/fresh/.venv/bin/python benchmarks/fidelity_infinite.py --replot  # no model
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
FRUITS = 'start: item (", " item)*\nitem: "apple" | "banana" | "cherry" | "grape"\n'
# at most two items: 20 strings, 11,023 token paths (three items passed a 5,000-path budget)
FRUITS_2 = 'start: item | item ", " item\nitem: "apple" | "banana" | "cherry" | "grape"\n'

TASKS: list[dict[str, Any]] = [
    {"name": "count", "kind": "regex", "grammar": "[0-9]+", "bounded": "[0-9]{1,3}", "max_tokens": 8,
     "prompt": "How many legs does a spider have? Answer with a number."},
    {"name": "fruits", "kind": "lark", "grammar": FRUITS, "bounded": FRUITS_2, "max_tokens": 24,
     "prompt": "Name some fruits, separated by commas."},
    {"name": "city", "kind": "regex", "grammar": "[A-Z][a-z]*", "bounded": None, "max_tokens": 8,
     "prompt": "What is the capital of Australia? Answer with the city."},
    {"name": "person", "kind": "json", "grammar": PERSON, "bounded": None, "max_tokens": 24,
     "prompt": "Describe a fictional person as JSON with a name and an age."},
]
# runs (seeds) per particle count: at least 4 at the large counts (the spread of log Z needs a few);
# sized for a 2-core machine shared with other jobs
RUNS = {1: 32, 4: 16, 16: 8, 64: 6, 256: 4, 1024: 4}


def _grammar(kind: str, g: Any) -> Any:
    import grammarmask as gm

    if kind == "regex":
        return gm.Regex(g)
    if kind == "json":
        return gm.JsonSchema(g, whitespace="compact")
    return gm.Lark(g)


def _describe(t: dict[str, Any]) -> str:
    if t["kind"] == "json":
        return "JSON Schema {name: string, age: integer} (compact)"
    if t["kind"] == "lark":
        return 'Lark `item (", " item)*`, 4 fruits'
    return f"regex `{t['grammar']}`"


# Expectations under p(y | y in L), each a function of the output text
def _json_field(y: str, key: str) -> Any:
    try:
        return json.loads(y).get(key)
    except (ValueError, AttributeError):
        return None


EXPECT: dict[str, list[tuple[str, Callable[[str], float]]]] = {
    "count": [("P(y = 8)", lambda y: float(y == "8")), ("E[bytes]", lambda y: float(len(y)))],
    "city": [("P(y = Canberra)", lambda y: float(y == "Canberra")),
             ("P(y = Sydney)", lambda y: float(y == "Sydney")), ("E[bytes]", lambda y: float(len(y)))],
    "person": [("P(name = John)", lambda y: float(_json_field(y, "name") == "John")),
               ("P(age < 30)", lambda y: float((_json_field(y, "age") or 0) < 30)),
               ("E[bytes]", lambda y: float(len(y)))],
    "fruits": [("P(first = apple)", lambda y: float(y.startswith("apple"))),
               ("E[items]", lambda y: float(y.count(", ") + 1))],
}


def _estimates(dist: dict[str, float], task: str) -> dict[str, float]:
    return {name: sum(w * f(y) for y, w in dist.items()) for name, f in EXPECT[task]}


def _masked(model: Any, compiled: Any, prompt: list[int], max_tokens: int, seed: int) -> Any:
    """The masked sampler as one SMC particle that samples EOS like any other token (the N = 1 rows):
    an AlignedResult-like record of its one string, whose weight is its path's ``p(y) / q(y)``."""
    from types import SimpleNamespace

    from grammarmask.fidelity import PathBudgetExceeded
    from grammarmask.fidelity.smc import run_smc

    r = run_smc(model, compiled, prompt, n_particles=1, ess_threshold=0.0, max_tokens=max_tokens,
                temperature=1.0, batch_size=1, rng=np.random.default_rng(seed), harvest_eos=False)
    if not r.tokens:
        raise PathBudgetExceeded("max_tokens", max_tokens, "the masked sampler did not finish")
    text = compiled.vocab.decode(r.tokens[0])
    return SimpleNamespace(log_z=r.log_z, model_rows=r.model_rows, n_resamples=0,
                           distribution=lambda: {text: 1.0})


def run(a: argparse.Namespace, res: dict[str, Any], save: Callable[[], None]) -> None:
    import torch

    import grammarmask as gm
    from grammarmask.fidelity import (
        PathBudgetExceeded,
        aligned_sample,
        kl_divergence,
        total_variation,
    )
    from grammarmask.integrations.transformers import BatchedHF
    from grammarmask.models import smollm2

    sys.path.insert(0, str(HERE))
    from fidelity import _smc_estimate, enumerate_cached, timed_enumeration

    torch.set_num_threads(a.threads)
    t0 = time.time()
    tok, model = smollm2()
    res["load_s"] = round(time.time() - t0, 1)
    vocab = gm.Vocabulary.from_hf(tok, size=model.config.vocab_size)
    hf = BatchedHF(model)
    done = {c["name"]: c for c in res["tasks"]}
    for t in TASKS:
        if a.only and t["name"] not in a.only:
            continue
        rec = done.get(t["name"])
        if rec is None:
            rec = {"name": t["name"], "language": _describe(t), "prompt": t["prompt"],
                   "max_tokens": t["max_tokens"], "levels": {}}
            res["tasks"].append(rec)
            done[t["name"]] = rec
        prompt = list(tok.apply_chat_template([{"role": "user", "content": t["prompt"]}],
                                              add_generation_prompt=True, tokenize=True)["input_ids"])
        hf.set_prompt(prompt)
        compiled = _grammar(t["kind"], t["grammar"]).compile(vocab)
        for n in a.particles:
            if str(n) in rec["levels"]:
                continue
            runs = []
            tl = time.time()
            for seed in range(a.runs.get(n, 4)):
                ts = time.time()
                try:
                    r = (_masked(hf, compiled, prompt, t["max_tokens"], seed) if n == 1 else
                         aligned_sample(hf, vocab, compiled, prompt, n_particles=n,
                                        max_tokens=t["max_tokens"], batch_size=a.batch, seed=seed))
                except PathBudgetExceeded:  # no particle finished: the estimate of P(L) is 0
                    runs.append({"seed": seed, "log_z": None, "rows": 0, "resamples": 0,
                                 "s": round(time.time() - ts, 2), "dist": {}})
                    continue
                dist: dict[str, float] = {}
                for y, w in r.distribution().items():
                    s = y.decode("utf-8", "replace")
                    dist[s] = dist.get(s, 0.0) + w
                runs.append({"seed": seed, "log_z": r.log_z, "rows": r.model_rows, "resamples": r.n_resamples,
                             "s": round(time.time() - ts, 2),
                             "dist": {y: w for y, w in dist.items() if w >= 1e-5}})
            rec["levels"][str(n)] = {"runs": runs, "s": round(time.time() - tl, 1)}
            ests = [_estimates(x["dist"], t["name"]) for x in runs if x["dist"]] or [{}]
            lz = [x["log_z"] for x in runs if x["log_z"] is not None] or [np.nan]
            first = EXPECT[t["name"]][0][0]
            print(f"{t['name']:>7} N={n:>4}: {len(runs)} runs in {time.time() - tl:5.0f} s, "
                  f"{sum(x['rows'] for x in runs) / len(runs):7.0f} rows/run; log Z {np.mean(lz):8.3f} "
                  f"± {np.std(lz):.3f}; {first} {np.mean([e.get(first, np.nan) for e in ests]):.3f} "
                  f"± {np.std([e.get(first, np.nan) for e in ests]):.3f}  (load {os.getloadavg()[0]:.2f})",
                  flush=True)
            save()
        if t["bounded"] and "bounded" not in rec:
            bc = _grammar(t["kind"], t["bounded"]).compile(vocab)
            e = enumerate_cached(a.enum_cache, f"{t['name']}-bounded", lambda c=bc, p=prompt:
                                 timed_enumeration(hf, vocab, c, p, a.max_paths, a.batch))
            d = e["dist"]
            replay = d.replay_model()
            b: dict[str, Any] = {
                "language": t["bounded"].strip().split("\n")[0], "strings": len(d.exact),
                "paths": len(d.paths),
                "log_p_language": d.log_mass, "enumerate_s": round(e["s"], 1),
                "masked": {"kl": kl_divergence(d.masked, d.exact), "tv": total_variation(d.masked, d.exact)},
                "exact_estimates": _estimates({y.decode(): p for y, p in d.exact.items()}, t["name"]),
                "masked_estimates": _estimates({y.decode(): p for y, p in d.masked.items()}, t["name"]),
                "smc": {}}
            for n in sorted(RUNS)[1:]:  # replayed: every count, whatever --particles says
                runs_n = max(20, 4096 // n)
                est = _smc_estimate(replay, vocab, bc, prompt, n, runs_n, seed=2000 + n)
                b["smc"][str(n)] = {"runs": runs_n, "kl": kl_divergence(est, d.exact),
                                    "tv": total_variation(est, d.exact)}
            rec["bounded"] = b
            print(f"{t['name']:>7} bounded: {len(d.exact)} strings, {len(d.paths)} paths; masked KL "
                  f"{b['masked']['kl']:.4f}; SMC KL " +
                  ", ".join(f"{n}: {v['kl']:.5f}" for n, v in b["smc"].items()), flush=True)
            save()


def summarize(res: dict[str, Any], modes: dict[str, str] | None = None) -> None:
    """Per task and particle count: the mean and spread across runs of each estimate and of log Z.
    ``P(y = mode)`` uses the most likely output of the runs with the most particles (or ``modes``)."""
    for rec in res["tasks"]:
        rec["summary"] = {}
        if not rec["levels"]:
            continue
        top = max(rec["levels"], key=int)
        pooled: dict[str, float] = {}
        for x in rec["levels"][top]["runs"]:
            for y, w in x["dist"].items():
                pooled[y] = pooled.get(y, 0.0) + w
        mode = max(pooled, key=lambda y: pooled[y]) if pooled else ""
        if modes and rec["name"] in modes:
            mode = modes[rec["name"]]
        rec["mode"] = mode
        expect = [(f"P(y = {mode})", lambda y, m=mode: float(y == m)), *EXPECT[rec["name"]]]
        rec["expectations"] = [name for name, _ in expect]
        for n, lev in rec["levels"].items():
            ok = [x for x in lev["runs"] if x["dist"] and x["log_z"] is not None and x["log_z"] > -math.inf]
            lz = np.array([x["log_z"] for x in ok])
            rows = float(np.mean([x["rows"] for x in ok])) if ok else 0.0
            s: dict[str, Any] = {"runs": len(lev["runs"]), "unfinished": len(lev["runs"]) - len(ok),
                                 "rows_per_run": rows, "s_per_run": lev["s"] / len(lev["runs"]),
                                 "log_z": _mean_sd(lz)}
            for name, f in expect:
                s[name] = _mean_sd(np.array([sum(w * f(y) for y, w in x["dist"].items()) for x in ok]))
            rec["summary"][n] = s


def _mean_sd(v: Any) -> list[float]:
    if v.size == 0:
        return [float("nan"), float("nan")]
    return [float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else 0.0]


def report(res: dict[str, Any]) -> str:
    lines = [
        f"SmolLM2-135M-Instruct on the CPU (torch threads: {res['threads']}, niced; load average "
        f"{res.get('load', 'not recorded')}). "
        "Each cell: mean ± standard deviation across independent runs of one run's estimate (its final "
        "particles' normalised weights); N = 1 is the masked sampler (its spread is that of one sample). "
        "log Z: the log of SMC's unbiased estimate of P(L), which is exactly the masked path's "
        "probability ratio at N = 1. rows/run: model rows computed per run (distinct live paths per step).",
        "",
    ]
    for rec in res["tasks"]:
        names = rec["expectations"]
        lines += [f"**{rec['name']}**: {rec['language']}, max {rec['max_tokens']} tokens. Prompt: "
                  f"\"{rec['prompt']}\"", "",
                  "| N | runs (unfinished) | " + " | ".join(names) + " | log Z | rows/run | s/run |",
                  "|---:|---:|" + "---:|" * (len(names) + 3)]
        for n in sorted(rec["summary"], key=int):
            s = rec["summary"][n]
            cells = [f"{s[x][0]:.3f} ± {s[x][1]:.3f}" for x in names]
            fails = f" ({s['unfinished']})" if s["unfinished"] else ""
            lines.append(f"| {n} | {s['runs']}{fails} | " + " | ".join(cells) +
                         f" | {s['log_z'][0]:.3f} ± {s['log_z'][1]:.3f} | {s['rows_per_run']:.0f} | "
                         f"{s['s_per_run']:.1f} |")
        b = rec.get("bounded")
        if b:
            lines += ["", f"Bounded to a finite language (`{b['language']}`...: {b['strings']} strings, "
                      f"{b['paths']} token paths, enumerated exactly in {b['enumerate_s']:.0f} s; its exact "
                      f"log P(L) {b['log_p_language']:.3f} bounds the unbounded log Z from below): masked KL "
                      f"{b['masked']['kl']:.4f} (TV {b['masked']['tv']:.3f}); SMC KL by particles: " +
                      ", ".join(f"{n}: {v['kl']:.5f}" for n, v in b["smc"].items()) +
                      ". Exact " + ", ".join(f"{k} = {v:.3f}" for k, v in b["exact_estimates"].items()) +
                      "; masked " + ", ".join(f"{k} = {v:.3f}" for k, v in b["masked_estimates"].items())
                      + "."]
        lines.append("")
    g = res.get("genlm")
    if g and g.get("tasks"):
        lines += [f"{g['engine']} on the same tasks ({g['threads']} thread; its runs call the model too; "
                  "log Z is its `log_ml`):", "",
                  "| task | N | runs (unfinished) | P(y = mode) | log Z | s/run |",
                  "|---|---:|---:|---:|---:|---:|"]
        for rec in g["tasks"]:
            for n in sorted(rec["summary"], key=int):
                s = rec["summary"][n]
                fails = f" ({s['unfinished']})" if s["unfinished"] else ""
                pm = s[rec["expectations"][0]]
                lines.append(f"| {rec['name']} | {n} | {s['runs']}{fails} | {pm[0]:.3f} ± {pm[1]:.3f} | "
                             f"{s['log_z'][0]:.3f} ± {s['log_z'][1]:.3f} | {s['s_per_run']:.1f} |")
        lines.append("")
    return "\n".join(lines)


PLOT = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
res = json.load(open(sys.argv[1]))
tasks = res["tasks"]
fig, axes = plt.subplots(1, 3, figsize=(14, 4))
colors = {}
for rec in tasks:
    ns = sorted(int(n) for n in rec["summary"])
    m = [rec["summary"][str(n)]["log_z"][0] for n in ns]
    sd = [rec["summary"][str(n)]["log_z"][1] for n in ns]
    line = axes[0].errorbar(ns, [v - m[-1] for v in m], yerr=sd, marker="o", capsize=3, label=rec["name"])
    colors[rec["name"]] = line[0].get_color()
    big = [n for n in ns if n > 1]
    axes[1].plot(big, [rec["summary"][str(n)]["log_z"][1] for n in big], marker="o", label=rec["name"],
                 color=colors[rec["name"]])
    b = rec.get("bounded")
    if b:
        bn = sorted(int(n) for n in b["smc"])
        axes[2].plot(bn, [max(b["smc"][str(n)]["kl"], 1e-6) for n in bn], marker="o",
                     color=colors[rec["name"]], label=f"{rec['name']} (bounded): SMC")
        axes[2].axhline(b["masked"]["kl"], ls="--", color=colors[rec["name"]], label=f"{rec['name']}: masked")
axes[0].set_title("log Z estimate (minus the largest N's), mean ± sd")
axes[1].set_title("sd of log Z across runs")
axes[2].set_title("bounded versions: KL to the exact conditional")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xlabel("particles (1 = masked sampler)")
    ax.legend(fontsize=7)
axes[1].set_yscale("log")
axes[2].set_yscale("log")
axes[2].set_ylabel("KL, nats")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: far faster than 2 on a "
                    "busy 2-core machine)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--max-paths", type=int, default=20000)
    ap.add_argument("--particles", nargs="*", type=int, default=sorted(RUNS))
    ap.add_argument("--runs", type=json.loads, default={}, help='JSON {"N": runs} overriding the defaults')
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--enum-cache", type=Path, help="a folder keeping the bounded versions' enumerations "
                    "(pickled) for later runs (delete it when the model or a task changes)")
    ap.add_argument("--plot-python", default=sys.executable, help="a Python with matplotlib")
    ap.add_argument("--out", type=Path, default=RESULTS / "fidelity_infinite")
    ap.add_argument("--replot", action="store_true", help="no model: summarise --out's JSON again")
    ap.add_argument("--add", nargs="*", type=Path, default=[],
                    help="result JSONs of this script run elsewhere (--out) whose tasks are merged in")
    ap.add_argument("--genlm-json", type=Path, default=RESULTS / "fidelity_infinite_genlm.json",
                    help="benchmarks/fidelity_infinite_genlm.py's results, tabled beside (when present)")
    a = ap.parse_args()
    a.runs = {**RUNS, **{int(k): int(v) for k, v in a.runs.items()}}
    path = a.out.with_suffix(".json")
    res: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    res.setdefault("tasks", [])
    res.update(model="SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized to float32)")

    def save() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=None) + "\n")

    if not a.replot:
        res["threads"] = a.threads
        run(a, res, save)
        res["load"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        save()
    for other in a.add:  # tasks run in another process (--out elsewhere): merged in, with its load
        extra = json.loads(other.read_text())
        names = {t["name"] for t in extra["tasks"]}
        res["tasks"] = [t for t in res["tasks"] if t["name"] not in names] + extra["tasks"]
        res["load"] = f"{res.get('load', 'not recorded')}; {', '.join(sorted(names))}: {extra['load']}"
    summarize(res)
    if a.genlm_json.exists():
        res["genlm"] = json.loads(a.genlm_json.read_text())
        summarize(res["genlm"], {t["name"]: t["mode"] for t in res["tasks"] if "mode" in t})
    save()
    a.out.with_suffix(".md").write_text(report(res))
    print(report(res))
    script = a.out.parent / "_fidelity_infinite_plot.py"
    script.write_text(PLOT)
    try:
        subprocess.run([a.plot_python, str(script), str(path), str(a.out.with_suffix(".png"))], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"no plot ({e}): pass --plot-python with a Python that has matplotlib", file=sys.stderr)
    finally:
        script.unlink()


if __name__ == "__main__":
    main()
