"""``grammarmask bench`` (the benchmark harness) and ``grammarmask generate`` (a local model)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

from ._common import (
    EXIT_LIMIT,
    EXIT_OK,
    CliError,
    _compile,
    _grammar,
    _load_hf,
)


def cmd_bench(args: argparse.Namespace) -> int:
    harness = Path(__file__).resolve().parents[2] / "benchmarks" / "harness.py"
    if not harness.exists():
        raise CliError(
            "the benchmark harness ships with the source checkout (benchmarks/harness.py); "
            "run grammarmask bench from a clone"
        )
    rest = args.harness_args[1:] if args.harness_args[:1] == ["--"] else args.harness_args
    # --from-cli: results go under the current directory (not into the checkout), no README rewrite
    return subprocess.call([sys.executable, str(harness), "--from-cli", *rest])


def _cache_argument(model: object) -> str:
    """The name of the key-value cache in ``model.forward`` and its output: ``cache`` from transformers
    5.24 on, ``past_key_values`` before (5.24 deprecates that name with a FutureWarning)."""
    import inspect

    forward = getattr(model, "forward", None)
    params = inspect.signature(forward).parameters if forward is not None else {}
    return "cache" if "cache" in params else "past_key_values"


def cmd_generate(args: argparse.Namespace) -> int:
    grammar = _grammar(args)
    tok, model, vocab = _load_hf(args.model)
    import torch

    compiled, _ = _compile(grammar, vocab, args.grammar)
    from ..completion import BudgetPlan
    from ..decoding import _budgeted
    from ..sampling import SequenceStats, StepStats, sample_with_stats

    m = compiled.matcher()
    budget = BudgetPlan(compiled) if args.budget_aware else None
    rng = np.random.default_rng(args.seed)
    ids = list(tok(args.prompt)["input_ids"]) if args.prompt else [int(tok.bos_token_id or 0)]
    cache_arg = _cache_argument(model)
    past, inp = None, torch.tensor([ids])
    out: list[int] = []
    steps: list[StepStats] = []
    with torch.no_grad():
        for i in range(args.max_tokens):
            res = model(input_ids=inp, use_cache=True, **{cache_arg: past})
            past = getattr(res, cache_arg)
            logits = res.logits[0, -1].float()
            plan = None
            if budget is None:
                t, st = sample_with_stats(logits, m.mask(), temperature=args.temperature, rng=rng)
            else:  # keep a completion that fits the tokens left (see generate(budget_aware=True))
                t, st, _, plan = _budgeted(budget, m, m.mask(), logits.numpy(), args.max_tokens - i, rng,
                                           (args.temperature, None, None, None, ids + out))
            steps.append(st)
            m.advance(t)
            if budget is not None and plan is not None and not m.is_finished():
                budget.keep(m.state, plan)
            if m.is_finished():
                break
            out.append(t)
            inp = torch.tensor([[t]])
    print(vocab.decode(out).decode("utf-8", errors="replace"))
    summary = SequenceStats.from_steps(steps)
    print(
        f"{len(steps)} steps, "
        f"{'finished with EOS' if m.is_finished() else f'stopped at --max-tokens {args.max_tokens}'}; "
        f"KL(p_C || p) = {summary.bits_per_token:.3f} bits per token",
        file=sys.stderr,
    )
    return EXIT_OK if m.is_finished() or m.is_accepting() else EXIT_LIMIT
