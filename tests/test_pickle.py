"""Vocabularies and compiled grammars pickle (for worker processes and on-disk caches)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.testing import byte_vocabulary

VOCAB = byte_vocabulary([b"ab", b"12", b'{"', b'":'])
GRAMMARS = {
    "regex": gm.Regex("[a-c]+[0-9]"),
    "choice": gm.Choice(["ab1", "abc2"]),
    "lark": gm.Lark('start: "a" B*\nB: /[b1-2]/'),
    "gbnf": gm.Gbnf('root ::= "a" [b12]*'),
    "json_schema": gm.JsonSchema({"type": "object", "properties": {"a": {"type": "integer"}}},
                                 whitespace="compact"),
    "and": gm.Regex("[a-c]+[0-9]") & gm.Regex("a.*"),
    "sequence": gm.Regex("ab") + gm.Lark('start: "1"+'),
}
DOCS = {"regex": "abc1", "choice": "abc2", "lark": "ab12b", "gbnf": "ab12", "json_schema": '{"a":12}',
        "and": "ab2", "sequence": "ab11"}


def test_a_vocabulary_pickles_with_its_trie() -> None:
    VOCAB.trie  # noqa: B018 - built before pickling, so the copy need not build it again
    copy = pickle.loads(pickle.dumps(VOCAB))
    assert copy.fingerprint == VOCAB.fingerprint and copy.size == VOCAB.size
    assert "trie" in copy.__dict__ and np.array_equal(copy.trie.tokens, VOCAB.trie.tokens)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_a_compiled_grammar_pickles_and_masks_alike(name: str) -> None:
    compiled = GRAMMARS[name].compile(VOCAB)
    copy = pickle.loads(pickle.dumps(compiled))
    assert type(copy) is type(compiled)
    a, b = compiled.matcher(), copy.matcher()
    for byte in DOCS[name].encode():
        assert a.mask() == b.mask()
        token = VOCAB.token_bytes.index(bytes([byte]))
        a.advance(token)
        b.advance(token)
    assert a.mask() == b.mask() and b.is_accepting()


def test_the_engine_and_limits_travel_with_it() -> None:
    limits = gm.Limits(index_masks=7)
    compiled = gm.Regex("[ab]+").compile(VOCAB, limits=limits, engine="python")
    copy = pickle.loads(pickle.dumps(compiled))
    assert type(copy).__module__ == "grammarmask.regular.compiled"
    assert copy._source is not None and copy._source[2] == limits and copy._source[3] == "python"
