"""Lark grammars: read by :mod:`.lark_syntax` into lark's own parse tree, assembled by lark's
``GrammarBuilder`` (imports, definitions, its checks), written as IR expressions by :mod:`.lark_rules`
(:mod:`grammarmask.ir.builder`), lowered by the builder and masked by the Earley engine. What those
two modules leave to lark (a syntax error, templates, a grammar lark's compile refuses) goes through
lark's own parser and compile, so lark words every error.

``Lark(text)`` accepts exactly what ``lark.Lark(text, parser="earley", lexer="dynamic")`` parses (lark's
default): terminals are greedy (longest match at each position), ``%ignore`` terminals may sit between
lexemes, ``%import common.*`` and relative imports work, templates, ``?rule`` inlining and aliases are
expanded by lark. Differences from lark are listed in docs/semantics.md.
"""

from __future__ import annotations

import functools
import gc
import os
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from .. import disk_cache
from .._args import read_grammar_file
from ..compile_cache import lark_imports, stable
from ..engine import compile_cfg
from ..errors import BudgetExceeded, GrammarError
from ..grammar import CompiledGrammar, Grammar
from ..ir.builder import EMPTY, Expr, Pat, Ref, alt, build_cfg, seq
from ..ir.gbnf import to_gbnf
from ..limits import active
from ..special_tokens import Ref as SpecialRef
from ..special_tokens import past_lark_literal, require_view, resolve, rewrite_lark_refs, spelling_dfa
from ..vocab import Vocabulary
from .lark_rules import compile_rules
from .lark_syntax import load_grammar

__all__ = ["Lark"]

# lark's common.lark ESCAPED_STRING uses a lazy body and a lookbehind; this is the same language, and
# its longest match is the shortest one lark's regex finds (the DFA cannot continue past the quote).
_LOOKBEHIND_REWRITES = {
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
}

NO_START = "lark: the grammar has no rule named {!r} (the start rule; pass start=... to use another)"

_POS = re.compile(r"at line (\d+),? column (\d+)")


def _find_definition(text: str, name: str) -> tuple[int, int] | None:
    m = re.search(rf"^[ \t]*[?!]?{re.escape(name)}\b", text, re.M)
    if m is None:
        return None
    line = text.count("\n", 0, m.start()) + 1
    col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
    return line, col + (len(m.group(0)) - len(m.group(0).lstrip(" \t?!")))


_LEADING_WORD = re.compile(r"^[ \t]*[?!]?(\w+)", re.M)


def _definitions(text: str, names: Iterable[str]) -> dict[str, tuple[int, int]]:
    """``_find_definition`` for many names in one pass over the text (same answers)."""
    first: dict[str, tuple[int, int]] = {}
    line, line_start = 1, 0
    for m in _LEADING_WORD.finditer(text):
        at = m.start(1)
        line += text.count("\n", line_start, at)  # matches come in order: count each newline once
        line_start = text.rfind("\n", 0, at) + 1
        first.setdefault(m.group(1), (line, at - line_start + 1))
    out = {}
    for name in names:
        pos = first.get(name) if _WORD.fullmatch(name) else _find_definition(text, name)
        if pos is not None:
            out[name] = pos
    return out


_WORD = re.compile(r"\w+")


def find_use(text: str, name: str) -> tuple[int, int] | None:
    for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\b(?!\s*[:.])", text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if text[line_start : m.start()].lstrip().startswith(("//", "%import")):
            continue
        return text.count("\n", 0, m.start()) + 1, m.start() - line_start + 1
    return None


def lark_error(e: Exception, text: str) -> GrammarError:
    msg = str(e).split("\n")[0]
    line = getattr(e, "line", None)
    col = getattr(e, "column", None)
    m = _POS.search(msg)
    if m:
        line, col = int(m.group(1)), int(m.group(2))
        msg = (msg[: m.start()] + msg[m.end() :]).rstrip(" ,.")
    if line is None or line < 1:
        line = col = None
        m2 = re.search(r"'(\w+)' used but not defined", msg)
        if m2:
            pos = find_use(text, m2.group(1))
            if pos:
                line, col = pos
        if line is None:
            m3 = re.search(r"TerminalDef\('(\w+)'", msg)
            pos = _find_definition(text, m3.group(1)) if m3 else None
            if pos:
                line, col = pos
    return GrammarError(f"lark: {msg}", line=line, column=col, text=text)


