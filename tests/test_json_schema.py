"""JsonSchema: exact number ranges, patterns, formats, keywords and errors, checked against ``re``,
``json``, ``jsonschema`` and ``lark`` (never against grammarmask itself)."""

from __future__ import annotations

import json
import random
import re
import warnings
from typing import Any

import jsonschema
import lark
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from grammarmask.errors import GrammarError, UnsupportedSchemaError
from grammarmask.frontends.json_schema import JsonSchema, SchemaWarning
from grammarmask.frontends.jsonschema.formats import FORMATS
from grammarmask.frontends.jsonschema.keyset import KeySetTooLarge, key_regex
from grammarmask.frontends.jsonschema.numbers import number_regex
from grammarmask.frontends.jsonschema.strings import pattern_regex

from .support_json_schema import GrammarSampler, parses, validator

# ---- numbers --------------------------------------------------------------------------------------

BOUNDS = [
    None,
    0,
    1,
    -1,
    1.5,
    -1.5,
    0.25,
    -0.125,
    10,
    12.5,
    99.99,
    100,
    -100,
    0.1,
    1234,
    -7.75,
    3,
    1e-3,
    2**53 + 1,
    0.30000000000000004,
]


def number_text() -> st.SearchStrategy[str]:
    ip = st.one_of(
        st.sampled_from(["0", "1", "3", "9", "10", "12", "99", "100", "1234", "9007199254740993"]),
        st.integers(0, 5000).map(str),
    )
    frac = st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=5).map(lambda d: "." + d))
    exp = st.one_of(st.just(""), st.integers(-3, 3).map(lambda e: f"e{e}"))
    return st.tuples(st.sampled_from(["", "-"]), ip, frac, exp).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    lo=st.sampled_from(BOUNDS),
    hi=st.sampled_from(BOUNDS),
    lo_x=st.booleans(),
    hi_x=st.booleans(),
    integer=st.booleans(),
    texts=st.lists(number_text(), min_size=10, max_size=30),
)
def test_number_ranges_are_exact(
    lo: Any, hi: Any, lo_x: bool, hi_x: bool, integer: bool, texts: list[str]
) -> None:
    schema: dict[str, Any] = {"type": "integer" if integer else "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_x else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_x else "maximum"] = hi
    v = jsonschema.Draft202012Validator(schema)
    r = number_regex(lo, lo_x, hi, hi_x, integer=integer)
    for t in texts:
        m = re.match(r, t) if r else None
        accepted = m is not None and m.end() == len(t)
        valid = v.is_valid(json.loads(t))
        if accepted:
            assert valid, (schema, t)  # sound
        if valid and "e" not in t and len(t.replace("-", "").replace(".", "")) <= 15:
            # complete for plain decimals of <= 15 digits, and greedy: re.match takes all of it
            assert accepted, (schema, t, r)


def test_number_range_large_and_empty() -> None:
    r = number_regex(10**30, False, 10**30 + 5, True, integer=True)
    assert r is not None
    assert re.fullmatch(r, str(10**30 + 4)) and not re.fullmatch(r, str(10**30 + 5))
    assert number_regex(5, False, 3, False, integer=False) is None
    assert number_regex(2.1, False, 2.9, False, integer=True) is None


# ---- strings ----------------------------------------------------------------------------------------

PATTERNS = [
    r"^a+b?$",
    r"\d{2,3}",
    r"^[^a-c]*$",
    r"x|^y",
    r"^\w+@\w+\.com$",
    r"[\"\\/]",
    r"^.{2}$",
    r"(ab|cd)*e$",
    r"^\S+$",
    r"^[a-z]{1,4}(-[a-z]{1,4})*$",
    "é",
    r"^\s*$",
]
CHARS = 'abcdexy0129é中"\\/\n\t -_.@\u0663\u00a0'


@settings(max_examples=300, deadline=None)
@given(p=st.sampled_from(PATTERNS), s=st.text(CHARS, max_size=8))
def test_pattern_is_search_over_the_json_encoding(p: str, s: str) -> None:
    r, _ = pattern_regex(p, "/pattern")
    enc = json.dumps(s, ensure_ascii=False)[1:-1]
    if re.fullmatch(r, enc):
        assert re.search(p, s), (p, s)  # sound against jsonschema's re.search
    if re.search(p, s) and re.fullmatch(r"[ -~é中]*", s) and not re.search(r"[\d\s]", s.replace(" ", "")):
        assert re.fullmatch(r, enc), (p, s, r)  # complete on ASCII/plain text


@pytest.mark.parametrize("p", [r"(a)\1", r"(?=a)b", r"(?<!x)y", r"\p{L}", r"(?i)abc"])
def test_non_regular_patterns_are_refused(p: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as e:
        JsonSchema({"type": "string", "pattern": p}).to_lark()
    assert e.value.keyword == "pattern" and e.value.pointer == ""


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_formats_are_sound(name: str) -> None:
    schema = {"type": "string", "format": name}
    parser = lark.Lark(JsonSchema(schema).to_lark())
    v = validator(schema)
    s = GrammarSampler(parser, seed=7)
    for _ in range(150):
        text = s.sample()
        assert text is not None
        assert v.is_valid(json.loads(text)), text


@pytest.mark.parametrize(("name", "good", "bad"), [
    ("date", "2024-02-29", "2023-02-29"), ("date-time", "2024-01-01T10:00:00.5Z", "2024-01-01 10:00:00"),
    ("time", "23:59:59+01:00", "24:00:00Z"), ("ipv4", "192.168.0.1", "192.168.0.01"),
    ("ipv6", "::ffff:1.2.3.4", "1::2::3"), ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567"),
    ("email", "a.b@example.com", "a@@b"), ("duration", "P1Y2M3DT4H", "PT"),
    ("uri", "https://x.org/a?b#c", "x"),
    ("hostname", "a-b.example.com", "-a.com"),
    ("uri-reference", "../a/b?c#d", "a b"),
])  # fmt: skip
def test_format_examples(name: str, good: str, bad: str) -> None:
    parser = lark.Lark(JsonSchema({"type": "string", "format": name}).to_lark())
    assert parses(parser, json.dumps(good))
    assert not parses(parser, json.dumps(bad))


def test_string_lengths_count_characters_not_escapes() -> None:
    parser = lark.Lark(JsonSchema({"type": "string", "minLength": 2, "maxLength": 2}).to_lark())
    for s, ok in [("ab", True), ('"\\', True), ("é😀", True), ("a", False), ("abc", False)]:
        assert parses(parser, json.dumps(s)) == ok
        assert parses(parser, json.dumps(s, ensure_ascii=False)) == ok
    assert parses(parser, '"\\ud83d\\ude00a"')  # a surrogate pair is one character


@pytest.mark.parametrize(("lo", "hi"), [(0, 300), (1, 300), (64, 700), (0, 1000), (256, 512), (255, 513)])
def test_long_strings_are_chunked_exactly(lo: int, hi: int) -> None:
    parser = lark.Lark(JsonSchema({"type": "string", "minLength": lo, "maxLength": hi}).to_lark())
    for n in sorted({0, 1, lo - 1, lo, 255, 256, 257, 511, 512, 513, hi - 1, hi, hi + 1, hi + 64} - {-1}):
        for s in ("a" * n, ('é"\\n' * n)[:n]):
            assert parses(parser, json.dumps(s, ensure_ascii=False)) == (lo <= n <= hi), (lo, hi, n)


def test_long_strings_token_by_token_on_tekken(tekken: Any, tekken_tokenizer: Any) -> None:
    # The matcher's greedy lexing of the chunks, with real tokens that cross chunk boundaries.
    compiled = JsonSchema({"type": "string", "minLength": 2, "maxLength": 520}).compile(tekken)
    rng = random.Random(7)
    words = ["the", " guild", " é", "😀", "\\n", " raid", "s", "\"", " 42", "\t"]
    for n in (0, 1, 2, 255, 256, 257, 300, 512, 513, 519, 520, 521, 600):
        text = "".join(rng.choice(words) for _ in range(n))[:n]
        m = compiled.matcher()
        ok = True
        for t in tekken_tokenizer.encode(json.dumps(text, ensure_ascii=False), bos=False, eos=False):
            if not m.try_advance(t):
                ok = False
                break
        assert (ok and m.is_accepting()) == (2 <= n <= 520), n


KEY_PATTERNS = [r"^x-", r"^[a-z_]+$", r"a", r"\d", r".*", r"^.+$", r"^[^/]", r"b|^c", r"^(ab)*$"]


@settings(max_examples=300, deadline=None)
@given(
    match=st.lists(st.sampled_from(KEY_PATTERNS), max_size=2, unique=True),
    avoid=st.lists(st.sampled_from(KEY_PATTERNS), max_size=2, unique=True),
    exclude=st.lists(st.text("abx-_/c1", max_size=3), max_size=3),
    keys=st.lists(st.text('abx-_/c1\u0663é\n"', max_size=5), min_size=5, max_size=15),
)
def test_key_sets_match_re_search(
    match: list[str], avoid: list[str], exclude: list[str], keys: list[str]
) -> None:
    try:
        r = key_regex(match, avoid, exclude)
    except KeySetTooLarge:  # a refusal (the compiler reports the keyword), not a wrong answer
        assume(False)
        return
    for k in keys:
        want = (
            all(re.search(p, k) for p in match)
            and not any(re.search(p, k) for p in avoid)
            and k not in exclude
        )
        got = r is not None and re.fullmatch(r, json.dumps(k, ensure_ascii=False)[1:-1]) is not None
        if got:
            assert want, (match, avoid, exclude, k)  # sound against jsonschema's re.search
        elif want:
            assert "\n" in k, (match, avoid, exclude, k, r)  # complete except line terminators


# ---- structure ----------------------------------------------------------------------------------------

CASES: list[tuple[dict[str, Any], list[Any], list[Any]]] = [
    (
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["b"],
            "additionalProperties": False,
        },
        [{"b": "x"}, {"a": 1, "b": ""}],
        [{}, {"a": 1}, {"b": "x", "c": 1}],
    ),
    (
        {
            "type": "object",
            "properties": {"a": {"type": "null"}, "b": {"type": "null"}},
            "minProperties": 2,
            "maxProperties": 3,
            "additionalProperties": {"type": "null"},
        },
        [{"a": None, "x": None}, {"a": None, "b": None, "c": None}],
        [{"x": None}, {"a": None, "b": 1}],
    ),
    (
        {
            "type": "array",
            "prefixItems": [{"type": "string"}],
            "items": {"type": "number"},
            "minItems": 2,
            "maxItems": 3,
        },
        [["a", 1], ["a", 1, 2.5]],
        [["a"], [1, 1], ["a", 1, 2, 3]],
    ),
    ({"type": "array", "contains": {"const": 7}, "minContains": 2}, [[7, 1, 7], [7, 7]], [[7], [1, 2]]),
    (
        {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 10}], "not": {"enum": ["x", None]}},
        ["a", 10, "", "xx"],
        ["x", 9, None],
    ),
    (
        {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"k": {"const": "a"}, "v": {"type": "integer"}},
                    "required": ["k", "v"],
                },
                {
                    "type": "object",
                    "properties": {"k": {"const": "b"}, "v": {"type": "string"}},
                    "required": ["k", "v"],
                },
            ]
        },
        [{"k": "a", "v": 1}, {"k": "b", "v": "s"}],
        [{"k": "a", "v": "s"}],
    ),
    (
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "v": {"type": "integer"},
                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                    },
                    "required": ["v"],
                    "additionalProperties": False,
                }
            },
            "$ref": "#/$defs/node",
        },
        [{"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3}]}],
        [{"v": 1, "kids": [{}]}],
    ),
    (
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}},
                {"properties": {"a": {"maximum": 5}}, "required": ["a"]},
            ]
        },
        [{"a": 5}, {"a": 0, "z": 1}],
        [{"a": 6}, {}],
    ),
    (
        {
            "type": "object",
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
            "properties": {"id": {"type": "string"}},
        },
        [{"id": "a", "x-1": 2}, {}],
        [{"y": 1}, {"x-a": "s"}],
    ),
    (
        {"type": "object", "propertyNames": {"pattern": "^[a-z]+$", "maxLength": 3}},
        [{"abc": 1}, {}],
        [{"abcd": 1}, {"A": 1}],
    ),
    ({"enum": [[1, {"a": None}], "x", 2.5, None]}, [[1, {"a": None}], "x", 2.5, None], [[1], "y", 2]),
    (
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "array",
            "items": [{"type": "integer"}],
            "additionalItems": False,
        },
        [[1], []],
        [[1, 2], ["a"]],
    ),
    (
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "integer",
            "minimum": 1,
            "exclusiveMinimum": True,
        },
        [2],
        [1, 2.0],
    ),
    ({"type": ["integer", "null"], "multipleOf": 5}, [None, 0, -15, 100], [3, 7.5]),
    (
        {"type": "string", "pattern": "^[0-9a-f]+$", "minLength": 2, "maxLength": 4},
        ["ab", "0f0f"],
        ["a", "abcde"],
    ),
    (
        {
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "patternProperties": {"^x-": {"type": "integer"}},
        },
        [{"id": "a", "x-1": 2, "y": [1]}, {"x-": 0}],
        [{"x-1": "s"}, {"id": 1}],
    ),
    (
        {
            "type": "object",
            "patternProperties": {"a": {"type": "integer"}, "b": {"minimum": 3}},
            "additionalProperties": {"type": "null"},
        },
        [{"ab": 3, "a": 1, "z": None}, {"b": "s"}],
        [{"ab": 2}, {"a": "s"}, {"z": 1}],
    ),
    (
        {"type": "array", "items": {"enum": ["a", "b", 1, True]}, "uniqueItems": True, "minItems": 1},
        [["a"], ["b", 1, True, "a"], [1, True]],
        [[], ["a", "a"], [1, 1], ["c"]],
    ),
    ({"type": "string", "minLength": 1, "not": {"pattern": "//"}}, ["a", "/a/"], ["", "a//b"]),
    (
        {
            "type": "object",
            "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}},
            "dependentRequired": {"a": ["b"], "c": ["a"]},
        },
        [{"b": 1, "a": 1}, {"b": 1}, {}, {"b": 1, "a": 2, "c": 3}, {"x": 1}],
        [{"a": 1}, {"c": 1}, {"b": 1, "c": 1}],
    ),
    (
        {"if": {"type": "string"}, "then": {"maxLength": 2}, "else": {"type": "integer"}},
        ["ab", 3, -1],
        ["abc", 1.5, None],
    ),
    (
        {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {"a": {"type": "integer"}, "b": {}},
            "dependencies": {"b": ["a"]},
        },
        [{"a": 1, "b": 2}, {"a": 1}, {}],
        [{"b": 1}],
    ),
    # formats jsonschema never checks are annotations (there and here); lengths still apply
    (
        {"type": "string", "format": "semver", "maxLength": 5},
        ["1.2.3", "", "not a semver"[:5]],
        ["1.2.3.4", 3],
    ),
    (
        {"type": "object", "properties": {"c": {"format": "css-color", "type": "string"}}, "required": ["c"]},
        [{"c": "red"}, {"c": ""}],
        [{"c": 1}, {}],
    ),
    (  # OpenAPI's base64 "byte": jsonschema does not check it, so a non-base64 string is valid
        {"type": "string", "format": "byte"},
        ["aGVsbG8=", "/9j/4AAQ not base64"],
        [3, None],
    ),
    # pattern/format with lengths that do not fold into the regex: an exact intersection terminal
    (
        {"type": "string", "maxLength": 12, "pattern": r"^(\d+\.\d+\.\d+.*)$"},
        ["1.2.3", "1.2.3-beta.1", "10.20.30-~"],
        ["1.2.3-beta.10", "1.2", "x1.2.3", 5],
    ),
    (
        {"type": "string", "minLength": 5, "maxLength": 9, "pattern": r"^\S+@\S+$"},
        ["a@b.c", "ab@cd.efg", "~@\"x\"y"],
        ["a@b", "ab@cd.efgh", "a @b.c", "@@@@", "abcdefg"],
    ),
    (
        {"type": "string", "format": "date", "pattern": "^[0-9]{4}-01"},
        ["2020-01-31", "1999-01-01"],
        ["2020-02-01", "2020-01-32", "2020-01"],
    ),
    (  # a multiple of 1 in every draft (6000.0 % 1 == 0), though not an integer type in draft 4
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "multipleOf": 1,
         "maximum": 9e3},
        [6000.0, 6000, 0],
        [6000.5, 9001, "x"],
    ),
    (
        {"type": "string", "format": "ipv4", "maxLength": 9},
        ["1.2.3.4", "10.20.3.4"],
        ["10.20.30.4", "1.2.3"],
    ),
]


