"""Byte automata: DFA membership equals ``re.fullmatch``; UTF-8 ranges; combinators; invariants."""

from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammarmask.automata import (
    DFA,
    concat,
    empty_dfa,
    from_strings,
    literal_dfa,
    minimize,
    product,
    regex_to_dfa,
    union,
)
from grammarmask.automata.sre import EXTRA_CASES, C
from grammarmask.automata.sre import parse as sre_parse
from grammarmask.automata.utf8 import utf8_sequences
from grammarmask.errors import GrammarError

from .support_regex import Pattern, patterns

ALPHABET = [
    "a",
    "b",
    "c",
    "A",
    "K",
    "k",
    "\u212a",
    "ſ",
    "s",
    "S",
    "ß",
    "é",
    "É",
    "中",
    "😀",
    "😁",
    "1",
    "٣",
    " ",
    "\n",
    "\t",
    ".",
    "_",
    "\x00",
    "\x1c",
    "İ",
    "i",
    "ı",
    "Σ",
    "σ",
    "ς",
    "ǅ",
    "ǆ",
    "Ǆ",
]


def texts() -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(ALPHABET), max_size=7).map("".join)


def assert_same_language(dfa: DFA, rx: re.Pattern[str], samples: list[str]) -> None:
    for s in samples:
        assert dfa.matches(s.encode()) == (rx.fullmatch(s) is not None), (rx.pattern, rx.flags, s)


def _nested_repeat(items: Any, inside: bool = False) -> bool:
    """Whether a parsed pattern repeats something that itself holds a repeat (``(a*)*``)."""
    for op, av in items:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            found = inside or _nested_repeat(av[2], True)
        elif op is C.SUBPATTERN:
            found = _nested_repeat(av[3], inside)
        else:
            found = op is C.BRANCH and any(_nested_repeat(alt, inside) for alt in av[1])
        if found:
            return True
    return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns(anchors=True), st.lists(texts(), min_size=20, max_size=40), st.data())
def test_dfa_membership_equals_re_fullmatch(p: Pattern, samples: list[str], data: st.DataObject) -> None:
    rx = re.compile(p.re_text, p.flags)
    dfa = regex_to_dfa(p.re_text, p.flags)
    # from_regex's strings are long enough for re's backtracking to take forever on a nested
    # repeat (one run hung in rx.fullmatch, from_regex's own filter): those are checked on the
    # short samples alone
    nested = _nested_repeat(sre_parse(p.re_text, p.flags))
    positives = []
    if not dfa.is_empty() and not nested:
        positives = [data.draw(st.from_regex(rx, fullmatch=True)) for _ in range(5)]
    assert_same_language(dfa, rx, samples + positives)


CASES = [
    (r"a$", 0, ["a", "a\n", "", "\n"]),
    (r"a$\n", 0, ["a\n", "a", "a\n\n"]),
    (r"a\Z", 0, ["a", "a\n"]),
    (r"\Aab", 0, ["ab", "b"]),
    (r"(^a|b)+", 0, ["a", "aa", "ab", "ba", "abb"]),
    (r"a^b", 0, ["ab", "a\nb"]),
    (r"(?m)a$\n^b", 0, ["a\nb", "ab", "a\n\nb"]),
    (r"(?m)(a$|\n)+", 0, ["a", "a\n", "a\na", "\n\n", "aa"]),
    (r"(?m)(^.|\n)*", 0, ["", "a", "ab", "a\nb", "a\n\nb", "\nab"]),
    (r"x$$\n?", 0, ["x", "x\n", "x\n\n"]),
    (r"$", 0, ["", "\n"]),
    (r"(a|$)*\n", 0, ["\n", "a\n", "aa\n", "\n\n"]),
    (r"[^\w\s]+", re.IGNORECASE, ["A", ".", "K", "\u212a", "._"]),
    (r"k+", re.IGNORECASE, ["K", "\u212a", "kK"]),
    (r"[a-z]+", re.IGNORECASE, ["ſ", "\u212a", "İ", "ı", "ABC"]),
    (r"s", re.IGNORECASE | re.ASCII, ["ſ", "S"]),
    (r"σ+", re.IGNORECASE, ["Σ", "ς", "σς"]),
    (r"ǆ", re.IGNORECASE, ["ǅ", "Ǆ", "ǆ"]),
    (r"ß", re.IGNORECASE, ["ß", "ẞ", "ss"]),
    (r"\w+", re.ASCII, ["abc", "é", "_1"]),
    (r"\s", 0, ["\x1c", "\x85", " ", "\u3000"]),
    (r"a b # comment\n c", re.VERBOSE, ["abc", "a b c"]),
    (r"(?x) a [ ] b", 0, ["a b", "ab"]),
    (r".", 0, ["\n", "a", "😀", "\ud800"[:0]]),
    (r"(?s:.)x", 0, ["\nx", "ax"]),
    (r"[^a]", 0, ["\n", "😀", "a"]),
    (r"a{2,3}?b{0}", 0, ["aa", "aaa", "a"]),
    (r"(?:)|x", 0, ["", "x"]),
    (r"[\U00010000-\U0010ffff]", 0, ["😀", "\U0010ffff", "\uffff"]),
]


