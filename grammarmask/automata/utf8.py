"""Unicode code point ranges as sequences of UTF-8 byte ranges.

The splitting follows regex-automata's ``Utf8Sequences`` (itself after Russ Cox's RE2 notes):
a range of scalar values is split until each piece is encoded by one sequence of byte ranges
``[(lo1, hi1), (lo2, hi2), ...]``, i.e. the byte strings of the piece are exactly the cross
product of those ranges. Surrogates (U+D800..U+DFFF) have no UTF-8 encoding and are dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

__all__ = ["MAX_CODEPOINT", "utf8_sequences"]

MAX_CODEPOINT = 0x10FFFF
_LENGTH_LIMITS = (0x7F, 0x7FF, 0xFFFF)

ByteSeq = tuple[tuple[int, int], ...]


def utf8_sequences(ranges: Iterable[tuple[int, int]]) -> Iterator[ByteSeq]:
    """Yield byte-range sequences whose union encodes exactly the given code point ranges."""
    for lo, hi in ranges:
        yield from _split(lo, hi)


def _split(start: int, end: int) -> Iterator[ByteSeq]:
    stack = [(start, end)]
    while stack:
        s, e = stack.pop()
        if s > e:
            continue
        if s <= 0xDFFF and e >= 0xD800:  # cut out the surrogates
            stack.append((0xE000, e))
            stack.append((s, 0xD7FF))
            continue
        split = False
        for limit in _LENGTH_LIMITS:  # both ends must have the same encoded length
            if s <= limit < e:
                stack.append((limit + 1, e))
                stack.append((s, limit))
                split = True
                break
        if split:
            continue
        if e <= 0x7F:
            yield ((s, e),)
            continue
        for i in (1, 2, 3):
            m = (1 << (6 * i)) - 1
            if (s & ~m) != (e & ~m):
                if (s & m) != 0:
                    stack.append(((s | m) + 1, e))
                    stack.append((s, s | m))
                    split = True
                    break
                if (e & m) != m:
                    stack.append((e & ~m, e))
                    stack.append((s, (e & ~m) - 1))
                    split = True
                    break
        if split:
            continue
        bs = chr(s).encode("utf-8")
        be = chr(e).encode("utf-8")
        yield tuple(zip(bs, be, strict=True))
