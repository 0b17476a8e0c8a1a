"""Helpers of the budget tests (tests/test_budgets_*.py): adversarial schemas (benchmarks/adversarial.py's)
and a byte-level acceptance check against the reference validator."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema

from grammarmask.grammar import CompiledGrammar

# the adversarial schemas are benchmarks/adversarial.py's (the same inputs, on tekken, one process each)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from adversarial import nested, ref_chain  # noqa: E402 - benchmarks/ is not a package

__all__ = ["accepts", "agrees_with_jsonschema", "nested", "ref_chain"]


def accepts(compiled: CompiledGrammar, text: str) -> bool:
    """Whether a matcher over the byte vocabulary (token b + 1 is byte b) takes ``text`` whole."""
    m = compiled.matcher()
    return all(m.try_advance(b + 1) for b in text.encode()) and m.is_accepting()


def agrees_with_jsonschema(compiled: CompiledGrammar, schema: Any, docs: list[Any]) -> list[Any]:
    """The documents (compact JSON) on which the grammar and ``jsonschema`` disagree."""
    check = jsonschema.Draft202012Validator(schema)
    return [
        d
        for d in docs
        if accepts(compiled, json.dumps(d, separators=(",", ":"), ensure_ascii=False)) != check.is_valid(d)
    ]
