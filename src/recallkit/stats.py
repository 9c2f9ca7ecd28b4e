"""Statistics over per-query values: bootstrap intervals, paired comparisons, p-values.

Every function takes per-query values (one float per query, such as each query's recall@K hit
or average precision; lone queries dropped beforehand):

* [`bootstrap_interval`][bootstrap_interval]: a percentile bootstrap interval of a statistic (the
  mean, or a function of the values), resampling queries, or classes for protocols that average over
  classes;
* [`paired_bootstrap`][paired_bootstrap]: the difference of a statistic between two systems on the
  same queries, and a paired percentile bootstrap interval of it;
* [`randomization_test`][randomization_test]: the two-sided p-value of that difference by Fisher's
  paired randomization test;
* [`holm`][holm]: Holm's adjustment of several p-values.

The resampling is seeded (``numpy.random.default_rng(seed)``) and reproducible, and its results
equal scipy's with the same seed, resamples and batch: [`bootstrap_interval`][bootstrap_interval]
and [`paired_bootstrap`][paired_bootstrap] give ``scipy.stats.bootstrap(...,
method="percentile")``'s interval (to 1e-12), and [`randomization_test`][randomization_test] gives
``scipy.stats.permutation_test(..., permutation_type="samples")``'s p-value, draw for draw. The
resamples are drawn in batches, so memory holds one batch and one float per resample, never every
resample at once.

This module needs numpy alone (no torch).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from recallkit.exceptions import fail

__all__ = [
    "bootstrap_interval",
    "holm",
    "paired_bootstrap",
    "paired_bootstrap_distribution",
    "randomization_test",
]

#: The statistic: ``"mean"``, or ``f(x, axis=-1)`` reducing the last axis of ``x``.
Statistic = str | Callable[..., Any]

#: Array elements a batch holds by default (of each of its arrays: the drawn indices and the
#: values they pick): 2**18, 2 MiB of int64 indices and 2 MiB of float64 values, which stay in
#: a core's cache between the draw, the gather and the sum.
BATCH_ELEMENTS = 1 << 18

#: The margin of [`randomization_test`][randomization_test]'s fast mean, in units of ``(n + 2) u
#: mean(max(|a|,
#: |b|))``: a resampled difference computed within it of a threshold is computed again as scipy
#: computes it (8 suffices by the rounding analysis in ``_MeanNull``; 32 for safety).
MARGIN = 32


# ---------------------------------------------------------------------------------------------
# Argument checks.


def _values(x: Any, func: str, name: str, each: str = "one value per query") -> np.ndarray:
    """``x`` as a non-empty 1-D contiguous float64 array of finite real numbers, or raise."""
    try:
        array = np.asarray(x)
    except (TypeError, ValueError):
        raise fail(func, name, "a 1-D array of real numbers", "ragged values") from None
    if array.dtype.kind not in "iuf":
        raise fail(func, name, "an array of real numbers", f"dtype {array.dtype}")
    if array.ndim != 1:
        raise fail(func, name, f"a 1-D array ({each})", f"shape {array.shape}")
    if array.size == 0:
        raise fail(func, name, "non-empty", "0 values")
    array = np.ascontiguousarray(array, dtype=np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        index = int(np.argmin(finite))
        raise fail(func, name, "finite (no NaN or infinity)", f"{array[index]} at index {index}")
    return array


def _pair(a: Any, b: Any, func: str) -> tuple[np.ndarray, np.ndarray]:
    a = _values(a, func, "a")
    b = _values(b, func, "b")
    if b.size != a.size:
        raise fail(func, "b", f"of length {a.size} (one per value of 'a')", b.size)
    return a, b


def _groups(groups: Any, n: int, func: str, of: str) -> np.ndarray:
    """The class of each value as codes ``0..G-1`` (in the sorted order of ``groups``)."""
    array = np.asarray(groups)
    if array.dtype.kind not in "iu":
        raise fail(func, "groups", "integers (one class code per value)", f"dtype {array.dtype}")
    if array.ndim != 1:
        raise fail(func, "groups", "a 1-D array (one class code per value)", f"shape {array.shape}")
    if array.size != n:
        raise fail(func, "groups", f"of length {n} (one per value of {of})", array.size)
    return np.unique(array, return_inverse=True)[1].reshape(-1)


def _positive_int(value: Any, func: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise fail(func, name, "a positive integer", repr(value))
    return int(value)


def _seed(seed: Any, func: str) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise fail(func, "seed", "a non-negative integer", repr(seed))
    return int(seed)


def _batch(batch: Any, func: str) -> int | None:
    return None if batch is None else _positive_int(batch, func, "batch")


def _confidence(confidence: Any, func: str) -> float:
    real = isinstance(confidence, numbers.Real) and not isinstance(confidence, bool)
    if not (real and 0 < confidence < 1):  # NaN fails the comparison
        raise fail(func, "confidence", "in (0, 1)", confidence if real else repr(confidence))
    return float(confidence)


_ONE_PER_ROW = "a function that reduces the last axis (one value per row)"


def _statistic(statistic: Any, func: str) -> Callable[..., Any]:
    """The reduction ``f(x, axis=-1)``: ``np.mean`` for ``"mean"``, else the callable given."""
    if isinstance(statistic, str) and statistic == "mean":
        return np.mean
    if callable(statistic) and not isinstance(statistic, str):
        return statistic
    raise fail(func, "statistic", "'mean' or a callable f(x, axis=-1)", repr(statistic))


def _rows(reduce: Callable[..., Any], x: np.ndarray, func: str) -> np.ndarray:
    """``reduce(x, axis=-1)`` of an ``(m, n)`` array, checked to be one float per row."""
    out = np.asarray(reduce(x, axis=-1), dtype=np.float64)
    if out.shape != x.shape[:1]:
        got = f"output of shape {out.shape} for input of shape {x.shape}"
        raise fail(func, "statistic", _ONE_PER_ROW, got)
    return out


def _scalar(reduce: Callable[..., Any], x: np.ndarray, func: str) -> np.float64:
    """``reduce(x, axis=-1)`` of a 1-D array, checked to be one float."""
    out = np.asarray(reduce(x, axis=-1), dtype=np.float64)
    if out.shape != ():
        got = f"output of shape {out.shape} for input of shape {x.shape}"
        raise fail(func, "statistic", _ONE_PER_ROW, got)
    return out[()]


# ---------------------------------------------------------------------------------------------
# Resampling.


def _sizes(total: int, batch: int | None, width: int) -> Iterator[int]:
    """The sizes of the batches of ``total`` resamples of ``width`` values each.

    ``batch`` given: batches of ``batch`` and the rest, as scipy splits them. ``None``: batches
    of about [`BATCH_ELEMENTS`][BATCH_ELEMENTS] values, the last never of one resample unless
    ``total`` is 1 (a batch of one resample is reduced by pairwise summation where a wider batch is
    summed in order, and scipy, given no batch, draws every resample in one batch).
    """
    if batch is None:
        batch = max(2, BATCH_ELEMENTS // max(width, 1))
        if total % batch == 1 and total > batch:
            sizes = [batch] * (total // batch)
            sizes[-1] += 1
            yield from sizes
            return
    for start in range(0, total, batch):
        yield min(batch, total - start)


def _bootstrap_distribution(
    reduce: Callable[[np.ndarray], np.ndarray],
    width: int,
    n_resamples: int,
    seed: int,
    batch: int | None,
) -> np.ndarray:
    """``reduce(idx)`` of every resample: ``idx`` an ``(m, width)`` batch of indices drawn with
    replacement, ``rng.integers(0, width, (m, width))``, as ``scipy.stats.bootstrap`` draws
    them (each batch from where the last left off)."""
    rng = np.random.default_rng(seed)
    theta = np.empty(n_resamples)
    start = 0
    for m in _sizes(n_resamples, batch, width):
        theta[start : start + m] = reduce(rng.integers(0, width, (m, width)))
        start += m
    return theta


def _percentile_interval(theta: np.ndarray, confidence: float) -> tuple[float, float]:
    """The two-sided percentile interval: the ``alpha`` and ``1 - alpha`` quantiles of the
    resampled statistics (linear interpolation), ``alpha = (1 - confidence) / 2``."""
    alpha = (1 - confidence) / 2
    low, high = np.quantile(theta, [alpha, 1 - alpha], method="linear")
    return float(low), float(high)


def _class_statistics(
    values: np.ndarray, codes: np.ndarray, reduce: Callable[..., Any], func: str
) -> np.ndarray:
    """The statistic of each class's values, classes in the order of their codes."""
    if reduce is np.mean:
        return np.bincount(codes, weights=values) / np.bincount(codes)
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes))[:-1]
    return np.array([_scalar(reduce, part, func) for part in np.split(values[order], bounds)])


