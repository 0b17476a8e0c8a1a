"""Build the CFG IR in memory from EBNF expressions over terminals, and print them as Lark text.

A front end writes its grammar as rules whose bodies are :class:`Expr` values: string literals
(:class:`Lit`), regex terminals (:class:`Pat`), rule references (:class:`Ref`), sequences
(:class:`Seq`), alternatives (:class:`Alt`) and repeats (:class:`Rep`: ``?``, ``*``, ``+``).
:func:`build_cfg` lowers them straight to a :class:`~grammarmask.cfg.Cfg` (no text in between);
:func:`to_lark` prints the same rules as Lark grammar text, which ``lark`` parses to the same
language (the reference the tests hold the engine to).

Terminals are greedy, as in lark's dynamic lexer. A :class:`Pat` may carry ``build``, a function
returning the DFA of exactly its regex's language, for regexes that are slow to compile (a key set's
complement) or that only lark can run (an intersection written with lookaheads).

Lowering: each nested alternative or repeat becomes one fresh nonterminal, shared by equal
expressions; ``x?`` is a nullable nonterminal (not two copies of the enclosing rule, which would
make ``k`` optional items ``2**k`` alternatives); ``x*`` and ``x+`` are left-recursive.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import GrammarError
from .cfg import Cfg, Rule, Terminal

__all__ = [
    "EMPTY", "Alt", "Expr", "Lit", "Pat", "Ref", "Rep", "Seq", "alt", "build_cfg", "opt", "seq", "star",
    "to_lark",
]  # fmt: skip


class Expr:
    """An EBNF expression over terminals and rule names (immutable, hashable, compared by value)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Lit(Expr):
    """The literal string ``text`` (as UTF-8 bytes)."""

    text: str

    def __str__(self) -> str:
        return '"' + self.text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True, slots=True)
class Pat(Expr):
    """The Python regex ``regex`` as a terminal; ``build()``, if given, returns its exact DFA."""

    regex: str
    build: Callable[[], Any] | None = field(default=None, compare=False, hash=False)

    def __str__(self) -> str:
        return "/" + _LARK_ESCAPE.sub(_lark_escape, self.regex) + "/"


