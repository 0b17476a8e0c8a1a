"""Memoised masks equal masks computed from scratch.

Masks are reused across parser states by structural (and shallow structural) signatures; a reuse
that was not exact would show up here as a difference between a long-lived compiled grammar, whose
caches have seen many documents, and a freshly compiled one fed the same bytes.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from grammarmask.cache import forget
from grammarmask.cfg.lexeme_walks import _shared_walks
from grammarmask.engine import in_use
from grammarmask.frontends.gbnf import Gbnf
from grammarmask.frontends.lark import Lark
from grammarmask.limits import Limits, in_force
from grammarmask.mask import Mask

GRAMMARS = os.path.join(os.path.dirname(__file__), "..", "grammars")


@pytest.fixture(autouse=True)
def _python_engine() -> Iterator[None]:
    """These are the Python engine's caches: every compile here uses it (``_compile`` calls too)."""
    with in_use("python"):
        yield


def _json_value(rng: random.Random, depth: int) -> Any:
    if depth > 3 or rng.random() < 0.4:
        return rng.choice([rng.randint(-99, 999), 2.5, True, None, "ab c", ""])
    if rng.random() < 0.5:
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{rng.randint(0, 9)}": _json_value(rng, depth + 1) for _ in range(rng.randint(1, 3))}


def _arith(rng: random.Random, depth: int = 0) -> str:
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(["1", "x", "2.5", "foo"])
    if rng.random() < 0.3:
        return f"({_arith(rng, depth + 1)})"
    if rng.random() < 0.2:
        return f"f({_arith(rng, depth + 1)}, {_arith(rng, depth + 1)})"
    return f"{_arith(rng, depth + 1)} {rng.choice('+-*/')} {_arith(rng, depth + 1)}"


DOCS = {
    "json.lark": lambda rng: json.dumps(_json_value(rng, 0), indent=rng.choice([None, 1])),
    "json.gbnf": lambda rng: json.dumps(_json_value(rng, 0)),
    "arithmetic.lark": _arith,
}


@pytest.mark.parametrize("name", sorted(DOCS))
def test_cached_masks_equal_fresh_masks(name: str, tekken: Any, tekken_tokenizer: Any) -> None:
    path = os.path.join(GRAMMARS, name)
    g = Gbnf.from_file(path) if name.endswith(".gbnf") else Lark.from_file(path)
    warm = g._compile(tekken)
    rng = random.Random(3)
    checked = 0
    for _ in range(6):
        ids = tekken_tokenizer.encode(DOCS[name](rng), bos=False, eos=False)
        m = warm.matcher()
        for i, t in enumerate(ids):
            if i % 4 == 1:
                fresh = g._compile(tekken)
                st = fresh.feed(fresh.initial_state(), tekken.decode(ids[:i]))
                want = Mask(fresh.state_mask_words(st).copy(), tekken.size)
                if fresh.is_accepting_state(st):
                    want = want | Mask.from_token_ids([tekken.eos_token_id], tekken.size)
                assert m.mask() == want, (name, tekken.decode(ids[:i]))
                checked += 1
            m.advance(t)
    assert checked >= 10


@pytest.mark.parametrize("walk", ["pruned", "dense-class-trie", "dense-byte-trie"])
def test_shared_root_walks_are_translated(walk: str) -> None:
    # Both grammars use common.lark's ESCAPED_STRING and SIGNED_NUMBER, at different state offsets.
    # A small vocabulary makes no lexeme state "broad"; the dense variants make every state broad.
    from grammarmask.testing import byte_vocabulary

    limits = Limits()
    if walk != "pruned":
        limits = Limits(walk_broad_tokens=-1, walk_broad_below=-1, walk_small_frontier=0,
                        walk_max_classes=256 if walk == "dense-class-trie" else 0)

    extra = [b'"a', b'b"', b'", "', b'12', b'-3.5', b'"}', b'":', b"  ", b'\\"']
    a = Lark('start: "<" (ESCAPED_STRING | SIGNED_NUMBER)+ ">"\n%import common.ESCAPED_STRING\n'
             "%import common.SIGNED_NUMBER\n%import common.WS\n%ignore WS\n")
    b = Lark.from_file(os.path.join(GRAMMARS, "json.lark"))
    shared = byte_vocabulary(extra)
    a.compile(shared, limits=limits).matcher().mask()  # warm the shared walks with grammar a
    for text in ['{"a": [1, -2.5, "x\\"y"]', '"abc', "[12", '{"k":']:
        with in_force(limits):  # fresh compiles (no masks cached) under these limits
            m_shared = b._compile(shared).matcher()
            m_alone = b._compile(byte_vocabulary(extra)).matcher()
        for ch in text.encode():
            assert m_shared.mask() == m_alone.mask(), text
            m_shared.advance(ch + 1)
            m_alone.advance(ch + 1)
        assert m_shared.mask() == m_alone.mask(), text


def _tekken_masks(make: Callable[[], Any], ids: list[int], tekken: Any) -> list[Mask]:
    """The masks along ``ids`` of the grammar ``make()`` compiles, with no walk shared with earlier
    tests."""
    forget(tekken, "cfg.shared_walks")
    m = make().matcher()
    out = []
    for t in ids:
        out.append(m.mask())
        m.advance(t)
    return out


