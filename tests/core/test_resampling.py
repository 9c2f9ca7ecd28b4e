"""recallkit._resampling's compiled draws and sums against numpy's own calls (the peer whose
stream they reproduce: ``Generator.integers`` and ``np.mean``), against a pairwise summation
written here from numpy's description, and recallkit.stats's results on the compiled pass against
its numpy path, a brute force and scipy, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from recallkit import _resampling, stats

# Widths: below 8 (summed in order), a block of 128 and around it, numpy's pairwise splits,
# a large width, and widths near 2**31 where Lemire's rejection discards up to half the words.
WIDTHS = [2, 3, 7, 8, 9, 127, 128, 129, 130, 257, 1000, 1031, 60_502]
REJECTING = [(1 << 31) + 5, (1 << 32) - 3, 3 * (1 << 30) + 1]
ALPHA = (1 - 0.95) / 2  # the percentile interval's lower quantile, as recallkit.stats computes it


def pairwise(values):
    """numpy's pairwise sum as ``numpy/_core/src/umath/loops_utils.h`` describes it, in Python
    floats: in order from -0.0 below 8 values; up to 128, eight running sums (values ``i``,
    ``i + 8``, ...) added as ``((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))``, then the
    rest in order; beyond, the two halves (the first ``n // 2`` less its remainder modulo 8)."""
    n = len(values)
    if n < 8:
        total = -0.0
        for v in values:
            total += v
        return total
    if n <= 128:
        r = [float(v) for v in values[:8]]
        stop = n - n % 8
        for i in range(8, stop, 8):
            for j in range(8):
                r[j] += values[i + j]
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for v in values[stop:]:
            total += v
        return total
    half = n // 2
    half -= half % 8
    return pairwise(values[:half]) + pairwise(values[half:])


def test_numpy_agrees_here():
    assert _resampling.agrees()


def take(stream, count):
    """The stream's next ``count`` draws."""
    out = np.empty(count, dtype=np.int64)
    _resampling._draw(stream.st, stream.span, stream.threshold, out)
    return out


@pytest.mark.parametrize("width", WIDTHS + REJECTING)
def test_draws_are_numpys_word_for_word_and_leave_its_state(width):
    ours, theirs = np.random.default_rng(width), np.random.default_rng(width)
    stream = _resampling.Stream(ours, width)
    for count in (1, 7, 4, 1001):  # odd counts end on half a word, where the next call starts
        np.testing.assert_array_equal(take(stream, count), theirs.integers(0, width, count))
    if width < 1 << 20:
        for m in (1, 3):
            np.testing.assert_array_equal(stream.integers(m), theirs.integers(0, width, (m, width)))
    stream.sync()
    assert ours.bit_generator.state == theirs.bit_generator.state
    np.testing.assert_array_equal(ours.integers(0, width, 7), theirs.integers(0, width, 7))


@pytest.mark.parametrize("width", WIDTHS[:-1])
def test_sums_and_means_are_numpys_bit_for_bit(width):
    rng = np.random.default_rng(width + 1)
    floats = np.stack(
        [
            rng.standard_normal(width) * np.logspace(-8, 8, width),
            rng.choice([0.0, 1 / 3, 0.5, 1.0], size=width),
            -np.abs(rng.random(width)),
            np.full(width, -0.0),
        ]
    )
    words = np.stack([rng.integers(0, 1 << 40, width), rng.integers(-50, 50, width)])
    for chosen_words, chosen_floats in (
        (words[:1], floats[:0]),  # one word: summed as drawn
        (words, floats[:0]),
        (words[:0], floats),
        (words, floats),
    ):
        stream = _resampling.Stream(np.random.default_rng(5), width)
        first = stream.sums(3, chosen_words, chosen_floats)
        second = stream.sums(2, chosen_words, chosen_floats)
        theirs = np.random.default_rng(5)
        for (sums, means), m in ((first, 3), (second, 2)):
            idx = theirs.integers(0, width, (m, width))
            for w, word in enumerate(chosen_words):
                np.testing.assert_array_equal(sums[:, w], np.sum(word[idx], axis=-1))
                assert sums[:, w].tolist() == [sum(int(word[j]) for j in row) for row in idx]
            for f, values in enumerate(chosen_floats):
                expected = np.mean(values[idx], axis=-1)
                assert means[:, f].tobytes() == expected.tobytes()  # the sign of zero too
                by_hand = [(0.0 + pairwise(values[row].tolist())) / width for row in idx]
                assert means[:, f].tobytes() == np.array(by_hand).tobytes()


def test_only_a_pcg64_generator_and_a_width_of_two_or_more_are_drawn_here():
    assert _resampling.usable(np.random.default_rng(0), 2)
    assert not _resampling.usable(np.random.default_rng(0), 1)  # numpy draws nothing
    assert not _resampling.usable(np.random.Generator(np.random.MT19937(0)), 10)
    assert not _resampling.usable(np.random.default_rng(0), 1 << 32)


@pytest.fixture(params=["numpy", "compiled"])
def path(request, monkeypatch):
    """Every statistic below on numpy's calls and on the compiled pass."""
    monkeypatch.setattr(stats, "_compiled_pays", lambda *_: request.param == "compiled")
    return request.param


def test_the_compiled_pass_is_chosen_by_size():
    assert stats._compiled_pays(60_502 * 10_000, 1)  # an interval of SOP's test split
    assert not stats._compiled_pays(1_000 * 1_000, 1)  # less than numba's kernels cost to load


@pytest.mark.parametrize("n", [2, 9, 130, 1000])
def test_intervals_equal_on_either_path(path, n):
    rng = np.random.default_rng(n)
    samples = [
        (rng.random(n) < 0.7) * 1.0,
        rng.choice([0.0, 1 / 3, 0.5, 2 / 3, 1.0], size=n),
        rng.integers(-1, 2, n).astype(np.float64),
        rng.standard_normal(n),
        rng.random(n + 3),  # another width: its own draw
    ]
    got = stats.bootstrap_intervals(samples, n_resamples=501, seed=9, batch=100)
    for values, interval in zip(samples, got, strict=True):
        idx = np.random.default_rng(9).integers(0, values.size, (501, values.size))
        theta = np.mean(values[idx], axis=-1)
        assert interval == tuple(float(q) for q in np.quantile(theta, [ALPHA, 1 - ALPHA]))
        assert interval == stats.bootstrap_interval(values, n_resamples=501, seed=9)


def test_a_statistic_beside_the_means_draws_the_same_indices(path):
    rng = np.random.default_rng(3)
    a = rng.random(150)
    got = stats.bootstrap_intervals(
        [a, a, a], [np.median, "mean", np.max], n_resamples=300, seed=4
    )  # a median and a mean (compiled, each its own pass) and a function (gathered)
    idx = np.random.default_rng(4).integers(0, 150, (300, 150))
    expected = (np.median(a[idx], axis=-1), np.mean(a[idx], axis=-1), np.max(a[idx], axis=-1))
    for theta, interval in zip(expected, got, strict=True):
        assert interval == tuple(float(q) for q in np.quantile(theta, [ALPHA, 1 - ALPHA]))


def test_paired_resamples_equal_on_either_path(path):
    rng = np.random.default_rng(11)
    a, b = rng.random(300), rng.random(300)
    hits_a, hits_b = (a < 0.6) * 1.0, (b < 0.5) * 1.0
    for x, y in ((a, b), (hits_a, hits_b)):
        difference, theta = stats.paired_bootstrap_distribution(x, y, n_resamples=400, seed=2)
        idx = np.random.default_rng(2).integers(0, 300, (400, 300))
        assert theta.tobytes() == np.mean((x - y)[idx], axis=-1).tobytes()
        assert difference == float(np.mean(x) - np.mean(y))


def test_intervals_equal_scipys_on_either_path(path):
    rng = np.random.default_rng(8)
    values = rng.choice([0.0, 0.25, 0.5, 1.0], size=200)
    scipy = sps.bootstrap(
        (values,),
        np.mean,
        n_resamples=999,
        method="percentile",
        rng=np.random.default_rng(6),
        vectorized=True,
    ).confidence_interval
    got = stats.bootstrap_interval(values, n_resamples=999, seed=6)
    assert got == pytest.approx((scipy.low, scipy.high), abs=1e-12)


@pytest.mark.parametrize("n", [9, 130, 1000])
def test_swaps_are_numpys_words_and_their_sums_add_the_kept_pairs(n):
    rng = np.random.default_rng(n)
    d = np.stack([rng.standard_normal(n), rng.integers(-1, 2, n) * 1.0], axis=1)
    for columns in (d[:, :1], d):  # one pair (summed as drawn) and two
        stream = _resampling.Stream(np.random.default_rng(3), 2)
        sums, starts = stream.kept_sums(4, np.ascontiguousarray(columns))
        words = np.random.default_rng(3).integers(0, 1 << 32, size=(4, n), dtype=np.uint32)
        kept = words & 1
        for r in range(4):
            np.testing.assert_array_equal(_resampling.Stream.kept_row(starts[r], n), kept[r])
            for j, column in enumerate(columns.T):
                total = 0.0
                for i in range(n):
                    total += column[i] if kept[r, i] else 0.0
                assert sums[r, j] == total


def test_randomization_p_values_equal_on_either_path_and_scipys(path):
    rng = np.random.default_rng(5)
    a = rng.choice([0.0, 1 / 3, 0.5, 1.0], size=120)
    b = np.where(rng.random(120) < 0.5, a, rng.choice([0.0, 0.25, 1.0], size=120))
    hits_a, hits_b = (rng.random(120) < 0.6) * 1.0, (rng.random(120) < 0.55) * 1.0
    pairs = [(a, b), (hits_a, hits_b), (a, a)]  # the last: every difference ties the observed
    for batch in (None, 333):  # batches of 333 leave one resample alone at the end
        got = stats.randomization_tests(pairs, n_resamples=1000, seed=4, batch=batch)
        for (x, y), p in zip(pairs, got, strict=True):
            scipy = sps.permutation_test(
                (x, y),
                lambda u, v, axis: np.mean(u, axis=axis) - np.mean(v, axis=axis),
                permutation_type="samples",
                vectorized=True,
                n_resamples=1000,
                batch=batch,
                rng=np.random.default_rng(4),
            ).pvalue
            assert p == scipy
            assert p == stats.randomization_test(x, y, n_resamples=1000, seed=4, batch=batch)


@pytest.mark.parametrize("width", [2, 3, 8, 9, 130, 1001])
def test_medians_are_numpys_bit_for_bit(width):
    rng = np.random.default_rng(width)
    samples = [
        rng.integers(1, 40, width).astype(np.float64),  # ranks: many ties
        rng.standard_normal(width),
        np.where(rng.random(width) < 0.5, 0.0, -0.0),  # zeros of either sign
        np.where(rng.random(width) < 0.3, -0.0, rng.integers(-2, 3, width) * 1.0),
    ]
    stream = _resampling.Stream(np.random.default_rng(1), width)
    first, second = stream.medians(5, samples), stream.medians(2, samples[:1])
    theirs = np.random.default_rng(1)
    idx = theirs.integers(0, width, (5, width))
    for q, sample in enumerate(samples):
        assert first[:, q].tobytes() == np.median(sample[idx], axis=-1).tobytes()
        by_hand = []  # the middle one, or the mean of the middle two, of each sorted resample
        for row in np.sort(sample[idx], axis=-1):
            middle = row[(width - 1) // 2 : width // 2 + 1]
            by_hand.append(0.0 + sum(middle.tolist()) / len(middle))
        assert first[:, q].tolist() == by_hand
    idx = theirs.integers(0, width, (2, width))
    assert second[:, 0].tobytes() == np.median(samples[0][idx], axis=-1).tobytes()


def test_a_median_statistic_is_numpys_floored_or_not():
    x = np.array([[1.0, 2.0, 5.0, 8.0], [3.0, 1.0, 2.0, 9.0]])
    assert stats.Median()(x).tolist() == [3.5, 2.5]
    assert stats.Median(floor=True)(x).tolist() == [3.0, 2.0]
    assert stats.Median(floor=True)(x.T, axis=0).tolist() == [3.0, 2.0]
    assert repr(stats.Median(floor=True)) == "Median(floor=True)"


@pytest.mark.parametrize("statistic", [np.median, stats.Median(), stats.Median(floor=True)])
def test_median_intervals_equal_on_either_path(path, statistic):
    rng = np.random.default_rng(21)
    ranks = rng.integers(1, 60, 301).astype(np.float64)
    other = rng.integers(1, 80, 301).astype(np.float64)
    floor = getattr(statistic, "floor", False)

    def brute(x, idx):
        out = np.median(x[idx], axis=-1)
        return np.floor(out) if floor else out

    idx = np.random.default_rng(3).integers(0, 301, (400, 301))
    got = stats.bootstrap_intervals([ranks, ranks], [statistic, "mean"], n_resamples=400, seed=3)
    theta = brute(ranks, idx)
    assert got[0] == tuple(float(q) for q in np.quantile(theta, [ALPHA, 1 - ALPHA]))
    difference, resampled = stats.paired_bootstrap_distribution(
        ranks, other, statistic, n_resamples=400, seed=3
    )
    assert resampled.tobytes() == (brute(ranks, idx) - brute(other, idx)).tobytes()
    assert difference == float(brute(ranks, np.arange(301)) - brute(other, np.arange(301)))


def test_medr_is_resampled_as_its_own_summary():
    from recallkit import comparison, metrics

    medr = metrics.MedianRank()
    statistic = comparison._statistic(medr)
    ranks = np.random.default_rng(0).integers(1, 100, (7, 40)).astype(np.float64)
    assert isinstance(statistic, stats.Median) and statistic.floor
    assert statistic(ranks).tolist() == medr.summarize(ranks).tolist()
    assert statistic(ranks[:, :39]).tolist() == medr.summarize(ranks[:, :39]).tolist()


def test_swapped_medians_are_each_sides_numpy_median():
    rng = np.random.default_rng(2)
    a, b = rng.integers(1, 30, 101) * 1.0, rng.integers(1, 50, 101) * 1.0
    got = _resampling.Stream(np.random.default_rng(8), 2).swapped_medians(6, a, b)
    swapped = np.random.default_rng(8).integers(0, 1 << 32, (6, 101), dtype=np.uint32) & 1 == 0
    side_a, side_b = np.where(swapped, b, a), np.where(swapped, a, b)
    assert got[:, 0].tobytes() == np.median(side_a, axis=-1).tobytes()
    assert got[:, 1].tobytes() == np.median(side_b, axis=-1).tobytes()
    assert got[:, 0].tolist() == [sorted(row)[50] for row in side_a.tolist()]


@pytest.mark.parametrize("statistic", [np.median, stats.Median(floor=True)])
def test_median_randomization_tests_equal_scipys_on_either_path(path, statistic):
    rng = np.random.default_rng(13)
    a, b = rng.integers(1, 20, 140) * 1.0, rng.integers(1, 24, 140) * 1.0
    scipy = sps.permutation_test(
        (a, b),
        lambda u, v, axis: statistic(u, axis=axis) - statistic(v, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=500,
        rng=np.random.default_rng(6),
    ).pvalue
    assert stats.randomization_test(a, b, statistic, n_resamples=500, seed=6) == scipy
    got = stats.randomization_tests([(a, b), (a, a)], statistic, n_resamples=500, seed=6)
    assert got == [scipy, 1.0]
