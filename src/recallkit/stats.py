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

The statistic is the mean, the median ([`Median`][Median], floored for MedR), or any function
``f(x, axis=-1)``.

The resampling is seeded (``numpy.random.default_rng(seed)``) and reproducible, and its results
equal scipy's with the same seed, resamples and batch: [`bootstrap_interval`][bootstrap_interval]
and [`paired_bootstrap`][paired_bootstrap] give ``scipy.stats.bootstrap(...,
method="percentile")``'s interval (to 1e-12), and [`randomization_test`][randomization_test] gives
``scipy.stats.permutation_test(..., permutation_type="samples")``'s p-value, draw for draw. The
resamples are drawn in batches, so memory holds one batch and one float per resample, never every
resample at once.

This module loads numpy alone (no torch); a bootstrap loads numba too, for its compiled draws
(``recallkit._resampling``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from recallkit._inputs.values import (
    as_values,
    check_batch,
    check_positive_int,
    check_seed,
    check_unit_interval,
)
from recallkit.exceptions import fail

__all__ = [
    "Median",
    "bootstrap_interval",
    "bootstrap_intervals",
    "holm",
    "mcnemar_test",
    "paired_bootstrap",
    "paired_bootstrap_distribution",
    "paired_bootstrap_distributions",
    "percentile_interval",
    "randomization_test",
    "randomization_tests",
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
# Argument checks (the numpy-only ones are the validation toolbox's, recallkit._inputs.values).


class Median:
    """The median over an axis (``numpy.median``), floored with ``floor=True``: MedR's summary,
    ``floor(median)``. A statistic for every function of this module; the bootstrap functions
    take each resample's median from counts in their compiled pass, where a function given as
    the statistic gathers and partitions each resample (the same values, bit for bit; so is
    ``numpy.median`` itself, given as the statistic).

    Parameters
    ----------
    floor : bool, default False
        Whether each median is floored (``numpy.floor``).

    Examples
    --------
    >>> float(Median(floor=True)(np.array([1.0, 2.0, 5.0, 8.0])))
    3.0
    """

    def __init__(self, floor: bool = False) -> None:
        self.floor = bool(floor)

    def __call__(self, x: Any, axis: int = -1) -> Any:
        """The median of ``x`` over ``axis``, floored with ``floor``.

        Parameters
        ----------
        x : array_like of float
            The values.
        axis : int, default -1
            The axis reduced.

        Returns
        -------
        numpy.float64 or numpy.ndarray
            ``numpy.median(x, axis=axis)``, floored with ``floor``; its shape is ``x``'s less
            ``axis``.
        """
        out = np.median(x, axis=axis)
        return np.floor(out) if self.floor else out

    def __repr__(self) -> str:
        return f"Median(floor={self.floor})"


def _as_median(job: Job, reduce: Callable[..., Any], samples: tuple[np.ndarray, ...]) -> Job:
    """``job`` as a median of ``samples`` where ``reduce`` is one (numpy's or a
    [`Median`][Median]); else as it is."""
    if reduce is np.median:
        return dataclasses.replace(job, medians=samples)
    if isinstance(reduce, Median):
        return dataclasses.replace(job, medians=samples, floor=reduce.floor)
    return job


def _pair(
    a: Any, b: Any, func: str, names: tuple[str, str] = ("a", "b")
) -> tuple[np.ndarray, np.ndarray]:
    a = as_values(a, func, names[0])
    b = as_values(b, func, names[1])
    if b.size != a.size:
        raise fail(func, names[1], f"of length {a.size} (one per value of {names[0]!r})", b.size)
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
    ``total`` is 1 (numpy may sum a batch of one resample otherwise than a wider one: some
    versions sum a wider batch's rows in order, one row pairwise; scipy, given no batch, draws
    every resample in one batch).
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


@dataclasses.dataclass(frozen=True)
class Job:
    """One statistic of the shared draw: the width of its resamples (the values drawn from) and
    the statistic of each resample of a batch of drawn indices (``reduce(idx)`` of an ``(m,
    width)`` array of indices); for a mean, the values averaged, and whether their resampled
    sums are exact in any order (integers: recall@K's hits, their differences); for a median,
    its samples."""

    width: int
    reduce: Callable[[np.ndarray], np.ndarray]
    values: np.ndarray | None = None
    integral: bool = False
    #: For a median ([`Median`][Median] or ``np.median``): the samples whose medians are taken
    #: (one; two for a paired difference, the second's subtracted), and whether each is floored.
    medians: tuple[np.ndarray, ...] = ()
    floor: bool = False


def _integral(values: np.ndarray) -> bool:
    """Whether every sum of ``len(values)`` of the values is an integer float64 holds exactly
    (integers, no negative zero, ``n max |v| <= 2**53``), so that any order of summation gives
    numpy's."""
    top = float(np.max(np.abs(values)))
    return (
        top * values.size <= 2.0**53
        and bool(np.all(values == np.rint(values)))
        and not bool(np.any(np.signbit(values) & (values == 0)))
    )


def _mean_job(values: np.ndarray) -> Job:
    """The mean of the values drawn: ``np.mean(values[idx], axis=-1)``."""
    return Job(values.size, lambda idx: np.mean(values[idx], axis=-1), values, _integral(values))


def _bootstrap_distributions(
    jobs: Sequence[Job], n_resamples: int, seed: int, batch: int | None
) -> list[np.ndarray]:
    """Each job's statistic over every resample, ``idx`` an ``(m, width)`` batch of indices
    drawn with replacement, ``rng.integers(0, width, (m, width))``, as ``scipy.stats.bootstrap``
    draws them (each batch from where the last left off).

    The jobs of one width share their draws: each batch is drawn once and every job of that width
    reduces it, so that ``k`` statistics cost one draw, and each gets the resamples it would get
    alone, bit for bit. The means of integer values are packed several to an int64 word
    ([`_Packed`][_Packed]), whose sums are exact in any order. Where the work pays numba's start
    ([`_compiled_pays`][_compiled_pays]), one compiled pass
    ([`recallkit._resampling.Stream`][recallkit._resampling.Stream]) makes numpy's draws, sums
    each word and averages each float sample as ``np.mean`` does, as it draws: no index is
    written; a second pass over the same draws takes each median ([`Median`][Median],
    ``np.median``) from counts. A function given as the statistic gathers its values from each
    batch of indices (``reduce(idx)``), drawn again by that pass, or by numpy where it does not
    pay (and then every statistic of the width is computed so)."""
    out: list[np.ndarray] = [np.empty(n_resamples) for _ in jobs]
    for width in dict.fromkeys(job.width for job in jobs):
        chosen = [(out[i], job) for i, job in enumerate(jobs) if job.width == width]
        packed = _Packed([(theta, job.values) for theta, job in chosen if job.integral])
        floats = [(theta, job) for theta, job in chosen if job.values is not None]
        floats = [(theta, job) for theta, job in floats if not job.integral]
        gathered_jobs = [(theta, job) for theta, job in chosen if job.values is None]
        gathered = [(theta, job.reduce) for theta, job in gathered_jobs]
        rng = np.random.default_rng(seed)
        stream = None
        if _compiled_pays(n_resamples * width, len(chosen)):
            from recallkit import _resampling as compiled

            stream = compiled.Stream(rng, width) if compiled.usable(rng, width) else None
        if stream is not None:  # each compiled pass draws anew from default_rng(seed)
            medians = [(theta, job) for theta, job in gathered_jobs if job.medians]
            if medians:
                _compiled_medians(compiled.Stream(np.random.default_rng(seed), width), medians)
            if packed.words or floats:
                matrix = np.stack([job.values for _, job in floats]) if floats else _NO_FLOATS
                seeded = compiled.Stream(np.random.default_rng(seed), width)
                sums, means = seeded.sums(n_resamples, packed.matrix(width), matrix)
                packed.unpack(sums, 0)
                for f, (theta, _) in enumerate(floats):
                    theta[:] = means[:, f]
            packed, floats = _Packed([]), []
            gathered = [(theta, job.reduce) for theta, job in gathered_jobs if not job.medians]
            if not gathered:
                continue
        start = 0
        for m in _sizes(n_resamples, batch, width):
            idx = rng.integers(0, width, (m, width)) if stream is None else stream.integers(m)
            packed.add(idx, start)
            for theta, job in floats:
                theta[start : start + m] = job.reduce(idx)
            for theta, reduce in gathered:
                theta[start : start + m] = reduce(idx)
            start += m
    return out


_NO_FLOATS = np.zeros((0, 0))


def _compiled_medians(stream: Any, medians: Sequence[tuple[np.ndarray, Job]]) -> None:
    """Each median job's resamples, from one compiled pass over ``stream``'s draws (every
    sample's median of each resample from counts, numpy's values)."""
    samples = [values for _, job in medians for values in job.medians]
    out = stream.medians(len(medians[0][0]), samples)
    column = 0
    for theta, job in medians:
        parts = out[:, column : column + len(job.medians)]
        column += len(job.medians)
        if job.floor:
            parts = np.floor(parts)
        theta[:] = parts[:, 0] if parts.shape[1] == 1 else parts[:, 0] - parts[:, 1]


#: What the compiled pass saves per draw and statistic against numpy's draw and gather (about
#: 0.9 ns on 2 cores of an AMD EPYC, ``benchmarks/bench_stats.py``), and what it costs to start:
#: numba's import and its first kernels in a process (0.4-0.5 s), or its kernels alone once
#: numba runs in the process (about 0.1 s).
COMPILED_SAVING_S = 0.9e-9
COMPILED_START_S = (0.5, 0.1)


def _compiled_pays(draws: int, statistics: int) -> bool:
    """Whether the compiled pass costs less than numpy's calls for ``draws`` draws shared by
    ``statistics`` statistics (a 60,502-query interval with 10,000 resamples: yes; a report of
    2,000 queries: no, unless numba already runs in the process)."""
    start = COMPILED_START_S[1] if "numba" in sys.modules else COMPILED_START_S[0]
    return draws * (1 + statistics) * COMPILED_SAVING_S > start


class _Packed:
    """Means of integer values, several to an int64 word: value ``v`` of a vector becomes
    ``v - low`` in a field of ``bits`` bits (enough for the sum of ``width`` of them), so that
    one gather and one integer sum per word give every field's resampled sums, exactly; each
    mean is that sum divided by ``width`` (``np.mean``'s own division of its exact sum)."""

    def __init__(self, jobs: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
        self.words: list[tuple[np.ndarray, list[tuple[np.ndarray, int, int, int]]]] = []
        word, fields, used = None, [], 0
        for theta, values in jobs:
            width = values.size
            low = int(np.min(values))
            bits = max(1, (width * (int(np.max(values)) - low)).bit_length())
            if word is None or used + bits > 63:
                if word is not None:
                    self.words.append((word, fields))
                word, fields, used = np.zeros(width, dtype=np.int64), [], 0
            word += (values - low).astype(np.int64) << used
            fields.append((theta, used, bits, low * width))
            used += bits
        if word is not None:
            self.words.append((word, fields))

    def matrix(self, width: int) -> np.ndarray:
        """The words, one row each: a ``(W, width)`` int64 array."""
        if not self.words:
            return np.zeros((0, width), dtype=np.int64)
        return np.stack([word for word, _ in self.words])

    def unpack(self, sums: np.ndarray, start: int) -> None:
        """The means of the resamples whose word sums are ``sums`` (``(m, W)``), from row
        ``start``."""
        m = sums.shape[0]
        for w, (word, fields) in enumerate(self.words):
            for theta, shift, bits, offset in fields:
                field = (sums[:, w] >> shift) & ((1 << bits) - 1)
                theta[start : start + m] = (field + offset).astype(np.float64) / word.size

    def add(self, idx: np.ndarray, start: int) -> None:
        """The means of the resamples ``idx`` (an ``(m, width)`` batch) from row ``start``."""
        if self.words:
            sums = np.stack([np.sum(word[idx], axis=-1) for word, _ in self.words], axis=1)
            self.unpack(sums, start)


def _product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x @ y`` on one BLAS thread: small products, which a second thread only slows on a busy
    machine."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1, user_api="blas"):
        return x @ y


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


def _one(values: Any, statistic: Any, groups: Any, func: str, name: str) -> Job:
    """The job of a statistic of one system's values (of its classes' statistics with
    ``groups``), its form checked on the values first."""
    values = as_values(values, func, name)
    reduce = _statistic(statistic, func)
    if groups is not None:
        codes = _groups(groups, values.size, func, repr(name))
        values, reduce = _class_statistics(values, codes, reduce, func), np.mean
    else:
        _scalar(reduce, values, func)  # a statistic of the wrong form fails before resampling
    if reduce is np.mean:
        return _mean_job(values)
    job = Job(values.size, lambda idx: _rows(reduce, values[idx], func))
    return _as_median(job, reduce, (values,))


def _paired(
    a: Any, b: Any, statistic: Any, groups: Any, func: str, names: tuple[str, str] = ("a", "b")
) -> tuple[float, Job]:
    """``statistic(a) - statistic(b)`` and the job of its paired resamples."""
    a, b = _pair(a, b, func, names)
    reduce = _statistic(statistic, func)
    if groups is not None:
        codes = _groups(groups, a.size, func, f"{names[0]!r} and {names[1]!r}")
        a = _class_statistics(a, codes, reduce, func)
        b = _class_statistics(b, codes, reduce, func)
        reduce = np.mean
    difference = float(_scalar(reduce, a, func) - _scalar(reduce, b, func))
    if reduce is np.mean:  # one gather: the mean of the differences
        return difference, _mean_job(a - b)
    job = Job(a.size, lambda idx: _rows(reduce, a[idx], func) - _rows(reduce, b[idx], func))
    return difference, _as_median(job, reduce, (a, b))


def _each(value: Any, count: int, func: str, name: str, single: Callable[[Any], bool]) -> list:
    """``value`` for each of ``count`` samples: itself ``count`` times when ``single(value)``,
    else a sequence of ``count`` items."""
    if single(value):
        return [value] * count
    if isinstance(value, str) or not isinstance(value, Sequence) or len(value) != count:
        raise fail(
            func, name, f"one for all or a sequence of {count} (one per sample)", repr(value)
        )
    return list(value)


def _samples(samples: Any, func: str, name: str) -> list:
    if isinstance(samples, str | np.ndarray) or not isinstance(samples, Sequence) or not samples:
        raise fail(func, name, "a non-empty sequence", type(samples).__name__)
    return list(samples)


def _resampling(n_resamples: Any, seed: Any, batch: Any, func: str) -> tuple[int, int, int | None]:
    """``n_resamples``, ``seed`` and ``batch``, checked."""
    return (
        check_positive_int(n_resamples, func, "n_resamples"),
        check_seed(seed, func),
        check_batch(batch, func),
    )


def _pairs(pairs: Any, func: str) -> list[tuple[Any, Any, tuple[str, str]]]:
    """Each pair ``(a, b)`` with the names its two sides take in errors."""
    out = []
    for i, pair in enumerate(_samples(pairs, func, "pairs")):
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise fail(func, f"pairs[{i}]", "a pair (a, b) of value arrays", type(pair).__name__)
        out.append((pair[0], pair[1], (f"pairs[{i}][0]", f"pairs[{i}][1]")))
    return out


def _is_statistic(statistic: Any) -> bool:
    return isinstance(statistic, str) or callable(statistic)


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
    n_resamples, seed, batch = _resampling(n_resamples, seed, batch, func)
    confidence = check_unit_interval(confidence, func, "confidence")
    job = _one(values, statistic, groups, func, "values")
    theta = _bootstrap_distributions([job], n_resamples, seed, batch)[0]
    return _percentile_interval(theta, confidence)


def bootstrap_intervals(
    samples: Sequence[Any],
    statistic: Statistic | Sequence[Statistic] = "mean",
    *,
    groups: Sequence[Any] | None = None,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
    batch: int | None = None,
) -> list[tuple[float, float]]:
    """The percentile bootstrap intervals of several samples, drawn once: each equal, bit for
    bit, to [`bootstrap_interval`][bootstrap_interval]'s of that sample alone.

    The samples of one length (classes with ``groups``) share one draw of indices: each batch is
    drawn once and every sample's statistic computed on it, so that the intervals of every
    metric of every run cost one draw (the draw of one interval, alone, is the larger part of
    its time).

    Parameters
    ----------
    samples : sequence of array_like of float, each of shape (n_i,)
        The values of each sample (one finite value per query).
    statistic : "mean", callable, or a sequence of them (one per sample), default "mean"
        The statistic of every sample, or of each.
    groups : sequence of (array_like of int or None), optional
        Per sample, the class of each value (resample classes) or ``None`` (resample values).
    n_resamples, confidence, seed, batch
        As in [`bootstrap_interval`][bootstrap_interval], for every sample.

    Returns
    -------
    list of (low, high)
        One interval per sample, in order.

    Raises
    ------
    ValueError
        If an argument is not of the form described above; a sample is named by its index.

    Examples
    --------
    >>> bootstrap_intervals([[0.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]], n_resamples=1000)
    [(0.25, 1.0), (0.0, 1.0)]
    """
    func = "bootstrap_intervals"
    samples = _samples(samples, func, "samples")
    statistics = _each(statistic, len(samples), func, "statistic", _is_statistic)
    groups = _each(groups, len(samples), func, "groups", lambda g: g is None)
    n_resamples, seed, batch = _resampling(n_resamples, seed, batch, func)
    confidence = check_unit_interval(confidence, func, "confidence")
    jobs = [
        _one(x, f, g, func, f"samples[{i}]")
        for i, (x, f, g) in enumerate(zip(samples, statistics, groups, strict=True))
    ]
    thetas = _bootstrap_distributions(jobs, n_resamples, seed, batch)
    return [_percentile_interval(theta, confidence) for theta in thetas]


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
    confidence = check_unit_interval(confidence, "paired_bootstrap", "confidence")
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

    Parameters
    ----------
    a, b : array_like of float, shape (n,)
        One finite value per query under each system, the same queries in the same order.
    statistic : "mean" or callable, default "mean"
        As in [`paired_bootstrap`][paired_bootstrap].
    groups : array_like of int, shape (n,), optional
        The class of each query: resample classes instead of queries.
    n_resamples : int, default 10000
        The number of resamples.
    seed : int, default 0
        The seed of ``numpy.random.default_rng``.
    batch : int, optional
        Resamples drawn at once (memory only; the draws do not depend on it).
    func : str, default "paired_bootstrap_distribution"
        The function named in errors.

    Returns
    -------
    (difference, resampled) : tuple of float and ndarray of shape (n_resamples,)

    >>> d, resampled = paired_bootstrap_distribution([1.0, 0.0], [0.0, 0.0], n_resamples=4)
    >>> d, resampled.tolist()
    (0.5, [0.0, 0.5, 1.0, 1.0])
    """
    n_resamples, seed, batch = _resampling(n_resamples, seed, batch, func)
    difference, job = _paired(a, b, statistic, groups, func)
    return difference, _bootstrap_distributions([job], n_resamples, seed, batch)[0]


def paired_bootstrap_distributions(
    pairs: Sequence[tuple[Any, Any]],
    statistic: Statistic | Sequence[Statistic] = "mean",
    *,
    groups: Sequence[Any] | None = None,
    n_resamples: int = 10_000,
    seed: int = 0,
    batch: int | None = None,
) -> list[tuple[float, np.ndarray]]:
    """The differences and paired bootstrap resamples of several pairs, drawn once: each equal,
    bit for bit, to [`paired_bootstrap_distribution`][paired_bootstrap_distribution]'s of that
    pair alone (the pairs of one length share one draw of indices).

    Parameters
    ----------
    pairs : sequence of (a, b)
        Each pair's values under two systems, the same queries in the same order.
    statistic : "mean", callable, or a sequence of them (one per pair), default "mean"
        The statistic of every pair, or of each.
    groups : sequence of (array_like of int or None), optional
        Per pair, the class of each query (resample classes) or ``None``.
    n_resamples, seed, batch
        As in [`paired_bootstrap`][paired_bootstrap], for every pair.

    Returns
    -------
    list of (difference, resampled)
        Per pair, ``statistic(a) - statistic(b)`` and its ``n_resamples`` resamples (ndarray of
        shape (n_resamples,)); [`percentile_interval`][percentile_interval] of them is the pair's
        [`paired_bootstrap`][paired_bootstrap] interval.

    Raises
    ------
    ValueError
        If an argument is not of the form described above; a pair is named by its index.

    Examples
    --------
    >>> [(d, r.tolist()) for d, r in paired_bootstrap_distributions(
    ...     [([1.0, 0.0], [0.0, 0.0]), ([1.0, 1.0], [0.0, 1.0])], n_resamples=4)]
    [(0.5, [0.0, 0.5, 1.0, 1.0]), (0.5, [0.0, 0.5, 1.0, 1.0])]
    """
    func = "paired_bootstrap_distributions"
    pairs = _pairs(pairs, func)
    statistics = _each(statistic, len(pairs), func, "statistic", _is_statistic)
    groups = _each(groups, len(pairs), func, "groups", lambda g: g is None)
    n_resamples, seed, batch = _resampling(n_resamples, seed, batch, func)
    made = [
        _paired(a, b, f, g, func, names)
        for (a, b, names), f, g in zip(pairs, statistics, groups, strict=True)
    ]
    thetas = _bootstrap_distributions([job for _, job in made], n_resamples, seed, batch)
    return [(d, theta) for (d, _), theta in zip(made, thetas, strict=True)]


def percentile_interval(resampled: Any, confidence: float = 0.95) -> tuple[float, float]:
    """The two-sided percentile interval of resampled statistics: their ``(1 - confidence) /
    2`` and ``(1 + confidence) / 2`` quantiles (linear interpolation), as
    [`bootstrap_interval`][bootstrap_interval] and [`paired_bootstrap`][paired_bootstrap] give it.

    Parameters
    ----------
    resampled : array_like of float, shape (n_resamples,)
        The resampled statistics (finite).
    confidence : float, default 0.95
        The confidence level, in (0, 1).

    Returns
    -------
    (low, high) : tuple of float

    Examples
    --------
    >>> percentile_interval([0.0, 0.5, 1.0, 1.0], 0.5)
    (0.375, 1.0)
    """
    func = "percentile_interval"
    confidence = check_unit_interval(confidence, func, "confidence")
    return _percentile_interval(
        as_values(resampled, func, "resampled", "one per resample"), confidence
    )


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
        self.n = a.size
        self.at_most = self.at_least = 0
        observed = np.float64(_scalar(reduce, a, func) - _scalar(reduce, b, func))
        gamma = abs(np.finfo(np.float64).eps * 100 * observed)
        self.low, self.high = observed - gamma, observed + gamma

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

    def add(self, kept: np.ndarray, sums: np.ndarray | None = None) -> None:
        null = self.differences(kept)
        self.at_most += int(np.count_nonzero(null <= self.high))
        self.at_least += int(np.count_nonzero(null >= self.low))

    def p_value(self, total: int, exact: bool) -> float:
        """Twice the smaller share of the counts (the observed difference counted as one more
        resample unless ``exact``), at most 1."""
        adjustment = 0 if exact else 1
        less = np.float64(self.at_most + adjustment) / (total + adjustment)
        greater = np.float64(self.at_least + adjustment) / (total + adjustment)
        return float(np.clip(min(less, greater) * 2, 0.0, 1.0))


class _MeanNull(_Null):
    """The same counts for the mean, fast: each difference is first computed as
    ``(2 * sum(d[kept]) - sum(d)) / n`` (``d = a - b``; the sums of every mean of a batch of
    swaps are one matrix product, shared by the pairs of one length), which is within ``bound``
    of scipy's (two sums in order of each side's values); only the resamples that fall within
    ``bound`` of ``low`` or ``high`` (exact ties with the observed difference, mostly) are
    computed again as scipy computes them."""

    def __init__(self, a: np.ndarray, b: np.ndarray, func: str):
        super().__init__(a, b, np.mean, func)
        n = a.size
        self.d = a - b
        self.total = np.sum(self.d)
        # Rounding, in units of u * scale (u = eps / 2): scipy's difference (each side summed
        # in order, divided by n, subtracted) is within 2n + 2 of the exact one; the fast one
        # (d rounded, its two sums in any order, 2X - D, the division) within 6n + 4; MARGIN
        # (n + 2) covers both. The last term covers sums that underflow.
        scale = np.sum(np.maximum(np.abs(a), np.abs(b))) / n
        self.bound = MARGIN * (n + 2) * (np.finfo(np.float64).eps / 2) * scale + 1e-300

    def add(self, kept: np.ndarray, sums: np.ndarray | None = None) -> None:
        """Count a batch: ``sums``, when given, is ``kept @ d`` (computed for several pairs at
        once), else computed here."""
        m = kept.shape[0]
        if sums is None:
            sums = np.sum(np.multiply(kept, self.d), axis=1)
        self.count(sums, lambda k: kept[k], lambda k: m == 1)

    def count(
        self,
        sums: np.ndarray,
        row: Callable[[int], np.ndarray],
        alone: Callable[[int], bool],
    ) -> None:
        """Count resamples from their sums of ``d`` over the kept pairs (in any order); those
        near a threshold again as scipy computes them, from ``row(k)``, resample ``k``'s kept
        flags, summed pairwise where ``alone(k)`` (a batch of one resample)."""
        n = self.n
        low, high = self.low, self.high
        fast = (2 * sums - self.total) / n
        near = ~(np.abs(fast - high) > self.bound) | ~(np.abs(fast - low) > self.bound)
        self.at_most += int(np.count_nonzero((fast <= high) & ~near))
        self.at_least += int(np.count_nonzero((fast >= low) & ~near))
        for k in np.flatnonzero(near):
            side_a, side_b = self.sides(row(k)[:, None] == 0)
            if alone(k):  # one resample in the batch: scipy sums it pairwise
                null = np.mean(side_a[:, 0]) - np.mean(side_b[:, 0])
            else:
                null = (
                    np.add.accumulate(side_a[:, 0])[-1] / n
                    - np.add.accumulate(side_b[:, 0])[-1] / n
                )
            self.at_most += int(null <= high)
            self.at_least += int(null >= low)


def _null(a: Any, b: Any, statistic: Any, func: str, names: tuple[str, str] = ("a", "b")) -> _Null:
    a, b = _pair(a, b, func, names)
    reduce = _statistic(statistic, func)
    return _MeanNull(a, b, func) if reduce is np.mean else _Null(a, b, reduce, func)


def _randomization_p_values(
    nulls: Sequence[_Null], n_resamples: int, seed: int, batch: int | None
) -> list[float]:
    """Each null's p-value; the nulls of one length share their swap patterns (drawn once a
    batch) and, for the mean, one matrix product a batch. Where the work pays numba's start,
    a compiled pass draws the same swaps and counts each median's resamples
    ([`_compiled_median`][_compiled_median]) and the means' ([`_compiled_swaps`][_compiled_swaps])
    as it draws."""
    out: dict[int, float] = {}
    for n in dict.fromkeys(null.n for null in nulls):
        chosen = [null for null in nulls if null.n == n]
        exact = n < 64 and (1 << n) <= n_resamples
        total = 1 << n if exact else n_resamples
        rest = chosen
        if not exact and _compiled_pays(total * n, len(chosen)):
            rest = [null for null in chosen if not _compiled_median(null, total, seed)]
            means = [null for null in rest if isinstance(null, _MeanNull)]
            if len(means) == len(rest) and (
                not means or _compiled_swaps(means, total, seed, batch)
            ):
                rest = []
        means = [null for null in rest if isinstance(null, _MeanNull)]
        column = {id(null): j for j, null in enumerate(means)}
        d = np.stack([null.d for null in means], axis=1) if len(means) > 1 else None
        for kept in _kept(n, total, exact, batch, seed) if rest else ():
            sums = None if d is None else _product(kept.astype(np.float64), d)
            for null in rest:
                j = column.get(id(null))
                null.add(kept, None if sums is None or j is None else sums[:, j])
        out.update((id(null), null.p_value(total, exact)) for null in chosen)
    return [out[id(null)] for null in nulls]


def _compiled_median(null: _Null, total: int, seed: int) -> bool:
    """Count a median's resamples ([`Median`][Median], ``np.median``) by the compiled pass,
    where it agrees with numpy: scipy's swaps drawn and both sides' medians taken from counts
    ([`Stream.swapped_medians`][recallkit._resampling.Stream.swapped_medians]); ``False`` for
    another statistic, or where it does not agree (nothing counted)."""
    if null.reduce is not np.median and not isinstance(null.reduce, Median):
        return False
    from recallkit import _resampling as compiled

    rng = np.random.default_rng(seed)
    if not compiled.usable(rng, 2):
        return False
    sides = compiled.Stream(rng, 2).swapped_medians(total, null.a, null.b)
    if getattr(null.reduce, "floor", False):
        sides = np.floor(sides)
    differences = sides[:, 0] - sides[:, 1]
    null.at_most += int(np.count_nonzero(differences <= null.high))
    null.at_least += int(np.count_nonzero(differences >= null.low))
    return True


def _compiled_swaps(means: Sequence[_MeanNull], total: int, seed: int, batch: int | None) -> bool:
    """Count the means' resamples by the compiled pass, where it pays and agrees with numpy:
    scipy's swaps drawn and each mean's sums taken as they are drawn
    ([`Stream.kept_sums`][recallkit._resampling.Stream.kept_sums]); ``False`` where it does not
    (nothing counted)."""
    n = means[0].n
    if not _compiled_pays(total * n, len(means)):
        return False
    from recallkit import _resampling as compiled

    rng = np.random.default_rng(seed)
    if not compiled.usable(rng, 2):
        return False
    d = np.ascontiguousarray(np.stack([null.d for null in means], axis=1))
    sums, starts = compiled.Stream(rng, 2).kept_sums(total, d)
    alone, start = set(), 0  # the resamples drawn in a batch of their own
    for m in _sizes(total, batch, n):
        if m == 1:
            alone.add(start)
        start += m
    for j, null in enumerate(means):
        null.count(sums[:, j], lambda k: compiled.Stream.kept_row(starts[k], n), alone.__contains__)
    return True


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
    null = _null(a, b, statistic, func)
    n_resamples, seed, batch = _resampling(n_resamples, seed, batch, func)
    return _randomization_p_values([null], n_resamples, seed, batch)[0]


def randomization_tests(
    pairs: Sequence[tuple[Any, Any]],
    statistic: Statistic | Sequence[Statistic] = "mean",
    *,
    n_resamples: int = 10_000,
    seed: int = 0,
    batch: int | None = None,
) -> list[float]:
    """The p-values of several pairs by Fisher's paired randomization test, their swaps drawn
    once: each equal to [`randomization_test`][randomization_test]'s of that pair alone (the
    pairs of one length share one draw of swap patterns, and for the mean one matrix product a
    batch).

    Parameters
    ----------
    pairs : sequence of (a, b)
        Each pair's values under two systems, the same queries in the same order.
    statistic : "mean", callable, or a sequence of them (one per pair), default "mean"
        The statistic of every pair, or of each.
    n_resamples, seed, batch
        As in [`randomization_test`][randomization_test], for every pair.

    Returns
    -------
    list of float
        One two-sided p-value per pair, in order.

    Raises
    ------
    ValueError
        If an argument is not of the form described above; a pair is named by its index.

    Examples
    --------
    >>> randomization_tests([([1.0, 0.0, 2.0], [0.0, 1.0, 0.0]), ([1.0, 1.0], [0.0, 0.0])])
    [0.75, 0.5]
    """
    func = "randomization_tests"
    pairs = _pairs(pairs, func)
    statistics = _each(statistic, len(pairs), func, "statistic", _is_statistic)
    nulls = [
        _null(a, b, f, func, names) for (a, b, names), f in zip(pairs, statistics, strict=True)
    ]
    n_resamples, seed, batch = _resampling(n_resamples, seed, batch, func)
    return _randomization_p_values(nulls, n_resamples, seed, batch)


def mcnemar_test(a: Any, b: Any) -> float:
    """The two-sided p-value of McNemar's exact test (the exact sign test on the discordant
    pairs) for paired 0/1 values, such as two systems' recall@K hits on the same queries.

    Of the ``n`` queries that only one system gets right (``b`` only ``a``, ``c`` only ``b``),
    under the null hypothesis each is either system's with probability 1/2: the p-value is
    ``P(X <= min(b, c)) + P(X >= max(b, c))`` for ``X ~ Binomial(n, 1/2)``, at most 1, computed
    exactly (integer arithmetic, one rounding at the end); the queries both get right or both
    miss do not count. It equals ``scipy.stats.binomtest(b, b + c, 0.5).pvalue``. No
    resampling: no seed, no Monte-Carlo error.

    Parameters
    ----------
    a, b : array_like of float, shape (n,)
        Each query's value under each system, every value 0 or 1, the same queries in the same
        order.

    Returns
    -------
    float
        The two-sided p-value, in (0, 1]; 1 when no query is discordant.

    Raises
    ------
    ValueError
        If ``a`` or ``b`` is not a 1-D array of 0s and 1s, or they differ in length.

    Examples
    --------
    Ten queries only ``a`` gets right, two only ``b`` does: ``2 P(X <= 2)`` for ``X ~
    Binomial(12, 1/2)``, ``2 (1 + 12 + 66) / 4096``:

    >>> mcnemar_test([1.0] * 10 + [0.0] * 2 + [1.0] * 5, [0.0] * 10 + [1.0] * 2 + [1.0] * 5)
    0.03857421875
    """
    func = "mcnemar_test"
    a, b = _pair(a, b, func)
    for name, x in (("a", a), ("b", b)):
        other = (x != 0) & (x != 1)
        if other.any():
            index = int(np.argmax(other))
            raise fail(
                func,
                name,
                "values 0 or 1 (a miss or a hit per query)",
                f"{x[index]} at index {index}",
            )
    only_a = int(np.count_nonzero(a > b))
    only_b = int(np.count_nonzero(b > a))
    n, k = only_a + only_b, min(only_a, only_b)
    if 2 * k == n:  # no discordant query, or as many each way: the centre of the distribution
        return 1.0
    term = tail = 1  # C(n, 0); then C(n, i) for i <= k, summed
    for i in range(k):
        term = term * (n - i) // (i + 1)
        tail += term
    return float(min(Fraction(1), Fraction(2 * tail, 1 << n)))


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
    p = as_values(p, func, "pvalues", "one p-value per hypothesis")
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
