"""What a report shows, computed once: the runs and their names, each metric's interval, the
comparison of the runs, each run's per-class breakdown and its failures.

A *run* is a [`recallkit.Result`][recallkit.result.Result] (label form), a run record (the dict of a
run file) or the path of a run file (``recallkit evaluate --json``). [`summarize`][summarize] reads
them all into one [`Summary`][Summary], from which every table
([`recallkit.reports.tables`][recallkit.reports.tables]), figure
([`recallkit.reports.figures`][recallkit.reports.figures]) and the HTML page
([`recallkit.reports.html`][recallkit.reports.html]) is drawn, so that writing several formats
computes the intervals and tests once.

The statistics are the library's: [`recallkit.intervals`][recallkit.comparison.intervals]
(percentile bootstrap over the queries, or the classes of a class average) and
[`recallkit.compare`][recallkit.comparison.compare] (paired bootstrap interval of each difference,
Fisher's randomization or the bootstrap test, Holm per metric). This module only reads the runs,
names them, and computes the per-class breakdown (each class's value of every metric, the class its
missed queries' nearest gallery items most often carry).
"""

from __future__ import annotations

import json
import math
import os
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from recallkit import metrics as registry
from recallkit.comparison import Comparison, Interval, RunData, as_run, compare, intervals
from recallkit.runfiles import records

__all__ = [
    "ClassRow",
    "Failure",
    "ReportError",
    "ReportRun",
    "Summary",
    "by_class",
    "failures",
    "load_runs",
    "only_one_right",
    "summarize",
]


class ReportError(ValueError):
    """Runs that cannot be reported as asked; the message names the run or the option."""


@dataclass(frozen=True)
class ReportRun:
    """One run of a report: its name, its run record and the file it came from (if any)."""

    name: str
    record: dict[str, Any]
    path: Path | None = None

    @cached_property
    def metrics(self) -> dict[str, float]:
        """Each metric's value by name (NaN where undefined)."""
        return {
            k: (math.nan if v is None else float(v))
            for k, v in records.metrics_of(self.record).items()
        }

    @cached_property
    def data(self) -> RunData:
        """The run as the library's statistics read it."""
        return as_run(self.record, self.name)


def _default_name(run: Any, record: Mapping[str, Any], position: int) -> str:
    tag = record.get("tag")
    if isinstance(tag, str) and tag:
        return tag
    if isinstance(run, str | os.PathLike):
        return Path(run).stem
    return f"run-{position + 1}"


def load_runs(runs: Any, names: Sequence[str] | None = None) -> list[ReportRun]:
    """Runs read and named, each as a ``recallkit.reports.data.ReportRun``.

    A run is named ``names[i]`` when given, else by the mapping's key, else by its record's
    ``tag``, else by its file's stem (``run-N`` for a record without either). Runs that would
    share a name are named by their file's stem, then by the path as given, so that every name
    is distinct.

    Parameters
    ----------
    runs : run, sequence of runs, or mapping of name to run
        [`recallkit.Result`][recallkit.result.Result]\\ s, run records (dicts) or run file
        paths; a mapping's keys name its runs.
    names : sequence of str, optional
        One name per run.

    Returns
    -------
    list of ReportRun
        The runs in order, each checked by the run-file reader.

    >>> r = {"tag": "epoch-1", "metrics": {"recall@1": 0.5},
    ...      "queries": {"ids": ["q"], "first_hit_rank": [0]}}
    >>> [run.name for run in load_runs([r, {**r, "tag": None}])]
    ['epoch-1', 'run-2']
    """
    from recallkit.result import Result

    if isinstance(runs, str | os.PathLike | Result) or (
        isinstance(runs, Mapping) and "queries" in runs
    ):
        runs = [runs]
    given = dict(runs) if isinstance(runs, Mapping) else None
    items = list(given.values()) if given is not None else list(runs)
    if not items:
        raise ReportError("A report needs at least one run.")
    if names is not None:
        names = [str(n) for n in names]
        if len(names) != len(items):
            raise ReportError(
                f"{len(names)} name(s) for {len(items)} run(s); give one name per run."
            )
    loaded: list[tuple[dict[str, Any], Path | None]] = []
    for position, run in enumerate(items):
        if isinstance(run, Result):
            record = records.evaluation_record(run, tag=None)
            loaded.append((record, None))
        elif isinstance(run, str | os.PathLike):
            loaded.append((records.load_run(run), Path(run)))
        elif isinstance(run, Mapping):
            where = f"The run {position + 1}"
            loaded.append((records.check_run(dict(run), where), None))
        else:
            raise ReportError(
                f"A run is a Result, a run record or the path of a run file. Got "
                f"{type(run).__name__} (run {position + 1})."
            )
    if names is not None:
        chosen = list(names)
    elif given is not None:
        chosen = [str(k) for k in given]
    else:
        chosen = [
            _default_name(run, rec, i)
            for i, (run, (rec, _)) in enumerate(zip(items, loaded, strict=True))
        ]
        chosen = _distinct(chosen, [path for _, path in loaded])
    repeated = [n for n, count in Counter(chosen).items() if count > 1]
    if repeated:
        raise ReportError(f"Two runs are named {repeated[0]!r}; give each run its own name.")
    return [ReportRun(name, rec, path) for name, (rec, path) in zip(chosen, loaded, strict=True)]


