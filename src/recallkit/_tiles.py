"""The engine's CPU pass: filter scores produced tile by tile and consumed while in cache.

A chunk's filter scores against a block are computed as ``TILE × TILE`` tiles, each a
single-threaded BLAS GEMM into a worker's own buffer (4 MiB of float32: within the L2 or the
nearby L3 of current x86 servers; numpy's BLAS or torch's, whichever the first tiles of the
process find faster), with the excluded pairs set to ``-inf``; a kernel of
:mod:`recallkit._kernels` consumes the tile at once (window counts and collection, or running
top-k candidates). The score matrix is never written to memory, which is what a GEMM of small
inner dimension (d = 128) spends most of its time on.

Symmetric problems (leave-one-out on one tensor, cosine or dot, exclusions symmetric) compute
each off-diagonal tile once and read it twice, as rows and transposed: half the GEMM. The
filter's error bound does not depend on which side a rounding came from, so the results are
the same (module docstring of :mod:`recallkit._engine`).

Worker threads take tiles from a shared list and keep their own per-row state, merged at the
end: counts add, window items concatenate, running top-k lists keep the k best of all.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from recallkit import _engine, _kernels

TILE = 1024
EXTRA = 64  # a top-k buffer holds 2 k + EXTRA items
# Up to this k, a top-k pass keeps a heap per row (its floor follows every new k-th best);
# beyond, a reservoir (compacted at its k-th best when full: fewer operations per item).
HEAP_K = 32


def top_state_bytes(kmax: int) -> int:
    """Bytes per query row of one worker's :func:`top` state."""
    return 4 * kmax + 12 * (2 * kmax + EXTRA) + 32


def window_state_bytes(slots: int) -> int:
    """Bytes per query row of one worker's :func:`window` state."""
    return 8 * slots * (2 + _kernels.WINDOW_CAP)


def is_symmetric(
    space: _engine.Space, qf: _engine.QueryFilter, block: _engine.Block, excluded: Any
) -> bool:
    """Whether the chunk is the whole block's own rows with symmetric exclusions."""
    if block is not space.single or qf.rows.shape[0] != block.rows:
        return False
    gemm = block.gemm
    if qf.rows.data_ptr() != gemm.data_ptr() or qf.rows.shape != gemm.shape:
        return False
    rows, local, _ = excluded.in_block(block)
    key = np.sort(rows.cpu().numpy() * block.rows + local.cpu().numpy())
    mirrored = np.sort(local.cpu().numpy() * block.rows + rows.cpu().numpy())
    return bool(np.array_equal(key, mirrored))


def _numpy_product(a: torch.Tensor, b: torch.Tensor, out: np.ndarray) -> None:
    np.matmul(a.numpy(), b.numpy().T, out=out)


def _torch_product(a: torch.Tensor, b: torch.Tensor, out: np.ndarray) -> None:
    torch.mm(a, b.T, out=torch.from_numpy(out))


