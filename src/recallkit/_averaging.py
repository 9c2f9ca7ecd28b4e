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

A class average does not depend on the order of the queries: a class's mean is the correctly
rounded sum of its counted values ([`math.fsum`][math.fsum], exact whatever the order in which they
are added) divided by their count, and the mean over classes is the correctly rounded sum of the
classes' values, by increasing class code, divided by their number. Any permutation of the rows
gives the same value, bit for bit, on every machine.

pytorch-metric-learning's ``avg_of_avgs`` adds each class's values with ``torch.sum`` in query
order, so its last bit moves when the rows are permuted. The PML drop-in
([`recallkit.pml.RecallCalculator`][recallkit.pml.RecallCalculator]) keeps PML's contract, that
arithmetic included: [`pml_avg_of_avgs`][pml_avg_of_avgs] reproduces it bit for bit (one thread,
so the value does not depend on the thread count either).
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

__all__ = ["AVERAGES", "by_class", "check", "counted", "pml_avg_of_avgs", "summarize"]

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
    options that change values: a new one is read here.

    >>> from recallkit.metrics import MAPAtR
    >>> values, classes = np.array([1.0, 0.5, 0.0, 0.25]), np.array([4, 2, 4, 2])
    >>> everyone = np.ones(4, dtype=bool)
    >>> summarize(MAPAtR(), values, everyone, Options(average="class"), classes)
    0.4375
    """
    kept, mask = counted(metric, values, evaluated, options.lone_queries)
    if options.average == "query":
        return metric.summarize(kept)
    _, per_class = by_class(metric, kept, classes[mask])
    if not len(per_class):
        return math.nan
    return math.fsum(per_class.tolist()) / len(per_class)


def _groups(classes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes, order, cuts)``: the classes present (increasing), the rows grouped by class
    (``order``; class ``i``'s rows are ``order[cuts[i]:cuts[i + 1]]``) and the boundaries."""
    codes, inverse = np.unique(np.asarray(classes, dtype=np.int64), return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    cuts = np.searchsorted(inverse[order], np.arange(len(codes) + 1))
    return codes, order, cuts


def by_class(
    metric: Metric, values: np.ndarray, classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, summaries)``: the classes present in ``classes`` (label codes, increasing) and
    each one's summary of its ``values``, whatever their order (module docstring): a mean is
    the correctly rounded sum over the count, any other summary (MedR's median) is taken over
    the class's values sorted.

    >>> from recallkit.metrics import MAPAtR
    >>> values, classes = np.array([1.0, 0.5, 0.0, 0.25]), np.array([4, 2, 4, 2])
    >>> codes, means = by_class(MAPAtR(), values, classes)
    >>> codes.tolist(), means.tolist()
    ([2, 4], [0.375, 0.5])
    """
    codes, order, cuts = _groups(classes)
    grouped = np.asarray(values, dtype=np.float64)[order]
    if type(metric).summarize is not Metric.summarize:  # another summary: class by class
        out = [metric.summarize(np.sort(grouped[a:b])) for a, b in itertools.pairwise(cuts)]
        return codes, np.asarray(out, dtype=np.float64)
    flat = grouped.tolist()
    sums = [math.fsum(flat[a:b]) for a, b in itertools.pairwise(cuts)]
    return codes, np.asarray(sums, dtype=np.float64) / np.diff(cuts)


def pml_avg_of_avgs(
    metric: Metric,
    values: np.ndarray,
    evaluated: np.ndarray,
    lone_queries: str,
    classes: np.ndarray,
    per_class: bool = False,
) -> float | list[float]:
    """PML's ``avg_of_avgs`` (or, with ``per_class``, its ``return_per_class`` list) of a
    metric's per-query ``values`` (NaN at lone queries), in PML's arithmetic: each class's
    float64 sum over all counted queries in query order, the other classes' values counted as
    zeros, as ``torch.sum`` adds them, over its count; then ``torch.mean`` over the classes in
    increasing order of code. Equal to PML's to the last bit for the same rows in the same
    order (and, like PML's, moved in the last bit by a permutation of the rows); the PML
    drop-in's arithmetic ([`recallkit.pml.RecallCalculator`][recallkit.pml.RecallCalculator]).

    >>> from recallkit.metrics import MAPAtR
    >>> values, classes = np.array([1.0, 0.5, 0.0, 0.25]), np.array([4, 2, 4, 2])
    >>> pml_avg_of_avgs(MAPAtR(), values, np.ones(4, dtype=bool), "skip", classes)
    0.4375
    """
    kept, mask = counted(metric, values, evaluated, lone_queries)
    codes, order, cuts = _groups(np.asarray(classes)[mask])
    if type(metric).summarize is not Metric.summarize:
        means = np.asarray(
            [metric.summarize(kept[order[a:b]]) for a, b in itertools.pairwise(cuts)],
            dtype=np.float64,
        )
    else:
        inverse = np.empty(len(order), dtype=np.int64)
        inverse[order] = np.repeat(np.arange(len(codes)), np.diff(cuts))
        means = _class_sums(kept, inverse, len(codes)) / np.diff(cuts)
    if per_class:
        return means.tolist()
    if not len(means):
        return math.nan
    import torch

    with _one_thread():
        return float(torch.mean(torch.from_numpy(means)).item())


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