@pytest.mark.parametrize(("pattern", "flags", "samples"), CASES)
def test_tricky_cases_match_re(pattern: str, flags: int, samples: list[str]) -> None:
    assert_same_language(regex_to_dfa(pattern, flags), re.compile(pattern, flags), samples)


def test_utf8_sequences_cover_exactly_the_encodings() -> None:
    rng = random.Random(0)
    ranges = [(0, 0x10FFFF), (0x7F, 0x80), (0xD7FF, 0xE000), (0x800, 0xFFFF), (0x10000, 0x10FFFF)]
    ranges += [tuple(sorted((rng.randrange(0x110000), rng.randrange(0x110000)))) for _ in range(100)]
    for lo, hi in ranges:
        seqs = list(utf8_sequences([(lo, hi)]))

        def covered(data: bytes, seqs: list[tuple[tuple[int, int], ...]] = seqs) -> bool:
            return any(len(s) == len(data) and all(a <= b <= z for (a, z), b in zip(s, data)) for s in seqs)

        probes = {
            lo,
            hi,
            max(lo - 1, 0),
            min(hi + 1, 0x10FFFF),
            0xD7FF,
            0xE000,
            0x7F,
            0x80,
            0x7FF,
            0x800,
            0xFFFF,
            0x10000,
            *(rng.randint(0, 0x10FFFF) for _ in range(50)),
        }
        for c in probes:
            if 0xD800 <= c <= 0xDFFF:
                continue
            assert covered(chr(c).encode()) == (lo <= c <= hi), (hex(lo), hex(hi), hex(c))
        for bad in (
            b"\xed\xa0\x80",
            b"\xc0\x80",
            b"\xe0\x80\x80",
            b"\xf0\x80\x80\x80",
            b"\xf4\x90\x80\x80",
            b"\x80",
            b"\xff",
        ):
            assert not covered(bad)


def test_any_char_dfa_rejects_invalid_utf8() -> None:
    dfa = regex_to_dfa(r"(?s).*")
    assert dfa.matches("aé中😀\n".encode())
    for bad in (b"\xed\xa0\x80", b"\xc0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80", b"\xff", b"a\x80"):
        assert not dfa.matches(bad)
    assert dfa.run(dfa.start, b"\xe4") != 0 and dfa.run(dfa.start, b"\xe4\xb8") != 0  # mid-character is live


def invariants(dfa: DFA) -> None:
    t = dfa.transitions
    assert not t[0].any() and not dfa.accepting[0]
    n = dfa.n_states
    if dfa.start == 0:
        assert n == 1
        return
    reach = {dfa.start}
    stack = [dfa.start]
    while stack:
        s = stack.pop()
        for x in set(t[s].tolist()) - reach - {0}:
            reach.add(x)
            stack.append(x)
    assert reach == set(range(1, n))
    live = set(np.flatnonzero(dfa.accepting).tolist())
    changed = True
    while changed:
        changed = False
        for s in range(1, n):
            if s not in live and live & set(t[s].tolist()):
                live.add(s)
                changed = True
    assert live == set(range(1, n))
    assert minimize(dfa).n_states == n
    classes, k = dfa.byte_classes()
    for b1 in range(256):
        for b2 in (0, 97, 255, b1 ^ 1):
            assert (classes[b1] == classes[b2]) == bool((t[:, b1] == t[:, b2]).all())


@pytest.mark.parametrize(
    "pattern",
    [
        r"[a-z]+@[a-z]+\.com",
        r"(a|b)*abb",
        r"\d{2,4}",
        r"(?s).*x",
        r"a\Zb",
        "",
        r"(?i)straße",
        r"[^\W\d]+",
        r"x(y|z)*$",
    ],
)
def test_dfas_are_trimmed_and_minimal(pattern: str) -> None:
    invariants(regex_to_dfa(pattern))


