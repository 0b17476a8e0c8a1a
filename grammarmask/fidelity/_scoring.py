"""Next-token log-probabilities for many sequences at once, and the checks shared by the enumeration
and the samplers of :mod:`grammarmask.fidelity`.

A model is a :class:`~grammarmask.models.LogitsModel` (``model(token_ids) -> logits``). When it also
has ``batch_logits(list_of_token_id_lists) -> [n, vocab]`` (every list the same length, as they are
here: a breadth-first level of a tree, or the live particles of one step), that is called once per
chunk of ``batch_size`` sequences instead of once per sequence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import GrammarError, NoLegalContinuation
from ..grammar import Matcher

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def check_temperature(temperature: object, caller: str) -> float:
    """``temperature`` as a float > 0 (the distribution is ``softmax(logits / temperature)``)."""
    ok = isinstance(temperature, (int, float, np.integer, np.floating)) and not isinstance(temperature, bool)
    if not ok or not math.isfinite(float(temperature)) or float(temperature) <= 0:  # type: ignore[arg-type]
        raise GrammarError(
            f"{caller}: temperature must be a finite number > 0 (the target is a distribution; greedy "
            f"decoding has none), got {temperature!r}"
        )
    return float(temperature)  # type: ignore[arg-type]


def check_positive(value: object, what: str) -> int:
    """``value`` as an int >= 1, else a GrammarError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise GrammarError(f"{what} must be an integer >= 1, got {value!r}")
    return int(value)


def _as_matrix(logits: Any, n: int, vocab_size: int) -> F64:
    if not isinstance(logits, np.ndarray) and hasattr(logits, "detach"):  # a torch tensor
        logits = logits.detach().float().cpu().numpy()
    arr = np.asarray(logits)
    if arr.dtype.kind not in "iuf":
        raise GrammarError(f"the model returned logits of dtype {arr.dtype}; expected real numbers")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] != n:
        raise GrammarError(f"the model returned logits of shape {arr.shape} for {n} sequences")
    if arr.shape[1] < vocab_size:
        raise GrammarError(
            f"the model returned {arr.shape[1]} logits but the vocabulary has {vocab_size} tokens "
            "(logits may be longer, never shorter)"
        )
    return arr


def next_logprobs(model: Any, sequences: Sequence[list[int]], vocab_size: int, temperature: float,
                  batch_size: int) -> list[F64]:
    """``log softmax(logits / temperature)`` after each sequence (one row each, over the model's whole
    output, padding ids included: they are illegal but hold probability, as in :func:`grammarmask.sample`).

    Raises
    ------
    GrammarError
        Logits of the wrong shape or dtype, or NaN / +inf among them.
    """
    rows: list[F64] = []
    batch = getattr(model, "batch_logits", None)
    for start in range(0, len(sequences), batch_size):
        chunk = list(sequences[start:start + batch_size])
        if batch is not None:
            mat = _as_matrix(batch(chunk), len(chunk), vocab_size)
        else:
            mat = np.stack([_as_matrix(model(s), 1, vocab_size)[0] for s in chunk])
        if np.isnan(mat).any() or np.isposinf(mat).any():
            raise GrammarError("the model returned NaN or +inf logits: its distribution is undefined")
        z = mat / temperature
        zmax = z.max(axis=1, keepdims=True)
        lse = zmax + np.log(np.exp(z - zmax).sum(axis=1, keepdims=True))
        rows.extend(z - lse)
    return rows


def legal_ids(matcher: Matcher) -> I64:
    """The legal next token ids (EOS included when the output is complete); empty at a dead end (a
    prefix of the language that no token of the vocabulary continues, as in a vocabulary without
    single-byte tokens)."""
    try:
        return matcher.mask().token_ids()
    except NoLegalContinuation:
        return np.zeros(0, dtype=np.int64)


def logsumexp(x: F64) -> float:
    """``log(sum(exp(x)))`` (``-inf`` for an empty or all ``-inf`` array)."""
    if x.size == 0:
        return -math.inf
    m = float(x.max())
    if m == -math.inf:
        return -math.inf
    return m + math.log(float(np.exp(x - m).sum()))
