"""Choice: exact masks against a brute-force oracle, on toy and real vocabularies, single and multi-label."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask.frontends.choice import Choice
from grammarmask.testing import byte_vocabulary, reference_mask

from .support import taxonomy_labels


def label_oracle(labels: list[str], sep: str | None, leading: str, max_labels: int | None = None):
    """(is_viable_prefix, is_complete) straight from the definition of the language."""
    labs = [lab.encode() for lab in labels]
    sep_b = sep.encode() if sep is not None else None

    def strip(text: bytes) -> bytes | None:
        if leading == "always":
            return text[1:] if text.startswith(b" ") else (b"" if text == b"" else None)
        if leading == "optional" and text.startswith(b" "):
            return text[1:]
        return text

    def split(text: bytes) -> tuple[list[bytes], bytes]:
        if sep_b is None:
            return [], text
        parts = text.split(sep_b)
        return parts[:-1], parts[-1]

    def done_ok(done: list[bytes]) -> bool:
        if max_labels is not None and len(done) + 1 > max_labels:
            return False
        return all(d in labs for d in done) and len(set(done)) == len(done)

    def viable(text: bytes) -> bool:
        body = strip(text)
        if body is None:
            return False
        if leading == "always" and text == b"":
            return True
        done, last = split(body)
        if not done_ok(done):
            return False
        free = [lab for lab in labs if lab not in done]
        if any(lab.startswith(last) for lab in free):
            return True
        if sep_b is not None:  # a label followed by part of the separator
            for k in range(1, len(sep_b)):
                if last.endswith(sep_b[:k]):
                    head = last[: len(last) - k]
                    rest = [lab for lab in free if lab != head]
                    if head in free and rest and done_ok([*done, head]):
                        return True
        return False

    def complete(text: bytes) -> bool:
        body = strip(text)
        if body is None or (leading == "always" and text == b""):
            return False
        done, last = split(body)
        return done_ok(done) and last in labs and last not in done

    return viable, complete


def walk_and_check(
    compiled: gm.CompiledGrammar, viable, complete, rng: np.random.Generator, steps: int
) -> bytes:
    """Random walk through the mask, comparing it with the oracle before every step."""
    vocab = compiled.vocab
    m = compiled.matcher()
    out = b""
    for _ in range(steps):
        got = m.mask()
        want = reference_mask(viable, vocab, out, is_complete=complete)
        assert got == want, (
            f"after {out!r}: extra {(got - want).token_ids()[:8]}, missing {(want - got).token_ids()[:8]}"
        )
        ids = got.token_ids()
        t = int(rng.choice(ids))
        m.advance(t)
        if m.is_finished():
            return out
        out += vocab.token_bytes[t]
    return out


TOY_EXTRA = [
    b"ab",
    b"abc",
    b"ba",
    b"a|",
    b"|a",
    b"|b",
    b"c|c",
    b"a|b",
    b"b|a|",
    b", ",
    b"a, ",
    b"bc, b",
    b" a",
    b"  ",
]

alphabet_labels = st.lists(
    st.text(alphabet="abc", min_size=1, max_size=4), min_size=1, max_size=6, unique=True
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    labels=alphabet_labels,
    leading=st.sampled_from(["none", "always", "optional"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_single_label_mask_equals_oracle(labels: list[str], leading: str, seed: int) -> None:
    vocab = byte_vocabulary(TOY_EXTRA)
    compiled = Choice(labels, leading_space=leading).compile(vocab)  # type: ignore[arg-type]
    viable, complete = label_oracle(labels, None, leading)
    out = walk_and_check(compiled, viable, complete, np.random.default_rng(seed), 12)
    assert complete(out) or viable(out)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    labels=alphabet_labels,
    sep=st.sampled_from(["|", ", "]),
    max_labels=st.sampled_from([None, 1, 2]),
    seed=st.integers(0, 2**32 - 1),
)
def test_multi_label_mask_equals_oracle(
    labels: list[str], sep: str, max_labels: int | None, seed: int
) -> None:
    vocab = byte_vocabulary(TOY_EXTRA)
    compiled = Choice(labels, separator=sep, max_labels=max_labels).compile(vocab)
    viable, complete = label_oracle(labels, sep, "none", max_labels)
    walk_and_check(compiled, viable, complete, np.random.default_rng(seed), 25)


def test_taxonomy_on_real_vocabularies(tekken: gm.Vocabulary, sentencepiece: gm.Vocabulary) -> None:
    labels = taxonomy_labels(1000)
    for vocab, leading in ((tekken, "always"), (tekken, "none"), (sentencepiece, "always")):
        compiled = Choice(labels, leading_space=leading).compile(vocab)  # type: ignore[arg-type]
        viable, complete = label_oracle(labels, None, leading)
        rng = np.random.default_rng(7)
        out = walk_and_check(compiled, viable, complete, rng, 40)
        assert complete(out)


def test_multi_label_on_tekken(tekken: gm.Vocabulary) -> None:
    labels = taxonomy_labels(200)
    compiled = Choice(labels, separator="|", max_labels=3).compile(tekken)
    viable, complete = label_oracle(labels, "|", "none", 3)
    rng = np.random.default_rng(3)
    for _ in range(2):
        walk_and_check(compiled, viable, complete, rng, 40)


def test_real_tokenizations_are_accepted(tekken: gm.Vocabulary, tekken_tokenizer) -> None:
    labels = taxonomy_labels(1000)
    compiled = Choice(labels, leading_space="always").compile(tekken)
    for lab in labels[::37]:
        m = compiled.matcher()
        for t in tekken_tokenizer.encode(" " + lab, bos=False, eos=False):
            m.advance(t)
        m.advance(tekken.eos_token_id)
        assert m.is_finished()


def test_seed_use_case_after_prefix_only_continuation(tekken: gm.Vocabulary, tekken_tokenizer) -> None:
    compiled = Choice(["Technology", "Sports", "Politics"], leading_space="always").compile(tekken)
    m = compiled.matcher()
    first = tekken_tokenizer.encode(" Tech", bos=False, eos=False)
    m.advance_many(first)
    legal = {tekken.token_bytes[t] for t in m.mask().token_ids()}
    assert legal == {b for b in set(tekken.token_bytes) if b and b"nology".startswith(b)}
    assert m.forced_bytes() == b"nology"
    forced = m.forced_tokens()
    assert tekken.decode(forced[:-1]) == b"nology" and forced[-1] == tekken.eos_token_id


def test_multi_label_never_repeats(tekken: gm.Vocabulary, tekken_tokenizer) -> None:
    compiled = Choice(["red", "green", "blue"], separator="|").compile(tekken)
    m = compiled.matcher()
    m.advance_many(tekken_tokenizer.encode("red|green|", bos=False, eos=False))
    legal = {tekken.token_bytes[t] for t in m.mask().token_ids()}
    assert legal == {b for b in set(tekken.token_bytes) if b and b"blue".startswith(b)}
    m.advance_many(tekken_tokenizer.encode("blue", bos=False, eos=False))
    assert m.mask().token_ids().tolist() == [tekken.eos_token_id]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"labels": []}, "at least one label"),
        ({"labels": ["a", "b", "a"]}, "duplicates label 0"),
        ({"labels": ["a", ""]}, "label 1 is empty"),
        ({"labels": ["ok", "bad\udc80"]}, "not valid Unicode"),
        ({"labels": ["a|b"], "separator": "|"}, "contains the separator"),
        ({"labels": ["a"], "leading_space": "sometimes"}, "leading_space"),
    ],
)
def test_bad_labels_are_clear_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(gm.GrammarError, match=message):
        Choice(**kwargs)


def test_rejected_token_leaves_state_unchanged(tekken: gm.Vocabulary, tekken_tokenizer) -> None:
    compiled = Choice(["alpha", "beta"]).compile(tekken)
    m = compiled.matcher()
    m.advance_many(tekken_tokenizer.encode("al", bos=False, eos=False))
    before = m.mask()
    bad = tekken_tokenizer.encode("zzz", bos=False, eos=False)[0]
    with pytest.raises(gm.TokenRejected):
        m.advance(bad)
    with pytest.raises(gm.TokenRejected):
        m.advance(tekken.eos_token_id)
    assert m.mask() == before and m.num_tokens == 1


def test_fork_and_rollback_round_trip(tekken: gm.Vocabulary, tekken_tokenizer) -> None:
    compiled = Choice(taxonomy_labels(100)).compile(tekken)
    ids = tekken_tokenizer.encode(taxonomy_labels(100)[5], bos=False, eos=False)
    m = compiled.matcher()
    masks = [m.mask()]
    for t in ids:
        m.advance(t)
        masks.append(m.mask())
    f = m.fork()
    m.advance(tekken.eos_token_id)
    assert m.is_finished() and not f.is_finished()
    assert f.mask() == masks[-1]
    for k in range(len(ids) - 1, -1, -1):
        f.rollback(1)
        assert f.mask() == masks[k]
    with pytest.raises(gm.GrammarError):
        f.rollback(1)
