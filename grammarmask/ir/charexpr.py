"""A byte DFA of UTF-8 text as an expression over characters, for the GBNF printer (:mod:`.gbnf`).

Two steps. :func:`char_edges` reads the byte DFA as an automaton over Unicode scalar values: from
each state where a character may start, the code point ranges that lead to each next such state
(the continuation bytes are followed once per state and count of bytes still to come, so a state is
not walked once per code point). A DFA that accepts bytes that are not UTF-8 text (a lone
continuation byte, an overlong form, a surrogate, a cut character) cannot be written over characters:
:class:`NotText` says so. :func:`regex_of` then turns that automaton into a regular expression by
state elimination (Brzozowski & McCluskey 1963), eliminating the state with the fewest
in-times-out edges first, and gives up (None) once the expression grows past a size bound; the
printer then writes one rule per state instead (always possible, and always exact).

Expressions are tuples: ``("eps",)``, ``("cls", ranges)`` (a set of code point ranges),
``("cat", items)``, ``("alt", items)``, ``("rep", item, lo, hi)`` (``hi`` None: unbounded).
"""

from __future__ import annotations

from typing import Any

__all__ = ["NotText", "char_edges", "gbnf_expr", "regex_of"]

Ranges = tuple[tuple[int, int], ...]
Node = tuple[Any, ...]
EPS: Node = ("eps",)
_SCALARS: Ranges = ((0, 0xD7FF), (0xE000, 0x10FFFF))
# the code points each UTF-8 length may encode (lead bytes C2-F4; E0/ED/F0/F4 restrict the next byte)
_LENGTH_RANGE = {1: (0x80, 0x7FF), 2: (0x800, 0xFFFF), 3: (0x10000, 0x10FFFF)}


class NotText(Exception):
    """The DFA accepts a byte string that is not UTF-8 text (carries the state where it shows)."""


def _merge(items: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """``(lo, hi, target)`` ranges sorted by target then ``lo``, adjacent ranges of a target joined."""
    out: list[tuple[int, int, int]] = []
    for lo, hi, t in sorted(items, key=lambda x: (x[2], x[0])):
        if out and out[-1][2] == t and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi, t)
        else:
            out.append((lo, hi, t))
    return out


def char_edges(dfa: Any) -> dict[int, dict[int, Ranges]]:
    """Per state of ``dfa`` where a character may start (reachable from the start): next state ->
    the code point ranges that lead there. Raises :class:`NotText` if ``dfa`` accepts a byte string
    that is not UTF-8 text."""
    rows: dict[int, list[int]] = {}
    acc = dfa.accepting.tolist()

    def row(s: int) -> list[int]:
        r = rows.get(s)
        if r is None:
            r = rows[s] = dfa.transitions[s].tolist()
        return r

    memo: dict[tuple[int, int], list[tuple[int, int, int]]] = {}

    def cont(s: int, k: int) -> list[tuple[int, int, int]]:
        """From ``s`` inside a character, ``k`` continuation bytes to come: (value range of their
        6k bits, state after them)."""
        hit = memo.get((s, k))
        if hit is not None:
            return hit
        if acc[s]:
            raise NotText(s)
        out = []
        shift = 6 * (k - 1)
        for b, t in enumerate(row(s)):
            if not t:
                continue
            if not 0x80 <= b <= 0xBF:
                raise NotText(s)
            base = (b & 0x3F) << shift
            if k == 1:
                out.append((base, base, t))
            else:
                out.extend((base + lo, base + hi, tg) for lo, hi, tg in cont(t, k - 1))
        memo[(s, k)] = out = _merge(out)
        return out

    edges: dict[int, dict[int, Ranges]] = {}
    todo = [dfa.start] if dfa.start else []
    while todo:
        s = todo.pop()
        if s in edges:
            continue
        found: list[tuple[int, int, int]] = []
        for b, t in enumerate(row(s)):
            if not t:
                continue
            if b < 0x80:
                found.append((b, b, t))
                continue
            k = 1 if 0xC2 <= b <= 0xDF else 2 if 0xE0 <= b <= 0xEF else 3 if 0xF0 <= b <= 0xF4 else 0
            if not k:
                raise NotText(s)
            lead = (b & (0x3F >> k)) << (6 * k)
            lo_ok, hi_ok = _LENGTH_RANGE[k]
            for lo, hi, tg in cont(t, k):
                lo, hi = lead + lo, lead + hi
                if lo < lo_ok or hi > hi_ok or (k == 2 and lo <= 0xDFFF and hi >= 0xD800):
                    raise NotText(s)  # an overlong form, a surrogate, or past U+10FFFF
                found.append((lo, hi, tg))
        by_target: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, t in _merge(found):
            by_target.setdefault(t, []).append((lo, hi))
        edges[s] = {t: _union(r) for t, r in by_target.items()}
        todo.extend(t for t in by_target if t not in edges)
    return edges


