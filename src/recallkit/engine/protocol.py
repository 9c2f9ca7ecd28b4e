"""The contract between the engine's dispatcher and its back ends.

A [`Request`][Request] says what one pass over the queries computes; a back end answers with one
[`ChunkResult`][ChunkResult] per chunk of queries. A back end is a module-level object with the
[`Backend`][Backend] methods; it may compute a chunk however it likes (tiles on the CPU, whole
chunks on a GPU, fused kernels) as long as every number it returns is the one the definitions
give: ranks counted with the tie rule ([`recallkit.engine.ties`][recallkit.engine.ties]) over exact
scores ([`recallkit.engine.exact`][recallkit.engine.exact]).

What a request can ask for, in one pass:

* **thresholds**: per query, the rank of its best relevant item (``positives``: label codes or
  explicit lists), or the rank of each of its ``targets``; with the tie counts around it;
* **ranked lists**: per query, its exact top-``top_k[i]`` reference items and their exact
  scores, with the *tail* (items beyond the list tied with its last item).

Both may be asked together: a back end then computes each filter score once for both.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from recallkit.engine import space as sizing
from recallkit.engine import ties
from recallkit.engine.pairs import (
    Exclusions,
    LabelPositives,
    Pairs,
    block_codes,
    globals_of,
    locals_of,
)
from recallkit.engine.space import Block, Rows, Space


@dataclass(frozen=True)
class Request:
    """What one pass computes for every query (module docstring).

    ``positives`` and ``targets`` are exclusive (a rank per query, or per target slot);
    ``top_k`` (int64 per query) asks for ranked lists; ``exclusions`` are skipped by all.
    With ``first_hit=False`` the label ``positives`` are no threshold: they only let a back
    end start each list from its k-th positive when ``top_k`` is at most each query's number
    of positives (a cheaper pass). ``lists_on_device`` keeps the ranked lists where the work
    runs (else they come back as CPU tensors). With ``exact_scores=False`` the lists' order and
    ties are the exact ones but a back end may give an item that no other candidate of its row
    could tie or pass its filter's estimate of its score (``top_score``), not the exact score:
    for a caller that reads the order and the ties alone, on one process. With ``by_relevance``
    as well (label ``positives``), for a caller that reads each list's relevance alone, in
    order, with the ties between relevant and other items: items that no score outside their
    run could pass or tie, and that are all relevant or all not, may keep their filter's order
    and estimates (the CPU back end's
    [`order_rows`][recallkit.engine.cpu_kernels.order_rows]).
    """

    positives: LabelPositives | Pairs | None = None
    targets: np.ndarray | None = None
    top_k: np.ndarray | None = None
    exclusions: Exclusions | None = None
    first_hit: bool = True
    lists_on_device: bool = False
    exact_scores: bool = True
    by_relevance: bool = False

    @property
    def thresholds(self) -> bool:
        return (self.positives is not None and self.first_hit) or self.targets is not None

    @property
    def lists(self) -> bool:
        return self.top_k is not None

    def slots(self) -> int:
        return 1 if self.targets is None else int(self.targets.shape[1])


@dataclass
class ChunkResult:
    """One chunk's answer: queries ``start:stop`` of the request.

    Thresholds (``(c, g)`` int64, ``g = 1`` for positives): ``ranks`` (``-1`` where a slot has
    no threshold item), ``ties_before`` (the items tied with the threshold item that the tie rule
    ranks before it: lower index), ``ties`` (every item tied with it, itself excluded) and, for
    positives, ``tied_positives`` ``(c,)`` (other positives tied with the best positive).
    Lists: ``top_index``/``top_score`` ``(c, max k)`` (``-1``/``-inf`` padding, best first) and
    ``tail_index``/``tail_score`` ``(c, t)``.
    """

    start: int
    stop: int
    ranks: np.ndarray | None = None
    ties_before: np.ndarray | None = None
    ties: np.ndarray | None = None
    tied_positives: np.ndarray | None = None
    top_index: torch.Tensor | None = None
    top_score: torch.Tensor | None = None
    tail_index: torch.Tensor | None = None
    tail_score: torch.Tensor | None = None


class Reducer(Protocol):
    """Combines one chunk's partial results across processes (each holding one reference
    shard): ``reduce(op, tensor)`` with ``op`` ``"max"``, ``"min"`` or ``"sum"``, and
    ``gather(tensor)`` (every process's tensor, in process order)."""

    def reduce(self, op: str, tensor: torch.Tensor) -> torch.Tensor: ...

    def gather(self, tensor: torch.Tensor) -> list[torch.Tensor]: ...


class Backend(Protocol):
    """One way of computing requests: numba tiles on the CPU, torch (any device), Triton.

    ``score_bytes`` is what a chunk holds per filter score besides the score itself (masks and
    temporaries), for [`recallkit.engine.space.chunk_rows`][recallkit.engine.space.chunk_rows]."""

    name: str
    score_bytes: int

    def run(self, space: Space, request: Request, size: int) -> Iterator[ChunkResult]:
        """Every chunk of ``size`` queries, in order."""
        ...

    def run_chunk(
        self, space: Space, chunk: Rows, request: Request, reducer: Reducer | None
    ) -> ChunkResult:
        """One chunk of query rows (the whole request's queries), threshold steps reduced
        across processes by ``reducer`` (sharded evaluation); lists are this process's."""
        ...


# ----------------------------------------------------------------------------------------------
# The chunk pipeline's shared steps: every back end runs these on its own tensors (torch
# operations whose shapes the host knows in advance: no host synchronisation on a device).


def merge_best_counted(
    best: torch.Tensor,
    where: torch.Tensor,
    equal: torch.Tensor,
    b: torch.Tensor,
    w: torch.Tensor,
    n: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[`ties.merge_best`][ties.merge_best] that also adds up how many items score exactly the
    best."""
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


def count_into(size: int, index: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """How many set ``flags`` fall on each of ``size`` slots (``index`` in range)."""
    out = torch.zeros(size, dtype=torch.int64, device=flags.device)
    return out.scatter_add_(0, index, flags.to(torch.int64))


def settle_counts(
    scores: torch.Tensor,
    glob: torch.Tensor,
    rows: torch.Tensor,
    slot: torch.Tensor,
    best: torch.Tensor,
    where: torch.Tensor,
    total: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A window's pairs (chunk ``rows``, ``-1`` at padding; global indices ``glob``; threshold
    ``slot``) with their exact ``scores``: those ranked above their slot's threshold item added
    to ``total`` (in place); per slot, the items tied with it and those of them that rank before
    it."""
    c, g = best.shape
    at = rows.clamp(min=0) * g + slot.clamp(min=0)
    b, w = best.reshape(-1)[at], where.reshape(-1)[at]
    valid = rows >= 0
    tie = valid & (scores == b)
    total += count_into(c * g, at, valid & ties.beats(scores, glob, b, w)).view(c, g)
    tied = count_into(c * g, at, tie & (glob != w)).view(c, g)
    before = count_into(c * g, at, tie & (glob < w)).view(c, g)
    return tied, before


def threshold_fields(
    best: torch.Tensor,
    equal: torch.Tensor,
    counts: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    reducer: Reducer | None,
) -> dict[str, torch.Tensor]:
    """A chunk's threshold fields of [`ChunkResult`][ChunkResult] from ``(total, tied, before)``,
    summed across processes by ``reducer``."""
    if reducer is not None:
        counts = tuple(reducer.reduce("sum", t) for t in counts)
    total, tied, before = counts
    found = torch.isfinite(best)
    return {
        "ranks": torch.where(found, total, torch.full_like(total, -1)),
        "ties": torch.where(found, tied, torch.zeros_like(tied)),
        "ties_before": torch.where(found, before, torch.zeros_like(before)),
        "tied_positives": (equal - 1).clamp(min=0),
    }


def merge_held(
    held: tuple[torch.Tensor, torch.Tensor] | None, index: torch.Tensor, score: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ranked candidates of several blocks (best first by the tie rule, ``-1`` padding) side by
    side, ranked again."""
    if held is None:
        return index, score
    both_i = torch.cat([held[0], index], 1)
    both_s = torch.cat([held[1], score], 1)
    order = ties.ranked_order(both_s, both_i)
    return both_i.gather(1, order), both_s.gather(1, order)


@dataclass
class Scan:
    """One block's filter pass for a chunk ([`Pipeline.scan`][Pipeline.scan]): ``window``, per
    threshold slot, ``(above (c, g), rows, local cols, slots)``: the counts certainly above and the
    pairs to score exactly (``rows`` ``-1`` at padding); ``top``, the ranked lists' candidates
    ``(rows, local cols, at, width)``: each candidate's position ``at`` in its row's list of at
    most ``width``; ``flag``, a device bool set where a fixed capacity may have been too small."""

    window: tuple[torch.Tensor, ...] | None
    top: tuple[torch.Tensor, torch.Tensor, torch.Tensor, int] | None
    flag: torch.Tensor
    estimates: tuple[Any, ...] | None = None  # a back end's own: the scores it may keep


class Pipeline:
    """The chunk pipeline of every back end, written once over a back end's primitives.

    Step 1: each slot's threshold item (its exact score and global index): the targets scored
    exactly, or the best of the positives that [`candidates`][candidates] cannot rule out; reduced
    across processes. Step 2, per block: [`scan`][scan] filters the block (the window of each
    threshold, the candidates of each ranked list), [`exact`][exact] scores what it kept, and the
    counts ([`settle_counts`][settle_counts]) and lists ([`rank`][rank], [`merge_held`][merge_held])
    follow. The fields of [`ChunkResult`][ChunkResult] come out as tensors on the work's device with
    the flag of [`Scan`][Scan] (``fixed_shapes``: the lists' tails get a width known in advance)."""

    fixed_shapes = False
    # The tie rule's per-row reductions (a back end may give its own, equal bit for bit).
    segment_best = staticmethod(ties.segment_best)
    split_tail = staticmethod(ties.split_tail)

    def candidates(self, space, chunk, block, i, start, stop, ctx):
        """Step 1's pairs in ``block``: ``(rows, local cols, valid, flag)``."""
        raise NotImplementedError

    def scan(self, space, chunk, block, i, start, stop, ctx, best, where, ks) -> Scan:
        raise NotImplementedError

    def exact(self, space, chunk, block, rows, cols) -> torch.Tensor:
        raise NotImplementedError

    def rank(self, rows, glob, scores, top, c, ks) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidates' exact scores as ranked lists ``(c, w)`` (index, score; best first by the
        tie rule, ``-1``/``-inf`` padding), every item tied with the k-th kept."""
        raise NotImplementedError

    def thresholds(self, space, chunk, start, stop, request, ctx):
        """Step 1 in this process: ``(best, where, equal, flag)``."""
        c, dev = stop - start, space.device
        flag = torch.zeros((), dtype=torch.bool, device=dev)
        if request.targets is not None:
            targets = ctx.targets[start:stop]
            g = targets.shape[1]
            best = torch.full(targets.shape, -torch.inf, dtype=torch.float64, device=dev)
            where = torch.where(targets >= 0, targets, ties.SENTINEL)
            slots = torch.arange(c, device=dev)[:, None].expand(c, g)
            for block in space.blocks():
                local, inside = locals_of(block, targets.clamp(min=0))
                inside = inside & (targets >= 0)
                rows = torch.where(inside, slots, -1).reshape(-1)
                scores = self.exact(space, chunk, block, rows, local.reshape(-1))
                best = torch.where(inside, scores.view(c, g), best)
            return best, where, torch.zeros(c, dtype=torch.int64, device=dev), flag
        best = torch.full((c,), -torch.inf, dtype=torch.float64, device=dev)
        where = torch.full((c,), ties.SENTINEL, dtype=torch.int64, device=dev)
        equal = torch.zeros(c, dtype=torch.int64, device=dev)
        for i, block in enumerate(space.blocks()):
            rows, local, valid, found = self.candidates(space, chunk, block, i, start, stop, ctx)
            rows = torch.where(valid, rows, -1)
            scores = self.exact(space, chunk, block, rows, local)
            glob = globals_of(block, local.clamp(0, max(block.rows - 1, 0)))
            b, w, n = self.segment_best(rows, scores, glob, c)
            best, where, equal = merge_best_counted(best, where, equal, b, w, n)
            flag = flag | found
        return best[:, None], where[:, None], equal, flag

    def _count(self, space, chunk, block, scan, best, where, counts) -> None:
        """The window's pairs scored exactly and counted into ``counts`` (in place)."""
        above, rows, local, slot = scan.window
        scores = self.exact(space, chunk, block, rows, local)
        glob = globals_of(block, local.clamp(0, max(block.rows - 1, 0)))
        counts[0] = counts[0] + above
        tied, before = settle_counts(scores, glob, rows, slot, best, where, counts[0])
        counts[1], counts[2] = counts[1] + tied, counts[2] + before

    def _ranked(self, space, chunk, block, scan, c, ks) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's ranked lists from its candidates, scored exactly."""
        rows, local = scan.top[0], scan.top[1]
        scores = self.exact(space, chunk, block, rows, local)
        glob = globals_of(block, local.clamp(0, max(block.rows - 1, 0)))
        return self.rank(rows, glob, scores, scan.top, c, ks)

    def chunk_fields(self, space, chunk, start, stop, request, reducer, ctx):
        """One chunk's fields as tensors on the work's device, and the overflow flag (clear
        with a reducer: every step is settled before its reduction)."""
        c, dev = stop - start, space.device
        out: dict[str, torch.Tensor] = {}
        best = where = None
        flag = torch.zeros((), dtype=torch.bool, device=dev)
        if request.thresholds:
            best, where, equal, flag = self.thresholds(space, chunk, start, stop, request, ctx)
            if reducer is not None:  # exact sizes (a learning call): nothing overflows
                best, where, equal = reduce_best(reducer, best, where, equal)
            counts = [torch.zeros(best.shape, dtype=torch.int64, device=dev) for _ in range(3)]
        ks = kmax = None
        held = None
        if request.lists:
            ks_host = np.ascontiguousarray(request.top_k[start:stop], dtype=np.int64)
            ks = torch.from_numpy(ks_host).to(dev)
            kmax = int(ks_host.max(initial=0))
        for i, block in enumerate(space.blocks()):
            if block.rows == 0:
                continue
            scan = self.scan(
                space, chunk, block, i, start, stop, ctx, best, where, ks if kmax else None
            )
            flag = flag | scan.flag
            if scan.window is not None:
                self._count(space, chunk, block, scan, best, where, counts)
            if scan.top is not None:
                held = merge_held(held, *self._ranked(space, chunk, block, scan, c, ks))
            del scan  # the block's candidates, before the next block's pass
        if request.thresholds:
            out.update(threshold_fields(best, equal, tuple(counts), reducer))
        if request.lists:
            if held is None:
                empty = torch.full((c, kmax), -1, dtype=torch.int64, device=dev)
                held = (empty, torch.full(empty.shape, -torch.inf, dtype=torch.float64, device=dev))
            width = None
            kmin = int(request.top_k[start:stop].min(initial=0)) if c else 0
            if self.fixed_shapes:
                width = max(held[0].shape[1] - kmin, 0)
            parts = self.split_tail(held[0], held[1], ks, tail_width=width, kmax=kmax, kmin=kmin)
            del held
            out.update(
                zip(("top_index", "top_score", "tail_index", "tail_score"), parts, strict=True)
            )
        return out, flag


# ----------------------------------------------------------------------------------------------
# Fixed capacities (a back end whose shapes the host knows in advance), learned per call.


class Capacities:
    """Fixed window sizes for a call's chunks: ``None`` (exact sizes) until [`learned`][learned],
    then twice the per-row window each site needed in the learning chunk, at least ``minimum``
    pairs (a ranked list: ``extra`` beyond k)."""

    def __init__(self, minimum: int = sizing.MIN_CAPACITY, extra: int = sizing.TOP_EXTRA) -> None:
        self.learning = True
        self.rates: dict[str, float] = {}
        self.minimum, self.top_extra = minimum, extra

    def size(self, site: str, rows: int, cols: int) -> int | None:
        if self.learning:
            return None
        rate = self.rates.get(site, 0.0)
        return min(rows * cols, max(self.minimum, math.ceil(rows * max(2.0 * rate, 1.0))))

    def extra(self, site: str) -> int | None:
        """A ranked list's learned width beyond k (``None`` while learning)."""
        if self.learning:
            return None
        return max(self.top_extra, math.ceil(2.0 * self.rates.get(site, 0.0)))

    def record(self, site: str, found: int, rows: int) -> None:
        if self.learning:
            self.rates[site] = max(self.rates.get(site, 0.0), found / max(rows, 1))

    def learned(self) -> None:
        self.learning = False


def no_flag(device: torch.device) -> torch.Tensor:
    return torch.zeros((), dtype=torch.bool, device=device)


def compact(mask: torch.Tensor, caps: Capacities, site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of the True entries of ``mask`` (2-D or 1-D), row-major, as ``(p, ndim)``.

    With a capacity: exactly that many (no synchronisation), padded with ``-1``, and a device
    flag set when some may have been left out. While learning: all of them (``torch.nonzero``:
    one synchronisation), recorded for the site."""
    rows = mask.shape[0] if mask.dim() else 1
    cols = mask.numel() // max(rows, 1)
    capacity = caps.size(site, rows, cols)
    if capacity is None:
        found = torch.nonzero(mask)
        caps.record(site, found.shape[0], rows)
        return found, no_flag(mask.device)
    capacity = min(capacity, mask.numel())
    found = torch.nonzero_static(mask, size=capacity, fill_value=-1)
    if capacity == mask.numel():
        return found, no_flag(mask.device)
    if capacity == 0:
        return found, mask.any()
    return found, found[-1, 0] >= 0


# ----------------------------------------------------------------------------------------------
# A call's inputs as tensors on the work's device, put there once.


class DevicePairs:
    """Per-query pairs (CSR) with their columns on the device and the row pointers on the host."""

    def __init__(self, pairs: Pairs, device: torch.device) -> None:
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


class Skipped:
    """A chunk's skipped pairs on the device: explicit pairs and exclusion codes."""

    def __init__(
        self,
        rows: torch.Tensor,
        cols: torch.Tensor,
        codes: torch.Tensor | None,
        ref_codes: torch.Tensor | None,
    ) -> None:
        self.rows, self.cols = rows, cols
        self.codes, self.ref_codes = codes, ref_codes
        self.keys = torch.sort(rows * PAIR_KEY + cols).values

    def mask(self, scores: torch.Tensor, block: Block) -> torch.Tensor:
        """``scores`` with the skipped pairs of ``block`` at ``-inf``."""
        c, m = scores.shape
        if self.rows.numel():
            local, inside = locals_of(block, self.cols)
            flat = torch.where(inside, self.rows * m + local.clamp(0, max(m - 1, 0)), c * m)
            hit = torch.zeros(c * m + 1, dtype=torch.bool, device=scores.device)
            hit.index_put_((flat,), torch.ones_like(flat, dtype=torch.bool))
            scores = scores.masked_fill(hit[: c * m].view(c, m), -torch.inf)
        if self.codes is not None:
            same = (self.codes[:, None] >= 0) & (self.codes[:, None] == self.ref_codes[None, :])
            scores = scores.masked_fill(same, -torch.inf)
        return scores

    def lists(self, block: Block, c: int, width: int) -> torch.Tensor | None:
        """The explicit pairs in ``block`` as ``(c, width)`` local columns, ``-1`` padded
        (``width``: the most pairs of a row, known on the host), or ``None``."""
        if self.rows.numel() == 0:
            return None
        local, inside = locals_of(block, self.cols)
        dev = self.rows.device
        sizes = torch.zeros(c, dtype=torch.int64, device=dev)
        sizes.scatter_add_(0, self.rows, torch.ones_like(self.rows))
        starts = torch.cumsum(sizes, 0) - sizes
        position = torch.arange(self.rows.numel(), device=dev) - starts[self.rows]
        out = torch.full((c, max(width, 1)), -1, dtype=torch.int64, device=dev)
        out[self.rows, position] = torch.where(inside, local, torch.full_like(local, -1))
        return out

    def contains(self, rows: torch.Tensor, glob: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """Which of the pairs ``(rows, global cols)`` are skipped."""
        out = torch.zeros(rows.shape, dtype=torch.bool, device=rows.device)
        if self.keys.numel():
            key = rows * PAIR_KEY + glob
            pos = torch.searchsorted(self.keys, key).clamp(max=self.keys.numel() - 1)
            out |= self.keys[pos] == key
        if self.codes is not None:
            q = self.codes[rows.clamp(min=0)]
            out |= (q >= 0) & (q == self.ref_codes[local.clamp(min=0)])
        return out


PAIR_KEY = 2**40


class DeviceLabels:
    """Label positives on the device: per block, each query's range of positives in the block's
    members grouped by code (and the codes themselves, for the filter's window)."""

    def __init__(self, positives: LabelPositives, device: torch.device) -> None:
        self.positives = positives
        self.device = device
        self.query_codes = torch.from_numpy(positives.query_codes).to(device)
        self._blocks: dict[tuple[int, int], tuple] = {}

    def _block(self, block: Block) -> tuple:
        key = (block.offset, block.rows)
        if key not in self._blocks:
            groups = self.positives.groups(block)
            lo, hi = groups.ranges(self.positives.query_codes)
            own = self.positives.block_codes(block)

            def put(a: np.ndarray) -> torch.Tensor:
                return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(self.device)

            self._blocks[key] = (lo, hi, put(lo), put(hi), put(groups.members), put(own))
        return self._blocks[key]

    def pairs(self, block: Block, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
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

    def codes(self, block: Block) -> torch.Tensor:
        return self._block(block)[5]


class Inputs:
    """A call's inputs on the device, put there once: exclusions, positives, targets, k."""

    def __init__(self, space: Space, request: Request) -> None:
        dev = space.device
        self.device = dev
        excl = request.exclusions
        self.pairs = None
        if excl is not None and excl.pairs is not None:
            self.pairs = DevicePairs(excl.pairs, dev)
        self.exclusions = excl
        self.codes = None
        if excl is not None and excl.has_codes:
            self.codes = torch.from_numpy(excl.query_codes).to(dev)
        self.labels = None
        self.listed = None
        if isinstance(request.positives, LabelPositives):
            self.labels = DeviceLabels(request.positives, dev)
        elif request.positives is not None:
            self.listed = DevicePairs(request.positives, dev)
        self.targets = None
        if request.targets is not None:
            self.targets = torch.from_numpy(np.ascontiguousarray(request.targets)).to(dev)
        self.ks_host = None
        self.ks = None
        if request.top_k is not None:
            self.ks_host = np.ascontiguousarray(request.top_k, dtype=np.int64)
            self.ks = torch.from_numpy(self.ks_host).to(dev)
        self._ref_codes: dict[tuple[int, int], torch.Tensor] = {}

    def list_width(self, start: int, stop: int) -> int:
        """The most explicit skipped pairs of a query of ``start:stop`` (host arithmetic)."""
        if self.pairs is None or stop <= start:
            return 0
        return int(np.diff(self.pairs.indptr[start : stop + 1]).max(initial=0))

    def skipped(self, block: Block, start: int, stop: int) -> Skipped:
        empty = torch.empty(0, dtype=torch.int64, device=self.device)
        rows, cols = (empty, empty) if self.pairs is None else self.pairs.chunk(start, stop)
        if self.codes is None:
            return Skipped(rows, cols, None, None)
        key = (block.offset, block.rows)
        if key not in self._ref_codes:
            codes = block_codes(self.exclusions.reference_codes, block)
            self._ref_codes[key] = torch.from_numpy(codes).to(self.device)
        return Skipped(rows, cols, self.codes[start:stop], self._ref_codes[key])
