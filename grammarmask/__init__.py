"""grammarmask: exact grammar-constrained decoding by logit masking.

Compile a grammar (labels, regex, JSON Schema, Lark, GBNF) against a tokenizer's vocabulary, then ask a
per-sequence matcher for the legal-token mask at each step::

    import grammarmask as gm
    vocab = gm.Vocabulary.from_mistral("tekken")
    m = gm.Regex(r"\\d{4}-\\d{2}-\\d{2}").compile(vocab).matcher()
    mask = m.mask()            # gm.Mask: the legal next tokens
    m.advance(token_id)        # gm.TokenRejected if illegal, state unchanged

Backends and the sampler are imported on first use, so ``import grammarmask`` stays light (it never
imports torch or transformers).
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING, Any

from .errors import (
    BudgetExceeded,
    GrammarError,
    GrammarMaskError,
    NoLegalContinuation,
    TokenRejected,
    UnsupportedSchemaError,
)
from .grammar import CompiledGrammar, Grammar, Matcher
from .limits import Limits
from .mask import Mask
from .vocab import Vocabulary

if TYPE_CHECKING:
    from .batch import allocate_masks, apply_token_bitmask_inplace, fill_masks
    from .beam import BeamHypothesis, beam_search
    from .canonical import canonical
    from .compose import And, Union
    from .decoding import GenerationResult, generate
    from .fidelity import aligned_sample
    from .frontends.choice import Choice
    from .frontends.gbnf import Gbnf
    from .frontends.json_schema import JsonSchema
    from .frontends.lark import Lark
    from .frontends.reasoning import Reasoning
    from .frontends.regex import Regex
    from .frontends.special_token import SpecialToken
    from .frontends.structural_tag import StructuralTag
    from .healing import HealedPrompt, heal_prompt, healed
    from .models import LogitsModel, RandomModel, ScriptedModel, UniformModel
    from .sampling import SequenceStats, StepStats, sample, sample_with_stats
    from .sequence import Sequence

__version__ = "0.1.0"

_LAZY = {
    "Choice": ".frontends.choice",
    "Regex": ".frontends.regex",
    "Lark": ".frontends.lark",
    "Gbnf": ".frontends.gbnf",
    "JsonSchema": ".frontends.json_schema",
    "SpecialToken": ".frontends.special_token",
    "Reasoning": ".frontends.reasoning",
    "StructuralTag": ".frontends.structural_tag",
    "sample": ".sampling",
    "sample_with_stats": ".sampling",
    "StepStats": ".sampling",
    "SequenceStats": ".sampling",
    "generate": ".decoding",
    "aligned_sample": ".fidelity",
    "heal_prompt": ".healing",
    "healed": ".healing",
    "HealedPrompt": ".healing",
    "GenerationResult": ".decoding",
    "LogitsModel": ".models",
    "UniformModel": ".models",
    "ScriptedModel": ".models",
    "RandomModel": ".models",
    "And": ".compose",
    "Union": ".compose",
    "Sequence": ".sequence",
    "beam_search": ".beam",
    "BeamHypothesis": ".beam",
    "canonical": ".canonical",
    "fill_masks": ".batch",
    "allocate_masks": ".batch",
    "apply_token_bitmask_inplace": ".batch",
}

__all__ = [
    "And",
    "BeamHypothesis",
    "BudgetExceeded",
    "Choice",
    "CompiledGrammar",
    "Gbnf",
    "GenerationResult",
    "Grammar",
    "GrammarError",
    "GrammarMaskError",
    "HealedPrompt",
    "JsonSchema",
    "Lark",
    "Limits",
    "LogitsModel",
    "Mask",
    "Matcher",
    "NoLegalContinuation",
    "RandomModel",
    "Reasoning",
    "Regex",
    "ScriptedModel",
    "Sequence",
    "SequenceStats",
    "SpecialToken",
    "StepStats",
    "StructuralTag",
    "TokenRejected",
    "UniformModel",
    "Union",
    "UnsupportedSchemaError",
    "Vocabulary",
    "aligned_sample",
    "allocate_masks",
    "apply_token_bitmask_inplace",
    "beam_search",
    "canonical",
    "fill_masks",
    "generate",
    "heal_prompt",
    "healed",
    "sample",
    "sample_with_stats",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'grammarmask' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the submodules already imported (no typing or import helpers)."""
    subs = {n for n, v in globals().items() if isinstance(v, types.ModuleType) and not n.startswith("_")}
    return sorted(set(__all__) | {"__version__"} | (subs - {"importlib", "types"}))
