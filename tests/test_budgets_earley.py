"""The Earley item budget: a highly ambiguous grammar stops cleanly, with the documented error."""

from __future__ import annotations

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
    assert "earley_items_per_set=" in str(e.value)  # how to raise it
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
