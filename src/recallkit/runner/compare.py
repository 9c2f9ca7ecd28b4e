"""Comparing two runs on the same queries: recall@K side by side, with a paired bootstrap interval.

Both run files (``--json``) store each query's identity and first-hit rank. The runs are paired
query by query; at each K a query is a hit when ``0 <= rank < K`` (the core's
:func:`recallkit.recall_from_ranks` gives the recall values). The difference ``recall_a -
recall_b`` is the mean of the per-query differences ``d_i = hit_a_i - hit_b_i`` and its
confidence interval is the percentile interval of a paired bootstrap (Efron & Tibshirani, 1993):
resample the queries with replacement, keeping each query's pair together, and take the mean of
``d`` each time. ``d_i`` takes three values (+1, -1, 0), so a resample is fully described by how
many of each it drew: a multinomial draw over the three counts, which is what is sampled (the
same distribution as resampling indices, in O(1) memory per resample). The seed is fixed, so the
interval is reproducible. The difference is called significant when the interval excludes 0.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recallkit.ground_truth import recall_from_ranks
from recallkit.runner._errors import RunnerError
from recallkit.runner.history import RUN_HINT, wrong_kind

DEFAULT_RESAMPLES = 10_000
DEFAULT_SEED = 0


def paired_bootstrap(
    hits_a: Any,
    hits_b: Any,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float, float]:
    """Mean paired difference of two hit vectors and its percentile bootstrap interval.

    Returns ``(mean(hits_a - hits_b), low, high)``. When every query favours ``a`` (or none
    differs) every resample gives the same difference, so the interval is a single point:

    >>> paired_bootstrap([1, 1, 1], [0, 0, 0])
    (1.0, 1.0, 1.0)
    >>> paired_bootstrap([1, 0, 1], [1, 0, 1])
    (0.0, 0.0, 0.0)
    """
    a = np.asarray(hits_a, dtype=bool)
    b = np.asarray(hits_b, dtype=bool)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(
            "The 'hits_a' and 'hits_b' parameters of paired_bootstrap must be non-empty 1-D "
            f"arrays of one length. Got shapes {a.shape} and {b.shape}."
        )
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples <= 0:
        raise ValueError(
            "The 'n_resamples' parameter of paired_bootstrap must be a positive integer. "
            f"Got {n_resamples!r}."
        )
    if not 0 < confidence < 1:
        raise ValueError(
            f"The 'confidence' parameter of paired_bootstrap must be in (0, 1). Got {confidence!r}."
        )
    n = a.size
    a_only = int(np.count_nonzero(a & ~b))
    b_only = int(np.count_nonzero(~a & b))
    diff = (a_only - b_only) / n
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, [a_only / n, b_only / n, (n - a_only - b_only) / n], n_resamples)
    diffs = (counts[:, 0] - counts[:, 1]) / n
    tail = (1 - confidence) / 2
    low, high = np.quantile(diffs, [tail, 1 - tail])
    return float(diff), float(low), float(high)


@dataclass(frozen=True)
class KComparison:
    """One K of a comparison."""

    k: int
    recall_a: float
    recall_b: float
    diff: float
    low: float
    high: float
    a_only: int
    b_only: int

    @property
    def significant(self) -> bool:
        """Whether the interval excludes zero."""
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class Comparison:
    """Two runs compared at each K on their paired, evaluated queries."""

    name_a: str
    name_b: str
    num_queries: int
    confidence: float
    n_resamples: int
    seed: int
    rows: tuple[KComparison, ...]


def load_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run file written by ``recallkit evaluate --json`` and check its per-query part."""
    path = Path(path)
    if not path.is_file():
        raise RunnerError(f"The run file '{path}' does not exist.")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RunnerError(f"The run file '{path}' cannot be read as text: {error}.") from None
    wrong = wrong_kind(path, text, "run")
    if wrong is not None:
        raise wrong
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise RunnerError(f"The run file '{path}' is not JSON: {error}; {RUN_HINT}.") from None
    queries = record.get("queries") if isinstance(record, dict) else None
    if (
        not isinstance(queries, dict)
        or not isinstance(queries.get("ids"), list)
        or not isinstance(queries.get("first_hit_rank"), list)
        or len(queries["ids"]) != len(queries["first_hit_rank"])
    ):
        raise RunnerError(
            f"The run file '{path}' has no per-query ranks ('queries' with 'ids' and "
            "'first_hit_rank'); write it with recallkit evaluate --json."
        )
    return record


