"""Byte-level automata: DFAs, regex compilation, minimisation and combinators.

The building block of the regular backends (``Regex``, ``Choice``, schema leaves) and of the
CFG lexer. Everything here works on bytes (UTF-8 text), never on code points.
"""

from __future__ import annotations

from .dfa import DFA, minimize, trim
from .regex import DEFAULT_MAX_STATES, regex_to_dfa

__all__ = ["DEFAULT_MAX_STATES", "DFA", "minimize", "regex_to_dfa", "trim"]
