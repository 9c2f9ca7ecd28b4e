"""Comparing two runs on the same queries: recall@K side by side, with a paired bootstrap interval.

Both run files (``--json``) store each query's identity and first-hit rank. The runs are paired
query by query; at each K a query is a hit when ``0 <= rank < K`` (the core's
:func:`recallkit.recall_from_ranks` gives the recall values). The difference ``recall_a -
recall_b`` is the mean of the per-query differences ``d_i = hit_a_i - hit_b_i`` and its
confidence interval is the percentile interval of a paired bootstrap (Efron & Tibshirani, 1993):
resample the queries with replacement, keeping each query's pair together, and take the mean of
``d`` each time. ``d_i`` takes three values (+1, -1, 0), so a resample is fully described by how
many of each it drew: a multinomial draw over the three counts, which is what is sampled (the
same distribution as resampling indices). The resamples are drawn in batches of
:data:`BATCH` and only a histogram of their integer differences is kept, so memory does not grow
with their number; the interval is read from that histogram as :func:`numpy.quantile` (its
default, linear interpolation between order statistics) reads it from the sorted differences.
The number of resamples is capped at :data:`MAX_RESAMPLES` (time, not memory, grows with it).
The seed is fixed, so the interval is reproducible. The difference is called significant when
the interval excludes 0.

Two runs are compared only when they rest on the same definitions (:mod:`recallkit.definitions`:
similarity, tie rule, self-exclusion, lone queries, K clamp); a run file without a
``definitions`` record (written before they were recorded) cannot be checked, and the
comparison says so in a note.
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

from recallkit import metrics as registry
from recallkit._pinned import read_file
from recallkit.definitions import check_definitions, differences
from recallkit.exceptions import fail
from recallkit.ground_truth import recall_from_ranks
from recallkit.records import RUN_FORMATS
from recallkit.runner._errors import RunnerError
from recallkit.runner.defaults import DEFAULT_RESAMPLES, DEFAULT_SEED, MAX_RESAMPLES
from recallkit.runner.history import RUN_HINT, wrong_kind

#: Resamples drawn at a time; memory holds one batch and one histogram.
BATCH = 1 << 16


def check_resamples(n_resamples: Any, func: str = "paired_bootstrap") -> int:
    """``n_resamples`` if it is an integer in ``[1, MAX_RESAMPLES]``, else a ``ValueError``."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples <= 0:
        raise fail(func, "n_resamples", "a positive integer", repr(n_resamples))
    if n_resamples > MAX_RESAMPLES:
        raise fail(
            func, "n_resamples", f"at most {MAX_RESAMPLES:,} (about 20 s per K)", f"{n_resamples:,}"
        )
    return n_resamples


def _histogram_quantiles(counts: np.ndarray, offset: int, qs: Sequence[float]) -> list[float]:
    """Quantiles of the values ``offset + j`` repeated ``counts[j]`` times, as numpy.quantile.

    The ``linear`` method: at position ``h = (N - 1) q`` of the sorted values, interpolate
    between the order statistics ``floor(h)`` and ``floor(h) + 1``.

    >>> _histogram_quantiles(np.array([1, 0, 2, 1]), -1, [0.0, 0.5, 0.9, 1.0])
    [-1.0, 1.0, 1.7000000000000002, 2.0]
    """
    total = int(counts.sum())
    ends = np.cumsum(counts)
    out = []
    for q in qs:
        h = (total - 1) * q
        lo = int(np.floor(h))
        hi = min(lo + 1, total - 1)
        x_lo = offset + int(np.searchsorted(ends, lo, side="right"))
        x_hi = offset + int(np.searchsorted(ends, hi, side="right"))
        t = h - lo
        out.append(float(x_lo + (x_hi - x_lo) * t))
    return out


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
    check_resamples(n_resamples)
    if not 0 < confidence < 1:
        raise fail("paired_bootstrap", "confidence", "in (0, 1)", repr(confidence))
    n = a.size
    a_only = int(np.count_nonzero(a & ~b))
    b_only = int(np.count_nonzero(~a & b))
    diff = (a_only - b_only) / n
    rng = np.random.default_rng(seed)
    p = [a_only / n, b_only / n, (n - a_only - b_only) / n]
    # A resample's difference is (count_a - count_b) / n: an integer in [-n, n] over n.
    histogram = np.zeros(2 * n + 1, dtype=np.int64)
    left = n_resamples
    while left:
        size = min(left, BATCH)
        counts = rng.multinomial(n, p, size)
        d = counts[:, 0] - counts[:, 1]
        low_d = int(d.min())
        found = np.bincount(d - low_d)
        histogram[n + low_d : n + low_d + len(found)] += found
        left -= size
    tail = (1 - confidence) / 2
    low, high = _histogram_quantiles(histogram, -n, [tail, 1 - tail])
    return float(diff), low / n, high / n


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
    #: The definitions id both runs share, ``None`` when a run does not record its definitions.
    definitions_id: str | None = None
    #: What the reader should know: the K left out, definitions that could not be checked.
    notes: tuple[str, ...] = ()


