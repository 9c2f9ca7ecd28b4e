"""How per-query values become a metric's value: which queries count, and over what it averages.

Every label-form metric has a value per query
([`recallkit.metrics.Metric.values`][recallkit.metrics.Metric.values]) and a summary of such values
([`summarize`][recallkit.metrics.Metric.summarize]: the mean, or MedR's median). This module applies
the two options that choose what is summarised, the same way for every metric and every entry point:

* ``lone_queries`` ([`recallkit.options.LONE_QUERIES`][recallkit.options.LONE_QUERIES]): ``"skip"``
  counts the evaluated queries only (a lone query, with no relevant reference item, is left out);
  ``"zero"`` counts every query, a lone one at the metric's
  [`lone_value`][recallkit.metrics.Metric.lone_value] (0; a rank metric, which has none, refuses
  ``"zero"``: [`check`][check]); ``"error"`` refuses lone queries before anything is computed.
* ``average`` ([`recallkit.options.AVERAGES`][recallkit.options.AVERAGES]): ``"query"`` (the
  default) summarises the counted queries' values; ``"class"`` summarises each class's counted
  queries (a class is a query label), then takes the unweighted mean over the classes that have a
  counted query: every class weighs the same, however many queries it has (pytorch-metric-learning's
  ``avg_of_avgs``; the per-class accuracy of Musgrave et al. 2020's class-balanced results).

Class averages follow PML's arithmetic, so that they equal PML's ``avg_of_avgs`` to the last
bit: a class's mean is its float64 sum over all counted queries in query order, the other
classes' values counted as zeros, as ``torch.sum`` adds them, divided by its count; the mean
over classes (in increasing order of label code) is ``torch.mean``. Both run on one thread, so
the value does not depend on the thread count.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np

from recallkit.exceptions import Text, fail
from recallkit.metrics import Metric
from recallkit.options import AVERAGES, Options

__all__ = ["AVERAGES", "by_class", "check", "counted", "summarize"]

# Bytes of the zero-padded rows that one step of the class sums fills.
_CLASS_SUM_BYTES = 64 * 2**20


def check(metrics: Sequence[Metric], lone_queries: str, func: str) -> None:
    """Refuse ``lone_queries="zero"`` for a metric that has no value for a lone query."""
    if lone_queries != "zero":
        return
    for metric in metrics:
        if metric.lone_value is None:
            raise fail(
                func,
                "lone_queries",
                Text(
                    f"{{skip}} or {{error}} with {metric.name} (lower is better: a query without "
                    "a relevant item has no rank to count, and 0 would be better than every "
                    "rank)",
                    skip=("lone_queries", "skip"),
                    error=("lone_queries", "error"),
                ),
                "'zero'",
            )


def counted(
    metric: Metric, values: np.ndarray, evaluated: np.ndarray, lone_queries: str
) -> tuple[np.ndarray, np.ndarray]:
    """The values that count, and the mask of the queries they belong to: the evaluated ones
    (``"skip"``), or every query, a lone one at the metric's lone value (``"zero"``)."""
    if lone_queries == "zero":
        return np.where(evaluated, values, metric.lone_value), np.ones(len(values), dtype=bool)
    return values[evaluated], evaluated


def summarize(
    metric: Metric,
    values: np.ndarray,
    evaluated: np.ndarray,
    options: Options,
    classes: np.ndarray | None,
) -> float:
    """The metric's value from its per-query ``values`` (NaN at lone queries) under the
    value-changing ``options``: over the queries that count (``options.lone_queries``), or
    (``options.average="class"``) the mean over classes of each class's summary (``classes``
    holds each query's label code). NaN when no query counts. The one place that reads the
    options that change values: a new one is read here."""
    kept, mask = counted(metric, values, evaluated, options.lone_queries)
    if options.average == "query":
        return metric.summarize(kept)
    _, per_class = by_class(metric, kept, classes[mask])
    if not len(per_class):
        return math.nan
    import torch  # loaded on first use: what reads per-query values alone needs numpy only

    with _one_thread():
        return float(torch.mean(torch.from_numpy(per_class)).item())


def by_class(
    metric: Metric, values: np.ndarray, classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, summaries)``: the classes present in ``classes`` (label codes, increasing) and
    each one's summary of its ``values`` (PML's arithmetic for the mean: module docstring).

    >>> from recallkit.metrics import MAPAtR
    >>> values, classes = np.array([1.0, 0.5, 0.0, 0.25]), np.array([4, 2, 4, 2])
    >>> codes, means = by_class(MAPAtR(), values, classes)
    >>> codes.tolist(), means.tolist()
    ([2, 4], [0.375, 0.5])
    """
    codes, inverse = np.unique(np.asarray(classes, dtype=np.int64), return_inverse=True)
    inverse = inverse.reshape(-1)
    if type(metric).summarize is not Metric.summarize:  # another summary: class by class
        order = np.argsort(inverse, kind="stable")
        cuts = np.searchsorted(inverse[order], np.arange(len(codes) + 1))
        out = [metric.summarize(values[order[a:b]]) for a, b in itertools.pairwise(cuts)]
        return codes, np.asarray(out, dtype=np.float64)
    counts = np.bincount(inverse, minlength=len(codes))
    return codes, _class_sums(values, inverse, len(codes)) / counts


def _class_sums(values: np.ndarray, inverse: np.ndarray, num_classes: int) -> np.ndarray:
    """Each class's float64 sum as ``torch.sum`` adds a length-``n`` row holding the class's
    values at their positions and zeros elsewhere (PML's order), a bounded number of rows at a
    time."""
    import torch

    n = len(values)
    sums = np.empty(num_classes, dtype=np.float64)
    if n == 0:
        return sums
    step = max(1, min(num_classes, _CLASS_SUM_BYTES // (8 * n)))
    order = np.argsort(inverse, kind="stable")
    cuts = np.searchsorted(inverse[order], np.arange(num_classes + 1))
    rows = torch.zeros((step, n), dtype=torch.float64)
    flat = rows.view(-1)
    source = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    with _one_thread():
        for first in range(0, num_classes, step):
            count = min(step, num_classes - first)
            where = order[cuts[first] : cuts[first + count]]
            cells = torch.from_numpy((inverse[where] - first) * n + where)
            flat[cells] = source[torch.from_numpy(where)]
            sums[first : first + count] = rows[:count].sum(dim=1).numpy()
            flat[cells] = 0.0
    return sums


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
