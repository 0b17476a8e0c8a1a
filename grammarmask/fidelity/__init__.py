"""Distribution fidelity: how far token-by-token masking is from the model's conditional on the
language, and a sampler that closes the gap.

Masking samples ``prod_t p(t | prefix, legal)``; the model's distribution conditioned on the whole
output being in the language ``L`` is ``p(y | y in L)``. They differ whenever the model's early
choices lead into parts of ``L`` it then finds unlikely (the mask cannot see ahead).

- :func:`exact_distributions`: both distributions exactly, on a finite language (every token path of
  every string, scored by the model), and :func:`kl_divergence` / :func:`total_variation` between them.
- :func:`aligned_sample` (also ``grammarmask.aligned_sample``): draws from ``p(y | y in L)``: exactly
  on finite languages (``method="exact"``), or by sequential Monte Carlo with the grammar as a
  potential on any language (``method="smc"``, consistent as the particles grow).
"""

from .aligned import AlignedResult, Particle, aligned_sample
from .enumerate import FiniteDistributions, PathBudgetExceeded, ReplayModel, TokenPath, exact_distributions
from .metrics import kl_divergence, total_variation

__all__ = [
    "AlignedResult",
    "FiniteDistributions",
    "Particle",
    "PathBudgetExceeded",
    "ReplayModel",
    "TokenPath",
    "aligned_sample",
    "exact_distributions",
    "kl_divergence",
    "total_variation",
]
