"""The CPU back end: filter scores produced tile by tile and consumed while in cache.

A chunk's filter scores against a block are computed as ``TILE × TILE`` tiles, each a
single-threaded GEMM into a worker's own buffer (2.25 MiB of float32, half that of a bfloat16 GEMM's
own output: in the L2 or nearby L3 of x86 servers), skipped pairs ``-inf``; the numba kernels of
[`recallkit.engine.cpu_kernels`][recallkit.engine.cpu_kernels] consume the tile at once. The score
matrix is never written to memory, which is what a GEMM of small inner dimension (d = 128) spends
most of its time on. One pass over the tiles feeds every consumer a request needs: the window counts
of the thresholds and the running top-k of the ranked lists read the same tiles.

A tile is computed by the fastest of the ways the request allows, timed on the first full tiles of
each pass from the GEMM to the last consumer, in rounds that give every worker's tiles to one way at
a time ([`recallkit.engine.lowp.Choice`][recallkit.engine.lowp.Choice]); then the pass keeps the
fastest. A call too small for that (fewer than [`lowp.AUTO_TILES`][recallkit.engine.lowp.AUTO_TILES]
full tiles) runs each pass in one way, weighed pass by pass across the calls of its shape
([`recallkit.engine.lowp.TilePass`][recallkit.engine.lowp.TilePass]): the ways are float32 (numpy's
or torch's BLAS, whichever is faster here), or a low-precision kernel of
[`recallkit.engine.lowp`][recallkit.engine.lowp] (int8 through ONNX Runtime, bfloat16) that passed
its self-check. A low-precision tile is a cascade inside the tile kernels: an item its wider window
cannot rule out is scored in float32 at once (the dot product of the float32 filter rows) and
decided by float32's window, so the counts, windows and lists are float32's and tiles of different
kinds mix freely within a pass. Rows a low-precision side cannot hold ([`lowp.holds`][lowp.holds])
run in float32.

Symmetric problems (leave-one-out on one tensor, cosine or dot, exclusions symmetric) compute
each off-diagonal tile once and read it twice, as rows and transposed: half the GEMM (the
bound does not depend on which side a rounding came from). Thresholds come first, from the
positives alone where they are few (fine labels), else from the chunk's scores kept in memory
(coarse labels), which the pass then reads instead of computing the GEMM again.

Worker threads take tiles from a shared list and keep their own per-row state, merged at the
end. BLAS, torch and ONNX Runtime run single-threaded inside the workers
([`recallkit.engine.cpu_kernels.single_threaded`][recallkit.engine.cpu_kernels.single_threaded]).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import wait
from typing import Any

import numpy as np
import torch

from recallkit.engine import cpu_kernels as kernels
from recallkit.engine import exact, filters, lowp, protocol, scratch
from recallkit.engine.consumers import (
    EXTRA,
    HEAP_K,
    Consumer,
    Top,
    Window,
    seeds_pay,
    state_bytes,
    tiles_sample,
    top_state_bytes,
    window_state_bytes,
)
from recallkit.engine.cpu_kernels import pool, single_threaded
from recallkit.engine.pairs import ChunkExclusions, LabelPositives, Pairs, globals_of, locals_of
from recallkit.engine.protocol import ChunkResult, Reducer, Request
from recallkit.engine.space import Block, Rows, Space, chunk_rows, chunks, memory_budget

__all__ = [
    "BACKEND",
    "EXTRA",
    "HEAP_K",
    "TILE",
    "Top",
    "Window",
    "block_scores",
    "first_compile",
    "precision_report",
    "single_threaded",
    "state_bytes",
    "tile_scores",
    "top_state_bytes",
    "window_state_bytes",
]
precision_report = lowp.precision_report
TILE = 768
"""The side of a tile: on 2 cores of an AMD EPYC, 0.91–0.99× the time of tiles of 1,024 in every
call measured (CUB, Cars and SOP scale, d = 128 and 512, every precision, alternated in one
process); a tile and its filter rows stay closer to the core, a call's last tiles idle less."""


