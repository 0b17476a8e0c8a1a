"""JsonSchema(property_order="any"): an object's members in any order, exactly.

Checked against ``jsonschema`` (after ``json.loads``, which keeps the last of duplicate keys) and
``lark`` parsing the generated grammar text, never against grammarmask itself: every key order of a
valid instance is accepted, no key order of an invalid one is, and sampled sentences (duplicates
included) validate.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import warnings
from typing import Any

import lark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammarmask.errors import GrammarError, UnsupportedSchemaError
from grammarmask.frontends.json_schema import JsonSchema, SchemaWarning
from grammarmask.strategies import from_grammar
from grammarmask.testing import assert_accepts, assert_rejects, byte_vocabulary

from .support_json_schema import GrammarSampler, parses, validator

KEYS = ["a", "b", "c", "d", "f", "g", "h"]  # past 5 declared keys only required ones are tracked
POOL = [*KEYS, "e", "x1", "x2", "y"]  # "x..." match the patternProperties below; "y" matches none
LEAVES = [
    {"type": "integer"},
    {"type": "string", "maxLength": 2},
    {"type": "boolean"},
    {"enum": [0, "s", None]},
    {},
]
VALUES = [0, 7, "s", "ab", "abc", True, None, [], {"a": 1}]


@st.composite
def object_schemas(draw: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "object"}
    props = draw(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(LEAVES), max_size=7))
    if props:
        s["properties"] = props
    req = draw(st.lists(st.sampled_from([*KEYS, "e"]), unique=True, max_size=3))
    if req:
        s["required"] = req
    addl = draw(st.sampled_from([None, True, False, {"type": "integer"}, {"type": "string"}]))
    if addl is not None:
        s["additionalProperties"] = addl
    if draw(st.integers(0, 3)) == 0:
        s["patternProperties"] = {"^x": {"type": "integer"}}
    if draw(st.booleans()):
        s["minProperties"] = draw(st.integers(0, 4))
    if draw(st.booleans()):
        s["maxProperties"] = draw(st.integers(0, 5))
    if draw(st.integers(0, 2)) == 0:
        trigger = draw(st.sampled_from(KEYS))
        s["dependentRequired"] = {
            trigger: draw(st.lists(st.sampled_from([*KEYS, "e"]), unique=True, max_size=2))
        }
    return s


def _declared(s: dict[str, Any]) -> set[str]:
    deps = s.get("dependentRequired", {})
    return {*s.get("properties", {}), *s.get("required", []), *deps, *(t for v in deps.values() for t in v)}


def _narrowed(s: dict[str, Any], doc: dict[str, Any]) -> bool:
    """The documented narrowing: minProperties counts one non-declared member at most."""
    declared = _declared(s)
    n = len(doc.keys() & declared) + min(1, len(doc.keys() - declared))
    return n < s.get("minProperties", 0)


def _texts(doc: dict[str, Any], limit: int = 24) -> list[str]:
    """Compact serialisations of ``doc`` in every key order (``limit`` random orders past 4 keys)."""
    keys = list(doc)
    if len(keys) <= 4:
        orders = list(itertools.permutations(keys))
    else:
        rng = random.Random(len(keys))
        orders = [tuple(rng.sample(keys, len(keys))) for _ in range(limit)]
    return [json.dumps({k: doc[k] for k in order}, separators=(",", ":")) for order in orders]


def _parser(schema: dict[str, Any], **kw: Any) -> lark.Lark | None:
    try:
        text = JsonSchema(schema, property_order="any", **kw).to_lark()
    except GrammarError as e:
        assert "admits no value" in str(e), e
        return None
    return lark.Lark(text)


def _fitting(schema: dict[str, Any], key: str, pick: int) -> Any:
    """A value the schema allows under ``key`` (found with jsonschema), else one of VALUES."""
    parts = [schema["properties"][key]] if key in schema.get("properties", {}) else []
    parts += [v for p, v in schema.get("patternProperties", {}).items() if re.search(p, key)]
    if not parts:
        parts.append(schema.get("additionalProperties", True))
    ok = [x for x in VALUES if validator({"allOf": parts}).is_valid(x)]
    return (ok or VALUES)[pick % len(ok or VALUES)]


DOCS = st.lists(st.dictionaries(st.sampled_from(POOL), st.sampled_from(VALUES), max_size=4), max_size=6)
KEY_SETS = st.lists(
    st.tuples(st.lists(st.sampled_from(POOL), unique=True, max_size=4), st.integers(0, 9)), max_size=6
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=object_schemas(), docs=DOCS, key_sets=KEY_SETS)
def test_every_key_order_exactly(
    schema: dict[str, Any], docs: list[dict[str, Any]], key_sets: list[tuple[list[str], int]]
) -> None:
    """Distinct-key instances: each permutation parses iff jsonschema accepts the instance."""
    v = validator(schema)
    parser = _parser(schema, whitespace="compact")
    for ks, pick in key_sets:  # the keys drawn, and the required ones with them (more valid instances)
        for keys in (ks, list(dict.fromkeys([*ks, *schema.get("required", [])]))):
            docs.append({k: _fitting(schema, k, pick + i) for i, k in enumerate(keys)})
    for doc in docs:
        ok = v.is_valid(doc)
        if ok and _narrowed(schema, doc):
            continue
        if parser is None:
            assert not ok, (schema, doc)
            continue
        for text in _texts(doc):
            assert parses(parser, text) == ok, (schema, text, ok)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=object_schemas(), seed=st.integers(0, 10**6))
def test_sampled_sentences_validate(schema: dict[str, Any], seed: int) -> None:
    """Random sentences of the grammar text (repeated keys included) validate after json.loads."""
    parser = _parser(schema)
    if parser is None:
        return
    v = validator(schema)
    sampler = GrammarSampler(parser, seed=seed)
    for _ in range(15):
        text = sampler.sample()
        assert text is not None and v.is_valid(json.loads(text)), (schema, text)


MEMBERS = st.lists(st.tuples(st.sampled_from(POOL), st.sampled_from(VALUES)), max_size=5)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=object_schemas(), members=st.lists(MEMBERS, max_size=8))
def test_duplicate_keys_are_sound(schema: dict[str, Any], members: list[list[tuple[str, Any]]]) -> None:
    """Member lists with repeated keys: whatever parses is valid once json.loads keeps the last."""
    parser = _parser(schema, whitespace="compact")
    if parser is None:
        return
    v = validator(schema)
    for ms in members:
        text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(x, separators=(',', ':'))}" for k, x in ms) + "}"
        if parses(parser, text):
            assert v.is_valid(json.loads(text)), (schema, text)


@pytest.fixture(scope="module")
def vocab() -> Any:
    return byte_vocabulary([b'":', b',"', b"true", b'{"'])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=object_schemas(), data=st.data())
def test_matcher_walks_on_random_schemas_validate(schema: dict[str, Any], data: Any, vocab: Any) -> None:
    """Random walks through grammarmask's own matcher (not lark) end in valid instances."""
    if _parser(schema) is None:
        return
    compiled = JsonSchema(schema, property_order="any").compile(vocab)
    for _ in range(3):
        doc = data.draw(from_grammar(compiled, max_size=30))
        assert validator(schema).is_valid(json.loads(doc)), (schema, doc)


SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "patternProperties": {"^x": {"type": "string"}},
        "additionalProperties": {"type": "boolean"},
        "minProperties": 2,
        "maxProperties": 3,
    },
    {
        "type": "object",
        "properties": {k: {"type": "integer"} for k in "abcdefg"},
        "required": ["g"],
        "dependentRequired": {"a": ["b", "c"]},
        "additionalProperties": False,
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_matcher_walks_validate_and_orders_are_accepted(
    schema: dict[str, Any], data: Any, vocab: Any
) -> None:
    """Through grammarmask's own matcher: random walks validate; shuffled valid instances are accepted."""
    g = JsonSchema(schema, property_order="any")
    compiled = g.compile(vocab)
    v = validator(schema)
    doc = data.draw(from_grammar(compiled, max_size=40))
    assert v.is_valid(json.loads(doc)), doc
    d = data.draw(
        st.dictionaries(st.sampled_from([*"abcdefg", "x1", "y"]), st.sampled_from(VALUES), max_size=5)
    )
    order = data.draw(st.permutations(list(d)))
    text = json.dumps({k: d[k] for k in order})
    if v.is_valid(d) and not _narrowed(schema, d):
        assert_accepts(compiled, text)
    elif not v.is_valid(d):
        assert_rejects(compiled, text)


# ---- fixed cases ------------------------------------------------------------------------------------


def test_declared_keeps_the_order_and_any_does_not() -> None:
    schema = SCHEMAS[0]
    declared = lark.Lark(JsonSchema(schema).to_lark())
    anyorder = lark.Lark(JsonSchema(schema, property_order="any").to_lark())
    assert parses(declared, '{"a": 1, "b": "x"}') and not parses(declared, '{"b": "x", "a": 1}')
    for text in ('{"a": 1, "b": "x"}', '{"b": "x", "a": 1}', '{"c": true, "b": "x", "a": 1}'):
        assert parses(anyorder, text)
    for text in ('{"a": 1, "a": 2, "b": "x"}', '{"b": "x"}', '{"b": "x", "a": 1, "d": 1}'):
        assert not parses(anyorder, text)  # required keys never twice; no missing or unknown key


def test_counting_keywords_count_distinct_keys() -> None:
    s = {
        "type": "object",
        "properties": {"a": {}, "b": {}},
        "minProperties": 2,
        "additionalProperties": False,
    }
    p = lark.Lark(JsonSchema(s, property_order="any", whitespace="compact").to_lark())
    assert parses(p, '{"b":1,"a":2}') and not parses(p, '{"a":1,"a":2}')
    s = {"type": "object", "properties": {"a": {}, "b": {}}, "maxProperties": 1}
    p = lark.Lark(JsonSchema(s, property_order="any", whitespace="compact").to_lark())
    assert parses(p, '{"b":1}') and parses(p, '{"z":1}') and not parses(p, '{"b":1,"z":2}')
    s = {"type": "object", "dependentRequired": {"a": ["b"]}, "properties": {"c": {}}}
    p = lark.Lark(JsonSchema(s, property_order="any", whitespace="compact").to_lark())
    assert parses(p, '{"b":1,"c":1,"a":2}') and not parses(p, '{"c":1,"a":2}')
    assert not parses(p, '{"a":1,"b":1,"a":2}')
    many = {f"k{i}": {"type": "integer"} for i in range(12)}  # 12 optional keys: only a flag is kept
    s = {"type": "object", "properties": many, "required": ["k3"], "minProperties": 2}
    p = lark.Lark(JsonSchema(s, property_order="any", whitespace="compact").to_lark())
    assert (
        parses(p, '{"k9":1,"k3":2}') and parses(p, '{"k3":2,"x":[]}') and parses(p, '{"k9":1,"k9":1,"k3":2}')
    )
    assert not parses(p, '{"k3":1}') and not parses(p, '{"k3":1,"k3":1}') and not parses(p, '{"k9":1,"x":2}')


def test_const_and_enum_objects_in_any_order() -> None:
    s = {"enum": [{"x": 1, "y": [1, {"p": None, "q": "s"}]}, {"z": True}]}
    p = lark.Lark(JsonSchema(s, property_order="any", whitespace="compact").to_lark())
    assert parses(p, '{"y":[1,{"q":"s","p":null}],"x":1}') and parses(p, '{"z":true}')
    assert not parses(p, '{"x":1,"x":1,"y":[1,{"p":null,"q":"s"}]}') and not parses(p, '{"x":1}')
    declared = lark.Lark(JsonSchema(s, whitespace="compact").to_lark())
    assert not parses(declared, '{"y":[1,{"q":"s","p":null}],"x":1}')


BIG = {
    "type": "object",
    "properties": {"big": {"type": "object", "required": [f"k{i}" for i in range(11)]}},
}


def test_too_many_tracked_keys_refuse_or_fall_back() -> None:
    with pytest.raises(UnsupportedSchemaError) as e:
        JsonSchema(BIG, property_order="any").to_lark()
    assert (e.value.keyword, e.value.pointer) == ("properties", "/properties/big")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        text = JsonSchema(BIG, property_order="any", strict=False).to_lark()
    assert any(issubclass(w.category, SchemaWarning) and "properties" in str(w.message) for w in rec)
    p = lark.Lark(text)
    inner = {f"k{i}": i for i in range(11)}
    assert parses(p, json.dumps({"big": inner}))  # declared order
    assert not parses(p, json.dumps({"big": dict(reversed(inner.items()))}))
    ten = {"type": "object", "required": [f"k{i}" for i in range(10)]}
    p = lark.Lark(JsonSchema(ten, property_order="any", whitespace="compact").to_lark())
    keys = [f"k{i}" for i in range(10)]
    assert parses(p, json.dumps({k: 0 for k in reversed(keys)}, separators=(",", ":")))


def test_option_is_validated_and_part_of_the_cache_key() -> None:
    with pytest.raises(GrammarError, match="property_order"):
        JsonSchema({}, property_order="sorted")
    a = JsonSchema({"type": "object"}, property_order="any")
    assert a.cache_key() != JsonSchema({"type": "object"}).cache_key()
    assert a.cache_key() == JsonSchema({"type": "object"}, property_order="any").cache_key()
    assert (
        JsonSchema({"type": "object"}).cache_key()
        == JsonSchema({"type": "object"}, property_order="declared").cache_key()
    )


def test_from_pydantic_any_order() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str
        qty: int = pydantic.Field(ge=1, le=99)
        tags: list[str] = []

    p = lark.Lark(JsonSchema.from_pydantic(Item, property_order="any").to_lark())
    good = '{"tags": ["a"], "qty": 3, "name": "x"}'
    assert parses(p, good)
    Item.model_validate_json(good)
    assert not parses(p, '{"qty": 3}')
