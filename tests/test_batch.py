"""fill_masks: every row equals its matcher's own mask (oracle-checked elsewhere); bad input errors."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from grammarmask.batch import allocate_masks, fill_masks
from grammarmask.compose import And
from grammarmask.errors import GrammarError, NoLegalContinuation
from grammarmask.frontends.lark import Lark
from grammarmask.frontends.regex import Regex
from grammarmask.strategies import token_paths
from grammarmask.testing import byte_vocabulary, reference_mask

VOCAB = byte_vocabulary([b"ab", b"ba", b"abc", b"12", b"[1", b"]]"])
PATTERN = r"(ab|ba)*c?[0-9]*"
GRAMMARS = [Regex(PATTERN), Lark('start: "[" [NUM ("," NUM)*] "]"\nNUM: /[0-9]+/')]


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_rows_equal_each_matchers_mask(dtype: Any, data: Any) -> None:
    matchers: list[Any] = []
    n = data.draw(st.integers(1, 9))
    for i in range(n):
        compiled = GRAMMARS[i % 2].compile(VOCAB)
        m = compiled.matcher()
        m.advance_many(data.draw(token_paths(compiled, max_tokens=6)))
        matchers.append(m)
    if data.draw(st.booleans()):
        matchers[0] = None  # an empty slot
    words = allocate_masks(n, VOCAB.n_words, dtype)
    words[:] = -1 if dtype == np.int32 else 0xFFFFFFFF
    with ThreadPoolExecutor(2) as pool:
        for executor in (None, pool):
            fill_masks(matchers, words, executor=executor)
            for row, m in zip(words, matchers, strict=True):
                want = np.zeros(VOCAB.n_words, np.uint32) if m is None else m.mask().words
                assert np.array_equal(row.view(np.uint32), want)


@settings(max_examples=20, deadline=None)
@given(token_paths(Regex(PATTERN).compile(VOCAB), max_tokens=6, allow_eos=False))
def test_rows_match_the_oracle(path: list[int]) -> None:
    rx = regex.compile(PATTERN.encode())
    prefix = VOCAB.decode(path)
    m = Regex(PATTERN).compile(VOCAB).matcher()
    m.advance_many(path)
    words = allocate_masks(2, VOCAB.n_words)
    fill_masks([m, m.fork()], words)
    want = reference_mask(
        lambda b: rx.fullmatch(b, partial=True) is not None,
        VOCAB,
        prefix,
        is_complete=lambda b: rx.fullmatch(b) is not None,
    )
    assert np.array_equal(words[0].view(np.uint32), want.words)
    assert np.array_equal(words[1], words[0])


def test_bad_buffers_are_errors() -> None:
    m = Regex("a").compile(VOCAB).matcher()
    with pytest.raises(GrammarError, match="2 matchers for 1 rows"):
        fill_masks([m, m], allocate_masks(1, VOCAB.n_words))
    with pytest.raises(GrammarError, match="int32 or uint32"):
        fill_masks([m], np.zeros((1, VOCAB.n_words), np.int64))
    with pytest.raises(GrammarError, match="words per row"):
        fill_masks([m], allocate_masks(1, VOCAB.n_words + 1))
    with pytest.raises(GrammarError, match="2-D"):
        fill_masks([m], np.zeros(VOCAB.n_words, np.int32))
    with pytest.raises(GrammarError, match="C-contiguous"):
        fill_masks([m], allocate_masks(1, 2 * VOCAB.n_words)[:, ::2])
    with pytest.raises(GrammarError):
        allocate_masks(-1, 3)


def test_dead_end_row_raises() -> None:
    from tests.support import Opaque

    g = And(Opaque(Regex("ab*c")), Opaque(Regex("a[xy]")))
    m = g.compile(VOCAB).matcher()
    m.advance(ord("a") + 1)
    with pytest.raises(NoLegalContinuation):
        fill_masks([Regex("a").compile(VOCAB).matcher(), m], allocate_masks(2, VOCAB.n_words))
