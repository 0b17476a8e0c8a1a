"""Token healing: a prompt that ends where the tokenizer would have gone on inside one token.

A prompt cut inside what the tokenizer writes as one token (``"url": "https:`` where ``://`` is one
token, or half a word) leaves the model at a boundary it never saw in training, and its next token
is often wrong. :func:`heal_prompt` backs the prompt off to an earlier token boundary: it removes the
longest run of final tokens (at most ``max_tokens``) whose bytes some longer token of the vocabulary
starts with. :func:`healed` then makes the output start with the removed bytes, so the model may
write them back with any tokens, the longer ones included, as llguidance does.

``gm.generate(..., heal=True)`` does both and returns only the text after the prompt as it was
given. With Hugging Face ``generate``, ``GrammarLogitsProcessor.healed(compiled, prompt_ids)``
returns the processor for the healed grammar and the backed-off prompt in one call
(docs/howto_transformers.md); with vLLM, :func:`grammarmask.integrations.vllm.heal_request` prepares
a request for either of its paths (docs/howto_vllm.md).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._args import as_int, as_int_list
from .engine import compile_dfa
from .errors import GrammarError
from .grammar import CompiledGrammar, Grammar
from .vocab import Vocabulary

__all__ = ["HealedPrompt", "heal_prompt", "healed", "strip_healed"]


@dataclass(frozen=True)
class HealedPrompt:
    """A prompt backed off to a token boundary: ``token_ids`` to give the model, and the ``removed``
    bytes its output must start with (empty: nothing to heal)."""

    token_ids: tuple[int, ...]
    removed: bytes


def heal_prompt(vocab: Vocabulary, prompt_ids: Sequence[int], *, max_tokens: int = 4) -> HealedPrompt:
    """``prompt_ids`` without its longest run of final tokens (at most ``max_tokens``, special tokens
    never) whose bytes are a proper prefix of some token of ``vocab``.

    Raises
    ------
    GrammarError
        ``prompt_ids`` holds something other than ids of ``vocab``, or ``max_tokens`` is negative.
    """
    ids = as_int_list(prompt_ids, "heal_prompt: prompt_ids")
    max_tokens = as_int(max_tokens, "heal_prompt: max_tokens")
    if max_tokens < 0:
        raise GrammarError(f"heal_prompt: max_tokens must be >= 0, got {max_tokens}")
    bad = [t for t in ids if not 0 <= t < vocab.size]
    if bad:
        raise GrammarError(f"heal_prompt: token id {bad[0]} is outside the vocabulary (size {vocab.size})")
    best = 0
    tail = b""
    for k in range(1, min(max_tokens, len(ids)) + 1):
        piece = vocab.token_bytes[ids[-k]] if ids[-k] < len(vocab.token_bytes) else b""
        if not piece or ids[-k] in vocab.special_ids:
            break  # never back off over a special token (a chat template's markers)
        tail = piece + tail
        if _extended(vocab, tail):
            best = k
    kept = ids[: len(ids) - best]
    return HealedPrompt(tuple(kept), vocab.decode(ids[len(kept):]))


def _extended(vocab: Vocabulary, data: bytes) -> bool:
    """Whether some normal token's bytes start with ``data`` and are longer."""
    trie = vocab.trie
    node = 0
    for b in data:
        lo, hi = int(trie.child_lo[node]), int(trie.child_hi[node])
        i = lo + int(np.searchsorted(trie.byte[lo:hi], b))
        if i >= hi or int(trie.byte[i]) != b:
            return False
        node = i
    return int(trie.max_len_below[node]) > 0


class _Prefix(Grammar):
    """Exactly the bytes ``data`` (the part of a healed output the prompt gave up)."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)

    def __repr__(self) -> str:
        return f"<healed prefix {self.data!r}>"

    def cache_key(self) -> Hashable:
        return self.data

    def to_dfa(self) -> Any:
        from .automata import literal_dfa

        return literal_dfa(self.data)

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        return compile_dfa(self.to_dfa(), vocab)


def healed(grammar: Grammar | CompiledGrammar, removed: bytes) -> Grammar | CompiledGrammar:
    """``grammar`` for a healed prompt: the output is ``removed`` followed by a sentence of
    ``grammar`` (tokens may cross from one into the other). A compiled grammar comes back compiled
    against the same vocabulary, limits and engine; with nothing removed, ``grammar`` itself.

    Raises
    ------
    GrammarError
        ``grammar`` is neither a Grammar nor a CompiledGrammar made by ``Grammar.compile``.
    """
    if not removed:
        return grammar
    if isinstance(grammar, Grammar):
        return _Prefix(removed) + grammar
    source = getattr(grammar, "_source", None) if isinstance(grammar, CompiledGrammar) else None
    if source is None:
        raise GrammarError(f"healed: expected a Grammar or a compiled grammar, got {type(grammar).__name__}")
    inner, vocab, limits, engine = source
    whole = _Prefix(removed) + inner
    out: CompiledGrammar = whole.compile(vocab.base or vocab, limits=limits, engine=engine)
    return out


def strip_healed(text: str, removed: bytes) -> str:
    """``text`` (a healed request's output) without the healed bytes ``removed`` it starts with: the
    text after the prompt as it was given. Raises GrammarError when ``text`` does not start with them."""
    from .errors import GrammarError

    data = text.encode("utf-8", "surrogatepass")
    if not data.startswith(removed):
        raise GrammarError(f"the output {text[:40]!r} does not start with the healed bytes {removed!r}")
    return data[len(removed):].decode("utf-8", "replace")
