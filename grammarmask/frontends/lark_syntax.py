"""Read Lark grammar text into the tree lark's loader builds, without lark's parser of grammars.

lark reads a ``.lark`` file with an LALR parser of the grammar language, which it builds once per
process (about half of a fresh process's first ``Lark`` compile) and then runs on the grammar and
again on every file it imports (``common.lark`` for each ``%import common.X``). This module reads
the same language by recursive descent over the same tokens (lark's token patterns, tried in the
order lark's lexer tries them) and returns the same tree, so lark's ``GrammarBuilder`` (imports,
validation, the terminal and rule compilation) runs on it unchanged: the grammar lark compiles is
the one it would have compiled.

Text this reader does not take (any syntax error) goes to lark's own parser, so lark words every
error as before. ``tests/test_lark_syntax.py`` holds the trees equal to lark's. The reader (and
:mod:`.lark_rules`) mirror lark's ``load_grammar`` module, which is the same in every lark release
from 1.2.1 to 1.3.1; with any other lark, lark's own parser and compile run (:func:`mirrored`).
"""

from __future__ import annotations

import copy
import functools
import graphlib
import os
import re
import types
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["load_grammar", "parse"]

# lark's grammar tokens in the order its basic lexer tries them (lark 1.3: by priority, longest
# possible match, pattern length, name); the first that matches wins. Checked against lark's own
# lexer by tests/test_lark_syntax.py.
_ORDER = (
    "REGEXP", "STRING", "COMMENT", "RULE", "TERMINAL", "_NL_OR", "_NL", "BACKSLASH", "NUMBER", "WS",
    "_OVERRIDE", "_DECLARE", "_EXTEND", "_IGNORE", "_IMPORT", "RULE_MODIFIERS", "_DOTDOT", "_TO", "OP",
    "_DOT", "_LBRA", "_LBRACE", "_LPAR", "_OR", "_RBRA", "_RBRACE", "_RPAR", "TILDE", "_COLON", "_COMMA",
)  # fmt: skip
_SKIPPED = frozenset({"WS", "COMMENT", "BACKSLASH"})
_EXPR_START = frozenset({"_LPAR", "_LBRA", "TERMINAL", "RULE", "STRING", "REGEXP"})
_END = "$END"


# lark releases whose load_grammar module (grammar tokens, GrammarBuilder, compile) was read
MIRRORED = ("1.2.1", "1.2.2", "1.3.0", "1.3.1")


@functools.cache
def mirrored() -> bool:
    """Whether the installed lark is one whose grammar reading these modules mirror."""
    import lark  # its own version string: importlib.metadata costs ~20 ms to import

    return lark.__version__ in MIRRORED


class _Unread(Exception):
    """The text is not one this reader takes: lark's parser reads it (and words the error)."""


@functools.cache
def _scanner() -> re.Pattern[str]:
    from lark.load_grammar import TERMINALS

    return re.compile("|".join(f"(?P<{name}>{TERMINALS[name]})" for name in _ORDER))


def _tokens(text: str) -> list[Any]:
    """lark's tokens of ``text`` (skipped ones dropped), with their positions (:func:`_cut`)."""
    kinds, token, _ = _cut(text)
    return [token(i) for i in range(len(kinds) - 1)]


def _cut(text: str) -> tuple[list[str], Callable[[int], Any], Callable[[int], str]]:
    """The kinds of ``text``'s tokens (skipped ones dropped) with ``_END`` after them, and the
    token and the text of the i-th, made when asked: a grammar's reader takes about half of them
    (its punctuation only moves it on), and lark's Token costs ~1 us to make. Cut by the native
    extension when it imports (``src/lark_tokens.rs``: compiling the scanner below took 0.7 ms of
    a new process's first grammar, and running it 1 us a token), else, and where a non-ASCII space
    or digit may stand, by the scanner."""
    from lark.lexer import Token

    rows = _native_tokens(text)
    if rows is None:
        toks = _scanned_tokens(text)
        return [t.type for t in toks] + [_END], toks.__getitem__, lambda i: toks[i].value
    # (Token's constructor, past its check for a deprecated keyword)
    make = getattr(Token, "_future_new", Token)

    def token(i: int) -> Any:
        k, a, b, line, column, end_line, end_column = rows[i]
        return make(_ORDER[k], text[a:b], a, line, column, end_line, end_column, b)

    def spelled(i: int) -> str:
        row = rows[i]
        return text[row[1]:row[2]]

    return [_ORDER[r[0]] for r in rows] + [_END], token, spelled


