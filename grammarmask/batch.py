"""Batch masks: fill one ``[batch, n_words]`` array from many matchers (one row each).

Serving engines keep one packed mask buffer per decoding step (the XGrammar/vLLM layout, see
:class:`grammarmask.Mask`) and ask every live sequence for its row. A row whose state was seen before
is a cached mask copied in place, which costs less than handing work to a thread; so the default is
one thread, and a caller's thread pool is used only when given (``executor=``). That pays off when
many rows are first visits to new grammar states; measure with ``benchmarks/bench_batch.py`` and
``benchmarks/bench_batch_engines.py``.

Rows of native CFG grammars (every ``Lark``, ``Gbnf`` and ``JsonSchema`` on the native engine) are
filled in Rust by a ``grammarmask._engine.RowJob``: the calling thread and the pool's workers each
let go of the GIL once, take rows one at a time from a shared counter, and write them into the array
(the caller takes rows too, so a worker slow to wake only takes fewer; one that wakes after the last
row was taken writes nothing and is not waited for). Other rows are filled by the calling thread
meanwhile, through :meth:`~grammarmask.grammar.CompiledGrammar.state_row`. (One Python call per row
on two threads handed the GIL back and forth twice a row, and a cold batch took as long as on one.)
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np
import numpy.typing as npt

from .errors import GrammarError, NoLegalContinuation
from .grammar import Matcher

__all__ = ["allocate_masks", "apply_token_bitmask_inplace", "fill_masks"]


def allocate_masks(batch: int, n_words: int, dtype: Any = np.int32) -> npt.NDArray[Any]:
    """A zeroed ``[batch, n_words]`` mask buffer (int32 like vLLM/XGrammar, or uint32)."""
    if batch < 0 or n_words < 1:
        raise GrammarError(f"allocate_masks needs batch >= 0 and n_words >= 1, got {batch}, {n_words}")
    return np.zeros((batch, n_words), dtype=dtype)


def _fill_row(m: Matcher | None, uwords: npt.NDArray[np.uint32], row: int) -> None:
    """Row ``row``: the matcher's mask words, plus the EOS bit set in place when accepting (the same
    bits as ``Matcher.fill_mask``, without its per-row checks or an accepting-state copy)."""
    if m is None or m.is_finished():
        uwords[row] = 0
        return
    w, live, accepting = m.compiled.state_row(m.state)
    uwords[row] = w
    if accepting:
        eos = m.vocab.eos_token_id
        uwords[row, eos >> 5] |= np.uint32(1 << (eos & 31))
    elif not live:
        raise _dead_end(m, row)


def _dead_end(m: Matcher, row: int) -> NoLegalContinuation:
    return NoLegalContinuation(
        f"no token can follow the output of matcher {row} ({m.num_tokens} tokens): "
        "the grammar (or an intersection of grammars) has no legal continuation"
    )


def fill_masks(
    matchers: Sequence[Matcher | None],
    words: npt.NDArray[Any],
    *,
    executor: Executor | None = None,
) -> None:
    """Write ``matchers[i]``'s mask into ``words[i]`` for every ``i`` (a ``None`` entry: a zero row).

    Parameters
    ----------
    matchers
        One matcher per row (they may use different grammars, but one vocabulary size).
    words
        A C-contiguous ``[len(matchers), n_words]`` int32 or uint32 array, written in place
        (same bits either way: bit ``t % 32`` of word ``t // 32`` is token ``t``).
    executor
        Optional thread pool: its workers and the calling thread fill the native CFG rows, one at a
        time as they come free (rows are the same whichever thread fills them).

    Raises
    ------
    GrammarError
        The array has the wrong shape, dtype or layout, or a matcher's vocabulary does not fit it.
    NoLegalContinuation
        A matcher has no legal continuation (an intersection dead-ended); rows before it are filled.
    """
    if not isinstance(words, np.ndarray) or words.ndim != 2:
        raise GrammarError("fill_masks needs a 2-D [batch, n_words] numpy array")
    if words.shape[0] != len(matchers):
        raise GrammarError(f"fill_masks got {len(matchers)} matchers for {words.shape[0]} rows")
    if words.dtype not in (np.int32, np.uint32):
        raise GrammarError(f"fill_masks needs an int32 or uint32 array, got {words.dtype}")
    if not words.flags.c_contiguous or not words.flags.writeable:
        raise GrammarError("fill_masks needs a writeable C-contiguous array")
    for i, m in enumerate(matchers):
        if m is not None and m.vocab.n_words != words.shape[1]:
            raise GrammarError(
                f"matcher {i} needs {m.vocab.n_words} words per row, the array has {words.shape[1]}"
            )
    n = len(matchers)
    uwords = words.view(np.uint32)
    native = [row for row, m in enumerate(matchers)
              if m is not None and m.compiled.batch_engine is not None and not m.is_finished()]
    job = None
    if native:
        from .native import _engine

        job = _engine.RowJob(
            [matchers[r].compiled.batch_engine for r in native],  # type: ignore[union-attr]
            [matchers[r].state for r in native],  # type: ignore[union-attr]
            native,
            [matchers[r].vocab.eos_token_id for r in native],  # type: ignore[union-attr]
            uwords.ctypes.data,
            n,
            uwords.shape[1],
        )
        workers = getattr(executor, "_max_workers", 2) if executor is not None else 1
        if workers > 1 and len(native) > 1 and (pending := job.pending) > 1:
            for _ in range(min(workers - 1, pending - 1)):
                executor.submit(job.run)  # type: ignore[union-attr]
    failed: tuple[int, Exception] | None = None
    try:
        taken = set(native)
        for row in range(n):
            if row not in taken:
                _fill_row(matchers[row], uwords, row)
    except Exception as e:  # raised below unless a lower row is dead
        failed = (row, e)
    finally:  # the job's threads write into `words` until it finished, whatever happened here
        dead = job.finish() if job is not None else []
    if dead and (failed is None or dead[0] < failed[0]):
        raise _dead_end(matchers[dead[0]], dead[0])  # type: ignore[arg-type]
    if failed is not None:
        raise failed[1]


def apply_token_bitmask_inplace(logits: Any, bitmask: Any, indices: Sequence[int] | None = None) -> None:
    """Set to ``-inf``, in place, every logit whose bit is 0 in its row of the packed ``bitmask``
    (XGrammar's ``apply_token_bitmask_inplace``; what :func:`fill_masks` writes).

    ``logits`` is a torch tensor ``[batch, vocab]`` (or ``[vocab]``) on any device, ``bitmask`` an
    int32 or uint32 tensor or numpy array ``[batch, n_words]`` (or ``[n_words]``), bit ``j % 32`` of
    word ``j // 32`` for token ``j``. With ``indices``, row ``i`` of ``bitmask`` masks row
    ``indices[i]`` of ``logits`` (the rows of a batch that have a grammar); without, rows pair up.
    Logit columns past the mask's ``32 * n_words`` bits are set to ``-inf``; mask bits past the
    logits' width are ignored.

    Raises
    ------
    GrammarError
        ``logits`` is not a floating torch tensor, or the shapes do not pair up.
    """
    import torch  # only reached by torch users

    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise GrammarError(f"apply_token_bitmask_inplace: logits must be a float torch tensor, got "
                           f"{type(logits).__name__}")
    if isinstance(bitmask, torch.Tensor):
        dtype, shape = str(bitmask.dtype).replace("torch.", ""), tuple(bitmask.shape)
    else:
        bitmask = np.asarray(bitmask)
        dtype, shape = str(bitmask.dtype), bitmask.shape
    if dtype not in ("int32", "uint32") or len(shape) not in (1, 2):
        raise GrammarError(f"apply_token_bitmask_inplace: bitmask must be int32 or uint32 of shape "
                           f"[batch, n_words] or [n_words], got {dtype} {shape}")
    if isinstance(bitmask, torch.Tensor):
        mask = bitmask.view(torch.int32)
    else:  # a read-only array (Mask.words) is copied: torch wants writable memory
        arr = np.ascontiguousarray(bitmask).view(np.int32)
        mask = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
    rows_2d = logits if logits.dim() == 2 else logits.unsqueeze(0)
    mask_2d = mask if mask.dim() == 2 else mask.unsqueeze(0)
    if logits.dim() not in (1, 2):
        raise GrammarError(f"apply_token_bitmask_inplace: logits must be [batch, vocab] or [vocab], got "
                           f"{tuple(logits.shape)}")
    rows = list(range(rows_2d.shape[0])) if indices is None else [int(i) for i in indices]
    if len(rows) != mask_2d.shape[0] or any(not 0 <= r < rows_2d.shape[0] for r in rows):
        raise GrammarError(f"apply_token_bitmask_inplace: {mask_2d.shape[0]} mask rows for logits rows "
                           f"{rows if len(rows) <= 8 else str(rows[:8]) + '...'} of {rows_2d.shape[0]}")
    vocab = rows_2d.shape[1]
    words = mask_2d.to(device=rows_2d.device)
    shifts = torch.arange(32, device=rows_2d.device, dtype=torch.int32)
    allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().reshape(words.shape[0], -1)
    if allowed.shape[1] < vocab:  # columns the mask has no bits for are illegal
        allowed = torch.nn.functional.pad(allowed, (0, vocab - allowed.shape[1]), value=False)
    allowed = allowed[:, :vocab]
    idx = torch.tensor(rows, device=rows_2d.device, dtype=torch.long)
    rows_2d[idx] = rows_2d[idx].masked_fill(~allowed, float("-inf"))
