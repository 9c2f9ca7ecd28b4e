"""The chunked scoring engine shared by every metric of recallkit.

Queries are processed in chunks of rows, references in blocks (one block when the reference is in
memory; several when it is streamed from disk or sharded across processes). Each (chunk, block)
pair is one ``torch.mm``: the full n×m matrix is never built.

Both sides of every GEMM are zero-padded to a multiple of :data:`ROW_BLOCK` rows. The BLAS then
runs the same kernel for every entry, so a score is bit-identical whatever the chunk size, block
split, shard split or thread count (a 1-row or 10-column product takes another code path and
rounds differently; exact ties would then break).

Scores are "higher is better": cosine and dot use the inner product (cosine after L2
normalisation); euclidean uses ``2 q·r - |r|²``, which orders candidates exactly as ``-|q - r|²``
(``|q|²`` is constant along a row).

Every ranking statistic is computed in two steps per query: the threshold item (the best
positive, or a given ground-truth item) with its score and global index, then the count of
candidates that rank above it. Both steps combine across blocks and shards by max/min and sum,
which is what makes streamed and distributed evaluation exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from recallkit import _checks, _kernels

ROW_BLOCK = 64
DEFAULT_MEMORY_BUDGET = 256 * 2**20
MAX_CHUNK_ROWS = 4096
SENTINEL = np.iinfo(np.int64).max


def _pad_rows(x: torch.Tensor) -> torch.Tensor:
    rows = x.shape[0]
    padded = math.ceil(rows / ROW_BLOCK) * ROW_BLOCK
    if padded == rows:
        return x
    return torch.cat([x, x.new_zeros(padded - rows, x.shape[1])])


def resolve_device(device: Any, *tensors: torch.Tensor) -> torch.device:
    """The device the work runs on: ``device`` if given, else the first input's device."""
    if device is not None:
        return torch.device(device)
    return tensors[0].device


def score_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64; everything else is scored in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def prepare_rows(
    x: torch.Tensor,
    name: str,
    func: str,
    metric: str,
    device: torch.device,
    dtype: torch.dtype,
    offset: int = 0,
) -> torch.Tensor:
    """Validate and prepare embedding rows: upcast, reject non-finite, L2-normalise for cosine."""
    x = x.to(device=device, dtype=dtype)
    _checks.check_finite_rows(x, offset, name, func)
    if metric == "cosine":
        norms = torch.linalg.vector_norm(x, dim=1)
        _checks.check_zero_rows(norms, offset, name, func)
        x = x / norms[:, None]
    return x


