"""An independent viability oracle for regex tests, and checks of the oracle itself.

Partial matching comes from the ``regex`` package (``regex.fullmatch(p, text, partial=True)``).
``regex`` and ``re`` disagree on some Unicode classes (``\\w``, ``\\s``, ``\\d``), so patterns are
written twice: in ``re`` syntax for grammarmask, and for the oracle with every character atom
replaced by an explicit class of the code points ``re`` itself says it matches (computed by
running ``re`` over all code points). For outputs that end inside a UTF-8 character, the oracle
asks ``regex`` about one completion per cell of the partition of code points that the pattern's
atoms induce (code points in one cell match exactly the same atoms, so no pattern can tell them
apart).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import re
from dataclasses import dataclass, field

import regex
from hypothesis import strategies as st

MAX_CP = 0x10FFFF

# single-character atoms in re syntax
ATOMS = [
    "a",
    "b",
    "c",
    "é",
    "中",
    "😀",
    r"\n",
    " ",
    r"\.",
    "[a-c]",
    "[^a]",
    "[é-ü]",
    "[😀-😂]",
    r"\d",
    r"\w",
    r"\s",
    r"\D",
    ".",
    r"[^\w\s]",
    "[0-9]",
    r"[\u0100-\u0800]",
    "K",
    "k",
    "ß",
]


@functools.cache
def _all_chars() -> str:
    return "".join(map(chr, range(MAX_CP + 1)))


@functools.cache
def atom_runs(atom: str, flags: int) -> tuple[tuple[int, int], ...]:
    """The code point runs ``re`` matches with the one-character pattern ``atom``."""
    rx = re.compile(f"(?:{atom})+", flags)
    return tuple((m.start(), m.end() - 1) for m in rx.finditer(_all_chars()))


@functools.cache
def explicit(atom: str, flags: int) -> str:
    """``atom`` as an explicit class (no flags needed) for the ``regex`` oracle."""
    runs = atom_runs(atom, flags)
    if not runs:
        return "[^\\x00-\\U0010ffff]"
    return "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in runs) + "]"


@dataclass
class Pattern:
    """One test pattern in both spellings."""

    re_text: str
    oracle_text: str
    flags: int
    atoms: set[str] = field(default_factory=set)

    def __repr__(self) -> str:
        return f"Pattern({self.re_text!r}, flags={self.flags})"


ANCHORS = ["^", "$", r"\A", r"\Z"]


def leaf(atom: str, flags: int) -> Pattern:
    if atom in ANCHORS:
        return Pattern(atom, atom, flags, set())
    return Pattern(atom, explicit(atom, flags), flags, {atom})


def combine(kind: str, parts: list[Pattern], q: str = "") -> Pattern:
    flags = parts[0].flags
    atoms = set().union(*(p.atoms for p in parts))
    if kind == "cat":
        return Pattern("".join(p.re_text for p in parts), "".join(p.oracle_text for p in parts), flags, atoms)
    if kind == "alt":
        return Pattern(
            "(?:" + "|".join(p.re_text for p in parts) + ")",
            "(?:" + "|".join(p.oracle_text for p in parts) + ")",
            flags,
            atoms,
        )
    (p,) = parts
    # laziness does not change a fullmatch language; the oracle gets the greedy form because
    # ``regex`` partial matching mishandles lazy repeats nested in repeats ("(?:a*?a)*" vs "b")
    greedy = q[:-1] if len(q) > 1 and q.endswith("?") else q
    return Pattern(f"(?:{p.re_text}){q}", f"(?:{p.oracle_text}){greedy}", flags, atoms)


QUANTS = ["*", "+", "?", "{1,2}", "{0,3}", "*?", "+?", "{2}", "??"]


def patterns(max_depth: int = 3, anchors: bool = False) -> st.SearchStrategy[Pattern]:
    """Random patterns over :data:`ATOMS` with concatenation, alternation and quantifiers
    (and, with ``anchors``, ``^ $ \\A \\Z`` leaves and MULTILINE: for membership tests only)."""
    leaves = ATOMS + ANCHORS * 3 if anchors else ATOMS
    flag_choices = [0, 0, re.IGNORECASE, re.DOTALL, re.ASCII] + ([re.MULTILINE] * 3 if anchors else [])

    @st.composite
    def build(draw: st.DrawFn) -> Pattern:
        flags = draw(st.sampled_from(flag_choices))

        def node(depth: int) -> Pattern:
            kind = draw(st.sampled_from(["leaf", "leaf", "cat", "alt", "rep"] if depth else ["leaf"]))
            if kind == "leaf":
                return leaf(draw(st.sampled_from(leaves)), flags)
            if kind == "rep":
                return combine("rep", [node(depth - 1)], draw(st.sampled_from(QUANTS)))
            n = draw(st.integers(2, 3))
            return combine(kind, [node(depth - 1) for _ in range(n)])

        return node(max_depth)

    return build()


def utf8_completion_range(tail: bytes) -> tuple[int, int] | None:
    """The code points whose UTF-8 encoding starts with the incomplete sequence ``tail`` (a
    contiguous range, since UTF-8 preserves order), or None if no character starts so."""
    lead = tail[0]
    need = 2 if 0xC2 <= lead <= 0xDF else 3 if 0xE0 <= lead <= 0xEF else 4 if 0xF0 <= lead <= 0xF4 else 0
    if not need or len(tail) >= need:
        return None
    rest = need - len(tail)
    found = []
    for b in range(0x80, 0xC0):
        for fill in (b"\x80", b"\xbf"):
            cand = tail + bytes([b]) + fill * (rest - 1)
            with contextlib.suppress(UnicodeDecodeError):
                found.append(ord(cand.decode("utf-8")))
    return (min(found), max(found)) if found else None


def split_utf8(data: bytes) -> tuple[str, bytes] | None:
    """``(decoded complete part, incomplete tail)``, or None when ``data`` is not a UTF-8 prefix."""
    for cut in range(len(data), max(-1, len(data) - 4), -1):
        tail = data[cut:]
        if tail and (utf8_completion_range(tail) is None):
            continue
        try:
            return data[:cut].decode("utf-8"), tail
        except UnicodeDecodeError:
            continue
    return None


class Oracle:
    """Viability and completeness of byte strings for one :class:`Pattern`."""

    def __init__(self, pattern: Pattern) -> None:
        self.pattern = pattern
        self.rx = regex.compile(pattern.oracle_text)
        self.re = re.compile(pattern.re_text, pattern.flags)
        bounds = {0}
        for atom in pattern.atoms:
            for lo, hi in atom_runs(atom, pattern.flags):
                bounds.update((lo, hi + 1))
        self.bounds = sorted(b for b in bounds if b <= MAX_CP)

    def complete(self, data: bytes) -> bool:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return self.re.fullmatch(text) is not None

    def viable(self, data: bytes) -> bool:
        split = split_utf8(data)
        if split is None:
            return False
        text, tail = split
        if not tail:
            return self.rx.fullmatch(text, partial=True) is not None
        rng = utf8_completion_range(tail)
        assert rng is not None
        lo, hi = rng
        i = bisect.bisect_right(self.bounds, lo)
        cands = [lo] + [b for b in self.bounds[i:] if b <= hi][:10_000]
        return any(self.rx.fullmatch(text + chr(c), partial=True) is not None for c in cands)
