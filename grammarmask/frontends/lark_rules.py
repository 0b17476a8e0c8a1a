"""lark's loaded grammar to IR expressions: each terminal's regex and each rule's EBNF body, without
lark's own compiler of grammars (``lark.load_grammar.Grammar.compile``).

lark's compile rewrites EBNF into BNF (every ``?``, ``[...]`` and group multiplied out into
alternatives, every repeat a helper rule) through a dozen tree passes; on ``sql.lark`` that was most
of a compile once the text was read. The IR builder lowers EBNF itself, so this module keeps only
what lark's compile decides:

- each terminal's regular expression, built as lark builds it (``TerminalTreeToPattern``: the same
  text, so the same automaton from the process-wide cache);
- the names lark gives the anonymous terminals of rules (``PrepareAnonTerminals``: a literal spelled
  like a defined terminal is that terminal);
- the grammars lark refuses while compiling: an empty terminal, an ill-formed literal or range, a
  bad ``~`` range, a rule whose alternatives, multiplied out, give one expansion twice (lark's
  "Rules defined twice", which ``[x]`` and aliases can cause), an alias on an ``_inlined`` rule.

A grammar that fails one of these checks, and one with templates (which lark expands and this
module does not), goes to lark's compile instead (:func:`compile_rules` returns None), so lark
words the refusal. ``tests/test_lark_syntax.py`` holds the two ways to the same language.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..cache import Lru
from ..ir.builder import EMPTY, Expr, Pat, Ref, Rep, alt, seq

__all__ = ["compile_rules"]

# lark writes ``x ~ n..m`` with m at least this as helper rules (REPEAT_BREAK_THRESHOLD), whose
# bodies this module does not check: such rules go to lark's compile
_INLINE_REPEATS = 50
# alternatives multiplied out per rule before the duplicate check gives up and lark decides
_MOST_ALTERNATIVES = 4096
_EMPTY_SLOT = ("_EMPTY",)  # lark's placeholder for one child of a missing ``[x]``


class _ToLark(Exception):
    """lark's compile decides this grammar (it refuses it, or uses what this module does not)."""


def compile_rules(
    grammar: Any, start: str, terminal: Callable[[str, str | None], Pat]
) -> tuple[dict[str, Expr], list[Pat]] | None:
    """The rules reachable from ``start`` of lark's ``grammar`` (what its ``GrammarBuilder.build``
    returns) as IR expressions, and its ``%ignore`` terminals; None when lark's compile must decide
    (see the module docstring).

    ``terminal(name, regex)`` makes the expression of a terminal (``regex`` None: ``%declare``d).
    """
    from lark.exceptions import LarkError

    from ..errors import GrammarMaskError
    from .lark_syntax import mirrored

    if not mirrored():
        return None
    try:
        defined = [(name, tree) for name, (tree, _priority) in grammar.term_defs if tree is not None]
        if any(_empty_terminal(tree) for _name, tree in defined):
            raise _ToLark
        patterns = {name: _terminal_pattern(tree) for name, tree in defined}
        rules = _Rules(grammar, patterns, terminal)
        return rules.run(start), [terminal(n, rules.regexps.get(n)) for n in grammar.ignore]
    except GrammarMaskError:
        raise  # the caller's (a terminal it cannot make)
    except (_ToLark, LarkError, AssertionError, ValueError, re.error):
        return None


def _empty_terminal(tree: Any) -> bool:
    """lark's "Terminals cannot be empty" condition: the tree has one ``expansion`` subtree, an
    empty one (read with a stack that stops at a second one: lark's ``find_data`` walks every
    subtree through a generic search, a third of this module's time on sql.lark)."""
    from lark.tree import Tree

    found, stack = None, [tree]
    while stack:
        t = stack.pop()
        if t.data == "expansion":
            if found is not None:
                return False
            found = t
        stack.extend(c for c in t.children if isinstance(c, Tree))
    return found is not None and not found.children


def _literal(token: Any) -> Any:
    """lark's pattern of a "string" or /regex/ token (its checks: no newline, not empty, escapes)."""
    return _literal_of(token.type, str(token))


# a literal lark's escape evaluation gives back as it is: printable ASCII without a backslash or a
# quote, in "..." or /.../, with flags
_PLAIN_LITERAL = re.compile(r'(?:"([ !#-&(-\[\]-~]+)"|/([ -!#-&(-.0-\[\]-~]+)/)([imslux]*)')