# A pass's first use of numba, on 2 cores of an Intel Xeon (``benchmarks/bench_first_call.py
# --kernels``): the compile seconds of each group of kernels one call compiles together, by the
# kernel that stands for it: the rows' preparation, the exact scores and squared norms, the
# thresholds' windows, the ranked lists, both read along a tile's columns (a symmetric pass), the
# low-precision sides; and numba's start, which the first kernel loaded from the cache pays.
ROWS_SECONDS = 1.9
EXACT_SECONDS = 1.7
THRESHOLD_SECONDS = 2.4
LIST_SECONDS = 12.1
THRESHOLD_COLUMN_SECONDS = 1.5
LIST_COLUMN_SECONDS = 1.6
LOW_SECONDS = 4.2
START_SECONDS = 0.3


def first_compile(request: Request, space: Space) -> list[tuple[Any, float]]:
    """``(kernel, seconds)`` of each group of kernels the request's pass on ``space`` compiles on
    its first use ([`recallkit.engine.jit.cached`][recallkit.engine.jit.cached] tells whether the
    group is compiled)."""
    groups = [
        (filters.NUMBA_KERNELS["robust_norms"], ROWS_SECONDS),
        (exact.NUMBA_KERNELS["exact"], EXACT_SECONDS),
    ]
    columns = space.query_is_reference and space.metric != "euclidean" and space.num_query > TILE
    if request.thresholds:
        groups.append((kernels.window_rows, THRESHOLD_SECONDS))
        if columns:
            groups.append((kernels.window_cols, THRESHOLD_COLUMN_SECONDS))
    if request.lists:
        groups.append((kernels.top_rows, LIST_SECONDS))
        if columns:
            groups.append((kernels.top_cols, LIST_COLUMN_SECONDS))
    precision = space.options.precision
    weighed = precision == "auto" and lowp.full_tiles(space, TILE) >= lowp.WEIGH_TILES
    if precision in ("bfloat16", "int8") or (weighed and len(lowp.worth_timing()) > 1):
        groups.append((lowp.NUMBA_KERNELS["quantise"], LOW_SECONDS))
    return groups


def choose_product(dtype: torch.dtype, width: int) -> str:
    """The BLAS for the next float32 (or float64) tile of this width
    ([`lowp.choose_blas`][lowp.choose_blas]; torch's only while its float32 matmuls are IEEE)."""
    ieee = dtype != torch.float32 or filters.float32_matmul_rounding(torch.device("cpu")) == 0.0
    return lowp.choose_blas(dtype, width, ieee)


def tile_scores(
    qf: filters.QueryFilter, block: Block, row0: int, col0: int, out: np.ndarray
) -> None:
    """Filter scores of chunk rows ``row0:`` against block rows ``col0:`` into the tile ``out``
    (single-threaded BLAS, [`choose_product`][choose_product]; its rounding does not matter)."""
    rows, cols = out.shape
    dtype, width = qf.rows.dtype, qf.rows.shape[1]
    name = choose_product(dtype, width)
    start = time.perf_counter()
    lowp.BLAS[name](qf.rows[row0 : row0 + rows], block.gemm[col0 : col0 + cols], out)
    if rows == cols == TILE:
        lowp.choice("blas", dtype, width).record(name, time.perf_counter() - start)


#: Up to this many rows (the few a pass computes again), one product reads the block once.
FEW_ROWS = 32