_RANK_RULE = "a rank is a whole number, 0 or more, or -1 for an excluded query"


def _bad(where: str, field: str, index: int | None, value: Any, rule: str) -> RunnerError:
    at = "" if index is None else f" at query {index}"
    try:
        shown = json.dumps(value)
    except (TypeError, ValueError):
        shown = repr(value)
    if len(shown) > 40:
        shown = shown[:39] + "…"
    return RunnerError(f"{where} has a bad '{field}' value{at}: {shown}; {rule}.")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_run(record: Any, where: str) -> dict[str, Any]:
    """Check the parts of a run record that a comparison reads; return it, or raise.

    ``queries`` must hold ``ids`` (strings or integers) and ``first_hit_rank`` (whole
    numbers, 0 or more, or -1 for an excluded query, below ``num_gallery`` when the record
    gives it), one per query; ``labels`` (no ``null``) and ``paths`` (strings, or ``null``
    for an in-memory image), when present, one per query too. ``ks``, when present, are
    positive integers, and ``definitions``, when present, is a definitions record
    (:func:`recallkit.definitions.check_definitions`). The :class:`RunnerError` starts with
    ``where`` (``"The run file 'a.json'"``) and names the field and the query.

    >>> check_run({"queries": {"ids": ["q"], "first_hit_rank": [1.5]}}, "The run a")
    Traceback (most recent call last):
    ...
    recallkit.runner._errors.RunnerError: The run a has a bad 'queries.first_hit_rank' value at \
query 0: 1.5; a rank is a whole number, 0 or more, or -1 for an excluded query.
    """
    queries = record.get("queries") if isinstance(record, dict) else None
    if (
        not isinstance(queries, dict)
        or not isinstance(queries.get("ids"), list)
        or not isinstance(queries.get("first_hit_rank"), list)
    ):
        raise RunnerError(
            f"{where} has no per-query ranks ('queries' with 'ids' and 'first_hit_rank', one "
            "per query); write it with recallkit evaluate --json."
        )
    kind = record.get("format")
    if kind is not None and kind not in RUN_FORMATS:
        raise _bad(where, "format", None, kind, f"this recallkit reads {', '.join(RUN_FORMATS)}")
    if len(queries["ids"]) != len(queries["first_hit_rank"]):
        raise RunnerError(
            f"{where} has {len(queries['ids'])} query ids but {len(queries['first_hit_rank'])} "
            "first-hit ranks ('queries.ids' and 'queries.first_hit_rank' have one entry per "
            "query); was the file edited?"
        )
    n = len(queries["ids"])
    for i, ident in enumerate(queries["ids"]):
        if not (isinstance(ident, str) or _is_int(ident)):
            raise _bad(where, "queries.ids", i, ident, "an id is a string")
    gallery = record.get("num_gallery")
    bound = gallery if _is_int(gallery) and gallery > 0 else 2**62
    for i, rank in enumerate(queries["first_hit_rank"]):
        if not _is_int(rank) or rank < -1:
            raise _bad(where, "queries.first_hit_rank", i, rank, _RANK_RULE)
        if rank >= bound:
            rule = (
                f"a rank is below the {gallery} gallery images (num_gallery)"
                if bound == gallery
                else _RANK_RULE
            )
            raise _bad(where, "queries.first_hit_rank", i, rank, rule)
    for field, allowed, rule in (
        ("labels", lambda v: v is not None, "a query's label cannot be null"),
        ("paths", lambda v: v is None or isinstance(v, str), "a path is a string (or null)"),
    ):
        values = queries.get(field)
        if values is None and field == "paths":
            continue
        if field not in queries:
            continue
        if not isinstance(values, list) or len(values) != n:
            raise _bad(where, f"queries.{field}", None, values, f"it is a list of {n} entries")
        for i, value in enumerate(values):
            if not allowed(value):
                raise _bad(where, f"queries.{field}", i, value, rule)
    if "ks" in record:
        ks = record["ks"]
        if not isinstance(ks, list) or not all(_is_int(k) and k > 0 for k in ks):
            raise _bad(where, "ks", None, ks, "the K values are positive integers")
    if "definitions" in record:
        try:
            check_definitions(record["definitions"], f"{where} has a 'definitions' record that")
        except ValueError as error:
            raise RunnerError(str(error)) from None
    return record