# --- expressions ------------------------------------------------------------------------------


def _union(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return tuple(out)


def nullable(x: Node) -> bool:
    kind = x[0]
    if kind == "eps":
        return True
    if kind == "cls":
        return False
    if kind == "rep":
        return bool(x[2] == 0 or nullable(x[1]))
    if kind == "cat":
        return all(nullable(y) for y in x[1])
    return any(nullable(y) for y in x[1])


def rep(x: Node, lo: int, hi: int | None) -> Node:
    if x == EPS or hi == 0:
        return EPS
    if (lo, hi) == (1, 1):
        return x
    if x[0] == "rep" and (lo, hi) == (0, None) and x[2] <= 1:
        return ("rep", x[1], 0, None)  # (y{0,n})*, (y{1,n})* = y*
    if x[0] == "rep" and (lo, hi) == (0, 1) and x[2] <= 1:
        return ("rep", x[1], 0, x[3])  # (y{0,n})?, (y{1,n})? = y{0,n}
    return ("rep", x, lo, hi)


def cat(*parts: Node) -> Node:
    items: list[Node] = []
    for p in parts:
        for y in p[1] if p[0] == "cat" else (p,):
            if y == EPS:
                continue
            prev = items[-1] if items else None
            if prev is not None and y[0] == "rep" and y[1] == prev:  # z z{m,n} = z{m+1,n+1}
                items[-1] = ("rep", prev, y[2] + 1, None if y[3] is None else y[3] + 1)
            elif prev is not None and prev[0] == "rep" and prev[1] == y:  # z{m,n} z = z{m+1,n+1}
                items[-1] = ("rep", y, prev[2] + 1, None if prev[3] is None else prev[3] + 1)
            elif prev is not None and prev == y and _single(y) is None:  # z z = z{2}
                items[-1] = ("rep", y, 2, 2)
            else:
                items.append(y)
    return EPS if not items else items[0] if len(items) == 1 else ("cat", tuple(items))


def alt(*parts: Node) -> Node:
    items: dict[Node, None] = {}
    empty = False
    chars: list[tuple[int, int]] = []
    for p in parts:
        for y in p[1] if p[0] == "alt" else (p,):
            if y == EPS:
                empty = True
            elif y[0] == "cls":
                if not chars:
                    items[("cls-slot",)] = None
                chars.extend(y[1])
            else:
                items[y] = None
    out = [(("cls", _union(chars)) if y == ("cls-slot",) else y) for y in items]
    x = EPS if not out else out[0] if len(out) == 1 else ("alt", tuple(out))
    return rep(x, 0, 1) if empty and not nullable(x) else x


def size(x: Node) -> int:
    """A bound on the printed length (for the state elimination's give-up rule)."""
    kind = x[0]
    if kind == "eps":
        return 2
    if kind == "cls":
        return 2 + 12 * len(x[1])
    if kind == "rep":
        return 4 + size(x[1])
    return 2 + sum(size(y) + 1 for y in x[1])


def regex_of(edges: dict[int, dict[int, Ranges]], start: int, accepting: set[int],
             max_size: int = 4000) -> Node | None:
    """The language of the character automaton ``edges`` (from :func:`char_edges`) as an
    expression, or None when it grows past ``max_size`` (state elimination)."""
    first, last = -1, -2
    lab: dict[tuple[int, int], Node] = {(first, start): EPS}
    succ: dict[int, set[int]] = {first: {start}}
    pred: dict[int, set[int]] = {start: {first}}
    for p, out in edges.items():
        for q, ranges in out.items():
            lab[(p, q)] = ("cls", ranges)
            succ.setdefault(p, set()).add(q)
            pred.setdefault(q, set()).add(p)
        if p in accepting:
            lab[(p, last)] = EPS
            succ.setdefault(p, set()).add(last)
            pred.setdefault(last, set()).add(p)
    states = set(edges)
    while states:
        k = min(states, key=lambda s: (len(pred.get(s, ())) * len(succ.get(s, ())), s))
        states.discard(k)
        loop = lab.pop((k, k), None)
        mid = rep(loop, 0, None) if loop is not None else EPS
        ins = [p for p in pred.pop(k, set()) if p != k]
        outs = [q for q in succ.pop(k, set()) if q != k]
        for p in ins:
            succ[p].discard(k)
        for q in outs:
            pred[q].discard(k)
        for p in ins:
            a = lab.pop((p, k))
            for q in outs:
                new = cat(a, mid, lab[(k, q)])
                old = lab.get((p, q))
                lab[(p, q)] = new = new if old is None else alt(old, new)
                if size(new) > max_size:
                    return None
                succ[p].add(q)
                pred.setdefault(q, set()).add(p)
        for q in outs:
            lab.pop((k, q), None)
    return lab.get((first, last))


# --- printing ---------------------------------------------------------------------------------

_CLASS_SPECIAL = set('[]\\^-"')


def _char(c: int, in_class: bool) -> str:
    ch = chr(c)
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if ch == "\r":
        return "\\r"
    if ch == "\\" or ch == '"' and not in_class:
        return "\\" + ch
    if (in_class and ch in _CLASS_SPECIAL) or not ch.isprintable() or (c > 0x7F and not ch.isalnum()):
        return f"\\x{c:02X}" if c < 0x100 else f"\\u{c:04X}" if c < 0x10000 else f"\\U{c:08X}"
    return ch


def _complement(ranges: Ranges) -> Ranges:
    out = []
    for lo, hi in _SCALARS:
        cur = lo
        for a, b in ranges:
            if b < cur or a > hi:
                continue
            if a > cur:
                out.append((cur, a - 1))
            cur = max(cur, b + 1)
        if cur <= hi:
            out.append((cur, hi))
    return tuple(out)


def _class(ranges: Ranges) -> str:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return '"' + _char(ranges[0][0], False) + '"'
    neg = _complement(ranges)
    if not neg:
        return "."
    negate = len(neg) < len(ranges)
    parts = []
    for lo, hi in neg if negate else ranges:
        parts.append(_char(lo, True) if lo == hi else f"{_char(lo, True)}-{_char(hi, True)}")
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


def _single(x: Node) -> int | None:
    if x[0] == "cls" and len(x[1]) == 1 and x[1][0][0] == x[1][0][1]:
        return int(x[1][0][0])
    return None


def gbnf_expr(x: Node) -> tuple[str, int]:
    """GBNF text of ``x`` and its precedence (0 alternatives, 1 sequence, 2 atom)."""
    kind = x[0]
    if kind == "eps":
        return '""', 2
    if kind == "cls":
        return _class(x[1]), 2
    if kind == "alt":
        return " | ".join(gbnf_expr(y)[0] for y in x[1]), 0
    if kind == "rep":
        inner, prec = gbnf_expr(x[1])
        if prec < 2 or (inner.startswith('"') and len(inner) > 3 and _single(x[1]) is None):
            inner = f"({inner})"
        lo, hi = x[2], x[3]
        suffix = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((lo, hi))
        if suffix is None:
            suffix = f"{{{lo},}}" if hi is None else f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"
        return inner + suffix, 2
    parts: list[str] = []
    run: list[str] = []
    for y in x[1]:
        c = _single(y)
        if c is not None:
            run.append(_char(c, False))
            continue
        if run:
            parts.append('"' + "".join(run) + '"')
            run = []
        text, prec = gbnf_expr(y)
        parts.append(f"({text})" if prec == 0 else text)
    if run:
        parts.append('"' + "".join(run) + '"')
    return " ".join(parts), (1 if len(parts) > 1 else 2)
