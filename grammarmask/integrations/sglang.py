"""SGLang adapter: grammarmask as a grammar backend of SGLang's scheduler (SGLang 0.5.23).

Switch it on with ``pip install 'grammarmask[sglang]'`` and ``--grammar-backend grammarmask``
(``sglang serve``, ``python -m sglang.launch_server``) or ``grammar_backend="grammarmask"``
(``sglang.Engine``). Every constrained request (``json_schema``, ``response_format`` JSON,
``regex``, ``ebnf``, ``structural_tag``) is then compiled and masked by grammarmask.

How it hooks in. SGLang 0.5.23 has a registry for third-party grammar backends
(``sglang.srt.constrained.base_grammar_backend.register_grammar_backend``) and a general-plugin
entry-point group (``sglang.srt.plugins``) that it loads in every process, before it parses its
arguments (``sglang serve``, ``launch_server``, ``Engine``) and in each scheduler. grammarmask's entry
point (:func:`register`) registers the backend under the name ``grammarmask`` and adds that name to
the choices of ``--grammar-backend``. It changes nothing else: without ``--grammar-backend
grammarmask`` SGLang runs its own backend (XGrammar by default) as if grammarmask were not installed.
If SGLang renames the registry, the choice list or the base classes, :func:`register` raises a
``RuntimeError`` naming what is missing, which SGLang logs as a failed plugin; ``--grammar-backend
grammarmask`` is then refused by SGLang's argument parser (an invalid choice), never silently
replaced by another backend.

Semantics follow SGLang's ``BaseGrammarObject``: ``accept_token`` raises ``ValueError`` (a
:class:`grammarmask.TokenRejected`) on an illegal token, which SGLang turns into that request's
abort; tokens after termination are ignored; ``rollback(k)`` also undoes termination; the model's
EOS ids (``eos_token_ids`` from the model's config, else the tokenizer's EOS) are legal exactly where
the output is complete and terminate it; masks are SGLang's int32 bitmask over the model's padded
vocabulary (ids past the tokenizer's are never legal). Compile errors, budgets and the compile time
limit fail the one request with SGLang's ``Failed to compile <kind> grammar: ...``.

Budget-aware generation (:class:`BudgetLogitProcessor`, an SGLang custom logit processor: grammar
backends never see ``max_new_tokens``) and token healing (:func:`heal_request`, which marks the
constraint with :data:`HEAL_PREFIX`) are opt-in per request; see docs/howto_sglang.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from typing import Any

import numpy as np
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    GrammarStats,
    InvalidGrammarObject,
)
from sglang.srt.sampling.custom_logit_processor import CustomLogitProcessor

from ..errors import GrammarError, GrammarMaskError, TokenRejected
from ..grammar import CompiledGrammar, Grammar
from ..vocab import Vocabulary
from ._budget import RowBudget
from ._serving import CompileClock, StopTokens, budget_hint, limits_from_env, looks_like_gbnf, pad_vocabulary
from ._serving import timeout_from_env as _timeout_from_env

__all__ = [
    "ANY_JSON",
    "BACKEND_NAME",
    "BUDGET_WINDOW_PARAM",
    "BudgetLogitProcessor",
    "COMPILE_TIMEOUT_ENV",
    "LIMITS_ENV",
    "GrammarmaskBackend",
    "GrammarmaskGrammar",
    "HEAL_PREFIX",
    "HealedRequest",
    "grammar_for",
    "heal_request",
    "heal_spec",
    "register",
    "registered",
]

#: the value of ``--grammar-backend`` that selects grammarmask
BACKEND_NAME = "grammarmask"
#: budgets for every compile, as JSON fields of :class:`grammarmask.Limits`
LIMITS_ENV = "GRAMMARMASK_SGLANG_LIMITS"
#: wall-clock seconds one request's compile may take before that request fails (default 60; 0: none)
COMPILE_TIMEOUT_ENV = "GRAMMARMASK_SGLANG_COMPILE_TIMEOUT_S"
#: ``custom_params`` key: for context-free grammars, how many tokens before the budget binds
#: :class:`BudgetLogitProcessor` starts to narrow (default 32)
BUDGET_WINDOW_PARAM = "grammarmask_budget_window"
#: what :func:`heal_spec` puts before a grammar spec, then the healed bytes as hex, ``)`` and a newline:
#: text no grammar language accepts, so a server not running grammarmask refuses the request
HEAL_PREFIX = "(?grammarmask-heal:"
#: SGLang's key for "any JSON" (``response_format={"type": "json_object"}``)
ANY_JSON = "$$ANY$$"

logger = logging.getLogger("sglang.plugins.grammarmask")


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: make ``--grammar-backend grammarmask`` a choice (idempotent).

    Raises
    ------
    RuntimeError
        The installed SGLang lacks the registry or the choice list (a version this grammarmask does
        not know); the message names what is missing.
    """
    from sglang.srt.constrained import base_grammar_backend as base

    try:
        from sglang.srt.server_args import GRAMMAR_BACKEND_CHOICES, add_grammar_backend_choices
    except ImportError:
        GRAMMAR_BACKEND_CHOICES = add_grammar_backend_choices = None
    missing = [name for name, ok in (
        ("sglang.srt.constrained.base_grammar_backend.register_grammar_backend",
         callable(getattr(base, "register_grammar_backend", None))),
        ("sglang.srt.constrained.base_grammar_backend.GRAMMAR_BACKEND_REGISTRY",
         isinstance(getattr(base, "GRAMMAR_BACKEND_REGISTRY", None), dict)),
        ("sglang.srt.server_args.add_grammar_backend_choices", callable(add_grammar_backend_choices)),
    ) if not ok]
    if missing:
        import sglang

        raise RuntimeError(
            f"grammarmask cannot register with SGLang {getattr(sglang, '__version__', '?')}: it has no "
            f"{', '.join(missing)} (grammarmask's SGLang backend is written for SGLang 0.5.23); "
            "install an SGLang this grammarmask supports"
        )
    if BACKEND_NAME not in GRAMMAR_BACKEND_CHOICES:
        add_grammar_backend_choices([BACKEND_NAME])
    base.register_grammar_backend(BACKEND_NAME, _create_backend)


