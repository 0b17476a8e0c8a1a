"""The DFAs of the terminals of lark's bundled ``common.lark``, made once per installation.

Grammars import ``NUMBER``, ``INT``, ``WS``, ``ESCAPED_STRING`` and the like from ``common.lark``
(``%import common.NUMBER``), and each new process made their DFAs again through re's parser, an NFA
and the subset construction: ~0.8 ms of sql.lark's first compile (NUMBER alone 0.4-0.5 ms). The
DFAs depend only on lark's release, the file and the regex budgets, so they are kept in the disk
cache (kind ``lark-bundled-dfas``, as the file's tree is, :func:`.lark_syntax._bundled_tree`) and,
the first time a process's grammar imports from the file, put in the process-wide cache of automata
(:func:`~grammarmask.automata.regex.keep_tables`), where the terminals' patterns find them. Making
them takes ~0.1 s, once per installation (and regex budgets); reading them back ~0.3 ms a process.
Lark's widths of the patterns (by which a terminal's alternatives are ordered, so its pattern is
lark's) are kept beside them (:func:`.lark_rules.keep_widths`).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..automata.regex import Tables

__all__ = ["entry_key", "keep_common_dfas"]


def keep_common_dfas() -> None:
    """Put the DFAs of ``common.lark``'s terminals in the process-wide cache of automata, read from
    the disk cache or made there (once per process and set of regex budgets; nothing when the disk
    cache is off: a process would make two dozen DFAs to use two)."""
    from .. import disk_cache

    if getattr(_making, "active", False) or disk_cache.directory() is None:
        return  # (_making: the grammar that imports every terminal, to make them)
    _keep(*entry_key())


_making = threading.local()  # .active: this thread is making them


def entry_key() -> tuple[Any, ...]:
    """The disk cache's key of the DFAs (``lark-bundled-dfas``) under the limits in force."""
    import lark

    from ..automata.regex import DEFAULT_MAX_STATES
    from ..limits import active

    limits = active()
    return lark.__version__, _common_hash(), DEFAULT_MAX_STATES, limits.regex_subset_work, limits.regex_depth


@functools.cache
def _common_text() -> str:
    import pkgutil

    data = pkgutil.get_data("lark", "grammars/common.lark")
    return "" if data is None else data.decode("utf-8")


@functools.cache
def _common_hash() -> str:
    return hashlib.sha256(_common_text().encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=8)
def _keep(*key: Any) -> None:
    from .. import disk_cache
    from ..automata.regex import keep_tables
    from .lark_rules import keep_widths

    kept = disk_cache.made_once("lark-bundled-dfas", key, _made, _making)
    if kept is None:  # (budgets too small for the file: its terminals are made as any are)
        return
    dfas, widths = kept
    keep_tables(dfas)
    keep_widths(widths)


def _made() -> tuple[dict[str, Tables], dict[str, tuple[int, int]]]:
    """The DFAs, and lark's widths of the patterns whose alternatives a grammar orders by them."""
    from ..automata.regex import tables_of
    from .lark_rules import recording_widths

    with recording_widths() as widths:
        dfas = tables_of(_terminal_dfas(_common_text()))
    return dfas, dict(widths)


def _terminal_dfas(text: str) -> dict[str, Any]:
    """Each public terminal of common.lark's pattern (as :mod:`.lark_rules` writes it in a grammar
    that imports it) and its DFA; empty when the file is not one this reader takes."""
    from ..automata.regex import regex_to_dfa
    from ..errors import GrammarError
    from .lark import _LOOKBEHIND_REWRITES
    from .lark_rules import compile_rules
    from .lark_syntax import _read_bundled, load_grammar

    read = _read_bundled(text)
    if read is None:
        return {}
    names = [n for n in read[1] if not n.startswith("_")]
    # a grammar that imports every terminal, read as any grammar importing some of them is
    user = "start: " + " | ".join(names) + "\n%import common (" + ", ".join(names) + ")\n"
    patterns: dict[str, str] = {}

    def terminal(name: str, rx: str | None) -> Any:  # (the patterns are all this asks for)
        if rx is not None:
            patterns[name] = rx

    rules = compile_rules(load_grammar(user, "<common>", ()), "start", terminal)
    out: dict[str, Any] = {}
    if rules is None:
        return out
    for rx in patterns.values():
        # ESCAPED_STRING's lookbehind is made through the rewrite lark's front end reads it by
        rx = _LOOKBEHIND_REWRITES.get(rx, rx)
        try:
            out[rx] = regex_to_dfa(rx)
        except GrammarError:  # (left to refuse where a grammar uses it, as any pattern is)
            continue
    return out
