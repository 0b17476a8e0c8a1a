"""GBNF (llama.cpp's grammar format), translated to the CFG IR with scannerless semantics.

Syntax (llama.cpp ``grammars/README.md``): ``name ::= alternatives``; ``|`` alternation; sequences;
``"literals"``; ``[...]`` / ``[^...]`` character classes with ranges; ``.`` any character; groups
``( )``; postfix ``* + ? {m} {m,} {m,n} {,n}``; escapes ``\\xXX \\uXXXX \\UXXXXXXXX \\t \\n \\r \\\\ \\"
\\[ \\]``; ``#`` comments; rules may be used before they are defined; ``root`` is the start rule;
special tokens as llama.cpp writes them, ``<name>`` or ``<[id]>`` (:mod:`grammarmask.special_tokens`).
Newlines end a sequence, except inside parentheses and after ``::=`` or ``|``.

Semantics are llama.cpp's: every character is matched exactly, no implicit whitespace, no longest
match. The parser writes the rules as IR expressions (:mod:`grammarmask.ir.builder`) and the
builder lowers them with its *scannerless* policy: each run of regular elements in a sequence
becomes one non-greedy terminal, everything else becomes rules.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Hashable, Mapping
from typing import Any

from .. import disk_cache
from .._args import read_grammar_file
from ..automata.regex import char_class_dfa
from ..engine import compile_cfg
from ..errors import BudgetExceeded, GrammarError
from ..grammar import CompiledGrammar, Grammar
from ..ir.builder import EMPTY, Expr, Lit, Pat, Ref, Rep, alt, build_cfg, seq
from ..ir.gbnf import to_gbnf
from ..limits import active
from ..special_tokens import REF_PATTERN, parse_ref, require_view, resolve, spelling_dfa
from ..special_tokens import Ref as SpecialRef
from ..vocab import Vocabulary

__all__ = ["Gbnf"]

_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_SIMPLE_ESC = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "/": "/"}
_HEX_ESC = {"x": 2, "u": 4, "U": 8}


# --- parser: GBNF text to IR expressions --------------------------------------------------

class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.rules: dict[str, Expr] = {}
        self.rule_pos: dict[str, int] = {}
        self.refs: list[tuple[str, int]] = []  # every rule reference and where it is
        self.depth = 0
        self.max_depth = active().grammar_nesting
        self.specials: list[SpecialRef] = []  # special tokens named (<name>, <[id]>)
        self.resolved: dict[SpecialRef, str] = {}  # their names in the vocabulary, once known
        self.special_pos: dict[SpecialRef, int] = {}  # where each is first named

    def error(self, message: str, pos: int | None = None) -> GrammarError:
        p = self.pos if pos is None else pos
        line = self.text.count("\n", 0, p) + 1
        col = p - (self.text.rfind("\n", 0, p) + 1) + 1
        return GrammarError(message, line=line, column=col, text=self.text)

    def space(self, newlines: bool) -> None:
        t = self.text
        while self.pos < len(t):
            c = t[self.pos]
            if c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            elif c == "#":
                while self.pos < len(t) and t[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                break

    def parse(self) -> dict[str, Expr]:
        self.space(True)
        while self.pos < len(self.text):
            start = self.pos
            m = _NAME.match(self.text, self.pos)
            if not m:
                raise self.error(f"expected a rule name, got {self.text[self.pos]!r}")
            name = m.group(0)
            self.pos = m.end()
            self.space(False)
            if not self.text.startswith("::=", self.pos):
                got = self.text[self.pos : self.pos + 3] or "end of input"
                raise self.error(f"expected '::=' after rule name {name!r}, got {got!r}")
            self.pos += 3
            self.space(True)
            body = self.alternatives(nested=False)
            if name in self.rules:
                raise self.error(f"rule {name!r} is defined twice", start)
            self.rules[name] = body
            self.rule_pos[name] = start
            if self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
                raise self.error(f"unexpected {self.text[self.pos]!r}: expected an element, '|' or a newline")
            self.space(True)
        return self.rules

    def alternatives(self, nested: bool) -> Expr:
        alts = [self.sequence(nested)]
        while self.pos < len(self.text) and self.text[self.pos] == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return alt(alts)

    def undefined(self) -> GrammarError | None:
        """The first reference (in text order) to a rule that is not defined, as an error."""
        for name, pos in self.refs:
            if name not in self.rules:
                return self.error(f"undefined rule {name!r}", pos)
        return None

    def sequence(self, nested: bool) -> Expr:
        items: list[Expr] = []
        t = self.text
        while self.pos < len(t):
            c = t[self.pos]
            start = self.pos
            if c == '"':
                self.pos += 1
                chars = []
                while True:
                    if self.pos >= len(t) or t[self.pos] in "\r\n":
                        raise self.error("unterminated string literal", start)
                    if t[self.pos] == '"':
                        self.pos += 1
                        break
                    chars.append(self.char())
                node: Expr | None = Lit("".join(chars)) if chars else None
            elif c == "[":
                node = self.char_class()
            elif c == ".":
                self.pos += 1
                node = _ANY_CHAR
            elif c == "(":
                if self.depth >= self.max_depth:
                    err = self.error("")
                    raise BudgetExceeded("grammar_nesting", self.max_depth, "groups nested too deep",
                                         where=f"line {err.line}, column {err.column}")
                self.pos += 1
                self.space(True)
                self.depth += 1
                node = self.alternatives(nested=True)
                self.depth -= 1
                if self.pos >= len(t) or t[self.pos] != ")":
                    raise self.error("expected ')' to close the group opened here", start)
                self.pos += 1
            elif _NAME.match(c):
                m = _NAME.match(t, self.pos)
                assert m is not None
                self.pos = m.end()
                node = Ref(m.group(0))
                self.refs.append((m.group(0), start))
            elif c == "<" and (m := REF_PATTERN.match(t, self.pos)) is not None:
                self.pos = m.end()
                ref = parse_ref(m.group(0))
                self.specials.append(ref)
                self.special_pos.setdefault(ref, start)
                name = self.resolved.get(ref, ref if isinstance(ref, str) else f"<[{ref}]>")
                node = Pat(name, build=functools.partial(spelling_dfa, name), name=name, opaque=True)
            elif c == "!":
                raise self.error("'!': negated token references (!<token>) are not supported")
            elif c == "<":
                raise self.error("'<': expected a special token reference such as <name>, <[NAME]> or <[12]>")
            else:
                break
            self.space(nested)
            node = self.postfix(node)
            if node is not None:
                items.append(node)
            self.space(nested)
        return seq(*items) if items else EMPTY

    def postfix(self, node: Expr | None) -> Expr | None:
        t = self.text
        while self.pos < len(t) and t[self.pos] in "*+?{":
            c = t[self.pos]
            start = self.pos
            if c == "{":
                m = re.compile(r"\{\s*(\d*)\s*(,?)\s*(\d*)\s*\}").match(t, self.pos)
                if not m or (not m.group(1) and not m.group(2)):
                    raise self.error("malformed repetition: expected {m}, {m,}, {m,n} or {,n}")
                lo = int(m.group(1) or 0)
                hi = None if m.group(2) and not m.group(3) else int(m.group(3) or m.group(1))
                if hi is not None and hi < lo:
                    raise self.error(f"repetition {{{lo},{hi}}}: the maximum is below the minimum", start)
                self.pos = m.end()
            else:
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                self.pos += 1
            if node is None:
                raise self.error(f"{c!r} has nothing to repeat", start)
            node = Rep(node, lo, hi)
            self.space(False)
        return node

    def char(self) -> str:
        t = self.text
        c = t[self.pos]
        if c != "\\":
            self.pos += 1
            return c
        if self.pos + 1 >= len(t):
            raise self.error("unfinished escape at end of input")
        e = t[self.pos + 1]
        if e in _SIMPLE_ESC:
            self.pos += 2
            return _SIMPLE_ESC[e]
        if e in _HEX_ESC:
            n = _HEX_ESC[e]
            digits = t[self.pos + 2 : self.pos + 2 + n]
            if len(digits) != n or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"\\{e} needs {n} hex digits")
            cp = int(digits, 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                raise self.error(f"\\{e}{digits} is not a Unicode scalar value")
            self.pos += 2 + n
            return chr(cp)
        raise self.error(f"unknown escape \\{e}")

    def char_class(self) -> Pat:
        """A ``[...]`` class: its regex, and its DFA made from its ranges (no regex read back)."""
        t = self.text
        start = self.pos
        self.pos += 1
        negate = self.pos < len(t) and t[self.pos] == "^"
        if negate:
            self.pos += 1
        parts = []
        ranges = []
        while True:
            if self.pos >= len(t):
                raise self.error("unterminated character class", start)
            if t[self.pos] == "]":
                self.pos += 1
                break
            lo = self.char()
            if self.pos + 1 < len(t) and t[self.pos] == "-" and t[self.pos + 1] != "]":
                self.pos += 1
                hi = self.char()
                if ord(hi) < ord(lo):
                    raise self.error(f"character range {lo!r}-{hi!r} is reversed", start)
                parts.append(f"{_cls(lo)}-{_cls(hi)}")
                ranges.append((ord(lo), ord(hi)))
            else:
                parts.append(_cls(lo))
                ranges.append((ord(lo), ord(lo)))
        if not parts:
            return _ANY_CHAR if negate else Pat("(?!)")
        regex = "[" + ("^" if negate else "") + "".join(parts) + "]"
        return Pat(regex, build=functools.partial(char_class_dfa, tuple(ranges), negate))


# "." (and "[^]"): any character
_ANY_CHAR = Pat("(?s:.)", build=functools.partial(char_class_dfa, ((0, 0x10FFFF),)))


def _cls(c: str) -> str:
    return f"\\U{ord(c):08x}"


def parse_gbnf(
    text: str, *, start: str = "root", resolved: Mapping[SpecialRef, str] | None = None
) -> tuple[dict[str, Expr], _Parser]:
    """GBNF ``text`` as IR expressions (rule name -> body), and the parser (rule and reference
    positions; ``resolved`` names special tokens given by id). Raises GrammarError for a syntax
    error, an undefined rule or a missing start rule."""
    if not isinstance(text, str):
        raise GrammarError(f"GBNF grammar text must be str, got {type(text).__name__}")
    parser = _Parser(text)
    parser.resolved = dict(resolved or {})
    rules = parser.parse()
    if start not in rules:
        raise GrammarError(f"the grammar has no {start!r} rule (the start rule)", line=1, column=1, text=text)
    err = parser.undefined()
    if err is not None:
        raise err
    return rules, parser


def gbnf_to_cfg(
    text: str, *, start: str = "root", resolved: Mapping[SpecialRef, str] | None = None
) -> tuple[Any, dict[SpecialRef, tuple[int, int]]]:
    """Parse GBNF ``text`` and lower it to a validated :class:`~grammarmask.ir.Cfg`; also returns the
    special tokens it names (``<name>``, ``<[NAME]>``, ``<[id]>``; ids spelled as ``resolved`` says)
    with where each is first named (line, column)."""
    rules, parser = parse_gbnf(text, start=start, resolved=resolved)
    positions = {}
    for n, p in parser.rule_pos.items():
        err = parser.error("", p)
        positions[n] = (err.line or 1, err.column or 1)
    cfg = build_cfg(rules, start, scannerless=True, positions=positions, source=text)
    where = {r: parser.error("", p) for r, p in parser.special_pos.items()}
    return cfg, {r: (e.line or 1, e.column or 1) for r, e in where.items()}


class Gbnf(Grammar):
    """A grammar in llama.cpp's GBNF, with llama.cpp's scannerless semantics (``root`` starts).

    Raises
    ------
    GrammarError
        Syntax errors, undefined rules, a missing ``root``, an empty language: with line and column.
    """

    def __init__(self, text: str, *, start: str = "root") -> None:
        self.text = text
        self.start = start
        if isinstance(text, str) and isinstance(start, str):  # the IR an earlier process built, if any
            self.cfg, self._ref_pos = disk_cache.load_or_make(
                "gbnf-ir", (text, start, active()), lambda: gbnf_to_cfg(text, start=start), packed=True,
                costly_only=True, later=True)
        else:
            self.cfg, self._ref_pos = gbnf_to_cfg(text, start=start)
        self._refs: frozenset[SpecialRef] = frozenset(self._ref_pos)

    @classmethod
    def from_file(cls, path: str, *, start: str = "root") -> Gbnf:
        """Load a ``.gbnf`` file.

        Raises
        ------
        GrammarError
            The file cannot be read, or is not UTF-8 (the message names the file and the byte offset
            of the first bad byte), or its grammar is invalid.
        """
        text = read_grammar_file(path)
        return cls(text, start=start)

    def __repr__(self) -> str:
        return f"Gbnf(<{len(self.text)} chars>)"

    def cache_key(self) -> Hashable | None:
        return (self.text, self.start)

    def special_tokens(self) -> frozenset[SpecialRef]:
        return self._refs

    def where_named(self, token: SpecialRef) -> str:
        line, col = self._ref_pos.get(token, (0, 0))
        return f"{self!r}, line {line}, column {col}" if line else repr(self)

    def to_gbnf(self) -> str:
        """This grammar printed back from its IR (start rule ``root``): the same language, in
        normalised form (:func:`grammarmask.ir.gbnf.to_gbnf`)."""
        return to_gbnf(self.cfg)

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        cfg = self.cfg
        if self._refs:
            require_view(vocab, repr(self))
        ids = [r for r in self._refs if isinstance(r, int)]
        if ids:  # token ids: spelled by their names in vocab
            names: dict[SpecialRef, str] = {r: resolve(vocab, r, where=repr(self)) for r in ids}
            cfg, _ = gbnf_to_cfg(self.text, start=self.start, resolved=names)
        return compile_cfg(cfg, vocab)
