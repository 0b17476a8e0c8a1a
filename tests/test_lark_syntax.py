"""grammarmask's own reading of Lark grammar text (frontends/lark_syntax.py) and of the rules lark's
loader builds (frontends/lark_rules.py), held to lark's: the same parse trees, the same refusals,
and compiled grammars with the same masks as the ones lark's own compile gives."""

from __future__ import annotations

import glob
import random
from pathlib import Path
from typing import Any

import lark
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from lark.load_grammar import TERMINALS, _get_parser, _parse_grammar

import grammarmask as gm
from grammarmask.frontends import lark_rules, lark_syntax
from grammarmask.frontends.lark import lark_to_cfg
from grammarmask.mask import Mask
from grammarmask.native.cfg import NativeCompiledCfg

from .support import CORPUS, made_once_per_installation

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    glob.glob(str(CORPUS / "**" / "*.lark"), recursive=True)
    + glob.glob(str(ROOT / "grammars" / "*.lark"))
    + glob.glob(str(Path(lark.__file__).parent / "grammars" / "*.lark"))
)


def shape(x: Any) -> Any:
    """A tree with every token's type, text and position (``repr`` leaves positions out)."""
    if isinstance(x, lark.Tree):
        return (x.data, [shape(c) for c in x.children])
    if isinstance(x, lark.Token):
        return (x.type, str(x), x.start_pos, x.line, x.column, x.end_line, x.end_column, x.end_pos)
    return repr(x)


def lark_tree(text: str) -> Any:
    try:
        return _parse_grammar(text, "<test>")
    except Exception:  # lark refuses it (and may word the refusal with a TypeError in 1.3.1)
        return None


def test_the_grammar_files_are_there() -> None:
    assert sum(str(CORPUS) in f for f in FILES) >= 40  # the shared corpus's .lark files
    assert len(FILES) >= 50


def test_the_tokens_are_lark_s_in_lark_s_order() -> None:
    lexer = _get_parser().lexer
    assert [t.name for t in lexer.terminals] == list(lark_syntax._ORDER)
    assert set(lark_syntax._ORDER) == set(TERMINALS)
    assert set(lexer.ignore_types) == lark_syntax._SKIPPED


@pytest.mark.parametrize("path", FILES, ids=lambda p: Path(p).name)
def test_every_grammar_file_reads_to_lark_s_tree(path: str) -> None:
    text = Path(path).read_text()
    ours = lark_syntax.parse(text)
    assert ours is not None, "a grammar lark reads"
    assert shape(ours) == shape(_parse_grammar(text, path))


SNIPPETS = [
    'start: a\n', '?start: a "x"i -> b\n  | [B] /r/x ~ 2..3 c*\n', 'B.2: "a".."z"\n', "a.-1: b\n",
    "%import common.WS\n", "%import common (WS, INT)\n", "%import .x.y -> z\n", "%ignore WS | /x/\n",
    "%declare A b C\n", "%override a: b\n", "%extend A: \"x\"\n", "t{x, y}: x y\n", "a: t{b, \"c\"}\n",
    "a: (b | c)+ [d e]\n", "a: b // note\n  | c # other\n", "a: b \\\n c\n", "!a: \"x\"\n", "_a: b\n",
    "a: b??\n", "a: (\n", "a: )\n", "a\n", "Aa:\n", "a: -> \"a\"\n", "a::\n", "a: b:\n", "a:+\n",
    "A.B\n", '"a"\n', '%import "a"\n', "%ignore %import\n", "a: b\n()\n", "", "\n\n", "// only\n",
    "a: \"x\n", "a: /x\ny/\n", "a: /x\ny/x\n", "a: b ~ 1..\n", "a: b{}\n", "%import ..a\n",
]


@pytest.mark.parametrize("text", SNIPPETS)
def test_snippets_read_as_lark_reads_them(text: str) -> None:
    ours, want = lark_syntax.parse(text), lark_tree(text)
    if ours is None:
        assert want is None, "a text lark reads and this reader does not"
    else:
        assert want is not None and shape(ours) == shape(want)


