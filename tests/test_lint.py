"""Grammar lint: table-driven findings with positions, and unreachable rules checked against lark's own
"Unused rule" log over the shipped grammars and the third-party corpus."""

from __future__ import annotations

import glob
import logging
import os
import re

import lark
import pytest
from lark import logger as lark_logger

from grammarmask.errors import GrammarError
from grammarmask.lint import Finding, lint_gbnf, lint_lark
from tests.support import CORPUS as SHARED_CORPUS

ROOT = os.path.join(os.path.dirname(__file__), "..")
CORPUS = str(SHARED_CORPUS)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def codes(findings: list[Finding]) -> list[tuple[str, str, int | None, int | None]]:
    return [(f.code, f.name, f.line, f.column) for f in findings]


LARK_CASES = [
    ('start: "a"\n', []),
    (
        'start: "a" | loop\nloop: "b" loop\nunused: "c"\n',
        [("unproductive-rule", "loop", 2, 1), ("unreachable-rule", "unused", 3, 1)],
    ),
    (
        'start: x\nx: "(" x ")"\n',
        [("empty-language", "start", 1, 1), ("unproductive-rule", "x", 2, 1)],
    ),
    (
        'start: "a" B?\nB: /q[^\\x00-\\U0010ffff]/\nC: "k"\n',
        [("empty-terminal", "B", 2, 1), ("unused-terminal", "C", 3, 1)],
    ),
    (
        "start: WORD\n  | NUMBER\n%import common.WORD\n%import common.NUMBER\n%import common.WS\n",
        [("unused-terminal", "WS", 5, 16)],
    ),
    (
        'start: item+\n?item.2: "x" | deep\ndeep: _two\n_two: deep deep\n',
        [("unproductive-rule", "deep", 3, 1), ("unproductive-rule", "_two", 4, 1)],
    ),  # fmt: skip
    ('start: A\nA: /a(?=b)/ "b"\n', [("unsupported-terminal", "A", 2, 1)]),
    # DIGIT is used inside INT (lark inlines it); HEX only inside HEXNUM, which nothing uses
    (
        'start: INT\nDIGIT: "0".."9"\nINT: DIGIT+ // "HEX"\nHEX: "a".."f"\nHEXNUM: HEX+\n',
        [("unused-terminal", "HEX", 4, 1), ("unused-terminal", "HEXNUM", 5, 1)],
    ),
    # an undefined rule or terminal is a finding (where it is used), and the rest is still linted
    (
        'start: "a" FOO | b\nb: "c" zed\nz: "q"\n',
        [("empty-language", "start", 1, 1), ("undefined-rule", "FOO", 1, 12),
         ("unproductive-rule", "b", 2, 1), ("undefined-rule", "zed", 2, 8), ("unreachable-rule", "z", 3, 1)],
    ),  # fmt: skip
]


@pytest.mark.parametrize(("text", "want"), LARK_CASES)
def test_lark_findings(text: str, want: list[tuple[str, str, int, int]]) -> None:
    assert codes(lint_lark(text)) == want


GBNF_CASES = [
    ('root ::= "a"\n', []),
    (
        'root ::= a | "x"\na ::= "y" a\nb ::= [^\\x00-\\U0010FFFF]\n',
        [("unproductive-rule", "a", 2, 1), ("empty-terminal", "b", 3, 1), ("unreachable-rule", "b", 3, 1)],
    ),
    ('root ::= a\na ::= "q" a\n', [("empty-language", "root", 1, 1), ("unproductive-rule", "a", 2, 1)]),
    ('root ::= ("x" a)*\na ::= a "y"\n', [("unproductive-rule", "a", 2, 1)]),
]


@pytest.mark.parametrize(("text", "want"), GBNF_CASES)
def test_gbnf_findings(text: str, want: list[tuple[str, str, int, int]]) -> None:
    assert codes(lint_gbnf(text)) == want


def test_bad_text_is_a_grammar_error_with_position() -> None:
    with pytest.raises(GrammarError, match="no rule named 'start'"):
        lint_lark('x: "a"\n')
    with pytest.raises(GrammarError) as e:
        lint_lark('start: "a" (\n')
    assert (e.value.line, e.value.column) == (1, 13)
    with pytest.raises(GrammarError) as e2:
        lint_gbnf("root ::= b\n")
    assert e2.value.line == 1 and e2.value.column == 10
    with pytest.raises(GrammarError):
        lint_gbnf('a ::= "x"\n')
    with pytest.raises(GrammarError):
        lint_lark(b"start: 'a'")  # type: ignore[arg-type]
    assert str(lint_lark('start: "a"\nz: "b"')[0]).startswith("line 2, column 1: warning: rule 'z'")


def _lark_unused_rules(text: str, path: str) -> set[str]:
    """lark's own verdict: the rules it logs as "Unused rule" when compiling the grammar."""
    records: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg == "Unused rule: %s":
                records.append(str(record.args[0].origin.name))  # type: ignore[index]

    handler = Grab()
    old = lark_logger.level
    lark_logger.addHandler(handler)
    lark_logger.setLevel(logging.DEBUG)
    try:
        lark.Lark(text, import_paths=[os.path.dirname(path)])
    finally:
        lark_logger.removeHandler(handler)
        lark_logger.setLevel(old)
    return {r for r in records if not r.startswith("_") and "__" not in r}


LARK_FILES = sorted(glob.glob(os.path.join(ROOT, "grammars", "*.lark"))) + sorted(
    glob.glob(os.path.join(CORPUS, "lark", "syncode", "*.lark"))
    + glob.glob(os.path.join(CORPUS, "lark", "llguidance", "lark.lark"))
    + glob.glob(
        os.path.join(CORPUS, "lark", "lark-parser", "example_grammars", "**", "*.lark"), recursive=True
    )
)
# grammars meant only to be imported have no start rule
LARK_FILES = [p for p in LARK_FILES if re.search(r"^[?!]?start\b", _read(p), re.M)]


@pytest.mark.parametrize("path", LARK_FILES, ids=lambda p: os.path.relpath(p, CORPUS) if CORPUS in p else p)
def test_unreachable_rules_agree_with_lark(path: str) -> None:
    text = _read(path)
    found = lint_lark(text, import_paths=[os.path.dirname(path)])
    ours = {f.name for f in found if f.code == "unreachable-rule"}
    assert ours == _lark_unused_rules(text, path)
    for f in found:
        if f.code in ("unreachable-rule", "unproductive-rule"):
            assert f.line is not None and text.splitlines()[f.line - 1][f.column - 1 :].lstrip(
                "?!"
            ).startswith(f.name)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "grammars", "*"))))
def test_shipped_grammars_are_clean(path: str) -> None:
    text = _read(path)
    found = lint_gbnf(text) if path.endswith(".gbnf") else lint_lark(text)
    assert [str(f) for f in found if f.severity != "note"] == []


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(CORPUS, "gbnf", "**", "*.gbnf"), recursive=True))
)
def test_corpus_gbnf_lints(path: str) -> None:
    found = lint_gbnf(_read(path))
    assert not [f for f in found if f.severity == "error"]
