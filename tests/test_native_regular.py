"""The native regular engine against its specification: native == Python == brute force, every step.

At each step of a walk the two engines (``compile(..., engine="native")`` and ``engine="python"``)
must give the same mask words, the same next state, the same accepting flag and the same forced
bytes, and the mask must equal the brute-force oracle (``reference_mask`` over an independent
viability check: ``regex`` partial matching for generated patterns, the label set for Choice, a
direct DFA run on the 131k tekken vocabulary). An illegal token must be rejected by both, leaving
both matchers where they were.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import grammarmask as gm
from grammarmask import native
from grammarmask.automata import DFA
from grammarmask.engine import compile_dfa, in_use, resolve
from grammarmask.frontends.choice import Choice
from grammarmask.frontends.regex import Regex
from grammarmask.grammar import CompiledGrammar, Grammar
from grammarmask.limits import Limits, in_force
from grammarmask.native.regular import NativeDfaCompiledGrammar
from grammarmask.regular import DfaCompiledGrammar
from grammarmask.sequence import Sequence
from grammarmask.testing import reference_mask

from .support import Opaque
from .support_regex import Oracle, Pattern, patterns

Viable = Callable[[bytes], bool]
LABELS = (
    (Path(__file__).resolve().parents[1] / "examples" / "taxonomy.labels").read_text("utf-8").splitlines()
)
# the harness's regex workloads (benchmarks/workloads.py) and a few with wide and Unicode classes
REGEXES = [
    r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}",
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
    r"\+?[0-9]{1,3}[ -]?\(?[0-9]{3}\)?[ -]?[0-9]{3}[ -]?[0-9]{4}",
    r'"([^"\\\n]|\\.)*"',
    r"\w+( \w+){0,3}\.",
    r"[^\n]{0,30}",
    r"(?i)hello,? (world|wörld)!?",
]

EXTRA = ["ab", "abc", "é", "中文", "😀", "a\n", "  ", "K", "1.", "é中", "\U0001f601\U0001f602"]
PARTIAL = [b"\xe4\xb8", b"\xf0\x9f", b"\xf0\x9f\x98", b"\xc3", b"\x80\x80", b"a\xc3", b"\xa9b"]


@pytest.fixture(scope="module")
def toy() -> gm.Vocabulary:
    """EOS, two specials, every single byte, multi-byte tokens (some ending mid-character), padding."""
    tokens = [b"", b"", b"", *[bytes([b]) for b in range(256)], *[x.encode() for x in EXTRA], *PARTIAL]
    return gm.Vocabulary.from_tokens(tokens, eos_token_id=0, special_token_ids=(1, 2), size=len(tokens) + 7)


def both(grammar: Grammar, vocab: gm.Vocabulary, limits: Limits | None = None) -> tuple[CompiledGrammar, ...]:
    """``grammar``'s DFA compiled by each engine. One DFA for both, so their states are the same
    numbers (``automata.from_strings`` may number the states of two equal DFAs differently)."""
    dfa = grammar.to_dfa()
    out = []
    for engine in ("native", "python"):
        with in_force(limits), in_use(engine):
            out.append(compile_dfa(dfa, vocab))
    nat, py = out
    assert isinstance(nat, NativeDfaCompiledGrammar) and isinstance(py, DfaCompiledGrammar)
    return nat, py


def oracle_forced(viable: Viable, complete: Callable[[bytes], bool], out: bytes) -> bytes:
    """Bytes forced after ``out``: while incomplete and exactly one byte keeps the output viable."""
    forced = b""
    while not complete(out + forced) and len(forced) < 64:
        nxt = [b for b in range(256) if viable(out + forced + bytes([b]))]
        if len(nxt) != 1:
            break
        forced += bytes(nxt)
    return forced


def walk(
    nat: CompiledGrammar,
    py: CompiledGrammar,
    viable: Viable,
    complete: Callable[[bytes], bool],
    choose: Callable[[list[int]], int],
    steps: int,
    forced: bool = True,
) -> bytes:
    """Walk both engines side by side, checking every answer against the other and the oracle."""
    vocab = nat.vocab
    mn, mp = nat.matcher(), py.matcher()
    out = b""
    for _ in range(steps):
        s = mn.state
        assert s == mp.state
        assert np.array_equal(nat.state_mask_words(s), py.state_mask_words(s)), (out, s)
        want = reference_mask(viable, vocab, out, is_complete=complete)
        try:
            got = mn.mask()
        except gm.NoLegalContinuation:  # the vocabulary cannot spell any continuation
            assert len(want) == 0, out
            with pytest.raises(gm.NoLegalContinuation):
                mp.mask()
            break
        if got != want:
            extra = [vocab.token_bytes[t] for t in (got - want).token_ids()[:5]]
            missing = [vocab.token_bytes[t] for t in (want - got).token_ids()[:5]]
            raise AssertionError(f"after {out!r}: wrongly legal {extra}, wrongly illegal {missing}")
        assert mn.is_accepting() == mp.is_accepting() == complete(out)
        if forced:
            f = nat.forced_bytes(s)
            assert f == py.forced_bytes(s) == oracle_forced(viable, complete, out), out
        illegal = (~got).token_ids()
        if illegal.size:  # rejected by both, nothing moves
            bad = int(illegal[choose(list(range(illegal.size))) % illegal.size])
            for m in (mn, mp):
                n = m.num_tokens
                with pytest.raises(gm.TokenRejected):
                    m.advance(bad)
                assert m.num_tokens == n and m.state == s
            assert nat.advance_state(s, bad) is None and py.advance_state(s, bad) is None
        ids = [t for t in got.token_ids().tolist() if t != vocab.eos_token_id]
        if not ids:
            break
        t = ids[choose(ids) % len(ids)]
        mn.advance(t)
        mp.advance(t)
        out += vocab.token_bytes[t]
        assert mn.state == mp.state == nat.advance_state(s, t)
    return out


def picker(rng: random.Random) -> Callable[[list[int]], int]:
    return lambda options: rng.randrange(len(options))


# ---- the extension and the engine choice ------------------------------------------------------------


def test_extension_is_built() -> None:
    assert native.available(), f"grammarmask._engine did not import: {native.IMPORT_ERROR}"
    assert resolve(None) == "native"


def test_engine_choice_is_validated_and_cached_apart(toy: gm.Vocabulary) -> None:
    g = Regex("a+b")
    for bad in ("rust", "", 1, True):
        with pytest.raises(gm.GrammarError, match="engine must be None, 'native' or 'python'"):
            g.compile(toy, engine=bad)  # type: ignore[arg-type]
    nat = g.compile(toy, engine="native")
    py = g.compile(toy, engine="python")
    assert isinstance(nat, NativeDfaCompiledGrammar) and isinstance(py, DfaCompiledGrammar)
    assert g.compile(toy) is nat  # None picks native, and the cache keeps the engines apart
    assert g.compile(toy, engine="python") is py
    labels = Choice(["x", "yz"], leading_space="always")
    assert isinstance(labels.compile(toy, engine="native"), NativeDfaCompiledGrammar)
    assert isinstance(labels.compile(toy, engine="python"), DfaCompiledGrammar)


def test_nested_compiles_inherit_the_engine(toy: gm.Vocabulary) -> None:
    """A composite compiled with engine="python" compiles its parts with the Python engine too."""
    for engine, kind in (("python", DfaCompiledGrammar), ("native", NativeDfaCompiledGrammar)):
        seq = Sequence(Opaque(Regex("ab")), Regex("c+")).compile(toy, engine=engine)
        assert all(isinstance(p, kind) for p in seq.parts)  # type: ignore[attr-defined]


# ---- hypothesis walks on small regexes and small vocabularies --------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patterns(max_depth=2), st.integers(0, 2**32))
def test_random_walks_agree_on_toy_vocab(toy: gm.Vocabulary, p: Pattern, seed: int) -> None:
    oracle = Oracle(p)
    if not oracle.viable(b""):
        return  # an empty language: the front end refuses it, no engine is involved
    nat, py = both(Regex(p.re_text, flags=p.flags), toy)
    walk(nat, py, oracle.viable, oracle.complete, picker(random.Random(seed)), steps=6)


small_tokens = st.lists(
    st.binary(min_size=1, max_size=4).map(lambda b: bytes(x % 8 + 0x61 if x < 128 else x for x in b)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(
        ["(ab|cd)*e?", "a{2,5}b*", "[a-c]+[^a-c]?", "(a|bc|d.)*h", "é+|[^\\x00-\\x7f]a", "a?b?c?d?"]
    ),
    small_tokens,
    st.data(),
)
def test_random_walks_agree_on_small_vocabularies(
    pattern: str, tokens: list[bytes], data: st.DataObject
) -> None:
    """Small random vocabularies: duplicates, multi-byte pieces, a special id and padding."""
    vocab = gm.Vocabulary.from_tokens(
        [b"", b"<s>", *tokens, *(bytes([b]) for b in b"abcdeh")],
        eos_token_id=0,
        special_token_ids=(1,),
        size=len(tokens) + 12,
    )
    rx = re.compile(pattern)

    def complete(d: bytes) -> bool:
        try:
            return rx.fullmatch(d.decode()) is not None
        except UnicodeDecodeError:
            return False

    dfa = Regex(pattern).to_dfa()
    nat, py = both(Regex(pattern), vocab)
    walk(
        nat,
        py,
        lambda d: dfa.run(dfa.start, d) != 0,
        complete,
        lambda options: data.draw(st.integers(0, len(options) - 1)),
        steps=8,
    )


@pytest.mark.parametrize("pattern", ["(ab|cd)*", r"\w+( \w+)*", r'"([^"\\]|\\.)*"', "[😀-😂]+é?"])
def test_every_state_agrees_under_extreme_limits(toy: gm.Vocabulary, pattern: str) -> None:
    """Every state of the DFA, with a mask cache of 0, 1 and the default size."""
    dfa = Regex(pattern).to_dfa()
    tb = toy.token_bytes
    for limit in (0, 1, 512):
        nat, py = both(Regex(pattern), toy, Limits(index_masks=limit))
        for _ in range(2):  # the second round reads the cache (or recomputes past its bound)
            for s in range(dfa.n_states):
                words = nat.state_mask_words(s)
                assert np.array_equal(words, py.state_mask_words(s)), (pattern, s)
                want = {t for t, b in enumerate(tb) if b and t not in toy.special_ids and s and dfa.run(s, b)}
                assert set(gm.Mask(words, toy.size).token_ids().tolist()) == want
                assert nat.forced_bytes(s) == py.forced_bytes(s)
                assert nat.is_accepting_state(s) == py.is_accepting_state(s)
                for t in range(toy.size):
                    assert nat.advance_state(s, t) == py.advance_state(s, t)
        assert nat.index.masks_cached <= limit  # type: ignore[attr-defined]


# ---- the real tekken vocabulary -------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_walks_agree_on_tekken(tekken: gm.Vocabulary, pattern: str) -> None:
    g = Regex(pattern)
    dfa = g.to_dfa()
    nat, py = both(g, tekken)
    rng = random.Random(1)
    for _ in range(2):
        out = walk(
            nat,
            py,
            lambda d: dfa.run(dfa.start, d) != 0,
            dfa.matches,
            picker(rng),
            steps=5,
            forced=False,
        )
        assert dfa.run(dfa.start, out)
    for s in range(dfa.n_states):  # every state (masks only: the walks checked them against brute force)
        assert np.array_equal(nat.state_mask_words(s), py.state_mask_words(s)), (pattern, s)
        assert nat.forced_bytes(s) == py.forced_bytes(s)


@pytest.mark.parametrize("leading_space", ["none", "always", "optional"])
def test_label_walks_agree_on_tekken(tekken: gm.Vocabulary, leading_space: str) -> None:
    """The shipped 1,000 taxonomy labels (examples/taxonomy.labels) as a Choice."""
    labels = [lab.encode() for lab in LABELS]
    spaced = {b" " + lab for lab in labels}
    plain = set(labels)
    words = {"none": plain, "always": spaced, "optional": plain | spaced}[leading_space]
    ordered = sorted(words)

    def viable(d: bytes) -> bool:
        import bisect

        i = bisect.bisect_left(ordered, d)
        return i < len(ordered) and ordered[i].startswith(d)

    nat, py = both(Choice(LABELS, leading_space=leading_space), tekken)  # type: ignore[arg-type]
    # more classes than a class trie is built for: the index walks the byte trie without the dead
    # bytes, through the class map (src/regular.rs, CLASS_TRIE_MAX)
    assert nat.index.n_classes > 32  # type: ignore[attr-defined]
    rng = random.Random(2)
    for _ in range(3):
        out = walk(nat, py, viable, words.__contains__, picker(rng), steps=12)
        assert viable(out)


def test_tokenized_labels_are_accepted_by_both(tekken: gm.Vocabulary, tekken_tokenizer: object) -> None:
    nat, py = both(Choice(LABELS, leading_space="always"), tekken)
    for label in random.Random(3).sample(LABELS, 40):
        ids = tekken_tokenizer.encode(" " + label, bos=False, eos=False)  # type: ignore[attr-defined]
        for compiled in (nat, py):
            m = compiled.matcher()
            m.advance_many([*ids, tekken.eos_token_id])
            assert m.is_finished()


# ---- concurrency and errors --------------------------------------------------------------------------


def test_threads_share_one_compiled_grammar(tekken: gm.Vocabulary) -> None:
    """Many threads on first visits of one compiled grammar (tiny cache: constant eviction) all get
    the Python engine's masks."""
    pattern = REGEXES[1]
    nat = Regex(pattern).compile(tekken, engine="native", limits=Limits(index_masks=3))
    py = Regex(pattern).compile(tekken, engine="python")
    states = list(range(Regex(pattern).to_dfa().n_states))
    want = {s: py.state_mask_words(s) for s in states}
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(nat.state_mask_words, states * 4))
    for s, w in zip(states * 4, got, strict=True):
        assert np.array_equal(w, want[s])


