"""Inputs found by the front-end fuzzer (benchmarks/fuzz_frontends.py, issues 15 and 19).

Each input once raised an undocumented exception or gave an unsound document; each now ends in a
documented error or a correct result. The harness's own checks (a finished document against the
reference) are run on each through ``run_one``, so a regression shows the same way the fuzzer saw it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import grammarmask as gm

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