def _native_tokens(text: str) -> list[tuple[int, int, int, int, int, int, int]] | None:
    try:
        from .._engine import lark_tokens
    except ImportError:  # a checkout whose extension was never built
        return None
    return lark_tokens(text)


def _scanned_tokens(text: str) -> list[Any]:
    """:func:`_tokens` through ``re`` (the scanner of lark's own token patterns)."""
    from lark.lexer import Token

    match = _scanner().match
    out, pos, line, line_start, n = [], 0, 1, 0, len(text)
    while pos < n:
        m = match(text, pos)
        if m is None:
            raise _Unread
        kind, value, end = str(m.lastgroup), m.group(), m.end()
        newlines, column = value.count("\n"), pos - line_start + 1
        if newlines:
            line_start = text.rfind("\n", 0, end) + 1
        if kind not in _SKIPPED:
            out.append(Token(kind, value, pos, line, column, line + newlines, end - line_start + 1, end))
        line += newlines
        pos = end
    return out


class _Reader:
    """Recursive descent over lark's grammar of grammars (``lark.load_grammar.RULES``), building the
    trees its parser builds: ``?rule``s inlined when they have one child, ``_rule``s and
    ``_TOKEN``s dropped, ``terminal``/``nonterminal`` as lark's symbols (its ``PrepareGrammar``)."""

    def __init__(self, text: str) -> None:
        from lark.grammar import NonTerminal, Terminal
        from lark.tree import SlottedTree

        # the kind of the token at self.i is self.kinds[self.i]: never past the _END at the end,
        # as only a kind seen moves the reader on
        self.kinds, self.token, self.spelled = _cut(text)
        self.i = 0
        self.tree, self.terminal, self.nonterminal = SlottedTree, Terminal, NonTerminal

    def take(self, kind: str) -> Any:
        if self.kinds[self.i] != kind:
            raise _Unread
        tok = self.token(self.i)
        self.i += 1
        return tok

    def take_name(self, kind: str) -> str:
        """:meth:`take`'s token's text, without the token."""
        if self.kinds[self.i] != kind:
            raise _Unread
        self.i += 1
        return self.spelled(self.i - 1)

    def start(self) -> Any:
        if len(self.kinds) == 1:
            raise _Unread  # lark's start needs at least one item
        items: list[Any] = []
        while (kind := self.kinds[self.i]) != _END:
            if kind == "_NL":
                self.i += 1
            else:
                items.append(self.statement(kind))
        return self.tree("start", items)

    def statement(self, kind: str) -> Any:
        t = self.tree
        if kind in ("RULE_MODIFIERS", "RULE"):
            return self.rule()
        if kind == "TERMINAL":
            return self.term()
        self.i += 1
        if kind == "_IGNORE":
            body = self.expansions()
            self.take("_NL")
            return t("ignore", [body])
        if kind == "_DECLARE":
            symbols = [self.symbol()]
            while self.kinds[self.i] in ("TERMINAL", "RULE"):
                symbols.append(self.symbol())
            self.take("_NL")
            return t("declare", symbols)
        if kind == "_IMPORT":
            return self.import_()
        if kind in ("_OVERRIDE", "_EXTEND"):
            inner = self.term() if self.kinds[self.i] == "TERMINAL" else self.rule()
            return t(kind[1:].lower(), [inner])
        raise _Unread

    def rule(self) -> Any:
        t = self.tree
        modifiers = [self.take("RULE_MODIFIERS")] if self.kinds[self.i] == "RULE_MODIFIERS" else []
        name = self.take("RULE")
        params = []
        if self.kinds[self.i] == "_LBRACE":
            self.i += 1
            params.append(self.take("RULE"))
            while self.kinds[self.i] == "_COMMA":
                self.i += 1
                params.append(self.take("RULE"))
            self.take("_RBRACE")
        priority = []
        if self.kinds[self.i] == "_DOT":
            self.i += 1
            priority.append(self.take("NUMBER"))
        self.take("_COLON")
        body = self.expansions()
        self.take("_NL")
        return t("rule", [t("rule_modifiers", modifiers), name, t("template_params", params),
                          t("priority", priority), body])

    def term(self) -> Any:
        children = [self.take("TERMINAL")]
        if self.kinds[self.i] == "_DOT":
            self.i += 1
            children.append(self.take("NUMBER"))
        self.take("_COLON")
        children.append(self.expansions())
        self.take("_NL")
        return self.tree("term", children)

    def import_(self) -> Any:
        t = self.tree
        kind = "import_lib"
        if self.kinds[self.i] == "_DOT":
            self.i += 1
            kind = "import_rel"
        names = [self.name()]
        while self.kinds[self.i] == "_DOT":
            self.i += 1
            names.append(self.name())
        children: list[Any] = [t(kind, names)]
        if self.kinds[self.i] == "_LPAR":
            self.i += 1
            listed = [self.name()]
            while self.kinds[self.i] == "_COMMA":
                self.i += 1
                listed.append(self.name())
            self.take("_RPAR")
            children.append(t("name_list", listed))
        elif self.kinds[self.i] == "_TO":
            self.i += 1
            children.append(self.name())
        self.take("_NL")
        return t("import", children)

    def name(self) -> Any:
        if self.kinds[self.i] not in ("RULE", "TERMINAL"):
            raise _Unread
        return self.take(self.kinds[self.i])

    def symbol(self) -> Any:
        kind = self.kinds[self.i]
        if kind == "TERMINAL":
            name = self.take_name(kind)
            return self.terminal(name, filter_out=name.startswith("_"))
        return self.nonterminal(self.take_name("RULE"))

    def expansions(self) -> Any:
        alts = [self.alias()]
        while self.kinds[self.i] in ("_OR", "_NL_OR"):
            self.i += 1
            alts.append(self.alias())
        return self.tree("expansions", alts)

    def alias(self) -> Any:
        items = []
        while self.kinds[self.i] in _EXPR_START:
            items.append(self.expr())
        body = self.tree("expansion", items)
        if self.kinds[self.i] != "_TO":
            return body
        self.i += 1
        return self.tree("alias", [body, self.nonterminal(self.take_name("RULE"))])

    def expr(self) -> Any:
        atom = self.atom()
        kind = self.kinds[self.i]
        if kind == "OP":
            return self.tree("expr", [atom, self.take("OP")])
        if kind != "TILDE":
            return atom
        children = [atom, self.take("TILDE"), self.take("NUMBER")]
        if self.kinds[self.i] == "_DOTDOT":
            self.i += 1
            children.append(self.take("NUMBER"))
        return self.tree("expr", children)

    def atom(self) -> Any:
        kind = self.kinds[self.i]
        if kind in ("_LPAR", "_LBRA"):
            self.i += 1
            inner = self.expansions()
            if kind == "_LPAR":
                self.take("_RPAR")
                return inner
            self.take("_RBRA")
            return self.tree("maybe", [inner])
        return self.value()

    def value(self) -> Any:
        t = self.tree
        kind = self.kinds[self.i]
        if kind in ("TERMINAL", "RULE") and not (kind == "RULE" and self.peek_at(1) == "_LBRACE"):
            return t("value", [self.symbol()])
        if kind == "RULE":  # a template's use: name{arg, ...}
            name = self.nonterminal(self.take_name("RULE"))
            self.take("_LBRACE")
            args = [self.value()]
            while self.kinds[self.i] == "_COMMA":
                self.i += 1
                args.append(self.value())
            self.take("_RBRACE")
            return t("value", [t("template_usage", [name, *args])])
        if kind == "REGEXP":
            return t("value", [t("literal", [self.take("REGEXP")])])
        first = self.take("STRING")
        if self.kinds[self.i] != "_DOTDOT":
            return t("value", [t("literal", [first])])
        self.i += 1
        return t("value", [t("range", [first, self.take("STRING")])])

    def peek_at(self, k: int) -> str:
        j = self.i + k
        return self.kinds[j] if j < len(self.kinds) else _END


