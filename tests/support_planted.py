"""Grammars with planted bugs, each beside a reference that is right (a correct grammar, ``re``,
``jsonschema``, a set): what ``tests/test_planted_bugs.py`` holds ``check_grammar`` to finding.

*over*: the buggy grammar accepts a document the reference rejects (a model could write it);
*under*: it rejects one the reference accepts (the mask pushes a model away from valid output).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

import grammarmask as gm
from grammarmask.pytest_plugin import strict_json

# a small test-description DSL, like the one of issue 18
DSL = r"""
start: test+
test: "test" ESCAPED_STRING "{" step* "}"
step: "expect" expr ";" | "let" NAME "=" expr ";"
?expr: atom | atom "==" atom
?atom: NAME | NUMBER | ESCAPED_STRING
%import common.ESCAPED_STRING
%import common.CNAME -> NAME
%import common.INT -> NUMBER
%import common.WS
%import common.CPP_COMMENT
%ignore WS
%ignore CPP_COMMENT
"""

JSON = r"""
?start: value
?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: ESCAPED_STRING ":" value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""


def _sub(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


def _regex(pattern: str) -> Callable[[str], bool]:
    rx = re.compile(pattern)
    return lambda doc: rx.fullmatch(doc) is not None


def _schema(schema: dict[str, Any]) -> Callable[[str], None]:
    return lambda doc: jsonschema.validate(strict_json(doc), schema)


@dataclass
class Planted:
    """One planted bug: ``grammar`` is wrong in ``direction`` against ``reference``."""

    name: str
    direction: str  # "over", "under" or "both"
    grammar: Callable[[], gm.Grammar]
    reference: Callable[[], Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


_ORDER = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0},
                                            "sku": {"type": "string", "maxLength": 4}},
          "required": ["id", "sku"]}  # fmt: skip


def _order(**changes: Any) -> dict[str, Any]:
    schema = json.loads(json.dumps(_ORDER))
    for path, value in changes.items():
        *head, last = path.split("__")
        node = schema
        for k in head:
            node = node[k]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return schema


PLANTED = [
    Planted("eq-for-eqeq", "both", lambda: gm.Lark(_sub(DSL, '"=="', '"="')), lambda: gm.Lark(DSL)),
    Planted("star-for-plus", "over", lambda: gm.Lark(_sub(DSL, "step*", "step+").replace("step+", "step*")),
            lambda: gm.Lark(_sub(DSL, "step*", "step+"))),
    Planted("plus-for-star", "under", lambda: gm.Lark(_sub(DSL, "step*", "step+")), lambda: gm.Lark(DSL)),
    Planted("string-without-escapes", "both",
            lambda: gm.Lark(_sub(DSL, "%import common.ESCAPED_STRING", 'ESCAPED_STRING: /"[^"]*"/')),
            lambda: gm.Lark(DSL)),
    Planted("optional-semicolon", "over", lambda: gm.Lark(DSL.replace('";"', '[";"]')), lambda: gm.Lark(DSL)),
    Planted("no-ignore-ws", "under", lambda: gm.Lark(_sub(DSL, "%ignore WS\n", "")), lambda: gm.Lark(DSL)),
    Planted("json-missing-null", "under", lambda: gm.Lark(_sub(JSON, ' | "null"', "")),
            lambda: gm.Lark(JSON)),
    Planted("json-trailing-comma", "over",
            lambda: gm.Lark(_sub(JSON, '("," value)*]', '("," value)* [","]]')),
            lambda: gm.Lark(JSON)),
    Planted("number-empty-fraction", "over", lambda: gm.Regex(r"-?[0-9]+(\.[0-9]*)?"),
            lambda: _regex(r"-?[0-9]+(\.[0-9]+)?")),
    Planted("number-without-sign", "under", lambda: gm.Regex(r"[0-9]+(\.[0-9]+)?"),
            lambda: _regex(r"-?[0-9]+(\.[0-9]+)?")),
    Planted("month-zero", "over", lambda: gm.Regex(r"[0-9]{4}-(0[0-9]|1[0-2])"),
            lambda: _regex(r"[0-9]{4}-(0[1-9]|1[0-2])")),
    Planted("identifier-underscore", "under", lambda: gm.Regex(r"[a-z][a-z0-9_]*"),
            lambda: gm.Regex(r"[a-z_][a-z0-9_]*")),
    Planted("label-typo", "both", lambda: gm.Choice(["positive", "negatve", "neutral"]),
            lambda: {"positive", "negative", "neutral"}.__contains__),
    Planted("gbnf-digits-star", "over", lambda: gm.Gbnf('root ::= "n=" [0-9]*'),
            lambda: _regex(r"n=[0-9]+")),
    Planted("schema-minimum-off-by-one", "under",
            lambda: gm.JsonSchema(_order(properties__id__minimum=1)),
            lambda: _schema(_ORDER)),
    Planted("schema-maxlength-off-by-one", "over",
            lambda: gm.JsonSchema(_order(properties__sku__maxLength=5)),
            lambda: _schema(_ORDER)),
    Planted("schema-not-required", "over", lambda: gm.JsonSchema(_order(required=["id"])),
            lambda: _schema(_ORDER)),
]
