"""The Lark front end: lark's features reach the masks, bad grammars fail with line and column.

Accept/reject expectations are checked against ``lark.Lark(text).parse`` itself where it applies.
"""

from __future__ import annotations

import os

import lark
import pytest

import grammarmask as gm
from grammarmask.errors import GrammarError
from grammarmask.frontends.lark import Lark
from grammarmask.testing import assert_accepts, assert_rejects, byte_vocabulary
from tests.support import CORPUS as SHARED_CORPUS

CORPUS = str(SHARED_CORPUS / "lark")

# (grammar, accepted, rejected): lark decides, we must agree.
FEATURES = {
    "templates": (
        '_sep{x, sep}: x (sep x)*\nstart: "[" _sep{NUMBER, ","} "]"\n%import common.NUMBER\n',
        ["[1]", "[1,2,3]"], ["[]", "[1,]"],
    ),
    "inline_and_alias": (
        '?start: a | b -> bee\n?a: "x" c\nc: "y"+\nb: "z"\n', ["xy", "xyyy", "z"], ["x", "zy"],
    ),
    "maybe_and_repeat": ('start: "a" ["b"] "c"~2..3\n', ["acc", "abccc"], ["ac", "abcccc"]),
    "ignore_comments": (
        'start: NAME+\n%import common.CNAME -> NAME\n%import common.WS\n%ignore WS\n'
        'COMMENT: /#[^\\n]*/\n%ignore COMMENT\n',
        ["a b # hi\n c", "# lead\nx"], ["", "# only"],
    ),
    "case_insensitive_and_flags": ('start: "select"i /[a-z]+/i\n%ignore " "\n', ["SeLeCt Abc"], ["selec t"]),
    "priorities_do_not_change_the_language": (
        'start: A | B\nA.2: /a+/\nB.-1: /a+b?/\n', ["aaa", "aab"], ["b"],
    ),
    "escaped_string_lookbehind": (
        "start: ESCAPED_STRING\n%import common.ESCAPED_STRING\n",
        ['"a"', '"a\\"b"', '"\\\\"', '""'], ['"a\\"', '"a"b"', '"a\nb"'],
    ),
    "unicode": ('start: /[\u00e0-\u00ff]+/ "\u2603"\n', ["\u00e0\u00e9\u2603"], ["\u2603", "a\u2603"]),
}


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_feature_matches_lark(name: str) -> None:
    text, good, bad = FEATURES[name]
    parser = lark.Lark(text, parser="earley", lexer="dynamic")
    g = Lark(text)
    vocab = byte_vocabulary()
    for s in good:
        parser.parse(s)
        assert_accepts(g, s, vocab)
    for s in bad:
        with pytest.raises(lark.exceptions.LarkError):
            parser.parse(s)
        assert_rejects(g, s, vocab)


def test_relative_imports_resolve_against_the_file() -> None:
    path = os.path.join(CORPUS, "lark-parser/test_grammars/test_relative_import.lark")
    g = Lark.from_file(path)
    parser = lark.Lark.open(path, parser="earley", lexer="dynamic")
    vocab = byte_vocabulary()
    for s in ["12 ab", "1ab"]:
        ok = True
        try:
            parser.parse(s)
        except lark.exceptions.LarkError:
            ok = False
        (assert_accepts if ok else assert_rejects)(g, s, vocab)


def test_start_option() -> None:
    g = Lark('a: "x" b\nb: "y"\n', start="b")
    assert_accepts(g, "y")
    assert_rejects(g, "xy")


def test_a_grammar_without_the_start_rule_says_so() -> None:
    for text in ('x: "a"\n', 'X: "a"\n', "%import common.WS\n"):
        with pytest.raises(GrammarError, match="no rule named 'start'"):
            Lark(text)
    with pytest.raises(GrammarError, match="no rule named 'y'"):
        Lark('x: "a"\n', start="y")


def test_groups_nested_past_the_limit_are_refused_where_they_start() -> None:
    limit = gm.Limits().grammar_nesting

    assert_accepts(Lark("start: " + "(" * limit + '"a"' + ")" * limit), "a")
    # strings, regexes and comments do not count
    assert_accepts(Lark('start: "(((" /[(]+/ // ' + "(" * 200 + "\n"), "((((")
    for depth in (limit + 1, 500, 5000):
        with pytest.raises(gm.BudgetExceeded, match="groups nested too deep") as e:
            Lark("start: " + "[" * depth + '"a"' + "]" * depth)
        assert (e.value.budget, e.value.value) == ("grammar_nesting", limit)
        assert e.value.where == f"line 1, column {8 + limit}"


