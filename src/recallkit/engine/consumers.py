"""What the CPU back end's tile pass feeds: per worker, the thresholds' windows and the ranked
lists' running top-k, updated by the tile kernels of
[`recallkit.engine.cpu_kernels`][recallkit.engine.cpu_kernels] as each tile of filter scores is
computed ([`recallkit.engine.cpu.run_tiles`][recallkit.engine.cpu.run_tiles]), and merged into
the pairs to score exactly when the pass ends; and the bytes per query row their states take.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np
import torch

from recallkit.engine import cpu_kernels as kernels
from recallkit.engine import filters, lowp, scratch
from recallkit.engine.pairs import LabelPositives
from recallkit.engine.protocol import Request

EXTRA = 64  # a top-k buffer holds 2 k + EXTRA items
HEAP_K = 32  # up to this k a heap per row keeps a top-k; beyond, a reservoir (fewer operations)


def top_state_bytes(kmax: int) -> int:
    """Bytes per query row of one worker's top-k state (a buffer item: an int32 column and a
    float32 score)."""
    return 4 * kmax + 8 * (2 * kmax + EXTRA) + 32


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


class Consumer:
    """What a tile pass feeds: each worker's state, and the tile kernels that update it."""

    def state(self) -> Any:
        raise NotImplementedError

    def rows(self, state: Any, tile: np.ndarray, row0: int, col0: int, kind: lowp.TileKind) -> None:
        raise NotImplementedError

    def cols(self, state: Any, tile: np.ndarray, row0: int, col0: int, kind: lowp.TileKind) -> None:
        raise NotImplementedError


