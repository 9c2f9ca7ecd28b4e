"""The chunked scoring engine shared by every metric of recallkit.

Queries are processed in chunks of rows; each chunk's scores against the whole reference are one
``torch.mm`` (never the full n×m matrix). Every GEMM call gets a row count that is a multiple of
:data:`ROW_BLOCK` (the chunk is padded with zero rows): this makes each score bit-identical
whatever the chunk size, thread count or shard split, because the BLAS then runs the same kernel
on every row (a 1-row or 7-row product takes another code path and rounds differently).

Scores are "higher is better": cosine and dot use the inner product (cosine after L2
normalisation); euclidean uses ``2 q·r - |r|²``, which orders candidates exactly as ``-|q - r|²``
(``|q|²`` is constant along a row).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from recallkit import _checks, _kernels

ROW_BLOCK = 64
DEFAULT_MEMORY_BUDGET = 256 * 2**20
MAX_CHUNK_ROWS = 4096


@dataclass(frozen=True)
class Space:
    """Query and reference embeddings prepared for scoring (float32 at least, on one device)."""

    query: torch.Tensor
    reference: torch.Tensor
    metric: str
    reference_sq_norms: torch.Tensor | None

    @property
    def num_query(self) -> int:
        return self.query.shape[0]

    @property
    def num_reference(self) -> int:
        return self.reference.shape[0]

    @property
    def dim(self) -> int:
        return self.query.shape[1]

    @property
    def device(self) -> torch.device:
        return self.query.device


def resolve_device(device: str | torch.device | None, *tensors: torch.Tensor) -> torch.device:
    """The device the work runs on: ``device`` if given, else the first input's device."""
    if device is not None:
        return torch.device(device)
    return tensors[0].device


def _prepare_side(
    x: torch.Tensor, name: str, func: str, metric: str, device: torch.device
) -> torch.Tensor:
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    x = x.to(device=device, dtype=dtype)
    _checks.check_finite_rows(x, 0, name, func)
    if metric == "cosine":
        norms = torch.linalg.vector_norm(x, dim=1)
        _checks.check_zero_rows(norms, 0, name, func)
        x = x / norms[:, None]
    return x.contiguous()


def prepare(
    query: object,
    reference: object,
    metric: str,
    device: str | torch.device | None,
    func: str,
) -> Space:
    """Validate and prepare embeddings; float16/bfloat16 inputs are upcast to float32."""
    _checks.check_metric(metric, func)
    q = _checks.as_embeddings(query, "query", func)
    r = _checks.as_embeddings(reference, "reference", func)
    _checks.check_same_dim(q, r, func)
    dev = resolve_device(device, q, r)
    q = _prepare_side(q, "query", func, metric, dev)
    r = _prepare_side(r, "reference", func, metric, dev)
    if q.dtype != r.dtype:
        q, r = q.to(torch.float64), r.to(torch.float64)
    sq = (r * r).sum(dim=1) if metric == "euclidean" else None
    return Space(q, r, metric, sq)


