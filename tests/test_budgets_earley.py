"""The Earley item budget: a highly ambiguous grammar stops cleanly, with the documented error."""

from __future__ import annotations

import numpy as np
import pytest

import grammarmask as gm

VOCAB = gm.Vocabulary.from_tokens([b"a", b"b", b"aa", b""], eos_token_id=3)
AMBIGUOUS = [gm.Lark('start: s\ns: s s | "a"'), gm.Gbnf('root ::= root root | "a"')]


@pytest.mark.parametrize("grammar", AMBIGUOUS, ids=["lark", "gbnf"])
def test_an_ambiguous_grammar_stops_at_the_item_budget_and_keeps_its_state(grammar: gm.Grammar) -> None:
    """``s: s s | "a"`` needs about n**2 / 2 items per Earley set after n lexemes (O(n**3) in all);
    a small budget stops it within a few dozen tokens, and nothing the error interrupted changed."""
    compiled = grammar.compile(VOCAB, limits=gm.Limits(earley_items_per_set=2000))
    m = compiled.matcher()
    with pytest.raises(gm.BudgetExceeded) as e:
        for _ in range(200):
            m.mask()
            m.advance(0)
    assert e.value.budget == "earley_items_per_set" and e.value.value == 2000
    assert "compile(vocab, limits=grammarmask.Limits(earley_items_per_set=" in str(e.value)  # how to raise it
    n = m.num_tokens
    assert 20 < n < 100
    state = m.state
    with pytest.raises(gm.BudgetExceeded):
        m.mask()
        m.advance(0)
    assert m.state is state and m.num_tokens == n
    # within a larger budget the same text goes on and is a sentence
    big = grammar.compile(VOCAB, limits=gm.Limits(earley_items_per_set=100_000)).matcher()
    big.advance_many([0] * (n + 1))
    assert big.is_accepting()


def test_the_default_budget_lets_ordinary_grammars_run_long_documents() -> None:
    g = gm.Lark('start: item*\nitem: "a" | "b" "a"\n')
    m = g.compile(VOCAB).matcher()
    m.advance_many([1, 0] * 2000)
    assert m.is_accepting()


SPLITS = gm.Gbnf('root ::= root root | "a"+ | "a"?')  # every run of a's splits into lexemes 2**n ways
SPLIT_VOCAB = gm.Vocabulary.from_tokens([b"a", b"aa", b"aaaa", b"a" * 16, b""], eos_token_id=4)


def test_text_cut_into_lexemes_many_ways_stops_at_the_configuration_budget() -> None:
    """The ways of cutting a run of a's into lexemes grow with the run (cuts whose Earley sets have
    equal futures are one configuration, the others are kept apart): advance stops at the budget,
    16 a's a token, within a few tokens, and leaves the matcher as it was."""
    m = SPLITS.compile(SPLIT_VOCAB, limits=gm.Limits(cfg_configs=256, cfg_walk_visits=10**9)).matcher()
    with pytest.raises(gm.BudgetExceeded) as e:
        for _ in range(40):
            m.advance(3)
    assert e.value.budget == "cfg_configs" and e.value.value == 256
    n, state = m.num_tokens, m.state
    assert 2 <= n <= 8
    with pytest.raises(gm.BudgetExceeded):
        m.try_advance(3)  # a budget error is not a rejection: try_advance raises it too
    assert m.state is state and m.num_tokens == n


def test_a_mask_that_would_visit_too_many_parser_states_stops_at_the_visit_budget() -> None:
    """A 16-byte token of a's can be cut 2**15 ways: its mask stops at a visit budget below the
    ~30 parser states those cuts reach (cuts that reach sets of equal futures are one visit)."""
    m = SPLITS.compile(SPLIT_VOCAB, limits=gm.Limits(cfg_walk_visits=20)).matcher()
    with pytest.raises(gm.BudgetExceeded) as e:
        m.mask()
    assert e.value.budget == "cfg_walk_visits" and e.value.value == 20
    assert m.num_tokens == 0


# "true" is a literal and a NAME: each `return true;` lexes two ways, which meet again at the ";"
KEYWORD_OR_NAME = gm.Lark(
    'start: stmt*\nstmt: "return" expr ";"\nexpr: "true" | NAME\nNAME: /[a-z]+/\n%ignore " "\n'
)
STATEMENT_VOCAB = gm.Vocabulary.from_tokens(
    [b"return", b" ", b"true", b";", b"tr", b"ue", b""], eos_token_id=6
)


@pytest.mark.parametrize("engine", ["native", "python"])
def test_lexings_that_reach_equal_parser_states_are_one_configuration(engine: str) -> None:
    """Two lexings of a statement that end in Earley sets of one signature have one future, so
    they are kept as one configuration: 200 statements of two lexings each stay within a budget of
    4 configurations (kept apart, they doubled at each statement: 2**200), and the masks are the
    same either way of stepping (one token, or the same bytes in two tokens)."""
    compiled = KEYWORD_OR_NAME.compile(STATEMENT_VOCAB, limits=gm.Limits(cfg_configs=4), engine=engine)
    whole, split = compiled.matcher(), compiled.matcher()
    for _ in range(200):
        whole.advance_many([0, 1, 2, 3])
        split.advance_many([0, 1, 4, 5, 3])
        assert np.array_equal(whole.mask(), split.mask())
    assert whole.is_accepting() and split.is_accepting()
