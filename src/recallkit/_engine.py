"""The chunked scoring engine shared by every metric of recallkit.

Queries are processed in chunks of rows, references in blocks (one block when the reference is in
memory; several when it is streamed from disk or sharded across processes). Each (chunk, block)
pair is one GEMM: the full n×m matrix is never built.

Scores are "higher is better": cosine and dot use the inner product (cosine after L2
normalisation in float32); euclidean uses ``2 q·r - |r|²``, which orders candidates exactly as
``-|q - r|²`` (``|q|²`` is constant along a row).

Exactness: the GEMM's float32 scores carry rounding that depends on the BLAS, its blocking and
the thread count. They are used only as a filter with a rigorous error bound ``eps``: an item
more than ``eps`` above (below) a threshold is certainly above (below) it, and the few items within
``eps`` are re-scored exactly in float64 (:func:`recallkit._kernels.exact_scores`). The result is
the ranking by those exact scores, ties by lower reference index: the same for every chunk size,
block split, shard split, thread count, BLAS and device.

Every ranking statistic is computed in two steps per query: the threshold item (the best
positive, or a given ground-truth item) with its exact score and global index, then the count of
candidates that rank above it. Both steps combine across blocks and shards by max/min and sum,
which is what makes streamed and distributed evaluation exact.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

from recallkit import _checks, _kernels

DEFAULT_MEMORY_BUDGET = 256 * 2**20
MIN_CHUNK_ROWS = 64
MAX_CHUNK_ROWS = 4096
SENTINEL = np.iinfo(np.int64).max
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def resolve_device(device: Any, *tensors: torch.Tensor) -> torch.device:
    """The device the work runs on: ``device`` if given, else the first input's device."""
    if device is not None:
        return torch.device(device)
    return tensors[0].device


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
    return x.contiguous()


