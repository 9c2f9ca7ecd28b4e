"""Shared pieces of the benchmark protocols: the result type, validation, JSON in and out.

Nothing here ranks anything: every rank comes from :func:`recallkit.ground_truth_ranks` or
:func:`recallkit.ground_truth_ranks_from_embeddings`.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recallkit._atomic import atomic_write

PathLike = str | os.PathLike[str]
METRICS = ("cosine", "dot", "euclidean")


class ProtocolResult(Mapping[str, float]):
    """A benchmark's metrics: a read-only mapping ``name -> value`` (fractions in [0, 1]).

    ``per_query`` holds the arrays behind the means (0-indexed ranks, per-query AP...),
    ``parts`` the per-category or per-task results of a benchmark that averages several, and
    ``convention`` names the definition followed (paper or official script). Values named in
    ``plain`` (mean and median ranks) are not fractions and print as they are.

    >>> r = ProtocolResult("toy", {"recall@1": 0.5}, convention="hard target", num_queries=2)
    >>> dict(r), r.num_queries
    ({'recall@1': 0.5}, 2)
    >>> print(r.table())
    toy (2 queries; hard target)
    metric    value
    recall@1  50.00
    """

    def __init__(
        self,
        benchmark: str,
        metrics: Mapping[str, float],
        *,
        convention: str,
        num_queries: int,
        per_query: Mapping[str, np.ndarray] | None = None,
        parts: Mapping[str, ProtocolResult] | None = None,
        plain: Sequence[str] = (),
    ) -> None:
        self.benchmark = benchmark
        self.convention = convention
        self.num_queries = int(num_queries)
        self._values = {str(k): float(v) for k, v in metrics.items()}
        arrays = {}
        for key, value in (per_query or {}).items():
            array = np.array(value)
            array.setflags(write=False)
            arrays[key] = array
        self.per_query: Mapping[str, np.ndarray] = arrays
        self.parts: Mapping[str, ProtocolResult] = dict(parts or {})
        self.plain = frozenset(plain)

    def __getitem__(self, key: str) -> float:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        body = ", ".join(f"{k!r}: {v:.4f}" for k, v in self._values.items())
        return f"ProtocolResult({self.benchmark!r}, {{{body}}})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: benchmark, convention, counts, metrics and the parts' metrics."""
        out: dict[str, Any] = {
            "benchmark": self.benchmark,
            "convention": self.convention,
            "num_queries": self.num_queries,
            "metrics": {k: _json_float(v) for k, v in self._values.items()},
        }
        if self.parts:
            out["parts"] = {name: part.to_dict() for name, part in self.parts.items()}
        return out

    def table(self) -> str:
        """A plain-text table in percent (2 decimals), one row per part when there are parts."""
        title = f"{self.benchmark} ({self.num_queries} queries; {self.convention})"
        if not self.parts:
            rows = [[k, self._format(k, v)] for k, v in self._values.items()]
            return title + "\n" + format_table(["metric", "value"], rows)
        columns: list[str] = []
        for part in self.parts.values():
            columns += [k for k in part if k not in columns]
        rows = [
            [name, str(part.num_queries)]
            + [part._format(c, part.get(c, math.nan)) for c in columns]
            for name, part in self.parts.items()
        ]
        text = title + "\n" + format_table(["part", "queries", *columns], rows)
        overall = [[k, self._format(k, v)] for k, v in self._values.items()]
        if overall:
            text += "\n" + format_table(["average", "value"], overall)
        return text

    def _format(self, key: str, value: float) -> str:
        if math.isnan(value):
            return "-"
        return f"{value:.2f}" if key in self.plain else f"{100 * value:.2f}"


def _json_float(value: float) -> float | None:
    return None if math.isnan(value) else value


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces.

    >>> print(format_table(["a", "bb"], [["xyz", "1"]]))
    a    bb
    xyz  1
    """
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def fail(func: str, name: str, requirement: str, got: Any) -> ValueError:
    """The library's standard error for parameter ``name`` of ``func``."""
    return ValueError(f"The '{name}' parameter of {func} must be {requirement}. Got {got}.")


def check_ks(ks: Any, func: str, name: str = "ks") -> tuple[int, ...]:
    """``ks`` as a non-empty tuple of distinct positive ints."""
    if isinstance(ks, numbers.Integral) and not isinstance(ks, bool):
        ks = (ks,)
    if isinstance(ks, str) or not isinstance(ks, Sequence | np.ndarray) or len(ks) == 0:
        raise fail(func, name, "a non-empty sequence of positive integers", repr(ks))
    out = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
            raise fail(func, name, "positive integers", repr(k))
        out.append(int(k))
    if len(set(out)) != len(out):
        raise fail(func, name, "distinct", out)
    return tuple(out)


def check_choice(value: Any, choices: Sequence[str], func: str, name: str) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise fail(func, name, f"one of {tuple(choices)}", repr(value))
    return value


def check_metric(metric: Any, func: str) -> str:
    return check_choice(metric, METRICS, func, "metric")


def as_scores(scores: Any, func: str, name: str = "scores") -> np.ndarray:
    """A 2-D float array of similarities (higher is better); NaN is rejected.

    Float16/bfloat16 are upcast to float32 (exactly); float64 stays float64.
    """
    if isinstance(scores, torch.Tensor):
        tensor = scores.detach().cpu()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.to(torch.float32)
        scores = tensor.numpy()
    if not isinstance(scores, np.ndarray):
        raise fail(func, name, "a torch.Tensor or numpy.ndarray", type(scores).__name__)
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise fail(func, name, "a non-empty 2-D array", f"shape {scores.shape}")
    if scores.dtype.kind not in "fiu":
        raise fail(func, name, "real-valued", scores.dtype)
    if scores.dtype != np.float64:
        scores = scores.astype(np.float32)
    if np.isnan(scores).any():
        row = int(np.nonzero(np.isnan(scores).any(axis=1))[0][0])
        raise fail(func, name, "free of NaN", f"NaN in row {row}")
    return scores


