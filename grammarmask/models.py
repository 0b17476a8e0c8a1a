"""The model protocol :func:`grammarmask.generate` drives, and fake models that ship for tests.

A model is anything callable as ``model(token_ids) -> logits``: given the whole sequence so far (prompt
and generated tokens), it returns the next-token logits as a 1-D numpy array or torch tensor of the
model's vocabulary size. The fakes are deterministic, need no download, and make decoding tests exact.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .errors import GrammarError

__all__ = ["LogitsModel", "RandomModel", "ScriptedModel", "UniformModel"]

F32 = npt.NDArray[np.float32]


@runtime_checkable
class LogitsModel(Protocol):
    """Anything that maps the token ids so far to next-token logits (1-D, length = vocabulary size)."""

    def __call__(self, token_ids: Sequence[int]) -> Any: ...


def _check_size(vocab_size: int) -> int:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise GrammarError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    return int(vocab_size)


class UniformModel:
    """Every token equally likely at every step (all logits 0)."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = _check_size(vocab_size)
        self._logits = np.zeros(self.vocab_size, dtype=np.float32)
        self._logits.flags.writeable = False

    def __repr__(self) -> str:
        return f"UniformModel({self.vocab_size})"

    def __call__(self, token_ids: Sequence[int]) -> F32:
        return self._logits


class ScriptedModel:
    """Prefers a scripted token sequence: at generated position ``k`` it gives ``script[k]`` logit
    ``high`` and every other token ``low``; past the end of the script it prefers ``then`` (for example
    EOS), or is uniform when ``then`` is None.

    The position is ``len(token_ids) - prompt_length``, so the model keeps its place even when the
    caller skips calls for tokens the grammar forced.
    """

    def __init__(
        self,
        script: Sequence[int],
        vocab_size: int,
        *,
        prompt_length: int = 0,
        then: int | None = None,
        high: float = 10.0,
        low: float = 0.0,
    ) -> None:
        self.vocab_size = _check_size(vocab_size)
        self.script = tuple(int(t) for t in script)
        for t in (*self.script, *(() if then is None else (then,))):
            if not 0 <= t < self.vocab_size:
                raise GrammarError(f"scripted token {t} is outside the vocabulary (size {self.vocab_size})")
        self.prompt_length = int(prompt_length)
        self.then = then
        self.high = float(high)
        self.low = float(low)

    def __repr__(self) -> str:
        return f"ScriptedModel({list(self.script)!r}, {self.vocab_size})"

    def __call__(self, token_ids: Sequence[int]) -> F32:
        k = len(token_ids) - self.prompt_length
        logits = np.full(self.vocab_size, self.low, dtype=np.float32)
        target = self.script[k] if 0 <= k < len(self.script) else self.then
        if target is not None:
            logits[target] = self.high
        return logits


class RandomModel:
    """Random standard-normal logits (times ``scale``) that depend only on ``seed`` and the token ids
    so far: the same sequence always gets the same logits."""

    def __init__(self, vocab_size: int, seed: int = 0, *, scale: float = 3.0) -> None:
        self.vocab_size = _check_size(vocab_size)
        self.seed = int(seed)
        self.scale = float(scale)

    def __repr__(self) -> str:
        return f"RandomModel({self.vocab_size}, seed={self.seed})"

    def __call__(self, token_ids: Sequence[int]) -> F32:
        h = hashlib.blake2b(np.asarray(list(token_ids), dtype=np.int64).tobytes(), digest_size=8)
        rng = np.random.default_rng([self.seed, int.from_bytes(h.digest(), "little")])
        return (rng.standard_normal(self.vocab_size) * self.scale).astype(np.float32)
