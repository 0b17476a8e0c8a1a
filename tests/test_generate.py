"""generate(): the decoding loop ends in accepted output, jump-forward saves model calls, stats add up."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammarmask.decoding as gen_mod
from grammarmask.decoding import generate
from grammarmask.errors import GrammarError, NoLegalContinuation
from grammarmask.grammar import CompiledGrammar, Grammar
from grammarmask.mask import Mask
from grammarmask.models import LogitsModel, RandomModel, ScriptedModel, UniformModel
from grammarmask.testing import byte_vocabulary
from grammarmask.vocab import Vocabulary


class FiniteLanguage(Grammar):
    """A finite set of byte strings, decided by brute force (the obviously-right reference)."""

    def __init__(self, words: list[bytes]) -> None:
        self.words = list(words)

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        return _FiniteCompiled(vocab, self.words)


class _FiniteCompiled(CompiledGrammar):
    def __init__(self, vocab: Vocabulary, words: list[bytes]) -> None:
        self.vocab = vocab
        self.words = words

    def initial_state(self) -> bytes:
        return b""

    def _viable(self, w: bytes) -> bool:
        return any(s.startswith(w) for s in self.words)

    def state_mask_words(self, state: bytes) -> np.ndarray:
        legal = [i for i, b in enumerate(self.vocab.token_bytes) if b and self._viable(state + b)]
        return Mask.from_token_ids(legal, self.vocab.size).words

    def advance_state(self, state: bytes, token_id: int) -> bytes | None:
        nxt = state + self.vocab.token_bytes[token_id]
        return nxt if self._viable(nxt) else None

    def is_accepting_state(self, state: bytes) -> bool:
        return state in self.words

    def forced_bytes(self, state: bytes) -> bytes:
        rest = [s[len(state):] for s in self.words if s.startswith(state)]
        return os.path.commonprefix(rest) if rest else b""


LABELS = [b'{"answer": "yes"}', b'{"answer": "no"}', b'{"answer": "maybe"}']


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return byte_vocabulary([b'{"', b"answer", b'": "', b"yes", b"no", b"ma", b"maybe", b'"}', b"an"])


def test_fakes_follow_the_protocol(vocab: Vocabulary) -> None:
    for m in (UniformModel(vocab.size), ScriptedModel([1, 2], vocab.size), RandomModel(vocab.size, 3)):
        assert isinstance(m, LogitsModel)
        assert np.asarray(m([5, 6])).shape == (vocab.size,)
    r = RandomModel(vocab.size, 3)
    assert np.array_equal(r([1, 2, 3]), r([1, 2, 3]))
    assert not np.array_equal(r([1, 2, 3]), r([1, 2, 4]))
    with pytest.raises(GrammarError):
        UniformModel(0)
    with pytest.raises(GrammarError, match="outside"):
        ScriptedModel([vocab.size], vocab.size)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from([0.0, 0.7, 1.0, 3.0]), st.booleans())
def test_random_model_ends_in_accepted_output(vocab: Vocabulary, seed: int, temperature: float,
                                              jump: bool) -> None:
    res = generate(RandomModel(vocab.size, seed), vocab, FiniteLanguage(LABELS), seed=seed,
                   temperature=temperature, jump_forward=jump)
    assert res.finished and res.accepted
    assert res.token_ids[-1] == vocab.eos_token_id
    assert res.text_bytes in LABELS
    assert res.text == res.text_bytes.decode()
    assert res.model_calls + res.forced_tokens_used == len(res.token_ids) == len(res.steps)
    if not jump:
        assert res.forced_tokens_used == 0


def test_scripted_model_is_followed_and_jump_forward_saves_calls(vocab: Vocabulary) -> None:
    ids = {b: i for i, b in enumerate(vocab.token_bytes)}
    script = [ids[b'{"'], ids[b"answer"], ids[b'": "'], ids[b"no"], ids[b'"}'], vocab.eos_token_id]
    prompt = [ids[b"a"], ids[b"b"]]
    grammar = FiniteLanguage(LABELS)
    model = ScriptedModel(script, vocab.size, prompt_length=len(prompt))
    slow = generate(model, vocab, grammar, prompt, jump_forward=False, seed=0)
    assert slow.text_bytes == b'{"answer": "no"}'
    assert slow.model_calls == len(slow.token_ids) == 6
    fast = generate(model, vocab, grammar, prompt, jump_forward=True, seed=0)
    assert fast.text_bytes == b'{"answer": "no"}' and fast.finished
    # the prefix {"answer": " is forced (3 tokens), so is "} then EOS after "no"
    assert fast.forced_tokens_used == 5
    assert fast.model_calls == 1
    assert [s.forced for s in fast.steps] == [True, True, True, False, True, True]


def test_jump_forward_with_choice_backend(vocab: Vocabulary) -> None:
    choice = pytest.importorskip("grammarmask.frontends.choice")
    g = choice.Choice([s.decode() for s in LABELS])
    on = generate(UniformModel(vocab.size), vocab, g, seed=1)
    off = generate(UniformModel(vocab.size), vocab, g, seed=1, jump_forward=False)
    assert on.text_bytes in LABELS and off.text_bytes in LABELS and on.finished and off.finished
    assert on.forced_tokens_used > 0
    assert on.model_calls < off.model_calls


def test_uniform_model_kl_is_log_of_vocab_over_legal(vocab: Vocabulary) -> None:
    res = generate(UniformModel(vocab.size), vocab, FiniteLanguage(LABELS), seed=4, jump_forward=False)
    for s in res.steps:
        assert s.z is not None and s.neg_log_z is not None
        assert s.neg_log_z == pytest.approx(math.log(vocab.size / s.n_legal))
    total = sum(math.log(vocab.size / s.n_legal) for s in res.steps)
    assert res.stats.total_nats == pytest.approx(total)
    assert res.stats.bits_per_token == pytest.approx(total / math.log(2) / len(res.steps))
    assert res.stats.n_forced == 0 and res.stats.n_scored == len(res.steps)


def test_max_tokens_stops_unfinished(vocab: Vocabulary) -> None:
    res = generate(UniformModel(vocab.size), vocab, FiniteLanguage(LABELS), max_tokens=2, seed=0,
                   jump_forward=False)
    assert len(res.token_ids) == 2 and not res.finished and not res.accepted
    assert generate(UniformModel(vocab.size), vocab, FiniteLanguage(LABELS), max_tokens=0).token_ids == ()
    # jump-forward also respects the budget
    res = generate(UniformModel(vocab.size), vocab, FiniteLanguage(LABELS), max_tokens=2, seed=0)
    assert len(res.token_ids) == 2


def test_greedy_and_seeded_runs_are_reproducible(vocab: Vocabulary) -> None:
    g = FiniteLanguage(LABELS)
    a = generate(RandomModel(vocab.size, 9), vocab, g, temperature=0)
    b = generate(RandomModel(vocab.size, 9), vocab, g, temperature=0)
    assert a.token_ids == b.token_ids
    c = generate(RandomModel(vocab.size, 9), vocab, g, rng=np.random.default_rng(5), top_k=3, top_p=0.9)
    d = generate(RandomModel(vocab.size, 9), vocab, g, seed=5, top_k=3, top_p=0.9)
    assert c.token_ids == d.token_ids and c.text_bytes in LABELS


def test_dead_end_raises_no_legal_continuation(vocab: Vocabulary) -> None:
    class DeadEnd(_FiniteCompiled):
        def is_accepting_state(self, state: bytes) -> bool:
            return False  # "ab" is a viable prefix of nothing that ever finishes

    compiled = DeadEnd(vocab, [b"ab"])
    with pytest.raises(NoLegalContinuation):
        generate(UniformModel(vocab.size), vocab, compiled, seed=0, jump_forward=False)


def test_bad_arguments(vocab: Vocabulary) -> None:
    other = byte_vocabulary()
    compiled = FiniteLanguage(LABELS).compile(other)
    with pytest.raises(GrammarError, match="different vocabulary"):
        generate(UniformModel(vocab.size), vocab, compiled)
    with pytest.raises(GrammarError, match="Grammar"):
        generate(UniformModel(vocab.size), vocab, "yes|no")  # type: ignore[arg-type]
    with pytest.raises(GrammarError, match="max_tokens"):
        generate(UniformModel(vocab.size), vocab, FiniteLanguage(LABELS), max_tokens=-1)
    with pytest.raises(GrammarError, match="rng or seed"):
        generate(UniformModel(vocab.size), vocab, FiniteLanguage(LABELS), rng=np.random.default_rng(), seed=1)
    with pytest.raises(GrammarError, match="entries"):
        generate(UniformModel(vocab.size - 1), vocab, FiniteLanguage(LABELS), jump_forward=False)
    assert gen_mod.__all__ == ["GenerationResult", "generate"]


@pytest.fixture(scope="module")
def tekken() -> Vocabulary:
    return Vocabulary.from_mistral("tekken")


def test_generate_on_the_tekken_vocabulary(tekken: Vocabulary) -> None:
    choice = pytest.importorskip("grammarmask.frontends.choice")
    vocab = tekken
    labels = ["Technology > AI > NLP", "Technology > AI > Vision", "Science > Physics", " Art"]
    g = choice.Choice(labels)
    for seed in range(5):
        res = generate(RandomModel(vocab.size, seed), vocab, g, seed=seed)
        assert res.finished and res.text in labels
        assert res.stats.total_nats > 0


PATTERNS = [
    r'\{"n": (0|[1-9][0-9]{0,3}), "ok": (true|false)\}',
    r"(ab|a|b)*c",
    r"[a-z]{1,6}( [a-z]{1,6}){0,3}\.",
    r"\d{3}-\d{4}",
]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(PATTERNS), st.integers(0, 2**31), st.sampled_from([0.5, 1.0, 2.0]))
def test_regex_backend_outputs_fullmatch(
    vocab: Vocabulary, pattern: str, seed: int, temperature: float
) -> None:
    import re

    regex = pytest.importorskip("grammarmask.frontends.regex")
    res = generate(RandomModel(vocab.size, seed, scale=1.0), vocab, regex.Regex(pattern), seed=seed,
                   temperature=temperature, max_tokens=400)
    if res.finished:
        assert re.fullmatch(pattern, res.text), res.text
    else:  # cut by max_tokens: still a viable prefix, never a violation
        assert len(res.token_ids) == 400


def test_and_composition_ends_in_both_languages(tekken: Vocabulary) -> None:
    import re

    import grammarmask as gm

    regex = pytest.importorskip("grammarmask.frontends.regex")
    g = gm.And(regex.Regex(r"[a-z ]{1,40}\."), regex.Regex(r"[^x]*(cat|dog)[^x]*"))
    for seed in range(4):
        res = generate(RandomModel(tekken.size, seed, scale=1.0), tekken, g, seed=seed, max_tokens=200)
        assert res.finished, res.text
        assert re.fullmatch(r"[a-z ]{1,40}\.", res.text) and re.fullmatch(r"[^x]*(cat|dog)[^x]*", res.text)


def test_gm_generate_stays_the_function_after_its_module_is_imported() -> None:
    """The decoding loop's module is not named ``generate``: importing it cannot shadow gm.generate."""
    import importlib

    import grammarmask as gm

    importlib.import_module("grammarmask.decoding")
    assert callable(gm.generate) and gm.generate is generate
