"""The torch back end: every per-chunk step on the device the chunk runs on (CUDA; any device).

A chunk's filter scores against a block are one GEMM on the device (``torch.mm``, or the fused
Triton kernels of [`recallkit.engine.triton_kernels`][recallkit.engine.triton_kernels] where they
run); thresholds, window counts, exact re-scoring and top-k lists follow as torch operations whose
shapes the host knows in advance, so that a chunk needs no host synchronisation:

* a window is collected into a fixed capacity (``torch.nonzero_static``, or the ``width`` best
  of a ``topk``), padded with ``-1``, and a flag on the device records whether the capacity may
  have been too small; padding pairs score ``-inf`` exactly and count for nothing;
* capacities are learned per call: its first chunk runs with exact sizes (``torch.nonzero``,
  which synchronises), and every later chunk gets twice the per-row window that chunk needed,
  for each window and precision, so the capacity follows the filter's bound and the data;
* a call computes its chunks this way, then moves the results and the flags to the host in one
  transfer (ranked lists: per batch held within the memory budget); a chunk whose flag is set
  is computed again with exact sizes, so no result depends on a capacity.

Host synchronisations are a constant number per call. Calls that combine partial results
across processes (a reducer) settle each step before reducing: a constant number per chunk.

Correct under common torch settings: the GEMMs run with autocast disabled (a caller's
``torch.autocast`` region would otherwise run them in bfloat16 with a bound made for float32);
TF32 and reduced-precision float32 matmuls (``torch.backends.cuda.matmul.fp32_precision``, the
legacy ``allow_tf32``, ``torch.set_float32_matmul_precision``) widen the bound instead of
breaking it; float16 accumulation (``allow_fp16_accumulation``) is refused for a float16 filter;
and no operation is one that ``torch.use_deterministic_algorithms(True)`` refuses on CUDA (no
``scatter_reduce``: per-row maxima and minima come from stable sorts, counts from integer
scatter-adds).

Low precision is a cascade: the float16/bfloat16 filter's window is scored again in float32 (the
float32 dot product of the same filter rows, with the float32 bound, any summation order), and
only the float32 window is scored exactly in float64. Both filters bound the same scaled exact
score, so every decision is the one float32 alone would make, and the float64 work is
float32's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from recallkit.engine import filters, lowp, protocol, ties
from recallkit.engine.device_steps import Pass as _Pass
from recallkit.engine.device_steps import result as _result
from recallkit.engine.device_steps import segment_max as _segment_max
from recallkit.engine.device_steps import timed as _timed
from recallkit.engine.device_steps import window32 as _window32
from recallkit.engine.filters import TorchKernels, check_low_precision, low_rows
from recallkit.engine.pairs import Pairs, globals_of, locals_of
from recallkit.engine.protocol import (
    Capacities,
    ChunkResult,
    DeviceLabels,
    Inputs,
    Reducer,
    Request,
    Skipped,
    compact,
    no_flag,
)
from recallkit.engine.space import (
    DEVICE_BYTES_PER_SCORE,
    MIN_CAPACITY,
    TOP_EXTRA,
    Block,
    Rows,
    Space,
    chunk_rows,
    chunks,
    memory_budget,
)

# The kernel sets of the back end (triton_backend builds on TorchKernels).
__all__ = ["DeviceBackend", "TorchKernels", "check_low_precision", "low_rows"]


# ----------------------------------------------------------------------------------------------
# The back end.


class _Context:
    """A chunk's context on the device: the call's inputs, its capacities, the passes step 1
    kept for step 2."""

    def __init__(self, inputs: Inputs, caps: Capacities) -> None:
        self.inputs, self.caps, self.targets = inputs, caps, inputs.targets
        self.passes: dict[int, _Pass] = {}


class DeviceBackend(protocol.Pipeline):
    """Requests as torch operations on the space's device (module docstring), in the shared
    chunk pipeline ([`recallkit.engine.protocol.Pipeline`][recallkit.engine.protocol.Pipeline])."""

    fixed_shapes = True

    def __init__(self, kernels: Any) -> None:
        self.kernels = kernels
        self.name = kernels.name
        self.score_bytes = DEVICE_BYTES_PER_SCORE  # the chunk's masks, on any device
        self._costs: dict[tuple, float] = {}

    # -- filter -------------------------------------------------------------------------------

    def _low_dtype(self, space: Space, block: Block) -> torch.dtype | None:
        if block.gemm.dtype != torch.float32:
            return None
        precision = space.options.precision
        if precision in ("float16", "bfloat16"):
            return filters.LOW_DTYPES[precision]
        if precision == "int8":
            raise lowp.precision_refused(
                "int8",
                "runs on the CPU back end",
                "on this device",
                ("auto", "float32", "bfloat16", "float16"),
            )
        return None

    def _filter(
        self, space: Space, chunk: Rows, block: Block, start: int, stop: int
    ) -> filters.QueryFilter:
        if space.own_rows(block):
            own = block.cache.get(("own", space.metric))
            if own is None:
                own = filters.own_filter(block.gemm, block.scale, space.metric)
                block.cache[("own", space.metric)] = own
            return own[torch.arange(start, stop, device=block.gemm.device)]
        low = self._low_dtype(space, block)
        dtype = block.gemm.dtype
        qf = filters.query_filter(chunk.raw, chunk.sq, chunk.norm, space.metric, block.scale, dtype)
        if low == torch.float16 and space.metric == "euclidean":  # float16's narrow range
            qf = filters.query_filter(
                chunk.raw, chunk.sq, chunk.norm, space.metric, block.scale, torch.float16
            )
            qf = filters.QueryFilter(qf.rows.to(dtype), qf.scale, qf.norms)
        return qf

    def _pass(
        self,
        space: Space,
        chunk: Rows,
        block: Block,
        skipped: Skipped,
        start: int,
        stop: int,
    ) -> _Pass:
        qf = self._filter(space, chunk, block, start, stop)
        low = self._low_dtype(space, block)
        with filters.no_autocast(space.device):
            scores, product = self.kernels.product(qf, block, low)
        scores = skipped.mask(scores, block)
        eps = filters.error_bound(product, qf, block.max_norm, space.dim, block.scale, space.metric)
        if low is None:
            return _Pass(scores, qf, eps, None, False)
        plain = filters.Product.plain(torch.float32)
        eps32 = filters.error_bound(plain, qf, block.max_norm, space.dim, block.scale, space.metric)
        return _Pass(scores, qf, eps, eps32, True)

    def _refine(self, p: _Pass, block: Block, rows: torch.Tensor, cols: torch.Tensor):
        return self.kernels.dots(p.qf.rows, block.gemm, rows, cols)

    # -- step 1 -------------------------------------------------------------------------------

    def exact_is_cheaper(
        self, space: Space, positives: Any, block: Block, start: int, stop: int
    ) -> bool:
        """Whether scoring the chunk's positives exactly costs less than a filter pass, by the
        cost of each measured once per process on this device (exact pairs against GEMM
        scores of this width)."""
        if isinstance(positives, Pairs):
            return True
        pairs = positives.pair_count(block, start, stop)
        return pairs * self._exact_cost(space, block) <= (
            stop - start
        ) * block.rows * self._gemm_cost(space, block)

    def _exact_cost(self, space: Space, block: Block) -> float:
        key = ("exact", space.device.type, space.dim, block.data.dtype)
        if key not in self._costs:
            p = 4096
            rows = torch.zeros(p, dtype=torch.int64, device=space.device)
            cols = torch.arange(p, device=space.device) % max(block.rows, 1)
            chunk = Rows(block.data[:1], block.sq[:1], block.norm[:1])
            self._costs[key] = (
                _timed(lambda: self.kernels.exact(space, chunk, block, rows, cols), space.device)
                / p
            )
        return self._costs[key]

    def _gemm_cost(self, space: Space, block: Block) -> float:
        key = ("gemm", space.device.type, space.dim, block.gemm.dtype)
        if key not in self._costs:
            c, m = 256, min(block.rows, 4096)
            a = block.gemm[:1].expand(c, -1).contiguous()
            b = block.gemm[:m]
            with filters.no_autocast(space.device):
                self._costs[key] = _timed(lambda: a @ b.T, space.device) / max(c * m, 1)
        return self._costs[key]

    def _positive_candidates(
        self,
        p: _Pass,
        block: Block,
        labels: DeviceLabels,
        start: int,
        stop: int,
        caps: Capacities,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Positives whose filter score is within twice the bound of the row's best positive's
        (the only ones whose exact score can be the best): ``(rows, local cols, overflow)``."""
        s = p.scores
        c = s.shape[0]
        mask = labels.codes(block)[None, :] == labels.query_codes[start:stop, None]
        masked = torch.where(mask, s, -torch.inf)
        top = masked.amax(dim=1).to(torch.float64)
        floor = filters.round_down(top - 2.0 * p.eps, s.dtype)
        keep = (masked >= floor[:, None]) & torch.isfinite(masked)
        found, over = compact(keep, caps, "positives")
        rows, local = found[:, 0], found[:, 1]
        if p.eps32 is None:
            return rows, local, over
        # Cascade: the same selection among these candidates with their float32 scores.
        f32 = self._refine(p, block, rows, local)
        top32 = _segment_max(rows, f32, c)
        floor32 = filters.round_down(top32 - 2.0 * p.eps32, f32.dtype)
        keep32 = (rows >= 0) & (f32 >= floor32[rows.clamp(min=0)]) & torch.isfinite(f32)
        picked, over32 = compact(keep32, caps, "positives32")
        at = picked[:, 0]
        rows = torch.where(at >= 0, rows[at.clamp(min=0)], -1)
        return rows, local[at.clamp(min=0)], over | over32

    def candidates(self, space, chunk, block, i, start, stop, ctx):
        """Step 1's pairs: every listed or label positive (few per query: scored exactly), or
        those within the bound of the row's best filter score
        ([`_positive_candidates`][_positive_candidates]; the pass is kept for step 2)."""
        inputs = ctx.inputs
        skipped = inputs.skipped(block, start, stop)
        if inputs.listed is not None or self.exact_is_cheaper(
            space, inputs.labels.positives, block, start, stop
        ):
            if inputs.listed is not None:
                rows, glob = inputs.listed.chunk(start, stop)
                local, valid = locals_of(block, glob)
            else:
                rows, local = inputs.labels.pairs(block, start, stop)
                glob = globals_of(block, local)
                valid = torch.ones_like(rows, dtype=torch.bool)
            return rows, local, valid & ~skipped.contains(rows, glob, local), no_flag(space.device)
        p = self._pass(space, chunk, block, skipped, start, stop)
        if space.single is not None:
            ctx.passes[i] = p
        rows, local, flag = self._positive_candidates(
            p, block, inputs.labels, start, stop, ctx.caps
        )
        return rows, local, rows >= 0, flag

    # -- step 2: counts and lists -------------------------------------------------------------

    def _counts(
        self, space: Space, block: Block, p: _Pass, best: torch.Tensor, caps: Capacities
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """Per slot, in this block: how many candidates are certainly above the threshold item,
        and the window's pairs to score exactly; and the overflow flag."""
        c, g = best.shape
        dev = space.device
        s = p.scores
        centre = filters.scaled_centre(best, p.qf, block.scale)
        lo, hi = filters.bounds(centre, p.eps[:, None], s.dtype)
        total = torch.zeros((c, g), dtype=torch.int64, device=dev)
        over = no_flag(dev)
        found = []
        for t in range(g):
            total[:, t] += (s > hi[:, t : t + 1]).sum(dim=1)
            inside = (s >= lo[:, t : t + 1]) & (s <= hi[:, t : t + 1])
            pairs, flag = compact(inside, caps, "window")
            over = over | flag
            found.append(torch.cat([pairs, torch.full_like(pairs[:, :1], t)], dim=1))
        found = torch.cat(found)
        rows, local, slot = found[:, 0], found[:, 1], found[:, 2]
        if p.eps32 is not None:
            # Cascade: the low-precision window scored in float32; certain ones counted, the
            # float32 window scored exactly.
            f32 = self._refine(p, block, rows, local)
            rows, local, slot, over = _window32(
                f32, centre, p.eps32, rows, local, slot, total, over, caps
            )
        return (total, rows, local, slot), over

    def _fused_counts(
        self,
        space: Space,
        inputs: Inputs,
        chunk: Rows,
        block: Block,
        start: int,
        stop: int,
        best: torch.Tensor,
        caps: Capacities,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """[`_counts`][_counts] with the fused threshold pass: the filter GEMM, the counts above
        and the windows of every slot in one launch, the chunk's score matrix never written."""
        c, g = best.shape
        dev = space.device
        qf = self._filter(space, chunk, block, start, stop)
        low = self._low_dtype(space, block)
        product = self.kernels.window_product(qf, low)
        eps = filters.error_bound(product, qf, block.max_norm, space.dim, block.scale, space.metric)
        centre = filters.scaled_centre(best, qf, block.scale)
        lo, hi = filters.bounds(centre, eps[:, None], torch.float32)
        skipped = inputs.skipped(block, start, stop)
        codes = None if skipped.codes is None else (skipped.codes, skipped.ref_codes)
        lists = skipped.lists(block, c, inputs.list_width(start, stop))
        capacity = caps.size("window", c * g, block.rows)
        guess = capacity if capacity is not None else MIN_CAPACITY * max(1, c * g // 64)
        above, window, count = self.kernels.window(qf, block, low, lo, hi, guess, codes, lists)
        if capacity is None:  # learning: exact sizes
            found = int(count)
            caps.record("window", found, c * g)
            if found > guess:
                above, window, count = self.kernels.window(
                    qf, block, low, lo, hi, found, codes, lists
                )
            over = no_flag(dev)
        else:
            over = count > capacity
        rows, local, slot = window[:, 0], window[:, 1], window[:, 2]
        total = above.clone()
        if low is not None:
            # Cascade: the low-precision window scored in float32; certain ones counted, the
            # float32 window scored exactly.
            eps32 = filters.error_bound(
                filters.Product.plain(torch.float32),
                qf,
                block.max_norm,
                space.dim,
                block.scale,
                space.metric,
            )
            f32 = self.kernels.dots(qf.rows, block.gemm, rows, local)
            rows, local, slot, over = _window32(
                f32, centre, eps32, rows, local, slot, total, over, caps
            )
        return (total, rows, local, slot), over

    def _ranked_block(
        self, block: Block, p: _Pass, ks: torch.Tensor, ks_host: np.ndarray, caps: Capacities
    ) -> tuple[tuple, torch.Tensor]:
        """Candidates of the chunk's top-``ks[i]`` in one block ([`protocol.Scan`][protocol.Scan]'s
        ``top``: every item the filter cannot rule out of the top-k, with every item tied with
        the k-th) and the overflow flag."""
        s = p.scores
        c, cols = s.shape[0], block.rows
        kk = min(int(ks_host.max()), cols)
        kb = ks.clamp(max=cols)
        extra = caps.extra("top")
        width = cols if extra is None else min(cols, kk + extra)
        values, idx = torch.topk(s, width, dim=1)
        kth = values.gather(1, (kb.clamp(min=1) - 1)[:, None])[:, 0]
        lo = filters.top_floor(kth, p.eps, s.dtype, kb)
        over = no_flag(s.device)
        keep = values >= lo[:, None]
        if extra is None:
            caps.record("top", max(int(keep.sum(dim=1).max()) - kk, 0) if c else 0, 1)
        elif width < cols:
            over = ((kb > 0) & (values[:, -1] >= lo)).any()
        if p.eps32 is not None:
            # Cascade: the window's float32 scores give the float32 floor and window.
            rows = torch.arange(c, device=s.device)[:, None].expand(c, width)
            rows = torch.where(keep, rows, -1).reshape(-1)
            f32 = self._refine(p, block, rows, idx.reshape(-1)).view(c, width)
            top32 = torch.topk(f32, kk, dim=1).values
            kth32 = top32.gather(1, (kb.clamp(min=1, max=kk) - 1)[:, None])[:, 0]
            keep = keep & (f32 >= filters.top_floor(kth32, p.eps32, f32.dtype, kb)[:, None])
        picked, flag = compact(keep, caps, "top_exact")
        rows, at = picked[:, 0], picked[:, 1]
        local = idx[rows.clamp(min=0), at.clamp(min=0)]
        return (rows, local, at, width), over | flag

    def rank(self, rows, glob, scores, top, c, ks) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidates at their places ``at`` of ``(c, width)`` lists, sorted by the tie
        rule (padding to a spare slot, then dropped)."""
        at, width = top[2], top[3]
        flat = torch.where(rows >= 0, rows * width + at, c * width)
        size = (c * width + 1,)
        score = torch.full(size, -torch.inf, dtype=torch.float64, device=scores.device)
        score = score.index_put((flat,), scores)[:-1].view(c, width)
        index = torch.full(size, -1, dtype=torch.int64, device=scores.device)
        index = index.index_put((flat,), glob)[:-1].view(c, width)
        index = torch.where(torch.isfinite(score), index, -1)
        order = ties.ranked_order(score, index)
        return index.gather(1, order), score.gather(1, order)

    # -- a chunk ------------------------------------------------------------------------------

    def scan(self, space, chunk, block, i, start, stop, ctx, best, where, ks) -> protocol.Scan:
        """The block's filter: the GEMM kept by step 1 or computed now (or the fused threshold
        pass where no lists are asked for), the windows and the lists' candidates."""
        inputs, caps = ctx.inputs, ctx.caps
        p = ctx.passes.get(i)
        # The fused kernel filters in float32 or lower; a float64 block has its own GEMM.
        fused = self.kernels.fused and p is None and ks is None
        fused = fused and block.gemm.dtype != torch.float64
        if p is None and not fused:
            p = self._pass(space, chunk, block, inputs.skipped(block, start, stop), start, stop)
        out = protocol.Scan(None, None, no_flag(space.device))
        if best is not None and fused:
            out.window, out.flag = self._fused_counts(
                space, inputs, chunk, block, start, stop, best, caps
            )
        elif best is not None:
            out.window, out.flag = self._counts(space, block, p, best, caps)
        if ks is not None:
            ks_host = inputs.ks_host[start:stop]
            out.top, flag = self._ranked_block(block, p, ks, ks_host, caps)
            out.flag = out.flag | flag
        return out

    def exact(self, space, chunk, block, rows, cols) -> torch.Tensor:
        return self.kernels.exact(space, chunk, block, rows, cols)

    def _chunk(
        self,
        space: Space,
        inputs: Inputs,
        request: Request,
        chunk: Rows,
        start: int,
        stop: int,
        caps: Capacities,
        reducer: Reducer | None = None,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One chunk's answer as device tensors, and the overflow flag (clear with a
        reducer: every step is settled before its reduction)."""
        with filters.no_autocast(space.device):
            ctx = _Context(inputs, caps)
            return self.chunk_fields(space, chunk, start, stop, request, reducer, ctx)

    def _settle(
        self,
        space: Space,
        inputs: Inputs,
        request: Request,
        held: list[tuple[int, int, dict[str, torch.Tensor], torch.Tensor]],
    ) -> Iterator[ChunkResult]:
        """The held chunks' answers on the host: their flags in one transfer, then each field
        of every chunk in one transfer (ranked lists stay on the device when asked); flagged
        chunks are computed again with exact sizes."""
        if not held:
            return
        flags = torch.stack([h[3] for h in held]).cpu().numpy()
        outs = []
        for (start, stop, out, _), flag in zip(held, flags, strict=True):
            if flag:
                again = Capacities(MIN_CAPACITY, TOP_EXTRA)
                out, _ = self._chunk(
                    space, inputs, request, space.chunk(start, stop), start, stop, again
                )
            outs.append(out)
        host: list[dict[str, Any]] = [{} for _ in outs]
        for name in outs[0]:
            values = [out[name] for out in outs]
            if name.startswith(("top_", "tail_")) and request.lists_on_device:
                for part, value in zip(host, values, strict=True):
                    part[name] = value
                continue
            flat = torch.cat([v.reshape(-1) for v in values]).cpu().numpy()
            cuts = np.cumsum([v.numel() for v in values])[:-1]
            for part, value, piece in zip(host, values, np.split(flat, cuts), strict=True):
                part[name] = piece.reshape(tuple(value.shape))
        for part in host:
            if "tail_index" in part and not request.lists_on_device:
                # Drop the padding columns of the fixed-width tails.
                tail = part["tail_index"]
                width = int((tail >= 0).sum(axis=1).max()) if tail.size else 0
                part["tail_index"], part["tail_score"] = (
                    tail[:, :width],
                    part["tail_score"][:, :width],
                )
            for name in ("top_index", "top_score", "tail_index", "tail_score"):
                if name in part and isinstance(part[name], np.ndarray):
                    part[name] = torch.from_numpy(np.ascontiguousarray(part[name]))
        for (start, stop, _, _), part in zip(held, host, strict=True):
            yield _result(start, stop, part)

    def run(
        self,
        space: Space,
        request: Request,
        size: int | None,
        queries: tuple[int, int] | None = None,
    ) -> Iterator[ChunkResult]:
        """Every chunk of ``size`` queries, in order: of all the queries, or of ``first:last``
        for ``queries = (first, last)``."""
        first, last = (0, space.num_query) if queries is None else queries
        inputs = Inputs(space, request)
        per_row = 0
        if request.lists:
            per_row = int(request.top_k.max(initial=0)) * 40
        if request.targets is not None:
            per_row += 48 * request.slots()
        rows = chunk_rows(space, size, per_row_bytes=per_row, score_bytes=self.score_bytes)
        budget = memory_budget(space.options, space.device)
        caps = Capacities(MIN_CAPACITY, TOP_EXTRA)
        held: list[tuple[int, int, dict[str, torch.Tensor], torch.Tensor]] = []
        held_bytes = 0
        for start, stop in chunks(last - first, rows):
            start, stop = start + first, stop + first
            out, over = self._chunk(
                space, inputs, request, space.chunk(start, stop), start, stop, caps
            )
            if caps.learning:
                caps.learned()
            held.append((start, stop, out, over))
            held_bytes += sum(t.numel() * t.element_size() for t in out.values())
            if held_bytes >= budget:
                yield from self._settle(space, inputs, request, held)
                held, held_bytes = [], 0
        yield from self._settle(space, inputs, request, held)

    def run_chunk(
        self, space: Space, chunk: Rows, request: Request, reducer: Reducer | None
    ) -> ChunkResult:
        inputs = Inputs(space, request)
        c = chunk.raw.shape[0]
        caps = Capacities(MIN_CAPACITY, TOP_EXTRA)
        out, _ = self._chunk(space, inputs, request, chunk, 0, c, caps, reducer)
        host = {
            name: value
            if name.startswith(("top_", "tail_")) and request.lists_on_device
            else (value.cpu() if name.startswith(("top_", "tail_")) else value.cpu().numpy())
            for name, value in out.items()
        }
        return _result(0, c, host)
