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
    got = stats.bootstrap_intervals([a, a], [np.median, "mean"], n_resamples=300, seed=4)
    idx = np.random.default_rng(4).integers(0, 150, (300, 150))
    for theta, interval in zip(
        (np.median(a[idx], axis=-1), np.mean(a[idx], axis=-1)), got, strict=True
    ):
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
