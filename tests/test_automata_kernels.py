"""The Rust automata kernels (src/automata/, :mod:`grammarmask.automata.kernels`) against the Python
code they replace (minimisation, products, string sets, byte classes, the subset construction): the
same DFA state for state (table, accepting states, start), the same byte classes as the table's, the
same errors; and bad input refused with an error naming it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammarmask import GrammarError, _engine
from grammarmask.automata import kernels
from grammarmask.automata.dfa import DFA, class_reps, column_classes, minimize_python
from grammarmask.automata.nfa import NFA, determinize, determinize_python
from grammarmask.automata.ops import _small_trie_dfa, from_strings, pair_dfa_python
from grammarmask.automata.regex import _Builder, _spellings, chain_python, parse

from .support import isomorphic
from .support_automata import dfas, small_dfas
from .support_regex import Pattern, patterns


def same(a: DFA, b: DFA) -> bool:
    return (
        a.start == b.start
        and np.array_equal(a.transitions, b.transitions)
        and np.array_equal(a.accepting, b.accepting)
    )


def classes_right(d: DFA) -> bool:
    """The classes the kernel handed over are the table's (first-appearance numbering), its table
    by class is the table read at each class's first byte, and its DFA passes the checks
    ``DFA._trusted`` skips."""
    assert d.transitions.dtype == np.int32 and d.accepting.dtype == np.bool_ and type(d.start) is int
    assert not d.transitions.flags.writeable and not d.accepting.flags.writeable
    DFA(d.transitions, d.accepting, d.start)  # shape, dead state 0, start in range
    got, k = d.byte_classes()
    want, k2 = column_classes(d.transitions)
    classes, k3, by_class, accepting = d.class_table()
    assert k3 == k and np.array_equal(np.frombuffer(classes, dtype=np.uint8), got)
    table = np.frombuffer(by_class, dtype=np.int32).reshape(d.n_states, k)
    assert np.array_equal(table, d.transitions[:, class_reps(want, k2)])
    assert accepting == d.accepting.tobytes()
    return k == k2 and np.array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(d=small_dfas())
def test_minimize_small(d: DFA) -> None:
    got = kernels.minimize(d)
    assert same(got, minimize_python(d))
    assert classes_right(got)


@settings(max_examples=30, deadline=None)
@given(d=dfas())
def test_minimize_large(d: DFA) -> None:
    assert same(kernels.minimize(d), minimize_python(d))


@pytest.mark.parametrize("op", ["and", "or", "minus"])
@settings(max_examples=150, deadline=None)
@given(a=small_dfas(), b=small_dfas())
def test_products(op: str, a: DFA, b: DFA) -> None:
    got = kernels.product(a, b, op, 10_000)
    assert same(got, pair_dfa_python(a, b, op, 10_000))
    assert classes_right(got)


@settings(max_examples=60, deadline=None)
@given(a=small_dfas(), b=small_dfas(), limit=st.integers(1, 6))
def test_the_product_state_limit(a: DFA, b: DFA, limit: int) -> None:
    try:
        want: DFA | str = pair_dfa_python(a, b, "or", limit)
    except GrammarError as e:
        want = str(e)
    try:
        got: DFA | str = kernels.product(a, b, "or", limit)
    except GrammarError as e:
        got = str(e)
    assert type(got) is type(want)
    assert got == want if isinstance(got, str) else same(got, want)  # type: ignore[arg-type]


words = st.lists(st.binary(max_size=6).map(lambda w: bytes(b % 4 + 97 for b in w)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(ws=words)
def test_string_sets(ws: list[bytes]) -> None:
    uniq = sorted(set(ws))
    if not uniq:
        return
    got = kernels.from_strings(uniq)
    assert same(got, _small_trie_dfa(uniq))
    assert classes_right(got)
    for w in uniq:
        assert got.matches(w)


def test_a_large_string_set_equals_the_array_trie(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    uniq = sorted({bytes(rng.integers(97, 103, size=int(rng.integers(1, 12)))) for _ in range(5000)})
    got = kernels.from_strings(uniq)
    monkeypatch.setattr(kernels, "available", lambda: False)  # the numpy path, past its 4 KB
    want = from_strings(uniq)
    assert isomorphic(got, want)
    assert got.n_states == want.n_states > 1000


@pytest.mark.parametrize("ascii_only", [False, True])
def test_a_keyword_chain_is_the_one_built_in_python(ascii_only: bool) -> None:
    """A keyword's chain (the spellings of its letters' case sets: the Kelvin sign, the long s, the
    dotted and dotless i) is the Python construction state for state: minimal as built."""
    for word in ["select", "KISS", "distinct", "is_1", "k", "Ss", "sks", "ik", "x"]:
        positions = [_spellings(ord(ch), ascii_only) for ch in word]
        got = kernels.from_positions(positions)
        assert same(got, chain_python(positions)) and same(got, minimize_python(got))
        assert classes_right(got)


# a position: up to four distinct characters (ASCII, two-, three- and four-byte ones), spelled in UTF-8
_chars = st.sampled_from(
    ["a", "b", "A", "\u00e9", "\u0129", "\u00ea", "\u0101", "\u212a", "\u2160", "\U0001f600"]
)
_positions = st.lists(st.lists(_chars, min_size=1, max_size=4, unique=True), max_size=6)


@settings(max_examples=200, deadline=None)
@given(chars=_positions)
def test_a_chain_of_spellings_is_minimised_like_its_table(chars: list[list[str]]) -> None:
    """Any chain of prefix-free spelling sets (some not minimal as built: two characters whose
    spellings differ only in their lead byte, as U+00E9 and U+0129 do) is the Python construction
    minimised, numbered alike, and matches exactly one spelling per position."""
    positions = [tuple(c.encode() for c in p) for p in chars]
    got = kernels.from_positions(positions)
    assert same(got, minimize_python(chain_python(positions)))
    assert classes_right(got)
    for k in range(len(chars)):
        word = "".join(p[0] for p in chars[:k]) + "".join(p[-1] for p in chars[k:])
        assert got.matches(word.encode()) and not got.matches(word.encode()[:-1] if word else b"x")


@pytest.mark.parametrize(
    ("data", "lengths", "counts", "message"),
    [
        (b"aab", [1, 2], [2], "position 0's spellings are empty or not prefix-free"),
        (b"ab", [1, 0, 1], [3], "position 0's spellings are empty or not prefix-free"),
        (b"aa", [1, 1], [2], "not prefix-free"),
        (b"ab", [1, 1], [3], "add up to more"),
        (b"abc", [1, 1], [2], "add up to less"),
        (b"ab", [1, 1, 1], [2], "add up to less"),
        (b"ab", [1, 5], [2], "add up to more"),
    ],
)
def test_a_bad_chain_is_refused(data: bytes, lengths: list[int], counts: list[int], message: str) -> None:
    words = [np.array(x, dtype=np.uint32).tobytes() for x in (lengths, counts)]
    with pytest.raises(GrammarError, match=message):
        _engine.dfa_chain(data, *words)


def _table(rows: list[dict[int, int]]) -> bytes:
    t = np.zeros((len(rows), 256), dtype=np.int32)
    for s, row in enumerate(rows):
        for b, target in row.items():
            t[s, b] = target
    return t.tobytes()


@pytest.mark.parametrize(
    ("table", "accepting", "start", "message"),
    [
        (b"\0" * 1000, b"\0\1", 1, "1000 bytes is not a whole number|250 cells is not 256 per state"),
        (_table([{}, {97: 2}]), b"\0\1", 1, "transition to state 2 of 2"),
        (_table([{97: 1}, {}]), b"\0\1", 1, "state 0 must be the dead state"),
        (_table([{}, {}]), b"\1\1", 1, "state 0 must be the dead state"),
        (_table([{}, {}]), b"\0\1", 2, "start state 2 out of range"),
        (_table([{}, {}]), b"\0\1", -1, "start must be >= 0"),
        (_table([{}, {97: -1}]), b"\0\1", 1, "transition to state 4294967295 of 2"),
    ],
)
def test_malformed_tables_are_refused(table: bytes, accepting: bytes, start: int, message: str) -> None:
    with pytest.raises(GrammarError, match=message):
        _engine.dfa_minimize(table, accepting, start)


def test_bad_product_and_string_arguments_are_refused() -> None:
    t, a = _table([{}, {97: 1}]), b"\0\1"
    with pytest.raises(GrammarError, match="op must be 'and', 'or' or 'minus', got \"xor\""):
        _engine.dfa_product(t, a, 1, t, a, 1, "xor", 10)
    lengths = np.array([2, 1], dtype=np.uint32).tobytes()
    with pytest.raises(GrammarError, match="sorted and distinct"):
        _engine.dfa_from_strings(b"bba", lengths)
    with pytest.raises(GrammarError, match="more than the data"):
        _engine.dfa_from_strings(b"bb", lengths)
    with pytest.raises(GrammarError, match="less than the data"):
        _engine.dfa_from_strings(b"abcd", lengths)


@settings(max_examples=100, deadline=None)
@given(d=st.one_of(small_dfas(), dfas()))
def test_byte_classes(d: DFA) -> None:
    got, k = kernels.byte_classes(d)
    want, k2 = column_classes(d.transitions)
    assert k == k2 and np.array_equal(got, want)
    # a DFA built in Python makes its table by class from its table
    classes, k3, by_class, accepting = DFA(d.transitions, d.accepting, d.start).class_table()
    assert k3 == k and np.frombuffer(classes, dtype=np.uint8).tolist() == want.tolist()
    table = np.frombuffer(by_class, dtype=np.int32).reshape(d.n_states, k)
    assert np.array_equal(table, d.transitions[:, class_reps(want, k)])
    assert accepting == d.accepting.tobytes()


def _nfa_of(pattern: str, flags: int) -> tuple[NFA, int, int]:
    """The Thompson NFA regex_to_dfa builds for ``pattern`` when it takes the subset construction."""
    tree = parse(pattern, flags)
    nfa = NFA()
    start, final = nfa.new_state(), nfa.new_state()
    _Builder(nfa, pattern).build(tree, int(tree.state.flags) | flags, start, final)
    return nfa, start, final


@settings(max_examples=300, deadline=None)
@given(p=patterns(anchors=True))
def test_subset_construction(p: Pattern) -> None:
    nfa, start, final = _nfa_of(p.re_text, p.flags)
    got = kernels.determinize(nfa, start, final, 100_000, None)
    assert isinstance(got, DFA)
    assert same(got, determinize_python(nfa, start, final, max_states=100_000))
    assert classes_right(got)


@pytest.mark.parametrize(("max_states", "max_work", "error"), [
    (20, None, "more than 20 states"), (100_000, 50, "regex_subset_work"),
])
def test_the_subset_construction_bounds(max_states: int, max_work: int | None, error: str) -> None:
    nfa, start, final = _nfa_of("(?:a|b)*a(?:a|b){6}", 0)  # 256 states
    for f in (determinize, determinize_python):
        with pytest.raises(GrammarError, match=error):
            f(nfa, start, final, max_states=max_states, max_work=max_work)
