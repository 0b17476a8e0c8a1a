"""The decoding loop: any :class:`~grammarmask.models.LogitsModel` under any grammar.

At every step: if the grammar forces the next tokens (``Matcher.forced_tokens()``) and jump-forward is
on, append them without calling the model; otherwise ask the model for logits, sample a legal token
(:func:`grammarmask.sampling.sample_with_stats`) and advance the matcher. Stops at EOS or after
``max_tokens`` tokens.

With ``budget_aware`` (the default), the loop also keeps a known completion of the output (a *plan*,
:class:`grammarmask.completion.BudgetPlan`) that fits in the tokens left, EOS included: a sampled
token that would leave no room to finish is masked out and the model's distribution sampled again
(up to ``_RETRIES`` times), after which the plan's first token is taken. So the budget ends in a
complete document instead of a truncated one, whenever the grammar has a known completion
(:func:`grammarmask.completion.shortest_completion`) and the shortest document fits at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._args import as_int_list
from .completion import BudgetPlan
from .errors import GrammarError
from .grammar import CompiledGrammar, Grammar, ensure_compiled
from .healing import heal_prompt, healed
from .mask import Mask
from .models import LogitsModel
from .sampling import RngLike, SequenceStats, StepStats, _check_seed, _rng, _sample
from .vocab import Vocabulary

__all__ = ["GenerationResult", "generate"]

_RETRIES = 4  # samples tried per step before the budget takes the plan's token


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
    budget_steps
        Steps where the budget changed the draw (a token masked out and sampled again, or the
        plan's token taken): 0 when the budget never bound, or with ``budget_aware=False``.
    healed_prefix
        With ``heal=True``: the prompt's bytes the output wrote back (they open the output's tokens
        and are left out of ``text_bytes``); else empty.
    """

    token_ids: tuple[int, ...]
    text_bytes: bytes
    steps: tuple[StepStats, ...]
    stats: SequenceStats
    model_calls: int
    forced_tokens_used: int
    finished: bool
    accepted: bool
    budget_steps: int = 0
    healed_prefix: bytes = b""

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
    budget_aware: bool = True,
    heal: bool = False,
    on_step: Callable[[StepStats], object] | None = None,
) -> GenerationResult:
    """Generate up to ``max_tokens`` tokens from ``model`` that stay inside ``grammar``.

    ``model`` is called with the prompt plus the tokens generated so far and returns next-token logits.
    Sampling options are those of :func:`grammarmask.sample`; the repetition penalty sees the prompt
    and the generated tokens. Give either ``rng`` (a ``numpy.random.Generator``) or ``seed``.

    ``budget_aware`` (default True): steer so that the output ends in a complete document within
    ``max_tokens`` tokens, EOS included. Once the budget binds, a sampled token that leaves no room to
    finish is masked out and the model sampled again (a few times), then the shortest completion's
    next token is taken. This holds when the grammar is a regular or context-free one (compositions
    with ``&``, ``|``, ``+`` have no known completion: sampling is then as without the option), every
    byte has a single-byte token (byte-level and byte-fallback vocabularies), and the grammar's
    shortest document fits in ``max_tokens`` (else the output follows that document and is cut).
    Far from the budget nothing changes: the same tokens from the same RNG as with
    ``budget_aware=False``; near it, draws are conditioned on being able to finish.

    ``heal`` (default False): token healing (:mod:`grammarmask.healing`). The prompt's final
    tokens that a longer token could have continued are taken off, and the output must start with
    their bytes, so the model may write them back as it would have tokenized them; ``text_bytes``
    is then only what follows the prompt as given (``healed_prefix`` holds the bytes written back).
    The budget does not steer a healed grammar (it is a composition).

    ``on_step`` (optional) is called with each step's :class:`StepStats` as soon as its token is
    taken (forced tokens included): a progress display, say.

    Raises
    ------
    NoLegalContinuation
        The grammar (typically an intersection) dead-ended.
    GrammarError
        A grammar compiled for another vocabulary, bad options (a ``prompt_ids`` entry that is not
        an integer, a negative seed, ...), or logits of the wrong length or dtype.
    """
    compiled = ensure_compiled(grammar, vocab, caller="generate()")
    removed = b""
    if heal:
        healing = heal_prompt(vocab, prompt_ids)
        prompt_ids, removed = healing.token_ids, healing.removed
        compiled = ensure_compiled(healed(compiled, removed), vocab, caller="generate()")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 0:
        raise GrammarError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    if rng is not None and seed is not None:
        raise GrammarError("give rng or seed, not both")
    gen = _rng(rng) if seed is None else np.random.default_rng(_check_seed(seed, "seed"))
    context = as_int_list(prompt_ids, "generate: prompt_ids")
    n_prompt = len(context)
    matcher = compiled.matcher()
    budget = BudgetPlan(compiled) if budget_aware else None
    steps: list[StepStats] = []
    calls = forced_used = steered = 0
    to_heal = len(removed)  # bytes of the healed prefix still to write: the model chooses their tokens
    while len(steps) < max_tokens and not matcher.is_finished():
        if to_heal > 0 and steps:
            to_heal -= len(vocab.token_bytes[context[-1]])
        if jump_forward and to_heal <= 0:
            forced = matcher.forced_tokens()[: max_tokens - len(steps)]
            if forced:
                plan = budget.at(matcher.state) if budget is not None else None
                for t in forced:
                    matcher.advance(t)
                    context.append(t)
                    steps.append(StepStats(token_id=t, n_legal=1, z=None, neg_log_z=None, forced=True))
                    if on_step is not None:
                        on_step(steps[-1])
                forced_used += len(forced)
                if budget is not None and plan is not None and not matcher.is_finished():
                    data = vocab.decode(forced)
                    if plan.startswith(data):  # every completion starts with the forced bytes
                        budget.keep(matcher.state, plan[len(data):])
                continue
        mask = matcher.mask()
        logits = model(context)
        calls += 1
        if budget is None:
            # the pipeline of sample_with_stats, minus its O(len(context)) check of context (all ints)
            token, st = _sample(logits, mask, temperature, top_k, top_p, repetition_penalty, context, gen,
                                want_stats=True)
        else:
            token, st, bound, plan = _budgeted(budget, matcher, mask, logits, max_tokens - len(steps), gen,
                                               (temperature, top_k, top_p, repetition_penalty, context))
            steered += bound
        assert st is not None
        matcher.advance(token)
        if budget is not None and plan is not None and not matcher.is_finished():
            budget.keep(matcher.state, plan)
        context.append(token)
        steps.append(st)
        if on_step is not None:
            on_step(st)
    out = tuple(context[n_prompt:])
    return GenerationResult(
        token_ids=out,
        text_bytes=vocab.decode(out)[len(removed):],
        steps=tuple(steps),
        stats=SequenceStats.from_steps(steps),
        model_calls=calls,
        forced_tokens_used=forced_used,
        finished=matcher.is_finished(),
        accepted=matcher.is_finished() or matcher.is_accepting(),
        budget_steps=steered,
        healed_prefix=removed,
    )