@functools.lru_cache(maxsize=4096)
def _literal_of(kind: str, text: str) -> Any:
    from lark.lexer import PatternRE, PatternStr, Token
    from lark.load_grammar import _literal_to_pattern

    plain = _PLAIN_LITERAL.fullmatch(text)
    if plain is not None and (plain.group(1) is None) == (kind == "REGEXP"):
        # lark evaluates a literal's escapes with ast.literal_eval (~15 us a literal in a new
        # process); here there are none
        string, regexp, flags = plain.groups()
        if string is not None:
            return PatternStr(string, flags, raw=text)
        return PatternRE(regexp, flags, raw=text)
    return _literal_to_pattern(Token(kind, text))  # type: ignore[no-untyped-call]


def _range(first: Any, last: Any) -> Any:
    return _range_of(first.value, last.value)


@functools.lru_cache(maxsize=4096)
def _range_of(first: str, last: str) -> Any:
    """lark's pattern of the range ``"a".."z"`` (its ends as written); kept: lark reads each end with
    ast.literal_eval, and common.lark's digits and letters were a seventh of a grammar importing
    NUMBER."""
    from lark.lexer import PatternRE
    from lark.load_grammar import eval_escaping

    a, b = first[1:-1], last[1:-1]
    if len(eval_escaping(a)) != 1 or len(eval_escaping(b)) != 1:  # type: ignore[no-untyped-call]
        raise _ToLark
    return PatternRE(f"[{a}-{b}]")


def _longest_first(p: Any) -> tuple[int, int, int]:
    """lark's order of a terminal's alternatives (longest possible match first)."""
    from lark.lexer import PatternStr

    lo, hi = (len(p.value), len(p.value)) if isinstance(p, PatternStr) else _width(p.to_regexp())
    return -hi, -lo, -len(p.value)


# lark's (min, max) widths of patterns, by pattern: per process, and for common.lark's patterns read
# back with its DFAs (.lark_bundled): each is re's parser on the pattern, and sql.lark's first
# compile in a process asked for six of them (NUMBER's parts), 0.5 ms
_WIDTHS: Lru[str, tuple[int, int]] = Lru(4096)
_asked = threading.local()  # .widths: a dict recording every width asked for (recording_widths)


def _width(regexp: str) -> tuple[int, int]:
    width = _WIDTHS.get(regexp)
    if width is None:
        from lark.utils import get_regexp_width

        lo, hi = get_regexp_width(regexp)
        width = (lo, hi)
        _WIDTHS.put(regexp, width)
    seen = getattr(_asked, "widths", None)
    if seen is not None:
        seen[regexp] = width
    return width


@contextlib.contextmanager
def recording_widths() -> Iterator[dict[str, tuple[int, int]]]:
    """The widths this thread asks for inside the block, by pattern (for :func:`keep_widths`)."""
    seen: dict[str, tuple[int, int]] = {}
    _asked.widths = seen
    try:
        yield seen
    finally:
        _asked.widths = None


def keep_widths(widths: Mapping[str, tuple[int, int]]) -> None:
    """Keep widths made earlier (by lark's ``get_regexp_width``) where the compile looks for them."""
    for regexp, (lo, hi) in widths.items():
        _WIDTHS.put(regexp, (lo, hi))


def _terminal_pattern(tree: Any) -> Any:
    """The lark ``Pattern`` of a terminal's tree, built as lark's ``TerminalTreeToPattern`` builds it
    (alternatives longest first, groups as ``(?:...)``), so its regex text is lark's."""
    from lark.lexer import PatternRE, PatternStr
    from lark.tree import Tree

    def pattern(t: Any) -> Any:  # (the imports above once per terminal, not once per subtree)
        d, ch = t.data, t.children
        if d == "expansions":
            ps = [pattern(c) for c in ch]
            if len(ps) == 1:
                return ps[0]
            ps.sort(key=_longest_first)
            return PatternRE(f"(?:{'|'.join(p.to_regexp() for p in ps)})", ())
        if d == "expansion":
            if not ch:
                return PatternStr("")
            ps = [pattern(c) for c in ch]
            return ps[0] if len(ps) == 1 else PatternRE("".join(p.to_regexp() for p in ps), ())
        if d in ("expr", "maybe"):
            inner = pattern(ch[0])
            op = "?" if d == "maybe" else str(ch[1])
            if op == "~":
                lo, hi = int(ch[2]), int(ch[-1])
                if hi < lo or lo < 0:
                    raise _ToLark
                op = f"{{{lo}}}" if len(ch) == 3 else f"{{{lo},{hi}}}"
            return PatternRE(f"(?:{inner.to_regexp()}){op}", inner.flags)
        if d == "value" and isinstance(ch[0], Tree):
            return pattern(ch[0])
        if d == "literal":
            return _literal(ch[0])
        if d == "range":
            return _range(*ch)
        raise _ToLark  # an alias, a rule or a template in a terminal: lark words the refusal

    return pattern(tree)


