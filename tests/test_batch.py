"""fill_masks: every row equals its matcher's own mask (oracle-checked elsewhere); bad input errors."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from grammarmask.batch import allocate_masks, fill_masks
from grammarmask.compose import And
from grammarmask.errors import GrammarError, NoLegalContinuation
from grammarmask.frontends.lark import Lark
from grammarmask.frontends.regex import Regex
from grammarmask.strategies import token_paths
from grammarmask.testing import byte_vocabulary, reference_mask
from grammarmask.vocab import Vocabulary

VOCAB = byte_vocabulary([b"ab", b"ba", b"abc", b"12", b"[1", b"]]"])
PATTERN = r"(ab|ba)*c?[0-9]*"
GRAMMARS = [Regex(PATTERN), Lark('start: "[" [NUM ("," NUM)*] "]"\nNUM: /[0-9]+/')]


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_rows_equal_each_matchers_mask(dtype: Any, data: Any) -> None:
    matchers: list[Any] = []
    n = data.draw(st.integers(1, 9))
    for i in range(n):
        compiled = GRAMMARS[i % 2].compile(VOCAB)
        m = compiled.matcher()
        m.advance_many(data.draw(token_paths(compiled, max_tokens=6)))
        matchers.append(m)
    if data.draw(st.booleans()):
        matchers[0] = None  # an empty slot
    words = allocate_masks(n, VOCAB.n_words, dtype)
    words[:] = -1 if dtype == np.int32 else 0xFFFFFFFF
    with ThreadPoolExecutor(2) as pool:
        for executor in (None, pool):
            fill_masks(matchers, words, executor=executor)
            for row, m in zip(words, matchers, strict=True):
                want = np.zeros(VOCAB.n_words, np.uint32) if m is None else m.mask().words
                assert np.array_equal(row.view(np.uint32), want)


@settings(max_examples=20, deadline=None)
@given(token_paths(Regex(PATTERN).compile(VOCAB), max_tokens=6, allow_eos=False))
def test_rows_match_the_oracle(path: list[int]) -> None:
    rx = regex.compile(PATTERN.encode())
    prefix = VOCAB.decode(path)
    m = Regex(PATTERN).compile(VOCAB).matcher()
    m.advance_many(path)
    words = allocate_masks(2, VOCAB.n_words)
    fill_masks([m, m.fork()], words)
    want = reference_mask(
        lambda b: rx.fullmatch(b, partial=True) is not None,
        VOCAB,
        prefix,
        is_complete=lambda b: rx.fullmatch(b) is not None,
    )
    assert np.array_equal(words[0].view(np.uint32), want.words)
    assert np.array_equal(words[1], words[0])


def test_bad_buffers_are_errors() -> None:
    m = Regex("a").compile(VOCAB).matcher()
    with pytest.raises(GrammarError, match="2 matchers for 1 rows"):
        fill_masks([m, m], allocate_masks(1, VOCAB.n_words))
    with pytest.raises(GrammarError, match="int32 or uint32"):
        fill_masks([m], np.zeros((1, VOCAB.n_words), np.int64))
    with pytest.raises(GrammarError, match="words per row"):
        fill_masks([m], allocate_masks(1, VOCAB.n_words + 1))
    with pytest.raises(GrammarError, match="2-D"):
        fill_masks([m], np.zeros(VOCAB.n_words, np.int32))
    with pytest.raises(GrammarError, match="C-contiguous"):
        fill_masks([m], allocate_masks(1, 2 * VOCAB.n_words)[:, ::2])
    with pytest.raises(GrammarError):
        allocate_masks(-1, 3)


def test_dead_end_row_raises() -> None:
    from tests.support import Opaque

    g = And(Opaque(Regex("ab*c")), Opaque(Regex("a[xy]")))
    m = g.compile(VOCAB).matcher()
    m.advance(ord("a") + 1)
    with pytest.raises(NoLegalContinuation):
        fill_masks([Regex("a").compile(VOCAB).matcher(), m], allocate_masks(2, VOCAB.n_words))


JSON_LIKE = Lark(r'''
start: value
?value: object | array | NUMBER | STRING
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
NUMBER: /-?[0-9]+/
STRING: /"[a-z]*"/
''')


def test_native_cfg_rows_are_filled_by_the_engine() -> None:
    compiled = JSON_LIKE.compile(VOCAB)
    assert compiled.batch_engine is not None  # the rows below go through RowJob, not state_row


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_threads_fill_first_visits_as_one_thread_does(data: Any) -> None:
    """Forty rows (mostly first visits: each computed by whichever thread takes it), on two and on
    four threads, equal the matchers' own masks."""
    for workers in (2, 4):
        matchers: list[Any] = []
        for _ in range(40):
            compiled = JSON_LIKE.compile(VOCAB)
            m = compiled.matcher()
            m.advance_many(data.draw(token_paths(compiled, max_tokens=8)))
            matchers.append(m)
        words = allocate_masks(len(matchers), VOCAB.n_words)
        with ThreadPoolExecutor(workers) as pool:
            fill_masks(matchers, words, executor=pool)
        for row, m in zip(words, matchers, strict=True):
            want = np.zeros(VOCAB.n_words, np.uint32) if m.is_finished() else m.mask().words
            assert np.array_equal(row.view(np.uint32), want)


