"""XGrammar (mlc-ai/xgrammar): a RAW byte vocabulary; its EBNF, Lark, JSON Schema and regex front ends."""

from __future__ import annotations

import json
import re
from typing import Any

import torch
import xgrammar as xgr

from . import Engine, Unsupported


class XGrammarEngine(Engine):
    name = "xgrammar"

    def prepare(self) -> None:
        info = xgr.TokenizerInfo(
            list(self.token_bytes), xgr.VocabType.RAW, vocab_size=self.size, stop_token_ids=[self.eos]
        )
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, self.size)
        self.words = self.bitmask.numpy()  # shares memory with the torch tensor

    def compile(self, kind: str, source: Any) -> Any:
        if kind == "labels":
            return self.compiler.compile_grammar("root ::= " + " | ".join(_ebnf_str(x) for x in source))
        if kind == "regex":
            return self.compiler.compile_regex(source)
        if kind == "json_schema":
            return self.compiler.compile_json_schema(
                json.dumps(source), any_whitespace=True, strict_mode=False
            )
        if kind == "gbnf":
            return self.compiler.compile_grammar(source)
        if kind == "lark":
            return self.compiler.compile_grammar(
                xgr.Grammar.from_lark(source) if hasattr(xgr.Grammar, "from_lark") else _unsupported(kind)
            )
        raise Unsupported(kind)

    def start(self, compiled: Any) -> Any:
        return xgr.GrammarMatcher(compiled)

    def fill(self, matcher: Any) -> None:
        matcher.fill_next_token_bitmask(self.bitmask)

    def advance(self, matcher: Any, token: int) -> bool:
        return bool(matcher.accept_token(token))


def _ebnf_str(s: str) -> str:
    return '"' + re.sub(r'["\\]', lambda m: "\\" + m.group(0), s) + '"'


def _unsupported(kind: str) -> Any:
    raise Unsupported(f"xgrammar has no {kind} front end")


torch.set_num_threads(1)
ENGINE = XGrammarEngine
