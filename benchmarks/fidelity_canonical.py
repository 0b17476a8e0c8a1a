"""The masking gap under canonical masks (issue 17): on the finite languages of benchmarks/fidelity.py,
how far the masked sampler is from the model's conditional ``p(y | y in L)`` when the masks are
narrowed to canonical forced text (``gm.canonical(compiled, tokenizer)``, ``grammarmask generate``'s
default), beside the exact masks' figure.

For each case the language is enumerated again under the canonical masks with SmolLM2 (every token
path those masks allow, :func:`grammarmask.fidelity.exact_distributions`) and compared with the
all-tokenization conditional that benchmarks/fidelity.py stored (``fidelity.json``'s ``exact``):

- ``masked KL``: KL(masked sampler || p(y | y in L)) with the exact masks (from fidelity.json) and with
  canonical masks (the masked sampler's string distribution from this enumeration);
- ``canonical paths' share of P(L)``: the model's probability of the language on the paths canonical
  masks allow, over its probability on all paths;
- ``KL(conditional on canonical paths || p(y | y in L))``: what an aligned sampler over canonical masks
  targets, against the full conditional.

Writes benchmarks/results/fidelity_canonical.json and .md::

    PYTHONPATH=. nice /tmp/fresh/.venv/bin/python benchmarks/fidelity_canonical.py
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def run(a: argparse.Namespace) -> dict[str, Any]:
    import torch

    import grammarmask as gm
    from grammarmask.fidelity import exact_distributions, kl_divergence, total_variation
    from grammarmask.integrations.transformers import BatchedHF
    from grammarmask.models import smollm2

    sys.path.insert(0, str(HERE))
    from fidelity import _cases, _grammar

    torch.set_num_threads(a.threads)
    old = {c["name"]: c for c in json.loads(a.fidelity_json.read_text())["cases"]}
    tok, model = smollm2()
    vocab = gm.Vocabulary.from_hf(tok, size=model.config.vocab_size)
    hf = BatchedHF(model)
    out = []
    for case in _cases():
        if a.only and case["name"] not in a.only:
            continue
        full = old[case["name"]]
        exact = {y.encode(): p for y, p in full["exact"].items()}
        prompt = list(tok.apply_chat_template([{"role": "user", "content": case["prompt"]}],
                                              add_generation_prompt=True, tokenize=True)["input_ids"])
        hf.set_prompt(prompt)
        t = time.time()
        d = exact_distributions(hf, vocab, gm.canonical(_grammar(case).compile(vocab), tok), prompt,
                                max_paths=a.max_paths, batch_size=a.batch)
        rec = {"name": case["name"], "regex": case["regex"], "strings": len(d.exact), "paths": len(d.paths),
               "all_paths": full["paths"], "enumerate_s": round(time.time() - t, 1),
               "masked_kl_exact_masks": full["masked"]["kl"], "masked_tv_exact_masks": full["masked"]["tv"],
               "masked_kl_canonical": kl_divergence(d.masked, exact),
               "masked_tv_canonical": total_variation(d.masked, exact),
               "canonical_share_of_p_l": math.exp(d.log_mass - full["log_p_language"]),
               "conditional_kl_canonical": kl_divergence(d.exact, exact),
               "masked_dead_end": d.masked_dead_end}
        out.append(rec)
        print(f"{rec['name']:>10}: {rec['paths']} of {rec['all_paths']} paths; masked KL exact masks "
              f"{rec['masked_kl_exact_masks']:.4f}, canonical {rec['masked_kl_canonical']:.4f}; "
              f"canonical share of P(L) {rec['canonical_share_of_p_l']:.3f} ({rec['enumerate_s']} s, load "
              f"{os.getloadavg()[0]:.1f})", flush=True)
    return {"model": "SmolLM2-135M-Instruct", "threads": a.threads, "cases": out,
            "load": ", ".join(f"{x:.2f}" for x in os.getloadavg())}


def report(res: dict[str, Any]) -> str:
    lines = [f"SmolLM2-135M-Instruct on the CPU ({res['threads']} thread, niced; load average "
             f"{res['load']}). "
             "KL in nats against the all-tokenization conditional p(y | y in L) of fidelity.json.", "",
             "| case | token paths: all / canonical | masked KL, exact masks | masked KL, canonical masks "
             "| canonical paths' share of P(L) | KL(conditional on canonical paths ‖ p(y \\| y in L)) |",
             "|---|---:|---:|---:|---:|---:|"]
    for c in res["cases"]:
        lines.append(f"| {c['name']} | {c['all_paths']} / {c['paths']} | {c['masked_kl_exact_masks']:.4f} | "
                     f"{c['masked_kl_canonical']:.4f} | {c['canonical_share_of_p_l']:.3f} | "
                     f"{c['conditional_kl_canonical']:.4f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--max-paths", type=int, default=5000)
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--fidelity-json", type=Path, default=RESULTS / "fidelity.json")
    ap.add_argument("--out", type=Path, default=RESULTS / "fidelity_canonical")
    ap.add_argument("--replot", action="store_true", help="no model: write the table from --out's JSON")
    a = ap.parse_args()
    res = json.loads(a.out.with_suffix(".json").read_text()) if a.replot else run(a)
    a.out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    a.out.with_suffix(".md").write_text(report(res))
    print(report(res))


if __name__ == "__main__":
    main()
