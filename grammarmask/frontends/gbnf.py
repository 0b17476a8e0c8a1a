"""GBNF (llama.cpp's grammar format), translated to the CFG IR with scannerless semantics.

Syntax (llama.cpp ``grammars/README.md``): ``name ::= alternatives``; ``|`` alternation; sequences;
``"literals"``; ``[...]`` / ``[^...]`` character classes with ranges; ``.`` any character; groups
``( )``; postfix ``* + ? {m} {m,} {m,n} {,n}``; escapes ``\\xXX \\uXXXX \\UXXXXXXXX \\t \\n \\r \\\\ \\"
\\[ \\]``; ``#`` comments; rules may be used before they are defined; ``root`` is the start rule.
Newlines end a sequence, except inside parentheses and after ``::=`` or ``|``.

Semantics are llama.cpp's: every character is matched exactly, no implicit whitespace, no longest
match. Each run of regular elements in a sequence (no rule references) becomes one *non-greedy*
terminal (it may end at any accepting point, so the translation is exact); everything else becomes
rules. A rule whose body is regular becomes a single terminal.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from .._args import read_grammar_file
from ..engine import compile_cfg
from ..errors import GrammarError
from ..grammar import CompiledGrammar, Grammar
from ..vocab import Vocabulary

__all__ = ["Gbnf"]

_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_SIMPLE_ESC = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "/": "/"}
_HEX_ESC = {"x": 2, "u": 4, "U": 8}


# --- syntax tree --------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Lit:
    regex: str  # a regular Python pattern (literal, class, any)


@dataclass(frozen=True)
class _Ref:
    name: str
    pos: int


@dataclass(frozen=True)
class _Alt:
    alts: tuple[tuple[Any, ...], ...]  # sequences of nodes


@dataclass(frozen=True)
class _Rep:
    node: Any
    lo: int
    hi: int | None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.rules: dict[str, _Alt] = {}
        self.rule_pos: dict[str, int] = {}

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

    def parse(self) -> dict[str, _Alt]:
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

    def alternatives(self, nested: bool) -> _Alt:
        alts = [self.sequence(nested)]
        while self.pos < len(self.text) and self.text[self.pos] == "|":
            self.pos += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return _Alt(tuple(alts))

    def sequence(self, nested: bool) -> tuple[Any, ...]:
        items: list[Any] = []
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
                node: Any = _Lit("".join(re.escape(ch) for ch in chars)) if chars else None
            elif c == "[":
                node = _Lit(self.char_class())
            elif c == ".":
                self.pos += 1
                node = _Lit("(?s:.)")
            elif c == "(":
                self.pos += 1
                self.space(True)
                node = self.alternatives(nested=True)
                if self.pos >= len(t) or t[self.pos] != ")":
                    raise self.error("expected ')' to close the group opened here", start)
                self.pos += 1
            elif _NAME.match(c):
                m = _NAME.match(t, self.pos)
                assert m is not None
                self.pos = m.end()
                node = _Ref(m.group(0), start)
            elif c == "<" or c == "!":
                raise self.error(f"{c!r}: token references and other llama.cpp extensions are not supported")
            else:
                break
            self.space(nested)
            node = self.postfix(node)
            if node is not None:
                items.append(node)
            self.space(nested)
        return tuple(items)

    def postfix(self, node: Any) -> Any:
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
            node = _Rep(node, lo, hi)
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

    def char_class(self) -> str:
        t = self.text
        start = self.pos
        self.pos += 1
        negate = self.pos < len(t) and t[self.pos] == "^"
        if negate:
            self.pos += 1
        parts = []
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
            else:
                parts.append(_cls(lo))
        if not parts:
            return "(?s:.)" if negate else "(?!)"
        return "[" + ("^" if negate else "") + "".join(parts) + "]"


def _cls(c: str) -> str:
    return f"\\U{ord(c):08x}"


# --- translation --------------------------------------------------------------------------------

def _regex_of(node: Any, inline: dict[str, str] | None = None) -> str | None:
    """The node as a regular pattern, or None if it references a rule that is not in ``inline``."""
    if isinstance(node, _Lit):
        return node.regex
    if isinstance(node, _Ref):
        return None if inline is None else inline.get(node.name)
    if isinstance(node, _Alt):
        seqs = []
        for seq in node.alts:
            parts = [_regex_of(n, inline) for n in seq]
            if any(p is None for p in parts):
                return None
            seqs.append("".join(f"(?:{p})" for p in parts if p))
        return "(?:" + "|".join(seqs) + ")"
    if isinstance(node, _Rep):
        inner = _regex_of(node.node, inline)
        if inner is None:
            return None
        hi = "" if node.hi is None else str(node.hi)
        return f"(?:{inner}){{{node.lo},{hi}}}"
    raise TypeError(node)


_INLINE_MAX = 400  # regular rules up to this pattern length are inlined where they are used


def _inlinable(rules: dict[str, _Alt]) -> dict[str, str]:
    """Rules whose body is regular once smaller such rules are substituted: name -> pattern."""
    out: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            if name in out:
                continue
            rx = _regex_of(body, out)
            if rx is not None and len(rx) <= _INLINE_MAX:
                out[name] = rx
                changed = True
    return out


class _Builder:
    def __init__(self, parser: _Parser) -> None:
        from ..ir import Rule, Terminal

        self.Rule, self.Terminal = Rule, Terminal
        self.p = parser
        self.nts: dict[str, int] = {}
        self.rules: list[Any] = []
        self.terminals: list[Any] = []
        self.term_ids: dict[str, int | None] = {}
        self.fresh = 0
        self.inline = _inlinable(parser.rules)

    def nt(self, name: str) -> int:
        return self.nts.setdefault(name, len(self.nts))

    def terminal(self, regex: str) -> tuple[int | None, bool]:
        """A non-greedy terminal for ``regex`` minus the empty string, and whether ε was in it."""
        from ..automata import regex_to_dfa

        dfa = regex_to_dfa(regex)
        nullable = bool(dfa.accepting[dfa.start]) if dfa.start else False
        if regex not in self.term_ids:
            dfa = _without_empty(dfa)
            if dfa is None:
                self.term_ids[regex] = None
            else:
                self.term_ids[regex] = len(self.terminals)
                self.terminals.append(self.Terminal(f"T{len(self.terminals)}", dfa, greedy=False))
        return self.term_ids[regex], nullable

    def add(self, lhs: int, rhs: list[int]) -> None:
        self.rules.append(self.Rule(lhs, tuple(rhs)))

    def regular(self, regex: str) -> int | None:
        """A symbol for the regular language ``regex``: its terminal, or ``N -> T | ε`` when it holds ε."""
        tid, nullable = self.terminal(regex)
        if not nullable:
            return None if tid is None else ~tid
        key = f"__gbnf_opt_{regex}"
        if key not in self.nts:
            lhs = self.nt(key)
            self.add(lhs, [])
            if tid is not None:
                self.add(lhs, [~tid])
        return self.nts[key]

    def sequence(self, lhs: int, seq: tuple[Any, ...]) -> None:
        """Add ``lhs -> seq``, merging runs of regular elements into terminals."""
        rhs: list[int] = []
        run: list[str] = []

        def flush() -> None:
            if run:
                sym = self.regular("".join(f"(?:{r})" for r in run))
                run.clear()
                if sym is not None:
                    rhs.append(sym)

        for node in seq:
            rx = _regex_of(node, self.inline)
            if rx is not None:
                if rx:
                    run.append(rx)
                continue
            flush()
            rhs.append(self.symbol(node))
        flush()
        self.add(lhs, rhs)

    def body(self, lhs: int, alt: _Alt) -> None:
        """Add the alternatives of ``alt`` for ``lhs`` (one terminal when the whole body is regular)."""
        rx = _regex_of(alt, self.inline)
        if rx is not None and len(alt.alts) > 1:
            sym = self.regular(rx)
            self.add(lhs, [] if sym is None else [sym])
            return
        for seq in alt.alts:
            self.sequence(lhs, seq)

    def symbol(self, node: Any) -> int:
        if isinstance(node, _Ref):
            if node.name not in self.p.rules:
                raise self.p.error(f"undefined rule {node.name!r}", node.pos)
            return self.nt(node.name)
        self.fresh += 1
        lhs = self.nt(f"__gbnf_{self.fresh}")
        if isinstance(node, _Alt):
            self.body(lhs, node)
        elif isinstance(node, _Rep):
            self.repeat(lhs, node)
        return lhs

    def repeat(self, lhs: int, node: _Rep) -> None:
        item = self.symbol(node.node)
        if node.hi is None:
            # lhs -> item^lo star;  star -> ε | star item  (left recursion: no Earley blow-up)
            self.fresh += 1
            star = self.nt(f"__gbnf_{self.fresh}")
            self.add(star, [])
            self.add(star, [star, item])
            self.add(lhs, [item] * node.lo + [star])
            return
        # lhs -> item^lo opt_{hi-lo}; opt_k -> ε | item opt_{k-1}
        tail: list[int] = []
        for _ in range(node.hi - node.lo):
            self.fresh += 1
            opt = self.nt(f"__gbnf_{self.fresh}")
            self.add(opt, [])
            self.add(opt, [item, *tail])
            tail = [opt]
        self.add(lhs, [item] * node.lo + tail)


def _without_empty(dfa: Any) -> Any:
    """``dfa`` minus the empty string (None when nothing is left)."""
    import numpy as np

    from ..automata import DFA

    if not dfa.start or not dfa.accepting[dfa.start]:
        return dfa
    tr = np.vstack([dfa.transitions, dfa.transitions[dfa.start][None, :]])
    acc = np.append(dfa.accepting, False)
    if not tr[-1].any():
        return None
    return DFA(tr, acc, tr.shape[0] - 1)


def gbnf_to_cfg(text: str, *, start: str = "root") -> Any:
    """Parse GBNF ``text`` and translate it to a validated :class:`~grammarmask.cfg.Cfg`."""
    from ..ir import Cfg

    if not isinstance(text, str):
        raise GrammarError(f"GBNF grammar text must be str, got {type(text).__name__}")
    parser = _Parser(text)
    rules = parser.parse()
    if start not in rules:
        raise GrammarError(f"the grammar has no {start!r} rule (the start rule)", line=1, column=1, text=text)
    b = _Builder(parser)
    b.nt(start)
    order = [start] + [n for n in rules if n != start]
    for name in order:
        lhs = b.nt(name)
        b.body(lhs, rules[name])
    names = [""] * len(b.nts)
    for n, i in b.nts.items():
        names[i] = n
    positions = {}
    for n, p in parser.rule_pos.items():
        err = parser.error("", p)
        positions[n] = (err.line or 1, err.column or 1)
    cfg = Cfg(tuple(names), tuple(b.terminals), tuple(b.rules), b.nt(start), (), positions, text)
    return cfg.validated()


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
        self.cfg = gbnf_to_cfg(text, start=start)

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

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        return compile_cfg(self.cfg, vocab)
