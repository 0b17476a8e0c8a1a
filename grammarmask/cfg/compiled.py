"""The vocabulary-bound CFG: matcher states, token advance and exact token masks.

A state is a tuple of *configurations*, one per way of cutting the output into lexemes that is still
possible (lark's dynamic lexer is nondeterministic: ``select`` may be a keyword or a NAME). A
configuration is ``(E, pend, shadows, fresh)``: the Earley set ``E`` after the lexemes closed so far
(it holds the whole chart), the lexer state (see :mod:`.lexer`), and whether the output ends exactly
at a lexeme boundary. Everything is immutable, so states are values: fork and rollback are free.

Feeding a byte moves every pending lexeme's DFA; wherever one accepts, a configuration where the
lexeme closes there is added (the parser advances over its terminal, and for a greedy terminal its DFA
lives on as a shadow). Masks come from lexer-level walks (:mod:`.lexeme_walks` chooses and caches
them), asked to the parser once per close group.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..cache import Lru
from ..errors import BudgetExceeded
from ..grammar import CompiledGrammar
from ..ir.cfg import Cfg
from ..limits import Limits, active
from ..vocab import Vocabulary
from .earley import EarleyGrammar, EarleySet
from .lexeme_walks import LexemeWalks
from .lexer import LexerTables
from .walk import Entry

__all__ = ["CompiledCfg"]

Config = tuple[EarleySet, tuple[int, ...], tuple[int, ...], bool]
State = tuple[Config, ...]
Words = npt.NDArray[np.uint32]

_DEEP = 1 << 20


class CompiledCfg(CompiledGrammar):
    """A :class:`~.ir.Cfg` bound to a vocabulary (see the module docstring for the state)."""

    def __init__(self, cfg: Cfg, vocab: Vocabulary, limits: Limits | None = None, *,
                 tables: tuple[LexerTables, EarleyGrammar] | None = None) -> None:
        self.cfg = cfg
        self.vocab = vocab
        self.limits = limits = limits or active()
        # ``tables``: this cfg's lexer and parser tables made earlier, under the same limits (read
        # from the disk cache, grammarmask.compile_cache)
        if tables is None:
            tables = (LexerTables(cfg), EarleyGrammar(cfg, limits))
        self.lex, self.earley = tables
        #: which lexer-level walk answers a (frontier, lexeme state), and their caches
        self.walks = LexemeWalks(self.lex, vocab, limits)
        self._masks: Lru[Any, Any] = Lru(limits.cfg_masks, limits.cfg_mask_bytes)
        self._parts: Lru[Any, Any] = Lru(limits.cfg_parts, limits.cfg_parts_bytes)
        self._collapse, self._need_max = limits.walk_collapse, limits.walk_need_max
        self._max_configs, self._max_visits = limits.cfg_configs, limits.cfg_walk_visits
        self._needs: dict[int, list[int]] = {}
        #: the bytes some lexeme can start with, as an int bitset
        self._any_first = 0
        for q in self.lex.start:
            self._any_first |= self.lex.first_bits[q]
        e0 = self.earley.initial()
        c0 = self._fresh(e0, ())
        self._initial: State = (c0,) if c0 is not None else ()

    # --- configurations ---------------------------------------------------------------------

    def _pend_of(self, e: EarleySet) -> tuple[int, ...]:
        pend = e.memo.get("pend")
        if pend is None:
            start = self.lex.start
            pend = tuple(sorted({start[t] for t in e.allowed} | {start[t] for t in self.lex.ignore}))
            e.memo["pend"] = pend
        return pend  # type: ignore[return-value]

    def _fresh(self, e: EarleySet, shadows: tuple[int, ...]) -> Config | None:
        """The configuration at a boundary after ``e``, or None when no lexeme can start there."""
        pend = self._pend_of(e)
        key = ("fresh", shadows)
        ok = e.memo.get(key)
        if ok is None:
            ok = e.accepting or any(self.lex.can_finish(q, shadows, nonempty=False) for q in pend)
            e.memo[key] = ok
        return (e, pend, shadows, True) if ok else None

    def _close(self, e: EarleySet, q: int, shadows: tuple[int, ...]) -> Config | None:
        """Close the lexeme in accepting DFA state ``q`` (shadows already stepped past it)."""
        lex = self.lex
        t = lex.term_list[q]
        e2 = e if lex.is_ignore[t] else e.advance(t)
        if e2 is None:
            return None
        if lex.greedy[t] and lex.reaccept[q]:
            shadows = tuple(sorted({*shadows, q}))
        return self._fresh(e2, shadows)

    def _step(self, configs: State, byte: int) -> State:
        lex = self.lex
        rows, acc = lex.rows, lex.acc_list
        # configurations by (set signature, pend, shadows, fresh): sets with one signature have one
        # future, so configurations that reach them along different lexings are one (by the set
        # itself they were kept apart: Java's `true`, a literal and a name, doubled them at each
        # `return true;`)
        out: dict[tuple[int, Any, Any, bool], Config] = {}
        for e, pend, shadows, _ in configs:
            sh2 = lex.step_shadows(shadows, byte)
            if sh2 is None:
                continue
            pend2 = tuple(sorted({rows[q][byte] for q in pend} - {0}))
            if not pend2:
                continue
            if any(lex.can_finish(q, sh2, nonempty=True) for q in pend2):
                out.setdefault((e.sig, pend2, sh2, False), (e, pend2, sh2, False))
            for q in pend2:
                if acc[q]:
                    c = self._close(e, q, sh2)
                    if c is not None:
                        out.setdefault((c[0].sig, c[1], c[2], c[3]), c)
        if len(out) > self._max_configs:
            raise BudgetExceeded(
                "cfg_configs", self._max_configs,
                "the output can be cut into lexemes in more ways than allowed (terminals that match "
                "the same text in many splits, as in GBNF's 'root ::= root root | \"a\"+')",
                compile_time=True)
        return tuple(out.values())

    def feed(self, state: State, data: bytes) -> State:
        """The state after ``data`` (empty when ``data`` leaves the language's prefixes)."""
        for b in data:
            state = self._step(state, b)
            if not state:
                break
        return state

    # --- CompiledGrammar ----------------------------------------------------------------------

    def initial_state(self) -> State:
        return self._initial

    def advance_state(self, state: State, token_id: int) -> State | None:
        tb = self.vocab.token_bytes
        if not 0 <= token_id < len(tb) or not tb[token_id]:
            return None
        nxt = self.feed(state, tb[token_id])
        return nxt or None

    def is_accepting_state(self, state: State) -> bool:
        return any(fresh and e.accepting for e, _, _, fresh in state)

    def state_mask_words(self, state: State) -> Words:
        skey = tuple((e.sig, pend, sh, fr) for e, pend, sh, fr in state)
        hit = self._masks.get(skey)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        parts: dict[int, Words] = {}
        first = self.lex.first_bits
        walks = self.walks
        visits = [self._max_visits]  # parser states this mask may still visit (shared down the walk)
        for e, pend, shadows, _ in state:
            fr = walks.root(shadows)
            walks.prepare(fr, pend)
            for q in pend:
                if first[q] & fr.bits:
                    for w in self._walk(e, walks.entry(fr, q), visits)[0]:
                        parts[id(w)] = w
        empty = walks.empty
        parts.pop(id(empty), None)
        if not parts:
            words = empty
        elif len(parts) == 1:
            (words,) = parts.values()
        else:
            it = iter(parts.values())
            words = next(it) | next(it)
            for w in it:
                np.bitwise_or(words, w, out=words)
            words.setflags(write=False)
        self._masks.put(skey, words, words.nbytes)
        return words

    # --- masks ----------------------------------------------------------------------------------

    def _walk(self, e: EarleySet, ent: Entry, visits: list[int]) -> tuple[tuple[Words, ...], int]:
        """Mask words whose union is the legal set below ``ent`` for parser state ``e``, and how deep
        (in origin hops from ``e``) the parser looked to decide it.

        Memoised per (shallow structural signature of ``e`` down to that depth, entry): any parser state
        that looks the same that far down gets the same answer. The words themselves are shared.
        """
        if not ent.groups:
            return (ent.inside,), 0
        needs = self._needs.get(ent.serial)
        if needs:
            for i, need in enumerate(needs):
                key = (e.sig if need < 0 else e.shallow_sig(need + 1), need, ent.serial)
                hit = self._parts.get(key)
                if hit is not None:
                    if i:  # move to front: the depth that answered last is tried first next time
                        needs.insert(0, needs.pop(i))
                    return hit, (_DEEP if need < 0 else need)
        visits[0] -= 1
        if visits[0] < 0:
            raise BudgetExceeded(
                "cfg_walk_visits", self._max_visits,
                "one mask needs to visit more parser states than allowed (tokens that can be cut into "
                "lexemes in very many ways)", compile_time=True)
        lex, walks = self.lex, self.walks
        parts = {id(ent.inside): ent.inside}
        first = lex.first_bits
        need = 0
        empty = walks.empty
        for g in ent.groups:
            t = lex.term_list[g.q]
            shadows = g.after
            if shadows is None:
                shadows = g.shadows
                if lex.greedy[t] and lex.reaccept[g.q]:
                    shadows = tuple(sorted({*shadows, g.q}))
                g.after = shadows
            fr = g.frontier
            if fr is None:
                assert g.nodes is not None  # only dense-walk closes come without nodes, with a frontier
                fr = g.frontier = walks.frontier(g.nodes, shadows)
            if g.at_words is empty and not fr.bits & self._any_first:
                continue  # no token ends at this close and no lexeme starts below it: nothing to ask
            if lex.is_ignore[t]:
                e2 = e
            else:
                nxt = e.advance(t)
                if nxt is None:
                    continue
                e2 = nxt
                need = max(need, e2.reach)
            c = self._fresh(e2, shadows)
            if c is None:
                continue
            pend2 = c[1]
            parts[id(g.at_words)] = g.at_words
            bits = fr.bits
            walks.prepare(fr, pend2)
            for q2 in pend2:
                if first[q2] & bits:
                    sub, sub_need = self._walk(e2, walks.entry(fr, q2), visits)
                    for w in sub:
                        parts[id(w)] = w
                    if e2 is e:
                        need = max(need, sub_need)
                    elif sub_need >= 1:
                        need = max(need, sub_need - 1 + e2.odepth)
        parts.pop(id(empty), None)
        if len(parts) > self._collapse:
            it = iter(parts.values())
            words = next(it) | next(it)
            for w in it:
                np.bitwise_or(words, w, out=words)
            words.setflags(write=False)
            out: tuple[Words, ...] = (words,)
            nbytes = words.nbytes
        else:
            out = tuple(parts.values())
            nbytes = 64  # rows owned by the lexer-level walks: only the tuple is new
        if need > self._need_max:
            need = -1
        key = (e.sig if need < 0 else e.shallow_sig(need + 1), need, ent.serial)
        self._parts.put(key, out, nbytes)
        known = self._needs.setdefault(ent.serial, [])
        if need not in known:
            known.insert(0, need)
        return out, (_DEEP if need < 0 else need)
