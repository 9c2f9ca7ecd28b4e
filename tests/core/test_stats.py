"""recallkit.stats against hand-computed cases and scipy's own bootstrap and permutation test."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
from scipy import stats as sps

from recallkit import stats
from recallkit.stats import bootstrap_interval, holm, paired_bootstrap, randomization_test


def median_floor(x, axis=-1):
    """A median-based statistic (rounded down to 1/64), vectorized as scipy calls it."""
    return np.floor(np.median(x, axis=axis) * 64) / 64


def difference(f):
    """scipy's paired statistic for a one-sample ``f``: ``f(x) - f(y)``."""
    return lambda x, y, axis=-1: f(x, axis=axis) - f(y, axis=axis)


def ap_like(rng, n):
    """Two systems' per-query average precisions: few distinct values (1/3 among them, not
    exact in binary), equal on most queries: many resampled differences tie the observed one."""
    a = rng.choice([0.0, 1 / 3, 0.5, 2 / 3, 1.0], size=n)
    b = np.where(rng.random(n) < 0.8, a, rng.choice([0.0, 1 / 3, 0.5, 1.0], size=n))
    return a, b


def data(kind, rng, n):
    if kind == "ap":
        return ap_like(rng, n)
    if kind == "hits":
        return (rng.random(n) < 0.7) * 1.0, (rng.random(n) < 0.6) * 1.0
    a = rng.standard_normal(n)
    return a, a + rng.normal(0.1, 0.5, size=n)


def scipy_interval(samples, statistic, n_resamples, seed, batch, confidence=0.95, paired=False):
    res = sps.bootstrap(
        samples,
        statistic,
        method="percentile",
        vectorized=True,
        paired=paired,
        n_resamples=n_resamples,
        batch=batch,
        confidence_level=confidence,
        rng=np.random.default_rng(seed),
    )
    return res.confidence_interval.low, res.confidence_interval.high


def scipy_pvalue(a, b, f, n_resamples, seed, batch):
    res = sps.permutation_test(
        (a, b),
        difference(f),
        permutation_type="samples",
        alternative="two-sided",
        vectorized=True,
        n_resamples=n_resamples,
        batch=batch,
        rng=np.random.default_rng(seed),
    )
    return res.pvalue


# ---------------------------------------------------------------------------------------------
# holm


def test_holm_by_hand():
    # m = 4. Sorted: 0.005 (index 3), 0.01 (index 0), 0.03 (index 2), 0.04 (index 1).
    # Scaled by 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04; running maximum: 0.02, 0.03, 0.06, 0.06.
    # Back in the input order: 0.03, 0.06, 0.06, 0.02.
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted.dtype == np.float64
    np.testing.assert_allclose(adjusted, [0.03, 0.06, 0.06, 0.02], rtol=1e-15, atol=0)


def test_holm_caps_at_one_and_ties():
    # Sorted 0.6, 0.9: 2 * 0.6 = 1.2 -> 1; then max(1, 0.9) = 1.
    assert holm([0.9, 0.6]).tolist() == [1.0, 1.0]
    # Two equal p-values: 3 * 0.25 = 0.75 and 2 * 0.25 = 0.5 -> running maximum 0.75 for both;
    # then 1 * 0.875 = 0.875.
    assert holm([0.25, 0.875, 0.25]).tolist() == [0.75, 0.875, 0.75]
    assert holm([0.125]).tolist() == [0.125]
    assert holm([]).shape == (0,)


def test_holm_against_its_definition():
    rng = np.random.default_rng(5)
    for m in (2, 3, 7, 20):
        p = rng.random(m) ** 3
        order = np.argsort(p)
        expected = np.empty(m)
        for i, index in enumerate(order):  # max over j <= i of min(1, (m - j) p_(j)), 0-based
            expected[index] = max(min(1.0, (m - j) * p[order[j]]) for j in range(i + 1))
        np.testing.assert_array_equal(holm(p), expected)
        assert np.all(holm(p) >= p)


# ---------------------------------------------------------------------------------------------
# randomization_test: hand-counted exact tests


