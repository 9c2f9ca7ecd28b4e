"""pytorch-metric-learning layer: an exact ``knn_func``; an ``AccuracyCalculator`` with recall@K."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from recallkit import _checks
from recallkit._labels import dense_codes
from recallkit.neighbors import nearest_neighbors
from recallkit.recall import recall_at_k


class ExactKNN:
    """A drop-in ``knn_func`` for PML's ``AccuracyCalculator``: exact, chunked, deterministic.

    Called as ``knn(query, k, reference, ref_includes_query)`` it returns ``(distances,
    indices)`` of shape ``(n, k)``, best first. With ``ref_includes_query`` the query's own row
    ``i`` is removed by index, even when an exact duplicate of the query sits elsewhere in the
    reference (that duplicate is a real neighbour). On equal scores the lower reference index
    comes first. ``distances`` are cosine similarities or inner products (higher is better) for
    ``metric="cosine"``/``"dot"``, and Euclidean distances for ``"euclidean"``.

    ``exclude_ids=(query_ids, reference_ids)`` also removes every reference item whose id equals
    the query's.

    >>> import torch
    >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> _, idx = ExactKNN()(x, 1, x, True)
    >>> idx.tolist()
    [[1], [0], [0]]
    """

    def __init__(
        self, metric: str = "cosine", chunk_size: int | None = None, device: Any = None
    ) -> None:
        self.metric = _checks.check_metric(metric, "ExactKNN")
        self.chunk_size = chunk_size
        self.device = device

    def __call__(
        self,
        query: Any,
        k: int,
        reference: Any = None,
        ref_includes_query: bool = False,
        *,
        exclude_ids: tuple[Any, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if reference is None:
            reference, ref_includes_query = query, True
        exclude = None
        if exclude_ids is not None:
            exclude = _same_id_lists(*exclude_ids)
        indices, scores = nearest_neighbors(
            query,
            reference,
            int(k),
            query_in_reference=ref_includes_query,
            exclude=exclude,
            metric=self.metric,
            chunk_size=self.chunk_size,
            device=self.device,
        )
        if self.metric == "euclidean":
            q = torch.as_tensor(np.asarray(query) if not torch.is_tensor(query) else query)
            q = q.to(device=scores.device, dtype=scores.dtype)
            # score = 2 q·r - |r|², so |q - r|² = |q|² - score.
            scores = ((q * q).sum(dim=1, keepdim=True) - scores).clamp(min=0).sqrt()
        out_device = query.device if torch.is_tensor(query) else indices.device
        return scores.to(out_device), indices.to(out_device)


def _same_id_lists(query_ids: Any, reference_ids: Any) -> np.ndarray:
    """Per query, the reference positions with the same id, as an ``(n, w)`` array padded -1."""
    q, r = dense_codes(query_ids, reference_ids, ("query_ids", "reference_ids"), "ExactKNN")
    order = np.argsort(r, kind="stable")
    sorted_r = r[order]
    lo = np.searchsorted(sorted_r, q, side="left")
    hi = np.searchsorted(sorted_r, q, side="right")
    width = int((hi - lo).max(initial=0))
    out = np.full((len(q), max(width, 1)), -1, dtype=np.int64)
    for offset in range(width):
        has = lo + offset < hi
        out[has, offset] = order[lo[has] + offset]
    return out


class RecallCalculator(AccuracyCalculator):
    """PML's ``AccuracyCalculator`` that also reports ``recall_at_K`` for each K in ``ks``.

    recall@K comes from :func:`recallkit.recall_at_k` (the one implementation) with PML's
    ``ref_includes_query`` and lone-query semantics; with ``avg_of_avgs`` it is averaged per
    class first, as PML does for its own metrics. The default ``knn_func`` is :class:`ExactKNN`
    with the same ``metric``, and ``k`` defaults to ``"max_bin_count"`` so that MAP@R and
    R-precision are exact. Labels are mapped to dense int64 codes before PML sees them (PML
    casts labels to float32, which merges identifiers above 2**24).

    >>> import torch
    >>> x = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> calc = RecallCalculator(ks=(1, 2), device=torch.device("cpu"))
    >>> calc.get_accuracy(x, torch.tensor([0, 0, 1, 1]), include=("precision_at_1", "recall_at_2"))
    {'precision_at_1': 0.5, 'recall_at_2': 1.0}
    """

    def __init__(self, ks: Any = (1, 2, 4, 8), *, metric: str = "cosine", **kwargs: Any) -> None:
        self.ks = _checks.check_ks(ks, "RecallCalculator")
        self.metric = _checks.check_metric(metric, "RecallCalculator")
        for k in self.ks:
            # PML discovers metrics by their "calculate_" attribute names.
            setattr(self, f"calculate_recall_at_{k}", partial(self._recall_at, k))
        kwargs.setdefault("knn_func", ExactKNN(metric=metric))
        kwargs.setdefault("k", "max_bin_count")
        super().__init__(**kwargs)

    def get_accuracy(
        self,
        query: Any,
        query_labels: Any,
        reference: Any = None,
        reference_labels: Any = None,
        ref_includes_query: bool = False,
        include: tuple = (),
        exclude: tuple = (),
    ) -> dict[str, Any]:
        if reference is None:
            reference, reference_labels, ref_includes_query = query, query_labels, True
        q_codes, r_codes = dense_codes(
            query_labels, reference_labels, ("query_labels", "reference_labels"), "get_accuracy"
        )
        self._recall_inputs = (query, reference, q_codes, r_codes, ref_includes_query)
        self._recall_cache: dict[str, Any] = {}
        try:
            out = super().get_accuracy(
                query,
                torch.from_numpy(q_codes),
                reference,
                torch.from_numpy(r_codes),
                ref_includes_query,
                include,
                exclude,
            )
        finally:
            self._recall_inputs = None
        return out

    def _recall_at(self, k: int, **kwargs: Any) -> float:
        if "result" not in self._recall_cache:
            query, reference, q_codes, r_codes, self_in = self._recall_inputs
            self._recall_cache["result"] = recall_at_k(
                query,
                reference,
                q_codes,
                r_codes,
                self.ks,
                query_in_reference=self_in,
                metric=self.metric,
            )
        result = self._recall_cache["result"]
        if not self.avg_of_avgs:
            return result[f"recall@{k}"]
        evaluated = result.evaluated
        hits = result.hits(result.effective_ks[self.ks.index(k)])[evaluated]
        labels = np.asarray(self._recall_inputs[2])[evaluated]
        if len(labels) == 0:
            return float("nan")
        _, inverse = np.unique(labels, return_inverse=True)
        per_class = np.bincount(inverse, weights=hits) / np.bincount(inverse)
        return float(per_class.mean())
