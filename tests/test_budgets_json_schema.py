"""Adversarial JSON Schemas (issues 15 and 19): each ends, well within 30 s, in a correct grammar or
a documented error (``gm.BudgetExceeded`` naming the budget, its value and the JSON pointer; or a
``GrammarError`` in schema terms), never a ``RecursionError``, a hang or a Lark message."""

from __future__ import annotations

import random
import warnings

import pytest

import grammarmask as gm
from grammarmask.errors import BudgetExceeded
from grammarmask.frontends.json_schema import SchemaWarning
from grammarmask.testing import byte_vocabulary

from .support_budgets import accepts, agrees_with_jsonschema, nested, ref_chain

DEPTH = gm.Limits().json_schema_depth

# ---- nesting depth (Limits.json_schema_depth) --------------------------------------------------------


@pytest.mark.parametrize("kind", ["object", "array", "anyOf"])
def test_a_schema_nested_200_deep_is_refused_by_the_depth_budget(kind: str) -> None:
    with pytest.raises(
        BudgetExceeded, match=r"json_schema_depth budget \(128\).*Limits\(json_schema_depth="
    ) as e:
        gm.JsonSchema(nested(kind, 200)).compile(byte_vocabulary())
    assert (e.value.budget, e.value.value) == ("json_schema_depth", DEPTH)
    first = {"object": "/properties/a/", "array": "/items/items/", "anyOf": "/anyOf/0/anyOf/0/"}[kind]
    assert e.value.where.startswith(first)


@pytest.mark.parametrize("kind", ["object", "array", "anyOf"])
def test_a_schema_nested_200_deep_compiles_under_a_raised_budget(kind: str) -> None:
    compiled = gm.JsonSchema(nested(kind, 200)).compile(
        byte_vocabulary(), limits=gm.Limits(json_schema_depth=500)
    )
    doc = {"object": '{"a":' * 200 + '"x"' + "}" * 200, "array": "[" * 200 + '"x"' + "]" * 200}
    assert accepts(compiled, doc.get(kind, '"x"'))
    assert not accepts(compiled, "1")


@pytest.mark.parametrize(("kind", "levels"), [("object", 63), ("array", 127), ("anyOf", 63)])
def test_schemas_up_to_the_default_budget_compile(kind: str, levels: int) -> None:
    # JSON nesting: an object level is 2 (the schema and its properties), an array level 1
    compiled = gm.JsonSchema(nested(kind, levels)).compile(byte_vocabulary())
    assert accepts(compiled, {"object": "{}", "array": "[]", "anyOf": "null"}[kind])


def test_a_ref_chain_1000_long_is_refused_by_the_depth_budget() -> None:
    with pytest.raises(BudgetExceeded, match="json_schema_depth") as e:
        gm.JsonSchema(ref_chain(1000)).compile(byte_vocabulary())
    assert e.value.where == f"#/$defs/d{DEPTH - 1}"  # the root's $ref is the first hop


def test_a_long_ref_chain_compiles_under_a_raised_budget() -> None:
    compiled = gm.JsonSchema(ref_chain(990)).compile(
        byte_vocabulary(), limits=gm.Limits(json_schema_depth=1000)
    )
    assert accepts(compiled, '"abc"') and not accepts(compiled, "1")


def test_json_text_nested_100000_deep_is_refused() -> None:
    with pytest.raises(BudgetExceeded, match="JSON text nests deeper.*json_schema_depth"):
        gm.JsonSchema("[" * 100000 + "]" * 100000)


def test_a_dict_nested_100000_deep_is_refused() -> None:
    s: dict[str, object] = {}
    for _ in range(100000):
        s = {"not": s}
    with pytest.raises(BudgetExceeded, match="json_schema_depth"):
        gm.JsonSchema(s)


def test_the_depth_budget_has_a_ceiling() -> None:
    with pytest.raises(ValueError, match="json_schema_depth must be <= 1000"):
        gm.Limits(json_schema_depth=1001)


# ---- fuzz-found one-liners (strict=False) ------------------------------------------------------------

DOCS = [None, True, False, 0, 1.5, "", "x", [], [1], [[]], [[1]], ["a", []], {}, {"a": 1}]


def test_contains_of_the_root_itself_compiles_exactly() -> None:
    schema = {"contains": {"$ref": "#"}}
    compiled = gm.JsonSchema(schema, strict=False).compile(byte_vocabulary())
    assert agrees_with_jsonschema(compiled, schema, DOCS) == []


