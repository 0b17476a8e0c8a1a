"""JSON-Schema-Test-Suite (draft 2020-12) and JSONSchemaBench against the generated Lark grammars.

For each group whose schema compiles: every invalid instance must NOT parse with ``lark.Lark`` (0
wrongly accepted: exactness); every valid instance must parse (compact, default and indented
serialisations) except the documented narrowings in ``NARROWED``; random sentences of the grammar
must be valid JSON that ``jsonschema`` accepts (soundness). The full runs are ``slow``.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from typing import Any

import lark
import pytest

from grammarmask.errors import GrammarError, UnsupportedSchemaError
from grammarmask.frontends.json_schema import JsonSchema

from .support_json_schema import (
    BENCH,
    NARROWED,
    GrammarSampler,
    parses,
    serializations,
    suite_groups,
    validator,
)

# Valid instances the grammar rejects on purpose (docs/json_schema.md, "Narrowings").

FAST_FILES = [
    "type", "properties", "required", "enum", "const", "items", "prefixItems", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "anyOf", "allOf",
    "oneOf", "additionalProperties", "minItems", "maxItems", "minProperties", "maxProperties",
    "not", "multipleOf", "boolean_schema", "default", "defs", "contains", "minContains",
    "patternProperties", "propertyNames", "format", "infinite-loop-detection", "maxContains",
]  # fmt: skip


def run_suite(files: list[str] | None, samples: int) -> Counter[str]:
    stats: Counter[str] = Counter()
    for name, group in suite_groups(files):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                text = JsonSchema(group["schema"]).to_lark()
        except UnsupportedSchemaError as e:
            stats["refused"] += 1
            stats[f"refused:{e.keyword}"] += 1
            continue
        except GrammarError:
            stats["errors"] += 1  # false schemas, unresolvable remote refs
            continue
        stats["compiled"] += 1
        parser = lark.Lark(text)
        for case in group["tests"]:
            label = f"{name}: {case['description']}"
            for t in serializations(case["data"]):
                ok = parses(parser, t)
                if case["valid"] and not ok:
                    assert any(n in label for n in NARROWED), f"valid instance rejected: {label}: {t}"
                    stats["valid rejected (narrowed)"] += 1
                if not case["valid"]:
                    assert not ok, f"invalid instance accepted: {label}: {t}"
            stats["valid" if case["valid"] else "invalid"] += 1
        check_sound(group["schema"], parser, samples, stats)
    return stats


def check_sound(schema: Any, parser: lark.Lark, samples: int, stats: Counter[str]) -> None:
    v = validator(schema)
    sampler = GrammarSampler(parser, seed=len(json.dumps(schema)))
    for _ in range(samples):
        text = sampler.sample()
        if text is None:
            continue
        doc = json.loads(text)
        assert v.is_valid(doc), f"grammar produced an instance jsonschema rejects: {text}\nschema: {schema}"
        stats["samples"] += 1


def test_suite_fast_subset() -> None:
    stats = run_suite(FAST_FILES, samples=8)
    assert stats["compiled"] >= 140, stats
    assert stats["samples"] > 800, stats


@pytest.mark.slow
def test_suite_all_groups() -> None:
    stats = run_suite(None, samples=40)
    print(dict(stats))
    assert stats["compiled"] >= 240, stats


def run_bench(limit_per_sub: int | None, max_text: int = 4000) -> Counter[str]:
    stats: Counter[str] = Counter()
    for sub in sorted(p for p in BENCH.iterdir() if p.is_dir()):
        files = sorted((sub / "examples").glob("*.json"), key=lambda f: f.stat().st_size)
        for f in files[:limit_per_sub]:
            data = json.loads(f.read_text())
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    text = JsonSchema(data["schema"]).to_lark()
            except GrammarError:  # UnsupportedSchemaError included
                stats[f"{sub.name}:compile errors"] += 1
                continue
            parser = lark.Lark(text)
            stats[f"{sub.name}:compiled"] += 1
            for case in data["tests"]:
                t = json.dumps(case["data"], ensure_ascii=False)
                if len(t) > max_text:
                    continue
                ok = parses(parser, t)
                if not case["valid"]:
                    assert not ok, f"invalid instance accepted: {f}: {t[:300]}"
                elif not ok:
                    stats[f"{sub.name}:valid rejected"] += 1
            check_sound(data["schema"], parser, 3, stats)
    return stats


def test_jsonschemabench_smallest() -> None:
    stats = run_bench(limit_per_sub=3)
    assert sum(v for k, v in stats.items() if k.endswith(":compiled")) >= 25, stats


@pytest.mark.slow
def test_jsonschemabench_all() -> None:
    stats = run_bench(limit_per_sub=None)
    print(dict(stats))