def test_a_native_dead_end_raises_for_the_lowest_dead_row() -> None:
    # no token of this vocabulary spells "x": after "a" nothing can follow, and "a" is not a sentence
    tokens = [b""] + [bytes([b]) for b in range(256) if b != ord("x")]
    vocab = Vocabulary.from_tokens(tokens, eos_token_id=0)
    g = Lark('start: "a" "x" | "b"').compile(vocab)
    assert g.batch_engine is not None
    live, dead = g.matcher(), g.matcher()
    dead.advance(vocab.token_bytes.index(b"a"))
    words = allocate_masks(3, vocab.n_words)
    with pytest.raises(NoLegalContinuation, match="matcher 1"):
        fill_masks([live, dead, dead.fork()], words)
    assert np.array_equal(words[0].view(np.uint32), live.mask().words)  # rows before it are filled


def test_row_job_checks_its_arguments_and_writes_nothing_once_finished() -> None:
    from grammarmask.native import _engine

    # a grammar of this test only: its first state's mask is not computed yet
    g, other = Lark('start: "(" /[0-9]/* ")"').compile(VOCAB), GRAMMARS[1].compile(VOCAB)
    s = g.initial_state()
    words = allocate_masks(2, VOCAB.n_words).view(np.uint32)
    at, n = words.ctypes.data, VOCAB.n_words

    def job(**kw: Any) -> Any:
        args = dict(grammars=[g.engine], states=[s], rows=[0], eos=[0], address=at, n_rows=2, n_words=n)
        args.update(kw)
        return _engine.RowJob(*args.values())

    with pytest.raises(GrammarError, match="another compiled grammar"):
        job(grammars=[other.engine])
    with pytest.raises(GrammarError, match="rows must ascend"):
        job(grammars=[g.engine] * 2, states=[s, s], rows=[1, 1], eos=[0, 0])
    with pytest.raises(GrammarError, match="rows must ascend below 2"):
        job(rows=[2])
    with pytest.raises(GrammarError, match="EOS id"):
        job(eos=[32 * n])
    with pytest.raises(GrammarError, match="words per row"):
        job(n_words=n + 1)
    with pytest.raises(GrammarError, match="not the address"):
        job(address=0)
    done = job()
    assert done.pending == 1
    assert done.finish() == []
    assert np.array_equal(words[0], g.state_mask_words(s))
    words[:] = 0
    done.run()  # a worker that woke after the last row was taken
    assert not words.any()


def test_a_budget_a_native_row_runs_out_of_is_raised_as_the_row_alone_raises_it() -> None:
    """The mask of a 16-byte token of a's cut 2**15 ways stops at a visit budget it needs more than
    (the cuts reach sets of equal futures, which are visited once: ~30 visits): filled by the RowJob,
    on one thread or a pool, it raises the same BudgetExceeded, and the other rows are kept."""
    import grammarmask as gm

    splits = gm.Gbnf('root ::= root root | "a"+ | "a"?')
    vocab = gm.Vocabulary.from_tokens([b"a", b"aa", b"aaaa", b"a" * 16, b"", b"b"], eos_token_id=4)
    over = splits.compile(vocab, limits=gm.Limits(cfg_walk_visits=20)).matcher()
    fine = Lark('start: "b"').compile(vocab).matcher()
    assert over.compiled.batch_engine is not None and fine.compiled.batch_engine is not None
    with ThreadPoolExecutor(2) as pool:
        for executor in (None, pool):
            words = allocate_masks(3, vocab.n_words)
            with pytest.raises(gm.BudgetExceeded) as e:
                fill_masks([fine, over, fine.fork()], words, executor=executor)
            assert e.value.budget == "cfg_walk_visits" and e.value.value == 20
            assert np.array_equal(words[0].view(np.uint32), fine.mask().words)
            assert np.array_equal(words[2].view(np.uint32), fine.mask().words)


def test_callers_sharing_one_pool_and_one_grammar_get_the_rows_of_the_python_engine() -> None:
    """Four callers at once, each filling its own batch of a shared native compiled grammar through
    one pool of three workers; the rows are first visits (the walks were chosen on the Python
    engine and replayed with advance, which computes no mask). Every row equals the Python
    engine's mask of the same output."""
    import random
    import threading

    grammar = Lark(r'''
start: value
?value: "{" [STRING ":" value ("," STRING ":" value)*] "}" | "[" [value ("," value)*] "]" | NUMBER | STRING
NUMBER: /-?[0-9]+(\.[0-9]+)?/
STRING: /"[a-z ]*"/
''')
    spec, native = grammar.compile(VOCAB, engine="python"), grammar.compile(VOCAB)
    assert native.batch_engine is not None
    rng = random.Random(7)

    def walk() -> tuple[Any, Any]:
        m, taken = spec.matcher(), []
        for _ in range(rng.randint(0, 12)):
            ids = [int(t) for t in m.mask().token_ids() if t != VOCAB.eos_token_id]
            if not ids:
                break
            taken.append(rng.choice(ids))
            m.advance(taken[-1])
        replayed = native.matcher()
        replayed.advance_many(taken)
        return m, replayed

    batches = [[walk() for _ in range(24)] for _ in range(4)]
    assert native.engine.masks_cached == 0  # every row below is computed by the fill
    got: list[Any] = [None] * 4
    with ThreadPoolExecutor(3) as pool:
        def fill(i: int) -> None:
            words = allocate_masks(len(batches[i]), VOCAB.n_words)
            fill_masks([r for _, r in batches[i]], words, executor=pool)
            got[i] = words

        callers = [threading.Thread(target=fill, args=(i,)) for i in range(4)]
        for t in callers:
            t.start()
        for t in callers:
            t.join()
    for words, batch in zip(got, batches, strict=True):
        for row, (m, _) in zip(words, batch, strict=True):
            assert np.array_equal(row.view(np.uint32), m.mask().words)
