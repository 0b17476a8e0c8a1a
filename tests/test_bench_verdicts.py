"""``benchmarks/verdicts.py``: each harness run is judged against the same run's peer, so a run in a
slow phase of the host (both engines slower) is not compared with another run's peer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import verdicts  # noqa: E402


def row(workload: str, engine: str, p50: float, p99: float, *, max_us: float = 100.0,
        refused: int = 0, status: str = "ok") -> dict[str, Any]:
    return {"workload": workload, "engine": engine, "status": status, "compile_s": 0.002,
            "p50_us": p50, "p99_us": p99, "max_us": max_us, "refused_docs": refused}


def write(tmp_path: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"machine": {}, "results": rows}))
    return path


def test_each_run_is_judged_against_its_own_peer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fast = write(tmp_path, "fast.json", [row("a", "grammarmask", 1, 40), row("a", "llguidance", 5, 100),
                                         row("b", "grammarmask", 9, 90), row("b", "llguidance", 5, 100)])
    # a slow phase of the host: both engines twice as slow; "a" still holds against this run's peer,
    # though its p99 (80) is over half of the fast run's peer (50)
    slow = write(tmp_path, "slow.json", [row("a", "grammarmask", 2, 80), row("a", "llguidance", 10, 200),
                                         row("b", "grammarmask", 4, 90, max_us=6000, refused=1),
                                         row("b", "llguidance", 10, 200)])
    got = verdicts.judge([verdicts._ok_rows(fast), verdicts._ok_rows(slow)])
    assert got["a"]["p99"] == [(40, 50), (80, 100)]
    assert got["a"]["p99_met"] and got["a"]["p50_met"] and got["a"]["max_met"]
    assert got["a"]["refused"] == 0
    b = got["b"]
    assert (b["p99_met"], b["p99_runs_met"]) == (False, 1)  # 90 > 50, then 90 <= 100
    assert not b["p50_met"]  # 9 > 5 in the first run
    assert not b["max_met"] and b["refused"] == 1
    assert verdicts.main([str(fast), str(slow)]) == 0
    out = capsys.readouterr().out
    assert "| a | 2.0 (2.0), 2.0 (2.0) | 40/50+, 80/100+ | met | met | met | 0 |" in out
    assert "| b |" in out and "1 of 2 runs" in out


def test_a_run_of_two_tokenizers_is_judged_per_tokenizer(tmp_path: Path) -> None:
    rows = [{**row("a", "grammarmask", 1, 40), "tokenizer": "tekken"},
            {**row("a", "llguidance", 5, 100), "tokenizer": "tekken"},
            {**row("a", "grammarmask", 1, 90), "tokenizer": "sentencepiece"},
            {**row("a", "llguidance", 5, 100), "tokenizer": "sentencepiece"}]
    got = verdicts.judge([verdicts._ok_rows(write(tmp_path, "both.json", rows))])
    assert got["a [tekken]"]["p99"] == [(40, 50)] and got["a [tekken]"]["p99_met"]
    assert got["a [sentencepiece]"]["p99"] == [(90, 50)] and not got["a [sentencepiece]"]["p99_met"]


def test_workloads_missing_from_a_run_or_unreadable_runs(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    one = write(tmp_path, "one.json", [row("a", "grammarmask", 1, 40), row("c", "grammarmask", 1, 40)])
    two = write(tmp_path, "two.json", [row("a", "grammarmask", 1, 40),
                                       row("c", "grammarmask", 1, 40, status="compile error")])
    got = verdicts.judge([verdicts._ok_rows(one), verdicts._ok_rows(two)])
    assert list(got) == ["a"]  # "c" failed in a run: no verdict over the runs
    assert got["a"]["p99"] == [(40, None), (40, None)] and not got["a"]["p99_met"]  # no peer: unmet
    assert verdicts.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read the runs" in capsys.readouterr().err
    empty = write(tmp_path, "empty.json", [])
    assert verdicts.main([str(empty)]) == 2
    assert "no workload" in capsys.readouterr().err
