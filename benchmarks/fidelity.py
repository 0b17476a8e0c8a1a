"""Distribution fidelity on a real model (issue 17): the gap token-by-token masking adds, and the
aligned sampler that removes it, on SmolLM2-135M-Instruct.

For every finite language (label sets, short regexes), with the chat-templated prompt:

1. ``exact_distributions`` enumerates every token path of every string (all tokenizations) and scores
   each prefix with the real model (``grammarmask.integrations.transformers.BatchedHF``: one tree
   level per batch on top of the prompt's KV cache): the exact conditional ``p(y | y in L)`` and the
   masked sampler's exact distribution.
2. KL and total variation between them.
3. ``aligned_sample(method="smc")`` at 1..64 particles, ``runs`` runs each. Its output distribution is
   estimated by averaging each run's normalised weights per string, and compared with the exact
   conditional. These runs replay the next-token distributions recorded in step 1
   (``FiniteDistributions.replay_model()``: the same numbers the model gave, so hundreds of runs need
   no forward pass); ``--live`` runs checks that a live run on the model draws the same outputs.
4. genlm-control, when its venv is given (``--genlm-python``): its SMC (AWRS proposal over the same
   regex as a ``BoolFSA``) on the same model, prompts and languages, its posterior averaged the same way.

Writes benchmarks/results/fidelity.json, fidelity.md and fidelity.png (the plot needs a Python with
matplotlib: ``--plot-python``). Run::

    PYTHONPATH=. /tmp/fresh/.venv/bin/python benchmarks/fidelity.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

LABELS: list[tuple[str, list[str], str]] = [
    ("sentiment", ["positive", "negative", "neutral"],
     "Classify the sentiment of: 'I loved this film, it was wonderful.' Answer with one word."),
    ("topic", ["sports", "politics", "technology", "science"],
     "Topic of: 'The new GPU doubles AI training speed.' Answer with one word."),
    ("star_wars", ["Luke Wilson", "Ben Kenobi"], "Who is that guy from Star Wars? Answer with a name."),
    ("yes_no", ["yes", "no", "maybe"], "Is the sky green? Answer yes, no or maybe."),
    ("color", ["red", "green", "blue", "yellow"], "What color is a ripe banana? Answer with one word."),
    ("animal", ["cat", "dog", "bird", "fish"], "Which animal barks? Answer with one word."),
    ("capital", ["Paris", "London", "Berlin", "Madrid", "Rome"],
     "What is the capital of Spain? Answer with the city."),
    ("weekday", ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"],
     "What day comes after Tuesday? Answer with the day."),
    ("language", ["Python", "JavaScript", "Rust", "Go"],
     "Which programming language runs in web browsers? Answer with its name."),
    ("emotion", ["happy", "sad", "angry", "surprised"],
     "How does someone feel who just won the lottery? Answer with one word."),
]
REGEXES: list[tuple[str, str, str]] = [
    ("rating", r"[1-5]", "Rate this review from 1 to 5: 'Terrible service, cold food.' Answer with a digit."),
    ("choice", r"[A-D]", "Which is a fruit? A) car B) apple C) chair D) shoe. Answer with the letter."),
    ("year", r"(19|20)[0-9]{2}", "In which year did the Berlin Wall fall? Answer with the year."),
    ("count", r"[0-9]{1,2}", "How many legs does a spider have? Answer with a number."),
    ("title", r"(Mr|Mrs|Dr)\. (Smith|Jones)", "Give a polite way to address a doctor named Smith."),
]
PARTICLES = (1, 2, 4, 8, 16, 32, 64)


def _cases() -> list[dict[str, Any]]:
    out = [{"name": n, "kind": "labels", "labels": labels, "prompt": p,
            "regex": "|".join(re.escape(x) for x in labels)} for n, labels, p in LABELS]
    out += [{"name": n, "kind": "regex", "regex": rx, "prompt": p} for n, rx, p in REGEXES]
    return out


def _grammar(case: dict[str, Any]) -> Any:
    import grammarmask as gm

    return gm.Choice(case["labels"]) if case["kind"] == "labels" else gm.Regex(case["regex"])


def timed_enumeration(hf: Any, vocab: Any, compiled: Any, prompt: list[int], max_paths: int,
                      batch: int) -> dict[str, Any]:
    """The exact enumeration (``dist``) with its seconds (``s``) and model rows (``rows``)."""
    from grammarmask.fidelity import exact_distributions

    t, rows0 = time.time(), hf.rows
    d = exact_distributions(hf, vocab, compiled, prompt, max_paths=max_paths, batch_size=batch)
    return {"dist": d, "s": time.time() - t, "rows": hf.rows - rows0}


def enumerate_cached(cache: Path | None, name: str, enumerate_: Any) -> Any:
    """``enumerate_()`` (:func:`timed_enumeration`), kept as ``cache/name.pkl`` when ``cache`` is given
    and read back on later runs: the enumeration is deterministic and costs minutes, while a
    change to the samplers needs only its recorded distributions (the replay). Delete the file when the
    model, prompt, language or tokenizer changes (the key is the case's name only)."""
    import pickle

    path = cache / f"{name}.pkl" if cache is not None else None
    if path is not None and path.exists():
        with path.open("rb") as f:
            return pickle.load(f)
    d = enumerate_()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            pickle.dump(d, f)
    return d


def _smc_estimate(replay: Any, vocab: Any, compiled: Any, prompt: list[int], n: int, runs: int,
                  seed: int) -> dict[bytes, float]:
    from grammarmask.fidelity import aligned_sample

    rng = np.random.default_rng(seed)
    acc: dict[bytes, float] = {}
    for _ in range(runs):
        r = aligned_sample(replay, vocab, compiled, prompt, n_particles=n, rng=rng, max_tokens=64)
        for y, w in r.distribution().items():
            acc[y] = acc.get(y, 0.0) + w / runs
    return acc


def _top(d: dict[bytes, float], k: int = 3) -> list[list[Any]]:
    best = sorted(d.items(), key=lambda kv: -kv[1])[:k]
    return [[y.decode("utf-8", "replace"), round(p, 4)] for y, p in best]


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    import grammarmask as gm
    from grammarmask.fidelity import aligned_sample, kl_divergence, total_variation
    from grammarmask.integrations.transformers import BatchedHF
    from grammarmask.models import smollm2

    torch.set_num_threads(args.threads)
    t0 = time.time()
    tok, model = smollm2()
    load_s = time.time() - t0
    vocab = gm.Vocabulary.from_hf(tok, size=model.config.vocab_size)
    hf = BatchedHF(model)
    cases = []
    for case in _cases():
        if args.only and case["name"] not in args.only:
            continue
        prompt = list(tok.apply_chat_template([{"role": "user", "content": case["prompt"]}],
                                              add_generation_prompt=True, tokenize=True)["input_ids"])
        compiled = _grammar(case).compile(vocab)
        hf.set_prompt(prompt)
        e = enumerate_cached(args.enum_cache, case["name"], lambda c=compiled, p=prompt: timed_enumeration(
            hf, vocab, c, p, args.max_paths, args.batch))
        d, enum_s = e["dist"], e["s"]
        replay = d.replay_model()
        rec: dict[str, Any] = {
            "name": case["name"], "kind": case["kind"], "regex": case["regex"], "prompt": case["prompt"],
            "strings": len(d.exact), "paths": len(d.paths), "prefixes": d.n_nodes,
            "model_rows": e["rows"],
            "enumerate_s": round(enum_s, 1), "log_p_language": d.log_mass,
            "masked_dead_end": d.masked_dead_end,
            "masked": {"kl": kl_divergence(d.masked, d.exact), "kl_reverse": kl_divergence(d.exact, d.masked),
                       "tv": total_variation(d.masked, d.exact)},
            "exact_top": _top(d.exact), "masked_top": _top(d.masked), "smc": {},
            "exact": {y.decode("utf-8", "replace"): p for y, p in d.exact.items()},
            "masked_dist": {y.decode("utf-8", "replace"): p for y, p in d.masked.items()},
        }
        t = time.time()
        for n in args.particles:
            runs = max(args.runs, args.budget // n)
            est = _smc_estimate(replay, vocab, compiled, prompt, n, runs, seed=1000 + n)
            rec["smc"][str(n)] = {"runs": runs, "kl": kl_divergence(est, d.exact),
                                  "tv": total_variation(est, d.exact)}
        rec["smc_s"] = round(time.time() - t, 1)
        if case["name"] in args.live:
            rec["live"] = _live_check(hf, replay, vocab, compiled, prompt, aligned_sample)
        cases.append(rec)
        smc = rec["smc"][str(args.headline)]
        print(f"{case['name']:>10}: {len(d.exact)} strings, {len(d.paths)} paths, {d.n_nodes} prefixes in "
              f"{enum_s:.0f} s; masked KL {rec['masked']['kl']:.4f} TV {rec['masked']['tv']:.3f}; "
              f"SMC({args.headline}) KL {smc['kl']:.5f} TV {smc['tv']:.4f} ({rec['smc_s']:.0f} s)",
              flush=True)
    return {"model": "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized to float32)", "load_s": round(load_s, 1),
            "threads": args.threads, "headline_particles": args.headline, "particles": list(PARTICLES),
            "budget": {"runs_at_least": args.runs, "runs_times_particles": args.budget},
            "cases": cases}


def _live_check(hf: Any, replay: Any, vocab: Any, compiled: Any, prompt: list[int], aligned_sample: Any
                ) -> dict[str, Any]:
    """Same seeds, live model vs replay: the same outputs, weights equal to float32 rounding."""
    same, diffs = 0, []
    t = time.time()
    for seed in range(3):
        live = aligned_sample(hf, vocab, compiled, prompt, n_particles=8, seed=seed)
        rep = aligned_sample(replay, vocab, compiled, prompt, n_particles=8, seed=seed)
        same += live.token_ids == rep.token_ids
        diffs.append(abs(live.log_z - rep.log_z))
    return {"seeds": 3, "same_output": same, "max_log_z_diff": max(diffs),
            "live_s": round(time.time() - t, 1)}


def _merge(old: dict[str, Any], new: dict[str, Any], load: str) -> tuple[dict[str, Any], str]:
    """``old`` with the SMC particle counts of ``new``'s cases added (the exact figures must agree)."""
    by_name = {c["name"]: c for c in new["cases"]}
    for c in old["cases"]:
        extra = by_name.get(c["name"])
        if extra is not None:
            assert abs(extra["masked"]["kl"] - c["masked"]["kl"]) < 1e-6 * max(1.0, c["masked"]["kl"])
            c["smc"].update({n: v for n, v in extra["smc"].items() if n not in c["smc"]})
    old["extra_particles"] = sorted({int(n) for c in new["cases"] for n in c["smc"]} - set(old["particles"]))
    return old, f"{old['load_average_end']}; second pass {load}"


def _score_genlm(g: dict[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    """KL and TV of genlm-control's estimates against the exact conditionals, and grammarmask's SMC
    at the same particle counts beside them."""
    from grammarmask.fidelity import kl_divergence, total_variation

    exact = {c["name"]: c for c in res["cases"]}
    for c in g["cases"]:
        e = exact[c["name"]]
        c["kl"] = {n: kl_divergence(est, e["exact"]) if est else math.inf for n, est in c["estimate"].items()}
        c["tv"] = {n: total_variation(est, e["exact"]) if est else 1.0 for n, est in c["estimate"].items()}
        c["masked_kl"] = e["masked"]["kl"]
        c["grammarmask_kl"] = {n: e["smc"][n]["kl"] for n in c["estimate"] if n in e["smc"]}
    return g


def report(res: dict[str, Any], load: str) -> str:
    h = res["headline_particles"]
    lines = [
        f"SmolLM2-135M-Instruct on the CPU ({res['threads']} threads; load average {load}). KL in nats,"
        f" KL(sampler || exact); SMC at {h} particles (and more where run), its output distribution"
        " estimated over the runs shown. The exact sampler (method='exact') draws from the exact"
        " conditional: KL 0 by construction.",
        "",
        f"| case | language | strings | token paths | masked KL | masked TV | SMC({h}) KL | SMC({h}) TV "
        "| runs | more particles: KL (N, runs) | masked / best SMC KL |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in res["cases"]:
        m, s = c["masked"], c["smc"][str(h)]
        top = str(max(int(n) for n in c["smc"]))
        best = min(s["kl"], c["smc"][top]["kl"])
        ratio = f"{m['kl'] / best:.0f}x" if best > 0 else "inf"
        more = f"{c['smc'][top]['kl']:.5f} ({top}, {c['smc'][top]['runs']})" if int(top) > h else ""
        lang = c["regex"] if len(c["regex"]) <= 40 else c["regex"][:37] + "..."
        lines.append(f"| {c['name']} | `{lang}` | {c['strings']} | {c['paths']} | {m['kl']:.4f} | "
                     f"{m['tv']:.3f} | {s['kl']:.5f} | {s['tv']:.4f} | {s['runs']} | {more} | {ratio} |")
    g = res.get("genlm")
    if g and g.get("cases"):
        lines += ["", f"{g['engine']}, {g['runs']} runs per particle count (each calls the model):", "",
                  "| case | particles | genlm-control KL | genlm-control TV | s per run | grammarmask SMC KL "
                  "| masked KL |", "|---|---:|---:|---:|---:|---:|---:|"]
        for c in g["cases"]:
            for n in c["kl"]:
                gk = c["grammarmask_kl"].get(n)
                lines.append(f"| {c['name']} | {n} | {c['kl'][n]:.5f} | {c['tv'][n]:.4f} | "
                             f"{c['seconds'][n] / g['runs']:.1f} | {'' if gk is None else f'{gk:.5f}'} | "
                             f"{c['masked_kl']:.4f} |")
    return "\n".join(lines) + "\n"


PLOT = r"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
res = json.load(open(sys.argv[1]))
fig, ax = plt.subplots(figsize=(7.5, 4.5))
ns = res["particles"]
for c in res["cases"]:
    if c["masked"]["kl"] > 0.01:
        nc = sorted(int(n) for n in c["smc"])
        ax.plot(nc, [max(c["smc"][str(n)]["kl"], 1e-6) for n in nc], color="tab:blue", alpha=0.35, lw=1)
big = [c for c in res["cases"] if c["masked"]["kl"] > 0.01]
mean = [sum(c["smc"][str(n)]["kl"] for c in big) / len(big) for n in ns]
ax.plot(ns, [max(v, 1e-6) for v in mean], color="tab:blue", lw=2.5, marker="o",
        label="grammarmask SMC (mean)")
ax.axhline(sum(c["masked"]["kl"] for c in big) / len(big), color="tab:red", ls="--",
           label="masked sampler (mean)")
g = res.get("genlm")
if g and g.get("cases"):
    gn = sorted(int(n) for n in g["cases"][0]["kl"])
    gm_mean = [sum(c["kl"][str(n)] for c in g["cases"]) / len(g["cases"]) for n in gn]
    mine = [sum(e["smc"][str(n)]["kl"] for e in res["cases"] if e["name"] in {c["name"] for c in g["cases"]})
            / len(g["cases"]) for n in gn]
    ax.plot(gn, [max(v, 1e-6) for v in mine], color="tab:blue", lw=1.5, ls=":", marker="o",
            label="grammarmask SMC, same cases as genlm-control")
    ax.plot(gn, [max(v, 1e-6) for v in gm_mean], color="tab:green", lw=2.5, marker="s",
            label=f"genlm-control AWRS SMC (mean of {len(g['cases'])} cases)")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("particles")
ax.set_ylabel("KL(sampler || p(y | y in L)), nats")
ax.set_title("SmolLM2-135M: cases with masked KL > 0.01 (thin: each case)")
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--max-paths", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=50, help="SMC runs per particle count (at least)")
    ap.add_argument("--budget", type=int, default=800, help="runs x particles per particle count (at least)")
    ap.add_argument("--headline", type=int, default=64)
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--particles", nargs="*", type=int, default=list(PARTICLES))
    ap.add_argument("--merge", action="store_true", help="add the particle counts run now to --out's JSON "
                    "(cases run again keep their earlier counts too)")
    ap.add_argument("--live", nargs="*", default=["star_wars"])
    ap.add_argument("--enum-cache", type=Path, help="a folder keeping each case's enumeration (pickled) for "
                    "later runs (delete it when the model or a case changes)")
    ap.add_argument("--genlm-json", type=Path, help="results of benchmarks/fidelity_genlm.py to plot beside")
    ap.add_argument("--plot-python", default=sys.executable, help="a Python with matplotlib")
    ap.add_argument("--out", type=Path, default=RESULTS / "fidelity")
    ap.add_argument("--replot", action="store_true", help="no model: read --out's JSON, add --genlm-json, "
                    "write the table and the plot again")
    a = ap.parse_args()
    if a.replot:
        res = json.loads(a.out.with_suffix(".json").read_text())
        load = res["load_average_end"]
    else:
        res = run(a)
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        if a.merge:
            res, load = _merge(json.loads(a.out.with_suffix(".json").read_text()), res, load)
    if a.genlm_json and a.genlm_json.exists():
        res["genlm"] = _score_genlm(json.loads(a.genlm_json.read_text()), res)
    res["load_average_end"] = load
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    a.out.with_suffix(".md").write_text(report(res, load))
    print(report(res, load))
    script = a.out.parent / "_fidelity_plot.py"
    script.write_text(PLOT)
    try:
        files = [str(a.out.with_suffix(".json")), str(a.out.with_suffix(".png"))]
        subprocess.run([a.plot_python, str(script), *files], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"no plot ({e}): pass --plot-python with a Python that has matplotlib", file=sys.stderr)
    finally:
        script.unlink()


if __name__ == "__main__":
    main()