def parse(text: str) -> Any:
    """lark's parse tree of grammar text ``text`` (what ``lark.load_grammar._parse_grammar`` returns),
    or None when this reader does not take the text (lark's parser then reads it)."""
    try:
        return _Reader(text + "\n").start()  # lark reads the text with a newline added
    except _Unread:
        return None


def _parse_grammar(text: str, name: str, start: str = "start") -> Any:
    """lark's ``_parse_grammar``, reading through :func:`parse` first."""
    tree = parse(text) if start == "start" else None
    if tree is not None:
        return tree
    from lark import load_grammar as lg

    return lg._parse_grammar(text, name, start)  # type: ignore[no-untyped-call]


def _parse_wanted(text: str, name: str, start: str, wanted: frozenset[str]) -> Any:
    """The tree :func:`_parse_grammar` reads from an imported grammar, with only the definitions of
    ``wanted`` and of the names they use (the whole tree when it has other statements)."""
    bundled = _bundled_tree(text) if start == "start" else None
    if bundled is None:
        return _parse_grammar(text, name, start)
    return bundled.tree(wanted)


class _Bundled:
    """A grammar lark bundles that holds only terminal definitions, as kept on disk: each
    definition's tree made plain (:func:`_flat`), made a tree again when first asked for (all 27 of
    common.lark's took 0.6 ms, more than the grammar importing two of them), and the names each
    definition uses."""

    def __init__(self, kept: tuple[Any, Any, list[tuple[str, Any]], dict[str, set[str]]]) -> None:
        self.cls, data, statements, self.uses = kept
        self.data = _unflat(data)
        self.flat = dict(statements)
        self.order = [n for n, _ in statements]
        self.made: dict[str, Any] = {}

    def statement(self, name: str) -> Any:
        got = self.made.get(name)
        if got is None:
            got = self.made[name] = _unflat(self.flat[name])
        return got

    def tree(self, wanted: frozenset[str]) -> Any:
        """The grammar's tree with the definitions of ``wanted`` and of the names they use."""
        need, todo = set(), list(wanted)
        while todo:
            n = todo.pop()
            if n not in need:
                need.add(n)
                todo.extend(self.uses.get(n, ()))
        return self.cls(self.data, [self.statement(n) for n in self.order if n in need])


