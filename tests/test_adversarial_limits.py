"""Every adversarial input of the budget issues, on tekken 131k, each in its own process: a documented
error or a result within 30 s and 1 GB (benchmarks/adversarial.py runs the same cases and writes the
table of times and memory). Slow: about a minute in all on an idle 2-core machine, more under load.
The unit tests of each input on a small vocabulary are in tests/test_budgets_*.py and
tests/test_api_input.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import adversarial  # noqa: E402 - benchmarks/ is not a package


@pytest.mark.slow
@pytest.mark.parametrize("name", list(adversarial.CASES))
def test_adversarial_input_ends_within_its_limits(name: str) -> None:
    res = adversarial.run_case(name)
    assert not res["outcome"].startswith("FAILED"), res
    assert res["outcome"] == "result" or res["outcome"].startswith("refused: "), res
    assert res["peak_mb"] <= adversarial.MEGABYTES and res["seconds"] <= adversarial.SECONDS, res
