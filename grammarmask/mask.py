"""Mask: a set of legal token ids as packed bits, and applying it to logits.

Layout (shared with XGrammar and vLLM): 32 tokens per ``uint32`` word, token ``i`` is bit ``i % 32`` of
word ``i // 32``. Bits past ``size`` in the last word are always zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from ._args import as_int
from .errors import GrammarError

__all__ = ["Mask", "n_words"]

Words = npt.NDArray[np.uint32]


def n_words(size: int) -> int:
    """Words needed for a mask over ``size`` tokens."""
    return (size + 31) // 32


def _size(size: object, what: str) -> int:
    n = as_int(size, what)
    if n < 0:
        raise GrammarError(f"{what} must be >= 0, got {n}")
    return n


def _tail_mask(size: int) -> np.uint32:
    r = size % 32
    tail: np.uint32 = np.uint32(0xFFFFFFFF if r == 0 else (1 << r) - 1)
    return tail


class Mask:
    """An immutable set of token ids over a vocabulary of ``size`` tokens, as packed uint32 words.

    Raises
    ------
    GrammarError
        ``size`` is not an integer >= 0, or ``words`` does not hold ``n_words(size)`` words.
    """

    __slots__ = ("size", "words")

    def __init__(self, words: npt.ArrayLike, size: int) -> None:
        if type(size) is not int or size < 0:
            size = _size(size, "Mask: size")
        w = np.asarray(words)
        if w.dtype != np.uint32:
            w = w.astype(np.uint32) if w.dtype != np.int32 else w.view(np.uint32)
        if w.shape != (n_words(size),):
            raise GrammarError(f"a mask over {size} tokens needs {n_words(size)} words, got shape {w.shape}")
        self.words: Words = w
        self.size = size

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def none(cls, size: int) -> Mask:
        """The empty set."""
        size = _size(size, "Mask.none: size")
        return cls(np.zeros(n_words(size), np.uint32), size)

    @classmethod
    def all(cls, size: int) -> Mask:
        """Every token id in ``range(size)``."""
        size = _size(size, "Mask.all: size")
        w = np.full(n_words(size), 0xFFFFFFFF, np.uint32)
        if w.size:
            w[-1] &= _tail_mask(size)
        return cls(w, size)

    @classmethod
    def from_token_ids(cls, ids: Iterable[int] | npt.NDArray[Any], size: int) -> Mask:
        """The set of the given ids (each must be in ``range(size)``)."""
        size = _size(size, "Mask.from_token_ids: size")
        arr = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= size):
            raise GrammarError(f"token id out of range for a vocabulary of {size}")
        return cls(words_from_ids(arr, size), size)

    @classmethod
    def from_bool(cls, legal: npt.ArrayLike) -> Mask:
        """From a boolean vector (True = legal)."""
        b = np.asarray(legal, dtype=bool)
        return cls(pack_bool(b), b.shape[0])

    # --- queries --------------------------------------------------------------------------

    def to_bool(self) -> npt.NDArray[np.bool_]:
        """A boolean vector of length ``size``."""
        bits = np.unpackbits(self.words.view(np.uint8), bitorder="little")
        return bits[: self.size].astype(bool)

    def token_ids(self) -> npt.NDArray[np.int64]:
        """The legal ids, ascending."""
        return np.flatnonzero(self.to_bool())

    def __len__(self) -> int:
        return int(np.unpackbits(self.words.view(np.uint8)).sum())

    def __contains__(self, token_id: object) -> bool:
        if not isinstance(token_id, (int, np.integer)):
            return False
        i = int(token_id)
        return 0 <= i < self.size and bool((int(self.words[i >> 5]) >> (i & 31)) & 1)

    def __iter__(self) -> Iterator[int]:
        return (int(i) for i in self.token_ids())

    def __bool__(self) -> bool:
        return bool(self.words.any())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Mask)
            and self.size == other.size
            and bool(np.array_equal(self.words, other.words))
        )

    def __hash__(self) -> int:
        return hash((self.size, self.words.tobytes()))

    def __repr__(self) -> str:
        return f"<Mask {len(self)}/{self.size} legal>"

    # --- set operations -------------------------------------------------------------------

    def _check(self, other: Mask) -> None:
        if not isinstance(other, Mask) or other.size != self.size:
            raise GrammarError("masks over different vocabulary sizes cannot be combined")

    def __and__(self, other: Mask) -> Mask:
        self._check(other)
        return Mask(self.words & other.words, self.size)

    def __or__(self, other: Mask) -> Mask:
        self._check(other)
        return Mask(self.words | other.words, self.size)

    def __invert__(self) -> Mask:
        w = ~self.words
        if w.size:
            w[-1] &= _tail_mask(self.size)
        return Mask(w, self.size)

    def __sub__(self, other: Mask) -> Mask:
        self._check(other)
        return Mask(self.words & ~other.words, self.size)

    # --- logits ---------------------------------------------------------------------------

    def apply(self, logits: Any) -> Any:
        """Set illegal entries of ``logits`` to ``-inf`` in place and return them.

        Works on numpy arrays and torch tensors, 1-D ``[vocab]`` or batched ``[batch, vocab]`` (the
        same mask for every row). ``logits`` may be wider than ``size`` (padding ids are illegal) but
        not narrower.
        """
        width = logits.shape[-1]
        if width < self.size:
            raise GrammarError(f"logits have {width} entries, the mask covers {self.size} tokens")
        legal = self.to_bool()
        if width > self.size:
            legal = np.concatenate([legal, np.zeros(width - self.size, bool)])
        if isinstance(logits, np.ndarray):
            logits[..., ~legal] = -np.inf
            return logits
        import torch  # only reached with a torch tensor

        illegal = torch.from_numpy(~legal).to(logits.device)
        logits.masked_fill_(illegal, float("-inf"))
        return logits


def pack_bool(legal: npt.NDArray[np.bool_]) -> Words:
    """Pack a boolean vector into mask words."""
    size = legal.shape[0]
    padded = np.zeros(n_words(size) * 32, dtype=bool)
    padded[:size] = legal
    return np.packbits(padded, bitorder="little").view("<u4").astype(np.uint32, copy=False)


def words_from_ids(ids: npt.NDArray[Any], size: int) -> Words:
    """Mask words with the given ids set (ids must be in range)."""
    legal = np.zeros(size, dtype=bool)
    legal[ids] = True
    return pack_bool(legal)