# ---------------------------------------------------------------------------------------------
# The public functions.


def bootstrap_interval(
    values: Any,
    statistic: Statistic = "mean",
    *,
    groups: Any = None,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    batch: int | None = None,
) -> tuple[float, float]:
    """The percentile bootstrap interval (Efron & Tibshirani 1993) of a statistic of per-query
    values.

    Each resample draws the ``n`` queries with replacement (``rng.integers(0, n, (batch, n))``
    per batch, ``rng = numpy.random.default_rng(seed)``) and computes the statistic of the
    values drawn; the interval is the ``(1 - confidence) / 2`` and ``(1 + confidence) / 2``
    quantiles of the ``n_resamples`` statistics (linear interpolation, as
    ``numpy.percentile(..., method="linear")``).

    With ``groups``, the statistic is the mean over classes of each class's statistic (the
    protocols that average over classes), and the classes are resampled instead: a resample
    draws ``G`` of the ``G`` classes with replacement and takes the mean of their statistics
    (each class's statistic computed once, on all its values).

    The interval equals ``scipy.stats.bootstrap((values,), statistic, method="percentile",
    vectorized=True, n_resamples=n_resamples, confidence_level=confidence,
    rng=numpy.random.default_rng(seed))`` to 1e-12 (with ``groups``: scipy's bootstrap of the
    array of class statistics, sorted by class code, with the mean as statistic). The draws are
    the same whatever ``batch`` (numpy's generator continues one stream from batch to batch),
    so the interval depends on ``seed`` and ``n_resamples``; scipy gives it with any ``batch``.

    Parameters
    ----------
    values : array_like of float, shape (n,)
        One finite value per query.
    statistic : "mean" or callable, default "mean"
        The statistic: the mean, or a function ``f(x, axis=-1)`` that reduces the last axis of
        an array of shape ``(m, n)`` to ``m`` floats, as scipy's statistics are called (for
        example ``lambda x, axis=-1: np.floor(np.median(x, axis=axis))``).
    groups : array_like of int, shape (n,), optional
        The class of each query: resample classes (per-class bootstrap) instead of queries.
    n_resamples : int, default 10000
        The number of resamples.
    confidence : float, default 0.95
        The confidence level, in (0, 1).
    seed : int, default 0
        The seed of ``numpy.random.default_rng``.
    batch : int, optional
        Resamples drawn at once: memory holds ``batch`` resamples of indices (int64) and of
        values (float64), and one float per resample. By default about 2**18 values a batch
        (4 MiB in all). It changes neither the draws nor the interval.

    Returns
    -------
    (low, high) : tuple of float
        The interval. Equal values (or one value) give a point interval, ``low == high``.

    Raises
    ------
    ValueError
        If an argument is not of the form described above: empty or non-finite values,
        ``groups`` of another length, ``confidence`` outside (0, 1), ``n_resamples`` not a
        positive integer, and so on.

    Examples
    --------
    >>> bootstrap_interval([0.0, 1.0, 1.0, 1.0], n_resamples=1000, seed=0)
    (0.25, 1.0)
    >>> bootstrap_interval([0.0, 1.0, 1.0, 1.0], groups=[0, 0, 1, 1], n_resamples=1000)
    (0.5, 1.0)
    """
    func = "bootstrap_interval"
    values = _values(values, func, "values")
    reduce = _statistic(statistic, func)
    n_resamples = _positive_int(n_resamples, func, "n_resamples")
    confidence = _confidence(confidence, func)
    seed = _seed(seed, func)
    batch = _batch(batch, func)
    if groups is not None:
        codes = _groups(groups, values.size, func, "'values'")
        values, reduce = _class_statistics(values, codes, reduce, func), np.mean
    else:
        _scalar(reduce, values, func)  # a statistic of the wrong form fails before resampling
    theta = _bootstrap_distribution(
        lambda idx: _rows(reduce, values[idx], func), values.size, n_resamples, seed, batch
    )
    return _percentile_interval(theta, confidence)


