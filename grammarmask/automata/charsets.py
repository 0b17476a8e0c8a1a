"""Code point sets with Python ``re`` semantics: ``\\d \\w \\s``, classes, case folding.

Sets are tuples of disjoint, sorted, inclusive ``(lo, hi)`` code point ranges. Everything that
depends on Unicode tables is computed by asking ``re`` itself (once per process, cached), so the
sets agree with ``re.fullmatch`` by construction rather than by re-implementing its tables.
"""

from __future__ import annotations

import _sre
import bisect
import functools
import re
from collections.abc import Iterable

import numpy as np

from .utf8 import MAX_CODEPOINT

__all__ = ["RangeSet", "all_chars", "category_set", "complement", "ignorecase_set", "normalize"]

RangeSet = tuple[tuple[int, int], ...]
CASED_LIMIT = 0x20000


@functools.cache
def all_chars() -> str:
    """Every code point U+0000..U+10FFFF (surrogates included) as one string."""
    codes = np.arange(MAX_CODEPOINT + 1, dtype="<u4").tobytes()
    return codes.decode("utf-32-le", "surrogatepass")


def normalize(ranges: Iterable[tuple[int, int]]) -> RangeSet:
    """Sort and merge overlapping or adjacent ranges."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def complement(ranges: RangeSet) -> RangeSet:
    """All code points not in ``ranges`` (``ranges`` must be normalized)."""
    out = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return tuple(out)


def _runs(pattern: str, text: str) -> RangeSet:
    return tuple((m.start(), m.end() - 1) for m in re.finditer(pattern, text))


@functools.cache
def category_set(escape: str, ascii_only: bool) -> RangeSet:
    """The code points matched by ``\\d``, ``\\D``, ``\\w``, ``\\W``, ``\\s`` or ``\\S``."""
    flag = "(?a)" if ascii_only else "(?u)"
    return _runs(f"{flag}{escape}+", all_chars())


@functools.cache
def _case_related() -> tuple[str, frozenset[int]]:
    """Code points whose case-insensitive matching may differ from exact matching."""
    rel: set[int] = set()
    for c in range(CASED_LIMIT):  # no code point at or above CASED_LIMIT is cased (tested)
        if _sre.unicode_iscased(c):
            rel.add(c)
            rel.add(_sre.unicode_tolower(c))
            up = chr(c).upper()
            if len(up) == 1:
                rel.add(ord(up))
    from re import _casefix  # type: ignore[attr-defined]

    for k, vs in _casefix._EXTRA_CASES.items():
        rel.add(k)
        rel.update(vs)
    codes = sorted(rel)
    return "".join(map(chr, codes)), frozenset(codes)


def ignorecase_set(exact: RangeSet, single_char_pattern: str, flags: int) -> RangeSet:
    """Case-insensitive version of ``exact``, the set of ``single_char_pattern`` without IGNORECASE.

    For a code point outside the case-related set, IGNORECASE matching equals exact matching;
    the related ones (a few thousand) are decided by ``re`` itself.
    """
    text, related = _case_related()
    compiled = re.compile(single_char_pattern, flags | re.IGNORECASE)
    keep = [(lo, hi) for lo, hi in _subtract_points(exact, related)]
    hits = [(ord(m.group()), ord(m.group())) for m in compiled.finditer(text)]
    return normalize(keep + hits)


def _subtract_points(ranges: RangeSet, points: frozenset[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    srt = sorted(points)

    for lo, hi in ranges:
        i = bisect.bisect_left(srt, lo)
        cur = lo
        while i < len(srt) and srt[i] <= hi:
            if srt[i] > cur:
                out.append((cur, srt[i] - 1))
            cur = srt[i] + 1
            i += 1
        if cur <= hi:
            out.append((cur, hi))
    return out


def may_change_with_case(ranges: RangeSet) -> bool:
    """Whether any code point in ``ranges`` is case related (cheap pre-check)."""
    rel = _related_array()
    if not ranges:
        return False
    lo = np.array([r[0] for r in ranges])
    hi = np.array([r[1] for r in ranges])
    return bool(np.any(np.searchsorted(rel, hi, "right") > np.searchsorted(rel, lo, "left")))


@functools.cache
def _related_array() -> np.ndarray:
    return np.array(sorted(_case_related()[1]), dtype=np.int64)
