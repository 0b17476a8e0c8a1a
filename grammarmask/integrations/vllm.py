"""vLLM adapter: grammarmask as a structured-output backend of vLLM's V1 engine (vLLM 0.33).

Switch it on with ``pip install 'grammarmask[vllm]'`` and the environment variable
``GRAMMARMASK_VLLM=1`` in the server's environment; keep ``structured_outputs_config.backend`` at its
default ``"auto"``. Every structured-output request (``json``, ``json_object``, ``regex``,
``grammar`` in Lark or GBNF, ``choice``, ``structural_tag``) is then validated, compiled and masked by
grammarmask.

How it hooks in. vLLM's config accepts a fixed list of backend names and its
``StructuredOutputManager`` builds the backend from that name, so there is no registry to add to.
grammarmask registers a ``vllm.general_plugins`` entry point (:func:`register`), which vLLM calls in
every process it starts (API server, engine core, workers). With the switch on, it wraps two methods:

- ``SamplingParams._validate_structured_outputs``: where vLLM resolves ``"auto"`` to a backend per
  request. Under the switch ``"auto"`` resolves to ``"grammarmask"``, after grammarmask has parsed
  the grammar (a bad grammar is a 400 naming what is wrong, before the request is queued).
- ``StructuredOutputManager.grammar_init``: where the engine builds its one backend on the first
  request. When that request resolved to ``"grammarmask"`` the wrapper builds a
  :class:`GrammarmaskBackend` first, and vLLM's own code then uses it for every request.

Everything else is vLLM's own: its scheduler, speculative decoding, reasoning parsers, bitmask
transfer and the kernel that applies the masks. If vLLM renames either method or the attributes the
wrappers read, :func:`install` raises a ``RuntimeError`` naming what is missing when vLLM loads the
plugin (the server does not start), never a silent fall-back to another backend. An explicit
``backend="xgrammar"`` (or any other name) is left alone.

Semantics follow vLLM's ``StructuredOutputGrammar`` interface exactly: the request's stop-token set
(``SamplingParams.all_stop_token_ids``, else the tokenizer's EOS) is legal exactly where the grammar
is complete and terminates it; ``validate_tokens`` leaves the state as it was; ``rollback`` also
undoes termination; ``fill_bitmask`` writes one row of vLLM's int32 bitmask over the model's padded
vocabulary (ids past the tokenizer's are never legal) and may run in vLLM's fill threads.

Generation that ends (on by default, as in :func:`grammarmask.generate`): vLLM's backend interface
gives ``compile_grammar`` no request (so no ``max_tokens``) and ``fill_bitmask`` no logits. A third
wrapper, on ``StructuredOutputManager._create_grammar`` (where vLLM compiles one request's grammar),
lets :meth:`GrammarmaskBackend.compile_grammar` read the request's ``max_tokens`` and ``extra_args``;
the grammar counts the tokens it accepted, and near the budget its masks narrow so that the output
can still end complete (:class:`grammarmask.integrations._budget.RowBudget`, without scores).
Token healing: a backend cannot change a prompt, so :func:`heal_request` backs the prompt off and
marks the request's ``extra_args``, and the backend compiles the healed grammar
(:mod:`grammarmask.integrations._vllm_requests` has the options).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from functools import wraps
from typing import Any

import numpy as np
import numpy.typing as npt
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from ..errors import GrammarError, GrammarMaskError
from ..grammar import CompiledGrammar, Grammar
from ..limits import Limits
from ..vocab import Vocabulary
from ._budget import RowBudget
from ._serving import CompileClock, StopTokens, budget_hint, limits_from_env, pad_vocabulary, timeout_from_env
from ._vllm_requests import (
    BUDGET_ARG,
    BUDGET_ENV,
    BUDGET_WINDOW_ENV,
    HEAL_ARG,
    HealedRequest,
    RequestOptions,
    heal_request,
    request_options,
)

__all__ = [
    "BACKEND_NAME",
    "BUDGET_ARG",
    "BUDGET_ENV",
    "BUDGET_WINDOW_ENV",
    "HEAL_ARG",
    "HealedRequest",
    "RequestOptions",
    "heal_request",
    "request_options",
    "COMPILE_TIMEOUT_ENV",
    "LIMITS_ENV",
    "SWITCH_ENV",
    "GrammarmaskBackend",
    "GrammarmaskGrammar",
    "grammar_for",
    "install",
    "installed",
    "register",
    "vocabulary_for",
]

#: the backend name requests resolve to under the switch
BACKEND_NAME = "grammarmask"
#: the switch: ``GRAMMARMASK_VLLM=1`` (or true/yes/on) makes vLLM's ``"auto"`` backend grammarmask
SWITCH_ENV = "GRAMMARMASK_VLLM"
#: budgets for every compile, as JSON fields of :class:`grammarmask.Limits`:
#: ``'{"json_schema_branches": 256}'``
LIMITS_ENV = "GRAMMARMASK_VLLM_LIMITS"
#: wall-clock seconds one request's compile may take before that request fails (default 60; 0: none)
COMPILE_TIMEOUT_ENV = "GRAMMARMASK_VLLM_COMPILE_TIMEOUT_S"

logger = logging.getLogger("vllm.plugins.grammarmask")  # under vLLM's logger: its handlers and format


def register() -> None:
    """The ``vllm.general_plugins`` entry point: :func:`install` when ``GRAMMARMASK_VLLM`` is on.

    vLLM calls it once per process. With the switch off it does nothing, so installing grammarmask
    never changes how vLLM behaves until asked to.
    """
    if os.environ.get(SWITCH_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        install()


def installed() -> bool:
    """Whether :func:`install` has wrapped vLLM's methods in this process."""
    from vllm.sampling_params import SamplingParams

    return bool(getattr(SamplingParams._validate_structured_outputs, "__grammarmask__", False))


