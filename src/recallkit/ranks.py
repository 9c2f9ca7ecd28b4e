"""Ground-truth form: the rank of each query's known correct item(s), and recall from ranks.

The convention of image-text retrieval (CLIP, open_clip, CLIP_benchmark): ranks are 0-indexed,
the rank of an item is the number of candidates that rank above it, and a candidate ranks above
it with a higher score, or an equal score and a lower index. Recall@K is the fraction of queries
whose rank is below K.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized
from typing import Any

import numpy as np
import torch

from recallkit import _checks, _engine, _kernels

REDUCTIONS = ("min", "none")


def _targets(
    ground_truth: Any,
    n: int,
    m: int,
    func: str,
    name: str = "ground_truth",
    allow_empty: bool = False,
) -> tuple[np.ndarray, bool]:
    """Ground truth as an ``(n, g)`` int64 array with ``-1`` padding; and whether it was 1-D.

    Indices must be integers (Python, numpy or torch): floats, even integral ones, are refused
    as numpy indexing refuses them.
    """
    if isinstance(ground_truth, torch.Tensor):
        ground_truth = ground_truth.detach().cpu().numpy()
    if isinstance(ground_truth, np.ndarray) and ground_truth.dtype != object:
        array = _checks.as_integers(ground_truth, func, name, "integer reference indices")
        single = array.ndim == 1
        if single:
            array = array[:, None]
        elif array.ndim != 2:
            raise _checks.fail(func, name, "1-D or 2-D", f"shape {array.shape}")
    else:
        if isinstance(ground_truth, str | bytes) or not hasattr(ground_truth, "__len__"):
            raise _checks.fail(
                func,
                name,
                "a sequence or array with one entry per query",
                type(ground_truth).__name__,
            )
        rows = list(ground_truth)
        single = all(np.ndim(x) == 0 for x in rows)
        if single:
            array = _checks.as_integers(rows, func, name, "integer reference indices")
            array = array.reshape(-1, 1)
        else:
            lists = [
                _checks.as_integers(
                    [x] if np.ndim(x) == 0 else x, func, name, "integer reference indices"
                ).reshape(-1)
                for x in rows
            ]
            width = max((len(x) for x in lists), default=0)
            array = np.full((len(lists), max(width, 1)), -1, dtype=np.int64)
            for i, x in enumerate(lists):
                array[i, : len(x)] = x
    _checks.check_length(array, n, name, func, "query")
    bad = (array >= m) | (array < -1) | ((array == -1) & single & (not allow_empty))
    if bad.any():
        i, t = np.argwhere(bad)[0]
        raise _checks.fail(
            func, name, f"reference indices in [0, {m})", f"{array[i, t]} for query {i}"
        )
    empty = (array < 0).all(axis=1)
    if empty.any() and not allow_empty:
        raise _checks.fail(
            func, name, "at least one index per query", f"none for query {int(np.argmax(empty))}"
        )
    return array, single


def _exclusion(exclude: Any, targets: np.ndarray, m: int, func: str) -> _engine.Pairs | None:
    n = len(targets)
    excluded = _excluded_array(exclude, n, m, func)
    if excluded is None:
        return None
    clash = (excluded[:, :, None] == targets[:, None, :]) & (excluded[:, :, None] >= 0)
    if clash.any():
        i = int(np.argwhere(clash)[0][0])
        raise _checks.fail(
            func, "exclude", "disjoint from the ground truth", f"a ground-truth index for query {i}"
        )
    return _engine.Pairs.from_lists(excluded, n)


def _excluded_array(exclude: Any, n: int, m: int, func: str) -> np.ndarray | None:
    """``exclude`` (an index or a list per query, ``-1`` for none) validated, ``(n, e)``."""
    if exclude is None:
        return None
    if isinstance(exclude, Sized) and not isinstance(exclude, str | bytes) and not len(exclude):
        return None
    array = _targets(exclude, n, m, func, "exclude", allow_empty=True)[0]
    return array if (array >= 0).any() else None


def _exclusion_pairs(exclude: Any, n: int, m: int, func: str) -> _engine.Pairs | None:
    """``exclude`` as pairs, validated; ``None`` when nothing is excluded."""
    excluded = _excluded_array(exclude, n, m, func)
    return None if excluded is None else _engine.Pairs.from_lists(excluded, n)


def _reduce(ranks: np.ndarray, single: bool, reduce: str) -> np.ndarray:
    if reduce == "none":
        return ranks[:, 0] if single else ranks
    masked = np.where(ranks < 0, np.iinfo(np.int64).max, ranks)
    return masked.min(axis=1)


def ground_truth_ranks(
    scores: Any, ground_truth: Any, *, exclude: Any = None, reduce: str = "min"
) -> np.ndarray:
    """0-indexed rank of each query's ground-truth item in its row of a similarity matrix.

    ``rank = |{j : s[j] > s[g]}| + |{j < g : s[j] == s[g]}|`` over the candidates ``j`` that are
    not excluded: on equal scores the lower index ranks first. ``ground_truth`` holds one index
    per query, or several (a list per query, or an ``(n, g)`` array padded with ``-1``): with
    ``reduce="min"`` the rank of the best one (image-to-text retrieval with five captions per
    image), with ``reduce="none"`` the rank of each (``-1`` at padding). Other ground truths count
    as candidates. ``exclude`` removes candidates per query (an index, or a list, per query).
    Indices are integers (Python, numpy or torch): floats are refused even when integral
    (``2.0``), as numpy indexing refuses them, rather than truncated.

    >>> ground_truth_ranks([[0.2, 0.9, 0.2], [0.5, 0.5, 0.5]], [0, 2])
    array([1, 2])
    >>> ground_truth_ranks([[0.2, 0.9, 0.2]], [[0, 2]], reduce="none")
    array([[1, 2]])
    """
    func = "ground_truth_ranks"
    _checks.check_choice(reduce, REDUCTIONS, func, "reduce")
    matrix = score_matrix(scores, func)
    n, m = matrix.shape
    targets, single = _targets(ground_truth, n, m, func)
    exclusions = _exclusion(exclude, targets, m, func)
    out = np.empty(targets.shape, dtype=np.int64)
    for start, stop, block in matrix_chunks(matrix, exclusions):
        t = torch.from_numpy(targets[start:stop]).to(block.device)
        thresholds = block.gather(1, t.clamp(min=0))
        out[start:stop] = _kernels.count_before(block, thresholds, t).cpu().numpy()
    return _reduce(out, single, reduce)


def score_matrix(scores: Any, func: str) -> torch.Tensor:
    """A validated similarity matrix (float32, or float64 if given so)."""
    matrix = _checks.as_embeddings(scores, "scores", func)
    matrix = matrix.to(torch.float64 if matrix.dtype == torch.float64 else torch.float32)
    _checks.check_finite_rows(matrix, 0, "scores", func)
    return matrix


def matrix_chunks(
    matrix: torch.Tensor, exclusions: _engine.Pairs | None
) -> Iterator[tuple[int, int, torch.Tensor]]:
    """Row chunks of a similarity matrix (copies) with excluded candidates set to ``-inf``."""
    n, m = matrix.shape
    size = max(1, _engine.DEFAULT_MEMORY_BUDGET // (m * matrix.element_size()))
    for start, stop in _engine.chunks(n, size):
        block = matrix[start:stop].clone()
        if exclusions is not None:
            rows, cols = exclusions.expand(start, stop, block.device)
            block[rows, cols] = -torch.inf
        yield start, stop, block


def ground_truth_ranks_from_embeddings(
    query: Any,
    reference: Any,
    ground_truth: Any,
    *,
    exclude: Any = None,
    reduce: str = "min",
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "float32",
) -> np.ndarray:
    """:func:`ground_truth_ranks` from embeddings, chunked: the full matrix is never built.

    Scores are the exact scores of :func:`recallkit.recall_at_k` (``metric`` cosine, dot or
    euclidean; ``precision`` the GEMM filter's type on CUDA), with the same tie rule.

    >>> import numpy as np
    >>> images = np.eye(3)
    >>> captions = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    >>> ground_truth_ranks_from_embeddings(captions, images, [0, 1, 2]).tolist()
    [0, 2, 1]
    """
    func = "ground_truth_ranks_from_embeddings"
    _checks.check_choice(reduce, REDUCTIONS, func, "reduce")
    chunk_size = _checks.check_chunk_size(chunk_size, func)
    space = _engine.prepare(query, reference, metric, device, func, precision=precision)
    targets, single = _targets(ground_truth, space.num_query, space.num_reference, func)
    exclusions = _exclusion(exclude, targets, space.num_reference, func)
    if reduce == "min" or single:
        positives = _engine.Pairs.from_lists(targets, space.num_query)
        return _engine.first_hit_ranks(space, positives, exclusions, chunk_size)
    ranks = _engine.slot_ranks(space, targets, exclusions, chunk_size)
    return _reduce(ranks, single, reduce)


def recall_from_ranks(ranks: Any, ks: Sequence[int]) -> dict[str, float]:
    """``{"recall@K": mean(rank < K)}`` for 0-indexed ranks, in the order of ``ks``.

    >>> recall_from_ranks([0, 3, 1, 10], ks=[1, 5])
    {'recall@1': 0.25, 'recall@5': 0.75}
    """
    func = "recall_from_ranks"
    ks = _checks.check_ks(ks, func)
    array = np.asarray(ranks)
    if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iu":
        raise _checks.fail(func, "ranks", "a non-empty 1-D array of integers", f"{array!r}")
    if (array < 0).any():
        i = int(np.argmax(array < 0))
        raise _checks.fail(func, "ranks", "non-negative", f"{int(array[i])} at position {i}")
    n = array.size
    return {f"recall@{k}": int(np.count_nonzero(array < k)) / n for k in ks}


def recall_at_k_from_scores(sim_matrix: Any, ground_truth: Any, ks: Sequence[int]) -> list[float]:
    """Recall@K from a similarity matrix and one ground-truth index per query, rounded.

    Ranks follow the 0-indexed, lower-index-first rank convention (:func:`ground_truth_ranks`:
    ties broken by the lower gallery index); each value is ``round(count(rank < K) / n, 4)``,
    returned as a list in the order of ``ks``.

    >>> sim = [[0.9, 0.1, 0.5], [0.3, 0.3, 0.2], [0.1, 0.2, 0.3]]
    >>> recall_at_k_from_scores(sim, [0, 1, 0], [1, 2])
    [0.3333, 0.6667]
    """
    ks = _checks.check_ks(ks, "recall_at_k_from_scores")
    ranks = ground_truth_ranks(sim_matrix, ground_truth)
    n = len(ranks)
    return [round(int(np.count_nonzero(ranks < k)) / n, 4) for k in ks]
