"""The one owner of a grammar's lexer-level walks: which walk answers a (frontier, lexeme state)
pair, and every cache of their results.

:class:`LexemeWalks` answers :meth:`~LexemeWalks.entry` (the tokens that stay inside the lexeme and
where it can close) for a trie frontier and a lexer state, choosing among three walks:

- a lexeme that starts at the trie root with no shadow gets the *shared root walk*: walked in the
  terminal DFA's own local states, so the result serves every grammar with an equal terminal. It is
  kept per vocabulary (DESIGN §5), keyed by the DFA's content hash and the state's walk class
  (:func:`.rootwalk.walk_classes`), and translated to the grammar's global states on use. Broad
  lexemes are walked densely (:class:`.rootwalk.RootWalk`), others by the grammar's pruned walker;
- a broad lexeme below a few nodes with no shadow (after whitespace) gets the *shared below walk*,
  kept the same way;
- anything else gets the grammar's own pruned walk (:class:`.walk.TokenWalker`), all the lexemes
  pending at one frontier in one vectorised pass.

Entries are kept on their frontier (frontiers are interned by the walker), root frontiers per
shadow set in an LRU.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ..cache import Lru, per_vocabulary
from ..limits import Limits, active
from ..regular.index import _ranges
from ..vocab import Vocabulary
from .lexer import LexerTables
from .rootwalk import Close, RootWalk, broad_states
from .walk import Entry, Frontier, Group, TokenWalker

__all__ = ["LexemeWalks"]

Words = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]


class SharedBelow(NamedTuple):
    """Where a dense walk's close leaves the trie: the frontier's ``nodes`` and ``bytes``, and the
    local DFA state each row's greedy terminal lives on in (``after``; None: no shadow)."""

    nodes: I64
    bytes: I64
    after: I64 | None


class SharedClose(NamedTuple):
    """A close in a shared walk: local lexer state ``local_q``, the trie ``nodes`` below it (pruned
    walks) or the frontier ``below`` it (dense walks), the tokens that end right there (None: none)."""

    local_q: int
    nodes: I64 | None
    at_words: Words | None
    below: SharedBelow | None


class SharedWalk(NamedTuple):
    """A walk kept per vocabulary, in the terminal DFA's local states: the tokens that stay inside
    the lexeme (None: none) and its closes."""

    inside: Words | None
    closes: list[SharedClose]


class _SharedWalks:
    """The per-vocabulary caches every grammar shares (kept on the vocabulary, freed with it): root
    walks keyed by (terminal DFA, walk class, greedy), LRU within a byte budget, and dense walkers."""

    def __init__(self, limits: Limits) -> None:
        self.lock = threading.Lock()
        self.entries: Lru[Any, SharedWalk] = Lru(sys.maxsize, limits.shared_walk_bytes)
        self.walkers: Lru[bytes, RootWalk] = Lru(limits.shared_walkers)
        self.narrow_limit = limits.shared_narrow_terminals
        #: the terminals found to have no broad state (no dense walker): kept apart, so that a grammar
        #: with many narrow terminals (object keys) does not evict the walkers of the broad ones
        self.narrow: set[bytes] = set()

    def walker(self, key: bytes, make: Callable[[], RootWalk | None]) -> RootWalk | None:
        with self.lock:
            if key in self.narrow:
                return None
        hit = self.walkers.get(key)
        if hit is not None:
            return hit
        got = make()
        with self.lock:
            if got is None:
                if len(self.narrow) >= self.narrow_limit:
                    self.narrow.clear()
                self.narrow.add(key)
        if got is not None:
            self.walkers.put(key, got)
        return got


def _shared_walks(vocab: Vocabulary, limits: Limits | None = None) -> _SharedWalks:
    """The vocabulary's shared walks (sized by the limits of the first grammar that asks)."""
    return per_vocabulary(vocab, "cfg.shared_walks", lambda: _SharedWalks(limits or active()))


def _nbytes(x: Any) -> int:
    """The bytes of the numpy arrays inside nested tuples and lists (a cache entry's weight)."""
    if isinstance(x, np.ndarray):
        return int(x.nbytes)
    if isinstance(x, (tuple, list)):
        return sum(_nbytes(y) for y in x) + 64
    return 16