def _dfa_for(regexp: str) -> Any:
    """The DFA of a terminal pattern (shared by every grammar using it, through the process-wide
    cache of automata :func:`regex_to_dfa` keeps); GrammarError if not regular."""
    from ..automata import regex_to_dfa

    # (a lookbehind common.lark spells: its rewrite, not a refusal of the original each time first)
    return regex_to_dfa(_LOOKBEHIND_REWRITES.get(regexp, regexp))


def _terminal_dfa(name: str, regexp: str, text: str) -> Any:
    try:
        dfa = _dfa_for(regexp)
    except GrammarError as e:
        pos = _find_definition(text, name) or (None, None)
        raise GrammarError(f"terminal {name} (/{regexp}/) cannot be compiled: {e.message}",
                           line=pos[0], column=pos[1], text=text) from None
    if dfa.start and dfa.accepting[dfa.start]:
        pos = _find_definition(text, name) or (None, None)
        raise GrammarError(f"lark: Dynamic Earley doesn't allow zero-width regexps: terminal {name} "
                           f"(/{regexp}/) matches the empty string", line=pos[0], column=pos[1], text=text)
    return dfa


_NOT_NESTING = re.compile(r'[^"/()\[\]]*')


def check_nesting(text: str) -> None:
    """Refuse groups nested deeper than ``Limits.grammar_nesting`` before lark's loader recurses on them
    (strings, /regexes/ and // comments skipped)."""
    depth, i, n = 0, 0, len(text)
    budget = active().grammar_nesting
    skip = _NOT_NESTING.match
    while i < n:
        # past characters that neither nest nor start a literal
        i = skip(text, i).end()  # type: ignore[union-attr]  # (matches everywhere)
        if i >= n:
            break
        c = text[i]
        if (end := past_lark_literal(text, i)) is not None:
            i = end
            continue
        if c in "([":
            depth += 1
            if depth > budget:
                line = text.count("\n", 0, i) + 1
                col = i - (text.rfind("\n", 0, i) + 1) + 1
                raise BudgetExceeded("grammar_nesting", budget, "groups nested too deep",
                                     where=f"line {line}, column {col}")
        elif c in ")]":
            depth -= 1
        i += 1


def hidden_syntax_error(e: TypeError) -> Any:
    """The syntax error lark was wording when it raised ``e``, or None.

    lark 1.3.1's ``UnexpectedInput.match_examples`` formats a debug message with ``%d`` of a
    ParserState while it words some syntax errors, so the error becomes a TypeError; the error it
    was wording is that method's ``self``."""
    from lark.exceptions import LarkError

    cause, tb = None, e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "match_examples":
            cause = tb.tb_frame.f_locals.get("self")
        tb = tb.tb_next
    return cause if isinstance(cause, LarkError) else None


