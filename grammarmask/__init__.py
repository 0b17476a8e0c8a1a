"""grammarmask: exact grammar-constrained decoding by logit masking.

Compile a grammar (regex, JSON Schema, Lark, GBNF, a set of labels) against a tokenizer's vocabulary,
then ask a per-sequence matcher for the legal-token mask at each step.
"""

from __future__ import annotations

from .errors import GrammarError, GrammarMaskError, NoLegalContinuation, TokenRejected, UnsupportedSchemaError
from .grammar import And, CompiledGrammar, Grammar, Matcher
from .mask import Mask
from .vocab import Vocabulary

__version__ = "0.1.0"

__all__ = [
    "And",
    "CompiledGrammar",
    "Grammar",
    "GrammarError",
    "GrammarMaskError",
    "Mask",
    "Matcher",
    "NoLegalContinuation",
    "TokenRejected",
    "UnsupportedSchemaError",
    "Vocabulary",
]
