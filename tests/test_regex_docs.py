"""The python snippets in docs/regex.md run, and the errors they print are the documented ones."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

import grammarmask as gm

PAGE = Path(__file__).resolve().parent.parent / "docs" / "regex.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
TEXT_BLOCKS = re.findall(r"```text\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_snippet_runs(code: str, tekken: gm.Vocabulary, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gm.Vocabulary, "from_mistral", lambda *a, **k: tekken)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(PAGE), "exec"), {"__name__": "__docs__"})
    if "gm.GrammarError as e" in code:
        assert out.getvalue() == TEXT_BLOCKS[0]