def test_combinators_match_set_semantics() -> None:
    pa, pb = r"[a-c]+\d?", r".{2,3}"
    a, b = regex_to_dfa(pa), regex_to_dfa(pb)
    ra, rb = re.compile(pa), re.compile(pb)
    rc = re.compile(f"(?:{pa})(?:{pb})")
    rng = random.Random(0)
    alphabet = ["a", "b", "c", "1", "é", "\n", "x"]
    p, u, c = product(a, b), union(a, b), concat(a, b)
    for d in (p, u, c):
        invariants(d)
    for _ in range(3000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 7)))
        x, y = bool(ra.fullmatch(s)), bool(rb.fullmatch(s))
        assert p.matches(s.encode()) == (x and y), s
        assert u.matches(s.encode()) == (x or y), s
        assert c.matches(s.encode()) == bool(rc.fullmatch(s)), s
    assert product(regex_to_dfa("a+"), regex_to_dfa("b+")).is_empty()
    assert union(empty_dfa(), a).matches(b"ab")
    assert concat(empty_dfa(), a).is_empty()


def test_from_strings_and_literals() -> None:
    rng = random.Random(1)
    words = {"".join(rng.choice("abcdé") for _ in range(rng.randint(0, 9))) for _ in range(2000)}
    t0 = time.perf_counter()
    dfa = from_strings(w.encode() for w in words)
    assert time.perf_counter() - t0 < 2.0
    invariants(dfa)
    for _ in range(3000):
        w = "".join(rng.choice("abcdé") for _ in range(rng.randint(0, 9)))
        assert dfa.matches(w.encode()) == (w in words)
    lit = literal_dfa("héllo".encode())
    assert lit.matches("héllo".encode()) and not lit.matches(b"hello") and lit.n_states == 8
    assert from_strings([]).is_empty()


def test_state_limit_fails_fast() -> None:
    t0 = time.perf_counter()
    with pytest.raises(GrammarError, match="more than 10000 states"):
        regex_to_dfa(r"(a|b)*a(a|b){25}")
    assert time.perf_counter() - t0 < 5
    assert regex_to_dfa(r"(a|b)*a(a|b){5}").n_states == 65  # 2**6 states plus the dead one


def test_dfa_validates_its_arrays() -> None:
    t = np.zeros((2, 256), np.int32)
    t[0, 5] = 1
    with pytest.raises(ValueError):
        DFA(t, np.zeros(2, bool), 1)
    with pytest.raises(ValueError):
        DFA(np.zeros((2, 255), np.int32), np.zeros(2, bool), 1)
    d = regex_to_dfa("ab")
    with pytest.raises(ValueError):
        d.transitions[1, 0] = 3


def test_many_literal_alternatives_inside_a_pattern() -> None:
    rng = random.Random(5)
    words = sorted({"".join(rng.choice("abé.") for _ in range(rng.randint(1, 5))) for _ in range(60)})
    alt = "|".join(re.escape(w) for w in words)
    for pattern in [f"x(?:{alt})+y?", f"(?:{alt})", f"({alt})", alt, f"[ab]*({alt})$", f"(?:{alt}|q+)"]:
        rx, dfa = re.compile(pattern), regex_to_dfa(pattern)
        invariants(dfa)
        samples = ["x" + rng.choice(words) + rng.choice(["", "y", rng.choice(words)]) for _ in range(200)]
        samples += ["".join(rng.choice("abé.xyq") for _ in range(rng.randint(0, 8))) for _ in range(500)]
        samples += [*words, "qq", "ab" + words[0]]
        assert_same_language(dfa, rx, samples)


def test_no_cased_code_points_above_the_scanned_range() -> None:
    import _sre

    from grammarmask.automata.charsets import CASED_LIMIT

    assert not any(_sre.unicode_iscased(c) for c in range(CASED_LIMIT, 0x110000))
    assert not any(chr(c).upper() != chr(c) or chr(c).lower() != chr(c) for c in range(CASED_LIMIT, 0x110000))


def test_the_case_related_code_points_are_those_re_calls_cased() -> None:
    """The scan that skips chunks str.lower/str.upper leave unchanged finds what asking every code
    point finds."""
    import _sre

    from grammarmask.automata.charsets import CASED_LIMIT, _make_case_related

    every: set[int] = set()
    for c in range(CASED_LIMIT):
        if _sre.unicode_iscased(c):
            up = chr(c).upper()
            every |= {c, _sre.unicode_tolower(c), *([ord(up)] if len(up) == 1 else [])}
    for k, vs in EXTRA_CASES.items():
        every |= {k, *vs}
    assert _make_case_related() == "".join(map(chr, sorted(every)))


