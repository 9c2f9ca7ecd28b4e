"""The engine's torch path: every per-chunk step on the device the chunk runs on.

Where the torch kernels run (CUDA; on the CPU only when tests force them), the two steps of
:mod:`recallkit._engine` (each slot's threshold item, then the count of candidates above it) and
the exact top-k lists run as torch operations on ``space.device`` whose shapes the host knows in
advance, so that a chunk needs no host synchronisation:

* the per-call inputs (exclusion pairs, positives, targets, k per query) are put on the device
  once per call; chunks slice them with bounds the host already holds;
* a window is collected into a fixed capacity (``torch.nonzero_static``, or the ``width`` best of
  a ``topk``), padded with ``-1``, and a flag on the device records whether the capacity may have
  been too small; padding pairs score ``-inf`` exactly and count for nothing;
* counts and merges are scatter reductions and sorts into tensors of known shape.

A call computes all its chunks this way, then moves the results and the flags to the host in one
transfer; a chunk whose flag is set is computed again with exact sizes (``torch.nonzero``, which
synchronises), so no result depends on a capacity. Host synchronisations are a constant number
per call (ranked lists: per batch of lists held within the memory budget), and what comes back
is the ranks or the lists, not the windows. Calls that combine partial results across processes
(``reduce``) settle each step's flag before reducing: a constant number per chunk.

Low precision is a cascade: the float16/bfloat16 filter's window (wide: about 2e-3 and 1.6e-2
of the scores) is scored again in float32 (the float32 dot product of the same filter rows, with
the float32 error bound, any summation order), and only the float32 window is scored exactly in
float64. Both filters bound the same scaled exact score, so every decision is the one float32
alone would make, and the float64 work is float32's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from recallkit import _engine, _kernels

# Window slots per query row (and slot), shared by the chunk's rows, by the first filter's type:
# a lower precision has a wider window. A window that does not fit is computed again exactly.
WINDOW_ROWS = {torch.float64: 8, torch.float32: 8, torch.float16: 64, torch.bfloat16: 256}
# Slots per row for the pairs scored exactly after the float32 stage of the cascade, and beyond
# the k best for ranked lists.
EXACT_ROWS = 8
# A ranked list's ``topk`` width beyond k, by the filter's type.
TOP_EXTRA = {torch.float64: 32, torch.float32: 32, torch.float16: 128, torch.bfloat16: 512}
MIN_CAPACITY = 256
_KEY = 2**40  # (row, column) keys: row * _KEY + column


def applies(space: _engine.Space, backend: str | None) -> bool:
    """Whether a call runs here: wherever the torch kernels run rather than numba's."""
    return not _kernels._use_numba(space.query.raw, backend)


def _capacity(rows: int, per_row: int) -> int:
    return max(MIN_CAPACITY, rows * per_row)


def _no_flag(device: torch.device) -> torch.Tensor:
    return torch.zeros((), dtype=torch.bool, device=device)