@pytest.mark.parametrize(("schema", "valid", "invalid"), CASES)
@pytest.mark.parametrize("whitespace", ["flexible", "compact"])
def test_keywords_accept_exactly(
    schema: dict[str, Any], valid: list[Any], invalid: list[Any], whitespace: str
) -> None:
    v = validator(schema)
    parser = lark.Lark(JsonSchema(schema, whitespace=whitespace).to_lark())
    for doc in valid:
        assert v.is_valid(doc)
        assert parses(parser, json.dumps(doc, separators=(",", ":")))
        assert parses(parser, json.dumps(doc, indent=2)) == (
            whitespace == "flexible" or "\n" not in json.dumps(doc, indent=2)
        )
    for doc in invalid:
        assert not v.is_valid(doc)
        for t in (json.dumps(doc, separators=(",", ":")), json.dumps(doc, indent=2)):
            assert not parses(parser, t)
    sampler = GrammarSampler(parser, seed=1)
    for _ in range(60):
        text = sampler.sample()
        assert text is not None and v.is_valid(json.loads(text)), text


def test_whitespace_is_bounded_and_indent_policy() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    flex = lark.Lark(JsonSchema(schema, max_ws=4).to_lark())
    assert parses(flex, "[ 1 ,\n    2 ]")
    assert not parses(flex, "[1,\n\n2]") and not parses(flex, "[1,     2]")
    ind = lark.Lark(JsonSchema(schema, indent=2).to_lark())
    assert parses(ind, json.dumps([1, 2], indent=2)) and parses(ind, "[1, 2]")
    assert not parses(ind, "[1,\n   2]") and not parses(ind, "[1,\t2]")
    compact = lark.Lark(JsonSchema(schema, whitespace="compact").to_lark())
    assert parses(compact, "[1,2]") and not parses(compact, "[1, 2]")


