"""Small DFAs over property names, for key sets that need a complement or an intersection.

``patternProperties`` with further keys allowed needs "keys the pattern does not match" and "keys
that match but are not declared". Both are built here as DFAs over character classes (from Python's
regex syntax tree, with Python's ``re.search`` semantics, which is what ``jsonschema`` runs), then
written back as a regex over the JSON text by state elimination. Keys are limited to characters
other than line terminators (a narrowing that makes ``$`` mean end of string). Sizes are capped;
past the cap the caller refuses the keyword.
"""

from __future__ import annotations

import bisect
import re
from functools import reduce
from typing import Any

from ...automata.sre import C
from ...automata.sre import parse as sre_parse
from .strings import MAXC, Ranges, _complement, _norm, _py_set, encode_set

__all__ = ["KeySetTooLarge", "key_regex"]

MAX_STATES = 64
MAX_REGEX = 30000
_NL: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
_SIGMA: Ranges = _complement(_NL)  # key alphabet


class KeySetTooLarge(Exception):
    """The key set has no small exact form here."""


class _NFA:
    def __init__(self) -> None:
        self.edges: list[list[tuple[Ranges | None, int]]] = []  # None label: epsilon

    def state(self) -> int:
        self.edges.append([])
        return len(self.edges) - 1

    def add(self, a: int, label: Ranges | None, b: int) -> None:
        self.edges[a].append((label, b))


def _cat(av: Any) -> Ranges:
    name = str(av).upper()
    kind = "d" if "DIGIT" in name else "w" if "WORD" in name else "s"
    r = list(_py_set(kind))
    return _complement(r) if "NOT_" in name else r


def _class(items: Any) -> Ranges:
    neg = False
    out: Ranges = []
    for op, av in items:
        if op is C.NEGATE:
            neg = True
        elif op is C.LITERAL:
            out.append((av, av))
        elif op is C.RANGE:
            out.append((av[0], av[1]))
        elif op is C.CATEGORY:
            out += _cat(av)
        else:
            raise KeySetTooLarge(str(op))
    return _complement(out) if neg else _norm(out)


def _build(n: _NFA, seq: Any, start: int) -> int:
    """Add ``seq`` from ``start``; return the end state (Python semantics on the key alphabet)."""
    cur = start
    for op, av in seq:
        nxt = n.state()
        if op is C.LITERAL:
            n.add(cur, [(av, av)], nxt)
        elif op is C.NOT_LITERAL:
            n.add(cur, _complement([(av, av)]), nxt)
        elif op is C.IN:
            n.add(cur, _class(av), nxt)
        elif op is C.ANY:
            n.add(cur, _complement([(0x0A, 0x0A)]), nxt)
        elif op is C.SUBPATTERN:
            if av[1] or av[2]:
                raise KeySetTooLarge("flags")
            n.add(cur, None, nxt)
            end = _build(n, av[3], nxt)
            nxt = n.state()
            n.add(end, None, nxt)
        elif op is C.BRANCH:
            for b in av[1]:
                s = n.state()
                n.add(cur, None, s)
                n.add(_build(n, b, s), None, nxt)
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, body = av
            if lo > 20 or (hi is not C.MAXREPEAT and hi > 20):
                raise KeySetTooLarge("repeat")
            here = cur
            for _ in range(lo):
                s = n.state()
                n.add(here, None, s)
                here = _build(n, body, s)
            if hi is C.MAXREPEAT:
                s = n.state()
                n.add(here, None, s)
                e = _build(n, body, s)
                n.add(e, None, here)
                n.add(here, None, nxt)
            else:
                n.add(here, None, nxt)
                for _ in range(hi - lo):
                    s = n.state()
                    n.add(here, None, s)
                    here = _build(n, body, s)
                    n.add(here, None, nxt)
        elif op is C.AT and av in (C.AT_BEGINNING, C.AT_BEGINNING_STRING, C.AT_END, C.AT_END_STRING):
            raise KeySetTooLarge("anchor inside the pattern")
        else:
            raise KeySetTooLarge(str(op))
        cur = nxt
    return cur


def _anchors(seq: list[Any]) -> tuple[bool, bool, list[Any]]:
    start = bool(seq) and seq[0][0] is C.AT and seq[0][1] in (C.AT_BEGINNING, C.AT_BEGINNING_STRING)
    if start:
        seq = seq[1:]
    end = bool(seq) and seq[-1][0] is C.AT and seq[-1][1] in (C.AT_END, C.AT_END_STRING)
    if end:
        seq = seq[:-1]
    return start, end, seq


