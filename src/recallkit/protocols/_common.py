"""Shared pieces of the benchmark protocols: the result type, JSON in and out, per-query scores.

Validation is [`recallkit._inputs.checks`][recallkit._inputs.checks]'s, as everywhere in the
library.

Nothing here ranks anything: every rank comes from
[`recallkit.ground_truth_ranks`][recallkit.ground_truth.ground_truth_ranks] or
[`recallkit.ground_truth_ranks_from_embeddings`][recallkit.ground_truth.ground_truth_ranks_from_embeddings].
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recallkit import engine
from recallkit._inputs import checks as _checks
from recallkit._inputs.pinned import read_file
from recallkit.engine import memory_budget
from recallkit.exceptions import Text
from recallkit.ground_truth import Ranker
from recallkit.options import Options, fill_docs
from recallkit.result import Result
from recallkit.runfiles._atomic import atomic_write

PathLike = str | os.PathLike[str]


#: The ``path`` entry and the Returns section of the functions that write a submission file.
SUBMISSION_PATH = """path : str or os.PathLike
    The JSON file to write (replaced atomically)."""
WRITTEN = """Returns
-------
pathlib.Path
    The path written."""


def document(function: Callable[..., Any], **parts: str) -> None:
    """Write into ``function``'s docstring the parts a protocol's functions share, each written
    once: a line that holds only ``{name}`` becomes the part ``name``, indented as the marker is
    (numpydoc entries or whole sections); an ``{options}`` marker a part brings becomes the
    engine options' help, as [`accepts`][recallkit.options.accepts] writes it."""
    lines = []
    for line in (function.__doc__ or "").split("\n"):
        name = line.strip()[1:-1]
        if line.strip() == "{" + name + "}" and name in parts:
            indent = line[: len(line) - len(line.lstrip())]
            lines.extend(indent + part if part else part for part in parts[name].split("\n"))
        else:
            lines.append(line)
    function.__doc__ = fill_docs("\n".join(lines), "engine")


def protocol_result(
    benchmark: str,
    metrics: Mapping[str, float],
    *,
    convention: str,
    num_queries: int,
    per_query: Mapping[str, np.ndarray] | None = None,
    parts: Mapping[str, Result] | None = None,
    plain: Sequence[str] = (),
    bounds: Mapping[str, tuple[float, float]] | None = None,
    tied: np.ndarray | None = None,
) -> Result:
    """A benchmark protocol's [`recallkit.Result`][recallkit.result.Result] (fractions in [0, 1],
    printed in percent).

    ``per_query`` holds the arrays behind the means (0-indexed ranks, per-query AP...),
    ``parts`` the per-category or per-task results of a benchmark that averages several, and
    ``convention`` names the definition followed (paper or official script). Values named in
    ``plain`` (mean and median ranks) are not fractions and print as they are. A protocol's
    queries all have a target, so all are evaluated.

    >>> r = protocol_result("toy", {"recall@1": 0.5}, convention="hard target", num_queries=2)
    >>> dict(r), r.num_queries
    ({'recall@1': 0.5}, 2)
    >>> print(r.report())
    toy (2 queries; hard target)
    metric    value
    recall@1  50.00
    """
    return Result(
        metrics,
        num_queries=num_queries,
        per_query=per_query,
        parts=parts,
        plain=plain,
        bounds=bounds,
        tied=tied,
        title=benchmark,
        convention=convention,
        style="protocol",
    )


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


def check_ranking(ranking: Sequence[Any], limit: int, func: str, unit: str, where: str) -> None:
    """Raise unless a submitted ranking has at most ``limit`` entries and no entry twice.

    ``unit`` names the entries (``"ids per query"``), ``where`` the query (``"query 3"``).
    """
    if len(ranking) > limit:
        got = f"{len(ranking)} for {where}"
        raise _checks.fail(func, "rankings", f"at most {limit} {unit}", got)
    if len(set(ranking)) != len(ranking):
        noun = unit.split()[0]
        raise _checks.fail(func, "rankings", f"free of repeated {noun}", f"a repeat for {where}")