# ---- API, errors, caching -------------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "fragment"), [
    ("{not json", "not valid JSON"),
    ('{"type": "object",}', "line 1"),
    ([1, 2], "must be an object, a boolean"),
    ({"properties": {"a": 5}, "required": ["a"]}, "not a valid JSON Schema at /properties/a"),
    ({"$ref": "#/$defs/missing"}, "cannot be resolved"),
    ({"type": "integer", "minimum": 5, "maximum": 3}, "no number in the range"),
    ({"enum": []}, "no enum/const value"),
    ({"type": "object", "properties": {"a": {"enum": []}}, "required": ["a"]},
     "no enum/const value satisfies the schema at /properties/a"),
    ({"type": "strin"}, "not a valid JSON Schema at /type"),
    ({"type": "string", "minLength": -1}, "not a valid JSON Schema at /minLength"),
    (False, "admits no value"),
])  # fmt: skip
def test_bad_input_errors(schema: Any, fragment: str) -> None:
    with pytest.raises(GrammarError) as e:
        JsonSchema(schema).to_lark()
    assert fragment in str(e.value)


@pytest.mark.parametrize(("schema", "keyword", "pointer"), [
    ({"properties": {"a": {"if": {"properties": {"x": {"const": 1}}}}}}, "if", "/properties/a"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems", ""),
    ({"type": "number", "multipleOf": 0.1}, "multipleOf", ""),
    ({"oneOf": [{"type": "integer"}, {"multipleOf": 3}]}, "oneOf", ""),
    ({"type": "string", "format": "color"}, "format", ""),
    ({"not": {"if": {"type": "string"}, "then": {"minLength": 2}}}, "not", ""),
    ({"items": {"$dynamicRef": "#x"}}, "$dynamicRef", "/items"),
    # a length limit past the product's state budget (JSONSchemaBench o9907: refused in ms, not 5 s)
    ({"properties": {"icon": {"type": "string", "maxLength": 32767,
                              "pattern": "^data:image/(png|svg\\+xml);base64,[0-9a-zA-Z+/=]*$"}}},
     "maxLength", "/properties/icon"),
])  # fmt: skip
def test_unsupported_keywords_name_keyword_and_pointer(schema: Any, keyword: str, pointer: str) -> None:
    with pytest.raises(UnsupportedSchemaError) as e:
        JsonSchema(schema).to_lark()
    assert (e.value.keyword, e.value.pointer) == (keyword, pointer)
    with pytest.warns(SchemaWarning, match=re.escape(keyword)):
        text = JsonSchema(schema, strict=False).to_lark()
    assert text.startswith("start:")


def test_options_are_validated() -> None:
    for kw in ({"whitespace": "pretty"}, {"max_ws": 0}, {"indent": 0}):
        with pytest.raises(GrammarError):
            JsonSchema({}, **kw)


def test_grammar_rules_are_cached_by_content() -> None:
    a = JsonSchema({"type": "object", "properties": {"x": {"type": "integer"}}})
    b = JsonSchema('{"properties": {"x": {"type": "integer"}}, "type": "object"}')
    assert a.cache_key() == b.cache_key()
    assert a.rules() is b.rules()
    assert (
        JsonSchema({"type": "object"}, whitespace="compact").cache_key()
        != JsonSchema({"type": "object"}).cache_key()
    )


def test_from_pydantic() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        name: str
        qty: int = pydantic.Field(ge=1, le=99)
        tags: list[str] = []
        parent: Item | None = None

    g = JsonSchema.from_pydantic(Item)
    parser = lark.Lark(g.to_lark())
    good = {
        "name": "x",
        "qty": 3,
        "tags": ["a"],
        "parent": {"name": "y", "qty": 1, "tags": [], "parent": None},
    }
    assert parses(parser, json.dumps(good))
    assert not parses(parser, json.dumps({"name": "x", "qty": 0}))
    Item.model_validate_json(json.dumps(good))
    sampler = GrammarSampler(parser, seed=2)
    for _ in range(40):
        text = sampler.sample()
        assert text is not None
        Item.model_validate_json(text)  # pydantic agrees with every sampled document
    with pytest.raises(GrammarError):
        JsonSchema.from_pydantic(int)


def test_warnings_are_user_warnings() -> None:
    assert issubclass(SchemaWarning, UserWarning)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        JsonSchema({"type": "array", "uniqueItems": True}, strict=False).to_lark()
    assert any("uniqueItems" in str(w.message) and "/" in str(w.message) for w in rec)


def test_random_schemas_round_trip() -> None:
    rng = random.Random(5)
    for _ in range(30):
        lo = rng.randint(-50, 50)
        schema = {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 300)},
                "s": {"type": "string", "maxLength": rng.randint(0, 5)},
                "e": {"enum": ["a", 1, None]},
            },
            "required": rng.sample(["n", "s", "e"], rng.randint(0, 3)),
            "additionalProperties": rng.random() < 0.5,
        }
        v = validator(schema)
        parser = lark.Lark(JsonSchema(schema).to_lark())
        sampler = GrammarSampler(parser, seed=rng.randint(0, 10**6))
        for _ in range(10):
            text = sampler.sample()
            assert text is not None and v.is_valid(json.loads(text)), (schema, text)


