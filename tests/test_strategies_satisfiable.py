"""``from_grammar`` and ``check_grammar`` never give up (no ``Unsatisfiable``) on the shipped grammars
and the corpus grammars that compile, and the drawn documents are rarely redrawn (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings

import grammarmask as gm
from grammarmask.derivation import generator_for
from grammarmask.strategies import from_grammar
from grammarmask.testing import byte_vocabulary
from tests.support import CORPUS

SHIPPED = sorted((Path(gm.__file__).parent / "grammars").glob("*.*"))
CORPUS_FILES = sorted([*(CORPUS / "lark").rglob("*.lark"), *(CORPUS / "gbnf").rglob("*.gbnf")])


def _load(path: Path) -> gm.Grammar | str:
    """The grammar, compiled once; or why grammarmask refuses it (the corpus holds lark's import
    libraries with no start rule, %declare'd terminals and lookaround, all documented refusals)."""
    try:
        g = gm.Lark.from_file(path) if path.suffix == ".lark" else gm.Gbnf(path.read_text())
        g.compile(byte_vocabulary())
    except gm.GrammarError as e:
        return str(e).splitlines()[0]
    return g


def _draw_all(g: gm.Grammar, seeds: range, examples: int) -> None:
    for s in seeds:
        @seed(s)
        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(from_grammar(g, max_size=32))
        def draws(doc: str) -> None:
            assert isinstance(doc, str)

        draws()  # raises hypothesis.errors.Unsatisfiable if it gives up


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_grammars_never_unsatisfiable(path: Path) -> None:
    g = _load(path)
    assert not isinstance(g, str), g
    _draw_all(g, range(3), 20)
    gen = generator_for(g)
    assert gen is not None and gen.stats.rejection_rate < 0.05, gen.stats


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED + CORPUS_FILES, ids=[p.name for p in SHIPPED + CORPUS_FILES])
def test_twenty_seeds_never_unsatisfiable(path: Path) -> None:
    g = _load(path)
    if isinstance(g, str):
        pytest.skip(f"grammarmask refuses this grammar, as documented: {g}")
    _draw_all(g, range(20), 30)
    gen = generator_for(g)
    print(path.name, gen.stats if gen else "mask walk")
