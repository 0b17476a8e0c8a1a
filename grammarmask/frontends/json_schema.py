"""JSON Schema backend: ``JsonSchema(schema)`` compiles a schema to grammar rules, built in memory
into the CFG IR (``to_lark()`` prints the same rules as Lark text, for lark as the reference).

Every finished output is JSON that validates against the schema with the ``jsonschema`` package
(draft 2020-12 unless ``$schema`` names draft 4, 6, 7 or 2019-09). Keywords that cannot be enforced
exactly raise ``UnsupportedSchemaError`` (``strict=True``, the default) or emit a
:class:`SchemaWarning` (``strict=False``); none is dropped silently. The keyword table is in
docs/json_schema.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Hashable
from typing import Any

from .. import disk_cache
from ..cache import Lru
from ..compile_cache import stable
from ..engine import compile_cfg
from ..errors import BudgetExceeded, GrammarError
from ..grammar import CompiledGrammar, Grammar
from ..ir.builder import Expr, build_cfg, to_lark
from ..ir.cfg import Cfg
from ..ir.gbnf import to_gbnf
from ..limits import Limits, active, in_force
from ..vocab import Vocabulary
from .jsonschema.common_dfas import keep_common_dfas
from .jsonschema.compiler import Compiler, SchemaWarning
from .jsonschema.depth import stack_room, too_deep
from .jsonschema.keywords import canonical

__all__ = ["JsonSchema", "SchemaWarning"]

_WHITESPACE = ("flexible", "compact")
_ORDERS = ("declared", "any")
# the grammar rules and warnings of recently compiled schemas, by content (schema and options) and limits
_RULES_CACHE: Lru[tuple[str, Limits], tuple[dict[str, Expr], tuple[str, ...]]] = Lru(256)


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside grammarmask (the user's
    line that built or compiled the schema)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package + os.sep):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


class JsonSchema(Grammar):
    """The JSON texts of the instances of a JSON Schema.

    Parameters
    ----------
    schema
        A dict or bool, or the schema as JSON text.
    whitespace
        ``"flexible"`` (default): between JSON tokens, at most one newline and up to ``max_ws``
        spaces/tabs on each side of it; ``"compact"``: no whitespace at all.
    max_ws
        Bound on a run of spaces/tabs (flexible policy). Unbounded whitespace would let a model
        loop on newlines forever.
    indent
        Preferred indentation (flexible policy only): whitespace is a single space, or a newline
        followed by a multiple of ``indent`` spaces (the layout of ``json.dumps(..., indent=k)``).
    strict
        ``True``: a keyword that cannot be enforced raises ``UnsupportedSchemaError`` naming it and
        its JSON pointer. ``False``: a :class:`SchemaWarning` is emitted and the keyword is skipped.
    property_order
        ``"declared"`` (default): properties in the order the schema declares them, further members
        (``additionalProperties``/``patternProperties``) after the declared ones. ``"any"``: an
        object's members in any order (const/enum objects too); an object whose required and
        ``dependentRequired`` keys are more than 10 (2^10 states) is refused
        (``UnsupportedSchemaError``, keyword ``properties``) or, with ``strict=False``, kept in
        declared order with a warning.
    plain_integers
        ``False`` (default): an integer may be written with a zero fraction (``5.0``, ``-0.0``), as
        JSON Schema (draft 6 on) counts it an integer. ``True``: values of ``"type": "integer"`` are
        written as integer literals only (``5``), what typed consumers (and XGrammar, llguidance)
        expect; a subset of the valid documents.

    Raises
    ------
    GrammarError
        Invalid JSON text, a value that is not a schema, a value JSON cannot express (NaN or an
        infinity, e.g. ``{"const": float("nan")}``), a dangling ``$ref``, a schema that admits no
        value (``{"enum": []}``, ``minimum`` > ``maximum``); the message names the JSON pointer.
        Also an option of the wrong type or value (``strict`` must be a bool: ``"no"`` is refused).
    UnsupportedSchemaError
        A keyword that cannot be enforced exactly (strict mode).
    BudgetExceeded
        The schema needs more than a budget of :class:`~grammarmask.Limits` allows, at compile (or
        here, for JSON text nested past Python's limits): ``json_schema_depth`` (nesting of the
        document, and subschemas and ``$ref`` hops followed), ``json_schema_counting_states``,
        ``json_schema_enum_values``. The message names the budget, its value and the JSON pointer.
    """

    def __init__(
        self,
        schema: Any,
        *,
        whitespace: str = "flexible",
        max_ws: int = 16,
        indent: int | None = None,
        strict: bool = True,
        property_order: str = "declared",
        plain_integers: bool = False,
    ) -> None:
        stack_room(active().json_schema_depth)  # json.loads and json.dumps recurse on the nesting
        to_schema = getattr(schema, "model_json_schema", None) if isinstance(schema, type) else None
        if callable(to_schema):
            schema = to_schema()  # a pydantic (v2) model class, as from_pydantic
        if isinstance(schema, (str, bytes)):
            try:
                schema = json.loads(schema)
            except RecursionError:
                raise too_deep("/", "the schema's JSON text nests deeper than this") from None
            except ValueError as e:
                line, col = getattr(e, "lineno", None), getattr(e, "colno", None)
                text = schema.decode("utf-8", "replace") if isinstance(schema, bytes) else schema
                raise GrammarError(
                    f"schema is not valid JSON: {getattr(e, 'msg', e)}", line=line, column=col, text=text
                ) from None
        if not isinstance(schema, (dict, bool)):
            raise GrammarError(f"a JSON Schema must be an object, a boolean, JSON text or a pydantic model "
                               f"class, got {type(schema).__name__}")
        if whitespace not in _WHITESPACE:
            raise GrammarError(f"whitespace must be one of {_WHITESPACE}, got {whitespace!r}")
        if property_order not in _ORDERS:
            raise GrammarError(f"property_order must be one of {_ORDERS}, got {property_order!r}")
        if not isinstance(max_ws, int) or isinstance(max_ws, bool) or max_ws < 1:
            raise GrammarError(f"max_ws must be a positive integer, got {max_ws!r}")
        if indent is not None and (not isinstance(indent, int) or isinstance(indent, bool) or indent < 1):
            raise GrammarError(f"indent must be a positive integer or None, got {indent!r}")
        if not isinstance(strict, bool):  # bool("no") is True: refuse rather than guess
            raise GrammarError(f"strict must be True or False, got {type(strict).__name__} {strict!r:.40}")
        if not isinstance(plain_integers, bool):
            raise GrammarError(f"plain_integers must be True or False, got {plain_integers!r:.40}")
        self.schema = schema
        self.options = {
            "whitespace": whitespace,
            "max_ws": max_ws,
            "indent": indent,
            "strict": bool(strict),
            "property_order": property_order,
            **({"plain_integers": True} if plain_integers else {}),  # keys of earlier caches unchanged
        }
        try:  # the schema alone first, so that an error's JSON pointer is the schema's own
            self._key = canonical(schema) + canonical(self.options)
        except RecursionError:
            raise too_deep("/", "the schema nests deeper than this") from None
        except GrammarError:
            raise
        except (TypeError, ValueError) as e:
            raise GrammarError(f"schema is not JSON data: {e}") from None
        self._rules: dict[str, Expr] | None = None
        self._rules_limits: Limits | None = None
        self._cfg: Any = None
        # The schema is checked here, so its errors and warnings come from this call. A budget is
        # checked again at compile(), under the limits given there.
        with contextlib.suppress(BudgetExceeded):
            self.rules()

    @classmethod
    def from_pydantic(
        cls,
        model: Any,
        *,
        whitespace: str = "flexible",
        max_ws: int = 16,
        indent: int | None = None,
        strict: bool = True,
        property_order: str = "declared",
        plain_integers: bool = False,
    ) -> JsonSchema:
        """The schema of a pydantic (v2) model class, via ``model.model_json_schema()``."""
        getter = getattr(model, "model_json_schema", None)
        if getter is None:
            raise GrammarError(f"{model!r} is not a pydantic v2 model class (no model_json_schema)")
        return cls(
            getter(),
            whitespace=whitespace,
            max_ws=max_ws,
            indent=indent,
            strict=strict,
            property_order=property_order,
            plain_integers=plain_integers,
        )

    def __repr__(self) -> str:
        order = self.options["property_order"]
        tail = "" if order == "declared" else f", property_order={order!r}"
        return f"JsonSchema(<{len(self._key)} chars>, whitespace={self.options['whitespace']!r}{tail})"

    def cache_key(self) -> Hashable | None:
        return self._key

    def rules(self) -> dict[str, Expr]:
        """The grammar rules of the schema (start rule ``start``) under the limits in force; cached
        by content and limits."""
        limits = active()
        if self._rules is None or self._rules_limits != limits:
            key = (self._key, limits)
            hit = _RULES_CACHE.get(key)
            if hit is None and stable(key):  # an earlier process's rules and warnings
                hit = disk_cache.load("json-schema-rules", key, packed=True)
            if hit is None:
                opts = self.options
                indent = opts["indent"]

                def make() -> tuple[Any, tuple[Any, ...]]:
                    compiler = Compiler(
                        self.schema,
                        whitespace=str(opts["whitespace"]),
                        max_ws=int(str(opts["max_ws"])),
                        indent=indent if isinstance(indent, int) else None,
                        strict=bool(opts["strict"]),
                        property_order=str(opts["property_order"]),
                        plain_integers=bool(opts.get("plain_integers", False)),
                    )
                    return compiler.grammar(), tuple(compiler.warnings)

                made, costly = disk_cache.made_costly(make)
                if stable(key) and costly:
                    disk_cache.store_later("json-schema-rules", key, made, packed=True)
                hit = made
            _RULES_CACHE.put(key, hit)
            level = _caller_stacklevel()
            for msg in hit[1]:
                warnings.warn(msg, SchemaWarning, stacklevel=level)
            self._rules, self._rules_limits, self._cfg = hit[0], limits, None
        return self._rules

    def to_lark(self) -> str:
        """The Lark grammar text of the schema (start rule ``start``): what ``lark`` parses to the
        same language as the grammar grammarmask compiles."""
        return to_lark(self.rules())

    def to_gbnf(self) -> str:
        """The llama.cpp GBNF text of the schema (start rule ``root``): what :class:`~grammarmask.Gbnf`
        (and llama.cpp) parse to the same language (:func:`grammarmask.ir.gbnf.to_gbnf`)."""
        rules = self.rules()
        if self._cfg is None:
            self._cfg = build_cfg(rules)
        return to_gbnf(self._cfg)

    def _cfg_maker(self) -> Callable[[], Cfg]:
        rules, limits = self.rules(), active()  # the rules under the compile's limits

        def remake() -> Cfg:
            with in_force(limits):
                keep_common_dfas()  # the DFAs every schema asks for, made once per installation
                return build_cfg(rules)

        return remake

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        remake = self._cfg_maker()  # the rules again under the compile's limits (a cached hit when the same)
        # the IR is not kept: the compiled grammar builds it again when asked (see compile_cfg)
        return compile_cfg(self._cfg if self._cfg is not None else remake(), vocab, remake=remake)
