"""Tool calling with a structural tag: Mistral's tekken tokenizer, two tools whose arguments are JSON
Schemas, the call opened by the special token ``[TOOL_CALLS]``.

The model (a stand-in here: ``gm.RandomModel``, random logits) may write free text; once it emits
``[TOOL_CALLS]`` it must write one call, ``{"name": ..., "arguments": ...}`` with arguments valid for
that tool, and then stop. Run: ``python examples/tool_calling.py``.
"""

from __future__ import annotations

import json
from typing import Any

import grammarmask as gm

TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"enum": ["Paris", "Tokyo", "Lima"]},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
    "get_time": {
        "type": "object",
        "properties": {"timezone": {"enum": ["UTC", "CET", "JST"]}, "24h": {"type": "boolean"}},
        "required": ["timezone"],
        "additionalProperties": False,
    },
}


def call_schema(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of one call of tool ``name``."""
    return {
        "type": "object",
        "properties": {"name": {"const": name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def tool_calling_grammar(*, must_call: bool = True) -> gm.StructuralTag:
    """Free text (none when ``must_call``), then ``[TOOL_CALLS]`` and one call, then nothing."""
    opener = gm.SpecialToken("[TOOL_CALLS]")
    tags = [(opener, gm.JsonSchema(call_schema(name, args), whitespace="compact"), "")
            for name, args in TOOLS.items()]
    return gm.StructuralTag(tags, at_least_one=must_call, stop_after_first=True)


def run(seed: int = 0, *, max_tokens: int = 96) -> tuple[list[int], str]:
    """Generate one call; returns the token ids and the text with special tokens by name."""
    vocab = gm.Vocabulary.from_mistral("tekken")
    grammar = tool_calling_grammar()
    model = gm.RandomModel(vocab.size, seed=seed)
    result = gm.generate(model, vocab, grammar, max_tokens=max_tokens, seed=seed)
    ids = list(result.token_ids)
    body = ids[:-1] if ids and ids[-1] == vocab.eos_token_id else ids
    return ids, vocab.decode(body, special_tokens=True).decode()


if __name__ == "__main__":
    ids, text = run()
    print(text)
    call = json.loads(text.removeprefix("[TOOL_CALLS]"))
    print("tool:", call["name"], "arguments:", call["arguments"])
