"""grammarmask itself."""

from __future__ import annotations

from typing import Any

import cold_cache  # benchmarks/ is on sys.path when the harness runs

# Every front end, and what the package imports lazily (lark, jsonschema), is imported here as the
# peers' adapters import their packages: a module import is paid once per process, not by a compile.
import lark.load_grammar  # noqa: F401

import grammarmask as gm
import grammarmask.cfg.compiled  # noqa: F401
import grammarmask.frontends.choice  # noqa: F401
import grammarmask.frontends.gbnf  # noqa: F401
import grammarmask.frontends.json_schema  # noqa: F401
import grammarmask.frontends.jsonschema.intersect  # noqa: F401
import grammarmask.frontends.lark  # noqa: F401
import grammarmask.frontends.regex  # noqa: F401
import grammarmask.native.cfg  # noqa: F401 (the default CFG engine)
from grammarmask import disk_cache, native
from grammarmask.cli._common import CliError, _backend

from . import Engine, Unsupported

cold_cache.use()  # compile times are first compiles: no grammar from an earlier run's disk cache

_KIND = {"labels": "labels", "regex": "regex", "json_schema": "json", "lark": "lark", "gbnf": "gbnf"}


def prepare_vocabulary(vocab: gm.Vocabulary) -> None:
    """What grammarmask does once per vocabulary (and process) before its first compile: timed
    apart from compiles, by the harness as the vocabulary's preprocessing."""
    vocab.trie  # noqa: B018 - the byte trie of the Python engine and the token index
    vocab.fingerprint  # noqa: B018 - its content hash, the disk cache's key (once per vocabulary)
    if native.available():  # the native engine's copy of the token bytes and its byte trie
        native.native_vocabulary(vocab)
    disk_cache.code_hash()  # once per process (a hash of grammarmask's sources), as a server pays it


class GrammarmaskEngine(Engine):
    name = "grammarmask"

    def prepare(self) -> None:
        self.vocab = gm.Vocabulary.from_tokens(
            self.token_bytes, eos_token_id=self.eos, special_token_ids=self.specials, size=self.size
        )
        prepare_vocabulary(self.vocab)

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
