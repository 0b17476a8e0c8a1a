"""The metaschema check gives jsonschema's verdict: the flattened 2020-12 metaschema and the
fastjsonschema pre-check accept exactly what jsonschema's own metaschemas accept."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammarmask.frontends.jsonschema.metaschema import fast_verdict, flat_2020_12, metaschema_error

from .support_json_schema import BENCH, SUITE

DRAFTS = [jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator,
          jsonschema.Draft202012Validator]

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
    assert not jsonschema.Draft202012Validator(flat_2020_12()).is_valid(schema)
    assert fast_verdict(schema, jsonschema.Draft202012Validator) is False
    err = metaschema_error(schema, jsonschema.Draft202012Validator)
    assert err is not None and err.message == original.message and list(err.path) == list(original.path)


def test_same_verdict_as_the_original_on_the_test_suite() -> None:
    original = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
    schemas = _suite_schemas()
    assert len(schemas) > 300
    flat = jsonschema.Draft202012Validator(flat_2020_12())
    for s in schemas:
        assert flat.is_valid(s) == original.is_valid(s), json.dumps(s)[:200]
        assert fast_verdict(s, jsonschema.Draft202012Validator) == original.is_valid(s), json.dumps(s)[:200]


def test_the_pre_check_agrees_on_jsonschemabench_and_the_draft7_suite() -> None:
    seen = 0
    files = sorted(BENCH.glob("*/*.json")) + sorted((SUITE.parent / "draft7").glob("*.json"))
    for f in files:
        data = json.loads(f.read_text())
        schemas = [g["schema"] for g in data] if isinstance(data, list) else [data.get("schema", data)]
        for s in schemas:
            cls = jsonschema.validators.validator_for(s, default=jsonschema.Draft202012Validator)
            verdict = fast_verdict(s, cls)
            if verdict is None:
                continue
            seen += 1
            assert verdict == cls(cls.META_SCHEMA).is_valid(s), f"{f.name}: {json.dumps(s)[:200]}"
    assert seen > 500


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.sampled_from([1.5, 2.0, -0.5]),
                    st.sampled_from(["", "string", "integer", "x", "^a", "#/$defs/a", "a#b", "1x"]))
_KEYWORDS = ["type", "minLength", "maxLength", "minimum", "exclusiveMaximum", "multipleOf", "required",
             "enum", "const", "pattern", "$ref", "$id", "id", "$anchor", "items", "prefixItems",
             "properties", "additionalProperties", "allOf", "anyOf", "not", "dependencies",
             "dependentRequired", "minItems", "uniqueItems", "format", "$defs", "definitions",
             "contains", "maxContains", "if", "title", "default"]
_KEYS = st.sampled_from(_KEYWORDS)
_NAMES = st.sampled_from(["a", "b", "$ref"])  # property names, "$ref" among them


def _nested(inner: Any) -> Any:
    members = st.one_of(_VALUES, inner)
    value = st.one_of(members, st.lists(members, max_size=3), st.dictionaries(_NAMES, members, max_size=2))
    return st.one_of(st.dictionaries(_KEYS, value, max_size=4), st.booleans())


_SCHEMAS = st.recursive(st.dictionaries(_KEYS, _VALUES, max_size=3), _nested, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(schema=_SCHEMAS, cls=st.sampled_from(DRAFTS))
def test_the_pre_check_gives_jsonschemas_verdict_on_random_schemas(schema: Any, cls: Any) -> None:
    """fastjsonschema's *yes* is trusted: it must never accept what jsonschema rejects."""
    assert fast_verdict(schema, cls) == cls(cls.META_SCHEMA).is_valid(schema), json.dumps(schema)


def test_the_check_read_back_from_the_disk_cache_gives_the_same_verdicts(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fastjsonschema's generated check is kept compiled in the disk cache; the one read back (no
    code generated) judges as the one made; jsonschema's own metaschema is left as it was."""
    before = json.dumps(jsonschema.Draft7Validator.META_SCHEMA, sort_keys=True)
    from grammarmask.frontends.jsonschema import metaschema

    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(tmp_path))
    schemas = [{"type": "string"}, {"type": 3}, {"properties": {"a": {"minimum": "x"}}}, {"enum": []}, True]
    verdicts = {}
    for cls in (jsonschema.Draft7Validator, jsonschema.Draft202012Validator):
        metaschema._fast_validator.cache_clear()
        made = [fast_verdict(s, cls) for s in schemas]
        assert len(list(tmp_path.glob("metaschema-check-*"))) == len(verdicts) + 1
        metaschema._fast_validator.cache_clear()
        monkeypatch.setattr(metaschema.fastjsonschema, "compile_to_code", None)  # must not be needed
        read = [fast_verdict(s, cls) for s in schemas]
        monkeypatch.undo()
        monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(tmp_path))
        assert read == made
        verdicts[cls] = made
    assert verdicts[jsonschema.Draft7Validator] == [True, False, False, True, True]  # draft 7 allows []
    assert json.dumps(jsonschema.Draft7Validator.META_SCHEMA, sort_keys=True) == before
    metaschema._fast_validator.cache_clear()
