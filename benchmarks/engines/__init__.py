"""One adapter per engine, all with the same small interface, so the harness times them alike.

An engine is built once per tokenizer from the token bytes (that is its vocabulary preprocessing,
timed apart), then compiles workloads and steps through documents. Each runs in its own subprocess.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

ENGINES = ("grammarmask", "xgrammar", "llguidance", "outlines_core")


class Unsupported(Exception):
    """The engine has no front end for this kind of grammar (reported as n/a, not as a failure)."""


class Engine:
    """Base adapter. Subclasses set ``name`` and implement ``prepare``, ``compile``, ``start``, ``fill``
    and ``advance``.

    ``token_bytes[i]`` is token i's bytes (b"" for special tokens), ``eos`` the EOS id, ``size`` the
    vocabulary size, ``encode`` the real tokenizer (text -> ids); ``words`` is the shared
    ``[1, ceil(size/32)]`` int32 bitmask buffer.
    """

    name = "?"

    def __init__(
        self,
        token_bytes: list[bytes],
        eos: int,
        specials: list[int],
        size: int,
        encode: Callable[[str], list[int]] | None = None,
    ) -> None:
        self.encode = encode
        self.token_bytes = token_bytes
        self.eos = eos
        self.specials = specials
        self.size = size
        self.words = np.zeros((1, (size + 31) // 32), dtype=np.int32)
        self.prepare()

    def prepare(self) -> None:
        """The engine's vocabulary preprocessing (timed apart by the harness)."""

    def compile(self, kind: str, source: Any) -> Any:
        """The compiled grammar for ``kind``/``source`` (raise ``Unsupported`` or any error on refusal)."""
        raise NotImplementedError

    def start(self, compiled: Any) -> Any:
        """A fresh per-sequence matcher."""
        raise NotImplementedError

    def fill(self, matcher: Any) -> None:
        """Write the next-token mask into ``self.words[0]`` (this call is what is timed)."""
        raise NotImplementedError

    def advance(self, matcher: Any, token: int) -> bool:
        """Take ``token``; False if the engine refuses it."""
        raise NotImplementedError

    def allowed(self, token: int) -> bool:
        """Whether ``token`` is set in the last filled mask."""
        return bool((int(self.words[0, token >> 5]) >> (token & 31)) & 1)


def load(name: str) -> type[Engine]:
    """The adapter class for ``name`` (imports the engine's package; ImportError if it is missing)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    mod = importlib.import_module(f"engines.{name}")
    return mod.ENGINE  # type: ignore[no-any-return]
