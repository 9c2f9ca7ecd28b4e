"""Exact k-nearest neighbours, chunked, with the library's tie rule."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from recallkit import engine
from recallkit._inputs import checks as _checks
from recallkit.exceptions import Text
from recallkit.ground_truth import Ranker, _exclusion_pairs
from recallkit.options import Options, accepts, check_flag
from recallkit.typing import Embeddings, Ids, Scores
from recallkit.typing import Ranks as RankArray


def _clamped(func: str, k: int, m: int) -> int:
    if k > m:
        warnings.warn(
            f"{func}: k = {k} exceeds the {m} reference items; the lists have {m} slots.",
            UserWarning,
            stacklevel=3,
        )
    return min(k, m)


@accepts(scope="engine")
def nearest_neighbors(
    query: Embeddings,
    reference: Embeddings,
    k: int,
    *,
    query_in_reference: bool = False,
    exclude: RankArray | None = None,
    exclude_ids: tuple[Ids, Ids] | None = None,
    options: Options,
) -> tuple[np.ndarray | torch.Tensor, np.ndarray | torch.Tensor]:
    """The exact ``k`` best reference items of each query, best first.

    Scores are those of [`recallkit.recall_at_k`][recallkit.retrieval.recall_at_k], the exact
    float64 scores (higher is better; for ``metric="euclidean"`` the score is ``2 q·r - |r|²``,
    which orders like ``-|q - r|``). On equal scores the lower reference index comes first, so the
    lists are deterministic, and identical in every precision.

    Parameters
    ----------
    query : array_like of shape (n, d)
        The query embeddings ([`recallkit.typing.Embeddings`][recallkit.typing.Embeddings]).
    reference : array_like of shape (m, d)
        The reference embeddings (a memory map is read block by block).
    k : int
        The list length, positive; above ``m`` it is clamped to ``m``, with a warning.
    query_in_reference : bool, default False
        Remove query ``i``'s own row ``i`` (the reference begins with the queries).
    exclude : int or list per query, optional
        Further candidates removed per query (an index or a list per query, ``-1`` for none).
    exclude_ids : tuple (query_ids, reference_ids), optional
        Remove every reference item whose id equals the query's (ids compared by value).
    {options}

    Returns
    -------
    indices : ndarray or Tensor of int64, shape (n, min(k, m))
        Each query's best reference indices, best first; ``-1`` beyond its candidates.
    scores : ndarray or Tensor of float64, shape (n, min(k, m))
        Their exact scores; ``-inf`` beyond the candidates. numpy inputs give numpy arrays,
        torch inputs torch tensors (on the device the work ran on).

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> idx, _ = nearest_neighbors(x, x, 2, query_in_reference=True)
    >>> idx.tolist()
    [[1, 2], [0, 2], [0, 1]]
    """
    func = "nearest_neighbors"
    k = _checks.check_positive_int(k, func, "k")
    query_in_reference = check_flag(query_in_reference, func, "query_in_reference")
    ranker = Ranker.from_embeddings(query, reference, func, options)
    n, m = ranker.num_query, ranker.num_reference
    parts = []
    if query_in_reference:
        if m < n:
            raise _checks.fail(
                func,
                "reference",
                Text(f"at least {n} rows with {{qir}}", qir=("query_in_reference", True)),
                m,
            )
        parts.append(engine.Pairs.diagonal(n))
    if exclude is not None:
        extra = _exclusion_pairs(exclude, n, m, func)
        if extra is not None:
            parts.append(extra)
    codes = None
    if exclude_ids is not None:
        codes = id_codes(exclude_ids, n, m, func)
    k = _clamped(func, k, m)
    exclusions = engine.Exclusions.of(parts, n, m, codes)
    index, value = ranker.lists(k, exclusions)
    return _checks.like_input(query, index, value)


def id_codes(exclude_ids: Any, n: int, m: int, func: str) -> tuple[np.ndarray, np.ndarray]:
    """``exclude_ids = (query_ids, reference_ids)`` as exclusion codes (equal ids: skipped)."""
    from recallkit._inputs.codes import dense_codes

    if not isinstance(exclude_ids, tuple | list) or len(exclude_ids) != 2:
        raise _checks.fail(
            func, "exclude_ids", "a pair (query_ids, reference_ids)", type(exclude_ids).__name__
        )
    q, r = dense_codes(*exclude_ids, ("exclude_ids[0]", "exclude_ids[1]"), func)
    _checks.check_length(q, n, "exclude_ids[0]", func, "query")
    _checks.check_length(r, m, "exclude_ids[1]", func, "reference")
    return q, r


def nearest_neighbors_from_scores(
    scores: Scores, k: int, *, exclude: RankArray | None = None
) -> tuple[np.ndarray | torch.Tensor, np.ndarray | torch.Tensor]:
    """The exact ``k`` best columns of each row of a similarity matrix, best first.

    The same order as [`nearest_neighbors`][nearest_neighbors]: higher score first and, on equal
    scores, the lower reference index (the lower column) first.

    Parameters
    ----------
    scores : array_like of shape (n, m)
        The similarity matrix, higher is better, exact as given.
    k : int
        The list length, positive; above ``m`` it is clamped to ``m``, with a warning.
    exclude : int or list per row, optional
        Candidates removed per row (an index or a list per row, ``-1`` for none).

    Returns
    -------
    indices : ndarray or Tensor of int64, shape (n, min(k, m))
        Each row's best columns, best first; ``-1`` beyond its candidates.
    values : ndarray or Tensor, shape (n, min(k, m))
        Their scores; ``-inf`` beyond the candidates. numpy in, numpy out; torch in, torch
        out.

    Examples
    --------
    >>> idx, val = nearest_neighbors_from_scores([[0.5, 0.75, 0.75, 1.0]], 3, exclude=[3])
    >>> idx.tolist(), val.tolist()
    ([[1, 2, 0]], [[0.75, 0.75, 0.5]])
    """
    func = "nearest_neighbors_from_scores"
    k = _checks.check_positive_int(k, func, "k")
    ranker = Ranker.from_scores(scores, func)
    n, m = ranker.num_query, ranker.num_reference
    k = _clamped(func, k, m)
    pairs = _exclusion_pairs(exclude, n, m, func) if exclude is not None else None
    index, value = ranker.lists(k, ranker.exclusions(pairs))
    return _checks.like_input(scores, index, value)
