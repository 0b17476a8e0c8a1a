"""vLLM adapter, second path: a V1 custom logits processor that masks requests to a grammar, no patching.

Load it by name when the engine is built, and give each request its constraint in
``SamplingParams.extra_args["grammarmask"]`` (the keys of vLLM's ``StructuredOutputsParams``:
``json``, ``json_object``, ``regex``, ``grammar``, ``choice``, ``structural_tag``)::

    llm = LLM(model, logits_processors=["grammarmask.integrations.vllm_logits:GrammarmaskLogitsProcessor"])
    params = SamplingParams(extra_args={"grammarmask": {"json": schema}})

vLLM calls :meth:`GrammarmaskLogitsProcessor.update_state` before every forward pass (requests added,
removed or moved in its persistent batch, with a live reference to each request's output tokens) and
:meth:`~GrammarmaskLogitsProcessor.apply` on the batch's logits. It uses only vLLM's public
logits-processor interface, so nothing is patched; what it gives up against the backend path
(:mod:`grammarmask.integrations.vllm`): vLLM refuses custom logits processors with speculative
decoding; grammars compile synchronously in the worker when the request joins the batch (the
backend path compiles in the engine's thread pool while the request waits); structured-output
reasoning (``enable_in_reasoning``, reasoning parsers) does not apply. It is not registered as an
entry point on purpose: a registered processor would be loaded into every vLLM engine and switch
speculative decoding off for everyone.

The per-request options are the backend path's (:func:`grammarmask.integrations.vllm.request_options`):
budget-aware masks near ``max_tokens`` (on by default; here with the logits, so the best-scoring
tokens that can still finish are kept, the Hugging Face processor's rule), and token healing
(:func:`grammarmask.integrations.vllm.heal_request`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
from vllm.v1.structured_output.backend_types import StructuredOutputOptions

from ..errors import GrammarError, GrammarMaskError
from ..vocab import Vocabulary
from ._budget import RowBudget
from .vllm import GrammarmaskGrammar, grammar_for, request_options, vocabulary_for

__all__ = ["EXTRA_ARGS_KEY", "GrammarmaskLogitsProcessor", "request_grammar"]

#: the key of ``SamplingParams.extra_args`` that holds a request's constraint
EXTRA_ARGS_KEY = "grammarmask"

_KINDS = {
    "json": StructuredOutputOptions.JSON,
    "json_object": StructuredOutputOptions.JSON_OBJECT,
    "regex": StructuredOutputOptions.REGEX,
    "grammar": StructuredOutputOptions.GRAMMAR,
    "choice": StructuredOutputOptions.CHOICE,
    "structural_tag": StructuredOutputOptions.STRUCTURAL_TAG,
}

logger = logging.getLogger("vllm.plugins.grammarmask")


def request_grammar(params: Any) -> tuple[StructuredOutputOptions, str] | None:
    """The (request type, spec) in ``params.extra_args["grammarmask"]``, or None when there is none.

    The entry is a dict with one key of :data:`_KINDS` (``{"regex": "[0-9]+"}``), or that dict as
    JSON text (what a server's ``vllm_xargs`` can carry).

    Raises
    ------
    GrammarError
        The entry is not such a dict (or its JSON).
    """
    import json

    spec = (getattr(params, "extra_args", None) or {}).get(EXTRA_ARGS_KEY)
    if spec is None:
        return None
    if isinstance(spec, str):  # a server's vllm_xargs hold strings, not dicts: the dict as JSON text
        try:
            spec = json.loads(spec)
        except ValueError as e:
            raise GrammarError(f'extra_args["{EXTRA_ARGS_KEY}"] is a str but not JSON: {e}') from None
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in _KINDS:
        raise GrammarError(
            f'extra_args["{EXTRA_ARGS_KEY}"] must be a dict with one of the keys {", ".join(_KINDS)}, '
            f"got {spec!r:.80}"
        )
    (key, value), = spec.items()
    if key == "json_object":
        return _KINDS[key], ""
    if key in ("json", "choice", "structural_tag") and not isinstance(value, str):
        value = json.dumps(value)
    if not isinstance(value, str):
        raise GrammarError(
            f'extra_args["{EXTRA_ARGS_KEY}"]["{key}"] must be a str, got {type(value).__name__}')
    return _KINDS[key], value


class _Row:
    __slots__ = ("grammar", "output", "taken")

    def __init__(self, grammar: GrammarmaskGrammar, output: list[int]) -> None:
        self.grammar, self.output, self.taken = grammar, output, 0

    def catch_up(self, request_index: int) -> None:
        """Advance the grammar by the output tokens vLLM appended since the last step."""
        new = self.output[self.taken:]
        if new and not self.grammar.accept_tokens(f"batch row {request_index}", new):
            self.grammar.error = self.grammar.error or GrammarError(
                f"a sampled token of batch row {request_index} is outside its grammar")
        self.taken = len(self.output)


class GrammarmaskLogitsProcessor(LogitsProcessor):  # type: ignore[misc,unused-ignore]
    """Masks each request that names a grammar in ``extra_args["grammarmask"]``; others pass unchanged.

    Lifecycle (vLLM's): built once per engine with its config; :meth:`update_state` every step;
    :meth:`apply` on the logits. The vocabulary is read from vLLM's tokenizer on the first request
    with a grammar, over the model's padded vocabulary. A request's stop tokens
    (``all_stop_token_ids``) are legal exactly where its output is complete. A grammar that fails
    to compile, or a budget hit while masking, leaves that request with only its stop tokens legal
    (it ends at once) and is logged; a malformed spec is refused earlier, when vLLM validates the
    request (:meth:`validate_params`: a 400 for a server).
    """

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        self.vllm_config = vllm_config
        self.device = device
        self._vocab: Vocabulary | None = None
        self._rows: dict[int, _Row] = {}

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Parse the request's grammar (no vocabulary needed); vLLM turns the error into a 400."""
        try:
            found = request_grammar(sampling_params)
            if found is not None:
                grammar_for(*found)
            request_options(sampling_params)
        except GrammarMaskError as e:
            raise ValueError(f"grammarmask: {e}") from e

    def is_argmax_invariant(self) -> bool:
        """False: a mask changes which token is the most likely."""
        return False

    @property
    def vocab(self) -> Vocabulary:
        """grammarmask's vocabulary of the engine's tokenizer (read on first use)."""
        if self._vocab is None:
            from vllm.tokenizers import cached_tokenizer_from_config

            model = self.vllm_config.model_config
            tokenizer = cached_tokenizer_from_config(model_config=model)
            self._vocab = vocabulary_for(tokenizer, model.get_vocab_size())
        return self._vocab

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        """Apply vLLM's batch changes (removed, then added, then moved), then catch every row up."""
        if batch_update is not None:
            for index in batch_update.removed:
                self._rows.pop(index, None)
            for index, params, _prompt, output in batch_update.added:
                self._rows.pop(index, None)
                row = self._new_row(params, output)
                if row is not None:
                    self._rows[index] = row
            for a, b, direction in batch_update.moved:
                ra, rb = self._rows.pop(a, None), self._rows.pop(b, None)
                if ra is not None:
                    self._rows[b] = ra
                if rb is not None and direction == MoveDirectionality.SWAP:
                    self._rows[a] = rb
        for index, row in self._rows.items():
            row.catch_up(index)

    def _new_row(self, params: Any, output: list[int]) -> _Row | None:
        found = request_grammar(params)
        if found is None:
            return None
        stops = set(getattr(params, "all_stop_token_ids", None) or ())
        try:
            from ..healing import healed

            options = request_options(params)
            grammar = healed(grammar_for(*found), options.heal)
            compiled = grammar.compile(self.vocab)  # type: ignore[union-attr]
        except GrammarMaskError as e:
            logger.error("grammarmask: a request's grammar does not compile; it ends at once: %s", e)
            compiled = grammar_for(StructuredOutputOptions.JSON_OBJECT, "").compile(self.vocab)
            grammar = GrammarmaskGrammar(compiled, stops)
            grammar.error = e
            return _Row(grammar, output)
        budget = (RowBudget(compiled, options.max_tokens, window=options.window)
                  if options.max_tokens is not None else None)
        return _Row(GrammarmaskGrammar(compiled, stops, budget=budget), output)

    def apply(self, logits: Any) -> Any:
        """Set every logit a row's grammar forbids to ``-inf`` (in place; rows without one unchanged)."""
        if not self._rows:
            return logits
        from .. import apply_token_bitmask_inplace

        indices = sorted(i for i in self._rows if i < logits.shape[0])
        words: npt.NDArray[np.int32] = np.empty((len(indices), self.vocab.n_words), np.int32)
        for r, index in enumerate(indices):
            self._rows[index].grammar.fill_words(words, r, scores=logits[index])
        apply_token_bitmask_inplace(logits, words, indices=indices)
        return logits