def install() -> None:
    """Make vLLM's ``"auto"`` structured-output backend resolve to grammarmask (idempotent).

    Raises
    ------
    RuntimeError
        The installed vLLM lacks a method or attribute the hook relies on (a vLLM this version
        of grammarmask does not know); the message names it.
    """
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.structured_output import StructuredOutputManager

    if installed():
        return
    _check_hook_points(SamplingParams, StructuredOutputsParams, StructuredOutputManager)
    SamplingParams._validate_structured_outputs = _validating(SamplingParams._validate_structured_outputs)
    StructuredOutputManager.grammar_init = _initializing(StructuredOutputManager.grammar_init)
    StructuredOutputManager._create_grammar = _creating(StructuredOutputManager._create_grammar)
    logger.info("grammarmask is vLLM's structured-output backend for backend='auto' (%s=1)", SWITCH_ENV)


def _check_hook_points(sampling: type, params: type, manager: type) -> None:
    import vllm

    missing = [f"{cls.__qualname__}.{name}" for cls, name in (
        (sampling, "_validate_structured_outputs"), (manager, "grammar_init"), (manager, "_create_grammar"),
    ) if not callable(getattr(cls, name, None))]
    fields = getattr(params, "__dataclass_fields__", {})
    missing += [f"{params.__qualname__}.{f}" for f in ("_backend", "_backend_was_auto") if f not in fields]
    if missing:
        raise RuntimeError(
            f"grammarmask cannot hook into vLLM {getattr(vllm, '__version__', '?')}: it has no "
            f"{', '.join(missing)} (grammarmask's vLLM backend is written for vLLM 0.33); unset "
            f"{SWITCH_ENV} or install a vLLM this grammarmask supports"
        )


def _validating(original: Any) -> Any:
    @wraps(original)
    def validate(self: Any, model_config: Any, config: Any, tokenizer: Any) -> None:
        so = self.structured_outputs
        if (config is None or so is None or config.backend != "auto" or tokenizer is None
                or getattr(model_config, "is_diffusion", False)):
            original(self, model_config, config, tokenizer)  # vLLM's answer (or its error)
            return
        from vllm.exceptions import VLLMValidationError
        from vllm.sampling_params import check_json_nesting
        from vllm.v1.structured_output.request import get_structured_output_key

        if so._backend not in (None, BACKEND_NAME) and not so._backend_was_auto:
            raise VLLMValidationError(
                f"this request asks for the structured-output backend {so._backend!r}, but this server "
                f"uses grammarmask ({SWITCH_ENV}=1); remove '_backend' from the request"
            )
        check_json_nesting(so.json)
        check_json_nesting(so.structural_tag, structural_tag=True)
        try:
            kind, spec = get_structured_output_key(so)
            grammar_for(kind, spec)  # parses and checks the grammar; the vocabulary comes later
            request_options(self)  # and grammarmask's extra_args (budget, healing)
        except (GrammarMaskError, ValueError, TypeError) as e:
            raise VLLMValidationError(f"grammarmask: {e}") from e
        so._backend = BACKEND_NAME
        so._backend_was_auto = True
        so.__post_init__()

    validate.__grammarmask__ = True  # type: ignore[attr-defined]
    return validate