def paired_bootstrap(
    a: Any,
    b: Any,
    statistic: Statistic = "mean",
    *,
    groups: Any = None,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    batch: int | None = None,
) -> tuple[float, float, float]:
    """The difference of a statistic between two systems on the same queries, and its paired
    percentile bootstrap interval (Efron & Tibshirani 1993).

    ``a[i]`` and ``b[i]`` are the values of query ``i`` under each system. Each resample draws
    one vector of query indices with replacement (``rng.integers(0, n, (batch, n))`` per
    batch) and applies it to both: its statistic is ``statistic(a[idx]) - statistic(b[idx])``.
    With ``groups`` the classes are resampled (the same classes for both), and the statistic
    of each side is the mean over classes of its per-class statistics.

    The interval equals ``scipy.stats.bootstrap((a, b), lambda x, y, axis=-1: f(x, axis=axis)
    - f(y, axis=axis), paired=True, method="percentile", vectorized=True,
    n_resamples=n_resamples, confidence_level=confidence, rng=numpy.random.default_rng(seed))``
    to 1e-12 (with ``groups``: the same on the arrays of class statistics, sorted by class
    code). As for [`bootstrap_interval`][bootstrap_interval], ``batch`` changes neither the draws
    nor the interval.

    Parameters
    ----------
    a, b : array_like of float, shape (n,)
        One finite value per query under each system, the same queries in the same order.
    statistic : "mean" or callable, default "mean"
        As in [`bootstrap_interval`][bootstrap_interval]: the mean or ``f(x, axis=-1)``.
    groups : array_like of int, shape (n,), optional
        The class of each query: resample classes instead of queries.
    n_resamples : int, default 10000
        The number of resamples.
    confidence : float, default 0.95
        The confidence level, in (0, 1).
    seed : int, default 0
        The seed of ``numpy.random.default_rng``.
    batch : int, optional
        Resamples drawn at once (memory, as in [`bootstrap_interval`][bootstrap_interval]).

    Returns
    -------
    (difference, low, high) : tuple of float
        ``statistic(a) - statistic(b)`` and its interval.

    Raises
    ------
    ValueError
        If an argument is not of the form described above (``a`` and ``b`` of different
        lengths among others).

    Examples
    --------
    >>> paired_bootstrap([1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0], n_resamples=1000)
    (0.5, 0.0, 1.0)
    """
    confidence = _confidence(confidence, "paired_bootstrap")
    difference, theta = paired_bootstrap_distribution(
        a,
        b,
        statistic,
        groups=groups,
        n_resamples=n_resamples,
        seed=seed,
        batch=batch,
        func="paired_bootstrap",
    )
    return (difference, *_percentile_interval(theta, confidence))