@dataclass(frozen=True, slots=True)
class Ref(Expr):
    """The rule named ``name``."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Seq(Expr):
    """The concatenation of ``items`` (``EMPTY``, with no items, is the empty string)."""

    items: tuple[Expr, ...]

    def __str__(self) -> str:
        return " ".join(_atom(x) if isinstance(x, Alt) else str(x) for x in self.items) or '""?'


@dataclass(frozen=True, slots=True)
class Alt(Expr):
    """Any one of ``alts`` (at least two; :func:`alt` makes one)."""

    alts: tuple[Expr, ...]

    def __str__(self) -> str:
        return " | ".join(str(x) for x in self.alts)


@dataclass(frozen=True, slots=True)
class Rep(Expr):
    """``item`` repeated: ``?`` (``hi=1``), ``*`` (``lo=0``, ``hi=None``) or ``+`` (``lo=1``)."""

    item: Expr
    lo: int
    hi: int | None

    def __str__(self) -> str:
        suffix = "?" if self.hi == 1 else "*" if self.lo == 0 else "+"
        return _atom(self.item) + suffix


EMPTY = Seq(())


def seq(*items: Expr) -> Expr:
    """The concatenation of ``items``, nested sequences and empty strings flattened away."""
    flat: list[Expr] = []
    for x in items:
        if isinstance(x, Seq):
            flat.extend(x.items)
        else:
            flat.append(x)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(alts: Iterable[Expr]) -> Expr:
    """Any one of ``alts`` (duplicates and nested alternatives merged); at least one is needed."""
    flat: dict[Expr, None] = {}
    for x in alts:
        for y in x.alts if isinstance(x, Alt) else (x,):
            flat[y] = None
    if not flat:
        raise ValueError("alt() of no alternatives")
    return next(iter(flat)) if len(flat) == 1 else Alt(tuple(flat))


def opt(x: Expr) -> Expr:
    """``x?``."""
    return Rep(x, 0, 1)


def star(x: Expr) -> Expr:
    """``x*``."""
    return Rep(x, 0, None)


def _atom(x: Expr) -> str:
    return str(x) if isinstance(x, (Lit, Pat, Ref)) else f"({x})"


# lark unescapes a /regex/ literal before compiling it and mangles a quote that follows an escaped
# backslash, so quotes are written \x22; a / gets a backslash.
_LARK_ESCAPE = re.compile(r'\\(.)|["/]', re.DOTALL)


def _lark_escape(m: re.Match[str]) -> str:
    c = m.group(1)
    if c is None:  # a bare quote or slash
        return "\\x22" if m.group(0) == '"' else "\\/"
    return "\\x22" if c == '"' else "\\/" if c == "/" else m.group(0)


def to_lark(rules: Mapping[str, Expr], start: str = "start") -> str:
    """Lark grammar text for ``rules`` (``start`` first), parsed by ``lark`` to the same language."""
    order = [start, *(n for n in rules if n != start)]
    return "".join(f"{n}: {rules[n]}\n" for n in order)


@functools.lru_cache(maxsize=4096)
def _regex_dfa(regex: str) -> Any:
    from ..automata import regex_to_dfa

    return regex_to_dfa(regex)


@functools.lru_cache(maxsize=4096)
def _literal_dfa(text: str) -> Any:
    from ..automata import literal_dfa

    return literal_dfa(text.encode("utf-8"))


class _Lowering:
    """One :func:`build_cfg` call: names to ids, terminals deduplicated, fresh nonterminals memoised."""

    def __init__(self, rules: Mapping[str, Expr]) -> None:
        self.bodies = rules
        self.nts: dict[str, int] = {}
        self.terms: dict[Expr, int] = {}
        self.terminals: list[Terminal] = []
        self.fresh: dict[Expr, int] = {}
        self.rules: list[Rule] = []
        self.pending: list[tuple[int, str]] = []

    def nt(self, name: str) -> int:
        """The id of rule ``name``; its body is lowered later by :meth:`run` (no recursion on the
        depth of the grammar)."""
        n = self.nts.get(name)
        if n is None:
            if name not in self.bodies:
                raise GrammarError(f"rule {name!r} is used but not defined")
            n = self.nts[name] = len(self.nts)
            self.pending.append((n, name))
        return n

    def run(self, start: str) -> int:
        start_id = self.nt(start)
        while self.pending:
            n, name = self.pending.pop()
            for rhs in self.alternatives(self.bodies[name]):
                self.rules.append(Rule(n, rhs))
        return start_id

    def alternatives(self, e: Expr) -> list[tuple[int, ...]]:
        return [self.sequence(x) for x in e.alts] if isinstance(e, Alt) else [self.sequence(e)]

    def sequence(self, e: Expr) -> tuple[int, ...]:
        items = e.items if isinstance(e, Seq) else (e,)
        return tuple(self.symbol(x) for x in items)

    def symbol(self, e: Expr) -> int:
        if isinstance(e, Ref):
            return self.nt(e.name)
        if isinstance(e, (Lit, Pat)):
            return ~self.terminal(e)
        n = self.fresh.get(e)
        if n is not None:
            return n
        name = f"__anon{len(self.fresh)}"
        n = self.fresh[e] = self.nts[name] = len(self.nts)
        if isinstance(e, Rep):
            body = self.sequence(e.item)
            # x? : () | x;  x* : () | N x;  x+ : x | N x
            prods = [(), body] if e.hi == 1 else [() if e.lo == 0 else body, (n, *body)]
        else:
            prods = self.alternatives(e)
        self.rules.extend(Rule(n, rhs) for rhs in prods)
        return n

    def terminal(self, e: Lit | Pat) -> int:
        t = self.terms.get(e)
        if t is not None:
            return t
        if isinstance(e, Lit):
            dfa = _literal_dfa(e.text)
        else:
            try:
                dfa = e.build() if e.build is not None else _regex_dfa(e.regex)
            except GrammarError as err:
                raise GrammarError(f"terminal {e} cannot be compiled: {err.message}") from None
        if dfa.start and dfa.accepting[dfa.start]:
            raise GrammarError(f"terminal {e} matches the empty string")
        t = self.terms[e] = len(self.terminals)
        self.terminals.append(Terminal(str(e), dfa, greedy=True))
        return t


def build_cfg(rules: Mapping[str, Expr], start: str = "start") -> Cfg:
    """The validated :class:`~grammarmask.cfg.Cfg` of ``rules`` (rule name -> body), from ``start``.

    Raises :class:`~grammarmask.errors.GrammarError` for an undefined rule, a terminal that is not
    regular or matches the empty string, or an empty language.
    """
    low = _Lowering(rules)
    start_id = low.run(start)
    names = [""] * len(low.nts)
    for name, i in low.nts.items():
        names[i] = name
    return Cfg(tuple(names), tuple(low.terminals), tuple(low.rules), start_id).validated()
