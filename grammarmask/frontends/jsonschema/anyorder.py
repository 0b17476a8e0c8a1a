"""``property_order="any"``: an object's members in any order, exactly (docs/json_schema.md).

The state is the set of tracked declared keys already present plus a capped member count, written
out as rules by :meth:`.objects.ObjectBuilder.machine`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, cast

from ...ir.builder import EMPTY, Expr, Lit, Pat, alt, seq
from .strings import literal

if TYPE_CHECKING:
    from .objects import ObjectBuilder, State

__all__ = ["ObjectParts", "any_order", "literal_object"]

# property_order="any": the set of tracked keys is the state (2^t states, t <= Limits.
# json_schema_any_order_keys; more is refused in strict mode, else kept in declared order); times a
# member count under maxProperties, at most Limits.json_schema_any_order_states. Lark text and
# compile time grow as t * 2^t: t = 10 is about 120 kB of rules and 1.1 s to compile on tekken
# (t = 8: 0.2 s, t = 12: 5 s; docs/json_schema.md). Every declared key is tracked (no key twice)
# when that costs at most DEDUPE_STATES.
DEDUPE_STATES = 32


class ObjectParts(NamedTuple):
    """What an object's keywords leave for its member machine (declared or any order)."""

    members: list[tuple[Expr, bool, str]]  # (rule, required, key) per declared key, in order
    extra: Expr | None  # the rule of one further member, if any is allowed
    lo: int  # minProperties
    hi: int | None  # maxProperties
    deps: dict[str, list[str]]  # dependentRequired
    involved: list[str]  # the keys dependentRequired names


def any_order(ob: ObjectBuilder, parts: ObjectParts) -> Expr | None:
    """The members in any order, further members interleaved: an expression, ``EMPTY`` or None.

    State ``(present, k, y)``: ``present`` is a bit set of the tracked declared keys emitted
    (a tracked key never comes twice), ``k`` the member count (capped at ``maxProperties``, else
    at 1: is a separator due), ``y`` whether an untracked or further member came (kept only
    under ``minProperties``).

    Untracked keys may repeat. That is sound: ``json.loads`` keeps the last of duplicate keys
    and every occurrence's value was validated against that key's schema, so the kept value
    validates, and the key is present either way. Counting keywords count distinct keys:
    ``required`` and ``dependentRequired`` keys are always tracked; ``maxProperties`` bounds the
    members written (at least the distinct keys; equal for ``json.dumps`` output, which has no
    duplicates); ``minProperties`` is checked against ``|present| + y``, a lower bound on the
    distinct keys (untracked keys differ from tracked ones). That bound is exact when
    ``minProperties`` is at most the required count + 1 (a valid instance with an untracked key
    has all required ones); above that every declared key is tracked and, as in declared
    order, further members count once (they may repeat).
    Raises OverflowError past ``Limits.json_schema_any_order_keys`` tracked keys or
    ``Limits.json_schema_any_order_states`` states.
    """
    members, extra, lo, hi, deps, involved = parts
    keys = [k for _, _, k in members]
    req = {k for _, r, k in members if r}
    if lo > len(req) + 1 or 2 ** len(keys) <= max(DEDUPE_STATES, 2 ** len(req | set(involved))):
        tracked = list(keys)
    else:
        tracked = [k for k in keys if k in req or k in involved]
    most_keys = ob.c.limits.json_schema_any_order_keys
    if len(tracked) > most_keys:
        raise OverflowError(
            f"{len(tracked)} keys to track (required/dependentRequired), at most {most_keys} "
            "(Limits.json_schema_any_order_keys)"
        )
    bits = {k: 1 << i for i, k in enumerate([*tracked, *(k for k in involved if k not in tracked)])}
    need_all = sum(bits[k] for k in req)
    # a present trigger needs its targets (a target that cannot have a value has a bit never set)
    needs = [(bits[k], sum(bits[t] for t in deps[k] if t in bits)) for k in deps if k in tracked]
    own = [(m, bits[k]) for m, _, k in members if k in tracked]
    free = [m for m, _, k in members if k not in tracked] + ([extra] if extra is not None else [])
    free_rule = (free[0] if len(free) == 1 else ob.c.rule(alt(free), "f")) if free else None
    cap = hi if hi is not None else 1
    fy = 1 if lo > 0 else 0

    def trans(st: State) -> list[tuple[Expr, State]]:
        present, k, y = cast(tuple[int, int, int], st)
        if hi is not None and k >= hi:
            return []
        sep = Lit(",") if k else EMPTY
        nk = min(k + 1, cap)
        out: list[tuple[Expr, State]] = [
            (seq(sep, m), (present | b, nk, y)) for m, b in own if not present & b
        ]
        if free_rule is not None:
            out.append((seq(sep, free_rule), (present, nk, fy)))
        return out

    def accept(st: State) -> bool:
        present, k, y = cast(tuple[int, int, int], st)
        if k == 0 or present & need_all != need_all:
            return False
        if any(present & b and present & t != t for b, t in needs):
            return False
        return bin(present).count("1") + y >= lo

    try:
        return ob.machine((0, 0, 0), trans, accept, "o", ob.c.limits.json_schema_any_order_states)
    except OverflowError:
        raise OverflowError(
            f"more than {ob.c.limits.json_schema_any_order_states} states (maxProperties {hi}; "
            "Limits.json_schema_any_order_states)"
        ) from None


def literal_object(ob: ObjectBuilder, v: dict[str, Any]) -> Expr:
    """A const/enum object with ``property_order="any"``: its members in any order, each once.

    Past ``Limits.json_schema_any_order_keys`` keys in written order (a documented narrowing)."""
    c = ob.c
    w = c.ws
    members: list[tuple[Expr, bool, str]] = []
    for k, x in v.items():
        key = Pat('"' + literal(k) + '"')
        members.append((c.rule(seq(w, key, w, Lit(":"), w, c.literal(x), w), "m"), True, k))
    body: Expr | None
    try:
        body = any_order(ob, ObjectParts(members, None, 0, None, {}, []))
    except OverflowError:
        body = seq(*(x for i, (m, _, _) in enumerate(members) for x in ((Lit(","), m) if i else (m,))))
    return c.rule(seq(Lit("{"), body if body is not None else EMPTY, Lit("}")), "l")