# ---- intersection terminals through grammarmask's own compile (the product automaton) ---------------

_TOKENS = [bytes([i]) for i in range(256)] + [b'"1.', b"2.3", b'-x"', b"@b", b'a@', b'c"', b'"a', b"xxxx"]
_ISECT = [
    {"type": "string", "maxLength": 12, "pattern": r"^(\d+\.\d+\.\d+.*)$"},
    {"type": "string", "minLength": 5, "maxLength": 9, "pattern": r"^\S+@\S+$"},
    {"type": "string", "maxLength": 10, "pattern": "a", "format": "email"},
]


@pytest.fixture(scope="module")
def small_vocab() -> Any:
    from grammarmask import Vocabulary

    eos = len(_TOKENS)
    return Vocabulary.from_tokens([*_TOKENS, b""], eos_token_id=eos, special_token_ids=[eos])


def _accepts(compiled: Any, tokens: list[int]) -> bool:
    from grammarmask.errors import TokenRejected

    m = compiled.matcher()
    for t in tokens:
        if t not in m.mask():
            return False
        try:
            m.advance(t)
        except TokenRejected:
            raise AssertionError("the mask allowed a token advance refused") from None
    return bool(m.is_accepting())


def _greedy(text: bytes) -> list[int]:
    by = {b: i for i, b in enumerate(_TOKENS)}
    out, i = [], 0
    while i < len(text):
        j = max(k for k in range(i + 1, min(len(text), i + 4) + 1) if text[i:k] in by)
        out.append(by[text[i:j]])
        i = j
    return out