def paired_bootstrap_distribution(
    a: Any,
    b: Any,
    statistic: Statistic = "mean",
    *,
    groups: Any = None,
    n_resamples: int = 10_000,
    seed: int = 0,
    batch: int | None = None,
    func: str = "paired_bootstrap_distribution",
) -> tuple[float, np.ndarray]:
    """The difference ``statistic(a) - statistic(b)`` and its ``n_resamples`` paired bootstrap
    resamples, drawn as [`paired_bootstrap`][paired_bootstrap] draws them (its interval is their
    percentile interval); for a bootstrap test, ``2 min(P(d* <= 0), P(d* >= 0))``.

    Parameters and draws as in [`paired_bootstrap`][paired_bootstrap] (``func`` names the function
    in errors).

    Returns
    -------
    (difference, resampled) : tuple of float and ndarray of shape (n_resamples,)

    >>> d, resampled = paired_bootstrap_distribution([1.0, 0.0], [0.0, 0.0], n_resamples=4)
    >>> d, resampled.tolist()
    (0.5, [0.0, 0.5, 1.0, 1.0])
    """
    a, b = _pair(a, b, func)
    reduce = _statistic(statistic, func)
    n_resamples = _positive_int(n_resamples, func, "n_resamples")
    seed = _seed(seed, func)
    batch = _batch(batch, func)
    if groups is not None:
        codes = _groups(groups, a.size, func, "'a' and 'b'")
        a = _class_statistics(a, codes, reduce, func)
        b = _class_statistics(b, codes, reduce, func)
        reduce = np.mean
    difference = float(_scalar(reduce, a, func) - _scalar(reduce, b, func))
    if reduce is np.mean:  # one gather: the mean of the differences
        d = a - b
        theta = _bootstrap_distribution(
            lambda idx: np.mean(d[idx], axis=-1), a.size, n_resamples, seed, batch
        )
    else:
        theta = _bootstrap_distribution(
            lambda idx: _rows(reduce, a[idx], func) - _rows(reduce, b[idx], func),
            a.size,
            n_resamples,
            seed,
            batch,
        )
    return difference, theta


