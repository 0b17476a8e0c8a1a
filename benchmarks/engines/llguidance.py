"""llguidance (guidance-ai/llguidance): an LLTokenizer over the raw token bytes; Lark, regex, JSON Schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import llguidance as llg
from workloads import regex_escape

from . import Engine, Unsupported


class _Tok:
    """The duck-typed tokenizer llguidance.TokenizerWrapper expects (special tokens marked with 0xFF)."""

    def __init__(
        self,
        token_bytes: list[bytes],
        eos: int,
        specials: list[int],
        encode: Callable[[str], list[int]] | None,
    ) -> None:
        sp = set(specials) | {eos}
        self._encode = encode
        self.tokens = [b"\xff[special_%d]" % i if i in sp else b for i, b in enumerate(token_bytes)]
        self.eos_token_id = eos
        self.bos_token_id = None
        self.special_token_ids = sorted(sp)
        self._by_bytes = {b: i for i, b in enumerate(token_bytes) if i not in sp and b}

    def __call__(self, s: bytes | str) -> list[int]:
        if self._encode is not None:  # the real tokenizer (llguidance uses it for forced tokens)
            return self._encode(s.decode("utf-8", errors="replace") if isinstance(s, bytes) else s)
        data = s.encode() if isinstance(s, str) else s
        out, i = [], 0
        while i < len(data):
            for j in range(min(len(data), i + 32), i, -1):
                t = self._by_bytes.get(data[i:j])
                if t is not None:
                    out.append(t)
                    i = j
                    break
            else:
                i += 1
        return out


class LLGuidanceEngine(Engine):
    name = "llguidance"

    def prepare(self) -> None:
        self.tok = llg.LLTokenizer(
            llg.TokenizerWrapper(_Tok(self.token_bytes, self.eos, self.specials, self.encode)),
            n_vocab=self.size,
        )

    def compile(self, kind: str, source: Any) -> Any:
        if kind == "labels":  # an alternation regex: llguidance's fastest form for a label set
            grammar = llg.LLMatcher.grammar_from_regex("(" + "|".join(regex_escape(x) for x in source) + ")")
        elif kind == "regex":
            grammar = llg.LLMatcher.grammar_from_regex(source)
        elif kind == "json_schema":
            grammar = llg.LLMatcher.grammar_from_json_schema(json.dumps(source))
        elif kind in ("lark", "gbnf"):
            grammar = llg.grammar_from(kind, source)
        else:
            raise Unsupported(kind)
        ok, is_err, messages = _validate(self.tok, grammar)
        if not ok:
            raise ValueError("; ".join(messages)[:300])
        return grammar

    def start(self, compiled: Any) -> Any:
        m = llg.LLMatcher(self.tok, compiled, log_level=0)
        if m.is_error():
            raise ValueError(m.get_error())
        return m

    def fill(self, matcher: Any) -> None:
        v = self.words[0]
        matcher.unsafe_compute_mask_ptr(v.ctypes.data, v.size * v.itemsize)

    def advance(self, matcher: Any, token: int) -> bool:
        return bool(matcher.consume_token(token))


def _validate(tok: Any, grammar: str) -> tuple[bool, bool, list[str]]:
    is_err, messages = llg.LLMatcher.validate_grammar_with_warnings(grammar, tok)
    return (not is_err), is_err, list(messages)


ENGINE = LLGuidanceEngine
