"""genlm-control beside grammarmask's aligned sampler on the infinite languages of
benchmarks/fidelity_infinite.py (issue 17): its SMC with the AWRS proposal over a ``BoolFSA`` of the
same language (the Lark list as the equivalent regex), on SmolLM2-135M-Instruct, the same prompts and
``max_tokens``. Each run stores its decoded posterior and ``log_ml`` (its estimate of ``log P(L)``) in
the format of fidelity_infinite.json; ``fidelity_infinite.py --replot`` summarises both.

Needs genlm-control's own venv (see benchmarks/fidelity_genlm.py)::

    PYTHONPATH=. nice /tmp/gm_aligned/genlm-venv/bin/python benchmarks/fidelity_infinite_genlm.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FRUIT = "(apple|banana|cherry|grape)"
REGEX = {"count": "[0-9]+", "city": "[A-Z][a-z]*", "fruits": f"{FRUIT}(, {FRUIT})*"}


async def _run(sampler: Any, n: int, max_tokens: int) -> tuple[float, dict[str, float]]:
    seqs = await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=max_tokens)
    return float(seqs.log_ml), {str(y): float(p) for y, p in dict(seqs.decoded_posterior).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="*", default=["count", "fruits", "city"])
    ap.add_argument("--particles", nargs="*", type=int, default=[4, 16, 64])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fidelity_infinite_genlm.json")
    a = ap.parse_args()

    import torch
    from genlm.backend.llm import AsyncTransformer
    from genlm.control import AWRS, BoolFSA, PromptedLLM

    from grammarmask.models import smollm2

    torch.set_num_threads(a.threads)
    sys.path.insert(0, str(HERE))
    from fidelity_infinite import TASKS

    tasks = {t["name"]: t for t in TASKS}
    tok, model = smollm2()
    llm = AsyncTransformer(model, tok)
    from importlib.metadata import version

    out: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {"tasks": []}
    out["engine"] = f"genlm-control {version('genlm-control')} (AWRS, SMC, ess 0.5, hf backend, CPU)"
    out["threads"] = a.threads
    done = {t["name"]: t for t in out["tasks"]}
    for name in a.tasks:
        t = tasks[name]
        rec = done.get(name) or {"name": name, "language": f"regex `{REGEX[name]}` (BoolFSA)",
                                 "prompt": t["prompt"], "max_tokens": t["max_tokens"], "levels": {}}
        if name not in done:
            out["tasks"].append(rec)
            done[name] = rec
        prompt = list(tok.apply_chat_template([{"role": "user", "content": t["prompt"]}],
                                              add_generation_prompt=True, tokenize=True)["input_ids"])
        plm = PromptedLLM(llm, prompt_ids=prompt)
        fsa = BoolFSA.from_regex(REGEX[name])
        sampler = AWRS(plm, fsa.coerce(plm, f=b"".join), seed=0)
        for n in a.particles:
            if str(n) in rec["levels"]:
                continue
            runs = []
            tl = time.time()
            for seed in range(a.runs):
                ts = time.time()
                log_z, dist = asyncio.run(_run(sampler, n, t["max_tokens"]))
                runs.append({"seed": seed, "log_z": log_z if dist else None, "rows": 0, "resamples": 0,
                             "s": round(time.time() - ts, 2), "dist": dist})
            rec["levels"][str(n)] = {"runs": runs, "s": round(time.time() - tl, 1)}
            print(f"{name} N={n}: {len(runs)} runs in {time.time() - tl:.0f} s; log_ml "
                  f"{[r['log_z'] for r in runs]}", flush=True)
            a.out.write_text(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
