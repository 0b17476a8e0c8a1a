"""Context-free grammars: the IR, an incremental Earley recognizer, and exact token masks over it."""

from .compiled import CompiledCfg
from .earley import EarleyGrammar, EarleySet
from .ir import Cfg, Rule, Terminal

__all__ = ["Cfg", "CompiledCfg", "EarleyGrammar", "EarleySet", "Rule", "Terminal"]
