"""Ranking metrics on the recall engine: R-precision, MAP@R, MAP@K and AP@K from ranks.

AP@K is computed with four different divisors in the field. Here the divisor is explicit:

* ``"min_k_r"`` (default): ``min(K, R)``, the CIRCO official evaluation (Baldrati et al. 2023);
  a perfect ranking scores 1.
* ``"r"``: ``R``, every relevant item (PML's ``mean_average_precision``; SQUARE, Wu et al. 2025).
* ``"hits"``: the relevant items found within the top K (torchmetrics
  ``retrieval_average_precision``
  with ``top_k``, OML); a query with no hit scores 0.

(revisitop's interpolated AP is not offered.) ``R`` is the number of relevant items of the query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from recallkit import _checks, _engine, _labelform

DIVISORS = ("min_k_r", "r", "hits")


def _rank_rows(relevant_ranks: Any, func: str) -> np.ndarray:
    """``relevant_ranks`` as an ``(n, g)`` int64 array padded with ``-1``, validated.

    Ranks are integers (floats are refused, even integral ones), ``-1`` or above, and distinct
    within a query (two relevant items cannot share a rank).
    """
    name = "relevant_ranks"
    if isinstance(relevant_ranks, torch.Tensor):
        relevant_ranks = relevant_ranks.detach().cpu().numpy()
    if isinstance(relevant_ranks, np.ndarray) and relevant_ranks.ndim == 2:
        ranks = _checks.as_integers(relevant_ranks, func, name, "integer ranks")
    else:
        if isinstance(relevant_ranks, str | bytes) or not hasattr(relevant_ranks, "__len__"):
            raise _checks.fail(
                func, name, "a sequence of rank lists, one per query", type(relevant_ranks).__name__
            )
        rows = [
            _checks.as_integers([r] if np.ndim(r) == 0 else r, func, name, "integer ranks")
            for r in relevant_ranks
        ]
        if any(r.ndim > 1 for r in rows):
            raise _checks.fail(func, name, "one list of ranks per query", "nested lists")
        ranks = np.full((len(rows), max((len(r) for r in rows), default=0)), -1, np.int64)
        for i, r in enumerate(rows):
            ranks[i, : len(r)] = r
    if (ranks < -1).any():
        i, j = np.argwhere(ranks < -1)[0]
        raise _checks.fail(
            func, name, "0-indexed ranks (-1 for padding)", f"{ranks[i, j]} for query {i}"
        )
    ordered = np.sort(ranks, axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if repeated.any():
        i, j = np.argwhere(repeated)[0]
        raise _checks.fail(
            func, name, "distinct ranks within a query", f"rank {ordered[i, j]} twice for query {i}"
        )
    return ranks


def _ap_from_relevance(
    relevant: np.ndarray, num_relevant: np.ndarray, k: int, divisor: str
) -> np.ndarray:
    """AP@K per query from a ``(n, w)`` 0/1 relevance matrix of the ranked lists (w ≥ K)."""
    rel = relevant[:, :k].astype(np.float64)
    positions = np.arange(1, rel.shape[1] + 1, dtype=np.float64)
    precision = np.cumsum(rel, axis=1) / positions
    total = (precision * rel).sum(axis=1)
    if divisor == "min_k_r":
        denominator = np.minimum(k, num_relevant).astype(np.float64)
    elif divisor == "r":
        denominator = num_relevant.astype(np.float64)
    else:
        denominator = rel.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, total / denominator, 0.0)


def average_precision_at_k(
    relevant_ranks: Any,
    num_relevant: Any = None,
    k: int = 10,
    *,
    divisor: str = "min_k_r",
) -> np.ndarray:
    """AP@K of each query from the 0-indexed ranks of its relevant items.

    ``AP@K = (1/D) · Σ_{i ≤ K, item i relevant} precision@i`` with ``precision@i`` the fraction
    of relevant items among the first ``i``, and ``D`` by ``divisor`` (module docstring).
    ``relevant_ranks`` holds, per query, the ranks of its relevant items (each counted among
    all candidates, other relevant items included; :func:`recallkit.ground_truth_ranks` with
    ``reduce="none"``), as a list of sequences or an ``(n, g)`` array padded with ``-1``.
    ``num_relevant`` is ``R`` per query (default: the number of ranks given). A query with
    ``D = 0`` scores 0. Ranks and counts are integers: floats (even integral ones such as
    ``2.0``) and a rank repeated within a query raise ``ValueError``.

    >>> average_precision_at_k([[0, 2], [5]], k=5).tolist()  # (1 + 2/3)/2 and no hit
    [0.8333333333333333, 0.0]
    >>> average_precision_at_k([[1]], [3], k=5, divisor="r").tolist()  # (1/2)/3
    [0.16666666666666666]
    """
    func = "average_precision_at_k"
    k = _checks.check_positive_int(k, func, "k")
    _checks.check_choice(divisor, DIVISORS, func, "divisor")
    ranks = _rank_rows(relevant_ranks, func)
    given = (ranks >= 0).sum(axis=1)
    if num_relevant is None:
        counts = given
    else:
        if np.ndim(num_relevant) == 0 and not isinstance(num_relevant, str | bytes):
            num_relevant = [num_relevant]
        counts = _checks.as_integers(num_relevant, func, "num_relevant").reshape(-1)
        _checks.check_length(counts, len(ranks), "num_relevant", func, "relevant_ranks")
        if (counts < 0).any():
            i = int(np.argmax(counts < 0))
            raise _checks.fail(func, "num_relevant", "non-negative", f"{counts[i]} at {i}")
        if (counts < given).any():
            i = int(np.argmax(counts < given))
            raise _checks.fail(
                func, "num_relevant", "at least the number of ranks given", f"{counts[i]} at {i}"
            )
    # Relevance of the top-K positions, rebuilt from the ranks (ranks are distinct per query).
    relevant = np.zeros((len(ranks), k), dtype=bool)
    rows, cols = np.nonzero((ranks >= 0) & (ranks < k))
    relevant[rows, ranks[rows, cols]] = True
    return _ap_from_relevance(relevant, counts, k, divisor)


def _per_query(
    problem: _labelform.LabelProblem,
    ks: np.ndarray,
    statistic: Callable[[np.ndarray, int, int], np.ndarray],
) -> np.ndarray:
    """``statistic(relevant, start, stop)`` of each chunk of exact top-``ks[i]`` lists.

    ``relevant`` is the chunk's ``(c, max ks)`` relevance matrix: memory stays within one
    chunk's lists whatever the class sizes.
    """
    out = np.zeros(problem.space.num_query, dtype=np.float64)
    codes = problem.reference_codes
    for start, stop, index, _ in _engine.ranked_lists(
        problem.space, ks, problem.exclusions, problem.chunk_size, positives=problem.positives
    ):
        idx = index.cpu().numpy()
        hit = (idx >= 0) & (codes[np.maximum(idx, 0)] == problem.query_codes[start:stop, None])
        out[start:stop] = statistic(hit, start, stop)
    return out


def _precision_sum(relevant: np.ndarray) -> np.ndarray:
    """``Σ_i rel(i) · P@i`` of each row of a relevance matrix (MAP@R's numerator)."""
    rel = relevant.astype(np.float64)
    positions = np.arange(1, rel.shape[1] + 1, dtype=np.float64)
    return (np.cumsum(rel, axis=1) / positions * rel).sum(axis=1)


def _at_r(
    func: str,
    statistic: Callable[[np.ndarray], np.ndarray],
    problem: _labelform.LabelProblem,
) -> float:
    """Mean over evaluated queries of ``statistic(top-R relevance) / R``."""
    r = problem.num_relevant
    evaluated = r > 0
    if not evaluated.any():
        raise _checks.fail(func, "query_labels", "shared with the reference", "only lone queries")
    values = _per_query(problem, r, lambda hit, start, stop: statistic(hit))
    return float((values[evaluated] / r[evaluated]).mean())


def r_precision(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    *,
    query_in_reference: bool = False,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "float32",
) -> float:
    """R-precision: the fraction of relevant items among the first R, averaged over queries.

    ``R`` is the number of reference items with the query's label (self-matches excluded as
    in :func:`recallkit.recall_at_k`); lone queries (R = 0) are left out, as in PML. Ties rank
    the lower reference index first. (Musgrave et al. 2020, "A Metric Learning Reality Check".)

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> r_precision(x, x, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True)
    0.5
    """
    func = "r_precision"
    problem = _labelform.build(
        func, query, reference, query_labels, reference_labels, **_labelform.options(locals())
    )
    return _at_r(func, lambda hit: hit.sum(axis=1), problem)


def map_at_r(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    *,
    query_in_reference: bool = False,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "float32",
) -> float:
    """MAP@R (Musgrave et al. 2020): mean over queries of ``(1/R) Σ_{i ≤ R} rel(i) · P@i``.

    ``R`` is the number of reference items with the query's label after self-exclusion; lone
    queries are left out. Identical to PML's ``mean_average_precision_at_r`` on the same inputs
    (with ``k="max_bin_count"``), except that ties rank the lower reference index first.

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> map_at_r(x, x, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True)
    0.5
    """
    func = "map_at_r"
    problem = _labelform.build(
        func, query, reference, query_labels, reference_labels, **_labelform.options(locals())
    )
    return _at_r(func, _precision_sum, problem)


def map_at_k(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    k: int = 10,
    *,
    divisor: str = "min_k_r",
    query_in_reference: bool = False,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "float32",
) -> float:
    """Mean AP@K over evaluated queries, label form (:func:`average_precision_at_k`'s formula).

    ``divisor`` is ``"min_k_r"`` (default, a perfect ranking scores 1), ``"r"`` (PML) or
    ``"hits"`` (torchmetrics, OML). Lone queries (R = 0) are left out.

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> map_at_k(x, x, [0, 0, 1, 1], [0, 0, 1, 1], k=2, query_in_reference=True)
    0.75
    """
    func = "map_at_k"
    k = _checks.check_positive_int(k, func, "k")
    _checks.check_choice(divisor, DIVISORS, func, "divisor")
    problem = _labelform.build(
        func, query, reference, query_labels, reference_labels, **_labelform.options(locals())
    )
    r = problem.num_relevant
    evaluated = r > 0
    if not evaluated.any():
        raise _checks.fail(func, "query_labels", "shared with the reference", "only lone queries")
    ks = np.full(problem.space.num_query, k, dtype=np.int64)
    ap = _per_query(
        problem,
        ks,
        lambda hit, start, stop: _ap_from_relevance(hit, r[start:stop], k, divisor),
    )
    return float(ap[evaluated].mean())
