"""``gm.Limits``: checked values, one compiled grammar per (grammar, limits), and engines that keep the
limits of their own compile (also for the parts they build lazily, at the first mask)."""

from __future__ import annotations

import pytest

import grammarmask as gm
from grammarmask.cache import Lru, forget, per_vocabulary
from grammarmask.cfg.lexeme_walks import _shared_walks
from grammarmask.limits import active, in_force
from grammarmask.testing import byte_vocabulary


def test_values_are_checked() -> None:
    with pytest.raises(TypeError, match=r"Limits.cfg_masks must be an int, got str"):
        gm.Limits(cfg_masks="10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be an int, got bool"):
        gm.Limits(index_masks=True)
    with pytest.raises(ValueError, match=r"Limits.cfg_mask_bytes must be >= 0, got -1"):
        gm.Limits(cfg_mask_bytes=-1)
    assert gm.Limits(walk_broad_tokens=-1).walk_broad_tokens == -1  # "every state is broad"
    with pytest.raises(TypeError, match="limits must be a grammarmask.Limits"):
        gm.Regex("a").compile(byte_vocabulary(), limits={"cfg_masks": 1})  # type: ignore[arg-type]


def test_in_force_is_scoped() -> None:
    tight = gm.Limits(cfg_masks=1)
    assert active() == gm.Limits()
    with in_force(tight):
        assert active() is tight
        with in_force(None):
            assert active() == gm.Limits()
        assert active() is tight
    assert active() == gm.Limits()


def test_one_compiled_grammar_per_grammar_and_limits() -> None:
    vocab = byte_vocabulary()
    tight = gm.Limits(index_masks=2)
    a = gm.Regex("[ab]+c").compile(vocab)
    b = gm.Regex("[ab]+c").compile(vocab, limits=tight)
    assert gm.Regex("[ab]+c").compile(vocab) is a
    assert gm.Regex("[ab]+c").compile(vocab, limits=gm.Limits(index_masks=2)) is b
    assert a is not b


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_regular_grammar_keeps_its_mask_budget(engine: str) -> None:
    vocab = byte_vocabulary([b"ab", b"ba", b"abc"])
    limits = gm.Limits(index_masks=2, index_eager_states=0)
    compiled = gm.Regex("(ab|ba)*c").compile(vocab, limits=limits, engine=engine)
    loose = gm.Regex("(ab|ba)*c").compile(vocab, engine=engine)
    m, ref = compiled.matcher(), loose.matcher()
    for t in b"abbaab":
        assert m.mask() == ref.mask()
        m.advance(t + 1)
        ref.advance(t + 1)
    index = compiled.index  # type: ignore[attr-defined]
    assert (index.masks_cached if engine == "native" else len(index._cache)) <= 2


def test_parts_built_at_the_first_mask_use_the_compiles_limits() -> None:
    # Dense root walkers are made lazily, when a mask first needs one: with every state "broad" they
    # must be made (the defaults would make none on this small vocabulary), and masks stay exact.
    text = 'start: "<" S ("<" S)*\nS: /[ab]{0,6}>/\n'
    doc = b"<ab><aaab><bbbbba>"
    vocab = byte_vocabulary([b"ab", b"ba", b"aab", b"b>", b"<a"])
    dense = gm.Lark(text).compile(vocab, limits=gm.Limits(walk_broad_tokens=-1), engine="python").matcher()
    plain = gm.Lark(text).compile(byte_vocabulary([b"ab", b"ba", b"aab", b"b>", b"<a"])).matcher()
    for ch in doc:
        assert dense.mask() == plain.mask()
        dense.advance(ch + 1)
        plain.advance(ch + 1)
    assert len(_shared_walks(vocab).walkers) >= 1


def test_per_vocabulary_store_is_made_once_and_forgotten() -> None:
    vocab = byte_vocabulary()
    made: list[int] = []

    def make() -> Lru[str, int]:
        made.append(1)
        return Lru(3)

    first = per_vocabulary(vocab, "test.store", make)
    assert per_vocabulary(vocab, "test.store", make) is first and made == [1]
    forget(vocab, "test.store")
    assert per_vocabulary(vocab, "test.store", make) is not first and made == [1, 1]


def test_lru_bounds_entries_and_bytes() -> None:
    lru: Lru[int, str] = Lru(3, max_bytes=10)
    for i in range(5):
        lru.put(i, str(i), nbytes=2)
    assert len(lru) == 3 and 1 not in lru and lru.get(4) == "4"
    lru.put(9, "big", nbytes=50)  # alone over the byte budget: kept, everything older goes
    assert len(lru) == 1 and lru.get(9) == "big" and lru.nbytes == 50


def test_shared_lexer_walks_are_bounded_per_vocabulary() -> None:
    # the native engine's shelf of CFG lexer walks (src/cfg/inside.rs) keeps at most
    # Limits.shared_lexer_walks, set by the vocabulary's first compile; walks of under 10,000 trie
    # nodes are not kept, so the vocabulary needs that many nodes
    import random

    from grammarmask import native
    from grammarmask.native import native_vocabulary

    assert native.available(), f"grammarmask._engine did not import: {native.IMPORT_ERROR}"

    rng = random.Random(3)
    alphabet = [bytes([b]) for b in range(0x20, 0x7F)] + ["é".encode(), "ü".encode(), "€".encode()]
    tokens = {b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(6000)}
    # (strings that refuse a character: the vocabulary's slice of string bodies takes any other
    # string, bounded or not, without a walk worth keeping)
    refusing = {"type": "string", "pattern": "^[^~]*$", "maxLength": 100}
    schemas = [refusing, {**refusing, "minLength": 2}, {**refusing, "minLength": 4}]
    for limit, kept in [(1, 1), (128, 3)]:
        ordered = sorted(tokens | {b'"'})
        vocab = gm.Vocabulary.from_tokens(ordered + [b""], eos_token_id=len(ordered))
        limits = gm.Limits(shared_lexer_walks=limit)
        for schema in schemas:
            m = gm.JsonSchema(schema).compile(vocab, limits=limits).matcher()
            m.advance(ordered.index(b'"'))
            m.mask()
        assert native_vocabulary(vocab).shelf[0] == kept
    # what benchmarks of a first grammar drop: the shelf and class tries go, the slice stays
    nv = native_vocabulary(vocab)
    slice_tokens = nv.slice_tokens
    nv.clear_shared()
    assert nv.shelf == (0, 0) and nv.tries_cached == 0 and nv.slice_tokens == slice_tokens > 0
    m = gm.JsonSchema({**refusing, "minLength": 3}).compile(vocab, limits=limits).matcher()
    m.advance(ordered.index(b'"'))
    m.mask()
    assert nv.shelf[0] == 1  # a new grammar's walk, on a new shelf
