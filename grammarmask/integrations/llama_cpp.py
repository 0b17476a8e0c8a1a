"""llama-cpp-python adapter: a logits processor for ``Llama.generate`` / ``create_completion``.

Usage::

    vocab = gm.Vocabulary.from_tokens([llm.detokenize([i]) for i in range(llm.n_vocab())],
                                      eos_token_id=llm.token_eos())
    proc = GrammarLogitsProcessor(grammar.compile(vocab))
    llm.create_completion(prompt, logits_processor=LogitsProcessorList([proc]))

llama-cpp-python calls a processor as ``proc(input_ids, scores)`` with numpy arrays for one sequence
(``input_ids`` includes the prompt). Only numpy is needed here; llama_cpp itself is never imported.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import GrammarError
from ..grammar import CompiledGrammar

__all__ = ["GrammarLogitsProcessor"]


class GrammarLogitsProcessor:
    """Masks one sequence's scores to the grammar's legal tokens (``-inf`` elsewhere).

    Lifecycle: the first call fixes the prompt length (unless ``prompt_length`` is given); later calls
    advance the matcher by the tokens appended since. When ``input_ids`` is shorter than what was
    seen (llama.cpp re-evaluating after a cache hit, or speculative tokens rejected), the matcher rolls
    back to the common prefix, so the mask always matches ``input_ids``.

    Raises (from ``__call__``)
    --------------------------
    GrammarError
        ``scores`` narrower than the vocabulary, or ``input_ids`` shorter than the prompt.
    TokenRejected
        ``input_ids`` holds a generated token the grammar forbids.
    NoLegalContinuation
        The grammar dead-ended.
    """

    def __init__(self, compiled_grammar: CompiledGrammar, *, prompt_length: int | None = None) -> None:
        if not isinstance(compiled_grammar, CompiledGrammar):
            raise GrammarError(f"expected a CompiledGrammar, got {type(compiled_grammar).__name__}")
        self.compiled = compiled_grammar
        self.prompt_length = prompt_length
        self.matcher = compiled_grammar.matcher()
        self._seen: list[int] = []

    def __call__(self, input_ids: npt.ArrayLike, scores: npt.NDArray[Any]) -> npt.NDArray[Any]:
        ids = np.asarray(input_ids).reshape(-1).tolist()
        if self.prompt_length is None:
            self.prompt_length = len(ids)
        if len(ids) < self.prompt_length:
            raise GrammarError(
                f"input_ids has {len(ids)} tokens, fewer than the {self.prompt_length}-token prompt"
            )
        generated = ids[self.prompt_length :]
        common = 0
        for a, b in zip(self._seen, generated):
            if a != b:
                break
            common += 1
        if common < len(self._seen):
            self.matcher.rollback(len(self._seen) - common)
            del self._seen[common:]
        self.matcher.advance_many(generated[common:])
        self._seen.extend(generated[common:])
        masked: npt.NDArray[Any] = self.matcher.mask().apply(scores)
        return masked

    def reset(self) -> None:
        """Start over for a new prompt."""
        self.matcher.reset()
        self._seen.clear()
        self.prompt_length = None