# Bad grammars: (text, expected substring, line, column)
ERRORS = {
    "syntax": ('start: "a" (\n', "parenthesis", 1, 13),
    "unexpected_token": ('start: "a" ]\n', "Unexpected token", 1, 12),
    "undefined_rule": ('start: "a" foo\n', "foo", 1, 12),
    "undefined_terminal": ('start: "a"\n  | FOO\n', "FOO", 2, 5),
    "declare": ('start: "a" FOO\n%declare FOO\n', "%declare", 1, 12),
    "unproductive_start": ('start: "a" start\n', "unproductive", 1, 1),
    "empty_language": ('x: "a"\nstart: x start | start x\n', "empty", 2, 1),
    "terminal_matching_nothing": ('start: "a" X\nX: /[^\\x00-\\U0010ffff]/\n', "X matches nothing", 2, 1),
    "zero_width": ('start: A\nA: /a*/\n', "zero-width", 2, 1),
    "lookaround": ('start: A\nA: /a(?=b)/\n', "lookaround", 2, 1),
    "no_start_rule": ('a: "x"\n', "start", None, None),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_grammar_errors_say_where(name: str) -> None:
    text, needle, line, col = ERRORS[name]
    with pytest.raises(GrammarError) as info:
        Lark(text)
    err = info.value
    assert needle.lower() in str(err).lower()
    assert (err.line, err.column) == (line, col)
    if line is not None:
        assert f"line {line}, column {col}" in str(err) and "^" in str(err)


def test_non_text_input_is_a_grammar_error() -> None:
    with pytest.raises(GrammarError):
        Lark(b"start: 'a'")  # type: ignore[arg-type]
    with pytest.raises(GrammarError, match="cannot read"):
        Lark.from_file("/nonexistent/x.lark")


def _corpus_files() -> list[str]:
    out = []
    for root, _, files in os.walk(CORPUS):
        out += [os.path.join(root, f) for f in files if f.endswith(".lark")]
    return sorted(out)


def test_every_corpus_grammar_compiles_or_is_refused_clearly() -> None:
    vocab = byte_vocabulary()
    compiled = refused = 0
    for path in _corpus_files():
        try:
            c = Lark.from_file(path).compile(vocab)
        except GrammarError as e:
            refused += 1
            assert str(e).strip(), path
            continue
        compiled += 1
        st = c.initial_state()
        assert c.state_mask_words(st).any() or c.is_accepting_state(st), path
    assert compiled >= 30 and compiled + refused == len(_corpus_files())


@pytest.mark.parametrize(
    ("grammar", "examples"),
    [
        ("syncode/sql.lark", "syncode/examples/sql_spider_gold_first25.tsv"),
        ("lark-parser/example_grammars/composition/storage.lark",
         "lark-parser/examples/composition/combined_csv_and_json.txt"),
    ],
)
def test_corpus_examples_are_accepted(grammar: str, examples: str) -> None:
    g = Lark.from_file(os.path.join(CORPUS, grammar))
    with open(os.path.join(CORPUS, examples), encoding="utf-8") as f:
        data = f.read()
    docs = [line.split("\t")[0] for line in data.splitlines()] if examples.endswith(".tsv") else [data]
    vocab = byte_vocabulary()
    for doc in docs:
        assert_accepts(g, doc, vocab)


def _syncode_programs(language: str) -> list[str]:
    import json

    ex = os.path.join(CORPUS, "syncode/examples")
    if language == "java":
        java = os.path.join(ex, "java_mbjp_release_v1.2_first5_with_solution.jsonl")
        with open(java, encoding="utf-8") as f:
            return [r["prompt"] + r["canonical_solution"] for r in map(json.loads, f)]
    with open(os.path.join(ex, "go_mbgp_release_v1.1_tasks5.jsonl"), encoding="utf-8") as f:
        prompts = {r["task_id"]: r["prompt"] for r in map(json.loads, f)}
    with open(os.path.join(ex, "go_mbgp_samples_completions5.jsonl"), encoding="utf-8") as f:
        return [prompts[r["task_id"]] + r["completion"] + "\n" for r in map(json.loads, f)]


@pytest.mark.parametrize(
    "language", ["go", pytest.param("java", marks=pytest.mark.slow)]
)
def test_syncode_programs_agree_with_lark(language: str) -> None:
    path = os.path.join(CORPUS, f"syncode/{language}.lark")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    parser = lark.Lark(text, parser="earley", lexer="dynamic")
    c = Lark(text).compile(byte_vocabulary())
    for prog in _syncode_programs(language):
        parser.parse(prog)  # the reference accepts it ...
        state = c.feed(c.initial_state(), prog.encode())
        assert state and c.is_accepting_state(state)  # ... and so do we
