"""The CPU back end: filter scores produced tile by tile and consumed while in cache.

A chunk's filter scores against a block are computed as ``TILE × TILE`` tiles, each a
single-threaded BLAS GEMM into a worker's own buffer (4 MiB of float32: within the L2 or the
nearby L3 of current x86 servers; numpy's BLAS or torch's, whichever the first tiles of the
process find faster), with the skipped pairs set to ``-inf``; the numba kernels of
:mod:`recallkit.engine.cpu_kernels` consume the tile at once. The score matrix is never written
to memory, which is what a GEMM of small inner dimension (d = 128) spends most of its time on.
One pass over the tiles feeds every consumer a request needs: the window counts of the
thresholds and the running top-k of the ranked lists read the same tiles.

Symmetric problems (leave-one-out on one tensor, cosine or dot, exclusions symmetric) compute
each off-diagonal tile once and read it twice, as rows and transposed: half the GEMM. The
filter's error bound does not depend on which side a rounding came from, so the results are
the same.

Thresholds come first, from the positives alone where they are few (fine labels: each query's
best positive from its positives' filter scores, before any pass), else from the chunk's scores
kept in memory (coarse labels), which the pass then reads instead of computing the GEMM again.

Worker threads take tiles from a shared list and keep their own per-row state, merged at the
end: counts add, window items concatenate, running top-k lists keep the k best of all. BLAS and
torch run single-threaded inside the workers; the limit is taken once for all the calls that
run at the same time in a process and restored when the last one ends.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np
import torch

from recallkit.engine import cpu_kernels as kernels
from recallkit.engine import exact, filters, ties
from recallkit.engine.pairs import ChunkExclusions, LabelPositives, Pairs, globals_of, locals_of
from recallkit.engine.protocol import ChunkResult, Reducer, Request
from recallkit.engine.space import (
    DEFAULT_MEMORY_BUDGET,
    Block,
    Rows,
    Space,
    chunk_rows,
    chunks,
)

TILE = 1024
EXTRA = 64  # a top-k buffer holds 2 k + EXTRA items
# Up to this k, a top-k pass keeps a heap per row (its floor follows every new k-th best);
# beyond, a reservoir (compacted at its k-th best when full: fewer operations per item).
HEAP_K = 32
SAMPLES = 3  # full tiles timed with each BLAS before the choice


def top_state_bytes(kmax: int) -> int:
    """Bytes per query row of one worker's top-k state."""
    return 4 * kmax + 12 * (2 * kmax + EXTRA) + 32


def window_state_bytes(slots: int) -> int:
    """Bytes per query row of one worker's window state."""
    return 8 * slots * (2 + kernels.WINDOW_CAP)


def state_bytes(request: Request) -> int:
    """Bytes per query row of the tile pass's state, all workers together, and of the lists
    a chunk holds."""
    per_worker = window_state_bytes(request.slots()) if request.thresholds else 0
    listed = 0
    if request.lists:
        kmax = int(request.top_k.max(initial=0))
        per_worker += top_state_bytes(kmax)
        listed = kmax * 40
    return per_worker * max(1, torch.get_num_threads()) + listed


# ----------------------------------------------------------------------------------------------
# Threads: single-threaded BLAS and torch inside the workers, one limit for concurrent calls.

_POOLS: dict[int, ThreadPoolExecutor] = {}
_CONTROLLER: list[Any] = []
_LIMIT_LOCK = threading.Lock()
_CONTROLLER_LOCK = threading.Lock()
_LIMIT_STATE: dict[str, Any] = {"users": 0, "keeper": None}


def _blas_controller() -> Any:
    """One ``threadpoolctl`` controller per process (building it scans the loaded libraries)."""
    with _CONTROLLER_LOCK:
        if not _CONTROLLER:
            from threadpoolctl import ThreadpoolController

            _CONTROLLER.append(ThreadpoolController())
        return _CONTROLLER[0]


class _BlasLimit:
    """The process-wide BLAS limit of one thread, held by a thread of its own.

    OpenBLAS with pthreads has one thread pool per process, and threadpoolctl lets one thread
    at a time change it: the first to set a limit, until that thread's limit block ends. So the
    limit is taken and given back inside one ``with`` block of one thread, whichever calls
    start and end it."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.release = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._hold, name="recallkit-blas-limit")
        self.thread.start()
        self.held.wait()
        if self.error is not None:
            self.thread.join()
            raise self.error

    def _hold(self) -> None:
        try:
            with _blas_controller().limit(limits=1, user_api="blas"):
                self.held.set()
                self.release.wait()
        except BaseException as error:  # reported in the thread that took the limit
            self.error = error
            self.held.set()

    def restore(self) -> None:
        """Give the limit back (the original settings are restored when this returns)."""
        self.release.set()
        self.thread.join()


@contextlib.contextmanager
def single_threaded() -> Iterator[int]:
    """BLAS limited to one thread while any call of the process runs its tiles; yields the
    calling thread's torch thread count (the number of workers to use).

    The BLAS limit is process-wide (OpenBLAS's thread pool is the process's): the first call in
    takes it, the last one out gives it back (:class:`_BlasLimit`). torch's and OpenMP's thread
    counts are per thread: the workers set their own (:func:`_one_thread_worker`) and no
    calling thread's is touched, nor torch's default for new threads. Calls from several
    Python threads, in any order of entry and exit, leave every setting as they found it."""
    with _LIMIT_LOCK:
        if _LIMIT_STATE["users"] == 0:
            _LIMIT_STATE["keeper"] = _BlasLimit()
        _LIMIT_STATE["users"] += 1
    try:
        yield torch.get_num_threads()
    finally:
        with _LIMIT_LOCK:
            _LIMIT_STATE["users"] -= 1
            if _LIMIT_STATE["users"] == 0:
                _LIMIT_STATE["keeper"].restore()
                _LIMIT_STATE["keeper"] = None


def _one_thread_worker() -> None:
    """A tile worker's start: its own OpenMP thread count (torch's intra-op threads) set to one.

    torch sets a thread's OpenMP count when the thread first uses it, so it is used first; the
    count is the worker's own, and torch's default for other threads is left as it is."""
    torch.get_num_threads()
    _blas_controller().limit(limits=1, user_api="openmp")


def _threads() -> int:
    """The calling thread's torch thread count: the number of workers."""
    return torch.get_num_threads()


