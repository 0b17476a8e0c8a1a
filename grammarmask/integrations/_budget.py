"""Budget-aware masks for the integrations that mask one row at a time: the Hugging Face processor and
both vLLM paths share this code (:func:`narrow`).

The rule is :func:`grammarmask.generate`'s (:class:`grammarmask.completion.BudgetPlan`): with ``left``
tokens left (this one included), a token is allowed only if the shortest known completion after it
fits in the ``left - 1`` tokens that follow, EOS included (one token per byte of the completion, so
it holds for vocabularies where every byte has a token). An integration cannot resample the way
``generate`` does, so it narrows the mask instead:

- EOS stays legal where the output is complete, and the plan's own next token is always kept;
- with the row's scores: the highest-scoring legal tokens are checked in order and at most
  ``candidates`` that fit are kept (a top-k among the tokens that can still finish);
- without scores (vLLM's backend fills masks before the logits exist): for a regular grammar every
  legal token is checked (cheap: a DFA walk each); for a context-free one, checking a token costs a
  parser step, so the tokens that spell a prefix of the plan are kept and at most ``candidates``
  others, drawn at random among the legal ones (seeded by the position), are checked.

``window`` (tokens) says when to start: the mask is narrowed only once ``left - 1 - len(plan) <=
window``, so far from the budget masks and cost are unchanged. For a regular grammar
:func:`safe_window` gives the exact window (the longest shortest completion of any live state: a
token taken outside it always leaves room); for a context-free grammar no finite window is exact
in general (one token may open a structure whose shortest closing is long), so a token taken before
the window may still leave no room to finish.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..completion import BudgetPlan, _is_dfa_grammar
from ..errors import GrammarError
from ..grammar import CompiledGrammar, Matcher
from ..mask import Mask

__all__ = ["RowBudget", "narrow", "safe_window"]


def safe_window(compiled: CompiledGrammar) -> int | None:
    """For a regular grammar (one with a byte DFA), the longest shortest completion of any live state
    in bytes: narrowing within that many tokens of the budget is exact. None for other grammars."""
    hit = compiled.__dict__.get("_budget_window", False)
    if hit is not False:
        return hit  # type: ignore[no-any-return]
    out: int | None = None
    dfa = getattr(compiled, "dfa", None)
    if dfa is not None and _is_dfa_grammar(compiled):
        from ..automata.dfa import UNREACHABLE, distances_to_accept

        dist = distances_to_accept(np.asarray(dfa.transitions), np.asarray(dfa.accepting))
        live = dist[dist < UNREACHABLE]
        out = int(live.max()) if live.size else 0
    compiled.__dict__["_budget_window"] = out
    return out


def narrow(plan: BudgetPlan, matcher: Matcher, words: npt.NDArray[Any], row: int, left: int, *,
           scores: Any = None, candidates: int = 64, window: int | None = None) -> bool:
    """Narrow the mask in ``words[row]`` (the matcher's own, EOS set iff complete) to the tokens that
    leave room to finish within ``left`` tokens (this one included). Returns whether it narrowed:
    False when the state has no known completion (compositions) or is outside ``window``.

    ``scores``: the row's scores (anything numpy reads, one per id), to check the best tokens first.
    """
    compiled = plan.compiled
    if scores is not None and hasattr(scores, "detach"):  # a torch row, on any device
        scores = scores.detach().float().cpu().numpy()
    p = plan.at(matcher.state)
    if p is None or matcher.is_finished():
        return False
    if window is not None and left - 1 - len(p) > window:
        return False
    vocab = compiled.vocab
    legal = Mask(words[row], vocab.size).token_ids()
    eos = vocab.eos_token_id
    keep = [eos] if matcher.is_accepting() else []
    first = plan.next_token(matcher)
    if first is not None:
        keep.append(first)
    state = matcher.state
    if scores is not None:
        row_scores = np.asarray(scores, dtype=np.float64)[legal]
        order, limit = legal[np.argsort(-row_scores, kind="stable")].tolist(), candidates
    elif _is_dfa_grammar(compiled):
        order, limit = legal.tolist(), len(legal)
    else:
        tb = vocab.token_bytes
        along = [t for t in legal.tolist() if tb[t] and p.startswith(tb[t])]
        keep.extend(t for t in along if plan.fits(state, t, left - 1) is not None)
        rest = np.setdiff1d(legal, np.asarray(along, dtype=legal.dtype))
        order = np.random.default_rng(matcher.num_tokens).permutation(rest).tolist()
        limit = candidates
    found = 0
    for t in order:
        if found >= limit:
            break
        if t != eos and plan.fits(state, t, left - 1) is not None:
            keep.append(t)
            found += 1
    words[row] = Mask.from_token_ids(keep, vocab.size).words.view(words.dtype)
    return True


class RowBudget:
    """One request's token budget in a serving engine, narrowing the mask rows it fills.

    ``max_tokens``: the request's budget (vLLM's ``SamplingParams.max_tokens``). ``window``: for
    context-free grammars, how many tokens before the budget binds narrowing starts (regular grammars
    use :func:`safe_window`, which is exact). ``candidates``: see :func:`narrow`.

    Raises
    ------
    GrammarError
        ``max_tokens`` or ``window`` not an integer >= 0 (``max_tokens`` >= 1).
    """

    def __init__(self, compiled: CompiledGrammar, max_tokens: int, *, window: int = 32,
                 candidates: int = 64) -> None:
        for name, value, low in (("max_tokens", max_tokens, 1), ("window", window, 0),
                                 ("candidates", candidates, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise GrammarError(f"budget-aware masks: {name} must be an integer >= {low}, got {value!r}")
        self.plan = BudgetPlan(compiled)
        self.max_tokens = max_tokens
        exact = safe_window(compiled)
        self.window = exact if exact is not None else window
        self.candidates = candidates
        self.steps = 0  # rows this budget narrowed

    def __repr__(self) -> str:
        return f"<RowBudget max_tokens={self.max_tokens} window={self.window}>"

    def restrict(self, matcher: Matcher, words: npt.NDArray[Any], row: int, used: int, *,
                 scores: Any = None, stop_words: npt.NDArray[np.uint32] | None = None) -> bool:
        """Narrow ``words[row]``, already holding ``matcher``'s mask (with a serving engine's stop
        tokens in place of EOS: ``stop_words``), after ``used`` tokens of the budget. Returns
        whether it narrowed (False far from the budget, or with no known completion).

        Raises
        ------
        GrammarMaskError
            As :meth:`grammarmask.Matcher.fill_mask`.
        """
        left = self.max_tokens - used
        p = self.plan.at(matcher.state)
        if p is None or matcher.is_finished() or left - 1 - len(p) > self.window:
            return False
        vocab = self.plan.compiled.vocab
        mine = np.zeros((1, vocab.n_words), np.uint32)
        matcher.fill_mask(mine, 0)
        if not narrow(self.plan, matcher, mine, 0, left, scores=scores, candidates=self.candidates):
            return False
        allowed = mine[0] if stop_words is None else mine[0] | stop_words
        out = words[row].view(np.uint32)
        out &= allowed
        self.steps += 1
        return True
