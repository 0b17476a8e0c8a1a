"""JsonSchema through the real matcher on the tekken 131k vocabulary, token by token.

Valid instances, tokenized by mistral-common's Tekkenizer, are accepted token by token with EOS legal
at the end; invalid instances never reach an accepting state (MaskBench method). The corpus-wide runs
are ``slow``.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from typing import Any

import pytest

import grammarmask as gm
from grammarmask.backends.json_schema import JsonSchema
from grammarmask.errors import GrammarError

from .test_json_schema_suite import NARROWED
from .test_json_schema_support import BENCH, suite_groups


def feed(compiled: gm.CompiledGrammar, ids: list[int]) -> bool:
    """True iff every token is legal and the output is then complete (EOS legal)."""
    m = compiled.matcher()
    for t in ids:
        if t not in m.mask():
            assert not m.try_advance(t)  # the mask and advance agree
            return False
        m.advance(t)
    assert (m.vocab.eos_token_id in m.mask()) == m.is_accepting()
    return m.is_accepting()


def encode(tok: Any, data: Any) -> list[int]:
    return list(tok.encode(json.dumps(data, ensure_ascii=False), bos=False, eos=False))


def compile_or_none(schema: Any, vocab: gm.Vocabulary) -> gm.CompiledGrammar | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return JsonSchema(schema).compile(vocab)
    except GrammarError:
        return None


SUITE_FAST = ["type", "properties", "required", "enum", "minimum", "pattern", "anyOf", "items", "ref"]


def run_suite_tokens(files: list[str] | None, tok: Any, vocab: gm.Vocabulary) -> Counter[str]:
    stats: Counter[str] = Counter()
    for name, group in suite_groups(files):
        compiled = compile_or_none(group["schema"], vocab)
        if compiled is None:
            stats["not compiled"] += 1
            continue
        stats["compiled"] += 1
        for case in group["tests"]:
            ok = feed(compiled, encode(tok, case["data"]))
            label = f"{name}: {case['description']}"
            if case["valid"]:
                assert ok or any(n in label for n in NARROWED), f"valid instance rejected: {label}"
                stats["valid accepted" if ok else "valid rejected (narrowed)"] += 1
            else:
                assert not ok, f"invalid instance accepted: {label}"
                stats["invalid rejected"] += 1
    return stats


def test_suite_token_by_token_subset(tekken_tokenizer: Any, tekken: gm.Vocabulary) -> None:
    stats = run_suite_tokens(SUITE_FAST, tekken_tokenizer, tekken)
    assert stats["compiled"] >= 40 and stats["valid accepted"] >= 80, stats


@pytest.mark.slow
def test_suite_token_by_token_all(tekken_tokenizer: Any, tekken: gm.Vocabulary) -> None:
    stats = run_suite_tokens(None, tekken_tokenizer, tekken)
    print(dict(stats))


@pytest.mark.slow
def test_jsonschemabench_token_by_token(tekken_tokenizer: Any, tekken: gm.Vocabulary) -> None:
    """MaskBench: per sub-dataset compile errors, valid rejected, invalid accepted (must be 0)."""
    stats: Counter[str] = Counter()
    wrong = []
    for sub in sorted(p for p in BENCH.iterdir() if p.is_dir()):
        for f in sorted((sub / "examples").glob("*.json")):
            data = json.loads(f.read_text())
            compiled = compile_or_none(data["schema"], tekken)
            if compiled is None:
                stats[f"{sub.name}: compile errors"] += 1
                continue
            for case in data["tests"]:
                ok = feed(compiled, encode(tekken_tokenizer, case["data"]))
                if case["valid"] and not ok:
                    stats[f"{sub.name}: validation errors"] += 1
                if not case["valid"] and ok:
                    wrong.append(f.name)
    print(dict(stats))
    assert not wrong, wrong