def _compact(mask: torch.Tensor, capacity: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the True entries of ``mask``, row-major, as an ``(p, mask.dim())`` tensor.

    With a ``capacity``: exactly ``capacity`` rows (no synchronisation), padded with ``-1``, and a
    device flag set when some may have been left out (the capacity is full). ``None``: all of
    them (``torch.nonzero``: one synchronisation) and a clear flag.
    """
    if capacity is None:
        return torch.nonzero(mask), _no_flag(mask.device)
    capacity = min(capacity, mask.numel())
    found = torch.nonzero_static(mask, size=capacity, fill_value=-1)
    if capacity == mask.numel():
        return found, _no_flag(mask.device)
    if capacity == 0:
        return found, mask.any()
    return found, found[-1, 0] >= 0


def _count_into(size: int, index: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """How many set ``flags`` fall on each of ``size`` slots (``index`` in range)."""
    out = torch.zeros(size, dtype=torch.int64, device=flags.device)
    return out.scatter_add_(0, index, flags.to(torch.int64))


class _DevicePairs:
    """Per-query pairs (CSR) with their columns on the device and the row pointers on the host."""

    def __init__(self, pairs: _engine.Pairs, device: torch.device) -> None:
        self.indptr = pairs.indptr.numpy()
        self.counts = pairs.counts().to(device)
        self.indices = pairs.indices.to(device)

    def chunk(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows local to the chunk, columns)`` of queries ``start:stop``."""
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        rows = torch.repeat_interleave(
            torch.arange(stop - start, device=self.indices.device),
            self.counts[start:stop],
            output_size=hi - lo,
        )
        return rows, self.indices[lo:hi]


class _Excluded:
    """A chunk's excluded ``(row, global column)`` pairs, on the device."""

    def __init__(self, rows: torch.Tensor, cols: torch.Tensor) -> None:
        self.rows = rows
        self.cols = cols
        self.keys = torch.sort(rows * _KEY + cols).values

    def mask(self, scores: torch.Tensor, block: _engine.Block) -> torch.Tensor:
        """``scores`` with the excluded pairs of ``block`` at ``-inf`` (a scatter-min: pairs of
        other blocks scatter ``+inf``, which changes nothing)."""
        if self.rows.numel() == 0:
            return scores
        scores = scores.contiguous()
        local, inside = block.locals_of(self.cols)
        flat = self.rows * block.rows + local.clamp(0, max(block.rows - 1, 0))
        fill = torch.where(inside, -torch.inf, torch.inf).to(scores.dtype)
        scores.view(-1).scatter_reduce_(0, flat, fill, reduce="amin")
        return scores

    def contains(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Which of the pairs ``(rows, global cols)`` are excluded."""
        if self.keys.numel() == 0:
            return torch.zeros(rows.shape, dtype=torch.bool, device=rows.device)
        key = rows * _KEY + cols
        pos = torch.searchsorted(self.keys, key).clamp(max=self.keys.numel() - 1)
        return self.keys[pos] == key


class _DeviceLabels:
    """Label positives on the device: per block, each query's range of positives in the block's
    members grouped by code (and the codes themselves, for the filter's window)."""

    def __init__(self, positives: _engine.LabelPositives, device: torch.device) -> None:
        self.positives = positives
        self.device = device
        self.query_codes = torch.from_numpy(positives.query_codes).to(device)
        self._blocks: dict[tuple[int, int], tuple] = {}

    def _block(self, block: _engine.Block) -> tuple:
        key = (block.offset, block.rows)
        if key not in self._blocks:
            groups = self.positives._group(block.offset, block.rows)
            lo, hi = groups.ranges(self.positives.query_codes)
            own = self.positives.reference_codes[block.offset : block.offset + block.rows]

            def put(a: np.ndarray) -> torch.Tensor:
                return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(self.device)

            self._blocks[key] = (lo, hi, put(lo), put(hi), put(groups.members), put(own))
        return self._blocks[key]

    def pairs(
        self, block: _engine.Block, start: int, stop: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every positive pair of queries ``start:stop`` in ``block``: ``(rows, local cols)``."""
        lo, hi, lo_d, hi_d, members, _ = self._block(block)
        total = int((hi[start:stop] - lo[start:stop]).sum())
        counts = hi_d[start:stop] - lo_d[start:stop]
        rows = torch.repeat_interleave(
            torch.arange(stop - start, device=self.device), counts, output_size=total
        )
        begin = torch.cumsum(counts, 0) - counts
        shift = torch.repeat_interleave(begin - lo_d[start:stop], counts, output_size=total)
        return rows, members[torch.arange(total, device=self.device) - shift]

    def codes(self, block: _engine.Block) -> torch.Tensor:
        return self._block(block)[5]


class _Inputs:
    """A call's inputs on the device, put there once: exclusions, positives, the queries' filter
    scale (dot, euclidean) and the ranked lists' k."""

    def __init__(
        self,
        space: _engine.Space,
        exclusions: _engine.Pairs | None,
        positives: _engine.Positives | None = None,
        query_sq: torch.Tensor | None = None,
    ) -> None:
        self.device = space.device
        self.excluded = None if exclusions is None else _DevicePairs(exclusions, space.device)
        self.positives = positives
        self.labels = None
        self.listed = None
        if isinstance(positives, _engine.LabelPositives):
            self.labels = _DeviceLabels(positives, space.device)
        elif positives is not None:
            self.listed = _DevicePairs(positives, space.device)
        # One power-of-two scale for all the call's queries (any such scale keeps the filter's
        # bound; the exact scores decide): no per-chunk maximum to read back.
        self.scale = None
        if space.metric != "cosine" and query_sq is not None and query_sq.numel():
            self.scale = _engine._pow2_scale(query_sq)

    def excluded_in(self, start: int, stop: int) -> _Excluded:
        if self.excluded is None:
            empty = torch.empty(0, dtype=torch.int64, device=self.device)
            return _Excluded(empty, empty)
        return _Excluded(*self.excluded.chunk(start, stop))


@dataclass
class _Pass:
    """A chunk's filter scores against one block, with their error bound; with a low-precision
    filter, also the bound of the float32 re-scoring (the cascade)."""

    scores: torch.Tensor
    qf: _engine.QueryFilter
    eps: torch.Tensor
    eps32: torch.Tensor | None
    first: torch.dtype

    @property
    def capacity(self) -> int:
        return WINDOW_ROWS[self.first]


def _filter_pass(
    space: _engine.Space,
    inputs: _Inputs,
    chunk: _engine.Rows,
    block: _engine.Block,
    excluded: _Excluded,
    start: int,
    stop: int,
) -> _Pass:
    qf = _engine._filter(space, chunk, block, start, stop, inputs.scale)
    scores = excluded.mask(_engine.block_scores(space, qf, block), block)
    eps = _engine.error_bound(space, qf, block, on_device=True)
    if not qf.use_low:
        return _Pass(scores, qf, eps, None, scores.dtype)
    plain = dataclasses.replace(qf, use_low=False)
    eps32 = _engine.error_bound(space, plain, block, on_device=True)
    return _Pass(scores, qf, eps, eps32, block.low.dtype)


def _refine(p: _Pass, block: _engine.Block, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Float32 filter scores of the pairs ``(rows, local cols)``: the same filter rows as the
    low-precision GEMM, multiplied in float32. Padding rows (``-1``) give ``-inf``."""
    q, g = p.qf.rows, block.gemm
    out = torch.empty(rows.shape[0], dtype=g.dtype, device=g.device)
    step = max(1024, (1 << 24) // max(g.shape[1], 1))
    for begin in range(0, rows.shape[0], step):
        r = rows[begin : begin + step]
        c = cols[begin : begin + step]
        value = (q[r.clamp(min=0)] * g[c.clamp(min=0)]).sum(dim=1)
        out[begin : begin + step] = torch.where(r >= 0, value, -torch.inf)
    return out


def _exact(
    space: _engine.Space,
    chunk: _engine.Rows,
    block: _engine.Block,
    rows: torch.Tensor,
    cols: torch.Tensor,
    backend: str | None,
) -> torch.Tensor:
    """Exact scores of ``(chunk row, local col)`` pairs on the device; padding rows give -inf."""
    cols = cols.clamp(0, max(block.rows - 1, 0))
    return _engine._exact(space, chunk, block, rows, cols, backend)


def _best_of_pairs(
    space: _engine.Space,
    chunk: _engine.Rows,
    block: _engine.Block,
    rows: torch.Tensor,
    local: torch.Tensor,
    valid: torch.Tensor,
    backend: str | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each chunk row's best valid pair by exact score, then lower global index:
    ``(score, global index)``, ``(-inf, SENTINEL)`` where it has none."""
    c = chunk.raw.shape[0]
    dev = chunk.raw.device
    rows = torch.where(valid, rows, -1)
    exact = _exact(space, chunk, block, rows, local, backend)
    glob = block.globals_of(local.clamp(0, max(block.rows - 1, 0)))
    row = rows.clamp(min=0)
    best = torch.full((c,), -torch.inf, dtype=torch.float64, device=dev)
    best = best.scatter_reduce(0, row, exact, reduce="amax")
    at_best = valid & (exact == best[row])
    where = torch.full((c,), _engine.SENTINEL, dtype=torch.int64, device=dev)
    candidate = torch.where(at_best, glob, _engine.SENTINEL)
    return best, where.scatter_reduce(0, row, candidate, reduce="amin")


def _positive_candidates(
    p: _Pass,
    block: _engine.Block,
    labels: _DeviceLabels,
    start: int,
    stop: int,
    exact_sizes: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Positives whose filter score is within twice the bound of the row's best positive's (the
    only ones whose exact score can be the best): ``(rows, local cols, overflow)``, padded."""
    s = p.scores
    c = s.shape[0]
    mask = labels.codes(block)[None, :] == labels.query_codes[start:stop, None]
    masked = torch.where(mask, s, -torch.inf)
    top = masked.amax(dim=1).to(torch.float64)
    floor = _kernels.round_down(top - 2.0 * p.eps, s.dtype)
    keep = (masked >= floor[:, None]) & torch.isfinite(masked)
    found, over = _compact(keep, None if exact_sizes else _capacity(c, p.capacity))
    rows, local = found[:, 0], found[:, 1]
    if p.eps32 is None:
        return rows, local, over
    # Cascade: the same selection among these candidates with their float32 scores.
    f32 = _refine(p, block, rows, local)
    row = rows.clamp(min=0)
    top32 = torch.full((c,), -torch.inf, dtype=torch.float64, device=s.device)
    top32 = top32.scatter_reduce(0, row, f32.to(torch.float64), reduce="amax")
    floor32 = _kernels.round_down(top32 - 2.0 * p.eps32, f32.dtype)
    keep32 = (rows >= 0) & (f32 >= floor32[row]) & torch.isfinite(f32)
    picked, over32 = _compact(keep32, None if exact_sizes else _capacity(c, EXACT_ROWS))
    at = picked[:, 0]
    rows = torch.where(at >= 0, rows[at.clamp(min=0)], -1)
    return rows, local[at.clamp(min=0)], over | over32


def _thresholds(
    space: _engine.Space,
    inputs: _Inputs,
    chunk: _engine.Rows,
    start: int,
    stop: int,
    targets: torch.Tensor | None,
    excluded: _Excluded,
    passes: dict[int, _Pass],
    backend: str | None,
    exact_sizes: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Step 1 in this process: each slot's threshold item ``(exact score, global index)``, and
    the overflow flag."""
    c = stop - start
    dev = space.device
    over = _no_flag(dev)
    if targets is not None:
        g = targets.shape[1]
        best = torch.full(targets.shape, -torch.inf, dtype=torch.float64, device=dev)
        where = torch.where(targets >= 0, targets, _engine.SENTINEL)
        slots = torch.arange(c, device=dev)[:, None].expand(c, g)
        for block in space.blocks():
            local, inside = block.locals_of(targets.clamp(min=0))
            inside = inside & (targets >= 0)
            rows = torch.where(inside, slots, -1).reshape(-1)
            exact = _exact(space, chunk, block, rows, local.reshape(-1), backend)
            best = torch.where(inside, exact.view(c, g), best)
        return best, where, over
    best = torch.full((c,), -torch.inf, dtype=torch.float64, device=dev)
    where = torch.full((c,), _engine.SENTINEL, dtype=torch.int64, device=dev)
    for i, block in enumerate(space.blocks()):
        if inputs.listed is not None or _engine._exact_is_cheaper(
            inputs.positives, block, start, stop
        ):
            # Few positives (fine labels, listed ground truth): score them all exactly.
            if inputs.listed is not None:
                rows, glob = inputs.listed.chunk(start, stop)
                local, valid = block.locals_of(glob)
            else:
                rows, local = inputs.labels.pairs(block, start, stop)
                glob = block.globals_of(local)
                valid = torch.ones_like(rows, dtype=torch.bool)
            valid = valid & ~excluded.contains(rows, glob)
        else:
            p = _filter_pass(space, inputs, chunk, block, excluded, start, stop)
            if space.single is not None:
                passes[i] = p
            rows, local, flag = _positive_candidates(
                p, block, inputs.labels, start, stop, exact_sizes
            )
            over = over | flag
            valid = rows >= 0
        b, w = _best_of_pairs(space, chunk, block, rows, local, valid, backend)
        best, where = _engine.merge_best(best, where, b, w)
    return best[:, None], where[:, None], over


def _counts(
    space: _engine.Space,
    inputs: _Inputs,
    chunk: _engine.Rows,
    start: int,
    stop: int,
    best: torch.Tensor,
    where: torch.Tensor,
    excluded: _Excluded,
    passes: dict[int, _Pass],
    backend: str | None,
    exact_sizes: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step 2 in this process: per slot, how many candidates rank above the threshold item."""
    c, g = best.shape
    total = torch.zeros((c, g), dtype=torch.int64, device=space.device)
    over = _no_flag(space.device)
    for i, block in enumerate(space.blocks()):
        p = passes.get(i) or _filter_pass(space, inputs, chunk, block, excluded, start, stop)
        s = p.scores
        centre = best * (p.qf.scale * block.scale)
        lo, hi = _engine._bounds(centre, p.eps[:, None], s.dtype)
        found = []
        for t in range(g):
            total[:, t] += (s > hi[:, t : t + 1]).sum(dim=1)
            inside = (s >= lo[:, t : t + 1]) & (s <= hi[:, t : t + 1])
            pairs, flag = _compact(inside, None if exact_sizes else _capacity(c, p.capacity))
            over = over | flag
            found.append(torch.cat([pairs, torch.full_like(pairs[:, :1], t)], dim=1))
        found = torch.cat(found)
        rows, local, slot = found[:, 0], found[:, 1], found[:, 2]
        if p.eps32 is not None:
            # Cascade: the low-precision window scored in float32; certain ones counted, the
            # float32 window scored exactly.
            lo32, hi32 = _engine._bounds(centre, p.eps32[:, None], torch.float32)
            f32 = _refine(p, block, rows, local)
            at = rows.clamp(min=0) * g + slot
            lo_at, hi_at = lo32.reshape(-1)[at], hi32.reshape(-1)[at]
            valid = rows >= 0
            total += _count_into(c * g, at, valid & (f32 > hi_at)).view(c, g)
            keep = valid & (f32 >= lo_at) & (f32 <= hi_at)
            picked, flag = _compact(keep, None if exact_sizes else _capacity(c * g, EXACT_ROWS))
            over = over | flag
            sel = picked[:, 0]
            rows = torch.where(sel >= 0, rows[sel.clamp(min=0)], -1)
            local, slot = local[sel.clamp(min=0)], slot[sel.clamp(min=0)]
        exact = _exact(space, chunk, block, rows, local, backend)
        glob = block.globals_of(local.clamp(0, max(block.rows - 1, 0)))
        at = rows.clamp(min=0) * g + slot
        b, w = best.reshape(-1)[at], where.reshape(-1)[at]
        beats = (rows >= 0) & ((exact > b) | ((exact == b) & (glob < w)))
        total += _count_into(c * g, at, beats).view(c, g)
    return total, over


Reducer = Callable[[str, torch.Tensor], torch.Tensor]


def _chunk_ranks(
    space: _engine.Space,
    inputs: _Inputs,
    chunk: _engine.Rows,
    start: int,
    stop: int,
    targets: torch.Tensor | None,
    backend: str | None,
    exact_sizes: bool,
    reduce: Reducer | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ranks of the chunk's threshold items ``(c, g)`` on the device, and the overflow flag.

    With ``reduce`` (several processes), each step's flag is settled before its reduction, so
    the returned ranks are final and the flag is clear.
    """
    excluded = inputs.excluded_in(start, stop)
    passes: dict[int, _Pass] = {}
    args = (space, inputs, chunk, start, stop)
    best, where, over = _thresholds(*args, targets, excluded, passes, backend, exact_sizes)
    if reduce is not None:
        if bool(over):
            best, where, _ = _thresholds(*args, targets, excluded, passes, backend, True)
        local_best, best = best, reduce("max", best)
        if targets is None:
            # Among processes holding a positive with the global best score, the lowest index.
            keep = (local_best == best) & torch.isfinite(best)
            where = reduce("min", torch.where(keep, where, _engine.SENTINEL))
    total, flag = _counts(*args, best, where, excluded, passes, backend, exact_sizes)
    over = over | flag
    if reduce is not None:
        if bool(flag):
            total, _ = _counts(*args, best, where, excluded, passes, backend, True)
        total, over = reduce("sum", total), _no_flag(space.device)
    return torch.where(torch.isfinite(best), total, -1), over


def threshold_ranks(
    space: _engine.Space,
    chunk: _engine.Rows,
    start: int,
    stop: int,
    exclusions: _engine.Pairs | None,
    positives: _engine.Positives | None,
    targets: torch.Tensor | None,
    reduce: Reducer,
    backend: str | None,
) -> torch.Tensor:
    """:func:`recallkit._engine.threshold_ranks` for one chunk on the device (CPU result)."""
    inputs = _Inputs(space, exclusions, positives, chunk.sq)
    if targets is not None:
        targets = targets.to(space.device)
    ranks, _ = _chunk_ranks(
        space, inputs, chunk, start, stop, targets, backend, False, reduce=reduce
    )
    return ranks.cpu()


def _settled(
    space: _engine.Space,
    results: list[tuple[int, int, torch.Tensor, torch.Tensor]],
    redo: Callable[[int, int], torch.Tensor],
    width: int,
) -> np.ndarray:
    """The chunks' ranks on the host, in one transfer with their flags; flagged chunks are
    computed again with exact sizes."""
    if not results:
        return np.empty((0, width), dtype=np.int64)
    flat = [r.reshape(-1) for _, _, r, _ in results]
    flags = torch.stack([o for _, _, _, o in results]).to(torch.int64)
    host = torch.cat([*flat, flags]).cpu().numpy()
    rows = results[-1][1]
    out = host[: rows * width].reshape(rows, width).copy()
    for (start, stop, _, _), flag in zip(results, host[rows * width :], strict=True):
        if flag:
            out[start:stop] = redo(start, stop).cpu().numpy()
    return out


def first_hit_ranks(
    space: _engine.Space,
    positives: _engine.Positives,
    exclusions: _engine.Pairs | None,
    size: int,
    backend: str | None,
) -> np.ndarray:
    """:func:`recallkit._engine.first_hit_ranks` on the device: one transfer per call."""
    inputs = _Inputs(space, exclusions, positives, space.query.sq)

    def run(start: int, stop: int, exact_sizes: bool) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = space.chunk(start, stop)
        return _chunk_ranks(space, inputs, chunk, start, stop, None, backend, exact_sizes)

    results = [(a, b, *run(a, b, False)) for a, b in _engine.chunks(space.num_query, size)]
    return _settled(space, results, lambda a, b: run(a, b, True)[0], 1)[:, 0]


def slot_ranks(
    space: _engine.Space,
    targets: np.ndarray,
    exclusions: _engine.Pairs | None,
    size: int,
    backend: str | None,
) -> np.ndarray:
    """:func:`recallkit._engine.slot_ranks` on the device: one transfer per call."""
    inputs = _Inputs(space, exclusions, None, space.query.sq)
    all_targets = torch.from_numpy(np.ascontiguousarray(targets, dtype=np.int64))
    on_device = all_targets.to(space.device)

    def run(start: int, stop: int, exact_sizes: bool) -> tuple[torch.Tensor, torch.Tensor]:
        chunk, t = space.chunk(start, stop), on_device[start:stop]
        return _chunk_ranks(space, inputs, chunk, start, stop, t, backend, exact_sizes)

    results = [(a, b, *run(a, b, False)) for a, b in _engine.chunks(space.num_query, size)]
    ranks = _settled(space, results, lambda a, b: run(a, b, True)[0], targets.shape[1])
    return np.where(targets >= 0, ranks, -1)


def _top_floor(
    values: torch.Tensor, kb: torch.Tensor, eps: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """Per row, the lowest filter score an item of the exact top-``kb`` can have: the k-th best
    filter score (``values`` sorted, best first) minus twice the bound, rounded down; every
    finite score where fewer than k are finite, ``+inf`` where k = 0."""
    kth = values.gather(1, (kb.clamp(min=1) - 1)[:, None])[:, 0].to(torch.float64)
    lo = torch.where(torch.isneginf(kth), torch.finfo(dtype).min, kth - 2.0 * eps)
    lo, _ = _engine._bounds(lo[:, None], torch.zeros_like(eps)[:, None], dtype)
    return torch.where(kb <= 0, torch.inf, lo[:, 0])


def _ranked_block(
    space: _engine.Space,
    chunk: _engine.Rows,
    block: _engine.Block,
    p: _Pass,
    ks: torch.Tensor,
    ks_host: np.ndarray,
    backend: str | None,
    exact_sizes: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact top-``ks[i]`` of the chunk in one block: ``(global index, score)`` of width
    ``min(max ks, block.rows)`` (``-1``/``-inf`` padding), and the overflow flag."""
    s = p.scores
    c, cols = s.shape[0], block.rows
    kk = min(int(ks_host.max()), cols)
    kb = ks.clamp(max=cols)
    width = min(cols, kk + TOP_EXTRA[p.first])
    values, idx = torch.topk(s, width, dim=1)
    lo = _top_floor(values, kb, p.eps, s.dtype)
    over = _no_flag(s.device)
    if exact_sizes:
        need = int((s >= lo[:, None]).sum(dim=1).max())
        if need > width:
            width = min(cols, need)
            values, idx = torch.topk(s, width, dim=1)
    elif width < cols:
        over = ((kb > 0) & (values[:, -1] >= lo)).any()
    keep = values >= lo[:, None]
    if p.eps32 is not None:
        # Cascade: the window's float32 scores give the float32 floor and window.
        rows = torch.arange(c, device=s.device)[:, None].expand(c, width)
        rows = torch.where(keep, rows, -1).reshape(-1)
        f32 = _refine(p, block, rows, idx.reshape(-1)).view(c, width)
        top32 = torch.topk(f32, kk, dim=1).values
        keep = keep & (f32 >= _top_floor(top32, kb, p.eps32, f32.dtype)[:, None])
    capacity = int(np.minimum(ks_host, cols).sum()) + c * EXACT_ROWS
    picked, flag = _compact(keep, None if exact_sizes else max(MIN_CAPACITY, capacity))
    rows, at = picked[:, 0], picked[:, 1]
    local = idx[rows.clamp(min=0), at.clamp(min=0)]
    exact = _exact(space, chunk, block, rows, local, backend)
    flat = torch.where(rows >= 0, rows * width + at, c * width)  # padding to a spare slot
    score = torch.full((c * width + 1,), -torch.inf, dtype=torch.float64, device=s.device)
    score = score.scatter(0, flat, exact)[:-1].view(c, width)
    index = torch.where(torch.isfinite(score), block.globals_of(idx), -1)
    index, score = _engine.merge_ranked(index, score, kk)
    return index, score, over | flag


def _ranked(
    space: _engine.Space,
    inputs: _Inputs,
    chunk: _engine.Rows,
    start: int,
    stop: int,
    ks: torch.Tensor,
    ks_host: np.ndarray,
    backend: str | None,
    exact_sizes: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The chunk's exact top-``ks[i]`` across blocks, ``(c, max ks)`` on the device, and the
    overflow flag."""
    c = stop - start
    kmax = int(ks_host.max()) if c else 0
    dev = space.device
    index = torch.full((c, kmax), -1, dtype=torch.int64, device=dev)
    value = torch.full((c, kmax), -torch.inf, dtype=torch.float64, device=dev)
    over = _no_flag(dev)
    if kmax == 0:
        return index, value, over
    excluded = inputs.excluded_in(start, stop)
    for block in space.blocks():
        if block.rows == 0:
            continue
        p = _filter_pass(space, inputs, chunk, block, excluded, start, stop)
        i, v, flag = _ranked_block(space, chunk, block, p, ks, ks_host, backend, exact_sizes)
        over = over | flag
        pad = kmax - i.shape[1]
        i = torch.nn.functional.pad(i, (0, pad), value=-1)
        v = torch.nn.functional.pad(v, (0, pad), value=-torch.inf)
        if space.single is not None:
            index, value = i, v
        else:
            index, value = _engine.merge_ranked(
                torch.cat([index, i], 1), torch.cat([value, v], 1), kmax
            )
    beyond = torch.arange(kmax, device=dev)[None, :] >= ks[:, None]
    index = torch.where(beyond, -1, index)
    value = torch.where(beyond, -torch.inf, value)
    return index, value, over


def ranked_chunk(
    space: _engine.Space,
    chunk: _engine.Rows,
    start: int,
    stop: int,
    ks: torch.Tensor,
    exclusions: _engine.Pairs | None,
    backend: str | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`recallkit._engine.ranked_chunk` on the device (CPU results)."""
    inputs = _Inputs(space, exclusions, None, chunk.sq)
    ks_host = ks.cpu().numpy().astype(np.int64)
    ks = ks.to(device=space.device, dtype=torch.int64)
    args = (space, inputs, chunk, start, stop, ks, ks_host, backend)
    index, value, over = _ranked(*args, False)
    if bool(over):
        index, value, _ = _ranked(*args, True)
    return index.cpu(), value.cpu()


def ranked_lists(
    space: _engine.Space,
    ks: np.ndarray,
    exclusions: _engine.Pairs | None,
    size: int,
    backend: str | None,
    on_device: bool,
) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """:func:`recallkit._engine.ranked_lists` on the device.

    Chunks are computed without synchronising and held until their lists fill the memory
    budget; then one transfer reads their flags (and, unless ``on_device``, one per tensor
    brings the lists to the host), flagged chunks are computed again with exact sizes, and the
    held chunks are yielded.
    """
    inputs = _Inputs(space, exclusions, None, space.query.sq)
    ks_host = np.ascontiguousarray(ks, dtype=np.int64)
    ks_dev = torch.from_numpy(ks_host).to(space.device)
    budget = _engine.memory_budget(space.device)

    def run(start: int, stop: int, exact_sizes: bool) -> tuple[torch.Tensor, ...]:
        chunk = space.chunk(start, stop)
        k, k_host = ks_dev[start:stop], ks_host[start:stop]
        return _ranked(space, inputs, chunk, start, stop, k, k_host, backend, exact_sizes)

    held: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]] = []
    held_bytes = 0
    for start, stop in _engine.chunks(space.num_query, size):
        held.append((start, stop, *run(start, stop, False)))
        held_bytes += held[-1][2].numel() * 16
        if held_bytes >= budget:
            yield from _release(held, run, on_device)
            held, held_bytes = [], 0
    yield from _release(held, run, on_device)


def _release(
    held: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]],
    run: Callable[[int, int, bool], tuple[torch.Tensor, ...]],
    on_device: bool,
) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    if not held:
        return
    flags = torch.stack([h[4] for h in held]).cpu().numpy()
    lists = []
    for (start, stop, index, value, _), flag in zip(held, flags, strict=True):
        if flag:
            index, value, _ = run(start, stop, True)
        lists.append((start, stop, index, value))
    if not on_device:
        indices = torch.cat([i.reshape(-1) for _, _, i, _ in lists]).cpu()
        values = torch.cat([v.reshape(-1) for _, _, _, v in lists]).cpu()
        sizes = [i.numel() for _, _, i, _ in lists]
        lists = [
            (start, stop, i.view(index.shape), v.view(index.shape))
            for (start, stop, index, _), i, v in zip(
                lists, indices.split(sizes), values.split(sizes), strict=True
            )
        ]
    yield from lists
