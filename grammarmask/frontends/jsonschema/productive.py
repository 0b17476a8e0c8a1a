"""Rules with no finite derivation, found and removed in the front end's own terms.

A recursive schema's rule is referred to while it is being built, before the compiler knows
whether it admits any value; one that turns out empty (written as the terminal that matches
nothing) or that can only recur (``{"properties": {"a": {"$ref": "#"}}, "required": ["a"]}``: every
instance contains another) leaves rules that derive no finite string. :func:`prune` drops them,
and the references to them, so the grammar handed on is the same language with only productive
rules; when the start rule itself is unproductive, the schema admits no (finite) value and the
caller says so with the schema's JSON pointers.
"""

from __future__ import annotations

from ...ir.builder import EMPTY, Alt, Expr, Pat, Ref, Rep, Seq, alt, seq

__all__ = ["prune", "rule_refs", "unproductive"]


def rule_refs(x: Expr) -> set[str]:
    """The rule names ``x`` refers to."""
    out: set[str] = set()
    stack = [x]
    while stack:
        e = stack.pop()
        if isinstance(e, Ref):
            out.add(e.name)
        elif isinstance(e, Seq):
            stack.extend(e.items)
        elif isinstance(e, Alt):
            stack.extend(e.alts)
        elif isinstance(e, Rep):
            stack.append(e.item)
    return out


def _derives(x: Expr, live: set[str], nothing: str) -> bool:
    if isinstance(x, Ref):
        return x.name in live
    if isinstance(x, Pat):
        return x.regex != nothing
    if isinstance(x, Seq):
        return all(_derives(y, live, nothing) for y in x.items)
    if isinstance(x, Alt):
        return any(_derives(y, live, nothing) for y in x.alts)
    if isinstance(x, Rep):
        return x.lo == 0 or _derives(x.item, live, nothing)
    return True  # Lit


def unproductive(rules: dict[str, Expr], nothing: str) -> set[str]:
    """The rules that derive no finite string (``nothing`` is the regex of the empty terminal)."""
    live: set[str] = set()
    waiting: dict[str, list[str]] = {}  # a rule not known productive -> the rules waiting on it
    failed: set[str] = set()
    # a worklist, rules taken last made first: a schema's parts are made after it, so most rules
    # find their parts productive at once, and only a rule that does not yet (a recursion, an empty
    # part) reads which rules it uses, to be looked at again when one of them became productive
    for name in reversed(rules):
        todo = [name]
        while todo:
            n = todo.pop()
            if n in live:
                continue
            body = rules[n]
            if _derives(body, live, nothing):
                live.add(n)
                todo.extend(waiting.pop(n, ()))
            elif n not in failed:
                failed.add(n)
                for r in rule_refs(body):
                    if r not in live:
                        waiting.setdefault(r, []).append(n)
    return set(rules) - live


def _simplify(x: Expr, dead: set[str], nothing: str) -> Expr | None:
    """``x`` without its unproductive parts (None: ``x`` itself is unproductive)."""
    if isinstance(x, Ref):
        return None if x.name in dead else x
    if isinstance(x, Pat):
        return None if x.regex == nothing else x
    if isinstance(x, Seq):
        items = [_simplify(y, dead, nothing) for y in x.items]
        return None if any(y is None for y in items) else seq(*[y for y in items if y is not None])
    if isinstance(x, Alt):
        alts = [y for y in (_simplify(a, dead, nothing) for a in x.alts) if y is not None]
        return alt(alts) if alts else None
    if isinstance(x, Rep):
        item = _simplify(x.item, dead, nothing)
        if item is None:
            return EMPTY if x.lo == 0 else None
        return Rep(item, x.lo, x.hi)
    return x


def prune(rules: dict[str, Expr], dead: set[str], nothing: str) -> dict[str, Expr]:
    """``rules`` without the ``dead`` (unproductive) ones and every reference to them."""
    out: dict[str, Expr] = {}
    for name, body in rules.items():
        if name not in dead:
            kept = _simplify(body, dead, nothing)
            if kept is not None:
                out[name] = kept
    return out
