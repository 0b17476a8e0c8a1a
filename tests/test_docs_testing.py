"""The snippets of docs/howto_testing.md run, in order, in one namespace (the page reads as one
script: later blocks use the names earlier ones import). A block preceded by
``<!-- docs-test: skip (reason) -->`` is not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_docs import _BLOCK

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "howto_testing.md"


def test_howto_testing_snippets_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    ran = 0
    for i, m in enumerate(_BLOCK.finditer(PAGE.read_text(encoding="utf-8"))):
        if m.group("reason"):
            continue
        exec(compile(m.group("code"), f"howto_testing.md#{i + 1}", "exec"), namespace)
        ran += 1
    assert ran >= 5