def test_anyof_with_a_ref_to_the_root_beside_oneof_compiles_exactly() -> None:
    # jsonschema itself recurses without end here (its first anyOf branch is the root again); the
    # instances are the booleans: type boolean, the {} branch of anyOf, oneOf [true]
    schema = {"type": "boolean", "anyOf": [{"$ref": "#"}, {"type": "string"}, {}], "oneOf": [True]}
    compiled = gm.JsonSchema(schema, strict=False).compile(byte_vocabulary())
    assert accepts(compiled, "true") and accepts(compiled, "false")
    assert not any(accepts(compiled, t) for t in ('"x"', "1", "null", "[]", "{}"))


def test_oneof_with_a_ref_to_the_root_warns_and_compiles() -> None:
    schema = {"oneOf": [{"$ref": "#"}, True, True], "type": ["string"]}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        gm.JsonSchema(schema, strict=False).compile(byte_vocabulary())
    assert any(issubclass(w.category, SchemaWarning) and "oneOf" in str(w.message) for w in seen)


# ---- a recursion with no way out ---------------------------------------------------------------------


def test_a_recursive_schema_with_no_finite_instance_is_named_in_schema_terms() -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
    with pytest.raises(gm.GrammarError) as e:
        gm.JsonSchema(schema).compile(byte_vocabulary())
    msg = str(e.value)
    assert "admits no value" in msg and "recur with no way out" in msg and "/properties/a" in msg
    assert "line 1" not in msg and "start rule" not in msg


def test_a_branch_with_no_finite_instance_is_pruned() -> None:
    # x: non-empty arrays of x, so no finite x; the schema is null only
    x = {"type": "array", "items": {"$ref": "#/$defs/x"}, "minItems": 1}
    schema = {"$defs": {"x": x}, "anyOf": [{"type": "null"}, {"$ref": "#/$defs/x"}]}
    compiled = gm.JsonSchema(schema).compile(byte_vocabulary())
    assert agrees_with_jsonschema(compiled, schema, DOCS) == []


def test_a_schema_defined_only_through_itself_admits_no_value() -> None:
    # the least fixed point: a boolean must meet the root again or be a string (jsonschema loops)
    with pytest.raises(gm.GrammarError, match="recur with no way out"):
        gm.JsonSchema({"type": "boolean", "anyOf": [{"$ref": "#"}, {"type": "string"}]}).compile(
            byte_vocabulary()
        )


# ---- counting: lengths and item counts far past what states can count --------------------------------


@pytest.mark.parametrize("bound", [2147483647, 10**9])
def test_a_huge_max_length_compiles_in_logarithmic_size(bound: int) -> None:
    g = gm.JsonSchema({"type": "string", "maxLength": bound}, whitespace="compact")
    assert len(g.rules()) < 120  # a rule per 256 characters was 8 million
    compiled = g.compile(byte_vocabulary())
    assert accepts(compiled, '""') and accepts(compiled, '"' + "x" * 3000 + '"')


def test_a_huge_min_length_compiles_in_logarithmic_size() -> None:
    g = gm.JsonSchema({"type": "string", "minLength": 10**9}, whitespace="compact")
    assert len(g.rules()) < 120
    m = g.compile(byte_vocabulary()).matcher()
    m.advance(ord('"') + 1)
    for _ in range(2000):
        assert ord('"') + 1 not in m.mask()  # far from the minimum: the string cannot close
        m.advance(ord("x") + 1)


@pytest.mark.parametrize(("lo", "hi"), [(0, 17000), (1030, 1800), (1500, None), (2000, 2000), (300, 16700)])
def test_counted_string_lengths_are_exact(lo: int, hi: int | None) -> None:
    schema: dict[str, object] = {"type": "string", "minLength": lo}
    if hi is not None:
        schema["maxLength"] = hi
    compiled = gm.JsonSchema(schema, whitespace="compact").compile(byte_vocabulary())
    top = hi if hi is not None else lo + 600
    for n in sorted({0, 1, lo - 1, lo, lo + 1, 255, 256, 257, 1024, 1280, top - 1, top, top + 1}):
        if 0 <= n <= top + 1:
            want = lo <= n and (hi is None or n <= hi)
            assert accepts(compiled, '"' + "é" * n + '"') == want, n


@pytest.mark.parametrize(("lo", "hi"), [(15000, None), (0, 15000), (100, 300), (70, 70), (0, 2147483647)])
def test_counted_array_lengths_are_exact(lo: int, hi: int | None) -> None:
    schema: dict[str, object] = {"type": "array", "items": {"type": "integer"}, "minItems": lo}
    if hi is not None:
        schema["maxItems"] = hi
    g = gm.JsonSchema(schema, whitespace="compact")
    assert len(g.rules()) < 150
    compiled = g.compile(byte_vocabulary())
    for n in sorted({0, 1, lo - 1, lo, lo + 1, 64, 65, min(hi or 400, 400)}):
        if n >= 0:
            want = lo <= n and (hi is None or n <= hi)
            assert accepts(compiled, "[" + ",".join(["7"] * n) + "]") == want, n
    if hi is not None and hi <= 300:  # at the bound, no further item may start
        m = compiled.matcher()
        for b in ("[" + ",".join(["7"] * hi)).encode():
            m.advance(b + 1)
        assert ord(",") + 1 not in m.mask() and ord("]") + 1 in m.mask()
    assert not accepts(compiled, '["x"]')


