"""Documents of a grammar drawn by derivation from its IR, steered by shortest completions.

This is the engine behind :func:`grammarmask.strategies.from_grammar` and the soundness checks of
:func:`grammarmask.pytest_plugin.check_grammar`. A context-free grammar (``grammar.cfg``, the
:class:`~grammarmask.ir.Cfg` every CFG front end builds) is expanded top-down; a regular one
(``grammar.to_dfa()``) is walked byte by byte. Two tables, computed once per grammar, steer every draw
so that it ends within its byte budget, whatever choices came before:

- for each DFA state, the length of its shortest completion (a backwards breadth-first search), and
- for each nonterminal, the length of its shortest derivation (the least fixed point over the rules,
  Knuth 1977's generalisation of Dijkstra, computed here by plain relaxation), plus the depth of the
  shallowest among its shortest derivations, which guarantees termination.

A draw keeps ``emitted + reserved <= budget``, where ``reserved`` is the sum of the shortest lengths of
the symbols still pending, and only takes a rule or byte that keeps that true.

Every choice is an index whose 0 is the short, plain choice: rules sorted shortest first, "stop the
lexeme here" before "go on", whitespace-only alternatives and ``%ignore`` lexemes (whitespace,
comments) behind a rare switch. Hypothesis shrinks toward 0, so counterexamples shrink toward short,
ignore-free documents. Bytes are drawn mostly as one representative per group of equivalent bytes
(``a`` before ``0`` before punctuation), sometimes among punctuation and escapes, rarely any byte.

lark's lexer takes the longest match, so a concatenation of lexemes can lex differently (two ``NAME``
lexemes run together). After a draw, each greedy lexeme that its terminal could extend into the text
that follows gets the grammar's shortest ignore lexeme (usually one space) after it; the document is
then checked with the compiled matcher (the exact recognizer), and the rare draw it rejects is drawn
again. :attr:`Generator.stats` counts both.
"""

from __future__ import annotations

import contextlib
import functools
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from .automata.dfa import UNREACHABLE as _INF
from .automata.dfa import distances_to_accept
from .errors import GrammarError, TokenRejected
from .grammar import CompiledGrammar, Grammar

__all__ = ["Drawn", "Generator", "Stats", "accepts", "generator_for", "mutate"]

Draw = Callable[[st.SearchStrategy[Any]], Any]
_WS = frozenset(b" \t\n\r\f\v")
# shrink order of bytes: letters, digits, then the rest of printable ASCII, then everything else
_ORDER = (b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ _-.,:;=+*/\"'\\"
          b"()[]{}<>!?#$%&@^`|~\n\t")  # fmt: skip
_RANK = [256 + b for b in range(256)]
for _i, _b in enumerate(_ORDER):
    _RANK[_b] = _i
# bytes that often sit on a grammar's edges: drawn on purpose now and then
_SPECIAL = frozenset(b"\\\"'{}[]()<>,.:;=+-*/_ \n\t!?#&|%@$0019eE")
_RETRIES = 4  # draws tried per example before it is rejected


@dataclass
class Drawn:
    """A drawn document: its bytes, and the spans (start, end) of its derivation subtrees and lexemes
    (what the mutations of :mod:`grammarmask.pytest_plugin` cut, repeat and swap)."""

    data: bytes
    spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class Stats:
    """How draws went: ``drawn`` finished derivations; ``separated`` needed a separator between two
    greedy lexemes; ``rejected`` were refused by the compiled matcher (or were not valid UTF-8, or
    outgrew ``max_size`` after separators) and drawn again."""

    drawn: int = 0
    separated: int = 0
    rejected: int = 0

    @property
    def rejection_rate(self) -> float:
        return self.rejected / self.drawn if self.drawn else 0.0


@functools.lru_cache(maxsize=512)
def _ints(n: int) -> st.SearchStrategy[int]:
    return st.integers(0, n - 1)


def _choice(draw: Draw, n: int) -> int:
    return 0 if n <= 1 else int(draw(_ints(n)))


def _rare(draw: Draw, one_in: int = 8) -> bool:
    """True about once in ``one_in`` draws; shrinks to False."""
    return bool(draw(_ints(one_in)) == one_in - 1)