PRODUCTS = {"numpy": _numpy_product, "torch": _torch_product}
SAMPLES = 3  # full tiles timed with each BLAS before the choice


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
    differ by machine (OpenBLAS is the faster on some AMD servers, MKL on Intel)."""
    return _choice(dtype, width).pick()


def tile_scores(
    space: _engine.Space,
    qf: _engine.QueryFilter,
    block: _engine.Block,
    row0: int,
    col0: int,
    out: np.ndarray,
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


def run(
    space: _engine.Space,
    qf: _engine.QueryFilter,
    block: _engine.Block,
    excluded: _engine.ChunkPairs,
    symmetric: bool,
    state: Callable[[], Any],
    visit_rows: Callable[[Any, np.ndarray, int, int], None],
    visit_cols: Callable[[Any, np.ndarray, int, int], None] | None = None,
) -> list[Any]:
    """Compute the chunk's filter scores against ``block`` tile by tile; return the workers'
    states (``state()`` each), updated by ``visit_rows`` (and ``visit_cols`` on the transposed
    off-diagonal tiles of a symmetric problem)."""
    rows, cols = qf.rows.shape[0], block.rows
    tasks = [
        (r0, c0)
        for r0 in range(0, rows, TILE)
        for c0 in range(0, cols, TILE)
        if not symmetric or c0 >= r0
    ]
    ptr, excluded_cols = excluded.csr(block, rows)
    dtype = qf.rows.numpy().dtype
    lock = threading.Lock()
    queue = iter(tasks)

    def work() -> Any:
        mine = state()
        buffer = np.empty(TILE * TILE, dtype=dtype)
        while True:
            with lock:
                task = next(queue, None)
            if task is None:
                return mine
            r0, c0 = task
            shape = (min(TILE, rows - r0), min(TILE, cols - c0))
            tile = buffer[: shape[0] * shape[1]].reshape(shape)
            tile_scores(space, qf, block, r0, c0, tile)
            _kernels.mask_tile(tile, r0, c0, ptr, excluded_cols)
            visit_rows(mine, tile, r0, c0)
            if symmetric and c0 != r0:
                visit_cols(mine, tile, r0, c0)

    threads = torch.get_num_threads()
    workers = max(1, min(threads, len(tasks)))
    with _engine._blas_controller().limit(limits=1, user_api="blas"):
        torch.set_num_threads(1)
        try:
            jobs = [_engine._pool(workers).submit(work) for _ in range(workers)]
            return [job.result() for job in jobs]
        finally:
            torch.set_num_threads(threads)


def _row_scores(
    space: _engine.Space,
    qf: _engine.QueryFilter,
    block: _engine.Block,
    excluded: _engine.ChunkPairs,
    rows: np.ndarray,
) -> torch.Tensor:
    """Filter scores of some chunk rows against ``block`` (excluded pairs ``-inf``), for the
    rare rows whose tiled pass overflowed."""
    picked = torch.from_numpy(rows)
    sub = _engine.QueryFilter(qf.rows[picked], qf.scale, qf.norms[picked], qf.use_low)
    scores = _engine.block_scores(space, sub, block).clone()
    r, local, _ = excluded.in_block(block)
    position = np.full(qf.rows.shape[0], -1, dtype=np.int64)
    position[rows] = np.arange(len(rows))
    where = torch.from_numpy(position)[r.cpu()]
    keep = where >= 0
    scores[where[keep], local.cpu()[keep]] = -torch.inf
    return scores


def window(
    space: _engine.Space,
    qf: _engine.QueryFilter,
    block: _engine.Block,
    excluded: _engine.ChunkPairs,
    lo: torch.Tensor,
    hi: torch.Tensor,
    symmetric: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`recallkit._kernels.window` of the chunk's filter scores against ``block``, from
    one tiled pass; the same returns (window items in no particular order)."""
    dtype = qf.rows.numpy().dtype
    lo_np = np.ascontiguousarray(lo.numpy().astype(dtype))
    hi_np = np.ascontiguousarray(hi.numpy().astype(dtype))
    c, g = lo_np.shape
    cap = _kernels.WINDOW_CAP

    def state() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (
            np.zeros((c, g), dtype=np.int64),
            np.zeros((c, g), dtype=np.int64),
            np.empty((c, g, cap), dtype=np.int64),
        )

    def visit_rows(st: Any, tile: np.ndarray, r0: int, c0: int) -> None:
        _kernels.window_rows(tile, r0, c0, lo_np, hi_np, cap, *st)

    def visit_cols(st: Any, tile: np.ndarray, r0: int, c0: int) -> None:
        above, count, index = st
        _kernels.window_cols(
            tile, r0, c0, lo_np[:, 0], hi_np[:, 0], cap, above[:, 0], count[:, 0], index[:, 0]
        )

    states = run(space, qf, block, excluded, symmetric and g == 1, state, visit_rows, visit_cols)
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
        scores = _row_scores(space, qf, block, excluded, unique)
        for (i, t), row in zip(redo, np.searchsorted(unique, redo[:, 0]), strict=True):
            values = scores[row]
            above[i, t] = int((values > hi[i, t]).sum())
            found = torch.nonzero((values >= lo[i, t]) & (values <= hi[i, t]))[:, 0].numpy()
            rows.append(np.full(len(found), i))
            slots.append(np.full(len(found), t))
            columns.append(found)
    return (
        torch.from_numpy(above),
        *(torch.from_numpy(np.concatenate(x).astype(np.int64)) for x in (rows, slots, columns)),
    )