def test_a_large_max_properties_compiles() -> None:
    compiled = gm.JsonSchema({"type": "object", "maxProperties": 15000}, whitespace="compact").compile(
        byte_vocabulary()
    )
    assert accepts(compiled, '{"a":1,"b":2}')


def test_a_large_min_properties_is_answered_at_once() -> None:
    # only one non-declared member counts towards minProperties (duplicate keys; docs/json_schema.md)
    with pytest.raises(gm.GrammarError, match="admits no value"):
        gm.JsonSchema({"type": "object", "minProperties": 15000}).compile(byte_vocabulary())


def test_a_counting_machine_past_its_budget_is_refused_by_name() -> None:
    schema = {"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 500}
    with pytest.raises(BudgetExceeded, match=r"json_schema_counting_states budget \(100\)") as e:
        gm.JsonSchema(schema).compile(byte_vocabulary(), limits=gm.Limits(json_schema_counting_states=100))
    assert e.value.where == "/"
    compiled = gm.JsonSchema(schema, whitespace="compact").compile(byte_vocabulary())
    assert accepts(compiled, "[" + ",".join(["1"] * 500) + "]")
    assert not accepts(compiled, "[" + ",".join(["1"] * 499) + "]")


# ---- large enums: one trie terminal ------------------------------------------------------------------


def test_an_enum_of_100000_strings_compiles_through_a_trie() -> None:
    words = [f"value number {i}" for i in range(100000)]
    compiled = gm.JsonSchema({"enum": words}, whitespace="compact").compile(byte_vocabulary())
    assert accepts(compiled, '"value number 99999"') and accepts(compiled, '"value number 0"')
    assert not accepts(compiled, '"value number 100000"') and not accepts(compiled, '"value number "')


def test_an_enum_trie_accepts_every_spelling_of_its_strings() -> None:
    words = [
        "a/b",
        "tab\there",
        "é",
        'quote"d',
        "back\\slash",
        "\u2028",
        "𝄞",
        "",
        *(f"w{i}" for i in range(20)),
    ]
    schema = {"enum": [*words, 3, None]}
    compiled = gm.JsonSchema(schema, whitespace="compact").compile(byte_vocabulary())
    for text in [
        '"a/b"',
        r'"a\/b"',
        r'"tab\there"',
        r'"tab\u0009here"',
        '"é"',
        r'"quote\"d"',
        r'"back\\slash"',
    ]:
        assert accepts(compiled, text), text
    for text in ['"\u2028"', '"𝄞"', '""', '"w19"', "3", "null"]:
        assert accepts(compiled, text), text
    assert agrees_with_jsonschema(compiled, schema, [*words, "w20", "a", "b", 4, True]) == []


def test_an_enum_past_its_budget_is_refused_by_name() -> None:
    with pytest.raises(BudgetExceeded, match=r"json_schema_enum_values budget \(10\)"):
        gm.JsonSchema({"enum": list(range(11))}).compile(
            byte_vocabulary(), limits=gm.Limits(json_schema_enum_values=10)
        )


def test_2000_optional_properties_compile_in_bounded_time() -> None:
    props = {f"p{i}": {"type": "integer"} for i in range(2000)}
    compiled = gm.JsonSchema({"type": "object", "properties": props}, whitespace="compact").compile(
        byte_vocabulary()
    )
    assert accepts(compiled, '{"p0":1,"p1999":2}') and not accepts(compiled, '{"p1999":2,"p0":1}')


@pytest.mark.parametrize("extra", [False, {"type": "string"}])
def test_many_declared_properties_are_exact(extra: object) -> None:
    props = {f"p{i}": {"type": "integer"} for i in range(100)}
    required = [f"p{i}" for i in range(5, 100, 17)]
    schema = {"type": "object", "properties": props, "required": required, "additionalProperties": extra}
    compiled = gm.JsonSchema(schema, whitespace="compact").compile(byte_vocabulary())
    rng = random.Random(7)
    docs: list[object] = [{}, {k: 1 for k in props}, {k: 1 for k in required}]
    for _ in range(60):
        keys = [k for k in props if rng.random() < 0.3 or (k in required and rng.random() < 0.9)]
        doc: dict[str, object] = {k: rng.choice([1, "x"]) if rng.random() < 0.05 else 1 for k in keys}
        if rng.random() < 0.3:
            doc["zz"] = "y" if rng.random() < 0.8 else 2
        docs.append(doc)
    assert agrees_with_jsonschema(compiled, schema, docs) == []
