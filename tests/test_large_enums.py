"""Large enums and label sets go through one minimal trie DFA built with arrays (issue 15).

``automata.from_strings`` against set membership and minimality (and with every level hash
colliding, so the exact path runs), the byte classes it records against the table's, masks of
enums, label sets and an enum property against the brute-force oracle, and a large enum within a
time budget on the test vocabulary.
"""

from __future__ import annotations

import itertools
import random
import string
import time
from typing import Any

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.automata import from_strings, minimize, ops
from grammarmask.automata.dfa import DFA, column_classes
from grammarmask.testing import assert_mask_exact, byte_vocabulary

from .test_automata import invariants

ALPHABETS = [b"a", b"ab", b"abc", b"xyz\x00\xff", bytes(range(256))]


def random_sets(seed: int, count: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        alpha = rng.choice(ALPHABETS)
        size = rng.choice([0, 1, 2, 3, 5, 10, 50])
        out.append(
            [bytes(rng.choice(alpha) for _ in range(rng.choice([0, 1, 2, 3, 5, 8]))) for _ in range(size)]
        )
    return out


def same_language(dfa: DFA, words: list[bytes]) -> None:
    want = set(words)
    for w in want:
        assert dfa.matches(w), w
        for i in range(len(w)):  # every proper prefix lives, and is in the language iff a word
            assert dfa.run(dfa.start, w[:i]) != 0
            assert dfa.matches(w[:i]) == (w[:i] in want)
    alpha = sorted({b for w in want for b in w} | {0x61})[:4]
    for n in range(4):
        for t in itertools.product(alpha, repeat=n):
            assert dfa.matches(bytes(t)) == (bytes(t) in want)


@pytest.fixture(params=["arrays", "dicts"])
def trie_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test on both of from_strings' paths: the array trie (large sets) and the dict trie
    (sets of up to ``ops._SMALL_TRIE_BYTES`` bytes, where most calls are)."""
    monkeypatch.setattr(ops, "_SMALL_TRIE_BYTES", -1 if request.param == "arrays" else 1 << 40)
    return str(request.param)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.usefixtures("trie_path")
def test_from_strings_is_the_minimal_dfa_of_the_set(seed: int) -> None:
    for words in random_sets(seed, 60):
        dfa = from_strings(words)
        invariants(dfa)  # trimmed, minimal, byte classes
        same_language(dfa, words)


@pytest.mark.usefixtures("trie_path")
def test_from_strings_on_long_and_shared_strings() -> None:
    for words in (
        [b"a" * 3000],
        [b"x" * 500 + bytes([i]) for i in range(100)],
        [b"%d" % i for i in range(3000)],
        [b"", b"a", b"ab", b"b"],
    ):
        dfa = from_strings(words)
        assert minimize(dfa).n_states == dfa.n_states
        assert dfa.byte_classes()[1] == column_classes(dfa.transitions)[1]
        same_language(dfa, words)
    # 0-999: dead, start, then after "0" or 3 digits / 1 other digit / 2 digits
    assert from_strings([b"%d" % i for i in range(1000)]).n_states == 5


def test_from_strings_merges_exactly_when_every_hash_collides(monkeypatch: pytest.MonkeyPatch) -> None:
    # A hash that keeps one bit: almost every level collides and is merged by the exact path.
    monkeypatch.setattr(ops, "_SMALL_TRIE_BYTES", -1)  # the array path, even for these small sets
    words = [w for ws in random_sets(7, 30) for w in ws]
    want = from_strings(words)
    monkeypatch.setattr(ops, "_splitmix", lambda x: x & np.uint64(1))
    got = from_strings(words)
    assert got.n_states == want.n_states
    invariants(got)
    same_language(got, words)


def test_byte_classes_recorded_from_edges_equal_the_table_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops, "_SMALL_TRIE_BYTES", -1)  # edges are recorded on the array path
    for words in random_sets(11, 100):
        dfa = from_strings(words)
        recorded = dfa.byte_classes()
        classes, k = column_classes(dfa.transitions)
        assert recorded[1] == k and np.array_equal(recorded[0], classes), words


# ---- masks against the brute-force oracle -------------------------------------------------------

EXTRA = [b'"a', b"ab", b"bc", b'c"', b"abc", b'"ab', b'b"', b"ca", b'{"k":"', b'"}', b"a/", b"\\/"]


def small_words(seed: int, n: int, alphabet: str = "abc") -> list[str]:
    rng = random.Random(seed)
    words = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(n)}
    return sorted(words)


def tokens_for(vocab: gm.Vocabulary, data: bytes, rng: random.Random) -> list[int]:
    """Some tokenization of ``data`` (random longest-or-single-byte choices)."""
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    out, i = [], 0
    while i < len(data):
        fits = [j for j in range(i + 1, len(data) + 1) if data[i:j] in ids]
        j = rng.choice([fits[0], fits[-1]])
        out.append(ids[data[i:j]])
        i = j
    return out


def check_against_oracle(compiled: Any, texts: list[bytes], seed: int) -> None:
    def viable(prefix: bytes) -> bool:
        return any(t.startswith(prefix) for t in texts)

    rng = random.Random(seed)
    vocab = compiled.vocab
    for text in rng.sample(texts, min(8, len(texts))):
        cut = rng.randint(0, len(text))  # walk into a word, stop, check every mask on the way
        assert_mask_exact(compiled, tokens_for(vocab, text[:cut], rng), viable, texts.__contains__)
        assert_mask_exact(compiled, tokens_for(vocab, text, rng), viable, texts.__contains__)


@pytest.mark.parametrize("seed", range(3))
def test_enum_masks_equal_the_oracle(seed: int) -> None:
    words = small_words(seed, 60)
    assert len(words) > 16  # past compiler._TRIE_WORDS: one trie terminal
    vocab = byte_vocabulary(EXTRA)
    compiled = gm.JsonSchema({"enum": words}, whitespace="compact").compile(vocab)
    check_against_oracle(compiled, [f'"{w}"'.encode() for w in words], seed)


def test_enum_masks_with_escaped_spellings_equal_the_oracle() -> None:
    # "/" may be written "/" or "\/": every spelling is in the trie
    words = small_words(3, 40, "ab/")
    vocab = byte_vocabulary(EXTRA)
    compiled = gm.JsonSchema({"enum": words}, whitespace="compact").compile(vocab)
    texts = []
    for w in words:
        for bits in itertools.product(("/", "\\/"), repeat=w.count("/")):
            parts = w.split("/")
            body = parts[0] + "".join(b + p for b, p in zip(bits, parts[1:], strict=True))
            texts.append(f'"{body}"'.encode())
    check_against_oracle(compiled, texts, 3)


@pytest.mark.parametrize("seed", range(2))
def test_choice_masks_equal_the_oracle(seed: int) -> None:
    words = small_words(seed + 10, 60)
    vocab = byte_vocabulary(EXTRA)
    check_against_oracle(gm.Choice(words).compile(vocab), [w.encode() for w in words], seed)


def test_enum_property_masks_equal_the_oracle() -> None:
    words = small_words(20, 60)
    schema = {
        "type": "object",
        "properties": {"k": {"enum": words}},
        "required": ["k"],
        "additionalProperties": False,
    }
    vocab = byte_vocabulary(EXTRA)
    compiled = gm.JsonSchema(schema, whitespace="compact").compile(vocab)
    check_against_oracle(compiled, [f'{{"k":"{w}"}}'.encode() for w in words], 20)


# ---- a large enum within a budget ------------------------------------------------------------------


def test_a_large_enum_compiles_within_its_budget() -> None:
    # 30,000 words of 4-12 letters (about 60,000 DFA states), as an enum and as labels: 1.7 s of CPU
    # with the array-built trie, 3.5 s with the dict trie it replaced (load 10 on 2 cores)
    rng = random.Random(5)
    words: set[str] = set()
    while len(words) < 30_000:
        words.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 12))))
    ordered = sorted(words)
    vocab = byte_vocabulary()
    cpu = time.process_time()
    for grammar in (gm.JsonSchema({"enum": ordered}, whitespace="compact"), gm.Choice(ordered)):
        m = grammar.compile(vocab).matcher()
        quote = 1 + ord('"') if isinstance(grammar, gm.JsonSchema) else 1 + ord(ordered[0][0])
        assert quote in m.mask()
        m.advance(quote)
        assert len(m.mask()) > 1
    assert time.process_time() - cpu < 5.0


def test_enum_dfas_are_kept_within_their_byte_bound() -> None:
    # three enums of 20,000 words (tables of about 40 MB each) against the 64 MiB bound
    from grammarmask.frontends.jsonschema.strings import _WORDS_DFAS, words_dfa

    for seed in range(3):
        rng = random.Random(seed)
        ws = {"".join(rng.choices(string.ascii_lowercase, k=rng.randint(4, 12))) for _ in range(20_000)}
        words_dfa(tuple(sorted(ws)))
        assert len(_WORDS_DFAS) == 1 or _WORDS_DFAS.nbytes <= 64 << 20
    assert _WORDS_DFAS.nbytes > 20 << 20  # the newest is kept
