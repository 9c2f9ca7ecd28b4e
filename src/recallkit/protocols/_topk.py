"""Exact top-k lists for submission files, from the core (no second ranking implementation).

From embeddings: :func:`recallkit.nearest_neighbors`. From a similarity matrix: the core's
top-k kernel, the one ``nearest_neighbors`` runs on each chunk.

The order is the core's: higher score first, equal scores by lower reference index; excluded
candidates never appear. Unused slots (fewer than k candidates) hold ``-1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from recallkit import _checks, _engine, _kernels, nearest_neighbors


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
    matrix = _checks.as_embeddings(scores, "scores", func)
    matrix = matrix.to(torch.float64 if matrix.dtype == torch.float64 else torch.float32)
    _checks.check_finite_rows(matrix, 0, "scores", func)
    n, m = matrix.shape
    excluded = None if exclude is None else _engine.Pairs.from_lists(_padded(exclude), n)
    out = np.full((n, k), -1, dtype=np.int64)
    size = max(1, _engine.DEFAULT_MEMORY_BUDGET // (m * 8))
    for start, stop in _engine.chunks(n, size):
        block = matrix[start:stop].clone()
        if excluded is not None:
            rows, cols = excluded.expand(start, stop, block.device)
            block[rows, cols] = -torch.inf
        ks = torch.full((stop - start,), k, dtype=torch.int64)
        backend = "torch" if block.dtype == torch.float64 else None
        index, _ = _kernels.topk(block, ks, backend)
        out[start:stop, : index.shape[1]] = index.cpu().numpy()[:, :k]
    return out


def _padded(exclude: np.ndarray) -> np.ndarray:
    array = np.asarray(exclude, dtype=np.int64)
    return array[:, None] if array.ndim == 1 else array