def _kept(n: int, total: int, exact: bool, batch: int | None, seed: int) -> Iterator[np.ndarray]:
    """Batches of swap patterns as scipy's ``permutation_test(permutation_type="samples")``
    makes them for two samples: each an ``(m, n)`` array, 1 where pair ``i`` is kept as it is
    in resample ``k`` and 0 where it is swapped.

    ``exact`` (``total == 2**n``): every pattern once, in the order of ``itertools.product``
    over the pairs (the first pair changing slowest, kept before swapped). Random: scipy
    shuffles the two indices of each pair with ``rng.permuted``, which draws one
    ``next_uint32`` word per pair and swaps when the word's lowest bit is 0;
    ``rng.integers(0, 2**32, dtype=numpy.uint32)`` returns the same words, a quarter of the
    memory of scipy's shuffled int64 indices. Either is independent of the batch sizes.
    """
    if exact:
        shifts = np.arange(n - 1, -1, -1, dtype=np.int64)
        start = 0
        for m in _sizes(total, batch, n):
            patterns = np.arange(start, start + m, dtype=np.int64)[:, None]
            yield 1 - ((patterns >> shifts) & 1)
            start += m
        return
    rng = np.random.default_rng(seed)
    for m in _sizes(total, batch, n):
        yield np.bitwise_and(rng.integers(0, 1 << 32, size=(m, n), dtype=np.uint32), 1)


