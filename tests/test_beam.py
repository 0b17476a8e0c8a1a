"""beam_search: finished beams are sentences (by `re.fullmatch` / lark), and a wide enough beam finds
exactly the best sequences of an independent exhaustive search over token strings."""

from __future__ import annotations

import itertools
import re

import lark
import numpy as np
import pytest

from grammarmask.beam import beam_search
from grammarmask.compose import And
from grammarmask.errors import GrammarError, NoLegalContinuation
from grammarmask.frontends.lark import Lark
from grammarmask.frontends.regex import Regex
from grammarmask.models import RandomModel, ScriptedModel
from grammarmask.testing import byte_vocabulary
from grammarmask.vocab import Vocabulary

TOKENS = [b"", b"a", b"b", b"ab", b"ba", b"c", b"bb"]
VOCAB = Vocabulary.from_tokens(TOKENS, eos_token_id=0)
PATTERN = r"(a|b){1,3}c?"


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def exhaustive(model: RandomModel, max_tokens: int) -> list[tuple[float, tuple[int, ...]]]:
    """Every token string of length <= max_tokens whose text fullmatches PATTERN, then EOS, scored."""
    out = []
    for n in range(1, max_tokens):
        for seq in itertools.product(range(1, len(TOKENS)), repeat=n):
            text = b"".join(TOKENS[t] for t in seq).decode()
            if re.fullmatch(PATTERN, text) is None:
                continue
            full = (*seq, 0)
            lp = sum(float(_log_softmax(model(list(full[:k])))[full[k]]) for k in range(len(full)))
            out.append((lp, full))
    out.sort(key=lambda x: -x[0])
    return out


@pytest.mark.parametrize("seed", range(6))
def test_wide_beam_equals_exhaustive_search(seed: int) -> None:
    model = RandomModel(len(TOKENS), seed=seed)
    want = exhaustive(model, 5)
    got = beam_search(model, VOCAB, Regex(PATTERN), num_beams=60, max_tokens=5)
    assert all(h.finished for h in got)
    assert [h.token_ids for h in got[:10]] == [s for _, s in want[:10]]
    assert np.allclose([h.log_prob for h in got[:10]], [lp for lp, _ in want[:10]])


@pytest.mark.parametrize("num_beams", [1, 2, 4])
def test_finished_beams_are_sentences(num_beams: int) -> None:
    calc = 'start: e\n?e: e "+" NUM | NUM | "(" e ")"\nNUM: /[0-9]/'
    vocab = byte_vocabulary([b"1+", b"(1", b"2)", b"+("])
    for seed in range(3):
        hyps = beam_search(RandomModel(vocab.size, seed=seed), vocab, Lark(calc), [5, 6], num_beams=num_beams,
                           max_tokens=12)  # fmt: skip
        assert 1 <= len(hyps) <= num_beams
        assert [h.score for h in hyps if h.finished] == sorted(
            (h.score for h in hyps if h.finished), reverse=True
        )
        for h in hyps:
            if h.finished:
                assert h.token_ids[-1] == vocab.eos_token_id
                lark.Lark(calc).parse(h.text)


def test_beam_follows_a_scripted_model_inside_the_grammar() -> None:
    ids = [TOKENS.index(b"ab"), TOKENS.index(b"c")]
    model = ScriptedModel(ids, len(TOKENS), then=0)
    best = beam_search(model, VOCAB, Regex(PATTERN), num_beams=3, max_tokens=8)[0]
    assert best.finished and best.text == "abc"
    # the script asks for "bb" then "bb" (4 letters): the grammar forbids the second, beams stay legal
    model = ScriptedModel([6, 6], len(TOKENS), then=0)
    for h in beam_search(model, VOCAB, Regex(PATTERN), num_beams=3, max_tokens=8):
        assert not h.finished or re.fullmatch(PATTERN, h.text)


def test_dead_ends_and_errors() -> None:
    from tests.support import Opaque

    g = And(Opaque(Regex("ab*c")), Opaque(Regex("a[xy]")))
    vocab = byte_vocabulary()
    with pytest.raises(NoLegalContinuation):
        beam_search(RandomModel(vocab.size), vocab, g, num_beams=2, max_tokens=4)
    with pytest.raises(GrammarError):
        beam_search(RandomModel(VOCAB.size), VOCAB, Regex("a"), num_beams=0)
    with pytest.raises(GrammarError):
        beam_search(RandomModel(VOCAB.size), VOCAB, "a")  # type: ignore[arg-type]
    with pytest.raises(GrammarError):
        beam_search(RandomModel(3), VOCAB, Regex("a"))
    assert beam_search(RandomModel(VOCAB.size), VOCAB, Regex("a"), max_tokens=0)[0].token_ids == ()


def test_beam_search_on_tekken_with_a_json_schema(tekken: Vocabulary) -> None:
    import json

    import jsonschema

    from grammarmask.frontends.json_schema import JsonSchema

    schema = {
        "type": "object",
        "properties": {"verb": {"enum": ["go", "be", "see"]}, "person": {"enum": ["1sg", "3sg"]}},
        "required": ["verb", "person"],
        "additionalProperties": False,
    }
    hyps = beam_search(RandomModel(tekken.size, seed=7), tekken, JsonSchema(schema, whitespace="compact"),
                       num_beams=3, max_tokens=40)  # fmt: skip
    assert len(hyps) == 3 and all(h.finished for h in hyps)
    assert len({h.token_ids for h in hyps}) == 3
    for h in hyps:
        jsonschema.validate(json.loads(h.text), schema)
