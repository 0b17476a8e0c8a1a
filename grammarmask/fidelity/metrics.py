"""Distances between two distributions over strings, given as ``{string: probability}`` mappings."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

from ..errors import GrammarError

__all__ = ["kl_divergence", "total_variation"]


def kl_divergence(p: Mapping[Hashable, float], q: Mapping[Hashable, float]) -> float:
    """``KL(p || q) = sum_y p(y) log(p(y) / q(y))`` in nats; ``inf`` when ``q`` misses a string ``p``
    gives mass. Both are normalised first (so estimates that do not sum to exactly 1 compare fairly)."""
    sp, sq = _total(p, "p"), _total(q, "q")
    out = 0.0
    for y, py in p.items():
        if py <= 0.0:
            continue
        qy = q.get(y, 0.0)
        if qy <= 0.0:
            return math.inf
        out += (py / sp) * math.log((py / sp) / (qy / sq))
    return max(out, 0.0)


def total_variation(p: Mapping[Hashable, float], q: Mapping[Hashable, float]) -> float:
    """``TV(p, q) = 1/2 sum_y |p(y) - q(y)|`` (both normalised first), in [0, 1]."""
    sp, sq = _total(p, "p"), _total(q, "q")
    keys = set(p) | set(q)
    return 0.5 * sum(abs(p.get(y, 0.0) / sp - q.get(y, 0.0) / sq) for y in keys)


def _total(d: Mapping[Hashable, float], name: str) -> float:
    s = float(sum(d.values()))
    if not math.isfinite(s) or s <= 0.0 or any(v < 0 for v in d.values()):
        raise GrammarError(f"{name} must hold non-negative probabilities with a positive finite sum, "
                           f"got sum {s}")
    return s
