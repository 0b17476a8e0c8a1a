"""Derivations of a :class:`~grammarmask.ir.Cfg` within a byte budget (see :mod:`grammarmask.derivation`).

``minlen[n]`` is the length of nonterminal ``n``'s shortest derivation: the least fixed point of
``minlen[n] = min over rules n -> x1..xk of sum(len(xi))`` with a terminal's length its DFA's shortest
word (Knuth 1977, here by relaxation). ``depth[n]`` is the depth of the shallowest of those shortest
derivations; the rule attaining both is ``n``'s *base* rule. Expanding base rules only strictly
lowers ``depth`` and so always ends: a draw switches to them after a fixed number of expansions,
which bounds draws through nullable cycles (``x: x y | ""`` with ``y`` nullable).
"""

from __future__ import annotations

from typing import Any

from .automata.dfa import UNREACHABLE as _INF
from .derivation import _RANK, _WS, Draw, _choice, _DfaGen, _rare, _Source

__all__ = ["CfgSource"]

_END = -(1 << 30)  # stack marker: a subtree ends here


class CfgSource(_Source):
    """Draws derivations of ``cfg``: rules shortest first, whitespace-only alternatives and ignore
    lexemes rarely; :meth:`separator` makes the lexemes lex back as drawn."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.terms = [_DfaGen(t.dfa) for t in cfg.terminals]
        self.greedy = [bool(t.greedy) for t in cfg.terminals]
        n = len(cfg.nonterminals)
        rules: list[list[tuple[int, ...]]] = [[] for _ in range(n)]
        for r in cfg.rules:
            rules[r.lhs].append(tuple(r.rhs))
        self.minlen = cfg.shortest_derivations([t.min_len for t in self.terms])[0]
        depth = self._depths(rules, n)
        blank = self._blank(rules, n)
        self.rules: list[list[tuple[int, int, bool, tuple[int, ...]]]] = []
        for lhs in range(n):
            rows = []
            for rhs in rules[lhs]:
                rmin = self._len(rhs)
                if rmin >= _INF:
                    continue
                rdepth = 1 + max((depth[x] for x in rhs if x >= 0), default=0)
                is_blank = bool(rhs) and all(self._is_blank(x, blank) for x in rhs)
                rows.append((rmin, rdepth, is_blank, rhs))
            rows.sort(key=lambda r: (r[2], r[0], r[1]))
            self.rules.append(rows)
        self.base = [
            min(rows, key=lambda r: (r[0], r[1]))[3] if rows else () for rows in self.rules
        ]
        self.ignore = [self.terms[i] for i in cfg.ignore]
        self.ignore_ids = list(cfg.ignore)
        self.ignore_min = min((g.min_len for g in self.ignore), default=_INF)
        seps = {g.shortest() for g in self.ignore}
        seps |= {bytes([b]) for g in self.ignore for b in range(256) if g.dfa.matches(bytes([b]))}
        self.seps = sorted(seps, key=lambda s: (len(s), s != b" ", _RANK[s[0]]))
        self.sep = self.seps[0] if self.seps else None
        self.min_len = int(self.minlen[cfg.start])

    # -- tables ---------------------------------------------------------------------------------
    def _len(self, rhs: tuple[int, ...]) -> int:
        total = 0
        for x in rhs:
            total += self.terms[~x].min_len if x < 0 else self.minlen[x]
        return min(total, _INF)

    def _depths(self, rules: list[list[tuple[int, ...]]], n: int) -> list[int]:
        """Depth of the shallowest shortest derivation of each nonterminal."""
        depth = [_INF] * n
        changed = True
        while changed:
            changed = False
            for lhs in range(n):
                for rhs in rules[lhs]:
                    if self._len(rhs) != self.minlen[lhs]:
                        continue
                    d = 1 + max((depth[x] for x in rhs if x >= 0), default=0)
                    if d < depth[lhs]:
                        depth[lhs] = d
                        changed = True
        return depth

    def _blank(self, rules: list[list[tuple[int, ...]]], n: int) -> set[int]:
        """Nonterminals deriving only whitespace (the greatest fixed point)."""
        blank = set(range(n))
        changed = True
        while changed:
            changed = False
            for lhs in list(blank):
                if any(not all(self._is_blank(x, blank) for x in rhs) for rhs in rules[lhs]):
                    blank.discard(lhs)
                    changed = True
        return blank

    def _is_blank(self, x: int, blank: set[int]) -> bool:
        if x >= 0:
            return x in blank
        t = self.terms[~x].dfa.transitions
        live = t[1:].any(axis=0)
        return bool(all(b in _WS for b in live.nonzero()[0].tolist()))

    # -- drawing --------------------------------------------------------------------------------
    def draw(self, draw: Draw, budget: int, out: bytearray, spans: list[tuple[int, int]],
             lexemes: list[tuple[int, int, int]]) -> None:  # fmt: skip
        end = len(out) + budget
        stack: list[int] = [self.cfg.start]
        starts: list[int] = []
        reserved = self.minlen[self.cfg.start]
        expansions = 0
        cap = 4 * budget + 64
        while stack:
            x = stack.pop()
            if x == _END:
                spans.append((starts.pop(), len(out)))
                continue
            reserved -= self.terms[~x].min_len if x < 0 else self.minlen[x]
            avail = end - len(out) - reserved
            if x < 0:
                self._lexeme(draw, ~x, avail, out, lexemes)
                continue
            expansions += 1
            rhs = self._rule(draw, x, avail) if expansions <= cap else self.base[x]
            reserved += self._len(rhs)
            starts.append(len(out))
            stack.append(_END)
            stack.extend(reversed(rhs))
        if self.ignore and end - len(out) >= self.ignore_min and _rare(draw):
            self._ignore(draw, end - len(out), out, lexemes)

    def _rule(self, draw: Draw, x: int, avail: int) -> tuple[int, ...]:
        fits = [r for r in self.rules[x] if r[0] <= avail]
        plain = [r for r in fits if not r[2]]
        if plain and len(plain) < len(fits) and not _rare(draw):
            fits = plain
        elif plain and len(plain) < len(fits):
            fits = [r for r in fits if r[2]]
        return fits[_choice(draw, len(fits))][3]

    def _lexeme(self, draw: Draw, t: int, avail: int, out: bytearray,
                lexemes: list[tuple[int, int, int]]) -> None:  # fmt: skip
        gen = self.terms[t]
        if self.ignore and avail - gen.min_len >= self.ignore_min and _rare(draw):
            avail -= self._ignore(draw, avail - gen.min_len, out, lexemes)
        start = len(out)
        gen.draw(draw, avail, out)
        lexemes.append((t, start, len(out)))

    def _ignore(self, draw: Draw, avail: int, out: bytearray, lexemes: list[tuple[int, int, int]]) -> int:
        fits = [i for i, g in zip(self.ignore_ids, self.ignore) if g.min_len <= avail]
        t = fits[_choice(draw, len(fits))]
        start = len(out)
        self.terms[t].draw(draw, avail, out)
        lexemes.append((t, start, len(out)))
        return len(out) - start

    # -- lexing back ----------------------------------------------------------------------------
    def separator(self, out: bytearray, spans: list[tuple[int, int]],
                  lexemes: list[tuple[int, int, int]]) -> int:  # fmt: skip
        """Put a short ignore lexeme after each greedy lexeme that its terminal could extend into the
        text that follows (lark's longest match would run on): the shortest of them that stops the
        run (a space after a name, a newline after a ``//`` comment); the number inserted."""
        if self.sep is None:
            return 0
        inserted = 0
        shift = 0
        for t, s, e in lexemes:
            s, e = s + shift, e + shift
            if not self.greedy[t] or not self._runs_on(t, out, s, e):
                continue
            sep = self.sep
            for cand in self.seps:
                if not self._runs_on(t, cand + out[e:], 0, 0, bytes(out[s:e])):
                    sep = cand
                    break
            out[e:e] = sep
            k = len(sep)
            shift += k
            inserted += 1
            for i, (a, b) in enumerate(spans):
                spans[i] = (a + k if a >= e else a, b + k if b > e or a >= e else b)
        return inserted

    def _runs_on(self, t: int, out: bytearray | bytes, s: int, e: int, head: bytes | None = None) -> bool:
        """Whether terminal ``t``'s lexeme ``out[s:e]`` (or ``head``) extends to a longer one in ``out``."""
        dfa = self.terms[t].dfa
        rows = dfa.transitions
        acc = dfa.accepting
        state = dfa.run(dfa.start, bytes(out[s:e]) if head is None else head)
        for b in out[e:]:
            state = int(rows[state, b])
            if not state:
                return False
            if acc[state]:
                return True
        return False