def test_exact_test_counted_by_hand():
    # Differences a - b = 1, -1, 2: observed mean 2/3. The 8 swap patterns give the signed
    # sums +1-1+2 = 2, +1-1-2 = -2, +1+1+2 = 4, +1+1-2 = 0, -1-1+2 = 0, -1-1-2 = -4,
    # -1+1+2 = 2, -1+1-2 = -2 (each over 3). At least 2/3: 2, 4, 2 -> 3 of 8; at most 2/3:
    # all but 4 -> 7 of 8. p = 2 * min(3/8, 7/8) = 0.75 (an exact test: no +1).
    a, b = [1.0, 0.0, 2.0], [0.0, 1.0, 0.0]
    assert randomization_test(a, b, n_resamples=8) == 0.75
    # Differences 1, 2, 4: the 8 sums +-1+-2+-4 are distinct, 7 (the observed) the largest:
    # p = 2 * 1/8.
    assert randomization_test([1.0, 2.0, 4.0], [0.0, 0.0, 0.0], n_resamples=8) == 0.25
    # Observed 0 (every difference 0): every pattern ties it, p = 2 * 1 capped at 1.
    assert randomization_test([0.5, 0.25, 1.0], [0.5, 0.25, 1.0], n_resamples=8) == 1.0


def test_exact_test_sees_every_pattern_once_whatever_the_seed():
    a, b = np.array([1.0, 0.0, 2.0]), np.array([0.0, 1.0, 0.0])
    seen = []

    def spy(x, axis=-1):
        if x.ndim == 2:
            seen.extend(map(tuple, x))
        return np.mean(x, axis=axis)

    assert randomization_test(a, b, spy, n_resamples=8, batch=3) == 0.75
    # Each batch gives its side a rows, then its side b rows: batches of 3, 3 and 2.
    rows_a = seen[0:3] + seen[6:9] + seen[12:14]
    patterns = list(
        itertools.product(*zip(a, b, strict=True))
    )  # a_i kept or swapped, first pair slowest
    assert rows_a == patterns
    for seed in (0, 1, 2):
        assert randomization_test(a, b, n_resamples=8, seed=seed) == 0.75
        assert randomization_test(a, b, n_resamples=10**9, seed=seed) == 0.75


def test_fewer_resamples_than_patterns_is_randomized():
    # 7 < 8 patterns: random swaps, and the observed difference counts as one more resample,
    # so the p-value is a multiple of 1/8 other than 2 * 3/8 (only patterns drawn).
    a, b = [1.0, 0.0, 2.0], [0.0, 1.0, 0.0]
    pvalues = {randomization_test(a, b, n_resamples=7, seed=seed) for seed in range(20)}
    assert all((p * 8) % 1 == 0 for p in pvalues)
    assert len(pvalues) > 1
    for seed in range(5):
        assert randomization_test(a, b, n_resamples=7, seed=seed) == scipy_pvalue(
            np.array(a), np.array(b), np.mean, 7, seed, None
        )


# ---------------------------------------------------------------------------------------------
# randomization_test: scipy, draw for draw


@pytest.mark.parametrize("kind", ["ap", "hits", "normal"])
@pytest.mark.parametrize(
    ("n", "n_resamples", "batch"),
    [(9, 600, None), (9, 600, 100), (137, 999, None), (137, 1000, 64), (1001, 500, 499)],
)
def test_randomization_test_equals_scipy_for_the_mean(kind, n, n_resamples, batch):
    # (9, 600): 2**9 = 512 <= 600, the exact test. batch 499 of 500: a last batch of one
    # resample (scipy sums it pairwise).
    for seed in range(3):
        a, b = data(kind, np.random.default_rng(seed + 10), n)
        ours = randomization_test(a, b, n_resamples=n_resamples, seed=seed, batch=batch)
        # The counts are integers: the p-values are equal, not only close.
        assert ours == scipy_pvalue(a, b, np.mean, n_resamples, seed, batch)


@pytest.mark.parametrize(("n", "n_resamples", "batch"), [(8, 300, None), (61, 300, 7)])
def test_randomization_test_equals_scipy_for_a_median(n, n_resamples, batch):
    for seed in range(3):
        a, b = data("ap", np.random.default_rng(seed), n)
        ours = randomization_test(
            a, b, median_floor, n_resamples=n_resamples, seed=seed, batch=batch
        )
        assert ours == scipy_pvalue(a, b, median_floor, n_resamples, seed, batch)


def test_near_ties_are_computed_as_scipy_computes_them(monkeypatch):
    # With average precisions, many resampled means equal the observed one in exact arithmetic
    # but not in floating point, by more than scipy's tolerance: the fast mean alone (no margin)
    # would count them differently from scipy on some seeds, the margin makes them agree.
    cases = []
    for seed in range(12):
        a, b = ap_like(np.random.default_rng(seed), 1000)
        cases.append((a, b, seed, scipy_pvalue(a, b, np.mean, 400, seed, None)))
    assert all(randomization_test(a, b, n_resamples=400, seed=s) == p for a, b, s, p in cases)
    # A callable mean takes the general path: each side laid out as scipy lays it out.
    assert all(
        randomization_test(a, b, lambda x, axis=-1: np.mean(x, axis=axis), n_resamples=400, seed=s)
        == p
        for a, b, s, p in cases
    )
    monkeypatch.setattr(stats, "MARGIN", 0)
    assert any(randomization_test(a, b, n_resamples=400, seed=s) != p for a, b, s, p in cases)


