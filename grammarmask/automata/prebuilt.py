"""DFAs built directly for terminals whose regex text would be slow to compile.

A front end that writes a terminal as regex text it could also build directly (JSON Schema's "any
key but these", a trie complement written as a regex of the trie) registers a builder under the
exact terminal literal it writes; the Lark front end asks here before compiling the regex. The
builder must return the DFA of exactly the regex's language (tests compare the two). Bounded LRU.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from .dfa import DFA

__all__ = ["lookup", "register"]

_LIMIT = 512
_BUILDERS: OrderedDict[str, Callable[[], DFA] | DFA] = OrderedDict()
_LOCK = threading.Lock()


def register(literal: str, build: Callable[[], DFA]) -> None:
    """Record that the terminal written ``literal`` has the DFA ``build()`` (built on first lookup)."""
    with _LOCK:
        if literal in _BUILDERS:
            _BUILDERS.move_to_end(literal)
            return
        _BUILDERS[literal] = build
        while len(_BUILDERS) > _LIMIT:
            _BUILDERS.popitem(last=False)


def lookup(literal: str) -> DFA | None:
    """The registered DFA of the terminal written ``literal``, or None."""
    with _LOCK:
        entry = _BUILDERS.get(literal)
        if entry is not None:
            _BUILDERS.move_to_end(literal)
    if entry is None or isinstance(entry, DFA):
        return entry
    dfa = entry()
    with _LOCK:
        if literal in _BUILDERS:
            _BUILDERS[literal] = dfa
    return dfa
