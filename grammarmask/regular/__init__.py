"""The regular engine (Python, the executable specification): a byte DFA's token index and the
compiled grammar over it."""

from .compiled import DfaCompiledGrammar
from .index import ClassTrie, DfaTokenIndex

__all__ = ["ClassTrie", "DfaCompiledGrammar", "DfaTokenIndex"]
