"""``multipleOf: 0.01`` (10^-k) as ``jsonschema`` checks it: in floating point.

``jsonschema`` accepts ``x`` iff ``q = x / m`` (doubles) is integral, so ``0.07`` is rejected under
``multipleOf: 0.01`` (``7.000000000000001``) while ``0.08`` is accepted. The language produced here is a
subset of what that check accepts:

- integers with at most 13 digits (``n / m`` rounds to exactly ``n * 10^k`` while that is below
  ``2^53`` and the relative error of the double ``m`` is below ``2^-54``, checked at import);
- for integer parts below ``10^(5 - k)`` (1000 for 0.01), every fraction of at most ``k`` digits
  (then zeros) that passes the check, found by running the very check on each value (exact);
- for larger integer parts (at most 13 digits), the fractions whose value is a dyadic rational
  (``.25``/``.5``/``.75`` for ``k = 2``): ``x`` is then exact and ``x / m`` rounds to the integer
  ``x * 10^k`` by the argument above.

Not produced (narrowings): other passing fractions with large integer parts, exponent forms, more than
15 significant digits.
"""

from __future__ import annotations

import functools
from fractions import Fraction

from .numbers import int_groups

__all__ = ["decimal_multiple_regex"]

_CHECKS = 5  # 10^5 values are checked one by one
_MAX_INT_DIGITS = 13


def _power(m: float) -> int | None:
    """k when ``m`` is the double nearest 10^-k (k = 1, 2) and that double is close enough (0.01).

    (0.001 and smaller would work the same way, but their per-value tables make regexes of 200 kB.)
    """
    for k in range(1, 3):
        if m == float(Fraction(1, 10**k)):
            rel = abs(Fraction(m) * 10**k - 1)
            return k if rel < Fraction(1, 2**54) else None
    return None


def _fractions(fs: list[int], k: int) -> str:
    """Regex for the digit strings after the point whose value (k digits, then zeros) is in ``fs``."""
    canon = {str(f).zfill(k).rstrip("0") for f in fs}
    return "(?:" + "|".join(sorted(canon, key=lambda s: (-len(s), s))) + ")0*"


def _is_power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


@functools.lru_cache(maxsize=8)
def decimal_multiple_regex(m: float) -> str | None:
    """Regex for JSON numbers that ``jsonschema`` accepts under ``multipleOf: m`` (a subset, see the
    module docstring), or None when ``m`` is not 0.01 (0.1 fails the error bound)."""
    k = _power(m)
    if k is None:
        return None
    scale = 10**k
    by_set: dict[tuple[int, ...], list[int]] = {}
    small = _CHECKS - k
    for i in range(10**small):
        ok = tuple(f for f in range(1, scale) if (float(f"{i}.{str(f).zfill(k)}") / m).is_integer())
        by_set.setdefault(ok, []).append(i)
    dyadic = [f for f in range(1, scale) if _is_power_of_two(Fraction(f, scale).denominator)]
    alts = []
    for fs, ints in by_set.items():
        if not fs:
            continue
        runs: list[tuple[int, int]] = []
        for i in ints:
            if runs and runs[-1][1] == i - 1:
                runs[-1] = (runs[-1][0], i)
            else:
                runs.append((i, i))
        int_re = "|".join(r for a, b in runs for _, r in int_groups(a, b))
        alts.append(f"(?:{int_re})\\.(?:{_fractions(list(fs), k)}|0+)")
    if dyadic:
        big = f"[1-9][0-9]{{{small},{_MAX_INT_DIGITS - 1}}}"
        alts.append(f"{big}\\.(?:{_fractions(dyadic, k)}|0+)")
    alts.append(f"(?:0|[1-9][0-9]{{0,{_MAX_INT_DIGITS - 1}}})(?:\\.0+)?")
    return "-?(?:" + "|".join(alts) + ")"
