"""Mask policies on one real model, one loop: grammarmask (canonical forced text off or on), llguidance,
and the greedy comparison that reports where two engines part.

Every engine is a :class:`Constraint`: ``legal()`` (a bool array over the model's vocabulary, EOS
included), ``advance(token)``, ``done()``. :func:`greedy` drives any of them with the same model and
the same prompt, without jump-forward (each engine's masks alone decide), so two engines with the same
mask policy must write the same tokens; :func:`first_difference` replays the common prefix into
fresh constraints and names the tokens one allows and the other does not at the first step where the
outputs differ. Used by ``tests/test_real_model.py`` and ``benchmarks/quality/run.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

import grammarmask as gm
from grammarmask.canonical import canonical

Bool = npt.NDArray[np.bool_]


class Constraint:
    """One sequence's mask policy (see the module docstring)."""

    name = "?"

    def legal(self) -> Bool:
        raise NotImplementedError

    def advance(self, token: int) -> None:
        raise NotImplementedError

    def done(self) -> bool:
        raise NotImplementedError


class GrammarmaskConstraint(Constraint):
    def __init__(self, compiled: gm.CompiledGrammar, width: int, name: str = "grammarmask") -> None:
        self.m = compiled.matcher()
        self.width = width
        self.name = name

    def legal(self) -> Bool:
        out = np.zeros(self.width, np.bool_)
        bits = self.m.mask().to_bool()
        out[: bits.size] = bits
        return out

    def advance(self, token: int) -> None:
        self.m.advance(token)

    def done(self) -> bool:
        return self.m.is_finished()


class LLGuidanceConstraint(Constraint):
    name = "llguidance"

    def __init__(self, lltok: Any, grammar: str, width: int) -> None:
        import llguidance as llg

        self.m = llg.LLMatcher(lltok, grammar, log_level=0)
        if self.m.is_error():
            raise ValueError(f"llguidance: {self.m.get_error()}")
        self.width = width
        self.words = np.zeros((width + 31) // 32, np.int32)
        self.eos = int(lltok.eos_token)
        self.finished = False

    def legal(self) -> Bool:
        if self.m.is_stopped():  # the grammar ended: EOS is the one legal token, as for the others
            out = np.zeros(self.width, np.bool_)
            out[self.eos] = True
            return out
        self.m.unsafe_compute_mask_ptr(self.words.ctypes.data, self.words.nbytes)
        if self.m.is_error():
            raise ValueError(f"llguidance: {self.m.get_error()}")
        bits = np.unpackbits(self.words.view(np.uint8), bitorder="little").view(np.bool_)
        return bits[: self.width].copy()

    def advance(self, token: int) -> None:
        if token == self.eos and self.m.is_stopped():
            self.finished = True
            return
        if not self.m.consume_token(token):
            raise ValueError(f"llguidance refused token {token}: {self.m.get_error()}")
        self.finished = token == self.eos

    def done(self) -> bool:
        # EOS taken (llguidance stops as soon as the grammar ends; the EOS step is still a step, as
        # for grammarmask and XGrammar, so -log Z per token counts the same steps)
        return self.finished


@dataclass
class Engine:
    """A factory of constraints for one grammar (``make()`` -> a fresh :class:`Constraint`)."""

    name: str
    make: Callable[[], Constraint]
    compile_s: float = 0.0


@dataclass
class Run:
    """One greedy (or sampled) generation."""

    engine: str
    tokens: list[int]
    text: str
    finished: bool
    seconds: float
    neg_log_z: list[float] = field(default_factory=list)  # per model-chosen step, nats

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("nan")


def greedy(model: Callable[[Sequence[int]], Any], constraint: Constraint | None, prompt: Sequence[int],
           decode: Callable[[list[int]], str], eos: int, max_tokens: int, name: str = "") -> Run:
    """Greedy decoding under ``constraint`` (None: unconstrained, stopping at ``eos``)."""
    ctx = list(prompt)
    out: list[int] = []
    nlz: list[float] = []
    t0 = time.perf_counter()
    finished = False
    for _ in range(max_tokens):
        logits = np.asarray(model(ctx), dtype=np.float64)
        if constraint is None:
            t = int(np.argmax(logits))
        else:
            legal = constraint.legal()
            z = logits[: legal.size]
            top = float(z.max())
            lse_all = top + float(np.log(np.exp(z - top).sum()))
            zl = z[legal]
            lse_legal = float(zl.max()) + float(np.log(np.exp(zl - zl.max()).sum()))
            nlz.append(lse_all - lse_legal)
            t = int(np.flatnonzero(legal)[int(np.argmax(zl))])
            constraint.advance(t)
        if t == eos:
            finished = True
            break
        out.append(t)
        ctx.append(t)
        if constraint is not None and constraint.done():
            finished = True
            break
    return Run(name or (constraint.name if constraint else "unconstrained"), out, decode(out), finished,
               time.perf_counter() - t0, nlz)


@dataclass
class Difference:
    """Where two greedy outputs part: the step, each engine's token, and the tokens each allows there
    that the other does not (ids with their text)."""

    step: int
    prefix: str
    a: str
    b: str
    a_token: str | None
    b_token: str | None
    only_a: list[str]
    only_b: list[str]
    n_only_a: int
    n_only_b: int

    def __str__(self) -> str:
        return (f"step {self.step} after {self.prefix!r}: {self.a} took {self.a_token!r}, {self.b} took "
                f"{self.b_token!r}; only {self.a} allows {self.n_only_a} tokens {self.only_a}, only {self.b} "
                f"allows {self.n_only_b} tokens {self.only_b}")


def first_difference(a: Engine, ra: Run, b: Engine, rb: Run, piece: Callable[[int], str],
                     decode: Callable[[list[int]], str], show: int = 8) -> Difference | None:
    """None when the two runs wrote the same tokens; else the first step where they differ, with the
    tokens each engine's mask allows there and the other's does not (``show`` of them)."""
    if ra.tokens == rb.tokens and ra.finished == rb.finished:
        return None
    k = 0
    while k < min(len(ra.tokens), len(rb.tokens)) and ra.tokens[k] == rb.tokens[k]:
        k += 1
    ca, cb = a.make(), b.make()
    for t in ra.tokens[:k]:
        ca.advance(t)
        cb.advance(t)
    la, lb = ca.legal(), cb.legal()
    oa, ob = np.flatnonzero(la & ~lb), np.flatnonzero(lb & ~la)

    def tok(run: Run) -> str | None:
        return piece(run.tokens[k]) if k < len(run.tokens) else ("<eos>" if run.finished else None)

    return Difference(k, decode(ra.tokens[:k]), a.name, b.name, tok(ra), tok(rb),
                      [piece(int(t)) for t in oa[:show]], [piece(int(t)) for t in ob[:show]],
                      int(oa.size), int(ob.size))


# --- engines for one grammar -------------------------------------------------------------------


def grammarmask_engines(grammar: gm.Grammar, vocab: gm.Vocabulary, tokenizer: Any, width: int
                        ) -> list[Engine]:
    """grammarmask with the exact byte-level mask, and with canonical forced text."""
    t0 = time.perf_counter()
    compiled = grammar.compile(vocab)
    dt = time.perf_counter() - t0
    canon = canonical(compiled, tokenizer)
    return [
        Engine("grammarmask", lambda: GrammarmaskConstraint(compiled, width), dt),
        Engine("grammarmask-canonical",
               lambda: GrammarmaskConstraint(canon, width, "grammarmask-canonical"), dt),
    ]


def llguidance_grammar(kind: str, source: Any) -> str:
    """llguidance's grammar for one of the task kinds: ``schema`` (compact JSON, as grammarmask's
    ``whitespace="compact"``), ``labels`` (an alternation), ``regex``, ``lark``."""
    import llguidance as llg

    if kind == "schema":
        return str(llg.LLMatcher.grammar_from_json_schema(
            json.dumps(source), defaults={"whitespace_flexible": False}))
    if kind == "labels":
        import re

        return str(llg.LLMatcher.grammar_from_regex("(" + "|".join(re.escape(x) for x in source) + ")"))
    if kind == "regex":
        return str(llg.LLMatcher.grammar_from_regex(source))
    if kind == "lark":
        return str(llg.grammar_from("lark", source))
    raise ValueError(kind)


def llguidance_engine(lltok: Any, kind: str, source: Any, width: int) -> Engine:
    import llguidance as llg

    t0 = time.perf_counter()
    grammar = llguidance_grammar(kind, source)
    is_err, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, lltok)
    if is_err:
        raise ValueError("llguidance: " + "; ".join(messages))
    return Engine("llguidance", lambda: LLGuidanceConstraint(lltok, grammar, width), time.perf_counter() - t0)


