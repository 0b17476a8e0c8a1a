"""Numbers and strings of a JSON Schema node: the terminals for ``minimum``/``multipleOf``/...,
``minLength``/``pattern``/``format`` (and their intersections, intersect.py), long strings as chunks."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

from ...automata import regex_to_dfa
from ...errors import BudgetExceeded, GrammarError, UnsupportedSchemaError
from ...ir.builder import Expr, Lit, Pat, alt, seq
from .counting import Counter
from .formats import FORMATS, enforced_format, format_width
from .intersect import TooLarge, intersection_dfa, intersection_terminal
from .keyset import KeySetTooLarge, key_regex
from .multiples import decimal_multiple_regex
from .numbers import NON_INTEGER, number_regex
from .strings import (
    ANY_CHAR,
    NOTHING,
    key_not_in_terminal,
    pattern_regex,
    plain_bounds,
    plain_string,
    quoted_plain_dfa,
)

if TYPE_CHECKING:
    from .compiler import Compiler

__all__ = ["ScalarBuilder"]

LONG_STRING = 256  # maxLength above this is written as chunk lexemes (see long_string)
CHUNK = 256
COUNTED_CHUNKS = 64  # past this many chunks (or a minLength past COUNTED_MIN), counted_string
COUNTED_MIN = 1024
# a number range's regex longer than this (bounds of about 40 digits and more: the regex grows with
# the square of the digits) is compiled by _range_dfa, which names the schema location if it fails
_LONG_RANGE = 2000


def _range_dfa(regex: str, ptr: str, keyword: str) -> Any:
    """The DFA of a ``minimum``/``maximum`` range's regex; a range too large to compile is reported at
    its JSON pointer and budget, not as a terminal of thousands of characters."""
    try:
        return regex_to_dfa(regex)
    except BudgetExceeded as e:
        what = f"the numbers between the bounds ({e.what})"
        err: GrammarError = BudgetExceeded(e.budget, e.value, what, where=ptr)
    except GrammarError:  # the automaton's state limit: no Limits field of the user's to raise
        err = UnsupportedSchemaError("the numbers between the bounds need an automaton past the state "
                                     "limit (bounds of about a hundred digits or more)",
                                     keyword=keyword, pointer=ptr)
    raise err


def _count(v: Any) -> int | None:
    """A length keyword's value as an int (integral floats too), or None if it is not one."""
    if isinstance(v, float) and v.is_integer() and v >= 0:
        return int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _length_states(lo: int, hi: int | None) -> int:
    """States of the minimal DFA of a JSON string of ``lo..hi`` characters (``plain_string``): linear in
    the count that bounds it (``hi``, else ``lo``), so extrapolated from the DFAs of 1 and 2 characters."""
    n = hi if hi is not None else lo
    if n < 2 or (hi is None and lo == 0):
        return n
    one, two = _length_dfa_states(1), _length_dfa_states(2)
    return one + (two - one) * (n - 1)


@functools.cache
def _length_dfa_states(n: int) -> int:
    return int(regex_to_dfa(f'"{plain_string(n, n)}"').n_states)


