"""Concatenation ``a + b`` and repetition ``g.repeat(min, max)``: grammars one after another.

When every part is regular the sequence compiles to one DFA (:func:`grammarmask.automata.concat`).
Otherwise the state is the *set* of alternatives ``(part index, part state)``, because where one part
ends can be ambiguous (``a*`` then ``a*``), and a token may cross from one part into the next in the
middle of its bytes. To step a part by a fraction of a token, the parts are compiled against the
vocabulary extended with the 256 single bytes (ids past ``vocab.size``, never legal in a mask);
tokens that cross a boundary are found by walking the token trie below the points where a part can
end (vectorised over the trie when the part is regular), cached per alternative.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ._args import as_int
from .cache import Lru, per_vocabulary
from .compose import _common_prefix, _Composite, _UnionCompiled
from .engine import compile_dfa
from .errors import GrammarError
from .grammar import CompiledGrammar, Grammar
from .mask import Mask
from .vocab import Vocabulary

__all__ = ["Repeat", "Sequence", "byte_extended"]

Words = npt.NDArray[np.uint32]
State = Any
_CACHE_LIMIT = 4096
_MAX_CANDIDATES = 200_000
# a trie of byte strings: (children by byte, token ids attached to the node)
_Node = tuple[dict[int, Any], list[int]]


class Sequence(_Composite):
    """The grammars one after another: the output is ``x1 x2 ...`` with each ``xi`` in part ``i``
    (``a + b``). Exact even where a part's end is ambiguous or a token straddles two parts.

    Examples
    --------
    Free text up to a trigger, then a JSON object (the "structural tag" pattern)::

        g = gm.Sequence(gm.Regex(r"[^<]*<tool>"), gm.JsonSchema(schema), gm.Regex(r"</tool>"))
    """

    _symbol = "+"
    _dfa_op = "concat"

    def _side_by_side(self, vocab: Vocabulary) -> CompiledGrammar:
        ext = byte_extended(vocab)
        compiled = [_part(p, ext) for p in self.parts]
        return _SequenceCompiled(vocab, ext, [c for c, _ in compiled], [d for _, d in compiled])


def _part(g: Grammar, ext: Vocabulary) -> tuple[CompiledGrammar, Any]:
    """A part of a sequence compiled against the byte-extended vocabulary, and its DFA (None if it
    is not regular): a regular part compiles to its DFA, whose state the vectorised walks read."""
    d = g.to_dfa()
    return (compile_dfa(d, ext) if d is not None else g.compile(ext)), d


class Repeat(Grammar):
    """``grammar`` between ``lo`` and ``hi`` times in a row (``hi`` None: no upper limit), as
    ``g.repeat(lo, hi)`` writes it. Exact where one repetition's end is ambiguous or a token spans
    two repetitions, as for ``+``.

    A regular ``grammar`` gives one automaton when it is small enough; otherwise the repetitions run
    as a sequence whose parts are the one compiled ``grammar`` (a chain of ``hi`` links, or ``lo``
    links and a loop), so the cost of a step does not grow with the counts.

    Examples
    --------
    >>> import grammarmask as gm
    >>> row = gm.Regex(r"[0-9]+\n")
    >>> table = row.repeat(1, 3)   # one to three lines of digits
    """

    def __init__(self, grammar: Grammar, lo: int = 0, hi: int | None = None) -> None:
        if not isinstance(grammar, Grammar):
            raise GrammarError(f"Repeat takes a grammar, got {type(grammar).__name__}")
        lo = as_int(lo, "repeat: min")
        hi = None if hi is None else as_int(hi, "repeat: max")
        if lo < 0:
            raise GrammarError(f"repeat: min must be at least 0, got {lo}")
        if hi is not None and hi < max(lo, 1):
            raise GrammarError(f"repeat: max must be at least 1 and at least min ({lo}), got {hi}")
        self.grammar, self.lo, self.hi = grammar, lo, hi

    def __repr__(self) -> str:
        return f"{self.grammar!r}.repeat({self.lo}, {self.hi})"

    def cache_key(self) -> Any:
        key = self.grammar.cache_key()
        return None if key is None else (type(self.grammar).__qualname__, key, self.lo, self.hi)

    def special_tokens(self) -> frozenset[str | int]:
        return self.grammar.special_tokens()

    def to_dfa(self) -> Any:
        d = self.grammar.to_dfa()
        if d is None:
            return None
        from .automata import repeat

        try:
            return repeat(d, self.lo, self.hi)
        except GrammarError:  # too many states: the repetitions run as a sequence instead
            return None

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        dfa = self.to_dfa()
        if dfa is not None:
            return compile_dfa(dfa, vocab)
        ext = byte_extended(vocab)
        part, d = _part(self.grammar, ext)
        lo = max(self.lo, 1)  # "no repetition at all" is the empty part of the union below
        n = lo if self.hi is None else self.hi
        following: list[tuple[int, ...]] = [(i + 1,) for i in range(n - 1)]
        following.append((n - 1,) if self.hi is None else ())
        graph = ((0,), following, frozenset(range(lo - 1, n)))
        # what follows repetition i is the grammar n-1-i more times (then the loop, if any); a token
        # of at most `longest` bytes cannot tell `longest` or more repetitions from any more
        longest = max(map(len, vocab.token_bytes), default=0)
        chain = _SequenceCompiled(vocab, ext, [part] * n, [d] * n, graph,
                                  same_after=lambda i: min(n - 1 - i, longest + 1))
        if self.lo > 0:
            return chain
        from .automata import literal_dfa

        return _UnionCompiled(vocab, [compile_dfa(literal_dfa(b""), vocab), chain])


def byte_extended(vocab: Vocabulary) -> Vocabulary:
    """``vocab`` with the 256 single bytes appended as ids ``vocab.size + b`` (cached per vocabulary).

    Ids below ``vocab.size`` mean the same; padding ids become special (never legal).
    """

    def make() -> Vocabulary:
        n = len(vocab.token_bytes)
        tokens = [*vocab.token_bytes, *([b""] * (vocab.size - n)), *(bytes([b]) for b in range(256))]
        specials = set(vocab.special_ids) | set(range(n, vocab.size))
        ext = Vocabulary(tokens, eos_token_id=vocab.eos_token_id, special_token_ids=specials,
                         special_token_names=vocab.special_token_names)
        ext.base = vocab.base  # a view spelling special tokens stays one (grammarmask.special_tokens)
        return ext

    return per_vocabulary(vocab, "sequence.byte_extended", make)


class _SequenceCompiled(CompiledGrammar):
    """State: a frozenset of alternatives ``(i, s)``, closed under "part ``i`` is complete in ``s``,
    so part ``i + 1`` may start" (``(i + 1, initial)`` is then in the set).

    ``graph`` generalises the chain to any graph of parts (loops, branches: structural tags use it):
    ``(starts, following, final)`` says which parts may start the output, which may start when part
    ``i`` is complete (``following[i]``), and whose completion completes the output. The default is
    the chain ``0 -> 1 -> ... -> n-1``: ``((0,), ((1,), (2,), ..., ()), {n-1})``.

    ``same_after(i)`` names a class of parts that are the same compiled part with the same language
    after them as far as any token can see (their crossing tokens are then the same, and computed
    once per class); by default every part is its own class."""

    def __init__(
        self, vocab: Vocabulary, ext: Vocabulary, parts: list[CompiledGrammar], dfas: list[Any],
        graph: tuple[tuple[int, ...], list[tuple[int, ...]], frozenset[int]] | None = None,
        same_after: Callable[[int], int] | None = None,
    ) -> None:
        self.vocab = vocab
        self.ext = ext
        self.parts = parts
        self.dfas = dfas
        self._n = len(parts)
        if graph is None:
            graph = ((0,), [(i + 1,) for i in range(self._n - 1)] + [()], frozenset({self._n - 1}))
        self._starts, self._next, self._final = graph
        self._tail = _tail_words(vocab)
        self._class_of = same_after or (lambda i: i)
        self._cross: Lru[tuple[int, State], Words] = Lru(_CACHE_LIMIT)
        self._cand_cache: dict[int, _Node | None] = {}  # by class of part
        self._lock = threading.Lock()

    # -- byte-level stepping of the parts (through the extended vocabulary's byte tokens) ----------

    def _closure(self, alts: set[tuple[int, State]]) -> frozenset[tuple[int, State]]:
        stack = list(alts)
        while stack:
            i, s = stack.pop()
            if self._next[i] and self.parts[i].is_accepting_state(s):
                for nxt in self._starts_after(i):
                    if nxt not in alts:
                        alts.add(nxt)
                        stack.append(nxt)
        return frozenset(alts)

    def _step_byte(self, alts: frozenset[tuple[int, State]], byte: int) -> frozenset[tuple[int, State]]:
        tok = self.vocab.size + byte
        out = set()
        for i, s in alts:
            n = self.parts[i].advance_state(s, tok)
            if n is not None:
                out.add((i, n))
        return self._closure(out) if out else frozenset()

    def _starts_after(self, i: int) -> list[tuple[int, State]]:
        return [(j, self.parts[j].initial_state()) for j in self._next[i]]

    def initial_state(self) -> State:
        return self._closure({(j, self.parts[j].initial_state()) for j in self._starts})

    def is_accepting_state(self, state: State) -> bool:
        return any(i in self._final and self.parts[i].is_accepting_state(s) for i, s in state)

    def advance_state(self, state: State, token_id: int) -> State | None:
        data = self.vocab.token_bytes[token_id]
        if not data:
            return None
        out: set[tuple[int, State]] = set()
        for i, s in state:
            n = self.parts[i].advance_state(s, token_id)
            if n is not None:
                out.add((i, n))
            if self._next[i]:
                out.update(self._crossing_ends(i, s, data))
        return self._closure(out) if out else None

    def _crossing_ends(self, i: int, s: State, data: bytes) -> set[tuple[int, State]]:
        """The alternatives after ``data`` that left part ``i`` inside ``data`` (after a nonempty
        proper prefix of it, or at its start when ``s`` is complete: the closure has those)."""
        out: set[tuple[int, State]] = set()
        part = self.parts[i]
        si: State = s
        for k in range(len(data) - 1):
            si = part.advance_state(si, self.vocab.size + data[k])
            if si is None:
                break
            if part.is_accepting_state(si):
                rest = self._closure(set(self._starts_after(i)))
                for b in data[k + 1 :]:
                    rest = self._step_byte(rest, b)
                    if not rest:
                        break
                out.update(rest)
        return out

    # -- masks --------------------------------------------------------------------------------------

    def state_mask_words(self, state: State) -> Words:
        nw = self.vocab.n_words
        out = np.zeros(nw, np.uint32)
        for i, s in state:
            out |= self.parts[i].state_mask_words(s)[:nw]
            if self._next[i]:
                out |= self._crossing_words(i, s)
        out &= self._tail
        return out

    def _crossing_words(self, i: int, s: State) -> Words:
        return self._cross.get_or_make((self._class_of(i), s), lambda: self._compute_crossing(i, s))

    def _compute_crossing(self, i: int, s: State) -> Words:
        """Tokens that leave part ``i`` (from ``s``) strictly inside their bytes and go on legally."""
        cands = self._candidates(i) if self.dfas[i] is None else None
        if cands is not None:
            return self._crossing_from_candidates(i, s, cands)
        trie = self.vocab.trie
        ends = self._end_nodes(i, s)
        legal = np.zeros(self.vocab.size, dtype=bool)
        start = self._closure(set(self._starts_after(i)))
        for node in ends:
            stack = [(node, start)]
            while stack:
                n, alts = stack.pop()
                for c in range(int(trie.child_lo[n]), int(trie.child_hi[n])):
                    nxt = self._step_byte(alts, int(trie.byte[c]))
                    if nxt:
                        legal[trie.tokens[trie.tok_lo[c] : trie.tok_hi[c]]] = True
                        stack.append((c, nxt))
        return Mask.from_bool(legal).words

    def _crossing_from_candidates(self, i: int, s: State, root: _Node) -> Words:
        """Walk the heads of the candidate tokens (see :meth:`_candidates`) with part ``i``."""
        part = self.parts[i]
        legal = np.zeros(self.vocab.size, dtype=bool)
        stack = [(root, s)]
        while stack:
            node, ps = stack.pop()
            for b, child in node[0].items():
                nxt = part.advance_state(ps, self.vocab.size + b)
                if nxt is None:
                    continue
                if child[1] and part.is_accepting_state(nxt):
                    legal[child[1]] = True
                if child[0]:
                    stack.append((child, nxt))
        return Mask.from_bool(legal).words

    def _candidates(self, i: int) -> _Node | None:
        """The tokens that could cross from part ``i`` into the next: those with a split ``head +
        tail`` (both nonempty) where ``tail`` goes on legally from the start of part ``i + 1``. They
        do not depend on part ``i``'s state, so they are found once; returned as a trie of the heads
        (``(children by byte, token ids whose head ends here)``), or None when there are too many
        (then the whole token trie is walked instead)."""
        with self._lock:
            if self._class_of(i) in self._cand_cache:
                return self._cand_cache[self._class_of(i)]
        start = self._closure(set(self._starts_after(i)))
        first = {b for b in range(256) if self._step_byte(start, b)}
        after: dict[bytes, frozenset[tuple[int, State]]] = {}
        root: _Node = ({}, [])
        pairs = 0
        result: _Node | None = root
        special = self.vocab.special_ids
        for t, data in enumerate(self.vocab.token_bytes):
            if len(data) < 2 or t in special:
                continue
            for k in range(1, len(data)):
                if data[k] not in first or not self._tail_viable(data[k:], start, after):
                    continue
                pairs += 1
                node = root
                for b in data[:k]:
                    node = node[0].setdefault(b, ({}, []))
                node[1].append(t)
            if pairs > _MAX_CANDIDATES or len(after) > _MAX_CANDIDATES:
                result = None
                break
        with self._lock:
            self._cand_cache[self._class_of(i)] = result
        return result

    def _tail_viable(
        self,
        tail: bytes,
        start: frozenset[tuple[int, State]],
        memo: dict[bytes, frozenset[tuple[int, State]]],
    ) -> bool:
        """Whether ``tail`` goes on legally from ``start`` (memoised by prefix)."""
        j = len(tail)
        while j and tail[:j] not in memo:
            j -= 1
        alts = memo[tail[:j]] if j else start
        while j < len(tail) and alts:
            alts = self._step_byte(alts, tail[j])
            j += 1
            memo[tail[:j]] = alts
        return bool(alts)

    def _end_nodes(self, i: int, s: State) -> list[int]:
        """Non-root trie nodes whose path takes part ``i`` from ``s`` to a complete state."""
        trie = self.vocab.trie
        dfa = self.dfas[i]
        if dfa is not None:
            st = np.zeros(trie.n_nodes, np.int64)
            st[0] = s
            table = dfa.transitions
            lv = trie.level_lo
            for d in range(1, len(lv) - 1):
                lo, hi = int(lv[d]), int(lv[d + 1])
                st[lo:hi] = table[st[trie.parent[lo:hi]], trie.byte[lo:hi]]
            ok = dfa.accepting[st]
            ok[0] = False
            return np.flatnonzero(ok).tolist()  # type: ignore[no-any-return]
        part = self.parts[i]
        out = []
        stack = [(0, s)]
        clo, chi = trie.child_lo, trie.child_hi
        while stack:
            n, ps = stack.pop()
            for c in range(int(clo[n]), int(chi[n])):
                if clo[c] == chi[c]:
                    continue  # a leaf: no token goes on past it into the next part
                nxt = part.advance_state(ps, self.vocab.size + int(trie.byte[c]))
                if nxt is not None:
                    if part.is_accepting_state(nxt):
                        out.append(c)
                    stack.append((c, nxt))
        return out

    def forced_bytes(self, state: State) -> bytes:
        forced = []
        for i, s in state:
            p = self.parts[i]
            if (p.is_accepting_state(s) and self._next[i] and i not in self._final
                    and not p.state_mask_words(s).any()):
                continue  # part i can only end here: the next part (in the set) decides
            forced.append(p.forced_bytes(s))
        return _common_prefix(forced)


def _tail_words(vocab: Vocabulary) -> Words:
    """All-ones words cut at ``vocab.size`` (clears the extended vocabulary's byte ids)."""
    words: Words = np.array(Mask.all(vocab.size).words, dtype=np.uint32)
    return words