def test_parse_from_many_threads_leaves_warning_filters_alone() -> None:
    """Flags not at the start are an error at their column from every thread at once, and the
    warning filters are as they were after (on 3.10 the parse turns re's warning into that error
    for its duration)."""
    import threading
    import warnings

    before = list(warnings.filters)
    failures: list[str] = []

    def parse_many() -> None:
        for _ in range(200):
            try:
                sre_parse("a(?i)b")
                failures.append("a(?i)b parsed")
            except re.error as e:
                if e.pos != 1:
                    failures.append(f"a(?i)b: position {e.pos}")
            sre_parse("(?i)ab|c")

    threads = [threading.Thread(target=parse_many) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert warnings.filters == before


def test_unicode_tables_are_kept_per_installation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables that depend only on Python's Unicode database are made once and read back (exactly)."""
    from grammarmask.automata import charsets

    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(tmp_path))
    made = charsets.category_set.__wrapped__("\\w", False)
    assert len(list(tmp_path.glob("unicode-table-*"))) == 1
    monkeypatch.setattr(charsets, "_runs", lambda *a: pytest.fail("made again"))
    assert charsets.category_set.__wrapped__("\\w", False) == made
    assert made == tuple((m.start(), m.end() - 1) for m in re.finditer(r"(?u)\w+", charsets.all_chars()))


@pytest.mark.parametrize("ascii_only", [False, True])
def test_the_ascii_case_table_is_what_re_matches_each_character_with(ascii_only: bool) -> None:
    """Each ASCII character's case-insensitive set, read from the per-installation table, is the set
    of code points ``re`` itself matches it with (``k`` also matches the Kelvin sign, ``s`` the long
    s, ``i`` the dotted capital I and the dotless i, unless ASCII)."""
    from grammarmask.automata import charsets

    flags = re.IGNORECASE | (re.ASCII if ascii_only else 0)
    table = charsets._ascii_ignorecase_sets.__wrapped__(ascii_only)
    every = charsets.all_chars()
    for c in range(128):
        matched = {m.start() for m in re.finditer(re.escape(chr(c)), every, flags)}
        assert {x for lo, hi in table[c] for x in range(lo, hi + 1)} == matched, chr(c)
    assert (table[ord("k")] == ((75, 75), (107, 107))) == ascii_only


@pytest.mark.parametrize("flags", [0, re.ASCII])
@pytest.mark.parametrize("word", ["select", "KISS", "distinct", "is_1", "k", "Ss", "kk", "sks", "ik"])
def test_a_caseless_keyword_is_built_as_re_matches_it(word: str, flags: int) -> None:
    """``(?i:word)`` (Lark's ``"word"i``) is built without re's parser as a chain of the letters'
    case sets: the language re matches (the Kelvin sign, the long s, the dotted and dotless i among
    the spellings unless ASCII), the same minimal DFA as the general path's, numbered alike (the
    chain is built minimal, not minimised), and its size bound."""
    from grammarmask.automata import regex as rx_module

    pattern = f"(?i:{word})"
    assert rx_module._CASELESS_WORD.fullmatch(pattern)
    fast = rx_module._build(pattern, flags, 10_000)
    invariants(fast)
    general = rx_module.determinize(*_nfa_of(pattern, flags), max_states=10_000)
    assert fast.n_states == general.n_states
    assert np.array_equal(fast.transitions, minimize(general).transitions)
    assert np.array_equal(fast.accepting, minimize(general).accepting) and fast.start == 1
    rng = random.Random(word)
    others = ["\u212a", "\u017f", "\u0130", "\u0131", "y"]  # K (Kelvin), long s, dotted I, dotless i
    samples = ["".join(rng.choice([c.lower(), c.upper(), *others]) for c in word) for _ in range(1500)]
    samples += [s[:-1] for s in samples[:100]] + [s + "s" for s in samples[:100]]
    samples += [word, word.swapcase(), ""]
    assert_same_language(fast, re.compile(pattern, flags), samples)
    with pytest.raises(GrammarError, match="too complex"):
        rx_module._build(pattern, flags, len(word))


def _nfa_of(pattern: str, flags: int) -> tuple[Any, int, int]:
    """The Thompson NFA of ``pattern`` (the general path of regex_to_dfa) and its start and final."""
    from grammarmask.automata import regex as rx_module
    from grammarmask.automata.nfa import NFA

    tree = rx_module.parse(pattern, flags)
    nfa = NFA(max_states=100_000)
    start, final = nfa.new_state(), nfa.new_state()
    rx_module._Builder(nfa, pattern).build(tree, int(tree.state.flags) | flags, start, final)
    return nfa, start, final
