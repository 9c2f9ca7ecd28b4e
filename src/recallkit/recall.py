"""Label-form recall@K: the deep-metric-learning convention, exact and memory-bounded."""

from __future__ import annotations

import warnings
from typing import Any

from recallkit import _checks, _engine, _labelform
from recallkit.result import RecallResult


def recall_at_k(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    ks: Any = (1, 5, 10),
    *,
    query_in_reference: bool = False,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "float32",
) -> RecallResult:
    """Recall@K of label-form retrieval: a hit when one of the K nearest shares the label.

    For a query ``q`` with first-hit rank ``r(q)`` (0-indexed rank of its nearest reference
    item with the same label)::

        recall@K = |{q evaluated : r(q) < K}| / |{q evaluated}|

    This is the deep-metric-learning convention (Oh Song et al. 2016, CVPR; Musgrave et al. 2020,
    "A Metric Learning Reality Check"), equal to PML's ``precision_at_1`` at K = 1. It is *not*
    the information-retrieval recall (fraction of all relevant items found in the top K).

    Ranking: scores are cosine similarity (L2-normalised inner product), inner product
    (``metric="dot"``) or negative Euclidean distance (``metric="euclidean"``) of the float32
    (at least) embeddings; the float32 GEMM only filters, and candidates within its error bound of
    a decision are re-scored exactly in float64, so ranks do not depend on chunking, threads or
    BLAS. On equal scores the lower reference index ranks first. The rank is counted (how many
    non-excluded items rank above the best correct one), never sorted, chunk by chunk: the full
    n×m matrix is never built.

    Self-matches are excluded only when asked: ``query_in_reference=True`` means
    ``reference[:len(query)]`` is the query, row for row (PML's convention), and each query's own
    row is removed; ``query_ids``/``reference_ids`` remove every reference item whose id equals
    the query's. Queries left with no reference item of their label are lone: excluded from the
    mean and counted in ``num_excluded``; when all are lone the values are NaN and a warning says
    so. K above the number of candidates is clamped (``effective_ks``), with a warning.

    Labels may be integers (of any size, or floats with an integral value), strings, bytes or
    tuples, compared by value; they are mapped to dense codes, never cast to float or string.
    The labels of one call are all of one kind: numbers mixed with strings (``[1, "1"]``) raise
    ``ValueError``, and so do labels given as ``None``, a dict, a set or an iterator.

    Args:
        query: ``(n, d)`` embeddings, torch tensor or numpy array.
        reference: ``(m, d)`` embeddings.
        query_labels, reference_labels: one label per row.
        ks: positive integers; the result's keys are ``"recall@K"`` in this order.
        query_in_reference: the first ``n`` reference rows are the queries.
        query_ids, reference_ids: ids whose equality marks a self-match.
        metric: ``"cosine"``, ``"dot"`` or ``"euclidean"``.
        chunk_size: query rows per chunk (default: sized from a 256 MiB budget).
        device: where the work runs (default: the query's device); on CUDA the chunks are
            sized from a GPU memory budget (``RECALLKIT_GPU_MEMORY``, else a quarter of the
            free memory; docs/scale.md).
        precision: ``"float32"`` (default); ``"float16"`` or ``"bfloat16"`` run the GEMM filter
            in that type on CUDA (float32 accumulation; ignored on the CPU). Its wider error
            window (about 2e-3 and 1.6e-2 of the scores) is re-scored in float32 first, so the
            exact re-scoring is float32's, and the results stay identical.

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> r = recall_at_k(x, x, [0, 1, 1, 0], [0, 1, 1, 0], ks=(1, 2), query_in_reference=True)
    >>> dict(r)
    {'recall@1': 0.0, 'recall@2': 0.5}
    """
    func = "recall_at_k"
    ks = _checks.check_ks(ks, func)
    problem = _labelform.build(
        func, query, reference, query_labels, reference_labels, **_labelform.options(locals())
    )
    ranks = _engine.first_hit_ranks(
        problem.space, problem.positives, problem.exclusions, problem.chunk_size
    )
    return _result(ks, ranks, problem, query_ids)


def _result(
    ks: tuple[int, ...], ranks: Any, problem: _labelform.LabelProblem, query_ids: Any
) -> RecallResult:
    space = problem.space
    return result_from_ranks(
        ks,
        ranks,
        candidates=space.num_reference - int(problem.query_in_reference),
        num_reference=space.num_reference,
        embedding_dim=space.dim,
        query_ids=None if query_ids is None else list(_plain(query_ids)),
    )


def result_from_ranks(
    ks: tuple[int, ...],
    ranks: Any,
    *,
    candidates: int,
    num_reference: int,
    embedding_dim: int,
    query_ids: list[Any] | None = None,
) -> RecallResult:
    """The :class:`RecallResult` of first-hit ranks: K above the ``candidates`` per query is
    clamped (with a warning), and all-lone queries give NaN (with a warning)."""
    effective = tuple(min(k, max(candidates, 1)) for k in ks)
    if effective != ks:
        warnings.warn(
            f"recall_at_k: ks {[k for k, e in zip(ks, effective, strict=True) if k != e]} "
            f"exceed the {candidates} candidates per query and are clamped; every query "
            "with a correct neighbour is a hit there.",
            UserWarning,
            stacklevel=4,
        )
    result = RecallResult(
        ks,
        effective,
        ranks,
        num_reference=num_reference,
        embedding_dim=embedding_dim,
        query_ids=query_ids,
    )
    if result.num_evaluated == 0:
        warnings.warn(
            f"recall_at_k: all {result.num_queries} queries are lone (no reference item has "
            "their label after self-exclusion); recall is undefined and reported as NaN.",
            RuntimeWarning,
            stacklevel=4,
        )
    return result


def _plain(ids: Any) -> list[Any]:
    if hasattr(ids, "tolist"):
        return ids.tolist()
    return list(ids)
