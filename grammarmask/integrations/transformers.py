"""Hugging Face transformers adapter: a ``LogitsProcessor`` that keeps ``model.generate`` in a grammar.

Usage::

    vocab = gm.Vocabulary.from_hf(tokenizer, size=model.config.vocab_size)
    compiled = grammar.compile(vocab)
    out = model.generate(**inputs, logits_processor=[GrammarLogitsProcessor(compiled)],
                         eos_token_id=vocab.eos_token_id, max_new_tokens=200)

torch is imported only when the processor is first called, and transformers not at all (the processor
follows its ``LogitsProcessor`` call protocol without subclassing it), so importing this module is
cheap and ``import grammarmask`` never pulls in either.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import GrammarError, TokenRejected
from ..grammar import CompiledGrammar, Matcher
from ..healing import HealedPrompt

__all__ = ["BatchedHF", "GrammarLogitsProcessor"]


class GrammarLogitsProcessor:
    """Masks each row's scores to the tokens its grammar allows (``-inf`` elsewhere).

    Lifecycle: create one processor per ``generate`` call. On the first call the prompt length is
    taken from ``input_ids`` (unless ``prompt_length`` is given); every row's generated tokens are
    ``input_ids[row, prompt_length:]``. Each distinct generated sequence gets a matcher, created
    lazily and advanced by the tokens appended since the previous call (forked when several rows
    share a history), so several rows, ``num_return_sequences``, and beam search (which reorders rows
    between steps) all work. A row that already took EOS keeps only EOS legal (transformers pads it).
    ``reset()`` makes the processor reusable for a new prompt.

    Parameters
    ----------
    compiled_grammar
        The grammar compiled for the tokenizer's vocabulary (built with the model's vocabulary size,
        or a smaller one: score columns past ``vocab.size`` are padding and always masked).
    prompt_length
        Tokens of ``input_ids`` that are prompt (default: the length at the first call).
    max_tokens
        Budget-aware mode: the ``max_new_tokens`` given to ``generate`` (the processor cannot see it).
        Each row then only allows tokens after which its shortest known completion still fits, EOS
        included (:func:`grammarmask.completion.shortest_completion`), so the row ends in a complete
        document within the budget. Checking a token costs a parser step, so a row allows at most
        ``budget_candidates`` such tokens, the highest-scoring first (a top-k among the tokens that
        can finish), plus the completion's own next token. Rows whose grammar has no known
        completion (compositions) are masked as without the option. None (default): off.
    budget_candidates
        See ``max_tokens`` (default 64). The rule is shared with the vLLM integrations
        (:func:`grammarmask.integrations._budget.narrow`).

    Token healing: :meth:`healed` builds the processor and the backed-off prompt in one call.

    Raises (from ``__call__``)
    --------------------------
    GrammarError
        ``scores`` narrower than the vocabulary, or ``input_ids`` shorter than the prompt.
    TokenRejected
        A row holds a token the grammar forbids (the scores were not masked by this processor).
    NoLegalContinuation
        A row's grammar dead-ended.
    """

    def __init__(self, compiled_grammar: CompiledGrammar, *, prompt_length: int | None = None,
                 max_tokens: int | None = None, budget_candidates: int = 64) -> None:
        if not isinstance(compiled_grammar, CompiledGrammar):
            raise GrammarError(
                "GrammarLogitsProcessor needs a CompiledGrammar (grammar.compile(vocab)), "
                f"got {type(compiled_grammar).__name__}"
            )
        if prompt_length is not None and prompt_length < 0:
            raise GrammarError(f"prompt_length must be >= 0, got {prompt_length}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 0):
            raise GrammarError(f"max_tokens must be None or an integer >= 0, got {max_tokens!r}")
        if isinstance(budget_candidates, bool) or not isinstance(budget_candidates, int) \
                or budget_candidates < 1:
            raise GrammarError(f"budget_candidates must be an integer >= 1, got {budget_candidates!r}")
        self.max_tokens = max_tokens
        self.budget_candidates = budget_candidates
        self.compiled = compiled_grammar
        self.vocab = compiled_grammar.vocab
        self.prompt_length = prompt_length
        self._initial_prompt_length = prompt_length
        self._matchers: dict[tuple[int, ...], Matcher] = {}
        self._words: npt.NDArray[np.int32] = np.zeros((0, self.vocab.n_words), np.int32)
        #: with :meth:`healed`: the prompt's bytes the output writes back first (else empty)
        self.healed_prefix = b""

    @classmethod
    def healed(cls, compiled_grammar: CompiledGrammar, prompt_ids: Any, *, heal_tokens: int = 4,
               **options: Any) -> tuple[GrammarLogitsProcessor, HealedPrompt]:
        """Token healing in one call: the processor for ``prompt_ids`` backed off to a token boundary,
        and the :class:`~grammarmask.HealedPrompt` to generate from.

        ``prompt_ids`` (a list, or a 1-D or one-row tensor) loses its longest run of final tokens (at
        most ``heal_tokens``) that some longer token starts with (:func:`grammarmask.heal_prompt`);
        the processor's grammar is ``gm.healed(compiled_grammar, removed)``, so the output starts by
        writing the removed bytes back, with any tokens, then follows the grammar. Generate from
        ``healed.token_ids``; the decoded output starts with ``healed.removed`` (drop it to get the
        text after the prompt as given). ``options`` go to the constructor; with ``max_tokens``, a
        healed regular grammar is budget-aware, a healed context-free one is not (a composition with
        no known completion: masked as without the option).

        Raises
        ------
        GrammarError
            Several prompts (heal each with its own processor), or ids outside the vocabulary.
        """
        from ..healing import heal_prompt, healed

        if not isinstance(compiled_grammar, CompiledGrammar):
            raise GrammarError(
                "GrammarLogitsProcessor.healed needs a CompiledGrammar (grammar.compile(vocab)), "
                f"got {type(compiled_grammar).__name__}"
            )
        ids = prompt_ids.tolist() if hasattr(prompt_ids, "tolist") else list(prompt_ids)
        if ids and isinstance(ids[0], list):
            if len(ids) != 1:
                raise GrammarError(f"GrammarLogitsProcessor.healed heals one prompt, got {len(ids)} rows")
            ids = ids[0]
        h = heal_prompt(compiled_grammar.vocab, ids, max_tokens=heal_tokens)
        grammar = healed(compiled_grammar, h.removed)
        assert isinstance(grammar, CompiledGrammar)
        proc = cls(grammar, prompt_length=len(h.token_ids), **options)
        proc.healed_prefix = h.removed
        return proc, h

    def __repr__(self) -> str:
        return f"<GrammarLogitsProcessor {type(self.compiled).__name__} rows={len(self._matchers)}>"

    def reset(self) -> None:
        """Forget every row (and the prompt length, unless it was given)."""
        self._matchers = {}
        self.prompt_length = self._initial_prompt_length

    def matchers(self) -> dict[tuple[int, ...], Matcher]:
        """The live matchers, keyed by each row's generated token ids (for inspection)."""
        return dict(self._matchers)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        batch, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        width = int(scores.shape[-1])
        if width < self.vocab.size:
            raise GrammarError(
                f"the scores have {width} columns but the vocabulary has {self.vocab.size} tokens"
            )
        if self.prompt_length is None:
            self.prompt_length = length
        if length < self.prompt_length:
            raise GrammarError(
                f"input_ids have {length} columns, fewer than the prompt length {self.prompt_length}: "
                "call reset() before reusing the processor for a new prompt"
            )
        keys = [tuple(r) for r in input_ids[:, self.prompt_length :].tolist()]
        current = self._advance_rows(keys)
        words = self._buffer(batch)
        eos = self.vocab.eos_token_id
        for row, key in enumerate(keys):
            m = current[key]
            if m.is_finished():
                words[row] = 0
                words[row, eos >> 5] = np.int32(np.uint32(1 << (eos & 31)).view(np.int32))
            else:
                m.fill_mask(words, row)
                if self.max_tokens is not None:
                    self._budget_row(m, words, row, self.max_tokens - len(key), scores[row])
        self._matchers = current
        legal = self._legal(words, width)
        if scores.device.type == "cpu" and scores.dtype in (torch.float32, torch.float64, torch.float16):
            # numpy's select is several times faster than torch's masked_fill on CPU
            arr = scores.detach().numpy()
            return torch.from_numpy(np.where(legal, arr, arr.dtype.type(-np.inf)))
        return scores.masked_fill(~torch.from_numpy(legal).to(scores.device), float("-inf"))

    # --- internals -------------------------------------------------------------------------------

    def _budget_row(self, m: Matcher, words: npt.NDArray[np.int32], row: int, left: int, scores: Any) -> None:
        """Narrow ``words[row]`` to the tokens that leave room to finish within ``left`` tokens."""
        from ..completion import BudgetPlan
        from ._budget import narrow

        narrow(BudgetPlan(self.compiled), m, words, row, left, scores=scores.detach().float().cpu().numpy(),
               candidates=self.budget_candidates)

    def _advance_rows(self, keys: list[tuple[int, ...]]) -> dict[tuple[int, ...], Matcher]:
        distinct = list(dict.fromkeys(keys))
        sharing = Counter(k[:-1] for k in distinct if k)
        current: dict[tuple[int, ...], Matcher] = {}
        for key in distinct:
            m = self._matchers.get(key)
            if m is None:
                m = self._from_parent(key, sharing)
            current[key] = m
        return current

    def _from_parent(self, key: tuple[int, ...], sharing: Counter[tuple[int, ...]]) -> Matcher:
        parent = self._matchers.get(key[:-1]) if key else None
        if parent is None:  # a row we have not seen: replay its tokens
            m = self.compiled.matcher()
            for t in key:
                if m.is_finished():
                    break  # tokens after EOS are padding
                self._advance(m, t, key)
            return m
        if parent.is_finished():
            return parent
        m = parent.fork() if sharing[key[:-1]] > 1 else parent
        self._advance(m, key[-1], key)
        return m

    @staticmethod
    def _advance(m: Matcher, token: int, key: tuple[int, ...]) -> None:
        try:
            m.advance(token)
        except TokenRejected as e:
            raise TokenRejected(
                token, f"generated token {len(key)} of a row is not allowed by the grammar ({e})"
            ) from e

    def _buffer(self, batch: int) -> npt.NDArray[np.int32]:
        if self._words.shape[0] != batch:
            self._words = np.zeros((batch, self.vocab.n_words), np.int32)
        return self._words

    def _legal(self, words: npt.NDArray[np.int32], width: int) -> npt.NDArray[np.bool_]:
        """Packed words -> a [batch, width] bool array (padding columns False)."""
        bits = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little").view(np.bool_)
        size = self.vocab.size
        if bits.shape[1] >= width:
            bits = bits[:, :width]
            bits[:, size:] = False
            return bits
        legal = np.zeros((words.shape[0], width), dtype=np.bool_)
        legal[:, : bits.shape[1]] = bits
        return legal


