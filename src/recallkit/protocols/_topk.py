"""Exact top-k lists for submission files, from the core (no second ranking implementation).

From embeddings: :func:`recallkit.nearest_neighbors`. From a similarity matrix:
:func:`recallkit.nearest_neighbors_from_scores`.

The order is the core's: higher score first, equal scores by lower reference index; excluded
candidates never appear. Unused slots (fewer than k candidates) hold ``-1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from recallkit import nearest_neighbors, nearest_neighbors_from_scores


def top_k(
    query: Any,
    reference: Any,
    k: int,
    *,
    exclude: np.ndarray | None = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
) -> np.ndarray:
    """``(n, k)`` reference indices of each query's k best (:func:`recallkit.nearest_neighbors`)."""
    index, _ = nearest_neighbors(
        query, reference, k, exclude=exclude, metric=metric, chunk_size=chunk_size, device=device
    )
    return index.cpu().numpy()


def top_k_from_scores(
    scores: np.ndarray, k: int, *, exclude: np.ndarray | None = None, func: str = "top_k"
) -> np.ndarray:
    """``(n, k)`` column indices of each row's k best in a similarity matrix."""
    index, _ = nearest_neighbors_from_scores(
        scores, k, exclude=None if exclude is None else _padded(exclude)
    )
    return index.numpy()


def _padded(exclude: np.ndarray) -> np.ndarray:
    array = np.asarray(exclude, dtype=np.int64)
    return array[:, None] if array.ndim == 1 else array
