"""``aligned_sample``: draw from the model's distribution conditioned on the whole output being in the
grammar's language, ``p(y | y in L)``, instead of the masked sampler's ``prod_t p(t | prefix, legal)``.

- ``method="exact"`` (finite languages): enumerate every token path (:func:`exact_distributions`) and
  draw from the exact conditional. Exact; costs one model row per legal prefix.
- ``method="smc"`` (any language): sequential Monte Carlo with the grammar as a potential
  (:mod:`grammarmask.fidelity.smc`). Consistent: the output distribution converges to the
  conditional as ``n_particles`` grows (bias of order ``1 / n_particles``). Costs at most
  ``n_particles`` times the model rows of one masked generation (particles on one path share a row).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._args import as_int_list
from ..errors import GrammarError
from ..grammar import CompiledGrammar, Grammar, ensure_compiled
from ..sampling import RngLike, _check_seed, _rng
from ..vocab import Vocabulary
from ._scoring import check_positive, check_temperature
from .enumerate import PathBudgetExceeded, exact_distributions
from .smc import normalized, run_smc

__all__ = ["AlignedResult", "Particle", "aligned_sample"]


@dataclass(frozen=True)
class Particle:
    """A weighted token path: ``token_ids`` (EOS not included), its bytes, and its log weight
    (unnormalised; ``-inf`` for a particle that did not finish)."""

    token_ids: tuple[int, ...]
    text_bytes: bytes
    log_weight: float


@dataclass(frozen=True)
class AlignedResult:
    """What :func:`aligned_sample` returned.

    Attributes
    ----------
    token_ids, text_bytes
        The drawn output (EOS not included): one particle drawn in proportion to its weight.
    particles
        The weighted paths it was drawn from: SMC's finished strings (each path once), or every path
        of the language for ``method="exact"``.
    log_z
        ``log P(L)``, the model's log-probability of emitting a string of the language: exact for
        ``method="exact"``; for SMC the log of an unbiased estimate of ``P(L)``.
    method
        ``"exact"`` or ``"smc"``.
    n_resamples
        Resampling steps taken (SMC).
    model_rows
        Next-token distributions computed (model rows, over all particles or prefixes).
    """

    token_ids: tuple[int, ...]
    text_bytes: bytes
    particles: tuple[Particle, ...]
    log_z: float
    method: str
    n_resamples: int
    model_rows: int

    @property
    def text(self) -> str:
        """``text_bytes`` as UTF-8."""
        return self.text_bytes.decode("utf-8", errors="replace")

    def distribution(self) -> dict[bytes, float]:
        """The particles' normalised weights summed per string: the exact conditional for
        ``method="exact"``, SMC's weighted estimate of it otherwise."""
        w = normalized([p.log_weight for p in self.particles])
        out: dict[bytes, float] = {}
        for p, wi in zip(self.particles, w.tolist()):
            if wi > 0.0:
                out[p.text_bytes] = out.get(p.text_bytes, 0.0) + wi
        return out


