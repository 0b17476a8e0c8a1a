"""Shortest completions: from a matcher state, bytes that take the output to a complete sentence.

:func:`shortest_completion` answers for the two engines that know their automaton:

- **Regular grammars** (a compiled grammar with a byte ``dfa``): the exact shortest word from the state
  to an accepting one, from breadth-first distances to acceptance computed once per DFA (backwards
  over the automaton's edges).
- **Context-free grammars** (:class:`~grammarmask.cfg.CompiledCfg` and the native engine's
  :class:`~grammarmask.native.cfg.NativeCompiledCfg`): per configuration of the state,
  the pending lexeme is finished along its DFA's shortest path, then the parser is completed by the
  cheapest way out of the Earley chart. With ``len(X)`` the length of nonterminal ``X``'s shortest
  derivation (Knuth 1977, "A generalization of Dijkstra's algorithm", IPL 6(1): the least fixed point
  over the rules, each terminal costing its DFA's shortest word), the cost of finishing after
  ``X`` is complete in set ``E_j`` is

      ``C(E_j, X) = min( 0 if j = 0 and X is the start symbol,
                         min over items (B -> alpha . X beta, i) in E_j of len(beta) + C(E_i, B) )``.

  Items predicted in ``E_j`` itself (``i = j``) make this a shortest-path problem among the
  nonterminals of one set, solved by Dijkstra; older sets' answers are memoised on the sets (which
  are immutable and shared by the whole chart), so each step computes only the sets it added.
  The chart holds the right context, so the answer is exact at the level of terminals. The native
  engine computes ``C(E, X)`` on its own chart (src/cfg/complete.rs, the same algorithm, ties broken
  in sorted order) from the costs computed here; the rest (lexemes, spellings, the check) is shared.

  lark's lexer is greedy: two lexemes written back to back may lex as one (``NAME NAME``). Every CFG
  candidate is therefore checked by feeding it to the compiled grammar (the exact recognizer); when
  the plain concatenation fails, the grammar's shortest ``%ignore`` lexeme is put between lexemes that
  could run together, and that is checked too. A string that does not check is never returned:
  the answer is then None.

Anything else (composed grammars ``a & b``, ``a | b``, ``a + b``; multi-label choices) answers None.
Completions are what :func:`grammarmask.generate`'s ``budget_aware`` mode steers towards.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import numpy.typing as npt

from .automata.dfa import UNREACHABLE as _INF
from .automata.dfa import distances_to_accept
from .cache import Lru
from .errors import BudgetExceeded
from .grammar import CompiledGrammar

__all__ = ["shortest_completion"]

_MEMO = "completion"
_CACHE = 4096  # completions kept per compiled CFG, by state
_TRIES = 6  # CFG candidates checked per state before answering None
# Preferred bytes among equally short paths: letters, digits, then printable ASCII, then the rest.
_ORDER = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ _-.,:;=+*/\"'()[]{}<>!?#$%&@^`|~\\"
_RANK = np.full(256, 1000, dtype=np.int64)
_RANK[np.frombuffer(_ORDER, dtype=np.uint8)] = np.arange(len(_ORDER))
_RANK[128:] += 256  # non-ASCII only when the automaton needs it
_RANK[[9, 10, 13]] = 900


def shortest_completion(compiled: CompiledGrammar, state: Any) -> bytes | None:
    """Bytes that take ``state`` (a state of ``compiled``, e.g. ``matcher.state``) to a complete sentence.

    Regular grammars: the shortest such bytes (``b""`` when ``state`` accepts). Context-free
    grammars: the shortest at the level of terminals, each written as its shortest lexeme, checked
    by the compiled grammar itself (so always valid, sometimes longer than the true shortest when
    lexemes need a separator). None when no completion is known: the grammar is a composition, the
    state is dead, or no candidate checked.
    """
    solver = compiled.__dict__.get("_completion_solver")
    if solver is None:
        solver = compiled.__dict__.setdefault("_completion_solver", _make_solver(compiled))
    if solver is False:
        return None
    return solver(state)  # type: ignore[no-any-return]


def _make_solver(compiled: CompiledGrammar) -> Any:
    from .cfg.compiled import CompiledCfg

    if isinstance(compiled, CompiledCfg):
        return _PythonCfgSolver(compiled)
    if _is_native_cfg(compiled):
        return _NativeCfgSolver(compiled)
    dfa = getattr(compiled, "dfa", None)
    if dfa is not None and _is_dfa_grammar(compiled):
        paths = _Paths(np.asarray(dfa.transitions), np.asarray(dfa.accepting))
        return paths.word
    return False


def _is_native_cfg(compiled: CompiledGrammar) -> bool:
    try:
        from .native.cfg import NativeCompiledCfg
    except ImportError:  # pragma: no cover - no native extension
        return False
    return isinstance(compiled, NativeCompiledCfg)


def _is_dfa_grammar(compiled: CompiledGrammar) -> bool:
    from .regular.compiled import DfaCompiledGrammar

    if isinstance(compiled, DfaCompiledGrammar):
        return True
    try:
        from .native.regular import NativeDfaCompiledGrammar
    except ImportError:  # pragma: no cover - no native extension
        return False
    return isinstance(compiled, NativeDfaCompiledGrammar)


class _Paths:
    """Shortest paths to acceptance in one transition table (dead state 0), read by byte class when
    ``byte_class`` maps each byte to a column (else one column per byte)."""

    def __init__(self, table: npt.NDArray[Any], accepting: npt.NDArray[np.bool_],
                 byte_class: npt.NDArray[np.intp] | None = None) -> None:
        self.table = table
        self.byte_class = np.arange(256) if byte_class is None else byte_class
        self.accepting = accepting.tolist()
        dist = distances_to_accept(table, accepting)
        self.dist: list[int] = dist.tolist()
        self._dist = dist.astype(np.int64)  # for rows; converting the list per step was quadratic
        self._next: dict[int, tuple[int, int]] = {}

    def step(self, s: int) -> tuple[int, int]:
        """``(byte, next state)`` one step closer to acceptance (the preferred byte among ties)."""
        hit = self._next.get(s)
        if hit is None:
            row = self.table[s, self.byte_class].astype(np.int64)
            d = self._dist[row]
            ok = (row != 0) & (d == self.dist[s] - 1)
            b = int(np.argmin(np.where(ok, _RANK, 1 << 30)))
            hit = self._next[s] = (b, int(row[b]))
        return hit

    def word(self, s: Any) -> bytes | None:
        """The shortest word from ``s`` to acceptance (None from a dead or hopeless state)."""
        if not isinstance(s, (int, np.integer)) or not 0 < s < len(self.dist) or self.dist[s] >= _INF:
            return None
        out = bytearray()
        q = int(s)
        while not self.accepting[q]:
            b, q = self.step(q)
            out.append(b)
        return bytes(out)

    def nonempty(self, s: int) -> tuple[int, bytes] | None:
        """The shortest non-empty word from ``s`` to acceptance, and the state it ends in."""
        row = self.table[s, self.byte_class].astype(np.int64)
        d = self._dist[row]
        d = np.where(row != 0, d, _INF)
        best = int(d.min())
        if best >= _INF:
            return None
        b = int(np.argmin(np.where(d == best, _RANK, 1 << 30)))
        q = int(row[b])
        out = bytearray([b])
        while not self.accepting[q]:
            c, q = self.step(q)
            out.append(c)
        return q, bytes(out)


class _CfgSolver:
    """Completions for a context-free grammar (see the module docstring): the lexeme half, shared by
    both engines. A subclass reads its engine's chart: :meth:`_confs` (per configuration of a state:
    at a boundary or not, its pending DFA states, a handle) and :meth:`_finish` (the cheapest way to
    acceptance after a configuration's set, or after it closes a terminal)."""

    def __init__(self, compiled: Any, table: npt.NDArray[Any], accepting: npt.NDArray[np.bool_],
                 start: list[int], term_of: list[int], is_ignore: list[bool],
                 byte_class: npt.NDArray[np.intp] | None = None) -> None:
        self.c = compiled
        cfg = compiled.cfg
        #: the combined lexer table: global DFA states, 0 dead, each other state of one terminal;
        #: its column for byte b is byte_class[b]
        self.rows, self.start, self.term_of, self.is_ignore = table, start, term_of, is_ignore
        self.paths = _Paths(table, accepting, byte_class)
        self.byte_class: list[int] = self.paths.byte_class.tolist()
        n_terms = len(cfg.terminals)
        #: per terminal: its shortest lexeme (None: matches nothing)
        self.tword: list[bytes | None] = [self.paths.word(start[t]) if start[t] else None
                                          for t in range(n_terms)]
        self.tcost = [len(w) if w is not None else _INF for w in self.tword]
        self.ncost, self.nrule = cfg.shortest_derivations(self.tcost)
        ign = [w for t in cfg.ignore if (w := self.tword[t])]
        self.sep: bytes | None = min(ign, key=len) if ign else None
        self._cache: Lru[Any, Any] = Lru(_CACHE)

    # --- the chart (per engine) -----------------------------------------------------------------

    def _key(self, state: Any) -> Any:
        """What the completion of ``state`` depends on (the cache key; holds no chart); None when
        ``state`` is not a state of this engine."""
        raise NotImplementedError

    def _confs(self, state: Any) -> list[tuple[bool, Any, Any]]:
        """Per configuration of ``state``: ``(fresh, pending DFA states, handle)``."""
        raise NotImplementedError

    def _finish(self, handle: Any, t: int | None) -> tuple[int, list[int]] | None:
        """The cheapest way from a lexeme boundary to acceptance after configuration ``handle``'s
        set (``t`` None) or after it closes terminal ``t``: its cost and the symbols to derive."""
        raise NotImplementedError

    # --- the answer ---------------------------------------------------------------------------

    def __call__(self, state: Any) -> bytes | None:
        key = self._key(state)
        if key is None or not state:
            return None
        hit = self._cache.get(key)
        if hit is not None:
            return hit if isinstance(hit, bytes) else None
        try:
            out = self._solve(state)
        except BudgetExceeded:
            out = None
        self._cache.put(key, out if out is not None else False)
        return out

    def _solve(self, state: Any) -> bytes | None:
        c = self.c
        if c.is_accepting_state(state):
            return b""
        cands: list[tuple[int, int, list[tuple[int, bytes, int]]]] = []
        for i, (fresh, pend, handle) in enumerate(self._confs(state)):
            if fresh:
                got = self._finish(handle, None)
                if got is not None:
                    cands.append((got[0], i, self._lexemes(got[1])))
                continue  # lexemes that start here are the terminals _finish already weighs
            for q in pend:
                head = self.paths.nonempty(q)
                if head is None:
                    continue
                qf, word = head
                t = self.term_of[qf]
                got = self._finish(handle, None if self.is_ignore[t] else t)
                if got is not None:
                    cands.append((len(word) + got[0], i, [(t, word, qf), *self._lexemes(got[1])]))
        cands.sort(key=lambda x: x[0])
        for cost, _, lexemes in cands[:_TRIES]:
            if cost >= _INF:
                break
            for data in self._spellings(lexemes):
                end = c.feed(state, data)
                if end and c.is_accepting_state(end):
                    return data
        return None

    def _spellings(self, lexemes: list[tuple[int, bytes, int]]) -> list[bytes]:
        """The plain concatenation, then (if the grammar has %ignore) one with a separator between
        lexemes whose terminal could run on into the next."""
        plain = b"".join(w for _, w, _ in lexemes)
        if self.sep is None or not lexemes:
            return [plain]
        rows, sep = self.rows, self.sep
        parts: list[bytes] = []
        for i, (_, w, qf) in enumerate(lexemes):
            parts.append(w)
            nxt = lexemes[i + 1][1] if i + 1 < len(lexemes) else b""
            if nxt and rows[qf][self.byte_class[nxt[0]]]:
                parts.append(sep)
        inner = b"".join(parts)
        # the output so far may end in a lexeme the first one would extend: a separator before it too
        return list(dict.fromkeys([plain, inner, sep + inner]))

    def _lexemes(self, syms: list[int]) -> list[tuple[int, bytes, int]]:
        """The lexemes ``(terminal, bytes, end state)`` of the shortest derivation of ``syms``."""
        out: list[tuple[int, bytes, int]] = []
        for t in self._terminals(syms):
            w = self.tword[t]
            assert w is not None
            out.append((t, w, self._end(t, w)))
        return out

    def _end(self, t: int, w: bytes) -> int:
        q: int = self.start[t]
        rows, col = self.rows, self.byte_class
        for b in w:
            q = int(rows[q][col[b]])
        return q

    def _terminals(self, syms: list[int]) -> list[int]:
        """The terminals of the shortest derivation of ``syms``."""
        out: list[int] = []
        stack = list(reversed(syms))
        rules = self.c.cfg.rules
        while stack:
            s = stack.pop()
            if s < 0:
                out.append(~s)
            else:
                stack.extend(reversed(rules[self.nrule[s]].rhs))
        return out


class _PythonCfgSolver(_CfgSolver):
    """Completions for a :class:`~grammarmask.cfg.CompiledCfg`: ``C(E, X)`` memoised on its sets."""

    def __init__(self, compiled: Any) -> None:
        lex = compiled.lex
        super().__init__(compiled, lex.table, lex.accepting, lex.start, lex.term_list, lex.is_ignore)
        self.rows = lex.rows
        g = self.g = compiled.earley
        # tail[d]: the cost of the symbols from dot d to the end of its rule
        tail = [0] * (len(g.next_sym) + 1)
        for d in range(len(g.next_sym) - 1, -1, -1):
            sym = g.next_sym[d]
            tail[d] = 0 if sym is None else min(_INF, self._cost(sym) + tail[d + 1])
        self.tail = tail

    def _cost(self, sym: int) -> int:
        return self.tcost[~sym] if sym < 0 else self.ncost[sym]

    def _key(self, state: Any) -> Any:
        if not isinstance(state, tuple):
            return None
        return tuple((e.sig, pend, sh, fr) for e, pend, sh, fr in state)

    def _confs(self, state: Any) -> list[tuple[bool, Any, Any]]:
        return [(fresh, pend, e) for e, pend, _, fresh in state]

    def _finish(self, handle: Any, t: int | None) -> tuple[int, list[int]] | None:
        e = handle if t is None else handle.advance(t)
        if e is None:
            return None
        if e.accepting:
            return 0, []
        table = self._table(e)
        lhs, tail = self.g.lhs, self.tail
        best, best_it = _INF, None
        for lst in (*e.scan.values(), *e.waiting.values()):
            for it in lst:
                d, k = it >> 32, it & 0xFFFFFFFF
                o = e.origins[k - 1] if k else e
                x = (table if o is e else o.memo[_MEMO]).get(lhs[d])
                if x is None:
                    continue
                cost = tail[d] + x[0]
                if cost < best:
                    best, best_it = cost, (d, o)
        if best_it is None or best >= _INF:
            return None
        syms: list[int] = []
        d, o = best_it
        while True:
            syms.extend(self._rest(d))
            x = o.memo[_MEMO][lhs[d]]
            if x[1] is None:
                break
            d, o = x[1]
            d += 1
        return best, syms

    def _rest(self, d: int) -> list[int]:
        out = []
        nxt = self.g.next_sym
        while (sym := nxt[d]) is not None:
            out.append(sym)
            d += 1
        return out

    # --- C(E, X), memoised on the sets -----------------------------------------------------------

    def _table(self, e: Any) -> dict[int, tuple[int, Any]]:
        hit = e.memo.get(_MEMO)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        stack = [e]
        while stack:
            x = stack[-1]
            if _MEMO in x.memo:
                stack.pop()
                continue
            missing = [o for o in x.origins if _MEMO not in o.memo]
            if missing:
                stack.extend(missing)
                continue
            x.memo[_MEMO] = self._compute(x)
            stack.pop()
        return e.memo[_MEMO]  # type: ignore[no-any-return]

    def _compute(self, e: Any) -> dict[int, tuple[int, Any]]:
        """``X -> (C(e, X), back pointer)``; the back pointer is None (accept) or ``(dot, origin)``
        of the item ``X`` completes into."""
        lhs, tail = self.g.lhs, self.tail
        heap: list[tuple[int, int, int, Any]] = []
        inner: dict[int, list[tuple[int, int]]] = {}  # lhs B -> (dot, X) of items predicted here
        serial = 0
        if e.index == 0:
            heap.append((0, self.g.start, serial, None))
        for x, lst in e.waiting.items():
            for it in lst:
                d, k = it >> 32, it & 0xFFFFFFFF
                if k:
                    o = e.origins[k - 1]
                    got = o.memo[_MEMO].get(lhs[d])
                    if got is not None and got[0] < _INF:
                        serial += 1
                        heap.append((tail[d + 1] + got[0], x, serial, (d, o)))
                else:
                    inner.setdefault(lhs[d], []).append((d, x))
        heapq.heapify(heap)
        out: dict[int, tuple[int, Any]] = {}
        while heap:
            cost, x, _, back = heapq.heappop(heap)
            if x in out or cost >= _INF:
                continue
            out[x] = (cost, back)
            for d, z in inner.get(x, ()):
                if z not in out:
                    serial += 1
                    heapq.heappush(heap, (tail[d + 1] + cost, z, serial, (d, e)))
        return out


class _NativeCfgSolver(_CfgSolver):
    """Completions for a :class:`~grammarmask.native.cfg.NativeCompiledCfg`: the engine computes
    ``C(E, X)`` on its own chart (src/cfg/complete.rs, a port of :class:`_PythonCfgSolver`'s half)
    from the costs computed here; the lexemes, spellings and the check stay in Python."""

    def __init__(self, compiled: Any) -> None:
        from .native.cfg import flat_tables

        flat = flat_tables(compiled.cfg)  # the combined table read by byte class
        accepting = np.frombuffer(flat["accepting"], dtype=np.uint8).astype(bool)
        table = np.frombuffer(flat["transitions"], dtype=np.int32).reshape(accepting.size, -1)
        by_class = flat["classes"]
        byte_class = None if by_class is None else np.frombuffer(by_class, np.uint8).astype(np.intp)
        term_of = np.frombuffer(flat["term_of"], dtype=np.int32).tolist()
        super().__init__(compiled, table, accepting, list(flat["starts"]), term_of, list(flat["ignore"]),
                         byte_class)
        self.engine = compiled.engine
        self.engine.set_completion_costs([min(c, _INF) for c in self.tcost],
                                         [min(c, _INF) for c in self.ncost])

    def _key(self, state: Any) -> Any:
        from .native import _engine

        if not isinstance(state, _engine.CfgState):
            return None
        return tuple(state.key)

    def _confs(self, state: Any) -> list[tuple[bool, Any, Any]]:
        confs = self.engine.configurations(state)
        return [(fresh, pend, (state, i)) for i, (fresh, pend) in enumerate(confs)]

    def _finish(self, handle: Any, t: int | None) -> tuple[int, list[int]] | None:
        state, i = handle
        got = self.engine.completion(state, i, -1 if t is None else t)
        return None if got is None else (int(got[0]), list(got[1]))


class BudgetPlan:
    """One sequence's budget bookkeeping: a known completion of the current state (the *plan*) and
    the check that a token leaves room to finish.

    Invariant kept by :func:`grammarmask.generate` (``budget_aware=True``): after every step,
    ``len(plan) + 1 <= tokens left`` (one token per byte of the plan, one for EOS). That is enough
    whenever every byte has a single-byte token (byte-level BPE, byte-fallback sentencepiece,
    tiktoken): the plan can always be spelled one byte at a time, and is usually spelled with fewer,
    longer tokens.
    """

    __slots__ = ("_state", "compiled", "plan")

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self._state: Any = None
        self.plan: bytes | None = None

    def at(self, state: Any) -> bytes | None:
        """The plan for ``state`` (computed unless it is the state the plan was kept for)."""
        if self._state is not state:
            self.plan = shortest_completion(self.compiled, state)
            self._state = state
        return self.plan

    def fits(self, state: Any, token_id: int, left_after: int) -> bytes | None:
        """The plan after ``token_id`` (not EOS) when it leaves a completion of at most
        ``left_after - 1`` bytes (room for EOS too), else None."""
        data = self.compiled.vocab.token_bytes[token_id]
        nxt = self.compiled.advance_state(state, token_id)
        if nxt is None:
            return None
        plan = self.at(state)
        if plan is not None and plan.startswith(data):
            rest = plan[len(data):]
        else:
            got = shortest_completion(self.compiled, nxt)
            if got is None:
                return None
            rest = got
        return rest if len(rest) + 1 <= left_after else None

    def keep(self, state: Any, plan: bytes) -> None:
        """Remember ``plan`` as the completion of ``state`` (the state just entered)."""
        self._state, self.plan = state, plan

    def next_token(self, matcher: Any) -> int | None:
        """The plan's first token: EOS when the plan is empty, else the longest legal token that is a
        prefix of it (None when the vocabulary has no such token)."""
        from .grammar import _longest_token

        plan = self.at(matcher.state)
        if plan is None:
            return None
        if not plan:
            return int(matcher.vocab.eos_token_id) if matcher.is_accepting() else None
        return _longest_token(matcher.vocab.trie, plan, matcher)