def check_rows(x: Any, expected: int, func: str, name: str, what: str) -> None:
    """Raise unless ``x`` has ``expected`` rows (one per ``what``)."""
    rows = int(x.shape[0]) if hasattr(x, "shape") and len(x.shape) else len(x)
    if rows != expected:
        raise fail(func, name, f"one row per {what} ({expected} rows)", f"{rows} rows")


def check_columns(x: Any, expected: int, func: str, name: str, what: str) -> None:
    """Raise unless ``x`` has ``expected`` columns (one per ``what``)."""
    cols = int(x.shape[1])
    if cols != expected:
        raise fail(func, name, f"one column per {what} ({expected} columns)", f"{cols} columns")


def pad_lists(lists: Sequence[Sequence[int]], fill: int = -1) -> np.ndarray:
    """A ``(len(lists), max_len)`` int64 array, rows padded with ``fill``.

    >>> pad_lists([[3], [1, 2], []]).tolist()
    [[3, -1], [1, 2], [-1, -1]]
    """
    width = max((len(x) for x in lists), default=0)
    out = np.full((len(lists), max(width, 1)), fill, dtype=np.int64)
    for row, values in enumerate(lists):
        out[row, : len(values)] = values
    return out


def load_json(path: PathLike, what: str) -> Any:
    """Parse a JSON file; a missing or malformed file raises an error naming it and ``what``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


def write_json(path: PathLike, payload: Any) -> Path:
    """Write ``payload`` as JSON atomically (a reader never sees half a file); return the path."""
    path = Path(path)
    with atomic_write(path, "w") as handle:
        json.dump(payload, handle)
        handle.write("\n")
    return path


def require_keys(entry: Any, keys: Sequence[str], where: str) -> None:
    """Raise naming ``where`` when ``entry`` is not a dict holding every key of ``keys``."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(entry).__name__}")
    missing = [k for k in keys if k not in entry]
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(repr(k) for k in missing)}")


def index_of(names: Sequence[Any], what: str) -> dict[Any, int]:
    """Map each name to its position; duplicates raise an error naming the first one."""
    table: dict[Any, int] = {}
    for position, name in enumerate(names):
        if name in table:
            raise ValueError(
                f"{what}: {name!r} appears twice (positions {table[name]} and {position})"
            )
        table[name] = position
    return table


def as_embeddings(x: Any, func: str, name: str, ndim: int = 2) -> torch.Tensor:
    """``x`` as a floating torch tensor of ``ndim`` dimensions, finite, float32 at least."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.ascontiguousarray(x))
    if not isinstance(x, torch.Tensor):
        raise fail(func, name, "a torch.Tensor or numpy.ndarray", type(x).__name__)
    x = x.detach()
    if x.ndim != ndim or 0 in x.shape:
        raise fail(func, name, f"a non-empty {ndim}-D array", f"shape {tuple(x.shape)}")
    if x.dtype != torch.float64:
        x = x.to(torch.float32)
    if not bool(torch.isfinite(x).all()):
        raise fail(func, name, "finite (no NaN or infinity)", "a non-finite value")
    return x


def _similarity(q: torch.Tensor, c: torch.Tensor, metric: str) -> torch.Tensor:
    """Scores of ``q`` (b, d) against its own candidates ``c`` (b, g, d): higher is better."""
    if metric == "euclidean":
        return -((c - q[:, None, :]) ** 2).sum(dim=-1)
    return torch.einsum("bd,bgd->bg", q, c)


def _normalised(x: torch.Tensor, func: str, name: str) -> torch.Tensor:
    norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    if bool((norms == 0).any()):
        raise fail(func, name, "non-zero vectors under metric='cosine'", "a zero vector")
    return x / norms


def candidate_scores(
    query: Any,
    candidates: Any,
    *,
    metric: str,
    func: str,
    device: Any = None,
    query_name: str = "query",
    candidates_name: str = "candidates",
    chunk_size: int = 4096,
) -> np.ndarray:
    """Scores of each query against its own candidate list, shape ``(n, g)``.

    ``query`` is ``(n, d)`` and ``candidates`` ``(n, g, d)``. Scores follow the core's metric
    definitions: cosine (inner product of L2-normalised vectors), dot, or negative squared
    Euclidean distance (the same order as the core's ``2 q·r - |r|²`` along a row).
    """
    q = as_embeddings(query, func, query_name, 2)
    c = as_embeddings(candidates, func, candidates_name, 3)
    if c.shape[0] != q.shape[0]:
        raise fail(func, candidates_name, f"one row per query ({q.shape[0]})", c.shape[0])
    if c.shape[2] != q.shape[1]:
        raise fail(func, candidates_name, f"of the query's dimension {q.shape[1]}", c.shape[2])
    dtype = torch.float64 if torch.float64 in (q.dtype, c.dtype) else torch.float32
    dev = torch.device(device) if device is not None else q.device
    out = np.empty(tuple(c.shape[:2]), dtype=np.float64 if dtype == torch.float64 else np.float32)
    for start in range(0, q.shape[0], chunk_size):
        qb = q[start : start + chunk_size].to(dev, dtype)
        cb = c[start : start + chunk_size].to(dev, dtype)
        if metric == "cosine":
            qb = _normalised(qb, func, query_name)
            cb = _normalised(cb, func, candidates_name)
        out[start : start + len(qb)] = _similarity(qb, cb, metric).cpu().numpy()
    return out
