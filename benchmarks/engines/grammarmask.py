"""grammarmask itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grammarmask as gm
from grammarmask.cli._common import CliError, _backend

from . import Engine, Unsupported

_KIND = {"labels": "labels", "regex": "regex", "json_schema": "json", "lark": "lark", "gbnf": "gbnf"}


class GrammarmaskEngine(Engine):
    name = "grammarmask"

    def __init__(
        self,
        token_bytes: list[bytes],
        eos: int,
        specials: list[int],
        size: int,
        encode: Callable[[str], list[int]] | None = None,
    ) -> None:
        super().__init__(token_bytes, eos, specials, size, encode)
        self.vocab = gm.Vocabulary.from_tokens(
            token_bytes, eos_token_id=eos, special_token_ids=specials, size=size
        )
        self.vocab.trie  # noqa: B018 - the vocabulary preprocessing, timed by the harness

    def compile(self, kind: str, source: Any) -> Any:
        try:
            cls = _backend(_KIND[kind])
        except CliError as e:
            raise Unsupported(str(e)) from None
        grammar = cls(source)
        return grammar.compile(self.vocab)

    def start(self, compiled: Any) -> Any:
        return compiled.matcher()

    def fill(self, matcher: Any) -> None:
        matcher.fill_mask(self.words, 0)

    def advance(self, matcher: Any, token: int) -> bool:
        return bool(matcher.try_advance(token))


ENGINE = GrammarmaskEngine