def load_json(path: PathLike, what: str) -> Any:
    """Parse a JSON file; a missing or malformed file raises an error naming it and ``what``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} file not found: {path}")
    try:  # through one descriptor, checked unchanged (and recorded for the command line)
        return json.loads(read_file(path, f"The {what} file '{path}'").decode("utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None


def load_json_list(path: PathLike, what: str, items: str) -> list[Any]:
    """The non-empty JSON list of ``items`` (``"queries"``) of the ``what`` file ``path``."""
    entries = load_json(path, what)
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a non-empty JSON list of {items}")
    return entries


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


def integer_rows(values: Any, func: str, name: str, what: str) -> np.ndarray:
    """``values`` as int64: a non-empty 1-D integer array (``what``: "one id per image")."""
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iu":
        raise _checks.fail(
            func,
            name,
            f"a non-empty 1-D integer array ({what})",
            f"shape {array.shape}, dtype {array.dtype}",
        )
    return array.astype(np.int64)


#: The rows a protocol's ranker must have: ``(queries, what, references, what)``.
Expect = tuple[int, str, int, str]


def queries_of_data(queries: int, images: int, image: Text) -> Expect:
    """The rows of a ranker of the ``queries`` of the split ``data`` against ``images``
    (``image`` names one in messages: ``Text("image of {d}", d="data")``)."""
    return (queries, Text("query of {d}", d="data"), images, image)


def embeddings_ranker(
    query: Any, images: Any, func: str, options: Options
) -> Callable[[Expect], Ranker]:
    """The ranker of the ``query`` embeddings against the ``images``, once the rows it must
    have are known (a protocol's ``make``)."""
    return lambda expect: Ranker.from_embeddings(
        query, images, func, options, "query", "images", expect
    )


def scores_ranker(scores: Any, func: str) -> Callable[[Expect], Ranker]:
    """The ranker of a ``(queries, images)`` similarity matrix, as
    [`embeddings_ranker`][embeddings_ranker]."""
    return lambda expect: Ranker.from_scores(scores, func, expect=expect)


def without_references(ranker: Ranker, reference: np.ndarray) -> engine.Exclusions | None:
    """The exclusions that remove each query's reference image (``reference[i]``) from its
    candidates."""
    return ranker.exclusions(engine.Pairs.from_lists(reference[:, None], ranker.num_query))


def _similarity(q: torch.Tensor, c: torch.Tensor, metric: str) -> torch.Tensor:
    """Scores of ``q`` (b, d) against its own candidates ``c`` (b, g, d): higher is better."""
    if metric == "euclidean":
        return -((c - q[:, None, :]) ** 2).sum(dim=-1)
    return torch.einsum("bd,bgd->bg", q, c)


def _normalised(x: torch.Tensor, func: str, name: str) -> torch.Tensor:
    norms = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    if bool((norms == 0).any()):
        raise _checks.fail(
            func, name, Text("non-zero vectors under {m}", m=("metric", "cosine")), "a zero vector"
        )
    return x / norms


def _vectors(x: Any, func: str, name: str, ndim: int) -> torch.Tensor:
    """``x`` validated
    ([`recallkit._inputs.checks.as_embeddings`][recallkit._inputs.checks.as_embeddings]), finite,
    float32 at least."""
    tensor = _checks.as_embeddings(x, name, func, ndim=ndim)
    if tensor.dtype != torch.float64:
        tensor = tensor.to(torch.float32)
    _checks.check_finite_rows(tensor.reshape(len(tensor), -1), 0, name, func)
    return tensor


def candidate_scores(
    query: Any,
    candidates: Any,
    *,
    options: Options,
    func: str,
    query_name: str = "query",
    candidates_name: str = "candidates",
) -> np.ndarray:
    """Scores of each query against its own candidate list, shape ``(n, g)``.

    ``query`` is ``(n, d)`` and ``candidates`` ``(n, g, d)``. Scores follow the core's metric
    definitions: cosine (inner product of L2-normalised vectors), dot, or negative squared
    Euclidean distance (the same order as the core's ``2 q·r - |r|²`` along a row). Chunks of
    queries are sized from the memory budget of the device the work runs on.
    """
    metric = options.metric
    q = _vectors(query, func, query_name, 2)
    c = _vectors(candidates, func, candidates_name, 3)
    if c.shape[0] != q.shape[0]:
        raise _checks.fail(func, candidates_name, f"one row per query ({q.shape[0]})", c.shape[0])
    if c.shape[2] != q.shape[1]:
        raise _checks.fail(
            func, candidates_name, f"of the query's dimension {q.shape[1]}", c.shape[2]
        )
    dtype = torch.float64 if torch.float64 in (q.dtype, c.dtype) else torch.float32
    dev = options.device if options.device is not None else q.device
    out = np.empty(tuple(c.shape[:2]), dtype=np.float64 if dtype == torch.float64 else np.float32)
    per_row = max(1, c.shape[1] * c.shape[2] * 8 * 3)
    size = options.chunk_size or max(1, memory_budget(options, torch.device(dev)) // per_row)
    for start in range(0, q.shape[0], size):
        qb = q[start : start + size].to(dev, dtype)
        cb = c[start : start + size].to(dev, dtype)
        if metric == "cosine":
            qb = _normalised(qb, func, query_name)
            cb = _normalised(cb, func, candidates_name)
        out[start : start + len(qb)] = _similarity(qb, cb, metric).cpu().numpy()
    return out