class LexemeWalks:
    """Every lexer-level walk of one grammar: :meth:`entry` decides which walk answers a (frontier,
    lexeme state) pair and keeps the answer; the per-vocabulary shared walks sit behind it."""

    def __init__(self, lex: LexerTables, vocab: Vocabulary, limits: Limits) -> None:
        self.lex = lex
        self.vocab = vocab
        self.limits = limits
        self.walker = TokenWalker(lex, vocab, limits)
        self.trie = vocab.trie
        self.empty = self.walker.empty
        self._root_nodes = np.zeros(1, dtype=np.int64)
        #: the frontier at the trie root with no shadow (every fresh lexeme boundary starts here)
        self.plain_root = self.walker.frontier(self._root_nodes, ())
        self._roots: Lru[tuple[int, ...], Frontier] = Lru(limits.cfg_root_frontiers)
        #: root entries by (terminal, walk class): states that walk alike get one Entry
        self.class_entries: dict[tuple[int, Any], Entry] = {}

    def root(self, shadows: tuple[int, ...]) -> Frontier:
        """The frontier at the trie root with greedy terminals ``shadows`` living on."""
        if not shadows:
            return self.plain_root
        fr = self._roots.get(shadows)
        if fr is None:
            fr = self.walker.frontier(self._root_nodes, shadows)
            self._roots.put(shadows, fr)
        return fr

    def frontier(self, nodes: I64, shadows: tuple[int, ...]) -> Frontier:
        """The (interned) frontier of trie ``nodes`` with ``shadows`` living on."""
        return self.walker.frontier(nodes, shadows)

    def entry(self, fr: Frontier, q: int) -> Entry:
        """The walk of a lexeme in lexer state ``q`` from frontier ``fr``."""
        ent = fr.entries.get(q)
        if ent is None:
            if fr is self.plain_root:
                ent = self.root_entry(q, fr)
            else:
                ent = self.below_entry(fr, q) or self.walker.entry(q, fr)
            fr.entries[q] = ent
        return ent

    def prepare(self, fr: Frontier, pend: tuple[int, ...]) -> None:
        """Walk every lexeme of ``pend`` not walked from ``fr`` yet: broad ones below whitespace by
        the shared below walk, the rest all in one vectorised pass."""
        if fr is self.plain_root:
            return
        have, first, bits = fr.entries, self.lex.first_bits, fr.bits
        missing = tuple(q for q in pend if q not in have and first[q] & bits)
        if missing and self.below(fr):
            for q in missing:
                ent = self.below_entry(fr, q)
                if ent is not None:
                    have[q] = ent
            missing = tuple(q for q in missing if q not in have)
        if len(missing) > 1:
            have.update(self.walker.entries(missing, fr))

    def below(self, fr: Frontier) -> tuple[int, ...]:
        """The few nodes every row of ``fr`` hangs from, if no shadow lives on and none of them lies
        below another; else ()."""
        if fr.below is None:
            nodes = fr.nodes
            fr.below = ()
            if nodes.size > self.limits.walk_small_frontier and not fr.shadows.any():
                parents = np.unique(self.trie.parent[nodes])
                few = parents.size <= self.limits.walk_below_parents
                if few and not self._nested(below := parents.tolist()):
                    fr.below = tuple(below)
        return fr.below

    def _tokens_two_below(self, q: int, nodes: I64) -> int:
        """How many tokens lie below the children of frontier ``nodes`` where a lexeme starting in
        state ``q`` is still alive two bytes in (whitespace dies there, a name does not)."""
        ta, table = self.trie, self.lex.table
        s = table[q, ta.byte[nodes]]
        s = np.where(self.walker.reaccept[s], s, 0)
        live = s != 0
        lo, hi = ta.child_lo[nodes[live]], ta.child_hi[nodes[live]]
        kids = _ranges(lo, hi)
        s2 = table[np.repeat(s[live], hi - lo), ta.byte[kids]]
        return int(ta.sub_count[kids[s2 != 0]].sum())

    def _nested(self, nodes: list[int]) -> bool:
        """Whether one of the trie ``nodes`` lies below another (their subtrees overlap)."""
        parent, own = self.trie.parent, set(nodes)
        for v in nodes:
            u = int(parent[v])
            while u > 0:
                if u in own:
                    return True
                u = int(parent[u])
        return 0 in own and len(own) > 1

    def below_entry(self, fr: Frontier, q: int) -> Entry | None:
        """The dense walk of lexeme state ``q`` from frontier ``fr`` when ``fr`` hangs from a few nodes
        (whitespace closed: every token that starts with a space or a tab lies below) and the lexeme
        is broad there; shared like :meth:`root_entry`. None otherwise."""
        below = self.below(fr)
        if not below:
            return None
        nodes = fr.nodes
        if self._tokens_two_below(q, nodes) <= self.limits.walk_broad_below:
            return None
        lex = self.lex
        t = lex.term_list[q]
        off = lex.offset[t]
        shared_walks, rw = self._dense_walker(t)
        if rw is None:
            return None
        key = (*self._shared_key(t, q, rw), nodes.tobytes())
        hit = shared_walks.entries.get(key)
        if hit is None:
            hit = self._shareable(*rw.walk_below(q - off, lex.greedy[t], below, nodes))
            shared_walks.entries.put(key, hit, _nbytes(hit))
        return self._from_shared(hit, off)

    def root_entry(self, q: int, root: Frontier) -> Entry:
        """The walk of lexeme state ``q`` from the trie root with no shadows. It depends only on the
        terminal's DFA and the vocabulary, so it is shared through a per-vocabulary cache by every
        grammar with an equal terminal (JSON schemas all use the same string and number terminals)."""
        lex = self.lex
        t = lex.term_list[q]
        off = lex.offset[t]
        shared_walks, rw = self._dense_walker(t)
        key = self._shared_key(t, q, rw)
        mine = self.class_entries.get((t, key[1]))
        if mine is not None:  # a state of the same walk class: the same Entry, so parser-level
            return mine       # memos keyed by the entry are shared too
        hit = shared_walks.entries.get(key)
        if hit is None:
            if rw is not None and not rw.broad[q - off]:
                rw = None
            if rw is None:
                shared = self._shared_words
                ent = self.walker.entry(q, root)
                closes = [SharedClose(g.q - off, g.nodes, shared(g.at_words), None) for g in ent.groups]
                hit = SharedWalk(shared(ent.inside), closes)
            else:
                hit = self._shareable(*rw.walk(q - off, lex.greedy[t]))
            shared_walks.entries.put(key, hit, _nbytes(hit))
        mine = self.class_entries[(t, key[1])] = self._from_shared(hit, off)
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

    def _shareable(self, inside: Words, closes: list[Close]) -> SharedWalk:
        """A dense walk's result as stored in the shared walks (local states)."""
        shared = self._shared_words
        return SharedWalk(shared(inside), [
            SharedClose(c.state, None, shared(c.words), SharedBelow(c.nodes, c.byte, c.after))
            for c in closes
        ])

    def _from_shared(self, hit: SharedWalk, off: int) -> Entry:
        """This grammar's :class:`Entry` for a shared walk of the terminal at state offset ``off``."""
        e = self.empty
        out = Entry(e if hit.inside is None else hit.inside, [])
        for c in hit.closes:
            g = Group(c.local_q + off, (), c.nodes, e if c.at_words is None else c.at_words)
            if c.below is not None:  # a dense walk's close: the frontier below it is known already
                b = c.below
                sh = np.zeros((b.nodes.size, 0), np.int64) if b.after is None else np.where(
                    b.after > 0, b.after + off, 0).reshape(-1, 1)
                g.frontier = self.walker.intern(Frontier(b.nodes, b.bytes, sh))
            out.groups.append(g)
        return out

    def _dense_walker(self, t: int) -> tuple[_SharedWalks, RootWalk | None]:
        """The vocabulary's shared walks and terminal ``t``'s dense walker in them (made on first use;
        None for a terminal with no broad state)."""
        shared_walks = _shared_walks(self.vocab, self.limits)
        return shared_walks, shared_walks.walker(self.lex.dfa_key(t), lambda: self._make_root_walk(t))

    def _make_root_walk(self, t: int) -> RootWalk | None:
        """The dense root walker of terminal ``t`` if some of its states are broad."""
        dfa = self.lex.dfas[t]
        broad = broad_states(self.vocab, dfa, self.limits.walk_broad_tokens)
        if not broad.any():
            return None
        off = self.lex.offset[t]
        reaccept = np.zeros(dfa.n_states, dtype=bool)
        reaccept[1:] = self.lex.reaccept[off + 1 : off + dfa.n_states]
        return RootWalk(self.vocab, dfa, reaccept, broad, self.limits)
