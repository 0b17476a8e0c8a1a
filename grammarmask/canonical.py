"""Canonical tokenization of forced text: an option that narrows a compiled grammar's masks.

An exact byte-level mask allows every tokenization of the output, but a model is trained on its
tokenizer's own (canonical) tokenization, and a non-canonical path (``{`` then ``"`` where the
tokenizer writes ``{"``) can derail it. :func:`canonical` wraps a :class:`CompiledGrammar` so that
wherever the grammar *forces* bytes, only the tokenizer's own first token of them is legal:

1. ``F`` is the forced text at the state (:meth:`CompiledGrammar.forced_bytes`), and ``T`` the
   tokenizer's encoding of the previous token's bytes followed by ``F`` (the previous token is
   context; when ``T`` does not start with that token, ``T`` is the encoding of ``F`` alone).
2. The tokens at the end of ``T`` that the text after ``F`` could merge with are not certain: the
   longest suffix of ``T``'s last four tokens (at most the longest token's length) that is a proper
   prefix of some token legal at its position, and the tokens covering it, are dropped.
3. If a token of ``T`` is left, it is the only legal token; otherwise the mask is the grammar's own
   (the canonical first token depends on text not yet written).

Where nothing is forced the mask is the grammar's own. This is the policy llguidance applies to
forced text (its ``ff_tokens`` and ``chop_tokens``), so under greedy decoding the two agree where
their languages agree. The forced bytes this wrapper reports are only the certain tokens' bytes, so
jump-forward (:meth:`Matcher.forced_tokens`) appends exactly the canonical tokens.

Exactness is kept where it matters: the narrowed mask is never empty when the grammar's is not, every
allowed token is legal in the grammar, and a tokenization that the tokenizer does not reproduce
byte for byte (``encode`` of text that decodes to other bytes, say an added prefix space) is not
used: the step keeps the grammar's full mask.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .cache import Lru, per_vocabulary
from .errors import GrammarError
from .grammar import CompiledGrammar, State, Words
from .mask import pack_bool
from .vocab import Vocabulary

__all__ = ["CanonicalForced", "canonical", "hf_encoder"]

Encode = Callable[[str], Sequence[int]]

_LOOKBACK = 4  # tokens at the end of T that may be chopped (llguidance's lookback)
_CACHE = 4096  # narrowed masks kept per wrapper, by (state, previous token)
_NO_TOKEN = -1


def hf_encoder(tokenizer: Any) -> Encode:
    """``text -> token ids`` without special tokens, from a transformers tokenizer (``encode``), a
    ``tokenizers.Tokenizer`` (``encode(...).ids``) or a plain callable returning ids."""
    if hasattr(tokenizer, "encode") and hasattr(tokenizer, "convert_ids_to_tokens"):
        return lambda text: list(tokenizer.encode(text, add_special_tokens=False))
    if hasattr(tokenizer, "encode") and hasattr(tokenizer, "id_to_token"):
        return lambda text: list(tokenizer.encode(text, add_special_tokens=False).ids)
    if callable(tokenizer):
        return tokenizer  # type: ignore[no-any-return]
    raise GrammarError(
        f"canonical() needs a tokenizer (transformers or tokenizers) or a callable text -> ids, "
        f"got {type(tokenizer).__name__}"
    )


def canonical(compiled: CompiledGrammar, tokenizer: Any) -> CanonicalForced:
    """``compiled`` with canonical forced text (see the module docstring); ``tokenizer`` as for
    :func:`hf_encoder`, the one ``compiled.vocab`` was built from.

    Raises
    ------
    GrammarError
        ``compiled`` is not a CompiledGrammar, or ``tokenizer`` has no usable ``encode``.
    """
    if isinstance(compiled, CanonicalForced):
        return compiled
    if not isinstance(compiled, CompiledGrammar):
        raise GrammarError(f"canonical() needs a CompiledGrammar, got {type(compiled).__name__}")
    return CanonicalForced(compiled, hf_encoder(tokenizer))


class _Sorted:
    """The vocabulary's normal tokens sorted by bytes: the tokens starting with a byte string form
    one contiguous range."""

    def __init__(self, vocab: Vocabulary) -> None:
        pairs = sorted((b, i) for i, b in enumerate(vocab.token_bytes) if b)
        self.keys = [b for b, _ in pairs]
        self.ids = np.array([i for _, i in pairs], dtype=np.int64)
        self.max_len = max((len(b) for b in self.keys), default=0)
        single = [-1] * 256
        for i, b in enumerate(vocab.token_bytes):
            if len(b) == 1 and single[b[0]] < 0:
                single[b[0]] = i
        self.single = single

    def starting_with(self, prefix: bytes, *, longer: bool) -> npt.NDArray[np.int64]:
        lo = bisect.bisect_left(self.keys, prefix)
        hi = bisect.bisect_left(self.keys, prefix + b"\xff" * (self.max_len + 1), lo)
        if longer and lo < hi and self.keys[lo] == prefix:
            lo += 1
        return self.ids[lo:hi]


def _sorted(vocab: Vocabulary) -> _Sorted:
    return per_vocabulary(vocab, "canonical_sorted", lambda: _Sorted(vocab))


def _bit(words: Words, t: int) -> bool:
    return bool((int(words[t >> 5]) >> (t & 31)) & 1)


class CanonicalForced(CompiledGrammar):
    """A compiled grammar whose forced text may only be written in the tokenizer's canonical
    tokens (see the module docstring). Its states are ``(inner state, previous token id)``.

    Build it with :func:`canonical`. Like every compiled grammar it is shared by any number of
    matchers; its caches are bounded. It cannot be pickled (the tokenizer's ``encode`` is a closure).
    """

    def __init__(self, inner: CompiledGrammar, encode: Encode) -> None:
        self.inner = inner
        self.vocab = inner.vocab
        self.encode = encode
        self._plans: Lru[Any, tuple[Words | None, bytes]] = Lru(_CACHE)
        self.fallbacks = 0  # steps where the tokenizer's encoding was unusable (full mask kept)
        # budget-aware decoding (grammarmask.completion) plans on the grammar's own completions
        self._completion_solver = lambda state: _inner_completion(inner, state)

    def __repr__(self) -> str:
        return f"<CanonicalForced {type(self.inner).__name__}>"

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("a CanonicalForced grammar cannot be pickled: wrap the unpickled inner grammar again")

    def initial_state(self) -> State:
        return (self.inner.initial_state(), _NO_TOKEN)

    def is_accepting_state(self, state: State) -> bool:
        return self.inner.is_accepting_state(state[0])

    def state_mask_words(self, state: State) -> Words:
        narrowed, _ = self._plan(state)
        return self.inner.state_mask_words(state[0]) if narrowed is None else narrowed

    def advance_state(self, state: State, token_id: int) -> State | None:
        narrowed, _ = self._plan(state)
        if narrowed is not None and not _bit(narrowed, token_id):
            return None
        nxt = self.inner.advance_state(state[0], token_id)
        return None if nxt is None else (nxt, token_id)

    def forced_bytes(self, state: State) -> bytes:
        """The bytes of the certain canonical tokens (a prefix of the grammar's forced bytes)."""
        return self._plan(state)[1]

    # --- the policy ------------------------------------------------------------------------------

    def _plan(self, state: State) -> tuple[Words | None, bytes]:
        """(narrowed mask words or None for the grammar's own, the certain tokens' bytes)."""
        try:
            return self._plans.get_or_make(state, lambda: self._make_plan(state))
        except TypeError:  # an unhashable inner state
            return self._make_plan(state)

    def _make_plan(self, state: State) -> tuple[Words | None, bytes]:
        inner_state, prev = state
        forced = self.inner.forced_bytes(inner_state)
        if not forced:
            return None, b""
        tokens = self._tokenize(forced, prev)
        if tokens is None:
            self.fallbacks += 1
            return None, b""
        legal = self.inner.state_mask_words(inner_state)
        keep = len(tokens) - self._chop(inner_state, forced, tokens)
        vocab = self.vocab
        if keep > 0 and _bit(legal, tokens[0]):
            certain = vocab.decode(tokens[:keep])
            return _single(tokens[0], vocab), certain
        return None, b""

    def _tokenize(self, forced: bytes, prev: int) -> list[int] | None:
        """The canonical tokens of ``forced`` after token ``prev`` (None: not reproducible)."""
        vocab = self.vocab
        text = _text(forced)
        if text is None:
            return None
        if prev != _NO_TOKEN and vocab.token_bytes[prev]:
            before = vocab.token_bytes[prev]
            both = _text(before + forced)
            if both is not None:
                ids = self._encode(both)
                if ids is not None and ids[:1] == [prev] and vocab.decode(ids) == before + forced:
                    return ids[1:] or None
        ids = self._encode(text)
        if ids is None or vocab.decode(ids) != forced:
            return None
        return ids

    def _encode(self, text: str) -> list[int] | None:
        try:
            ids = [int(t) for t in self.encode(text)]
        except Exception:  # a tokenizer that cannot encode this text: keep the full mask
            return None
        n = self.vocab.size
        if not ids or any(not 0 <= t < n or t in self.vocab.special_ids for t in ids):
            return None
        return ids

    def _chop(self, state: State, forced: bytes, tokens: list[int]) -> int:
        """How many tokens at the end of ``tokens`` the text after ``forced`` could merge with."""
        vocab, table = self.vocab, _sorted(self.vocab)
        tail = tokens[-_LOOKBACK:]
        suffix = vocab.decode(tail)
        start = len(forced) - len(suffix)  # where the suffix starts in forced
        first = max(0, len(suffix) - table.max_len)
        states = _byte_states(self.inner, state, forced, table.single)
        for off in range(first, len(suffix)):
            at = start + off
            s = states[at] if at < len(states) else None
            ext = table.starting_with(suffix[off:], longer=True)
            if ext.size and (s is None or _any_legal(self.inner.state_mask_words(s), ext)):
                chop_bytes, count = len(suffix) - off, 0
                total = 0
                while total < chop_bytes:
                    count += 1
                    total += len(vocab.token_bytes[tokens[-count]])
                return count
        return 0


def _inner_completion(inner: CompiledGrammar, state: State) -> bytes | None:
    from .completion import shortest_completion

    return shortest_completion(inner, state[0])


def _byte_states(inner: CompiledGrammar, state: State, forced: bytes, single: list[int]) -> list[State]:
    """The grammar's state after each prefix of ``forced`` (by single-byte tokens; the list stops
    where the vocabulary has no single-byte token for the next byte)."""
    out = [state]
    s = state
    for b in forced[:-1]:
        t = single[b]
        nxt = inner.advance_state(s, t) if t >= 0 else None
        if nxt is None:
            break
        s = nxt
        out.append(s)
    return out


def _any_legal(words: Words, ids: npt.NDArray[np.int64]) -> bool:
    bits = (words[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1
    return bool(bits.any())


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _single(t: int, vocab: Vocabulary) -> Words:
    legal = np.zeros(vocab.size, dtype=np.bool_)
    legal[t] = True
    return pack_bool(legal)
