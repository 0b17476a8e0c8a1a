"""What grammarmask's serving-engine backends share (vLLM: ``vllm.py``; SGLang: ``sglang.py``).

Neither engine is imported here. The pieces:

- :func:`pad_vocabulary`: a tokenizer's vocabulary over the model's (padded) number of logits;
- :func:`limits_from_env`, :func:`timeout_from_env`: per-deployment budgets and a compile time limit
  read from the environment, under each engine's own variable names;
- :class:`CompileClock`: compiles in worker threads and fails one request whose compile is slower
  than the limit (a compile that goes on stops at its budgets of :class:`grammarmask.Limits`);
- :func:`budget_hint`: a budget error's message says which variable raises the budget;
- :class:`StopTokens`: a request's set of stop tokens in place of the vocabulary's single EOS (legal
  exactly where the output is complete, never as text), for taking tokens and filling mask rows;
- :func:`looks_like_gbnf`: whether grammar text is GBNF (a rule defined with ``::=``) or Lark.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import GrammarError, GrammarMaskError
from ..grammar import CompiledGrammar, Matcher
from ..limits import Limits
from ..vocab import Vocabulary

__all__ = [
    "CompileClock",
    "StopTokens",
    "budget_hint",
    "limits_from_env",
    "looks_like_gbnf",
    "pad_vocabulary",
    "timeout_from_env",
]


def pad_vocabulary(full: Vocabulary, vocab_size: int) -> Vocabulary:
    """``full`` over the model's ``vocab_size`` logits.

    Ids from the tokenizer's length up to ``vocab_size`` are padding (never legal); tokenizer ids at
    or past ``vocab_size`` are dropped (the model cannot emit them).

    Raises
    ------
    GrammarError
        The tokenizer's EOS id lies past ``vocab_size``.
    """
    if full.size == vocab_size:
        return full
    if full.eos_token_id >= vocab_size:
        raise GrammarError(
            f"the tokenizer's EOS id {full.eos_token_id} is past the model's {vocab_size} logits")
    return Vocabulary(
        full.token_bytes[:vocab_size], eos_token_id=full.eos_token_id, size=vocab_size, name=full.name,
        special_token_ids=[i for i in full.special_ids if i < vocab_size],
        special_token_names={i: n for i, n in full.special_token_names.items() if i < vocab_size},
    )


def limits_from_env(name: str) -> Limits | None:
    """:class:`grammarmask.Limits` from the JSON object in variable ``name`` (None when unset).

    Raises
    ------
    GrammarError
        Not a JSON object of ``Limits`` fields; the message quotes the value.
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise TypeError(f"a JSON object of Limits fields, got {type(fields).__name__}")
        return Limits(**fields)
    except (ValueError, TypeError) as e:
        raise GrammarError(f"{name}={text!r} is not usable: {e}") from None


def timeout_from_env(name: str, default: float = 60.0) -> float:
    """Seconds from variable ``name`` (``default`` when unset; 0 means no limit).

    Raises
    ------
    GrammarError
        Not a number.
    """
    text = os.environ.get(name, "").strip()
    try:
        return float(text) if text else default
    except ValueError:
        raise GrammarError(f"{name}={text!r} is not a number of seconds") from None


def budget_hint(error: GrammarMaskError, engine: str, variable: str) -> None:
    """Add to a budget error's message how to raise that budget in ``engine`` (in place, same type)."""
    budget = getattr(error, "budget", None)
    if budget is not None and error.args:
        error.args = (f"{error.args[0]} (in {engine}: {variable}='{{\"{budget}\": ...}}')", *error.args[1:])


class CompileClock:
    """Compiles in up to four worker threads, each within ``timeout`` seconds (0: no limit).

    ``variable`` names the setting that raises the limit, for the error message.
    """

    def __init__(self, timeout: float, variable: str) -> None:
        self.timeout = timeout
        self.variable = variable
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, make: Callable[[], CompiledGrammar]) -> CompiledGrammar:
        """``make()``, or an error once it has run longer than the limit.

        Raises
        ------
        GrammarError
            The compile took longer than the limit (it goes on in its thread until a budget of
            :class:`grammarmask.Limits` stops it); any error of ``make`` as it is.
        """
        if self.timeout <= 0:
            return make()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="grammarmask-compile")
            future = self._pool.submit(make)
        try:
            return future.result(timeout=self.timeout)
        except FutureTimeout:
            future.cancel()
            raise GrammarError(
                f"compiling this grammar took longer than {self.timeout:g} s "
                f"(raise {self.variable} if it is meant)"
            ) from None

    def shutdown(self) -> None:
        """Stop the worker threads (queued compiles are cancelled)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None


class StopTokens:
    """A request's stop tokens, standing in for the vocabulary's EOS.

    A stop token is legal exactly where the output is complete and ends it (the matcher takes EOS);
    the vocabulary's EOS outside the set is never legal; stop ids outside the vocabulary are dropped.
    An empty or missing set means the vocabulary's EOS.
    """

    def __init__(self, vocab: Vocabulary, stop_token_ids: Iterable[int] | None = None) -> None:
        self.eos = vocab.eos_token_id
        stops = {int(t) for t in stop_token_ids or ()} or {self.eos}
        self.ids = frozenset(t for t in stops if 0 <= t < vocab.size)
        self.words = np.zeros(vocab.n_words, np.uint32)  # the stop tokens alone
        for t in self.ids:
            self.words[t >> 5] |= np.uint32(1 << (t & 31))
        self._eos_word, self._eos_bit = self.eos >> 5, np.uint32(1 << (self.eos & 31))
        # the words holding a stop token or EOS: cleared, then the stop tokens set where complete
        cleared = self.words.copy()
        cleared[self._eos_word] |= self._eos_bit
        self._edits = [(int(w), ~cleared[w], self.words[w]) for w in np.flatnonzero(cleared)]

    def take(self, matcher: Matcher, token: int) -> bool:
        """Advance ``matcher`` by ``token`` if legal (a stop token when complete: EOS); else False."""
        if token in self.ids:
            if not matcher.is_accepting():
                return False
            matcher.advance(self.eos)
            return True
        if token == self.eos:
            return False
        return matcher.try_advance(token)

    def fill(self, matcher: Matcher, words: npt.NDArray[Any], row: int) -> None:
        """Write ``matcher``'s mask with these stop tokens for EOS into ``words[row]`` (int32/uint32).

        Raises
        ------
        GrammarMaskError
            As :meth:`grammarmask.Matcher.fill_mask` (a dead end, a budget of the context-free
            engine, a buffer of the wrong shape).
        """
        matcher.fill_mask(words, row)
        out = words[row].view(np.uint32)
        accepting = bool(out[self._eos_word] & self._eos_bit)  # the matcher sets EOS iff complete
        for w, keep, stops in self._edits:
            out[w] = (out[w] & keep) | stops if accepting else out[w] & keep

    def fill_only_stops(self, words: npt.NDArray[Any], row: int) -> None:
        """A row allowing only the stop tokens (for a request that cannot be masked any more)."""
        words[row].view(np.uint32)[:] = self.words


_GBNF_RULE = re.compile(r"^\s*[A-Za-z0-9_-]+\s*::=", re.M)


def looks_like_gbnf(text: str) -> bool:
    """Whether grammar text is GBNF: some line defines a rule with ``::=`` (else it is read as Lark)."""
    return _GBNF_RULE.search(text) is not None