def block_scores(space: Space, qf: filters.QueryFilter, block: Block) -> torch.Tensor:
    """Filter scores of a query chunk against one whole block, ``(rows, block.rows)``: numpy's
    BLAS, single-threaded, on row slices run by the worker threads (one product for up to
    [`FEW_ROWS`][FEW_ROWS] rows), into a buffer reused across chunks."""
    a = qf.rows.numpy()
    rows, cols = a.shape[0], block.rows
    size = rows * cols
    buffer = space.extra.get("buffer")
    if buffer is None or buffer.size < size or buffer.dtype != a.dtype:
        buffer = np.empty(size, dtype=a.dtype)
        space.extra["buffer"] = buffer
    out = buffer[:size].reshape(rows, cols)
    b = block.gemm.numpy().T
    with single_threaded() as threads:  # one BLAS thread: none left spinning after the call
        if rows <= FEW_ROWS:
            np.matmul(b.T, a.T, out=out.T)
            return torch.from_numpy(out)
        workers = max(1, min(threads, rows))
        bounds = np.linspace(0, rows, workers + 1).astype(int)
        jobs = [
            pool(workers).submit(np.matmul, a[lo:hi], b, out=out[lo:hi])
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


def run_tiles(
    tp: lowp.TilePass,
    excluded: ChunkExclusions,
    symmetric: bool,
    consumers: Sequence[Consumer],
    cached: torch.Tensor | None = None,
) -> list[list[Any]]:
    """One pass over the chunk's filter scores against the block, tile by tile; returns each
    worker's states (one per consumer). ``cached``: the chunk's float32 scores already computed
    (skipped pairs at ``-inf``), read instead of computing the tiles."""
    block = tp.block
    rows, cols = tp.qf.rows.shape[0], block.rows
    # A symmetric pass takes the diagonal first: each row's first tile is read along its rows.
    diagonal = [(r0, r0) for r0 in range(0, rows, TILE)] if symmetric else []
    tasks = diagonal + [
        (r0, c0)
        for r0 in range(0, rows, TILE)
        for c0 in range(0, cols, TILE)
        if not symmetric or c0 > r0
    ]
    ptr, excluded_cols = excluded.csr(block)
    code_lo, code_hi, members = excluded.code_ranges(block)
    has_codes, dtype = excluded.query_codes is not None, tp.a32.dtype
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
        buffer = scratch.empty(TILE * TILE, dtype) if source is None else None
        while True:
            with lock:
                task = None if stopped.is_set() else next(queue, None)
            if task is None:
                scratch.give(buffer)
                return mine
            r0, c0 = task
            shape = (min(TILE, rows - r0), min(TILE, cols - c0))
            timed = not (symmetric and r0 == c0)  # a diagonal tile is read by its rows only
            kind = tp.pick(timed) if source is None else tp.kinds["float32"]
            began = time.perf_counter()  # after the kind's sides are prepared (once a pass)
            if source is None:
                tile = np.ndarray(shape, lowp.tile_dtype(kind.precision, dtype), buffer)
                kind.product(r0, c0, tile)
                kernels.mask_tile(tile, r0, c0, ptr, excluded_cols)
                if has_codes:
                    kernels.mask_ranges(tile, r0, c0, code_lo, code_hi, members)
            else:
                tile = source[r0 : r0 + shape[0], c0 : c0 + shape[1]]
            for consumer, state in zip(consumers, mine, strict=True):
                consumer.rows(state, tile, r0, c0, kind)
                if symmetric and c0 != r0:
                    consumer.cols(state, tile, r0, c0, kind)
            if source is None and timed and shape == (TILE, TILE) and len(tp.names) > 1:
                tp.choice.record(kind.name, time.perf_counter() - began)

    with single_threaded() as threads:
        workers = tp.workers = max(1, min(threads, len(tasks)))
        jobs = [pool(workers).submit(work) for _ in range(workers)]
        wait(jobs)  # every worker done before the limit is given back, even on an error
        return [job.result() for job in jobs]


def _estimates(
    rows: np.ndarray, scores: np.ndarray, qf: filters.QueryFilter, block: Block, eps32
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates' exact scores as their filter scores estimate them (float64: the filter over
    ``scale_i · block scale``), their filter scores, and per chunk row the gap within which two
    could rank in the other order or tie by their exact scores: 2 ``eps32`` (1 + 2**-20)."""
    factor = qf.scale.to(torch.float64).numpy() * float(block.scale)
    estimate = scores.astype(np.float64) / factor[rows]
    gap = 2.0 * eps32.to(torch.float64).numpy() * (1.0 + 2.0**-20)
    return estimate, scores, gap


def _row_scores(space: Space, qf, block: Block, excluded: ChunkExclusions, rows) -> torch.Tensor:
    """float32 filter scores of some chunk rows against ``block`` (skipped pairs ``-inf``), for
    the rare rows whose tiled pass overflowed."""
    scores = block_scores(space, qf[torch.from_numpy(rows)], block).clone()
    _masked(scores, excluded, block, rows)
    return scores


# ----------------------------------------------------------------------------------------------
# The back end.


class _Context:
    """A chunk's inputs on the CPU: exclusions, targets, the scores kept by step 1 (a block's
    scores, or its positives' filter scores)."""

    def __init__(self, request: Request, start: int, stop: int, floors=None) -> None:
        self.request = request
        # Where each block's top-k floors start ([`CpuBackend._floors`]), shared by the call's
        # chunks: decided on the first.
        self.floors: dict[tuple[int, int], tuple[bool, bool]] = {} if floors is None else floors
        self.excluded = ChunkExclusions(request.exclusions, start, stop, torch.device("cpu"))
        self.targets = None if request.targets is None else torch.from_numpy(request.targets)
        self.cached: dict[int, torch.Tensor] = {}
        self.scored: dict[int, tuple[np.ndarray, ...]] = {}  # label scores by block, from step 1
        self.estimates = False  # the lists' scores may be estimates ([`CpuBackend._ranked`])


class CpuBackend(protocol.Pipeline):
    """Requests on CPU tensors: numba tiles (module docstring), in the shared chunk pipeline
    ([`recallkit.engine.protocol.Pipeline`][recallkit.engine.protocol.Pipeline])."""

    name = "numba"
    score_bytes = 0  # tiles: a chunk holds its scores and nothing per score beside them
    segment_best = staticmethod(kernels.segment_best)  # one pass each, not torch's sorts
    split_tail = staticmethod(kernels.split_tail)

    def _filter(
        self, space: Space, chunk: Rows, block: Block, start: int, stop: int
    ) -> filters.QueryFilter:
        if space.own_rows(block):
            own = space.extra.get("own_filter")
            if own is None or own[0] is not block:
                own = (block, filters.own_filter(block.gemm, block.scale, space.metric, True))
                space.extra["own_filter"] = own
            return own[1][slice(start, stop)]
        return filters.query_filter(
            chunk.raw, chunk.sq, chunk.norm, space.metric, block.scale, block.gemm.dtype, True
        )

    def _bound(self, space: Space, qf: filters.QueryFilter, block: Block) -> torch.Tensor:
        return filters.error_bound(
            filters.Product.plain(qf.rows.dtype),
            qf,
            block.max_norm,
            space.dim,
            block.scale,
            space.metric,
        )

    def exact(
        self, space: Space, chunk: Rows, block: Block, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        return exact.exact_numba(
            chunk.raw,
            chunk.aux(space.metric),
            block.data,
            block.aux(space.metric),
            rows,
            cols,
            space.metric,
        )

    @staticmethod
    def exact_is_cheaper(positives: Any, block: Block, start: int, stop: int) -> bool:
        """Whether scoring the chunk's positives exactly costs less than a pass (few positives
        per query: fine labels, listed ground truth)."""
        if isinstance(positives, Pairs):
            return True
        return positives.pair_count(block, start, stop) * 16 <= (stop - start) * block.rows

    def candidates(self, space, chunk, block, i, start, stop, ctx):
        """Step 1's pairs: listed positives less the skipped ones; label positives within the
        bound of their row's best filter score, from their own filter scores (fine labels) or
        from the block's scores, kept for the pass (coarse labels)."""
        positives, excluded = ctx.request.positives, ctx.excluded
        if isinstance(positives, Pairs):
            rows, glob = positives.expand(start, stop, torch.device("cpu"))
            local, inside = locals_of(block, glob)
            inside &= ~excluded.excluded(rows, local.clamp(0, max(block.rows - 1, 0)), block)
            rows, local = rows[inside], local[inside]
        else:
            qf = self._filter(space, chunk, block, start, stop)
            eps = self._bound(space, qf, block)
            lo, hi = positives.ranges(block, start, stop)
            members = positives.groups(block).members
            if self.exact_is_cheaper(positives, block, start, stop):
                ptr, cols = excluded.csr(block)
                scored, (rows, local) = kernels.label_scores(
                    qf.rows,
                    block.gemm,
                    positives.query_codes[start:stop],
                    lo,
                    hi,
                    members,
                    ptr,
                    cols,
                    excluded.codes(block),
                    eps,
                )
                if block is space.single:  # the pass's known items ([`_known`][_known])
                    ctx.scored[i] = scored
            else:
                scores = block_scores(space, qf, block)
                _masked(scores, excluded, block)
                rows, local = kernels.positive_window(scores, lo, hi, members, eps)
                if space.single is not None:
                    ctx.cached[i] = scores
        return rows, local, torch.ones_like(rows, dtype=torch.bool), torch.zeros((), dtype=bool)

    def _floors(
        self, positives: Any, tp: lowp.TilePass, ks: np.ndarray, start: int, stop: int, ctx
    ) -> tuple[bool, bool]:
        """Where the block's top-k floors start (properties of the embeddings and labels, decided
        on the call's first chunk for all): whether its positives are offered before the pass
        ([`seeds_pay`][recallkit.engine.consumers.seeds_pay]), whether a tile is taken for a
        sample ([`tiles_sample`][recallkit.engine.consumers.tiles_sample])."""
        key = (tp.block.offset, tp.block.rows)
        if key not in ctx.floors:
            seeds = seeds_pay(tp, positives, ks, start, stop)
            ctx.floors[key] = (seeds, tiles_sample(positives, tp.block, TILE))
        return ctx.floors[key]

    def _known(self, positives: Any, tp: lowp.TilePass, i: int, start: int, stop: int, ctx) -> Any:
        """[`Top`][recallkit.engine.consumers.Top]'s ``known`` where they pay
        ([`_floors`][recallkit.engine.cpu.CpuBackend._floors]): the positives' scores (step 1's,
        or [`kernels.label_scores`][kernels.label_scores]'s), labels on the pass's one block, few
        enough to score one by one (else ``None``)."""
        block, qf, excluded = tp.block, tp.qf, ctx.excluded
        labels = isinstance(positives, LabelPositives) and block is tp.space.single
        if not labels or not self.exact_is_cheaper(positives, block, start, stop):
            return None
        scored = ctx.scored.pop(i, None)
        if scored is None:
            lo, hi = positives.ranges(block, start, stop)
            ptr, cols = excluded.csr(block)
            scored, _ = kernels.label_scores(
                qf.rows,
                block.gemm,
                positives.query_codes[start:stop],
                lo,
                hi,
                positives.groups(block).members,
                ptr,
                cols,
                excluded.codes(block),
            )
        return scored, (positives.query_codes[start:stop], positives.block_codes(block))

    def scan(self, space, chunk, block, i, start, stop, ctx, best, where, ks) -> protocol.Scan:
        """The block's tile pass ([`run_tiles`][run_tiles]): one
        [`Window`][recallkit.engine.consumers.Window] and one
        [`Top`][recallkit.engine.consumers.Top] fed by the same tiles."""
        request, excluded, cached = ctx.request, ctx.excluded, i in ctx.cached
        qf = self._filter(space, chunk, block, start, stop)
        symmetric = (  # a window of one slot reads a tile's columns too
            not cached
            and (not request.thresholds or request.slots() == 1)
            and self._symmetric(space, qf, block, excluded)
        )
        tp = lowp.TilePass(
            space,
            qf,
            block,
            start if space.own_rows(block) else 0,
            symmetric,
            self._bound(space, qf, block),
            lowp.tile_kinds(space, qf, block, cached, TILE),
            lambda r0, c0, out: tile_scores(qf, block, r0, c0, out),
            repeated=lowp.repeated(space, TILE, symmetric, best is not None, ks is not None),
        )
        window = top = None
        if best is not None:
            window = Window(filters.scaled_centre(best, qf, block.scale), tp)
        if ks is not None:
            lengths = np.minimum(ks.numpy(), block.rows)
            seeds, sampled = self._floors(request.positives, tp, lengths, start, stop, ctx)
            known = self._known(request.positives, tp, i, start, stop, ctx) if seeds else None
            top = Top(lengths, tp, torch.get_num_threads(), known, sampled)
        consumers = [x for x in (window, top) if x is not None]
        began = time.perf_counter()
        states = run_tiles(tp, excluded, symmetric, consumers, ctx.cached.get(i))
        per_consumer = list(zip(*states, strict=True)) if states else [[]] * len(consumers)

        def rescore(rows: np.ndarray) -> torch.Tensor:
            return _row_scores(space, qf, block, excluded, rows)

        out = protocol.Scan(None, None, torch.zeros((), dtype=torch.bool))
        if window is not None:
            above, wr, wt, wj = window.finish(list(per_consumer[0]), rescore)
            out.window = tuple(torch.from_numpy(t) for t in (above, wr, wj, wt))
        if top is not None:
            estimate = ctx.estimates and block is space.single
            found = top.finish(rescore, block.rows, estimate)
            tr, tj = found[0], found[1]
            out.top = (torch.from_numpy(tr), torch.from_numpy(tj), None, 0)
            if estimate:  # and, read for relevance alone, the codes that give it
                p = ctx.request.positives
                by = ctx.request.by_relevance and isinstance(p, LabelPositives)
                codes = (p.query_codes[start:stop], p.block_codes(block)) if by else None
                out.estimates = (*_estimates(tr, found[2], qf, block, tp.eps32), codes)
        tp.passed(time.perf_counter() - began)
        return out

    def _ranked(self, space, chunk, block, scan, c, ks) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's ranked lists (as every back end ranks them); with the scan's estimates,
        only the candidates within twice the filter's bound of the next or the previous one of
        their row are scored again, in float64 summed in any order
        ([`exact.close_scores`][exact.close_scores]), and of those only the ones within their
        bounds of a neighbour exactly: the others rank by their filter or float64 scores, in the
        same order ([`kernels.order_rows`][kernels.order_rows],
        [`kernels.split_runs`][kernels.split_runs], [`kernels.rank_rows`][kernels.rank_rows]);
        for lists read by relevance alone, not the runs of one relevance
        ([`kernels.order_rows`][kernels.order_rows]'s ``relevance``).
        """
        if scan.estimates is None:
            return super()._ranked(space, chunk, block, scan, c, ks)
        rows, local = scan.top[0], scan.top[1]
        value, filt, gap, codes = scan.estimates
        glob = globals_of(block, local).numpy()
        starts = np.zeros(c + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows.numpy(), minlength=c), out=starts[1:])
        relevance = None if codes is None else (local.numpy(), *codes)  # one relevance: settled
        order, near = kernels.order_rows(starts, filt, gap, relevance)
        if near.any():  # closer scores first, then the exact scores of those they cannot rank
            pick = np.flatnonzero(near)
            r, j = rows.numpy()[pick], local.numpy()[pick]
            args = (chunk.raw, block.data, chunk.aux(space.metric), block.aux(space.metric))
            closer, bound = exact.close_scores(*args, chunk.norm, block.norm, r, j, space.metric)
            value[pick] = closer
            spread = np.zeros_like(value)
            spread[pick] = bound
            tied = kernels.split_runs(starts, order, near, value, glob, spread)
            if tied.any():
                pick = torch.from_numpy(tied)
                value[tied] = self.exact(space, chunk, block, rows[pick], local[pick]).numpy()
        k = ks.numpy()
        parts = kernels.rank_rows(starts, order, value, glob, near, k, int(k.max(initial=0)))
        index, score, tail_i, tail_v = (torch.from_numpy(t) for t in parts)
        if tail_i.shape[1] == 0:
            return index, score
        return torch.cat([index, tail_i], 1), torch.cat([score, tail_v], 1)

    def rank(self, rows, glob, scores, top, c, ks) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidates' lists (``rows`` sorted), each ``(top-k, tail)`` side by side."""
        kmax = int(ks.max()) if len(ks) else 0
        index, value, tail_i, tail_v = kernels.segment_top(rows, glob, scores, ks, kmax)
        if tail_i.shape[1] == 0:  # no tail: the lists as they are, not a copy
            return index, value
        return torch.cat([index, tail_i], 1), torch.cat([value, tail_v], 1)

    def _chunk(self, space, chunk, start, stop, request, reducer, floors=None) -> ChunkResult:
        ctx = _Context(request, start, stop, floors)
        ctx.estimates = not request.exact_scores and reducer is None
        fields, _ = self.chunk_fields(space, chunk, start, stop, request, reducer, ctx)
        out = {n: v if n.startswith(("top_", "tail_")) else v.numpy() for n, v in fields.items()}
        return ChunkResult(start, stop, **out)

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
        return n * state_bytes(request) <= memory_budget(space.options, space.device)

    def run(self, space: Space, request: Request, size: int | None) -> Iterator[ChunkResult]:
        rows = chunk_rows(space, size, state_bytes(request), self.score_bytes)
        if self._one_chunk(space, request, size):
            rows = max(space.num_query, 1)
        floors: dict = {}  # the call's, shared by its chunks
        for start, stop in chunks(space.num_query, rows):
            chunk = space.chunk(start, stop)
            yield self._chunk(space, chunk, start, stop, request, None, floors)

    def run_chunk(
        self, space: Space, chunk: Rows, request: Request, reducer: Reducer | None
    ) -> ChunkResult:
        return self._chunk(space, chunk, 0, chunk.raw.shape[0], request, reducer)


BACKEND = CpuBackend()
