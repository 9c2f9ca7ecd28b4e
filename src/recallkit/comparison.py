"""Intervals for every metric of a run, and comparisons of two or more runs on the same queries.

A *run* is a label-form [`recallkit.Result`][recallkit.result.Result] (from
[`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics], the
[`Evaluator`][recallkit.evaluator.Evaluator],
[`evaluate_sharded`][recallkit.sharded.evaluate_sharded]), a run record (the dict of a run file) or
the path of a run file (``recallkit evaluate --json``, ``Evaluator(run_file=)``). Everything here
reads each query's value of each metric (run files of format ``recallkit.evaluation/4`` hold them;
older ones hold the first-hit ranks, from which recall@K is read) and the metric's own summary
([`recallkit.metrics.Metric.summarize`][recallkit.metrics.Metric.summarize]: the mean, or MedR's
median), so that every metric of the registry gets the same treatment:

* [`intervals`][intervals]: each metric's percentile bootstrap interval over the queries that count
  (``lone_queries`` as the run was computed), or over classes when its value averages classes
  (``average="class"``), beside its tie bounds ([`Interval`][Interval]);
* [`compare`][compare]: for every pair of runs (or each run against a ``baseline``) and every
  metric they share, the difference and its paired bootstrap interval (the effect size, in the
  metric's own units), a two-sided p-value (Fisher's paired randomization test by default, or
  the paired bootstrap), the p-values adjusted for the comparisons of each metric (Holm by
  default), and which runs cannot be told apart ([`Comparison`][Comparison]).

Runs are compared only when they pair: the same queries (by id and path, in any order), the
same labels, the same definitions (similarity, tie rule, exclusions, lone queries, averaging;
``recallkit.runfiles.definitions``) and the same lone queries. Otherwise [`compare`][compare] raises
``ValueError`` saying what differs. The statistics are [`recallkit.stats`][recallkit.stats]'s, equal
to scipy's with the same seed and resamples.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from recallkit import metrics as registry
from recallkit import stats
from recallkit._averaging import counted
from recallkit._inputs.codes import dense_codes
from recallkit._inputs.values import check_choice, check_unit_interval
from recallkit.exceptions import fail
from recallkit.options import Options
from recallkit.runfiles import records
from recallkit.runfiles.definitions import differences

__all__ = ["Comparison", "Interval", "PairedDifference", "RunData", "compare", "intervals"]

#: The paired tests [`compare`][compare] takes: ``"auto"`` is McNemar's exact test for 0/1
#: values and Fisher's randomization test for the others.
TESTS = ("auto", "randomization", "bootstrap")
#: How each test is named in text.
TEST_NAMES = {
    "auto": "McNemar's exact test for 0/1 values, Fisher's paired randomization test for the rest",
    "mcnemar": "McNemar's exact test",
    "randomization": "Fisher's paired randomization test",
    "bootstrap": "paired bootstrap test",
}
#: The corrections for multiple comparisons [`compare`][compare] takes.
CORRECTIONS = ("holm", "none")


@dataclass(frozen=True)
class RunData:
    """One run as the statistics read it: per metric each query's value (NaN for a lone
    query), which queries have a relevant item, their labels and pairing keys, the run's
    values, tie bounds and definitions."""

    name: str
    metrics: dict[str, float]
    values: dict[str, np.ndarray]
    evaluated: np.ndarray
    keys: list[tuple[str, str | None]]
    labels: list[Any] | None
    definitions: dict[str, Any] | None
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def options(self) -> Options:
        """The options the run's values were computed under, read back from its definitions
        ([`Options.from_definitions`][recallkit.options.Options.from_definitions])."""
        return Options.from_definitions(self.definitions, "intervals")

    @property
    def lone_queries(self) -> str:
        return self.options.lone_queries

    @property
    def average(self) -> str:
        return self.options.average

    @property
    def num_queries(self) -> int:
        return len(self.evaluated)

    def sample(self, name: str) -> tuple[registry.Metric, np.ndarray, np.ndarray | None]:
        """``(metric, values, groups)``: the values of metric ``name`` that its value
        summarises (the queries that count under the run's ``lone_queries``) and, when it
        averages classes, each one's class code (else ``None``)."""
        metric = registry.parse_one(name)
        if metric is None or name not in self.values:
            raise fail("intervals", "metrics", f"metrics of the run {self.name!r}", repr(name))
        kept, mask = counted(metric, self.values[name], self.evaluated, self.lone_queries)
        groups = None
        if self.average == "class":
            if self.labels is None:
                raise fail(
                    "intervals",
                    "run",
                    "a run with its queries' labels when its values average classes",
                    f"{self.name!r} without labels",
                )
            codes, _ = dense_codes(self.labels, [], ("labels", "labels"), "intervals")
            groups = codes[mask]
        return metric, kept, groups


def as_run(run: Any, name: str | None = None) -> RunData:
    """``run`` (a [`recallkit.Result`][recallkit.result.Result], a run record or the path of a run
    file) as [`RunData`][RunData], named ``name`` (default: the record's tag, or ``"run"``)."""
    from recallkit.result import Result

    if isinstance(run, RunData):
        return run
    if isinstance(run, Result):
        return _from_result(run, name or "run")
    if isinstance(run, str | os.PathLike):
        record = records.load_run(run)
        return _from_record(record, name or os.path.basename(os.fspath(run)))
    if isinstance(run, Mapping):
        record = records.check_run(dict(run), f"The run {name or run.get('tag') or 'run'}")
        return _from_record(record, name or str(run.get("tag") or "run"))
    raise fail("compare", "runs", "Results, run records or run file paths", type(run).__name__)


def _from_result(result: Any, name: str) -> RunData:
    if result.first_hit_ranks is None and not result.per_query:
        raise fail("intervals", "run", "a label-form result with per-query values", name)
    n = result.num_queries
    ids = result.query_ids if result.query_ids is not None else range(n)
    return RunData(
        name=name,
        metrics=dict(result),
        values={
            k: np.asarray(v, dtype=np.float64) for k, v in result.per_query.items() if k in result
        },
        evaluated=np.asarray(result.evaluated, dtype=bool),
        keys=[(str(i), None) for i in ids],
        labels=None if result.query_labels is None else list(result.query_labels),
        definitions=None if result.definitions is None else dict(result.definitions),
        bounds=dict(result.bounds),
    )


def _from_record(record: dict[str, Any], name: str) -> RunData:
    queries = record["queries"]
    ranks = np.asarray(queries["first_hit_rank"], dtype=np.int64)
    evaluated = ranks >= 0
    values = {
        k: np.asarray([math.nan if v is None else float(v) for v in column], dtype=np.float64)
        for k, column in (queries.get("values") or {}).items()
    }
    for k in record.get("ks", []):  # a run file before /4: recall@K from the ranks
        values.setdefault(
            registry.Recall(k).name,
            np.where(evaluated, (ranks < k).astype(np.float64), math.nan),
        )
    paths = queries.get("paths")
    if not isinstance(paths, list):
        paths = [None] * len(ranks)
    keys = [(str(i), p) for i, p in zip(queries["ids"], paths, strict=True)]
    metrics = {
        k: (math.nan if v is None else float(v)) for k, v in records.metrics_of(record).items()
    }
    for k in record.get("ks", []):  # a record without its values: recall@K from the ranks
        hits = values[registry.Recall(k).name][evaluated]
        metrics.setdefault(registry.Recall(k).name, float(hits.mean()) if len(hits) else math.nan)
    bounds = {k: (v[0], v[1]) for k, v in (record.get("bounds") or {}).items()}
    return RunData(
        name=name,
        metrics=metrics,
        values=values,
        evaluated=evaluated,
        keys=keys,
        labels=queries.get("labels"),
        definitions=record.get("definitions"),
        bounds=bounds,
    )


# ----------------------------------------------------------------------------------------------
# Intervals of one run.


@dataclass(frozen=True)
class Interval:
    """A metric's value with its bootstrap interval and its tie bounds.

    Attributes
    ----------
    value : float
        The metric's value (the run's own).
    low, high : float
        The percentile bootstrap interval at ``confidence``.
    pessimistic, optimistic : float
        The value with every exact tie broken against the queries, and in their favour.
    resampled : {"queries", "classes"}
        What the bootstrap resampled.
    confidence : float
        The interval's level.
    n_resamples : int
        The bootstrap resamples.
    seed : int
        The resampling seed.
    """

    value: float
    low: float
    high: float
    pessimistic: float
    optimistic: float
    resampled: str
    confidence: float
    n_resamples: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        """The interval in plain JSON types (NaN as ``None``).

        Returns
        -------
        dict
        """
        return {
            "value": _json(self.value),
            "low": _json(self.low),
            "high": _json(self.high),
            "pessimistic": _json(self.pessimistic),
            "optimistic": _json(self.optimistic),
            "resampled": self.resampled,
            "confidence": self.confidence,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
        }


def _json(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _statistic(metric: registry.Metric) -> Callable[..., Any] | str:
    """The metric's summary as the resampling functions take it (over the last axis)."""
    if type(metric).summarize is registry.Metric.summarize:
        return "mean"
    if type(metric).summarize is registry.MedianRank.summarize:
        return stats.Median(floor=True)  # MedR's floor(median): the bootstrap counts it
    return lambda x, axis=-1: metric.summarize(np.moveaxis(np.asarray(x), axis, -1))


def _class_statistic(metric: registry.Metric, groups: np.ndarray) -> Callable[..., Any]:
    """The mean over classes of each class's summary, over the last axis (classes fixed)."""
    order = np.argsort(groups, kind="stable")
    cuts = np.flatnonzero(np.r_[True, np.diff(groups[order]) != 0])
    ends = np.r_[cuts[1:], len(order)]
    mean = type(metric).summarize is registry.Metric.summarize

    def statistic(x: Any, axis: int = -1) -> Any:
        x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)[..., order]
        if mean:
            per = np.add.reduceat(x, cuts, axis=-1) / (ends - cuts)
        else:
            per = np.stack(
                [
                    np.asarray(metric.summarize(x[..., a:b]))
                    for a, b in zip(cuts, ends, strict=True)
                ],
                axis=-1,
            )
        return per.mean(axis=-1)

    return statistic


def intervals(
    run: Any,
    *,
    metrics: Sequence[str] | None = None,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Interval]:
    """Each metric's percentile bootstrap interval (Efron & Tibshirani 1993), beside its tie
    bounds.

    Parameters
    ----------
    run : Result, run record (dict) or path of a run file
        A label-form run (``as_run``).
    metrics : sequence of str, optional
        The metrics (names as in the run); default every label-form metric it holds.
    n_resamples : int, default 10_000
        Bootstrap resamples; each resample draws as many queries (or classes) as the run has,
        with replacement.
    confidence : float, default 0.95
        The interval's level.
    seed : int, default 0
        The resampling seed: the same seed gives the same interval.

    Returns
    -------
    dict of str to Interval
        Per metric, its value, ``low``/``high`` and its ``pessimistic``/``optimistic`` tie
        bounds. The queries resampled are those the value counts (``lone_queries`` of the run);
        a value averaged over classes (``average="class"``) resamples classes instead, each
        with all its queries. The interval equals ``scipy.stats.bootstrap(...,
        method="percentile")``'s on the same values with the same seed.

    >>> import numpy as np, recallkit
    >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2], [0.0, 1.0], [0.1, 0.9]])
    >>> r = recallkit.retrieval_metrics(x, x, [0, 0, 1, 1, 1], [0, 0, 1, 1, 1],
    ...                                 ["recall@1"], query_in_reference=True)
    >>> i = intervals(r, n_resamples=1000)["recall@1"]
    >>> i.value, i.low, i.high
    (0.8, 0.4, 1.0)
    """
    data = as_run(run)
    chosen = _label_form(data, metrics, "intervals")
    return _intervals([data], [chosen], n_resamples, confidence, seed)[0]


def _intervals(
    runs: Sequence[RunData],
    chosen: Sequence[Sequence[str]],
    n_resamples: int,
    confidence: float,
    seed: int,
) -> list[dict[str, Interval]]:
    """Each run's [`Interval`][Interval] of each of its chosen metrics, every interval from one
    draw of resamples per length
    ([`recallkit.stats.bootstrap_intervals`][recallkit.stats.bootstrap_intervals])."""
    samples = [(i, name, *run.sample(name)) for i, run in enumerate(runs) for name in chosen[i]]
    drawn = [(metric, values, groups) for _, _, metric, values, groups in samples if len(values)]
    found = iter(
        stats.bootstrap_intervals(
            [values for _, values, _ in drawn],
            [_statistic(metric) for metric, _, _ in drawn],
            groups=[groups for _, _, groups in drawn],
            n_resamples=n_resamples,
            confidence=confidence,
            seed=seed,
        )
        if drawn
        else ()
    )
    out: list[dict[str, Interval]] = [{} for _ in runs]
    for i, name, _, values, groups in samples:
        value = runs[i].metrics.get(name, math.nan)
        pessimistic, optimistic = runs[i].bounds.get(name, (value, value))
        low, high = next(found) if len(values) else (math.nan, math.nan)
        out[i][name] = Interval(
            value=value,
            low=low,
            high=high,
            pessimistic=pessimistic,
            optimistic=optimistic,
            resampled="classes" if groups is not None else "queries",
            confidence=confidence,
            n_resamples=n_resamples,
            seed=seed,
        )
    return out


def _label_form(data: RunData, metrics: Sequence[str] | None, func: str) -> list[str]:
    """The metrics asked for (default: every label-form metric of the run, in its order)."""
    available = [n for n in data.metrics if n in data.values and registry.parse_one(n)]
    if metrics is None:
        return available
    if isinstance(metrics, str):
        metrics = [metrics]
    for name in metrics:
        if name not in available:
            raise fail(func, "metrics", f"metrics of the run {data.name!r} ({available})", name)
    return list(metrics)


# ----------------------------------------------------------------------------------------------
# Comparisons of several runs.


@dataclass(frozen=True)
class PairedDifference:
    """Run ``a`` against run ``b`` on one metric.

    Attributes
    ----------
    metric : str
        The metric's name.
    a, b : str
        The runs' names.
    value_a, value_b : float
        Their values.
    difference : float
        ``value_a - value_b``: the effect size, in the metric's own units.
    low, high : float
        The difference's paired percentile bootstrap interval.
    p_value : float
        The two-sided p-value of the test.
    p_adjusted : float
        The p-value adjusted for the comparisons of the metric (Holm).
    significant : bool
        Whether the adjusted p-value is below ``alpha``: the runs can be told apart.
    better : str or None
        The better run when significant (by the metric's direction), else ``None``.
    only_a, only_b : int or None
        recall@K: the queries that only ``a`` (only ``b``) finds a relevant item for within K.
    test : {"mcnemar", "randomization", "bootstrap"} or None
        The test that gave the p-value.
    """

    metric: str
    a: str
    b: str
    value_a: float
    value_b: float
    difference: float
    low: float
    high: float
    p_value: float
    p_adjusted: float
    significant: bool
    better: str | None
    only_a: int | None = None
    only_b: int | None = None
    test: str | None = None

    @property
    def tied(self) -> bool:
        """Whether the runs cannot be told apart on this metric."""
        return not self.significant

    def to_dict(self) -> dict[str, Any]:
        """The row in plain JSON types, with ``tied``.

        Returns
        -------
        dict
        """
        out = {k: _json(v) if isinstance(v, float) else v for k, v in self.__dict__.items()}
        out["tied"] = self.tied
        return out


@dataclass(frozen=True)
class Comparison:
    """Several runs compared metric by metric on their paired queries ([`compare`][compare]).

    Attributes
    ----------
    runs : tuple of str
        The runs' names, in the order given.
    metrics : tuple of str
        The metrics compared.
    baseline : str or None
        The run every other was compared with, or ``None`` (every pair).
    test : {"auto", "randomization", "bootstrap"}
        The paired test asked for (each row names the one it used).
    correction : {"holm", "none"}
        The adjustment of each metric's p-values.
    alpha : float
        The significance level.
    confidence : float
        The intervals' level.
    n_resamples : int
        The resamples of every interval and test.
    seed : int
        Their seed.
    num_queries : int
        The paired queries that count.
    definitions_id : str or None
        The definitions every run shares.
    intervals : dict of str to dict of str to Interval
        Per run and metric: its value, interval and tie bounds.
    rows : tuple of PairedDifference
        Per metric, each pair compared.
    notes : tuple of str
        What a reader should know (metrics not compared, versions).
    """

    runs: tuple[str, ...]
    metrics: tuple[str, ...]
    baseline: str | None
    test: str
    correction: str
    alpha: float
    confidence: float
    n_resamples: int
    seed: int
    num_queries: int
    definitions_id: str | None
    intervals: dict[str, dict[str, Interval]]
    rows: tuple[PairedDifference, ...]
    notes: tuple[str, ...] = ()

    def row(self, metric: str, a: str, b: str) -> PairedDifference:
        """The comparison of ``a`` with ``b`` on ``metric``.

        Parameters
        ----------
        metric : str
            A metric compared.
        a, b : str
            Two runs, as compared (``a - b``).

        Returns
        -------
        PairedDifference

        Raises
        ------
        KeyError
            When that pair was not compared on that metric.
        """
        for r in self.rows:
            if r.metric == metric and (r.a, r.b) == (a, b):
                return r
        raise KeyError((metric, a, b))

    def beats(self, metric: str, run: str) -> list[str]:
        """The runs that ``run`` is significantly better than on ``metric``.

        Parameters
        ----------
        metric : str
            A metric compared.
        run : str
            A run's name.

        Returns
        -------
        list of str
        """
        out = []
        for r in self.rows:
            if r.metric == metric and r.better == run:
                out.append(r.b if r.a == run else r.a)
        return out

    def best(self, metric: str) -> list[str]:
        """The best run on ``metric`` by value (the metric's direction) and every run tied
        with it (not significantly different).

        Parameters
        ----------
        metric : str
            A metric compared.

        Returns
        -------
        list of str
            The best run first.
        """
        direction = registry.parse_one(metric).direction
        values = {name: self.intervals[name][metric].value for name in self.runs}
        sign = 1.0 if direction == "higher" else -1.0
        top = max(self.runs, key=lambda n: sign * values[n])
        tied = [top]
        for name in self.runs:
            if name != top:
                r = self._either(metric, top, name)
                if r is not None and r.tied:
                    tied.append(name)
        return tied

    def _either(self, metric: str, a: str, b: str) -> PairedDifference | None:
        for r in self.rows:
            if r.metric == metric and {r.a, r.b} == {a, b}:
                return r
        return None

    def to_dict(self) -> dict[str, Any]:
        """The comparison in plain JSON types, with its test and parameters.

        Returns
        -------
        dict
        """
        return {
            "format": "recallkit.comparison/2",
            "runs": list(self.runs),
            "metrics": list(self.metrics),
            "baseline": self.baseline,
            "test": self.test,
            "correction": self.correction,
            "alpha": self.alpha,
            "confidence": self.confidence,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "num_queries": self.num_queries,
            "definitions_id": self.definitions_id,
            "notes": list(self.notes),
            "intervals": {
                run: {m: i.to_dict() for m, i in per.items()} for run, per in self.intervals.items()
            },
            "comparisons": [r.to_dict() for r in self.rows],
        }

    def format(self) -> str:
        """The comparison as text: one line per pair and metric.

        Returns
        -------
        str
        """
        pct = f"{100 * self.confidence:g}%"
        test = TEST_NAMES[self.test]
        head = (
            f"{self.num_queries} paired queries; {test}, {self.n_resamples} resamples, seed "
            f"{self.seed}; p-values adjusted by {self.correction} per metric; alpha {self.alpha:g}"
        )
        header = [
            "metric",
            "run a",
            "run b",
            "value a",
            "value b",
            "a - b",
            f"{pct} interval",
            "p",
            "p adjusted",
            "verdict",
        ]
        rows = []
        for r in self.rows:
            verdict = f"{r.better} better" if r.significant else "tied"
            rows.append(
                [
                    r.metric,
                    r.a,
                    r.b,
                    _fmt(r.value_a),
                    _fmt(r.value_b),
                    f"{r.difference:+.4f}",
                    f"[{r.low:+.4f}, {r.high:+.4f}]",
                    f"{r.p_value:.4f}",
                    f"{r.p_adjusted:.4f}",
                    verdict,
                ]
            )
        from recallkit.result import format_table

        return head + "\n\n" + format_table(header, rows)


def _fmt(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.4f}"


def compare(
    runs: Mapping[str, Any] | Sequence[Any],
    *,
    baseline: str | None = None,
    metrics: Sequence[str] | None = None,
    test: str = "auto",
    correction: str = "holm",
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Comparison:
    """Compare two or more runs on the same queries, metric by metric.

    Parameters
    ----------
    runs : mapping of name to run, or sequence of runs
        Two or more runs: [`recallkit.Result`][recallkit.result.Result]\\s, run records or run file
        paths (a sequence names each by its tag or file name).
    baseline : str, optional
        Compare every other run with this one only; default every pair.
    metrics : sequence of str, optional
        The metrics to compare; default every label-form metric all runs hold.
    test : {"auto", "randomization", "bootstrap"}, default "auto"
        The paired test of each difference. ``"randomization"``: Fisher's paired randomization
        test (each resample swaps the two runs' values of a random half of the queries).
        ``"bootstrap"``: the paired bootstrap (``p = 2 min(P(d* <= 0), P(d* >= 0))`` over the
        resampled differences). ``"auto"``: McNemar's exact test
        ([`recallkit.stats.mcnemar_test`][recallkit.stats.mcnemar_test]) where both runs' values
        are 0 or 1 per query and summarised by their mean over queries (recall@K), the
        randomization test for the others.
    correction : {"holm", "none"}, default "holm"
        The adjustment of each metric's p-values for the number of pairs compared on it.
    alpha : float, default 0.05
        Adjusted p-values below it are significant; the other pairs are tied.
    n_resamples, confidence, seed
        The resamples, interval level and seed of every interval and test. The resamples are
        drawn once for every run and metric of one length (one draw of query indices for the
        intervals, one for the paired intervals, one of swaps for the randomization tests),
        and every value equals that of the same interval or test computed alone.

    Returns
    -------
    Comparison
        Each run's values with their intervals and tie bounds, and for every pair and metric
        the difference, its paired bootstrap interval, the p-value, the adjusted p-value and
        the verdict. A value averaged over classes is resampled by class.

    Raises
    ------
    ValueError
        When the runs do not pair: other queries (the first differing one is named), other
        labels, other definitions (the fields are named) or other lone queries; or when no
        paired query counts for a metric (nothing to compare).
    """
    func = "compare"
    check_choice(test, TESTS, func, "test")
    check_choice(correction, CORRECTIONS, func, "correction")
    alpha = check_unit_interval(alpha, func, "alpha")
    data = _named_runs(runs, baseline)
    notes: list[str] = []
    definitions_id = _check_definitions(data, notes)
    data = [data[0], *(_paired(data[0], d) for d in data[1:])]
    chosen = _compared_metrics(data, metrics, notes)
    if baseline is None:
        pairs = list(combinations(data, 2))
    else:
        base = next(d for d in data if d.name == baseline)
        pairs = [(base, d) for d in data if d.name != baseline]
    settings = {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}
    # The runs' intervals on a thread of their own while the pairs are tested: numpy's
    # gathers and sums release the GIL, and each side's values are its own.
    with ThreadPoolExecutor(1, thread_name_prefix="recallkit-intervals") as helper:
        intervals = helper.submit(
            _intervals, data, [chosen] * len(data), n_resamples, confidence, seed
        )
        rows = _compared_rows(chosen, pairs, test, correction, alpha, settings)
        spread = intervals.result()
    return Comparison(
        runs=tuple(d.name for d in data),
        metrics=tuple(chosen),
        baseline=baseline,
        test=test,
        correction=correction,
        alpha=alpha,
        confidence=float(confidence),
        n_resamples=int(n_resamples),
        seed=int(seed),
        num_queries=int(data[0].evaluated.sum()),
        definitions_id=definitions_id,
        intervals={d.name: per for d, per in zip(data, spread, strict=True)},
        rows=tuple(rows),
        notes=tuple(notes),
    )


def _named_runs(runs: Mapping[str, Any] | Sequence[Any], baseline: str | None) -> list[RunData]:
    """The runs as [`RunData`][RunData], two or more with distinct names, ``baseline`` among
    them."""
    func = "compare"
    if isinstance(runs, Mapping):
        data = [as_run(run, str(name)) for name, run in runs.items()]
    else:
        if isinstance(runs, str | os.PathLike):
            raise fail(func, "runs", "two or more runs", "one path")
        data = [as_run(run) for run in runs]
    if len(data) < 2:
        raise fail(func, "runs", "two or more runs", f"{len(data)}")
    names = [d.name for d in data]
    if len(set(names)) != len(names):
        repeated = next(n for n in names if names.count(n) > 1)
        raise fail(func, "runs", "runs with distinct names", f"two named {repeated!r}")
    if baseline is not None and baseline not in names:
        raise fail(func, "baseline", f"one of the runs' names {names}", repr(baseline))
    return data


def _compared_metrics(
    data: Sequence[RunData], metrics: Sequence[str] | None, notes: list[str]
) -> list[str]:
    """The metrics to compare: those asked for (each held by every run), else every label-form
    metric every run holds (a note names the others); each with paired queries that count."""
    func = "compare"
    common = [m for m in data[0].metrics if all(m in d.values for d in data)]
    common = [m for m in common if m in data[0].values and registry.parse_one(m) is not None]
    if metrics is None:
        chosen = common
        left = sorted({m for d in data for m in d.values} - set(common))
        if left:
            notes.append(f"not held by every run, not compared: {', '.join(left)}")
    else:
        chosen = list([metrics] if isinstance(metrics, str) else metrics)
        for name in chosen:
            if name not in common:
                raise fail(func, "metrics", f"metrics every run holds ({common})", repr(name))
    if not chosen:
        raise fail(func, "metrics", "a metric every run holds", "none in common")
    for name in chosen:
        if len(data[0].sample(name)[1]) == 0:
            raise ValueError(
                f"{data[0].name} and {data[1].name} have 0 paired queries that count for {name} "
                f"({len(data[0].evaluated)} queries, none with a relevant gallery item): there is "
                "nothing to compare; compare runs with queries whose label the gallery holds."
            )
    return chosen


def _compared_rows(
    chosen: Sequence[str],
    pairs: Sequence[tuple[RunData, RunData]],
    test: str,
    correction: str,
    alpha: float,
    settings: dict[str, Any],
) -> list[PairedDifference]:
    """Every pair's [`PairedDifference`][PairedDifference] on every metric, the p-values of a
    metric adjusted together."""
    cases = [(name, a, b) for name in chosen for a, b in pairs]
    found = _tests(cases, test, settings)
    rows = []
    for name in chosen:
        mine = [(case, got) for case, got in zip(cases, found, strict=True) if case[0] == name]
        p = np.array([got["p_value"] for _, got in mine])
        adjusted = stats.holm(p) if correction == "holm" else p
        direction = registry.parse_one(name).direction
        for ((_, a, b), got), adj in zip(mine, adjusted, strict=True):
            significant = bool(adj < alpha)
            better = None
            if significant:
                better = a.name if (got["difference"] > 0) == (direction == "higher") else b.name
            rows.append(
                PairedDifference(
                    metric=name,
                    a=a.name,
                    b=b.name,
                    value_a=a.metrics[name],
                    value_b=b.metrics[name],
                    difference=a.metrics[name] - b.metrics[name],
                    p_adjusted=float(adj),
                    significant=significant,
                    better=better,
                    **{k: v for k, v in got.items() if k != "difference"},
                )
            )
    return rows


def _tests(
    cases: Sequence[tuple[str, RunData, RunData]], test: str, settings: dict[str, Any]
) -> list[dict[str, Any]]:
    """For each ``(metric, a, b)``: the difference of the values it resamples, its paired
    interval (``low``, ``high``), ``p_value`` and the ``test`` that gave it, and for recall@K
    ``only_a``, ``only_b``; every interval from one draw, every randomization test from one."""
    n_resamples, seed = settings["n_resamples"], settings["seed"]
    samples = []
    for name, a, b in cases:
        metric, x, groups = a.sample(name)
        samples.append((metric, x, b.sample(name)[1], groups))
    drawn = stats.paired_bootstrap_distributions(
        [(x, y) for _, x, y, _ in samples],
        [_statistic(metric) for metric, _, _, _ in samples],
        groups=[groups for _, _, _, groups in samples],
        n_resamples=n_resamples,
        seed=seed,
    )
    used = [_test_of(test, metric, x, y, groups) for metric, x, y, groups in samples]
    randomized = [i for i, t in enumerate(used) if t == "randomization"]
    p_values = dict(
        zip(
            randomized,
            stats.randomization_tests(
                [samples[i][1:3] for i in randomized],
                [_randomized_statistic(samples[i][0], samples[i][3]) for i in randomized],
                n_resamples=n_resamples,
                seed=seed,
            )
            if randomized
            else (),
            strict=True,
        )
    )
    out = []
    for i, ((metric, x, y, _), (difference, theta), used_test) in enumerate(
        zip(samples, drawn, used, strict=True)
    ):
        if used_test == "mcnemar":
            p_values[i] = stats.mcnemar_test(x, y)
        elif used_test == "bootstrap":
            p_values[i] = float(min(1.0, 2 * min(np.mean(theta <= 0), np.mean(theta >= 0))))
        low, high = stats.percentile_interval(theta, settings["confidence"])
        got = dict(difference=difference, low=low, high=high, p_value=float(p_values[i]))
        if isinstance(metric, registry.Recall):
            got["only_a"] = int(np.count_nonzero((x > 0) & (y == 0)))
            got["only_b"] = int(np.count_nonzero((x == 0) & (y > 0)))
        out.append({**got, "test": used_test})
    return out


def _test_of(
    test: str, metric: registry.Metric, x: np.ndarray, y: np.ndarray, groups: np.ndarray | None
) -> str:
    """The test a pair gets: ``"auto"`` is McNemar's where both sides are 0/1 values summarised
    by their mean over queries, else the randomization test."""
    if test != "auto":
        return test
    binary = all(bool(np.all((v == 0) | (v == 1))) for v in (x, y))
    return (
        "mcnemar"
        if binary and groups is None and _statistic(metric) == "mean"
        else ("randomization")
    )


def _randomized_statistic(
    metric: registry.Metric, groups: np.ndarray | None
) -> Callable[..., Any] | str:
    """The statistic the randomization test swaps queries under: the metric's summary, or with
    classes the mean over classes of each class's summary."""
    return _statistic(metric) if groups is None else _class_statistic(metric, groups)


def _check_definitions(data: Sequence[RunData], notes: list[str]) -> str | None:
    """The definitions id every run shares, or ``ValueError`` naming the fields that differ."""
    first = data[0]
    missing = [d.name for d in data if d.definitions is None]
    if missing:
        notes.append(
            f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no definitions record "
            "(written before recallkit recorded them): the similarity, tie rule and exclusions "
            "cannot be checked to match; compared anyway."
        )
        return None
    for other in data[1:]:
        fields = differences(first.definitions, other.definitions)
        if fields:
            listed = "; ".join(
                f"{f} ({first.definitions.get(f)!r} in {first.name}, "
                f"{other.definitions.get(f)!r} in {other.name})"
                for f in fields
            )
            raise ValueError(
                f"{first.name} and {other.name} were computed under different definitions: "
                f"{listed}; values are comparable only under the same definitions."
            )
    versions = sorted({str(d.definitions.get("recallkit")) for d in data})
    if len(versions) > 1:
        notes.append(
            f"the runs were written by recallkit {', '.join(versions)}, under the same "
            f"definitions ({first.definitions['id']})."
        )
    return str(first.definitions["id"])


def _keys(data: RunData) -> list[tuple[str, str | None]]:
    """Each query's pairing key; a key that repeats cannot pair (``ValueError``)."""
    keys = data.keys
    if len(set(keys)) != len(keys):
        counts = Counter(keys)
        repeated = next(k for k in keys if counts[k] > 1)
        where = "" if repeated[1] is None else f" and path {repeated[1]!r}"
        raise ValueError(
            f"{data.name} has {counts[repeated]} queries with id {repeated[0]!r}{where}, so they "
            "cannot be paired with another run's queries: its queries need distinct ids, or "
            "paths (run files written by recallkit evaluate --json have them)."
        )
    return keys


def _paired(a: RunData, b: RunData) -> RunData:
    """``b`` with its queries in ``a``'s order, or ``ValueError`` saying what differs."""
    keys_a, keys_b = _keys(a), _keys(b)
    if any(k[1] is None for k in keys_a + keys_b):
        keys_a = [(k[0], None) for k in keys_a]
        keys_b = [(k[0], None) for k in keys_b]
        if len(set(keys_a)) != len(keys_a) or len(set(keys_b)) != len(keys_b):
            for run, keys in ((a, keys_a), (b, keys_b)):
                _keys(dataclasses.replace(run, keys=keys, labels=None))
    position = {k: i for i, k in enumerate(keys_b)}
    only_a = [k for k in keys_a if k not in position]
    set_a = set(keys_a)
    only_b = [k for k in keys_b if k not in set_a]
    if only_a or only_b:
        example, where = (only_a[0], a.name) if only_a else (only_b[0], b.name)
        shown = (
            repr(example[0])
            if example[1] in (None, example[0])
            else (f"{example[0]!r} ({example[1]})")
        )
        raise ValueError(
            f"{a.name} ({len(keys_a)} queries) and {b.name} ({len(keys_b)} queries) did not "
            f"evaluate the same queries: {len(only_a)} only in {a.name}, {len(only_b)} only in "
            f"{b.name}; the first one only in {where}: {shown}. Compare runs on the same "
            "dataset (queries are named by their path relative to their folder, or by manifest "
            "id)."
        )
    order = np.fromiter((position[k] for k in keys_a), dtype=np.int64, count=len(keys_a))
    labels = None if b.labels is None else [b.labels[i] for i in order]
    if a.labels is not None and labels is not None:
        differ = [
            i
            for i, (u, v) in enumerate(zip(a.labels, labels, strict=True))
            if json.dumps(u) != json.dumps(v)
        ]
        if differ:
            raise ValueError(
                f"{a.name} and {b.name} give different labels to {len(differ)} queries (e.g. "
                f"{keys_a[differ[0]][0]!r}); compare runs on the same dataset."
            )
    evaluated = b.evaluated[order]
    if not np.array_equal(a.evaluated, evaluated):
        i = int(np.flatnonzero(a.evaluated != evaluated)[0])
        raise ValueError(
            f"{a.name} and {b.name} exclude different queries (e.g. {keys_a[i][0]!r}: no "
            "gallery item with its label in one run only); compare runs on the same gallery."
        )
    return dataclasses.replace(
        b,
        values={k: v[order] for k, v in b.values.items()},
        evaluated=evaluated,
        keys=keys_a,
        labels=labels,
    )
