"""The complement of a schema as a union of schemas the compiler enforces (for ``oneOf`` and ``not``).

``complement(s)`` returns schemas whose union is exactly the set of instances ``s`` rejects, or None
when some keyword of ``s`` has no such form (the caller then refuses). Each keyword contributes the
instances that violate it: ``required: [a, b]`` gives "an object without a" and "an object without b";
``properties: {p: S}`` gives "an object with p whose value is in the complement of S" (recursively);
``minLength: 3`` gives "a string of at most 2 characters"; ``type`` gives the other types; ``not: X``
gives X. The union of these is the complement because an instance fails a schema iff it fails one of
its keywords (the keywords handled here are independent of each other).

Not handled (None): keywords whose violation is not a schema of this kind (``multipleOf``,
``additionalProperties`` other than true, ``items``, ``anyOf``/``oneOf``, enforced formats, ...) and
enum values other than null, booleans and strings. The complement of ``type: integer`` holds the
non-integer numbers, produced as ``numbers.NON_INTEGER`` (no exponent forms: a narrowing).
"""

from __future__ import annotations

from typing import Any

from .formats import enforced_format
from .keywords import ENFORCED, REFUSED, is_trivial

__all__ = ["MAX_ALTERNATIVES", "complement"]

MAX_ALTERNATIVES = 32
_MAX_DEPTH = 4
_BASE_TYPES = ("null", "boolean", "object", "array", "number", "string")


def complement(flat: Any, draft: int, flatten: Any, depth: int = 0) -> list[Any] | None:
    """Schemas whose union is exactly what ``flat`` (a merged, $ref-free node) rejects, or None.

    ``flatten(schema)`` merges a child's ``allOf``/``$ref`` (None: the child is false); it may raise
    ``UnsupportedSchemaError``, which the caller handles.
    """
    if flat is None or flat is False:
        return [True]
    if flat is True or is_trivial(flat):
        return []
    if depth > _MAX_DEPTH or not isinstance(flat, dict):
        return None
    out: list[Any] = []
    for k, v in flat.items():
        if k in REFUSED or k.startswith("_"):  # if/then/else, merged anyOf groups, ...: no form
            return None
        if k not in ENFORCED:
            continue
        alts = _keyword(k, v, flat, draft, flatten, depth)
        if alts is None:
            return None
        out += alts
        if len(out) > MAX_ALTERNATIVES:
            return None
    return out


def _keyword(k: str, v: Any, s: dict[str, Any], draft: int, flatten: Any, depth: int) -> list[Any] | None:
    if k == "type":
        t = set(v)
        other = [x for x in _BASE_TYPES if x not in t and not (x == "number" and "integer" in t)]
        alts: list[Any] = [{"type": other}] if other else []
        if "integer" in t and "number" not in t:  # and the numbers that are not integers
            alts.append({"type": ["number"], "not": {"type": ["integer"]}})
        return alts
    if k == "not":  # violated by what v accepts; v's own unevaluated* would see the merged node
        fv = flatten(v)
        if isinstance(fv, dict) and {"unevaluatedProperties", "unevaluatedItems"} & set(fv):
            return None
        return [v]
    if k in ("enum", "const"):
        vals = v if k == "enum" else [v]
        if not isinstance(vals, list) or not all(x is None or isinstance(x, (bool, str)) for x in vals):
            return None
        return [{"not": {"enum": vals}}]
    if k == "required":
        return [{"type": ["object"], "not": {"required": [r]}} for r in v]
    if k == "properties":
        out = []
        for p, sub in v.items():
            fsub = flatten(sub)
            sub_alts = complement(fsub, draft, flatten, depth + 1)
            if sub_alts is None:
                return None
            out += [{"type": ["object"], "required": [p], "properties": {p: a}} for a in sub_alts]
        return out
    if k == "additionalProperties":
        return [] if v is True or (isinstance(v, dict) and is_trivial(v)) else None
    if k == "format":
        return [] if enforced_format(s) is None else None
    if k == "pattern":
        return [{"type": ["string"], "not": {"pattern": v}}]
    bound = _BOUNDS.get(k)
    if bound is not None and isinstance(v, (int, float)) and not isinstance(v, bool):
        kind, opposite, shift = bound
        if shift:  # integer counts: minLength n is violated by maxLength n - 1
            w = v - 1 if opposite.startswith("max") else v + 1
            return [] if w < 0 else [{"type": [kind], opposite: int(w)}]
        if draft == 4 and opposite.startswith("exclusive"):
            return [{"type": [kind], opposite.replace("exclusiveM", "m"): v, opposite: True}]
        return [{"type": [kind], opposite: v}]
    return None


# keyword: (type it constrains, the keyword of its violation, integer count?)
_BOUNDS: dict[str, tuple[str, str, bool]] = {
    "minLength": ("string", "maxLength", True),
    "maxLength": ("string", "minLength", True),
    "minItems": ("array", "maxItems", True),
    "maxItems": ("array", "minItems", True),
    "minProperties": ("object", "maxProperties", True),
    "maxProperties": ("object", "minProperties", True),
    "minimum": ("number", "exclusiveMaximum", False),
    "exclusiveMinimum": ("number", "maximum", False),
    "maximum": ("number", "exclusiveMinimum", False),
    "exclusiveMaximum": ("number", "minimum", False),
}
