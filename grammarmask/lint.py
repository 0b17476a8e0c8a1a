"""Grammar lint for Lark and GBNF text: problems that make part of a grammar (or all of it) dead.

Each finding has a ``code``, a ``severity``, a message and the (1-based) line and column of the name
it is about in the grammar text:

========================  ========  =======================================================
code                      severity  meaning
========================  ========  =======================================================
``empty-language``        error     the start rule derives no finite string: nothing matches
``unproductive-rule``     warning   a rule derives no finite string (it only recurses)
``empty-terminal``        error     a terminal's pattern matches no string at all
``unreachable-rule``      warning   a rule the start rule never uses
``unused-terminal``       warning   a terminal no rule uses (and that is not ``%ignore``-d)
``unsupported-terminal``  note      a terminal grammarmask cannot compile to an automaton
``undefined-rule``        error     a rule (or terminal) is used but defined nowhere (Lark)
========================  ========  =======================================================

Lark text is loaded with lark's own loader (``lark.Lark``); GBNF is read by grammarmask's GBNF
front end into IR expressions (:mod:`grammarmask.ir.builder`), which the lint walks.

Examples
--------
>>> from grammarmask.lint import lint_lark
>>> for f in lint_lark('start: "a" | loop\\nloop: "b" loop\\nunused: "c"'):  # doctest: +ELLIPSIS
...     print(f)
line 2, column 1: warning: rule 'loop' can never complete: ... [unproductive-rule]
line 3, column 1: warning: rule 'unused' is unreachable from 'start' [unreachable-rule]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import GrammarError

__all__ = ["Finding", "lint_gbnf", "lint_lark"]

_UNPRODUCTIVE = (
    "rule {!r} can never complete: every alternative recurses forever or uses a dead rule or terminal"
)
_EMPTY = "the start rule {!r} derives no finite string: the grammar's language is empty"
_NOT_REGULAR = "terminal {} is not regular (lookaround/backreference): grammarmask cannot compile it"


@dataclass(frozen=True, order=True)
class Finding:
    """One lint result, about ``name`` at ``line``/``column`` (None when not found in the text)."""

    line: int | None
    column: int | None
    severity: str
    code: str
    name: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}, column {self.column}: " if self.line is not None else ""
        return f"{where}{self.severity}: {self.message} [{self.code}]"


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def _lark_position(text: str, name: str) -> tuple[int | None, int | None]:
    """Where ``name`` is defined (``name:`` / ``?name.2:``), else where it is %import-ed."""
    m = re.search(
        rf"^[ \t]*[?!]?({re.escape(name)})\b[ \t]*(?:\{{[^}}]*\}})?[ \t]*(?:\.-?\d+)?[ \t]*:", text, re.M
    )
    if m is None:
        m = re.search(rf"^[ \t]*%import\b[^\n]*?\b({re.escape(name)})\b", text, re.M)
    if m is None:
        return None, None
    return _line_col(text, m.start(1))


def _productive(rules: Iterable[tuple[str, Sequence[tuple[bool, str]]]], live_terms: set[str]) -> set[str]:
    """Nonterminals deriving a finite string; ``rules`` are (lhs, [(is_terminal, name), ...])."""
    rules = list(rules)
    done: set[str] = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in rules:
            if lhs not in done and all((n in live_terms) if term else (n in done) for term, n in rhs):
                done.add(lhs)
                changed = True
    return done


def _terminal_language(pattern: str) -> bool | None:
    """Whether the pattern matches some string (None: it cannot be compiled to an automaton)."""
    from .automata import regex_to_dfa

    try:
        return not regex_to_dfa(pattern).is_empty()
    except GrammarError:
        return None


def lint_lark(text: str, *, start: str = "start", import_paths: Sequence[str] = ()) -> list[Finding]:
    """Lint Lark grammar text; findings sorted by position.

    Raises
    ------
    GrammarError
        lark cannot load the text (the message has lark's line and column).
    """
    import lark
    from lark.exceptions import LarkError

    from .frontends.lark import NO_START, check_nesting, find_use, hidden_syntax_error, lark_error

    if not isinstance(text, str):
        raise GrammarError(f"Lark grammar text must be str, got {type(text).__name__}")
    check_nesting(text)
    out: list[Finding] = []
    # An undefined rule is a finding, not a failure: it is defined as a rule that derives nothing
    # (so the rules that need it show as unproductive) and the lint goes on.
    stubs: list[str] = []
    while True:
        try:
            defs = "".join(f"\n{n}: /[^\\s\\S]/\n" if n.isupper() else f"\n{n}: {n}\n" for n in stubs)
            parser = lark.Lark(text + defs, start=start, import_paths=list(import_paths))
            break
        except LarkError as e:
            if f"undefined rule: NonTerminal('{start}')" in str(e):
                raise GrammarError(NO_START.format(start)) from None
            m = re.match(r"Rule '(\w+)' used but not defined", str(e))
            if m and m.group(1) not in stubs and len(stubs) < 100:
                name = m.group(1)
                stubs.append(name)
                line, col = find_use(text, name) or (None, None)
                kind = "terminal" if name.isupper() else "rule"
                out.append(Finding(line, col, "error", "undefined-rule", name,
                                   f"{kind} {name!r} is used but not defined"))
                continue
            raise lark_error(e, text) from None
        except TypeError as e:  # a syntax error lark fails to word (hidden_syntax_error)
            cause = hidden_syntax_error(e)
            if cause is None:
                raise
            raise lark_error(cause, text) from None

    def add(name: str, severity: str, code: str, message: str) -> None:
        if name not in stubs:
            line, col = _lark_position(text, name)
            out.append(Finding(line, col, severity, code, name, message))

    # terminals: every definition in the text (used or not), plus the anonymous ones lark made
    used_terms = {t.name: t for t in parser.terminals}
    in_rules = {str(s.name) for r in parser.rules for s in r.expansion if s.is_term}
    live_terms = in_rules - set(used_terms)  # %declare-d terminals: produced by a postlexer
    for name, td in used_terms.items():
        ok = _terminal_language(td.pattern.to_regexp())
        if ok is False:
            add(
                name,
                "error",
                "empty-terminal",
                f"terminal {name} ({td.pattern.to_regexp()!r}) matches no string",
            )
        else:
            live_terms.add(name)
            if ok is None and not _is_import(text, name):
                add(name, "note", "unsupported-terminal", _NOT_REGULAR.format(name))
    needed = _referenced_closure(text, set(used_terms) | in_rules | set(parser.ignore_tokens))
    for name, _ in parser.grammar.term_defs:
        if name not in needed and not name.startswith("__"):
            add(str(name), "warning", "unused-terminal", f"terminal {name} is defined but no rule uses it")

    # rules: lark drops the unreachable ones when it compiles, so compare with the definitions
    reachable = {str(r.origin.name) for r in parser.rules}
    for name, params, *_ in parser.grammar.rule_defs:
        if not params and str(name) not in reachable and not str(name).startswith("__"):
            add(str(name), "warning", "unreachable-rule", f"rule {str(name)!r} is unreachable from {start!r}")
    rules = [
        (str(r.origin.name), [(s.is_term, str(s.name)) for s in r.expansion]) for r in parser.rules
    ]  # fmt: skip
    productive = _productive(rules, live_terms)
    for name in sorted(reachable - productive):
        if name == start or name.startswith("_") and _lark_position(text, name) == (None, None):
            continue  # lark's helper rules (__start_star_0, ...) are reported through their parents
        add(
            name,
            "warning",
            "unproductive-rule",
            _UNPRODUCTIVE.format(name),
        )
    if start not in productive:
        add(start, "error", "empty-language", _EMPTY.format(start))
    return sorted(out, key=_order)


_STATEMENT = re.compile(r"^[ \t]*(?:[?!]?([A-Za-z_]\w*)[^:\n]*:|%)", re.M)
_LITERALS = re.compile(r'"(?:[^"\\\n]|\\.)*"i?|/(?:[^/\\\n]|\\.)+/[imslux]*')


def _referenced_closure(text: str, roots: set[str]) -> set[str]:
    """``roots`` plus every terminal their definitions in ``text`` refer to, transitively (lark
    inlines terminals used inside other terminals, so its compiled grammar no longer shows them)."""
    starts = list(_STATEMENT.finditer(text))
    bodies: dict[str, str] = {}
    for m, nxt in zip(starts, [*starts[1:], None], strict=True):
        if m.group(1):
            body = text[m.end() : nxt.start() if nxt else len(text)]
            bodies[m.group(1)] = re.sub(r"//[^\n]*", "", _LITERALS.sub(" ", body))
    out = set(roots)
    stack = list(roots)
    while stack:
        for ref in re.findall(r"\b[A-Z_][A-Z0-9_]*\b", bodies.get(stack.pop(), "")):
            if ref not in out:
                out.add(ref)
                stack.append(ref)
    return out


def _order(f: Finding) -> tuple[int, int, str]:
    return (f.line or 0, f.column or 0, f.code)


def _is_import(text: str, name: str) -> bool:
    return re.search(rf"^[ \t]*%import\b[^\n]*\b{re.escape(name)}\b", text, re.M) is not None


def lint_gbnf(text: str, *, start: str = "root") -> list[Finding]:
    """Lint GBNF grammar text (llama.cpp syntax); findings sorted by position.

    Raises
    ------
    GrammarError
        The text does not parse (line and column of the problem), or ``start`` is not defined.
    """
    from .frontends.gbnf import parse_gbnf
    from .ir.builder import Alt, Expr, Lit, Pat, Ref, Rep, Seq

    defs, p = parse_gbnf(text, start=start)
    out: list[Finding] = []

    def add(name: str, severity: str, code: str, message: str) -> None:
        line, col = _line_col(text, p.rule_pos[name]) if name in p.rule_pos else (None, None)
        out.append(Finding(line, col, severity, code, name, message))

    # flatten each rule into (lhs, [(is_terminal, name)]) productions over fresh helper names
    prods: list[tuple[str, list[tuple[bool, str]]]] = []
    lits: dict[str, bool] = {}
    refs: dict[str, set[str]] = {n: set() for n in defs}
    counter = [0]

    def items(e: Expr) -> tuple[Expr, ...]:
        return e.items if isinstance(e, Seq) else (e,)

    def sym(node: Expr, owner: str) -> tuple[bool, str]:
        if isinstance(node, Lit):
            lits[re.escape(node.text)] = True  # a literal always matches its text
            return True, re.escape(node.text)
        if isinstance(node, Pat):
            key = node.regex
            if key not in lits:
                lits[key] = _terminal_language(key) is not False
                if not lits[key]:
                    add(
                        owner,
                        "error",
                        "empty-terminal",
                        f"rule {owner!r} has a character class that matches nothing",
                    )
            return True, key
        if isinstance(node, Ref):
            refs[owner].add(node.name)
            return False, node.name
        counter[0] += 1
        helper = f"\0{counter[0]}"
        if isinstance(node, Alt):
            for x in node.alts:
                prods.append((helper, [sym(n, owner) for n in items(x)]))
        elif isinstance(node, Rep):
            inner = sym(node.item, owner)
            prods.append((helper, [inner] * node.lo))  # the shortest expansion decides productivity
        else:  # a Seq
            prods.append((helper, [sym(n, owner) for n in items(node)]))
        return False, helper

    for name, body in defs.items():
        for x in body.alts if isinstance(body, Alt) else (body,):
            prods.append((name, [sym(n, name) for n in items(x)]))
    productive = _productive(prods, {k for k, ok in lits.items() if ok})
    reach = {start}
    stack = [start]
    while stack:
        for r in refs[stack.pop()]:
            if r not in reach:
                reach.add(r)
                stack.append(r)
    for name in defs:
        if name not in reach:
            add(name, "warning", "unreachable-rule", f"rule {name!r} is unreachable from {start!r}")
        elif name not in productive and name != start:
            add(
                name,
                "warning",
                "unproductive-rule",
                _UNPRODUCTIVE.format(name),
            )
    if start not in productive:
        add(start, "error", "empty-language", _EMPTY.format(start))
    return sorted(out, key=_order)
