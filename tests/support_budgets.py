"""Helpers of the budget tests (tests/test_budgets_*.py): adversarial schemas and a byte-level
acceptance check against the reference validator."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from grammarmask.grammar import CompiledGrammar

__all__ = ["accepts", "agrees_with_jsonschema", "nested", "ref_chain"]


def nested(kind: str, n: int) -> dict[str, Any]:
    """A string schema wrapped ``n`` times in an object property, array items or an anyOf."""
    s: dict[str, Any] = {"type": "string"}
    for _ in range(n):
        if kind == "object":
            s = {"type": "object", "properties": {"a": s}}
        elif kind == "array":
            s = {"type": "array", "items": s}
        else:
            s = {"anyOf": [s, {"type": "null"}]}
    return s


def ref_chain(n: int) -> dict[str, Any]:
    """``$defs/d0 -> d1 -> ... -> dn`` (a string), the root a ``$ref`` to d0: n + 1 hops."""
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/d0"}


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