def _counted(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[int]:
    """Count the calls of ``cls.name`` that return something (a one-item list, read after)."""
    calls = [0]
    plain = getattr(cls, name)

    def counted(self: Any, *args: Any) -> Any:
        got = plain(self, *args)
        calls[0] += got is not None
        return got

    monkeypatch.setattr(cls, name, counted)
    return calls


def test_edited_root_walks_equal_full_walks_on_tekken(tekken: Any, tekken_tokenizer: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Keys other than the declared names: every key prefix is a new state of the exclusion DFA, walked
    # as an edit of an earlier full walk; the masks must equal those of full walks only.
    from grammarmask.cfg import rootwalk
    from grammarmask.frontends.json_schema import JsonSchema

    names = ["warrior", "druid", "deathknight", "demonhunter", "priest"]
    schema = {"type": "object", "properties": {k: {"type": "boolean"} for k in names},
              "additionalProperties": {"type": "string"}}
    doc = '{"warrior": false, "druid": true, "dragon": "x", "deathkni": "y", "de": "", "priests": "z"}'
    ids = list(tekken_tokenizer.encode(doc, bos=False, eos=False))
    edits = _counted(monkeypatch, rootwalk.RootWalk, "_diff_walk")
    with in_force(Limits(walk_bases=0)):
        full = _tekken_masks(lambda: JsonSchema(schema)._compile(tekken), ids, tekken)
    assert edits == [0]
    assert _tekken_masks(lambda: JsonSchema(schema)._compile(tekken), ids, tekken) == full
    assert edits[0] >= 5


@pytest.mark.parametrize("name", ["arithmetic.lark", "sql.lark"])
def test_dense_walks_below_whitespace_equal_pruned_walks_on_tekken(
    name: str, tekken: Any, tekken_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After ignored whitespace, a NAME or a number starts below the ' ' and '\t' nodes, over most of
    # the vocabulary: walked densely there. The masks must equal those of the pruned walks.
    from grammarmask.cfg import rootwalk

    docs = {
        "arithmetic.lark": "max(rate, 2.5) * (x + 17) - sqrt(y, n_items) % 3",
        "sql.lark": "SELECT o.id, sum(o.price * o.qty) AS total FROM orders o WHERE qty IN (1, 2) LIMIT 5;",
    }
    ids = list(tekken_tokenizer.encode(docs[name], bos=False, eos=False))
    with open(os.path.join(GRAMMARS, name), encoding="utf-8") as f:
        text = f.read()
    dense = _counted(monkeypatch, rootwalk.RootWalk, "walk_below")
    with in_force(Limits(walk_broad_below=1 << 30)):
        pruned = _tekken_masks(lambda: Lark(text)._compile(tekken), ids, tekken)
    assert dense == [0]
    assert _tekken_masks(lambda: Lark(text)._compile(tekken), ids, tekken) == pruned
    assert dense[0] >= 1


def test_walkers_made_again_key_the_same_shared_walks() -> None:
    # One dense walker per vocabulary at a time: two grammars evict each other's walkers while the
    # shared walks stay, keyed by walk class; a walker made again must name its classes alike.
    from grammarmask.testing import byte_vocabulary

    limits = Limits(walk_broad_tokens=-1, shared_walkers=1)
    texts = ['start: "<" S ("<" S)*\nS: /[ab]{0,6}>/\n', 'start: "[" T ("," T)* "]"\nT: /[ab]{0,5};/\n']
    docs = [b"<ab><aaab><bbbbba>", b"[a;,abab;,bbbbb;]"]
    extra = [b"ab", b"ba", b"aa", b"bb", b"aab", b"bab", b",a", b"b>", b"a]", b"<a"]

    def masks(i: int, vocab: Any) -> list[Mask]:
        with in_force(limits):
            m = Lark(texts[i])._compile(vocab).matcher()
        out = []
        for ch in docs[i]:
            out.append(m.mask())
            m.advance(ch + 1)
        return out

    alone = [masks(i, byte_vocabulary(extra)) for i in (0, 1)]
    shared = byte_vocabulary(extra)
    for i in (0, 1, 0, 1, 0):
        assert masks(i, shared) == alone[i], i


def test_caches_stay_within_their_byte_budgets_and_exact() -> None:
    # Tiny budgets evict all the time; the masks must not change, and the caches must stay bounded.
    from grammarmask.testing import byte_vocabulary

    extra = [b'"a', b'b"', b'", "', b'12', b'-3.5', b'"}', b'":', b"  ", b'\\"', b"true", b"nu"]
    g = Lark.from_file(os.path.join(GRAMMARS, "json.lark"))
    text = b'{"a": [1, -2.5, "x\\"y", true, null], "b": {"c": "nu"}}'
    m = g._compile(byte_vocabulary(extra)).matcher()
    want = []
    for ch in text:
        want.append(m.mask())
        m.advance(ch + 1)

    vocab = byte_vocabulary(extra)
    tight = g.compile(vocab, limits=Limits(shared_walk_bytes=4096, cfg_mask_bytes=256, cfg_parts_bytes=256))
    for _ in range(2):  # the second pass meets evicted and surviving entries alike
        m = tight.matcher()
        for ch, mask in zip(text, want):
            assert m.mask() == mask, text
            m.advance(ch + 1)
    shared = _shared_walks(vocab)
    assert shared.entries.nbytes <= 4096 or len(shared.entries) == 1
    assert tight._masks.nbytes <= 256 or len(tight._masks) == 1
    assert len(tight._masks) < len(text)  # it did evict
    assert tight._parts.nbytes <= 256 or len(tight._parts) == 1
