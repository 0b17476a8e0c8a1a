"""Checks of the regex viability oracle itself (tests/support_regex.py), against re and Python's codec."""

from __future__ import annotations

import re

import regex

from .support_regex import ATOMS, Oracle, combine, explicit, leaf, split_utf8, utf8_completion_range

# -- checks of the oracle itself (against re and Python's codec) ----------------------------------


def test_completion_ranges_match_the_codec() -> None:
    assert utf8_completion_range(b"\xe4") == (0x4000, 0x4FFF)
    assert utf8_completion_range(b"\xed") == (0xD000, 0xD7FF)  # no surrogates
    assert utf8_completion_range(b"\xe0") == (0x800, 0xFFF)  # no overlongs
    assert utf8_completion_range(b"\xf0\x9f") == (0x1F000, 0x1FFFF)
    assert utf8_completion_range(b"\xf4\x8f\xbf") == (0x10FFC0, 0x10FFFF)
    assert utf8_completion_range(b"\xc0") is None
    assert utf8_completion_range(b"\xf5") is None
    assert utf8_completion_range(b"\xed\xa0") is None
    assert split_utf8("aé".encode() + b"\xe4\xb8") == ("aé", b"\xe4\xb8")
    assert split_utf8(b"a\xff") is None
    assert split_utf8(b"\x80") is None


def test_explicit_classes_agree_with_re() -> None:
    for atom in ATOMS:
        for flags in (0, re.IGNORECASE, re.ASCII, re.DOTALL):
            ex = regex.compile(explicit(atom, flags))
            rx = re.compile(atom, flags)
            for c in [*range(0, 0x600), *range(0x1E00, 0x2200), *range(0x1F600, 0x1F610), 0x10FFFF]:
                ch = chr(c)
                assert bool(ex.fullmatch(ch)) == bool(rx.fullmatch(ch)), (atom, flags, hex(c))


def test_oracle_agrees_with_re_on_complete_strings() -> None:
    p = combine("cat", [leaf(r"\w", 0), combine("rep", [leaf("[😀-😂]", 0)], "+")])
    o = Oracle(p)
    assert o.complete("x😀".encode()) and not o.complete(b"x")
    assert o.viable(b"x") and o.viable("x😀".encode()[:2]) and not o.viable(b"x\xe4")
    assert not o.viable(b"!")


def test_lazy_repeats_get_a_greedy_oracle() -> None:
    p = combine("rep", [combine("cat", [combine("rep", [leaf("a", 0)], "*?"), leaf("a", 0)])], "*")
    o = Oracle(p)
    assert not o.viable(b"b") and o.viable(b"aa") and o.complete(b"")