def _distinct(names: list[str], paths: list[Path | None]) -> list[str]:
    """``names`` with the repeated ones replaced by their file's stem, then the path given."""
    for fallback in (lambda p: p.stem, lambda p: str(p)):
        counts = Counter(names)
        names = [
            fallback(p) if counts[n] > 1 and p is not None else n
            for n, p in zip(names, paths, strict=True)
        ]
    counts = Counter(names)
    seen: Counter[str] = Counter()
    out = []
    for n in names:
        seen[n] += 1
        out.append(n if counts[n] == 1 or seen[n] == 1 else f"{n} ({seen[n]})")
    return out


def letters(count: int) -> list[str]:
    """The letters that name runs in significance markers: a, b, ..., z, A, ..., Z, then a1, ...

    >>> letters(3), letters(54)[-2:]
    (['a', 'b', 'c'], ['a1', 'b1'])
    """
    alphabet = string.ascii_lowercase + string.ascii_uppercase
    return [
        alphabet[i] if i < len(alphabet) else f"{alphabet[i % len(alphabet)]}{i // len(alphabet)}"
        for i in range(count)
    ]


def direction(name: str) -> str:
    """``"higher"`` or ``"lower"``: which values of metric ``name`` are better (``"higher"`` for
    a name the registry does not know)."""
    metric = registry.parse_one(name)
    return "higher" if metric is None else metric.direction


@dataclass(frozen=True)
class Summary:
    """Everything a report shows, computed once ([`summarize`][recallkit.reports.data.summarize]).

    Attributes
    ----------
    runs : tuple of ReportRun
        The runs, each with its name, record and file.
    metrics : tuple of str
        The columns: every metric of the runs, in order of first appearance.
    intervals : dict of str to dict of str to Interval
        Per run name and metric: its value, bootstrap interval and tie bounds (label-form
        metrics with per-query values only).
    comparison : Comparison or None
        The comparison of the runs (two or more runs that pair), else ``None``.
    notes : tuple of str
        What the reader should know: metrics not compared, runs that do not pair.
    settings : dict of str to Any
        The statistics' settings: confidence, n_resamples, seed (and test, correction, alpha).
    """

    runs: tuple[ReportRun, ...]
    metrics: tuple[str, ...]
    intervals: dict[str, dict[str, Interval]]
    comparison: Comparison | None
    notes: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The runs' names, in run order."""
        return [r.name for r in self.runs]

    @property
    def letters(self) -> dict[str, str]:
        """Each run's letter in significance markers."""
        return dict(zip(self.names, letters(len(self.runs)), strict=True))

    def value(self, run: str, metric: str) -> float:
        """A run's value of a metric.

        Parameters
        ----------
        {run_and_metric}

        Returns
        -------
        float
            The value (NaN when the run has none).
        """
        return self.run(run).metrics.get(metric, math.nan)

    def run(self, name: str) -> ReportRun:
        """The run named ``name``.

        Parameters
        ----------
        name : str
            One of [`names`][recallkit.reports.data.Summary.names].

        Returns
        -------
        ReportRun
            The run.
        """
        return next(r for r in self.runs if r.name == name)

    def beats(self, run: str, metric: str) -> list[str]:
        """The runs that ``run`` is significantly better than on ``metric``.

        Parameters
        ----------
        {run_and_metric}

        Returns
        -------
        list of str
            Their names, in run order (none without a comparison of ``metric``).
        """
        if self.comparison is None or metric not in self.comparison.metrics:
            return []
        beaten = set(self.comparison.beats(metric, run))
        return [n for n in self.names if n in beaten]

    def best(self, metric: str, digits: int | None = None) -> list[str]:
        """The runs with the best value of ``metric`` by its direction.

        Parameters
        ----------
        metric : str
            The metric's name.
        digits : int, optional
            Compare the values rounded to this many decimals (as printed).

        Returns
        -------
        list of str
            Every run that ties with the best value, in run order; none when fewer than two
            runs have a value.
        """
        values = {}
        for name in self.names:
            v = self.value(name, metric)
            if not math.isnan(v):
                values[name] = round(v, digits) if digits is not None else v
        if len(values) < 2:
            return []
        pick = max if direction(metric) == "higher" else min
        top = pick(values.values())
        return [n for n, v in values.items() if v == top]

    def to_dict(self) -> dict[str, dict[str, float | None]]:
        """The flat ``{run: {metric: value}}``.

        Returns
        -------
        dict of str to dict of str to float or None
            Each run's value of every metric it holds (``None`` where undefined).
        """
        out: dict[str, dict[str, float | None]] = {}
        for run in self.runs:
            values = run.metrics
            out[run.name] = {
                m: (None if m not in values or math.isnan(values[m]) else values[m])
                for m in self.metrics
                if m in values
            }
        return out