def chunk_rows(space: Space, chunk_size: int | None, per_row_bytes: int = 0) -> int:
    """Rows per chunk: ``chunk_size`` if given, else sized from the memory budget."""
    if chunk_size is not None:
        return chunk_size
    element = space.reference.element_size()
    per_row = space.num_reference * (element + 2) + per_row_bytes
    rows = DEFAULT_MEMORY_BUDGET // max(per_row, 1)
    rows = max(ROW_BLOCK, min(MAX_CHUNK_ROWS, rows // ROW_BLOCK * ROW_BLOCK))
    return int(rows)


def scores(space: Space, start: int, stop: int) -> torch.Tensor:
    """Scores of queries ``start:stop`` against every reference item, shape ``(stop-start, m)``."""
    block = space.query[start:stop]
    rows = block.shape[0]
    padded = math.ceil(rows / ROW_BLOCK) * ROW_BLOCK
    if padded != rows:
        block = torch.cat([block, block.new_zeros(padded - rows, block.shape[1])])
    out = block @ space.reference.T
    if space.metric == "euclidean":
        out.mul_(2).sub_(space.reference_sq_norms)
    return out[:rows]


class Pairs:
    """Per-query sets of reference positions (positives, or candidates to exclude), as CSR.

    ``expand(start, stop)`` returns flat ``(rows, cols)`` tensors for queries ``start:stop``, with
    rows local to the chunk.
    """

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, num_query: int) -> None:
        self.indptr = indptr
        self.indices = indices
        self.num_query = num_query

    @classmethod
    def by_code(cls, query_codes: np.ndarray, reference_codes: np.ndarray) -> Pairs:
        """Pair each query with every reference item of the same code (label or id)."""
        order = np.argsort(reference_codes, kind="stable")
        size = int(max(query_codes.max(initial=-1), reference_codes.max(initial=-1))) + 1
        counts = np.bincount(reference_codes, minlength=size)
        starts = np.concatenate([[0], np.cumsum(counts)])
        q_counts = counts[query_codes]
        indptr = np.concatenate([[0], np.cumsum(q_counts)])
        # Positions of each query's group inside ``order``: a vectorised concatenation of ranges.
        offsets = np.repeat(starts[query_codes] - indptr[:-1], q_counts)
        flat = np.arange(indptr[-1], dtype=np.int64) + offsets
        return cls(
            torch.from_numpy(indptr.astype(np.int64)),
            torch.from_numpy(order[flat].astype(np.int64)),
            len(query_codes),
        )

    @classmethod
    def diagonal(cls, num_query: int) -> Pairs:
        """Pair query ``i`` with reference ``i`` (the query's own row, first in the reference)."""
        return cls(torch.arange(num_query + 1), torch.arange(num_query), num_query)

    @classmethod
    def from_lists(cls, lists: Sequence[Sequence[int]] | np.ndarray, num_query: int) -> Pairs:
        """From one list of reference positions per query; ``-1`` entries are padding."""
        if isinstance(lists, np.ndarray) and lists.ndim == 2:
            keep = lists >= 0
            counts = keep.sum(axis=1)
            flat = lists[keep]
        else:
            counts = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
            flat = np.fromiter(
                (v for x in lists for v in x), dtype=np.int64, count=int(counts.sum())
            )
            keep = flat >= 0
            row = np.repeat(np.arange(len(lists)), counts)[keep]
            counts = np.bincount(row, minlength=len(lists))
            flat = flat[keep]
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(torch.from_numpy(indptr), torch.from_numpy(flat.astype(np.int64)), num_query)

    @classmethod
    def union(cls, parts: Sequence[Pairs], num_query: int, num_reference: int) -> Pairs:
        """The union of several pair sets, each pair once, columns ascending within a query."""
        keys = []
        for pairs in parts:
            rows, cols = pairs.expand(0, num_query, torch.device("cpu"))
            keys.append(rows * num_reference + cols)
        key = torch.unique(torch.cat(keys)) if keys else torch.empty(0, dtype=torch.int64)
        rows, cols = key // num_reference, key % num_reference
        indptr = torch.zeros(num_query + 1, dtype=torch.int64)
        indptr[1:] = torch.bincount(rows, minlength=num_query).cumsum(0)
        return cls(indptr, cols, num_query)

    def counts(self) -> torch.Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    def expand(
        self, start: int, stop: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        counts = self.indptr[start + 1 : stop + 1] - self.indptr[start:stop]
        rows = torch.repeat_interleave(torch.arange(stop - start), counts)
        return rows.to(device), self.indices[lo:hi].to(device)


def excluded_scores(
    space: Space, start: int, stop: int, exclusions: Sequence[Pairs]
) -> torch.Tensor:
    """The chunk's scores with every excluded (query, reference) pair set to ``-inf``."""
    block = scores(space, start, stop)
    for pairs in exclusions:
        rows, cols = pairs.expand(start, stop, block.device)
        block[rows, cols] = -torch.inf
    return block


def chunks(num: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` pairs covering ``range(num)`` in steps of ``size``."""
    for start in range(0, num, size):
        yield start, min(start + size, num)


def best_positive(
    block: torch.Tensor, positives: Pairs, start: int, stop: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's best positive: its score and, among positives with that score, lowest index.

    The score is read from ``block`` itself, so that an exact tie with a negative stays exact.
    Rows with no positive left (all excluded, or none) get score ``-inf`` and position ``-1``.
    """
    rows, cols = positives.expand(start, stop, block.device)
    n = stop - start
    values = block[rows, cols]
    best = torch.full((n,), -torch.inf, dtype=block.dtype, device=block.device)
    best.scatter_reduce_(0, rows, values, reduce="amax")
    at_best = (values == best[rows]) & torch.isfinite(values)
    sentinel = block.shape[1]
    position = torch.full((n,), sentinel, dtype=torch.int64, device=block.device)
    position.scatter_reduce_(0, rows[at_best], cols[at_best], reduce="amin")
    position[~torch.isfinite(best)] = -1
    return best, position


def first_hit_ranks(
    space: Space,
    positives: Pairs,
    exclusions: Sequence[Pairs],
    chunk_size: int | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """0-indexed rank of each query's best positive among non-excluded references (-1: none).

    The rank is the number of non-excluded references with a higher score, or an equal score
    and a lower index: counted, never sorted.
    """
    size = chunk_rows(space, chunk_size)
    out = np.empty(space.num_query, dtype=np.int64)
    for start, stop in chunks(space.num_query, size):
        block = excluded_scores(space, start, stop, exclusions)
        best, position = best_positive(block, positives, start, stop)
        ranks = _kernels.count_before(block, best[:, None], position[:, None], backend)
        out[start:stop] = ranks[:, 0].cpu().numpy()
    return out


def slot_ranks(
    space: Space,
    targets: np.ndarray,
    exclusions: Sequence[Pairs],
    chunk_size: int | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """Rank of every target position ``targets[i, t]`` (``-1`` padding gives ``-1``).

    Other targets of the same query count as candidates like any other item.
    """
    size = chunk_rows(space, chunk_size)
    out = np.empty(targets.shape, dtype=np.int64)
    all_targets = torch.from_numpy(targets)
    for start, stop in chunks(space.num_query, size):
        block = excluded_scores(space, start, stop, exclusions)
        t = all_targets[start:stop].to(block.device)
        thresholds = block.gather(1, t.clamp(min=0))
        ranks = _kernels.count_before(block, thresholds, t, backend)
        out[start:stop] = ranks.cpu().numpy()
    return out


def ranked_lists(
    space: Space,
    ks: np.ndarray,
    exclusions: Sequence[Pairs],
    chunk_size: int | None = None,
    backend: str | None = None,
) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Yield ``(start, stop, indices, scores)``: each query's exact top-``ks[i]``, best first.

    Ties rank the lower reference index first; unused slots hold index ``-1``.
    """
    kmax = int(ks.max(initial=0))
    size = chunk_rows(space, chunk_size, per_row_bytes=kmax * 12)
    all_ks = torch.from_numpy(ks.astype(np.int64))
    for start, stop in chunks(space.num_query, size):
        block = excluded_scores(space, start, stop, exclusions)
        index, value = _kernels.topk(block, all_ks[start:stop], backend)
        yield start, stop, index, value
