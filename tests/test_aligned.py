"""grammarmask.fidelity: exact distributions on finite languages and the aligned sampler.

- The enumeration equals a brute force over every token sequence (legality decided from the language
  itself, not from the masks), at two temperatures.
- A hand-made model with a known closed form (the seed's "Luke Wilson" / "Ben Kenobi"): the masked
  sampler and the exact conditional are what the formulas say, far apart.
- SMC: one particle is the masked sampler; with more particles the KL to the exact conditional falls
  (seeded, so not flaky); the exact method returns the exact conditional; outputs of an infinite
  language are in it.
- Budgets and bad options fail with errors that name them.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence

import numpy as np
import pytest

import grammarmask as gm
from grammarmask.errors import GrammarError
from grammarmask.fidelity import (
    PathBudgetExceeded,
    aligned_sample,
    exact_distributions,
    kl_divergence,
    total_variation,
)
from grammarmask.fidelity.smc import run_smc

TOKENS = [b"a", b"b", b"ab", b"ba", b"aa", b"", b"c"]  # id 5 is EOS
EOS = 5
VOCAB = gm.Vocabulary.from_tokens(TOKENS, eos_token_id=EOS)


def _softmax_log(logits: np.ndarray, temperature: float) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64) / temperature
    return z - (z.max() + math.log(float(np.exp(z - z.max()).sum())))


def _brute_force(model: gm.RandomModel, language: set[bytes], temperature: float, max_len: int = 4
                 ) -> tuple[dict[bytes, float], dict[bytes, float]]:
    """Exact and masked distributions by trying every token sequence, legality from ``language``."""
    prefixes = {s[:i] for s in language for i in range(len(s) + 1)}
    words = [i for i in range(len(TOKENS)) if i != EOS]
    exact: dict[bytes, float] = {}
    masked: dict[bytes, float] = {}
    for n in range(1, max_len + 1):
        for seq in itertools.product(words, repeat=n):
            text = b"".join(TOKENS[t] for t in seq)
            if text not in language:
                continue
            lp = lq = 0.0
            for k, t in enumerate((*seq, EOS)):
                row = _softmax_log(model(list(seq[:k])), temperature)
                done = b"".join(TOKENS[u] for u in seq[:k])
                legal = [u for u in words if done + TOKENS[u] in prefixes]
                legal += [EOS] if done in language else []
                lz = math.log(sum(math.exp(row[u]) for u in legal))
                lp += row[t]
                lq += row[t] - lz
            exact[text] = exact.get(text, 0.0) + math.exp(lp)
            masked[text] = masked.get(text, 0.0) + math.exp(lq)
    total = sum(exact.values())
    return {k: v / total for k, v in exact.items()}, masked


@pytest.mark.parametrize("temperature", [1.0, 0.5])
@pytest.mark.parametrize("pattern", ["[ab]{1,3}", "(ab|ba|a)(ab)?"])
def test_enumeration_equals_brute_force(pattern: str, temperature: float) -> None:
    model = gm.RandomModel(len(TOKENS), seed=3, scale=2.0)
    language = {"".join(s).encode() for n in range(1, 5) for s in itertools.product("ab", repeat=n)
                if re.fullmatch(pattern, "".join(s))}
    d = exact_distributions(model, VOCAB, gm.Regex(pattern), temperature=temperature)
    exact, masked = _brute_force(model, language, temperature)
    assert set(d.exact) == set(exact) == language
    for y in language:
        assert d.exact[y] == pytest.approx(exact[y], rel=1e-9)
        assert d.masked[y] == pytest.approx(masked[y], rel=1e-9)
    assert sum(d.masked.values()) == pytest.approx(1.0)
    by_string: dict[bytes, int] = {}
    for p in d.paths:  # every tokenization: "ab" is both [ab] and [a, b]
        by_string[p.text_bytes] = by_string.get(p.text_bytes, 0) + 1
    assert by_string[b"ab"] == 2


class StarWars:
    """The seed's example on a 7-token vocabulary: the model starts with "Luke" (it thinks of
    Skywalker), which the labels only allow as "Luke Wilson", a name it finds unlikely."""

    vocab = gm.Vocabulary.from_tokens([b"Luke", b" Wilson", b" Skywalker", b"Ben", b" Kenobi", b"", b"L"],
                                      eos_token_id=5)
    start = {0: 3.0, 3: 1.0, 6: -2.0}  # logits of the first token; all others 0

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        logits = np.zeros(7)
        last = ids[-1] if ids else None
        if last is None:
            for t, v in self.start.items():
                logits[t] = v
        elif last in (0, 6):
            logits[2] = 6.0  # " Skywalker"
        elif last == 3:
            logits[4] = 5.0
        else:
            logits[5] = 5.0
        return logits


def _p(logits: dict[int, float], t: int, n: int = 7) -> float:
    z = [logits.get(i, 0.0) for i in range(n)]
    return math.exp(z[t]) / sum(math.exp(v) for v in z)


def test_closed_form_of_the_seed_example() -> None:
    m = StarWars()
    d = exact_distributions(m, m.vocab, gm.Choice(["Luke Wilson", "Ben Kenobi"]))
    after_luke = _p({2: 6.0}, 1)  # " Wilson" after "Luke"
    after_ben = _p({4: 5.0}, 4)
    eos = _p({5: 5.0}, 5)
    p_luke = _p(m.start, 0) * after_luke * eos
    p_ben = _p(m.start, 3) * after_ben * eos
    # "L" is legal (a prefix of "Luke Wilson") but no token continues it: a dead end for masking
    assert len(d.paths) == 2
    q_dead = _p(m.start, 6) / (_p(m.start, 0) + _p(m.start, 3) + _p(m.start, 6))
    assert d.masked_dead_end == pytest.approx(q_dead, rel=1e-9)
    assert d.exact[b"Luke Wilson"] == pytest.approx(p_luke / (p_luke + p_ben), rel=1e-9)
    # then " Wilson" and EOS are forced
    q_luke = _p(m.start, 0) / (_p(m.start, 0) + _p(m.start, 3) + _p(m.start, 6))
    assert d.masked[b"Luke Wilson"] == pytest.approx(q_luke, rel=1e-9)
    assert d.log_mass == pytest.approx(math.log(p_luke + p_ben), rel=1e-9)
    assert kl_divergence(d.masked, d.exact) > 2.0  # masking badly over-samples "Luke Wilson"
    assert total_variation(d.masked, d.exact) > 0.8


def _smc_estimate(model: StarWars, grammar: gm.Grammar, n: int, runs: int, seed: int) -> dict[bytes, float]:
    """The SMC sampler's output distribution, estimated by averaging each run's weights per string."""
    rng = np.random.default_rng(seed)
    acc: dict[bytes, float] = {}
    for _ in range(runs):
        result = aligned_sample(model, model.vocab, grammar, n_particles=n, rng=rng)
        for y, w in result.distribution().items():
            acc[y] = acc.get(y, 0.0) + w / runs
    return acc


def test_smc_converges_with_particles() -> None:
    m = StarWars()
    m.start = {0: 1.0, 3: 0.0, 6: -50.0}  # a milder case, without the dead end: the masked KL is about 1 nat
    g = gm.Choice(["Luke Wilson", "Ben Kenobi"])
    d = exact_distributions(m, m.vocab, g)
    masked_kl = kl_divergence(d.masked, d.exact)
    kls = {n: kl_divergence(_smc_estimate(m, g, n, 150, seed=n), d.exact) for n in (1, 4, 32)}
    assert masked_kl > 0.5
    assert kls[1] == pytest.approx(masked_kl, rel=0.25)  # one particle is the masked sampler
    assert kls[1] > kls[4] > kls[32]
    assert kls[32] < masked_kl / 10


class Lister:
    """Asked for at most two fruits, a model that wants to go on listing: after one item a comma is
    e^6 times likelier than EOS; after two, EOS is e^-10 of the (forbidden) next comma. One item holds
    99% of the conditional, while the masked sampler writes two items 99.8% of the time."""

    vocab = gm.Vocabulary.from_tokens([b"apple", b", ", b"pear", b"", b"ap", b"ple", b"pe", b"ar"],
                                      eos_token_id=3)

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        logits = np.zeros(8)
        text = self.vocab.decode(ids)
        if text.endswith((b"apple", b"pear")):
            logits[1] = 9.0 if b"," in text else 6.0
            logits[3] = -1.0 if b"," in text else 0.0
        elif not text:
            logits[[0, 4, 2, 6]] = [2.0, 1.0, 1.5, 0.5]
        return logits


def test_smc_harvests_eos_where_the_masked_proposal_rarely_ends() -> None:
    m = Lister()
    g = gm.Regex("(apple|pear)(, (apple|pear))?").compile(m.vocab)
    d = exact_distributions(m, m.vocab, g)
    one_item = d.exact[b"apple"] + d.exact[b"pear"]
    masked_one = d.masked[b"apple"] + d.masked[b"pear"]
    assert one_item > 0.99 and masked_one < 0.003
    masked_kl = kl_divergence(d.masked, d.exact)
    assert masked_kl > 5
    rng = np.random.default_rng(0)
    # the masked sampler is SMC with one particle that samples EOS like any other token
    masked = [run_smc(m, g, [], n_particles=1, ess_threshold=0.5, max_tokens=8, temperature=1.0,
                      batch_size=1, rng=rng, harvest_eos=False).tokens for _ in range(300)]
    assert all(len(paths) == 1 for paths in masked)
    assert sum(b", " not in m.vocab.decode(paths[0]) for paths in masked) <= 3  # about 1 in 400 ends early
    # harvesting EOS: 16 particles already land near the conditional, and log Z near log P(L)
    runs = [aligned_sample(m, m.vocab, g, n_particles=16, rng=rng) for _ in range(40)]
    est: dict[bytes, float] = {}
    for r in runs:
        for y, w in r.distribution().items():
            est[y] = est.get(y, 0.0) + w / len(runs)
    assert kl_divergence(est, d.exact) < masked_kl / 1000
    log_z = [r.log_z for r in runs]
    assert abs(float(np.mean(log_z)) - d.log_mass) < 0.1 and float(np.std(log_z)) < 0.3


def test_exact_method_and_replay() -> None:
    m = StarWars()
    g = gm.Choice(["Luke Wilson", "Ben Kenobi", "Luke"])
    d = exact_distributions(m, m.vocab, g)
    r = aligned_sample(m, m.vocab, g, method="exact", seed=0)
    assert r.method == "exact" and r.text_bytes in d.exact
    got = r.distribution()
    assert got.keys() == d.exact.keys()
    assert all(got[y] == pytest.approx(d.exact[y], rel=1e-9) for y in got)
    assert r.log_z == pytest.approx(d.log_mass)
    again = exact_distributions(d.replay_model(), m.vocab, g)  # the recorded numbers, no model calls
    assert all(again.exact[y] == pytest.approx(d.exact[y], rel=1e-9) for y in d.exact)
    assert all(again.masked[y] == pytest.approx(d.masked[y], rel=1e-9) for y in d.masked)
    with pytest.raises(GrammarError, match="was not scored"):
        d.replay_model()([3, 1])


class Counting:
    """RandomModel with a batch method that records the batch shapes."""

    def __init__(self) -> None:
        self.inner = gm.RandomModel(len(TOKENS), seed=1)
        self.batches: list[int] = []

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        raise AssertionError("batch_logits should be used")

    def batch_logits(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        assert len({len(s) for s in seqs}) == 1  # a level of the tree: equal lengths
        assert len({tuple(s) for s in seqs}) == len(seqs)  # particles on one path share one row
        self.batches.append(len(seqs))
        return np.stack([self.inner(s) for s in seqs])


def test_batches_by_level_and_smc_output_in_infinite_language() -> None:
    m = Counting()
    d = exact_distributions(m, VOCAB, gm.Regex("[ab]{1,3}"), prompt_ids=[6], batch_size=4)
    assert sum(m.batches) == d.n_nodes and max(m.batches) <= 4
    m.batches.clear()
    r = aligned_sample(m, VOCAB, gm.Regex("(ab)+c"), [6], n_particles=8, max_tokens=40, seed=2)
    assert re.fullmatch(rb"(ab)+c", r.text_bytes)
    assert all(p.log_weight == -math.inf or re.fullmatch(rb"(ab)+c", p.text_bytes) for p in r.particles)
    assert sum(m.batches) == r.model_rows
    assert math.isfinite(r.log_z) and r.log_z < 0


def test_particles_on_one_path_share_a_row() -> None:
    m = Counting()
    r = aligned_sample(m, VOCAB, gm.Regex("ccc"), [6], n_particles=32, seed=0)
    assert r.text_bytes == b"ccc" and m.batches == [1, 1, 1, 1] and r.model_rows == 4  # one path: c c c EOS


def test_budgets_and_bad_options() -> None:
    model = gm.RandomModel(len(TOKENS), seed=0)
    with pytest.raises(PathBudgetExceeded, match="max_tokens.*aligned_sample"):
        exact_distributions(model, VOCAB, gm.Regex("a+"), max_tokens=8)
    with pytest.raises(PathBudgetExceeded, match="more than 5 token paths"):
        exact_distributions(model, VOCAB, gm.Regex("[ab]{1,3}"), max_paths=5)
    with pytest.raises(gm.BudgetExceeded, match="finished within 3 tokens"):
        aligned_sample(model, VOCAB, gm.Regex("c{6}"), n_particles=4, max_tokens=3, seed=0)
    bad = [({"temperature": 0}, "temperature"), ({"n_particles": 0}, "n_particles"),
           ({"method": "beam"}, "method"), ({"ess_threshold": 2}, "ess_threshold"),
           ({"rng": 1, "seed": 1}, "rng or seed")]
    for kwargs, what in bad:
        with pytest.raises(GrammarError, match=what):
            aligned_sample(model, VOCAB, gm.Regex("a"), **kwargs)  # type: ignore[arg-type]
    other = gm.Vocabulary.from_tokens([b"a", b""], eos_token_id=1)
    with pytest.raises(GrammarError):
        aligned_sample(model, VOCAB, gm.Regex("a").compile(other))
    with pytest.raises(GrammarError, match="at least one|probabilities"):
        kl_divergence({}, {b"a": 1.0})


def test_public_name() -> None:
    assert gm.aligned_sample is aligned_sample