def registered() -> bool:
    """Whether :func:`register` has run in this process (``--grammar-backend grammarmask`` works)."""
    from sglang.srt.constrained.base_grammar_backend import GRAMMAR_BACKEND_REGISTRY

    return GRAMMAR_BACKEND_REGISTRY.get(BACKEND_NAME) is _create_backend


def _create_backend(server_args: Any, tokenizer: Any, vocab_size: int,
                    eos_token_ids: Any = None) -> GrammarmaskBackend:
    """SGLang's factory signature for registered backends."""
    backend = GrammarmaskBackend(tokenizer, vocab_size, eos_token_ids)
    logger.info("grammarmask is SGLang's grammar backend (%d tokens, stop tokens %s)",
                vocab_size, sorted(backend.stop_token_ids))
    return backend


def grammar_for(key_type: str, key_string: str) -> Grammar:
    """The grammarmask grammar of one SGLang grammar key (checked, not yet compiled).

    A spec marked by :func:`heal_spec` gives ``gm.healed(grammar, removed)``.
    ``json``: a JSON Schema, or any JSON value for ``$$ANY$$``; ``regex``: a full-match pattern;
    ``ebnf`` (and ``full_assistant_ebnf``): GBNF when a line defines a rule with ``::=`` (SGLang's
    dialect, XGrammar's EBNF), else Lark; ``structural_tag``: XGrammar's or SGLang's structural-tag
    JSON (the legacy ``structures``/``triggers`` form and the ``format`` tree).

    Raises
    ------
    GrammarError
        The spec is malformed (the message says where) or the key type is unknown.
    """
    from .. import Gbnf, JsonSchema, Lark, Regex, StructuralTag

    removed, key_string = split_heal(key_string)
    if removed:
        from ..healing import healed

        out = healed(grammar_for(key_type, key_string), removed)
        assert isinstance(out, Grammar)
        return out
    if key_type == "json":
        return JsonSchema({}) if key_string == ANY_JSON else JsonSchema(key_string)
    if key_type == "regex":
        return Regex(key_string)
    if key_type in ("ebnf", "full_assistant_ebnf"):
        return Gbnf(key_string) if looks_like_gbnf(key_string) else Lark(key_string)
    if key_type == "structural_tag":
        return StructuralTag.from_json(key_string)
    raise GrammarError(f"unknown SGLang grammar key type {key_type!r}")


