"""Token healing: which prompt tokens are taken off, that the healed grammar is exactly "the removed
bytes, then the grammar" (oracle on random walks, tokens crossing the join), and generate(heal=True)
end to end, on a small vocabulary and on tekken."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.errors import GrammarError
from grammarmask.strategies import token_paths
from grammarmask.testing import assert_mask_exact, byte_vocabulary

VOCAB = byte_vocabulary([b"ab", b"abc", b"bc", b"c1", b"1", b"12", b"x", b"xy", b"y2"])


def ids(*pieces: bytes) -> list[int]:
    return [VOCAB.token_bytes.index(p) for p in pieces]


@pytest.mark.parametrize(("prompt", "kept", "removed"), [
    ((b"x", b"a", b"b"), (b"x",), b"ab"),         # "b" starts "bc", and "ab" starts "abc": the longer run
    ((b"x", b"ab"), (b"x",), b"ab"),              # "ab" -> "abc"
    ((b"ab", b"c"), (b"ab",), b"c"),              # "c" -> "c1" (nothing is longer than "abc")
    ((b"xy",), (b"xy",), b""),                    # nothing longer starts with "xy"
    ((), (), b""),
])  # fmt: skip
def test_the_longest_run_a_longer_token_extends_goes(prompt: Any, kept: Any, removed: bytes) -> None:
    h = gm.heal_prompt(VOCAB, ids(*prompt))
    assert h == gm.HealedPrompt(tuple(ids(*kept)), removed)


def test_healing_stops_at_special_tokens_and_checks_its_input() -> None:
    eos = VOCAB.eos_token_id
    assert gm.heal_prompt(VOCAB, [*ids(b"x"), eos]) == gm.HealedPrompt((*ids(b"x"), eos), b"")
    assert gm.heal_prompt(VOCAB, ids(b"x", b"a", b"b"), max_tokens=1).removed == b"b"
    with pytest.raises(GrammarError, match="outside the vocabulary"):
        gm.heal_prompt(VOCAB, [10**6])
    with pytest.raises(GrammarError, match="max_tokens must be >= 0"):
        gm.heal_prompt(VOCAB, [], max_tokens=-1)


@pytest.mark.parametrize(("removed", "pattern"), [(b"ab", r"c?[0-9]+"), (b"c", r"1|12|xy"), (b"a", r"bc*")])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_healed_is_the_removed_bytes_then_the_grammar(removed: bytes, pattern: str, data: Any) -> None:
    compiled = gm.healed(gm.Regex(pattern), removed).compile(VOCAB)  # type: ignore[union-attr]
    path = data.draw(token_paths(compiled, max_tokens=6, allow_eos=False))
    rx = regex.compile(re.escape(removed) + f"(?:{pattern})".encode())
    assert_mask_exact(compiled, path, lambda b: rx.fullmatch(b, partial=True) is not None,
                      lambda b: rx.fullmatch(b) is not None)
    # the same through a Lark grammar (the generic path) and from a compiled grammar
    lark = gm.Lark(f"start: /{pattern}/")
    assert gm.healed(lark.compile(VOCAB), removed).matcher().mask() == compiled.matcher().mask()  # type: ignore[union-attr]


def test_healed_returns_the_grammar_when_nothing_was_removed() -> None:
    g = gm.Regex("a")
    assert gm.healed(g, b"") is g
    with pytest.raises(GrammarError, match="expected a Grammar"):
        gm.healed("a", b"x")  # type: ignore[arg-type]


def test_generate_with_heal_writes_the_removed_bytes_back() -> None:
    """A model that prefers the longer token: healed, it writes "abc" in one token; the text
    returned is what follows the prompt as given."""
    prefer = VOCAB.token_bytes.index(b"abc")

    def model(context: list[int]) -> Any:
        logits = np.zeros(VOCAB.size)
        logits[prefer] = 5.0
        return logits

    out = gm.generate(model, VOCAB, gm.Regex(r"c[0-9]"), ids(b"x", b"ab"), heal=True, seed=0, max_tokens=8)
    assert out.healed_prefix == b"ab" and out.token_ids[0] == prefer
    assert out.text_bytes == VOCAB.decode(out.token_ids)[2:] and out.text_bytes[:1] == b"c"
    assert out.accepted and re.fullmatch(rb"c[0-9]", out.text_bytes)
    plain = gm.generate(model, VOCAB, gm.Regex(r"c[0-9]"), ids(b"x", b"ab"), seed=0, max_tokens=8)
    assert plain.healed_prefix == b"" and plain.token_ids[0] != prefer


def test_healing_on_tekken(tekken: gm.Vocabulary, tekken_tokenizer: Any) -> None:
    """A prompt cut inside "https://": healing takes the cut part off and lets the model write it
    back with the tokenizer's own longer tokens."""
    prompt = tekken_tokenizer.encode('{"url": "https:/', bos=False, eos=False)
    h = gm.heal_prompt(tekken, prompt)
    assert h.removed == b":/"  # tekken wrote "https" ":/": "://" is one of its tokens
    grammar = gm.Regex(r'/?/example\.com"\}')
    m = gm.healed(grammar, h.removed).compile(tekken).matcher()  # type: ignore[union-attr]
    whole = tekken_tokenizer.encode('{"url": "https://example.com"}', bos=False, eos=False)
    kept = len(h.token_ids)
    assert list(whole[:kept]) == list(h.token_ids)  # the healed prompt is a prefix of the whole text
    m.advance_many(whole[kept:])  # the tokenizer's own tokens of the rest are legal, join included
    assert m.is_accepting()


def test_the_model_writes_the_healed_bytes_even_with_jump_forward() -> None:
    """Jump-forward would write the forced bytes "abc" itself; under healing the model chooses how the
    removed bytes are written (here "ab", its favourite), and jump-forward resumes after them."""
    favourite = {VOCAB.token_bytes.index(b"ab"): 5.0, VOCAB.token_bytes.index(b"c1"): 4.0}

    def model(context: list[int]) -> Any:
        logits = np.zeros(VOCAB.size)
        for t, v in favourite.items():
            logits[t] = v
        return logits

    out = gm.generate(model, VOCAB, gm.Regex(r"c[0-9]"), ids(b"x", b"ab"), heal=True, seed=0, max_tokens=8)
    assert out.token_ids[0] == ids(b"ab")[0] and out.steps[0].forced is False
    assert out.steps[1].forced and out.text_bytes[:1] == b"c"  # the grammar's own forced "c"
