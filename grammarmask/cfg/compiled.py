"""The vocabulary-bound CFG: matcher states, token advance and exact token masks.

A state is a tuple of *configurations*, one per way of cutting the output into lexemes that is still
possible (lark's dynamic lexer is nondeterministic: ``select`` may be a keyword or a NAME). A
configuration is ``(E, pend, shadows, fresh)``: the Earley set ``E`` after the lexemes closed so far
(it holds the whole chart), the lexer state (see :mod:`.lexer`), and whether the output ends exactly
at a lexeme boundary. Everything is immutable, so states are values: fork and rollback are free.

Feeding a byte moves every pending lexeme's DFA; wherever one accepts, a configuration where the
lexeme closes there is added (the parser advances over its terminal, and for a greedy terminal its DFA
lives on as a shadow). Masks come from :mod:`.walk`: lexer-level walks cached per lexer state, asked
to the parser once per close group.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ..grammar import CompiledGrammar
from ..index import _ranges
from ..vocab import Vocabulary
from .earley import EarleyGrammar, EarleySet
from .ir import Cfg
from .lexer import LexerTables
from .rootwalk import Close, RootWalk, broad_states
from .walk import Entry, Frontier, Group, TokenWalker, trie_arrays

__all__ = ["CompiledCfg"]

Config = tuple[EarleySet, tuple[int, ...], tuple[int, ...], bool]
State = tuple[Config, ...]
Words = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]

_ROOT_LIMIT = 4096
_MASK_LIMIT = 2048
_MASK_BYTES = 16 << 20  # per compiled grammar (a 131k-token mask row is 16 KB)
_PARTS_LIMIT = 65536
_PARTS_BYTES = 64 << 20
_COLLAPSE = 3  # a walk result with more distinct parts than this is stored as their union
_NEED_MAX = 8  # deeper parser look-ups are memoised by the full signature
_DEEP = 1 << 20
_SMALL_FRONTIER = 32  # a frontier with fewer rows is never walked densely
_BROAD_BELOW = 8192  # a lexeme starting at a frontier over more tokens than this is walked densely
_BELOW_PARENTS = 4  # ... if the frontier's rows hang from at most this many nodes


class _Lru(OrderedDict[Any, Any]):
    """A thread-safe LRU map bounded by entry count and by the bytes its values were put with."""

    def __init__(self, limit: int, max_bytes: int | None = None) -> None:
        super().__init__()
        self.limit = limit
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.sizes: dict[Any, int] = {}
        self.lock = threading.Lock()

    def get_(self, key: Any) -> Any:
        with self.lock:
            v = self.get(key)
            if v is not None:
                self.move_to_end(key)
            return v

    def put(self, key: Any, value: Any, nbytes: int = 0) -> None:
        with self.lock:
            self[key] = value
            self.move_to_end(key)
            self.nbytes += nbytes - self.sizes.get(key, 0)
            self.sizes[key] = nbytes
            while len(self) > self.limit or (self.max_bytes is not None and self.nbytes > self.max_bytes
                                             and len(self) > 1):
                old, _ = self.popitem(last=False)
                self.nbytes -= self.sizes.pop(old, 0)

    def clear(self) -> None:
        with self.lock:
            super().clear()
            self.sizes.clear()
            self.nbytes = 0


_SHARED_BYTES = 128 << 20  # per vocabulary: root walks shared by every grammar
_SHARED_WALKERS = 16  # per vocabulary: dense root walkers (a few MB each)
_shared_lock = threading.Lock()


class _SharedWalks:
    """The per-vocabulary caches every grammar shares (kept on the vocabulary, freed with it): root
    walks keyed by (terminal DFA, state, greedy), LRU within a byte budget, and dense root walkers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries = _Lru(sys.maxsize, _SHARED_BYTES)
        self.walkers: OrderedDict[bytes, RootWalk | None] = OrderedDict()

    def walker(self, key: bytes, make: Callable[[], RootWalk | None]) -> RootWalk | None:
        with self.lock:
            if key in self.walkers:
                self.walkers.move_to_end(key)
                return self.walkers[key]
        got = make()
        with self.lock:
            self.walkers[key] = got
            while len(self.walkers) > _SHARED_WALKERS:
                self.walkers.popitem(last=False)
        return got


