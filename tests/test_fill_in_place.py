"""``Matcher.fill_mask`` of the native CFG engine, which writes the row in place from Rust
(``CfgGrammar.fill``, src/python/array.rs): the same bits as ``mask()`` in every layout numpy
allows, only the asked row touched, and bad arrays refused as the generic path refuses them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.frontends.lark import Lark
from grammarmask.native.cfg import NativeCompiledCfg

# byte-level toy vocabulary: id 0 is EOS, id b + 1 is the single byte b, then a few longer tokens
TOKENS = [b""] + [bytes([b]) for b in range(256)] + [b"[1", b", ", b"]", b"12", b"[]"]
VOCAB = gm.Vocabulary.from_tokens(TOKENS, eos_token_id=0)
LIST = Lark(r"""
start: "[" (NUMBER ("," " "? NUMBER)*)? "]"
NUMBER: /[0-9]+/
""")
DOCUMENT = b"[1, 12,3]"
SENTINEL = 0x5A5A5A5A  # what the rows not asked for hold, before and after


def compiled() -> NativeCompiledCfg:
    c = LIST.compile(VOCAB)
    assert isinstance(c, NativeCompiledCfg), "the native CFG engine is the default"
    return c


def walk(c: NativeCompiledCfg) -> list[gm.Matcher]:
    """A matcher at every step of DOCUMENT, byte by byte, then after EOS."""
    m = c.matcher()
    out = [m.fork()]
    for b in DOCUMENT:
        m.advance(b + 1)
        out.append(m.fork())
    m.advance(0)
    out.append(m)
    return out


def expected(m: gm.Matcher) -> np.ndarray[Any, np.dtype[np.uint32]]:
    return np.zeros(VOCAB.n_words, np.uint32) if m.is_finished() else m.mask().words


LAYOUTS: dict[str, Callable[[int], np.ndarray[Any, Any]]] = {
    "uint32": lambda n: np.full((n, VOCAB.n_words), SENTINEL, np.uint32),
    "int32": lambda n: np.full((n, VOCAB.n_words), SENTINEL, np.int32),
    # rows further apart than a row, and in reverse (a negative stride)
    "every other row": lambda n: np.full((2 * n, VOCAB.n_words), SENTINEL, np.uint32)[::2],
    "reversed": lambda n: np.full((n, VOCAB.n_words), SENTINEL, np.uint32)[::-1],
    # layouts the engine leaves to numpy's copy: Fortran order, words not next to each other
    "fortran": lambda n: np.asfortranarray(np.full((n, VOCAB.n_words), SENTINEL, np.uint32)),
    "strided words": lambda n: np.full((n, 2 * VOCAB.n_words), SENTINEL, np.uint32)[:, ::2],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_row_written_is_the_mask_and_no_other_row_changes(layout: str) -> None:
    c = compiled()
    for i, m in enumerate(walk(c)):
        words = LAYOUTS[layout](3)
        row = i % 3
        m.fill_mask(words, row)
        assert np.array_equal(words[row].view(np.uint32), expected(m)), (layout, i)
        others = np.delete(words.view(np.uint32), row, axis=0)
        assert (others == SENTINEL).all(), (layout, i)


def test_the_eos_bit_is_set_where_the_output_is_complete() -> None:
    c = compiled()
    steps = walk(c)
    done = [m for m in steps if not m.is_finished() and m.is_accepting()]
    assert len(done) == 1  # after the closing bracket
    words = np.zeros((1, VOCAB.n_words), np.uint32)
    done[0].fill_mask(words)
    assert words[0, 0] & 1  # EOS is token 0
    words[:] = 0
    steps[1].fill_mask(words)  # after "[": not complete
    assert not words[0, 0] & 1


@pytest.mark.parametrize(
    ("words", "row", "message"),
    [
        pytest.param(np.zeros((2, VOCAB.n_words), np.int32), 2, "row 2 is outside", id="row past the end"),
        pytest.param(np.zeros((2, VOCAB.n_words), np.int32), -1, "row -1 is outside", id="negative row"),
        pytest.param(np.zeros((2, VOCAB.n_words), np.int32), 2**70, "is outside", id="a row past 64 bits"),
        pytest.param(np.zeros((1, VOCAB.n_words + 1), np.uint32), 0, "array", id="a row too long"),
        pytest.param(np.zeros(VOCAB.n_words, np.uint32), 0, "array", id="1-D"),
        pytest.param(np.zeros((1, VOCAB.n_words), np.float32), 0, "int32 or uint32", id="float32"),
        pytest.param(np.zeros((1, VOCAB.n_words), ">u4"), 0, "int32 or uint32", id="big-endian"),
        pytest.param(np.zeros((1, VOCAB.n_words), np.int64), 0, "int32 or uint32", id="int64"),
        pytest.param([[0] * VOCAB.n_words], 0, "numpy array", id="a list"),
    ],
)
def test_a_bad_array_or_row_is_refused_and_nothing_is_written(words: Any, row: int, message: str) -> None:
    m = compiled().matcher()
    m.advance(ord("[") + 1)
    before = (m.num_tokens, m.state)
    with pytest.raises(gm.GrammarError, match=message):
        m.fill_mask(words, row)
    assert (m.num_tokens, m.state) == before
    assert not np.asarray(words).any()


def test_a_read_only_array_is_refused() -> None:
    words = np.zeros((1, VOCAB.n_words), np.uint32)
    words.setflags(write=False)
    with pytest.raises(gm.GrammarError, match="read-only"):
        compiled().matcher().fill_mask(words)
    assert not words.any()


def test_a_dead_end_raises_as_mask_does() -> None:
    # the vocabulary spells "[" but no digit, comma or bracket after it
    vocab = gm.Vocabulary.from_tokens([b"", b"[", b"x"], eos_token_id=0)
    c = LIST.compile(vocab)
    assert isinstance(c, NativeCompiledCfg)
    m = c.matcher()
    m.advance(1)
    with pytest.raises(gm.NoLegalContinuation):
        m.mask()
    words = np.zeros((1, vocab.n_words), np.uint32)
    with pytest.raises(gm.NoLegalContinuation):
        m.fill_mask(words)


def test_a_state_of_another_grammar_is_refused() -> None:
    a, b = compiled(), Lark('start: "x"+').compile(VOCAB)
    assert isinstance(b, NativeCompiledCfg)
    words = np.zeros((1, VOCAB.n_words), np.uint32)
    with pytest.raises(gm.GrammarError, match="another compiled grammar"):
        a.engine.fill(b.initial_state(), words, 0, 0)
    assert not words.any()


@pytest.mark.parametrize(
    ("layout", "written"),
    [
        ("uint32", True),
        ("int32", True),
        ("every other row", True),
        ("reversed", True),
        ("fortran", False),
        ("strided words", False),
    ],
)
def test_the_engine_writes_the_layouts_it_can_and_leaves_the_others(layout: str, written: bool) -> None:
    # the matcher's answers above hold either way; this pins down which path gave them
    c = compiled()
    words = LAYOUTS[layout](2)
    done = c.engine.fill(c.initial_state(), words, 1, 0)
    assert (done is not None) == written
    if written:
        assert done is True
        assert np.array_equal(words[1].view(np.uint32), c.matcher().mask().words)
    else:
        assert (words.view(np.uint32) == SENTINEL).all()


def test_odd_arrays_and_rows_are_left_to_the_matcher() -> None:
    c = compiled()
    s = c.initial_state()
    readonly = np.zeros((1, VOCAB.n_words), np.uint32)
    readonly.setflags(write=False)

    def two() -> np.ndarray[Any, np.dtype[np.uint32]]:
        return np.zeros((2, VOCAB.n_words), np.uint32)

    cases: list[tuple[Any, Any]] = [
        (readonly, 0),
        (np.zeros((1, VOCAB.n_words), ">u4"), 0),
        (np.zeros((1, VOCAB.n_words), np.int64), 0),
        ([[0] * VOCAB.n_words], 0),
        (two(), 2),
        (two(), -1),
        (two(), 2**70),
        (two(), "0"),
    ]
    for words, row in cases:
        assert c.engine.fill(s, words, row, 0) is None, (words, row)
        assert not np.asarray(words).any()
    # an EOS id past the row is refused, as a batch's is (the matcher's is always inside)
    words = two()
    with pytest.raises(gm.GrammarError, match="EOS id"):
        c.engine.fill(s, words, 0, 32 * VOCAB.n_words)
    assert not words.any()