def top(
    space: _engine.Space,
    qf: _engine.QueryFilter,
    block: _engine.Block,
    excluded: _engine.ChunkPairs,
    ks: torch.Tensor,
    eps: torch.Tensor,
    symmetric: bool,
    backend: str | None,
    floor: np.ndarray | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidates for each row's exact top-``ks[i]`` in ``block``: every item whose filter
    score is at least the row's k-th largest filter score minus ``2 eps`` (and possibly a few
    more), as flat ``(rows, local columns)`` sorted by row then column, from one tiled pass.

    ``floor`` (optional, per row): a filter score below which no item of the exact top-k can
    lie (from the query's positives, :func:`recallkit._engine.ranked_chunk`); items below it
    are never looked at twice."""
    dtype = qf.rows.numpy().dtype
    c = qf.rows.shape[0]
    k = ks.clamp(min=0, max=block.rows).numpy().astype(np.int64)
    kmax = int(k.max(initial=0))
    eps64 = eps.numpy().astype(np.float64)
    cap = 2 * kmax + EXTRA
    slack = 3.0 * eps64  # looser than the final 2 eps: rounding cannot drop a candidate

    start = np.where(k > 0, -np.inf if floor is None else floor, np.inf).astype(dtype)

    heap = kmax <= HEAP_K
    rows_kernel = _kernels.top_rows if heap else _kernels.reservoir_rows
    cols_kernel = _kernels.top_cols if heap else _kernels.reservoir_cols

    # Each worker's state is one slice of arrays shared by all (merged without copies).
    slots = max(1, torch.get_num_threads())
    heaps = np.empty((slots, c, max(kmax, 1)), dtype=dtype)
    sizes = np.zeros((slots, c), dtype=np.int64)
    floors = np.repeat(start[None], slots, axis=0)
    columns = np.empty((slots, c, cap), dtype=np.int64)
    scores = np.empty((slots, c, cap), dtype=dtype)
    fills = np.zeros((slots, c), dtype=np.int64)
    overs = np.zeros((slots, c), dtype=np.bool_)
    worker = itertools.count()

    def state() -> tuple[np.ndarray, ...]:
        w = next(worker)
        lists = (heaps[w], sizes[w]) if heap else ()
        return (*lists, floors[w], columns[w], scores[w], fills[w], overs[w])

    def visit_rows(st: Any, tile: np.ndarray, r0: int, c0: int) -> None:
        rows_kernel(tile, r0, c0, k, slack, *st)

    def visit_cols(st: Any, tile: np.ndarray, r0: int, c0: int) -> None:
        cols_kernel(tile, r0, c0, k, slack, *st)

    run(space, qf, block, excluded, symmetric, state, visit_rows, visit_cols)
    # The k-th best filter score of each row: the k-th largest of the workers' top-k lists, or
    # of their buffers (reservoirs hold every item at or above a floor below the k-th best).
    lists, counts = (heaps, sizes) if heap else (scores, fills)
    kth = np.empty(c, dtype=np.float64)
    _kernels.union_kth(lists, counts, k, kth)
    lo = _engine._top_floor(torch.from_numpy(kth), eps, qf.rows.dtype, torch.from_numpy(k))
    lo_np = np.ascontiguousarray(lo[:, 0].numpy().astype(dtype))
    over = overs.any(axis=0)
    found_rows, found_cols = _kernels.collect_top(scores, columns, fills, lo_np, over)
    redo = np.flatnonzero(over)
    if not len(redo):
        return torch.from_numpy(found_rows), torch.from_numpy(found_cols)
    rows, cols = [found_rows], [found_cols]
    # Many near-equal scores: those rows in two passes over their scores.
    scores = _row_scores(space, qf, block, excluded, redo)
    kb = torch.from_numpy(k[redo])
    row_kth = _kernels.kth_largest(scores, kb, block.rows, backend).to(torch.float64)
    row_lo = _engine._top_floor(row_kth, eps[redo], scores.dtype, kb)
    _, wr, _, wj = _kernels.window(
        scores,
        row_lo,
        torch.full_like(row_lo, torch.inf),
        block.rows,
        backend,
        cap=int(kb.max()) + _kernels.WINDOW_CAP,
    )
    rows.append(redo[wr.numpy()])
    cols.append(wj.numpy())
    rows_all, cols_all = np.concatenate(rows), np.concatenate(cols)
    order = np.lexsort((cols_all, rows_all))
    return torch.from_numpy(rows_all[order]), torch.from_numpy(cols_all[order])