PIECES = st.sampled_from([
    "a", "b", "_c", "A", "B", "_C", ":", "|", "\n", "\n  |", "(", ")", "[", "]", "{", "}", ",", ".", "..",
    "?", "*", "+", "~", "!", "->", " ", '"x"', '"y"i', "/z/", "/w/i", "2", "-1", "%import", "%ignore",
    "%declare", "%override", "%extend", "// c\n", "#c\n", "\\\n", "common", "WS",
])  # fmt: skip


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(PIECES, max_size=14))
def test_any_text_reads_as_lark_reads_it_or_goes_to_lark(pieces: list[str]) -> None:
    text = "".join(pieces)
    ours = lark_syntax.parse(text)
    if ours is not None:
        want = lark_tree(text)
        assert want is not None and shape(ours) == shape(want), text


CHARS = st.sampled_from([
    "a", "B", "_", "/", "\\", '"', "\n", "\r", " ", "\t", "|", "?", "!", ".", "-", ">", "+", "*", "1", "#",
    "%import", "%ignore", "i", "x", "~", ":", ",", "(", ")", "[", "]", "{", "}", "'", "//", "\x0b", "\x1c",
    "\u00e9", "\u00a0", "\u2028", "\u0661",
])  # fmt: skip


def token_rows(tokens: list[Any]) -> list[Any]:
    return [shape(t) for t in tokens]


@settings(max_examples=3000, deadline=None)
@given(st.lists(CHARS, max_size=16))
def test_native_tokens_are_the_scanner_s(pieces: list[str]) -> None:
    """The extension cuts text into lark's tokens as the scanner of lark's own patterns does (kinds,
    texts, positions), or leaves it to the scanner: text where a non-ASCII character may be a
    space or a digit, and text no token matches."""
    text = "".join(pieces)
    try:
        want = token_rows(lark_syntax._scanned_tokens(text))
    except lark_syntax._Unread:
        want = None
    got = lark_syntax._native_tokens(text)
    if got is None:
        assert want is None or any(not c.isascii() for c in text)
    else:
        assert want == token_rows(lark_syntax._tokens(text))


@pytest.mark.parametrize("path", FILES, ids=lambda p: Path(p).name)
def test_grammar_files_are_cut_by_the_extension(path: str) -> None:
    text = Path(path).read_text() + "\n"
    rows = lark_syntax._native_tokens(text)
    assert (rows is not None) or not text.isascii()
    assert token_rows(lark_syntax._tokens(text)) == token_rows(lark_syntax._scanned_tokens(text))


# --- the rules: lark_rules against lark's compile -----------------------------------------------------

WORDS = [b"", *(bytes([c]) for c in b"abcxyz AZ09,;()"), b"ab", b"ba", b"abc", b"xy", b"  ", b"a b"]
VOCAB = gm.Vocabulary.from_tokens(WORDS, eos_token_id=0)


