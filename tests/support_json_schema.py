"""Helpers for the JSON Schema tests: a random sampler over lark grammars and the corpus runners.

The sampler derives random sentences of a ``lark.Lark`` grammar (rules from lark's own loader,
terminals sampled from their regex syntax tree), so soundness can be checked against ``jsonschema``
without trusting grammarmask's code.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import lark

if sys.version_info >= (3, 11):
    import re._constants as C
    import re._parser as P
else:  # pragma: no cover
    import sre_constants as C
    import sre_parse as P

CORPUS = Path("/work/shared/corpus/json_schema")
SUITE = CORPUS / "test_suite" / "draft2020-12"
BENCH = CORPUS / "jsonschemabench"

_POOL = [chr(c) for c in range(0x20, 0x7F)] + list("\t\n\r\x00\x1féü中😀\u2028") + ["\u0663"]
_CATS = {
    C.CATEGORY_DIGIT: re.compile(r"\d"), C.CATEGORY_NOT_DIGIT: re.compile(r"\D"),
    C.CATEGORY_WORD: re.compile(r"\w"), C.CATEGORY_NOT_WORD: re.compile(r"\W"),
    C.CATEGORY_SPACE: re.compile(r"\s"), C.CATEGORY_NOT_SPACE: re.compile(r"\S"),
}  # fmt: skip


def _in_class(items: Any, ch: str) -> bool:
    neg = False
    hit = False
    for op, av in items:
        if op is C.NEGATE:
            neg = True
        elif op is C.LITERAL:
            hit |= ord(ch) == av
        elif op is C.RANGE:
            hit |= av[0] <= ord(ch) <= av[1]
        elif op is C.CATEGORY:
            hit |= _CATS[av].match(ch) is not None
    return hit != neg


class RegexSampler:
    """Random strings in a regex's language (repeats capped, so it always terminates)."""

    def __init__(self, rng: random.Random, max_repeat: int = 4) -> None:
        self.rng = rng
        self.max_repeat = max_repeat
        self.cache: dict[str, Any] = {}

    def sample(self, pattern: str) -> str | None:
        tree = self.cache.get(pattern)
        if tree is None:
            tree = self.cache[pattern] = P.parse(pattern)
        if not any(op in (C.ASSERT, C.ASSERT_NOT) for op, _ in tree):
            out: list[str] = []
            return "".join(out) if self._seq(tree, out) else None
        # (?=A)(?!B)C, an intersection terminal (each part a whole string): sample one positive part,
        # keep the strings that re says match the whole pattern
        parts = [tree] + [av[1] for op, av in tree if op is C.ASSERT]
        for _ in range(300):
            out = []
            if self._seq(self.rng.choice(parts), out) and re.fullmatch(pattern, "".join(out)):
                return "".join(out)
        return None

    def _char(self, ok: Any) -> str | None:
        pool = [c for c in _POOL if ok(c)]
        return self.rng.choice(pool) if pool else None

    def _seq(self, seq: Any, out: list[str]) -> bool:
        for op, av in seq:
            if op is C.LITERAL:
                out.append(chr(av))
            elif op is C.NOT_LITERAL:
                c = self._char(lambda ch, av=av: ord(ch) != av)
                if c is None:
                    return False
                out.append(c)
            elif op is C.ANY:
                out.append(self.rng.choice(_POOL[:95]))
            elif op is C.IN:
                c = self._char(lambda ch, av=av: _in_class(av, ch))
                if c is None:
                    return False
                out.append(c)
            elif op is C.BRANCH:
                branches = list(av[1])
                self.rng.shuffle(branches)
                for b in branches:
                    mark = len(out)
                    if self._seq(b, out):
                        break
                    del out[mark:]
                else:
                    return False
            elif op is C.SUBPATTERN:
                if not self._seq(av[3], out):
                    return False
            elif op in (C.MAX_REPEAT, C.MIN_REPEAT):
                lo, hi, body = av
                top = lo + self.max_repeat if hi is C.MAXREPEAT else min(hi, lo + self.max_repeat)
                n = self.rng.randint(lo, max(lo, top)) if self.rng.random() < 0.8 else lo
                for _ in range(n):
                    if not self._seq(body, out):
                        return False
            elif op in (C.AT, C.ASSERT, C.ASSERT_NOT):  # lookaheads are checked by sample()
                continue
            else:
                raise NotImplementedError(op)
        return True


