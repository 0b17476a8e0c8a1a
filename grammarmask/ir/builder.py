"""Build the CFG IR in memory from EBNF expressions over terminals, and print them as Lark text.

A front end writes its grammar as rules whose bodies are :class:`Expr` values: string literals
(:class:`Lit`), regex terminals (:class:`Pat`), rule references (:class:`Ref`), sequences
(:class:`Seq`), alternatives (:class:`Alt`) and repeats (:class:`Rep`: ``?``, ``*``, ``+``).
:func:`build_cfg` lowers them straight to a :class:`~grammarmask.cfg.Cfg` (no text in between);
:func:`to_lark` prints the same rules as Lark grammar text, which ``lark`` parses to the same
language (the reference the tests hold the engine to).

Two lexing policies:

- *greedy* (the default; Lark, JSON Schema): every :class:`Lit` and :class:`Pat` is a terminal and
  lexemes follow lark's dynamic lexer (longest match). A :class:`Pat` may carry ``build``, a function
  returning the DFA of exactly its regex's language, for regexes that are slow to compile (a key
  set's complement) or that only lark can run (an intersection written with lookaheads), and a
  ``name`` (a Lark terminal's), which keeps equal patterns of different names apart.
- *scannerless* (GBNF, llama.cpp's semantics): every byte is matched exactly and no lexeme is
  longest-match. Each maximal run of regular items in a sequence becomes one *non-greedy* terminal
  (it may end at any accepting point, so the translation is exact); a run that holds the empty
  string becomes ``N -> T | ()``; a rule whose whole body is regular becomes one terminal, and small
  regular rules are inlined where they are used. A run's DFA is built from its items (strings, and
  the DFAs of character classes) by the Rust kernels, not from its pattern printed as a regex.

Lowering: each nested alternative or repeat becomes one fresh nonterminal, shared by equal
expressions; ``x?`` is a nullable nonterminal (not two copies of the enclosing rule, which would
make ``k`` optional items ``2**k`` alternatives); ``x*`` and ``x+`` are left-recursive (no Earley
blow-up), and ``x{m,n}`` is ``m`` copies of ``x`` then a chain of ``n - m`` nested options.
"""

from __future__ import annotations

import functools
import re
from array import array
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cache import UNKEPT_LITERAL_CHARS, automaton
from ..errors import GrammarError
from .cfg import Cfg, Rule, Terminal

__all__ = [
    "EMPTY", "Alt", "Expr", "Lit", "Pat", "Ref", "Rep", "Seq", "alt", "build_cfg", "opt",
    "seq", "star", "to_lark",
]  # fmt: skip


