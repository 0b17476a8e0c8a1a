"""The seam between front ends and engines: IR in, compiled grammar out.

Front ends build the IR (a :class:`~grammarmask.ir.Cfg` or a byte :class:`~grammarmask.automata.DFA`)
and hand it here; they never import an engine. Today both engines are the Python ones
(:mod:`grammarmask.cfg`, :mod:`grammarmask.regular`), kept as the executable specification; a
native engine plugs in here, behind the same two calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .automata import DFA
    from .grammar import CompiledGrammar
    from .ir import Cfg
    from .vocab import Vocabulary

__all__ = ["compile_cfg", "compile_dfa"]


def compile_cfg(cfg: Cfg, vocab: Vocabulary) -> CompiledGrammar:
    """A context-free grammar bound to ``vocab`` (Earley parser over a lexer of byte DFAs)."""
    from .cfg import CompiledCfg

    return CompiledCfg(cfg, vocab)


def compile_dfa(dfa: DFA, vocab: Vocabulary) -> CompiledGrammar:
    """A regular language (a trimmed byte DFA) bound to ``vocab`` through its token index."""
    from .regular import DfaCompiledGrammar

    return DfaCompiledGrammar(vocab, dfa)
