"""The masked sampler against direct numpy computations of the conditional distribution p_C = p / Z."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammarmask.errors import GrammarError, NoLegalContinuation
from grammarmask.mask import Mask
from grammarmask.sampling import SequenceStats, StepStats, sample, sample_with_stats


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def inverse_cdf(p: np.ndarray, u: float) -> int:
    """The textbook draw: the first index whose cumulative probability exceeds u."""
    return int(np.searchsorted(np.cumsum(p), u * p.sum(), side="right"))


sizes = st.integers(min_value=1, max_value=300)


@st.composite
def logits_and_mask(draw: st.DrawFn) -> tuple[np.ndarray, Mask]:
    n = draw(sizes)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(n) * draw(st.sampled_from([0.1, 1.0, 5.0, 30.0]))
    density = draw(st.sampled_from([0.01, 0.1, 0.5, 1.0]))
    legal = rng.random(n) < density
    legal[rng.integers(n)] = True
    return logits, Mask.from_bool(legal)


# --- the seed checks -------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(logits_and_mask(), st.integers(0, 2**32 - 1), st.sampled_from([1.0, 0.5, 2.0]))
def test_all_legal_mask_changes_nothing(lm: tuple[np.ndarray, Mask], seed: int, temperature: float) -> None:
    logits, _ = lm
    full = Mask.all(logits.shape[0])
    g_masked, g_plain, g_ref = (np.random.default_rng(seed) for _ in range(3))
    got = [sample(logits, full, temperature=temperature, rng=g_masked) for _ in range(5)]
    plain = [sample(logits, None, temperature=temperature, rng=g_plain) for _ in range(5)]
    p = softmax(logits / temperature)
    ref = [inverse_cdf(p, g_ref.random()) for _ in range(5)]
    assert got == plain == ref
    # same generator state afterwards: exactly one uniform per draw
    assert g_masked.random() == g_plain.random() == g_ref.random()


@settings(max_examples=60, deadline=None)
@given(
    sizes, st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.3, 1.0, 7.0]),
    st.one_of(st.none(), st.integers(1, 5)), st.one_of(st.none(), st.floats(0.01, 1.0)),
)
def test_one_token_mask_always_yields_it(
    n: int, seed: int, temperature: float, top_k: int | None, top_p: float | None
) -> None:
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(n) * 20
    t = int(rng.integers(n))
    logits[t] = -1e4  # the model strongly dislikes the only legal token
    mask = Mask.from_token_ids([t], n)
    for _ in range(5):
        assert sample(logits, mask, temperature=temperature, top_k=top_k, top_p=top_p, rng=rng) == t


def test_illegal_token_never_sampled_10k_draws() -> None:
    rng = np.random.default_rng(12345)
    for _ in range(10_000):
        n = int(rng.integers(1, 400))
        logits = rng.standard_normal(n) * rng.choice([0.5, 3.0, 20.0])
        legal = rng.random(n) < rng.choice([0.01, 0.2, 0.9])
        legal[rng.integers(n)] = True
        opts = {"top_k": None if rng.random() < 0.5 else int(rng.integers(1, 10)),
                "top_p": None if rng.random() < 0.5 else float(rng.uniform(0.05, 1.0)),
                "temperature": float(rng.choice([0.0, 0.5, 1.0, 3.0]))}
        t = sample(logits, Mask.from_bool(legal), rng=rng, **opts)
        assert legal[t]


def test_samples_follow_the_conditional_distribution() -> None:
    rng = np.random.default_rng(7)
    n = 40
    logits = rng.standard_normal(n) * 1.5
    legal = np.zeros(n, bool)
    legal[[1, 4, 9, 16, 25, 36]] = True
    p = softmax(logits)
    expected = np.where(legal, p, 0) / p[legal].sum()
    draws = 20_000
    counts = np.bincount([sample(logits, Mask.from_bool(legal), rng=rng) for _ in range(draws)], minlength=n)
    assert counts[~legal].sum() == 0
    # chi-square with 5 degrees of freedom: 30 is far past the 1e-5 quantile
    e = expected[legal] * draws
    chi2 = float((((counts[legal] - e) ** 2) / e).sum())
    assert chi2 < 30, (counts[legal], e)


# --- empty masks, bad input ------------------------------------------------------------------------


def test_empty_mask_raises_before_any_softmax() -> None:
    logits = np.full(50, np.nan)  # a softmax of these would be NaN everywhere
    with np.errstate(all="raise"), pytest.raises(NoLegalContinuation):
        sample(logits, Mask.none(50))
    with np.errstate(all="raise"), pytest.raises(NoLegalContinuation):
        sample_with_stats(np.zeros(50), Mask.none(50), rng=0)


def test_all_legal_logits_minus_inf_is_no_legal_continuation() -> None:
    logits = np.zeros(10)
    logits[[2, 3]] = -np.inf
    with pytest.raises(NoLegalContinuation, match="probability 0"):
        sample(logits, Mask.from_token_ids([2, 3], 10), rng=0)


def test_wrong_length_names_both_lengths() -> None:
    with pytest.raises(GrammarError, match=r"100 entries.*131 tokens"):
        sample(np.zeros(100), Mask.all(131))
    with pytest.raises(GrammarError, match="1-D"):
        sample(np.zeros((2, 10)), Mask.all(10))


def test_longer_logits_treat_extra_ids_as_padding() -> None:
    rng = np.random.default_rng(0)
    logits = np.zeros(64)
    logits[40:] = 50.0  # padding ids the model loves
    mask = Mask.all(40)
    assert all(sample(logits, mask, rng=rng) < 40 for _ in range(200))
    assert sample(logits, mask, temperature=0) < 40


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"rng": "seed"}, "rng"),
    ],
)
def test_bad_options_are_grammar_errors(kwargs: dict[str, object], msg: str) -> None:
    with pytest.raises(GrammarError, match=msg):
        sample(np.zeros(5), Mask.all(5), **kwargs)  # type: ignore[arg-type]


def test_nan_at_a_legal_id_is_an_error() -> None:
    logits = np.zeros(5)
    logits[1] = np.nan
    with pytest.raises(GrammarError, match="NaN"):
        sample(logits, Mask.from_token_ids([1, 2], 5), rng=0)
    # NaN at an illegal id is masked away
    assert sample(logits, Mask.from_token_ids([2], 5), rng=0) == 2


# --- greedy, top-k, top-p, repetition penalty ------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(logits_and_mask())
def test_greedy_is_argmax_among_legal_and_draws_nothing(lm: tuple[np.ndarray, Mask]) -> None:
    logits, mask = lm
    legal = mask.to_bool()
    g = np.random.default_rng(1)
    t = sample(logits, mask, temperature=0, rng=g)
    assert t == int(np.argmax(np.where(legal, logits, -np.inf)))
    assert g.random() == np.random.default_rng(1).random()


@settings(max_examples=80, deadline=None)
@given(logits_and_mask(), st.integers(0, 2**32 - 1))
def test_top_k_one_and_tiny_top_p_pick_the_best_legal_token(lm: tuple[np.ndarray, Mask], seed: int) -> None:
    logits, mask = lm
    legal = mask.to_bool()
    best = int(np.argmax(np.where(legal, logits, -np.inf)))
    if np.sum(np.where(legal, logits, -np.inf) == logits[best]) > 1:
        return  # a tie: either is right
    g = np.random.default_rng(seed)
    assert sample(logits, mask, top_k=1, rng=g) == best
    assert sample(logits, mask, top_p=1e-9, rng=g) == best


def test_top_k_and_top_p_act_on_the_masked_distribution() -> None:
    # the three most likely tokens are illegal: filtering before the mask would leave nothing
    logits = np.array([10.0, 9.0, 8.0, 1.0, 0.5, 0.0, -1.0])
    mask = Mask.from_token_ids([3, 4, 5, 6], 7)
    rng = np.random.default_rng(0)
    got_k = {sample(logits, mask, top_k=2, rng=rng) for _ in range(400)}
    assert got_k == {3, 4}
    # p_C over legal: top_p=0.5 keeps the smallest head reaching half of the legal mass
    pc = softmax(logits[3:])
    head = int(np.searchsorted(np.cumsum(pc), 0.5)) + 1
    got_p = {sample(logits, mask, top_p=0.5, rng=rng) for _ in range(400)}
    assert got_p == set(range(3, 3 + head))
    got_kp = {sample(logits, mask, top_k=3, top_p=0.99, rng=rng) for _ in range(400)}
    assert got_kp <= {3, 4, 5}


def test_top_k_frequencies_renormalise_over_survivors() -> None:
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))
    mask = Mask.from_token_ids([1, 2, 3, 4], 5)
    rng = np.random.default_rng(3)
    n = 20_000
    counts = np.bincount([sample(logits, mask, top_k=2, rng=rng) for _ in range(n)], minlength=5)
    assert counts[0] == counts[3] == counts[4] == 0
    assert abs(counts[1] / n - 0.2 / 0.35) < 0.02


def test_repetition_penalty_matches_direct_computation() -> None:
    logits = np.array([2.0, -1.0, 0.5, 3.0, -0.2])
    mask = Mask.from_token_ids([0, 1, 2, 3], 5)
    prev = [3, 1, 4]
    pen = 1.7
    temp = 0.8
    z = logits / temp  # temperature, then the penalty (DESIGN §4 order)
    for t in prev:
        z[t] = z[t] / pen if z[t] > 0 else z[t] * pen
    p = softmax(np.where(mask.to_bool(), z, -np.inf))
    g1, g2 = np.random.default_rng(9), np.random.default_rng(9)
    got = [sample(logits, mask, temperature=temp, repetition_penalty=pen, previous_tokens=prev, rng=g1)
           for _ in range(50)]
    ref = [inverse_cdf(p, g2.random()) for _ in range(50)]
    assert got == ref
    assert sample(logits, mask, temperature=0, repetition_penalty=100.0, previous_tokens=[3]) == 0


# --- diagnostics -----------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(logits_and_mask(), st.sampled_from([0.0, 0.5, 1.0, 2.0]))
def test_z_and_neg_log_z_match_direct_computation(lm: tuple[np.ndarray, Mask], temperature: float) -> None:
    logits, mask = lm
    legal = mask.to_bool()
    p = np.exp(logits - logits.max())
    p /= p.sum()
    z = float(p[legal].sum())  # at temperature 1 whatever temperature the sampler uses
    t, s = sample_with_stats(logits, mask, temperature=temperature, rng=0)
    assert isinstance(s, StepStats) and s.token_id == t and legal[t]
    assert s.n_legal == int(legal.sum())
    assert s.z == pytest.approx(z, rel=1e-9, abs=1e-300)
    if z > 1e-300:
        assert s.neg_log_z == pytest.approx(-math.log(z), rel=1e-9, abs=1e-12)
    assert s.neg_log_z is not None and s.neg_log_z >= 0.0


def test_all_legal_has_zero_kl() -> None:
    _, s = sample_with_stats(np.random.default_rng(0).standard_normal(1000), Mask.all(1000), rng=0)
    assert s.z == pytest.approx(1.0) and s.neg_log_z == pytest.approx(0.0, abs=1e-12)


def test_extreme_logits_give_finite_neg_log_z() -> None:
    logits = np.zeros(10)
    logits[0] = 2000.0  # the model is certain of an illegal token
    _, s = sample_with_stats(logits, Mask.from_token_ids([5], 10), rng=0)
    assert s.neg_log_z == pytest.approx(2000.0)
    assert s.z == 0.0  # underflows, but -log Z stays exact


def test_sequence_stats_sum_in_nats_and_bits() -> None:
    steps = [
        StepStats(token_id=1, n_legal=3, z=0.5, neg_log_z=math.log(2)),
        StepStats(token_id=2, n_legal=1, z=None, neg_log_z=None, forced=True),
        StepStats(token_id=3, n_legal=2, z=0.25, neg_log_z=math.log(4)),
    ]
    s = SequenceStats.from_steps(steps)
    assert (s.n_steps, s.n_scored, s.n_forced) == (3, 2, 1)
    assert s.total_nats == pytest.approx(math.log(8))
    assert s.total_bits == pytest.approx(3.0)
    assert s.bits_per_token == pytest.approx(1.5)
    assert s.nats_per_token == pytest.approx(math.log(8) / 2)
    assert SequenceStats.from_steps([]).bits_per_token == 0.0


# --- torch ---------------------------------------------------------------------------------------


def test_torch_tensors_sample_like_numpy() -> None:
    torch = pytest.importorskip("torch", reason="torch not installed (extra: grammarmask[torch])")
    rng = np.random.default_rng(11)
    logits = rng.standard_normal(300).astype(np.float32)
    legal = rng.random(300) < 0.3
    legal[0] = True
    mask = Mask.from_bool(legal)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        t_logits = torch.from_numpy(logits).to(dtype)
        ref_logits = t_logits.float().numpy()
        g1, g2 = np.random.default_rng(2), np.random.default_rng(2)
        got = [sample(t_logits, mask, top_k=20, rng=g1) for _ in range(30)]
        ref = [sample(ref_logits, mask, top_k=20, rng=g2) for _ in range(30)]
        assert got == ref and all(legal[t] for t in got)
    with pytest.raises(GrammarError, match="1-D"):
        sample(torch.zeros(2, 300), mask)


def test_extremely_cold_temperature_is_the_greedy_limit() -> None:
    logits = np.array([1.0, 3.0, 2.0, 5.0])
    mask = Mask.from_token_ids([0, 1, 2], 4)
    assert sample(logits, mask, temperature=1e-310, rng=0) == 1
    assert sample(logits, mask, temperature=1e-3, rng=0) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 3000), st.integers(0, 2**32 - 1), st.floats(0.01, 0.999), st.sampled_from([0.0, 0.5, 0.99])
)
def test_nucleus_equals_a_full_sort(n: int, seed: int, top_p: float, zero_frac: float) -> None:
    from grammarmask.sampling import _nucleus

    rng = np.random.default_rng(seed)
    p = np.round(rng.exponential(size=n), 1)  # rounding makes ties
    p[rng.random(n) < zero_frac] = 0.0
    p[rng.integers(n)] = 1.0
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]
    ref = np.zeros(n, bool)
    ref[order[before < top_p * p.sum()]] = True
    got = _nucleus(p, top_p)
    assert got.any() and not (got & (p == 0)).any()
    assert np.array_equal(got, ref)