class _DfaGen:
    """Words of one byte DFA (state 0 dead), within a byte budget."""

    def __init__(self, dfa: Any) -> None:
        self.dfa = dfa
        self.dist = distances_to_accept(dfa.transitions, dfa.accepting)
        self.min_len = int(self.dist[dfa.start]) if dfa.start else _INF
        self._groups: dict[int, list[tuple[int, int, list[int]]]] = {}

    def groups(self, s: int) -> list[tuple[int, int, list[int]]]:
        """``(shortest completion after, next state, bytes)`` per next state of ``s``, the bytes in
        shrink order, the groups by shortest completion then first byte (``"`` before ``a`` inside a
        string, so strings shrink to ``""``)."""
        got = self._groups.get(s)
        if got is None:
            by_next: dict[int, list[int]] = {}
            for b, n in enumerate(self.dfa.transitions[s].tolist()):
                if n:
                    by_next.setdefault(n, []).append(b)
            got = sorted(
                ((int(self.dist[n]), n, sorted(bs, key=_RANK.__getitem__)) for n, bs in by_next.items()),
                key=lambda g: (g[0], _RANK[g[2][0]]),  # the shortest way on first: shrinks to it
            )
            self._groups[s] = got
        return got

    def shortest(self) -> bytes:
        """The shortest word, smallest bytes first."""
        out = bytearray()
        s = self.dfa.start
        while not self.dfa.accepting[s]:
            d, s, bs = min(self.groups(s), key=lambda g: (g[0], _RANK[g[2][0]]))
            out.append(bs[0])
        return bytes(out)

    def draw(self, draw: Draw, budget: int, out: bytearray) -> None:
        """Append a word of at most ``budget`` bytes (``budget >= self.min_len``).

        One draw per byte, ``v`` in 0..255: below 80 stops where the word may end (about one in three),
        then up to 200 takes a group's first byte, up to 240 a special byte, above that any byte."""
        s = self.dfa.start
        accepting = self.dfa.accepting
        left = budget
        while True:
            fits = [g for g in self.groups(s) if g[0] < left]
            if not fits:
                return
            v = int(draw(_BYTE))
            if accepting[s] and v < 80:
                return
            _, s, b = _pick(v, fits)
            out.append(b)
            left -= 1


_BYTE = st.integers(0, 255)