def _pool(workers: int) -> ThreadPoolExecutor:
    with _LIMIT_LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = ThreadPoolExecutor(
                workers, thread_name_prefix="recallkit-tiles", initializer=_one_thread_worker
            )
        return _POOLS[workers]


# ----------------------------------------------------------------------------------------------
# Tile GEMMs: the faster of numpy's and torch's single-threaded BLAS, chosen as tiles run.


def _numpy_product(a: torch.Tensor, b: torch.Tensor, out: np.ndarray) -> None:
    np.matmul(a.numpy(), b.numpy().T, out=out)


def _torch_product(a: torch.Tensor, b: torch.Tensor, out: np.ndarray) -> None:
    torch.mm(a, b.T, out=torch.from_numpy(out))


PRODUCTS = {"numpy": _numpy_product, "torch": _torch_product}


class _Choice:
    """Which BLAS computes the tiles of one type and inner dimension: numpy's and torch's take
    turns on the first full tiles of the process, timed as they run; then the faster one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = {name: [] for name in PRODUCTS}
        self.chosen: str | None = None

    def pick(self) -> str:
        if self.chosen is not None:
            return self.chosen
        with self.lock:
            return min(self.times, key=lambda name: len(self.times[name]))

    def record(self, name: str, seconds: float) -> None:
        with self.lock:
            self.times[name].append(seconds)
            if all(len(t) >= SAMPLES for t in self.times.values()):
                self.chosen = min(self.times, key=lambda name: min(self.times[name]))


_CHOICES: dict[tuple[torch.dtype, int], _Choice] = {}


def _choice(dtype: torch.dtype, width: int) -> _Choice:
    return _CHOICES.setdefault((dtype, width), _Choice())


def choose_product(dtype: torch.dtype, width: int) -> str:
    """The BLAS for the next tile of this type and inner dimension (:class:`_Choice`): they
    differ by machine (OpenBLAS is the faster on some AMD servers, MKL on Intel). torch's is a
    candidate only while its float32 matmuls are IEEE (``torch.set_float32_matmul_precision``
    ``"highest"``): otherwise oneDNN may multiply in bfloat16, beyond the float32 bound."""
    if dtype == torch.float32 and filters.float32_matmul_rounding(torch.device("cpu")) != 0.0:
        return "numpy"
    return _choice(dtype, width).pick()


def tile_scores(
    qf: filters.QueryFilter, block: Block, row0: int, col0: int, out: np.ndarray
) -> None:
    """Filter scores of chunk rows ``row0:`` against block rows ``col0:`` into the tile ``out``
    (single-threaded BLAS, :func:`choose_product`; its rounding does not matter)."""
    rows, cols = out.shape
    dtype, width = qf.rows.dtype, qf.rows.shape[1]
    name = choose_product(dtype, width)
    start = time.perf_counter()
    PRODUCTS[name](qf.rows[row0 : row0 + rows], block.gemm[col0 : col0 + cols], out)
    if rows == cols == TILE:
        _choice(dtype, width).record(name, time.perf_counter() - start)


def block_scores(space: Space, qf: filters.QueryFilter, block: Block) -> torch.Tensor:
    """Filter scores of a query chunk against one whole block, ``(rows, block.rows)``: numpy's
    BLAS, single-threaded, on row slices run by the worker threads, into a buffer reused across
    chunks."""
    a = qf.rows.numpy()
    rows, cols = a.shape[0], block.rows
    size = rows * cols
    buffer = space.extra.get("buffer")
    if buffer is None or buffer.size < size or buffer.dtype != a.dtype:
        buffer = np.empty(size, dtype=a.dtype)
        space.extra["buffer"] = buffer
    out = buffer[:size].reshape(rows, cols)
    b = block.gemm.numpy().T
    with single_threaded() as threads:
        workers = max(1, min(threads, rows))
        bounds = np.linspace(0, rows, workers + 1).astype(int)
        jobs = [
            _pool(workers).submit(np.matmul, a[lo:hi], b, out=out[lo:hi])
            for lo, hi in itertools.pairwise(bounds)
            if hi > lo
        ]
        wait(jobs)  # every worker done before the limit is given back, even on an error
        for job in jobs:
            job.result()
    return torch.from_numpy(out)


def _masked(scores: torch.Tensor, excluded: ChunkExclusions, block: Block, rows=None) -> None:
    """Set the skipped pairs of ``scores`` (chunk rows ``rows``, default all) to ``-inf``."""
    r, local, _ = excluded.in_block(block)
    if rows is None:
        if r.numel():
            scores[r, local] = -torch.inf
    else:
        position = np.full(excluded.rows_in_chunk, -1, dtype=np.int64)
        position[rows] = np.arange(len(rows))
        where = torch.from_numpy(position)[r]
        keep = where >= 0
        scores[where[keep], local[keep]] = -torch.inf
    codes = excluded.codes(block)
    if codes is not None:
        q = torch.from_numpy(codes[0] if rows is None else codes[0][rows])
        ref = torch.from_numpy(codes[1])
        scores.masked_fill_((q[:, None] >= 0) & (q[:, None] == ref[None, :]), -torch.inf)


# ----------------------------------------------------------------------------------------------
# The tile pass and its consumers.


class _Consumer:
    """What a tile pass feeds: each worker's state, and the tile kernels that update it."""

    symmetric_ok = True

    def state(self) -> Any:
        raise NotImplementedError

    def rows(self, state: Any, tile: np.ndarray, row0: int, col0: int) -> None:
        raise NotImplementedError

    def cols(self, state: Any, tile: np.ndarray, row0: int, col0: int) -> None:
        raise NotImplementedError