@pytest.mark.parametrize("schema", _ISECT)
@settings(max_examples=150, deadline=None)
@given(s=st.text("0123456789.-xa@b c", max_size=14))
def test_intersection_terminals_match_jsonschema(schema: dict[str, Any], s: str, small_vocab: Any) -> None:
    compiled = JsonSchema(schema).compile(small_vocab)
    text = json.dumps(s).encode()
    expected = validator(schema).is_valid(s)
    if schema.get("format") == "email" and expected:
        assume(re.fullmatch(FORMATS["email"], s) is not None)  # the format regex is a documented subset
    assert _accepts(compiled, _greedy(text)) == expected
    assert _accepts(compiled, list(text)) == expected  # byte by byte too


# ---- not / oneOf through the complement of a branch (negation.py) -----------------------------------

_LEAF = st.sampled_from([
    {"type": "integer"}, {"type": "string"}, {"type": ["string", "null"]}, {"type": "number", "maximum": 2},
    {"type": "string", "minLength": 2}, {"type": "integer", "minimum": 2}, {"enum": ["x", None]},
    {"maxLength": 1}, {"type": "boolean"}, {"not": {"type": "string"}}, {},
])  # fmt: skip


@st.composite
def _branch(draw: Any) -> dict[str, Any]:
    s: dict[str, Any] = {}
    if draw(st.booleans()):
        s["type"] = "object"
    props = draw(st.dictionaries(st.sampled_from(["a", "b"]), _LEAF, max_size=2))
    if props:
        s["properties"] = props
    req = draw(st.lists(st.sampled_from(["a", "b"]), unique=True, max_size=2))
    if req:
        s["required"] = req
    if not s or draw(st.integers(0, 4)) == 0:
        s = dict(draw(_LEAF), **({"required": req} if req else {}))
    return s