@pytest.mark.parametrize("statistic", ["mean", lambda x, axis=-1: np.mean(x, axis=axis)])
def test_batches_of_one_resample_sum_pairwise_as_scipy_does(statistic):
    # scipy reduces a batch of one resample as a contiguous row (pairwise summation), a wider
    # batch in order: with near ties, summing either way in every batch would differ from it.
    for seed in range(10):
        a, b = ap_like(np.random.default_rng(seed), 300)
        for batch in (1, 2):
            ours = randomization_test(a, b, statistic, n_resamples=40, seed=seed, batch=batch)
            assert ours == scipy_pvalue(a, b, np.mean, 40, seed, batch)


def test_the_default_batches_leave_no_resample_alone(monkeypatch):
    # scipy, given no batch, computes every resample in one batch (summed in order); the
    # default batches here (of 2 resamples, with 2 * n values a batch) end with 3 rather than
    # a lone resample, which would be summed pairwise.
    n = 300
    monkeypatch.setattr(stats, "BATCH_ELEMENTS", 2 * n)
    for seed in range(40):
        a, b = ap_like(np.random.default_rng(seed), n)
        ours = randomization_test(a, b, n_resamples=5, seed=seed)
        assert ours == scipy_pvalue(a, b, np.mean, 5, seed, None)


def test_randomization_test_does_not_depend_on_the_batch():
    a, b = ap_like(np.random.default_rng(3), 300)
    pvalues = {randomization_test(a, b, n_resamples=500, seed=4, batch=k) for k in (2, 7, 500)}
    assert len(pvalues) == 1
    assert pvalues != {randomization_test(a, b, n_resamples=500, seed=5)}


# ---------------------------------------------------------------------------------------------
# bootstrap_interval and paired_bootstrap: scipy, draw for draw


@pytest.mark.parametrize("statistic", ["mean", median_floor])
@pytest.mark.parametrize(
    ("n", "n_resamples", "batch", "confidence"),
    [(2, 999, None, 0.95), (37, 1000, 64, 0.9), (1001, 777, 100, 0.95), (250, 1001, 1, 0.8)],
)
def test_bootstrap_interval_equals_scipy(statistic, n, n_resamples, batch, confidence):
    f = np.mean if statistic == "mean" else statistic
    for seed in range(3):
        values = data("ap", np.random.default_rng(seed), n)[0] + np.arange(n) / n
        ours = bootstrap_interval(
            values,
            statistic,
            n_resamples=n_resamples,
            confidence=confidence,
            seed=seed,
            batch=batch,
        )
        theirs = scipy_interval((values,), f, n_resamples, seed, batch, confidence)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
        assert ours[0] < ours[1]


@pytest.mark.parametrize("statistic", ["mean", median_floor])
@pytest.mark.parametrize(("n", "n_resamples", "batch"), [(5, 999, None), (333, 1000, 150)])
def test_paired_bootstrap_equals_scipy(statistic, n, n_resamples, batch):
    f = np.mean if statistic == "mean" else statistic
    for seed in range(3):
        a, b = data("normal", np.random.default_rng(seed), n)
        diff, low, high = paired_bootstrap(
            a, b, statistic, n_resamples=n_resamples, seed=seed, batch=batch
        )
        assert diff == f(a) - f(b)
        theirs = scipy_interval((a, b), difference(f), n_resamples, seed, batch, paired=True)
        np.testing.assert_allclose((low, high), theirs, rtol=0, atol=1e-12)
        assert low < high


def test_bootstrap_does_not_depend_on_the_batch():
    values = np.random.default_rng(1).random(300)
    intervals = {bootstrap_interval(values, n_resamples=500, batch=k) for k in (None, 1, 7, 500)}
    assert len(intervals) == 1
    assert intervals != {bootstrap_interval(values, n_resamples=500, seed=1)}


def class_statistics(values, groups, f):
    """Each class's statistic, classes in sorted order, written out plainly."""
    return np.array([f(values[groups == g]) for g in np.unique(groups)])


