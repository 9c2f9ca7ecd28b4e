"""Evaluate a loaded benchmark with its protocol: recall@K, with MAP@R and R-precision beside it.

Every number comes from one pass of the core
([`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics]); this module only chooses
the splits, the K values and the self-exclusion the benchmark's protocol prescribes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recallkit import metrics as registry
from recallkit.datasets.base import Benchmark, Split
from recallkit.exceptions import fail
from recallkit.options import Options, accepts
from recallkit.result import Result
from recallkit.retrieval import retrieval_metrics

__all__ = ["evaluate_benchmark"]


def _check_benchmark(benchmark: Any, func: str) -> Benchmark:
    if not isinstance(benchmark, Benchmark):
        raise fail(func, "benchmark", "a Benchmark (from load_benchmark)", type(benchmark).__name__)
    return benchmark


def _check_rows(embeddings: Any, split: Split, name: str, func: str, bench: str) -> None:
    shape = getattr(embeddings, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != len(split):
        got = "an object without a shape" if shape is None else f"shape {tuple(shape)}"
        raise fail(
            func,
            name,
            f"a 2-D array with one row per image of the {split.name!r} "
            f"split of {bench} ({len(split)} rows, in split order)",
            got,
        )


@accepts()
def evaluate_benchmark(
    benchmark: Benchmark,
    query_embeddings: Any,
    gallery_embeddings: Any = None,
    *,
    metrics: Sequence[str] | None = None,
    options: Options,
) -> Result:
    """Recall@K of a benchmark under its protocol, with MAP@R and R-precision beside it.

    The protocol (``Benchmark.protocol``, a [`Protocol`][recallkit.datasets.base.Protocol]) sets
    everything else: the K values (CUB and Cars196 1, 2, 4, 8; SOP 1, 10, 100, 1000; iNaturalist
    1, 4, 16, 32; In-Shop 1, 10, 20, 30, 40, 50), and which split is searched. For CUB, Cars196,
    SOP and iNaturalist the test split is searched with itself and each query's own image is
    excluded (``query_in_reference=True``); for In-Shop the query split searches the gallery
    split, with nothing excluded. Ties rank the lower reference index first, so results are
    deterministic. Every metric comes from one pass.

    Parameters
    ----------
    benchmark : Benchmark
        A loaded [`Benchmark`][Benchmark].
    query_embeddings : torch.Tensor or numpy.ndarray, shape (n, d)
        ``(n, d)`` embeddings of the protocol's query split
        (``benchmark.evaluation_splits()[0]``), row for row (torch tensor or numpy array).
    gallery_embeddings : torch.Tensor or numpy.ndarray, shape (m, d), or None, default None
        For In-Shop, the ``(m, d)`` embeddings of the gallery split; must be
        ``None`` for benchmarks whose query split is searched with itself.
    metrics : sequence of str or None, default None
        The metrics (names as in
        [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics]); default the
        protocol's recall@K, then MAP@R and R-precision.
    {options}

    Returns
    -------
    Result
        A [`recallkit.Result`][recallkit.result.Result] whose ``info`` holds the benchmark's name,
        title, protocol and completeness (``complete``: whether the benchmark had its documented
        sizes; when False the numbers are not comparable with published ones).

    Examples
    --------
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
            raise fail(
                func,
                "gallery_embeddings",
                f"None for {benchmark.name}: its {query.name!r} split is searched with itself",
                type(gallery_embeddings).__name__,
            )
        reference = query_embeddings
    else:
        if gallery_embeddings is None:
            searches = f"{query.name!r} split searches the {gallery.name!r} split"
            raise fail(
                func, "gallery_embeddings", f"given for {benchmark.name}: its {searches}", None
            )
        _check_rows(gallery_embeddings, gallery, "gallery_embeddings", func, benchmark.name)
        reference = gallery_embeddings
    if metrics is None:
        metrics = registry.names_of(registry.default(protocol.ks))
    result = retrieval_metrics(
        query_embeddings,
        reference,
        query.labels,
        gallery.labels,
        metrics,
        query_in_reference=query_in_reference,
        options=options,
    )
    return _as_benchmark(result, benchmark)


def _as_benchmark(result: Result, benchmark: Benchmark) -> Result:
    """``result`` shown as the benchmark's: its title, protocol, citation and completeness."""
    protocol = benchmark.protocol
    header = {"benchmark": benchmark.name, "title": benchmark.title, "complete": benchmark.complete}
    fields = {
        "ks": list(protocol.ks),
        "effective_ks": list(result.effective_ks or protocol.ks),
        "query_split": protocol.query_split,
        "gallery_split": protocol.gallery_split,
        "query_in_reference": protocol.query_in_reference,
    }
    return result.replace(
        title=benchmark.title,
        info={
            "header": header,
            "fields": fields,
            "citation": protocol.citation,
            "benchmark": benchmark.name,
            "protocol": protocol,
            "complete": benchmark.complete,
        },
        style="benchmark",
    )
