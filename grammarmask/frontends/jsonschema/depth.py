"""The nesting budget of the JSON Schema front end (``Limits.json_schema_depth``).

The compiler recurses on the structure of the schema (a subschema's rule is built inside its
parent's), and so do ``json`` and ``jsonschema`` (the metaschema check). Rather than let an input
reach Python's recursion limit (a ``RecursionError`` from anywhere), the depth is a budget:

- :func:`document_depth` measures the JSON nesting of the schema document with an explicit stack,
  before anything recursive runs on it;
- the compiler counts the subschemas and ``$ref`` hops it is inside (a ``$ref`` chain is deep
  without nesting) and stops at the budget (:func:`too_deep`);
- :func:`stack_room` makes sure Python's recursion limit leaves room for that depth (about
  :data:`FRAMES` frames a level), raising it if needed; it is never lowered again, so threads
  compiling at once cannot take room from each other.

Every way out is a :class:`~grammarmask.errors.BudgetExceeded` naming ``json_schema_depth``.
"""

from __future__ import annotations

from typing import Any

from ...automata.stack import stack_room as _stack_room
from ...errors import BudgetExceeded
from ...limits import active

__all__ = ["FRAMES", "document_depth", "stack_room", "too_deep"]

#: Python frames one level of schema nesting may take (an array level takes 8 in the compiler)
FRAMES = 12


def _escape(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def document_depth(doc: Any, cap: int) -> tuple[int, str]:
    """The JSON nesting depth of ``doc`` (a scalar is 0), or the first depth past ``cap`` reached
    and the JSON pointer of the node there (iterative: any depth is measured safely)."""
    best, where = 0, ""
    stack: list[tuple[Any, int, str]] = [(doc, 0, "")]
    while stack:
        node, d, at = stack.pop()
        if isinstance(node, dict):
            kids: Any = ((f"{at}/{_escape(k)}", v) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            kids = ((f"{at}/{i}", v) for i, v in enumerate(node))
        else:
            continue
        if d + 1 > best:
            best, where = d + 1, at
            if best > cap:
                return best, where
        stack.extend((v, d + 1, p) for p, v in kids)
    return best, where


def too_deep(where: str, what: str = "the schema nests deeper than this") -> BudgetExceeded:
    """The error for a schema past ``Limits.json_schema_depth``."""
    return BudgetExceeded("json_schema_depth", active().json_schema_depth, what, where=where or "/")


def stack_room(levels: int) -> None:
    """Make Python's recursion limit at least ``levels`` schema levels above the current depth
    (raised if needed, never lowered)."""
    _stack_room(FRAMES * levels)