@dataclass
class Block:
    """Prepared reference rows ``offset..offset+rows`` (zero-padded), or at ``global_index``."""

    offset: int
    rows: int
    data: torch.Tensor
    sq_norms: torch.Tensor | None
    global_index: torch.Tensor | None = None

    def globals_of(self, local: torch.Tensor) -> torch.Tensor:
        """Global reference indices of local columns."""
        if self.global_index is None:
            return local + self.offset
        return self.global_index[local]

    def locals_of(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Local positions of global indices ``cols`` and the mask of those in this block."""
        if self.global_index is None:
            inside = (cols >= self.offset) & (cols < self.offset + self.rows)
            return cols - self.offset, inside
        pos = torch.searchsorted(self.global_index, cols)
        found = pos < self.rows
        inside = found & (self.global_index[pos.clamp(max=max(self.rows - 1, 0))] == cols)
        return pos, inside

    def count_below(self, global_positions: torch.Tensor) -> torch.Tensor:
        """How many of this block's items have a global index below each given index."""
        if self.global_index is None:
            return (global_positions - self.offset).clamp(0, self.rows)
        return torch.searchsorted(self.global_index, global_positions)


def make_block(
    x: torch.Tensor,
    offset: int,
    func: str,
    metric: str,
    device: torch.device,
    dtype: torch.dtype,
    name: str = "reference",
    global_index: torch.Tensor | None = None,
    precision: str = "float32",
) -> Block:
    rows = x.shape[0]
    data = _pad_rows(prepare_rows(x, name, func, metric, device, dtype, offset))
    data = lower_precision(data, precision)
    sq = (data.to(dtype) ** 2).sum(dim=1) if metric == "euclidean" else None
    return Block(offset, rows, data.contiguous(), sq, global_index)


@dataclass
class Space:
    """Prepared queries and a reference: in memory (one block) or streamed block by block."""

    query: torch.Tensor
    metric: str
    num_reference: int
    dim: int
    device: torch.device
    dtype: torch.dtype
    block_source: Callable[[], Iterator[Block]]
    single: Block | None = None
    block_rows: int = 0
    precision: str = "float32"
    extra: dict = field(default_factory=dict)

    @property
    def num_query(self) -> int:
        return self.query.shape[0]

    def blocks(self) -> Iterator[Block]:
        if self.single is not None:
            yield self.single
        else:
            yield from self.block_source()


def _is_streamed(x: Any) -> bool:
    return isinstance(x, np.memmap) or getattr(x, "is_streamed_embeddings", False)


def prepare(
    query: Any,
    reference: Any,
    metric: str,
    device: Any,
    func: str,
    reference_block_rows: int | None = None,
    precision: str = "float32",
) -> Space:
    """Validate and prepare embeddings; float16/bfloat16 inputs are upcast to float32.

    A memory-mapped numpy reference (``np.load(path, mmap_mode="r")``) or a
    :class:`recallkit.io.EmbeddingFile` is streamed in blocks, never loaded whole.
    ``precision="float16"``/``"bfloat16"`` rounds both sides to that type before the product
    (float32 accumulation): faster on GPUs, and it can reorder near-ties.
    """
    _checks.check_metric(metric, func)
    if precision not in PRECISIONS:
        raise _checks.fail(func, "precision", f"one of {tuple(PRECISIONS)}", repr(precision))
    q = _checks.as_embeddings(query, "query", func)
    streamed = _is_streamed(reference) or reference_block_rows is not None
    if streamed:
        shape = tuple(reference.shape)
        if len(shape) != 2 or shape[0] == 0:
            raise _checks.fail(func, "reference", "a non-empty 2-D array", f"shape {shape}")
        m, d = shape
    else:
        r = _checks.as_embeddings(reference, "reference", func)
        m, d = r.shape
    if q.shape[1] != d:
        raise _checks.fail(
            func, "reference", f"of the query's dimension {q.shape[1]}", f"dimension {d}"
        )
    dev = resolve_device(device, q)
    if streamed:
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    else:
        dtype = torch.float64 if torch.float64 in (q.dtype, r.dtype) else torch.float32
    qp = prepare_rows(q, "query", func, metric, dev, dtype).contiguous()
    if not streamed:
        block = make_block(r, 0, func, metric, dev, dtype, precision=precision)
        return Space(
            qp, metric, m, d, dev, dtype, lambda: iter(()), single=block, precision=precision
        )
    rows = reference_block_rows or _streamed_block_rows(m, d, q.shape[0])
    rows = max(ROW_BLOCK, rows // ROW_BLOCK * ROW_BLOCK)

    def source() -> Iterator[Block]:
        for start in range(0, m, rows):
            stop = min(start + rows, m)
            raw = torch.from_numpy(np.array(reference[start:stop]))  # a writable copy
            yield make_block(raw, start, func, metric, dev, dtype, precision=precision)

    return Space(qp, metric, m, d, dev, dtype, source, block_rows=rows, precision=precision)


def _streamed_block_rows(m: int, d: int, n: int) -> int:
    per_row = d * 4 * 2 + min(n, MAX_CHUNK_ROWS) * 6
    return int(min(m, max(ROW_BLOCK, DEFAULT_MEMORY_BUDGET // per_row)))


def chunk_rows(space: Space, chunk_size: int | None, per_row_bytes: int = 0) -> int:
    """Rows per query chunk: ``chunk_size`` if given, else sized from the memory budget."""
    if chunk_size is not None:
        return chunk_size
    columns = space.single.rows if space.single is not None else space.block_rows
    element = 8 if space.dtype == torch.float64 else 4
    per_row = columns * (element + 2) + per_row_bytes
    budget = space.extra.get("memory_budget", DEFAULT_MEMORY_BUDGET)
    if space.device.type == "cuda":
        # On a GPU the chunk is sized from the free device memory (a quarter of it).
        budget = max(budget, torch.cuda.mem_get_info(space.device)[0] // 4)
    rows = budget // max(per_row, 1)
    return int(max(ROW_BLOCK, min(MAX_CHUNK_ROWS, rows // ROW_BLOCK * ROW_BLOCK)))


PRECISIONS = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}


def lower_precision(x: torch.Tensor, precision: str) -> torch.Tensor:
    """Round prepared rows to the scoring precision (CUDA keeps them in it; CPU rounds only)."""
    low = PRECISIONS[precision]
    if low is None or x.dtype == torch.float64:
        return x
    rounded = x.to(low)
    return rounded if x.device.type == "cuda" else rounded.to(x.dtype)


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.dtype in (torch.float16, torch.bfloat16):
        # CUDA: low-precision inputs, float32 accumulation and output.
        return torch.mm(a, b.T, out_dtype=torch.float32)
    return a @ b.T


def block_scores(space: Space, padded_chunk: torch.Tensor, rows: int, block: Block) -> torch.Tensor:
    """Scores of a padded query chunk against one block, ``(rows, padded width)``, contiguous.

    Only the first ``block.rows`` columns are reference items; the rest is GEMM padding.
    """
    out = _matmul(lower_precision(padded_chunk, space.precision), block.data)
    if space.metric == "euclidean":
        out.mul_(2).sub_(block.sq_norms)
    return out[:rows]


class Pairs:
    """Per-query sets of global reference indices (positives, or candidates to exclude), as CSR.

    ``expand(start, stop)`` returns flat ``(rows, cols)`` tensors for queries ``start:stop``, with
    rows local to the chunk and ``cols`` ascending within a row.
    """

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, num_query: int) -> None:
        self.indptr = indptr
        self.indices = indices
        self.num_query = num_query

    @classmethod
    def by_code(cls, query_codes: np.ndarray, reference_codes: np.ndarray) -> Pairs:
        """Pair each query with every reference item of the same value (label or id)."""
        order = np.argsort(reference_codes, kind="stable")
        ordered = reference_codes[order]
        lo = np.searchsorted(ordered, query_codes, side="left")
        hi = np.searchsorted(ordered, query_codes, side="right")
        q_counts = hi - lo
        indptr = np.concatenate([[0], np.cumsum(q_counts)]).astype(np.int64)
        # Positions of each query's group inside ``order``: a vectorised concatenation of ranges.
        offsets = np.repeat(lo - indptr[:-1], q_counts)
        flat = np.arange(indptr[-1], dtype=np.int64) + offsets
        return cls(
            torch.from_numpy(indptr),
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


def chunks(num: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` pairs covering ``range(num)`` in steps of ``size``."""
    for start in range(0, num, size):
        yield start, min(start + size, num)


@dataclass
class ChunkPairs:
    """A chunk's expanded pairs, reused for every block."""

    rows: torch.Tensor
    cols: torch.Tensor

    @classmethod
    def of(cls, pairs: Pairs | None, start: int, stop: int, device: torch.device) -> ChunkPairs:
        if pairs is None:
            empty = torch.empty(0, dtype=torch.int64, device=device)
            return cls(empty, empty)
        return cls(*pairs.expand(start, stop, device))

    def in_block(self, block: Block) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rows, local cols, global cols)`` of the pairs that fall in ``block``."""
        local, inside = block.locals_of(self.cols)
        return self.rows[inside], local[inside], self.cols[inside]


def _masked(scores: torch.Tensor, excluded: ChunkPairs, block: Block) -> torch.Tensor:
    rows, local, _ = excluded.in_block(block)
    if rows.numel():
        scores[rows, local] = -torch.inf
    return scores


def _merge_best(
    best: torch.Tensor, where: torch.Tensor, score: torch.Tensor, index: torch.Tensor
) -> None:
    """In place: keep the better of (best, where) and (score, index): higher score, lower index."""
    better = (score > best) | ((score == best) & (index < where))
    best[better] = score[better]
    where[better] = index[better]


def _best_in_block(
    scores: torch.Tensor, positives: ChunkPairs, block: Block, rows_in_chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's best positive in this block: score (from ``scores``) and global index."""
    rows, local, glob = positives.in_block(block)
    best = torch.full((rows_in_chunk,), -torch.inf, dtype=scores.dtype, device=scores.device)
    where = torch.full((rows_in_chunk,), SENTINEL, dtype=torch.int64, device=scores.device)
    if rows.numel() == 0:
        return best, where
    values = scores[rows, local]
    best.scatter_reduce_(0, rows, values, reduce="amax")
    at_best = (values == best[rows]) & torch.isfinite(values)
    where.scatter_reduce_(0, rows[at_best], glob[at_best], reduce="amin")
    return best, where


def _slot_scores(
    scores: torch.Tensor, targets: torch.Tensor, block: Block
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of ``targets`` (global, ``(c, g)``, -1 padding) found in this block; else -inf."""
    local, inside = block.locals_of(targets.clamp(min=0))
    inside &= targets >= 0
    value = torch.full(targets.shape, -torch.inf, dtype=scores.dtype, device=scores.device)
    r, t = inside.nonzero(as_tuple=True)
    value[r, t] = scores[r, local[r, t]]
    return value, inside


Reducer = Callable[[str, torch.Tensor], torch.Tensor]


def _no_reduce(op: str, x: torch.Tensor) -> torch.Tensor:
    return x


def threshold_ranks(
    space: Space,
    chunk: torch.Tensor,
    start: int,
    stop: int,
    exclusions: Pairs | None,
    positives: Pairs | None = None,
    targets: torch.Tensor | None = None,
    reduce: Reducer = _no_reduce,
    backend: str | None = None,
) -> torch.Tensor:
    """Ranks of threshold items for the query chunk ``chunk`` (global rows ``start:stop``).

    With ``positives``: one slot per query, the best positive (``-1`` when there is none).
    With ``targets`` (``(c, g)`` global indices, ``-1`` padding): one slot per target.
    ``reduce(op, tensor)`` combines partial results across processes (``"max"``, ``"min"``,
    ``"sum"``); identity in one process.
    """
    rows = stop - start
    dev = space.device
    padded = _pad_rows(chunk)
    excluded = ChunkPairs.of(exclusions, start, stop, dev)
    blocks = [space.single] if space.single is not None else None
    cached: list[torch.Tensor] = []
    # Step 1: the threshold item of each slot (score, global index), across blocks.
    if positives is not None:
        pos = ChunkPairs.of(positives, start, stop, dev)
        best = torch.full((rows, 1), -torch.inf, dtype=space.dtype, device=dev)
        where = torch.full((rows, 1), SENTINEL, dtype=torch.int64, device=dev)
    else:
        best = torch.full(targets.shape, -torch.inf, dtype=space.dtype, device=dev)
        where = torch.where(targets >= 0, targets, torch.full_like(targets, SENTINEL))
    for block in blocks or space.blocks():
        scores = _masked(block_scores(space, padded, rows, block), excluded, block)
        if positives is not None:
            b, w = _best_in_block(scores, pos, block, rows)
            _merge_best(best[:, 0], where[:, 0], b, w)
        else:
            value, inside = _slot_scores(scores, targets, block)
            best[inside] = value[inside]
        if blocks is not None:
            cached.append(scores)
    local_best, best = best, reduce("max", best)
    if positives is not None:
        # Among processes holding a positive with the global best score, the lowest index wins.
        keep = (local_best == best) & torch.isfinite(best)
        where = reduce("min", torch.where(keep, where, torch.full_like(where, SENTINEL)))
    # Step 2: count the candidates ranked above each threshold item, across blocks.
    total = torch.zeros(best.shape, dtype=torch.int64, device=dev)
    for i, block in enumerate(blocks or space.blocks()):
        scores = (
            cached[i]
            if blocks is not None
            else _masked(block_scores(space, padded, rows, block), excluded, block)
        )
        positions = block.count_below(where.clamp(max=SENTINEL - 1))
        positions = torch.where(torch.isfinite(best), positions, torch.full_like(positions, -1))
        counts = _kernels.count_before(
            scores, best.to(scores.dtype), positions, backend, cols=block.rows
        )
        total += counts.clamp(min=0).to(dev)
    total = reduce("sum", total)
    return torch.where(torch.isfinite(best), total, torch.full_like(total, -1))


def first_hit_ranks(
    space: Space,
    positives: Pairs,
    exclusions: Pairs | None,
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
        ranks = threshold_ranks(
            space,
            space.query[start:stop],
            start,
            stop,
            exclusions,
            positives=positives,
            backend=backend,
        )
        out[start:stop] = ranks[:, 0].cpu().numpy()
    return out


def slot_ranks(
    space: Space,
    targets: np.ndarray,
    exclusions: Pairs | None,
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
        t = all_targets[start:stop].to(space.device)
        ranks = threshold_ranks(
            space, space.query[start:stop], start, stop, exclusions, targets=t, backend=backend
        )
        out[start:stop] = torch.where(t >= 0, ranks, torch.full_like(ranks, -1)).cpu().numpy()
    return out


def merge_ranked(
    index_a: torch.Tensor,
    score_a: torch.Tensor,
    index_b: torch.Tensor,
    score_b: torch.Tensor,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``k`` of two ranked lists per row (global indices, -1 padding), tie rule kept."""
    index = torch.cat([index_a, index_b], dim=1)
    score = torch.cat([score_a, score_b], dim=1)
    score = torch.where(index >= 0, score, torch.full_like(score, -torch.inf))
    key = torch.where(index >= 0, index, torch.full_like(index, SENTINEL))
    order = torch.sort(key, dim=1, stable=True).indices
    index, score = index.gather(1, order), score.gather(1, order)
    order = torch.sort(-score, dim=1, stable=True).indices[:, :k]
    return index.gather(1, order), score.gather(1, order)


def ranked_chunk(
    space: Space,
    chunk: torch.Tensor,
    start: int,
    stop: int,
    ks: torch.Tensor,
    exclusions: Pairs | None,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``ks[i]`` global indices and scores of a query chunk, across blocks."""
    rows = stop - start
    kmax = int(ks.max()) if rows else 0
    padded = _pad_rows(chunk)
    excluded = ChunkPairs.of(exclusions, start, stop, space.device)
    index = torch.full((rows, kmax), -1, dtype=torch.int64, device=space.device)
    value = torch.full((rows, kmax), -torch.inf, dtype=space.dtype, device=space.device)
    for block in space.blocks():
        scores = _masked(block_scores(space, padded, rows, block), excluded, block)
        local, val = _kernels.topk(scores, ks.clamp(max=block.rows), backend, cols=block.rows)
        local, val = local.to(space.device), val.to(space.device)
        glob = torch.where(local >= 0, block.globals_of(local.clamp(min=0)), local)
        if space.single is not None:
            width = glob.shape[1]
            index[:, :width], value[:, :width] = glob, val.to(space.dtype)
        else:
            index, value = merge_ranked(index, value, glob, val.to(space.dtype), kmax)
    if space.single is None:
        beyond = torch.arange(kmax, device=space.device)[None, :] >= ks.to(space.device)[:, None]
        index[beyond], value[beyond] = -1, -torch.inf
    return index, value


def ranked_lists(
    space: Space,
    ks: np.ndarray,
    exclusions: Pairs | None,
    chunk_size: int | None = None,
    backend: str | None = None,
) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Yield ``(start, stop, indices, scores)``: each query's exact top-``ks[i]``, best first.

    Ties rank the lower reference index first; unused slots hold index ``-1``.
    """
    kmax = int(ks.max(initial=0))
    size = chunk_rows(space, chunk_size, per_row_bytes=kmax * 24)
    all_ks = torch.from_numpy(ks.astype(np.int64))
    for start, stop in chunks(space.num_query, size):
        index, value = ranked_chunk(
            space, space.query[start:stop], start, stop, all_ks[start:stop], exclusions, backend
        )
        yield start, stop, index, value