class Expr:
    """An EBNF expression over terminals and rule names (immutable, hashable, compared by value).

    Each kind pickles as its constructor's arguments: the frozen dataclasses' own state functions
    (``dataclasses.fields`` per object) made a large schema's rules take 13 ms to pickle, not 3."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Lit(Expr):
    """The literal string ``text`` (as UTF-8 bytes)."""

    text: str

    def __reduce__(self) -> tuple[Any, ...]:
        return Lit, (self.text,)

    def __str__(self) -> str:
        return '"' + self.text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True, slots=True)
class Pat(Expr):
    """The Python regex ``regex`` as a terminal; ``build()``, if given, returns its exact DFA;
    ``name``, if given, names the terminal (patterns of different names stay different terminals);
    ``opaque``: ``regex`` only labels it (a special token's spelling has no regex), so scannerless
    lowering never merges it into a run of regular items."""

    regex: str
    build: Callable[[], Any] | None = field(default=None, compare=False, hash=False)
    name: str | None = None
    opaque: bool = False

    def __reduce__(self) -> tuple[Any, ...]:
        return Pat, (self.regex, self.build, self.name, self.opaque)

    def __str__(self) -> str:
        return _lark_regex(self.regex)


@dataclass(frozen=True, slots=True)
class Ref(Expr):
    """The rule named ``name``."""

    name: str

    def __reduce__(self) -> tuple[Any, ...]:
        return Ref, (self.name,)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Seq(Expr):
    """The concatenation of ``items`` (``EMPTY``, with no items, is the empty string)."""

    items: tuple[Expr, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return Seq, (self.items,)

    def __str__(self) -> str:
        return " ".join(_atom(x) if isinstance(x, Alt) else str(x) for x in self.items) or '""?'


@dataclass(frozen=True, slots=True)
class Alt(Expr):
    """Any one of ``alts`` (at least two; :func:`alt` makes one)."""

    alts: tuple[Expr, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        return Alt, (self.alts,)

    def __str__(self) -> str:
        return " | ".join(str(x) for x in self.alts)


@dataclass(frozen=True, slots=True)
class Rep(Expr):
    """``item`` repeated ``lo`` to ``hi`` times (``hi`` None: unbounded): ``?`` is ``(0, 1)``,
    ``*`` is ``(0, None)``, ``+`` is ``(1, None)``."""

    item: Expr
    lo: int
    hi: int | None

    def __reduce__(self) -> tuple[Any, ...]:
        return Rep, (self.item, self.lo, self.hi)

    def __str__(self) -> str:
        a = _atom(self.item)
        lo, hi = self.lo, self.hi
        if (lo, hi) in ((0, 1), (0, None), (1, None)):
            return a + ("?" if hi == 1 else "*" if lo == 0 else "+")
        if hi is None:  # lark has no open-ended ~ range
            return f"{a} ~ {lo} {a}*"
        return f"{a} ~ {lo}" if lo == hi else f"{a} ~ {lo}..{hi}"


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


@functools.lru_cache(maxsize=4096)  # terminals are named by it, the same patterns in schema after schema
def _lark_regex(regex: str) -> str:
    if "\\" not in regex:  # (no escapes: the two replacements, without a call per quote)
        return "/" + regex.replace('"', "\\x22").replace("/", "\\/") + "/"
    return "/" + _LARK_ESCAPE.sub(_lark_escape, regex) + "/"


def _lark_escape(m: re.Match[str]) -> str:
    c = m.group(1)
    if c is None:  # a bare quote or slash
        return "\\x22" if m.group(0) == '"' else "\\/"
    return "\\x22" if c == '"' else "\\/" if c == "/" else m.group(0)


def _short(text: str, keep: int = 100) -> str:
    """``text``, or its start and end around the number of characters left out."""
    if len(text) <= keep:
        return text
    return f"{text[: keep * 2 // 3]} ... ({len(text) - keep} characters) ... {text[-keep // 3 :]}"


def to_lark(rules: Mapping[str, Expr], start: str = "start") -> str:
    """Lark grammar text for ``rules`` (``start`` first), parsed by ``lark`` to the same language."""
    order = [start, *(n for n in rules if n != start)]
    return "".join(f"{n}: {rules[n]}\n" for n in order)


def _regex_dfa(regex: str) -> Any:
    """The DFA of a terminal's pattern (kept by :func:`regex_to_dfa` in the process-wide cache of
    automata, bounded by ``Limits.shared_automata`` and ``shared_automata_bytes``)."""
    from ..automata import regex_to_dfa

    return regex_to_dfa(regex)


def _literal_dfa(text: str) -> Any:
    from ..automata import literal_dfa

    if len(text) <= UNKEPT_LITERAL_CHARS:  # made in microseconds: kept, it would push out costly ones
        return _short_literal_dfa(text)
    return automaton(("literal", text), lambda: literal_dfa(text.encode("utf-8")))


@functools.lru_cache(maxsize=256)
def _short_literal_dfa(text: str) -> Any:
    """A short literal's DFA, kept apart from the costly automata: a JSON Schema's grammar has the
    same ten ("{", ",", "null", ...), and making them each time was 0.2 ms of its compile."""
    from ..automata import literal_dfa

    return literal_dfa(text.encode("utf-8"))


class _Lowering:
    """One :func:`build_cfg` call: names to ids, terminals deduplicated, fresh nonterminals memoised."""

    def __init__(self, rules: Mapping[str, Expr], scannerless: bool) -> None:
        self.bodies = rules
        self.scannerless = scannerless
        self.inline = _inlinable(rules) if scannerless else {}
        self.nts: dict[str, int] = {}
        self.terms: dict[Expr | str, int | None] = {}
        self.terminals: list[Terminal] = []
        self.fresh: dict[Expr | str, int] = {}
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

    def new_nt(self, key: Expr | str) -> tuple[int, bool]:
        """The fresh nonterminal for ``key`` and whether it is new (its rules still to add)."""
        n = self.fresh.get(key)
        if n is not None:
            return n, False
        name = f"__anon{len(self.fresh)}"
        while name in self.bodies:  # a user's rule may be called __anon0
            name = "_" + name
        n = self.fresh[key] = self.nts[name] = len(self.nts)
        return n, True

    def run(self, start: str) -> int:
        start_id = self.nt(start)
        while self.pending:
            n, name = self.pending.pop()
            self.body(n, self.bodies[name])
        return start_id

    def body(self, n: int, e: Expr) -> None:
        """Add ``n -> e``: one rule per alternative (one terminal when scannerless and regular)."""
        if self.scannerless and isinstance(e, Alt):
            rx = _regex_of(e, self.inline)
            if rx is not None:
                sym = self.regular(rx, e)
                self.rules.append(Rule(n, () if sym is None else (sym,)))
                return
        for x in e.alts if isinstance(e, Alt) else (e,):
            self.rules.append(Rule(n, self.sequence(x)))

    def sequence(self, e: Expr) -> tuple[int, ...]:
        items = e.items if isinstance(e, Seq) else (e,)
        if not self.scannerless:
            return tuple(self.symbol(x) for x in items)
        rhs: list[int] = []
        run: list[tuple[str, Expr]] = []  # regular items not yet merged into a terminal
        for x in items:
            rx = _regex_of(x, self.inline)
            if rx is None:
                self.flush(run, rhs)
                rhs.append(self.symbol(x))
            elif rx:
                run.append((rx, x))
        self.flush(run, rhs)
        return tuple(rhs)

    def flush(self, run: list[tuple[str, Expr]], rhs: list[int]) -> None:
        if run:
            rx = "".join(f"(?:{r})" for r, _ in run)
            sym = self.regular(rx, run[0][1] if len(run) == 1 else Seq(tuple(x for _, x in run)))
            run.clear()
            if sym is not None:
                rhs.append(sym)

    def symbol(self, e: Expr) -> int:
        if isinstance(e, Ref):
            return self.nt(e.name)
        if isinstance(e, (Lit, Pat)):
            t = self.terminal(e)
            assert t is not None
            return ~t
        n, new = self.new_nt(e)
        if not new:
            return n
        if isinstance(e, Rep):
            self.repeat(n, e)
        else:
            self.body(n, e)
        return n

    def repeat(self, n: int, e: Rep) -> None:
        body = self.sequence(e.item)
        lo, hi = e.lo, e.hi
        if hi == 0:
            prods: list[tuple[int, ...]] = [()]
        elif (lo, hi) == (0, 1):
            prods = [(), body]
        elif hi is None and lo <= 1:  # x* : () | N x;  x+ : x | N x
            prods = [() if lo == 0 else body, (n, *body)]
        elif hi is None:  # x{m,} : x^m x*
            prods = [body * lo + (self.symbol(Rep(e.item, 0, None)),)]
        else:  # x{m,k} : x^m O_(k-m), where O_j : () | x O_(j-1) is x{0,j} (n itself when m = 0)
            tail: tuple[int, ...] = ()
            for j in range(1, hi - lo + (lo > 0)):
                o, new = self.new_nt(Rep(e.item, 0, j))
                if new:
                    self.rules.extend([Rule(o, ()), Rule(o, (*body, *tail))])
                tail = (o,)
            prods = [(), (*body, *tail)] if lo == 0 else [body * lo + tail]
        self.rules.extend(Rule(n, rhs) for rhs in prods)

    def terminal(self, e: Lit | Pat) -> int | None:
        t = self.terms.get(e, -1)
        if t != -1:
            return t
        if isinstance(e, Lit):
            dfa = _literal_dfa(e.text)
        else:
            try:
                dfa = e.build() if e.build is not None else _regex_dfa(e.regex)
            except GrammarError as err:
                said_where = (err.line is not None or hasattr(err, "pointer")
                              or str(getattr(err, "where", "")).startswith("/"))
                if e.build is not None and said_where:  # the front end said where (line or pointer)
                    raise
                raise GrammarError(f"terminal {_short(str(e))} cannot be compiled: {err.message}") from None
        if dfa.start and dfa.accepting[dfa.start]:
            raise GrammarError(f"terminal {e} matches the empty string")
        t = self.terms[e] = len(self.terminals)
        name = e.name if isinstance(e, Pat) and e.name else str(e)
        self.terminals.append(Terminal(name, dfa, greedy=True))
        return t

    def regular(self, regex: str, e: Expr) -> int | None:
        """Scannerless: a symbol for the language of the regular ``e``, written ``regex`` (None when
        it is only the empty string): its non-greedy terminal, or ``N -> T | ()`` when it holds the
        empty string."""
        dfa = _run_dfa(regex, e, self.bodies, self.inline)
        nullable = bool(dfa.start) and bool(dfa.accepting[dfa.start])
        if regex not in self.terms:
            rest = _without_empty(dfa)
            self.terms[regex] = None if rest is None else len(self.terminals)
            if rest is not None:
                self.terminals.append(Terminal(f"T{len(self.terminals)}", rest, greedy=False))
        t = self.terms[regex]
        if not nullable:
            return None if t is None else ~t
        n, new = self.new_nt("?" + regex)
        if new:
            self.rules.append(Rule(n, ()))
            if t is not None:
                self.rules.append(Rule(n, (~t,)))
        return n


def _regex_of(e: Expr, inline: Mapping[str, str]) -> str | None:
    """``e`` as a regular pattern, or None if it uses a rule that is not in ``inline``."""
    if isinstance(e, Lit):
        return re.escape(e.text)
    if isinstance(e, Pat):
        return None if e.opaque else e.regex
    if isinstance(e, Ref):
        return inline.get(e.name)
    if isinstance(e, Seq):
        parts = [_regex_of(x, inline) for x in e.items]
        if any(p is None for p in parts):
            return None
        return "".join(f"(?:{p})" for p in parts if p)
    if isinstance(e, Alt):
        alts = [_regex_of(x, inline) for x in e.alts]
        if any(a is None for a in alts):
            return None
        return "(?:" + "|".join(a or "" for a in alts) + ")"
    if isinstance(e, Rep):
        inner = _regex_of(e.item, inline)
        if inner is None:
            return None
        return f"(?:{inner}){{{e.lo},{'' if e.hi is None else e.hi}}}"
    raise TypeError(f"not an expression: {e!r}")


def _run_dfa(regex: str, e: Expr, bodies: Mapping[str, Expr], inline: Mapping[str, str]) -> Any:
    """The DFA of a scannerless run ``e`` (its pattern ``regex``, from :func:`_regex_of`), kept in the
    process-wide cache of automata. Made from ``e`` itself where the Rust kernels import
    (:func:`~grammarmask.automata.kernels.compose`: its strings, and its character classes' DFAs,
    made once per process), else, or past the kernel's bounds, from ``regex`` (re's parser, an NFA
    built in Python, the subset construction: 80% of json.gbnf's compile, 5 ms)."""
    from ..automata import DEFAULT_MAX_STATES, kernels
    from ..automata.regex import nfa_states
    from ..limits import active

    limits = active()

    def make() -> Any:
        if kernels.available():
            # (no regex is parsed here, so Limits.regex_depth does not apply: the program nests as
            # the expression, which the front end's Limits.grammar_nesting bounds)
            program = _Program(bodies, inline)
            if program.add(e):
                # (the regex path's NFA bound: a run past it is refused there, in its words)
                got = kernels.compose(program.words, program.dfas, nfa_states(DEFAULT_MAX_STATES),
                                      DEFAULT_MAX_STATES, limits.regex_subset_work)
                if not isinstance(got, str):
                    return got
        return _regex_dfa(regex)

    return automaton(("regular run", regex, limits.regex_subset_work, limits.regex_depth), make)