def lark_to_cfg(text: str, *, start: str = "start", source_path: str | None = None,
                import_paths: Sequence[str] = (), specials: Mapping[str, str] | None = None) -> Any:
    """Load ``text`` with lark and translate it to a validated :class:`~grammarmask.cfg.Cfg`;
    ``specials`` maps declared terminals to the special tokens (names) they stand for."""
    from lark.exceptions import LarkError

    if not isinstance(text, str):
        raise GrammarError(f"Lark grammar text must be str, got {type(text).__name__}")
    check_nesting(text)
    patterns: dict[str, Pat] = {}

    def terminal(name: str, regexp: str | None) -> Pat:
        pat = patterns.get(name)
        if pat is None and specials and name in specials:
            token = specials[name]
            pat = patterns[name] = Pat(token, build=functools.partial(spelling_dfa, token), name=token)
        if pat is None:
            if regexp is None:
                pos = find_use(text, name) or (None, None)
                raise GrammarError(
                    f"terminal {name} has no definition (%declare): grammarmask cannot generate it",
                    line=pos[0], column=pos[1], text=text)
            pat = patterns[name] = Pat(regexp, build=functools.partial(_terminal_dfa, name, regexp, text),
                                       name=name)
        return pat

    gc_was_on = gc.isenabled()
    try:
        # lark's loader (GrammarBuilder: imports, definitions, checks) on a tree read by
        # lark_syntax, then its rules as IR expressions (lark_rules), or lark's own EBNF->BNF
        # compile where lark_rules leaves the grammar to it. Both allocate many tree objects for a
        # large grammar; the cyclic GC's passes over them were ~30% of the loader's time (a 250 KB
        # JSON Schema grammar: 1.75 s -> 1.2 s). Reference counting still frees them.
        gc.disable()
        grammar = load_grammar(text, source_path or "<string>", import_paths)
        fast = compile_rules(grammar, start, terminal)
        if fast is None:
            lark_terminals, lark_rules, ignore_names = grammar.compile([start], set())
    except LarkError as e:
        if f"undefined rule: NonTerminal('{start}')" in str(e):
            raise GrammarError(NO_START.format(start)) from None
        raise lark_error(e, text) from None
    except re.error as e:
        raise GrammarError(f"lark: bad regular expression: {e}", text=text) from None
    except TypeError as e:
        cause = hidden_syntax_error(e)
        if cause is None:
            raise
        raise lark_error(cause, text) from None
    except (OSError, UnicodeDecodeError, AssertionError) as e:  # an %import lark cannot find or read
        raise _import_error(e, text) from None
    finally:
        if gc_was_on:
            gc.enable()
    if fast is not None:
        rules, ignore = fast
    else:
        regexps = {t.name: t.pattern.to_regexp() for t in lark_terminals}
        # lark's BNF as IR expressions: one alternative per lark rule, priorities dropped (they
        # choose among parse trees, not strings)
        bodies: dict[str, list[Expr]] = {}
        for r in lark_rules:
            items = [terminal(x.name, regexps.get(x.name)) if x.is_term else Ref(x.name)
                     for x in r.expansion]
            bodies.setdefault(r.origin.name, []).append(seq(*items) if items else EMPTY)
        rules = {name: alt(alts) for name, alts in bodies.items()}
        ignore = [terminal(n, regexps.get(n)) for n in ignore_names]
    if start not in rules:  # lark compiles a grammar with no start rule to no rules at all
        raise GrammarError(NO_START.format(start))
    positions = _definitions(text, [*rules, *patterns])
    return build_cfg(rules, start, ignore=ignore, positions=positions, source=text)


def _import_error(e: Exception, text: str) -> GrammarError:
    """A GrammarError for an ``%import`` whose grammar file lark cannot find or read, at that line."""
    name = getattr(e, "filename", None)
    what = f"{name}: {e.strerror}" if isinstance(e, OSError) and name else str(e).split("\n")[0]
    dotted = os.path.splitext(name)[0].replace(os.sep, ".") if isinstance(name, str) else ""
    line = col = None
    for i, src in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*%import\s+\.*", src)
        if m and (line is None or (dotted and src[m.end() :].startswith(dotted))):
            line, col = i, m.end() + 1
    return GrammarError(f"lark: %import cannot load a grammar file ({what}); lark looks in import_paths, "
                        "the grammar's own directory and its bundled grammars",
                        line=line, column=col, text=text)


def _import_paths(paths: Sequence[str]) -> tuple[Any, ...]:
    """``paths`` as a tuple of str paths or lark loader functions (callables), checked."""
    if isinstance(paths, (str, bytes)) or not isinstance(paths, Iterable):
        raise GrammarError(
            f"Lark: import_paths must be a list of paths, got {type(paths).__name__} {paths!r:.60}"
        )
    out: list[Any] = []
    for i, p in enumerate(paths):
        if isinstance(p, (str, os.PathLike)):
            p = os.fspath(p)
        if not isinstance(p, str) and not callable(p):
            raise GrammarError(
                f"Lark: import_paths[{i}] must be a path (str or os.PathLike) or a lark loader function, "
                f"got {type(p).__name__}"
            )
        out.append(p)
    return tuple(out)


