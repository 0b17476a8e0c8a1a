"""Canonical forced text (grammarmask.canonical) on a toy vocabulary whose tokenizer is longest-match:
the narrowed masks, their invariants along random walks, jump-forward, and the fallbacks."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

import grammarmask as gm
from grammarmask.canonical import CanonicalForced, canonical

MERGES = [b'{"', b'":', b'":"', b'","', b',"', b'"}', b"name", b"age", b"Jo", b"hn", b'"J']
TOKENS = [b"<eos>"] + [bytes([b]) for b in range(256)] + MERGES
VOCAB = gm.Vocabulary.from_tokens(TOKENS, eos_token_id=0)
IDS = {t: i for i, t in enumerate(TOKENS) if i}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "maximum": 99}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def encode(text: str) -> list[int]:
    """Longest match, left to right: this toy tokenizer's canonical tokenization."""
    data, out, i = text.encode(), [], 0
    while i < len(data):
        j = max(k for k in range(i + 1, len(data) + 1) if data[i:k] in IDS)
        out.append(IDS[data[i:j]])
        i = j
    return out


@pytest.fixture(scope="module")
def exact() -> gm.CompiledGrammar:
    return gm.JsonSchema(PERSON, whitespace="compact", plain_integers=True).compile(VOCAB)


@pytest.fixture(scope="module")
def canon(exact: gm.CompiledGrammar) -> CanonicalForced:
    return canonical(exact, encode)


def ids(*tokens: bytes) -> list[int]:
    return [IDS[t] for t in tokens]


def test_forced_text_allows_only_its_canonical_first_token(exact: gm.CompiledGrammar,
                                                           canon: CanonicalForced) -> None:
    assert exact.matcher().forced_bytes() == b'{"name":"'
    assert set(canon.matcher().mask().token_ids()) == {IDS[b'{"']}
    assert IDS[b"{"] in exact.matcher().mask()
    m = canon.matcher()
    m.advance_many(ids(b'{"', b"name"))
    # '":"' could merge with the string that follows ('"J'): nothing certain, the grammar's own mask
    e = exact.matcher()
    e.advance_many(ids(b'{"', b"name"))
    assert m.mask() == e.mask()
    m.advance_many(ids(b'":"', b"Jo", b"hn"))
    e.advance_many(ids(b'":"', b"Jo", b"hn"))
    m.advance(IDS[b'"'])
    e.advance(IDS[b'"'])
    # forced ',"age":' after the closing quote: the previous token is context ('","' is not
    # '"' + ...), then ',"' is certain and 'age' too; '":' may merge with nothing longer here
    assert set(m.mask().token_ids()) == {IDS[b',"']}
    assert len(e.mask()) > 1


def test_a_rejected_non_canonical_token_leaves_the_state(canon: CanonicalForced) -> None:
    m = canon.matcher()
    with pytest.raises(gm.TokenRejected):
        m.advance(IDS[b"{"])
    assert m.num_tokens == 0 and not m.try_advance(IDS[b"{"])


def test_jump_forward_appends_the_canonical_tokens(canon: CanonicalForced) -> None:
    forced = canon.matcher().forced_tokens()
    assert forced == ids(b'{"', b"name")  # '":"' is not certain (see above)


@pytest.mark.parametrize("seed", range(12))
def test_random_walks_stay_inside_and_only_narrow(exact: gm.CompiledGrammar, canon: CanonicalForced,
                                                  seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, e = canon.matcher(), exact.matcher()
    out: list[int] = []
    while not m.is_finished():
        c, x = m.mask(), e.mask()
        assert c and not (c - x)
        if not e.forced_bytes():
            assert c == x
        t = int(rng.choice(c.token_ids()))
        m.advance(t)
        e.advance(t)
        out.append(t)
        assert m.num_tokens < 200
    jsonschema.validate(json.loads(VOCAB.decode(out)), PERSON)


def test_an_encoder_that_does_not_reproduce_the_bytes_keeps_the_full_mask(exact: gm.CompiledGrammar) -> None:
    odd = canonical(exact, lambda text: [IDS[b" "], *encode(text)])  # an added prefix space
    assert odd.matcher().mask() == exact.matcher().mask()
    assert odd.fallbacks >= 1


def test_canonical_refuses_what_is_not_a_compiled_grammar() -> None:
    with pytest.raises(gm.GrammarError, match="CompiledGrammar"):
        canonical("grammar", encode)  # type: ignore[arg-type]
    with pytest.raises(gm.GrammarError, match="tokenizer"):
        canonical(gm.Choice(["a"]).compile(VOCAB), 42)
