"""``grammarmask bench``: results go under the current directory (or ``--out``), never into the checkout;
``--only`` that matches nothing is an error; a user's own grammar and documents can be timed. The
harness runs in a subprocess (grammarmask only, the tekken vocabulary), so these take a few seconds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grammarmask import cli

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CLI_DOC = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
PATTERN = "[a-z]+@[a-z]+\\.com"


def bench(capfd: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["bench", *argv])
    out, err = capfd.readouterr()
    return code, out, err


def _snapshot() -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in RESULTS.iterdir()} if RESULTS.exists() else {}


@pytest.fixture
def own_grammar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A regex grammar and documents in a fresh current directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mail.regex").write_text(PATTERN + "\n")
    (tmp_path / "a.txt").write_text("bob@example.com\n")
    (tmp_path / "b.txt").write_text("alice@x.com\n")
    (tmp_path / "bad.txt").write_text("BOB@example.com\n")  # re.fullmatch rejects it
    (tmp_path / "no.txt").write_text("bob@example.org\n")
    return tmp_path


def test_own_grammar_under_the_current_directory(
    capfd: pytest.CaptureFixture[str], own_grammar: Path
) -> None:
    before = _snapshot()
    code, _, err = bench(
        capfd,
        "--grammar",
        "mail.regex",
        "--docs",
        "a.txt",
        "b.txt",
        "bad.txt",
        "--invalid-docs",
        "no.txt",
        "--strip",
        "--engines",
        "grammarmask",
    )
    assert code == cli.EXIT_OK, err
    out = own_grammar / "grammarmask-bench"
    assert sorted(p.name for p in out.iterdir()) == ["latest.json", "latest.md"]  # no .partial left
    assert _snapshot() == before  # nothing written into the checkout's benchmarks/results
    report = json.loads((out / "latest.json").read_text())
    (res,) = report["results"]
    assert (res["workload"], res["engine"], res["status"]) == ("mail.regex", "grammarmask", "ok")
    assert re.fullmatch(PATTERN, "bob@example.com") and re.fullmatch(PATTERN, "alice@x.com")
    assert (res["docs"], res["refused"]) == (2, 0)  # the two valid documents, every token in the mask
    assert (res["invalid_docs"], res["invalid_accepted"]) == (1, 0)
    assert res["steps"] > 2 and res["p50_us"] > 0
    assert any("bad.txt" in n and "reference rejects" in n for n in report["notes"])
    assert "bad.txt: the reference rejects it" in err
    assert "| mail.regex | grammarmask |" in (out / "latest.md").read_text()


def test_out_says_where(capfd: pytest.CaptureFixture[str], own_grammar: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "run1"
    code, _, err = bench(
        capfd,
        "--grammar",
        "mail.regex",
        "--docs",
        "a.txt",
        "--strip",
        "--engines",
        "grammarmask",
        "--out",
        str(target),
    )
    assert code == cli.EXIT_OK, err
    assert target.with_suffix(".json").is_file() and target.with_suffix(".md").is_file()
    assert not (own_grammar / "grammarmask-bench").exists()


def test_help_names_the_default_output(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # argparse would wrap the help text at the hyphen
    code, out, _ = bench(capfd, "--help")
    assert code == cli.EXIT_OK
    flat = " ".join(out.split())  # argparse wraps the help text
    assert "grammarmask bench" in flat and "(default: grammarmask-bench/latest)" in flat
    assert "--grammar" in out and "--docs" in out and "--readme" not in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--only", "no-such-workload", "--jsb", "0"], "matches no workload"),
        (["--readme"], "README.md"),
        (["--grammar", "mail.regex"], "--docs"),
        (["--docs", "a.txt"], "--grammar"),
        (["--grammar", "missing.lark", "--docs", "a.txt"], "missing.lark: no such file"),
        (["--grammar", "mail.regex", "--docs", "missing.txt"], "missing.txt: no such file"),
        (["--grammar", "mail.regex", "--docs", "a.txt", "--only", "zzz"], "matches no workload"),
        (["--frobnicate"], "--frobnicate"),
    ],
)
def test_usage_errors(
    capfd: pytest.CaptureFixture[str], own_grammar: Path, argv: list[str], needle: str
) -> None:
    code, _, err = bench(capfd, *argv)
    assert code == cli.EXIT_USAGE
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("grammarmask bench: error:") and needle in lines[0]
    assert not (own_grammar / "grammarmask-bench").exists()


def test_bad_own_grammar(capfd: pytest.CaptureFixture[str], own_grammar: Path) -> None:
    (own_grammar / "bad.lark").write_text("start: foo\n")
    code, _, err = bench(capfd, "--grammar", "bad.lark", "--docs", "a.txt")
    assert code == cli.EXIT_USAGE
    assert err.strip().startswith("grammarmask bench: error:") and "foo" in err


def test_docs_describe_the_bench_options() -> None:
    section = CLI_DOC.split("## `grammarmask bench`", 1)[1].split("\n## ", 1)[0]
    for opt in ("--out", "--only", "--grammar", "--docs", "--invalid-docs", "--strip", "--kind", "--engines"):
        assert f"`{opt}" in section, opt
    assert "grammarmask-bench/latest" in section
