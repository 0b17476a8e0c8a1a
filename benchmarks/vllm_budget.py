"""Budget-aware masks inside vLLM's StructuredOutputManager (the backend path, CPU): how many samples end
in a valid document within ``max_tokens``, with and without the option.

    GRAMMARMASK_VLLM=1 /tmp/vllm-venv/bin/python benchmarks/vllm_budget.py [--samples 25]

Runs in the environment ``tools/serving-tests`` builds (vLLM 0.33). The model directory, request types
and validity checks are those of ``tests/serving`` (a byte-level BPE tokenizer of 393 tokens over a
padded vocabulary of 400); the "model" samples uniformly among the legal tokens of each row (vLLM
fills the masks before the logits exist, so the backend cannot rank tokens anyway). Prints a markdown
table: per request type and budget, samples that ended with a stop token in a valid document.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # appended: the installed grammarmask (and its entry points) stays first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--samples", type=int, default=25)
    ap.add_argument("--budgets", default="20,32,64,128")
    args = ap.parse_args()
    os.environ.setdefault("GRAMMARMASK_VLLM", "1")
    from vllm.config import ModelConfig
    from vllm.plugins import load_general_plugins

    from tests.serving.conftest import Engine, build_model_dir
    from tests.serving.test_vllm_budget import KINDS, check_valid, params, run, submit

    load_general_plugins()
    folder = build_model_dir(Path(tempfile.mkdtemp(prefix="gm-vllm-budget-")))
    model = ModelConfig(model=str(folder), tokenizer=str(folder), dtype="float32", max_model_len=1024)
    engine = Engine(model)
    budgets = [int(b) for b in args.budgets.split(",")]
    print("| request | budget-aware | " + " | ".join(f"max_tokens={b}" for b in budgets) + " |")
    print("|---|---|" + "---|" * len(budgets))
    for kind, so in KINDS.items():
        for on in (True, False):
            cells = []
            for budget in budgets:
                rng = random.Random(budget)
                ok = 0
                for _ in range(args.samples):
                    extra = None if on else {"grammarmask_budget_aware": False}
                    req = submit(engine, params(engine, budget, extra, **so))
                    taken = run(engine, req, rng)
                    if taken and taken[-1] in req.sampling_params.all_stop_token_ids:
                        try:
                            check_valid(kind, engine.manager.backend.vocab.decode(taken[:-1]).decode())
                        except Exception as e:  # noqa: BLE001 - an invalid document is counted, and shown
                            print(f"invalid {kind} at {budget}: {e}", file=sys.stderr)
                        else:
                            ok += 1
                cells.append(f"{ok}/{args.samples}")
            print(f"| {kind} | {'on' if on else 'off'} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