def both_ways(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The Cfg through lark_rules and through lark's compile (or the GrammarError each raises)."""

    def compiled(fast: bool) -> Any:
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(lark_rules, "compile_rules", lambda *a: None)
            try:
                return lark_to_cfg(text)
            except gm.GrammarError as e:
                return e

    return compiled(True), compiled(False)


def same_language(a: Any, b: Any, seed: int, steps: int = 30) -> None:
    """Equal masks along random walks (and the same refusal, if any)."""
    if isinstance(a, gm.GrammarError) or isinstance(b, gm.GrammarError):
        assert type(a) is type(b) and str(a) == str(b)
        return
    na, nb = NativeCompiledCfg(a, VOCAB), NativeCompiledCfg(b, VOCAB)
    rng = random.Random(seed)
    for _ in range(4):
        sa, sb = na.initial_state(), nb.initial_state()
        for _ in range(steps):
            wa, wb = na.state_mask_words(sa), nb.state_mask_words(sb)
            assert np.array_equal(wa, wb)
            assert na.is_accepting_state(sa) == nb.is_accepting_state(sb)
            ids = [int(t) for t in Mask(wa.copy(), VOCAB.size).token_ids()]
            if not ids:
                break
            t = rng.choice(ids)
            sa, sb = na.advance_state(sa, t), nb.advance_state(sb, t)


@pytest.mark.parametrize("name", ["json.lark", "arithmetic.lark", "sql.lark", "csv.lark", "python_expr.lark"])
def test_shipped_grammars_have_lark_s_language(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = both_ways((ROOT / "grammars" / name).read_text(), monkeypatch)
    same_language(fast, slow, seed=len(name))


REFUSED = {  # lark's compile refuses these; lark_rules hands them to it
    "[x] twice": 'start: [b] ~ 2\nb: "b"\n',
    "[x] beside x": 'start: [b] c | c\nb: "b"\nc: "c"\n',
    "two aliases": 'start: b -> x | b -> y\nb: "b"\n',
    "alias on _rule": 'start: _r\n_r: "a" -> x\n',
    "empty terminal": "start: A\nA: \n",
    "empty literal": 'start: ""\n',
    "bad range": 'start: "a" ~ 3..2\n',
    "bad char range": 'start: "ab".."z"\n',
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_lark_s_refusals_are_lark_s(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = both_ways(REFUSED[name], monkeypatch)
    assert isinstance(slow, gm.GrammarError)
    assert isinstance(fast, gm.GrammarError) and str(fast) == str(slow)


def test_what_lark_takes_is_taken() -> None:
    for text in ['start: "x"? "x"?\n', 'start: [b] | \nb: "b"\n', 'start: ["b"] ~ 2\n',
                 'start: b* | b+\nb: "b"\n', 'start: t{"a"}\nt{x}: x x\n']:
        lark.Lark(text)  # lark takes it
        lark_to_cfg(text)


TERMS = ['"a"', '"b"', '"ab"', '"x"i', "/a+/", "/[ab]c?/", '"a".."c"', "A", "B"]
ITEMS = TERMS + ["r1", "r2", "_r3"]


@st.composite
def grammars(draw: st.DrawFn) -> str:
    """Small Lark grammars with every EBNF form, aliases, modifiers, terminals built of terminals."""

    def expansion(depth: int) -> str:
        out = []
        for _ in range(draw(st.integers(0 if depth else 1, 3))):
            form = draw(st.integers(0, 6 if depth < 2 else 1))
            item = draw(st.sampled_from(ITEMS))
            out.append(item if form <= 1 else
                       f"{item}{draw(st.sampled_from('?*+'))}" if form == 2 else
                       f"[{expansions(depth + 1)}]" if form == 3 else
                       f"({expansions(depth + 1)})" if form == 4 else
                       f"{item} ~ {draw(st.integers(0, 2))}" if form == 5 else
                       f"{item} ~ {draw(st.integers(0, 1))}..{draw(st.integers(1, 3))}")
        return " ".join(out)

    def expansions(depth: int) -> str:
        alts = [expansion(depth) for _ in range(draw(st.integers(1, 3)))]
        if depth == 0 and draw(st.booleans()):
            alts[0] += " -> named"
        return " | ".join(alts)

    lines = [f"{draw(st.sampled_from(['', '?', '!']))}start: {expansions(0)}"]
    inlined = expansion(1) or '"z"'
    lines += [f"{draw(st.sampled_from(['', '?']))}r1: {expansions(0)}", f"r2: {expansions(0)}",
              f"_r3: {inlined}"]
    lines += ['A: "a" | "b" B', "B: /[xy]/ ~ 1..2"]
    if draw(st.booleans()):
        lines.append('%ignore " "')
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=grammars(), seed=st.integers(0, 2**16))
def test_generated_grammars_have_lark_s_language(text: str, seed: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        fast, slow = both_ways(text, mp)
    try:
        same_language(fast, slow, seed, steps=12)
    except gm.BudgetExceeded as e:  # 'r1* "a"' with r1: "a" | ...: more splits than cfg_configs allows
        assume(e.budget in ("cfg_configs", "earley_items_per_set", "cfg_walk_visits"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: Path(p).name)
def test_terminals_are_lark_s_regexes(path: str) -> None:
    """Every named terminal of a grammar file has the regex text lark's compile gives it (anonymous
    ones may be numbered in another order); a file lark_rules leaves to lark has templates or is
    one lark's compile refuses."""
    text = Path(path).read_text()
    grammar = lark_syntax.load_grammar(text, path, ())  # relative imports resolve beside the file
    made: dict[str, str | None] = {}
    fast = lark_rules.compile_rules(grammar, "start", lambda n, rx: made.setdefault(n, rx))  # type: ignore[arg-type, func-returns-value]
    if fast is None:
        if "{" not in text:  # not templates: lark refuses it
            with pytest.raises(lark.exceptions.GrammarError):
                grammar.compile(["start"], set())
        return
    terminals, _rules, _ignore = grammar.compile(["start"], set())
    want = {t.name: t.pattern.to_regexp() for t in terminals}
    named = {n: rx for n, rx in made.items() if rx is not None and not n.startswith("__ANON")}
    assert named == {n: rx for n, rx in want.items() if n in named}


_LITERAL_CHARS = st.sampled_from([chr(c) for c in range(32, 127)] + ["\n", "\t", "\u00e9"])


@given(kind=st.sampled_from(["STRING", "REGEXP"]), body=st.text(_LITERAL_CHARS, max_size=5),
       flags=st.text(st.sampled_from("imslux"), max_size=2))
@settings(max_examples=1500, deadline=None)
def test_literals_are_lark_s_patterns(kind: str, body: str, flags: str) -> None:
    """A "string" or /regex/ literal is the pattern lark's ``_literal_to_pattern`` makes of it (value,
    flags, raw text, class), or refused as lark refuses it: plain ones are taken without lark's
    escape evaluation, the others through it."""
    from lark.lexer import Token
    from lark.load_grammar import _literal_to_pattern

    q = '"' if kind == "STRING" else "/"
    text = q + body + q + flags
    try:
        want = _literal_to_pattern(Token(kind, text))
    except Exception as e:  # noqa: BLE001 - the refusal is compared by its class
        with pytest.raises(type(e)):
            lark_rules._literal_of.__wrapped__(kind, text)
        return
    got = lark_rules._literal_of.__wrapped__(kind, text)
    assert (type(got), got.value, got.flags, got.raw) == (type(want), want.value, want.flags, want.raw)


def test_another_lark_release_goes_through_lark_s_own_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lark_syntax.mirrored()  # the pinned lark is one of the mirrored releases
    text = (ROOT / "grammars" / "json.lark").read_text()
    want = lark_to_cfg(text)
    monkeypatch.setattr(lark_syntax, "mirrored", lambda: False)
    monkeypatch.setattr(lark_syntax, "parse", lambda text: pytest.fail("lark's parser should read it"))
    monkeypatch.setattr(lark_rules, "_Rules", lambda *a: pytest.fail("lark's compile should run"))
    same_language(lark_to_cfg(text), want, seed=1)


def test_imports_from_lark_s_bundled_grammars_are_kept_and_copied() -> None:
    text = '%import common.WS\n%import common.INT -> N\n%ignore WS\nstart: N ("," N)*\n'
    first, again = lark_to_cfg(text), lark_to_cfg(text)  # the second from what the first kept
    same_language(again, first, seed=3)
    with pytest.raises(lark.exceptions.GrammarError) as e:
        lark.Lark('%import common.WS\n%import python.COMMENT -> WS\nstart: WS\n')
    with pytest.raises(gm.GrammarError) as ours:
        lark_to_cfg('%import common.WS\n%import python.COMMENT -> WS\nstart: WS\n')
    assert str(e.value) in str(ours.value)


def test_imports_from_common_lark_define_what_lark_s_own_import_defines() -> None:
    # the bundled import reads only the definitions the imported names use: the grammar lark
    # builds from it (every terminal it keeps, with its pattern) is the one lark's loader builds
    import pkgutil

    from lark.load_grammar import load_grammar as larks

    common = pkgutil.get_data("lark", "grammars/common.lark").decode()
    names = sorted({line.split(":")[0].split(".")[0].strip() for line in common.splitlines()
                    if line[:1].isupper() or line[:1] == "_"})
    assert len(names) > 20
    rng = random.Random(5)
    imports = [[n] for n in names] + [rng.sample(names, 3) for _ in range(20)]
    for picked in imports:
        lines = "".join(f"%import common.{n} -> A{i}\n" if i % 2 else f"%import common.{n}\n"
                        for i, n in enumerate(picked))
        uses = " ".join(f"A{i}" if i % 2 else n for i, n in enumerate(picked))
        text = f"start: {uses}\n{lines}"
        ours = lark_syntax.load_grammar(text, "<string>", [])
        want = larks(text, "<string>", [], False)[0]
        assert shape_of(ours.term_defs) == shape_of(want.term_defs), picked
        assert repr(ours.rule_defs) == repr(want.rule_defs)


def test_common_lark_is_read_once_per_installation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree of lark's common.lark is kept in the disk cache (keyed by lark's version and the
    text) and read back as it was read, tokens' positions and all, without reading the text again;
    an import is handed the definitions it names and those they use."""
    import pkgutil

    common = pkgutil.get_data("lark", "grammars/common.lark").decode()
    read = lark_syntax._read_bundled(common)
    assert read is not None and len(read[1]) > 20
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(tmp_path))
    made = lark_syntax._bundled_tree.__wrapped__(common)
    assert len(list(tmp_path.glob("lark-bundled-*"))) == 1
    monkeypatch.setattr(lark_syntax, "_read_bundled", lambda text: pytest.fail("read again"))
    kept = lark_syntax._bundled_tree.__wrapped__(common)
    every = frozenset(read[1])
    for bundled in (made, kept):
        tree = bundled.tree(every)
        assert shape(tree) == shape(read[0]) and bundled.uses == read[1]
        assert [type(t) for t in tree.iter_subtrees()] == [type(t) for t in read[0].iter_subtrees()]
    # asked for NUMBER: NUMBER and what it uses, in the file's order
    number = kept.tree(frozenset({"NUMBER"}))
    assert [s.children[0].value for s in number.children] == [
        "DIGIT", "INT", "SIGNED_INT", "DECIMAL", "_EXP", "FLOAT", "NUMBER"]


def test_common_lark_s_terminal_dfas_are_made_once_per_installation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DFAs of common.lark's terminals are kept in the disk cache and, when a grammar imports
    from the file, put where regex_to_dfa finds them: equal to what it makes of each pattern, so a
    grammar using NUMBER and ESCAPED_STRING builds neither. With the disk cache off nothing is
    made."""
    from grammarmask.automata import regex as rx_module
    from grammarmask.cache import automata
    from grammarmask.frontends import lark_bundled

    made = lark_bundled._terminal_dfas(lark_bundled._common_text())
    assert len(made) >= 20
    for pattern, dfa in made.items():
        automata().clear()
        again = rx_module.regex_to_dfa(pattern)
        assert np.array_equal(dfa.transitions, again.transitions) and dfa.start == again.start
    assert made_once_per_installation(lark_bundled, "lark-bundled-dfas", tmp_path, monkeypatch) >= 20
    automata().clear()
    lark_bundled._keep.cache_clear()
    monkeypatch.setattr(lark_bundled, "_terminal_dfas", lambda text: pytest.fail("made again"))
    lark_syntax._BUNDLED.clear()
    lark_rules._WIDTHS.clear()  # read back with the DFAs: lark's widths of NUMBER's parts
    monkeypatch.setattr(lark.utils, "get_regexp_width", lambda p: pytest.fail(f"width of {p} made again"))
    built: list[str] = []
    build = rx_module._build
    monkeypatch.setattr(rx_module, "_build", lambda p, *a: built.append(p) or build(p, *a))
    text = 'start: NUMBER | ESCAPED_STRING | "x"\n%import common.NUMBER\n%import common.ESCAPED_STRING\n'
    compiled = gm.Lark(text).compile(VOCAB)
    assert built == []  # the grammar's own literal "x" is made apart, never kept (UNKEPT_LITERAL_CHARS)
    m = compiled.matcher()
    assert m.try_advance(WORDS.index(b"0")) and m.try_advance(WORDS.index(b"9")) and m.is_accepting()


def shape_of(defs: Any) -> Any:
    """Definitions as (name, shape of the tree, priority), trees with their tokens' positions."""
    return [(str(name), shape(tree), priority) for name, (tree, priority) in defs]


UNDEFINED = {  # lark's GrammarBuilder.validate refuses these; the fast check must hand them to it
    "rule": "start: b\n",
    "terminal": "start: A\n",
    "terminal in a terminal": 'start: A\nA: "a" B\n',
    "in a template": 'start: t{"a"}\nt{x}: x y\n',
    "template": 'start: t{"a"}\n',
    "template arity": 'start: t{"a", "b"}\nt{x}: x\n',
    "parameter is a rule": 'start: t{"a"}\nt{b}: b\nb: "b"\n',
    "parameter twice": 'start: t{"a", "b"}\nt{x, x}: x\n',
    "ignored": 'start: "a"\n%ignore WS\n',
    # lark's resolve_term_references refuses these; the one-pass resolution hands them to it
    "recursive terminal": 'start: A\nA: "a" A?\n',
    "terminals using each other": 'start: A\nA: "a" B\nB: "b" | A\n',
    "rule in a terminal": 'start: A\nA: "a" b\nb: "x"\n',
}


@pytest.mark.parametrize("name", sorted(UNDEFINED))
def test_what_lark_s_checks_refuse_is_refused_in_lark_s_words(name: str) -> None:
    from lark.load_grammar import load_grammar as larks

    text = UNDEFINED[name]
    with pytest.raises(lark.exceptions.GrammarError) as want:
        larks(text, "<string>", [], False)
    with pytest.raises(lark.exceptions.GrammarError) as ours:
        lark_syntax.load_grammar(text, "<string>", [])
    assert str(ours.value) == str(want.value)


def _shape(x: Any, seen: dict[int, int]) -> Any:
    """A lark tree's structure, each object numbered by first appearance (so sharing shows)."""
    from lark.grammar import Symbol
    from lark.lexer import Token
    from lark.tree import Tree

    first = seen.setdefault(id(x), len(seen))
    if isinstance(x, Tree):
        return ("tree", first, x.data, [_shape(c, seen) for c in x.children])
    if isinstance(x, Token):
        return ("token", first, x.type, str(x), x.start_pos, x.line, x.column)
    if isinstance(x, Symbol):
        return ("symbol", first, type(x).__name__, x.name, getattr(x, "filter_out", None))
    return ("other", first, repr(x))


def test_an_imported_definition_is_mangled_as_lark_mangles_it() -> None:
    """An imported definition's tree is copied with its symbols renamed as lark's own
    ``_mangle_definition_tree`` does it (deepcopy, then a rename in place), on every definition of
    common.lark, sharing no tree with the original."""
    from lark.load_grammar import _mangle_definition_tree
    from lark.tree import Tree

    tree = lark_syntax.parse(lark_bundled_text())
    assert tree is not None
    renamed = 0
    for statement in tree.children:
        exp = statement.children[-1]
        for mangle in (lambda n: "common__" + n, None):
            mine, theirs = lark_syntax._mangled(exp, mangle), _mangle_definition_tree(exp, mangle)
            assert _shape(mine, {}) == _shape(theirs, {})
            if mangle is not None:
                originals = {id(t) for t in exp.iter_subtrees()}
                assert all(id(t) not in originals for t in mine.iter_subtrees())
                renamed += "common__" in str(_shape(mine, {}))
            else:
                assert mine is exp
        assert isinstance(exp, Tree)
    assert renamed >= 10  # (the terminals that use others)


def test_an_imported_definition_is_copied_as_deepcopy_copies_it() -> None:
    """What a grammar takes from common.lark is handed out as a copy written by hand: equal to
    ``copy.deepcopy``'s, sharing no object with the kept definition, and a subtree the kept one
    uses twice (its terminals' references resolved) used twice in the copy too."""
    import copy

    from lark.tree import Tree

    names = ", ".join(n for n in lark_syntax._read_bundled(lark_bundled_text())[1] if not n.startswith("_"))
    lark_syntax._BUNDLED.clear()
    gm.Lark(f"start: NUMBER\n%import common ({names})\n")
    kept = [d for defs, _used in lark_syntax._BUNDLED.values() for d in defs.values()]
    assert len(kept) >= 20

    shared = 0
    for d in kept:
        mine, theirs = lark_syntax._copied(d), copy.deepcopy(d)
        assert type(mine) is type(theirs) and mine.is_term == theirs.is_term
        assert mine.params == theirs.params and mine.options == theirs.options
        assert _shape(mine.tree, {}) == _shape(theirs.tree, {})
        originals = set()
        stack = [d.tree]
        while stack:
            t = stack.pop()
            originals.add(id(t))
            stack.extend(t.children if isinstance(t, Tree) else ())
        copies: list[Any] = [mine.tree]
        count: dict[int, int] = {}
        while copies:
            t = copies.pop()
            assert id(t) not in originals
            count[id(t)] = count.get(id(t), 0) + 1
            copies.extend(t.children if isinstance(t, Tree) else ())
        shared += sum(n > 1 for n in count.values())
    assert shared > 0  # (resolved terminals: the same subtree in several places)


def lark_bundled_text() -> str:
    from grammarmask.frontends import lark_bundled

    return lark_bundled._common_text()
