"""Shared test data (deterministic)."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path
from types import ModuleType

import pytest

from grammarmask.automata import DFA
from grammarmask.grammar import CompiledGrammar, Grammar
from grammarmask.vocab import Vocabulary

_TOP = [
    "Technology",
    "Sports",
    "Politics",
    "Science",
    "Health",
    "Business",
    "Arts",
    "Travel",
    "Food",
    "Education",
]
_MID = [
    "AI",
    "Hardware",
    "Software",
    "Football",
    "Tennis",
    "Elections",
    "Policy",
    "Physics",
    "Biology",
    "Nutrition",
    "Fitness",
    "Finance",
    "Startups",
    "Music",
    "Film",
    "Europe",
    "Asia",
    "Cooking",
    "Wine",
    "Schools",
]
_LEAF = [
    "NLP",
    "Vision",
    "Robotics",
    "Chips",
    "Cloud",
    "Security",
    "Leagues",
    "Transfers",
    "Grand Slams",
    "Polls",
    "Law",
    "Quantum",
    "Genetics",
    "Diets",
    "Yoga",
    "Markets",
    "Funding",
    "Jazz",
    "Drama",
    "Ümlaut ✓",
    "日本語",
    "Databases",
    "Compilers",
    "Emoji 🙂",
]


def taxonomy_labels(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct hierarchical labels such as "Technology > AI > NLP" (deterministic)."""
    rng = random.Random(seed)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        depth = rng.choice([1, 2, 3, 3, 3, 4])
        parts = [rng.choice(_TOP), rng.choice(_MID), rng.choice(_LEAF), f"Topic {rng.randint(0, 999)}"][
            :depth
        ]
        label = " > ".join(parts)
        if label not in seen:
            seen.add(label)
            out.append(label)
    return out


def _corpus_dir() -> Path:
    """The shared corpus of third-party grammars and schemas: ``$GRAMMARMASK_CORPUS``, else
    ``shared/corpus`` beside this checkout (where CI puts it), else the workplace's copy."""
    env = os.environ.get("GRAMMARMASK_CORPUS")
    if env:
        return Path(env)
    beside = Path(__file__).resolve().parents[2] / "shared" / "corpus"
    return beside if beside.is_dir() else Path("/work/shared/corpus")


CORPUS = _corpus_dir()


def isomorphic(a: DFA, b: DFA) -> bool:
    """Two minimal trimmed DFAs accept the same language iff they are isomorphic."""
    if a.n_states != b.n_states or (a.start == 0) != (b.start == 0):
        return False
    m = {0: 0, a.start: b.start}
    todo = [a.start]
    while todo:
        x = todo.pop()
        y = m[x]
        if a.accepting[x] != b.accepting[y]:
            return False
        for u, v in zip(a.transitions[x].tolist(), b.transitions[y].tolist(), strict=True):
            if u in m:
                if m[u] != v:
                    return False
            else:
                m[u] = v
                todo.append(u)
    return True


class Opaque(Grammar):
    """A grammar that hides its regularity, forcing the generic (side-by-side) composition path."""

    def __init__(self, inner: Grammar) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"Opaque({self.inner!r})"

    def _compile(self, vocab: Vocabulary) -> CompiledGrammar:
        return self.inner.compile(vocab)


def made_once_per_installation(module: ModuleType, kind: str, cache_dir: Path,
                               monkeypatch: pytest.MonkeyPatch) -> int:
    """Hold a module that keeps DFAs an installation makes once (its ``keep_common_dfas`` and
    ``_keep``) to making nothing with the disk cache off, and to one entry of ``kind`` in
    ``cache_dir`` made by any thread; the number of automata the process then holds."""
    from grammarmask.cache import automata

    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", "off")
    automata().clear()
    module._keep.cache_clear()
    module.keep_common_dfas()
    assert len(automata()) == 0
    monkeypatch.setenv("GRAMMARMASK_CACHE_DIR", str(cache_dir))
    worker = threading.Thread(target=module.keep_common_dfas)  # (any thread may be the first)
    worker.start()
    worker.join()
    assert len(list(cache_dir.glob(f"{kind}-*"))) == 1
    return len(automata())