def _initializing(original: Any) -> Any:
    @wraps(original)
    def grammar_init(self: Any, request: Any) -> None:
        params = getattr(request, "sampling_params", None)
        so = getattr(params, "structured_outputs", None)
        if (self.backend is None and request.structured_output_request is not None
                and getattr(so, "_backend", None) == BACKEND_NAME):
            self.backend = GrammarmaskBackend(
                self.vllm_config, tokenizer=self.tokenizer,
                vocab_size=self.vllm_config.model_config.get_vocab_size(),
            )
            self.backend_name = BACKEND_NAME
        original(self, request)

    grammar_init.__grammarmask__ = True  # type: ignore[attr-defined]
    return grammar_init


#: the request whose grammar vLLM's ``_create_grammar`` is compiling in this thread
_REQUEST: ContextVar[Any] = ContextVar("grammarmask_vllm_request", default=None)


def _creating(original: Any) -> Any:
    @wraps(original)
    def create_grammar(self: Any, request: Any) -> Any:
        token = _REQUEST.set(request)
        try:
            return original(self, request)
        finally:
            _REQUEST.reset(token)

    create_grammar.__grammarmask__ = True  # type: ignore[attr-defined]
    return create_grammar


# --- grammars and the vocabulary ---------------------------------------------------------------------


def grammar_for(request_type: StructuredOutputOptions, spec: str) -> Grammar:
    """The grammarmask grammar of one vLLM request (checked, not yet compiled).

    ``JSON``: a JSON Schema; ``JSON_OBJECT``: any JSON object; ``REGEX``: a full-match pattern;
    ``GRAMMAR``: Lark text, or GBNF when a line defines a rule with ``::=`` (vLLM's own test,
    ``grammar_is_likely_lark``); ``CHOICE``: a JSON list of strings, exactly one of them;
    ``STRUCTURAL_TAG``: XGrammar's or vLLM's structural-tag JSON (:meth:`grammarmask.StructuralTag.from_json`:
    the legacy ``structures``/``triggers`` form and the ``format`` tree).

    Raises
    ------
    GrammarError
        The spec is malformed (the message says where), or a ``CHOICE`` is not a list of strings.
    """
    from .. import Choice, Gbnf, JsonSchema, Lark, Regex

    if request_type == StructuredOutputOptions.JSON:
        return JsonSchema(spec)
    if request_type == StructuredOutputOptions.JSON_OBJECT:
        return JsonSchema({"type": "object"})
    if request_type == StructuredOutputOptions.REGEX:
        return Regex(spec)
    if request_type == StructuredOutputOptions.GRAMMAR:
        from vllm.v1.structured_output.utils import grammar_is_likely_lark

        return Lark(spec) if grammar_is_likely_lark(spec) else Gbnf(spec)
    if request_type == StructuredOutputOptions.CHOICE:
        try:
            labels = json.loads(spec) if isinstance(spec, str) else spec
        except ValueError as e:
            raise GrammarError(f"choice: not a JSON list of strings ({e})") from None
        if not isinstance(labels, list):
            raise GrammarError(f"choice: expected a list of strings, got {type(labels).__name__}")
        return Choice(list(dict.fromkeys(labels)))  # vLLM allows repeats; one is enough
    if request_type == StructuredOutputOptions.STRUCTURAL_TAG:
        from .. import StructuralTag

        return StructuralTag.from_json(spec)
    raise GrammarError(f"unknown structured-output request type {request_type!r}")


def vocabulary_for(tokenizer: Any, vocab_size: int) -> Vocabulary:
    """The grammarmask vocabulary of vLLM's tokenizer over the model's ``vocab_size`` logits.

    Ids from the tokenizer's length up to ``vocab_size`` are padding (never legal); tokenizer ids at
    or past ``vocab_size`` are dropped (the model cannot emit them). Hugging Face tokenizers and
    vLLM's ``MistralTokenizer`` (tekken or sentencepiece) are read.

    Raises
    ------
    GrammarError
        A tokenizer grammarmask cannot map to bytes, or whose EOS id lies past ``vocab_size``.
    """
    from vllm.utils.mistral import is_mistral_tokenizer

    if is_mistral_tokenizer(tokenizer):
        full = Vocabulary.from_mistral(tokenizer.tokenizer)
    else:
        full = Vocabulary.from_hf(tokenizer)
    return pad_vocabulary(full, vocab_size)