def _pick(v: int, groups: list[tuple[int, int, list[int]]]) -> tuple[int, int, int]:
    """A byte of one of ``groups`` for the draw ``v``: mostly a group's first byte, sometimes a
    special byte, rarely any."""
    if v < 200:
        if v < 150:  # mostly ASCII: text stays readable and more characters fit the budget
            groups = [g for g in groups if g[2][0] < 0x80] or groups
        g = groups[v * len(groups) // 200 if v >= 150 else v * len(groups) // 150]
        return g[0], g[1], g[2][0]
    pool = [(g, b) for g in groups for b in g[2] if v >= 240 or b in _SPECIAL]
    if not pool:
        pool = [(g, b) for g in groups for b in g[2]]
    lo, hi = (240, 256) if v >= 240 else (200, 240)
    g, b = pool[(v - lo) * len(pool) // (hi - lo)]
    return g[0], g[1], b


class _Source:
    """Something documents are drawn from: a DFA, a CFG, or a sequence or union of sources."""

    min_len: int = 0

    def draw(self, draw: Draw, budget: int, out: bytearray, spans: list[tuple[int, int]],
             lexemes: list[tuple[int, int, int]]) -> None:  # fmt: skip
        raise NotImplementedError


class _DfaSource(_Source):
    def __init__(self, dfa: Any) -> None:
        self.gen = _DfaGen(dfa)
        self.min_len = self.gen.min_len

    def draw(self, draw: Draw, budget: int, out: bytearray, spans: list[tuple[int, int]],
             lexemes: list[tuple[int, int, int]]) -> None:  # fmt: skip
        self.gen.draw(draw, budget, out)


class _SeqSource(_Source):
    def __init__(self, parts: list[_Source]) -> None:
        self.parts = parts
        self.min_len = sum(p.min_len for p in parts)

    def draw(self, draw: Draw, budget: int, out: bytearray, spans: list[tuple[int, int]],
             lexemes: list[tuple[int, int, int]]) -> None:  # fmt: skip
        end = len(out) + budget
        for i, p in enumerate(self.parts):
            start = len(out)
            rest = sum(q.min_len for q in self.parts[i + 1 :])
            p.draw(draw, end - len(out) - rest, out, spans, lexemes)
            spans.append((start, len(out)))


class _UnionSource(_Source):
    def __init__(self, parts: list[_Source]) -> None:
        self.parts = sorted(parts, key=lambda p: p.min_len)
        self.min_len = self.parts[0].min_len

    def draw(self, draw: Draw, budget: int, out: bytearray, spans: list[tuple[int, int]],
             lexemes: list[tuple[int, int, int]]) -> None:  # fmt: skip
        fits = [p for p in self.parts if p.min_len <= budget]
        fits[_choice(draw, len(fits))].draw(draw, budget, out, spans, lexemes)


@functools.lru_cache(maxsize=64)
def _cfg_source(cfg: Any) -> _Source:
    from .cfgsource import CfgSource  # noqa: PLC0415 (it imports this module)

    return CfgSource(cfg)


def _source(grammar: Grammar) -> _Source | None:
    """The source for ``grammar``, or None when it has no IR this module can derive from."""
    from .compose import And, Union
    from .frontends.json_schema import JsonSchema
    from .sequence import Sequence

    cfg = getattr(grammar, "cfg", None)
    if cfg is None and isinstance(grammar, JsonSchema):
        from .ir.builder import build_cfg

        cfg = build_cfg(grammar.rules())
    if cfg is not None:
        return _cfg_source(cfg)
    if isinstance(grammar, (Sequence, Union)):
        parts = [_source(p) for p in grammar.parts]
        if any(p is None for p in parts):
            return None
        return (_SeqSource if isinstance(grammar, Sequence) else _UnionSource)(parts)  # type: ignore[arg-type]
    try:
        dfa = grammar.to_dfa()
    except GrammarError:
        dfa = None
    if dfa is not None:
        return _DfaSource(dfa) if dfa.start else None
    if isinstance(grammar, And):
        for p in grammar.parts:  # draw from one part; the compiled matcher filters by the others
            s = _source(p)
            if s is not None:
                return s
    return None


class Generator:
    """Verified documents of one grammar (see the module docstring). Use :func:`generator_for`."""

    def __init__(self, grammar: Grammar, source: _Source) -> None:
        from .strategies import byte_vocab

        self.grammar = grammar
        self.source = source
        self.compiled: CompiledGrammar = grammar.compile(byte_vocab())
        self.stats = Stats()
        self._separator = getattr(source, "separator", None)

    @property
    def min_len(self) -> int:
        """The length of the grammar's shortest document."""
        return self.source.min_len

    def accepts(self, data: bytes) -> bool:
        """Whether the compiled grammar accepts ``data`` (fed byte by byte)."""
        return accepts(self.compiled, data)

    def draw(self, draw: Draw, max_size: int, *, text: bool = True) -> Drawn | None:
        """A document of at most ``max(max_size, min_len)`` bytes the compiled grammar accepts, or None
        when ``_RETRIES`` draws in a row were rejected."""
        budget = max(max_size, self.min_len)
        # room for the separators greedy lexemes may need (see the module docstring)
        room = budget if self._separator is None else max(budget - budget // 8, self.min_len)
        for _ in range(_RETRIES):
            out = bytearray()
            spans: list[tuple[int, int]] = []
            lexemes: list[tuple[int, int, int]] = []
            self.source.draw(draw, room, out, spans, lexemes)
            self.stats.drawn += 1
            if lexemes and self._separator is not None:
                n = self._separator(out, spans, lexemes)
                self.stats.separated += n > 0
            data = bytes(out)
            if len(data) <= budget and self.accepts(data) and (not text or _is_utf8(data)):
                return Drawn(data, spans)
            self.stats.rejected += 1
        return None


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def accepts(compiled: CompiledGrammar, data: bytes) -> bool:
    """Whether ``compiled`` (on the byte vocabulary) accepts ``data`` as a complete document."""
    s = compiled.initial_state()
    try:
        for b in data:
            s = compiled.advance_state(s, b + 1)
            if s is None:
                return False
    except TokenRejected:
        return False
    return bool(compiled.is_accepting_state(s))


_GENERATORS: weakref.WeakKeyDictionary[Grammar, Generator | None] = weakref.WeakKeyDictionary()


def generator_for(grammar: Grammar) -> Generator | None:
    """The (cached) generator of ``grammar``, or None when its IR is not one this module derives from
    (an intersection of context-free grammars, a multi-label ``Choice``, a custom backend)."""
    try:
        return _GENERATORS[grammar]
    except (KeyError, TypeError):
        pass
    source = _source(grammar)
    gen = None if source is None else Generator(grammar, source)
    with contextlib.suppress(TypeError):  # a grammar that refuses weak references: not cached
        _GENERATORS[grammar] = gen
    return gen


_NUMBER = re.compile(rb"-?[0-9]{1,18}")
_MUTATION_BYTES = b" \n\"\\'{}[](),.:;=+-*/_0a"


def mutate(draw: Draw, doc: Drawn) -> bytes:
    """A near miss of ``doc``: a derivation subtree or lexeme cut, repeated or replaced by another
    one; one byte deleted, inserted or replaced (punctuation, quotes, escapes, signs, digits), at
    either end about half the time; or a number one up or down. Shrinks toward cutting the first
    subtree."""
    data = doc.data
    spans = [(a, b) for a, b in doc.spans if b > a]
    op = int(draw(_ints(8)))
    numbers = [(m.start(), m.end()) for m in _NUMBER.finditer(data)]
    if op >= 6 and numbers:  # a number one up or one down: where off-by-one bounds show
        a, b = numbers[_choice(draw, len(numbers))]
        return data[:a] + str(int(data[a:b]) + (1 if draw(_ints(2)) else -1)).encode() + data[b:]
    if op < 3 and spans:
        a, b = spans[_choice(draw, len(spans))]
        if op == 0:
            return data[:a] + data[b:]
        if op == 1:
            return data[:b] + data[a:b] + data[b:]
        c, d = spans[_choice(draw, len(spans))]
        return data[:a] + data[c:d] + data[b:]
    op = 3 + op % 3 if op < 6 else 5
    where = int(draw(_ints(4)))
    i = 0 if where == 0 else len(data) if where == 1 else _choice(draw, len(data) + 1)
    if op == 3 and i < len(data):
        return data[:i] + data[i + 1 :]
    byte = _MUTATION_BYTES[_choice(draw, len(_MUTATION_BYTES))]
    if op == 4 or i == len(data):
        return data[:i] + bytes([byte]) + data[i:]
    return data[:i] + bytes([byte]) + data[i + 1 :]
