"""Counted repetition in O(log n) rules: ``x`` exactly ``n`` times, or at most ``n`` times.

A count written out as a chain of rules (one per position) grows with the bound: ``maxLength:
2147483647`` became millions of rules and ``minItems: 15000`` as many states. Here the powers
``E_0 = x`` and ``E_{j+1} = E_j E_j`` (``x`` exactly ``2^j`` times) are the only rules that count:

- ``exactly(n)`` is the powers of the binary digits of ``n`` in sequence;
- ``at_most(n)``, with ``2^m <= n < 2^(m+1)``, is ``E_{m-1}? ... E_0?`` (any count below ``2^m``,
  each by its binary digits) or ``E_m at_most(n - 2^m)``.

Both are exact and unambiguous (a count has one derivation, and a derivation's count fixes how the
input splits), so the Earley sets of a long repetition stay small: ``O(log n)`` items per set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...ir.builder import EMPTY, Expr, alt, opt, seq

if TYPE_CHECKING:
    from .compiler import Compiler

__all__ = ["Counter"]


class Counter:
    """Counted repetitions of one expression ``unit``, sharing its power rules."""

    def __init__(self, c: Compiler, unit: Expr, hint: str = "n") -> None:
        self.c = c
        self.hint = hint
        self.powers: list[Expr] = [unit]
        self.below: dict[int, Expr] = {}
        self.most: dict[int, Expr] = {}

    def power(self, j: int) -> Expr:
        """``unit`` exactly ``2**j`` times."""
        while len(self.powers) <= j:
            e = self.powers[-1]
            self.powers.append(self.c.rule(seq(e, e), self.hint))
        return self.powers[j]

    def exactly(self, n: int) -> Expr:
        """``unit`` exactly ``n`` times (``EMPTY`` for 0)."""
        return seq(*[self.power(j) for j in range(n.bit_length() - 1, -1, -1) if n >> j & 1])

    def under_power(self, m: int) -> Expr:
        """``unit`` 0 to ``2**m - 1`` times."""
        if m not in self.below:
            parts = [opt(self.power(j)) for j in range(m - 1, -1, -1)]
            self.below[m] = self.c.rule(seq(*parts), self.hint) if len(parts) > 1 else seq(*parts)
        return self.below[m]

    def at_most(self, n: int) -> Expr:
        """``unit`` 0 to ``n`` times."""
        if n == 0:
            return EMPTY
        if n not in self.most:
            m = n.bit_length() - 1
            top = seq(self.power(m), self.at_most(n - (1 << m)))
            self.most[n] = self.c.rule(alt([self.under_power(m), top]) if m else opt(top), self.hint)
        return self.most[n]
