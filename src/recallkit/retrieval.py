"""The label form's public functions: a reference item is relevant to a query when it has the
query's label.

:func:`retrieval_metrics` returns any metrics of the registry (:mod:`recallkit.metrics`:
recall@K, precision@K, IR-recall@K, MAP@K, MAP@R, R-precision, MRR, nDCG@K) from one pass of the
engine; :func:`recall_at_k`, :func:`map_at_r`, :func:`r_precision` and :func:`map_at_k` ask for
one family each. The work is :mod:`recallkit.label_form`'s: one validated problem, one pass.

Self-matches are removed only as the caller says: ``query_in_reference=True`` (PML's
convention: ``reference[:n]`` is the query, row for row; checked by value) or
``query_ids``/``reference_ids`` (every reference item whose id equals the query's). Nothing is
inferred from equal vectors or equal labels; but a reference that begins with the query's rows,
value for value (the query array itself, a copy, the same embeddings loaded twice), without
``query_in_reference`` or ids is an error, since scoring each query against itself is the most
common mistake of the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recallkit import _checks, label_form
from recallkit import metrics as registry
from recallkit.options import Options, accepts
from recallkit.result import Result

_SELF_MATCHES = """
    Self-matches are excluded only when asked: ``query_in_reference=True`` means
    ``reference[:len(query)]`` is the query, row for row (PML's convention; checked value for
    value), and each query's own row is removed; ``query_ids``/``reference_ids`` remove every
    reference item whose id equals the query's. A reference that begins with the query's rows
    (the same array, or a copy) without ``query_in_reference`` or ids raises ``ValueError``;
    ``query_in_reference=False`` keeps such copies as gallery items.