_VALUES = [None, True, 1, 2.5, 3, "x", "yyy", [], {}]
_INSTANCES = [*_VALUES, *({"a": v} for v in _VALUES), *({"b": v} for v in _VALUES)] + [
    {"a": v, "b": w} for v in _VALUES for w in (None, 1, 2.5, "x", "yyy")
]


def _lark_accepts(parser: lark.Lark, doc: Any) -> bool:
    import itertools

    if isinstance(doc, dict):
        return any(
            parses(parser, json.dumps({k: doc[k] for k in order}, separators=(",", ":")))
            for order in itertools.permutations(doc)
        )
    return parses(parser, json.dumps(doc, separators=(",", ":")))


def _matcher_accepts(compiled: Any, doc: Any) -> bool:
    import itertools

    orders = list(itertools.permutations(doc)) if isinstance(doc, dict) else [None]
    for order in orders:
        d = doc if order is None else {k: doc[k] for k in order}
        if _accepts(compiled, _greedy(json.dumps(d, separators=(",", ":")).encode())):
            return True
    return False


@settings(max_examples=40, deadline=None)
@given(branches=st.lists(_branch(), min_size=1, max_size=3), kind=st.sampled_from(["oneOf", "not"]))
def test_complements_are_exact(branches: list[dict[str, Any]], kind: str, small_vocab: Any) -> None:
    schema: dict[str, Any] = {"oneOf": branches} if kind == "oneOf" else {"not": branches[0]}
    try:
        text = JsonSchema(schema, whitespace="compact").to_lark()
    except UnsupportedSchemaError:
        return  # refused by name: allowed (the refusal itself is tested above)
    except GrammarError as e:
        assert "admits no value" in str(e)
        assert not any(validator(schema).is_valid(d) for d in _INSTANCES)
        return
    parser = lark.Lark(text)
    v = validator(schema)
    compiled = JsonSchema(schema, whitespace="compact").compile(small_vocab)  # grammarmask's own CFG
    for i, doc in enumerate(_INSTANCES):
        assert _lark_accepts(parser, doc) == v.is_valid(doc), (doc, schema)
        if i % 3 == 0:
            assert _matcher_accepts(compiled, doc) == v.is_valid(doc), (doc, schema)