def _shared_walks(vocab: Vocabulary) -> _SharedWalks:
    with _shared_lock:
        got: _SharedWalks | None = vocab.__dict__.get("_cfg_root_walks")
        if got is None:
            got = vocab.__dict__["_cfg_root_walks"] = _SharedWalks()
    return got


def _nbytes(x: Any) -> int:
    """The bytes of the numpy arrays inside nested tuples and lists (a cache entry's weight)."""
    if isinstance(x, np.ndarray):
        return int(x.nbytes)
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(y) for y in x) + 64
    return 16


class CompiledCfg(CompiledGrammar):
    """A :class:`~.ir.Cfg` bound to a vocabulary (see the module docstring for the state)."""

    def __init__(self, cfg: Cfg, vocab: Vocabulary) -> None:
        self.cfg = cfg
        self.vocab = vocab
        self.lex = LexerTables(cfg)
        self.earley = EarleyGrammar(cfg)
        self.walker = TokenWalker(self.lex, vocab)
        self._roots = _Lru(_ROOT_LIMIT)
        #: root entries by (terminal, walk class): states that walk alike get one Entry
        self._class_entries: dict[tuple[int, Any], Entry] = {}
        self._masks = _Lru(_MASK_LIMIT, _MASK_BYTES)
        self._parts = _Lru(_PARTS_LIMIT, _PARTS_BYTES)
        self._needs: dict[int, list[int]] = {}
        #: the bytes some lexeme can start with, as an int bitset
        self._any_first = 0
        for q in self.lex.start:
            self._any_first |= self.lex.first_bits[q]
        self._root_nodes = np.zeros(1, dtype=np.int64)
        self._trie = trie_arrays(vocab)
        self._plain_root = self.walker.frontier(self._root_nodes, ())
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
        out: dict[Config, None] = {}
        for e, pend, shadows, _ in configs:
            sh2 = lex.step_shadows(shadows, byte)
            if sh2 is None:
                continue
            pend2 = tuple(sorted({rows[q][byte] for q in pend} - {0}))
            if not pend2:
                continue
            if any(lex.can_finish(q, sh2, nonempty=True) for q in pend2):
                out[(e, pend2, sh2, False)] = None
            for q in pend2:
                if acc[q]:
                    c = self._close(e, q, sh2)
                    if c is not None:
                        out[c] = None
        return tuple(out)

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
        hit = self._masks.get_(skey)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        parts: dict[int, Words] = {}
        first = self.lex.first_bits
        for e, pend, shadows, _ in state:
            fr = self._root(shadows)
            self._prepare(fr, pend)
            for q in pend:
                if first[q] & fr.bits:
                    for w in self._walk(e, self._entry(fr, q))[0]:
                        parts[id(w)] = w
        empty = self.walker.empty
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

    def _root(self, shadows: tuple[int, ...]) -> Frontier:
        if not shadows:
            return self._plain_root
        fr = self._roots.get_(shadows)
        if fr is None:
            fr = self.walker.frontier(self._root_nodes, shadows)
            self._roots.put(shadows, fr)
        return fr  # type: ignore[no-any-return]

    def _entry(self, fr: Frontier, q: int) -> Entry:
        ent = fr.entries.get(q)
        if ent is None:
            if fr is self._plain_root:
                ent = self._shared_root_entry(q)
            else:
                ent = self._shared_below_entry(fr, q) or self.walker.entry(q, fr)
            fr.entries[q] = ent
        return ent

    def _prepare(self, fr: Frontier, pend: tuple[int, ...]) -> None:
        """Walk every lexeme of ``pend`` not walked from ``fr`` yet: broad ones densely, the rest all
        in one vectorised pass."""
        if fr is self._plain_root:
            return
        have, first, bits = fr.entries, self.lex.first_bits, fr.bits
        missing = tuple(q for q in pend if q not in have and first[q] & bits)
        if missing and self._below(fr):
            for q in missing:
                ent = self._shared_below_entry(fr, q)
                if ent is not None:
                    have[q] = ent
            missing = tuple(q for q in missing if q not in have)
        if len(missing) > 1:
            have.update(self.walker.entries(missing, fr))

    def _below(self, fr: Frontier) -> tuple[int, ...]:
        """The few nodes every row of ``fr`` hangs from, if no shadow lives on and none of them lies
        below another; else ()."""
        if fr.below is None:
            nodes = fr.nodes
            fr.below = ()
            if nodes.size > _SMALL_FRONTIER and not fr.shadows.any():
                parents = np.unique(self._trie.parent[nodes])
                if parents.size <= _BELOW_PARENTS and not self._nested(below := parents.tolist()):
                    fr.below = tuple(below)
        return fr.below

    def _tokens_two_below(self, q: int, nodes: I64) -> int:
        """How many tokens lie below the children of frontier ``nodes`` where a lexeme starting in
        state ``q`` is still alive two bytes in (whitespace dies there, a name does not)."""
        ta, table = self._trie, self.lex.table
        s = table[q, ta.byte[nodes]]
        s = np.where(self.walker.reaccept[s], s, 0)
        live = s != 0
        lo, hi = ta.child_lo[nodes[live]], ta.child_hi[nodes[live]]
        kids = _ranges(lo, hi)
        s2 = table[np.repeat(s[live], hi - lo), ta.byte[kids]]
        return int(ta.sub_count[kids[s2 != 0]].sum())

    def _nested(self, nodes: list[int]) -> bool:
        """Whether one of the trie ``nodes`` lies below another (their subtrees overlap)."""
        parent, own = self._trie.parent, set(nodes)
        for v in nodes:
            u = int(parent[v])
            while u > 0:
                if u in own:
                    return True
                u = int(parent[u])
        return 0 in own and len(own) > 1

    def _shared_below_entry(self, fr: Frontier, q: int) -> Entry | None:
        """The dense walk of lexeme state ``q`` from frontier ``fr`` when ``fr`` hangs from a few nodes
        (whitespace closed: every token that starts with a space or a tab lies below) and the lexeme
        is broad there; shared like :meth:`_shared_root_entry`. None otherwise."""
        below = self._below(fr)
        if not below:
            return None
        nodes = fr.nodes
        if self._tokens_two_below(q, nodes) <= _BROAD_BELOW:
            return None
        lex = self.lex
        t = lex.term_list[q]
        off = lex.offset[t]
        shared_walks = _shared_walks(self.vocab)
        rw = shared_walks.walker(lex.dfa_key(t), lambda: self._make_root_walk(t))
        if rw is None:
            return None
        key = (*self._shared_key(t, q, rw), nodes.tobytes())
        hit = shared_walks.entries.get_(key)
        if hit is None:
            hit = self._shareable(*rw.walk_below(q - off, lex.greedy[t], below, nodes))
            shared_walks.entries.put(key, hit, _nbytes(hit))
        return self._from_shared(hit, off)

    def _shared_root_entry(self, q: int) -> Entry:
        """The walk of lexeme state ``q`` from the trie root with no shadows. It depends only on the
        terminal's DFA and the vocabulary, so it is shared through a per-vocabulary cache by every
        grammar with an equal terminal (JSON schemas all use the same string and number terminals)."""
        lex = self.lex
        t = lex.term_list[q]
        off = lex.offset[t]
        shared_walks = _shared_walks(self.vocab)
        rw = shared_walks.walker(lex.dfa_key(t), lambda: self._make_root_walk(t))
        key = self._shared_key(t, q, rw)
        mine = self._class_entries.get((t, key[1]))
        if mine is not None:  # a state of the same walk class: the same Entry, so parser-level
            return mine       # memos keyed by the entry are shared too
        hit = shared_walks.entries.get_(key)
        if hit is None:
            if rw is not None and not rw.broad[q - off]:
                rw = None
            if rw is None:
                shared = self._shared_words
                ent = self.walker.entry(q, self._plain_root)
                hit = (shared(ent.inside),
                       [(g.q - off, g.nodes, shared(g.at_words), None) for g in ent.groups])
            else:
                hit = self._shareable(*rw.walk(q - off, lex.greedy[t]))
            shared_walks.entries.put(key, hit, _nbytes(hit))
        mine = self._class_entries[(t, key[1])] = self._from_shared(hit, off)
        return mine

    def _shared_key(self, t: int, q: int, rw: RootWalk | None) -> tuple[Any, ...]:
        """The shared-walk key of terminal ``t``'s lexeme in (global) state ``q``: by its walk class
        when the terminal has a dense walker (states that walk alike share one walk), else by state."""
        lex = self.lex
        local = q - lex.offset[t]
        name = ("class", int(rw.walk_class[local])) if rw is not None else ("state", local)
        return (lex.dfa_key(t), name, lex.greedy[t])

    def _shared_words(self, w: Words) -> Words | None:
        """``w`` as stored in a shared walk: None for no tokens (each grammar has its own ``empty``)."""
        return None if w is self.walker.empty or not w.any() else w

    def _shareable(self, inside: Words, closes: list[Close]) -> Any:
        """A dense walk's result as stored in the shared walks (local states)."""
        shared = self._shared_words
        return (shared(inside), [(lq, None, shared(at), (fn, fb, aft)) for lq, at, fn, fb, aft in closes])

    def _from_shared(self, hit: Any, off: int) -> Entry:
        """This grammar's :class:`Entry` for a shared walk of the terminal at state offset ``off``."""
        inside_w, groups = hit
        e = self.walker.empty
        out = Entry(e if inside_w is None else inside_w, [])
        for lq, nodes, at, fr in groups:
            g = Group(lq + off, (), nodes, e if at is None else at)
            if fr is not None:  # a dense walk's close: the frontier below it is known already
                fnodes, fbytes, after = fr
                sh = np.zeros((fnodes.size, 0), np.int64) if after is None else np.where(
                    after > 0, after + off, 0).reshape(-1, 1)
                g.frontier = self.walker.intern(Frontier(fnodes, fbytes, sh))
            out.groups.append(g)
        return out

    def _make_root_walk(self, t: int) -> RootWalk | None:
        """The dense root walker of terminal ``t`` if some of its states are broad."""
        dfa = self.lex.dfas[t]
        broad = broad_states(self.vocab, dfa)
        if not broad.any():
            return None
        off = self.lex.offset[t]
        reaccept = np.zeros(dfa.n_states, dtype=bool)
        reaccept[1:] = self.lex.reaccept[off + 1 : off + dfa.n_states]
        return RootWalk(self.vocab, dfa, reaccept, broad)

    def _walk(self, e: EarleySet, ent: Entry) -> tuple[tuple[Words, ...], int]:
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
                hit = self._parts.get_(key)
                if hit is not None:
                    if i:  # move to front: the depth that answered last is tried first next time
                        needs.insert(0, needs.pop(i))
                    return hit, (_DEEP if need < 0 else need)
        lex = self.lex
        parts = {id(ent.inside): ent.inside}
        first = lex.first_bits
        need = 0
        empty = self.walker.empty
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
                fr = g.frontier = self.walker.frontier(g.nodes, shadows)
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
            self._prepare(fr, pend2)
            for q2 in pend2:
                if first[q2] & bits:
                    sub, sub_need = self._walk(e2, self._entry(fr, q2))
                    for w in sub:
                        parts[id(w)] = w
                    if e2 is e:
                        need = max(need, sub_need)
                    elif sub_need >= 1:
                        need = max(need, sub_need - 1 + e2.odepth)
        parts.pop(id(empty), None)
        if len(parts) > _COLLAPSE:
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
        if need > _NEED_MAX:
            need = -1
        key = (e.sig if need < 0 else e.shallow_sig(need + 1), need, ent.serial)
        self._parts.put(key, out, nbytes)
        known = self._needs.setdefault(ent.serial, [])
        if need not in known:
            known.insert(0, need)
        return out, (_DEEP if need < 0 else need)