def _query_keys(record: Mapping[str, Any], name: str) -> list[tuple[str, str | None]]:
    """Each query's pairing key: ``(id, path)``, or ``(id, None)`` when the run has no paths.

    A manifest's ``id`` column may repeat (several photos of one product); the image path
    then tells the queries apart. A key that still repeats cannot be paired and is an error.
    """
    queries = record["queries"]
    ids = [str(i) for i in queries["ids"]]
    paths = queries.get("paths")
    if not isinstance(paths, list) or len(paths) != len(ids):
        paths = [None] * len(ids)
    keys = [(i, None if p is None else str(p)) for i, p in zip(ids, paths, strict=True)]
    if len(set(keys)) != len(keys):
        counts = Counter(keys)
        repeated = next(k for k in keys if counts[k] > 1)
        count = counts[repeated]
        where = "" if repeated[1] is None else f" and path {repeated[1]!r}"
        hint = (
            "its queries need distinct ids, or paths (run files written by recallkit "
            "evaluate --json have them)"
            if repeated[1] is None
            else "the same image is listed more than once with the same id"
        )
        raise RunnerError(
            f"{name} has {count} queries with id {repeated[0]!r}{where}, so they cannot be "
            f"paired with the other run's queries: {hint}."
        )
    return keys


def _describe(key: tuple[str, str | None]) -> str:
    ident, path = key
    if path is None or path == ident:
        return repr(ident)
    return f"{ident!r} ({path})"


def _pair(a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str]) -> np.ndarray:
    """Positions in ``b`` of ``a``'s queries, or a RunnerError when the query sets differ.

    Queries are paired by id and, when both runs record them, by image path too.
    """
    keys_a, keys_b = _query_keys(a, names[0]), _query_keys(b, names[1])
    if any(k[1] is None for k in keys_a) or any(k[1] is None for k in keys_b):
        keys_a = _query_keys({"queries": {"ids": a["queries"]["ids"]}}, names[0])
        keys_b = _query_keys({"queries": {"ids": b["queries"]["ids"]}}, names[1])
    if keys_a == keys_b:
        return np.arange(len(keys_a))
    position_b = {key: i for i, key in enumerate(keys_b)}
    only_a = [k for k in keys_a if k not in position_b]
    set_a = set(keys_a)
    only_b = [k for k in keys_b if k not in set_a]
    if only_a or only_b:
        example = only_a[0] if only_a else only_b[0]
        raise RunnerError(
            f"{names[0]} and {names[1]} did not evaluate the same queries: {len(only_a)} only "
            f"in {names[0]}, {len(only_b)} only in {names[1]} (e.g. {_describe(example)}); "
            "compare runs on the same dataset."
        )
    return np.fromiter((position_b[k] for k in keys_a), dtype=np.int64, count=len(keys_a))


