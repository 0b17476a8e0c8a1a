"""Print a :class:`~grammarmask.ir.Cfg` as llama.cpp GBNF text of the same language.

GBNF is scannerless: every character is matched exactly, there is no ``%ignore`` and no longest
match. The IR has both, so the printer makes them explicit:

- **ignore terminals** become a rule ``ws ::= ("" | ws T1 | ws T2 ...)`` placed before every terminal
  of every rule and once at the end of the start rule (the engine lets ignored lexemes sit before
  any lexeme and at the end; a lexeme of an ignored terminal never advances a rule in the engine,
  so a rule that uses one is dropped, as the engine never completes it; lark does let such a rule
  use it);
- **greedy terminals** (Lark's and JSON Schema's, lark's dynamic lexer): a lexeme may end only where
  its terminal cannot match a longer prefix of the rest of the text. The engine (:mod:`grammarmask.
  cfg.lexer`) keeps *shadows*, the DFA states of closed greedy lexemes still running over later
  bytes, and kills a path when one accepts. The printer threads the same shadow sets through the
  grammar (Bar-Hillel et al. 1961's product of a grammar with a finite automaton): a nonterminal
  ``A`` becomes ``A[P, P']`` (entered with shadows ``P``, left with ``P'``), a terminal ``T``
  becomes ``T[P, P']``, the words of ``T`` that no shadow of ``P`` rejects and that leave ``P'``
  (the surviving shadows plus ``T``'s own end state). Only combinations reachable from the start
  with no shadows are printed, so a grammar whose lexemes never extend one another (most of them:
  a closed shadow dies on the next byte) prints one copy of each rule.

Terminals are printed from their byte DFA (:mod:`.charexpr`: the automaton over characters, as a
regular expression by state elimination, or one rule per state when that grows too large); a
special token's spelling is printed as ``<name>``. Rule names are ``[a-z0-9-]+`` (llama.cpp's), the
start rule is ``root``.

Raises :class:`~grammarmask.errors.GrammarError` naming the terminal when a terminal matches bytes
that are not UTF-8 text (GBNF matches characters) other than a special token's spelling.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import GrammarError
from .cfg import Cfg
from .charexpr import NotText, char_edges, gbnf_expr, regex_of

__all__ = ["to_gbnf"]

Shadows = frozenset[tuple[int, int]]  # (terminal, DFA state) of closed greedy lexemes still running
NONE: Shadows = frozenset()
_MAX_PATHS = 6  # a rule with more ways to thread shadow sets is split after each symbol
_INLINE = 48  # terminals printed up to this length are written where they are used, not as a rule


def _reaccepting(dfa: Any) -> list[bool]:
    """Per state: a non-empty path from it reaches an accepting state."""
    tr = np.asarray(dfa.transitions)
    live = np.asarray(dfa.accepting).copy()
    while True:
        more = live | live[tr].any(axis=1)
        more[0] = False
        if np.array_equal(more, live):
            break
        live = more
    out = live[tr].any(axis=1)
    out[0] = False
    return out.tolist()  # type: ignore[no-any-return]


class _Printer:
    def __init__(self, cfg: Cfg) -> None:
        self.cfg = cfg
        self.dfas = [t.dfa for t in cfg.terminals]
        self.rows = [d.transitions.tolist() for d in self.dfas]
        self.acc = [d.accepting.tolist() for d in self.dfas]
        self.reacc = [_reaccepting(d) for d in self.dfas]
        self.greedy = [t.greedy for t in cfg.terminals]
        ignore = set(cfg.ignore)
        # the rules, ignore made explicit: nonterminal ids as in cfg, then ws, its run and the new start
        self.names = list(cfg.nonterminals)
        rules = [r for r in cfg.rules if not any(s < 0 and ~s in ignore for s in r.rhs)]
        self.start = cfg.start
        self.by_lhs: dict[int, list[tuple[int, ...]]] = {}
        if ignore:
            # ws: ignored lexemes before a lexeme or the end; the last one apart (ws ::= "" | run I),
            # so that its shadow meets only what follows ws, not another ignored lexeme
            ws, run, top = range(len(self.names), len(self.names) + 3)
            self.names += ["ws", "ws-run", "root"]
            self.by_lhs[ws] = [(), *((run, ~t) for t in cfg.ignore)]
            self.by_lhs[run] = [(), *((run, ~t) for t in cfg.ignore)]
            self.by_lhs[top] = [(cfg.start, ws)]
            for r in rules:
                rhs: list[int] = []
                for s in r.rhs:
                    rhs.extend((ws, s) if s < 0 else (s,))
                self.by_lhs.setdefault(r.lhs, []).append(tuple(rhs))
            self.start = top
        else:
            for r in rules:
                self.by_lhs.setdefault(r.lhs, []).append(r.rhs)
        #: per rule of a nonterminal, per position: the bytes that may follow the symbol there
        self.follows = self.follow_bytes()
        self.variants: dict[tuple[int, Shadows, int], dict[Shadows, Any]] = {}
        self.step_memo: dict[tuple[Shadows, int], Shadows | None] = {}

    # --- shadows and terminal variants ------------------------------------------------------

    def follow_bytes(self) -> dict[int, list[tuple[int, ...]]]:
        """Per rule and position: the bytes that may come right after the symbol there (an int
        bitset, bit 256 for the end of the text), by FIRST and FOLLOW over the rules (ignore
        explicit). A shadow that a terminal's DFA leaves dead on every byte that may follow it
        there can never reject anything, so it is not kept: most grammars then need no copies of
        their rules."""
        first_t = [sum(1 << b for b, n in enumerate(self.rows[t][d.start]) if n)
                   for t, d in enumerate(self.dfas)]
        first: dict[int, int] = {}
        null: set[int] = set()

        def seq_first(rhs: tuple[int, ...]) -> tuple[int, bool]:
            bits = 0
            for s in rhs:
                if s < 0:
                    return bits | first_t[~s], False
                bits |= first.get(s, 0)
                if s not in null:
                    return bits, False
            return bits, True

        changed = True
        while changed:
            changed = False
            for a, alts in self.by_lhs.items():
                for rhs in alts:
                    bits, empty = seq_first(rhs)
                    if bits | first.get(a, 0) != first.get(a, 0) or (empty and a not in null):
                        first[a] = first.get(a, 0) | bits
                        if empty:
                            null.add(a)
                        changed = True
        follow: dict[int, int] = {self.start: 1 << 256}
        changed = True
        while changed:
            changed = False
            for a, alts in self.by_lhs.items():
                for rhs in alts:
                    for i, s in enumerate(rhs):
                        if s < 0:
                            continue
                        bits, empty = seq_first(rhs[i + 1 :])
                        bits |= follow.get(a, 0) if empty else 0
                        if bits | follow.get(s, 0) != follow.get(s, 0):
                            follow[s] = follow.get(s, 0) | bits
                            changed = True
        out: dict[int, list[tuple[int, ...]]] = {}
        for a, alts in self.by_lhs.items():
            for rhs in alts:
                per = []
                for i in range(len(rhs)):
                    bits, empty = seq_first(rhs[i + 1 :])
                    per.append(bits | (follow.get(a, 0) if empty else 0))
                out.setdefault(a, []).append(tuple(per))
        return out

    def leaves_shadow(self, t: int, s: int, follow: int) -> bool:
        """Whether closing a lexeme of ``t`` in state ``s`` before one of the bytes ``follow``
        leaves a shadow that can matter."""
        if not (self.greedy[t] and self.reacc[t][s]):
            return False
        return any(n and follow >> b & 1 for b, n in enumerate(self.rows[t][s]))

    def step(self, shadows: Shadows, byte: int) -> Shadows | None:
        """The shadows after ``byte``; None when one of them accepts (the cut before was illegal)."""
        if not shadows:
            return shadows
        key = (shadows, byte)
        if key in self.step_memo:
            return self.step_memo[key]
        out = set()
        got: Shadows | None = None
        for t, s in shadows:
            n = self.rows[t][s][byte]
            if n:
                if self.acc[t][n]:
                    break
                if self.reacc[t][n]:
                    out.add((t, n))
        else:
            got = frozenset(out)
        self.step_memo[key] = got
        return got

    def variant(self, t: int, before: Shadows, follow: int) -> dict[Shadows, Any]:
        """The words of terminal ``t`` no shadow of ``before`` rejects, by the shadows they leave
        before one of the bytes ``follow``: shadows after -> DFA."""
        key = (t, before, follow)
        hit = self.variants.get(key)
        if hit is not None:
            return hit
        from ..automata import DFA, minimize

        rows, acc = self.rows[t], self.acc[t]
        start = self.dfas[t].start
        if not before:  # no shadows to run: the terminal's own DFA, split by the shadow it leaves
            split: dict[Shadows, list[int]] = {}
            for q, ok in enumerate(acc):
                if ok:
                    after = frozenset({(t, q)}) if self.leaves_shadow(t, q, follow) else NONE
                    split.setdefault(after, []).append(q)
            if list(split) == [NONE]:
                self.variants[key] = {NONE: self.dfas[t]}
                return self.variants[key]
            dfa = self.dfas[t]
            got = {}
            for after, qs in split.items():
                accepting = np.zeros(len(acc), dtype=bool)
                accepting[qs] = True
                got[after] = minimize(DFA(dfa.transitions, accepting, start))
            self.variants[key] = got
            return got
        ids: dict[tuple[int, Shadows], int] = {(start, before): 1}
        order = [(start, before)]
        edges: list[tuple[int, int, int]] = []
        i = 0
        while i < len(order):
            s, sh = order[i]
            i += 1
            for b, n in enumerate(rows[s]):
                if not n:
                    continue
                sh2 = self.step(sh, b)
                if sh2 is None:
                    continue
                j = ids.get((n, sh2))
                if j is None:
                    j = ids[(n, sh2)] = len(order) + 1
                    order.append((n, sh2))
                edges.append((i, b, j))
        table = np.zeros((len(order) + 1, 256), dtype=np.int32)
        for src, b, dst in edges:
            table[src, b] = dst
        labels: dict[Shadows, list[int]] = {}
        for k, (s, sh) in enumerate(order, 1):
            if acc[s]:
                after = sh | {(t, s)} if self.leaves_shadow(t, s, follow) else sh
                labels.setdefault(after, []).append(k)
        out = {}
        for after, states in labels.items():
            accepting = np.zeros(len(order) + 1, dtype=bool)
            accepting[states] = True
            out[after] = minimize(DFA(table, accepting, 1))
        self.variants[key] = out
        return out

    # --- nonterminals: which shadows each (rule, shadows before) can leave ----------------------

    def outs_of(self, sym: int, before: Shadows, follow: int) -> set[Shadows]:
        if sym < 0:
            key3 = (~sym, before, follow)
            keys = self.variant_keys.get(key3)
            if keys is None:
                keys = self.variant_keys[key3] = set(self.variant(~sym, before, follow))
            return keys
        key = (sym, before)
        got = self.outs.get(key)
        if got is None:
            got = self.outs[key] = set()
            self.queue.append(key)
            self.queued.add(key)
        if self.reader is not None:
            self.deps.setdefault(key, set()).add(self.reader)
        return got

    def thread(self, rhs: tuple[int, ...], follows: tuple[int, ...], before: Shadows) -> set[Shadows]:
        cur = {before}
        for s, f in zip(rhs, follows, strict=True):
            if len(cur) == 1:
                cur = set(self.outs_of(s, next(iter(cur)), f))
            else:
                nxt: set[Shadows] = set()
                for p in cur:
                    nxt |= self.outs_of(s, p, f)
                cur = nxt
            if not cur:
                break
        return cur

    def solve(self) -> None:
        """The least fixpoint of ``outs[(A, P)]``: the shadow sets a derivation of ``A`` entered
        with ``P`` can leave (only pairs reached from the start; a worklist that revisits a pair
        when a pair it read grew)."""
        self.outs: dict[tuple[int, Shadows], set[Shadows]] = {}
        self.variant_keys: dict[tuple[int, Shadows, int], set[Shadows]] = {}
        self.deps: dict[tuple[int, Shadows], set[tuple[int, Shadows]]] = {}
        self.queue: deque[tuple[int, Shadows]] = deque()
        self.queued: set[tuple[int, Shadows]] = set()
        self.reader: tuple[int, Shadows] | None = None
        self.outs_of(self.start, NONE, 0)
        while self.queue:
            key = self.queue.popleft()
            self.queued.discard(key)
            a, before = key
            self.reader = key
            new: set[Shadows] = set()
            for rhs, follows in zip(self.by_lhs.get(a, ()), self.follows.get(a, ()), strict=True):
                new |= self.thread(rhs, follows, before)
            self.reader = None
            got = self.outs[key]
            if not new <= got:
                got |= new
                for d in self.deps.get(key, ()):
                    if d not in self.queued:
                        self.queue.append(d)
                        self.queued.add(d)

    def reach(self, a: int, r: int, i: int, before: Shadows) -> set[Shadows]:
        """The shadow sets rule ``r`` of ``a`` can leave from position ``i`` on, entered with ``before``."""
        key = (a, r, i, before)
        got = self.reach_memo.get(key)
        if got is None:
            rhs, follows = self.by_lhs[a][r], self.follows[a][r]
            got = self.reach_memo[key] = self.thread(rhs[i:], follows[i:], before)
        return got

    def steps(self, a: int, r: int, i: int, before: Shadows, after: Shadows) -> list[Shadows]:
        """The shadow sets after symbol ``i`` of rule ``r`` of ``a`` from which ``after`` is reached."""
        rhs, follows = self.by_lhs[a][r], self.follows[a][r]
        outs = self.outs_of(rhs[i], before, follows[i])
        return sorted((m for m in outs if after in self.reach(a, r, i + 1, m)), key=sorted)

    def count(self, a: int, r: int, i: int, before: Shadows, after: Shadows, cap: int) -> int:
        """How many ways (up to ``cap``) the shadow sets can run from position ``i`` to the end."""
        if i == len(self.by_lhs[a][r]):
            return int(before == after)
        n = 0
        for m in self.steps(a, r, i, before, after):
            n += self.count(a, r, i + 1, m, after, cap - n)
            if n >= cap:
                break
        return n

    def paths(self, a: int, r: int, i: int, before: Shadows, after: Shadows) -> Iterator[list[Shadows]]:
        """Every sequence of shadow sets between the symbols of rule ``r`` of ``a`` from position
        ``i``, from ``before`` to ``after``."""
        if i == len(self.by_lhs[a][r]):
            if before == after:
                yield [before]
            return
        for m in self.steps(a, r, i, before, after):
            for rest in self.paths(a, r, i + 1, m, after):
                yield [before, *rest]

    # --- printing ---------------------------------------------------------------------------

    def print(self) -> str:
        self.solve()
        self.reach_memo: dict[tuple[int, int, int, Shadows], set[Shadows]] = {}
        self.taken: set[str] = {"root"}
        self.names_of: dict[tuple[Any, ...], str] = {}
        self.tokens: dict[bytes, str] = {}  # a terminal variant's DFA -> its rule name or inline text
        self.token_rules: list[str] = []
        todo: list[tuple[Any, ...]] = [
            (self.start, NONE, after) for after in sorted(self.outs[(self.start, NONE)], key=sorted)]
        if not todo:
            raise GrammarError(
                "to_gbnf: no string of the grammar survives longest match (the language is empty)")
        lines: list[str] = []
        if len(todo) == 1:
            self.names_of[todo[0]] = "root"
        else:
            lines.append("root ::= " + " | ".join(self.name(v) for v in todo))
        done = set()
        while todo:
            v = todo.pop(0)
            if v in done:
                continue
            done.add(v)
            if len(v) == 3:  # a nonterminal (a, before, after): its rules from position 0
                a, before, after = v
                parts = [(r, 0) for r in range(len(self.by_lhs.get(a, ())))]
            else:  # a rule's tail (a, r, i, before, after)
                a, r, i, before, after = v
                parts = [(r, i)]
            alts = []
            for r, i in parts:
                if self.count(a, r, i, before, after, _MAX_PATHS + 1) <= _MAX_PATHS:
                    for path in self.paths(a, r, i, before, after):
                        alts.append(self.items(a, r, i, len(self.by_lhs[a][r]), path, todo))
                else:  # many: the first symbol, then the rest as its own rule per shadow set between
                    for m in self.steps(a, r, i, before, after):
                        tail = (a, r, i + 1, m, after)
                        todo.append(tail)
                        alts.append(self.items(a, r, i, i + 1, [before, m], todo) + " " + self.name(tail))
            lines.append(f"{self.name(v)} ::= " + " | ".join(dict.fromkeys(alts)))
        return "\n".join(lines + self.token_rules) + "\n"

    def items(self, a: int, r: int, i: int, j: int, path: list[Shadows], todo: list[tuple[Any, ...]]) -> str:
        """GBNF for symbols ``i`` to ``j`` of rule ``r`` of ``a``, the shadow sets between them ``path``."""
        rhs, follows = self.by_lhs[a][r], self.follows[a][r]
        out = []
        for k in range(i, j):
            s, p, q = rhs[k], path[k - i], path[k - i + 1]
            if s >= 0:
                todo.append((s, p, q))
                out.append(self.name((s, p, q)))
            else:
                out.append(self.token(~s, self.variant(~s, p, follows[k])[q]))
        return " ".join(out) if out else '""'

    def name(self, v: tuple[Any, ...]) -> str:
        got = self.names_of.get(v)
        if got is None:
            base = _sanitize(self.names[v[0]]) or "r"
            got = self.names_of[v] = _fresh(base if len(v) == 3 else f"{base}-{v[1]}-{v[2]}", self.taken)
        return got

    def token(self, t: int, dfa: Any) -> str:
        tokens, token_rules, taken = self.tokens, self.token_rules, self.taken
        key = dfa.transitions.tobytes() + dfa.accepting.tobytes() + str(dfa.start).encode()
        got = tokens.get(key)
        if got is not None:
            return got
        name = self.cfg.terminals[t].name
        special = _special(dfa)
        if special is not None:
            tokens[key] = special
            return special
        try:
            edges = char_edges(dfa)
        except NotText:
            raise GrammarError(
                f"to_gbnf: terminal {name} matches bytes that are not UTF-8 text; GBNF matches "
                "characters, so it cannot be printed") from None
        accepting = {s for s in edges if dfa.accepting[s]}
        expr = regex_of(edges, dfa.start, accepting)
        base = _fresh(_token_base(name, t), taken)
        if expr is not None:
            text, prec = gbnf_expr(expr)
            if len(text) <= _INLINE:
                got = tokens[key] = f"({text})" if prec == 0 else text
                return got
            token_rules.append(f"{base} ::= {text}")
        else:  # one rule per state: base-sN ::= [class] base-sM | ... | "" (when accepting)
            state_name = {s: base if s == dfa.start else _fresh(f"{base}-s{s}", taken) for s in edges}
            for s in sorted(edges, key=lambda s: (s != dfa.start, s)):
                alts = []
                for q, ranges in edges[s].items():
                    cls, _ = gbnf_expr(("cls", ranges))
                    alts.append(cls if not edges.get(q) else f"{cls} {state_name[q]}")
                if s in accepting:
                    alts.append('""')
                token_rules.append(f"{state_name[s]} ::= " + " | ".join(alts))
        tokens[key] = base
        return base


def _sanitize(name: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", name.lower())).strip("-")


def _token_base(name: str, t: int) -> str:
    """A rule name for terminal ``t`` called ``name``: a Lark terminal's name, a short literal's
    text, else ``t`` and its index (a regex or a long literal makes a poor name)."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or re.fullmatch(r'"[A-Za-z0-9_ -]{1,20}"', name):
        return _sanitize(name) or f"t{t}"
    return f"t{t}"


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}-{k}"
    taken.add(name)
    return name


