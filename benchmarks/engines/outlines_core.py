"""outlines-core (dottxt-ai/outlines-core): regex only, so labels become an alternation and schemas go
through its ``build_regex_from_schema``; no CFG front end."""

from __future__ import annotations

import json
from typing import Any

import outlines_core as oc
from outlines_core.json_schema import build_regex_from_schema
from workloads import regex_escape

from . import Engine, Unsupported


class OutlinesCoreEngine(Engine):
    name = "outlines_core"

    def prepare(self) -> None:
        sp = set(self.specials) | {self.eos}
        groups: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.token_bytes):
            if i not in sp and b:
                groups.setdefault(b, []).append(i)
        self.vocab = oc.Vocabulary(self.eos, groups)

    def compile(self, kind: str, source: Any) -> Any:
        if kind == "labels":
            pattern = "(" + "|".join(regex_escape(x) for x in source) + ")"
        elif kind == "regex":
            pattern = source
        elif kind == "json_schema":
            pattern = build_regex_from_schema(json.dumps(source))
        else:
            raise Unsupported(f"outlines-core has no {kind} front end")
        return oc.Index(pattern, self.vocab)

    def start(self, compiled: Any) -> Any:
        return oc.Guide(compiled)

    def fill(self, matcher: Any) -> None:
        v = self.words[0]
        matcher.write_mask_into(v.ctypes.data, v.size, v.itemsize)

    def advance(self, matcher: Any, token: int) -> bool:
        try:
            matcher.advance(token)
        except ValueError:
            return False
        return True


ENGINE = OutlinesCoreEngine
