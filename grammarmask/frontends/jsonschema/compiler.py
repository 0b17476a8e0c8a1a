"""JSON Schema to grammar rules (the CFG IR's EBNF expressions, ``grammarmask.ir.builder``).

Each schema node becomes a rule whose language is the JSON text of the instances the node accepts.
Regular parts (strings, numbers, keys) are regex terminals; objects, arrays, unions and recursion
are rules. ``$ref`` targets get one rule each, so recursive schemas give recursive rules. ``allOf``
and ``$ref`` with siblings are merged into one node (``keywords.merge``); ``anyOf``/``oneOf`` are
distributed over the rest of the node; ``enum``/``const`` candidates are kept iff ``jsonschema``
itself validates them against the whole node.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, TypeVar

import jsonschema
import jsonschema_specifications
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.validators import validator_for

from ...errors import BudgetExceeded, GrammarError, UnsupportedSchemaError
from ...ir.builder import EMPTY, Expr, Lit, Pat, Ref, alt, opt, seq, star
from ...limits import active
from . import objects
from .anyorder import literal_object
from .depth import document_depth, stack_room, too_deep
from .keywords import ENFORCED, REFUSED, canonical, is_trivial, merge, normalize, refuse, types_of
from .metaschema import metaschema_error
from .negation import complement
from .numbers import JSON_NUMBER
from .productive import prune, rule_refs, unproductive
from .scalars import ScalarBuilder
from .strings import ANY_CHAR, NOTHING, literal, words_terminal

__all__ = ["Compiler", "SchemaWarning"]

Schema = Any
_T = TypeVar("_T")


class SchemaWarning(UserWarning):
    """A keyword was not enforced (``strict=False``)."""


def _draft(root: Schema) -> int:
    uri = root.get("$schema", "") if isinstance(root, dict) else ""
    for mark, n in (("draft-04", 4), ("draft-06", 6), ("draft-07", 7), ("2019-09", 2019)):
        if mark in str(uri):
            return n
    return 2020


def close_scope(s: dict[str, Any]) -> dict[str, Any]:
    """A subschema's ``unevaluated*`` sees only its own keywords: rewrite it as ``additional*``/``items``.

    Done before the subschema is merged into a parent, where siblings' properties would otherwise
    count as evaluated. Applicators left inside (``anyOf``) would widen the evaluated set; ignoring
    them only narrows the language.
    """
    if "unevaluatedProperties" in s:
        s = dict(s)
        u = s.pop("unevaluatedProperties")
        s.setdefault("additionalProperties", u)
    if "unevaluatedItems" in s:
        s = dict(s)
        u = s.pop("unevaluatedItems")
        s.setdefault("items", u)
    return s


class Compiler:
    """One compilation: a root schema and the whitespace options, producing grammar rules."""

    def __init__(
        self,
        root: Schema,
        *,
        whitespace: str,
        max_ws: int,
        indent: int | None,
        strict: bool,
        property_order: str = "declared",
        plain_integers: bool = False,
    ) -> None:
        if not isinstance(root, (dict, bool)):
            raise GrammarError(f"a JSON Schema must be an object or a boolean, got {type(root).__name__}")
        self.limits = active()
        self.max_depth = self.limits.json_schema_depth
        self.depth = 0  # subschemas and $ref hops value() and flatten() are inside
        depth, where = document_depth(root, self.max_depth)
        if depth > self.max_depth:
            raise too_deep(where, f"the schema document nests more than {self.max_depth} levels deep")
        stack_room(self.max_depth)  # the metaschema check and the compiler recurse on the schema
        self.root = root
        self.strict = strict
        self.any_order = property_order == "any"
        self.draft = _draft(root)
        #: integers may be written with a zero fraction (6.0): draft 6 on, unless plain_integers
        self.int_fraction = self.draft >= 6 and not plain_integers
        self.validator_cls = validator_for(root, default=jsonschema.Draft202012Validator)
        err = metaschema_error(root, self.validator_cls)  # no format checks
        if err is not None:
            where = "/" + "/".join(str(p) for p in err.path)
            raise GrammarError(f"not a valid JSON Schema at {where}: {err.message}")
        spec = referencing.jsonschema.specification_with(
            self.validator_cls.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT202012
        )
        self.spec = spec
        resource = spec.create_resource(root)
        base = resource.id() or ""
        self.registry = jsonschema_specifications.REGISTRY.with_resource(base, resource).crawl()
        self.resolver = self.registry.resolver(base_uri=base)
        self.rules: dict[str, Expr] = {}
        self.memo: dict[Any, Expr | None] = {}
        self.keep: list[Any] = []
        self.synthesized: dict[str, dict[str, Any]] = {}  # synthetic() dicts by content
        self.pointers: dict[str, str] = {}  # a schema node's rule name -> its JSON pointer
        self.inline: list[str] = []
        self.reasons: list[str] = []
        self.warnings: list[str] = []
        self.isect: dict[tuple[str, ...], Pat] = {}  # intersection terminals by their parts
        # One nullable rule, not `_W?` inline: lark expands every `x?` in a rule into two alternatives,
        # so k optional gaps made 2^k alternatives (2,053 rules for one schema, 9 with the rule).
        self.ws: Expr = EMPTY if whitespace == "compact" else Ref("_ws")
        if whitespace == "compact":
            self.ws_regex = ""
        elif indent is not None:
            self.ws_regex = f"\\n(?: {{{indent}}}){{0,{max(1, max_ws // indent)}}}|\\x20"
        else:
            self.ws_regex = f"[ \\t]{{0,{max_ws}}}\\n[ \\t]{{0,{max_ws}}}|[ \\t]{{1,{max_ws}}}"
        self.objects = objects.ObjectBuilder(self)
        self.scalars = ScalarBuilder(self)

    # ---- entry points ------------------------------------------------------------------------------

    def grammar(self) -> dict[str, Expr]:
        """The rules of the schema's language, start rule ``start`` first."""
        stack_room(self.max_depth)
        top = self.value(self.root, "", self.resolver)
        if top is None:
            why = self.reasons[0] if self.reasons else "no instance satisfies it"
            raise GrammarError(f"the schema admits no value: {why}")
        rules = {"start": top, **self.rules}
        if self.ws_regex:
            rules["_ws"] = opt(Pat(self.ws_regex))
        dead = unproductive(rules, NOTHING)
        if "start" in dead:
            raise self.no_finite_value(rules, dead)
        return prune(rules, dead, NOTHING) if dead else rules

    def no_finite_value(self, rules: dict[str, Expr], dead: set[str]) -> GrammarError:
        """The schema admits no value because its instances are only defined through themselves
        (a recursion with no way out): named by the pointers of the schemas on that recursion."""
        seen: set[str] = set()
        order: list[str] = []
        stack = ["start"]
        while stack:  # the dead schema rules reachable from the start, in the order met
            name = stack.pop()
            if name in seen or name not in rules:
                continue
            seen.add(name)
            if name in self.pointers and name in dead:
                order.append(self.pointers[name] or "/")
            stack.extend(sorted((r for r in rule_refs(rules[name]) if r in dead), reverse=True))
        where = ", ".join(dict.fromkeys(order[:4])) or "/"
        return GrammarError(
            f"the schema admits no value: the schemas at {where} recur with no way out (every "
            "instance would have to contain, or be, another instance of them: none is finite)"
        )

    def unsupported(self, keyword: str, pointer: str, why: str) -> None:
        """Refuse (strict) or warn about a keyword that is not enforced."""
        if self.strict:
            raise refuse(keyword, pointer, why)
        msg = f"{why} (keyword {keyword!r} at {pointer or '/'}); not enforced"
        self.warnings.append(msg)

    def empty(self, pointer: str, why: str) -> _T | None:
        """Record why a node admits no value; returns None (the empty language)."""
        self.reasons.append(f"{why} at {pointer or '/'}")
        return None

    def rule(self, body: Expr, hint: str = "r") -> Ref:
        name = f"{hint}{len(self.rules)}"
        self.rules[name] = body
        return Ref(name)

    # ---- nodes -------------------------------------------------------------------------------------

    def enter(self, ptr: str) -> None:
        """One level deeper into the schema (value() and flatten()); past the budget, refuse."""
        self.depth += 1
        if self.depth > self.max_depth:
            self.depth -= 1
            raise too_deep(ptr, "the schema nests subschemas and $refs deeper than this")

    def value(self, s: Schema, ptr: str, resolver: Any) -> Expr | None:
        """A grammar expression for the JSON text of the instances of ``s`` (None: no instance)."""
        self.enter(ptr)
        try:
            return self._value(s, ptr, resolver)
        finally:
            self.depth -= 1

    def _value(self, s: Schema, ptr: str, resolver: Any) -> Expr | None:
        if s is True or (isinstance(s, dict) and is_trivial(s)):
            return self.any_value()
        if s is False:
            return self.empty(ptr, "the schema is false")
        if not isinstance(s, dict):
            raise GrammarError(f"at {ptr or '/'}: a schema must be an object or a boolean, got {s!r}")
        if "$id" in s and self.draft >= 6 and "$ref" not in s or ("id" in s and self.draft == 4):
            resolver = resolver.in_subresource(self.spec.create_resource(s))
        key = (id(s), str(getattr(resolver, "_base_uri", "")))
        if key in self.memo:
            return self.memo[key]
        self.keep.append(s)
        name = f"s{len(self.memo)}"
        self.pointers[name] = ptr
        self.memo[key] = Ref(name)
        self.rules[name] = EMPTY  # placeholder keeps rule order stable
        body = self.node(s, ptr, resolver)
        self.rules[name] = body if body is not None else Pat(NOTHING)
        if body is None:
            return None
        return Ref(name)

    def resolve(self, ref: str, ptr: str, resolver: Any) -> Any:
        try:
            return resolver.lookup(ref)
        except (referencing.exceptions.Unresolvable, referencing.exceptions.Unretrievable) as e:
            raise GrammarError(
                f"at {ptr or '/'}: $ref {ref!r} cannot be resolved ({type(e).__name__})"
            ) from None

    def node(self, s: dict[str, Any], ptr: str, resolver: Any) -> Expr | None:
        s = normalize(s, self.draft)
        if "if" in s and self.draft >= 7:
            s = self.if_then_else(s)
        for k in [k for k in s if k in REFUSED]:
            self.unsupported(k, ptr, f"{k!r} is not supported")
            s = {x: v for x, v in s.items() if x != k}
        rest = {k: v for k, v in s.items() if k in ENFORCED or k.startswith("_more_")}
        if set(rest) == {"$ref"}:
            target = self.resolve(s["$ref"], ptr, resolver)
            return self.value(target.contents, s["$ref"], target.resolver)
        if "$ref" in rest or "allOf" in rest:
            flat = self.flatten(rest, ptr, resolver)
            if flat is None:
                return None
            rest = flat
        if "not" in rest and not _simple_not(rest["not"]):
            rest = self.not_as_union(rest, ptr, resolver)
        if any(k in rest for k in ("anyOf", "oneOf", "_more_anyOf", "_more_oneOf")):
            return self.union(rest, ptr, resolver)
        return self.simple(rest, ptr, resolver)

    def not_as_union(self, s: dict[str, Any], ptr: str, resolver: Any) -> dict[str, Any]:
        """``not: X`` (X beyond what ``apply_not`` handles) as ``anyOf`` of X's complement, if it has
        an exact form (negation.py); else unchanged (``apply_not`` refuses it)."""
        if _UNEVALUATED & set(s):  # not X adds no annotations; the anyOf form would: keep 'not'
            return s
        alts = self.complement(s["not"], f"{ptr}/not", resolver)
        if alts is None:
            return s
        out = {k: v for k, v in s.items() if k != "not"}
        if not alts:
            out["enum"] = []  # X accepts everything: nothing is left
        elif "anyOf" in out:
            out["_more_anyOf"] = [*out.get("_more_anyOf", []), alts]
        else:
            out["anyOf"] = alts
        return out

    def complement(self, x: Any, ptr: str, resolver: Any) -> list[Any] | None:
        """Schemas whose union is exactly what ``x`` rejects (negation.py), or None."""

        def flat(sub: Any) -> Any:
            f = self.flatten(sub, ptr, resolver)
            return None if f is None else close_scope(f)

        try:
            return complement(flat(x), self.draft, flat)
        except UnsupportedSchemaError:
            return None

    def if_then_else(self, s: dict[str, Any]) -> dict[str, Any]:
        """``if``/``then``/``else`` as ``anyOf: [if and then, (not if) and else]`` when ``not if`` is one
        that ``not`` enforces (one keyword among type, enum/const, required); else unchanged (refused)."""
        cond = s["if"]
        simple = {"type", "enum", "const", "required"}
        keys = {k for k in cond if k in ENFORCED} if isinstance(cond, dict) else set()
        if isinstance(cond, bool):
            branch = s.get("then", True) if cond else s.get("else", True)
            out = {k: v for k, v in s.items() if k not in ("if", "then", "else")}
            out["allOf"] = [*out.get("allOf", []), branch]
            return out
        if len(keys) != 1 or not keys <= simple:
            return s
        out = {k: v for k, v in s.items() if k not in ("if", "then", "else")}
        pair = [{"allOf": [cond, s.get("then", True)]}, {"allOf": [s.get("else", True)], "not": cond}]
        if "anyOf" in out:
            out["_more_anyOf"] = [*out.get("_more_anyOf", []), pair]
        else:
            out["anyOf"] = pair
        return out

    def flatten(self, s: Schema, ptr: str, resolver: Any) -> dict[str, Any] | None:
        """Merge ``allOf`` and ``$ref`` (inlined) into one ref-free node; None if it is false."""
        self.enter(ptr)
        try:
            return self._flatten(s, ptr, resolver)
        finally:
            self.depth -= 1

    def _flatten(self, s: Schema, ptr: str, resolver: Any) -> dict[str, Any] | None:
        if s is True:
            return {}
        if s is False:
            return self.empty(ptr, "the schema is false")
        s = normalize(s, self.draft)
        parts: list[dict[str, Any]] = [{k: v for k, v in s.items() if k not in ("allOf", "$ref")}]
        if "$ref" in s:
            target = self.resolve(s["$ref"], ptr, resolver)
            if str(target.resolver._base_uri) != str(resolver._base_uri):
                self.unsupported("$ref", ptr, "a $ref into another resource combined with other keywords")
            uri = s["$ref"] + "@" + str(resolver._base_uri)
            if uri in self.inline:
                raise refuse("$ref", ptr, "a recursive $ref combined with sibling keywords or allOf")
            self.inline.append(uri)
            try:
                sub = self.flatten(target.contents, s["$ref"], target.resolver)
            finally:
                self.inline.pop()
            if sub is None:
                return None
            parts.append(close_scope(sub))
        for i, x in enumerate(s.get("allOf", [])):
            sub = self.flatten(x, f"{ptr}/allOf/{i}", resolver)
            if sub is None:
                return None
            parts.append(close_scope(sub))
        out = parts[0]
        for p in parts[1:]:
            out = merge(out, p, ptr)
        return out

    def synthetic(self, s: dict[str, Any], ptr: str, resolver: Any) -> Expr | None:
        """value() of a dict built here (kept alive so its id stays unique). Equal dicts built again
        (a recursive ``contains``/``allOf``) are the first one, so value() finds it in its memo."""
        key = canonical(s) + "@" + str(getattr(resolver, "_base_uri", ""))
        s = self.synthesized.setdefault(key, s)
        self.keep.append(s)
        return self.value(s, ptr, resolver)

    def union(self, s: dict[str, Any], ptr: str, resolver: Any) -> Expr | None:
        base = {k: v for k, v in s.items() if k not in ("anyOf", "oneOf", "_more_anyOf", "_more_oneOf")}
        groups: list[tuple[str, list[Any]]] = []
        for k in ("anyOf", "oneOf"):
            if k in s:
                groups.append((k, s[k]))
            groups += [(k, g) for g in s.get("_more_" + k, [])]
        for k, g in groups:
            if not isinstance(g, list) or not g:
                raise GrammarError(f"at {ptr or '/'}: {k} must be a non-empty array")
        if len(groups) == 1 and is_trivial(base):
            kind, branches = groups[0]
            if kind == "oneOf":
                branches = self.exclusive(branches, ptr, resolver)
            alts = [self.value(b, f"{ptr}/{kind}/{i}", resolver) for i, b in enumerate(branches)]
            live = [a for a in dict.fromkeys(alts) if a is not None]
            return alt(live) if live else self.empty(ptr, f"no {kind} branch admits a value")
        combos = 1
        for _, g in groups:
            combos *= len(g)
        most = self.limits.json_schema_branches
        if combos > most:
            why = f"{combos} combined anyOf/oneOf branches (Limits.json_schema_branches {most})"
            raise refuse(groups[0][0], ptr, why)
        groups = [(k, self.exclusive(g, ptr, resolver, base) if k == "oneOf" else g) for k, g in groups]
        alts = []
        for combo in itertools.product(*[g for _, g in groups]):
            merged: dict[str, Any] | None = self.flatten(base, ptr, resolver)
            for b in combo:
                if merged is None:
                    break
                fb = self.flatten(b, ptr, resolver)
                merged = None if fb is None else merge(merged, close_scope(fb), ptr)
            if merged is not None:
                alts.append(self.synthetic(merged, ptr, resolver))
        live = [a for a in dict.fromkeys(alts) if a is not None]
        return alt(live) if live else self.empty(ptr, "no anyOf/oneOf branch admits a value")

    def exclusive(self, branches: list[Any], ptr: str, resolver: Any, base: Any = None) -> list[Any]:
        """``oneOf`` branches as equivalent ``anyOf`` branches, or refuse.

        Provably disjoint branches are kept. Otherwise, when every branch is one simple keyword
        (``type``, ``enum``/``const`` or ``required``) branch i becomes ``B_i and not (any other B_j)``,
        which ``not`` enforces (``not required`` forbids the keys: exact for one key, narrower for more).
        """
        if self.all_disjoint(branches, ptr, resolver, base):
            return branches
        simple = {"type", "enum", "const", "required"}
        ok = all(
            isinstance(b, dict)
            and len({k for k in b if k in ENFORCED}) == 1
            and next(k for k in b if k in ENFORCED) in simple
            and len(b.get("required", ())) <= 1
            for b in branches
        )
        if not ok:
            return self.exclusive_by_complement(branches, ptr, resolver, base)
        return [
            {"allOf": [b], "not": {"anyOf": [x for j, x in enumerate(branches) if j != i]}}
            for i, b in enumerate(branches)
        ]

    def exclusive_by_complement(
        self, branches: list[Any], ptr: str, resolver: Any, base: Any = None
    ) -> list[Any]:
        """Branch i becomes ``B_i and (not B_j for every j != i)``, each ``not B_j`` the union of B_j's
        complement (negation.py); refused when a complement has no exact form or too many parts, or
        when ``unevaluated*`` is involved (the complement's keywords would count as evaluating)."""
        flats = []
        for b in branches:
            try:
                flats.append(self.flatten(b, ptr, resolver))
            except UnsupportedSchemaError:
                flats.append({})
        if any(_UNEVALUATED & set(f or {}) for f in [*flats, base if isinstance(base, dict) else {}]):
            comps: list[list[Any] | None] = [None]
        else:
            comps = [self.complement(b, f"{ptr}/oneOf/{j}", resolver) for j, b in enumerate(branches)]
        combos = 1
        for c in comps:
            combos *= max(1, len(c)) if c is not None else 1
        if any(c is None for c in comps) or combos > self.limits.json_schema_branches**2:
            self.unsupported("oneOf", ptr, "oneOf branches may overlap, so exactly-one cannot be enforced")
            return branches
        out: list[Any] = []
        for i, (b, fb) in enumerate(zip(branches, flats)):
            if fb is None:
                continue
            mine = types_of(fb)  # parts of a complement outside B_i's types cannot meet B_i
            others = [
                [a for a in c if not isinstance(a, dict) or types_of(normalize(a, self.draft)) & mine]
                for j, c in enumerate(comps)
                if j != i and c is not None
            ]
            if any(not c for c in others):  # some other branch accepts everything: B_i never alone
                continue
            node: dict[str, Any] = {"allOf": [b]}
            for c in others:
                if "anyOf" in node:
                    node.setdefault("_more_anyOf", []).append(c)
                else:
                    node["anyOf"] = c
            out.append(node)
        return out or [False]

    def all_disjoint(self, branches: list[Any], ptr: str, resolver: Any, base: Any = None) -> bool:
        flat = []
        for b in branches:
            try:
                f = self.flatten(b, ptr, resolver)
                f = None if f is None else close_scope(f)
                if f is not None and base:
                    fb = self.flatten(base, ptr, resolver)
                    f = None if fb is None else merge(fb, f, ptr)
            except UnsupportedSchemaError:
                f = {"_opaque": True}
            flat.append(f)
        for i, j in itertools.combinations(range(len(flat)), 2):
            fi, fj = flat[i], flat[j]
            if fi is not None and fj is not None and not self.disjoint(fi, fj, resolver):
                return False
        return True

    def disjoint(self, a: dict[str, Any], b: dict[str, Any], resolver: Any) -> bool:
        if "_opaque" in a or "_opaque" in b:
            return False
        ta, tb = types_of(a), types_of(b)
        if not (ta & tb):
            return True
        for x, y in ((a, b), (b, a)):
            vals = x.get("enum", [x["const"]] if "const" in x else None)
            if vals is not None and not any(self.validates(y, v, resolver) for v in vals):
                return True
        if ta & tb <= {"object"}:
            for key in set(a.get("required", [])) & set(b.get("required", [])):
                pa, pb = a.get("properties", {}).get(key), b.get("properties", {}).get(key)
                if isinstance(pa, dict) and isinstance(pb, dict) and self.disjoint(pa, pb, resolver):
                    return True
            for x, y in ((a, b), (b, a)):
                closed = x.get("additionalProperties") is False and not x.get("patternProperties")
                if closed and any(k not in x.get("properties", {}) for k in y.get("required", [])):
                    return True
        return False

    def validates(self, s: Schema, instance: Any, resolver: Any) -> bool:
        try:
            v = self.validator_cls(s, registry=self.registry, _resolver=resolver)
            return bool(v.is_valid(instance))
        except (jsonschema.exceptions.SchemaError, referencing.exceptions.Unresolvable, RecursionError):
            return False

    # ---- a merged node without combinators ----------------------------------------------------------

    def simple(self, s: dict[str, Any], ptr: str, resolver: Any) -> Expr | None:
        if "enum" in s or "const" in s:
            cands = s.get("enum", [s["const"]] if "const" in s else [])
            if not isinstance(cands, list):
                raise GrammarError(f"at {ptr or '/'}: enum must be an array")
            if len(cands) > self.limits.json_schema_enum_values:
                raise BudgetExceeded(
                    "json_schema_enum_values",
                    self.limits.json_schema_enum_values,
                    f"an enum of {len(cands)} values",
                    where=ptr or "/",
                )
            lits: list[Expr] = []
            # Each candidate (or its 1.0 form) equals itself, so its own list need not be re-checked:
            # validating against the rest keeps this linear in the size of the enum.
            own = "enum" if "enum" in s else "const"
            rest = {k: x for k, x in s.items() if k != own}
            anything = is_trivial(rest) and not any(k.startswith("_") for k in rest)
            words: list[str] = []
            for v in cands:
                if isinstance(v, str) and (anything or self.validates(rest, v, resolver)):
                    words.append(v)
                    continue
                if isinstance(v, str):
                    continue
                if (
                    isinstance(v, (int, float))
                    and not isinstance(v, bool)
                    and abs(v) < 1e300
                    and float(v).is_integer()
                ):
                    forms = [f for f, x in ((0, int(v)), (1, float(v))) if self.validates(rest, x, resolver)]
                    if forms:
                        tail = {(0,): "", (1,): r"\.0+", (0, 1): r"(?:\.0+)?"}[tuple(forms)]
                        lits.append(Pat(str(int(v)) + tail))
                elif self.validates(rest, v, resolver):
                    lits.append(self.literal(v))
            words = list(dict.fromkeys(words))
            if len(words) > _TRIE_WORDS:  # one trie terminal, not a terminal (and DFA) per string
                trie, words = words_terminal(words)
                lits += [trie] if trie is not None else []
            lits += [Pat(f'"{literal(w)}"') for w in words]
            lits = list(dict.fromkeys(lits))
            return alt(lits) if lits else self.empty(ptr, "no enum/const value satisfies the schema")
        types = types_of(s)
        if "type" in s:
            bad = [t for t in s["type"] if t not in types_of({})]
            if bad:
                raise GrammarError(f"at {ptr or '/'}: unknown type {bad[0]!r}")
        excluded: list[Any] = []
        if "not" in s:
            types = self.apply_not(s["not"], types, excluded, s, ptr, resolver)
        alts: list[Expr] = []
        if "null" in types:
            alts.append(Lit("null"))
        if "boolean" in types:
            alts += [Lit("true"), Lit("false")]
        if "number" in types or "integer" in types:
            r = self.scalars.number(s, "number" not in types, ptr)
            if r is not None:
                alts.append(r)
        if "string" in types:
            r = self.scalars.string(s, ptr, [v for v in excluded if isinstance(v, str)])
            if r is not None:
                alts.append(r)
        if "array" in types:
            r = self.objects.array(s, ptr, resolver)
            if r is not None:
                alts.append(r)
        if "object" in types:
            forbidden = [k for k in s.get("_forbidden", [])]
            r = self.objects.object(s, ptr, resolver, forbidden)
            if r is not None:
                alts.append(r)
        excl_other = [v for v in excluded if not isinstance(v, str)]
        if excl_other:
            drop = {self.literal(v) for v in excl_other if v is None or isinstance(v, bool)}
            alts = [a for a in alts if a not in drop]
        return alt(alts) if alts else self.empty(ptr, "no type admits a value")

    def apply_not(
        self, n: Schema, types: set[str], excluded: list[Any], s: dict[str, Any], ptr: str, resolver: Any
    ) -> set[str]:
        if n is True or (isinstance(n, dict) and is_trivial(n)):
            return set()
        if n is False:
            return types
        if not isinstance(n, dict):
            raise GrammarError(f"at {ptr}/not: a schema must be an object or a boolean")
        n = normalize(n, self.draft)
        keys = {k for k in n if k in ENFORCED}
        if any(k in REFUSED for k in n):  # e.g. not: {if, then}: its keys below would be empty
            self.unsupported("not", ptr, f"'not' of {sorted(k for k in n if k in REFUSED)} is not supported")
            return types
        if keys == {"anyOf"}:
            for i, x in enumerate(n["anyOf"]):
                types = self.apply_not(x, types, excluded, s, f"{ptr}/not/anyOf/{i}", resolver)
            return types
        if keys == {"type"}:
            gone = types_of(n)
            if "integer" in gone and "number" not in gone and "number" in types:
                s["_nonint"] = True  # numbers that are not integers (NON_INTEGER)
            return {t for t in types if t not in gone}
        if keys <= {"enum", "const"}:
            vals = n.get("enum", []) + ([n["const"]] if "const" in n else [])
            for v in vals:
                if isinstance(v, (int, float, list, dict)) and not isinstance(v, bool):
                    kind = "number" if isinstance(v, (int, float)) else type(v).__name__
                    if (
                        types & {"number", "integer", "array", "object"}
                        and kind in ("number",)
                        and (types & {"number", "integer"})
                        or (kind == "list" and "array" in types)
                        or (kind == "dict" and "object" in types)
                    ):
                        self.unsupported("not", ptr, f"excluding the value {v!r} is not supported")
                excluded.append(v)
            return types
        if keys == {"required"}:
            s["_forbidden"] = list(s.get("_forbidden", [])) + list(n["required"])
            return types & {"object"}
        if keys == {"pattern"} and isinstance(n["pattern"], str):
            s["_not_patterns"] = list(s.get("_not_patterns", [])) + [n["pattern"]]
            return types
        self.unsupported(
            "not", ptr, "only 'not' of type, enum/const, required or anyOf of those is supported"
        )
        return types

    # ---- scalars -----------------------------------------------------------------------------------

    def literal(self, v: Any) -> Expr:
        """Expression for the JSON text of one value (key order as given)."""
        if v is None:
            return Lit("null")
        if v is True or v is False:
            return Lit("true") if v else Lit("false")
        if isinstance(v, (int, float)) and self.draft >= 6 and abs(v) <= 2**53 and float(v).is_integer():
            # Draft 6+ cannot tell 1 from 1.0 (type, equality and multipleOf agree), so both forms.
            return Pat(str(int(v)) + r"(?:\.0+)?")
        if isinstance(v, int):
            return Pat(str(v))
        if isinstance(v, float):
            return Pat(re.escape(json.dumps(v)))
        if isinstance(v, str):
            return Pat(f'"{literal(v)}"')
        w = self.ws
        if isinstance(v, list):
            if not v:
                return seq(Lit("["), w, Lit("]"))
            items = [seq(w, Lit(","), w, self.literal(x)) for x in v[1:]]
            return self.rule(seq(Lit("["), w, self.literal(v[0]), *items, w, Lit("]")), "l")
        if isinstance(v, dict):
            if not v:
                return seq(Lit("{"), w, Lit("}"))
            if self.any_order and len(v) > 1:
                return literal_object(self.objects, v)
            members: list[Expr] = []
            for k, x in v.items():
                if members:
                    members += [w, Lit(","), w]
                members += [Pat('"' + literal(k) + '"'), w, Lit(":"), w, self.literal(x)]
            return self.rule(seq(Lit("{"), w, *members, w, Lit("}")), "l")
        raise GrammarError(f"not a JSON value: {v!r}")

    def any_value(self) -> Expr:
        if "json_value" not in self.rules:
            w = self.ws
            string = Pat('"' + ANY_CHAR + '*"')
            obj, arr = Ref("json_object"), Ref("json_array")
            member, item = Ref("json_member"), Ref("json_item")
            self.rules["json_value"] = alt(
                [obj, arr, string, Pat(JSON_NUMBER), Lit("true"), Lit("false"), Lit("null")]
            )
            self.rules["json_object"] = alt(
                [seq(Lit("{"), w, Lit("}")), seq(Lit("{"), member, star(seq(Lit(","), member)), Lit("}"))]
            )
            self.rules["json_member"] = seq(w, string, w, Lit(":"), w, Ref("json_value"), w)
            self.rules["json_array"] = alt(
                [seq(Lit("["), w, Lit("]")), seq(Lit("["), item, star(seq(Lit(","), item)), Lit("]"))]
            )
            self.rules["json_item"] = seq(w, Ref("json_value"), w)
        return Ref("json_value")


_UNEVALUATED = {"unevaluatedProperties", "unevaluatedItems"}
_TRIE_WORDS = 16  # enums with more strings than this are one trie terminal (strings.words_terminal)


def _simple_not(n: Any) -> bool:
    """Whether ``apply_not`` takes ``not: n`` directly (else the complement is tried first)."""
    if not isinstance(n, dict):
        return True
    keys = {k for k in n if k in ENFORCED}
    if keys == {"anyOf"} and isinstance(n["anyOf"], list):
        return all(_simple_not(x) for x in n["anyOf"])
    if keys == {"required"} and len(n["required"]) > 1:
        return False  # apply_not would forbid every key (narrower); the complement is exact
    simple = {"type", "enum", "const", "required", "pattern"}
    return (len(keys) <= 1 and keys <= simple) or keys <= {"enum", "const"}