def run_tiles(
    qf: filters.QueryFilter,
    block: Block,
    excluded: ChunkExclusions,
    symmetric: bool,
    consumers: Sequence[_Consumer],
    cached: torch.Tensor | None = None,
    product: Any = None,
) -> list[list[Any]]:
    """One pass over the chunk's filter scores against ``block``, tile by tile; returns each
    worker's states (one per consumer). ``cached``: the chunk's scores already computed (skipped
    pairs at ``-inf``), read instead of computing the tiles; ``product(row0, col0, out)``
    computes a tile another way (a low-precision filter) instead of :func:`tile_scores`."""
    rows, cols = qf.rows.shape[0], block.rows
    tasks = [
        (r0, c0)
        for r0 in range(0, rows, TILE)
        for c0 in range(0, cols, TILE)
        if not symmetric or c0 >= r0
    ]
    ptr, excluded_cols = excluded.csr(block)
    code_lo, code_hi, members = excluded.code_ranges(block)
    has_codes = excluded.query_codes is not None
    dtype = qf.rows.numpy().dtype
    source = None if cached is None else cached.numpy()
    lock = threading.Lock()
    queue = iter(tasks)
    stopped = threading.Event()  # a worker failed: the others take no further tile

    def work() -> list[Any]:
        try:
            return tiles()
        except BaseException:
            stopped.set()
            raise

    def tiles() -> list[Any]:
        mine = [c.state() for c in consumers]
        buffer = np.empty(TILE * TILE, dtype=dtype) if source is None else None
        while True:
            with lock:
                task = None if stopped.is_set() else next(queue, None)
            if task is None:
                return mine
            r0, c0 = task
            shape = (min(TILE, rows - r0), min(TILE, cols - c0))
            if source is None:
                tile = buffer[: shape[0] * shape[1]].reshape(shape)
                if product is None:
                    tile_scores(qf, block, r0, c0, tile)
                else:
                    product(r0, c0, tile)
                kernels.mask_tile(tile, r0, c0, ptr, excluded_cols)
                if has_codes:
                    kernels.mask_ranges(tile, r0, c0, code_lo, code_hi, members)
            else:
                tile = source[r0 : r0 + shape[0], c0 : c0 + shape[1]]
            for consumer, state in zip(consumers, mine, strict=True):
                consumer.rows(state, tile, r0, c0)
                if symmetric and c0 != r0:
                    consumer.cols(state, tile, r0, c0)

    with single_threaded() as threads:
        workers = max(1, min(threads, len(tasks)))
        jobs = [_pool(workers).submit(work) for _ in range(workers)]
        wait(jobs)  # every worker done before the limit is given back, even on an error
        return [job.result() for job in jobs]


def _row_scores(
    space: Space, qf: filters.QueryFilter, block: Block, excluded: ChunkExclusions, rows
) -> torch.Tensor:
    """Filter scores of some chunk rows against ``block`` (skipped pairs ``-inf``), for the
    rare rows whose tiled pass overflowed."""
    scores = block_scores(space, qf[torch.from_numpy(rows)], block).clone()
    _masked(scores, excluded, block, rows)
    return scores