def heal_spec(spec: str, removed: bytes) -> str:
    """``spec`` (a grammar key's text) marked so that grammarmask compiles ``gm.healed(grammar,
    removed)``: ``(?grammarmask-heal:<hex>)`` and a newline before it; ``spec`` itself when nothing
    was removed."""
    return f"{HEAL_PREFIX}{removed.hex()})\n{spec}" if removed else spec


def split_heal(key_string: str) -> tuple[bytes, str]:
    """The healed bytes and the spec of a key string marked by :func:`heal_spec` (``b""`` and the
    string itself when unmarked).

    Raises
    ------
    GrammarError
        The mark is malformed (no ``)`` and newline, or not hex).
    """
    if not key_string.startswith(HEAL_PREFIX):
        return b"", key_string
    end = key_string.find(")\n", len(HEAL_PREFIX))
    try:
        if end < 0:
            raise ValueError("unterminated")
        return bytes.fromhex(key_string[len(HEAL_PREFIX):end]), key_string[end + 2:]
    except ValueError:
        raise GrammarError(f"a grammarmask healing mark must be {HEAL_PREFIX}<hex>) and a newline, "
                           f"got {key_string[:60]!r}") from None


def vocabulary_for(tokenizer: Any, vocab_size: int) -> Vocabulary:
    """grammarmask's vocabulary of SGLang's (Hugging Face) tokenizer over the model's ``vocab_size``."""
    return pad_vocabulary(Vocabulary.from_hf(tokenizer), vocab_size)


# --- masks ---------------------------------------------------------------------------------------------


