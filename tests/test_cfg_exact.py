"""Exactness of CFG masks against a brute-force oracle built on lark alone.

For each small grammar, every string over a small alphabet up to ``max_len`` is parsed by
``lark.Lark(text).parse``; a prefix is viable iff some accepted string extends it. Each grammar is
chosen so that every viable prefix of length <= ``m + 2`` has a completion over the alphabet short
enough to be in that set, which makes the oracle exact where it is asked. The mask (EOS included)
must equal the oracle's at every prefix of length <= ``m`` (exhaustively, tokens up to 2 bytes) and
along hypothesis random walks (tokens up to 3 bytes).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammarmask.frontends.lark import Lark
from grammarmask.limits import Limits
from grammarmask.mask import Mask
from grammarmask.testing import reference_mask
from grammarmask.vocab import Vocabulary

from .support_oracles import LarkOracle

# name: (grammar, alphabet, max_len, m, longest token)
CASES = {
    "separated_names": ('start: NAME ("," NAME)*\nNAME: /[ab]+/\n%ignore " "\n', "ab, ", 7, 3, 3),
    "adjacent_names": ('start: NAME NAME\nNAME: /[ab]+/\n%ignore " "\n', "ab ", 9, 3, 3),
    "keyword_or_name": ('start: item+\nitem: "if" | NAME\nNAME: /[a-z]+/\n%ignore " "\n', "if ", 7, 3, 3),
    "greedy_number": ('start: NUMBER ("+" NUMBER)*\nNUMBER: /[0-9]+(\\.[0-9]+)?/\n', "1.+", 7, 3, 3),
    "shadow_spans_lexemes": ('start: T1 T2 "c"\nT1: /a(bc)?/\nT2: "b"\n', "abc", 8, 3, 3),
    "greedy_blocks_split": ('start: (A | B)+\nA: "ab"\nB: /a+/\n', "ab", 8, 4, 3),
    "nested_lists": ('start: v\nv: "[" [v ("," v)*] "]" | NUMBER\nNUMBER: /[0-9]+/\n', "[1,]", 7, 1, 2),
    "right_recursion_leo": ('start: x\nx: "a" x | "b"\n', "ab", 8, 4, 3),
    "nullable_rules": ('start: a b a\na: "x" |\nb: "y" b |\n%ignore " "\n', "xy ", 7, 3, 3),
    "parens_with_ignore": ('start: "(" start ")" | "x"\n%ignore " "\n', "(x) ", 7, 1, 2),
    "case_insensitive": ('start: KW NAME\nKW: "ab"i\nNAME: /[a-z]+/\n%ignore " "\n', "aAb ", 7, 2, 2),
    "trailing_ignore_only": ('start: "a"+\n%ignore /b+/\n', "ab", 8, 4, 3),
    "counted_string": ('start: "<" BODY ("," "<" BODY)*\nBODY: /a{0,5}>/\n', "a<>,", 9, 4, 3),
}


@functools.cache
def _setup(name: str) -> tuple[LarkOracle, Vocabulary, object, str]:
    text, alpha, max_len, _, toklen = CASES[name]
    oracle = LarkOracle(text, alpha, max_len)
    words = (itertools.product(alpha, repeat=n) for n in range(1, toklen + 1))
    toks = [b""] + ["".join(p).encode() for group in words for p in group]
    vocab = Vocabulary.from_tokens(toks, eos_token_id=0)
    return oracle, vocab, Lark(text).compile(vocab), alpha


def _check(name: str, prefix: bytes, compiled: object = None) -> None:
    oracle, vocab, cached, _ = _setup(name)
    compiled = cached if compiled is None else compiled
    state = compiled.feed(compiled.initial_state(), prefix)  # type: ignore[attr-defined]
    assert bool(state) == oracle.viable(prefix), prefix
    if not state:
        return
    got = Mask(compiled.state_mask_words(state).copy(), vocab.size)  # type: ignore[attr-defined]
    if compiled.is_accepting_state(state):  # type: ignore[attr-defined]
        got = got | Mask.from_token_ids([0], vocab.size)
    want = reference_mask(oracle.viable, vocab, prefix, is_complete=oracle.complete)
    if got != want:
        tb = vocab.token_bytes
        extra = [tb[i] for i in (got - want).token_ids()[:8]]
        missing = [tb[i] for i in (want - got).token_ids()[:8]]
        pytest.fail(f"{name}: after {prefix!r}: wrongly legal {extra}, wrongly illegal {missing}")


def _check_every_short_prefix(name: str, compiled: object = None) -> None:
    """:func:`_check` at every viable prefix of length <= m (and its one-byte dead extensions)."""
    _, _, _, m, _ = CASES[name]
    oracle, _, _, alpha = _setup(name)
    checked = 0
    for n in range(m + 1):
        for p in itertools.product(alpha, repeat=n):
            prefix = "".join(p).encode()
            if oracle.viable(prefix[:-1]) or not prefix:
                _check(name, prefix, compiled)
                checked += 1
    assert checked > m


@pytest.mark.parametrize("name", sorted(CASES))
def test_mask_matches_oracle_on_every_short_prefix(name: str) -> None:
    _check_every_short_prefix(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_vectorised_walks_match_oracle(name: str) -> None:
    # Small vocabularies take the plain-Python walk paths; force the numpy ones instead.
    _, vocab, _, _ = _setup(name)
    fresh = Lark(CASES[name][0]).compile(vocab, limits=Limits(walk_small_rows=0))  # no walk cached yet
    _check_every_short_prefix(name, fresh)


@pytest.mark.parametrize("edits", [False, True], ids=["full", "edited"])
@pytest.mark.parametrize("by_class", [True, False], ids=["class-trie", "byte-trie"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_dense_root_walks_match_oracle(name: str, by_class: bool, edits: bool) -> None:
    # Only big vocabularies make lexeme states "broad"; make every state broad (from the root and from
    # frontiers below a few nodes), on either trie, and compute each root walk in full or (whenever a
    # full walk of the terminal exists) as an edit of one.
    limits = Limits(
        walk_broad_tokens=-1, walk_broad_below=-1, walk_small_frontier=0,
        walk_max_classes=256 if by_class else 0, walk_diff_share=1 if edits else 8,
        walk_bases=2 if edits else 0,
    )  # fmt: skip
    _, shared_vocab, _, _ = _setup(name)
    vocab = Vocabulary.from_tokens(list(shared_vocab.token_bytes), eos_token_id=0)  # no shared walks
    _check_every_short_prefix(name, Lark(CASES[name][0]).compile(vocab, limits=limits))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(CASES)), data=st.data())
def test_mask_matches_oracle_along_random_walks(name: str, data: st.DataObject) -> None:
    oracle, vocab, compiled, _ = _setup(name)
    m = compiled.matcher()  # type: ignore[attr-defined]
    out = b""
    limit = CASES[name][3]
    while True:
        _check(name, out)
        legal = [int(t) for t in m.mask().token_ids() if len(out) + len(vocab.token_bytes[t]) <= limit]
        if not legal or t_is_eos(legal, vocab):
            break
        t = data.draw(st.sampled_from(legal))
        if t == vocab.eos_token_id:
            break
        m.advance(t)
        out += vocab.token_bytes[t]


def t_is_eos(legal: list[int], vocab: Vocabulary) -> bool:
    return legal == [vocab.eos_token_id]


def test_states_that_walk_alike_share_a_class() -> None:
    # a{0,5}> counts: with tokens of at most 3 bytes, 0, 1 or 2 a's read walk alike (every token of
    # a's and at most one '>' fits), 3, 4 and 5 do not; the accepting state after '>' is itself.
    from grammarmask.automata.regex import regex_to_dfa
    from grammarmask.cfg.rootwalk import walk_classes

    dfa = regex_to_dfa("a{0,5}>")
    acc = np.asarray(dfa.accepting, dtype=bool)
    states = [dfa.run(dfa.start, b"a" * k) for k in range(6)]
    reaccept = np.zeros(dfa.n_states, dtype=bool)
    reaccept[states] = True
    cls = walk_classes(np.asarray(dfa.transitions, dtype=np.int32), acc, reaccept, 3)
    assert len({int(cls[s]) for s in states[:3]}) == 1
    assert len({int(cls[s]) for s in states}) == 4
    assert cls[dfa.run(dfa.start, b">")] not in {int(cls[s]) for s in states}


@settings(max_examples=200, deadline=None)
@given(data=st.data(), n=st.integers(2, 9), k=st.integers(1, 3), depth=st.integers(0, 4))
def test_walk_classes_are_the_bounded_path_equivalence(
    data: st.DataObject, n: int, k: int, depth: int
) -> None:
    # Oracle by definition: two states share a class iff every path of at most `depth` symbols leads
    # them to the same accepting state, or both to live or both to dead states (a walk does not read
    # on from a state that cannot reach acceptance).
    from grammarmask.cfg.rootwalk import walk_classes

    table = np.array(data.draw(st.lists(st.lists(st.integers(0, n - 1), min_size=k, max_size=k),
                                        min_size=n, max_size=n)), dtype=np.int32)
    table[0] = 0
    acc = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    live = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    acc[0] = live[0] = False

    def outcomes(s: int) -> tuple[object, ...]:
        out: list[object] = []
        for path in itertools.chain.from_iterable(itertools.product(range(k), repeat=d)
                                                  for d in range(depth + 1)):
            q = s
            for c in path:
                q = int(table[q, c]) if live[q] else 0
            out.append(("acc", q) if acc[q] else bool(live[q]))
        return tuple(out)

    cls = walk_classes(table, acc, live, depth)
    sig = [outcomes(s) for s in range(n)]
    for i in range(n):
        for j in range(n):
            assert (cls[i] == cls[j]) == (sig[i] == sig[j]), (i, j)