@functools.lru_cache(maxsize=8)
def _bundled_tree(text: str) -> _Bundled | None:
    """The definitions of a grammar lark bundles (read once per installation and kept in the disk
    cache, as the Unicode tables are: reading common.lark in a new process took ~0.9 ms, more than
    the grammar importing from it; lark copies what it defines from it), or None when it holds more
    than terminals (common.lark holds only terminals; a rule's first child is its modifiers, not
    its name)."""
    import hashlib

    import lark

    from .. import disk_cache

    key = (lark.__version__, hashlib.sha256(text.encode("utf-8")).hexdigest())
    kept = disk_cache.load_or_make("lark-bundled", key, lambda: _kept_bundled(text))
    return None if kept is None else _Bundled(kept)


def _kept_bundled(text: str) -> tuple[Any, Any, list[tuple[str, Any]], dict[str, set[str]]] | None:
    """What :func:`_bundled_tree` keeps on disk: the tree's class and data, each definition by name
    made plain, the names each uses."""
    read = _read_bundled(text)
    if read is None:
        return None
    tree, uses = read
    return type(tree), _flat(tree.data), [(s.children[0].value, _flat(s)) for s in tree.children], uses


def _flat(x: Any) -> Any:
    """A tree as plain tuples (lark's own pickling of a Token drops its end positions)."""
    from lark.lexer import Token
    from lark.tree import Tree

    if isinstance(x, Tree):
        return ("tree", type(x), _flat(x.data), [_flat(c) for c in x.children])
    if isinstance(x, Token):
        return ("token", x.type, str(x), x.start_pos, x.line, x.column, x.end_line, x.end_column, x.end_pos)
    if isinstance(x, tuple):
        return ("tuple", [_flat(c) for c in x])
    return ("value", x)


def _unflat(x: Any) -> Any:
    """The tree :func:`_flat` made plain."""
    from lark.lexer import Token

    kind = x[0]
    if kind == "tree":
        return x[1](_unflat(x[2]), [_unflat(c) for c in x[3]])
    if kind == "token":
        return Token(*x[1:])
    if kind == "tuple":
        return tuple(_unflat(c) for c in x[1])
    return x[1]


def _read_bundled(text: str) -> tuple[Any, dict[str, set[str]]] | None:
    from lark.grammar import Symbol

    tree = parse(text)
    if tree is None or any(s.data != "term" for s in tree.children):
        return None
    uses = {s.children[0].value: {v.name for v in s.children[-1].scan_values(lambda v: isinstance(v, Symbol))}
            for s in tree.children}
    return tree, uses


def _rebound(fn: Callable[..., Any], **names: Any) -> Callable[..., Any]:
    """``fn`` with some of its module's globals replaced (lark's code run as it is, reading with
    this module's parser and building with :class:`_Builder`)."""
    out = types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__, fn.__defaults__,
                             fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


