"""Objects and arrays as small state machines written out as grammar rules.

An object is its declared properties in schema order (each present or, if optional, skipped)
followed by any further members the schema allows; an array is its items by position. Counting
keywords (``minProperties``, ``maxItems``, ``minContains``, ...) become a counter in the state.
With ``property_order="any"`` an object's members come in any order (:mod:`.anyorder`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, cast

from jsonschema._utils import equal

from ...errors import BudgetExceeded, GrammarError, UnsupportedSchemaError
from ...ir.builder import EMPTY, Expr, Lit, Pat, Ref, alt, opt, seq, star
from .anyorder import ObjectParts, any_order
from .counting import Counter
from .intersect import ordered
from .keyset import KeySetTooLarge, key_regex
from .keywords import is_trivial
from .strings import NOTHING, key_not_in, key_not_in_terminal, literal, pattern_regex

if TYPE_CHECKING:
    from .compiler import Compiler

__all__ = ["ObjectBuilder"]

State = Hashable
COUNT_UNROLL = 64  # item counts past this over uniform items are counted in O(log n) rules


def _count(s: dict[str, Any], k: str, ptr: str, default: int | None) -> int | None:
    v = s.get(k, default)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise GrammarError(f"at {ptr or '/'}: {k} must be a non-negative integer, got {v!r}")
    return v


class ObjectBuilder:
    def __init__(self, c: Compiler) -> None:
        self.c = c

    # ---- generic machine -> rules -------------------------------------------------------------------

    def machine(
        self,
        start: State,
        trans: Callable[[State], list[tuple[Expr, State]]],
        accept: Callable[[State], bool],
        hint: str,
        limit: int | None = None,
    ) -> Expr | None:
        """Rules for the sequences accepted from ``start``: an expression, ``EMPTY`` (the empty
        string only) or None. An edge labelled ``EMPTY`` consumes nothing.

        Raises OverflowError past ``limit`` states (``Limits.json_schema_counting_states``)."""
        if limit is None:
            limit = self.c.limits.json_schema_counting_states
        edges: dict[State, list[tuple[Expr, State]]] = {}
        todo = [start]
        while todo:
            st = todo.pop()
            if st in edges:
                continue
            if len(edges) > limit:
                raise OverflowError
            edges[st] = trans(st)
            todo += [n for _, n in edges[st] if n not in edges]
        nullable, solid = _derivations(edges, accept)
        if start not in solid:
            return EMPTY if start in nullable else None
        names = {st: f"{hint}{len(self.c.rules)}_{i}" for i, st in enumerate(x for x in edges if x in solid)}

        def ref(st: State) -> Expr:
            if st not in solid:
                return EMPTY
            return opt(Ref(names[st])) if st in nullable else Ref(names[st])

        for st in names:
            alts: list[Expr] = []
            for e, n in edges[st]:
                if e == EMPTY and n in solid:
                    alts.append(Ref(names[n]))
                elif e != EMPTY and (n in solid or n in nullable):
                    alts.append(seq(e, ref(n)))
            self.c.rules[names[st]] = alt(alts)
        return ref(start)

    # ---- arrays -----------------------------------------------------------------------------------

    def array(self, s: dict[str, Any], ptr: str, resolver: Any) -> Expr | None:
        c = self.c
        w = c.ws
        prefix = s.get("prefixItems", [])
        items = s["items"] if "items" in s else s.get("unevaluatedItems", True)
        lo = _count(s, "minItems", ptr, 0) or 0
        hi = _count(s, "maxItems", ptr, None)
        contains = s.get("contains")
        need = _count(s, "minContains", ptr, 1) if contains is not None else 0
        if contains is not None and "maxContains" in s:
            mc = _count(s, "maxContains", ptr, None)
            if mc is not None and (hi is None or mc < hi):
                c.unsupported("maxContains", ptr, "maxContains below maxItems is not supported")
        if s.get("uniqueItems") is True and (hi is None or hi > 1):
            unique = self.unique_enum(s, lo, hi, ptr, resolver)
            if unique is None or isinstance(unique, Expr):
                return unique
            c.unsupported("uniqueItems", ptr, "uniqueItems is only supported over a small enum of items")
        need = need or 0
        cache: dict[tuple[int, bool], Expr | None] = {}

        def item(i: int, matched: bool) -> Expr | None:
            key = (min(i, len(prefix)), matched)
            if key not in cache:
                sch = prefix[i] if i < len(prefix) else items
                sp = f"{ptr}/prefixItems/{i}" if i < len(prefix) else f"{ptr}/items"
                if matched:
                    sch = {"allOf": [sch, contains]}
                    cache[key] = c.synthetic(sch, sp, resolver)
                else:
                    cache[key] = c.value(sch, sp, resolver)
            return cache[key]

        if not prefix and need == 0 and max(lo, hi or 0) > COUNT_UNROLL:
            return self.counted_array(item(0, False), lo, hi, ptr)
        cap = hi if hi is not None else max(len(prefix), lo, 1)

        def trans(st: State) -> list[tuple[Expr, State]]:
            i, k = cast(tuple[int, int], st)
            if hi is not None and i >= hi:
                return []
            out: list[tuple[Expr, State]] = []
            sep = Lit(",") if i > 0 else EMPTY
            nxt = min(i + 1, cap)
            for matched in (False, True) if k < need else (False,):
                x = item(i, matched)
                if x is not None:
                    out.append((seq(sep, w, x, w), (nxt, k + 1 if matched else k)))
            return out

        def accept(st: State) -> bool:
            i, k = cast(tuple[int, int], st)
            return bool(i >= lo and k >= need and i > 0)

        try:
            body = self.machine((0, 0), trans, accept, "a")
        except OverflowError:
            raise self.too_many_states(ptr, "minItems/maxItems with prefixItems or contains") from None
        alts = []
        if lo == 0 and need == 0:
            alts.append(seq(Lit("["), w, Lit("]")))
        if body is not None and body != EMPTY:
            alts.append(seq(Lit("["), body, Lit("]")))
        return alt(alts) if alts else c.empty(ptr, "no array fits minItems/maxItems/contains")

    def counted_array(self, x: Expr | None, lo: int, hi: int | None, ptr: str) -> Expr | None:
        """Arrays of ``lo..hi`` items of one schema (``x``; None: no item has a value), the count
        kept in O(log n) rules (counting.py) rather than one state per position."""
        c = self.c
        w = c.ws
        alts = [seq(Lit("["), w, Lit("]"))] if lo == 0 else []
        first = max(lo, 1)
        if x is not None and (hi is None or hi >= first):
            unit = seq(Lit(","), w, x, w)
            more = Counter(c, unit, "a")
            tail = star(unit) if hi is None else more.at_most(hi - first)
            alts.append(seq(Lit("["), w, x, w, more.exactly(first - 1), tail, Lit("]")))
        return alt(alts) if alts else c.empty(ptr, "no array fits minItems/maxItems")

    def too_many_states(self, ptr: str, what: str) -> BudgetExceeded:
        return BudgetExceeded(
            "json_schema_counting_states",
            self.c.limits.json_schema_counting_states,
            f"{what} need more counting states than this",
            where=ptr or "/",
        )

    def unique_enum(self, s: dict[str, Any], lo: int, hi: int | None, ptr: str, resolver: Any) -> Any:
        """Arrays of distinct values from a finite enum (at most 10): the state is the set used.

        Returns the expression, None (no array fits) or False (not this case)."""
        c = self.c
        w = c.ws
        if s.get("prefixItems") or s.get("contains") is not None:
            return False
        items = s["items"] if "items" in s else s.get("unevaluatedItems", True)
        try:
            flat = c.flatten(items, f"{ptr}/items", resolver) if isinstance(items, dict) else None
        except GrammarError:
            return False
        if not flat or ("enum" not in flat and "const" not in flat):
            return False
        cands = flat.get("enum", [flat.get("const")])
        vals: list[Any] = []
        for v in cands:
            if c.validates(items, v, resolver) and not any(equal(v, x) for x in vals):
                vals.append(v)
        if len(vals) > 10:
            return False
        lits = [c.literal(v) for v in vals]
        top = len(vals) if hi is None else min(hi, len(vals))

        def trans(st: State) -> list[tuple[Expr, State]]:
            used = cast(frozenset[int], st)
            if len(used) >= top:
                return []
            sep = Lit(",") if used else EMPTY
            return [(seq(sep, w, lit, w), used | {i}) for i, lit in enumerate(lits) if i not in used]

        def accept(st: State) -> bool:
            n = len(cast(frozenset[int], st))
            return n >= max(lo, 1)

        body = self.machine(frozenset(), trans, accept, "u")
        alts = [seq(Lit("["), w, Lit("]"))] if lo == 0 else []
        if body is not None and body != EMPTY:
            alts.append(seq(Lit("["), body, Lit("]")))
        return alt(alts) if alts else c.empty(ptr, "no array of distinct enum values fits")

    # ---- objects ----------------------------------------------------------------------------------

    def object(self, s: dict[str, Any], ptr: str, resolver: Any, forbidden: list[str]) -> Expr | None:
        c = self.c
        w = c.ws
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise GrammarError(f"at {ptr or '/'}: properties must be an object")
        required = list(s.get("required", []))
        pats = s.get("patternProperties", {})
        if "additionalProperties" in s:
            addl = s["additionalProperties"]
        else:
            addl = s.get("unevaluatedProperties", True)
        pnames = s.get("propertyNames", True)
        lo = _count(s, "minProperties", ptr, 0) or 0
        hi = _count(s, "maxProperties", ptr, None)
        for p in pats:
            try:
                re.compile(p)
            except re.error:
                c.unsupported("patternProperties", ptr, f"pattern {p!r} is not a Python regex")
        members: list[tuple[Expr, bool, str]] = []
        deps = s.get("dependentRequired", {})
        if not isinstance(deps, dict) or not all(isinstance(v, list) for v in deps.values()):
            raise GrammarError(f"at {ptr or '/'}: dependentRequired must map names to arrays")
        targets = [t for v in deps.values() for t in v]
        involved = [k for k in dict.fromkeys([*targets, *deps]) if isinstance(k, str)]
        declared = list(dict.fromkeys([*props, *required, *involved]))
        for key in declared:
            req = key in required
            parts = [props[key]] if key in props else []
            matched = [v for p, v in pats.items() if _search(p, key)]
            parts += matched
            if key not in props and not matched:
                parts.append(addl)
            ok = key not in forbidden and (is_trivial(pnames) or c.validates(pnames, key, resolver))
            sch: Any = parts[0] if len(parts) == 1 else {"allOf": parts}
            val = None
            if ok:
                kp = f"{ptr}/properties/{key}"
                val = c.value(sch, kp, resolver) if len(parts) == 1 else c.synthetic(sch, kp, resolver)
            if val is None:
                if req:
                    return c.empty(ptr, f"required property {key!r} cannot have a value")
                continue
            k_term = Pat('"' + literal(key) + '"')
            members.append((c.rule(seq(w, k_term, w, Lit(":"), w, val, w), "m"), req, key))
        extra = self.extras(pats, addl, pnames, declared + forbidden, ptr, resolver)
        shape = ObjectParts(members, extra, lo, hi, deps, involved)
        alts = []
        if lo == 0 and not any(req for _, req, _ in members):
            alts.append(seq(Lit("{"), w, Lit("}")))
        body = None
        ordered_ok = not c.any_order or len(members) + (extra is not None) <= 1
        if not ordered_ok:
            try:
                body = any_order(self, shape)
            except OverflowError as e:
                why = f"{e} for property_order='any'"
                if c.strict:
                    c.unsupported("properties", ptr, why)
                c.warnings.append(f"{why} (keyword 'properties' at {ptr or '/'}); kept in declared order")
                ordered_ok = True
        if ordered_ok:
            body = self.declared_order(shape, ptr)
        if body is not None and body != EMPTY:
            alts.append(seq(Lit("{"), body, Lit("}")))
        return alt(alts) if alts else c.empty(ptr, "no object fits the property constraints")

    def declared_order(self, parts: ObjectParts, ptr: str) -> Expr | None:
        """The members in declared order, then further members: an expression, ``EMPTY`` or None."""
        members, extra, lo, hi, deps, involved = parts
        n = len(members)
        if n > COUNT_UNROLL and lo <= 1 and hi is None and not deps:
            return self.declared_tree(members, extra)
        # d counts declared members, e further members. json.loads keeps one of duplicate keys, and
        # further keys may repeat, so only one further member counts towards minProperties.
        dcap = hi if hi is not None else max(lo, 1)
        ecap = hi if hi is not None else 1

        # present: the dependentRequired names emitted so far (all are declared members, so further
        # members never carry them); a name needed by a present trigger cannot be skipped.
        def needed(present: frozenset[str]) -> set[str]:
            return {t for k in present for t in deps.get(k, [])}

        def trans(st: State) -> list[tuple[Expr, State]]:
            i, d, e, present = cast(tuple[int, int, int, frozenset[str]], st)
            out: list[tuple[Expr, State]] = []
            sep = Lit(",") if d + e > 0 else EMPTY
            room = hi is None or d + e < hi
            if i < n:
                m, req, key = members[i]
                now = present | {key} if key in involved else present
                if room:
                    out.append((seq(sep, m), (i + 1, min(d + 1, dcap), e, now)))
                if not req and key not in needed(present):
                    out.append((EMPTY, (i + 1, d, e, present)))
            elif extra is not None and room:
                out.append((seq(sep, extra), (n, d, min(e + 1, ecap), present)))
            return out

        def accept(st: State) -> bool:
            i, d, e, present = cast(tuple[int, int, int, frozenset[str]], st)
            return bool(i == n and d + min(e, 1) >= lo and d + e > 0 and needed(present) <= present)

        try:
            return self.machine((0, 0, 0, frozenset()), trans, accept, "o")
        except OverflowError:
            raise self.too_many_states(ptr, "minProperties/maxProperties/dependentRequired") from None

    def declared_tree(self, members: list[tuple[Expr, bool, str]], extra: Expr | None) -> Expr:
        """Many declared members (no counts, no dependentRequired) as a balanced tree of rules:
        ``more(a, b)``, the members a..b-1 present (required) or not, each after a comma, and
        ``first(a, b)``, a non-empty such run whose first member has no comma; then further
        members. A chain of a rule per position (the machine) makes every prefix predict every
        later member: O(n^2) prediction closures, 68 s for 2,000 optional properties. The tree's
        closures are O(n log n), and each subset still has one derivation."""
        c = self.c
        req_before = [0]
        for _, req, _ in members:
            req_before.append(req_before[-1] + req)
        more_memo: dict[tuple[int, int], Expr] = {}
        first_memo: dict[tuple[int, int], Expr] = {}

        def more(a: int, b: int) -> Expr:
            if (a, b) not in more_memo:
                if b - a == 1:
                    m, req, _ = members[a]
                    more_memo[a, b] = seq(Lit(","), m) if req else opt(seq(Lit(","), m))
                else:
                    mid = (a + b) // 2
                    more_memo[a, b] = c.rule(seq(more(a, mid), more(mid, b)), "o")
            return more_memo[a, b]

        def first(a: int, b: int) -> Expr:
            if (a, b) not in first_memo:
                if b - a == 1:
                    first_memo[a, b] = members[a][0]
                else:
                    mid = (a + b) // 2
                    alts = [seq(first(a, mid), more(mid, b))]
                    if req_before[mid] == req_before[a]:  # no required member on the left
                        alts.append(first(mid, b))
                    first_memo[a, b] = c.rule(alt(alts), "o")
            return first_memo[a, b]

        body = first(0, len(members))
        if extra is None:
            return body
        tail = star(seq(Lit(","), extra))
        alts = [seq(body, tail)]
        if req_before[-1] == 0:
            alts.append(seq(extra, tail))
        return c.rule(alt(alts), "o")

    def extras(
        self, pats: dict[str, Any], addl: Any, pnames: Any, taken: list[str], ptr: str, resolver: Any
    ) -> Expr | None:
        """One further member (key not declared), or None when no further member is allowed."""
        c = self.c
        w = c.ws
        if pnames is False:
            return None
        k_term: Expr | None = None
        val: Expr | None = None
        if not pats:
            if addl is False:
                return None
            val = c.value(addl, f"{ptr}/additionalProperties", resolver)
            if is_trivial(pnames):
                k_term = key_not_in_terminal(taken)
            else:
                key_re = self.names_regex(pnames, taken, ptr, resolver)
                k_term = None if key_re is None else Pat('"' + key_re + '"')
        elif is_trivial(addl) and all(is_trivial(v) for v in pats.values()) and is_trivial(pnames):
            val = c.value(addl, f"{ptr}/additionalProperties", resolver)
            k_term = key_not_in_terminal(taken)
        else:
            if not is_trivial(pnames):
                c.unsupported("propertyNames", ptr, "propertyNames together with patternProperties")
            return self.pattern_regions(pats, addl, taken, ptr, resolver)
        if val is None or k_term is None:
            return None
        return c.rule(seq(w, k_term, w, Lit(":"), w, val, w), "x")

    def key_intersection(
        self, match: list[str], avoid: list[str], taken: list[str], ptr: str, why: str
    ) -> Expr | None:
        """The keys (canonical JSON text) that ``re.search`` every pattern in ``match``, none in
        ``avoid`` and are not ``taken``, as an intersection terminal (product automaton, intersect.py)
        when the key-set DFA of ``keyset`` is too large; None if empty or refused."""
        c = self.c
        try:
            parts = {'"' + key_not_in(taken) + '"'}
            parts |= {'"' + pattern_regex(p, ptr)[0] + '"' for p in match}
            parts |= {'!"' + pattern_regex(p, ptr)[0] + '"' for p in avoid}
        except UnsupportedSchemaError:
            c.unsupported("patternProperties", ptr, f"these key sets are too complex ({why})")
            return None
        fallback = Pat(NOTHING)
        return c.scalars.intersection_terminal(ordered(parts), "patternProperties", ptr, fallback)

    def pattern_regions(
        self, pats: dict[str, Any], addl: Any, taken: list[str], ptr: str, resolver: Any
    ) -> Expr | None:
        """Further members when patternProperties apply: one key region per set of matching patterns.

        A key matching exactly the patterns T (and not declared) takes ``allOf`` of their schemas; a
        key matching none takes ``additionalProperties``. Regions come from key DFAs (``keyset``).
        """
        c = self.c
        w = c.ws
        names = list(pats)
        if len(names) > 3:
            c.unsupported("patternProperties", ptr, "more than 3 patternProperties with further keys")
            return None
        regions: list[tuple[list[str], Any]] = []
        for size in range(1, len(names) + 1):
            for combo in itertools.combinations(names, size):
                parts = [pats[p] for p in combo]
                regions.append((list(combo), parts[0] if len(parts) == 1 else {"allOf": parts}))
        if addl is not False:
            regions.append(([], addl))
        members = []
        for subset, sch in regions:
            others = [p for p in names if p not in subset]
            try:
                key_re = key_regex(subset, others, taken)
                key_term: Expr | None = None if key_re is None else Pat('"' + key_re + '"')
            except (KeySetTooLarge, re.error, RecursionError) as e:
                key_term = self.key_intersection(subset, others, taken, ptr, str(e))
            if key_term is None:
                continue
            kp = f"{ptr}/patternProperties" if subset else f"{ptr}/additionalProperties"
            val = (
                c.synthetic(sch, kp, resolver)
                if isinstance(sch, dict) and "allOf" in sch and len(subset) > 1
                else c.value(sch, kp, resolver)
            )
            if val is None:
                continue
            members.append(c.rule(seq(w, key_term, w, Lit(":"), w, val, w), "x"))
        if not members:
            return None
        return members[0] if len(members) == 1 else c.rule(alt(members), "x")

    def names_regex(self, pnames: Any, taken: list[str], ptr: str, resolver: Any) -> str | None:
        c = self.c
        p = f"{ptr}/propertyNames"
        if isinstance(pnames, dict) and ("enum" in pnames or "const" in pnames):
            vals = pnames.get("enum", [pnames.get("const")])
            keys = [
                v for v in vals if isinstance(v, str) and v not in taken and c.validates(pnames, v, resolver)
            ]
            return "(?:" + "|".join(literal(k) for k in keys) + ")" if keys else None
        if any(c.validates(pnames, k, resolver) for k in taken):
            c.unsupported("propertyNames", ptr, "a declared property name also satisfies propertyNames")
        flat = c.flatten(pnames, p, resolver)
        if flat is None:
            return None
        if set(flat) - {"type", "pattern", "minLength", "maxLength", "format"}:
            c.unsupported("propertyNames", ptr, "only string keywords are supported in propertyNames")
        if "type" in flat and "string" not in flat["type"]:
            return None
        return c.scalars.string_body(flat, p)


def _derivations(
    edges: dict[State, list[tuple[Expr, State]]], accept: Callable[[State], bool]
) -> tuple[set[State], set[State]]:
    """The states deriving the empty string (nullable) and those with a non-empty derivation (solid).

    Worklists over reversed edges: each edge is looked at a bounded number of times (linear, where
    re-sweeping every state until nothing changes was quadratic in a long counting chain).
    """
    back_eps: dict[State, list[State]] = {}
    back: dict[State, list[State]] = {}
    for st, out in edges.items():
        for e, n in out:
            back.setdefault(n, []).append(st)
            if e == EMPTY:
                back_eps.setdefault(n, []).append(st)
    nullable = {st for st in edges if accept(st)}
    todo = list(nullable)
    while todo:  # st --EMPTY--> nullable: nullable
        n = todo.pop()
        for st in back_eps.get(n, ()):
            if st not in nullable:
                nullable.add(st)
                todo.append(st)
    solid = {st for st, out in edges.items() if any(e != EMPTY and n in nullable for e, n in out)}
    todo = list(solid)
    while todo:  # st --any edge--> solid: solid
        n = todo.pop()
        for st in back.get(n, ()):
            if st not in solid:
                solid.add(st)
                todo.append(st)
    return nullable, solid


def _search(p: str, key: str) -> bool:
    try:
        return re.search(p, key) is not None
    except re.error:
        return False