def compare_records(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    ks: Sequence[int] | None = None,
    names: tuple[str, str] = ("a", "b"),
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int = DEFAULT_SEED,
) -> Comparison:
    """Compare two run records (dicts from :func:`load_run`) query by query.

    ``ks`` defaults to the Ks both runs report, in the order of ``a``. Queries are paired by
    identity: their id together with their image path (``queries.paths`` of the run files),
    so queries that share a manifest id are paired by image; without paths in either run the
    ids alone must be unique. Both runs must have the same queries, with the same labels,
    excluded alike.

    >>> a = {"ks": [1], "queries": {"ids": ["q1", "q2"], "first_hit_rank": [0, 0]}}
    >>> b = {"ks": [1], "queries": {"ids": ["q2", "q1"], "first_hit_rank": [3, 0]}}
    >>> row = compare_records(a, b).rows[0]
    >>> row.recall_a, row.recall_b, row.diff, row.a_only
    (1.0, 0.5, 0.5, 1)
    """
    at_b = _pair(a, b, names)
    ranks_a = np.asarray(a["queries"]["first_hit_rank"], dtype=np.int64)
    ranks_b = np.asarray(b["queries"]["first_hit_rank"], dtype=np.int64)[at_b]
    labels_a, labels_b = a["queries"].get("labels"), b["queries"].get("labels")
    if labels_a is not None and labels_b is not None:
        keys_a = np.asarray([json.dumps(v) for v in labels_a])
        keys_b = np.asarray([json.dumps(v) for v in labels_b])
        mismatch = np.flatnonzero(keys_a != keys_b[at_b])
        if len(mismatch):
            raise RunnerError(
                f"{names[0]} and {names[1]} give different labels to {len(mismatch)} queries "
                f"(e.g. {a['queries']['ids'][int(mismatch[0])]!r}); compare runs on the same "
                "dataset."
            )
    evaluated_a, evaluated_b = ranks_a >= 0, ranks_b >= 0
    if not np.array_equal(evaluated_a, evaluated_b):
        i = int(np.flatnonzero(evaluated_a != evaluated_b)[0])
        raise RunnerError(
            f"{names[0]} and {names[1]} exclude different queries (e.g. "
            f"{a['queries']['ids'][i]!r}: no gallery image with its label in one run only); "
            "compare runs on the same gallery."
        )
    if not evaluated_a.any():
        raise RunnerError(f"{names[0]} and {names[1]} have no evaluated query to compare.")
    if ks is None:
        ks_b = set(b.get("ks", []))
        ks = [int(k) for k in a.get("ks", []) if k in ks_b]
        if not ks:
            raise RunnerError(
                f"{names[0]} and {names[1]} report no common K; choose some with --ks."
            )
    ranks_a, ranks_b = ranks_a[evaluated_a], ranks_b[evaluated_a]
    values_a = recall_from_ranks(ranks_a, ks)
    values_b = recall_from_ranks(ranks_b, ks)
    rows = []
    for k in ks:
        diff, low, high = paired_bootstrap(
            ranks_a < k, ranks_b < k, n_resamples=n_resamples, confidence=confidence, seed=seed
        )
        rows.append(
            KComparison(
                int(k),
                values_a[f"recall@{k}"],
                values_b[f"recall@{k}"],
                diff,
                low,
                high,
                int(np.count_nonzero((ranks_a < k) & (ranks_b >= k))),
                int(np.count_nonzero((ranks_a >= k) & (ranks_b < k))),
            )
        )
    return Comparison(
        names[0], names[1], int(evaluated_a.sum()), confidence, n_resamples, seed, tuple(rows)
    )


def format_comparison(c: Comparison) -> str:
    """The side-by-side table printed by ``recallkit compare``.

    >>> row = KComparison(1, 0.75, 0.5, 0.25, 0.1, 0.4, 2, 0)
    >>> print(format_comparison(Comparison("a.json", "b.json", 8, 0.95, 10000, 0, (row,))))
    8 paired queries; 95% paired bootstrap interval (10000 resamples, seed 0)
    <BLANKLINE>
      metric    a.json  b.json  a - b    95% interval        a only  b only  significant
      recall@1  0.7500  0.5000  +0.2500  [+0.1000, +0.4000]       2       0  yes (a better)
    """
    pct = f"{100 * c.confidence:g}%"
    wa = max(len(c.name_a), 6)
    wb = max(len(c.name_b), 6)
    wm = max([len("metric")] + [len(f"recall@{r.k}") for r in c.rows])
    lines = [
        (
            f"{c.num_queries} paired queries; {pct} paired bootstrap interval "
            f"({c.n_resamples} resamples, seed {c.seed})"
        ),
        "",
        (
            f"  {'metric':<{wm}}  {c.name_a:>{wa}}  {c.name_b:>{wb}}  {'a - b':<7}  "
            f"{pct + ' interval':<18}  {'a only':>6}  {'b only':>6}  significant"
        ),
    ]
    for r in c.rows:
        if r.significant:
            verdict = "yes (a better)" if r.diff > 0 else "yes (b better)"
        else:
            verdict = "no"
        interval = f"[{r.low:+.4f}, {r.high:+.4f}]"
        lines.append(
            f"  {f'recall@{r.k}':<{wm}}  {r.recall_a:>{wa}.4f}  {r.recall_b:>{wb}.4f}  "
            f"{r.diff:+.4f}  {interval:<18}  {r.a_only:>6}  {r.b_only:>6}  {verdict}"
        )
    return "\n".join(lines)


def comparison_record(c: Comparison) -> dict[str, Any]:
    """The comparison as a JSON-ready dict."""
    return {
        "a": c.name_a,
        "b": c.name_b,
        "num_queries": c.num_queries,
        "confidence": c.confidence,
        "n_resamples": c.n_resamples,
        "seed": c.seed,
        "ks": [
            {
                "k": r.k,
                "recall_a": r.recall_a,
                "recall_b": r.recall_b,
                "diff": r.diff,
                "low": r.low,
                "high": r.high,
                "a_only": r.a_only,
                "b_only": r.b_only,
                "significant": r.significant,
            }
            for r in c.rows
        ],
    }