class Window(_Consumer):
    """Counts above ``hi`` and the items within ``[lo, hi]`` of each row and slot."""

    def __init__(self, lo: torch.Tensor, hi: torch.Tensor, dtype: np.dtype) -> None:
        self.lo = np.ascontiguousarray(lo.numpy().astype(dtype))
        self.hi = np.ascontiguousarray(hi.numpy().astype(dtype))
        self.lo_t, self.hi_t = lo, hi
        self.cap = kernels.WINDOW_CAP
        self.symmetric_ok = self.lo.shape[1] == 1

    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c, g = self.lo.shape
        return (
            np.zeros((c, g), dtype=np.int64),
            np.zeros((c, g), dtype=np.int64),
            np.empty((c, g, self.cap), dtype=np.int64),
        )

    def rows(self, st: Any, tile: np.ndarray, r0: int, c0: int) -> None:
        kernels.window_rows(tile, r0, c0, self.lo, self.hi, self.cap, *st)

    def cols(self, st: Any, tile: np.ndarray, r0: int, c0: int) -> None:
        above, count, index = st
        kernels.window_cols(
            tile, r0, c0, self.lo[:, 0], self.hi[:, 0], self.cap,
            above[:, 0], count[:, 0], index[:, 0],
        )  # fmt: skip

    def finish(
        self, states: list[Any], rescore: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``above (c, g)`` and the window as flat ``(rows, slots, columns)``; overflowing
        windows are recounted from their row's scores (``rescore(rows)``)."""
        cap = self.cap
        c, g = self.lo.shape
        above = sum(st[0] for st in states)
        over = np.zeros((c, g), dtype=bool)
        for _, count, _ in states:
            over |= count > cap
        rows, slots, columns = [], [], []
        for _, count, index in states:
            r, t, n = np.nonzero(np.arange(cap)[None, None, :] < np.minimum(count, cap)[:, :, None])
            keep = ~over[r, t]
            rows.append(r[keep])
            slots.append(t[keep])
            columns.append(index[r, t, n][keep])
        redo = np.argwhere(over)
        if len(redo):  # many near-equal scores: recount those windows from the row's scores
            unique = np.unique(redo[:, 0])
            scores = rescore(unique)
            for (i, t), row in zip(redo, np.searchsorted(unique, redo[:, 0]), strict=True):
                values = scores[row]
                above[i, t] = int((values > self.hi_t[i, t]).sum())
                inside = (values >= self.lo_t[i, t]) & (values <= self.hi_t[i, t])
                found = torch.nonzero(inside)[:, 0].numpy()
                rows.append(np.full(len(found), i))
                slots.append(np.full(len(found), t))
                columns.append(found)
        flat = [np.concatenate(x).astype(np.int64) for x in (rows, slots, columns)]
        return above, flat[0], flat[1], flat[2]


class Top(_Consumer):
    """Candidates for each row's exact top-``ks[i]``: every item whose filter score is at
    least the row's k-th largest filter score minus ``2 eps`` (and possibly a few more).

    ``floor`` (optional, per row): a filter score below which no item of the exact top-k can
    lie (from the query's positives); items below it are never looked at twice."""

    def __init__(
        self,
        ks: np.ndarray,
        eps: torch.Tensor,
        dtype: np.dtype,
        workers: int,
        floor: np.ndarray | None = None,
    ) -> None:
        c = len(ks)
        self.ks = ks
        self.eps = eps
        self.kmax = kmax = int(ks.max(initial=0))
        self.dtype = dtype
        cap = 2 * kmax + EXTRA
        self.slack = 3.0 * eps.numpy().astype(np.float64)  # looser than the final 2 eps
        start = np.where(ks > 0, -np.inf if floor is None else floor, np.inf).astype(dtype)
        self.heap = kmax <= HEAP_K
        # Each worker's state is one slice of arrays shared by all (merged without copies).
        slots = max(1, workers)
        self.heaps = np.empty((slots, c, max(kmax, 1)), dtype=dtype)
        self.sizes = np.zeros((slots, c), dtype=np.int64)
        self.floors = np.repeat(start[None], slots, axis=0)
        self.columns = np.empty((slots, c, cap), dtype=np.int64)
        self.scores = np.empty((slots, c, cap), dtype=dtype)
        self.fills = np.zeros((slots, c), dtype=np.int64)
        self.overs = np.zeros((slots, c), dtype=np.bool_)
        self.worker = itertools.count()

    def state(self) -> tuple[np.ndarray, ...]:
        w = next(self.worker)
        lists = (self.heaps[w], self.sizes[w]) if self.heap else ()
        return (
            *lists, self.floors[w], self.columns[w], self.scores[w], self.fills[w], self.overs[w]
        )  # fmt: skip

    def rows(self, st: Any, tile: np.ndarray, r0: int, c0: int) -> None:
        kernel = kernels.top_rows if self.heap else kernels.reservoir_rows
        kernel(tile, r0, c0, self.ks, self.slack, *st)

    def cols(self, st: Any, tile: np.ndarray, r0: int, c0: int) -> None:
        kernel = kernels.top_cols if self.heap else kernels.reservoir_cols
        kernel(tile, r0, c0, self.ks, self.slack, *st)

    def finish(self, rescore: Any, block_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The candidates as flat ``(rows, local columns)``, by row then column; rows whose
        buffers overflowed are recomputed from their row's scores (``rescore(rows)``)."""
        k = self.ks
        c = len(k)
        # The k-th best filter score of each row: the k-th largest of the workers' top-k lists,
        # or of their buffers (reservoirs hold every item at or above a floor below the k-th).
        lists, counts = (self.heaps, self.sizes) if self.heap else (self.scores, self.fills)
        kth = np.empty(c, dtype=np.float64)
        kernels.union_kth(lists, counts, k, kth)
        lo = filters.top_floor(torch.from_numpy(kth), self.eps, _torch_dtype(self.dtype),
                               torch.from_numpy(k))  # fmt: skip
        lo_np = np.ascontiguousarray(lo.numpy().astype(self.dtype))
        over = self.overs.any(axis=0)
        found_rows, found_cols = kernels.collect_top(self.scores, self.columns, self.fills,
                                                     lo_np, over)  # fmt: skip
        redo = np.flatnonzero(over)
        if not len(redo):
            return found_rows, found_cols
        rows, cols = [found_rows], [found_cols]
        # Many near-equal scores: those rows in two passes over their scores.
        scores = rescore(redo).numpy()
        kb = k[redo]
        row_kth = kernels.kth_largest(scores, kb).astype(np.float64)
        row_lo = filters.top_floor(torch.from_numpy(row_kth), self.eps[redo],
                                   _torch_dtype(scores.dtype), torch.from_numpy(kb))  # fmt: skip
        lo_r = row_lo.numpy()[:, None]
        _, wr, _, wj = kernels.window(scores, lo_r, np.full_like(lo_r, np.inf),
                                      cap=int(kb.max()) + kernels.WINDOW_CAP)  # fmt: skip
        rows.append(redo[wr])
        cols.append(wj)
        rows_all, cols_all = np.concatenate(rows), np.concatenate(cols)
        order = np.lexsort((cols_all, rows_all))
        return rows_all[order], cols_all[order]


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.float64 if np.dtype(dtype) == np.float64 else torch.float32


# ----------------------------------------------------------------------------------------------
# Low precision: which filter the tiles use, chosen by timing passes as they run.


class _Precisions:
    """Which precision computes the tiles of float32 filter rows of one width, when the caller
    says ``precision="auto"``: float32, and the low precisions this CPU has instructions for
    (:func:`lowp.worth_timing`) whose arithmetic passed :func:`lowp.verify`. The first passes of
    the process take turns; each records its time per tile, the GEMM and every re-scoring its
    window caused included; then the fastest is used."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.candidates: tuple[str, ...] | None = None
        self.times: dict[tuple[int, str], list[float]] = {}
        self.chosen: dict[int, str] = {}

    def _candidates(self) -> tuple[str, ...]:
        with self.lock:
            if self.candidates is None:
                from recallkit.engine import lowp

                found = [p for p in lowp.worth_timing() if p == "float32" or lowp.verify(p)]
                self.candidates = tuple(found)
            return self.candidates

    def pick(self, width: int) -> str:
        candidates = self._candidates()
        if len(candidates) == 1:
            return candidates[0]
        with self.lock:
            if width in self.chosen:
                return self.chosen[width]
            return min(candidates, key=lambda p: len(self.times.get((width, p), [])))

    def record(self, width: int, precision: str, seconds_per_tile: float) -> None:
        candidates = self._candidates()
        if len(candidates) == 1:
            return
        with self.lock:
            self.times.setdefault((width, precision), []).append(seconds_per_tile)
            if all(len(self.times.get((width, p), [])) >= SAMPLES for p in candidates):
                self.chosen[width] = min(candidates, key=lambda p: min(self.times[(width, p)]))


PRECISION_CHOICE = _Precisions()


# ----------------------------------------------------------------------------------------------
# The back end.


def _product(space: Space, qf: filters.QueryFilter) -> filters.Product:
    return filters.Product.plain(qf.rows.dtype)


class CpuBackend:
    """Requests on CPU tensors: numba tiles (module docstring)."""

    name = "numba"
    score_bytes = 0  # tiles: a chunk holds its scores and nothing per score beside them

    # -- filter rows, bounds ------------------------------------------------------------------

    def _filter(
        self, space: Space, chunk: Rows, block: Block, start: int, stop: int
    ) -> filters.QueryFilter:
        if space.own_rows(block):
            own = space.extra.get("own_filter")
            if own is None or own[0] is not block:
                own = (block, filters.own_filter(block.gemm, block.scale, space.metric))
                space.extra["own_filter"] = own
            return own[1][slice(start, stop)]
        return filters.query_filter(
            chunk.raw, chunk.sq, chunk.norm, space.metric, block.scale, block.gemm.dtype
        )

    def _bound(self, space: Space, qf: filters.QueryFilter, block: Block) -> torch.Tensor:
        return filters.error_bound(
            _product(space, qf), qf, block.max_norm, space.dim, block.scale, space.metric
        )

    def _exact(
        self, space: Space, chunk: Rows, block: Block, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        return exact.exact_numba(
            chunk.raw, chunk.aux(space.metric), block.data, block.aux(space.metric),
            rows, cols, space.metric,
        )  # fmt: skip

    def _tile_precision(self, space: Space, qf: filters.QueryFilter, cached: bool) -> str:
        """The filter the tiles of this pass use (float64 filters stay float64)."""
        if qf.rows.dtype != torch.float32 or cached:
            return "float32"
        precision = space.precision
        if precision == "float16":
            raise ValueError(
                "precision='float16' runs on CUDA; on the CPU use 'auto', 'float32', "
                "'bfloat16' or 'int8'."
            )
        if precision == "auto":
            precision = PRECISION_CHOICE.pick(qf.rows.shape[1])
        if precision == "int8":
            from recallkit.engine import lowp

            if qf.rows.shape[1] > lowp.INT8_MAX_WIDTH:
                return "float32"
        return precision

    def _low_sides(
        self, space: Space, qf: filters.QueryFilter, block: Block, precision: str, start: int
    ) -> tuple[Any, Any, int]:
        """The low-precision filter rows of the chunk and of the block (cached on the block),
        and the chunk's first row in its side (the block's own rows for leave-one-out)."""
        from recallkit.engine import lowp

        key = ("lowp", precision)
        if key not in block.cache:
            block.cache[key] = lowp.prepare(block.gemm, precision)
        b_side = block.cache[key]
        if space.own_rows(block):
            return b_side, b_side, start
        return lowp.prepare(qf.rows, precision), b_side, 0

    # -- step 1: threshold items --------------------------------------------------------------

    @staticmethod
    def exact_is_cheaper(positives: Any, block: Block, start: int, stop: int) -> bool:
        """Whether scoring the chunk's positives exactly costs less than a pass (few positives
        per query: fine labels, listed ground truth)."""
        if isinstance(positives, Pairs):
            return True
        return positives.pair_count(block, start, stop) * 16 <= (stop - start) * block.rows

    def _thresholds(
        self,
        space: Space,
        chunk: Rows,
        start: int,
        stop: int,
        request: Request,
        excluded: ChunkExclusions,
        cached: dict[int, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each slot's threshold item ``(exact score, global index)`` in this process, and (for
        positives) how many positives score exactly the best."""
        c = stop - start
        if request.targets is not None:
            targets = torch.from_numpy(request.targets[start:stop])
            best = torch.full(targets.shape, -torch.inf, dtype=torch.float64)
            where = torch.where(targets >= 0, targets, torch.full_like(targets, ties.SENTINEL))
            for block in space.blocks():
                local, inside = locals_of(block, targets.clamp(min=0))
                inside &= targets >= 0
                r, t = inside.nonzero(as_tuple=True)
                best[r, t] = self._exact(space, chunk, block, r, local[r, t])
            return best, where, torch.zeros(c, dtype=torch.int64)
        positives = request.positives
        best = torch.full((c,), -torch.inf, dtype=torch.float64)
        where = torch.full((c,), ties.SENTINEL, dtype=torch.int64)
        equal = torch.zeros(c, dtype=torch.int64)
        for i, block in enumerate(space.blocks()):
            if isinstance(positives, Pairs):
                rows, glob = positives.expand(start, stop, torch.device("cpu"))
                local, inside = locals_of(block, glob)
                inside &= ~excluded.excluded(rows, local.clamp(0, max(block.rows - 1, 0)), block)
                rows, local = rows[inside], local[inside]
            elif self.exact_is_cheaper(positives, block, start, stop):
                qf = self._filter(space, chunk, block, start, stop)
                eps = self._bound(space, qf, block)
                rows, local = self._label_candidates(positives, qf, block, start, stop,
                                                     excluded, eps)  # fmt: skip
            else:
                # Many positives (coarse labels): the best positive's filter score narrows them
                # down to a few candidates; the scores are kept for the pass (one block).
                qf = self._filter(space, chunk, block, start, stop)
                scores = block_scores(space, qf, block)
                _masked(scores, excluded, block)
                eps = self._bound(space, qf, block)
                lo, hi = positives.ranges(block, start, stop)
                members = positives.groups(block).members
                rows, local = kernels.positive_window(scores, lo, hi, members, eps)
                if space.single is not None:
                    cached[i] = scores
            exact_scores = self._exact(space, chunk, block, rows, local)
            glob = globals_of(block, local)
            b, w, n = ties.segment_best(rows, exact_scores, glob, c)
            best, where, equal = merge_best_counted(best, where, equal, b, w, n)
        return best[:, None], where[:, None], equal

    def _label_candidates(
        self,
        positives: LabelPositives,
        qf: filters.QueryFilter,
        block: Block,
        start: int,
        stop: int,
        excluded: ChunkExclusions,
        eps: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = positives.ranges(block, start, stop)
        ptr, cols = excluded.csr(block)
        return kernels.label_best_candidates(
            qf.rows, block.gemm, positives.query_codes[start:stop], lo, hi,
            positives.groups(block).members, ptr, cols, excluded.codes(block), eps,
        )  # fmt: skip

    def _kth_floor(
        self,
        positives: LabelPositives,
        qf: filters.QueryFilter,
        block: Block,
        start: int,
        stop: int,
        excluded: ChunkExclusions,
        ks: np.ndarray,
        eps: torch.Tensor,
    ) -> np.ndarray:
        """Per row, a filter score below which no item of the exact top-``k`` can lie: at least
        ``k`` positives score at least the ``k``-th best positive's exact score, so no item of
        the top-``k`` has a filter score below that positive's minus ``2 eps``."""
        lo, hi = positives.ranges(block, start, stop)
        ptr, cols = excluded.csr(block)
        kth = kernels.label_kth(
            qf.rows, block.gemm, positives.query_codes[start:stop], lo, hi,
            positives.groups(block).members, ptr, cols, excluded.codes(block), ks,
        )  # fmt: skip
        low = filters.round_down(torch.from_numpy(kth - 2.0 * eps.numpy()), qf.rows.dtype)
        return np.where(np.isfinite(kth), low.numpy(), -np.inf)

    # -- the pass -----------------------------------------------------------------------------

    def _chunk(
        self,
        space: Space,
        chunk: Rows,
        start: int,
        stop: int,
        request: Request,
        reducer: Reducer | None,
    ) -> ChunkResult:
        c = stop - start
        excluded = ChunkExclusions(request.exclusions, start, stop, torch.device("cpu"))
        out = ChunkResult(start, stop)
        cached: dict[int, torch.Tensor] = {}
        best = where = None
        if request.thresholds:
            best, where, equal = self._thresholds(space, chunk, start, stop, request, excluded,
                                                  cached)  # fmt: skip
            if reducer is not None:
                best, where, equal = reduce_best(reducer, best, where, equal)
            out.tied_positives = (equal - 1).clamp(min=0).numpy()
            g = best.shape[1]
            total = torch.zeros((c, g), dtype=torch.int64)
            tied = torch.zeros((c, g), dtype=torch.int64)
            before = torch.zeros((c, g), dtype=torch.int64)
        ks = None
        index = value = tail_i = tail_v = None
        if request.lists:
            ks = np.ascontiguousarray(request.top_k[start:stop], dtype=np.int64)
            kmax = int(ks.max(initial=0))
            index = torch.full((c, kmax), -1, dtype=torch.int64)
            value = torch.full((c, kmax), -torch.inf, dtype=torch.float64)
            tail_i = torch.full((c, 0), -1, dtype=torch.int64)
            tail_v = torch.full((c, 0), -torch.inf, dtype=torch.float64)
        for i, block in enumerate(space.blocks()):
            began = time.perf_counter()
            qf = self._filter(space, chunk, block, start, stop)
            eps32 = self._bound(space, qf, block)
            eps = eps32
            dtype = qf.rows.numpy().dtype
            precision = self._tile_precision(space, qf, i in cached)
            product = None
            if precision != "float32":
                from recallkit.engine import lowp

                a_side, b_side, first = self._low_sides(space, qf, block, precision, start)
                low = lowp.row_bounds(a_side, b_side, (first, first + c))
                eps = eps32 + torch.from_numpy(low)

                def product(r0, c0, out, a=a_side, b=b_side, first=first):
                    rows, cols = out.shape
                    lowp.tile_product(a, b, out, (first + r0, first + r0 + rows),
                                      (c0, c0 + cols))  # fmt: skip

            consumers: list[_Consumer] = []
            window = top = None
            if request.thresholds:
                centre = filters.scaled_centre(best, qf, block.scale)
                lo, hi = filters.bounds(centre, eps[:, None], qf.rows.dtype)
                window = Window(lo, hi, dtype)
                consumers.append(window)
            if request.lists:
                kb = np.minimum(ks, block.rows)
                floor = None
                positives = request.positives
                if (
                    isinstance(positives, LabelPositives)
                    and block is space.single
                    and self.exact_is_cheaper(positives, block, start, stop)
                ):
                    # An item of the top-k has a tile score at least the k-th positive's float32
                    # filter score minus its bound and the tiles' (``2 eps`` in float32).
                    margin = (eps32 + eps) / 2.0
                    floor = self._kth_floor(positives, qf, block, start, stop, excluded, kb,
                                            margin)  # fmt: skip
                top = Top(kb, eps, dtype, _threads(), floor)
                consumers.append(top)
            symmetric = (
                all(x.symmetric_ok for x in consumers)
                and i not in cached
                and self._symmetric(space, qf, block, excluded)
            )
            states = run_tiles(qf, block, excluded, symmetric, consumers, cached.get(i), product)
            per_consumer = list(zip(*states, strict=True)) if states else [[]] * len(consumers)

            def rescore(rows: np.ndarray, qf=qf, block=block) -> torch.Tensor:
                return _row_scores(space, qf, block, excluded, rows)

            if window is not None:
                above, wr, wt, wj = window.finish(list(per_consumer[0]), rescore)
                if precision != "float32":  # the cascade: the window's float32 scores
                    above, wr, wt, wj = self._refine_window(qf, block, best, eps32, above, wr,
                                                            wt, wj)  # fmt: skip
                wr_t, wj_t = torch.from_numpy(wr), torch.from_numpy(wj)
                scores = self._exact(space, chunk, block, wr_t, wj_t)
                glob = globals_of(block, wj_t)
                b, w = best[wr_t, wt], where[wr_t, wt]
                slot = wr_t * best.shape[1] + torch.from_numpy(wt)
                counts = _slot_counts(slot, best.numel(), best.shape)
                total += torch.from_numpy(above) + counts(ties.beats(scores, glob, b, w))
                tie = scores == b
                tied += counts(tie & (glob != w))
                before += counts(tie & (glob < w))
            if top is not None:
                tr, tj = top.finish(rescore, block.rows)
                if precision != "float32":
                    tr, tj = self._refine_top(qf, block, kb, eps32, tr, tj)
                tr_t, tj_t = torch.from_numpy(tr), torch.from_numpy(tj)
                scores = self._exact(space, chunk, block, tr_t, tj_t)
                glob = globals_of(block, tj_t)
                parts = kernels.segment_top(tr_t, glob, scores, torch.from_numpy(ks), kmax)
                if space.single is not None:
                    index, value, tail_i, tail_v = parts
                else:
                    index, value, tail_i, tail_v = merge_lists(
                        (index, value, tail_i, tail_v), parts, ks
                    )
            if cached.get(i) is None and qf.rows.dtype == torch.float32:
                tiles = -(-c // TILE) * -(-block.rows // TILE)
                PRECISION_CHOICE.record(
                    qf.rows.shape[1], precision, (time.perf_counter() - began) / max(tiles, 1)
                )
        if request.thresholds:
            if reducer is not None:
                total = reducer.reduce("sum", total)
                tied = reducer.reduce("sum", tied)
                before = reducer.reduce("sum", before)
            found = torch.isfinite(best)
            out.ranks = torch.where(found, total, torch.full_like(total, -1)).numpy()
            out.ties = torch.where(found, tied, torch.zeros_like(tied)).numpy()
            out.ties_before = torch.where(found, before, torch.zeros_like(before)).numpy()
        if request.lists:
            beyond = torch.arange(index.shape[1])[None, :] >= torch.from_numpy(ks)[:, None]
            index[beyond], value[beyond] = -1, -torch.inf
            out.top_index, out.top_score = index, value
            out.tail_index, out.tail_score = tail_i, tail_v
        return out

    def _refine_window(
        self,
        qf: filters.QueryFilter,
        block: Block,
        best: torch.Tensor,
        eps32: torch.Tensor,
        above: np.ndarray,
        wr: np.ndarray,
        wt: np.ndarray,
        wj: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The low-precision window scored in float32: items certainly above float32's window
        are counted, float32's window is kept for the exact scores."""
        f32 = kernels.pair_dots(qf.rows.numpy(), block.gemm.numpy(), wr, wj)
        centre = filters.scaled_centre(best, qf, block.scale)
        lo, hi = filters.bounds(centre, eps32[:, None], torch.float32)
        lo, hi = lo.numpy()[wr, wt], hi.numpy()[wr, wt]
        g = above.shape[1]
        up = f32 > hi
        above = above + np.bincount(wr[up] * g + wt[up], minlength=above.size).reshape(above.shape)
        keep = (f32 >= lo) & ~up
        return above, wr[keep], wt[keep], wj[keep]

    def _refine_top(
        self,
        qf: filters.QueryFilter,
        block: Block,
        ks: np.ndarray,
        eps32: torch.Tensor,
        tr: np.ndarray,
        tj: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The low-precision top-k candidates narrowed by their float32 scores: no item of the
        exact top-k (or tied with its k-th) lies below the k-th float32 score among the
        candidates minus ``2 eps``."""
        f32 = kernels.pair_dots(qf.rows.numpy(), block.gemm.numpy(), tr, tj)
        kth = kernels.segment_kth(tr, f32, ks)
        floor = filters.top_floor(torch.from_numpy(kth), eps32, torch.float32,
                                  torch.from_numpy(ks))  # fmt: skip
        keep = f32 >= floor.numpy()[tr]
        return tr[keep], tj[keep]

    def _symmetric(
        self, space: Space, qf: filters.QueryFilter, block: Block, excluded: ChunkExclusions
    ) -> bool:
        """Whether the chunk is the whole block's own rows with symmetric exclusions."""
        if not space.own_rows(block) or qf.rows.shape[0] != block.rows:
            return False
        if qf.rows.data_ptr() != block.gemm.data_ptr():
            return False
        return excluded.exclusions is None or excluded.exclusions.mirrored(block, block.rows)

    def _one_chunk(self, space: Space, request: Request, size: int | None) -> bool:
        """Whether all queries run as one chunk: leave-one-out on one tensor (symmetric: each
        off-diagonal tile serves both of its sides), when the per-row state of the pass fits the
        memory budget and the thresholds need no kept scores."""
        if size is not None or space.single is None or not space.own_rows(space.single):
            return False
        n = space.num_query
        if isinstance(request.positives, LabelPositives) and not self.exact_is_cheaper(
            request.positives, space.single, 0, n
        ):
            return False
        return n * state_bytes(request) <= DEFAULT_MEMORY_BUDGET

    def run(self, space: Space, request: Request, size: int | None) -> Iterator[ChunkResult]:
        rows = chunk_rows(space, size, state_bytes(request), self.score_bytes)
        if self._one_chunk(space, request, size):
            rows = max(space.num_query, 1)
        for start, stop in chunks(space.num_query, rows):
            yield self._chunk(space, space.chunk(start, stop), start, stop, request, None)

    def run_chunk(
        self, space: Space, chunk: Rows, request: Request, reducer: Reducer | None
    ) -> ChunkResult:
        return self._chunk(space, chunk, 0, chunk.raw.shape[0], request, reducer)


def _slot_counts(slot: torch.Tensor, size: int, shape: torch.Size):
    def count(mask: torch.Tensor) -> torch.Tensor:
        return torch.bincount(slot[mask], minlength=size).view(shape)

    return count


def merge_best_counted(
    best: torch.Tensor,
    where: torch.Tensor,
    equal: torch.Tensor,
    b: torch.Tensor,
    w: torch.Tensor,
    n: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`ties.merge_best` that also adds up how many items score exactly the best."""
    new_best, new_where = ties.merge_best(best, where, b, w)
    count = torch.where(best == new_best, equal, torch.zeros_like(equal))
    count = count + torch.where(b == new_best, n, torch.zeros_like(n))
    return new_best, new_where, count


def reduce_best(
    reducer: Reducer, best: torch.Tensor, where: torch.Tensor, equal: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The threshold items across processes: the highest score, then among the processes that
    hold it the lowest index; the count of items at the best score adds up."""
    local = best
    best = reducer.reduce("max", best)
    keep = (local == best) & torch.isfinite(best)
    where = reducer.reduce("min", torch.where(keep, where, torch.full_like(where, ties.SENTINEL)))
    equal = reducer.reduce("sum", torch.where(keep[:, 0], equal, torch.zeros_like(equal)))
    return best, where, equal


def merge_lists(
    held: tuple[torch.Tensor, ...], new: tuple[torch.Tensor, ...], ks: np.ndarray
) -> tuple[torch.Tensor, ...]:
    """Two blocks' (or processes') ranked lists with their tails, merged: the top-``k`` of all
    and the new tail (items beyond ``k`` tied with the ``k``-th)."""
    index = torch.cat([held[0], held[2], new[0], new[2]], 1)
    score = torch.cat([held[1], held[3], new[1], new[3]], 1)
    return ties.split_tail(*ties.merge_ranked(index, score, index.shape[1]), torch.from_numpy(ks))


BACKEND = CpuBackend()