def _special(dfa: Any) -> str | None:
    """``<name>`` when ``dfa`` matches exactly one special token's spelling."""
    from ..special_tokens import REF_PATTERN, parse_ref
    from ..vocab import SPECIAL_END, SPECIAL_START

    s, word = dfa.start, bytearray()
    while True:
        live = np.flatnonzero(dfa.transitions[s])
        if dfa.accepting[s]:
            if live.size:
                return None
            break
        if live.size != 1:
            return None
        word.append(int(live[0]))
        s = int(dfa.transitions[s, live[0]])
    if len(word) < 3 or word[0] != SPECIAL_START or word[-1] != SPECIAL_END:
        return None
    name = bytes(word[1:-1]).decode("utf-8", "replace")
    for text in (name, f"<{name}>"):
        if REF_PATTERN.fullmatch(text) and parse_ref(text) == name:
            return text
    if REF_PATTERN.fullmatch(name) and isinstance(parse_ref(name), int):  # "<[12]>": token id 12
        return name
    raise GrammarError(f"to_gbnf: the special token {name!r} has no GBNF spelling (<name> or <[name]>)")


def to_gbnf(cfg: Cfg) -> str:
    """llama.cpp GBNF text (start rule ``root``) of the language of ``cfg``: what
    ``grammarmask.Gbnf`` (and llama.cpp) parse to the same strings, ignore terminals and longest
    match written out (module docstring).

    Raises
    ------
    GrammarError
        A terminal matches bytes that are not UTF-8 text (other than a special token's spelling), or
        a special token's name has no GBNF spelling.
    """
    return _Printer(cfg).print()