class ScalarBuilder:
    """The number and string parts of one compilation (rules and terminals go into the Compiler)."""

    def __init__(self, c: Compiler) -> None:
        self.c = c
        self._long: dict[tuple[int, int | None], Expr] = {}  # long_string rules by (lo, hi)
        self._chunks: dict[tuple[int, int, bool], Expr] = {}

    def number(self, s: dict[str, Any], integer: bool, ptr: str) -> Expr | None:
        lo, lo_x, hi, hi_x = None, False, None, False
        for k, strict_ in (("minimum", False), ("exclusiveMinimum", True)):
            v = s.get(k)
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            if num and (lo is None or v > lo or (v == lo and strict_)):
                lo, lo_x = v, strict_
        for k, strict_ in (("maximum", False), ("exclusiveMaximum", True)):
            v = s.get(k)
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            if num and (hi is None or v < hi or (v == hi and strict_)):
                hi, hi_x = v, strict_
        for b in (lo, hi):
            if isinstance(b, float) and (b != b or b in (float("inf"), float("-inf"))):
                raise GrammarError(f"at {ptr or '/'}: a numeric bound must be finite")
        m = s.get("multipleOf")
        # 6.0 is an integer type from draft 6 on, and a multiple of 1 (6.0 % 1 == 0) in every draft
        int_fraction = self.c.int_fraction or not integer
        if s.get("_nonint"):  # not an integer: NON_INTEGER, intersected with the bounds
            if m is not None:
                self.c.unsupported("not", ptr, "'not integer' together with multipleOf")
                return None
            if lo is None and hi is None:
                return Pat(NON_INTEGER)
            r = number_regex(lo, lo_x, hi, hi_x, integer=False, int_fraction=self.c.draft >= 6)
            if r is None:
                return self.c.empty(ptr, f"no number in the range {lo}..{hi}")
            return self.intersection_terminal(tuple(sorted({r, NON_INTEGER})), "not", ptr, Pat(r))
        if m is not None:
            if not isinstance(m, (int, float)) or isinstance(m, bool) or m <= 0:
                raise GrammarError(f"at {ptr or '/'}: multipleOf must be a positive number")
            if isinstance(m, float) and m.is_integer():
                m = int(m)
            if isinstance(m, int):
                if m > 1:
                    return self.multiples(m, lo, lo_x, hi, hi_x, ptr)
                integer = True
            elif decimal_multiple_regex(m) is None:
                self.c.unsupported(
                    "multipleOf",
                    ptr,
                    "a non-integer multipleOf other than 0.01 is not supported "
                    "(jsonschema checks it in floating point)",
                )
        r = number_regex(lo, lo_x, hi, hi_x, integer=integer, int_fraction=int_fraction)
        if r is None:
            return self.c.empty(ptr, f"no number in the range {lo}..{hi}")
        dm = decimal_multiple_regex(m) if isinstance(m, float) else None
        if dm is not None:  # multipleOf 10^-k, as jsonschema's float check sees it (multiples.py)
            if lo is None and hi is None and not integer:
                return Pat(dm)
            return self.intersection_terminal(tuple(sorted({r, dm})), "multipleOf", ptr, Pat(r))
        if len(r) > _LONG_RANGE:  # bounds of many digits: a failure is said at the schema's pointer
            names = ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum")
            bounds = "/".join(k for k in names if k in s)
            return Pat(r, functools.partial(_range_dfa, r, ptr or "/", bounds))
        return Pat(r)

    def multiples(self, m: int, lo: Any, lo_x: bool, hi: Any, hi_x: bool, ptr: str) -> Expr | None:
        import math

        if lo is not None and hi is not None:
            a = math.floor(lo) + 1 if lo_x and lo == math.floor(lo) else math.ceil(lo)
            b = math.ceil(hi) - 1 if hi_x and hi == math.ceil(hi) else math.floor(hi)
            first = -(-a // m) * m
            if first > b:
                return self.c.empty(ptr, "no multiple of multipleOf in range")
            count = (b - first) // m + 1
            if count <= 256:
                vals = [str(v) for v in range(first, b + 1, m)]
                vals.sort(key=lambda v: -len(v))
                return Pat("(?:" + "|".join(vals) + ")")
        if lo is None and hi is None:
            n2 = m
            a2 = b5 = 0
            while n2 % 2 == 0:
                n2, a2 = n2 // 2, a2 + 1
            while n2 % 5 == 0:
                n2, b5 = n2 // 5, b5 + 1
            k = max(a2, b5)
            if n2 == 1 and 10**k // m <= 200:
                sufs = [str(v).zfill(k) for v in range(0, 10**k, m)]
                small = sorted((str(v) for v in range(0, 10**k, m)), key=lambda v: -len(v))
                mag = "(?:[1-9][0-9]*(?:" + "|".join(sufs) + ")|" + "|".join(small) + ")"
                return Pat("-?" + mag)
        self.c.unsupported("multipleOf", ptr, f"multipleOf {m} with this range has no compact exact form")
        return Pat(
            number_regex(lo, lo_x, hi, hi_x, integer=True, int_fraction=self.c.int_fraction) or NOTHING
        )

    def string(self, s: dict[str, Any], ptr: str, excluded: list[str]) -> Expr | None:
        lo, hi = s.get("minLength", 0), s.get("maxLength")
        if s.get("_not_patterns"):
            return self.string_avoiding(s, ptr, excluded)
        plain = "pattern" not in s and enforced_format(s) is None and not excluded
        lo_n, hi_n = _count(lo), None if hi is None else _count(hi)
        counts = lo_n is not None and (hi is None or hi_n is not None)  # else string_body refuses
        if plain and counts and ((lo_n or 0) > COUNTED_MIN or (hi_n or 0) > COUNTED_CHUNKS * CHUNK):
            return self.counted_string(lo_n or 0, hi_n, ptr)
        if plain and hi_n is not None and hi_n > LONG_STRING and lo_n is not None and lo_n <= CHUNK:
            return self.long_string(lo_n, hi_n)  # integral floats too (maxLength: 20e2)
        extra: list[str] = []
        body = self.string_body(s, ptr, extra)
        if body is None:
            return None
        if extra:
            return self.intersection(body, extra, s, ptr, excluded)
        if excluded:
            if body != plain_string(0, None):
                self.c.unsupported("not", ptr, "excluding string values from a constrained string")
            else:
                return key_not_in_terminal(excluded)
        bounds = plain_bounds(f'"{body}"')
        if bounds is not None and bounds != (0, None):
            # a string of counted characters: its DFA built directly when the IR is built (an
            # unbounded one stays a plain Pat, the same terminal as the strings of untyped values)
            return Pat(f'"{body}"', functools.partial(quoted_plain_dfa, f'"{body}"'))
        return Pat(f'"{body}"')

    def intersection(
        self, body: str, extra: list[str], s: dict[str, Any], ptr: str, excluded: list[str]
    ) -> Expr | None:
        """A named terminal for strings matching ``body`` and every ``extra`` regex (exact product)."""
        keyword = "maxLength" if "maxLength" in s else "minLength" if "minLength" in s else "pattern"
        if excluded:
            self.c.unsupported("not", ptr, "excluding string values from a constrained string")
        lo, hi = int(s.get("minLength", 0)), s.get("maxLength")
        big = _length_states(lo, None if hi is None else int(hi)) > self.c.limits.json_schema_product_states
        if big and plain_string(lo, None if hi is None else int(hi)) in extra:
            # the length automaton alone is over the budget (each part is built under it), so the
            # product is refused: said at once instead of after building most of it (minutes for
            # minLength 10,000: minimising a long chain takes a Moore round per state)
            self.c.unsupported(keyword, ptr, "these constraints together: product automaton too large")
            return Pat(f'"{body}"')
        parts = tuple(sorted({f'"{r}"' for r in (body, *extra)}))
        return self.intersection_terminal(parts, keyword, ptr, Pat(f'"{body}"'))

    def intersection_terminal(
        self, parts: tuple[str, ...], keyword: str, ptr: str, fallback: Expr
    ) -> Expr | None:
        """A terminal for the intersection of the full-terminal regexes ``parts`` (intersect.py);
        ``fallback`` (the first constraint alone) if the product is too large and strict is off."""
        known = self.c.isect.get(parts)
        if known is not None:
            return known
        try:
            dfa = intersection_dfa(parts, self.c.limits.json_schema_product_states)
        except TooLarge:
            self.c.unsupported(keyword, ptr, "these constraints together: product automaton too large")
            return fallback
        if dfa.is_empty():
            return self.c.empty(ptr, "no value satisfies these constraints together")
        term = self.c.isect[parts] = intersection_terminal(parts, self.c.limits.json_schema_product_states)
        return term

    def string_avoiding(self, s: dict[str, Any], ptr: str, excluded: list[str]) -> Expr | None:
        """A string that ``re.search``-matches none of ``not: {pattern}``: a key-set DFA (no line
        terminators in the string, a narrowing)."""
        lo, hi = s.get("minLength", 0), s.get("maxLength")
        match = [s["pattern"]] if isinstance(s.get("pattern"), str) else []
        if hi is not None or lo > 1 or enforced_format(s) is not None:
            self.c.unsupported("not", ptr, "'not pattern' together with format or length limits")
            return None
        if lo == 1:
            match.append(".")
        try:
            body = key_regex(match, list(s["_not_patterns"]), excluded)
        except (KeySetTooLarge, re.error, RecursionError) as e:
            self.c.unsupported("not", ptr, f"'not pattern' is too complex here ({e})")
            return None
        return None if body is None else Pat(f'"{body}"')

    def long_string(self, lo: int, hi: int) -> Expr:
        """A string of lo..hi characters (lo <= CHUNK) as chunk lexemes, so no automaton has to count
        to ``hi``: full chunks of exactly CHUNK characters, then a closing chunk of at most CHUNK
        characters and the closing quote. After i full chunks of k_max = ceil(hi / CHUNK), the
        closing chunk may hold CHUNK characters, or hi - CHUNK*(k_max-1) after k_max - 1 of them;
        only a closing chunk with no full chunk before it must hold lo. Inside a chunk, the states
        more than a token's length from its end all walk alike (see cfg.rootwalk.walk_classes), so
        most of a long string is masked from one shared walk.
        """
        if (lo, hi) in self._long:
            return self._long[(lo, hi)]
        k_max = -(-hi // CHUNK)
        last = hi - CHUNK * (k_max - 1)
        rest = self.chunk(lo if k_max == 1 else 0, last, closing=True)
        full = self.chunk(CHUNK, CHUNK)
        for i in range(k_max - 2, -1, -1):  # what may follow i full chunks
            closing = self.chunk(lo if i == 0 else 0, CHUNK, closing=True)
            rest = self.c.rule(alt([seq(full, rest), closing]), "c")
        self._long[(lo, hi)] = self.c.rule(seq(Lit('"'), rest), "q")
        return self._long[(lo, hi)]

    def counted_string(self, lo: int, hi: int | None, ptr: str) -> Expr | None:
        """A string of lo..hi characters (hi None: unbounded) as chunk lexemes counted in O(log n)
        rules (counting.py): ``q_lo = lo // CHUNK`` full chunks, then either a closing chunk of
        at least ``lo % CHUNK`` characters, or 1 to ``q_hi - q_lo - 1`` further full chunks and any
        closing chunk, or exactly ``q_hi - q_lo`` further full chunks and a closing chunk of at
        most ``hi % CHUNK`` (``q_hi, r_hi = divmod(hi, CHUNK)``): every length in lo..hi, no other.
        Its size grows with the logarithm of the bounds: ``maxLength: 2147483647`` is about 60 rules.
        """
        if hi is not None and lo > hi:
            return self.c.empty(ptr, "minLength > maxLength")
        if (lo, hi) in self._long:
            return self._long[(lo, hi)]
        full = self.chunk(CHUNK, CHUNK)
        count = Counter(self.c, full, "c")
        qlo, rlo = divmod(lo, CHUNK)
        tail: Expr
        if hi is None:
            tail = self.c.rule(Pat(f'{ANY_CHAR}{{{rlo},}}"'), "k")
        else:
            qhi, rhi = divmod(hi, CHUNK)
            if qlo == qhi:
                tail = self.chunk(rlo, rhi, closing=True)
            else:
                alts = [self.chunk(rlo, CHUNK, closing=True)]
                if qhi - qlo >= 2:
                    alts.append(seq(full, count.at_most(qhi - qlo - 2), self.chunk(0, CHUNK, closing=True)))
                alts.append(seq(count.exactly(qhi - qlo), self.chunk(0, rhi, closing=True)))
                tail = self.c.rule(alt(alts), "c")
        self._long[(lo, hi)] = self.c.rule(seq(Lit('"'), count.exactly(qlo), tail), "q")
        return self._long[(lo, hi)]

    def chunk(self, lo: int, hi: int, *, closing: bool = False) -> Expr:
        """A rule for one chunk lexeme of lo..hi characters, with the closing quote if ``closing``
        (shared: the regex is long)."""
        key = (lo, hi, closing)
        if key not in self._chunks:
            body = f"{ANY_CHAR}{{{lo},{hi}}}" + ('"' if closing else "")
            self._chunks[key] = self.c.rule(Pat(body), "k")
        return self._chunks[key]

    def string_body(self, s: dict[str, Any], ptr: str, extra: list[str] | None = None) -> str | None:
        """Regex for the JSON text inside the quotes (None: no string fits).

        With ``extra``, constraints that do not fold into one regex are appended to it as further
        regexes the string must also match (the caller intersects them); without it they are refused.
        """
        lo = s.get("minLength", 0)
        hi = s.get("maxLength")
        for k, v in (("minLength", lo), ("maxLength", hi)):
            bad = v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0)
            if bad and not (isinstance(v, float) and v.is_integer() and v >= 0):
                raise GrammarError(f"at {ptr or '/'}: {k} must be a non-negative integer")
        lo, hi = int(lo), (None if hi is None else int(hi))
        if hi is not None and lo > hi:
            return self.c.empty(ptr, "minLength > maxLength")
        fmt = enforced_format(s)
        pat = s.get("pattern")
        if fmt is not None and fmt not in FORMATS:
            self.c.unsupported("format", ptr, f"format {fmt!r} is not supported")
            fmt = None
        if fmt is not None and pat is not None:
            if extra is not None and isinstance(pat, str):
                extra.append(pattern_regex(pat, ptr)[0])
            else:
                self.c.unsupported("pattern", ptr, "pattern together with format is not supported")
            pat = None
        if fmt is not None:
            wlo, whi = format_width(fmt)
            if wlo < lo or (hi is not None and (whi is None or whi > hi)):
                if extra is not None:
                    extra.append(plain_string(lo, hi))
                    return FORMATS[fmt]
                self.c.unsupported(
                    "maxLength" if hi is not None else "minLength",
                    ptr,
                    f"a length limit on format {fmt!r} is not supported",
                )
            return FORMATS[fmt]
        if pat is not None:
            if not isinstance(pat, str):
                raise GrammarError(f"at {ptr or '/'}: pattern must be a string")
            r, ok = pattern_regex(pat, ptr, lo, hi)
            if not ok and extra is not None:
                extra.append(plain_string(lo, hi))
            elif not ok:
                self.c.unsupported(
                    "maxLength" if hi is not None else "minLength",
                    ptr,
                    "this combination of pattern and length limits is not supported",
                )
            return r
        return plain_string(lo, hi)