class _Rules:
    """One pass over the rules: anonymous terminals named, lark's refusals checked, bodies lowered."""

    def __init__(self, grammar: Any, patterns: dict[str, Any], terminal: Callable[[str, str | None], Pat]):
        from lark.utils import is_id_continue, is_id_start

        self.grammar, self.terminal = grammar, terminal
        self.is_id: Callable[[str], bool] = lambda v: bool(v and is_id_continue(v) and is_id_start(v[0]))
        self.regexps: dict[str, str | None] = {n: None for n, (t, _p) in grammar.term_defs if t is None}
        self.regexps.update((n, p.to_regexp()) for n, p in patterns.items())
        self.named = set(patterns)  # lark's term_set: the terminals that have a pattern
        self.by_pattern = {p: n for n, p in patterns.items()}  # lark's term_reverse (the last wins)
        self.anonymous = 0
        self.keep_all = False
        self.helpers: dict[Any, int] = {}  # repeated items by shape: lark's helper rules

    def run(self, start: str) -> dict[str, Expr]:
        bodies = {}
        for name, params, tree, options in self.grammar.rule_defs:
            if params or tree is None:
                raise _ToLark  # a template, or a %declare'd rule
            self.keep_all = bool(options and options.keep_all_tokens)
            top = [(a, c.children[1].name if c.data == "alias" else None) for c in tree.children
                   for a in self.alternatives(c.children[0] if c.data == "alias" else c)]
            if name.startswith("_") and any(alias for _a, alias in top):
                raise _ToLark  # lark: an inlined rule may not have aliases
            self.refuse_duplicates(top)
            bodies[name] = tree
        out: dict[str, Expr] = {}
        todo = [start]
        while todo:
            name = todo.pop()
            if name in out or name not in bodies:
                continue  # a missing start: the caller's error
            out[name] = self.lower(bodies[name], todo)
        return out

    # --- lark's anonymous terminals ------------------------------------------------------------

    def literal_name(self, t: Any) -> str:
        """The terminal a "string" or /regex/ (or range) in a rule stands for, named as lark names it."""
        from lark.lexer import PatternStr
        from lark.load_grammar import _TERMINAL_NAMES

        p = _literal(t.children[0]) if t.data == "literal" else _range(*t.children)
        name = self.by_pattern.get(p)
        if name is None and isinstance(p, PatternStr):
            name = _TERMINAL_NAMES.get(p.value)
            if name is None and self.is_id(p.value) and p.value.upper() not in self.named:
                name = p.value.upper()
            if name in self.named:
                name = None
        if name is None:
            name = f"__ANON_{self.anonymous}"
            self.anonymous += 1
        if name not in self.named:
            self.named.add(name)
            self.by_pattern[p] = name
            self.regexps[name] = p.to_regexp()
        return name

    # --- lark's refusals -----------------------------------------------------------------------

    def alternatives(self, t: Any) -> list[tuple[Any, ...]]:
        """``t`` multiplied out as lark's BNF does (a repeated item one helper symbol, a missing
        ``[x]`` as empty slots), each alternative once."""
        d, ch = t.data, t.children
        if d == "expansions":
            out = _unique(a for c in ch for a in self.alternatives(c))
        elif d == "expansion":
            out = [()]
            for c in ch:
                out = _product(out, self.alternatives(c))
        elif d == "maybe":
            inner = ch[0]
            out = _unique([*self.alternatives(inner), (_EMPTY_SLOT,) * self.size(inner)])
        elif d == "expr":
            out = self.repeated(ch)
        elif d == "value":
            v = ch[0]
            if getattr(v, "data", None) in ("literal", "range"):
                out = [(("T", self.literal_name(v)),)]
            elif getattr(v, "is_term", None) is not None:
                out = [(("T" if v.is_term else "N", v.name),)]
            else:
                raise _ToLark  # a template's use
        else:
            raise _ToLark  # an alias below the top of a rule
        return _bounded(out)

    def repeated(self, ch: list[Any]) -> list[tuple[Any, ...]]:
        inner, op = ch[0], str(ch[1])
        if op == "?":
            return _unique([*self.alternatives(inner), ()])
        if op in ("*", "+"):
            alts = self.alternatives(inner)
            self.refuse_duplicates([(a, None) for a in alts])  # the helper rule's own body
            helper = (("H", self.helpers.setdefault(_shape(inner), len(self.helpers))),)
            return [helper, ()] if op == "*" else [helper]
        lo, hi = int(ch[2]), int(ch[-1])
        if hi < lo or lo < 0 or hi >= _INLINE_REPEATS:
            raise _ToLark
        alts = self.alternatives(inner)
        out: list[tuple[Any, ...]] = []
        power = [()]
        for k in range(hi + 1):
            if k >= lo:
                out.extend(power)
            if k < hi:
                power = _product(power, alts)
        return _bounded(_unique(out))

    def size(self, t: Any) -> int:
        """lark's ``FindRuleSize``: the children a match of ``t`` leaves in a parse tree (how many
        empty slots a missing ``[t]`` gets)."""
        d, ch = t.data, t.children
        if d == "expansions":
            return max(self.size(c) for c in ch)
        if d == "expansion":
            return sum(self.size(c) for c in ch)
        if d == "maybe":
            return self.size(ch[0])
        if d == "expr":
            op = str(ch[1])
            return 0 if op in ("*", "+") else self.size(ch[0]) * (int(ch[-1]) if op == "~" else 1)
        v = ch[0]
        if getattr(v, "data", None) == "literal":
            return 1 if self.keep_all or v.children[0].type == "REGEXP" else 0
        if getattr(v, "data", None) == "range":
            return 1
        if v.is_term:
            return 1 if self.keep_all or not v.name.startswith("_") else 0
        return 0 if v.name.startswith("_") else 1

    @staticmethod
    def refuse_duplicates(alts: Iterable[tuple[tuple[Any, ...], str | None]]) -> None:
        """lark's "Rules defined twice": two alternatives (distinct by alias or empty slots) with the
        same non-empty expansion."""
        seen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for a, alias in _unique(alts):
            symbols = tuple(x for x in a if x is not _EMPTY_SLOT)
            if symbols and seen.setdefault(symbols, (a, alias)) != (a, alias):
                raise _ToLark

    # --- the IR --------------------------------------------------------------------------------

    def lower(self, t: Any, todo: list[str]) -> Expr:
        d, ch = t.data, t.children
        if d == "expansions":
            return alt(self.lower(c, todo) for c in ch)
        if d == "alias":
            return self.lower(ch[0], todo)
        if d == "expansion":
            return seq(*(self.lower(c, todo) for c in ch))
        if d == "maybe":
            return Rep(self.lower(ch[0], todo), 0, 1)
        if d == "expr":
            inner, op = self.lower(ch[0], todo), str(ch[1])
            if op == "~":
                lo, hi = int(ch[2]), int(ch[-1])
                return EMPTY if hi == 0 else Rep(inner, lo, hi)
            return Rep(inner, int(op == "+"), 1 if op == "?" else None)
        v = ch[0]
        if getattr(v, "data", None) in ("literal", "range"):
            name = self.literal_name(v)
            return self.terminal(name, self.regexps[name])
        if v.is_term:
            return self.terminal(v.name, self.regexps.get(v.name))
        todo.append(v.name)
        return Ref(v.name)


def _unique(xs: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(xs))


def _product(heads: list[Any], tails: list[Any]) -> list[Any]:
    """Each of ``heads`` followed by each of ``tails``, once (bounded before it is built: two groups
    of 4,096 alternatives are not multiplied out to 16 million)."""
    if len(heads) * len(tails) > _MOST_ALTERNATIVES:
        raise _ToLark  # lark multiplies them out too; let it decide
    return _unique(a + b for a in heads for b in tails)


def _bounded(alts: list[Any]) -> list[Any]:
    if len(alts) > _MOST_ALTERNATIVES:
        raise _ToLark  # lark multiplies them out too; let it decide
    return alts


def _shape(t: Any) -> Any:
    """A hashable form of a rule subtree (equal subtrees, equal forms)."""
    if hasattr(t, "data"):
        return (t.data, tuple(_shape(c) for c in t.children))
    if hasattr(t, "is_term"):
        return ("T" if t.is_term else "N", t.name)
    return (getattr(t, "type", ""), str(t))