@dataclass
class Block:
    """Prepared reference rows ``offset..offset+rows``, or the rows at ``global_index``.

    ``gemm`` is what the GEMM multiplies (for euclidean, ``[r, |r|²]`` so that one product gives
    ``2 q·r - |r|²``); ``max_norm`` bounds the rows' norms for the error bound.
    """

    offset: int
    rows: int
    data: torch.Tensor
    gemm: torch.Tensor
    max_norm: float
    global_index: torch.Tensor | None = None
    low: torch.Tensor | None = None

    def globals_of(self, local: torch.Tensor) -> torch.Tensor:
        """Global reference indices of local columns."""
        if self.global_index is None:
            return local + self.offset
        return self.global_index.to(local.device)[local]

    def locals_of(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Local positions of global indices ``cols`` and the mask of those in this block."""
        if self.global_index is None:
            inside = (cols >= self.offset) & (cols < self.offset + self.rows)
            return cols - self.offset, inside
        index = self.global_index.to(cols.device)
        pos = torch.searchsorted(index, cols)
        found = pos < self.rows
        inside = found & (index[pos.clamp(max=max(self.rows - 1, 0))] == cols)
        return pos, inside


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
    data = prepare_rows(x, name, func, metric, device, dtype, offset)
    norms = torch.linalg.vector_norm(data, dim=1)
    max_norm = float(norms.max()) if len(norms) else 0.0
    gemm = data
    if metric == "euclidean":
        gemm = torch.cat([data, (data * data).sum(dim=1, keepdim=True)], dim=1).contiguous()
    low = None
    if PRECISIONS[precision] is not None and device.type == "cuda" and dtype == torch.float32:
        low = gemm.to(PRECISIONS[precision])
    return Block(offset, data.shape[0], data, gemm, max_norm, global_index, low)


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


PRECISIONS = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Relative rounding of the GEMM inputs at each precision (TF32 when CUDA allows it).
_INPUT_ROUNDING = {"float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}


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
    ``precision="float16"``/``"bfloat16"`` runs the GEMM filter in that type on CUDA (float32
    accumulation); the exact re-scoring keeps the results identical, only faster.
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
    if not streamed:
        block = make_block(r, 0, func, metric, dev, dtype, precision=precision)
        if query is reference:
            qp = block.data  # leave-one-out on one tensor: prepare it once
        else:
            qp = prepare_rows(q, "query", func, metric, dev, dtype)
        if m * 4 * 256 <= DEFAULT_MEMORY_BUDGET or dev.type == "cuda":
            return Space(
                qp, metric, m, d, dev, dtype, lambda: iter(()), single=block, precision=precision
            )
        # A reference too wide for chunks of 256 query rows within the budget is scored in
        # blocks (views of the prepared tensor): large GEMMs, bounded score buffers.
        rows = _streamed_block_rows(m, d, q.shape[0])

        def views() -> Iterator[Block]:
            for start in range(0, m, rows):
                stop = min(start + rows, m)
                low = None if block.low is None else block.low[start:stop]
                yield Block(
                    start,
                    stop - start,
                    block.data[start:stop],
                    block.gemm[start:stop],
                    block.max_norm,
                    None,
                    low,
                )

        return Space(qp, metric, m, d, dev, dtype, views, block_rows=rows, precision=precision)
    qp = prepare_rows(q, "query", func, metric, dev, dtype)
    rows = reference_block_rows or _streamed_block_rows(m, d, q.shape[0])

    def source() -> Iterator[Block]:
        for start in range(0, m, rows):
            stop = min(start + rows, m)
            raw = torch.from_numpy(np.array(reference[start:stop]))  # a writable copy
            yield make_block(raw, start, func, metric, dev, dtype, precision=precision)

    return Space(qp, metric, m, d, dev, dtype, source, block_rows=rows, precision=precision)


def _streamed_block_rows(m: int, d: int, n: int) -> int:
    per_row = d * 4 * 2 + min(n, MAX_CHUNK_ROWS) * 6
    return int(min(m, max(MIN_CHUNK_ROWS, DEFAULT_MEMORY_BUDGET // per_row)))


def chunk_rows(space: Space, chunk_size: int | None, per_row_bytes: int = 0) -> int:
    """Rows per query chunk: ``chunk_size`` if given, else sized from the memory budget."""
    if chunk_size is not None:
        return chunk_size
    columns = space.single.rows if space.single is not None else space.block_rows
    element = 8 if space.dtype == torch.float64 else 4
    per_row = columns * element + per_row_bytes
    budget = space.extra.get("memory_budget", DEFAULT_MEMORY_BUDGET)
    if space.device.type == "cuda":
        # On a GPU the chunk is sized from the free device memory (a quarter of it).
        budget = max(budget, torch.cuda.mem_get_info(space.device)[0] // 4)
    rows = budget // max(per_row, 1)
    return int(max(MIN_CHUNK_ROWS, min(MAX_CHUNK_ROWS, rows // 64 * 64)))


def _gemm_query(space: Space, chunk: torch.Tensor) -> torch.Tensor:
    if space.metric != "euclidean":
        return chunk
    # [2q, -1] · [r, |r|²] = 2 q·r - |r|²: one GEMM, no extra pass over the scores.
    return torch.cat([2 * chunk, -torch.ones_like(chunk[:, :1])], dim=1)


def block_scores(space: Space, gemm_chunk: torch.Tensor, block: Block) -> torch.Tensor:
    """Float32 filter scores of a query chunk against one block, ``(rows, block.rows)``.

    On the CPU: numpy's BLAS, single-threaded, on row slices run by a thread pool, into a reused
    buffer. This is faster here than one multi-threaded call, and leaves no BLAS threads spinning
    while the numba kernels run next. Its rounding does not matter (module docstring). On CUDA:
    ``torch.mm``.
    """
    rows, cols = gemm_chunk.shape[0], block.rows
    if block.low is not None:
        return torch.mm(gemm_chunk.to(block.low.dtype), block.low.T, out_dtype=torch.float32)
    if gemm_chunk.device.type != "cpu":
        return gemm_chunk @ block.gemm.T
    a = gemm_chunk.numpy()
    size = rows * cols
    buffer = space.extra.get("buffer")
    if buffer is None or buffer.size < size or buffer.dtype != a.dtype:
        buffer = np.empty(size, dtype=a.dtype)
        space.extra["buffer"] = buffer
    out = buffer[:size].reshape(rows, cols)
    b = block.gemm.numpy().T
    workers = max(1, min(torch.get_num_threads(), rows))
    bounds = np.linspace(0, rows, workers + 1).astype(int)
    with _blas_controller().limit(limits=1, user_api="blas"):
        if workers == 1:
            np.matmul(a, b, out=out)
        else:
            jobs = [
                _pool(workers).submit(np.matmul, a[lo:hi], b, out=out[lo:hi])
                for lo, hi in itertools.pairwise(bounds)
                if hi > lo
            ]
            for job in jobs:
                job.result()
    return torch.from_numpy(out)


_POOLS: dict[int, ThreadPoolExecutor] = {}
_CONTROLLER: list[ThreadpoolController] = []


def _blas_controller() -> ThreadpoolController:
    """One controller per process: building it scans the loaded libraries."""
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]


def _pool(workers: int) -> ThreadPoolExecutor:
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="recallkit-gemm")
    return _POOLS[workers]


def error_bound(space: Space, chunk: torch.Tensor, block: Block) -> torch.Tensor:
    """Per query row, a bound on |float filter score - exact score| against this block.

    Standard GEMM error analysis: |fl(q·r) - q·r| <= gamma_d |q| |r| with gamma_d ~ d u; doubled
    for safety, plus the rounding of low-precision (or TF32) inputs.
    """
    unit = 2.0**-53 if space.dtype == torch.float64 else 2.0**-24
    rounding = _INPUT_ROUNDING[space.precision] if block.low is not None else 0.0
    if space.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        rounding = max(rounding, 2.0**-10)
    gamma = 2.0 * ((space.dim + 4) * unit + 2.0 * rounding + 4 * unit)
    q_norm = torch.linalg.vector_norm(chunk.to(torch.float64), dim=1)
    r_norm = block.max_norm
    if space.metric == "euclidean":
        return gamma * (2.0 * q_norm * r_norm + 2.0 * r_norm * r_norm)
    return gamma * q_norm * r_norm


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
    space: Space,
    chunk: torch.Tensor,
    scores: torch.Tensor,
    eps: torch.Tensor,
    positives: ChunkPairs,
    block: Block,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's best positive in this block: exact score and global index (-inf, SENTINEL).

    Only positives within twice the error bound of the best filter score can be the best, so
    only those are scored exactly.
    """
    rows, local, glob = positives.in_block(block)
    rows, local, glob = rows.cpu(), local.cpu(), glob.cpu()
    values = scores[rows.to(scores.device), local.to(scores.device)].cpu().to(torch.float64)
    top = torch.full((chunk.shape[0],), -torch.inf, dtype=torch.float64)
    top.scatter_reduce_(0, rows, values, reduce="amax")
    keep = torch.isfinite(values) & (values >= top[rows] - 2 * eps[rows])
    return _best_exact(space, chunk, ChunkPairs(rows[keep], glob[keep]), block)


def _without(pairs: ChunkPairs, excluded: ChunkPairs) -> ChunkPairs:
    """``pairs`` minus the ``excluded`` (row, column) pairs."""
    if excluded.rows.numel() == 0 or pairs.rows.numel() == 0:
        return pairs
    key = pairs.rows.cpu() * (2**40) + pairs.cols.cpu()
    gone = excluded.rows.cpu() * (2**40) + excluded.cols.cpu()
    keep = ~torch.isin(key, gone)
    return ChunkPairs(
        pairs.rows[keep.to(pairs.rows.device)], pairs.cols[keep.to(pairs.rows.device)]
    )


def _best_exact(
    space: Space, chunk: torch.Tensor, positives: ChunkPairs, block: Block
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's best positive in this block from exact scores of all its positives."""
    rows_in_chunk = chunk.shape[0]
    best = torch.full((rows_in_chunk,), -torch.inf, dtype=torch.float64)
    where = torch.full((rows_in_chunk,), SENTINEL, dtype=torch.int64)
    rows, local, glob = positives.in_block(block)
    if rows.numel() == 0:
        return best, where
    rows, local, glob = rows.cpu(), local.cpu(), glob.cpu()
    exact = _kernels.exact_scores(chunk, block.data, rows, local, space.metric == "euclidean")
    best.scatter_reduce_(0, rows, exact, reduce="amax")
    at_best = exact == best[rows]
    where.scatter_reduce_(0, rows[at_best], glob[at_best], reduce="amin")
    return best, where


def _bounds(
    centre: torch.Tensor, eps: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Filter bounds ``centre -/+ eps`` rounded outwards to ``dtype``; +inf where disabled."""
    lo = (centre - eps).to(dtype)
    hi = (centre + eps).to(dtype)
    lo = torch.nextafter(lo, torch.full_like(lo, -torch.inf))
    hi = torch.nextafter(hi, torch.full_like(hi, torch.inf))
    # Excluded candidates score -inf: a finite lower bound keeps them out of every window.
    lo = lo.clamp(min=torch.finfo(dtype).min)
    off = ~torch.isfinite(centre)
    lo[off], hi[off] = torch.inf, torch.inf
    return lo, hi


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
    ``"sum"``); identity in one process. Returns a ``(c, g)`` int64 CPU tensor.
    """
    rows = stop - start
    euclidean = space.metric == "euclidean"
    gemm_chunk = _gemm_query(space, chunk)
    excluded = ChunkPairs.of(exclusions, start, stop, space.device)
    single = space.single is not None
    cached: list[torch.Tensor] = []
    if positives is not None:
        pos = ChunkPairs.of(positives, start, stop, torch.device("cpu"))
        best = torch.full((rows, 1), -torch.inf, dtype=torch.float64)
        where = torch.full((rows, 1), SENTINEL, dtype=torch.int64)
    else:
        targets = targets.cpu()
        best = torch.full(targets.shape, -torch.inf, dtype=torch.float64)
        where = torch.where(targets >= 0, targets, torch.full_like(targets, SENTINEL))
    # Step 1: each slot's threshold item, its exact score and global index, across blocks.
    if positives is not None and not single:
        # Streamed blocks: score the positives exactly, with no GEMM pass over the block.
        pos = _without(pos, excluded)
    for block in space.blocks():
        if positives is not None and not single:
            b, w = _best_exact(space, chunk, pos, block)
            _merge_best(best[:, 0], where[:, 0], b, w)
            continue
        scores = _masked(block_scores(space, gemm_chunk, block), excluded, block)
        if positives is not None:
            eps = error_bound(space, chunk, block).cpu()
            b, w = _best_in_block(space, chunk, scores, eps, pos, block)
            _merge_best(best[:, 0], where[:, 0], b, w)
        else:
            local, inside = block.locals_of(targets.clamp(min=0))
            inside &= targets >= 0
            r, t = inside.nonzero(as_tuple=True)
            best[r, t] = _kernels.exact_scores(chunk, block.data, r, local[r, t], euclidean)
        if single:
            cached.append(scores)
    local_best, best = best, reduce("max", best)
    if positives is not None:
        # Among processes holding a positive with the global best score, the lowest index wins.
        keep = (local_best == best) & torch.isfinite(best)
        where = reduce("min", torch.where(keep, where, torch.full_like(where, SENTINEL)))
    # Step 2: count the candidates that rank above each threshold item, across blocks.
    total = torch.zeros(best.shape, dtype=torch.int64)
    for i, block in enumerate(space.blocks()):
        if single:
            scores = cached[i]
        else:
            scores = _masked(block_scores(space, gemm_chunk, block), excluded, block)
        eps = error_bound(space, chunk, block).cpu()
        lo, hi = _bounds(best, eps[:, None], scores.dtype)
        above, wr, wt, wj = _kernels.window(
            scores, lo.to(scores.device), hi.to(scores.device), block.rows, backend
        )
        exact = _kernels.exact_scores(chunk, block.data, wr, wj, euclidean)
        glob = block.globals_of(wj.to(space.device)).cpu()
        b, w = best[wr, wt], where[wr, wt]
        beats = (exact > b) | ((exact == b) & (glob < w))
        slot = (wr * best.shape[1] + wt)[beats]
        total += above + torch.bincount(slot, minlength=best.numel()).view(best.shape)
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
        out[start:stop] = ranks[:, 0].numpy()
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
        t = all_targets[start:stop]
        ranks = threshold_ranks(
            space, space.query[start:stop], start, stop, exclusions, targets=t, backend=backend
        )
        out[start:stop] = torch.where(t >= 0, ranks, torch.full_like(ranks, -1)).numpy()
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
    """Exact top-``ks[i]`` global indices and exact scores of a query chunk, across blocks.

    Returns CPU tensors ``(c, max(ks))``: indices (``-1`` padding) and float64 scores.
    """
    rows = stop - start
    ks = ks.cpu()
    kmax = int(ks.max()) if rows else 0
    euclidean = space.metric == "euclidean"
    gemm_chunk = _gemm_query(space, chunk)
    excluded = ChunkPairs.of(exclusions, start, stop, space.device)
    index = torch.full((rows, kmax), -1, dtype=torch.int64)
    value = torch.full((rows, kmax), -torch.inf, dtype=torch.float64)
    for block in space.blocks():
        scores = _masked(block_scores(space, gemm_chunk, block), excluded, block)
        eps = error_bound(space, chunk, block).cpu()
        kb = ks.clamp(max=block.rows)
        kth = _kernels.kth_largest(scores, kb, block.rows, backend).to(torch.float64)
        # Every item of the exact top-k scores at least the k-th filter score minus 2 eps.
        lo = kth - 2 * eps
        lo = torch.where(torch.isneginf(kth), torch.full_like(lo, -_FLOAT32_MAX), lo)
        lo, _ = _bounds(lo[:, None], torch.zeros_like(eps)[:, None], scores.dtype)
        lo[kb[:, None] <= 0] = torch.inf
        hi = torch.full_like(lo, torch.inf)
        _, wr, _, wj = _kernels.window(
            scores,
            lo.to(scores.device),
            hi.to(scores.device),
            block.rows,
            backend,
            cap=kmax + _kernels.WINDOW_CAP,
        )
        exact = _kernels.exact_scores(chunk, block.data, wr, wj, euclidean)
        glob = block.globals_of(wj.to(space.device)).cpu()
        new_index, new_value = _kernels.segment_top(wr, glob, exact, ks, kmax)
        if space.single is not None:
            index, value = new_index, new_value
        else:
            index, value = merge_ranked(index, value, new_index, new_value, kmax)
    beyond = torch.arange(kmax)[None, :] >= ks[:, None]
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
    size = chunk_rows(space, chunk_size, per_row_bytes=kmax * 40)
    all_ks = torch.from_numpy(ks.astype(np.int64))
    for start, stop in chunks(space.num_query, size):
        index, value = ranked_chunk(
            space, space.query[start:stop], start, stop, all_ks[start:stop], exclusions, backend
        )
        yield start, stop, index, value