class Window(Consumer):
    """Counts above the window and the items inside it, per row and slot: float32's window
    ``centre ± eps32`` (``lo32``/``hi32``), entered through each kind's own (a cascade's wider
    window, its items scored in float32 in the tile kernels)."""

    def __init__(self, centre: torch.Tensor, tp: lowp.TilePass) -> None:
        self.centre, self.tp = centre, tp
        lo, hi = filters.bounds(centre, tp.eps32[:, None], tp.qf.rows.dtype)
        self.lo_t, self.hi_t = lo, hi
        self.lo32, self.hi32 = (np.ascontiguousarray(t.numpy()) for t in (lo, hi))
        self.cap = kernels.WINDOW_CAP
        self.by_kind: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.lock = threading.Lock()

    def thresholds(self, kind: lowp.TileKind) -> tuple[np.ndarray, np.ndarray]:
        if not kind.cascade:
            return self.lo32, self.hi32
        with self.lock:
            if kind.name not in self.by_kind:
                lo, hi = filters.bounds(self.centre, kind.eps[:, None], torch.float32)
                self.by_kind[kind.name] = (
                    np.ascontiguousarray(lo.numpy()),
                    np.ascontiguousarray(hi.numpy()),
                )
            return self.by_kind[kind.name]

    def state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c, g = self.lo32.shape
        return (
            scratch.zeros((c, g), np.int64),
            scratch.zeros((c, g), np.int64),
            scratch.empty((c, g, self.cap), np.int64),
        )

    def rows(self, st: Any, tile: np.ndarray, r0: int, c0: int, kind: lowp.TileKind) -> None:
        lo, hi = self.thresholds(kind)
        kernels.window_rows(
            tile,
            kind.rs(r0, tile.shape[0], self.tp.a32.dtype),
            r0,
            c0,
            lo,
            hi,
            self.cap,
            *st,
            kind.cascade,
            self.tp.a32,
            self.tp.b32,
            self.lo32,
            self.hi32,
        )

    def cols(self, st: Any, tile: np.ndarray, r0: int, c0: int, kind: lowp.TileKind) -> None:
        above, count, index = st
        lo, hi = self.thresholds(kind)
        rs = kind.rs(r0, tile.shape[0], self.tp.a32.dtype)
        kernels.window_cols(
            tile,
            rs,
            r0,
            c0,
            lo[:, 0],
            hi[:, 0],
            self.cap,
            above[:, 0],
            count[:, 0],
            index[:, 0],
            kind.cascade,
            self.tp.a32,
            self.tp.b32,
            self.lo32[:, 0],
            self.hi32[:, 0],
        )

    def finish(
        self, states: list[Any], rescore: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``above (c, g)`` and float32's window as flat ``(rows, slots, columns)``; overflowing
        windows are recounted from their row's float32 scores (``rescore(rows)``)."""
        cap = self.cap
        c, g = self.lo32.shape
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
        scratch.give(*(a for st in states for a in st))
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


class Top(Consumer):
    """Candidates for each row's exact top-``ks[i]``: every item whose float32 filter score is
    at least the row's k-th largest float32 score minus ``2 eps32`` (and possibly a few more).
    A cascade's tile enters items within its margin (its bound and float32's) of the floor.

    ``known`` (optional): each row's positives, offered before the pass at their filter scores
    ``(ptr, cols, scores)``, and the codes by which the pass skips them ``(row codes, column
    codes)``: a row's floor starts at its k-th best positive and rises with each item found above
    it, not once ``k`` items are found. Each worker keeps its own lists and floors (the known
    items are the first's); a row's floor in a tile is the highest of the workers'
    ([`kernels.top_rows`][kernels.top_rows]), and a row's first tile may raise it from its own
    values. With ``sampled`` (the block's items in no order of their labels,
    [`tiles_sample`][tiles_sample]) that tile is taken for a sample of the block and the floor
    raised to a likely bound; a row it proves wrong for is computed again ([`finish`][finish]),
    so the candidates are the same."""

    def __init__(
        self, ks: np.ndarray, tp: lowp.TilePass, workers: int, known=None, sampled: bool = False
    ) -> None:
        c = len(ks)
        self.ks, self.tp = ks, tp
        self.sample_of = tp.block.rows if sampled else 0  # the columns a tile samples
        self.eps = tp.eps32
        self.kmax = kmax = int(ks.max(initial=0))
        self.dtype = dtype = tp.a32.dtype
        cap = 2 * kmax + EXTRA
        self.slack = 3.0 * self.eps.numpy().astype(np.float64)  # looser than the final 2 eps
        start = np.where(ks > 0, -np.inf, np.inf).astype(dtype)
        self.heap = kmax <= HEAP_K
        # Each worker's state is one slice of arrays shared by all (merged without copies).
        slots = max(1, workers)
        # The large arrays come from earlier passes of this shape (recallkit.engine.scratch).
        self.heaps = scratch.empty((slots, c, max(kmax, 1) if self.heap else 0), dtype)
        self.sizes = np.zeros((slots, c), dtype=np.int64)
        self.floors = np.repeat(start[None], slots, axis=0)
        # int32 columns (int64 for a block of 2**31 items or more): the buffers' appends, about
        # 25 a row and tile at Cars196 scale, touch a third less memory (the list kernels'
        # time 0.93×).
        wide = tp.block.rows >= 2**31
        self.columns = scratch.empty((slots, c, cap), np.int64 if wide else np.int32)
        self.scores = scratch.empty((slots, c, cap), dtype)
        self.fills = np.zeros((slots, c), dtype=np.int64)
        self.overs = np.zeros((slots, c), dtype=np.bool_)
        self.worker = itertools.count()
        self.known = (kernels.NO_CODES, kernels.NO_CODES)
        if known is not None:
            (ptr, cols, scores), self.known = known
            kernels.seed_top(ptr, cols, scores.astype(dtype), ks, self.slack, *self.slot(0))
        self.no_margin = (np.zeros(c), 0.0)
        self.margins: dict[str, tuple[np.ndarray, float]] = {}  # a cascade kind's

    def margin(self, kind: lowp.TileKind) -> tuple[np.ndarray, float]:
        """``(margin, rel)``: a cascade item of value ``v`` lies within ``margin + rel |v|`` of its
        float32 score (its kind's bound, the part proportional to the value charged to the value
        ([`TileKind.relative`][recallkit.engine.lowp.TileKind]), and float32's), widened by a part
        in 2**20; no margin for float32 tiles."""
        if kind.cascade and kind.name not in self.margins:  # once a pass (a race: twice, alike)
            eps, rel = kind.relative
            widen = 1.0 + 2.0**-20
            self.margins[kind.name] = ((eps + self.eps).numpy() * widen, rel * widen)
        return self.margins[kind.name] if kind.cascade else self.no_margin

    def slot(self, w: int) -> tuple[np.ndarray, ...]:
        return (
            self.heaps[w],
            self.sizes[w],
            self.floors[w],
            self.columns[w],
            self.scores[w],
            self.fills[w],
            self.overs[w],
        )

    def state(self) -> tuple[np.ndarray, ...]:
        return self.slot(next(self.worker))

    def rows(self, st: Any, tile: np.ndarray, r0: int, c0: int, kind: lowp.TileKind) -> None:
        kernels.top_rows(*self._arguments(st, tile, r0, c0, kind), self.sample_of)

    def cols(self, st: Any, tile: np.ndarray, r0: int, c0: int, kind: lowp.TileKind) -> None:
        kernels.top_cols(*self._arguments(st, tile, r0, c0, kind))

    def _arguments(
        self, st: Any, tile: np.ndarray, r0: int, c0: int, kind: lowp.TileKind
    ) -> tuple[Any, ...]:
        """The arguments ``top_rows`` and ``top_cols`` take alike: the tile, its rows' scales,
        its place, the list state ``st`` and the filter's bounds."""
        return (
            tile,
            kind.rs(r0, tile.shape[0], self.tp.a32.dtype),
            r0,
            c0,
            self.ks,
            self.slack,
            *self.margin(kind),
            *st,
            kind.cascade,
            self.tp.a32,
            self.tp.b32,
            self.floors,
            *self.known,
        )

    def finish(
        self, rescore: Any, block_rows: int, with_scores: bool = False
    ) -> tuple[np.ndarray, ...]:
        """The candidates as flat ``(rows, local columns)``, by row then column; with
        ``with_scores``, by row, and their filter scores third. Rows whose buffers overflowed
        are recomputed from their row's scores (``rescore(rows)``)."""
        k = self.ks
        # The k-th best filter score of each row: the k-th largest of the workers' top-k lists,
        # or of their buffers (reservoirs hold every item at or above a floor below the k-th).
        lists, counts = (self.heaps, self.sizes) if self.heap else (self.scores, self.fills)
        kth = np.empty(len(k), dtype=np.float64)
        kernels.union_kth(lists, counts, self.floors, k, kth)
        torch_dtype = torch.float64 if self.dtype == np.float64 else torch.float32
        lo = filters.top_floor(torch.from_numpy(kth), self.eps, torch_dtype, torch.from_numpy(k))
        lo_np = np.ascontiguousarray(lo.numpy().astype(self.dtype))
        # A row whose window reaches below its highest floor (one raised from a tile taken for a
        # sample, ``sampled``, that proved too high) is computed again from its scores: every
        # item at or above the highest floor is in the buffers, so no other row lacks one.
        over = self.overs.any(axis=0) | ((k > 0) & (lo_np < self.floors.max(axis=0)))
        found = kernels.collect_top(
            self.scores, self.columns, self.fills, lo_np, over, block_rows, with_scores
        )
        scratch.give(self.heaps, self.columns, self.scores)  # read no more
        self.heaps = self.columns = self.scores = None
        redo = np.flatnonzero(over)
        if not len(redo):
            return found
        # Many near-equal scores: those rows in two passes over their scores.
        scores = rescore(redo).numpy()
        kb = k[redo]
        row_kth = kernels.kth_largest(scores, kb).astype(np.float64)
        row_lo = filters.top_floor(
            torch.from_numpy(row_kth), self.eps[redo], torch_dtype, torch.from_numpy(kb)
        ).numpy()[:, None]
        _, wr, _, wj = kernels.window(
            scores, row_lo, np.full_like(row_lo, np.inf), cap=int(kb.max()) + kernels.WINDOW_CAP
        )
        # ``found`` holds no item of these rows: theirs (by row, then column: ``kernels.window``)
        # go in where their rows belong, the rest moved once (a sort of every item would cost
        # about what the pass's lists cost).
        at = np.searchsorted(found[0], redo[wr])
        merged = [np.insert(found[0], at, redo[wr]), np.insert(found[1], at, wj)]
        if with_scores:
            merged.append(np.insert(found[2], at, scores[wr, wj].astype(found[2].dtype)))
        return tuple(merged)


#: Chunks of fewer rows offer their positives before the pass without asking
#: ([`seeds_pay`][seeds_pay]): the sample would cost about what it decides.
SEED_MIN_ROWS = 1024
#: Rows of the chunk, evenly spaced, whose filter scores decide [`seeds_pay`][seeds_pay].
SEED_SAMPLE = 32


def seeds_pay(tp: lowp.TilePass, positives: Any, ks: np.ndarray, start: int, stop: int) -> bool:
    """Whether offering each row's positives to [`Top`][Top] before the pass pays for scoring
    them one by one. A row's floor then starts at its ``k``-th best positive, ranked ``ρ`` among
    all items. Without it the floor rises as a running top-k of items in no particular order:
    about ``k (1 + ln(n / k))`` items enter its list over a block of ``n``. The positives pay
    where ``ρ`` is below that (trained embeddings that rank most positives first) and cost a
    dot product each where it is not (the positives spread over the ranking).

    Decided on an evenly spaced sample of [`SEED_SAMPLE`][SEED_SAMPLE] rows with ``k > 0``: their
    filter scores against the block (``(SEED_SAMPLE, n)``, one small GEMM, or the scores the
    call's first-hit choice kept for the same rows; the pair a row skips, such as itself, is
    counted like any item: a choice of path, never a value). The positives pay
    where they do for at least half the sample. ``positives``: the chunk's
    [`LabelPositives`][recallkit.engine.pairs.LabelPositives] (other positives: ``True``, as
    [`Top`][Top] takes none of them); ``ks``: ``(c,)`` int64, the chunk's list lengths;
    ``start:stop``: the chunk's query rows. Chunks of fewer than [`SEED_MIN_ROWS`][SEED_MIN_ROWS]
    rows always offer them."""
    rows = np.flatnonzero(ks > 0)
    labels = isinstance(positives, LabelPositives)
    if not labels or stop - start < SEED_MIN_ROWS or len(rows) < SEED_SAMPLE:
        return True
    sample = rows[np.linspace(0, len(rows) - 1, SEED_SAMPLE).astype(np.int64)]
    block = tp.block
    space = tp.space
    product = space.sampled_scores(start + sample) if block is space.single else None
    if product is None:  # not the sample of the call's first-hit choice
        with filters.no_autocast(block.gemm.device):
            product = (block.gemm @ tp.qf.rows[torch.from_numpy(sample)].T).T  # filter_scores'
    scores = product.float().numpy()
    groups = positives.groups(block)
    lo, hi = positives.ranges(block, start, stop)
    owner, members = groups.expand(lo[sample], hi[sample])  # by sample row
    if not len(owner):
        return False
    own = scores[owner, members]
    ordered = np.lexsort((-own, owner))  # each row's positives, best first
    first = np.searchsorted(owner, np.arange(SEED_SAMPLE))
    k = ks[sample]
    has = (hi - lo)[sample] >= k  # else no k-th best positive: the floor starts nowhere
    kth = np.where(has, own[ordered[np.minimum(first + k - 1, len(own) - 1)]], np.inf)
    n = block.rows
    pays = has & (np.count_nonzero(scores >= kth[:, None], axis=1) <= k * (1.0 + np.log(n / k)))
    pays = int(pays.sum())
    return 2 * pays >= SEED_SAMPLE


#: A block's items are taken to lie in no order of their labels ([`tiles_sample`][tiles_sample])
#: while two items of one label share a tile at most this many times as often as at random.
SPREAD = 1.5


def tiles_sample(positives: Any, block: Any, tile: int) -> bool:
    """Whether each tile of ``tile`` columns is a fair sample of the block's items for
    [`Top`][Top]'s ``sampled``: labels (``positives`` a
    [`LabelPositives`][recallkit.engine.pairs.LabelPositives]) spread over the tiles, two items
    of one label sharing a tile at most [`SPREAD`][SPREAD] times as often as two items at random
    (about ``1 / tiles``). A block in the order of its labels (a dataset listed class by class)
    is not: a tile there holds a few classes, often related ones, whose items rank high."""
    if not isinstance(positives, LabelPositives):
        return False
    tiles = -(-block.rows // tile)
    groups = positives.groups(block)
    sizes = np.diff(groups.starts)
    labelled = np.repeat(groups.uniq >= 0, sizes)
    if tiles < 2 or not labelled.any():
        return False
    group = np.repeat(np.arange(len(sizes)), sizes)[labelled]
    counts = np.bincount(group * tiles + groups.members[labelled] // tile)
    together = float(np.sum(counts * (counts - 1.0)))  # ordered pairs of one label in one tile
    sizes = sizes[groups.uniq >= 0]
    pairs = float(np.sum(sizes * (sizes - 1.0)))
    return pairs > 0 and together <= SPREAD * pairs / tiles
