"""Sequential Monte Carlo with the grammar as a potential: a consistent sampler of ``p(y | y in L)``.

Particles are extended by the masked proposal ``q(t) = p(t) / Z`` (the legal tokens only), and each
particle's weight is multiplied by ``Z``, the mass the mask kept. Along a finished path the weight is
then ``prod_i Z_i = p(y) / q(y)``: importance weights that correct the masked sampler to the model's
conditional on the whole output being in ``L``. When the effective sample size
``(sum w)^2 / sum w^2`` falls below ``ess_threshold * n_particles``, the particles are resampled
(systematic resampling) and their weights set to the mean, which keeps ``mean(w)`` an unbiased
estimate of ``P(L)``.

Del Moral, Doucet & Jasra (2006), *Sequential Monte Carlo samplers*; Lew, Zhi-Xuan, Grand &
Mansinghka (2023), *Sequential Monte Carlo steering of large language models using probabilistic
programs* (the grammar-constrained proposal with ``Z`` as incremental weight, as in genlm-control).

Particles on the same path share one model row and one mask per step (only distinct paths are scored),
so a peaked model costs far fewer rows than ``n_particles`` per step.

With one particle this is exactly the masked sampler. As ``n_particles`` grows, the distribution of a
string drawn from the final particles in proportion to their weights converges to ``p(y | y in L)``
(its bias falls like ``1 / n_particles``); it is not exact for any finite number of particles.
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


@dataclass(frozen=True)
class SmcRun:
    """The final particles of one run: token ids (no EOS), log weights (``-inf``: the particle did not
    finish within ``max_tokens``), the estimate of ``log P(L)``, and counters."""

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
            rng: np.random.Generator) -> SmcRun:
    """One SMC run (the module docstring says what it computes); options are checked by the caller.

    Raises
    ------
    GrammarError
        Every particle reached weight 0 (the model gives every legal continuation probability 0).
    """
    eos = compiled.vocab.eos_token_id
    matchers: list[Matcher] = [compiled.matcher() for _ in range(n_particles)]
    tokens: list[list[int]] = [[] for _ in range(n_particles)]
    logw = np.zeros(n_particles)
    done = [False] * n_particles
    log_scale = 0.0  # log of the mean weight folded out at each resampling
    resamples = rows_used = steps = 0
    while steps < max_tokens and not all(done):
        alive = [i for i in range(n_particles) if not done[i]]
        # Particles on the same path (after resampling, or where the model is sure) share one model
        # row and one mask: only the distinct paths are scored.
        group: dict[tuple[int, ...], int] = {}
        first: list[int] = []
        for i in alive:
            if group.setdefault(tuple(tokens[i]), len(first)) == len(first):
                first.append(i)
        rows = next_logprobs(model, [prompt + tokens[i] for i in first], compiled.vocab.size, temperature,
                             batch_size)
        masks = [legal_ids(matchers[i]) for i in first]
        rows_used += len(first)
        for i in alive:
            g = group[tuple(tokens[i])]
            row, legal = rows[g], masks[g]
            lps = row[legal]
            lz = logsumexp(lps)
            if lz == -math.inf:
                logw[i], done[i] = -math.inf, True
                continue
            t = int(legal[_draw(lps, lz, rng)])
            logw[i] += lz
            matchers[i].advance(t)
            if t == eos:
                done[i] = True
            else:
                tokens[i].append(t)
        steps += 1
        if float(logw.max()) == -math.inf:
            raise GrammarError("aligned_sample(): every particle has weight 0: each reached a prefix that no "
                               "token continues, or one whose legal tokens the model gives probability 0")
        if not all(done) and _ess(logw) < ess_threshold * n_particles:
            m = float(logw.max())
            w = np.exp(logw - m)
            log_scale += m + math.log(float(w.mean()))
            picks = systematic_resample(w, rng)
            matchers = [matchers[j].fork() for j in picks]
            tokens = [list(tokens[j]) for j in picks]
            done = [done[j] for j in picks]
            logw = np.zeros(n_particles)
            resamples += 1
    final = np.where(np.array(done), logw, -math.inf)  # unfinished at max_tokens: not a string of L
    log_z = log_scale + logsumexp(final) - math.log(n_particles)
    return SmcRun(tokens=tuple(tuple(t) for t in tokens), log_weights=final, log_z=log_z,
                  n_resamples=resamples, model_rows=rows_used, steps=steps)


def normalized(log_weights: Sequence[float] | F64) -> F64:
    """``exp(log_weights)`` scaled to sum 1 (all ``-inf``: a ``GrammarError``)."""
    lw = np.asarray(log_weights, dtype=np.float64)
    lz = logsumexp(lw)
    if lz == -math.inf:
        raise GrammarError("no particle has positive weight")
    return np.exp(lw - lz)
