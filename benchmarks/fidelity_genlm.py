"""genlm-control beside grammarmask's aligned sampler (issue 17): its SMC with the AWRS proposal
(adaptive weighted rejection sampling over a ``BoolFSA`` of the same regex) on SmolLM2-135M-Instruct,
the same prompts and languages as benchmarks/fidelity.py, scored against the exact conditionals that
benchmarks/fidelity.py writes (``fidelity.json``): this script stores its estimates, and
``benchmarks/fidelity.py --replot --genlm-json ...`` scores them (so the two can run side by side).

genlm-control needs its own venv (it pins numpy < 2.5 and pulls numba, bitsandbytes, ...)::

    python3 -m venv /tmp/genlm-venv
    /tmp/genlm-venv/bin/pip install genlm-control        # 0.4.1 here; runs on the CPU (hf backend)
    PYTHONPATH=. /tmp/genlm-venv/bin/python benchmarks/fidelity_genlm.py

For each case and particle count it runs SMC ``runs`` times, averages ``decoded_posterior`` (the
normalised weights of finished particles, summed per string), and reports KL(estimate || exact) and
total variation, as benchmarks/fidelity.py does for grammarmask. Unlike grammarmask's runs (which
replay the recorded next-token distributions), every genlm run calls the model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _kl(p: dict[str, float], q: dict[str, float]) -> float:
    sp, sq = sum(p.values()), sum(q.values())
    out = 0.0
    for y, py in p.items():
        if py > 0:
            qy = q.get(y, 0.0)
            if qy <= 0:
                return math.inf
            out += py / sp * math.log(py / sp / (qy / sq))
    return max(out, 0.0)


def _tv(p: dict[str, float], q: dict[str, float]) -> float:
    sp, sq = sum(p.values()), sum(q.values())
    return 0.5 * sum(abs(p.get(y, 0) / sp - q.get(y, 0) / sq) for y in set(p) | set(q))


async def _runs(sampler: Any, n: int, runs: int, max_tokens: int) -> tuple[dict[str, float], int]:
    acc: dict[str, float] = {}
    empty = 0
    for _ in range(runs):
        seqs = await sampler.smc(n_particles=n, ess_threshold=0.5, max_tokens=max_tokens)
        post = dict(seqs.decoded_posterior)
        if not post:
            empty += 1
            continue
        for y, p in post.items():
            acc[y] = acc.get(y, 0.0) + p / runs
    return acc, empty


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", nargs="*", default=["star_wars", "choice", "color"])
    ap.add_argument("--particles", nargs="*", type=int, default=[1, 4, 16])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fidelity_genlm.json")
    a = ap.parse_args()

    import torch
    from genlm.backend.llm import AsyncTransformer
    from genlm.control import AWRS, BoolFSA, PromptedLLM

    from grammarmask.models import smollm2

    torch.set_num_threads(a.threads)
    sys.path.insert(0, str(HERE))
    from fidelity import _cases

    cases = {c["name"]: c for c in _cases()}
    tok, model = smollm2()
    llm = AsyncTransformer(model, tok)
    from importlib.metadata import version

    engine = f"genlm-control {version('genlm-control')} (AWRS, SMC, ess 0.5, hf backend, CPU)"
    out: dict[str, Any] = {"engine": engine, "particles": a.particles, "runs": a.runs, "cases": []}
    for name in a.cases:
        c = cases[name]
        prompt = list(tok.apply_chat_template([{"role": "user", "content": c["prompt"]}],
                                              add_generation_prompt=True, tokenize=True)["input_ids"])
        plm = PromptedLLM(llm, prompt_ids=prompt)
        fsa = BoolFSA.from_regex(c["regex"])
        sampler = AWRS(plm, fsa.coerce(plm, f=b"".join), seed=0)
        rec: dict[str, Any] = {"name": name, "estimate": {}, "seconds": {}, "empty_runs": {}}
        for n in a.particles:
            t = time.time()
            est, empty = asyncio.run(_runs(sampler, n, a.runs, 64))
            rec["seconds"][str(n)] = round(time.time() - t, 1)
            rec["empty_runs"][str(n)] = empty
            rec["estimate"][str(n)] = est
            print(f"{name} N={n}: {sorted(est.items(), key=lambda kv: -kv[1])[:3]} "
                  f"({rec['seconds'][str(n)]} s, {empty} runs with no finished particle)", flush=True)
        out["cases"].append(rec)
        a.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