# ---- multipleOf 10^-k, as jsonschema's floating-point check sees it (multiples.py) ------------------


@settings(max_examples=300, deadline=None)
@given(
    m=st.just(0.01),
    ip=st.one_of(st.integers(0, 999), st.integers(0, 10**13)),
    frac=st.text("0123456789", max_size=4),
    neg=st.booleans(),
)
def test_decimal_multiple_of_matches_jsonschema(m: float, ip: int, frac: str, neg: bool) -> None:
    from grammarmask.frontends.jsonschema.multiples import decimal_multiple_regex

    text = ("-" if neg else "") + str(ip) + ("." + frac if frac else "")
    r = decimal_multiple_regex(m)
    assert r is not None
    valid = jsonschema.Draft202012Validator({"multipleOf": m}).is_valid(json.loads(text))
    small = ip < 1000 and len(frac.rstrip("0")) <= 2
    if re.fullmatch(r, text):
        assert valid, text  # sound everywhere
    elif small:
        assert not valid, text  # exact for integer parts below 1000


@pytest.mark.parametrize("schema", [
    {"type": "number", "multipleOf": 0.01},
    {"type": "number", "minimum": -10, "exclusiveMaximum": 10.5, "multipleOf": 0.01},
    {"type": ["number", "null"], "multipleOf": 0.01, "maximum": 1},
])  # fmt: skip
def test_decimal_multiple_of_schemas(schema: dict[str, Any], small_vocab: Any) -> None:
    v = validator(schema)
    parser = lark.Lark(JsonSchema(schema).to_lark())
    compiled = JsonSchema(schema).compile(small_vocab)
    texts = ["0", "0.07", "0.08", "99.99", "-5.25", "10.5", "10.49", "-10", "-10.01", "0.5", "1.001",
             "0.999", "0.0", "3.10", "null", "12345.25", "12345.26"]  # fmt: skip
    for t in texts:
        valid = v.is_valid(json.loads(t))
        lark_ok = parses(parser, t)
        gm_ok = _accepts(compiled, _greedy(t.encode()))
        assert lark_ok == gm_ok, t  # the lookahead text and the product automaton agree
        assert not gm_ok or valid, t  # sound
        if "." not in t or (abs(float(t)) < 1000 and len(t.split(".")[1].rstrip("0")) <= 2):
            assert gm_ok == valid, t  # exact in the enumerated region


