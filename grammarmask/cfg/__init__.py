"""The context-free engine (Python, the executable specification): lexer, incremental Earley
recognizer and exact token masks over a :class:`~grammarmask.ir.Cfg`."""

from .compiled import CompiledCfg
from .earley import EarleyGrammar, EarleySet

__all__ = ["CompiledCfg", "EarleyGrammar", "EarleySet"]