@functools.cache
def _builder() -> type:
    from lark.exceptions import GrammarError
    from lark.load_grammar import GrammarBuilder

    # lark's GrammarBuilder whose grammars (and the grammars they import) are read by parse()
    builder = type("_Builder", (GrammarBuilder,), {
        "load_grammar": _rebound(GrammarBuilder.load_grammar, _parse_grammar=_parse_grammar,
                                 resolve_term_references=_resolve_term_references),
        "_unpack_definition": _rebound(GrammarBuilder._unpack_definition, _mangle_definition_tree=_mangled),
        "validate": _validate})
    do_import = _rebound(GrammarBuilder.do_import, GrammarBuilder=builder)

    def do_import_bundled(self: Any, dotted_path: Any, base_path: Any, aliases: Any, base_mangle: Any = None
                          ) -> None:
        """lark's ``do_import``; what a grammar takes from lark's own bundled grammars (``%import
        common.X``: no import paths, not relative) is kept per process, and handed out as copies."""
        if self.import_paths or base_path is not None or base_mangle is not None:
            return do_import(self, dotted_path, base_path, aliases, base_mangle)  # type: ignore[no-any-return]
        key = (tuple(dotted_path), tuple(sorted(aliases.items())), self.global_keep_all_tokens)
        if key[0] == ("common",):
            from .lark_bundled import keep_common_dfas

            keep_common_dfas()  # its terminals' DFAs, made once per installation
        kept = _BUNDLED.get(key)
        if kept is None:
            # read through a builder that sees only the definitions the imported names use
            # (_parse_wanted): lark keeps no other (its _remove_unused), and made every one of
            # common.lark's 27 terminals first, 3-4 ms per import in every new grammar
            wanted = frozenset(aliases)
            reader = _rebound(GrammarBuilder.load_grammar, resolve_term_references=_resolve_term_references,
                              _parse_grammar=lambda text, name, start="start":
                              _parse_wanted(text, name, start, wanted))
            scratch_builder = type("_Scratch", (builder,), {"load_grammar": reader})
            scratch = scratch_builder(self.global_keep_all_tokens)
            importer = _rebound(GrammarBuilder.do_import, GrammarBuilder=scratch_builder)
            importer(scratch, dotted_path, None, aliases, None)
            if len(_BUNDLED) >= _BUNDLED_ENTRIES:
                _BUNDLED.clear()
            kept = _BUNDLED[key] = (scratch._definitions, scratch.used_files)
        definitions, used = kept
        for name in definitions:  # lark's own check, in lark's words
            if name in self._definitions:
                raise GrammarError(f"Cannot import '{name}' from '{os.path.join(*dotted_path) + '.lark'}': "
                                   "Symbol already defined.")
        self._definitions.update((name, _copied(d)) for name, d in definitions.items())
        self.used_files.update(used)
        return None

    setattr(builder, "do_import", do_import_bundled)  # noqa: B010
    return builder


def _copy(t: Any, memo: dict[int, Any], leaf: Callable[[Any], Any]) -> Any:
    """A copy of lark tree ``t`` as ``copy.deepcopy`` makes it (a subtree used twice copied once, the
    copies kept in ``memo`` by the original's id), each leaf given by ``leaf``."""
    from lark.tree import Tree

    c = memo.get(id(t))
    if c is None:
        kids = [_copy(k, memo, leaf) if isinstance(k, Tree) else leaf(k) for k in t.children]
        c = memo[id(t)] = type(t)(t.data, kids, meta=t._meta)
    return c


def _leaf_copier(memo: dict[int, Any]) -> Callable[[Any], Any]:
    """A leaf's copy as ``copy.deepcopy(leaf, memo)`` makes it; a token's written out."""
    from lark.lexer import Token

    def leaf(x: Any) -> Any:
        if type(x) is not Token:
            return copy.deepcopy(x, memo)
        c = memo.get(id(x))
        if c is None:
            c = memo[id(x)] = Token(x.type, x.value, x.start_pos, x.line, x.column)
        return c

    return leaf


def _copied(definition: Any) -> Any:
    """``copy.deepcopy`` of a kept definition, written out for what it holds (trees of trees and
    tokens, a subtree used twice copied once, as deepcopy keeps it): deepcopy's generic walk was a
    sixth of a small grammar's compile that imports NUMBER."""
    memo: dict[int, Any] = {}
    leaf = _leaf_copier(memo)
    d = definition  # (lark's Definition as the mirrored releases have it: no copy of its own)
    return type(d)(d.is_term, None if d.tree is None else _copy(d.tree, memo, leaf),
                   [leaf(p) for p in d.params], copy.deepcopy(d.options, memo))


