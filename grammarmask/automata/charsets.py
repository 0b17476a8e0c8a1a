"""Code point sets with Python ``re`` semantics: ``\\d \\w \\s``, classes, case folding.

Sets are tuples of disjoint, sorted, inclusive ``(lo, hi)`` code point ranges. Everything that
depends on Unicode tables is computed by asking ``re`` itself (once per installation: kept in the
on-disk cache, and per process in memory), so the sets agree with ``re.fullmatch`` by construction
rather than by re-implementing its tables.
"""

from __future__ import annotations

import _sre
import bisect
import functools
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np

from .utf8 import MAX_CODEPOINT

__all__ = ["RangeSet", "all_chars", "ascii_ignorecase_set", "category_set", "complement", "ignorecase_set",
           "normalize"]

RangeSet = tuple[tuple[int, int], ...]
CASED_LIMIT = 0x20000
T = TypeVar("T")


def _per_installation(name: str, make: Callable[[], T]) -> T:
    """``make()``'s table, kept in the on-disk cache: it depends only on the Python that runs (its
    ``re`` and Unicode database), so it is made once per installation, as the metaschema checks are
    (``\\w`` over every code point: 11-18 ms to make, a fraction of a millisecond to read back)."""
    from .. import disk_cache

    key = (name, sys.version, unicodedata.unidata_version)
    return disk_cache.load_or_make("unicode-table", key, make)


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
    return _per_installation(f"category {flag}{escape}", lambda: _runs(f"{flag}{escape}+", all_chars()))


@functools.cache
def _case_related() -> str:
    """Code points whose case-insensitive matching may differ from exact matching, in order."""
    return _per_installation("case related", _make_case_related)


def _make_case_related() -> str:
    rel: set[int] = set()
    for c in _maybe_cased():
        if _sre.unicode_iscased(c):
            rel.add(c)
            rel.add(_sre.unicode_tolower(c))
            up = chr(c).upper()
            if len(up) == 1:
                rel.add(ord(up))
    from .sre import EXTRA_CASES

    for k, vs in EXTRA_CASES.items():
        rel.add(k)
        rel.update(vs)
    return "".join(map(chr, sorted(rel)))


_CHUNK = 128


def _maybe_cased() -> Iterable[int]:
    """Every code point below CASED_LIMIT that may be cased, in order (a superset; tested).

    A code point ``re`` calls cased has a simple lower or upper case mapping other than itself,
    and then its full mapping (what ``str.lower``/``str.upper`` apply) differs too; so a chunk that
    both leave unchanged holds none, and ``unicode_iscased`` is asked only in the others (43 of
    1,024 chunks on Python 3.11: the table in about 3 ms instead of 5.5).
    """
    chars = np.arange(CASED_LIMIT, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    for lo in range(0, CASED_LIMIT, _CHUNK):  # no code point at or above CASED_LIMIT is cased (tested)
        chunk = chars[lo : lo + _CHUNK]
        if chunk.lower() != chunk or chunk.upper() != chunk:
            yield from range(lo, lo + _CHUNK)


def ignorecase_set(exact: RangeSet, single_char_pattern: str, flags: int) -> RangeSet:
    """Case-insensitive version of ``exact``, the set of ``single_char_pattern`` without IGNORECASE.

    For a code point outside the case-related set, IGNORECASE matching equals exact matching;
    the related ones (a few thousand) are decided by ``re`` itself.
    """
    text = _case_related()
    compiled = re.compile(single_char_pattern, flags | re.IGNORECASE)
    keep = _subtract_points(exact, _related_list())
    hits = [(ord(m.group()), ord(m.group())) for m in compiled.finditer(text)]
    return normalize(keep + hits)


def ascii_ignorecase_set(code: int, ascii_only: bool) -> RangeSet:
    """:func:`ignorecase_set` of the ASCII character ``code`` alone (the letters of a keyword such as
    Lark's ``"select"i``), read from a table made once per installation: asked one by one, each new
    letter cost ~60 us of scanning the case-related code points, and the first one loading them."""
    return _ascii_ignorecase_sets(ascii_only)[code]


@functools.cache
def _ascii_ignorecase_sets(ascii_only: bool) -> tuple[RangeSet, ...]:
    flags = re.ASCII if ascii_only else 0
    return _per_installation(
        f"ascii ignorecase {'(?a)' if ascii_only else '(?u)'}",
        lambda: tuple(ignorecase_set(((c, c),), f"\\x{c:02x}", flags) for c in range(128)))


def _subtract_points(ranges: RangeSet, srt: list[int]) -> list[tuple[int, int]]:
    """``ranges`` without the code points of the sorted list ``srt``."""
    out: list[tuple[int, int]] = []

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
    return np.array(_related_list(), dtype=np.int64)


@functools.cache
def _related_list() -> list[int]:
    return [ord(c) for c in _case_related()]