def test_bad_input_raises_documented_errors(toy: gm.Vocabulary) -> None:
    nat = Regex("ab").compile(toy, engine="native")
    n = nat.dfa.n_states  # type: ignore[attr-defined]
    for bad_state in (-1, n, 2**40):
        with pytest.raises(gm.GrammarError, match="is not a state of this grammar"):
            nat.state_mask_words(bad_state)
        with pytest.raises(gm.GrammarError):
            nat.advance_state(bad_state, 3)
    for bad_token in (-1, 2**40, toy.size + 100, 1):
        assert nat.advance_state(nat.initial_state(), bad_token) is None
    assert not nat.state_mask_words(0).any()
    with pytest.raises(ValueError):
        nat.state_mask_words(nat.initial_state())[0] = 1  # shared answers are read-only


def test_malformed_tables_are_grammar_errors(toy: gm.Vocabulary) -> None:
    from grammarmask import _engine

    nv = native.native_vocabulary(toy)
    good = Regex("ab").to_dfa()
    t, acc = good.transitions.tobytes(), good.accepting.tobytes()
    cases = [
        (t[:-4], acc, good.start),  # a table that is not n rows of 256
        (t[:-1], acc, good.start),  # not whole int32 words
        (t, acc, good.n_states),  # start out of range
        (np.full_like(good.transitions, -1).tobytes(), acc, good.start),  # negative targets
        (t, b"\x01" + acc[1:], good.start),  # an accepting dead state
    ]
    for trans, accepting, start in cases:
        with pytest.raises(gm.GrammarError, match="native DFA"):
            _engine.RegularIndex(nv, trans, accepting, start, 8)
    with pytest.raises(gm.GrammarError, match="native vocabulary"):
        _engine.Vocabulary(b"abc", np.array([1, 1], np.uint32).tobytes(), [], 2)


