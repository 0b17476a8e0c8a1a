"""The grammar IR every context-free front end produces: rules over terminals and nonterminals.

Symbols are ints: a nonterminal is ``n >= 0`` (an index into ``Cfg.nonterminals``), a terminal is
``~t < 0`` (``t`` indexes ``Cfg.terminals``). Terminals are byte DFAs (``grammarmask.automata.DFA``:
state 0 dead, trimmed). A *greedy* terminal follows lark's dynamic lexer: a lexeme ends only where the
terminal cannot match a longer prefix of the rest of the text. A non-greedy terminal (used for GBNF's
scannerless semantics) may end at any accepting point. Ignore terminals (``%ignore``) may sit between
any two lexemes. The IR has no priorities: lark's choose among parse trees, not strings, so a
recognizer has no use for them.

:func:`Cfg.validated` checks the grammar: undefined/unproductive symbols, an empty language.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..automata.dfa import UNREACHABLE
from ..errors import GrammarError

__all__ = ["Cfg", "Rule", "Terminal"]


@dataclass(frozen=True)
class Terminal:
    """A terminal: ``name``, its byte ``dfa`` and whether it is ``greedy``."""

    name: str
    dfa: Any
    greedy: bool = True


@dataclass(frozen=True)
class Rule:
    """``lhs -> rhs``: ``lhs`` a nonterminal index, ``rhs`` symbols (``n >= 0`` rule, ``~t`` terminal)."""

    lhs: int
    rhs: tuple[int, ...]


@dataclass(frozen=True)
class Cfg:
    """A context-free grammar over byte-DFA terminals.

    ``positions`` maps a rule or terminal name to the (line, column) where it is defined, for errors.
    """

    nonterminals: tuple[str, ...]
    terminals: tuple[Terminal, ...]
    rules: tuple[Rule, ...]
    start: int
    ignore: tuple[int, ...] = ()
    positions: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False, hash=False)
    source: str | None = field(default=None, compare=False, hash=False)

    def productive(self) -> set[int]:
        """Nonterminals that derive at least one terminal string."""
        return self._closure(terminals=True)

    def nullable(self) -> set[int]:
        """Nonterminals that derive the empty string (terminals never match it)."""
        return self._closure(terminals=False)

    def _closure(self, terminals: bool) -> set[int]:
        """Least set of nonterminals ``lhs`` with a rule whose every symbol is in the set or is a
        terminal (when ``terminals``) (a worklist: each rule is looked at once per symbol, not once
        per pass)."""
        done: set[int] = set()
        waiting: dict[int, list[int]] = {}  # nonterminal -> rules with a pending occurrence of it
        missing: list[int] = []
        ready: list[int] = []
        for i, r in enumerate(self.rules):
            pending: Sequence[int]
            if terminals:
                pending = [x for x in r.rhs if x >= 0]
            elif min(r.rhs, default=0) < 0:  # a terminal, never empty: the rule never completes
                missing.append(-1)
                continue
            else:
                pending = r.rhs
            missing.append(len(pending))
            for x in pending:
                if x in waiting:
                    waiting[x].append(i)
                else:
                    waiting[x] = [i]
            if not pending:
                ready.append(r.lhs)
        while ready:
            n = ready.pop()
            if n in done:
                continue
            done.add(n)
            for i in waiting.get(n, ()):
                missing[i] -= 1
                if missing[i] == 0:
                    ready.append(self.rules[i].lhs)
        return done

    def shortest_derivations(self, terminal_cost: Sequence[int]) -> tuple[list[int], list[int]]:
        """Per nonterminal: the cost of its cheapest derivation, each terminal ``t`` costing
        ``terminal_cost[t]`` (:data:`~grammarmask.automata.dfa.UNREACHABLE`: none), and the rule that
        starts it (-1: none). Knuth 1977's generalisation of Dijkstra: a rule is used only once all its
        nonterminals are final, so following the rules from any nonterminal terminates."""
        n = len(self.nonterminals)
        cost = [UNREACHABLE] * n
        rule_of = [-1] * n
        waiting_on: list[list[int]] = [[] for _ in range(n)]
        missing = []
        partial = []
        heap: list[tuple[int, int, int]] = []
        for ri, r in enumerate(self.rules):
            nts = [s for s in r.rhs if s >= 0]
            missing.append(len(nts))
            partial.append(min(UNREACHABLE, sum(terminal_cost[~s] for s in r.rhs if s < 0)))
            for s in nts:
                waiting_on[s].append(ri)
            if not nts:
                heap.append((partial[ri], r.lhs, ri))
        heapq.heapify(heap)
        while heap:
            c, x, ri = heapq.heappop(heap)
            if rule_of[x] >= 0 or c >= UNREACHABLE:
                continue
            cost[x], rule_of[x] = c, ri
            for rj in waiting_on[x]:
                missing[rj] -= 1
                partial[rj] = min(UNREACHABLE, partial[rj] + c)
                if missing[rj] == 0:
                    heapq.heappush(heap, (partial[rj], self.rules[rj].lhs, rj))
        return cost, rule_of

    def _error(self, message: str, name: str) -> GrammarError:
        line, col = self.positions.get(name, (None, None))
        return GrammarError(message, line=line, column=col, text=self.source)

    def validated(self) -> Cfg:
        """This grammar with unproductive and unreachable rules removed.

        Raises
        ------
        GrammarError
            The start symbol is unproductive (the language is empty), or a terminal's DFA accepts
            nothing.
        """
        from numpy import count_nonzero  # (a third of ndarray.any()'s time)

        for t in self.terminals:
            if not count_nonzero(t.dfa.accepting):
                raise self._error(f"terminal {t.name} matches nothing", t.name)
        prod = self.productive()
        start_name = self.nonterminals[self.start]
        if self.start not in prod:
            raise self._error(
                f"the start rule {start_name!r} derives no finite string (unproductive: the language is "
                "empty)", start_name)
        if len(prod) == len(self.nonterminals):  # (as a front end that prunes hands them over)
            rules = list(self.rules)
        else:
            rules = [r for r in self.rules if r.lhs in prod and all(s < 0 or s in prod for s in r.rhs)]
        reach = {self.start}
        stack = [self.start]
        by_lhs: dict[int, list[Rule]] = {}
        for r in rules:
            by_lhs.setdefault(r.lhs, []).append(r)
        while stack:
            n = stack.pop()
            for r in by_lhs.get(n, ()):
                for s in r.rhs:
                    if s >= 0 and s not in reach:
                        reach.add(s)
                        stack.append(s)
        rules = [r for r in rules if r.lhs in reach]
        return Cfg(self.nonterminals, self.terminals, tuple(rules), self.start, self.ignore,
                   self.positions, self.source)
