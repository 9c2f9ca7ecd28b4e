"""recallkit.stats's functions of several samples (one draw shared by all) against each sample
computed alone and against a brute force written here, and McNemar's exact test against
scipy.stats.binomtest and hand computation."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from scipy import stats as sps

from recallkit import stats


def brute_bootstrap(values, n_resamples, seed, confidence=0.95):
    """The percentile interval of the mean, every resample drawn at once and averaged by numpy
    (scipy's draws: ``rng.integers(0, n, (n_resamples, n))``)."""
    values = np.asarray(values, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, values.size, (n_resamples, values.size))
    theta = np.mean(values[idx], axis=-1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(theta, [alpha, 1 - alpha])
    return float(low), float(high)


def samples_of(rng, n):
    """Samples of every kind the statistics meet: hits, average precisions, ranks, signed
    integers (differences of hits), reals."""
    return [
        (rng.random(n) < 0.7) * 1.0,
        rng.choice([0.0, 1 / 3, 0.5, 2 / 3, 1.0], size=n),
        rng.integers(1, 500, n).astype(np.float64),
        rng.integers(-1, 2, n).astype(np.float64),
        rng.standard_normal(n),
        np.full(n, 3.0),
    ]


@pytest.mark.parametrize("n", [1, 2, 9, 130, 1000])
def test_bootstrap_intervals_are_each_samples_own_bit_for_bit(n):
    rng = np.random.default_rng(n)
    samples = samples_of(rng, n) + samples_of(rng, n + 3)  # two lengths: a draw each
    got = stats.bootstrap_intervals(samples, n_resamples=501, seed=9)
    for values, interval in zip(samples, got, strict=True):
        assert interval == stats.bootstrap_interval(values, n_resamples=501, seed=9)
        assert interval == brute_bootstrap(values, 501, 9)


def test_bootstrap_intervals_take_a_statistic_and_classes_per_sample():
    rng = np.random.default_rng(1)
    a, b = rng.random(80), (rng.random(80) < 0.5) * 1.0
    groups = rng.integers(0, 9, 80)
    got = stats.bootstrap_intervals(
        [a, b, a], [np.median, "mean", "mean"], groups=[None, groups, groups], n_resamples=300
    )
    assert got == [
        stats.bootstrap_interval(a, np.median, n_resamples=300),
        stats.bootstrap_interval(b, groups=groups, n_resamples=300),
        stats.bootstrap_interval(a, groups=groups, n_resamples=300),
    ]


def test_paired_distributions_are_each_pairs_own_bit_for_bit():
    rng = np.random.default_rng(2)
    pairs = []
    for n in (7, 400):
        s = samples_of(rng, n)
        pairs += [(s[0], s[3]), (s[1], s[4]), (s[2], s[5]), (s[0], (rng.random(n) < 0.5) * 1.0)]
    got = stats.paired_bootstrap_distributions(pairs, n_resamples=257, seed=3, batch=40)
    for (a, b), (difference, theta) in zip(pairs, got, strict=True):
        alone_d, alone = stats.paired_bootstrap_distribution(a, b, n_resamples=257, seed=3)
        assert difference == alone_d == np.mean(a) - np.mean(b)
        assert theta.tobytes() == alone.tobytes()
        d = a - b
        idx = np.random.default_rng(3).integers(0, a.size, (257, a.size))
        assert theta.tobytes() == np.mean(d[idx], axis=-1).tobytes()


def test_randomization_tests_are_each_pairs_own():
    rng = np.random.default_rng(4)
    pairs = []
    for n in (5, 300, 301):
        s = samples_of(rng, n)
        pairs += [(s[0], (rng.random(n) < 0.6) * 1.0), (s[1], s[4]), (s[2], s[2][::-1].copy())]
    statistics = ["mean", "mean", np.median] * 3
    got = stats.randomization_tests(pairs, statistics, n_resamples=400, seed=6)
    for (a, b), f, p in zip(pairs, statistics, got, strict=True):
        assert p == stats.randomization_test(a, b, f, n_resamples=400, seed=6)


def test_list_arguments_are_checked_naming_the_sample():
    with pytest.raises(ValueError, match=r"'samples\[1\]' parameter of bootstrap_intervals"):
        stats.bootstrap_intervals([[1.0, 2.0], [np.nan]])
    with pytest.raises(ValueError, match="'statistic' parameter of bootstrap_intervals"):
        stats.bootstrap_intervals([[1.0], [2.0]], ["mean"])
    with pytest.raises(ValueError, match="'samples' parameter of bootstrap_intervals"):
        stats.bootstrap_intervals([])
    with pytest.raises(ValueError, match=r"'pairs\[0\]\[1\]' parameter of randomization_tests"):
        stats.randomization_tests([([1.0, 2.0], [1.0])])
    with pytest.raises(ValueError, match=r"'pairs\[0\]' parameter of paired_bootstrap_distrib"):
        stats.paired_bootstrap_distributions([[1.0, 2.0, 3.0]])


# ---------------------------------------------------------------------------------------------
# McNemar's exact test.


def test_mcnemar_by_hand():
    # 10 queries only a gets right, 2 only b, 5 both, 3 neither: X ~ Binomial(12, 1/2),
    # p = P(X <= 2) + P(X >= 10) = 2 (1 + 12 + 66) / 4096.
    a = [1.0] * 10 + [0.0] * 2 + [1.0] * 5 + [0.0] * 3
    b = [0.0] * 10 + [1.0] * 2 + [1.0] * 5 + [0.0] * 3
    assert stats.mcnemar_test(a, b) == 158 / 4096
    assert stats.mcnemar_test(b, a) == 158 / 4096
    # One discordant query: p = 2 * 1/2 = 1; as many each way: 1; none: 1.
    assert stats.mcnemar_test([1.0, 0.0], [0.0, 0.0]) == 1.0
    assert stats.mcnemar_test([1.0, 0.0, 1.0], [0.0, 1.0, 1.0]) == 1.0
    assert stats.mcnemar_test([1.0, 0.0], [1.0, 0.0]) == 1.0
    # Seven discordant, all one way: 2 / 2**7.
    assert stats.mcnemar_test([1.0] * 7, [0.0] * 7) == 2 / 128


@pytest.mark.parametrize(
    ("only_a", "only_b"),
    [(0, 1), (0, 5), (3, 9), (17, 4), (40, 41), (120, 80), (1500, 1620), (4900, 5100)],
)
def test_mcnemar_is_scipys_exact_binomial_test(only_a, only_b):
    a = np.r_[np.ones(only_a), np.zeros(only_b), np.ones(30), np.zeros(11)]
    b = np.r_[np.zeros(only_a), np.ones(only_b), np.ones(30), np.zeros(11)]
    want = sps.binomtest(only_a, only_a + only_b, 0.5).pvalue
    assert stats.mcnemar_test(a, b) == pytest.approx(want, rel=1e-10, abs=0)
    # and the exact tail sum, rounded once
    n, k = only_a + only_b, min(only_a, only_b)
    if 2 * k != n:
        exact = min(Fraction(1), Fraction(2 * sum(comb(n, i) for i in range(k + 1)), 2**n))
        assert stats.mcnemar_test(a, b) == float(exact)


def test_mcnemar_takes_zeros_and_ones_only():
    with pytest.raises(ValueError, match=r"'b' parameter of mcnemar_test must be values 0 or 1"):
        stats.mcnemar_test([1.0, 0.0], [0.5, 1.0])
    with pytest.raises(ValueError, match="'b' parameter of mcnemar_test must be of length 2"):
        stats.mcnemar_test([1.0, 0.0], [1.0])


def test_the_shared_checks_and_the_comparisons_load_without_torch():
    # recallkit._inputs.values is the torch-free half of the validation toolbox: stats and
    # comparison use it, and checks re-exports it.
    script = (
        "import sys, recallkit._inputs.values, recallkit.comparison; print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False"]
    from recallkit._inputs import checks, values

    assert all(getattr(checks, name) is getattr(values, name) for name in values.__all__)
