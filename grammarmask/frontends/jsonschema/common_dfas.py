"""The DFAs nearly every JSON Schema's grammar asks for, made once per installation.

Under the default options a schema's grammar spells its whitespace, strings, object keys and numbers
with the same few patterns (of 146 JSONSchemaBench schemas, 141 ask for the whitespace, 120 for a
string, 108 for a number, 99 for a key, 15 for a string character, which strings of bounded length
repeat). The first schema a process compiled made their DFAs through re's parser, an NFA and the
subset construction: 3.6 ms (a key 1.2, a string 0.7, a character 0.7, the whitespace 0.6, a number
0.35), more than a small schema's whole compile. They depend only on grammarmask's
code and the regex budgets, so, as :mod:`grammarmask.frontends.lark_bundled` keeps those of lark's
``common.lark``, they are kept in the disk cache (kind ``json-schema-common-dfas``) and put in the
process-wide cache of automata at a process's first JSON Schema compile, where the patterns find them.
Which patterns: those the grammars of :data:`_SAMPLES` ask for (recorded, not listed here, so they
follow the compiler). Making them takes ~20 ms once per installation; reading them back ~0.2 ms.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...automata.regex import Tables

__all__ = ["entry_key", "keep_common_dfas"]

# any JSON value; an object of strings (one of bounded length), a number, an integer and keys of any
# spelling, in an array
_SAMPLES: tuple[Any, ...] = (
    True,
    {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "s": {"type": "string"},
                "b": {"type": "string", "maxLength": 8},
                "n": {"type": "number"},
                "i": {"type": "integer"},
            },
            "required": ["s"],
            "additionalProperties": {"type": "string"},
        },
    },
)


def keep_common_dfas() -> None:
    """Put the DFAs the samples' grammars ask for in the process-wide cache of automata, read from
    the disk cache or made there (once per process and set of regex budgets; nothing when the disk
    cache is off: the first schema makes those it uses)."""
    from ... import disk_cache

    if getattr(_making, "active", False) or disk_cache.directory() is None:
        return
    _keep(*entry_key())


_making = threading.local()  # .active: this thread is compiling the samples


def entry_key() -> tuple[Any, ...]:
    """The disk cache's key of the DFAs (``json-schema-common-dfas``) under the limits in force."""
    from ...automata.regex import DEFAULT_MAX_STATES
    from ...limits import active

    limits = active()
    return DEFAULT_MAX_STATES, limits.regex_subset_work, limits.regex_depth


@functools.lru_cache(maxsize=8)
def _keep(*key: Any) -> None:
    from ... import disk_cache
    from ...automata.regex import keep_tables

    kept = disk_cache.made_once("json-schema-common-dfas", key, _made, _making)
    if kept is not None:  # (None: budgets too small for a sample; its patterns are made as any are)
        keep_tables(kept)


def _made() -> dict[str, Tables]:
    """The DFAs the samples' grammars ask for, by pattern."""
    from ...automata.regex import patterns_made, tables_of
    from ...cache import recording_automata
    from ...ir.builder import build_cfg
    from .compiler import Compiler

    with recording_automata() as seen:
        for schema in _SAMPLES:
            # JsonSchema's default options; through the compiler, so that no sample's rules are kept
            compiler = Compiler(schema, whitespace="flexible", max_ws=16, indent=None, strict=True)
            build_cfg(compiler.grammar())
    return tables_of(patterns_made(seen))
