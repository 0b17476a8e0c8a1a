"""DfaTokenIndex against a direct per-token DFA run, on a toy and the real tekken vocabulary.

The DFA itself is checked against ``re`` in test_automata; here the question is only whether the
vectorised, class-compressed index agrees with running every token's bytes through the DFA.
"""

from __future__ import annotations

import numpy as np
import pytest

import grammarmask as gm
import grammarmask.regular.index as gindex
from grammarmask.automata import DFA, from_strings, regex_to_dfa
from grammarmask.limits import Limits
from grammarmask.regular.index import DfaTokenIndex

PATTERNS = [
    r"[a-z]+@[a-z]+\.com",
    r"(?s).{0,3}x",
    r"\w+( \w+)*",
    r'"([^"\\]|\\.)*"',
    r"[😀-😂]+é?",
    r"(ab|cd)*",
]


def brute_force(vocab: gm.Vocabulary, dfa: DFA, state: int) -> tuple[set[int], dict[int, int]]:
    legal, nxt = set(), {}
    for t, data in enumerate(vocab.token_bytes):
        if not data or t in vocab.special_ids:
            continue
        s = dfa.run(state, data)
        if s:
            legal.add(t)
            nxt[t] = s
    return legal, nxt


@pytest.fixture(scope="module")
def toy() -> gm.Vocabulary:
    toks = [
        b"",
        b"",
        *[bytes([b]) for b in range(256)],
        b"ab",
        b"abc",
        "é".encode(),
        "😀".encode()[:2],
        "😀".encode(),
        b"a@b",
        b".com",
        b" x",
        b'\\"',
        b'"a"',
    ]
    return gm.Vocabulary.from_tokens(toks, eos_token_id=0, special_token_ids=(1,), size=len(toks) + 3)


MODES = ["default", "all-dense", "pairs-only", "lazy"]


def mode_limits(mode: str) -> Limits:
    """Limits that force one of the index's construction strategies."""
    if mode == "all-dense":  # every state counts as broad: unpruned walk, complement storage
        return Limits(index_narrow_fraction=10**6)
    if mode == "pairs-only":  # every state counts as narrow: pruned walk, legal tokens stored
        return Limits(index_narrow_fraction=1, index_dense_budget=0)
    if mode == "lazy":
        return Limits(index_eager_states=0)
    return Limits()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_index_matches_brute_force_toy(toy: gm.Vocabulary, pattern: str, mode: str) -> None:
    dfa = regex_to_dfa(pattern)
    idx = DfaTokenIndex(toy, dfa, limits=mode_limits(mode))
    for s in range(dfa.n_states):
        legal, nxt = brute_force(toy, dfa, s)
        got = set(gm.Mask(idx.mask_words(s), toy.size).token_ids().tolist())
        assert got == legal, (pattern, s)
        for t in range(toy.size):
            assert idx.next_state(s, t) == nxt.get(t, 0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pattern", [*PATTERNS[:4], r"[^\n]{0,30}"])
def test_index_matches_brute_force_tekken(tekken: gm.Vocabulary, pattern: str, mode: str) -> None:
    dfa = regex_to_dfa(pattern)
    idx = DfaTokenIndex(tekken, dfa, limits=mode_limits(mode))
    tb = tekken.token_bytes
    normal = [t for t, b in enumerate(tb) if b and t not in tekken.special_ids]
    rng = np.random.default_rng(0)
    states = (
        list(range(1, dfa.n_states))
        if dfa.n_states <= 12
        else rng.choice(np.arange(1, dfa.n_states), 12, replace=False).tolist()
    )
    for s in states:
        want = {t for t in normal if dfa.run(s, tb[t])}
        got = set(gm.Mask(idx.mask_words(s), tekken.size).token_ids().tolist())
        assert got == want, (pattern, s, len(got), len(want))


def test_index_on_label_trie_and_special_ids(tekken: gm.Vocabulary) -> None:
    labels = [b" yes", b" no", b" maybe", "é".encode()]
    dfa = from_strings(labels)
    idx = DfaTokenIndex(tekken, dfa)
    legal = set(gm.Mask(idx.mask_words(dfa.start), tekken.size).token_ids().tolist())
    want = {
        t
        for t, b in enumerate(tekken.token_bytes)
        if b and t not in tekken.special_ids and any(x.startswith(b) for x in labels)
    }
    assert legal == want
    for sp in list(tekken.special_ids)[:5]:
        assert idx.next_state(dfa.start, sp) == 0
    assert idx.next_state(dfa.start, tekken.size + 5) == 0
    assert not idx.mask_words(0).any()


def test_mask_arrays_are_read_only(toy: gm.Vocabulary) -> None:
    idx = DfaTokenIndex(toy, regex_to_dfa("a+"))
    w = idx.mask_words(idx.dfa.start)
    with pytest.raises(ValueError):
        w[0] = 1


def test_class_trie_collapses_tokens(tekken: gm.Vocabulary) -> None:
    dfa = regex_to_dfa(r'"([^"\\]|\\.)*"')
    classes, k = dfa.byte_classes()
    ct = gindex.class_trie(tekken, classes, k)
    assert ct.n_nodes < tekken.trie.n_nodes // 10
    assert gindex.class_trie(tekken, classes, k) is ct  # cached


def test_concurrent_first_visits_agree(toy: gm.Vocabulary) -> None:
    """Threads hitting lazily computed states at once all get the single-threaded answer."""
    from concurrent.futures import ThreadPoolExecutor

    dfa = regex_to_dfa(r"\w+( \w+)*")
    lazy = Limits(index_eager_states=0)
    want = [DfaTokenIndex(toy, dfa, limits=lazy).mask_words(s).copy() for s in range(dfa.n_states)]
    # a tiny cache: constant eviction under contention
    idx = DfaTokenIndex(toy, dfa, limits=Limits(index_eager_states=0, index_masks=4))
    states = list(range(dfa.n_states)) * 20
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(idx.mask_words, states))
    for s, w in zip(states, got):
        assert np.array_equal(w, want[s])