def _mangled(exp: Any, mangle: Callable[[str], str] | None) -> Any:
    """lark's ``_mangle_definition_tree``: an imported definition's tree copied (deepcopy) with every
    symbol renamed by ``mangle``, without deepcopy's generic walk (three fifths of a new process's
    import of NUMBER, CNAME and WS_INLINE from common.lark). A symbol's rename makes a new symbol,
    as renaming deepcopy's copy of it did."""
    from lark.grammar import Symbol

    if mangle is None:
        return exp
    memo: dict[int, Any] = {}
    copied = _leaf_copier(memo)
    def leaf(x: Any) -> Any:
        return x.renamed(mangle) if isinstance(x, Symbol) else copied(x)  # type: ignore[no-untyped-call]

    return _copy(exp, memo, leaf)


def _resolve_term_references(term_dict: dict[str, Any]) -> None:
    """lark's ``resolve_term_references`` (each terminal named inside a terminal's tree replaced by
    that terminal's tree, the same object), in one pass where the terminals plainly allow it: every
    name used is a defined terminal and none uses itself, however indirectly. Elsewhere lark's runs
    and refuses in its words. lark's searches every tree again per round and per check, with its
    generic subtree walk: 0.6 ms of sql.lark's compile."""
    from lark.grammar import Terminal
    from lark.load_grammar import resolve_term_references
    from lark.tree import Tree

    larks: Callable[[dict[str, Any]], None] = resolve_term_references
    values: list[Any] = []  # the value nodes holding a terminal's name
    uses: dict[str, set[str]] = {}
    for name, tree in term_dict.items():
        if tree is None:
            continue
        used = uses[name] = set()
        stack = [tree]
        while stack:
            t = stack.pop()
            if t.data == "value":
                if len(t.children) != 1:
                    return larks(term_dict)
                item = t.children[0]
                if isinstance(item, Terminal):
                    if term_dict.get(item.name) is None:
                        return larks(term_dict)
                    used.add(item.name)
                    values.append(t)
                    continue
                if not isinstance(item, Tree):
                    return larks(term_dict)  # (a rule in a terminal)
            stack.extend(c for c in t.children if isinstance(c, Tree))
    try:
        graphlib.TopologicalSorter(uses).prepare()
    except graphlib.CycleError:  # a terminal that uses itself: lark's words for it
        return larks(term_dict)
    for t in values:
        t.children[0] = term_dict[t.children[0].name]
    return None


def _validate(self: Any) -> None:
    """lark's ``GrammarBuilder.validate``, which runs only where :func:`_plainly_valid` can't tell the
    grammar passes. lark's walks the trees of each definition three times and more (a search per
    check, ``expansion`` subtrees scanned again inside each other)."""
    from lark.load_grammar import GrammarBuilder

    if not _plainly_valid(self):
        GrammarBuilder.validate(self)


def _plainly_valid(builder: Any) -> bool:
    """Whether a GrammarBuilder's grammar passes lark's checks on sight: no definition has template
    parameters or uses, and every symbol anywhere in it, and every ignored name, is defined (a
    superset of the symbols lark checks)."""
    from lark.grammar import Symbol
    from lark.tree import Tree

    defined = builder._definitions
    if not set(defined).issuperset(builder._ignore_names):
        return False
    for d in defined.values():
        if d.params:
            return False
        stack = [d.tree] if d.tree is not None else []
        while stack:
            for c in stack.pop().children:
                if isinstance(c, Tree):
                    if c.data == "template_usage":
                        return False
                    stack.append(c)
                elif isinstance(c, Symbol) and c.name not in defined:
                    return False
    return True


# what grammars imported from lark's bundled grammars, per process (a few entries: one per import)
_BUNDLED: dict[Any, Any] = {}
_BUNDLED_ENTRIES = 256


def load_grammar(text: str, source: str, import_paths: Sequence[Any]) -> Any:
    """``lark.load_grammar.load_grammar(text, source, import_paths, False)``'s grammar, read by
    :func:`parse` (lark's ``Grammar``; compile it with ``.compile(start, set())``)."""
    if not mirrored():
        from lark.load_grammar import load_grammar as larks

        return larks(text, source, list(import_paths), False)[0]  # type: ignore[no-untyped-call]
    builder = _builder()(False, list(import_paths))
    builder.load_grammar(text, source)
    return builder.build()
