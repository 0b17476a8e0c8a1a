"""Grammar-constrained beam search: every beam keeps its own forked matcher.

At each step every live beam asks the model for logits once, only the tokens its matcher allows can
extend it (EOS only where the output is a complete sentence), and the ``num_beams`` best extensions
over all beams survive. A beam that takes EOS is finished: its output is in the grammar's language.
Scores are sums of the model's log-probabilities (log-softmax over the whole vocabulary, so the
grammar's pruning does not inflate them), optionally divided by ``length ** length_penalty``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .errors import GrammarError, NoLegalContinuation
from .grammar import CompiledGrammar, Grammar, Matcher, ensure_compiled
from .models import LogitsModel
from .vocab import Vocabulary

__all__ = ["BeamHypothesis", "beam_search"]


@dataclass(frozen=True)
class BeamHypothesis:
    """One beam: its generated ``token_ids`` (EOS included when ``finished``), their bytes, the
    summed model ``log_prob`` and the ranking ``score`` (``log_prob`` after the length penalty)."""

    token_ids: tuple[int, ...]
    text_bytes: bytes
    log_prob: float
    score: float
    finished: bool

    @property
    def text(self) -> str:
        """``text_bytes`` as UTF-8 (a cut character becomes U+FFFD)."""
        return self.text_bytes.decode("utf-8", errors="replace")


def _log_softmax(logits: object, size: int) -> npt.NDArray[np.float64]:
    if not isinstance(logits, np.ndarray) and hasattr(logits, "detach"):  # torch
        logits = logits.detach().float().cpu().numpy()
    x = np.asarray(logits, dtype=np.float64)
    if x.ndim != 1 or x.shape[0] < size:
        raise GrammarError(f"the model returned logits of shape {x.shape}, expected ({size},)")
    x = x[:size]
    m = np.max(x)
    return x - (m + np.log(np.sum(np.exp(x - m))))  # type: ignore[no-any-return]


def beam_search(
    model: LogitsModel,
    vocab: Vocabulary,
    grammar: Grammar | CompiledGrammar,
    prompt_ids: Sequence[int] = (),
    *,
    num_beams: int = 4,
    max_tokens: int = 64,
    length_penalty: float = 0.0,
) -> list[BeamHypothesis]:
    """The ``num_beams`` best outputs of ``model`` inside ``grammar``, best first.

    Finished hypotheses (ended with EOS, so their output is a sentence of the grammar) rank before
    unfinished ones (cut by ``max_tokens``). The search stops when ``num_beams`` hypotheses have
    finished and no live beam can still beat the worst of them, or after ``max_tokens`` steps.

    Raises
    ------
    NoLegalContinuation
        Every beam dead-ended (only possible with intersections).
    GrammarError
        Bad options, a grammar compiled for another vocabulary, or logits of the wrong length.
    """
    compiled = ensure_compiled(grammar, vocab, caller="beam_search()")
    if isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1:
        raise GrammarError(f"num_beams must be an integer >= 1, got {num_beams!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise GrammarError(f"max_tokens must be an integer >= 0, got {max_tokens!r}")
    prompt = [int(t) for t in prompt_ids]
    eos = vocab.eos_token_id

    def score(lp: float, n: int) -> float:
        return lp / (max(n, 1) ** length_penalty) if length_penalty else lp

    beams: list[tuple[float, list[int], Matcher]] = [(0.0, [], compiled.matcher())]
    done: list[BeamHypothesis] = []
    for _ in range(max_tokens):
        cands: list[tuple[float, int, int]] = []  # (log_prob, beam index, token)
        dead = 0
        for bi, (lp, toks, m) in enumerate(beams):
            try:
                legal = m.mask().token_ids()
            except NoLegalContinuation:
                dead += 1
                continue
            logp = _log_softmax(model(prompt + toks), vocab.size)
            top = legal[np.argsort(-logp[legal], kind="stable")[:num_beams]]
            cands.extend((lp + float(logp[t]), bi, int(t)) for t in top)
        if not cands:
            if dead and not done:
                raise NoLegalContinuation("every beam dead-ended: the grammar has no legal continuation")
            break
        cands.sort(key=lambda c: (-score(c[0], len(beams[c[1]][1]) + 1), c[1], c[2]))
        nxt: list[tuple[float, list[int], Matcher]] = []
        for lp, bi, t in cands:
            _, toks, m = beams[bi]
            if t == eos:
                out = (*toks, t)
                done.append(BeamHypothesis(out, vocab.decode(out), lp, score(lp, len(out)), True))
            elif len(nxt) < num_beams:
                f = m.fork()
                f.advance(t)
                nxt.append((lp, [*toks, t], f))
            if len(nxt) >= num_beams and len(done) >= num_beams:
                break
        beams = nxt
        done.sort(key=lambda h: -h.score)
        done = done[:num_beams]
        if not beams:
            break
        # log-probabilities only fall: a live beam below the worst finished one cannot catch up
        if len(done) >= num_beams and length_penalty == 0.0 and max(b[0] for b in beams) <= done[-1].score:
            break
    live = [BeamHypothesis(tuple(t), vocab.decode(t), lp, score(lp, len(t)), False) for lp, t, _ in beams]
    live.sort(key=lambda h: -h.score)
    return (done + live)[:num_beams]