class _Null:
    """Counts the resampled differences at most ``high`` and at least ``low`` (scipy's
    ``observed + gamma`` and ``observed - gamma``), each computed as scipy computes it."""

    def __init__(self, a: np.ndarray, b: np.ndarray, reduce: Callable[..., Any], func: str):
        self.a, self.b, self.reduce, self.func = a, b, reduce, func
        self.at_most = self.at_least = 0

    def sides(self, swapped: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Both sides of an ``(n, m)`` batch of swaps, ``(n, m)`` C-ordered arrays."""
        side_a = np.where(swapped, self.b[:, None], self.a[:, None])
        side_b = np.where(swapped, self.a[:, None], self.b[:, None])
        return np.ascontiguousarray(side_a), np.ascontiguousarray(side_b)

    def differences(self, kept: np.ndarray) -> np.ndarray:
        """Scipy's statistic of a batch: ``f`` of each side of the ``(m, n)`` resamples, on
        ``(n, m)`` C-ordered arrays seen as ``(m, n)``, the layout scipy passes (the query axis
        outermost in memory: ``np.mean`` sums each resample's values in order; a batch of one
        resample is contiguous and summed pairwise, in scipy as here)."""
        side_a, side_b = self.sides(np.ascontiguousarray(kept.T == 0))
        return _rows(self.reduce, side_a.T, self.func) - _rows(self.reduce, side_b.T, self.func)

    def add(self, kept: np.ndarray, low: np.float64, high: np.float64) -> None:
        null = self.differences(kept)
        self.at_most += int(np.count_nonzero(null <= high))
        self.at_least += int(np.count_nonzero(null >= low))


class _MeanNull(_Null):
    """The same counts for the mean, fast: each difference is first computed as
    ``(2 * sum(d[kept]) - sum(d)) / n`` (``d = a - b``; one multiply and one sum per value),
    which is within ``bound`` of scipy's (two sums in order of each side's values); only the
    resamples that fall within ``bound`` of ``low`` or ``high`` (exact ties with the observed
    difference, mostly) are computed again as scipy computes them."""

    def __init__(self, a: np.ndarray, b: np.ndarray, func: str):
        super().__init__(a, b, np.mean, func)
        n = a.size
        self.d = a - b
        self.total = np.sum(self.d)
        # Rounding, in units of u * scale (u = eps / 2): scipy's difference (each side summed
        # in order, divided by n, subtracted) is within 2n + 2 of the exact one; the fast one
        # (d rounded, its two sums, 2X - D, the division) within 6n + 4; MARGIN (n + 2) covers
        # both. The last term covers sums that underflow.
        scale = np.sum(np.maximum(np.abs(a), np.abs(b))) / n
        self.bound = MARGIN * (n + 2) * (np.finfo(np.float64).eps / 2) * scale + 1e-300

    def add(self, kept: np.ndarray, low: np.float64, high: np.float64) -> None:
        m, n = kept.shape
        fast = np.multiply(kept, self.d)
        fast = (2 * np.sum(fast, axis=1) - self.total) / n
        near = ~(np.abs(fast - high) > self.bound) | ~(np.abs(fast - low) > self.bound)
        self.at_most += int(np.count_nonzero((fast <= high) & ~near))
        self.at_least += int(np.count_nonzero((fast >= low) & ~near))
        for k in np.flatnonzero(near):
            side_a, side_b = self.sides(kept[k][:, None] == 0)
            if m == 1:  # one resample in the batch: scipy sums it pairwise
                null = np.mean(side_a[:, 0]) - np.mean(side_b[:, 0])
            else:
                null = (
                    np.add.accumulate(side_a[:, 0])[-1] / n
                    - np.add.accumulate(side_b[:, 0])[-1] / n
                )
            self.at_most += int(null <= high)
            self.at_least += int(null >= low)


def randomization_test(
    a: Any,
    b: Any,
    statistic: Statistic = "mean",
    *,
    n_resamples: int = 10_000,
    seed: int = 0,
    batch: int | None = None,
) -> float:
    """The two-sided p-value of ``statistic(a) - statistic(b)`` by Fisher's randomization test
    for paired values.

    Under the null hypothesis the two systems are exchangeable on each query: each resample
    swaps ``a[i]`` and ``b[i]`` for a random half of the pairs (each pair swapped with
    probability 1/2) and computes the difference again. The p-value is twice the smaller of
    the fractions of resampled differences at most and at least the observed one (capped at
    1), a resampled difference within ``100 * eps * |observed|`` of the observed one counting
    as equal, and the observed difference counted as one more resample (``(count + 1) /
    (n_resamples + 1)``). When ``2**n <= n_resamples`` the test is exact instead: every one of
    the ``2**n`` swap patterns once, no added resample.

    The p-value is that of ``scipy.stats.permutation_test((a, b), lambda x, y, axis=-1:
    f(x, axis=axis) - f(y, axis=axis), permutation_type="samples", alternative="two-sided",
    vectorized=True, n_resamples=n_resamples, batch=batch,
    rng=numpy.random.default_rng(seed))``, draw for draw: the same swaps, and the statistic
    computed on arrays of the same layout (so that the mean sums in the same order). The swaps
    drawn do not depend on ``batch``; a resample's mean is summed in order except in a batch
    of one resample, so that scipy gives the same p-value with the same ``batch`` (with
    ``batch=None`` here and there too).

    Parameters
    ----------
    a, b : array_like of float, shape (n,)
        One finite value per query under each system, the same queries in the same order.
    statistic : "mean" or callable, default "mean"
        The mean or a function ``f(x, axis=-1)`` that reduces the last axis of an ``(m, n)``
        array to ``m`` floats.
    n_resamples : int, default 10000
        The number of random swap patterns (at least ``2**n``: the exact test instead).
    seed : int, default 0
        The seed of ``numpy.random.default_rng``.
    batch : int, optional
        Resamples computed at once: memory holds the ``(batch, n)`` swaps (uint32) and one
        float64 array of that shape (for a callable statistic, both sides swapped, two more);
        by default about 2**18 values a batch.

    Returns
    -------
    float
        The two-sided p-value, in (0, 1].

    Raises
    ------
    ValueError
        If an argument is not of the form described above.

    Examples
    --------
    Three pairs differing by 1, -1 and 2: the exact test over the 8 swap patterns, of which 3
    give a difference at least the observed 2/3 (and 7 at most it):

    >>> randomization_test([1.0, 0.0, 2.0], [0.0, 1.0, 0.0])
    0.75
    """
    func = "randomization_test"
    a, b = _pair(a, b, func)
    reduce = _statistic(statistic, func)
    n_resamples = _positive_int(n_resamples, func, "n_resamples")
    seed = _seed(seed, func)
    batch = _batch(batch, func)
    n = a.size
    observed = np.float64(_scalar(reduce, a, func) - _scalar(reduce, b, func))
    gamma = abs(np.finfo(np.float64).eps * 100 * observed)
    exact = n < 64 and (1 << n) <= n_resamples
    total = 1 << n if exact else n_resamples
    null = _MeanNull(a, b, func) if reduce is np.mean else _Null(a, b, reduce, func)
    for kept in _kept(n, total, exact, batch, seed):
        null.add(kept, observed - gamma, observed + gamma)
    adjustment = 0 if exact else 1
    less = np.float64(null.at_most + adjustment) / (total + adjustment)
    greater = np.float64(null.at_least + adjustment) / (total + adjustment)
    return float(np.clip(min(less, greater) * 2, 0.0, 1.0))


def holm(pvalues: Any) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values, in the input order.

    With the ``m`` p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted
    ``p_(i)`` is ``max over j <= i of min(1, (m - j + 1) * p_(j))``: monotone in the p-values
    and at most 1. Rejecting the hypotheses whose adjusted p-value is at most ``alpha``
    controls the family-wise error rate at ``alpha``. Equal p-values get equal adjusted ones.

    Parameters
    ----------
    pvalues : array_like of float, shape (m,)
        The p-values, each in [0, 1]. An empty sequence gives an empty array.

    Returns
    -------
    numpy.ndarray of float64, shape (m,)
        The adjusted p-values, ``adjusted[i]`` that of ``pvalues[i]``.

    Raises
    ------
    ValueError
        If ``pvalues`` is not a 1-D array of numbers in [0, 1].

    Examples
    --------
    >>> holm([0.01, 0.04, 0.03, 0.005]).round(12)
    array([0.03, 0.06, 0.06, 0.02])
    """
    func = "holm"
    try:
        p = np.asarray(pvalues)
    except (TypeError, ValueError):
        raise fail(func, "pvalues", "a 1-D array of real numbers", "ragged values") from None
    if p.size == 0 and p.ndim == 1:
        return np.empty(0)
    p = _values(p, func, "pvalues", "one p-value per hypothesis")
    outside = (p < 0) | (p > 1)
    if outside.any():
        index = int(np.argmax(outside))
        raise fail(func, "pvalues", "in [0, 1]", f"{p[index]} at index {index}")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted
