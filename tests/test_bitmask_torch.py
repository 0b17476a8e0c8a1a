"""gm.apply_token_bitmask_inplace: XGrammar's in-place logits masking, checked against Mask.apply."""

from __future__ import annotations

import numpy as np
import pytest

import grammarmask as gm

torch = pytest.importorskip("torch", reason="torch is an optional extra")

VOCAB = gm.Vocabulary.from_tokens([bytes([b]) for b in b"abcdefghij"] + [b""], eos_token_id=10, size=70)


def _masks(batch: int) -> list[gm.Mask]:
    grammars = [gm.Regex("[a-e]+"), gm.Regex("(ab|cd)j"), gm.Choice(["abc", "bcd"])]
    return [grammars[i % 3].compile(VOCAB).matcher().mask() for i in range(batch)]


def test_rows_match_mask_apply_and_the_layout_of_fill_masks() -> None:
    masks = _masks(4)
    words = gm.allocate_masks(4, VOCAB.n_words)
    for i, m in enumerate(masks):
        words[i] = m.words.view(np.int32)
    logits = torch.randn(4, VOCAB.size)
    want = [m.apply(logits[i].numpy().copy()) for i, m in enumerate(masks)]
    gm.apply_token_bitmask_inplace(logits, torch.from_numpy(words))
    for i in range(4):
        np.testing.assert_array_equal(logits[i].numpy(), want[i])


def test_indices_pick_rows_and_columns_past_the_bits_are_illegal() -> None:
    masks = _masks(2)
    words = np.stack([m.words for m in masks])  # uint32, numpy
    logits = torch.zeros(3, VOCAB.n_words * 32 + 5)
    gm.apply_token_bitmask_inplace(logits, words, indices=[2, 0])
    assert torch.all(logits[1] == 0)  # untouched
    for row, m in ((2, masks[0]), (0, masks[1])):
        legal = torch.isfinite(logits[row])
        assert legal[: VOCAB.n_words * 32].numpy().tolist() == [t in m for t in range(VOCAB.n_words * 32)]
        assert not legal[VOCAB.n_words * 32 :].any()


def test_one_dimensional_logits_and_bad_input() -> None:
    m = _masks(1)[0]
    logits = torch.zeros(VOCAB.size, dtype=torch.float16)
    gm.apply_token_bitmask_inplace(logits, m.words)
    assert torch.isfinite(logits).sum().item() == len(m)
    with pytest.raises(gm.GrammarError, match="float torch tensor"):
        gm.apply_token_bitmask_inplace(np.zeros(VOCAB.size), m.words)
    with pytest.raises(gm.GrammarError, match="int32 or uint32"):
        gm.apply_token_bitmask_inplace(torch.zeros(VOCAB.size), m.words.astype(np.int64))
    with pytest.raises(gm.GrammarError, match="mask rows"):
        gm.apply_token_bitmask_inplace(torch.zeros(2, VOCAB.size), np.stack([m.words] * 3))