# ---- patternProperties past the key-set DFA limits: key intersection terminals ----------------------

_PP = [
    {"type": "object", "patternProperties": {"^[0-9a-z_-]{1,25}$": {"type": ["number", "boolean"]}},
     "additionalProperties": False},
    {"type": "object", "minProperties": 1, "patternProperties": {"^[a-z0-9_-]{0,25}$": {"type": "string"}}},
    {"type": "object", "properties": {"ab": {"type": "null"}},
     "patternProperties": {"^[a-b]{0,30}$": {"type": "string"}, "b{22}": {"maxLength": 1}},
     "additionalProperties": {"type": "integer"}},
]  # fmt: skip
_PP_KEYS = ["a", "ab", "b" * 22, "b" * 23, "x", "a-b", "a" * 26, "a" * 31, "é", "", "A"]


@pytest.mark.parametrize("schema", _PP)
def test_pattern_properties_past_the_key_dfa_limit(schema: dict[str, Any], small_vocab: Any) -> None:
    parser = lark.Lark(JsonSchema(schema, whitespace="compact").to_lark())
    compiled = JsonSchema(schema, whitespace="compact").compile(small_vocab)
    v = validator(schema)
    for k in _PP_KEYS:
        for val in (None, 1, "x", "yy", True):
            doc = {k: val}
            text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
            assert parses(parser, text) == v.is_valid(doc), doc
            assert _accepts(compiled, list(text.encode())) == v.is_valid(doc), doc


def test_one_of_disjointness_reads_unnormalised_property_types() -> None:
    # A property's {"type": "integer"} was read as the "types" i, n, t, e, g, r: disjoint from
    # everything, so these overlapping branches were taken as disjoint and {"a": 1} (both match) passed.
    schema = {"oneOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                        {"type": "object", "properties": {"a": {"maxLength": 1}}, "required": ["a"]}]}
    parser = lark.Lark(JsonSchema(schema).to_lark(), parser="earley", lexer="dynamic")
    validator = jsonschema.Draft202012Validator(schema)
    for doc in [{"a": 1}, {"a": "x"}, 3, {"a": "xy"}, {"b": 1}]:
        text = json.dumps(doc)
        try:
            parser.parse(text)
            accepted = True
        except lark.exceptions.LarkError:
            accepted = False
        assert accepted == validator.is_valid(doc), text


def test_sampler_outputs_parse_with_lark() -> None:
    text = 'start: "[" item ("," item)* "]"\nitem: /[a-c]{1,3}/ | /-?(0|[1-9][0-9]*)/ | start\n'
    parser = lark.Lark(text)
    s = GrammarSampler(parser, seed=3)
    outs = [s.sample() for _ in range(30)]
    assert all(o is not None and parses(parser, o) for o in outs)
    assert len(set(outs)) > 5


def test_the_schema_is_checked_at_construction_and_warnings_point_at_the_caller() -> None:
    import sys

    import grammarmask as gm
    from grammarmask.testing import byte_vocabulary

    with pytest.raises(GrammarError, match="/properties/a/minimum"):
        JsonSchema({"type": "object", "properties": {"a": {"minimum": "x"}}})  # before any compile
    schema = {"type": "string", "oneOf": [{"$ref": "#"}, True, True]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        JsonSchema(schema, strict=False)
    assert caught and all(w.filename == __file__ and w.lineno == line for w in caught)
    # a budget is the compile's business: a schema over the default budget still constructs
    deep = {"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 500}
    g = JsonSchema(deep, whitespace="compact")
    with pytest.raises(gm.BudgetExceeded):
        g.compile(byte_vocabulary(), limits=gm.Limits(json_schema_counting_states=100))
    assert g.compile(byte_vocabulary()) is not None
