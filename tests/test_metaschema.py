"""The flattened 2020-12 metaschema accepts exactly what jsonschema's own metaschema accepts."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from grammarmask.frontends.jsonschema.metaschema import _flat_validator, flat_2020_12, metaschema_error

from .support_json_schema import SUITE

BROKEN: list[Any] = [
    {"type": 5}, {"properties": {"a": {"minLength": "x"}}}, {"items": {"anyOf": [{"required": [1]}]}},
    {"$defs": {"x": {"enum": 5}}}, {"allOf": []},
    {"properties": {"a": {"properties": {"b": {"type": ["a", "a"]}}}}},
    {"dependentRequired": {"a": [1]}}, {"contains": {"maxContains": -1}}, {"dependencies": {"a": [1]}},
    {"definitions": {"a": {"type": "nope"}}}, {"prefixItems": {}}, {"$anchor": "1x"},
]  # fmt: skip


def _suite_schemas() -> list[Any]:
    out: list[Any] = []
    for f in sorted(SUITE.glob("*.json")):
        out += [g["schema"] for g in json.loads(f.read_text())]
    return out


def test_the_flat_metaschema_has_no_dynamic_or_remote_reference() -> None:
    text = json.dumps(flat_2020_12())
    assert '"$dynamicRef": "#meta"' not in text and '"$ref": "meta/' not in text
    jsonschema.Draft202012Validator.check_schema(flat_2020_12())


@pytest.mark.parametrize("schema", BROKEN, ids=[json.dumps(b)[:40] for b in BROKEN])
def test_broken_schemas_get_the_original_error(schema: Any) -> None:
    original = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA).iter_errors(schema)
    )
    assert original is not None
    assert not _flat_validator().is_valid(schema)
    err = metaschema_error(schema, jsonschema.Draft202012Validator)
    assert err is not None and err.message == original.message and list(err.path) == list(original.path)


def test_same_verdict_as_the_original_on_the_test_suite() -> None:
    original = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
    schemas = _suite_schemas()
    assert len(schemas) > 300
    for s in schemas:
        assert _flat_validator().is_valid(s) == original.is_valid(s), json.dumps(s)[:200]