def _budgeted(budget: BudgetPlan, matcher: Any, mask: Mask, logits: Any, left: int, gen: Any,
              opts: tuple[Any, ...]) -> tuple[int, StepStats, int, bytes | None]:
    """One budget-aware draw with ``left`` tokens left (this one included): the token, its stats,
    1 if the budget changed the draw (else 0), and the plan after the token (None: unknown).
    See :func:`generate`."""
    temperature, top_k, top_p, penalty, context = opts
    state = matcher.state
    eos = matcher.vocab.eos_token_id
    if budget.at(state) is None:  # no known completion: sample as without the option
        token, st = _sample(logits, mask, temperature, top_k, top_p, penalty, context, gen, want_stats=True)
        assert st is not None
        return token, st, 0, None
    first: StepStats | None = None
    for _ in range(_RETRIES):
        token, st = _sample(logits, mask, temperature, top_k, top_p, penalty, context, gen, want_stats=True)
        assert st is not None
        first = first or st
        if token == eos:
            return token, st, int(first is not st), None
        rest = budget.fits(state, token, left - 1)
        if rest is not None:
            return token, st, int(first is not st), rest
        mask = mask - Mask.from_token_ids([token], mask.size)
        if not mask:
            break
    planned = budget.next_token(matcher)
    if planned is None:  # the vocabulary cannot spell the plan: sample as without the option
        token, st = _sample(logits, mask, temperature, top_k, top_p, penalty, context, gen, want_stats=True)
        assert st is not None
        return token, st, 1, None
    plan = budget.plan or b""
    rest = None if planned == eos else plan[len(matcher.vocab.token_bytes[planned]):]
    assert first is not None
    st = StepStats(token_id=planned, n_legal=first.n_legal, z=first.z, neg_log_z=first.neg_log_z)
    return planned, st, 1, rest
