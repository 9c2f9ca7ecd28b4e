"""Ground-truth form: the rank of each query's known correct item(s), and metrics from ranks.

The convention of image-text retrieval (CLIP, open_clip, CLIP_benchmark): ranks are 0-indexed,
the rank of an item is the number of candidates that rank above it, and a candidate ranks above
it with a higher score, or an equal score and a lower index. Recall@K is the fraction of queries
whose rank is below K.

Ranks come from embeddings (the engine: exact, chunked, the full matrix never built) or from a
similarity matrix whose entries are exact as given; [`Ranker`][Ranker] is either, so that every
benchmark protocol ([`recallkit.protocols`][recallkit.protocols]) is written once over it. Beside
each rank the ranker gives its optimistic and pessimistic values (every exact tie broken in the
query's favour, or against it).

The same ranker gives each query's k nearest reference items
([`nearest_neighbors`][recallkit.ground_truth.nearest_neighbors] from embeddings,
[`nearest_neighbors_from_scores`][recallkit.ground_truth.nearest_neighbors_from_scores] from a
score matrix), chunked, with the library's tie rule: on equal scores the lower reference index
first.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence, Sized
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from recallkit import engine
from recallkit._inputs import checks as _checks
from recallkit.exceptions import Text
from recallkit.metrics import DIVISORS, ap_divisor, rank_bounds
from recallkit.options import Options, accepts, check_flag
from recallkit.result import Result
from recallkit.typing import Embeddings, Ids, Scores
from recallkit.typing import Ranks as RankArray

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


def _exclusion(exclude: Any, targets: np.ndarray, m: int, func: str) -> engine.Pairs | None:
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
    return engine.Pairs.from_lists(excluded, n)


def _excluded_array(exclude: Any, n: int, m: int, func: str) -> np.ndarray | None:
    """``exclude`` (an index or a list per query, ``-1`` for none) validated, ``(n, e)``."""
    if exclude is None:
        return None
    if isinstance(exclude, Sized) and not isinstance(exclude, str | bytes) and not len(exclude):
        return None
    array = _targets(exclude, n, m, func, "exclude", allow_empty=True)[0]
    return array if (array >= 0).any() else None


def _exclusion_pairs(exclude: Any, n: int, m: int, func: str) -> engine.Pairs | None:
    """``exclude`` as pairs, validated; ``None`` when nothing is excluded."""
    excluded = _excluded_array(exclude, n, m, func)
    return None if excluded is None else engine.Pairs.from_lists(excluded, n)


@dataclass(frozen=True)
class Ranks:
    """Ranks of ground-truth items (``-1`` at padding), with every exact tie broken in the
    query's favour (``optimistic``) and against it (``pessimistic``).

    Attributes
    ----------
    ranks : ndarray or Tensor of int64, shape (n,) or (n, g)
        The 0-indexed ranks by the tie rule (lower reference index first).
    optimistic : ndarray or Tensor of int64, shape of ``ranks``
        Each rank with every exact tie broken in the query's favour (the item first among
        those with its score).
    pessimistic : ndarray or Tensor of int64, shape of ``ranks``
        Each rank with every exact tie broken against the query (the item last among those
        with its score).
    """

    ranks: np.ndarray
    optimistic: np.ndarray
    pessimistic: np.ndarray

    def map(self, f: Any) -> Ranks:
        """The three arrays through ``f``.

        Parameters
        ----------
        f : callable
            Applied to ``ranks``, ``optimistic`` and ``pessimistic``.

        Returns
        -------
        Ranks
        """
        return Ranks(f(self.ranks), f(self.optimistic), f(self.pessimistic))


def _reduce(ranks: Ranks, single: bool, reduce: str) -> Ranks:
    if reduce == "none":
        return ranks.map(lambda r: r[:, 0] if single else r)
    return ranks.map(lambda r: r[:, 0])


class Ranker:
    """Ranks and ranked lists of a query set against a reference, from embeddings (the engine)
    or from a similarity matrix (exact scores as given): one interface for both, so that a
    protocol is written once ([`from_embeddings`][from_embeddings],
    [`from_scores`][from_scores])."""

    def __init__(
        self,
        num_query: int,
        num_reference: int,
        run: Any,
        device: torch.device,
        dtype: torch.dtype = torch.float64,
        *,
        func: str = "",
        names: tuple[str, str] = ("query", "reference"),
        matrix: bool = False,
        transposed: bool = False,
    ) -> None:
        self.num_query = num_query
        self.num_reference = num_reference
        self._run = run
        self.device = device
        self.dtype = dtype
        self.func = func
        self.names = names
        self.matrix = matrix
        self.transposed = transposed

    def check_rows(self, expected: int, what: str) -> None:
        """Raise unless there is one query per ``what`` (naming the caller's argument)."""
        self._check(self.num_query, expected, what, self.names[0], rows=not self.transposed)

    def check_columns(self, expected: int, what: str) -> None:
        """Raise unless there is one reference item per ``what``."""
        self._check(self.num_reference, expected, what, self.names[1], rows=self.transposed)

    def _check(self, got: int, expected: int, what: Any, name: str, rows: bool) -> None:
        if got == expected:
            return
        if self.matrix and not rows:
            raise _checks.fail(
                self.func, name, _checks.per(what, expected, "column"), f"{got} columns"
            )
        raise _checks.fail(self.func, name, _checks.per(what, expected, "row"), f"{got} rows")

    @classmethod
    def from_embeddings(
        cls,
        query: Any,
        reference: Any,
        func: str,
        options: Options | None = None,
        query_name: str = "query",
        reference_name: str = "reference",
        expect: tuple[int, str, int, str] | None = None,
    ) -> Ranker:
        """A ranker over embeddings, ``options`` as in
        [`recallkit.Options`][recallkit.options.Options]; ``expect`` = ``(rows, what, reference
        rows, what)`` checks the row counts first."""
        options = options if options is not None else Options().checked(func)
        if expect is not None:
            _checks.check_rows(query, expect[0], func, query_name, expect[1])
            _checks.check_rows(reference, expect[2], func, reference_name, expect[3])
        try:
            space = engine.prepare(query, reference, options, func, query_is_reference=False)
        except ValueError as error:  # name the protocol's own arguments
            text = str(error).replace("'query'", f"'{query_name}'")
            text = text.replace("the query's dimension", f"the dimension of '{query_name}'")
            raise ValueError(text.replace("'reference'", f"'{reference_name}'")) from None

        def run(request: engine.Request) -> Any:
            return engine.run(space, request)

        return cls(
            space.num_query,
            space.num_reference,
            run,
            space.device,
            func=func,
            names=(query_name, reference_name),
        )

    @classmethod
    def from_scores(
        cls,
        scores: Any,
        func: str,
        name: str = "scores",
        transposed: bool = False,
        expect: tuple[int, str, int, str] | None = None,
        options: Options | None = None,
    ) -> Ranker:
        """A ranker over a ``(queries, references)`` similarity matrix (higher is better);
        ``transposed``: the matrix the caller gave is ``(references, queries)`` (its errors
        name rows and columns as the caller sees them); ``expect`` as in
        [`from_embeddings`][from_embeddings]; ``options``: the memory budget (default: the
        defaults)."""
        from recallkit.engine import matrix as matrices

        values = score_matrix(scores, func, name)
        n, m = values.shape
        ranker = cls(
            n,
            m,
            lambda r: matrices.run(values, r, options),
            values.device,
            values.dtype,
            func=func,
            names=(name, name),
            matrix=True,
            transposed=transposed,
        )
        if expect is not None:
            ranker.check_rows(expect[0], expect[1])
            ranker.check_columns(expect[2], expect[3])
        return ranker

    def exclusions(self, pairs: engine.Pairs | None) -> engine.Exclusions | None:
        """Per-query candidates to skip, as the engine takes them."""
        parts = [pairs] if pairs is not None else []
        return engine.Exclusions.of(parts, self.num_query, self.num_reference)

    def ranks(
        self, targets: np.ndarray, excluded: engine.Exclusions | None = None, reduce: str = "min"
    ) -> Ranks:
        """Ranks of ``targets`` (``(n, g)``, ``-1`` padding): of the best target per query
        (``"min"``: other targets tied with it do not count against it) or of each
        (``"none"``: other targets count as candidates)."""
        n = self.num_query
        g = targets.shape[1]
        if reduce == "min" or g == 1:
            positives = engine.Pairs.from_lists(targets, n)
            request = engine.Request(positives=positives, exclusions=excluded)
        else:
            request = engine.Request(targets=targets, exclusions=excluded)
        width = 1 if request.targets is None else g
        ranks = np.full((n, width), -1, dtype=np.int64)
        low = np.full((n, width), -1, dtype=np.int64)
        high = np.full((n, width), -1, dtype=np.int64)
        for part in self._run(request):
            a, b = part.start, part.stop
            ranks[a:b] = part.ranks
            tied = part.tied_positives if request.targets is None else None
            low[a:b], high[a:b] = rank_bounds(part.ranks, part.ties_before, part.ties, tied)
        if request.targets is not None:
            pad = targets < 0
            ranks[pad] = low[pad] = high[pad] = -1
        return Ranks(ranks, low, high)

    def lists(
        self, k: int, excluded: engine.Exclusions | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each query's exact top-``k`` (clamped to the reference), best first, ties by lower
        index: ``(indices, scores)`` with ``-1``/``-inf`` beyond a query's candidates, on the
        device the work ran on; scores in float64 (embeddings) or the matrix's type."""
        n = self.num_query
        k = min(k, self.num_reference)
        request = engine.Request(
            top_k=np.full(n, k, dtype=np.int64), exclusions=excluded, lists_on_device=True
        )
        index = torch.full((n, k), -1, dtype=torch.int64, device=self.device)
        value = torch.full((n, k), -torch.inf, dtype=self.dtype, device=self.device)
        for part in self._run(request):
            width = part.top_index.shape[1]
            index[part.start : part.stop, :width] = part.top_index.to(self.device)
            value[part.start : part.stop, :width] = part.top_score.to(self.device, self.dtype)
        return index, value


def score_matrix(scores: Any, func: str, name: str = "scores") -> torch.Tensor:
    """A validated similarity matrix (float32, or float64 if given so)."""
    matrix = _checks.as_embeddings(scores, name, func)
    matrix = matrix.to(torch.float64 if matrix.dtype == torch.float64 else torch.float32)
    _checks.check_finite_rows(matrix, 0, name, func)
    return matrix


def _output(ranks: Ranks, tie_bounds: bool, given: Any) -> Any:
    """The ranks (or all three with ``tie_bounds``) as numpy arrays, or as torch tensors on
    ``given``'s device when ``given`` is a tensor."""
    out = ranks.map(lambda r: _checks.like_input(given, r))
    return out if tie_bounds else out.ranks


def ground_truth_ranks(
    scores: Scores,
    ground_truth: RankArray,
    *,
    exclude: RankArray | None = None,
    reduce: str = "min",
    tie_bounds: bool = False,
) -> np.ndarray | torch.Tensor | Ranks:
    """0-indexed rank of each query's ground-truth item in its row of a similarity matrix.

    ``rank = |{j : s[j] > s[g]}| + |{j < g : s[j] == s[g]}|`` over the candidates ``j`` that are
    not excluded: on equal scores the lower reference index ranks first. Other ground truths
    count as candidates. The scores are exact as given.

    Parameters
    ----------
    scores : array_like of shape (n, m)
        The similarity matrix, higher is better
        ([`recallkit.typing.Scores`][recallkit.typing.Scores]).
    ground_truth : array_like of int, shape (n,) or (n, g), or a list of lists
        One reference index per query, or several (a list per query, or an ``(n, g)`` array
        padded with ``-1``). Indices are integers (Python, numpy or torch): floats are refused
        even when integral (``2.0``), as numpy indexing refuses them.
    exclude : int or list per query, optional
        Candidates removed per query (an index, or a list of indices, per query).
    reduce : {"min", "none"}, default "min"
        ``"min"``: the rank of each query's best ground truth (image-to-text retrieval with
        five captions per image); ``"none"``: the rank of each (``-1`` at padding).
    tie_bounds : bool, default False
        Return a [`Ranks`][Ranks] with the optimistic and pessimistic ranks beside the ranks.

    Returns
    -------
    ndarray or Tensor of int64, shape (n,) or (n, g), or Ranks
        The ranks; numpy in, numpy out: a torch tensor of scores gives torch tensors on its
        device. With ``tie_bounds``, a [`Ranks`][Ranks].

    Examples
    --------
    >>> ground_truth_ranks([[0.2, 0.9, 0.2], [0.5, 0.5, 0.5]], [0, 2])
    array([1, 2])
    >>> ground_truth_ranks([[0.2, 0.9, 0.2]], [[0, 2]], reduce="none")
    array([[1, 2]])
    """
    func = "ground_truth_ranks"
    _checks.check_choice(reduce, REDUCTIONS, func, "reduce")
    ranker = Ranker.from_scores(scores, func)
    targets, single = _targets(ground_truth, ranker.num_query, ranker.num_reference, func)
    excluded = ranker.exclusions(_exclusion(exclude, targets, ranker.num_reference, func))
    ranks = _reduce(ranker.ranks(targets, excluded, reduce), single, reduce)
    return _output(ranks, tie_bounds, scores)


@accepts(scope="engine")
def ground_truth_ranks_from_embeddings(
    query: Embeddings,
    reference: Embeddings,
    ground_truth: RankArray,
    *,
    exclude: RankArray | None = None,
    reduce: str = "min",
    tie_bounds: bool = False,
    options: Options,
) -> np.ndarray | torch.Tensor | Ranks:
    """[`ground_truth_ranks`][ground_truth_ranks] from embeddings, chunked: the full matrix is never
    built.

    Scores are the exact float64 scores of
    [`recallkit.recall_at_k`][recallkit.retrieval.recall_at_k] (``metric`` cosine, dot or euclidean;
    ``precision`` the filter GEMM's type), with the same tie rule: on equal scores the lower
    reference index ranks first.

    Parameters
    ----------
    query : array_like of shape (n, d)
        The query embeddings ([`recallkit.typing.Embeddings`][recallkit.typing.Embeddings]).
    reference : array_like of shape (m, d)
        The reference embeddings (a memory map is read block by block).
    ground_truth : array_like of int, shape (n,) or (n, g), or a list of lists
        As in [`ground_truth_ranks`][ground_truth_ranks].
    exclude : int or list per query, optional
        As in [`ground_truth_ranks`][ground_truth_ranks].
    reduce : {"min", "none"}, default "min"
        As in [`ground_truth_ranks`][ground_truth_ranks].
    tie_bounds : bool, default False
        As in [`ground_truth_ranks`][ground_truth_ranks].
    {options}

    Returns
    -------
    ndarray or Tensor of int64, shape (n,) or (n, g), or Ranks
        As [`ground_truth_ranks`][ground_truth_ranks] returns them (torch tensors for a torch
        query).

    Examples
    --------
    >>> import numpy as np
    >>> images = np.eye(3)
    >>> captions = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    >>> ground_truth_ranks_from_embeddings(captions, images, [0, 1, 2]).tolist()
    [0, 2, 1]
    """
    func = "ground_truth_ranks_from_embeddings"
    _checks.check_choice(reduce, REDUCTIONS, func, "reduce")
    ranker = Ranker.from_embeddings(query, reference, func, options)
    targets, single = _targets(ground_truth, ranker.num_query, ranker.num_reference, func)
    excluded = ranker.exclusions(_exclusion(exclude, targets, ranker.num_reference, func))
    ranks = _reduce(ranker.ranks(targets, excluded, reduce), single, reduce)
    return _output(ranks, tie_bounds, query)


def recall_from_ranks(
    ranks: RankArray,
    ks: Sequence[int],
    *,
    optimistic: RankArray | None = None,
    pessimistic: RankArray | None = None,
    name: str = "recall@{k}",
) -> Result:
    """``recall@K = mean(rank < K)`` for 0-indexed ranks, in the order of ``ks``.

    Parameters
    ----------
    ranks : array_like of int, shape (n,)
        0-indexed ranks, non-negative ([`ground_truth_ranks`][ground_truth_ranks]).
    ks : sequence of int
        The K values, positive and distinct.
    optimistic, pessimistic : array_like of int, shape (n,), optional
        The ranks with every tie broken for and against each query ([`Ranks`][Ranks]), given
        together: the result's tie bounds.
    name : str, default "recall@{k}"
        Each key, formatted with ``k``.

    Returns
    -------
    Result
        The values by key, each query's hits (``per_query``), the ranks
        (``first_hit_ranks``) and, with the tie bounds, ``bounds`` and ``num_tied``.

    Examples
    --------
    >>> dict(recall_from_ranks([0, 3, 1, 10], ks=[1, 5]))
    {'recall@1': 0.25, 'recall@5': 0.75}
    """
    func = "recall_from_ranks"
    ks = _checks.check_ks(ks, func)
    array = _rank_array(ranks, func, "ranks")
    n = array.size
    values, per_query, bounds = {}, {}, {}
    tied = np.zeros(n, dtype=bool)
    if (optimistic is None) != (pessimistic is None):
        given, missing = (
            ("optimistic", "pessimistic") if pessimistic is None else ("pessimistic", "optimistic")
        )
        raise _checks.fail(
            func, missing, f"given with '{given}' (the tie bounds go together)", None
        )
    best = worst = None
    if optimistic is not None:
        best = _rank_array(optimistic, func, "optimistic")
        worst = _rank_array(pessimistic, func, "pessimistic")
        for which, bound in (("optimistic", best), ("pessimistic", worst)):
            _checks.check_length(bound, n, which, func, "ranks")
        order = (best <= array) & (array <= worst)
        if not order.all():
            i = int(np.argmin(order))
            raise _checks.fail(
                func,
                "optimistic",
                "at most the ranks, which are at most the pessimistic ranks",
                f"optimistic {int(best[i])}, rank {int(array[i])}, pessimistic {int(worst[i])} "
                f"at position {i}",
            )
    for k in ks:
        key = name.format(k=k)
        hit = array < k
        values[key] = int(np.count_nonzero(hit)) / n
        per_query[key] = hit.astype(np.float64)
        if best is not None and worst is not None:
            high, low = best < k, worst < k
            bounds[key] = (int(np.count_nonzero(low)) / n, int(np.count_nonzero(high)) / n)
            tied |= high != low
    return Result(
        values,
        num_queries=n,
        per_query=per_query,
        first_hit_ranks=array,
        ks=ks,
        effective_ks=ks,
        bounds=bounds,
        tied=tied if bounds else None,
    )


def _rank_array(ranks: Any, func: str, name: str) -> np.ndarray:
    array = np.asarray(ranks.cpu() if isinstance(ranks, torch.Tensor) else ranks)
    if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iu":
        raise _checks.fail(func, name, "a non-empty 1-D array of integers", f"{array!r}")
    if (array < 0).any():
        i = int(np.argmax(array < 0))
        raise _checks.fail(func, name, "non-negative", f"{int(array[i])} at position {i}")
    return array.astype(np.int64)


def recall_at_k_from_scores(
    sim_matrix: Scores, ground_truth: RankArray, ks: Sequence[int]
) -> list[float]:
    """Recall@K from a similarity matrix and one ground-truth index per query, as a list of
    values rounded to 4 decimals in the order of ``ks``.

    Ranks follow the 0-indexed rank convention of [`ground_truth_ranks`][ground_truth_ranks]: on
    equal scores the lower reference index ranks first; each value is ``round(count(rank < K) / n,
    4)``. [`recall_from_ranks`][recall_from_ranks] on [`ground_truth_ranks`][ground_truth_ranks]
    gives the same values unrounded as a [`recallkit.Result`][recallkit.result.Result], with
    per-query hits and tie bounds.

    Parameters
    ----------
    sim_matrix : array_like of shape (n, m)
        The similarity matrix, higher is better.
    ground_truth : array_like of int, shape (n,)
        Each query's correct reference index.
    ks : sequence of int
        The K values, positive and distinct.

    Returns
    -------
    list of float
        recall@K for each K, rounded to 4 decimals.

    Examples
    --------
    >>> sim = [[0.9, 0.1, 0.5], [0.3, 0.3, 0.2], [0.1, 0.2, 0.3]]
    >>> recall_at_k_from_scores(sim, [0, 1, 0], [1, 2])
    [0.3333, 0.6667]
    """
    ks = _checks.check_ks(ks, "recall_at_k_from_scores")
    result = recall_from_ranks(ground_truth_ranks(sim_matrix, ground_truth), ks)
    return [round(result[f"recall@{k}"], 4) for k in ks]


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


def average_precision_at_k(
    relevant_ranks: RankArray,
    num_relevant: RankArray | None = None,
    k: int = 10,
    *,
    divisor: str = "min_k_r",
) -> np.ndarray | torch.Tensor:
    """AP@K of each query from the 0-indexed ranks of its relevant items.

    ``AP@K = (1/D) · Σ_{i ≤ K, item i relevant} precision@i`` with ``precision@i`` the fraction
    of relevant items among the first ``i``, and ``D`` by ``divisor``: ``"min_k_r"`` (default,
    ``min(K, R)``: the CIRCO official evaluation, Baldrati et al. 2023; a perfect ranking scores
    1), ``"r"`` (``R``: PML's ``mean_average_precision``; SQUARE, Wu et al. 2025) or ``"hits"``
    (the relevant items found within the top K: torchmetrics ``retrieval_average_precision``
    with ``top_k``, OML; a query with no hit scores 0). ``R`` is ``num_relevant`` (default: the
    number of ranks given). ``relevant_ranks`` holds, per query, the ranks of its relevant items
    (each counted among all candidates, other relevant items included;
    [`ground_truth_ranks`][ground_truth_ranks] with ``reduce="none"``), as a list of sequences or an
    ``(n, g)`` array padded with ``-1``. A query with ``D = 0`` scores 0. Ranks and counts are
    integers: floats (even integral ones such as ``2.0``) and a rank repeated within a query raise
    ``ValueError``. Memory grows with the ranks given, not with ``K``: the ``j``-th smallest
    relevant rank ``r_(j)`` (0-indexed ``j``) contributes ``(j + 1) / (r_(j) + 1)``. A torch
    tensor of ranks gives a float64 tensor on its device, anything else a numpy array.

    Parameters
    ----------
    relevant_ranks : list of sequences of int, or array_like of shape (n, g)
        Per query, the 0-indexed ranks of its relevant items (``-1`` pads an array).
    num_relevant : array_like of int, shape (n,), optional
        ``R`` per query (default: the number of ranks given).
    k : int, default 10
        The cut-off K, positive.
    divisor : {"min_k_r", "r", "hits"}, default "min_k_r"
        The divisor ``D`` (above).

    Returns
    -------
    ndarray or Tensor of float64, shape (n,)
        Each query's AP@K.

    Examples
    --------
    >>> average_precision_at_k([[0, 2], [5]], k=5).tolist()  # (1 + 2/3)/2 and no hit
    [0.8333333333333333, 0.0]
    >>> average_precision_at_k([[1]], [3], k=5, divisor="r").tolist()  # (1/2)/3
    [0.16666666666666666]
    """
    func = "average_precision_at_k"
    k = min(_checks.check_positive_int(k, func, "k"), 2**62)  # any K beyond every rank is one
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
    # Ranks sorted per query, padding last; position j of a valid rank is its order among them.
    ordered = np.sort(np.where(ranks >= 0, ranks, np.iinfo(np.int64).max), axis=1)
    inside = ordered < k
    order = np.arange(1, ordered.shape[1] + 1, dtype=np.float64)[None, :]
    with np.errstate(divide="ignore"):
        terms = np.where(inside, order / (np.where(inside, ordered, 0) + 1.0), 0.0)
    total = np.cumsum(terms, axis=1)[:, -1] if terms.shape[1] else np.zeros(len(terms))
    denominator = ap_divisor(divisor, k, counts, inside.sum(axis=1)).astype(np.float64)
    values = np.where(denominator > 0, total / np.where(denominator > 0, denominator, 1.0), 0.0)
    return _checks.like_input(relevant_ranks, values)


# ---------------------------------------------------------------------------------------------
# Exact k-nearest neighbours, chunked, with the library's tie rule.
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
        The query embeddings ([`recallkit.typing.Embeddings`][recallkit.typing.Embeddings]), one
        list per row.
    reference : array_like of shape (m, d)
        The reference embeddings, whose row indices the lists hold (a memory map is read block
        by block).
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
