"""Mask: the packed layout (bit i%32 of word i//32), set algebra against Python sets, logits masking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import grammarmask as gm

sizes = st.integers(1, 300)


@st.composite
def id_sets(draw: st.DrawFn) -> tuple[int, set[int], set[int]]:
    n = draw(sizes)
    ids = st.sets(st.integers(0, n - 1), max_size=n)
    return n, draw(ids), draw(ids)


@given(id_sets())
def test_layout_and_set_algebra_match_python_sets(case: tuple[int, set[int], set[int]]) -> None:
    n, a, b = case
    ma, mb = gm.Mask.from_token_ids(a, n), gm.Mask.from_token_ids(b, n)
    for i in a:  # the interoperable layout, checked bit by bit
        assert (int(ma.words[i // 32]) >> (i % 32)) & 1
    assert set(ma.token_ids().tolist()) == a and len(ma) == len(a)
    assert set((ma & mb).token_ids().tolist()) == a & b
    assert set((ma | mb).token_ids().tolist()) == a | b
    assert set((ma - mb).token_ids().tolist()) == a - b
    assert set((~ma).token_ids().tolist()) == set(range(n)) - a
    assert all((i in ma) == (i in a) for i in range(-2, n + 2))
    assert gm.Mask.from_bool(ma.to_bool()) == ma
    assert len(gm.Mask.all(n)) == n and len(gm.Mask.none(n)) == 0


def test_apply_numpy_one_and_two_dimensional_and_wider_logits() -> None:
    mask = gm.Mask.from_token_ids([1, 3], 5)
    logits = np.arange(6, dtype=np.float32)  # one padding column past the vocabulary
    mask.apply(logits)
    assert np.isneginf(logits[[0, 2, 4, 5]]).all() and logits[1] == 1 and logits[3] == 3
    batch = np.zeros((2, 5), dtype=np.float32)
    mask.apply(batch)
    assert np.isneginf(batch[:, [0, 2, 4]]).all() and (batch[:, [1, 3]] == 0).all()


def test_apply_torch() -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    mask = gm.Mask.from_token_ids([0, 33], 40)
    logits = torch.zeros(2, 40)
    mask.apply(logits)
    assert torch.isinf(logits).sum().item() == 2 * 38 and logits[1, 33].item() == 0


def test_bad_sizes_are_clear_errors() -> None:
    with pytest.raises(gm.GrammarError, match="logits have 3 entries"):
        gm.Mask.all(5).apply(np.zeros(3))
    with pytest.raises(gm.GrammarError, match="out of range"):
        gm.Mask.from_token_ids([5], 5)
    with pytest.raises(gm.GrammarError, match="different vocabulary sizes"):
        _ = gm.Mask.all(5) & gm.Mask.all(6)


def test_fill_mask_writes_int32_and_uint32_rows_identically(tekken: gm.Vocabulary) -> None:
    from grammarmask.frontends.choice import Choice

    m = Choice(["yes", "no"]).compile(tekken).matcher()
    a = np.zeros((3, tekken.n_words), np.int32)
    b = np.zeros((3, tekken.n_words), np.uint32)
    m.fill_mask(a, 1)
    m.fill_mask(b, 2)
    assert np.array_equal(a[1].view(np.uint32), b[2]) and np.array_equal(b[2], m.mask().words)
    assert not a[0].any()
    with pytest.raises(gm.GrammarError, match="int32 or uint32"):
        m.fill_mask(np.zeros((1, tekken.n_words), np.float32))


def test_vocabulary_errors() -> None:
    with pytest.raises(gm.GrammarError, match="no EOS"):
        gm.Vocabulary.from_tokens([b"a"], eos_token_id=None)
    with pytest.raises(gm.GrammarError, match="outside the vocabulary"):
        gm.Vocabulary.from_tokens([b"a"], eos_token_id=3)
    with pytest.raises(gm.GrammarError, match="expected bytes"):
        gm.Vocabulary.from_tokens(["a"], eos_token_id=0)  # type: ignore[list-item]


def test_padding_and_special_ids_are_never_legal() -> None:
    from grammarmask.frontends.choice import Choice

    vocab = gm.Vocabulary.from_tokens(
        [b"</s>", b"a", b"ab", b"b"], eos_token_id=0, special_token_ids=[3], size=40
    )
    m = Choice(["ab"]).compile(vocab).matcher()
    assert m.mask().token_ids().tolist() == [1, 2]  # b"b" is special; ids 4..39 are padding
    for bad in (3, 39, 40, -1):
        with pytest.raises(gm.TokenRejected):
            m.advance(bad)
    m.advance(2)
    assert m.mask().token_ids().tolist() == [0]  # only EOS; the text "</s>" is not EOS
