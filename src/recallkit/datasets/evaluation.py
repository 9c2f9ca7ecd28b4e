"""Evaluate a loaded benchmark with its protocol: recall@K, with MAP@R and R-precision beside it.

Every number comes from the core (:func:`recallkit.recall_at_k`, :func:`recallkit.map_at_r`,
:func:`recallkit.r_precision`); this module only chooses the splits, the K values and the
self-exclusion the benchmark's protocol prescribes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from recallkit.datasets.base import Benchmark, Protocol, Split
from recallkit.ranking import map_at_r, r_precision
from recallkit.recall import recall_at_k
from recallkit.result import MetricResult, RecallResult

__all__ = ["BenchmarkResult", "evaluate_benchmark"]


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class BenchmarkResult(MetricResult):
    """The protocol's recall@K of one benchmark, with MAP@R and R-precision.

    A read-only mapping ``{"recall@K": ..., "MAP@R": ..., "R-precision": ...}`` in the
    protocol's K order (:class:`recallkit.result.MetricResult`).

    Attributes:
        benchmark: the benchmark's registry name.
        title: its usual name.
        protocol: the protocol it was evaluated with.
        recall: the :class:`recallkit.RecallResult` (``result.recall["recall@1"]``, counts,
            per-query ranks).
        map_at_r: MAP@R (Musgrave et al. 2020), NaN when every query is lone.
        r_precision: R-precision (Musgrave et al. 2020), NaN when every query is lone.
        complete: whether the benchmark had its documented sizes (``Benchmark.complete``); when
            False the numbers are not comparable with published ones.
    """

    benchmark: str
    title: str
    protocol: Protocol
    recall: RecallResult
    map_at_r: float
    r_precision: float
    complete: bool

    def __post_init__(self) -> None:
        self._set_values({**self.recall, "MAP@R": self.map_at_r, "R-precision": self.r_precision})

    def __repr__(self) -> str:
        return f"BenchmarkResult({self.benchmark!r}, {{{self._repr_values()}}})"

    def metrics(self) -> dict[str, float]:
        """``{"recall@K": ..., "MAP@R": ..., "R-precision": ...}`` in the protocol's K order."""
        return dict(self)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN as ``None``), with the counts of :mod:`recallkit.result`."""
        return {
            "benchmark": self.benchmark,
            "title": self.title,
            "complete": self.complete,
            "metrics": self.json_metrics(),
            "ks": list(self.protocol.ks),
            "effective_ks": list(self.recall.effective_ks),
            "query_split": self.protocol.query_split,
            "gallery_split": self.protocol.gallery_split,
            "query_in_reference": self.protocol.query_in_reference,
            **self.recall.counts(),
            "citation": self.protocol.citation,
        }

    def report(self) -> str:
        """A two-line text table: metric names, then values to 4 decimals.

        >>> from recallkit.datasets.base import BENCHMARK_INFO
        >>> from recallkit.result import MetricResult, RecallResult
        >>> import numpy as np
        >>> recall = RecallResult((1, 2), (1, 2), np.array([0, 1]), num_reference=2,
        ...                       embedding_dim=2)
        >>> result = BenchmarkResult("cub", "CUB-200-2011", BENCHMARK_INFO["cub"].protocol,
        ...                          recall, 0.75, 0.5, True)
        >>> print(result.report())
        recall@1  recall@2  MAP@R   R-precision
        0.5000    1.0000    0.7500  0.5000
        """
        widths = [max(len(name), 6) for name in self]
        head = "  ".join(f"{name:<{w}}" for name, w in zip(self, widths, strict=True))
        cells = zip(self.values(), widths, strict=True)
        values = "  ".join(f"{value:<{w}.4f}" for value, w in cells)
        return f"{head.rstrip()}\n{values.rstrip()}"

    def table(self) -> str:
        """The same text as :meth:`report`."""
        return self.report()


def _check_benchmark(benchmark: Any, func: str) -> Benchmark:
    if not isinstance(benchmark, Benchmark):
        raise ValueError(
            f"The 'benchmark' parameter of {func} must be a Benchmark (from load_benchmark). "
            f"Got {type(benchmark).__name__}."
        )
    return benchmark


def _check_rows(embeddings: Any, split: Split, name: str, func: str, bench: str) -> None:
    shape = getattr(embeddings, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != len(split):
        got = "an object without a shape" if shape is None else f"shape {tuple(shape)}"
        raise ValueError(
            f"The '{name}' parameter of {func} must be a 2-D array with one row per image of "
            f"the {split.name!r} split of {bench} ({len(split)} rows, in split order). Got {got}."
        )


def evaluate_benchmark(
    benchmark: Benchmark,
    query_embeddings: Any,
    gallery_embeddings: Any = None,
    *,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
) -> BenchmarkResult:
    """Recall@K of a benchmark under its protocol, with MAP@R and R-precision beside it.

    The protocol (:attr:`Benchmark.protocol`) sets everything else: the K values (CUB and Cars196
    1, 2, 4, 8; SOP 1, 10, 100, 1000; iNaturalist 1, 4, 16, 32; In-Shop 1, 10, 20, 30, 40, 50),
    and which split is searched. For CUB, Cars196, SOP and iNaturalist the test split is searched
    with itself and each query's own image is excluded (``query_in_reference=True``); for In-Shop
    the query split searches the gallery split, with nothing excluded. Ties rank the lower
    reference index first, so results are deterministic.

    Args:
        benchmark: a loaded :class:`Benchmark`.
        query_embeddings: ``(n, d)`` embeddings of the protocol's query split
            (``benchmark.evaluation_splits()[0]``), row for row (torch tensor or numpy array).
        gallery_embeddings: for In-Shop, the ``(m, d)`` embeddings of the gallery split; must be
            ``None`` for benchmarks whose query split is searched with itself.
        metric: ``"cosine"``, ``"dot"`` or ``"euclidean"``.
        chunk_size: query rows per chunk (default: sized from the core's memory budget).
        device: where the search runs (default: the embeddings' device).

    Returns:
        A :class:`BenchmarkResult`.

    >>> import numpy as np
    >>> from pathlib import Path
    >>> from recallkit.datasets.base import BENCHMARK_INFO
    >>> test = Split("test", Path("/d"), ("a", "b", "c", "d"), np.array([101, 101, 102, 102]))
    >>> cub = Benchmark("cub", "CUB-200-2011", BENCHMARK_INFO["cub"].protocol, {"test": test},
    ...                 Path("/d"), complete=False)
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # K = 4 and 8 exceed the 3 candidates
    ...     result = evaluate_benchmark(cub, x)
    >>> result.metrics()
    {'recall@1': 0.5, 'recall@2': 1.0, 'recall@4': 1.0, 'recall@8': 1.0, 'MAP@R': 0.5, \
'R-precision': 0.5}
    """
    func = "evaluate_benchmark"
    benchmark = _check_benchmark(benchmark, func)
    query, gallery, query_in_reference = benchmark.evaluation_splits()
    protocol = benchmark.protocol
    _check_rows(query_embeddings, query, "query_embeddings", func, benchmark.name)
    if protocol.gallery_split is None:
        if gallery_embeddings is not None:
            raise ValueError(
                f"The 'gallery_embeddings' parameter of {func} must be None for "
                f"{benchmark.name}: its {query.name!r} split is searched with itself. "
                f"Got {type(gallery_embeddings).__name__}."
            )
        reference = query_embeddings
    else:
        if gallery_embeddings is None:
            raise ValueError(
                f"The 'gallery_embeddings' parameter of {func} must be given for "
                f"{benchmark.name}: its {query.name!r} split searches the {gallery.name!r} "
                "split. Got None."
            )
        _check_rows(gallery_embeddings, gallery, "gallery_embeddings", func, benchmark.name)
        reference = gallery_embeddings
    args = (query_embeddings, reference, query.labels, gallery.labels)
    options = dict(
        query_in_reference=query_in_reference, metric=metric, chunk_size=chunk_size, device=device
    )
    recall = recall_at_k(*args, ks=protocol.ks, **options)
    if recall.num_evaluated:
        map_r = map_at_r(*args, **options)
        r_prec = r_precision(*args, **options)
    else:
        map_r = r_prec = math.nan
    return BenchmarkResult(
        benchmark=benchmark.name,
        title=benchmark.title,
        protocol=protocol,
        recall=recall,
        map_at_r=map_r,
        r_precision=r_prec,
        complete=benchmark.complete,
    )