# The Parameters entries of the Summary methods that look up one run's metric, written once.
_RUN_AND_METRIC = """run : str
            The run's name.
        metric : str
            The metric's name."""
for _method in (Summary.value, Summary.beats):
    _method.__doc__ = _method.__doc__.replace("{run_and_metric}", _RUN_AND_METRIC)
del _method


def summarize(
    runs: Any,
    *,
    names: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    with_intervals: bool = True,
    tests: bool | None = None,
    baseline: str | None = None,
    test: str = "auto",
    correction: str = "holm",
    alpha: float = 0.05,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Summary:
    """Read ``runs`` and compute what a report shows.

    Parameters
    ----------
    runs : run, sequence of runs, or mapping of name to run
        [`recallkit.Result`][recallkit.result.Result]\\ s, run records or run file paths
        ([`load_runs`][load_runs]).
    names : sequence of str, optional
        One name per run (default: tag, else file stem).
    metrics : sequence of str, optional
        The columns (default: every metric any run holds, in order of first appearance).
    with_intervals : bool, default True
        Compute each metric's bootstrap interval
        ([`recallkit.intervals`][recallkit.comparison.intervals]).
    tests : bool or None, default None
        Compare the runs ([`recallkit.compare`][recallkit.comparison.compare]): ``None`` when there
        are two or more and they pair (a note says why not otherwise), ``True`` always (runs that do
        not pair are an error), ``False`` never.
    baseline, test, correction, alpha, n_resamples, confidence, seed
        As [`recallkit.compare`][recallkit.comparison.compare] takes them (``n_resamples``,
        ``confidence`` and ``seed`` are the intervals' too).

    Returns
    -------
    Summary
        The runs, the metrics, each value's interval, the comparison and its notes.
    """
    loaded = load_runs(runs, names)
    held = list(dict.fromkeys(m for r in loaded for m in r.metrics))
    if metrics is None:
        chosen = held
    else:
        chosen = [metrics] if isinstance(metrics, str) else list(metrics)
        missing = [m for m in chosen if not any(m in r.metrics for r in loaded)]
        if missing:
            raise ReportError(
                f"No run holds {', '.join(missing)}; the runs hold {', '.join(held)}."
            )
    notes: list[str] = []
    comparison = None
    data = {r.name: r.data for r in loaded}
    if tests is not False and len(loaded) >= 2:
        common = [m for m in chosen if all(m in data[r.name].values for r in loaded)]
        common = [m for m in common if registry.parse_one(m) is not None]
        if tests and metrics is not None:
            common = chosen  # asked for: the library names any that a run lacks
        left = [m for m in chosen if m not in common]
        try:
            comparison = compare(
                {name: data[name] for name in data},
                baseline=baseline,
                metrics=common or None,  # none in common: the library says so
                test=test,
                correction=correction,
                alpha=alpha,
                n_resamples=n_resamples,
                confidence=confidence,
                seed=seed,
            )
        except ValueError as error:
            if tests:
                raise
            notes.append(f"the runs are not compared (no significance markers): {error}")
        else:
            notes.extend(comparison.notes)
            if left:
                notes.append(f"not held by every run, so not compared: {', '.join(left)}")
    spread: dict[str, dict[str, Interval]] = {r.name: {} for r in loaded}
    if with_intervals:
        statistics = {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}
        spread = _intervals(loaded, chosen, comparison, statistics)
    settings = {"confidence": confidence, "n_resamples": n_resamples, "seed": seed}
    if comparison is not None:
        settings.update(test=test, correction=correction, alpha=alpha, baseline=baseline)
    return Summary(tuple(loaded), tuple(chosen), spread, comparison, tuple(notes), settings)


def _intervals(
    loaded: Sequence[ReportRun],
    chosen: Sequence[str],
    comparison: Comparison | None,
    statistics: dict[str, Any],
) -> dict[str, dict[str, Interval]]:
    """Each run's interval of every metric ``chosen`` it holds per query: the comparison's where
    it made them, else [`recallkit.intervals`][recallkit.comparison.intervals]'s."""
    spread: dict[str, dict[str, Interval]] = {r.name: {} for r in loaded}
    for run in loaded:
        done = comparison.intervals.get(run.name, {}) if comparison is not None else {}
        spread[run.name].update({m: i for m, i in done.items() if m in chosen})
        rest = [
            m
            for m in chosen
            if m not in spread[run.name]
            and m in run.data.values
            and m in run.metrics
            and registry.parse_one(m) is not None
        ]
        if rest:
            spread[run.name].update(intervals(run.data, metrics=rest, **statistics))
    return spread


# ----------------------------------------------------------------------------------------------
# Per class.


@dataclass(frozen=True)
class ClassRow:
    """One class of a run: its queries, each metric's value over them, and its confusion."""

    label: Any
    #: The queries of the class that count in the values (lone ones left out under ``skip``).
    queries: int
    values: dict[str, float]
    #: The class's evaluated queries whose nearest gallery item is of another class.
    missed_at_1: int
    #: The label their nearest gallery items most often carry, and how many carry it (``None``
    #: when the run file does not record nearest labels, or no query missed).
    confused_with: Any = None
    confused_count: int = 0


def _key(label: Any) -> str:
    return json.dumps(label, sort_keys=True)


def by_class(run: ReportRun, metrics: Sequence[str] | None = None) -> list[ClassRow]:
    """Each query class of a run with its value of every metric and its confusion.

    Parameters
    ----------
    run : ReportRun
        The run ([`load_runs`][recallkit.reports.data.load_runs]).
    metrics : sequence of str, optional
        The metrics (default: every metric of the run with per-query values).

    Returns
    -------
    list of ClassRow
        One row per class, in order of first appearance: its counted queries, each metric's
        summary over them, its queries missed at rank 0 and the class their nearest gallery
        items most often carry (from ``queries.nearest_label``). Empty without labels.

    >>> r = {"metrics": {"recall@1": 0.5},
    ...      "queries": {"ids": ["1", "2", "3", "4"], "labels": ["a", "a", "b", "b"],
    ...                  "first_hit_rank": [0, 2, 1, 0], "nearest_label": ["a", "b", "a", "b"],
    ...                  "values": {"recall@1": [1.0, 0.0, 0.0, 1.0]}}}
    >>> [(c.label, c.values["recall@1"], c.confused_with) for c in by_class(ReportRun("r", r))]
    [('a', 0.5, 'b'), ('b', 0.5, 'a')]
    """
    record = run.record
    queries = record["queries"]
    n = len(queries["ids"])
    labels = queries.get("labels")
    if labels is None:
        return []
    ranks = np.asarray(queries["first_hit_rank"], dtype=np.int64)
    evaluated = ranks >= 0
    keys = [_key(v) for v in labels]
    codes_of: dict[str, int] = {}
    codes = np.fromiter((codes_of.setdefault(k, len(codes_of)) for k in keys), np.int64, n)
    first: dict[int, Any] = {}
    for i, code in enumerate(codes.tolist()):
        first.setdefault(code, labels[i])
    num = len(codes_of)
    lone = (record.get("definitions") or {}).get("lone_queries", "skip")
    counted = np.ones(n, dtype=bool) if lone == "zero" else evaluated
    sizes = np.bincount(codes[counted], minlength=num)
    data = run.data
    names = [m for m in (metrics if metrics is not None else run.metrics) if m in data.values]
    per_metric: dict[str, np.ndarray] = {}
    for name in names:
        metric = registry.parse_one(name)
        if metric is None:
            continue
        values = data.values[name]
        if lone == "zero" and metric.lone_value is not None:
            values = np.where(evaluated, values, metric.lone_value)
        mask = counted & ~np.isnan(values)
        per_metric[name] = _class_summaries(metric, values[mask], codes[mask], num)
    missed = evaluated & (ranks > 0)
    missed_count = np.bincount(codes[missed], minlength=num)
    nearest = queries.get("nearest_label")
    confused: dict[int, tuple[Any, int]] = {}
    if nearest is not None:
        tallies: dict[int, Counter[str]] = {}
        shown: dict[str, Any] = {}
        for i in np.flatnonzero(missed).tolist():
            label = nearest[i]
            if label is None:
                continue
            k = _key(label)
            shown.setdefault(k, label)
            tallies.setdefault(int(codes[i]), Counter())[k] += 1
        for code, tally in tallies.items():
            k, count = tally.most_common(1)[0]
            confused[code] = (shown[k], count)
    rows = []
    for code in range(num):
        c = confused.get(code)
        rows.append(
            ClassRow(
                first[code],
                int(sizes[code]),
                {name: float(v[code]) for name, v in per_metric.items()},
                int(missed_count[code]),
                c[0] if c else None,
                c[1] if c else 0,
            )
        )
    return rows


def _class_summaries(
    metric: registry.Metric, values: np.ndarray, codes: np.ndarray, num: int
) -> np.ndarray:
    """Each class's summary of its values (NaN for a class without one)."""
    counts = np.bincount(codes, minlength=num)
    with np.errstate(invalid="ignore", divide="ignore"):
        if type(metric).summarize is registry.Metric.summarize:
            return np.bincount(codes, weights=values, minlength=num) / counts
    out = np.full(num, math.nan)
    order = np.argsort(codes, kind="stable")
    cuts = np.searchsorted(codes[order], np.arange(num + 1))
    for code in np.flatnonzero(counts).tolist():
        out[code] = metric.summarize(values[order[cuts[code] : cuts[code + 1]]])
    return out


# ----------------------------------------------------------------------------------------------
# Queries.


@dataclass(frozen=True)
class Failure:
    """One query of a run, as the failure gallery shows it."""

    index: int
    id: str
    label: Any
    path: str | None
    first_hit_rank: int
    nearest_label: Any = None


def query_at(run: ReportRun, i: int) -> Failure:
    q = run.record["queries"]
    paths = q.get("paths")
    labels = q.get("labels")
    nearest = q.get("nearest_label")
    return Failure(
        i,
        str(q["ids"][i]),
        None if labels is None else labels[i],
        None if not isinstance(paths, list) else paths[i],
        int(q["first_hit_rank"][i]),
        None if nearest is None else nearest[i],
    )


def failures(run: ReportRun, n: int = 24) -> tuple[list[Failure], int]:
    """The ``n`` evaluated queries whose first relevant item ranks lowest (the largest first-hit
    rank first, then query order), and the number of queries missed at rank 0.

    >>> r = {"metrics": {}, "queries": {"ids": list("abcd"), "first_hit_rank": [0, 4, -1, 2]}}
    >>> shown, missed = failures(ReportRun("r", r), 5)
    >>> [f.id for f in shown], missed
    (['b', 'd'], 2)
    """
    ranks = np.asarray(run.record["queries"]["first_hit_rank"], dtype=np.int64)
    missed = np.flatnonzero(ranks > 0)
    order = missed[np.lexsort((missed, -ranks[missed]))][: max(n, 0)]
    return [query_at(run, int(i)) for i in order], len(missed)


def _positions(a: ReportRun, b: ReportRun) -> np.ndarray:
    """For each query of ``a``, its row in ``b`` (the runs pair:
    [`recallkit.compare`][recallkit.comparison.compare])."""
    keys_a, keys_b = a.data.keys, b.data.keys
    if any(k[1] is None for k in keys_a + keys_b):
        keys_a = [(k[0], None) for k in keys_a]
        keys_b = [(k[0], None) for k in keys_b]
    at = {k: i for i, k in enumerate(keys_b)}
    return np.fromiter((at[k] for k in keys_a), dtype=np.int64, count=len(keys_a))


@dataclass(frozen=True)
class OnlyOne:
    """The queries that one run of a pair gets right at rank 0 and the other does not."""

    a: str
    b: str
    #: Queries right in ``a`` only (with ``b``'s first-hit rank), and in ``b`` only.
    only_a: list[tuple[Failure, int]]
    only_b: list[tuple[Failure, int]]
    count_a: int
    count_b: int


def most_telling(
    rows: np.ndarray, other_ranks: np.ndarray, labels: Sequence[Any] | None, n: int
) -> np.ndarray:
    """Of the queries ``rows`` (right at rank 0 in one run, at ``other_ranks[rows]`` in the
    other), the ``n`` that say the most: each class's queries by the other run's rank, largest
    first (the largest rank change), taken in turn from each class (the classes in order of their
    largest change, then of their first query), so that the choice spreads over the classes;
    returned by the other run's rank, largest first, then query order.

    >>> ranks = np.array([0, 9, 1, 5, 7, 2])
    >>> most_telling(np.arange(1, 6), ranks, ["a", "a", "a", "a", "b", "c"], 3).tolist()
    [1, 4, 5]
    """
    rows = np.asarray(rows, dtype=np.int64)
    if n <= 0 or rows.size == 0:
        return rows[:0]
    order = rows[np.lexsort((rows, -other_ranks[rows]))]  # largest change first, then row
    groups: dict[str, list[int]] = {}
    for i in order.tolist():
        groups.setdefault("" if labels is None else _key(labels[i]), []).append(i)
    chosen: list[int] = []
    queues = list(groups.values())  # in order of each class's largest change
    depth = 0
    while len(chosen) < n and any(depth < len(q) for q in queues):
        chosen += [q[depth] for q in queues if depth < len(q)][: n - len(chosen)]
        depth += 1
    picked = np.asarray(chosen, dtype=np.int64)
    return picked[np.lexsort((picked, -other_ranks[picked]))]


def only_one_right(summary: Summary, n: int = 24) -> list[OnlyOne]:
    """For each pair the comparison made, the queries that only one run gets right at rank 0
    (recall@1), with their counts: of each side the ``n`` that say the most
    ([`most_telling`][recallkit.reports.data.most_telling]: the largest rank change in the
    other run, spread over the classes)."""
    if summary.comparison is None:
        return []
    pairs = list(dict.fromkeys((r.a, r.b) for r in summary.comparison.rows))
    out = []
    for name_a, name_b in pairs:
        a, b = summary.run(name_a), summary.run(name_b)
        ranks_a = np.asarray(a.record["queries"]["first_hit_rank"], dtype=np.int64)
        ranks_b = np.asarray(b.record["queries"]["first_hit_rank"], dtype=np.int64)
        at = _positions(a, b)
        ranks_b = ranks_b[at]
        right_a, right_b = ranks_a == 0, ranks_b == 0
        evaluated = ranks_a >= 0
        only_a = np.flatnonzero(evaluated & right_a & ~right_b)
        only_b = np.flatnonzero(evaluated & right_b & ~right_a)
        labels = a.record["queries"].get("labels")
        shown_a = most_telling(only_a, ranks_b, labels, n)
        shown_b = most_telling(only_b, ranks_a, labels, n)
        out.append(
            OnlyOne(
                name_a,
                name_b,
                [(query_at(a, int(i)), int(ranks_b[i])) for i in shown_a],
                [(query_at(b, int(at[i])), int(ranks_a[i])) for i in shown_b],
                len(only_a),
                len(only_b),
            )
        )
    return out