@pytest.mark.parametrize("statistic", ["mean", median_floor])
def test_grouped_bootstrap_equals_scipy_on_the_class_statistics(statistic):
    f = np.mean if statistic == "mean" else statistic
    for seed in range(3):
        rng = np.random.default_rng(seed)
        n = 500
        groups = rng.choice([7, -2, 100, 3, 55, 8, 9, 10, 11, 12, 13], size=n)
        groups[:11] = [7, -2, 100, 3, 55, 8, 9, 10, 11, 12, 13]  # every class present
        a, b = ap_like(rng, n)
        a = a + groups % 5  # classes of different levels
        sa, sb = class_statistics(a, groups, f), class_statistics(b, groups, f)
        ours = bootstrap_interval(a, statistic, groups=groups, n_resamples=999, seed=seed)
        theirs = scipy_interval((sa,), np.mean, 999, seed, None)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
        # Resampling classes is not resampling queries.
        assert abs(ours[0] - bootstrap_interval(a, statistic, n_resamples=999, seed=seed)[0]) > 0.01
        diff, low, high = paired_bootstrap(
            a, b, statistic, groups=groups, n_resamples=1001, seed=seed, batch=100
        )
        assert diff == pytest.approx(sa.mean() - sb.mean(), abs=1e-12)
        theirs = scipy_interval((sa, sb), difference(np.mean), 1001, seed, 100, paired=True)
        np.testing.assert_allclose((low, high), theirs, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Degenerate input


def test_equal_values_give_a_point_interval():
    low, high = bootstrap_interval([0.1] * 7, n_resamples=200)
    assert low == high == np.mean([0.1] * 7)
    assert bootstrap_interval([0.3], n_resamples=200) == (0.3, 0.3)
    assert bootstrap_interval([0.3], median_floor, n_resamples=200) == (0.296875, 0.296875)
    assert bootstrap_interval([0.25, 0.75], groups=[4, 4], n_resamples=200) == (0.5, 0.5)
    assert paired_bootstrap([0.5, 1.0], [0.5, 1.0], n_resamples=200) == (0.0, 0.0, 0.0)
    assert paired_bootstrap([0.75], [0.25], n_resamples=200) == (0.5, 0.5, 0.5)
    assert randomization_test([0.75], [0.25], n_resamples=200) == 1.0


# ---------------------------------------------------------------------------------------------
# Memory: one batch at a time


def test_memory_holds_one_batch():
    n, n_resamples = 20_000, 1000  # every resample at once: 160 MB of indices
    values = np.random.default_rng(0).random(n)
    tracemalloc.start()
    try:
        bootstrap_interval(values, n_resamples=n_resamples)
        paired_bootstrap(values, values[::-1], n_resamples=n_resamples)
        randomization_test(values, values[::-1], n_resamples=n_resamples)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def test_the_module_loads_numpy_alone():
    script = "import sys, recallkit.stats; print('torch' in sys.modules, 'scipy' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "False"]


# ---------------------------------------------------------------------------------------------
# Errors


def message(func, name, requirement, got):
    return "^" + re.escape(f"The '{name}' parameter of {func} must be {requirement}. Got {got}.")


GOOD = [0.25, 0.5, 1.0]
CALLS = {
    "bootstrap_interval": lambda **kw: bootstrap_interval(kw.pop("values", GOOD), **kw),
    "paired_bootstrap": lambda **kw: paired_bootstrap(kw.pop("a", GOOD), kw.pop("b", GOOD), **kw),
    "randomization_test": lambda **kw: randomization_test(
        kw.pop("a", GOOD), kw.pop("b", GOOD), **kw
    ),
}


@pytest.mark.parametrize(
    ("value", "got"),
    [(1.5, "1.5"), (0, "0"), (1.0, "1.0"), (float("nan"), "nan"), ("0.9", "'0.9'"), (True, "True")],
)
@pytest.mark.parametrize("func", ["bootstrap_interval", "paired_bootstrap"])
def test_bad_confidence(func, value, got):
    with pytest.raises(ValueError, match=message(func, "confidence", "in (0, 1)", got)):
        CALLS[func](confidence=value)


@pytest.mark.parametrize(("value", "got"), [(0, "0"), (-5, "-5"), (2.5, "2.5"), (True, "True")])
@pytest.mark.parametrize("func", list(CALLS))
def test_bad_n_resamples(func, value, got):
    with pytest.raises(ValueError, match=message(func, "n_resamples", "a positive integer", got)):
        CALLS[func](n_resamples=value)


@pytest.mark.parametrize("func", list(CALLS))
def test_bad_seed_batch_and_statistic(func):
    with pytest.raises(ValueError, match=message(func, "seed", "a non-negative integer", "-1")):
        CALLS[func](seed=-1)
    with pytest.raises(ValueError, match=message(func, "seed", "a non-negative integer", "0.5")):
        CALLS[func](seed=0.5)
    with pytest.raises(ValueError, match=message(func, "batch", "a positive integer", "0")):
        CALLS[func](batch=0)
    requirement = "'mean' or a callable f(x, axis=-1)"
    with pytest.raises(ValueError, match=message(func, "statistic", requirement, "'median'")):
        CALLS[func](statistic="median")
    requirement = "a function that reduces the last axis (one value per row)"
    got = "output of shape (3,) for input of shape (3,)"
    with pytest.raises(ValueError, match=message(func, "statistic", requirement, got)):
        CALLS[func](statistic=lambda x, axis=-1: x)


@pytest.mark.parametrize("func", ["paired_bootstrap", "randomization_test"])
def test_mismatched_lengths(func):
    requirement = "of length 3 (one per value of 'a')"
    with pytest.raises(ValueError, match=message(func, "b", requirement, "2")):
        CALLS[func](b=[0.5, 1.0])


@pytest.mark.parametrize("func", ["bootstrap_interval", "paired_bootstrap"])
def test_bad_groups(func):
    of = "'values'" if func == "bootstrap_interval" else "'a' and 'b'"
    with pytest.raises(
        ValueError, match=message(func, "groups", f"of length 3 (one per value of {of})", "4")
    ):
        CALLS[func](groups=[0, 0, 1, 1])
    requirement = "integers (one class code per value)"
    with pytest.raises(ValueError, match=message(func, "groups", requirement, "dtype float64")):
        CALLS[func](groups=[0.0, 1.0, 1.0])
    requirement = "a 1-D array (one class code per value)"
    with pytest.raises(ValueError, match=message(func, "groups", requirement, "shape (1, 3)")):
        CALLS[func](groups=[[0, 1, 1]])


@pytest.mark.parametrize(
    ("func", "name"),
    [
        ("bootstrap_interval", "values"),
        ("paired_bootstrap", "a"),
        ("paired_bootstrap", "b"),
        ("randomization_test", "a"),
        ("randomization_test", "b"),
    ],
)
def test_bad_values(func, name):
    call = CALLS[func]
    with pytest.raises(ValueError, match=message(func, name, "non-empty", "0 values")):
        call(**{name: []})
    nan = message(func, name, "finite (no NaN or infinity)", "nan at index 1")
    with pytest.raises(ValueError, match=nan):
        call(**{name: [0.5, float("nan"), 1.0]})
    inf = message(func, name, "finite (no NaN or infinity)", "-inf at index 2")
    with pytest.raises(ValueError, match=inf):
        call(**{name: [0.5, 1.0, -np.inf]})
    shape = message(func, name, "a 1-D array (one value per query)", "shape (3, 1)")
    with pytest.raises(ValueError, match=shape):
        call(**{name: [[0.5], [1.0], [1.0]]})
    dtype = message(func, name, "an array of real numbers", "dtype bool")
    with pytest.raises(ValueError, match=dtype):
        call(**{name: [True, False, True]})
    ragged = message(func, name, "a 1-D array of real numbers", "ragged values")
    with pytest.raises(ValueError, match=ragged):
        call(**{name: [[0.5], [1.0, 2.0], 3.0]})


def test_holm_errors():
    with pytest.raises(ValueError, match=message("holm", "pvalues", "in [0, 1]", "1.5 at index 1")):
        holm([0.5, 1.5])
    with pytest.raises(
        ValueError, match=message("holm", "pvalues", "in [0, 1]", "-0.1 at index 0")
    ):
        holm([-0.1])
    nan = message("holm", "pvalues", "finite (no NaN or infinity)", "nan at index 0")
    with pytest.raises(ValueError, match=nan):
        holm([float("nan")])
    shape = message("holm", "pvalues", "a 1-D array (one p-value per hypothesis)", "shape (1, 2)")
    with pytest.raises(ValueError, match=shape):
        holm([[0.1, 0.2]])


def test_errors_are_recallkit_errors():
    from recallkit.exceptions import ParameterError

    with pytest.raises(ParameterError) as info:
        bootstrap_interval(GOOD, confidence=1.5)
    assert (info.value.func, info.value.name) == ("bootstrap_interval", "confidence")