def _limits_from_env() -> Limits | None:
    return limits_from_env(LIMITS_ENV)


def _timeout_from_env() -> float:
    return timeout_from_env(COMPILE_TIMEOUT_ENV)


# --- the backend ---------------------------------------------------------------------------------------


@dataclass
class GrammarmaskBackend(StructuredOutputBackend):  # type: ignore[misc,unused-ignore]
    """vLLM's engine-level backend: one vocabulary, compiled grammars cached by content.

    Built by vLLM's ``StructuredOutputManager`` (through :func:`install`) with its config, tokenizer
    and the model's (padded) vocabulary size. Budgets come from ``GRAMMARMASK_VLLM_LIMITS`` (JSON
    fields of :class:`grammarmask.Limits`) and the compile time limit from
    ``GRAMMARMASK_VLLM_COMPILE_TIMEOUT_S`` (default 60 s), both read when the backend is built.
    """

    def __post_init__(self) -> None:
        self.limits = _limits_from_env()
        self.compile_timeout = _timeout_from_env()
        self._clock = CompileClock(self.compile_timeout, COMPILE_TIMEOUT_ENV)
        # vLLM builds the backend on its scheduler's thread: the vocabulary (a second or two for a
        # 131k tokenizer) is read in the background, and the first compile waits for it
        self._vocab_reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammarmask-vocab")
        self._vocab = self._vocab_reader.submit(vocabulary_for, self.tokenizer, self.vocab_size)
        self._vocab_reader.shutdown(wait=False)

    @property
    def vocab(self) -> Vocabulary:
        """grammarmask's vocabulary of vLLM's tokenizer over the model's padded vocabulary size.

        Raises
        ------
        GrammarError
            The tokenizer cannot be read (then every request's compile fails with this error).
        """
        return self._vocab.result()

    def compile_grammar(self, request_type: StructuredOutputOptions, grammar_spec: str,
                        stop_token_ids: set[int] | None = None) -> GrammarmaskGrammar:
        """Compile one request's grammar; its errors fail that request only (vLLM reports them).

        Raises
        ------
        GrammarError
            A malformed spec, an unsupported request type or schema keyword
            (``UnsupportedSchemaError``), a budget of :class:`grammarmask.Limits` exceeded
            (``BudgetExceeded``, whose message says how to raise it through ``GRAMMARMASK_VLLM_LIMITS``),
            or a compile slower than the time limit.

        The request being compiled (known through the ``_create_grammar`` wrapper) gives its options
        (:func:`request_options`): ``max_tokens`` for budget-aware masks, healed bytes.
        """
        request = _REQUEST.get()
        options = request_options(getattr(request, "sampling_params", None))
        try:
            def make() -> CompiledGrammar:
                from ..healing import healed

                grammar = healed(grammar_for(request_type, grammar_spec), options.heal)
                assert isinstance(grammar, Grammar)
                return grammar.compile(self.vocab, limits=self.limits)

            compiled = self._timed(make)
        except GrammarMaskError as e:
            budget_hint(e, "vLLM", LIMITS_ENV)  # say how to raise it in vLLM, keeping the exception's type
            raise
        max_tokens = getattr(request, "max_tokens", None) or options.max_tokens
        budget = (RowBudget(compiled, max_tokens, window=options.window)
                  if options.max_tokens is not None and isinstance(max_tokens, int) else None)
        return GrammarmaskGrammar(compiled, stop_token_ids, budget=budget)

    def _timed(self, make: Any) -> CompiledGrammar:
        return self._clock.run(make)

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        """vLLM's bitmask: ``[max_num_seqs, ceil(vocab_size / 32)]`` int32, every bit set."""
        import torch

        return torch.full((max_num_seqs, (self.vocab_size + 31) // 32), -1, dtype=torch.int32)

    def destroy(self) -> None:
        """Stop the compile threads (vLLM calls this when the engine shuts down)."""
        self._clock.shutdown()


class GrammarmaskGrammar(StructuredOutputGrammar):  # type: ignore[misc,unused-ignore]
    """One request's position in its grammar, with vLLM's semantics.

    Lifecycle: vLLM fills a mask row (:meth:`fill_bitmask`), samples, then :meth:`accept_tokens`;
    speculative drafts are checked with :meth:`validate_tokens` (no state change) or accepted and
    undone with :meth:`rollback`. A stop token (the request's set) is legal exactly when the output
    is complete and terminates the grammar; tokens after that are ignored. Every method holds a
    per-request lock, so vLLM's fill threads may run it beside the scheduler.

    A grammar error while masking (a budget of the context-free engine, or a dead end) does not
    stop the engine: it is logged, the row allows only the stop tokens, and the next
    :meth:`accept_tokens` returns False, which vLLM reports as that request's error.

    ``budget`` (budget-aware masks): the tokens accepted so far count against its ``max_tokens``
    (speculative rows included), and rows near it are narrowed to tokens that can still finish.
    """

    def __init__(self, compiled: CompiledGrammar, stop_token_ids: set[int] | None = None, *,
                 budget: RowBudget | None = None) -> None:
        self.compiled = compiled
        #: budget-aware masks (None: off): narrows rows near the request's ``max_tokens``
        self.budget = budget
        self.stops = StopTokens(compiled.vocab, stop_token_ids)
        self.stop_token_ids = self.stops.ids
        self._lock = threading.Lock()
        self.matcher = compiled.matcher()
        self.num_processed_tokens = 0
        self.error: GrammarMaskError | None = None

    def __repr__(self) -> str:
        return f"<GrammarmaskGrammar {self.matcher!r} stops={sorted(self.stop_token_ids)}>"

    def _take(self, token: int) -> bool:
        """Advance by one token if legal (a stop token when complete terminates); else False."""
        return self.stops.take(self.matcher, token)

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance by ``tokens``; False (logged) at the first illegal one, which is not taken.

        Tokens after a stop token are ignored, as is everything once terminated (True).
        """
        with self._lock:
            if self.error is not None:
                logger.error("request %s: grammarmask stopped masking it: %s", request_id, self.error)
                return False
            for t in tokens:
                if self.matcher.is_finished():
                    break
                if not self._take(t):
                    logger.error("request %s: grammarmask rejects token %s after %d tokens",
                                 request_id, t, self.num_processed_tokens)
                    return False
                self.num_processed_tokens += 1
            return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts (up to a stop token); no state change.

        A negative id (vLLM's speculative padding) ends the prefix.
        """
        with self._lock:
            if self.error is not None or self.matcher.is_finished():
                return []
            n = 0
            for t in tokens:
                if t < 0 or not self._take(t):
                    break
                n += 1
                if self.matcher.is_finished():
                    break
            self.matcher.rollback(n)
            return tokens[:n]

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (termination too).

        Raises
        ------
        GrammarError
            More tokens than were accepted; nothing is undone.
        """
        with self._lock:
            self.matcher.rollback(num_tokens)
            self.num_processed_tokens -= num_tokens

    def fill_bitmask(self, bitmask: Any, batch_index: int) -> None:
        """Write the legal next tokens into row ``batch_index`` of vLLM's int32 bitmask tensor."""
        if getattr(getattr(bitmask, "device", None), "type", "cpu") == "cpu":
            self.fill_words(bitmask.numpy(), batch_index)
            return
        import torch

        words = np.zeros((1, bitmask.shape[1]), np.int32)
        self.fill_words(words, 0)
        bitmask[batch_index].copy_(torch.from_numpy(words[0]))

    def fill_words(self, words: npt.NDArray[Any], row: int, scores: Any = None) -> None:
        """:meth:`fill_bitmask` into row ``row`` of a ``[batch, n_words]`` int32/uint32 numpy array.

        ``scores``: the row's logits, when the caller has them (the logits-processor path): near the
        budget the best-scoring tokens that can still finish are kept first."""
        with self._lock:
            self._fill(words, row, scores)

    def _fill(self, words: npt.NDArray[Any], row: int, scores: Any = None) -> None:
        if self.error is None and not self.matcher.is_finished():
            try:
                self.stops.fill(self.matcher, words, row)
                if self.budget is not None:
                    self.budget.restrict(self.matcher, words, row, self.num_processed_tokens, scores=scores,
                                         stop_words=self.stops.words)
            except GrammarMaskError as e:
                self.error = e
                logger.error("grammarmask cannot mask this request any more (it will fail): %s", e)
            else:
                return
        self.stops.fill_only_stops(words, row)

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted (and not rolled back)."""
        return self.matcher.is_finished()

    def reset(self) -> None:
        """Back to the start of the grammar."""
        with self._lock:
            self.matcher = self.compiled.matcher()
            self.num_processed_tokens = 0
            self.error = None