"""


def _run(
    func: str,
    chosen: Sequence[registry.Metric],
    args: tuple[Any, Any, Any, Any],
    query_in_reference: bool | None,
    query_ids: Any,
    reference_ids: Any,
    options: Options,
    parameter: str,
) -> Result:
    problem = label_form.build(
        func,
        *args,
        query_in_reference=query_in_reference,
        query_ids=query_ids,
        reference_ids=reference_ids,
        options=options,
    )
    return label_form.evaluate(func, problem, chosen, parameter=parameter)[0]


@accepts()
def retrieval_metrics(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    metrics: Sequence[str] = ("recall@1", "MAP@R", "R-precision"),
    *,
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    divisor: str = "min_k_r",
    options: Options,
) -> Result:
    """Several label-form metrics from one pass of the engine (:mod:`recallkit.metrics`).

    ``metrics`` names them: ``"recall@K"`` (hit@K), ``"precision@K"``, ``"IR-recall@K"``,
    ``"MAP@K"`` (``divisor`` as in :func:`map_at_k`), ``"MAP@R"``, ``"R-precision"``,
    ``"MRR"`` (``"MRR@K"``), ``"nDCG@K"``, or their aliases (PML's names among them). The
    first-hit ranks and the ranked lists every metric reads are computed once; the result holds
    each metric's mean, its per-query values (``per_query[name]``), the counts, and the tie
    bounds.
    {self_matches}
    {options}

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> r = retrieval_metrics(x, x, [0, 0, 1, 1], [0, 0, 1, 1], ["recall@1", "MAP@R", "MRR"],
    ...                       query_in_reference=True)
    >>> dict(r)
    {'recall@1': 0.5, 'MAP@R': 0.5, 'MRR': 0.75}
    """
    func = "retrieval_metrics"
    _checks.check_choice(divisor, registry.DIVISORS, func, "divisor")
    chosen = registry.parse(metrics, func, divisor=divisor)
    return _run(
        func,
        chosen,
        (query, reference, query_labels, reference_labels),
        query_in_reference,
        query_ids,
        reference_ids,
        options,
        "metrics",
    )


@accepts()
def recall_at_k(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    ks: Any = (1, 5, 10),
    *,
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    options: Options,
) -> Result:
    """Recall@K of label-form retrieval: a hit when one of the K nearest shares the label.

    For a query ``q`` with first-hit rank ``r(q)`` (0-indexed rank of its nearest reference
    item with the same label)::

        recall@K = |{q evaluated : r(q) < K}| / |{q evaluated}|

    This is the deep-metric-learning convention (Oh Song et al. 2016, CVPR; Musgrave et al. 2020,
    "A Metric Learning Reality Check"), equal to PML's ``precision_at_1`` at K = 1. It is *not*
    the information-retrieval recall (``"IR-recall@K"`` of :func:`retrieval_metrics`).

    Ranking: scores are cosine similarity, inner product (``metric="dot"``) or negative
    Euclidean distance (``metric="euclidean"``); a GEMM only filters, and candidates within its
    error bound of a decision are re-scored exactly in float64, so ranks do not depend on
    chunking, threads, BLAS, precision or device. On equal scores the lower reference index
    ranks first; ``result.bounds`` and ``result.num_tied`` say what other tie orders would give.
    The rank is counted, never sorted, chunk by chunk: the full n×m matrix is never built.
    {self_matches}
    Queries left with no reference item of their label are lone: excluded from the mean and
    counted in ``num_excluded``; when all are lone the values are NaN and a warning says so
    (``lone_queries`` chooses otherwise). K above a query's candidates is clamped to them
    (``effective_ks``), with a warning.

    Labels may be integers (of any size, or floats with an integral value), strings, bytes or
    tuples, compared by value; they are mapped to dense codes, never cast to float or string.
    The labels of one call are all of one kind: numbers mixed with strings (``[1, "1"]``) raise
    ``ValueError``, and so do labels given as ``None``, a dict, a set or an iterator.

    Args:
        query: ``(n, d)`` embeddings, torch tensor or numpy array.
        reference: ``(m, d)`` embeddings (a memory map or :class:`recallkit.io.EmbeddingFile`
            is streamed).
        query_labels, reference_labels: one label per row.
        ks: positive integers; the result's keys are ``"recall@K"`` in this order.
        query_in_reference: the first ``n`` reference rows are the queries.
        query_ids, reference_ids: ids whose equality marks a self-match.

    {options}

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> r = recall_at_k(x, x, [0, 1, 1, 0], [0, 1, 1, 0], ks=(1, 2), query_in_reference=True)
    >>> dict(r)
    {'recall@1': 0.0, 'recall@2': 0.5}
    """
    func = "recall_at_k"
    ks = _checks.check_ks(ks, func)
    return _run(
        func,
        registry.recall(ks),
        (query, reference, query_labels, reference_labels),
        query_in_reference,
        query_ids,
        reference_ids,
        options,
        "ks",
    )


@accepts()
def r_precision(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    *,
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    options: Options,
) -> Result:
    """R-precision: the fraction of relevant items among the first R, averaged over queries.

    ``R`` is the number of reference items with the query's label (self-matches excluded as
    in :func:`recall_at_k`); lone queries (R = 0) are left out, as in PML. Ties rank the lower
    reference index first. (Musgrave et al. 2020, "A Metric Learning Reality Check".) The result
    holds ``"R-precision"``; ``float(result)`` is its value.

    {options}

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(r_precision(x, x, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True))
    0.5
    """
    return _run(
        "r_precision",
        (registry.RPrecision(),),
        (query, reference, query_labels, reference_labels),
        query_in_reference,
        query_ids,
        reference_ids,
        options,
        "metrics",
    )


@accepts()
def map_at_r(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    *,
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    options: Options,
) -> Result:
    """MAP@R (Musgrave et al. 2020): mean over queries of ``(1/R) Σ_{i ≤ R} rel(i) · P@i``.

    ``R`` is the number of reference items with the query's label after self-exclusion; lone
    queries are left out. Identical to PML's ``mean_average_precision_at_r`` on the same inputs
    (with ``k="max_bin_count"``), except that ties rank the lower reference index first. The
    result holds ``"MAP@R"``; ``float(result)`` is its value.

    {options}

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(map_at_r(x, x, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True))
    0.5
    """
    return _run(
        "map_at_r",
        (registry.MAPAtR(),),
        (query, reference, query_labels, reference_labels),
        query_in_reference,
        query_ids,
        reference_ids,
        options,
        "metrics",
    )


@accepts()
def map_at_k(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    k: int = 10,
    *,
    divisor: str = "min_k_r",
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    options: Options,
) -> Result:
    """Mean AP@K over evaluated queries, label form (:class:`recallkit.metrics.MAPAtK`).

    ``divisor`` is ``"min_k_r"`` (default, a perfect ranking scores 1; CIRCO), ``"r"`` (PML) or
    ``"hits"`` (torchmetrics, OML). Lone queries (R = 0) are left out. K above the reference
    size reads the whole ranking. The result holds ``"MAP@K"``.

    {options}

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(map_at_k(x, x, [0, 0, 1, 1], [0, 0, 1, 1], k=2, query_in_reference=True))
    0.75
    """
    func = "map_at_k"
    k = _checks.check_positive_int(k, func, "k")
    _checks.check_choice(divisor, registry.DIVISORS, func, "divisor")
    return _run(
        func,
        (registry.MAPAtK(k, divisor=divisor),),
        (query, reference, query_labels, reference_labels),
        query_in_reference,
        query_ids,
        reference_ids,
        options,
        "k",
    )


for _function in (retrieval_metrics, recall_at_k):
    _function.__doc__ = _function.__doc__.replace("{self_matches}", _SELF_MATCHES)
