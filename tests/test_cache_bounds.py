"""The automata the front ends build stay within the process-wide cache's bounds.

A long-running process compiles many distinct schemas (``benchmarks/soak_schemas.py``). Each bounded
string (``maxLength: n``) is a DFA of about ``n`` states, 1 KB a state; the front ends kept these in
``functools`` caches bounded only by their number of entries (4,096 patterns, 512 key sets and
intersections, 256 bounded strings), which held hundreds of MB after a few hundred distinct schemas.
They now go through one ``grammarmask.cache.automata()`` Lru, bounded by ``Limits.shared_automata``
entries and ``Limits.shared_automata_bytes`` bytes of tables; no other cache may keep them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest

import grammarmask as gm
from grammarmask import cache
from grammarmask.automata.dfa import DFA

MAX_BYTES = 2 << 20


@pytest.fixture
def small_automata(monkeypatch: pytest.MonkeyPatch) -> Iterator[cache.Lru[object, object]]:
    """A fresh, small process-wide cache of automata for the test (the real one is left as it was)."""
    small: cache.Lru[object, object] = cache.Lru(16, max_bytes=MAX_BYTES)
    monkeypatch.setattr(cache, "_AUTOMATA", small)
    yield small


def _vocab() -> gm.Vocabulary:
    tokens = [bytes([b]) for b in range(32, 127)] + [b'"', b'{"', b'"}', b'":', b"ab", b"k1", b""]
    return gm.Vocabulary(tokens, eos_token_id=len(tokens) - 1)


def _schema(i: int) -> dict[str, object]:
    """Distinct per ``i``: a bounded string (17 states a character: 500-1,200 KB of table), a
    pattern, a key set."""
    return {
        "type": "object",
        "properties": {
            f"k{i}": {"type": "string", "maxLength": 30 + i},
            f"p{i}": {"type": "string", "pattern": f"^a{{{i % 7 + 1},{i + 8}}}$"},
        },
        "required": [f"k{i}"],
        "additionalProperties": {"type": "integer"},
    }


def _accepts(compiled: gm.CompiledGrammar, text: bytes) -> bool:
    """Whether the grammar takes ``text`` fed one byte token at a time (token ``b - 32``)."""
    m = compiled.matcher()
    return all(m.try_advance(b - 32) for b in text) and m.is_accepting()


def _live_table_bytes() -> int:
    """Bytes of the tables of every live DFA, but those of short literals and patterns (a few KB each,
    kept by count in their own caches, which are emptied first: the figure does not depend on what
    the tests before this one compiled)."""
    from grammarmask.automata import regex
    from grammarmask.ir import builder

    regex._short_plain_dfa.cache_clear()
    builder._short_literal_dfa.cache_clear()
    gc.collect()
    return sum(cache.table_bytes(o) for o in gc.get_objects() if type(o) is DFA)


def test_default_bounds_are_limits_fields() -> None:
    lim = gm.Limits()
    assert lim.shared_automata == 4096 and lim.shared_automata_bytes == 32 << 20
    a = cache.automata()
    assert a is cache.automata()  # one per process
    assert a.limit >= 1 and a.max_bytes is not None


def test_distinct_schemas_keep_automata_within_the_bounds(small_automata: cache.Lru[object, object]) -> None:
    vocab = _vocab()
    limits = gm.Limits(compiled_per_vocabulary=1)
    base = _live_table_bytes()
    seen_over = 0
    for i in range(40):
        compiled = gm.JsonSchema(_schema(i)).compile(vocab, limits=limits)
        assert _accepts(compiled, b'{"k%d":"ab"}' % i)
        assert _accepts(compiled, b'{"k%d":"%s","x":7}' % (i, b"a" * (30 + i)))
        assert not _accepts(compiled, b'{"k%d":"%s"}' % (i, b"a" * (31 + i)))
        assert len(small_automata) <= 16
        seen_over = max(seen_over, len(small_automata))
        # the newest entry is kept alone even if it is over the bytes bound; never two over it
        assert small_automata.nbytes <= MAX_BYTES or len(small_automata) == 1
    assert seen_over >= 2  # the schemas did put automata in the cache
    del compiled
    cache.forget(vocab)  # the kept compiled grammar, and every per-vocabulary cache
    # forty bounded strings were built (over 30 MB of tables): what is still alive
    # is what the bounded cache holds plus module constants (the JSON character, a few KB)
    live = _live_table_bytes() - base
    assert live <= small_automata.nbytes + (256 << 10), (live, small_automata.nbytes)


def test_equal_terminals_are_built_once(small_automata: cache.Lru[object, object]) -> None:
    vocab = _vocab()
    gm.JsonSchema(_schema(1)).compile(vocab, limits=gm.Limits(compiled_per_vocabulary=0))
    kept = dict(small_automata._data)
    assert len(kept) >= 5  # literals, keys, the string's and the pattern's DFAs
    retitled = gm.JsonSchema({**_schema(1), "title": "another"})
    again = retitled.compile(vocab, limits=gm.Limits(compiled_per_vocabulary=0))
    for k, v in kept.items():  # the second compile found each in the cache: the same objects
        assert small_automata._data.get(k) is v
    assert _accepts(again, b'{"k1":"ab","p1":"aaaa"}') and not _accepts(again, b'{"p1":"aaaa"}')


def test_compiled_grammars_kept_within_their_bytes() -> None:
    """The vocabulary's compiled-grammar cache is bounded by the tables its grammars hold, as well
    as by their number (``Limits.compiled_bytes_per_vocabulary``)."""
    from grammarmask.grammar import compiled_bytes

    vocab = _vocab()
    limits = gm.Limits(compiled_per_vocabulary=32, compiled_bytes_per_vocabulary=1 << 19)
    weights = []
    for i in range(12):
        compiled = gm.JsonSchema(_schema(i)).compile(vocab, limits=limits)
        weights.append(compiled_bytes(compiled))
        # the lexer's cells are 16 bits (its states' numbers fit), and weighed so
        assert compiled.engine.table_bytes == 2 * compiled.engine.table_words
        assert weights[-1] >= compiled.engine.table_bytes
        kept = cache.per_vocabulary(vocab, "compiled", dict)
        assert isinstance(kept, cache.Lru)
        assert kept.nbytes <= 1 << 19 or len(kept) == 1
        assert compiled is gm.JsonSchema(_schema(i)).compile(vocab, limits=limits)  # the newest is kept
    # each holds its engine's lexer tables (its bounded string's DFA by byte class), not the IR
    assert min(weights) > 50_000
    assert len(kept) < 12  # so not all twelve were kept


def test_a_compiled_json_schema_lets_go_of_its_ir_and_makes_the_same_again() -> None:
    """The native engine has its own tables: once compiled, neither the compiled grammar nor the
    schema holds the IR (0.9 MB a JSONSchemaBench schema), and the IR asked for is the one the engine
    was built from (the same terminals and rules, in the same order)."""
    from grammarmask.ir.builder import build_cfg
    from grammarmask.native.cfg import NativeCompiledCfg, flat_tables

    schema = gm.JsonSchema(_schema(3))
    compiled = schema.compile(_vocab())
    assert isinstance(compiled, NativeCompiledCfg)
    assert compiled._cfg is None and schema._cfg is None
    # (bytes, lists and ints when the table is dense; a numpy class map beside it when not)
    built, remade = flat_tables(build_cfg(schema.rules())), flat_tables(compiled.cfg)
    assert built.keys() == remade.keys()
    for k, v in built.items():
        assert np.array_equal(v, remade[k]) if isinstance(v, np.ndarray) else v == remade[k], k


def test_a_large_automaton_is_kept_by_byte_class(small_automata: cache.Lru[object, object]) -> None:
    """A DFA over ``BY_CLASS_BYTES`` of table is kept as its table by class (a JSON string of
    maxLength 300: 6 MB dense, a tenth of it by class), and a hit hands out an equal DFA without
    building it again."""
    from grammarmask.frontends.jsonschema.strings import _quoted_plain

    built: list[DFA] = []

    def make() -> DFA:
        built.append(_quoted_plain(0, 300, 100_000))
        return built[-1]

    first = cache.automaton(("test-string", 300), make)
    assert cache.table_bytes(first) >= cache.BY_CLASS_BYTES
    assert small_automata.nbytes * 8 < cache.table_bytes(first)
    again = cache.automaton(("test-string", 300), make)
    assert len(built) == 1 and again is not first
    assert np.array_equal(again.transitions, first.transitions)
    assert np.array_equal(again.accepting, first.accepting) and again.start == first.start
    assert again.matches(b'"' + "é".encode() * 300 + b'"') and not again.matches(b'"' + b"a" * 301 + b'"')
    # a small one is kept as it is: a hit hands out the same object
    small = cache.automaton(("test-small",), lambda: _quoted_plain(0, 3, 100))
    assert cache.automaton(("test-small",), lambda: pytest.fail("made again")) is small
