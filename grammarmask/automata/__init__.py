"""Byte-level automata: DFAs, regex compilation, minimisation and combinators.

The building block of the regular backends (``Regex``, ``Choice``, schema leaves) and of the
CFG lexer. Everything here works on bytes (UTF-8 text), never on code points. Every constructor
returns a trimmed, minimal :class:`DFA` whose state 0 is the dead state.
"""

from __future__ import annotations

from .dfa import DFA, minimize, trim
from .lark_idioms import rewrite_lark_idioms
from .nfa import NFA, determinize
from .ops import (
    add_dfa_to_nfa,
    concat,
    difference,
    empty_dfa,
    from_strings,
    literal_dfa,
    product,
    repeat,
    union,
)
from .regex import DEFAULT_MAX_STATES, regex_to_dfa

__all__ = [
    "DEFAULT_MAX_STATES",
    "DFA",
    "NFA",
    "add_dfa_to_nfa",
    "concat",
    "determinize",
    "difference",
    "empty_dfa",
    "from_strings",
    "literal_dfa",
    "minimize",
    "product",
    "repeat",
    "regex_to_dfa",
    "rewrite_lark_idioms",
    "trim",
    "union",
]