def test_the_native_vocabulary_is_shared(toy: gm.Vocabulary) -> None:
    a = Regex("x+").compile(toy, engine="native")
    b = Regex("y+").compile(toy, engine="native")
    assert native.native_vocabulary(toy) is native.native_vocabulary(toy)
    assert isinstance(a, NativeDfaCompiledGrammar) and isinstance(b, NativeDfaCompiledGrammar)


def test_dfa_with_every_byte_its_own_class(toy: gm.Vocabulary) -> None:
    """256 byte classes (the widest class map the crate stores as u8)."""
    n = 258
    trans = np.zeros((n, 256), np.int32)
    trans[1, :] = np.arange(2, 258)  # state 1 --b--> state 2 + b, each accepting
    dfa = DFA(trans, np.array([False, False] + [True] * 256), 1)
    with in_use("native"):
        nat = compile_dfa(dfa, toy)
    with in_use("python"):
        py = compile_dfa(dfa, toy)
    assert nat.index.n_classes == 256  # type: ignore[attr-defined]
    assert np.array_equal(nat.state_mask_words(1), py.state_mask_words(1))
    assert nat.advance_state(1, 3 + ord("a")) == 2 + ord("a")


def test_a_large_choice_hands_rust_a_table_by_class(toy: gm.Vocabulary) -> None:
    """A 5,000-label Choice's DFA reaches the index as states x its byte classes (a tenth of the
    256-column table), with the masks, next states and forced bytes of the dense table and of the
    Python engine."""
    from grammarmask import _engine

    rng = random.Random(7)
    labels = sorted({"".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(5000)})
    dfa = Choice(labels).to_dfa()
    with in_use("native"):
        nat = compile_dfa(dfa, toy)
    with in_use("python"):
        py = compile_dfa(dfa, toy)
    assert isinstance(nat, NativeDfaCompiledGrammar)
    classes, k = dfa.byte_classes()
    assert nat.index.n_classes == k <= 28
    assert nat.index.table_words == dfa.n_states * k
    dense = _engine.RegularIndex(native.native_vocabulary(toy), dfa.transitions.tobytes(),
                                 dfa.accepting.tobytes(), dfa.start, 8)
    assert dense.table_words == dfa.n_states * k  # the dense table's equal columns merged too
    state = rng.sample(range(1, dfa.n_states), 200)
    for s in [dfa.start, *state]:
        words = nat.state_mask_words(s)
        assert np.array_equal(words, py.state_mask_words(s))
        assert np.array_equal(words, np.frombuffer(dense.mask(s), dtype=np.uint32))
        assert nat.forced_bytes(s) == dense.forced_bytes(s) == py.forced_bytes(s)
        for t in range(toy.size):
            assert (nat.advance_state(s, t) or 0) == dense.next_state(s, t)
    by_class = dfa.transitions[:, np.unique(classes, return_index=True)[1]].tobytes()
    with pytest.raises(gm.GrammarError, match="native DFA: byte .* has class"):  # k columns, no map
        _engine.RegularIndex(native.native_vocabulary(toy), by_class, dfa.accepting.tobytes(), dfa.start, 8)