def load_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run file written by ``recallkit evaluate --json`` and check it (:func:`check_run`)."""
    path = Path(path)
    if not path.is_file():
        raise RunnerError(f"The run file '{path}' does not exist.")
    try:  # through one descriptor, checked unchanged (and recorded for the command line)
        text = read_file(path, f"The run file '{path}'").decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RunnerError(f"The run file '{path}' cannot be read as text: {error}.") from None
    wrong = wrong_kind(path, text, "run")
    if wrong is not None:
        raise wrong
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise RunnerError(f"The run file '{path}' is not JSON: {error}; {RUN_HINT}.") from None
    return check_run(record, f"The run file '{path}'")


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
        example, where = (only_a[0], names[0]) if only_a else (only_b[0], names[1])
        raise RunnerError(
            f"{names[0]} ({len(keys_a)} queries) and {names[1]} ({len(keys_b)} queries) did not "
            f"evaluate the same queries: {len(only_a)} only in {names[0]}, {len(only_b)} only "
            f"in {names[1]}; the first one only in {where}: {_describe(example)}. Compare runs "
            "on the same dataset (queries are named by their path relative to their folder, or "
            "by manifest id)."
        )
    return np.fromiter((position_b[k] for k in keys_a), dtype=np.int64, count=len(keys_a))


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(value)


def check_definitions_match(
    a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str]
) -> tuple[str | None, list[str]]:
    """The definitions id two runs share and the notes to print, or a RunnerError.

    Runs whose definitions differ in any field but the recallkit version are refused, the
    fields named. A run without a ``definitions`` record cannot be checked: a note says so
    and the id is ``None``. Different recallkit versions under the same definitions give a
    note.
    """
    da, db = a.get("definitions"), b.get("definitions")
    if da is None or db is None:
        missing = [name for name, d in zip(names, (da, db), strict=True) if d is None]
        which = f"{missing[0]} has no" if len(missing) == 1 else "neither run file has a"
        note = (
            f"{which} definitions record (written before recallkit recorded them), so "
            "the similarity, tie rule and exclusion rules of the two runs cannot be checked "
            "to match; compared anyway."
        )
        return None, [note]
    fields = differences(da, db)
    if fields:
        listed = "; ".join(
            f"{field} ({_shown(da.get(field))} in {names[0]}, {_shown(db.get(field))} in "
            f"{names[1]})"
            for field in fields
        )
        raise RunnerError(
            f"{names[0]} and {names[1]} were computed under different definitions: {listed}; "
            "recall@K values are comparable only under the same definitions."
        )
    notes = []
    if da.get("recallkit") != db.get("recallkit"):
        notes.append(
            f"{names[0]} was written by recallkit {da.get('recallkit')} and {names[1]} by "
            f"{db.get('recallkit')}, under the same definitions ({da['id']})."
        )
    return str(da["id"]), notes


def _common_ks(
    a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str]
) -> tuple[list[int], list[str]]:
    """The K both runs report (in ``a``'s order), and a note naming the K left out."""
    ks_a = [int(k) for k in a.get("ks", [])]
    ks_b = [int(k) for k in b.get("ks", [])]
    ks = [k for k in ks_a if k in ks_b]
    if not ks:
        raise RunnerError(f"{names[0]} and {names[1]} report no common K; choose some with --ks.")
    only_a = [k for k in ks_a if k not in ks]
    only_b = [k for k in ks_b if k not in ks]
    if not only_a and not only_b:
        return ks, []
    skipped = []
    for only, name in ((only_a, names[0]), (only_b, names[1])):
        if only:
            skipped.append(f"{', '.join(map(str, only))} (only in {name})")
    note = (
        f"the runs report different K: comparing K = {', '.join(map(str, ks))} (in both); "
        f"skipped K = {'; '.join(skipped)}; --ks chooses others (ranks give any K)."
    )
    return ks, [note]


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

    Both are checked first (:func:`check_run`), and so are their definitions
    (:func:`check_definitions_match`): runs under different definitions are refused. ``ks``
    defaults to the Ks both runs report, in the order of ``a``; when the runs report different
    Ks, a note (in ``Comparison.notes``) names those compared and those skipped. Queries are
    paired by identity: their id together with their image path (``queries.paths`` of the run
    files), so queries that share a manifest id are paired by image; without paths in either
    run the ids alone must be unique. Both runs must have the same queries, with the same
    labels, excluded alike.

    >>> a = {"ks": [1], "queries": {"ids": ["q1", "q2"], "first_hit_rank": [0, 0]}}
    >>> b = {"ks": [1], "queries": {"ids": ["q2", "q1"], "first_hit_rank": [3, 0]}}
    >>> row = compare_records(a, b).rows[0]
    >>> row.recall_a, row.recall_b, row.diff, row.a_only
    (1.0, 0.5, 0.5, 1)
    """
    check_resamples(n_resamples, "compare_records")
    for record, name in zip((a, b), names, strict=True):
        check_run(record, f"The run {name}")
    definitions_id, notes = check_definitions_match(a, b, names)
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
        ks, k_notes = _common_ks(a, b, names)
        notes += k_notes
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
                values_a[registry.Recall(k).name],
                values_b[registry.Recall(k).name],
                diff,
                low,
                high,
                int(np.count_nonzero((ranks_a < k) & (ranks_b >= k))),
                int(np.count_nonzero((ranks_a >= k) & (ranks_b < k))),
            )
        )
    return Comparison(
        names[0],
        names[1],
        int(evaluated_a.sum()),
        confidence,
        n_resamples,
        seed,
        tuple(rows),
        definitions_id,
        tuple(notes),
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
    wm = max([len("metric")] + [len(registry.Recall(r.k).name) for r in c.rows])
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
            f"  {registry.Recall(r.k).name:<{wm}}  {r.recall_a:>{wa}.4f}  {r.recall_b:>{wb}.4f}  "
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
        "definitions_id": c.definitions_id,
        "notes": list(c.notes),
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