def _pattern_nfa(pattern: str) -> tuple[_NFA, int, int]:
    parsed: Any = sre_parse(pattern)
    tree: list[Any] = list(parsed)
    branches: list[list[Any]] = [tree]
    if len(tree) == 1 and tree[0][0] is C.BRANCH:
        branches = [list(b) for b in tree[0][1][1]]
    n = _NFA()
    s0, f = n.state(), n.state()
    for b in branches:
        start, end, body = _anchors(b)
        s = n.state()
        n.add(s0, None, s)
        if not start:
            n.add(s, _SIGMA, s)
        e = _build(n, body, s)
        if not end:
            n.add(e, _SIGMA, e)
        n.add(e, None, f)
    return n, s0, f


class _DFA:
    def __init__(self, atoms: list[Ranges], delta: list[list[int]], accept: list[bool]) -> None:
        self.atoms, self.delta, self.accept = atoms, delta, accept


def _atoms(labels: list[Ranges]) -> list[Ranges]:
    """The coarsest partition of the key alphabet refining every label."""
    cuts = {0, MAXC + 1}
    for r in labels + [_SIGMA]:
        for lo, hi in r:
            cuts.update((lo, hi + 1))
    bounds = sorted(cuts)
    # the labels holding each interval between cuts, each distinct label marked on the intervals
    # of its ranges (a declared key's every character is a label: reading every label for every
    # interval was most of a large schema's refusal)
    inside: list[list[int]] = [[] for _ in bounds]
    for j, lab in enumerate(dict.fromkeys(tuple(r) for r in labels)):
        for lo, hi in lab:
            for iv in range(bisect.bisect_left(bounds, lo), bisect.bisect_left(bounds, hi + 1)):
                if not inside[iv] or inside[iv][-1] != j:  # (once, should its ranges overlap)
                    inside[iv].append(j)
    sig: dict[tuple[int, ...], Ranges] = {}
    for iv, (lo, hi1) in enumerate(zip(bounds, bounds[1:])):
        if not any(a <= lo <= b for a, b in _SIGMA):
            continue
        sig.setdefault(tuple(inside[iv]), []).append((lo, hi1 - 1))
    return [_norm(v) for v in sig.values()]


def _determinize(n: _NFA, s0: int, f: int, atoms: list[Ranges]) -> _DFA:
    # Each labelled edge is read once for the atoms it takes (an atom is in a label or outside it:
    # they refine every label), so a subset's row is one pass over its states' moves; a target set
    # met again reuses its closure. (Testing every atom against every edge of every state of each
    # subset took 2-3 s on JSONSchemaBench's o12344 before the schema was refused.)
    reps = [a[0][0] for a in atoms]
    by_rep = sorted(range(len(reps)), key=reps.__getitem__)
    sorted_reps = [reps[k] for k in by_rep]
    taken: dict[tuple[tuple[int, int], ...], list[int]] = {}  # a label's atoms, ascending

    def atoms_in(lab: Ranges) -> list[int]:
        key = tuple(lab)
        got = taken.get(key)
        if got is None:
            got = taken[key] = sorted(
                by_rep[i] for x, y in lab
                for i in range(bisect.bisect_left(sorted_reps, x), bisect.bisect_right(sorted_reps, y))
            )
        return got

    moves: list[list[tuple[int, int]]] = []  # per NFA state: (atom, target) of its labelled edges
    for edges in n.edges:
        moves.append([(k, b) for lab, b in edges if lab for k in atoms_in(lab)])
    closures: dict[frozenset[int], frozenset[int]] = {}

    def closure(states: frozenset[int]) -> frozenset[int]:
        got = closures.get(states)
        if got is not None:
            return got
        todo, seen = list(states), set(states)
        while todo:
            for lab, b in n.edges[todo.pop()]:
                if lab is None and b not in seen:
                    seen.add(b)
                    todo.append(b)
        got = closures[states] = frozenset(seen)
        return got

    start = closure(frozenset([s0]))
    index = {start: 0}
    order = [start]
    delta: list[list[int]] = []
    i = 0
    while i < len(order):
        targets: list[set[int]] = [set() for _ in reps]
        for s in order[i]:
            for k, b in moves[s]:
                targets[k].add(b)
        row = []
        for nxt in targets:
            tgt = closure(frozenset(nxt))
            if tgt not in index:
                index[tgt] = len(order)
                order.append(tgt)
                if len(order) > 4 * MAX_STATES:
                    raise KeySetTooLarge("states")
            row.append(index[tgt])
        delta.append(row)
        i += 1
    return _DFA(atoms, delta, [f in st for st in order])


