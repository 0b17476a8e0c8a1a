"""Keyword tables, draft normalisation and ``allOf`` merging of JSON Schema nodes.

Schemas are plain dicts. ``normalize`` rewrites older drafts' spellings into draft 2020-12's
(``items`` arrays become ``prefixItems``, boolean ``exclusiveMinimum`` becomes a number, ...).
``merge`` computes one schema equivalent to the conjunction of two ref-free ones, or raises
``UnsupportedSchemaError`` when the conjunction has no exact single-schema form.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from jsonschema._utils import equal

from ...errors import GrammarError, UnsupportedSchemaError

__all__ = ["ANNOTATIONS", "ENFORCED", "is_trivial", "merge", "normalize", "refuse"]

Schema = Any

ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly",
        "$schema", "$id", "id", "$anchor", "$defs", "definitions", "$vocabulary", "contentMediaType",
        "contentEncoding", "contentSchema", "$dynamicAnchor", "$recursiveAnchor", "nullable",
    }
)  # fmt: skip
ENFORCED = frozenset(
    {
        "type", "enum", "const", "allOf", "anyOf", "oneOf", "not", "$ref",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "minLength", "maxLength", "pattern", "format",
        "items", "prefixItems", "minItems", "maxItems", "contains", "minContains", "unevaluatedItems",
        "properties", "required", "additionalProperties", "patternProperties", "propertyNames",
        "minProperties", "maxProperties", "unevaluatedProperties", "uniqueItems", "maxContains",
        "dependentRequired",
    }
)  # fmt: skip
REFUSED = frozenset(
    {
        "if", "then", "else", "dependentSchemas", "dependencies",
        "$dynamicRef", "$recursiveRef",
    }
)  # fmt: skip
ALL_TYPES = ("null", "boolean", "object", "array", "number", "string", "integer")


def refuse(keyword: str, pointer: str, why: str) -> UnsupportedSchemaError:
    return UnsupportedSchemaError(why, keyword=keyword, pointer=pointer)


def is_trivial(s: Schema) -> bool:
    """True when ``s`` accepts every instance (``true``, ``{}`` or annotations only)."""
    if s is True:
        return True
    return isinstance(s, dict) and all(k in ANNOTATIONS or k not in ENFORCED | REFUSED for k in s)


def normalize(s: Schema, draft: int) -> Schema:
    """Rewrite one node's older-draft keywords into draft 2020-12 form (children untouched)."""
    if not isinstance(s, dict):
        return s
    s = dict(s)
    if draft <= 7 and "$ref" in s:  # siblings of $ref are ignored before 2019-09
        return {"$ref": s["$ref"]}
    deps = s.get("dependencies")
    if draft <= 7 and isinstance(deps, dict) and all(isinstance(v, list) for v in deps.values()):
        s["dependentRequired"] = s.pop("dependencies")  # the array form is dependentRequired
    if draft < 2020:
        s.pop("prefixItems", None)  # not a keyword before 2020-12
        if isinstance(s.get("items"), list):
            s["prefixItems"] = s.pop("items")
            if "additionalItems" in s:
                s["items"] = s.pop("additionalItems")
        else:
            s.pop("additionalItems", None)
    if draft == 4:
        for ex, inc in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(s.get(ex), bool) and s.pop(ex) and inc in s:
                s[ex] = s.pop(inc)
    if isinstance(s.get("type"), str):
        s["type"] = [s["type"]]
    return s


def types_of(s: dict[str, Any]) -> set[str]:
    t = s.get("type")
    if isinstance(t, str):  # a schema not normalized yet (a property's, say): "integer" is one type
        t = [t]
    out = set(ALL_TYPES) if t is None else set(t)
    if "number" in out:
        out.add("integer")
    return out


def _meet_types(a: set[str], b: set[str]) -> list[str]:
    out = a & b
    return [t for t in ALL_TYPES if t in out]


def _ptr(p: str, *parts: object) -> str:
    return p + "".join("/" + str(x).replace("~", "~0").replace("/", "~1") for x in parts)


def _both(a: Schema, b: Schema) -> Schema:
    if is_trivial(a):
        return b
    if is_trivial(b) or a == b:
        return a
    if a is False or b is False:
        return False
    return {"allOf": [a, b]}


def _keyset_schema(s: dict[str, Any], key: str) -> Schema:
    """The schema ``s`` imposes on the value of property ``key`` (properties, patterns, additional)."""
    parts: list[Schema] = []
    if key in s.get("properties", {}):
        parts.append(s["properties"][key])
    matched = [v for p, v in s.get("patternProperties", {}).items() if re.search(p, key)]
    parts += matched
    if key not in s.get("properties", {}) and not matched and "additionalProperties" in s:
        parts.append(s["additionalProperties"])
    out: Schema = True
    for p in parts:
        out = _both(out, p)
    return out