def aligned_sample(
    model: Any,
    vocab: Vocabulary,
    grammar: Grammar | CompiledGrammar,
    prompt_ids: Sequence[int] = (),
    *,
    n_particles: int = 16,
    method: Literal["smc", "exact"] = "smc",
    ess_threshold: float = 0.5,
    max_tokens: int = 256,
    temperature: float = 1.0,
    max_paths: int = 10_000,
    batch_size: int = 64,
    rng: RngLike = None,
    seed: int | None = None,
) -> AlignedResult:
    """Sample an output of ``grammar`` from ``model``'s distribution conditioned on the whole output
    being in the language: ``p(y | y in L)``, not the masked sampler's ``prod_t p(t | prefix, legal)``.

    ``model`` is a :class:`~grammarmask.models.LogitsModel` called with ``prompt_ids`` plus a path;
    if it also has ``batch_logits(list_of_sequences) -> [n, vocab]``, the particles (or a level of
    prefixes) are scored in batches of ``batch_size``. Both methods sample at ``temperature``
    (``softmax(logits / temperature)`` per step); top-k, top-p and penalties have no place in the
    target and are not offered.

    ``method="exact"``: enumerates the finite language (every tokenization; at most ``max_paths``
    paths of at most ``max_tokens`` tokens) and draws from the exact conditional.
    ``method="smc"``: ``n_particles`` particles extended by the masked proposal, weighted by the mass
    the mask kept; wherever EOS is legal the finished string is recorded with its weight and the
    particle goes on (EOS is harvested, not sampled); the unfinished particles are resampled when
    their effective sample size falls below ``ess_threshold`` times their number; the output is
    drawn from the finished strings by weight. Asymptotically exact (consistent as ``n_particles``
    grows), not exact for a finite number (:mod:`grammarmask.fidelity.smc`). The target is then
    conditioned on finishing within ``max_tokens`` tokens (particles still open at the limit are
    dropped). Give ``rng`` (a Generator or an int seed) or ``seed``.

    Raises
    ------
    PathBudgetExceeded
        ``method="exact"`` on a language with more than ``max_paths`` paths or a string longer than
        ``max_tokens`` tokens; ``method="smc"`` when no particle finished within ``max_tokens``.
    GrammarError
        A grammar compiled for another vocabulary, bad options, logits of the wrong shape, or a model
        that gives every legal output probability 0.
    """
    compiled = ensure_compiled(grammar, vocab, caller="aligned_sample()")
    temperature = check_temperature(temperature, "aligned_sample()")
    n_particles = check_positive(n_particles, "aligned_sample(): n_particles")
    max_tokens = check_positive(max_tokens, "aligned_sample(): max_tokens")
    batch_size = check_positive(batch_size, "aligned_sample(): batch_size")
    ok = isinstance(ess_threshold, (int, float)) and not isinstance(ess_threshold, bool)
    if not ok or not 0.0 <= float(ess_threshold) <= 1.0:
        raise GrammarError(
            f"aligned_sample(): ess_threshold must be a number in [0, 1], got {ess_threshold!r}")
    if method not in ("smc", "exact"):
        raise GrammarError(f"aligned_sample(): method must be 'smc' or 'exact', got {method!r}")
    if rng is not None and seed is not None:
        raise GrammarError("aligned_sample(): give rng or seed, not both")
    gen = _rng(rng) if seed is None else np.random.default_rng(_check_seed(seed, "seed"))
    prompt = as_int_list(prompt_ids, "aligned_sample: prompt_ids")
    if method == "exact":
        return _exact(model, vocab, compiled, prompt, temperature, max_paths, max_tokens, batch_size, gen)
    run = run_smc(model, compiled, prompt, n_particles=n_particles, ess_threshold=float(ess_threshold),
                  max_tokens=max_tokens, temperature=temperature, batch_size=batch_size, rng=gen)
    if run.log_z == -math.inf:
        raise PathBudgetExceeded("max_tokens", max_tokens,
                                 f"no particle of {n_particles} finished within {max_tokens} tokens")
    particles = tuple(Particle(t, vocab.decode(t), float(w)) for t, w in zip(run.tokens, run.log_weights))
    return _draw_from(particles, run.log_z, "smc", run.n_resamples, run.model_rows, gen)


def _exact(model: Any, vocab: Vocabulary, compiled: CompiledGrammar, prompt: list[int], temperature: float,
           max_paths: int, max_tokens: int, batch_size: int, gen: np.random.Generator) -> AlignedResult:
    d = exact_distributions(model, vocab, compiled, prompt, temperature=temperature, max_paths=max_paths,
                            max_tokens=max_tokens, batch_size=batch_size)
    particles = tuple(Particle(p.token_ids, p.text_bytes, p.log_p - d.log_mass) for p in d.paths)
    return _draw_from(particles, d.log_mass, "exact", 0, d.n_nodes, gen)


def _draw_from(particles: tuple[Particle, ...], log_z: float, method: str, resamples: int, rows: int,
               gen: np.random.Generator) -> AlignedResult:
    w = normalized([p.log_weight for p in particles])
    cum = np.cumsum(w)
    i = min(int(np.searchsorted(cum, gen.random() * cum[-1], side="right")), len(particles) - 1)
    while w[i] == 0.0:
        i -= 1
    chosen = particles[i]
    return AlignedResult(token_ids=chosen.token_ids, text_bytes=chosen.text_bytes, particles=particles,
                         log_z=log_z, method=method, n_resamples=resamples, model_rows=rows)
