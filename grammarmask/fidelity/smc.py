"""Sequential Monte Carlo with the grammar as a potential: a consistent sampler of ``p(y | y in L)``.

Particles are extended by the masked proposal ``q(t) = p(t) / Z`` (the legal tokens only), and each
particle's weight is multiplied by ``Z``, the mass the mask kept. Along a finished path the weight is
then ``prod_i Z_i = p(y) / q(y)``: importance weights that correct the masked sampler to the model's
conditional on the whole output being in ``L``.

Where EOS is legal, it is not sampled but *harvested*: the finished string is recorded with weight
``w * p(EOS | prefix)`` and the particle goes on with the other legal tokens only (weight ``w * Z'``,
``Z'`` their mass). Both branches are kept in expectation, so the estimate is unchanged in mean, and a
short string the model would rarely end on through the mask (it wants to go on, and the grammar forbids
going on later) is never missed: on "at most two fruits" with SmolLM2 the masked proposal ends after one
item with probability 0.004 while the conditional puts 0.996 there (benchmarks/fidelity_infinite.py).

An unfinished particle whose weight has fallen below :data:`ROULETTE` times the mean finished weight
per particle plays Russian roulette (it survives with probability ``w / floor`` and then carries the
floor): unbiased, and it stops particles of an unbounded language from running to ``max_tokens`` with
weights too small to matter.

When the effective sample size ``(sum w)^2 / sum w^2`` of the unfinished particles falls below
``ess_threshold`` times their number, they are resampled among themselves (systematic resampling) and
share their total weight equally, which keeps ``mean(w)`` an unbiased estimate of ``P(L)``. Finished
strings are never resampled: an unfinished particle still has its closing steps to pay, so weighing the
two together undervalues the finished ones.

Del Moral, Doucet & Jasra (2006), *Sequential Monte Carlo samplers*; Lew, Zhi-Xuan, Grand &
Mansinghka (2023), *Sequential Monte Carlo steering of large language models using probabilistic
programs* (the grammar-constrained proposal with ``Z`` as incremental weight, as in genlm-control).

Particles on the same path share one model row and one mask per step (only distinct paths are scored),
so a peaked model costs far fewer rows than ``n_particles`` per step.

As ``n_particles`` grows, the distribution of a string drawn from the finished strings in proportion to
their weights converges to ``p(y | y in L)`` (its bias falls like ``1 / n_particles``); it is not exact
for any finite number of particles. With ``harvest_eos=False`` and one particle it is the masked
sampler (the benchmarks' baseline).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import GrammarError
from ..grammar import CompiledGrammar, Matcher
from ._scoring import F64, legal_ids, logsumexp, next_logprobs

__all__ = ["SmcRun", "run_smc", "systematic_resample"]

# An unfinished particle whose weight is below this fraction of the mean finished weight per particle
# goes to Russian roulette: after EOS is harvested, particles of an unbounded language would otherwise
# all run to max_tokens carrying weights too small to matter, each costing a model row per step.
ROULETTE = 1e-3


@dataclass(frozen=True)
class SmcRun:
    """The finished strings of one run (token ids without EOS, each path once) with their log weights,
    the estimate of ``log P(L)``, and counters. Particles still open at ``max_tokens`` are dropped."""

    tokens: tuple[tuple[int, ...], ...]
    log_weights: F64
    log_z: float
    n_resamples: int
    model_rows: int
    steps: int


def systematic_resample(weights: F64, rng: np.random.Generator) -> list[int]:
    """Indices of ``len(weights)`` draws in proportion to ``weights`` (non-negative, positive sum),
    from one uniform number: each index ``i`` appears ``floor`` or ``ceil`` of ``n * w_i / sum(w)``
    times."""
    n = weights.size
    cum = np.cumsum(weights / weights.sum())
    cum[-1] = 1.0
    points = (rng.random() + np.arange(n)) / n
    return [int(i) for i in np.searchsorted(cum, points, side="right").clip(0, n - 1)]


def _ess(logw: F64) -> float:
    m = float(logw.max())
    if m == -math.inf:
        return 0.0
    w = np.exp(logw - m)
    return float(w.sum() ** 2 / (w * w).sum())


def _draw(lps: F64, lz: float, rng: np.random.Generator) -> int:
    cum = np.cumsum(np.exp(lps - lz))
    i = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
    i = min(i, lps.size - 1)
    while lps[i] == -math.inf:  # only reachable through rounding at the top end
        i -= 1
    return i


def run_smc(model: Any, compiled: CompiledGrammar, prompt: list[int], *, n_particles: int,
            ess_threshold: float, max_tokens: int, temperature: float, batch_size: int,
            rng: np.random.Generator, harvest_eos: bool = True) -> SmcRun:
    """One SMC run (the module docstring says what it computes); options are checked by the caller.
    ``harvest_eos=False`` samples EOS like any other token (with one particle: the masked sampler).

    Raises
    ------
    GrammarError
        Every particle reached weight 0 (the model gives every legal continuation probability 0).
    """
    eos = compiled.vocab.eos_token_id
    matchers: list[Matcher] = [compiled.matcher() for _ in range(n_particles)]
    tokens: list[list[int]] = [[] for _ in range(n_particles)]
    logw = np.zeros(n_particles)
    live = list(range(n_particles))
    finished: dict[tuple[int, ...], float] = {}  # a finished path -> its log weight (paths merged)
    resamples = rows_used = steps = 0
    while steps < max_tokens and live:
        # Particles on the same path (after resampling, or where the model is sure) share one model
        # row and one mask: only the distinct paths are scored.
        group: dict[tuple[int, ...], int] = {}
        first: list[int] = []
        for i in live:
            if group.setdefault(tuple(tokens[i]), len(first)) == len(first):
                first.append(i)
        rows = next_logprobs(model, [prompt + tokens[i] for i in first], compiled.vocab.size, temperature,
                             batch_size)
        masks = [legal_ids(matchers[i]) for i in first]
        rows_used += len(first)
        still: list[int] = []
        for i in live:
            g = group[tuple(tokens[i])]
            row, legal = rows[g], masks[g]
            at = int(np.searchsorted(legal, eos))  # token_ids() is ascending
            if harvest_eos and at < legal.size and legal[at] == eos:
                _finish(finished, tokens[i], float(logw[i]) + float(row[eos]))
                legal = np.delete(legal, at)
            lps = row[legal]
            lz = logsumexp(lps)
            if lz == -math.inf:  # a dead end, or (harvesting) EOS was the only way on
                continue
            t = int(legal[_draw(lps, lz, rng)])
            logw[i] += lz
            if t == eos:
                _finish(finished, tokens[i], float(logw[i]))
                continue
            matchers[i].advance(t)
            tokens[i].append(t)
            still.append(i)
        live = still
        steps += 1
        if not live and not any(w > -math.inf for w in finished.values()):
            raise GrammarError("aligned_sample(): every particle has weight 0: each reached a prefix that no "
                               "token continues, or one whose legal tokens the model gives probability 0")
        if live and finished:
            mean_finished = logsumexp(np.fromiter(finished.values(), float)) - math.log(n_particles)
            live = _roulette(live, logw, mean_finished + math.log(ROULETTE), rng)
        if live and _ess(logw[live]) < ess_threshold * len(live):
            _resample_live(live, logw, matchers, tokens, rng)
            resamples += 1
    # particles still open at max_tokens are not strings of L: their weight is dropped
    paths = tuple(finished)
    final = np.array([finished[p] for p in paths], dtype=np.float64)
    log_z = logsumexp(final) - math.log(n_particles)
    return SmcRun(tokens=paths, log_weights=final, log_z=log_z,
                  n_resamples=resamples, model_rows=rows_used, steps=steps)


def _roulette(live: list[int], logw: F64, log_floor: float, rng: np.random.Generator) -> list[int]:
    """Russian roulette on the unfinished particles whose weight fell below ``exp(log_floor)``: each
    survives with probability ``w / floor`` and then carries ``floor``, so every weight keeps its mean.
    Returns the survivors."""
    keep: list[int] = []
    for i in live:
        lw = float(logw[i])
        if lw >= log_floor:
            keep.append(i)
        elif rng.random() < math.exp(lw - log_floor):
            logw[i] = log_floor
            keep.append(i)
    return keep


def _finish(finished: dict[tuple[int, ...], float], path: list[int], log_weight: float) -> None:
    key = tuple(path)
    old = finished.get(key)
    finished[key] = log_weight if old is None else float(np.logaddexp(old, log_weight))


def _resample_live(live: list[int], logw: F64, matchers: list[Matcher], tokens: list[list[int]],
                   rng: np.random.Generator) -> None:
    """Resample the unfinished particles among themselves, in place: their total weight is kept and
    shared equally, so ``mean(w)`` stays an unbiased estimate of ``P(L)``. Finished particles keep
    their final weights: an unfinished particle's weight still has its closing steps to pay, so
    resampling the two kinds together undervalues the finished ones and loses them (with a peaked
    model, a short string's whole probability mass)."""
    m = float(logw[live].max())
    w = np.exp(logw[live] - m)
    share = m + math.log(float(w.mean()))
    picks = [live[j] for j in systematic_resample(w, rng)]
    new_matchers = [matchers[j].fork() for j in picks]
    new_tokens = [list(tokens[j]) for j in picks]
    for i, matcher, toks in zip(live, new_matchers, new_tokens):
        matchers[i], tokens[i], logw[i] = matcher, toks, share


def normalized(log_weights: Sequence[float] | F64) -> F64:
    """``exp(log_weights)`` scaled to sum 1 (all ``-inf``: a ``GrammarError``)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    lz = logsumexp(lw)
    if lz == -math.inf:
        raise GrammarError("no particle has positive weight")
    return np.exp(lw - lz)