_LIT, _PIECE, _CAT, _ALT, _REP = range(5)  # src/automata/compose.rs's operations
_UNBOUNDED = 0xFFFF_FFFF


class _Program:
    """A regular expression as src/automata/compose.rs reads it: nodes ``[op, a, b, size, ...]`` in
    prefix order, its character classes as leaf DFAs."""

    def __init__(self, bodies: Mapping[str, Expr], inline: Mapping[str, str]) -> None:
        self.bodies, self.inline = bodies, inline
        self.words = array("I")
        self.dfas: list[Any] = []
        self.piece: dict[str, int] = {}

    def add(self, e: Expr) -> bool:
        """Write ``e``; False where it holds what is left to the regex path (a pattern other than a
        character class or ``.``, text that is not UTF-8)."""
        w, at = self.words, len(self.words)
        if isinstance(e, Lit):
            try:
                data = e.text.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate: the regex path words the refusal
                return False
            w.extend((_LIT, len(data), 0, 4 + len(data)))
            w.extend(data)
            return True
        if isinstance(e, Pat):
            # its own DFA (a GBNF class's, from its ranges) or a class's through the regex path
            # (only a class: any other pattern, e.g. with global flags, is read as part of the run)
            if e.opaque or (e.build is None and not e.regex.startswith("[")):
                return False
            i = self.piece.get(e.regex)
            if i is None:
                i = self.piece[e.regex] = len(self.dfas)
                self.dfas.append(e.build() if e.build is not None else _regex_dfa(e.regex))
            w.extend((_PIECE, i, 0, 4))
            return True
        if isinstance(e, Ref):  # an inlined rule (regular, and smaller rules only)
            return e.name in self.inline and self.add(self.bodies[e.name])
        if isinstance(e, (Seq, Alt)):
            items = e.items if isinstance(e, Seq) else e.alts
            w.extend((_CAT if isinstance(e, Seq) else _ALT, len(items), 0, 0))
            if not all(self.add(x) for x in items):
                return False
        elif isinstance(e, Rep):
            if e.lo >= _UNBOUNDED or (e.hi is not None and e.hi >= _UNBOUNDED):
                return False  # (not a count the program's words hold)
            w.extend((_REP, e.lo, _UNBOUNDED if e.hi is None else e.hi, 0))
            if not self.add(e.item):
                return False
        else:
            return False
        w[at + 3] = len(w) - at
        return True


