"""Composition: the intersection ``a & b``, the union ``a | b`` and (in :mod:`grammarmask.sequence`)
the concatenation ``a + b`` of grammars.

When every part is regular (``to_dfa()`` is not None) the composite compiles to one byte DFA
(:func:`grammarmask.automata.product` / :func:`~grammarmask.automata.union`) and uses the fast DFA
index; a product automaton is trimmed, so an intersection of regular grammars never dead-ends.
Otherwise the parts run side by side: an intersection's mask is the AND of its parts' masks (which
can dead-end: ``NoLegalContinuation`` is then the honest answer), a union's the OR of its live parts'
(a part that rejected the output so far is dropped: its state becomes ``None``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable
from typing import Any

import numpy as np
import numpy.typing as npt

from .engine import compile_dfa
from .errors import GrammarError
from .grammar import CompiledGrammar, Grammar
from .vocab import Vocabulary

__all__ = ["And", "Union"]

Words = npt.NDArray[np.uint32]
State = Any


def _flatten(cls: type, parts: tuple[Grammar, ...], what: str) -> tuple[Grammar, ...]:
    flat: list[Grammar] = []
    for p in parts:
        if not isinstance(p, Grammar):
            raise GrammarError(f"{what} takes grammars, got {type(p).__name__}")
        flat.extend(p.parts if isinstance(p, cls) else [p])  # type: ignore[attr-defined]
    if len(flat) < 2:
        raise GrammarError(f"{what} needs at least two grammars")
    return tuple(flat)


def _parts_key(parts: tuple[Grammar, ...]) -> Hashable | None:
    keys = [p.cache_key() for p in parts]
    if any(k is None for k in keys):
        return None
    return tuple((type(p).__qualname__, k) for p, k in zip(parts, keys, strict=True))


def _dfas(parts: tuple[Grammar, ...]) -> list[Any] | None:
    dfas = [p.to_dfa() for p in parts]
    return None if any(d is None for d in dfas) else dfas


def _fold(op: Any, dfas: list[Any]) -> Any:
    """``op`` over the DFAs left to right, or None when the result is too large (the parts then run
    side by side instead)."""
    out = dfas[0]
    try:
        for d in dfas[1:]:
            out = op(out, d)
    except GrammarError:
        return None
    return out


class _Composite(Grammar):
    """What ``And``, ``Union`` and ``Sequence`` share: flattened parts, a content key, and one DFA
    (combined by ``automata.<_dfa_op>``) when every part is regular; otherwise ``_side_by_side``."""

    parts: tuple[Grammar, ...]
    _symbol = ""
    _dfa_op = ""

    def __init__(self, *parts: Grammar) -> None:
        self.parts = _flatten(type(self), parts, type(self).__name__)

    def __repr__(self) -> str:
        return "(" + f" {self._symbol} ".join(repr(p) for p in self.parts) + ")"

    def cache_key(self) -> Hashable | None:
        return _parts_key(self.parts)

    def special_tokens(self) -> frozenset[str | int]:
        return frozenset().union(*(p.special_tokens() for p in self.parts))

    def where_named(self, token: str | int) -> str:
        return next(p.where_named(token) for p in self.parts if token in p.special_tokens())

    def to_dfa(self) -> Any:
        dfas = _dfas(self.parts)
        if dfas is None:
            return None
        from . import automata

        return _fold(getattr(automata, self._dfa_op), dfas)

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        dfa = self.to_dfa()
        if dfa is not None:
            return compile_dfa(dfa, vocab)
        return self._side_by_side(vocab)

    @abstractmethod
    def _side_by_side(self, vocab: Vocabulary) -> CompiledGrammar:
        """The compiled form when some part is not regular (or the one DFA would be too large)."""


class And(_Composite):
    """All of the grammars at once (``a & b``): a token is legal iff every part allows it; the output
    is complete iff every part's is.

    When every part is regular this compiles to one product automaton, which never dead-ends.
    Otherwise the parts run side by side and a dead end raises ``NoLegalContinuation`` from
    ``Matcher.mask()``.
    """

    _symbol = "&"
    _dfa_op = "product"

    def _side_by_side(self, vocab: Vocabulary) -> CompiledGrammar:
        return _AndCompiled(vocab, [p.compile(vocab) for p in self.parts])


class _PartsCompiled(CompiledGrammar):
    """Compiled parts run side by side; the state is a tuple with one entry per part."""

    def __init__(self, vocab: Vocabulary, parts: list[CompiledGrammar]) -> None:
        self.vocab = vocab
        self.parts = parts

    def initial_state(self) -> State:
        return tuple(p.initial_state() for p in self.parts)


class _AndCompiled(_PartsCompiled):
    """State: a tuple with each part's state."""

    def state_mask_words(self, state: State) -> Words:
        words = self.parts[0].state_mask_words(state[0])
        for p, s in zip(self.parts[1:], state[1:], strict=True):
            words = words & p.state_mask_words(s)
        return words

    def advance_state(self, state: State, token_id: int) -> State | None:
        out = []
        for p, s in zip(self.parts, state, strict=True):
            n = p.advance_state(s, token_id)
            if n is None:
                return None
            out.append(n)
        return tuple(out)

    def is_accepting_state(self, state: State) -> bool:
        return all(p.is_accepting_state(s) for p, s in zip(self.parts, state, strict=True))

    def forced_bytes(self, state: State) -> bytes:
        # Every continuation satisfies every part: the longest part's run, if the others agree.
        best = b""
        for p, s in zip(self.parts, state, strict=True):
            f = p.forced_bytes(s)
            if f.startswith(best):
                best = f
            elif not best.startswith(f):
                return b""
        return best


class Union(_Composite):
    """Any of the grammars: the output must be a sentence of at least one part (``a | b``).

    A token is legal iff some part allows it; EOS iff some part is complete.

    Examples
    --------
    >>> import grammarmask as gm
    >>> from grammarmask.compose import Union
    >>> g = Union(gm.Regex(r"[0-9]+"), gm.Choice(["yes", "no"]))
    """

    _symbol = "|"
    _dfa_op = "union"

    def _side_by_side(self, vocab: Vocabulary) -> CompiledGrammar:
        return _UnionCompiled(vocab, [p.compile(vocab) for p in self.parts])


class _UnionCompiled(_PartsCompiled):
    """State: a tuple with one entry per part, the part's state or None once the part rejected."""

    def state_mask_words(self, state: State) -> Words:
        out: Words | None = None
        for p, s in zip(self.parts, state, strict=True):
            if s is not None:
                w = p.state_mask_words(s)
                out = w.copy() if out is None else np.bitwise_or(out, w, out=out)
        return out if out is not None else np.zeros(self.vocab.n_words, np.uint32)

    def advance_state(self, state: State, token_id: int) -> State | None:
        nxt = tuple(
            None if s is None else p.advance_state(s, token_id)
            for p, s in zip(self.parts, state, strict=True)
        )
        return None if all(s is None for s in nxt) else nxt

    def is_accepting_state(self, state: State) -> bool:
        return any(s is not None and p.is_accepting_state(s) for p, s in zip(self.parts, state, strict=True))

    def forced_bytes(self, state: State) -> bytes:
        forced = [p.forced_bytes(s) for p, s in zip(self.parts, state, strict=True) if s is not None]
        return _common_prefix(forced)


def _common_prefix(items: list[bytes]) -> bytes:
    if not items:
        return b""
    lo, hi = min(items), max(items)
    n = 0
    while n < len(lo) and lo[n] == hi[n]:
        n += 1
    return lo[:n]
