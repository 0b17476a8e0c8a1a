"""Inputs found by the front-end fuzzer (benchmarks/fuzz_frontends.py, issues 15 and 19).

Each input once raised an undocumented exception or gave an unsound document; each now ends in a
documented error or a correct result. The harness's own checks (a finished document against the
reference) are run on each through ``run_one``, so a regression shows the same way the fuzzer saw it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

import grammarmask as gm
from grammarmask.frontends.json_schema import SchemaWarning

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from fuzz_frontends import EXTRA_TOKENS, run_one  # noqa: E402 - benchmarks/ is not a package

from grammarmask.testing import byte_vocabulary  # noqa: E402

VOCAB = byte_vocabulary(EXTRA_TOKENS)


# ---- Lark: %import of a grammar file lark cannot load -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "file"),
    [
        # a relative import of a file that is not there (lark: FileNotFoundError)
        ("start: N WORD\n\n%import .grammars.test.NUMBER -> N\n%import common.WORD\n", 3,
         "grammars/test.lark"),
        # an absolute import found nowhere lark looks
        ("start: x\n%import common.WORD\n%import nothere.X -> x\n", 3, "nothere.lark"),
    ],
)
def test_an_import_lark_cannot_load_is_a_grammar_error_at_its_line(text: str, line: int, file: str) -> None:
    with pytest.raises(gm.GrammarError, match="%import cannot load a grammar file") as e:
        gm.Lark(text)
    assert e.value.line == line and file in str(e.value)
    assert run_one("lark", text.encode(), VOCAB) == "refused: GrammarError"


# lark opens the file it found there to raise, and never closes it (lark's leak, not ours)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_import_of_a_file_outside_lark_search_path_is_a_grammar_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lark finds grammars/json.lark relative to the working directory, but does not search there: it
    # then fails an assert, which must not reach the user
    (tmp_path / "grammars").mkdir()
    (tmp_path / "grammars" / "json.lark").write_text("value: \"1\"\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(gm.GrammarError, match="%import cannot load") as e:
        gm.Lark("start: x\n%import grammars.json.value -> x\n")
    assert e.value.line == 2


# ---- JSON Schema: a pattern with a long minLength ------------------------------------------------------


@pytest.mark.parametrize("n", [1000, 10000, 2**31 - 1])
def test_a_pattern_with_a_long_min_length_is_refused_at_once(n: int) -> None:
    # the length automaton alone needs about 20 states a character (escapes, UTF-8), over the product
    # budget (20,000) from 1,000 characters on; it was built (and minimised, a round per state)
    # before being refused: over 30 s at 10,000
    schema = {"type": "string", "pattern": "^([a-z][0-9])+$", "minLength": n}
    t = time.perf_counter()
    with pytest.raises(gm.UnsupportedSchemaError, match="product automaton too large") as e:
        gm.JsonSchema(schema).compile(VOCAB)
    assert (e.value.keyword, e.value.pointer) == ("minLength", "")
    with pytest.warns(SchemaWarning, match="minLength"):  # not strict: the pattern alone is kept
        compiled = gm.JsonSchema(schema, strict=False).compile(VOCAB)
    assert time.perf_counter() - t < 10
    m = compiled.matcher()
    assert all(m.try_advance(b + 1) for b in b'"a1b2"') and m.is_accepting()


def test_a_pattern_with_a_short_min_length_is_still_exact() -> None:
    compiled = gm.JsonSchema({"type": "string", "pattern": "^([a-z][0-9])+$", "minLength": 6}).compile(VOCAB)
    for text, ok in [('"a1b2c3"', True), ('"a1b2"', False), ('"a1b2c"', False)]:
        m = compiled.matcher()
        assert (all(m.try_advance(b + 1) for b in text.encode()) and m.is_accepting()) is ok, text


@pytest.mark.parametrize(
    "schema", [{"maxLength": 20e2}, {"type": "string", "minLength": 3.0, "maxLength": 300.0}]
)
def test_integral_float_lengths_take_the_long_string_path(schema: dict[str, float]) -> None:
    # maxLength 2000.0 (JSON 20e2) missed the chunked long-string form that 2000 takes, and its
    # {0,2000} terminal was refused after ~200 MB ("pattern too complex"); over 1 GB in the fuzzer
    compiled = gm.JsonSchema(schema).compile(VOCAB)
    lo = int(schema.get("minLength", 0))
    for n, ok in [(lo, True), (int(schema["maxLength"]), True), (int(schema["maxLength"]) + 1, False)]:
        m = compiled.matcher()
        text = b'"' + b"a" * n + b'"'
        assert (all(m.try_advance(b + 1) for b in text) and m.is_accepting()) is ok, n


# ---- Lark: a syntax error lark 1.3.1 cannot word (fuzz run 4: 43 TypeErrors) ----------------------------


def test_a_syntax_error_whose_lark_report_fails_is_a_grammar_error_at_its_place() -> None:
    text = 'start: "a"\nX: ["+"start: N\n'  # lark.Lark(text) raises TypeError (lark 1.3.1)
    with pytest.raises(gm.GrammarError, match="Unexpected token") as e:
        gm.Lark(text)
    assert (e.value.line, e.value.column) == (2, 13)
    assert run_one("lark", text.encode(), VOCAB) == "refused: GrammarError"
    from grammarmask.lint import lint_lark

    with pytest.raises(gm.GrammarError, match="Unexpected token"):
        lint_lark(text)


# ---- numeric bounds of hundreds of digits (fuzz run 3: {"exclusiveMaximum": 9.7e76}, and 1e300) ---------


def test_a_bound_of_300_digits_is_refused_at_its_keyword_and_pointer() -> None:
    schema = {"type": "object", "properties": {"x": {"maximum": 1e300}}}
    with pytest.raises(gm.UnsupportedSchemaError) as info:
        gm.JsonSchema(schema).compile(byte_vocabulary())
    assert (info.value.keyword, info.value.pointer) == ("maximum", "/properties/x")
    assert len(str(info.value)) < 300  # not the terminal's regex of 90,000 characters


def test_a_bound_of_77_digits_compiles_exactly() -> None:
    """Integer forms are compared exactly with the float bound; fractions and exponents are a
    narrowing (numbers.py), so there only accepted => valid."""
    import json

    import jsonschema

    from .support_budgets import accepts

    schema = {"exclusiveMaximum": 9.72378798197982e76}
    compiled = gm.JsonSchema(schema).compile(byte_vocabulary())
    valid = jsonschema.Draft202012Validator(schema).is_valid
    big = int(9.72378798197982e76)
    for n in (0, -5, big - 1, big, big + 1, 10**76, 10**77, -(10**80)):
        assert accepts(compiled, str(n)) == valid(n), n
    for text in ("1.5", "9.7e76", "9.8e76", "1e76", "-2.5"):
        assert not accepts(compiled, text) or valid(json.loads(text)), text