def merge(a: dict[str, Any], b: dict[str, Any], ptr: str) -> dict[str, Any]:
    """A schema equivalent to ``allOf: [a, b]`` for normalised, $ref-free nodes a and b."""
    out: dict[str, Any] = {}
    keys = [k for k in dict.fromkeys([*a, *b]) if k in ENFORCED or k in REFUSED]
    for k in keys:
        if k not in a or k not in b:
            out[k] = a[k] if k in a else b[k]
            continue
        x, y = a[k], b[k]
        if k in ("type",):
            out[k] = _meet_types(types_of(a), types_of(b))
        elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"):
            out[k] = max(x, y)
        elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"):
            out[k] = min(x, y)
        elif k == "multipleOf":
            if isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool):
                out[k] = x * y // math.gcd(x, y)
            elif x == y:
                out[k] = x
            else:
                raise refuse(k, ptr, "two different non-integer multipleOf cannot be combined")
        elif k == "required":
            out[k] = list(dict.fromkeys([*x, *y]))
        elif k in ("allOf", "anyOf", "oneOf"):
            out[k] = [*x, *y] if k == "allOf" else x
            if k != "allOf":
                out.setdefault("_more_" + k, []).append(y)
        elif k == "not":
            out[k] = {"anyOf": [x, y]}
        elif k == "enum":
            out[k] = [v for v in x if any(equal(v, w) for w in y)]
        elif k == "const":
            if not equal(x, y):
                out["enum"] = []
            out[k] = x
        elif k == "uniqueItems":
            out[k] = x or y
        elif k in (
            "propertyNames",
            "contains",
            "additionalProperties",
            "unevaluatedProperties",
            "unevaluatedItems",
            "items",
        ):
            if k == "contains" and x != y:
                raise refuse(k, ptr, "two different contains cannot be combined")
            out[k] = _both(x, y)
        elif x == y:
            out[k] = x
        elif k not in ("properties", "patternProperties", "prefixItems"):
            raise refuse(k, ptr, f"two different {k!r} values cannot be combined into one exact constraint")
    for k in ("_more_anyOf", "_more_oneOf"):
        if k in a or k in b:
            out[k] = [*a.get(k, []), *b.get(k, []), *out.get(k, [])]
    _merge_properties(a, b, out, ptr)
    _merge_items(a, b, out)
    return out


def _merge_properties(a: dict[str, Any], b: dict[str, Any], out: dict[str, Any], ptr: str) -> None:
    if not any(k in s for s in (a, b) for k in ("properties", "patternProperties", "additionalProperties")):
        return
    pa, pb = a.get("patternProperties", {}), b.get("patternProperties", {})
    for s, other_pats in ((a, pb), (b, pa)):
        extra = s.get("additionalProperties", True)
        if not is_trivial(extra) and any(p not in s.get("patternProperties", {}) for p in other_pats):
            raise refuse(
                "patternProperties",
                ptr,
                "patternProperties combined with another schema's "
                "additionalProperties has no exact single-schema form",
            )
    props: dict[str, Any] = {}
    for key in dict.fromkeys([*a.get("properties", {}), *b.get("properties", {})]):
        props[key] = _both(_keyset_schema(a, key), _keyset_schema(b, key))
    if props:
        out["properties"] = props
    pats = dict(pa)
    for p, v in pb.items():
        pats[p] = _both(pats[p], v) if p in pats else v
    if pats:
        out["patternProperties"] = pats


def _merge_items(a: dict[str, Any], b: dict[str, Any], out: dict[str, Any]) -> None:
    la, lb = a.get("prefixItems"), b.get("prefixItems")
    if la is None and lb is None:
        return
    la, lb = la or [], lb or []
    ia, ib = a.get("items", True), b.get("items", True)
    n = max(len(la), len(lb))
    out["prefixItems"] = [_both(la[i] if i < len(la) else ia, lb[i] if i < len(lb) else ib) for i in range(n)]


def canonical(s: Schema) -> str:
    """``s`` as canonical JSON text (sorted keys, no spaces): the content key of a schema.

    Raises
    ------
    GrammarError
        ``s`` holds a float JSON cannot express (NaN, an infinity); the message names its JSON pointer.
    """
    try:
        return json.dumps(s, sort_keys=True, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:
        bad = _non_finite(s, "")
        if bad is None:
            raise
        raise GrammarError(
            f"the schema holds {bad[1]!r} at {bad[0] or '/'}, which JSON cannot express (no NaN or infinity)"
        ) from None


def _non_finite(s: Schema, ptr: str) -> tuple[str, float] | None:
    """The JSON pointer and value of the first NaN or infinity in ``s`` (None if there is none)."""
    stack = [(s, ptr)]
    while stack:  # iterative: a deeply nested schema must not hit the recursion limit here
        node, at = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return at, node
        if isinstance(node, dict):
            items = [(f"{at}/{str(k).replace('~', '~0').replace('/', '~1')}", v) for k, v in node.items()]
        elif isinstance(node, (list, tuple)):
            items = [(f"{at}/{i}", v) for i, v in enumerate(node)]
        else:
            continue
        stack.extend((v, p) for p, v in reversed(items))
    return None