def _words_dfa(words: list[str], atoms: list[Ranges]) -> _DFA:
    trie: list[dict[int, int]] = [{}]
    end = [False]
    for w in words:
        node = 0
        for ch in w:
            a = next((k for k, r in enumerate(atoms) if any(x <= ord(ch) <= y for x, y in r)), None)
            if a is None:
                break
            if a not in trie[node]:
                trie.append({})
                end.append(False)
                trie[node][a] = len(trie) - 1
            node = trie[node][a]
        else:
            end[node] = True
    dead = len(trie)
    delta = [[t.get(a, dead) for a in range(len(atoms))] for t in trie] + [[dead] * len(atoms)]
    return _DFA(atoms, delta, end + [False])


def _product(a: _DFA, b: _DFA, keep: Any) -> _DFA:
    index = {(0, 0): 0}
    order = [(0, 0)]
    delta = []
    i = 0
    while i < len(order):
        x, y = order[i]
        row = []
        for k in range(len(a.atoms)):
            t = (a.delta[x][k], b.delta[y][k])
            if t not in index:
                index[t] = len(order)
                order.append(t)
            row.append(index[t])
        delta.append(row)
        i += 1
    return _DFA(a.atoms, delta, [keep(a.accept[x], b.accept[y]) for x, y in order])


def _trim(d: _DFA) -> tuple[list[int], set[int]]:
    """States that are reachable and can reach acceptance."""
    rev: dict[int, set[int]] = {}
    for s, row in enumerate(d.delta):
        for t in row:
            rev.setdefault(t, set()).add(s)
    live = {s for s, acc in enumerate(d.accept) if acc}
    todo = list(live)
    while todo:
        for p in rev.get(todo.pop(), ()):
            if p not in live:
                live.add(p)
                todo.append(p)
    return [s for s in range(len(d.delta)) if s in live], live


def _to_regex(d: _DFA) -> str | None:
    states, live = _trim(d)
    if 0 not in live:
        return None
    if len(states) > MAX_STATES:
        raise KeySetTooLarge("states")
    # Generalised NFA: edges[(p, q)] = regex; start S = -1, final F = -2.
    edges: dict[tuple[int, int], str] = {}

    def add(p: int, q: int, r: str) -> None:
        edges[(p, q)] = f"{edges[(p, q)]}|{r}" if (p, q) in edges else r

    for s in states:
        by_target: dict[int, Ranges] = {}
        for k, t in enumerate(d.delta[s]):
            if t in live:
                by_target.setdefault(t, []).extend(d.atoms[k])
        for t, r in by_target.items():
            enc = encode_set(r)
            if enc:
                add(s, t, enc)
        if d.accept[s]:
            add(s, -2, "")
    add(-1, 0, "")
    for s in states:
        loop = edges.pop((s, s), None)
        star = f"(?:{loop})*" if loop else ""
        ins = [(p, r) for (p, q), r in edges.items() if q == s]
        outs = [(q, r) for (p, q), r in edges.items() if p == s]
        for p, _ in ins:
            del edges[(p, s)]
        for q, _ in outs:
            del edges[(s, q)]
        for p, r1 in ins:
            for q, r2 in outs:
                add(p, q, f"(?:{r1}){star}(?:{r2})" if (r1 or r2 or star) else "")
        if sum(len(r) for r in edges.values()) > MAX_REGEX:
            raise KeySetTooLarge("regex size")
    final = edges.get((-1, -2))
    return None if final is None else f"(?:{final})"


def key_regex(match: list[str], avoid: list[str], exclude: list[str]) -> str | None:
    """Regex (JSON text) of the keys that ``re.search`` every pattern in ``match``, none in ``avoid``,
    and are not in ``exclude``; None if there is none. Raises KeySetTooLarge."""
    nfas = [_pattern_nfa(p) for p in match + avoid]
    labels = [lab for n, _, _ in nfas for row in n.edges for lab, _ in row if lab]
    labels += [[(ord(c), ord(c))] for w in exclude for c in w]
    atoms = _atoms(labels)
    dfas = [_determinize(n, s0, f, atoms) for n, s0, f in nfas]
    full = _DFA(atoms, [[0] * len(atoms)], [True])
    acc = reduce(lambda x, y: _product(x, y, lambda a, b: a and b), dfas[: len(match)], full)
    for dd in dfas[len(match) :]:
        acc = _product(acc, dd, lambda a, b: a and not b)
    if exclude:
        acc = _product(acc, _words_dfa(exclude, atoms), lambda a, b: a and not b)
    return _to_regex(acc)


def _selfcheck(pattern: str, key: str) -> bool:  # pragma: no cover - debugging aid
    return re.search(pattern, key) is not None