class GrammarSampler:
    """Random sentences of a lark grammar; past ``max_depth`` it takes the shallowest expansions."""

    def __init__(self, parser: lark.Lark, seed: int = 0, max_depth: int = 12) -> None:
        self.rng = random.Random(seed)
        self.regex = RegexSampler(self.rng)
        self.max_depth = max_depth
        self.rules: dict[str, list[Any]] = {}
        for r in parser.rules:
            self.rules.setdefault(r.origin.name, []).append([s for s in r.expansion])
        self.terms = {t.name: t.pattern for t in parser.terminals}
        self.height = self._heights()

    def _heights(self) -> dict[str, float]:
        h: dict[str, float] = {n: float("inf") for n in self.rules}
        changed = True
        while changed:
            changed = False
            for n, exps in self.rules.items():
                for e in exps:
                    v = 1 + max([h.get(s.name, 0) if not s.is_term else 0 for s in e], default=0)
                    if v < h[n]:
                        h[n] = v
                        changed = True
        return h

    def sample(self, start: str = "start") -> str | None:
        out: list[str] = []
        return "".join(out) if self._sym(start, 0, out) else None

    def _sym(self, name: str, depth: int, out: list[str]) -> bool:
        if name in self.terms:
            pat = self.terms[name]
            if pat.type == "str":
                out.append(pat.value)
                return True
            for _ in range(20):
                s = self.regex.sample(pat.to_regexp())
                if s is not None:
                    out.append(s)
                    return True
            return False
        exps = self.rules[name]
        if depth > self.max_depth:
            best = min(
                1 + max([self.height.get(s.name, 0) if not s.is_term else 0 for s in e], default=0)
                for e in exps
            )
            exps = [
                e
                for e in exps
                if 1 + max([self.height.get(s.name, 0) if not s.is_term else 0 for s in e], default=0) == best
            ]
        order = list(exps)
        self.rng.shuffle(order)
        for e in order[:3]:
            mark = len(out)
            if all(self._sym(s.name, depth + 1, out) for s in e):
                return True
            del out[mark:]
        return False


def suite_groups(names: list[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    for f in sorted(SUITE.glob("*.json")):
        if names is not None and f.stem not in names:
            continue
        for g in json.loads(f.read_text()):
            yield f"{f.stem}: {g['description']}", g


def parses(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


def serializations(data: Any) -> list[str]:
    """Compact, json.dumps default, and indented (within the default flexible whitespace policy)."""
    return [
        json.dumps(data, separators=(",", ":"), ensure_ascii=False),
        json.dumps(data, ensure_ascii=False),
        json.dumps(data, indent=2, ensure_ascii=False),
    ]


def validator(schema: Any) -> Any:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


# the JSON-Schema-Test-Suite cases whose failures are documented narrowings (docs/json_schema.md)
NARROWED = (
    "is only an annotation by default",  # formats are enforced
    "different property order",  # properties in declared order
    "allOf: allOf",  # merged properties in declared order
    "allOf with base schema: valid",
    "unevaluatedItems depends on adjacent contains",  # items evaluated by contains not credited
    "unevaluatedItems with minContains = 0",
    "unevaluatedProperties with anyOf: when two match",  # other matching branches not credited
    "custom metaschema with with no validation vocabulary",  # vocabularies are not read
    "dependentRequired: multiple dependents required: with dependencies",  # key order
    "dependentRequired: dependencies with escaped characters: quoted quotes",
    "dependentRequired: dependencies with escaped characters: CRLF",  # key order: dependents first
)
