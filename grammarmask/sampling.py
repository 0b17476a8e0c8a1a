"""Masked sampling: draw the next token from the model's distribution conditioned on legality.

The pipeline (DESIGN §4, in this order, never reordered)::

    mask (legal only) -> temperature -> repetition penalty -> softmax -> top-k -> top-p -> draw

Masking first is what makes the result exact: the sampler draws from ``p_C(t) = p(t) / Z`` over the
legal set, and top-k / top-p then act on that conditional distribution, so the nucleus is never empty
and never holds an illegal token. An empty mask raises :class:`~grammarmask.errors.NoLegalContinuation`
before any softmax (never NaN).

Diagnostics (the seeds' "work the grammar did"): at every step ``Z`` is the model's probability of the
legal set at temperature 1, and ``-log Z = KL(p_C || p)`` for that step. Summed along a path,
``sum_t -log Z_t = log p_C(path) / p(path)``; its expectation under ``p_C`` is the sequence-level
``KL(p_C || p)``. :class:`SequenceStats` reports it in nats and bits, in total and per token.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ._args import as_int_list
from .errors import GrammarError, NoLegalContinuation
from .mask import Mask

__all__ = ["SequenceStats", "StepStats", "sample", "sample_with_stats"]

F64 = npt.NDArray[np.float64]
RngLike = np.random.Generator | int | None
_LN2 = math.log(2.0)


@dataclass(frozen=True)
class StepStats:
    """One decoding step.

    Attributes
    ----------
    token_id
        The token taken.
    n_legal
        How many tokens the mask allowed (EOS included).
    z
        The model's probability of the legal set at temperature 1 (``None`` when the step was forced
        by the grammar and the model was not called).
    neg_log_z
        ``-log z`` in nats: ``KL(p_C || p)`` for this step (``None`` with ``z``).
    forced
        True when the grammar forced this token and no model call was made (jump-forward).
    """

    token_id: int
    n_legal: int
    z: float | None
    neg_log_z: float | None
    forced: bool = False


@dataclass(frozen=True)
class SequenceStats:
    """The per-step diagnostics of one sequence, summed.

    ``total_nats = sum(-log Z_t)`` over the steps where the model was called (forced steps, skipped by
    jump-forward, have no model distribution and are counted in ``n_forced``). ``nats_per_token`` and
    ``bits_per_token`` divide by ``n_scored``.
    """

    n_steps: int
    n_scored: int
    n_forced: int
    total_nats: float

    @property
    def total_bits(self) -> float:
        """``total_nats`` in bits."""
        return self.total_nats / _LN2

    @property
    def nats_per_token(self) -> float:
        """Mean ``-log Z`` per scored step (0 when nothing was scored)."""
        return self.total_nats / self.n_scored if self.n_scored else 0.0

    @property
    def bits_per_token(self) -> float:
        """Mean ``-log2 Z`` per scored step."""
        return self.nats_per_token / _LN2

    @classmethod
    def from_steps(cls, steps: Iterable[StepStats]) -> SequenceStats:
        """Sum a sequence of step records."""
        n = scored = forced = 0
        total = 0.0
        for s in steps:
            n += 1
            if s.neg_log_z is not None:
                scored += 1
                total += s.neg_log_z
            if s.forced:
                forced += 1
        return cls(n_steps=n, n_scored=scored, n_forced=forced, total_nats=total)


def sample(
    logits: Any,
    mask: Mask | None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    previous_tokens: Sequence[int] = (),
    rng: RngLike = None,
) -> int:
    """Draw one legal token id from 1-D ``logits`` (numpy array or torch tensor).

    Parameters
    ----------
    logits
        The model's next-token logits. May be longer than ``mask.size`` (ids past it are padding and
        illegal), never shorter.
    mask
        The legal tokens (``None``: every id is legal).
    temperature
        Divides the logits; ``0`` means greedy (the most likely legal token, lowest id on ties; no
        random number is drawn).
    top_k, top_p
        Keep the ``top_k`` most likely legal tokens (ties at the boundary are kept), then the smallest
        most-likely set whose probability reaches ``top_p``; both act on the masked distribution.
    repetition_penalty
        CTRL-style: logits of ``previous_tokens`` are divided by it when positive, multiplied when
        negative.
    previous_tokens
        The ids already in the context (integers; the repetition penalty's input).
    rng
        A ``numpy.random.Generator`` or an int seed >= 0. Exactly one ``rng.random()`` is drawn per non-greedy
        call, so an all-legal mask leaves both the sample and the generator state unchanged.

    Raises
    ------
    NoLegalContinuation
        The mask is empty, or the model gives every legal token probability 0.
    GrammarError
        Logits of the wrong shape, length or dtype (str, complex, bool and object logits are refused,
        not cast), NaN or +inf among the legal logits, a bad option value, a ``previous_tokens``
        entry that is not an integer, or an ``rng`` that is neither a Generator nor an int seed >= 0.
    """
    previous = as_int_list(previous_tokens, "sample: previous_tokens")
    token, _ = _sample(logits, mask, temperature, top_k, top_p, repetition_penalty, previous, rng,
                       want_stats=False)
    return token


def sample_with_stats(
    logits: Any,
    mask: Mask | None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    previous_tokens: Sequence[int] = (),
    rng: RngLike = None,
) -> tuple[int, StepStats]:
    """Like :func:`sample`, and also return the step's :class:`StepStats` (``Z`` and ``-log Z``).

    Costs one extra pass over the logits (a log-sum-exp over the whole vocabulary).
    """
    previous = as_int_list(previous_tokens, "sample_with_stats: previous_tokens")
    token, stats = _sample(logits, mask, temperature, top_k, top_p, repetition_penalty, previous,
                           rng, want_stats=True)
    assert stats is not None
    return token, stats


# --- the pipeline ---------------------------------------------------------------------------------


def _sample(
    logits: Any,
    mask: Mask | None,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    repetition_penalty: float | None,
    previous_tokens: Sequence[int],
    rng: RngLike,
    *,
    want_stats: bool,
) -> tuple[int, StepStats | None]:
    """The pipeline; ``previous_tokens`` must already be checked to be ints (``as_int_list``)."""
    _check_options(temperature, top_k, top_p, repetition_penalty)
    if rng is not None and not isinstance(rng, np.random.Generator):
        _check_seed(rng)  # up front, so that a greedy call refuses a bad rng too
    z_all = _as_float_vector(logits)
    legal = _legal_ids(mask, z_all.shape[0])
    if legal.size == 0:  # 1. mask: nothing legal -> fail before any softmax
        raise NoLegalContinuation("the mask allows no token: the grammar has no legal continuation here")
    z = z_all[legal].astype(np.float64)
    zmax = float(z.max())
    if math.isnan(zmax):
        raise GrammarError("the logits contain NaN at a legal token id")
    if zmax == math.inf:
        raise GrammarError("the logits contain +inf at a legal token id")
    if zmax == -math.inf:
        raise NoLegalContinuation(
            "the model gives every legal token probability 0 (all their logits are -inf)"
        )
    stats = _step_stats(z_all, z, zmax) if want_stats else None

    if temperature not in (0.0, 1.0):
        with np.errstate(over="ignore"):
            scaled = z / temperature  # 2. temperature
        if math.isfinite(float(scaled.max())):
            z = scaled
        else:
            temperature = 0.0  # so cold that the logits overflow: take the T -> 0 limit (greedy)
    if temperature == 0.0:  # greedy: temperature and softmax keep the order, penalty is scale-free
        z = _penalize(z, legal, repetition_penalty, previous_tokens)
        token = int(legal[int(np.argmax(z))])
        return token, _with_token(stats, token, legal.size)

    z = _penalize(z, legal, repetition_penalty, previous_tokens)  # 3. repetition penalty
    p = np.exp(z - z.max())  # 4. softmax, unnormalised: every step below only uses ratios
    if top_k is not None and top_k < p.size:  # 5. top-k among legal (ties at the boundary kept)
        kth = p[np.argpartition(p, p.size - top_k)[p.size - top_k]]
        p = np.where(p >= kth, p, 0.0)
    if top_p is not None and top_p < 1.0:  # 6. top-p on the (renormalised) survivors
        p = np.where(_nucleus(p, top_p), p, 0.0)
    token = int(legal[_draw(p, _rng(rng))])  # 7. draw
    return token, _with_token(stats, token, legal.size)


def _check_options(temperature: float, top_k: int | None, top_p: float | None, penalty: float | None) -> None:
    if not (_is_number(temperature) and math.isfinite(temperature) and temperature >= 0):
        raise GrammarError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer))
                              or top_k < 1):
        raise GrammarError(f"top_k must be an integer >= 1 or None, got {top_k!r}")
    if top_p is not None and not (_is_number(top_p) and 0.0 < top_p <= 1.0):
        raise GrammarError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    if penalty is not None and not (_is_number(penalty) and math.isfinite(penalty) and penalty > 0):
        raise GrammarError(f"repetition_penalty must be a finite number > 0 or None, got {penalty!r}")


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _as_float_vector(logits: Any) -> npt.NDArray[np.floating[Any]]:
    """1-D float32/float64 numpy logits (torch tensors are moved to the CPU; half types widened)."""
    if not isinstance(logits, np.ndarray) and hasattr(logits, "detach"):  # a torch tensor
        t = logits.detach()
        if str(t.dtype) not in ("torch.float32", "torch.float64"):
            t = t.float()
        logits = t.cpu().numpy()
    arr = np.asarray(logits)
    if arr.dtype not in (np.float32, np.float64):
        if arr.dtype.kind not in "iuf":  # no silent cast of str, complex, bool or object logits
            raise GrammarError(f"logits must be real numbers (an int or float dtype), got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
    if arr.ndim != 1:
        raise GrammarError(f"sample() takes 1-D logits [vocab], got shape {tuple(arr.shape)}")
    return arr


def _legal_ids(mask: Mask | None, width: int) -> npt.NDArray[np.int64]:
    if mask is None:
        return np.arange(width, dtype=np.int64)
    if not isinstance(mask, Mask):
        raise GrammarError(f"mask must be a grammarmask.Mask or None, got {type(mask).__name__}")
    if width < mask.size:
        raise GrammarError(
            f"the logits have {width} entries but the vocabulary has {mask.size} tokens "
            "(logits may be longer, with the extra ids treated as padding, never shorter)"
        )
    return mask.token_ids()


def _logsumexp(x: npt.NDArray[np.floating[Any]], xmax: float) -> float:
    # exp in the logits' own dtype (float32 stays float32: one pass over the vocabulary), sum in float64
    return xmax + math.log(float(np.exp(x - x.dtype.type(xmax)).sum(dtype=np.float64)))


def _step_stats(z_all: npt.NDArray[np.floating[Any]], z_legal: F64, zmax_legal: float) -> StepStats:
    amax = float(z_all.max())
    if math.isnan(amax) or amax == math.inf:
        raise GrammarError("the logits contain NaN or +inf: the model's probabilities are undefined")
    neg_log_z = max(0.0, _logsumexp(z_all, amax) - _logsumexp(z_legal, zmax_legal))
    return StepStats(token_id=-1, n_legal=0, z=math.exp(-neg_log_z), neg_log_z=neg_log_z)


def _with_token(stats: StepStats | None, token: int, n_legal: int) -> StepStats | None:
    if stats is None:
        return None
    return StepStats(token_id=token, n_legal=n_legal, z=stats.z, neg_log_z=stats.neg_log_z)


def _penalize(z: F64, legal: npt.NDArray[np.int64], penalty: float | None, previous: Sequence[int]) -> F64:
    if penalty is None or penalty == 1.0 or len(previous) == 0:
        return z
    seen = np.isin(legal, np.asarray(previous, dtype=np.int64))
    if not seen.any():
        return z
    z = z.copy()
    hit = z[seen]
    z[seen] = np.where(hit > 0, hit / penalty, hit * penalty)
    return z


def _nucleus(p: F64, top_p: float) -> npt.NDArray[np.bool_]:
    """The smallest most-likely set whose mass reaches ``top_p`` of the total (never empty).

    Ties are ordered by id. Only the head of the distribution is sorted: the ``m`` largest (with every
    tie of the ``m``-th) for growing ``m`` until they hold enough mass, which is the same prefix a full
    stable sort would give.
    """
    keep = np.zeros(p.size, dtype=bool)
    alive = np.flatnonzero(p)  # after top-k most entries may be zero: never sort those
    if alive.size < p.size:
        keep[alive[_nucleus(p[alive], top_p)]] = True
        return keep
    target = top_p * float(p.sum())
    m = 64
    while True:
        if m >= p.size:
            cand = np.arange(p.size)
            break
        kth = np.partition(p, p.size - m)[p.size - m]
        cand = np.flatnonzero(p >= kth)
        if float(p[cand].sum()) >= target:
            break
        m *= 4
    order = cand[np.argsort(-p[cand], kind="stable")]
    sorted_p = p[order]
    before = np.cumsum(sorted_p) - sorted_p
    keep[order[before < target]] = True  # the first token always stays (before = 0)
    return keep


def _draw(p: F64, rng: np.random.Generator) -> int:
    """Inverse-CDF draw over the candidates in id order, from exactly one uniform number."""
    cum = np.cumsum(p)
    u = rng.random() * cum[-1]
    i = int(np.searchsorted(cum, u, side="right"))
    i = min(i, p.size - 1)
    while p[i] == 0.0:  # only reachable through rounding at the top end
        i -= 1
    return i


def _rng(rng: RngLike) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(None if rng is None else _check_seed(rng))


def _check_seed(seed: object, name: str = "rng") -> int:
    """``seed`` as an int seed (>= 0), else a GrammarError naming the argument ``name``."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        return int(seed)
    got = repr(seed) if isinstance(seed, (int, np.integer)) else type(seed).__name__
    what = "a numpy.random.Generator, an int seed >= 0 or None" if name == "rng" else "an int >= 0 or None"
    raise GrammarError(f"{name} must be {what}, got {got}")