def cache_argument(model: Any) -> str:
    """The name of the key-value cache in ``model.forward`` and its output: ``cache`` from transformers
    5.24 on, ``past_key_values`` before (5.24 deprecates that name with a FutureWarning)."""
    import inspect

    forward = getattr(model, "forward", None)
    params = inspect.signature(forward).parameters if forward is not None else {}
    return "cache" if "cache" in params else "past_key_values"


class HFModel:
    """A Hugging Face causal LM as a :class:`~grammarmask.models.LogitsModel` for
    :func:`grammarmask.generate`: ``model(token_ids)`` returns the next-token logits (float32 numpy).

    It keeps the key-value cache of the last sequence it saw: a call whose ``token_ids`` extend that
    sequence feeds only the new tokens (one, or several after jump-forward); any other sequence starts
    a new cache. One instance serves one sequence at a time (not thread-safe).
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self._cache_arg = cache_argument(model)
        self._ids: list[int] = []
        self._past: Any = None
        self.forward_calls = 0

    def __repr__(self) -> str:
        return f"<HFModel {type(self.model).__name__} cached={len(self._ids)}>"

    def reset(self) -> None:
        """Drop the cache."""
        self._ids, self._past = [], None

    def __call__(self, token_ids: Any) -> npt.NDArray[np.float32]:
        import torch

        ids = [int(t) for t in token_ids]
        if not ids:
            raise GrammarError("HFModel needs at least one token (a prompt or a BOS id)")
        n = len(self._ids)
        if self._past is None or n >= len(ids) or ids[:n] != self._ids:
            self.reset()
            n = 0
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([ids[n:]]), use_cache=True,
                             **{self._cache_arg: self._past})
        self.forward_calls += 1
        self._past = getattr(out, self._cache_arg)
        self._ids = ids
        return np.asarray(out.logits[0, -1].float().numpy(), dtype=np.float32)


class BatchedHF:
    """A Hugging Face causal LM as a :class:`~grammarmask.models.LogitsModel` with ``batch_logits``,
    for :func:`grammarmask.aligned_sample` and :func:`grammarmask.fidelity.exact_distributions`: they
    score many sequences of equal length that extend one prompt (SMC's live particles at one step, or
    one level of the enumeration tree), and this scores each batch in one forward pass.

    The prompt's keys and values are computed once (on the first batch that does not extend the
    current prompt, the batch's common prefix becomes the prompt: the samplers' first batch is the
    prompt alone). Every scored sequence keeps the keys and values of its tokens past the prompt, so a
    batch whose sequences all extend sequences of the previous length feeds one token per row, on a
    cache assembled from the prompt's and the parents'; otherwise the rows' tokens past the prompt are
    fed whole. Only the last position's logits are computed. Entries two lengths back are dropped as
    the length grows. The kept entries cost about ``2 * layers * kv_heads * head_dim * 4`` bytes per
    token per sequence (46 KB for SmolLM2-135M): 1,024 particles of 20 tokens hold about 2 GB.

    ``rows`` counts the sequences scored and ``fed`` the tokens fed. One instance serves one caller at
    a time (not thread-safe). torch and transformers are imported on first use.

    Example::

        model = BatchedHF(hf_model)
        result = gm.aligned_sample(model, vocab, grammar, prompt_ids, n_particles=64, seed=0)
    """

    def __init__(self, model: Any, prompt_ids: Any = None) -> None:
        self.model = model
        self.arg = cache_argument(model)
        self.prompt: tuple[int, ...] = ()
        self.prompt_kv: list[tuple[Any, Any]] = []
        self.last: npt.NDArray[np.float32] | None = None
        self.store: dict[tuple[int, ...], tuple[list[tuple[Any, Any]], int]] = {}
        self.rows = self.fed = 0
        if prompt_ids is not None:
            self.set_prompt(prompt_ids)

    def __repr__(self) -> str:
        return f"<BatchedHF {type(self.model).__name__} prompt={len(self.prompt)} kept={len(self.store)}>"

    def set_prompt(self, prompt_ids: Any) -> None:
        """Compute the prompt's cache (later sequences extend ``prompt_ids``; one that does not starts
        a new prompt). Raises ``GrammarError`` for an empty prompt."""
        import torch

        prompt = tuple(int(t) for t in prompt_ids)
        if not prompt:
            raise GrammarError("BatchedHF needs a prompt of at least one token (a BOS id at least)")
        if prompt == self.prompt and self.prompt_kv:
            return
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([list(prompt)]), use_cache=True)
        self.prompt, self.store = prompt, {}
        self.prompt_kv = [(k, v) for k, v, *_ in getattr(out, self.arg)]
        self.last = np.asarray(out.logits[0, -1].float().numpy(), dtype=np.float32)

    def batch_logits(self, sequences: Any) -> npt.NDArray[np.float32]:
        """Next-token logits after each sequence, ``[len(sequences), vocab]`` float32.

        Raises
        ------
        GrammarError
            An empty batch, sequences of different lengths, or a batch with no common first token.
        """
        import torch
        from transformers import DynamicCache

        seqs = [tuple(int(t) for t in s) for s in sequences]
        if not seqs or len({len(s) for s in seqs}) != 1:
            raise GrammarError("BatchedHF.batch_logits: give a non-empty batch of sequences of one length "
                               f"(got lengths {sorted({len(s) for s in seqs})})")
        n = len(self.prompt)
        if not self.prompt_kv or any(s[:n] != self.prompt for s in seqs):
            common = len(seqs[0])
            for s in seqs[1:]:
                common = min(common, next((i for i, (x, y) in enumerate(zip(seqs[0], s)) if x != y), common))
            if common == 0:
                raise GrammarError("BatchedHF.batch_logits: the sequences share no first token, so they "
                                   "extend no common prompt; call set_prompt(prompt_ids) with their prompt")
            self.set_prompt(seqs[0][:common])
            n = len(self.prompt)
        self.rows += len(seqs)
        suffix = [s[n:] for s in seqs]
        d, b = len(suffix[0]), len(suffix)
        assert self.last is not None
        if d == 0:
            return np.stack([self.last] * b)
        self.store = {k: v for k, v in self.store.items() if len(k) >= d - 1}
        parents = [self.store.get(x[:-1]) for x in suffix] if d > 1 else []
        incremental = all(p is not None for p in parents)
        layers = []
        for layer, (pk, pv) in enumerate(self.prompt_kv):
            k, v = pk.expand(b, -1, -1, -1), pv.expand(b, -1, -1, -1)
            if d > 1 and incremental:
                sk = torch.stack([p[0][layer][0][p[1]] for p in parents if p is not None])
                sv = torch.stack([p[0][layer][1][p[1]] for p in parents if p is not None])
                k, v = torch.cat([k, sk], dim=2), torch.cat([v, sv], dim=2)
            layers.append((k, v))
        feed = [list(x[-1:]) for x in suffix] if incremental else [list(x) for x in suffix]
        self.fed += b * len(feed[0])
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor(feed), use_cache=True, logits_to_keep=1,
                             **{self.arg: DynamicCache(ddp_cache_data=layers)})
        kept = [(k[:, :, n:].clone(), v[:, :, n:].clone()) for k, v, *_ in getattr(out, self.arg)]
        for row, x in enumerate(suffix):
            self.store[x] = (kept, row)
        return np.asarray(out.logits[:, -1].float().numpy(), dtype=np.float32)

    def __call__(self, token_ids: Any) -> npt.NDArray[np.float32]:
        """Next-token logits after one sequence."""
        row: npt.NDArray[np.float32] = self.batch_logits([token_ids])[0]
        return row
