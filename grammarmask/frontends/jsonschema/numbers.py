"""Exact regexes for JSON numbers in a range (``minimum``/``maximum`` and their exclusive forms).

The regexes are written over the JSON text of a number and follow two rules:

- **Exact against ``jsonschema``.** Pure integer forms are compared exactly with the bound (Python
  compares ``int`` with ``float`` exactly). Forms with a fraction become a ``float`` in ``json.loads``;
  they are compared with the shortest decimal ``repr`` of a float bound and are limited to 15
  significant digits (integer part at most 14 digits). Under that limit ``float(s) op bound`` holds
  exactly when the decimal comparison does (decimals of <= 15 digits map to distinct doubles and
  rounding is monotone), so a number accepted here is never rejected by ``jsonschema``. Exponent
  forms are produced only when no bound other than 0 applies.
- **Greedy-safe.** lark's dynamic lexer takes Python's ``re.match`` of a terminal, so at every
  alternation the branches that consume more are listed first: a valid number is never cut short.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

__all__ = ["JSON_NUMBER", "NON_INTEGER", "number_regex"]

_DIGITS = 15  # significant digits allowed in a fractional form under a bound
_INT_DIGITS = _DIGITS - 1

JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_EXP = r"(?:[eE][+-]?[0-9]+)?"
# Numbers that are not integers, as json.loads + jsonschema see them: a nonzero fraction digit within
# 15 significant digits (so the float is not integral either), no exponent (a narrowing). Longer
# integer parts first (greedy-safe).
NON_INTEGER = (
    "-?(?:"
    + "|".join(f"[1-9][0-9]{{{i - 1}}}\\.[0-9]{{0,{14 - i}}}[1-9]0*" for i in range(14, 0, -1))
    + "|0\\.[0-9]{0,14}[1-9]0*)"
)
_MAG_ANY = r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?" + _EXP
_MAG_NONZERO = r"(?:[1-9][0-9]*(?:\.[0-9]+)?|0\.0*[1-9][0-9]*)" + _EXP


def _cls(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    return f"[{lo}-{hi}]"


def _rep(atom: str, lo: int, hi: int | None) -> str:
    """``atom`` repeated lo..hi times (hi None: unbounded)."""
    if hi is None:
        return {0: f"{atom}*", 1: f"{atom}+"}.get(lo, f"{atom}{{{lo},}}")
    if hi <= 0:
        return ""
    if lo == hi:
        return atom if lo == 1 else f"{atom}{{{lo}}}"
    return f"{atom}?" if (lo, hi) == (0, 1) else f"{atom}{{{lo},{hi}}}"


def _sub(budget: int | None, used: int) -> int | None:
    return None if budget is None else budget - used


# ---- integers -------------------------------------------------------------------------------------


def _same_len(a: str, b: str) -> list[str]:
    """Regexes (each exactly len(a) digits) for the integers a..b written with len(a) digits."""
    n = len(a)
    if a == b:
        return [a]
    if n == 1:
        return [_cls(int(a), int(b))]
    if a[0] == b[0]:
        return [a[0] + r for r in _same_len(a[1:], b[1:])]
    if a[1:] == "0" * (n - 1) and b[1:] == "9" * (n - 1):
        return [_cls(int(a[0]), int(b[0])) + _rep("[0-9]", n - 1, n - 1)]
    out = _same_len(a, a[0] + "9" * (n - 1))
    if int(a[0]) + 1 <= int(b[0]) - 1:
        out.append(_cls(int(a[0]) + 1, int(b[0]) - 1) + _rep("[0-9]", n - 1, n - 1))
    out += _same_len(b[0] + "0" * (n - 1), b)
    return out


def int_groups(a: int, b: int | None) -> list[tuple[int, str]]:
    """(digit count, regex) for the non-negative integers a..b (b None: no upper bound), longest first.

    The unbounded tail is reported with digit count ``10**9``.
    """
    if b is not None and a > b:
        return []
    out: list[tuple[int, str]] = []
    top = len(str(b)) if b is not None else len(str(a))
    for n in range(len(str(a)), top + 1):
        lo = max(a, 0 if n == 1 else 10 ** (n - 1))
        hi = 10**n - 1 if b is None else min(b, 10**n - 1)
        if lo <= hi:
            out += [(n, r) for r in _same_len(str(lo).zfill(n), str(hi))]
    if b is None:
        out.append((10**9, "[1-9]" + _rep("[0-9]", top, None)))
    out.sort(key=lambda g: -g[0])
    return out


# ---- fractions (the digit strings after the point) -------------------------------------------------


def _any(budget: int | None) -> str:
    return _rep("[0-9]", 0, budget)


def _nonzero(budget: int | None) -> list[str]:
    """Digit strings (length <= budget) with a nonzero digit."""
    if budget is None:
        return ["0*[1-9][0-9]*"]
    return [_rep("0", z, z) + "[1-9]" + _any(budget - 1 - z) for z in range(budget)]


def _ge(d: str, excl: bool, budget: int | None) -> list[str]:
    """Digit strings s (maybe empty, len <= budget) with 0.s >= 0.d (> if excl); d has no trailing 0."""
    out = []
    for i, c in enumerate(d):
        if c != "9" and (budget is None or i + 1 <= budget):
            out.append(d[:i] + _cls(int(c) + 1, 9) + _any(_sub(budget, i + 1)))
    if budget is None or len(d) <= budget:
        rest = _sub(budget, len(d))
        out += [d + t for t in _nonzero(rest)] if excl else [d + _any(rest)]
    return out


def _le(d: str, excl: bool, budget: int | None) -> list[str]:
    """Digit strings s (maybe empty, len <= budget) with 0.s <= 0.d (< if excl); d has no trailing 0."""
    cont: list[str] = []
    ends: list[str] = []
    for i, c in enumerate(d):
        if c != "0" and (budget is None or i + 1 <= budget):
            cont.append(d[:i] + _cls(0, int(c) - 1) + _any(_sub(budget, i + 1)))
        if budget is None or i <= budget:
            ends.append(d[:i])
    if not excl and (budget is None or len(d) <= budget):
        cont.append(d + _rep("0", 0, _sub(budget, len(d))))
    return cont + ends[::-1]


def _between(a: str, b: str, lo_excl: bool, hi_excl: bool, budget: int | None) -> list[str]:
    """Digit strings s with 0.a <= 0.s <= 0.b (exclusive per flag); 0.a < 0.b."""
    width = max(len(a), len(b))
    pa = a.ljust(width, "0")
    i = next(k for k in range(width) if pa[k] != b[k])
    prefix, da, db = b[:i], int(pa[i]), int(b[i])
    out: list[str] = []
    if budget is None or i + 1 <= budget:
        rest = _sub(budget, i + 1)
        out += [prefix + str(da) + s for s in _ge(a[i + 1 :], lo_excl, rest)]
        if da + 1 <= db - 1:
            out.append(prefix + _cls(da + 1, db - 1) + _any(rest))
        out += [prefix + str(db) + s for s in _le(b[i + 1 :], hi_excl, rest)]
    if not lo_excl:  # s == a: a itself padded with 0..i-len(a) zeros (longer first)
        out += [prefix[:j] for j in range(i, len(a) - 1, -1)]
    return out


def _split(x: Decimal) -> tuple[int, str]:
    """Integer part and fraction digits (no trailing zeros) of a non-negative decimal."""
    ip = int(x)
    frac = x - ip
    digits = format(frac, "f").partition(".")[2].rstrip("0") if frac else ""
    return ip, digits


def _alt(parts: list[str]) -> str:
    parts = [p for p in parts if p]
    if not parts:
        return ""
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


def _frac_groups(
    lo: Decimal, lo_excl: bool, hi: Decimal | None, hi_excl: bool, integer: bool
) -> list[tuple[int, str]]:
    """(integer digit count, regex) for the fractional forms (with a point) of magnitudes in range."""
    out: list[tuple[int, str]] = []
    cap = 10**_INT_DIGITS - 1
    if integer:  # the value must be an integer: fraction all zeros
        a = math.floor(lo) + 1 if lo_excl and lo == int(lo) else math.ceil(lo)
        b = cap if hi is None else (math.ceil(hi) - 1 if hi_excl and hi == int(hi) else math.floor(hi))
        for n, r in int_groups(a, min(b, cap)):
            out.append((n, r + r"\." + _rep("0", 1, _DIGITS - n)))
        return out
    li, lf = _split(lo)
    hi_i, hf = _split(hi) if hi is not None else (None, "")

    def add(ip: int, body: list[str], optional: bool) -> None:
        n = len(str(ip))
        if ip > cap:
            return
        budget = _DIGITS - n
        # The fraction after the point is never empty.
        nonempty = {_any(budget): _rep("[0-9]", 1, budget), _rep("0", 0, budget): _rep("0", 1, budget)}
        body = [nonempty.get(b, b) for b in body if b]
        if body:
            out.append((n, f"{ip}\\.{_alt(body)}"))
        del optional  # the point-less form is produced by the integer groups

    if hi_i is not None and li == hi_i and lf == hf:
        budget = _DIGITS - len(str(li))
        if budget >= len(lf):
            add(li, [lf + _rep("0", 0 if lf else 1, budget - len(lf))], False)
        return out
    if hi_i is not None and li == hi_i:
        add(li, _between(lf, hf, lo_excl, hi_excl, _DIGITS - len(str(li))), False)
        return out
    add(li, _ge(lf, lo_excl, _DIGITS - len(str(li))), False)
    top = cap if hi_i is None else min(hi_i - 1, cap)
    for n, r in int_groups(li + 1, top):
        out.append((n, r + r"\." + _rep("[0-9]", 1, _DIGITS - n)))
    if hi_i is not None:
        add(hi_i, _le(hf, hi_excl, _DIGITS - len(str(hi_i))), False)
    return out


def _magnitude(
    lo: Decimal,
    lo_excl: bool,
    hi: Decimal | None,
    hi_excl: bool,
    ilo: int,
    ihi: int | None,
    integer: bool,
    int_fraction: bool,
) -> str:
    """Regex for the magnitudes m >= 0 in the range (decimal bounds for fractions, ilo..ihi for ints)."""
    if hi is None and lo == 0 and not integer:
        return _MAG_NONZERO if lo_excl else _MAG_ANY
    groups = [(n, 0, r) for n, r in int_groups(ilo, ihi)]
    if int_fraction or not integer:
        groups += [(n, 1, r) for n, r in _frac_groups(lo, lo_excl, hi, hi_excl, integer)]
    # Forms with a point first (each needs "." right after its integer part, so one that does not
    # fit falls through), then bare integers, longer first.
    groups.sort(key=lambda g: (-g[1], -g[0]))
    return _alt([r for _, _, r in groups])


def _dec(x: int | float) -> Decimal:
    return Decimal(x) if isinstance(x, int) else Decimal(repr(float(x)))


def _int_lo(x: int | float, excl: bool) -> int:
    f = Fraction(x)
    return math.floor(f) + 1 if excl else math.ceil(f)


def _int_hi(x: int | float, excl: bool) -> int:
    f = Fraction(x)
    return math.ceil(f) - 1 if excl else math.floor(f)


def number_regex(
    lo: int | float | None,
    lo_excl: bool,
    hi: int | float | None,
    hi_excl: bool,
    *,
    integer: bool,
    int_fraction: bool = True,
) -> str | None:
    """Regex for the JSON numbers (integers if ``integer``) in the range, or None if it is empty.

    ``int_fraction``: integers may be written with a zero fraction (``1.0``), as draft 6 and later
    allow; draft 4 counts only integer literals.
    """
    if lo is None and hi is None:
        if integer:
            return r"-?(?:0|[1-9][0-9]*)" + (r"(?:\.0+)?" if int_fraction else "")
        return JSON_NUMBER
    if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_excl or hi_excl))):
        return None
    sides: list[str] = []
    # Non-negative side: magnitudes m with lo op m op hi.
    if hi is None or hi > 0 or (hi == 0 and not hi_excl):
        mlo, mlo_excl = (Decimal(0), False) if lo is None or lo < 0 else (_dec(lo), lo_excl)
        ilo = 0 if lo is None or lo < 0 else max(0, _int_lo(lo, lo_excl))
        ihi = None if hi is None else _int_hi(hi, hi_excl)
        mhi = None if hi is None else _dec(hi)
        if ihi is None or ilo <= ihi or not integer:
            body = _magnitude(mlo, mlo_excl, mhi, hi_excl, ilo, ihi, integer, int_fraction)
            if body:
                sides.append(body)
    # Negative side: "-" then magnitudes m with -m in range, i.e. -hi op m op -lo.
    if lo is None or lo < 0 or (lo == 0 and not lo_excl):
        mlo, mlo_excl = (Decimal(0), False) if hi is None or hi > 0 else (-_dec(hi), hi_excl)
        ilo = 0 if hi is None or hi > 0 else max(0, -_int_hi(hi, hi_excl))
        ihi = None if lo is None else -_int_lo(lo, lo_excl)
        mhi = None if lo is None else -_dec(lo)
        if ihi is None or ilo <= ihi or not integer:
            body = _magnitude(mlo, mlo_excl, mhi, lo_excl, ilo, ihi, integer, int_fraction)
            if body:
                sides.append("-" + body)
    if not sides:
        return None
    return sides[0] if len(sides) == 1 else "(?:" + "|".join(sides[::-1]) + ")"