class Lark(Grammar):
    """A grammar in lark's syntax, meaning what ``lark.Lark(text).parse`` accepts.

    Parameters
    ----------
    text
        The grammar (``%import common.*`` and relative imports resolve like lark's).
    start
        The start rule.

    Raises
    ------
    GrammarError
        Syntax errors, undefined rules or terminals, ``%declare``d terminals, terminals whose regex is
        not regular, an unproductive start rule (empty language): with line and column. Also an
        ``import_paths`` that is a single string or holds something other than a path (``str``,
        ``os.PathLike``) or a lark loader function.
    """

    def __init__(self, text: str, *, start: str = "start", source_path: str | None = None,
                 import_paths: Sequence[str] = ()) -> None:
        self.text = text
        self.start = start
        self.source_path = source_path
        self.import_paths = _import_paths(import_paths)
        self._imports: Any = False  # the %import files (compile_cache.lark_imports), looked up once

        def make() -> tuple[Any, ...]:
            # special tokens (<name>, <[id]>): declared placeholder terminals, spelled by name; an id
            # is spelled <[id]> until the vocabulary names it (_compile)
            self._loaded, self._refs, self._ref_pos = rewrite_lark_refs(text)
            return self._loaded, self._refs, self._ref_pos, self._cfg(
                {k: _placeholder_name(r) for k, r in self._refs.items()})

        deps = self._disk_extra() if isinstance(text, str) and isinstance(start, str) else None
        if deps is None or not stable(source_path):
            self._loaded, self._refs, self._ref_pos, self.cfg = make()
        else:  # the IR an earlier process built from the same text and %import files (errors never stored)
            self._loaded, self._refs, self._ref_pos, self.cfg = disk_cache.load_or_make(
                "lark-ir", (text, start, source_path, self.import_paths, deps, active()), make, packed=True,
                costly_only=True, later=True)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, start: str = "start") -> Lark:
        """Load a ``.lark`` file; relative ``%import``s resolve against its folder.

        Raises
        ------
        GrammarError
            The file cannot be read, or is not UTF-8 (the message names the file and the byte offset
            of the first bad byte), or its grammar is invalid.
        """
        path = os.fspath(path)
        text = read_grammar_file(path)
        return cls(text, start=start, source_path=path, import_paths=[os.path.dirname(os.path.abspath(path))])

    def __repr__(self) -> str:
        return f"Lark(<{len(self.text)} chars>, start={self.start!r})"

    def cache_key(self) -> Hashable | None:
        return (self.text, self.start, self.source_path, self.import_paths)

    def _disk_extra(self) -> tuple[Any, ...] | None:
        """The grammar files an ``%import`` could read, for disk cache keys (None: not cacheable)."""
        if self._imports is False:
            self._imports = lark_imports(self.text, self.source_path, self.import_paths)
        return self._imports  # type: ignore[no-any-return]

    def special_tokens(self) -> frozenset[SpecialRef]:
        return frozenset(self._refs.values())

    def where_named(self, token: SpecialRef) -> str:
        line, col = self._ref_pos.get(token, (0, 0))
        return f"{self!r}, line {line}, column {col}" if line else repr(self)

    def to_gbnf(self) -> str:
        """The llama.cpp GBNF text of this grammar (start rule ``root``; ``%ignore`` and longest match
        written out): what :class:`~grammarmask.Gbnf` parses to the same language
        (:func:`grammarmask.ir.gbnf.to_gbnf`, which lists what cannot be printed)."""
        return to_gbnf(self.cfg)

    def _cfg(self, specials: Mapping[str, str]) -> Any:
        return lark_to_cfg(self._loaded, start=self.start, source_path=self.source_path,
                           import_paths=self.import_paths, specials=specials)

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        cfg = self.cfg
        if self._refs:
            require_view(vocab, repr(self))
        if any(isinstance(r, int) for r in self._refs.values()):  # token ids: their names in vocab
            cfg = self._cfg({k: resolve(vocab, r, where=repr(self)) for k, r in self._refs.items()})
        return compile_cfg(cfg, vocab)


def _placeholder_name(ref: SpecialRef) -> str:
    return ref if isinstance(ref, str) else f"<[{ref}]>"
