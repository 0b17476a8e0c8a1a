"""Bad API input gets the documented error, never a stray builtin one or a silent coercion (issue 19).

The policy (grammarmask.errors): an argument grammarmask cannot use raises ``GrammarError`` naming the
function's argument; an integer token id the grammar does not allow raises ``TokenRejected``. Either
way a matcher is left as it was. Each case here is one input from the issue.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.decoding import generate
from grammarmask.models import UniformModel

# byte-level toy vocabulary: id 0 is EOS, id b + 1 is the single byte b
VOCAB = gm.Vocabulary.from_tokens([b""] + [bytes([b]) for b in range(256)], eos_token_id=0)
A = ord("a") + 1  # the token "a"


def matcher() -> gm.Matcher:
    m = gm.Regex("a*b?").compile(VOCAB).matcher()
    m.advance(A)  # one token in, so that rollback and rejections have a state to keep
    return m


def _logits() -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.zeros(VOCAB.size, np.float32)


# --- the matcher: a rejected argument leaves the state unchanged ----------------------------------


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        pytest.param(lambda m: m.advance(None), "token_id", id="advance(None)"),
        pytest.param(lambda m: m.advance("a"), "token_id", id="advance('a')"),
        pytest.param(lambda m: m.advance("98"), "token_id", id="advance('98')"),
        pytest.param(lambda m: m.advance(98.9), "token_id", id="advance(98.9)"),
        pytest.param(lambda m: m.advance(98.0), "token_id", id="advance(98.0)"),
        pytest.param(lambda m: m.advance(math.nan), "token_id", id="advance(nan)"),
        pytest.param(lambda m: m.advance(math.inf), "token_id", id="advance(inf)"),
        pytest.param(lambda m: m.advance(True), "token_id", id="advance(True)"),
        pytest.param(lambda m: m.advance(np.float64(98)), "token_id", id="advance(np.float64)"),
        pytest.param(lambda m: m.try_advance(None), "token_id", id="try_advance(None)"),
        pytest.param(lambda m: m.advance_many([A, None]), "token_id", id="advance_many([a, None])"),
        pytest.param(lambda m: m.rollback("x"), "n_tokens", id="rollback('x')"),
        pytest.param(lambda m: m.rollback(1.0), "n_tokens", id="rollback(1.0)"),
        pytest.param(lambda m: m.rollback(-1), "n_tokens", id="rollback(-1)"),
        pytest.param(
            lambda m: m.fill_mask(np.zeros((2, VOCAB.n_words), np.int32), row=5), "row", id="fill_mask(row=5)"
        ),
        pytest.param(
            lambda m: m.fill_mask(np.zeros((2, VOCAB.n_words), np.int32), row="0"),
            "row",
            id="fill_mask(row='0')",
        ),
        pytest.param(lambda m: m.fill_mask([[0] * VOCAB.n_words], 0), "words", id="fill_mask(list)"),
        pytest.param(lambda m: m.fill_mask(_readonly(), 0), "words", id="fill_mask(read-only)"),
    ],
)
def test_matcher_argument_is_refused_and_state_kept(call: Callable[[gm.Matcher], Any], argument: str) -> None:
    m = matcher()
    before = (m.num_tokens, m.state, m.mask())
    with pytest.raises(gm.GrammarError, match=argument):
        call(m)
    assert (m.num_tokens, m.state, m.mask()) == before


def _readonly() -> np.ndarray[Any, np.dtype[np.int32]]:
    words = np.zeros((1, VOCAB.n_words), np.int32)
    words.setflags(write=False)
    return words


def test_fill_mask_writes_nothing_on_a_bad_row() -> None:
    words = np.zeros((2, VOCAB.n_words), np.int32)
    with pytest.raises(gm.GrammarError, match="row"):
        matcher().fill_mask(words, row=-1)
    assert not words.any()


@pytest.mark.parametrize("token", [np.int64(A), np.int32(A), np.uint16(A), np.array(A)], ids=repr)
def test_numpy_integers_are_still_token_ids(token: Any) -> None:
    m = matcher()
    m.advance(token)
    assert m.num_tokens == 2
    assert m.try_advance(token)
    m.rollback(np.int64(2))
    assert m.num_tokens == 1
    words = np.zeros((2, VOCAB.n_words), np.uint32)
    m.fill_mask(words, np.int64(1))
    assert words[1].any()


def test_an_int_token_the_grammar_forbids_is_still_token_rejected() -> None:
    m = matcher()
    with pytest.raises(gm.TokenRejected):
        m.advance(ord("z") + 1)
    with pytest.raises(gm.TokenRejected, match="outside the vocabulary"):
        m.advance(10**6)
    assert not m.try_advance(ord("z") + 1)
    assert m.num_tokens == 1


# --- constructors and functions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        pytest.param(
            lambda: gm.Vocabulary([b"a", b""], eos_token_id="0"), "eos_token_id", id="eos_token_id='0'"
        ),
        pytest.param(
            lambda: gm.Vocabulary([b"a", b""], eos_token_id=1.5), "eos_token_id", id="eos_token_id=1.5"
        ),
        pytest.param(
            lambda: gm.Vocabulary([b"a", b""], eos_token_id=True), "eos_token_id", id="eos_token_id=True"
        ),
        pytest.param(
            lambda: gm.Vocabulary([b"a", b""], eos_token_id=1, special_token_ids=[None]),
            "special_token_ids",
            id="special_token_ids=[None]",
        ),
        pytest.param(
            lambda: gm.Vocabulary([b"a", b""], eos_token_id=1, size=2.5), "size", id="Vocabulary(size=2.5)"
        ),
        pytest.param(lambda: gm.Mask(np.zeros(0, np.uint32), size=-5), "size", id="Mask(size=-5)"),
        pytest.param(lambda: gm.Mask(np.zeros(1, np.uint32), size=3.0), "size", id="Mask(size=3.0)"),
        pytest.param(lambda: gm.Mask.none(-40), "size", id="Mask.none(-40)"),
        pytest.param(
            lambda: gm.Lark('start: "a"', import_paths=[None]), "import_paths", id="import_paths=[None]"
        ),
        pytest.param(
            lambda: gm.Lark('start: "a"', import_paths="grammars"), "import_paths", id="import_paths=str"
        ),
        pytest.param(lambda: gm.Choice("abc"), "labels", id="Choice('abc')"),
        pytest.param(lambda: gm.Choice(5), "labels", id="Choice(5)"),
        pytest.param(lambda: gm.JsonSchema({"type": "string"}, strict="no"), "strict", id="strict='no'"),
        pytest.param(lambda: gm.JsonSchema({"type": "string"}, strict=None), "strict", id="strict=None"),
        pytest.param(
            lambda: generate(UniformModel(VOCAB.size), VOCAB, gm.Regex("a"), prompt_ids=[None]),
            "prompt_ids",
            id="generate(prompt_ids=[None])",
        ),
        pytest.param(
            lambda: generate(UniformModel(VOCAB.size), VOCAB, gm.Regex("a"), prompt_ids=[1.5]),
            "prompt_ids",
            id="generate(prompt_ids=[1.5])",
        ),
        pytest.param(
            lambda: generate(UniformModel(VOCAB.size), VOCAB, gm.Regex("a"), seed=-1),
            "seed",
            id="generate(seed=-1)",
        ),
        pytest.param(
            lambda: gm.sample(_logits(), None, previous_tokens=[None]),
            "previous_tokens",
            id="previous_tokens=[None]",
        ),
        pytest.param(
            lambda: gm.sample(_logits(), None, previous_tokens=[None], repetition_penalty=1.3),
            "previous_tokens",
            id="previous_tokens=[None] with a penalty",
        ),
        pytest.param(
            lambda: gm.sample_with_stats(_logits(), None, previous_tokens=["1"]),
            "previous_tokens",
            id="sample_with_stats(previous_tokens=['1'])",
        ),
        pytest.param(lambda: gm.sample(_logits(), None, rng=-1), "rng", id="rng=-1"),
        pytest.param(lambda: gm.sample(_logits(), None, rng=-1, temperature=0), "rng", id="rng=-1 greedy"),
        pytest.param(lambda: gm.sample(_logits(), None, rng=True), "rng", id="rng=True"),
        pytest.param(lambda: gm.sample(np.array(["1"] * VOCAB.size), None), "logits", id="string logits"),
        pytest.param(lambda: gm.sample(["a"] * VOCAB.size, None), "logits", id="list of str logits"),
        pytest.param(lambda: gm.sample(_logits().astype(np.complex64), None), "logits", id="complex logits"),
        pytest.param(lambda: gm.sample(np.array([None] * VOCAB.size), None), "logits", id="object logits"),
    ],
)
def test_argument_is_refused_naming_it(call: Callable[[], Any], argument: str) -> None:
    with pytest.raises(gm.GrammarError, match=argument):
        call()


def test_integer_like_arguments_still_work() -> None:
    vocab = gm.Vocabulary(
        [b"a", b""], eos_token_id=np.int64(1), special_token_ids=np.array([1]), size=np.int32(2)
    )
    assert vocab.eos_token_id == 1 and type(vocab.eos_token_id) is int
    assert gm.Mask(np.zeros(1, np.uint32), size=np.int64(3)).size == 3
    logits = np.zeros(VOCAB.size, np.int64)
    assert (
        gm.sample(logits, None, rng=np.int64(3), previous_tokens=np.array([1, 2]), repetition_penalty=1.2)
        >= 0
    )
    out = generate(UniformModel(VOCAB.size), VOCAB, gm.Regex("a"), prompt_ids=np.array([A]), seed=0)
    assert out.text == "a"


# --- files and schema values -------------------------------------------------------------------


@pytest.mark.parametrize(("cls", "body"), [(gm.Lark, b'start: "a"\n'), (gm.Gbnf, b'root ::= "a"\n')])
def test_grammar_file_that_is_not_utf8(tmp_path: Path, cls: Any, body: bytes) -> None:
    path = tmp_path / "bad.grammar"
    path.write_bytes(body + b"// \xff\n")
    offset = len(body) + 3
    with pytest.raises(gm.GrammarError, match=rf"bad\.grammar.*0xff at byte offset {offset}\b") as info:
        cls.from_file(path)
    assert (info.value.line, info.value.column) == (2, 4)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_schema_value_json_cannot_express(value: float) -> None:
    with pytest.raises(gm.GrammarError, match=r"at /const, which JSON cannot express"):
        gm.JsonSchema({"const": value})
    with pytest.raises(gm.GrammarError, match=r"at /properties/x/enum/1"):
        gm.JsonSchema({"properties": {"x": {"enum": [1, value]}}})


def test_schema_text_with_nan_is_refused() -> None:
    with pytest.raises(gm.GrammarError, match="/maximum"):
        gm.JsonSchema('{"maximum": NaN}')