def _allocate(vocab_size: int, batch_size: int) -> Any:
    import torch

    return torch.full((batch_size, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def _move(vocab_mask: Any, device: Any) -> Any:
    return vocab_mask.to(device, non_blocking=True)


def _apply(logits: Any, vocab_mask: Any) -> None:
    """Set the logits of tokens whose bit is clear to -inf (SGLang's Triton kernel on a GPU)."""
    if logits.device.type in ("cuda", "xpu", "musa"):
        from sglang.kernels.ops.grammar.bitmask_ops import apply_token_bitmask_inplace_triton

        apply_token_bitmask_inplace_triton(logits, vocab_mask)
        return
    import torch

    mask = vocab_mask.to(logits.device)
    shifts = torch.arange(32, dtype=torch.int32, device=logits.device)
    allowed = ((mask.unsqueeze(-1) >> shifts) & 1).flatten(-2).bool()
    n = logits.shape[-1]
    if allowed.shape[-1] < n:
        raise GrammarError(f"the vocabulary mask covers {allowed.shape[-1]} tokens, the logits {n}")
    logits.masked_fill_(~allowed[..., :n], float("-inf"))


def _fill_rows(grammar: GrammarmaskGrammar, vocab_mask: Any, idx: int) -> None:
    if vocab_mask.device.type == "cpu":
        grammar.fill_words(vocab_mask.numpy(), idx)
        return
    import torch

    words = np.zeros((1, vocab_mask.shape[1]), np.int32)
    grammar.fill_words(words, 0)
    vocab_mask[idx].copy_(torch.from_numpy(words[0]))


# --- the grammar object --------------------------------------------------------------------------------


class GrammarmaskGrammar(BaseGrammarObject):  # type: ignore[misc,unused-ignore]
    """One request's position in its grammar, with SGLang's ``BaseGrammarObject`` semantics.

    SGLang fills a mask row (:meth:`fill_vocab_mask`), samples, then :meth:`accept_token`; its
    speculative decoding accepts drafts and undoes them with :meth:`rollback`. A grammar error while
    masking (a budget of the context-free engine, a dead end) does not stop the scheduler: it is
    logged, the row allows only the stop tokens, and the next :meth:`accept_token` raises, which
    SGLang reports as that request's error.
    """

    def __init__(self, compiled: CompiledGrammar, stops: StopTokens, key_string: str = "",
                 grammar_stats: GrammarStats | None = None, matcher: Any = None) -> None:
        super().__init__()
        self.compiled = compiled
        self.stops = stops
        self.key_string = key_string
        self.grammar_stats = grammar_stats
        self.matcher = matcher if matcher is not None else compiled.matcher()
        self.error: GrammarMaskError | None = None
        self.budget: RowBudget | None = None  # BudgetLogitProcessor's, made on its first call
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"GrammarmaskGrammar({self.key_string[:80]!r}, {self.matcher!r})"

    @property
    def stop_token_ids(self) -> frozenset[int]:
        """The tokens that end the output where it is complete."""
        return self.stops.ids

    def accept_token(self, token: int) -> None:
        """Take one sampled token; ignored once terminated.

        Raises
        ------
        TokenRejected
            (a ``ValueError``) The token is illegal here, or masking this request failed earlier;
            the state is unchanged.
        """
        with self._lock:
            if self.matcher.is_finished():
                return
            self.current_token = token
            if self.error is not None:
                raise TokenRejected(int(token), f"grammarmask stopped masking this request: {self.error}")
            if not self.stops.take(self.matcher, int(token)):
                where = f"after {self.matcher.num_tokens} tokens of {self.key_string[:200]!r}"
                raise TokenRejected(int(token), f"not allowed {where}")

    def rollback(self, k: int) -> None:
        """Undo the last ``k`` accepted tokens (a stop token too: termination is undone).

        Raises
        ------
        GrammarError
            More tokens than were accepted; nothing is undone.
        """
        with self._lock:
            self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        """Whether a stop token was accepted (and not rolled back)."""
        return self.matcher.is_finished()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Any:
        """SGLang's bitmask: ``[batch_size, ceil(vocab_size / 32)]`` int32 on the CPU, every bit set."""
        return _allocate(vocab_size, batch_size)

    def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
        """Write the legal next tokens into row ``idx`` of SGLang's int32 bitmask tensor."""
        _fill_rows(self, vocab_mask, idx)

    def fill_words(self, words: Any, row: int) -> None:
        """:meth:`fill_vocab_mask` into row ``row`` of a ``[batch, n_words]`` int32/uint32 numpy array."""
        with self._lock:
            if self.error is None and not self.matcher.is_finished():
                try:
                    self.stops.fill(self.matcher, words, row)
                    return
                except GrammarMaskError as e:
                    self.error = e
                    logger.error("grammarmask cannot mask this request any more (it will fail): %s", e)
            self.stops.fill_only_stops(words, row)

    @staticmethod
    def reset_vocab_mask(vocab_mask: Any) -> None:
        """Every token allowed again (a reusable buffer's unconstrained state)."""
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
        """The mask on ``device`` (non-blocking copy)."""
        return _move(vocab_mask, device)

    @staticmethod
    def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
        """Set the logits of tokens the mask forbids to -inf, in place."""
        _apply(logits, vocab_mask)

    def copy(self) -> GrammarmaskGrammar:
        """An independent grammar at the same position (SGLang copies its cached, untouched templates)."""
        with self._lock:
            stats = self.grammar_stats
            if stats is not None:
                stats = dataclasses.replace(stats, is_cache_hit=True, tree_traversal_time=[])
            return GrammarmaskGrammar(self.compiled, self.stops, self.key_string, stats, self.matcher.fork())

    # jump-forward: SGLang 0.5.23's scheduler does not call these; they keep the interface's contract

    def try_jump_forward(self, tokenizer: Any) -> tuple[list[int], str] | None:
        """The text the grammar forces next (whole UTF-8 characters), or None when there is a choice."""
        with self._lock:
            forced = self.matcher.forced_bytes()
        text = _utf8_prefix(forced)
        return ([], text) if text else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        """The forced text to append; the caller retokenizes the output with its tokenizer."""
        return helper[1], -1

    def jump_and_retokenize(self, old_output_ids: list[int], new_output_ids: list[int],
                            next_state: int) -> None:
        """Follow the caller's retokenization: undo back to the common prefix, take the new tokens.

        The tokens are the caller's tokenizer's own encoding of the output with the forced text, so
        the output is written as that tokenizer writes it.

        Raises
        ------
        TokenRejected
            A new token the grammar refuses (the state is back where it was before the call).
        """
        k = 0
        for old, new in zip(old_output_ids, new_output_ids):
            if old != new:
                break
            k += 1
        with self._lock:
            saved = self.matcher.fork()
            self.matcher.rollback(len(old_output_ids) - k)
            for i in range(k, len(new_output_ids)):
                if not self.stops.take(self.matcher, int(new_output_ids[i])):
                    self.matcher = saved
                    raise TokenRejected(int(new_output_ids[i]),
                                        f"at position {i} of the retokenized output {new_output_ids}")


def _utf8_prefix(data: bytes) -> str:
    """The longest prefix of ``data`` that is whole UTF-8 characters, decoded."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


# --- the backend ---------------------------------------------------------------------------------------


class GrammarmaskBackend(BaseGrammarBackend):  # type: ignore[misc,unused-ignore]
    """SGLang's grammar backend: one vocabulary, a compiled grammar per key (SGLang caches them).

    Built by SGLang's ``create_grammar_backend`` (through :func:`register`) with the scheduler's
    tokenizer, the model's (padded) vocabulary size and its EOS ids. Budgets come from
    ``GRAMMARMASK_SGLANG_LIMITS`` (JSON fields of :class:`grammarmask.Limits`) and the compile time
    limit from ``GRAMMARMASK_SGLANG_COMPILE_TIMEOUT_S`` (default 60 s), both read when it is built.
    SGLang compiles in its backend's thread pool and gives up on a request after its own
    ``SGLANG_GRAMMAR_MAX_POLL_ITERATIONS`` polls; grammarmask's limit fails the request with a reason.
    """

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: Any = None) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.vocab = vocabulary_for(tokenizer, vocab_size)
        if isinstance(eos_token_ids, int):
            eos_token_ids = [eos_token_ids]
        self.stops = StopTokens(self.vocab, eos_token_ids)
        self.limits = limits_from_env(LIMITS_ENV)
        self.clock = CompileClock(_timeout_from_env(COMPILE_TIMEOUT_ENV), COMPILE_TIMEOUT_ENV)

    @property
    def stop_token_ids(self) -> frozenset[int]:
        """The model's EOS ids in the vocabulary (legal where the output is complete)."""
        return self.stops.ids

    def compile(self, key_type: str, key_string: str) -> GrammarmaskGrammar:
        """Compile one key into a fresh grammar object.

        Raises
        ------
        GrammarError
            A malformed spec, an unsupported schema keyword, a budget of :class:`grammarmask.Limits`
            (whose message says how to raise it through ``GRAMMARMASK_SGLANG_LIMITS``), or a compile
            slower than the time limit.
        """
        try:
            compiled = self.clock.run(lambda: grammar_for(key_type, key_string).compile(
                self.vocab, limits=self.limits))
        except GrammarMaskError as e:
            budget_hint(e, "SGLang", LIMITS_ENV)
            raise
        return GrammarmaskGrammar(compiled, self.stops, key_string, GrammarStats(dispatch_type=key_type))

    def _dispatch(self, key_type: str, key_string: str) -> BaseGrammarObject:
        try:
            return self.compile(key_type, key_string)
        except GrammarMaskError as e:
            logger.error("grammarmask: invalid %s grammar: %s", key_type, e)
            return InvalidGrammarObject(f"grammarmask: {e}")

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        """A JSON Schema (or ``$$ANY$$``: any JSON value); an error is an ``InvalidGrammarObject``."""
        return self._dispatch("json", key_string)

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        """A full-match regex; an error is an ``InvalidGrammarObject``."""
        return self._dispatch("regex", key_string)

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        """GBNF (SGLang's EBNF) or Lark text; an error is an ``InvalidGrammarObject``."""
        return self._dispatch("ebnf", key_string)

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        """A structural tag (legacy or ``format`` form); an error is an ``InvalidGrammarObject``."""
        return self._dispatch("structural_tag", key_string)

    @property
    def is_support_token_filter(self) -> bool:
        """Token filters (SGLang's strict thinking) are supported."""
        return True

    @staticmethod
    def set_token_filter(vocab_mask: Any, token_ids: list[int], batch_idx: int, is_allowed: bool = True,
                         reset_vocab_mask: bool = True) -> None:
        """Allow (or forbid) exactly ``token_ids`` in row ``batch_idx`` (SGLang's torch operation)."""
        from sglang.srt.constrained.torch_ops.token_filter_torch_ops import set_token_filter_torch

        set_token_filter_torch(vocab_mask, token_ids, batch_idx, is_allowed=is_allowed,
                               reset_vocab_mask=reset_vocab_mask)

    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device: Any) -> Any:
        """As :meth:`GrammarmaskGrammar.allocate_vocab_mask`."""
        return _allocate(vocab_size, batch_size)

    @staticmethod
    def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
        """As :meth:`GrammarmaskGrammar.move_vocab_mask`."""
        return _move(vocab_mask, device)

    @staticmethod
    def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
        """As :meth:`GrammarmaskGrammar.apply_vocab_mask`."""
        _apply(logits, vocab_mask)

    def reset(self) -> None:
        """Forget the compiled grammars (SGLang's ``flush_cache``)."""
        super().reset()


# --- budget-aware generation ---------------------------------------------------------------------------


class BudgetLogitProcessor(CustomLogitProcessor):  # type: ignore[misc,unused-ignore]
    """SGLang custom logit processor: budget-aware masks for requests masked by grammarmask.

    SGLang's grammar objects never see a request's ``max_new_tokens``; its custom logit processors do
    (``custom_params["__req__"]``, the request). Near the budget this processor narrows each row to
    the tokens after which a known completion still fits in the tokens left, the stop token included
    (the rule of :mod:`grammarmask.integrations._budget`, shared with the Hugging Face and vLLM
    integrations: the 64 best-scoring such tokens and the shortest completion's next one); far from
    the budget, and for rows not masked by grammarmask, the logits are returned unchanged.

    Use: start SGLang with ``--enable-custom-logit-processor`` and send
    ``custom_logit_processor=BudgetLogitProcessor.to_str()`` with ``custom_params`` (a dict, even
    empty: SGLang hands the processor the request only then). ``custom_params["grammarmask_budget_window"]``
    sets the window of context-free grammars (tokens, default 32; regular grammars use the exact one).
    Rows of speculative decoding (one request's parameters repeated for its draft tokens) are left
    as they are: the grammar's state is the request's before the drafts.
    """

    def __call__(self, logits: Any, custom_param_list: list[dict[str, Any]] | None = None) -> Any:
        params_list = list(custom_param_list or ())
        seen: dict[int, int] = {}
        for params in params_list:
            seen[id(params)] = seen.get(id(params), 0) + 1
        for i, params in enumerate(params_list):
            req = params.get("__req__") if isinstance(params, dict) else None
            if req is None or seen[id(params)] > 1:  # speculative rows: one state for several drafts
                continue
            narrow_row(req, logits, i, window=params.get(BUDGET_WINDOW_PARAM, 32))
        return logits


def narrow_row(req: Any, logits: Any, i: int, *, window: Any = 32) -> bool:
    """Narrow row ``i`` of ``logits`` (-inf outside) for SGLang request ``req`` (its ``grammar``,
    ``sampling_params.max_new_tokens`` and ``output_ids``). Returns whether it narrowed.

    Never raises for a request (it runs in SGLang's sampler): a bad ``window`` or a grammar error is
    logged and the row left as it is.
    """
    grammar = getattr(req, "grammar", None)
    grammar = getattr(grammar, "grammar", grammar)  # SGLang's reasoning wrapper holds ours
    if not isinstance(grammar, GrammarmaskGrammar):
        return False
    max_tokens = getattr(req.sampling_params, "max_new_tokens", None)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return False
    with grammar._lock:
        if grammar.error is not None or grammar.matcher.is_finished():
            return False
        budget = grammar.budget
        try:
            if budget is None or budget.max_tokens != max_tokens:
                budget = grammar.budget = RowBudget(grammar.compiled, max_tokens, window=window)
        except GrammarError as e:
            logger.warning("grammarmask: no budget-aware masks for this request: %s", e)
            return False
        row = logits[i]
        words = np.zeros((1, grammar.compiled.vocab.n_words), np.uint32)
        grammar.stops.fill(grammar.matcher, words, 0)
        try:
            if not budget.restrict(grammar.matcher, words, 0, len(req.output_ids), scores=row,
                                   stop_words=grammar.stops.words):
                return False
        except GrammarMaskError as e:  # the mask-filling path reports it and fails the request
            logger.warning("grammarmask: no budget-aware mask for this row: %s", e)
            return False
    import torch

    _apply(logits[i:i + 1], torch.from_numpy(words.view(np.int32)))
    return True


# --- token healing -------------------------------------------------------------------------------------

#: the sampling-parameter keys of SGLang's constraints, one of which a healed request must carry
_CONSTRAINTS = ("json_schema", "regex", "ebnf", "structural_tag")
_VOCABS: dict[int, tuple[Any, Vocabulary]] = {}


@dataclasses.dataclass(frozen=True)
class HealedRequest:
    """A request backed off to a token boundary (:func:`heal_request`): give SGLang ``input_ids`` and
    ``sampling_params``; the output text starts with ``removed`` (the bytes the prompt gave up,
    written back by the model), which :meth:`strip` drops."""

    input_ids: list[int]
    sampling_params: dict[str, Any]
    removed: bytes

    def strip(self, text: str) -> str:
        """``text`` (an output's text) without the healed bytes it starts with: the text after the
        prompt as it was given. Raises GrammarError when ``text`` does not start with them."""
        from ..healing import strip_healed

        return strip_healed(text, self.removed)


def heal_request(tokenizer: Any, prompt: str | list[int], sampling_params: dict[str, Any], *,
                 heal_tokens: int = 4, vocab: Vocabulary | None = None) -> HealedRequest:
    """Token healing for an SGLang request (``Engine.generate`` or ``/generate``): ``prompt`` (text,
    tokenized with ``tokenizer.encode``, or token ids) loses its longest run of final tokens (at
    most ``heal_tokens``) that a longer token starts with (:func:`grammarmask.heal_prompt`), and a
    copy of ``sampling_params`` has its constraint marked (:func:`heal_spec`) so that the
    grammarmask backend compiles ``gm.healed(grammar, removed)``.

    ``sampling_params`` must carry one of ``json_schema``, ``regex``, ``ebnf``, ``structural_tag``:
    the healed bytes are enforced through it. ``tokenizer``: the Hugging Face tokenizer the server
    runs; ``vocab``: its grammarmask vocabulary, if you have it (with token ids, ``tokenizer`` may then
    be None).

    Raises
    ------
    GrammarError
        No constraint (or more than one), the prompt holds ids outside the vocabulary, or neither a
        tokenizer nor (for token ids) a vocabulary is given.
    """
    from ..healing import heal_prompt

    keys = [k for k in _CONSTRAINTS if sampling_params.get(k) is not None]
    if len(keys) != 1:
        raise GrammarError("heal_request: the sampling parameters need exactly one constraint "
                           f"({', '.join(_CONSTRAINTS)}), got {keys or 'none'}; healing is enforced "
                           "through its grammar")
    if tokenizer is None and (vocab is None or isinstance(prompt, str)):
        raise GrammarError("heal_request: give the tokenizer (or, for a prompt of token ids, vocab=)")
    if vocab is None:
        hit = _VOCABS.get(id(tokenizer))
        if hit is None or hit[0] is not tokenizer:
            hit = _VOCABS[id(tokenizer)] = (tokenizer, Vocabulary.from_hf(tokenizer))
        vocab = hit[1]
    ids = list(tokenizer.encode(prompt)) if isinstance(prompt, str) else [int(t) for t in prompt]
    h = heal_prompt(vocab, ids, max_tokens=heal_tokens)
    params = dict(sampling_params)
    spec = params[keys[0]]
    if not isinstance(spec, str):
        spec = json.dumps(spec)
    params[keys[0]] = heal_spec(split_heal(spec)[1], h.removed)
    return HealedRequest(list(h.token_ids), params, h.removed)
