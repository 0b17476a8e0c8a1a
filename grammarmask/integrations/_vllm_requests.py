"""Per-request options of both vLLM paths (budget-aware masks, token healing), read from a request's
``SamplingParams``, and :func:`heal_request`, which prepares a healed request. Re-exported by
:mod:`grammarmask.integrations.vllm`; vLLM itself is imported only by :func:`heal_request`.

- **Budget-aware masks** (default on, as in :func:`grammarmask.generate`): the request's
  ``max_tokens`` is the budget. ``GRAMMARMASK_VLLM_BUDGET_AWARE=0`` in the server's environment turns
  them off for every request, ``extra_args={"grammarmask_budget_aware": False}`` (or ``"false"``, as a
  server's ``vllm_xargs`` carry it) for one. ``GRAMMARMASK_VLLM_BUDGET_WINDOW`` (default 32): for
  context-free grammars, how many tokens before the budget binds the masks start to narrow.
- **Token healing**: ``extra_args["grammarmask_heal"]`` holds the bytes the prompt gave up, as hex;
  the request's grammar becomes ``gm.healed(grammar, those bytes)``. :func:`heal_request` sets it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import GrammarError
from ..healing import heal_prompt, strip_healed
from ..vocab import Vocabulary

__all__ = ["BUDGET_ARG", "BUDGET_ENV", "BUDGET_WINDOW_ENV", "HEAL_ARG", "HealedRequest", "RequestOptions",
           "heal_request", "request_options"]

#: budget-aware masks for every request (default on; ``0``, false, no or off: off)
BUDGET_ENV = "GRAMMARMASK_VLLM_BUDGET_AWARE"
#: for context-free grammars, how many tokens before the budget binds masks start to narrow
BUDGET_WINDOW_ENV = "GRAMMARMASK_VLLM_BUDGET_WINDOW"
#: ``SamplingParams.extra_args`` key: False (or ``"false"``) turns budget-aware masks off for a request
BUDGET_ARG = "grammarmask_budget_aware"
#: ``SamplingParams.extra_args`` key that :func:`heal_request` sets: the healed bytes as hex
HEAL_ARG = "grammarmask_heal"
_WINDOW = 32
_OFF = ("0", "false", "no", "off")


@dataclass(frozen=True)
class RequestOptions:
    """What a request asks of grammarmask besides its grammar: ``max_tokens`` for budget-aware masks
    (None: off), the ``window`` for context-free grammars, and the ``heal`` bytes its output starts with."""

    max_tokens: int | None = None
    window: int = _WINDOW
    heal: bytes = b""


def request_options(params: Any) -> RequestOptions:
    """The options of one request (a vLLM ``SamplingParams``) under the server's environment.

    Raises
    ------
    GrammarError
        ``extra_args["grammarmask_heal"]`` is not hex text, ``grammarmask_budget_aware`` is not a
        bool (or its text), or ``GRAMMARMASK_VLLM_BUDGET_WINDOW`` is not an integer >= 0.
    """
    extra = getattr(params, "extra_args", None) or {}
    heal_hex = extra.get(HEAL_ARG)
    heal = b""
    if heal_hex is not None:
        try:
            if not isinstance(heal_hex, str):
                raise ValueError(type(heal_hex).__name__)
            heal = bytes.fromhex(heal_hex)
        except ValueError:
            raise GrammarError(f'extra_args["{HEAL_ARG}"] must be the healed bytes as hex text, '
                               f"got {heal_hex!r:.60}") from None
    on = os.environ.get(BUDGET_ENV, "").strip().lower() not in _OFF
    asked = extra.get(BUDGET_ARG)
    if asked is not None:
        if isinstance(asked, str) and asked.strip().lower() in ("1", "true", "yes", "on", *_OFF):
            asked = asked.strip().lower() not in _OFF
        if not isinstance(asked, bool):
            raise GrammarError(f'extra_args["{BUDGET_ARG}"] must be true or false, got {asked!r:.60}')
        on = on and asked
    text = os.environ.get(BUDGET_WINDOW_ENV, "").strip()
    try:
        window = int(text) if text else _WINDOW
        if window < 0:
            raise ValueError("negative")
    except ValueError:
        raise GrammarError(f"{BUDGET_WINDOW_ENV}={text!r} must be an integer >= 0 (tokens)") from None
    max_tokens = getattr(params, "max_tokens", None)
    if not on or not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        max_tokens = None
    return RequestOptions(max_tokens=max_tokens, window=window, heal=heal)


@dataclass(frozen=True)
class HealedRequest:
    """A request backed off to a token boundary (:func:`heal_request`): give vLLM ``prompt`` (a
    ``TokensPrompt`` dict) and ``params``; the output text starts with ``removed`` (the bytes the
    prompt gave up, written back by the model), which :meth:`strip` drops."""

    prompt: dict[str, list[int]]
    params: Any
    removed: bytes

    def strip(self, text: str) -> str:
        """``text`` (an output's text) without the healed bytes it starts with: the text after the
        prompt as it was given. Raises GrammarError when ``text`` does not start with them."""
        return strip_healed(text, self.removed)


_VOCABS: dict[int, tuple[Any, Vocabulary]] = {}


def heal_request(tokenizer: Any, prompt: str | Sequence[int], params: Any, *, heal_tokens: int = 4,
                 vocab: Vocabulary | None = None) -> HealedRequest:
    """Token healing for a vLLM request, for either path: ``prompt`` (text, tokenized as vLLM does, or
    token ids) loses its longest run of final tokens (at most ``heal_tokens``) that a longer token
    starts with (:func:`grammarmask.heal_prompt`), and a copy of ``params`` is marked
    (``extra_args["grammarmask_heal"]``) so that the request's grammar starts by writing those bytes
    back. ``params`` must carry a constraint (``structured_outputs``, or ``extra_args["grammarmask"]``
    for the logits-processor path): the healed bytes are enforced through it.

    ``tokenizer``: ``llm.get_tokenizer()`` (or the Hugging Face tokenizer the server runs);
    ``vocab``: its grammarmask vocabulary, if you have it (else read once per tokenizer). With
    ``vocab`` and a prompt of token ids, ``tokenizer`` may be None.

    Raises
    ------
    GrammarError
        ``params`` has no constraint, the prompt holds ids outside the vocabulary, or neither a
        tokenizer nor (for token ids) a vocabulary is given.
    """
    extra = dict(getattr(params, "extra_args", None) or {})
    if getattr(params, "structured_outputs", None) is None and "grammarmask" not in extra:
        raise GrammarError("heal_request: the request has no constraint (structured_outputs, or "
                           'extra_args["grammarmask"]); healing is enforced through its grammar')
    if tokenizer is None and (vocab is None or isinstance(prompt, str)):
        raise GrammarError("heal_request: give the tokenizer (or, for a prompt of token ids, vocab=)")
    if vocab is None:
        hit = _VOCABS.get(id(tokenizer))
        if hit is None or hit[0] is not tokenizer:
            from .vllm import vocabulary_for

            size = len(tokenizer) if hasattr(tokenizer, "__len__") else tokenizer.vocab_size
            hit = _VOCABS[id(tokenizer)] = (tokenizer, vocabulary_for(tokenizer, size))
        vocab = hit[1]
    ids = list(tokenizer.encode(prompt)) if isinstance(prompt, str) else [int(t) for t in prompt]
    h = heal_prompt(vocab, ids, max_tokens=heal_tokens)
    new = params.clone()
    if h.removed:
        extra[HEAL_ARG] = h.removed.hex()
    else:
        extra.pop(HEAL_ARG, None)
    new.extra_args = extra or None
    return HealedRequest({"prompt_token_ids": list(h.token_ids)}, new, h.removed)
