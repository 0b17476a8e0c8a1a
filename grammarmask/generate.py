"""The decoding loop: any :class:`~grammarmask.models.LogitsModel` under any grammar.

At every step: if the grammar forces the next tokens (``Matcher.forced_tokens()``) and jump-forward is
on, append them without calling the model; otherwise ask the model for logits, sample a legal token
(:func:`grammarmask.sampling.sample_with_stats`) and advance the matcher. Stops at EOS or after
``max_tokens`` tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._args import as_int_list
from .errors import GrammarError
from .grammar import CompiledGrammar, Grammar, ensure_compiled
from .models import LogitsModel
from .sampling import RngLike, SequenceStats, StepStats, _check_seed, _rng, _sample
from .vocab import Vocabulary

__all__ = ["GenerationResult", "generate"]


@dataclass(frozen=True)
class GenerationResult:
    """What :func:`generate` produced.

    Attributes
    ----------
    token_ids
        The generated ids (prompt excluded, EOS included when it was taken).
    text_bytes
        Their bytes (EOS and other special tokens contribute nothing).
    steps
        One :class:`StepStats` per generated token.
    stats
        The :class:`SequenceStats` summary (``KL(p_C || p)`` along the path over the model's steps).
    model_calls
        How many times the model was called.
    forced_tokens_used
        Tokens appended by jump-forward without a model call (the calls saved).
    finished
        Whether EOS was taken (False: stopped at ``max_tokens``).
    accepted
        Whether the output is a complete sentence of the grammar.
    """

    token_ids: tuple[int, ...]
    text_bytes: bytes
    steps: tuple[StepStats, ...]
    stats: SequenceStats
    model_calls: int
    forced_tokens_used: int
    finished: bool
    accepted: bool

    @property
    def text(self) -> str:
        """``text_bytes`` as UTF-8 (a character cut by ``max_tokens`` becomes U+FFFD)."""
        return self.text_bytes.decode("utf-8", errors="replace")


def generate(
    model: LogitsModel,
    vocab: Vocabulary,
    grammar: Grammar | CompiledGrammar,
    prompt_ids: Sequence[int] = (),
    *,
    max_tokens: int = 256,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    rng: RngLike = None,
    seed: int | None = None,
    jump_forward: bool = True,
) -> GenerationResult:
    """Generate up to ``max_tokens`` tokens from ``model`` that stay inside ``grammar``.

    ``model`` is called with the prompt plus the tokens generated so far and returns next-token logits.
    Sampling options are those of :func:`grammarmask.sample`; the repetition penalty sees the prompt
    and the generated tokens. Give either ``rng`` (a ``numpy.random.Generator``) or ``seed``.

    Raises
    ------
    NoLegalContinuation
        The grammar (typically an intersection) dead-ended.
    GrammarError
        A grammar compiled for another vocabulary, bad options (a ``prompt_ids`` entry that is not
        an integer, a negative seed, ...), or logits of the wrong length or dtype.
    """
    compiled = ensure_compiled(grammar, vocab, caller="generate()")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
        raise GrammarError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    if rng is not None and seed is not None:
        raise GrammarError("give rng or seed, not both")
    gen = _rng(rng) if seed is None else np.random.default_rng(_check_seed(seed, "seed"))
    context = as_int_list(prompt_ids, "generate: prompt_ids")
    n_prompt = len(context)
    matcher = compiled.matcher()
    steps: list[StepStats] = []
    calls = forced_used = 0
    while len(steps) < max_tokens and not matcher.is_finished():
        if jump_forward:
            forced = matcher.forced_tokens()[: max_tokens - len(steps)]
            if forced:
                for t in forced:
                    matcher.advance(t)
                    context.append(t)
                    steps.append(StepStats(token_id=t, n_legal=1, z=None, neg_log_z=None, forced=True))
                forced_used += len(forced)
                continue
        mask = matcher.mask()
        logits = model(context)
        calls += 1
        # the pipeline of sample_with_stats, minus its O(len(context)) check of context (all ints here)
        token, st = _sample(logits, mask, temperature, top_k, top_p, repetition_penalty, context, gen,
                            want_stats=True)
        assert st is not None
        matcher.advance(token)
        context.append(token)
        steps.append(st)
    out = tuple(context[n_prompt:])
    return GenerationResult(
        token_ids=out,
        text_bytes=vocab.decode(out),
        steps=tuple(steps),
        stats=SequenceStats.from_steps(steps),
        model_calls=calls,
        forced_tokens_used=forced_used,
        finished=matcher.is_finished(),
        accepted=matcher.is_finished() or matcher.is_accepting(),
    )
