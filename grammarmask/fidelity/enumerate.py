"""Exact distributions on a finite language: every token path of every string, scored by the model.

Token-by-token masking samples a path ``y = t_1 ... t_n EOS`` with probability

    q(y) = prod_i p(t_i | t_<i) / Z_i,     Z_i = sum over the legal tokens at step i of p(t | t_<i),

while the model's distribution conditioned on the whole output being in the language ``L`` is

    pi(y) = p(y) / P(L),     p(y) = prod_i p(t_i | t_<i),     P(L) = sum over paths of L of p(y).

Both are distributions over token paths; a string's probability is the sum over its paths (every
tokenization the masks allow, not only the canonical one). :func:`exact_distributions` walks the tree
of legal prefixes breadth first with the compiled grammar's masks, asks the model for one level at a
time (``batch_logits`` when the model has it), and sums both quantities per string. It is exact: no
sampling, no pruning (paths of probability 0 are left out of both).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._args import as_int_list
from ..errors import BudgetExceeded, GrammarError
from ..grammar import CompiledGrammar, Grammar, Matcher, ensure_compiled
from ..vocab import Vocabulary
from ._scoring import F64, I64, check_positive, check_temperature, legal_ids, logsumexp, next_logprobs

__all__ = ["FiniteDistributions", "PathBudgetExceeded", "ReplayModel", "TokenPath", "exact_distributions"]


class PathBudgetExceeded(BudgetExceeded):
    """The language has more token paths than ``max_paths``, or a string longer than ``max_tokens``
    tokens (an infinite language always ends here): enumerate a smaller language, raise the budget,
    or sample with :func:`grammarmask.aligned_sample` (``method="smc"``) instead."""

    def __init__(self, budget: str, value: int, what: str) -> None:
        self.budget, self.value, self.what, self.where = budget, value, what, ""
        GrammarError.__init__(
            self, f"{what}: over the {budget} budget ({value}); raise {budget}=... if the language is meant "
            "to be enumerated, or use aligned_sample(method='smc') (infinite languages never enumerate)"
        )


@dataclass(frozen=True)
class TokenPath:
    """One token path of a string of the language (EOS not included in ``token_ids``).

    ``log_p`` is the model's log-probability of the tokens and the closing EOS; ``log_q`` is the
    masked sampler's (each step renormalised over the legal tokens).
    """

    token_ids: tuple[int, ...]
    text_bytes: bytes
    log_p: float
    log_q: float


@dataclass(frozen=True)
class FiniteDistributions:
    """The result of :func:`exact_distributions`.

    Attributes
    ----------
    paths
        Every token path with nonzero probability, in breadth-first order.
    log_mass
        ``log P(L)``: the model's log-probability of emitting some string of the language (then EOS).
    exact
        ``p(y | y in L)`` per string (bytes), summed over its paths.
    masked
        The masked sampler's probability per string, summed over its paths.
    masked_dead_end
        The masked sampler's probability of reaching a prefix no token continues (where it raises
        ``NoLegalContinuation``); 0 with a byte-level vocabulary. ``masked`` sums to 1 minus this.
    n_nodes
        Prefixes scored by the model (one row of logits each).
    temperature
        The temperature both distributions are taken at.
    """

    paths: tuple[TokenPath, ...]
    log_mass: float
    exact: dict[bytes, float]
    masked: dict[bytes, float]
    masked_dead_end: float
    n_nodes: int
    temperature: float
    prompt_ids: tuple[int, ...]
    vocab_size: int
    _nodes: Mapping[tuple[int, ...], tuple[I64, F64]] = field(repr=False, compare=False)

    def replay_model(self) -> ReplayModel:
        """A model that answers every prefix of the tree with the distribution recorded here, so that
        samplers can be measured on exactly these numbers without calling the model again."""
        return ReplayModel(self)


class ReplayModel:
    """A :class:`~grammarmask.models.LogitsModel` over the prefixes a :class:`FiniteDistributions`
    scored: the legal tokens get their recorded log-probabilities (at the recorded temperature, so use
    it at temperature 1), one illegal token carries the rest of the mass (so ``Z`` is exact too), every
    other token ``-inf``. A sequence outside the tree is a ``GrammarError``."""

    def __init__(self, dists: FiniteDistributions) -> None:
        self._dists = dists
        self._n_prompt = len(dists.prompt_ids)
        self.vocab_size = dists.vocab_size

    def __repr__(self) -> str:
        return f"<ReplayModel of {len(self._dists._nodes)} prefixes>"

    def __call__(self, token_ids: Sequence[int]) -> F64:
        ids = tuple(int(t) for t in token_ids)
        if ids[: self._n_prompt] != self._dists.prompt_ids:
            raise GrammarError("ReplayModel: the sequence does not start with the recorded prompt")
        node = self._dists._nodes.get(ids[self._n_prompt:])
        if node is None:
            raise GrammarError(f"ReplayModel: prefix {list(ids[self._n_prompt:])} was not scored "
                               "(not a legal prefix of the enumerated language)")
        legal, lps = node
        out = np.full(self.vocab_size, -math.inf)
        out[legal] = lps
        rest = logsumexp(lps)
        if rest < 0.0 and legal.size < self.vocab_size:
            spare = int(np.flatnonzero(np.isin(np.arange(min(self.vocab_size, legal.size + 1)), legal,
                                               invert=True))[0])
            out[spare] = math.log(-math.expm1(rest)) if rest < -1e-12 else -math.inf
        return out

    def batch_logits(self, sequences: Sequence[Sequence[int]]) -> F64:
        """One row per sequence (see the class docstring)."""
        return np.stack([self(s) for s in sequences])


def exact_distributions(
    model: Any,
    vocab: Vocabulary,
    grammar: Grammar | CompiledGrammar,
    prompt_ids: Sequence[int] = (),
    *,
    temperature: float = 1.0,
    max_paths: int = 10_000,
    max_tokens: int = 64,
    batch_size: int = 64,
) -> FiniteDistributions:
    """The exact conditional ``p(y | y in L)`` and the masked sampler's exact distribution, per string.

    Walks every legal prefix of the finite language ``L`` (all tokenizations, as the masks allow
    them), scoring each with the model after ``prompt_ids``: one model row per prefix, one level of
    the tree per ``batch_logits`` call (in chunks of ``batch_size``) when the model has that method.
    Both distributions are taken at ``temperature`` (``softmax(logits / temperature)`` per step).

    Raises
    ------
    PathBudgetExceeded
        More than ``max_paths`` token paths, or a string longer than ``max_tokens`` tokens (an
        infinite language).
    GrammarError
        A grammar compiled for another vocabulary, bad options, bad logits, or a language the model
        gives probability 0.
    """
    compiled = ensure_compiled(grammar, vocab, caller="exact_distributions()")
    temperature = check_temperature(temperature, "exact_distributions()")
    max_paths = check_positive(max_paths, "exact_distributions(): max_paths")
    max_tokens = check_positive(max_tokens, "exact_distributions(): max_tokens")
    batch_size = check_positive(batch_size, "exact_distributions(): batch_size")
    prompt = as_int_list(prompt_ids, "exact_distributions: prompt_ids")
    eos = vocab.eos_token_id
    level: list[tuple[tuple[int, ...], Matcher, float, float]] = [((), compiled.matcher(), 0.0, 0.0)]
    paths: list[TokenPath] = []
    dead: list[float] = []  # log q of the prefixes no token continues
    nodes: dict[tuple[int, ...], tuple[I64, F64]] = {}
    width = vocab.size
    for depth in range(max_tokens + 1):
        if not level:
            break
        if depth == max_tokens:
            raise PathBudgetExceeded("max_tokens", max_tokens,
                                     f"the language has a string longer than {max_tokens} tokens")
        rows = next_logprobs(model, [prompt + list(p) for p, *_ in level], width, temperature, batch_size)
        width = rows[0].size
        nxt: list[tuple[tuple[int, ...], Matcher, float, float]] = []
        for (prefix, matcher, lp, lq), row in zip(level, rows):
            legal = legal_ids(matcher)
            lps = row[legal]
            nodes[prefix] = (legal, lps)
            lz = logsumexp(lps)
            if legal.size == 0:
                dead.append(lq)
            for t, lt in zip(legal.tolist(), lps.tolist()):
                if lt == -math.inf:
                    continue
                if t == eos:
                    paths.append(TokenPath(prefix, vocab.decode(prefix), lp + lt, lq + lt - lz))
                    continue
                child = matcher.fork()
                child.advance(t)
                nxt.append((prefix + (t,), child, lp + lt, lq + lt - lz))
            if len(paths) + len(nxt) > max_paths:  # every open prefix ends in at least one path
                raise PathBudgetExceeded("max_paths", max_paths,
                                         f"the language has more than {max_paths} token paths")
        level = nxt
    return _summarise(paths, dead, nodes, temperature, tuple(prompt), width)


def _summarise(paths: list[TokenPath], dead: list[float], nodes: dict[tuple[int, ...], tuple[I64, F64]],
               temperature: float, prompt: tuple[int, ...], width: int) -> FiniteDistributions:
    if not paths:
        raise GrammarError("exact_distributions(): the model gives every string of the language "
                           "probability 0")
    log_mass = logsumexp(np.array([p.log_p for p in paths]))
    exact: dict[bytes, float] = {}
    masked: dict[bytes, float] = {}
    for p in paths:
        exact[p.text_bytes] = exact.get(p.text_bytes, 0.0) + math.exp(p.log_p - log_mass)
        masked[p.text_bytes] = masked.get(p.text_bytes, 0.0) + math.exp(p.log_q)
    return FiniteDistributions(paths=tuple(paths), log_mass=log_mass, exact=exact, masked=masked,
                               masked_dead_end=sum(math.exp(x) for x in dead), n_nodes=len(nodes),
                               temperature=temperature, prompt_ids=prompt,
                               vocab_size=width, _nodes=nodes)