_INLINE_MAX = 400  # scannerless: regular rules up to this pattern length are inlined where used


def _inlinable(rules: Mapping[str, Expr]) -> dict[str, str]:
    """Rules whose body is regular once smaller such rules are substituted: name -> pattern."""
    out: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            if name not in out:
                rx = _regex_of(body, out)
                if rx is not None and len(rx) <= _INLINE_MAX:
                    out[name] = rx
                    changed = True
    return out


def _without_empty(dfa: Any) -> Any:
    """``dfa`` minus the empty string (None when nothing is left)."""
    from ..automata import DFA

    if not dfa.start or not dfa.accepting[dfa.start]:
        return dfa
    tr = np.vstack([dfa.transitions, dfa.transitions[dfa.start][None, :]])
    if not tr[-1].any():
        return None
    return DFA(tr, np.append(dfa.accepting, False), tr.shape[0] - 1)


def build_cfg(
    rules: Mapping[str, Expr],
    start: str = "start",
    *,
    ignore: Iterable[Lit | Pat] = (),
    scannerless: bool = False,
    positions: Mapping[str, tuple[int, int]] | None = None,
    source: str | None = None,
) -> Cfg:
    """The validated :class:`~grammarmask.cfg.Cfg` of ``rules`` (rule name -> body), from ``start``.

    ``ignore`` are terminals that may sit between any two lexemes (Lark's ``%ignore``);
    ``scannerless`` selects GBNF's lexing policy (module docstring); ``positions`` (rule name ->
    line, column in ``source``) place the errors.

    Raises :class:`~grammarmask.errors.GrammarError` for an undefined rule, a terminal that is not
    regular or matches the empty string, or an empty language.
    """
    low = _Lowering(rules, scannerless)
    start_id = low.run(start)
    ignored = []
    for e in ignore:
        t = low.terminal(e)
        assert t is not None
        ignored.append(t)
    names = [""] * len(low.nts)
    for name, i in low.nts.items():
        names[i] = name
    cfg = Cfg(tuple(names), tuple(low.terminals), tuple(low.rules), start_id, tuple(ignored),
              dict(positions or {}), source)
    return cfg.validated()
