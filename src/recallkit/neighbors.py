"""Exact k-nearest neighbours, chunked, with the library's tie rule."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from recallkit import _checks, _engine, _kernels
from recallkit.ranks import _exclusion_pairs, matrix_chunks, score_matrix


def nearest_neighbors(
    query: Any,
    reference: Any,
    k: int,
    *,
    query_in_reference: bool = False,
    exclude: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "float32",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact ``k`` best reference items of each query, best first: ``(indices, scores)``.

    Scores are those of :func:`recallkit.recall_at_k` (higher is better; for
    ``metric="euclidean"`` the score is ``2 q·r - |r|²``, which orders like ``-|q - r|``). On
    equal scores the lower reference index comes first, so the lists are deterministic.
    ``query_in_reference=True`` removes query ``i``'s own row ``i``; ``exclude`` removes further
    candidates per query (an index or a list per query, ``-1`` for none). ``k`` above the number
    of reference rows is clamped to it (the lists have ``min(k, m)`` slots); slots beyond a query's
    available candidates hold index ``-1`` and score ``-inf``. Scores are the exact float64 scores
    (:mod:`recallkit._engine`). ``precision`` (``"float32"``, ``"float16"``, ``"bfloat16"``) is the
    GEMM filter's type on CUDA, as in :func:`recallkit.recall_at_k`: the results are identical.

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> idx, _ = nearest_neighbors(x, x, 2, query_in_reference=True)
    >>> idx.tolist()
    [[1, 2], [0, 2], [0, 1]]
    """
    func = "nearest_neighbors"
    k = _checks.check_positive_int(k, func, "k")
    chunk_size = _checks.check_chunk_size(chunk_size, func)
    space = _engine.prepare(query, reference, metric, device, func, precision=precision)
    n, m = space.num_query, space.num_reference
    parts = []
    if query_in_reference:
        if m < n:
            raise _checks.fail(
                func, "reference", f"at least {n} rows when query_in_reference=True", m
            )
        parts.append(_engine.Pairs.diagonal(n))
    if exclude is not None:
        extra = _exclusion_pairs(exclude, n, m, func)
        if extra is not None:
            parts.append(extra)
    exclusions = _engine.Pairs.union(parts, n, m) if parts else None
    k = min(k, m)
    ks = np.full(n, k, dtype=np.int64)
    index = torch.full((n, k), -1, dtype=torch.int64, device=space.device)
    value = torch.full((n, k), -torch.inf, dtype=torch.float64, device=space.device)
    lists = _engine.ranked_lists(space, ks, exclusions, chunk_size, on_device=True)
    for start, stop, idx, val in lists:
        width = idx.shape[1]
        index[start:stop, :width] = idx.to(space.device)
        value[start:stop, :width] = val.to(space.device)
    return index, value


def nearest_neighbors_from_scores(
    scores: Any, k: int, *, exclude: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact ``k`` best columns of each row of a similarity matrix, best first.

    The same order as :func:`nearest_neighbors`: higher score first, equal scores by lower
    column index; ``exclude`` removes candidates per row (an index or a list per row, ``-1`` for
    none); ``k`` is clamped to the number of columns; slots beyond the available candidates
    hold ``-1`` and ``-inf``.

    >>> idx, val = nearest_neighbors_from_scores([[0.5, 0.75, 0.75, 1.0]], 3, exclude=[3])
    >>> idx.tolist(), val.tolist()
    ([[1, 2, 0]], [[0.75, 0.75, 0.5]])
    """
    func = "nearest_neighbors_from_scores"
    k = _checks.check_positive_int(k, func, "k")
    matrix = score_matrix(scores, func)
    n, m = matrix.shape
    k = min(k, m)
    exclusions = _exclusion_pairs(exclude, n, m, func) if exclude is not None else None
    index = torch.full((n, k), -1, dtype=torch.int64)
    value = torch.full((n, k), -torch.inf, dtype=matrix.dtype)
    for start, stop, block in matrix_chunks(matrix, exclusions):
        ks = torch.full((stop - start,), k, dtype=torch.int64)
        idx, val = _kernels.topk(block, ks)
        index[start:stop, : idx.shape[1]] = idx.cpu()
        value[start:stop, : val.shape[1]] = val.cpu()
    return index, value