class XGrammarConstraint(Constraint):
    name = "xgrammar"

    def __init__(self, compiled: Any, width: int) -> None:
        import xgrammar as xgr

        self.m = xgr.GrammarMatcher(compiled)
        self.width = width
        self.words = np.zeros((1, (width + 31) // 32), np.int32)

    def legal(self) -> Bool:
        import torch

        bitmask = torch.from_numpy(self.words)
        self.m.fill_next_token_bitmask(bitmask, 0)
        bits = np.unpackbits(self.words[0].view(np.uint8), bitorder="little").view(np.bool_)
        return bits[: self.width].copy()

    def advance(self, token: int) -> None:
        if not self.m.accept_token(token):
            raise ValueError(f"xgrammar refused token {token}")

    def done(self) -> bool:
        return bool(self.m.is_terminated())


_XGR_COMPILERS: dict[int, Any] = {}


def xgrammar_engine(tokenizer: Any, kind: str, source: Any, width: int) -> Engine:
    """XGrammar (in a venv that has it): compact JSON (separators ``,`` and ``:``), labels as a regex
    alternation, Lark through its Lark front end."""
    import re

    import xgrammar as xgr

    compiler = _XGR_COMPILERS.get(id(tokenizer))
    if compiler is None:
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=width)
        compiler = _XGR_COMPILERS[id(tokenizer)] = xgr.GrammarCompiler(info)
    t0 = time.perf_counter()
    if kind == "schema":
        compiled = compiler.compile_json_schema(json.dumps(source), any_whitespace=False,
                                                separators=(",", ":"))
    elif kind == "labels":
        compiled = compiler.compile_regex("(" + "|".join(re.escape(x) for x in source) + ")")
    elif kind == "lark":
        compiled = compiler.compile_lark(source)
    else:
        raise ValueError(kind)
    return Engine("xgrammar", lambda: XGrammarConstraint(compiled, width), time.perf_counter() - t0)
