"""numba kernels of the CPU back end: over tiles of filter scores, over label groups, over
window items.

On the CPU the filter scores are produced tile by tile
([`recallkit.engine.cpu`][recallkit.engine.cpu]), a GEMM into a buffer that stays in cache, and each
tile is consumed at once by the tile kernels below: the score matrix is never written to memory.
Each worker thread keeps its own per-row state. A ``*_rows`` kernel reads tile row ``i`` as problem
row ``row0 + i`` over columns ``col0 + j``; a ``*_cols`` kernel reads the transposed tile (a
symmetric problem: the tile's column ``j`` is problem row ``col0 + j``, its items the columns ``row0
+ i``). Branch-free counts come first, so that the compiler vectorises them (float32 sums of ones,
exact, which fill as many SIMD lanes as the scores do: an int64 count fills half as many, and numba
widens smaller integers to int64); the rare items near a threshold are then handled one by one.

The filter scores carry rounding that depends on the BLAS, its blocking and the thread count; they
only filter, and the kernels' own arithmetic on them (any summation order, ``fastmath``) stays
within the filter's error bound. A tile holds float32 (or float64) scores, or the bits of bfloat16
scores as uint16 (a bfloat16 GEMM's own output, read without a widening copy: half the bytes); the
kernels read a tile through [`tile_value`][tile_value], which widens such bits to float32 exactly.
A ranked list's tile kernels find the items at or above a row's floor from one comparison mask per
64 items ([`at_least_mask`][at_least_mask]: a vector load, compare and mask), then take the set
bits one by one.
Exclusions come as CSR (explicit pairs) and as code ranges (ids: the members of the query's id
group, ascending); a label or id code of ``-1`` matches nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic, overload

WINDOW_CAP = 32
RUN_ROWS = 64  # rows of a parallel loop's one iteration where each needs a buffer of its own
SENTINEL = int(np.iinfo(np.int64).max)  # ties.SENTINEL: no item
NO_CODES = np.zeros(0, dtype=np.int64)
NO_SCORES = np.zeros(0, dtype=np.float64)
BF16_NEG_INF = np.uint16(0xFF80)  # bfloat16 -inf, as a tile of bfloat16 bits holds it


@intrinsic
def _widen_bf16(typingctx, bits):
    """The float32 equal to the bfloat16 whose bit pattern is ``bits`` (a uint16): the bits
    moved to the top half of a float32's."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        wide = builder.shl(builder.zext(args[0], ir.IntType(32)), ir.Constant(ir.IntType(32), 16))
        return builder.bitcast(wide, ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _ordered_bits(typingctx, x):
    """A float32's bits as a uint64 that orders as the float does (sign bit flipped for a
    positive value, every bit for a negative one; not NaN)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        u = builder.bitcast(args[0], ir.IntType(32))
        negative = builder.icmp_signed("<", u, ir.Constant(ir.IntType(32), 0))
        flipped = builder.select(
            negative, builder.not_(u), builder.or_(u, ir.Constant(ir.IntType(32), 1 << 31))
        )
        return builder.zext(flipped, ir.IntType(64))

    return types.uint64(types.float32), codegen


def tile_value(row: np.ndarray, j: int) -> Any:
    """``row[j]`` as a score: a bfloat16 tile's bits (uint16) widened to float32 (exact), any
    other tile's value as it is."""
    if row.dtype == np.uint16:
        return np.array(np.uint32(row[j]) << np.uint32(16)).view(np.float32)[()]
    return row[j]


@overload(tile_value, inline="always")
def _tile_value(row, j):  # pragma: no cover - compiled
    if row.dtype == types.uint16:
        return lambda row, j: _widen_bf16(row[j])
    return lambda row, j: row[j]


def exclude(tile: np.ndarray, i: int, j: int) -> None:
    """Mark the tile's pair ``(i, j)`` excluded: ``-inf`` in the tile's own type."""
    tile[i, j] = BF16_NEG_INF if tile.dtype == np.uint16 else -np.inf


@overload(exclude, inline="always")
def _exclude(tile, i, j):  # pragma: no cover - compiled
    if tile.dtype == types.uint16:

        def put(tile, i, j):
            tile[i, j] = BF16_NEG_INF

        return put

    def put(tile, i, j):
        tile[i, j] = -np.inf

    return put


@numba.njit(nogil=True, cache=True, boundscheck=False)
def select(values, j):  # pragma: no cover - compiled
    """The ``j``-th smallest (0-indexed) of ``values``, which it reorders: quickselect with a
    median-of-three pivot and a branch-free partition (each item moved by arithmetic on the
    comparison, not by a branch the CPU mispredicts half the time); a pivot that is the range's
    smallest value splits off its equals instead, so runs of ties still shrink the range. The
    value is the order statistic, the same as ``np.partition(values, j)[j]``; numba compiles
    ``np.partition`` inside each parallel loop anew (10-20 s a site), this once (a second)."""
    lo = 0
    hi = values.shape[0]  # the range [lo, hi) holds the answer
    while hi - lo > 1:
        a, b, c = values[lo], values[(lo + hi - 1) // 2], values[hi - 1]
        pivot = max(min(a, b), min(max(a, b), c))
        s = lo
        for i in range(lo, hi):  # [lo, s) below the pivot, [s, i) not
            x = values[i]
            values[i] = values[s]
            values[s] = x
            s += x < pivot
        if j < s:
            hi = s  # s < hi: the pivot itself is not below the pivot
            continue
        if s == lo:  # nothing below the pivot: [lo, s) becomes the pivot's equals
            for i in range(lo, hi):
                x = values[i]
                values[i] = values[s]
                values[s] = x
                s += x <= pivot
            if j < s:
                return pivot
        lo = s
    return values[lo]


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath=True)
def _dot(x, y):  # pragma: no cover - compiled
    s = 0.0
    for k in range(x.shape[0]):
        s += x[k] * y[k]
    return s


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _excluded(j, p, end, ex_cols):  # pragma: no cover - compiled
    """Whether column ``j`` is excluded, walking a row's ascending excluded columns from ``p``
    (columns are visited in ascending order); returns (excluded, new p)."""
    while p < end and ex_cols[p] < j:
        p += 1
    return p < end and ex_cols[p] == j, p


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _skipped(i, j, p, end, ex_cols, qx, rx):  # pragma: no cover - compiled
    """Whether row ``i`` skips column ``j``: an explicit pair ([`_excluded`][_excluded]) or an equal
    exclusion code (``qx``/``rx``, empty when there are none); returns (skipped, new p)."""
    gone, p = _excluded(j, p, end, ex_cols)
    if not gone and qx.shape[0] > 0:
        code = qx[i]
        gone = code >= 0 and rx[j] == code
    return gone, p


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _label_scores_numba(
    a, b, order, lo, hi, members, ex_ptr, ex_cols, qx, rx, eps, ptr, cols, out, count, best
):  # pragma: no cover
    for t in numba.prange(order.shape[0]):
        i = order[t]
        p = ex_ptr[i]
        n = ptr[i]
        top = -np.inf
        for q in range(lo[i], hi[i]):
            j = members[q]
            gone, p = _skipped(i, j, p, ex_ptr[i + 1], ex_cols, qx, rx)
            cols[n] = j
            v = -np.inf if gone else np.float64(_dot32(a[i], b[j]))
            out[n] = v
            top = max(top, v)
            n += 1
        if eps.shape[0] == 0:
            continue
        # The candidates for the row's best positive: within 2 eps of the best filter score,
        # moved to the front of the row's columns (``best``: their columns, row by row).
        kept = ptr[i]
        if top > -np.inf:
            floor = top - 2.0 * eps[i]
            for q in range(ptr[i], n):
                if out[q] >= floor:
                    best[kept] = cols[q]
                    kept += 1
        count[i] = kept - ptr[i]


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _gather_runs(ptr, count, offsets, values, rows, out):  # pragma: no cover - compiled
    """Row ``i``'s first ``count[i]`` entries of ``values[ptr[i]:]`` to ``out[offsets[i]:]``,
    ``rows`` set to ``i`` alongside."""
    for i in numba.prange(count.shape[0]):
        o = offsets[i]
        for a in range(count[i]):
            rows[o + a] = i
            out[o + a] = values[ptr[i] + a]


def label_scores(
    a: torch.Tensor,
    b: torch.Tensor,
    codes: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    members: np.ndarray,
    ex_ptr: np.ndarray,
    ex_cols: np.ndarray,
    codes_x: tuple[np.ndarray, np.ndarray] | None,
    eps: torch.Tensor | None = None,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[torch.Tensor, torch.Tensor] | None]:
    """Each row's positives and their filter scores, as ``(ptr, cols, scores)``: row ``i``'s
    are ``cols[ptr[i]:ptr[i+1]]`` (ascending), scored ``-inf`` where skipped; and, with ``eps``,
    the candidates for each row's best positive from the same scores: ``(rows, local columns)``
    (CPU tensors, by row then column), the positives within ``2 eps[i]`` of the row's best
    (else ``None``).

    Row ``i``'s positives are the columns ``members[lo[i]:hi[i]]`` (ascending), less its
    excluded columns ``ex_cols[ex_ptr[i]:ex_ptr[i+1]]`` (ascending) and the columns whose
    exclusion code equals its own (``codes_x = (row codes, column codes)``). A score is the
    float32 dot product of the filter rows in any order ([`_dot32`][_dot32], within the filter's
    error bound like the GEMM's); rows are visited class by class (``codes``) for the cache."""
    ptr = np.zeros(len(lo) + 1, dtype=np.int64)
    np.cumsum(hi - lo, out=ptr[1:])
    size = int(ptr[-1])
    cols = np.empty(size, dtype=np.int64)
    out = np.empty(size, dtype=np.float64)
    order = np.argsort(codes, kind="stable")
    qx, rx = codes_x if codes_x is not None else (NO_CODES, NO_CODES)
    e = NO_SCORES if eps is None else eps.numpy().astype(np.float64)
    count = np.zeros(len(lo) if eps is not None else 0, dtype=np.int64)
    best = np.empty(size if eps is not None else 0, dtype=np.int64)
    x, y = a.numpy(), b.numpy()
    _label_scores_numba(
        x, y, order, lo, hi, members, ex_ptr, ex_cols, qx, rx, e, ptr, cols, out, count, best
    )
    if eps is None:
        return (ptr, cols, out), None
    offsets = np.zeros(len(lo) + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    rows = np.empty(int(offsets[-1]), dtype=np.int64)
    local = np.empty(int(offsets[-1]), dtype=np.int64)
    _gather_runs(ptr, count, offsets, best, rows, local)
    return (ptr, cols, out), (torch.from_numpy(rows), torch.from_numpy(local))


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _positive_window_numba(scores, lo, hi, members, eps, cap, top, count, index):  # pragma: no cov
    """Per row: the best filter score among its positives ``members[lo[i]:hi[i]]``, and the
    positives within ``2 eps`` of it (up to ``cap`` collected; all counted)."""
    for i in numba.prange(scores.shape[0]):
        row = scores[i]
        best = -np.inf
        for p in range(lo[i], hi[i]):
            s = np.float64(row[members[p]])
            if s > best:
                best = s
        top[i] = best
        n = 0
        if best > -np.inf:
            floor = best - 2.0 * eps[i]
            for p in range(lo[i], hi[i]):
                j = members[p]
                s = np.float64(row[j])
                if s >= floor and s > -np.inf:
                    if n < cap:
                        index[i, n] = j
                    n += 1
        count[i] = n


@numba.njit(cache=True, boundscheck=False)
def _positive_fill_numba(scores, rows, lo, hi, members, floor, offsets, out):  # pragma: no cover
    for a in range(rows.shape[0]):
        i = rows[a]
        n = offsets[a]
        for p in range(lo[i], hi[i]):
            j = members[p]
            s = np.float64(scores[i, j])
            if s >= floor[a] and s > -np.inf:
                out[n] = j
                n += 1


def positive_window(
    scores: torch.Tensor, lo: np.ndarray, hi: np.ndarray, members: np.ndarray, eps: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidates for each row's best positive: ``(rows, local columns)``, CPU, ascending.

    A row's positives are the columns ``members[lo[i]:hi[i]]``; excluded columns score
    ``-inf``. Kept: the positives whose filter score is within ``2 eps[i]`` of the row's best
    positive filter score, a set that holds every positive whose exact score could be the best.
    """
    c = scores.shape[0]
    top = np.empty(c, dtype=np.float64)
    count = np.empty(c, dtype=np.int64)
    index = np.empty((c, WINDOW_CAP), dtype=np.int64)
    e = eps.numpy().astype(np.float64)
    s = scores.numpy()
    _positive_window_numba(s, lo, hi, members, e, WINDOW_CAP, top, count, index)
    kept = np.arange(WINDOW_CAP)[None, :] < count[:, None]
    rows, slot = np.nonzero(kept & (count[:, None] <= WINDOW_CAP))
    cols = index[rows, slot]
    over = np.flatnonzero(count > WINDOW_CAP)
    if len(over):  # many near-equal positives: collect those rows whole
        offsets = np.concatenate([[0], np.cumsum(count[over])])
        extra = np.empty(int(offsets[-1]), dtype=np.int64)
        floor = top[over] - 2.0 * e[over]
        _positive_fill_numba(s, over, lo, hi, members, floor, offsets[:-1], extra)
        rows = np.concatenate([rows, np.repeat(over, count[over])])
        cols = np.concatenate([cols, extra])
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
    return torch.from_numpy(rows.astype(np.int64)), torch.from_numpy(cols.astype(np.int64))


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _window_numba(scores, cols, lo, hi, cap, above, count, index):  # pragma: no cover
    rows = scores.shape[0]
    slots = lo.shape[1]
    for i in numba.prange(rows):
        row = scores[i]
        for t in range(slots):
            low = lo[i, t]
            high = hi[i, t]
            a = 0
            n = 0
            for j in range(cols):
                s = row[j]
                if s >= low:  # rare for most rows: one predictable compare per item
                    if s > high:
                        a += 1
                    else:
                        if n < cap:
                            index[i, t, n] = j
                        n += 1
            above[i, t] = a
            count[i, t] = n


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _sift_down(heap, k):  # pragma: no cover - compiled
    """Restore the min-heap ``heap[:k]`` after its root was replaced."""
    p = 0
    while True:
        left = 2 * p + 1
        if left >= k:
            break
        small = left
        if left + 1 < k and heap[left + 1] < heap[left]:
            small = left + 1
        if heap[small] < heap[p]:
            heap[p], heap[small] = heap[small], heap[p]
            p = small
        else:
            break


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _kth_numba(scores, cols, ks, out):  # pragma: no cover - compiled
    """The k-th largest float32 score of each row (``-inf`` when fewer than k are finite)."""
    rows = scores.shape[0]
    for i in numba.prange(rows):
        k = ks[i]
        if k <= 0:
            out[i] = np.inf
            continue
        row = scores[i]
        heap = np.full(k, -np.inf, dtype=scores.dtype)  # min-heap of the k largest so far
        root = heap[0]
        for j in range(cols):
            s = row[j]
            if s > root:
                heap[0] = s
                _sift_down(heap, k)
                root = heap[0]
        out[i] = heap[0]


INSERTION = 96  # rows of at most this many items are sorted by insertion (no allocation)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _ranked_row(exact, glob, lo, n, values, index):  # pragma: no cover - compiled
    """Items ``lo:lo+n`` (ascending index) into ``values[:n]``/``index[:n]`` by the tie rule:
    stable insertion on descending score (an item goes after the items it ties with)."""
    for a in range(n):
        v = exact[lo + a]
        g = glob[lo + a]
        b = a
        while b > 0 and values[b - 1] < v:
            values[b] = values[b - 1]
            index[b] = index[b - 1]
            b -= 1
        values[b] = v
        index[b] = g


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _segment_top_numba(starts, glob, exact, ks, out_index, out_value, tails):  # pragma: no cover
    rows, width = out_index.shape
    for t in numba.prange((rows + RUN_ROWS - 1) // RUN_ROWS):
        values = np.empty(INSERTION, dtype=np.float64)
        index = np.empty(INSERTION, dtype=np.int64)
        for i in range(t * RUN_ROWS, min(rows, (t + 1) * RUN_ROWS)):
            lo = starts[i]
            hi = starts[i + 1]
            k = max(min(ks[i], hi - lo), 0)
            tails[i] = 0
            for a in range(k, width):  # the padding, written here (not a pass of its own)
                out_index[i, a] = -1
                out_value[i, a] = -np.inf
            if k == 0:
                continue
            if hi - lo <= INSERTION:
                _ranked_row(exact, glob, lo, hi - lo, values, index)
                sorted_values, sorted_index = values, index
            else:  # stable on -score: items arrive in ascending index
                order = np.argsort(-exact[lo:hi], kind="mergesort")
                sorted_values = exact[lo:hi][order]
                sorted_index = glob[lo:hi][order]
            for a in range(k):
                out_index[i, a] = sorted_index[a]
                out_value[i, a] = sorted_values[a]
            if k == ks[i]:
                kth = sorted_values[k - 1]
                n = 0
                while k + n < hi - lo and sorted_values[k + n] == kth:
                    n += 1
                tails[i] = n


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _segment_tail_numba(starts, glob, exact, ks, tails, tail_index):  # pragma: no cover
    for i in numba.prange(starts.shape[0] - 1):
        n = tails[i]
        if n == 0:
            continue
        lo = starts[i]
        hi = starts[i + 1]
        order = np.argsort(-exact[lo:hi], kind="mergesort")
        for a in range(n):
            tail_index[i, a] = glob[lo + order[ks[i] + a]]


def segment_top(
    rows: torch.Tensor, glob: torch.Tensor, exact: torch.Tensor, ks: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row, the ``ks[i]`` best items by the tie rule (higher exact score, then lower index):
    ``(c, width)`` indices and scores, ``-1``/``-inf`` padding; and the row's *tail*, the items
    beyond the ``k`` best whose score equals the ``k``-th's, as ``(c, t)`` indices and scores.

    ``rows`` are the items' rows (``glob`` ascending within a row).
    """
    c = ks.shape[0]
    r = rows.numpy()
    if r.size and np.any(r[1:] < r[:-1]):
        order = np.argsort(r, kind="stable")
        r, glob, exact = r[order], glob[order], exact[order]
    starts = np.zeros(c + 1, dtype=np.int64)
    starts[1:] = np.cumsum(np.bincount(r, minlength=c))
    out_index = np.empty((c, width), dtype=np.int64)  # every entry written by the kernel
    out_value = np.empty((c, width), dtype=np.float64)
    tails = np.zeros(c, dtype=np.int64)
    g = np.ascontiguousarray(glob.numpy())
    e = np.ascontiguousarray(exact.numpy())
    k = ks.numpy().astype(np.int64)
    _segment_top_numba(starts, g, e, k, out_index, out_value, tails)
    t = int(tails.max(initial=0))
    tail_index = np.full((c, t), -1, dtype=np.int64)
    if t:
        _segment_tail_numba(starts, g, e, k, tails, tail_index)
    kth = out_value[np.arange(c), np.clip(k - 1, 0, max(width - 1, 0))] if width else out_value
    tail_value = np.where(tail_index >= 0, kth[:, None] if width else 0.0, -np.inf)
    return (
        torch.from_numpy(out_index),
        torch.from_numpy(out_value),
        torch.from_numpy(tail_index),
        torch.from_numpy(tail_value.astype(np.float64)),
    )


@numba.njit(cache=True, boundscheck=False)
def _segment_best_numba(rows, score, index, best, where, equal):  # pragma: no cover - compiled
    for p in range(rows.shape[0]):
        r = rows[p]
        if r < 0:
            continue
        s = score[p]
        if s > best[r] or (s == best[r] and index[p] < where[r]):
            best[r] = s
            where[r] = index[p]
    for p in range(rows.shape[0]):
        r = rows[p]
        if r >= 0 and score[p] == best[r] and np.isfinite(score[p]):
            equal[r] += 1


def segment_best(
    rows: torch.Tensor, score: torch.Tensor, index: torch.Tensor, count: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[`ties.segment_best`][recallkit.engine.ties.segment_best] on CPU tensors in one pass over
    the items (the same ``(best, where, equal)``, bit for bit: the tie rule applied item by
    item; a row's items all at ``-inf`` keep their lowest index)."""
    sc = np.ascontiguousarray(score.numpy())
    best = np.full(count, -np.inf, dtype=sc.dtype)
    where = np.full(count, SENTINEL, dtype=np.int64)
    equal = np.zeros(count, dtype=np.int64)
    if rows.numel():
        _segment_best_numba(
            np.ascontiguousarray(rows.numpy(), dtype=np.int64),
            sc,
            np.ascontiguousarray(index.numpy(), dtype=np.int64),
            best,
            where,
            equal,
        )
    return torch.from_numpy(best), torch.from_numpy(where), torch.from_numpy(equal)


@numba.njit(cache=True, boundscheck=False)
def _split_tail_numba(index, score, ks, kmax, kmin, top_i, top_s, tails):  # pragma: no cover
    c, width = index.shape
    for r in range(c):
        k = ks[r]
        for j in range(min(kmax, width)):
            if j < k:
                top_i[r, j] = index[r, j]
                top_s[r, j] = score[r, j]
        if k <= 0 or k > width or index[r, k - 1] < 0:
            continue
        kth = score[r, k - 1]
        n = 0
        for j in range(max(kmin, k), width):
            if index[r, j] >= 0 and score[r, j] == kth:
                n += 1
        tails[r] = n


@numba.njit(cache=True, boundscheck=False)
def _fill_tail_numba(index, score, ks, kmin, tails, tail_i, tail_s):  # pragma: no cover
    c, width = index.shape
    for r in range(c):
        if tails[r] == 0:
            continue
        k = ks[r]
        kth = score[r, k - 1]
        n = 0
        for j in range(max(kmin, k), width):
            if n < tail_i.shape[1] and index[r, j] >= 0 and score[r, j] == kth:
                tail_i[r, n] = index[r, j]
                tail_s[r, n] = score[r, j]
                n += 1


def split_tail(
    index: torch.Tensor,
    score: torch.Tensor,
    ks: torch.Tensor,
    tail_width: int | None = None,
    kmax: int | None = None,
    kmin: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """[`ties.split_tail`][recallkit.engine.ties.split_tail] on CPU tensors in two passes over
    the lists (the same four tensors, bit for bit)."""
    c, width = index.shape
    k = np.ascontiguousarray(ks.numpy(), dtype=np.int64)
    if kmax is None:
        kmax = int(k.max()) if c else 0
    kmin = min(max(kmin, 0), width)
    idx = np.ascontiguousarray(index.numpy(), dtype=np.int64)
    sc = np.ascontiguousarray(score.numpy())
    top_i = np.full((c, kmax), -1, dtype=np.int64)
    top_s = np.full((c, kmax), -np.inf, dtype=sc.dtype)
    tails = np.zeros(c, dtype=np.int64)
    _split_tail_numba(idx, sc, k, kmax, kmin, top_i, top_s, tails)
    if tail_width is None:
        tail_width = int(tails.max()) if c and width else 0
    tail_i = np.full((c, tail_width), -1, dtype=np.int64)
    tail_s = np.full((c, tail_width), -np.inf, dtype=sc.dtype)
    if tail_width:  # a row's tail beyond a given width is cut, as ties.split_tail cuts it
        _fill_tail_numba(idx, sc, k, kmin, tails, tail_i, tail_s)
    return tuple(torch.from_numpy(x) for x in (top_i, top_s, tail_i, tail_s))


def window(
    scores: np.ndarray, lo: np.ndarray, hi: np.ndarray, cap: int = WINDOW_CAP
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row and slot of a score matrix ``(c, w)``: how many scores are above ``hi``, and
    which lie in ``[lo, hi]`` (``lo``/``hi`` ``(c, g)``). Returns ``above (c, g)`` and the window
    as flat ``(rows, slots, columns)`` arrays, columns ascending within a (row, slot)."""
    c, g = lo.shape
    above = np.empty((c, g), dtype=np.int64)
    count = np.empty((c, g), dtype=np.int64)
    index = np.empty((c, g, cap), dtype=np.int64)
    s = np.ascontiguousarray(scores)
    lo = np.ascontiguousarray(lo, dtype=s.dtype)
    hi = np.ascontiguousarray(hi, dtype=s.dtype)
    _window_numba(s, s.shape[1], lo, hi, cap, above, count, index)
    kept = np.arange(cap)[None, None, :] < count[:, :, None]
    r, t, n = np.nonzero(kept & (count[:, :, None] <= cap))
    rows, slots, columns = [r], [t], [index[r, t, n]]
    for i, u in np.argwhere(count > cap):  # rare (many near-equal scores): collect whole
        found = np.flatnonzero((s[i] >= lo[i, u]) & (s[i] <= hi[i, u]))
        rows.append(np.full(len(found), i))
        slots.append(np.full(len(found), u))
        columns.append(found)
    out = [np.ascontiguousarray(np.concatenate(x), dtype=np.int64) for x in (rows, slots, columns)]
    order = np.lexsort((out[2], out[1], out[0]))
    return above, out[0][order], out[1][order], out[2][order]


def kth_largest(scores: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """The ``ks[i]``-th largest score of each row (``-inf`` if fewer; ``+inf`` where k = 0)."""
    out = np.empty(scores.shape[0], dtype=scores.dtype)
    s = np.ascontiguousarray(scores)
    _kth_numba(s, s.shape[1], np.ascontiguousarray(ks, dtype=np.int64), out)
    return out


_BLOCK = 64  # items checked at once (branch-free) when looking for the few near a threshold
# A top-k row whose tile holds more than ``RAISE_HITS k + RAISE_MIN`` items above its floor
# raises the floor from them first ([`top_rows`][top_rows]): a count costs a fraction of a
# nanosecond an item, where admitting an item costs a float32 dot product or a reservoir entry. The
# bisection stops within ``RAISE_CLOSE`` items of ``k`` or after ``RAISE_STEPS`` counts.
RAISE_HITS = 2
RAISE_MIN = 32
RAISE_CLOSE = 8
RAISE_STEPS = 14
# The values the raise's first range is taken from: every ``RAISE_STRIDE``-th of the row.
RAISE_STRIDE = 8
# A tile taken for a sample ([`top_rows`][top_rows]'s ``columns``) keeps above a row's floor its
# expected share ``μ`` of the row's top k plus ``SAMPLE_SPREAD`` standard deviations (``√μ`` at
# most) plus ``SAMPLE_EXTRA`` items: more of the top k fall in the tile about once in 10^4 rows
# (a Poisson tail), and only such a row is computed again.
SAMPLE_SPREAD = 4.0
SAMPLE_EXTRA = 2


@numba.njit(nogil=True, cache=True, boundscheck=False)
def mask_tile(tile, row0, col0, ptr, cols):  # pragma: no cover - compiled
    """Set excluded pairs to ``-inf``: row ``row0 + i`` excludes ``cols[ptr[.]:ptr[.+1]]``
    (ascending)."""
    rows, width = tile.shape
    col1 = col0 + width
    for i in range(rows):
        lo = ptr[row0 + i]
        hi = ptr[row0 + i + 1]
        if lo == hi:
            continue
        p = lo + np.searchsorted(cols[lo:hi], col0)
        while p < hi and cols[p] < col1:
            exclude(tile, i, cols[p] - col0)
            p += 1


@numba.njit(nogil=True, cache=True, boundscheck=False)
def mask_ranges(tile, row0, col0, lo, hi, members):  # pragma: no cover - compiled
    """Set excluded pairs to ``-inf``: row ``row0 + i`` excludes the columns
    ``members[lo[.]:hi[.]]`` (ascending; the members of its exclusion code's group)."""
    rows, width = tile.shape
    col1 = col0 + width
    for i in range(rows):
        a = lo[row0 + i]
        b = hi[row0 + i]
        if a == b:
            continue
        p = a + np.searchsorted(members[a:b], col0)
        while p < b and members[p] < col1:
            exclude(tile, i, members[p] - col0)
            p += 1


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath=True)
def _dot32(x, y):  # pragma: no cover - compiled
    """float32 dot product in any order (SIMD): within the float32 filter's bound."""
    s = np.float32(0.0)
    for k in range(x.shape[0]):
        s += x[k] * y[k]
    return s


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _down32(x):  # pragma: no cover - compiled
    """``x`` (float64) rounded down to float32, at least float32's lowest finite value."""
    y = np.float32(x)
    if np.float64(y) > x:
        y = np.nextafter(y, np.float32(-np.inf))
    if y < np.float32(-3.4028234663852886e38):
        y = np.float32(-3.4028234663852886e38)
    return y


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _up32(x):  # pragma: no cover - compiled
    """``x`` (float64) rounded up to float32."""
    y = np.float32(x)
    if np.float64(y) < x:
        y = np.nextafter(y, np.float32(np.inf))
    return y


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _admit(floor, margin, rel, scale):  # pragma: no cover - compiled
    """The least tile value (rounded down to float32) whose item may have a float32 score of
    ``floor`` or more, where an item's value ``v`` (its tile value times ``scale``) lies within
    ``margin + rel |v|`` of that score (a cascade's bound, charged partly to the value; ``rel = 0``:
    an absolute one). ``v + rel |v|`` rises with ``v`` (``rel < 1``): the least ``v`` solves
    ``v + rel |v| = floor - margin``."""
    f = np.float64(floor) - margin
    f = f / (1.0 + rel) if f >= 0.0 else f / (1.0 - rel)
    return _down32(f / scale)


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _low_edge(v, margin, rel):  # pragma: no cover - compiled
    """The least float32 score of an item of value ``v`` or more (as in [`_admit`][_admit]):
    ``v - rel |v|`` rises with ``v``."""
    return v - rel * abs(v) - margin


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _classify(f, low, high):  # pragma: no cover - compiled
    """A cascade item's float32 score against its float32 window: 1 above, 0 inside, -1 below."""
    if f > high:
        return 1
    return 0 if f >= low else -1


@numba.njit(nogil=True, cache=True, boundscheck=False)
def window_rows(
    tile, rs, row0, col0, lo, hi, cap, above, count, index, cascade, a32, b32, lo32, hi32
):  # pragma: no cover
    """[`window`][window] over one tile, accumulated into ``above``/``count``/``index`` (``(n, g)``,
    ``(n, g)``, ``(n, g, cap)``). Row ``i`` of the tile is worth ``rs[i]`` times its values (the
    thresholds are divided by it in float64 and rounded outwards to float32). With ``cascade``,
    the tile is a low-precision filter: each item inside ``[lo, hi]`` is scored in float32 at
    once (``a32[row] · b32[col]``) and counted above, kept or dropped by ``[lo32, hi32]``."""
    rows, width = tile.shape
    slots = lo.shape[1]
    for i in range(rows):
        r = row0 + i
        row = tile[i]
        scale = np.float64(rs[i])
        for t in range(slots):
            low = _down32(np.float64(lo[r, t]) / scale)
            high = _up32(np.float64(hi[r, t]) / scale)
            at_least, over = _counts(row, low, high)
            above[r, t] += over
            inside = at_least - over
            n = count[r, t]
            for b in range(0, width, _BLOCK):
                if inside <= 0:
                    break
                end = min(b + _BLOCK, width)
                found = 0
                for j in range(b, end):
                    found += (tile_value(row, j) >= low) & (tile_value(row, j) <= high)
                if found == 0:
                    continue
                inside -= found
                for j in range(b, end):
                    s = tile_value(row, j)
                    if s >= low and s <= high:
                        if cascade:
                            side = _classify(_dot32(a32[r], b32[col0 + j]), lo32[r, t], hi32[r, t])
                            if side != 0:
                                above[r, t] += side > 0
                                continue
                        if n < cap:
                            index[r, t, n] = col0 + j
                        n += 1
            count[r, t] = n


@numba.njit(nogil=True, cache=True, boundscheck=False)
def window_cols(
    tile, rs, row0, col0, lo, hi, cap, above, count, index, cascade, a32, b32, lo32, hi32
):  # pragma: no cover
    """[`window_rows`][window_rows] of the transposed tile, one slot
    (``lo``/``hi``/``above``/``count`` of shape ``(n,)``, ``index`` ``(n, cap)``): tile row ``i``
    times ``rs[i]`` is the score of item ``row0 + i`` for the rows ``col0 + j``."""
    rows, width = tile.shape
    low = lo[col0 : col0 + width]
    high = hi[col0 : col0 + width]
    acc = above[col0 : col0 + width]
    tops = np.zeros(width, dtype=np.int32)  # the tile's items above, added to ``acc`` at the end
    for i in range(rows):
        row = tile[i]
        scale = rs[i]
        inside = _counts_cols(row, scale, low, high, tops)
        for b in range(0, width, _BLOCK):
            if inside <= 0:
                break
            end = min(b + _BLOCK, width)
            found = 0
            for j in range(b, end):
                s = tile_value(row, j) * scale
                found += (s >= low[j]) & (s <= high[j])
            if found == 0:
                continue
            inside -= found
            for j in range(b, end):
                s = tile_value(row, j) * scale
                if s >= low[j] and s <= high[j]:
                    r = col0 + j
                    if cascade:
                        side = _classify(_dot32(a32[r], b32[row0 + i]), lo32[r], hi32[r])
                        if side != 0:
                            acc[j] += side > 0
                            continue
                    n = count[r]
                    if n < cap:
                        index[r, n] = row0 + i
                    count[r] = n + 1
    for j in range(width):
        acc[j] += tops[j]


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _offer(
    r, s, col, ks, slack, heap, size, floor, buf_col, buf_score, fill, over
):  # pragma: no cover
    """Offer item ``col`` with filter score ``s`` to row ``r``'s running top-k: a min-heap of
    the ``ks[r]`` best scores and a buffer of every item within ``slack[r]`` of its root (the
    root only rises, so nothing dropped could be needed later; ``floor`` may start higher, at a
    known lower bound of the k-th score). ``floor`` has the scores' type:
    its rounding is far below the slack's margin over the final ``2 eps``. A full buffer is
    compacted; one that stays over half full marks the row in ``over`` (the caller recomputes
    it)."""
    k = ks[r]
    h = heap[r]
    n = size[r]
    if n < k:
        p = n
        h[p] = s
        while p > 0:
            parent = (p - 1) // 2
            if h[parent] > h[p]:
                h[parent], h[p] = h[p], h[parent]
                p = parent
            else:
                break
        size[r] = n + 1
        if n + 1 == k:
            f = np.float64(h[0]) - slack[r]  # rounded to the scores' type
            if f > floor[r]:
                floor[r] = f
    elif s > h[0]:
        h[0] = s
        _sift_down(h, k)
        f = np.float64(h[0]) - slack[r]
        if f > floor[r]:
            floor[r] = f
    if s >= floor[r]:
        cap = buf_col.shape[1]
        f = fill[r]
        if f == cap:
            kept = 0
            for a in range(cap):
                if buf_score[r, a] >= floor[r]:
                    buf_col[r, kept] = buf_col[r, a]
                    buf_score[r, kept] = buf_score[r, a]
                    kept += 1
            f = kept
            if f > cap // 2:
                over[r] = True
                return
        buf_col[r, f] = col
        buf_score[r, f] = s
        fill[r] = f + 1


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _compact(r, k, slack, floor, buf_col, buf_score, fill, over):  # pragma: no cover - compiled
    """Row ``r``'s full buffer: raise its floor to the buffer's k-th best score minus the slack
    (the k-th best of all items seen can only be higher) and drop what lies below. A buffer
    that stays nearly full (many near-equal scores) marks the row in ``over``."""
    cap = buf_col.shape[1]
    n = fill[r]
    if n >= k:
        values = buf_score[r, :n].copy()
        kth = select(values, n - k)
        f = np.float64(kth) - slack[r]  # rounded to the scores' type
        if f > floor[r]:
            floor[r] = f
    kept = 0
    for a in range(n):
        if buf_score[r, a] >= floor[r]:
            buf_col[r, kept] = buf_col[r, a]
            buf_score[r, kept] = buf_score[r, a]
            kept += 1
    fill[r] = kept
    if kept > cap - cap // 4:
        over[r] = True


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _keep(
    r, s, col, ks, slack, heap, size, floor, buf_col, buf_score, fill, over
):  # pragma: no cover
    """Offer ``(col, s)`` to row ``r``: its heap ([`_offer`][_offer], ``heap`` not empty) or its
    reservoir (every item at or above the floor; a full one compacted, [`_compact`][_compact]).
    The tile kernels offer to a heap (inlined) and append to a reservoir with room themselves:
    a call that passes arrays costs more than the append (about 80 ns), and most items kept are
    such offers and appends."""
    if heap.shape[1] > 0:
        _offer(r, s, col, ks, slack, heap, size, floor, buf_col, buf_score, fill, over)
        return
    if fill[r] == buf_col.shape[1]:
        _compact(r, ks[r], slack, floor, buf_col, buf_score, fill, over)
        if over[r] or s < floor[r]:
            return
    buf_col[r, fill[r]] = col
    buf_score[r, fill[r]] = s
    fill[r] += 1


@numba.njit(parallel=True, cache=True, boundscheck=False)
def seed_top(
    ptr, cols, scores, ks, slack, heap, size, floor, buf_col, buf_score, fill, over
):  # pragma: no cover
    """Offer each row ``r`` the items it knows before a pass, ``cols[ptr[r]:ptr[r+1]]`` with
    their filter scores (``-inf``: none), as a tile would ([`_keep`][_keep]); a reservoir holding
    ``ks[r]`` of them is compacted, which raises its floor to their ``ks[r]``-th best minus the
    slack. The pass then skips these items (``known_q``/``known_c`` of [`top_rows`][top_rows])."""
    heap_mode = heap.shape[1] > 0
    cap = buf_col.shape[1]
    for r in numba.prange(ks.shape[0]):
        if ks[r] <= 0:
            continue
        for q in range(ptr[r], ptr[r + 1]):
            s = scores[q]
            if s > -np.inf and s >= floor[r] and not over[r]:  # as the tile kernels offer
                if heap_mode:
                    _offer(
                        r, s, cols[q], ks, slack, heap, size, floor, buf_col, buf_score, fill, over
                    )
                elif fill[r] < cap:
                    buf_col[r, fill[r]] = cols[q]
                    buf_score[r, fill[r]] = s
                    fill[r] += 1
                else:
                    _keep(
                        r, s, cols[q], ks, slack, heap, size, floor, buf_col, buf_score, fill, over
                    )
        if not heap_mode and fill[r] >= ks[r] and not over[r]:
            _compact(r, ks[r], slack, floor, buf_col, buf_score, fill, over)


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _shared_floor(floors, floor, r):  # pragma: no cover - compiled
    """Row ``r``'s floor raised to the highest of the workers' floors (``floors``, one row per
    worker; ``floor`` is this worker's). Each is below the ``k``-th float32 score of the items
    its worker has seen, so of all items; floors only rise, so a value read while another worker
    writes it is one it held."""
    for w in range(floors.shape[0]):
        if floors[w, r] > floor[r]:
            floor[r] = floors[w, r]


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _value_range(row, step):  # pragma: no cover - compiled
    """The largest of ``row[::step]`` and its smallest above ``-inf`` (``inf`` if none)."""
    top = -np.inf
    bottom = np.inf
    for j in range(0, row.shape[0], step):
        v = tile_value(row, j)
        top = max(top, v)
        if v > -np.inf:
            bottom = min(bottom, v)
    return top, bottom


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _raise_floor(row, scale, start, hits, k, slack, margin, rel, r, floor):  # pragma: no cover
    """Row ``r`` of a tile with ``hits > k`` items at or above ``start``: a threshold ``v`` with
    at least ``k`` of its items at or above it, by bisection between ``start`` and the row's
    largest value (each step one branch-free count). Their float32 scores are at least
    ``v scale - rel |v scale| - margin`` ([`_low_edge`][_low_edge]), so the row's ``k``-th float32
    score is too: the floor rises to that less the slack. Returns the new ``start`` and its count
    of items.

    The bisection starts from the range of every [`RAISE_STRIDE`][RAISE_STRIDE]-th value (a
    scan of them all costs more than the counts), widened to the row's own where a count shows
    it too narrow: fewer than ``k`` items at or above its smallest value, or ``k`` or more at
    or above its largest."""
    width = row.shape[0]
    top, bottom = _value_range(row, RAISE_STRIDE)
    lo = max(start, _down32(np.float64(bottom)))  # finite (``start`` is -inf while the floor is)
    count = _at_least(row, np.float32(1.0), lo, 0, width)
    if count < k:  # the row's smallest value instead
        top, bottom = _value_range(row, 1)
        lo = max(start, _down32(np.float64(bottom)))
        count = _at_least(row, np.float32(1.0), lo, 0, width)
        if count < k:
            return start, hits
    else:
        high = _down32(np.float64(top))
        c = _at_least(row, np.float32(1.0), high, 0, width)
        if c >= k and high > lo:  # k or more above the sample's largest: the row's largest
            lo, count = high, c
            top = _value_range(row, 1)[0]
    hi = top
    for _ in range(RAISE_STEPS):
        if count <= k + RAISE_CLOSE:
            break
        mid = np.float32(0.5 * (np.float64(lo) + np.float64(hi)))
        if not lo < mid < hi:
            break
        c = _at_least(row, np.float32(1.0), mid, 0, width)
        if c >= k:
            lo, count = mid, c
        else:
            hi = mid
    f = _low_edge(np.float64(lo) * scale, margin, rel) - slack  # rounded to the scores' type
    if f <= floor[r]:
        return start, hits
    floor[r] = f
    start = _admit(floor[r], margin, rel, scale)
    return start, _at_least(row, np.float32(1.0), start, 0, width)


def threshold(start: Any, j: int) -> Any:
    """Item ``j``'s threshold: ``start[j]`` for an array of thresholds, else ``start`` itself."""
    return start[j] if isinstance(start, np.ndarray) else start


@overload(threshold, inline="always")
def _threshold(start, j):  # pragma: no cover - compiled
    if isinstance(start, types.Array):
        return lambda start, j: start[j]
    return lambda start, j: start


LANES = 64  # items one comparison mask covers ([`at_least_mask`][at_least_mask])


def _float_type(ty: Any) -> ir.Type:
    """LLVM's float type for numba's float32 or float64."""
    return ir.DoubleType() if ty == types.float64 else ir.FloatType()


def _wider(a: Any, b: Any) -> Any:
    """The type numba gives an operation on a float32 or float64 ``a`` and ``b``."""
    return types.float64 if types.float64 in (a, b) else types.float32


@intrinsic
def _mask_lanes(typingctx, row, j, scale, start):
    """Bit ``t`` set where ``tile_value(row, j + t) * scale >= threshold(start, j + t)`` for
    ``t < LANES`` (``scale`` ``None``: no product), in the types numba gives the same scalar
    expressions: one vector load, product and comparison, the comparison's lanes as an integer
    (the caller keeps ``j + LANES <= len(row)``)."""
    kinds = (types.float32, types.float64, types.uint16)
    if not isinstance(row, types.Array) or row.dtype not in kinds:
        return None
    if isinstance(start, types.Array) and start.layout != "C":
        return None
    value = types.float32 if row.dtype == types.uint16 else row.dtype
    product = value if isinstance(scale, types.NoneType) else _wider(value, scale)
    limit = start.dtype if isinstance(start, types.Array) else start
    if limit not in (types.float32, types.float64):
        return None
    common = _wider(product, limit)
    sig = types.uint64(row, j, scale, start)

    def vector_at(context, builder, aty, array, index, elem):
        data = context.make_array(aty)(context, builder, array).data
        ptr = builder.gep(data, [index])
        vty = ir.VectorType(elem, LANES)
        return builder.load(builder.bitcast(ptr, vty.as_pointer()), align=1)

    def widen(builder, vec, src, dst):
        if src == dst:
            return vec
        return builder.fpext(vec, ir.VectorType(_float_type(dst), LANES))

    def splat(builder, x, ty):
        vec = ir.VectorType(ty, LANES)
        one = builder.insert_element(
            ir.Constant(vec, ir.Undefined), x, ir.Constant(ir.IntType(32), 0)
        )
        return builder.shuffle_vector(
            one,
            ir.Constant(vec, ir.Undefined),
            ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES),
        )

    def codegen(context, builder, signature, args):
        row_v, j_v, scale_v, start_v = args
        if row.dtype == types.uint16:
            bits = vector_at(context, builder, row, row_v, j_v, ir.IntType(16))
            wide = builder.shl(
                builder.zext(bits, ir.VectorType(ir.IntType(32), LANES)),
                splat(builder, ir.Constant(ir.IntType(32), 16), ir.IntType(32)),
            )
            vals = builder.bitcast(wide, ir.VectorType(ir.FloatType(), LANES))
        else:
            vals = vector_at(context, builder, row, row_v, j_v, _float_type(value))
        if not isinstance(scale, types.NoneType):
            vals = widen(builder, vals, value, product)
            s = scale_v if scale == product else builder.fpext(scale_v, _float_type(product))
            vals = builder.fmul(vals, splat(builder, s, _float_type(product)))
        vals = widen(builder, vals, product, common)
        if isinstance(start, types.Array):
            lim = vector_at(context, builder, start, start_v, j_v, _float_type(limit))
            lim = widen(builder, lim, limit, common)
        else:
            x = start_v if limit == common else builder.fpext(start_v, _float_type(common))
            lim = splat(builder, x, _float_type(common))
        cmp = builder.fcmp_ordered(">=", vals, lim)
        return builder.zext(builder.bitcast(cmp, ir.IntType(LANES)), ir.IntType(64))

    return sig, codegen


def scaled(row: np.ndarray, j: int, scale: Any) -> Any:
    """``tile_value(row, j)`` times ``scale`` (``None``: the value itself)."""
    v = tile_value(row, j)
    return v if scale is None else v * scale


@overload(scaled, inline="always")
def _scaled(row, j, scale):  # pragma: no cover - compiled
    if isinstance(scale, types.NoneType):
        return lambda row, j, scale: tile_value(row, j)
    return lambda row, j, scale: tile_value(row, j) * scale


def at_least_mask(row: np.ndarray, j: int, scale: Any, start: Any) -> int:
    """The items ``j .. j + LANES - 1`` of ``row`` (those it has) with ``scaled(row, j + t,
    scale) >= threshold(start, j + t)``, as the bits ``t`` of an integer."""
    bits = 0
    for t in range(min(LANES, row.shape[0] - j)):
        if scaled(row, j + t, scale) >= threshold(start, j + t):
            bits |= 1 << t
    return bits


@overload(at_least_mask, inline="always")
def _at_least_mask(row, j, scale, start):  # pragma: no cover - compiled
    def impl(row, j, scale, start):
        if j + LANES <= row.shape[0] and row.strides[0] == row.itemsize:
            return _mask_lanes(row, j, scale, start)
        bits = np.uint64(0)
        for t in range(min(LANES, row.shape[0] - j)):
            if scaled(row, j + t, scale) >= threshold(start, j + t):
                bits |= np.uint64(1) << np.uint64(t)
        return bits

    return impl


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath={"reassoc"})
def _at_least(row, scale, start, begin, end):  # pragma: no cover - compiled
    """How many items ``begin..end-1`` of ``row`` times ``scale`` are at or above ``start`` (one
    threshold, or one per item: [`threshold`][threshold]). The count is a float32 sum of ones in any
    order (``reassoc``, so that it is vectorised in float32 lanes, where an integer count takes
    int64 lanes), exact below 2**24 items."""
    one, zero = np.float32(1.0), np.float32(0.0)
    c = zero
    for j in range(begin, end):
        c += one if tile_value(row, j) * scale >= threshold(start, j) else zero
    return np.int64(c)


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath={"reassoc"})
def _counts(row, low, high):  # pragma: no cover - compiled
    """The items of ``row`` at or above ``low`` and those above ``high``: float32 sums of ones
    in one pass, as in [`_at_least`][_at_least] (a tile row has far fewer than 2**24 items)."""
    one, zero = np.float32(1.0), np.float32(0.0)
    at_least, over = zero, zero
    for j in range(row.shape[0]):
        s = tile_value(row, j)
        at_least += one if s >= low else zero
        over += one if s > high else zero
    return np.int64(at_least), np.int64(over)


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath={"reassoc"})
def _counts_cols(row, scale, low, high, tops):  # pragma: no cover - compiled
    """Item ``j`` of ``row`` times ``scale`` against its own ``[low[j], high[j]]``: adds 1 to
    ``tops[j]`` (int32) when above ``high[j]``; returns how many lie inside (a float32 sum of
    ones, as in [`_counts`][_counts])."""
    one, zero = np.float32(1.0), np.float32(0.0)
    inside = zero
    for j in range(row.shape[0]):
        s = tile_value(row, j) * scale
        a = s > high[j]
        tops[j] += np.int32(a)
        inside += one if (s >= low[j]) & ~a else zero
    return np.int64(inside)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def top_rows(
    tile,
    rs,
    row0,
    col0,
    ks,
    slack,
    margin,
    rel,
    heap,
    size,
    floor,
    buf_col,
    buf_score,
    fill,
    over,
    cascade,
    a32,
    b32,
    floors,
    known_q,
    known_c,
    columns=0,
):  # pragma: no cover
    """Running top-k candidates of the tile's rows (row ``i`` worth ``rs[i]`` times its values):
    a heap per row (``heap`` not empty, [`_offer`][_offer]) or a reservoir (as faiss's: every item
    at or above the row's ``floor``, compacted at its k-th best minus ``slack`` when full). The
    floor only rises and stays below the k-th best score of all items seen, so nothing dropped could
    be needed later; it may start higher, at a known lower bound of the k-th score. With
    ``cascade`` the tile is a low-precision filter: items whose value ``v`` is within
    ``margin + rel |v|`` of the floor ([`_admit`][_admit]) are scored in float32 at once, and
    the float32 scores are what the heap and buffer hold.

    A row with many more items above its floor than ``k`` (its first tiles, while its floor is
    still low) first raises the floor from its values ([`_raise_floor`][_raise_floor]). Items
    offered before the pass ([`seed_top`][seed_top]) are skipped: those whose code ``known_c[col]``
    equals the row's ``known_q[r]`` (both empty: none).

    ``columns > 0`` (the block's items; the tile's columns a sample of them in no particular
    order) lets that raise take the tile for a sample: ``μ = k w / columns`` of the tile's ``w``
    items lie at or above the row's k-th score on average, and the floor rises until
    ``⌈μ + SAMPLE_SPREAD √μ⌉ + SAMPLE_EXTRA`` of them are at or above it (and at most ``k``).
    The floor is then a likely lower bound, not a proven one:
    the caller checks each row once the pass ends
    ([`Top.finish`][recallkit.engine.consumers.Top.finish])."""
    rows, width = tile.shape
    heap_mode = heap.shape[1] > 0
    cap = buf_col.shape[1]
    known = known_q.shape[0] > 0
    for i in range(rows):
        r = row0 + i
        if ks[r] <= 0 or over[r]:
            continue
        _shared_floor(floors, floor, r)
        row = tile[i]
        scale = np.float64(rs[i])
        start = _admit(floor[r], margin[r], rel, scale)
        hits = _at_least(row, np.float32(1.0), start, 0, width)  # ``start`` is in tile units
        if hits > RAISE_HITS * ks[r] + RAISE_MIN:
            want = ks[r]
            if columns > 0:  # the tile as a sample of the block
                share = np.float64(ks[r]) * width / columns
                spread = share + SAMPLE_SPREAD * np.sqrt(share)
                want = min(want, np.int64(np.ceil(spread)) + SAMPLE_EXTRA)
            start, hits = _raise_floor(
                row, scale, start, hits, want, slack[r], margin[r], rel, r, floor
            )
        if hits <= 0:
            continue
        for b in range(0, width, LANES):  # the floor only rises: the items at or above it now
            if over[r]:
                break
            bits = at_least_mask(row, b, None, start)
            while bits:
                j = b + trailing_zeros(bits)
                bits &= bits - np.uint64(1)
                t = tile_value(row, j)
                if t >= start and t > -np.inf and not over[r]:
                    if known and known_c[col0 + j] == known_q[r]:  # offered before the pass
                        continue
                    s = _dot32(a32[r], b32[col0 + j]) if cascade else t * rs[i]
                    if s >= floor[r]:
                        f = fill[r]
                        if heap_mode:
                            _offer(
                                r,
                                s,
                                col0 + j,
                                ks,
                                slack,
                                heap,
                                size,
                                floor,
                                buf_col,
                                buf_score,
                                fill,
                                over,
                            )
                            start = _admit(floor[r], margin[r], rel, scale)
                        elif f == cap:
                            _keep(
                                r,
                                s,
                                col0 + j,
                                ks,
                                slack,
                                heap,
                                size,
                                floor,
                                buf_col,
                                buf_score,
                                fill,
                                over,
                            )
                            start = _admit(floor[r], margin[r], rel, scale)
                        else:
                            buf_col[r, f] = col0 + j
                            buf_score[r, f] = s
                            fill[r] = f + 1


@numba.njit(nogil=True, cache=True, boundscheck=False)
def top_cols(
    tile,
    rs,
    row0,
    col0,
    ks,
    slack,
    margin,
    rel,
    heap,
    size,
    floor,
    buf_col,
    buf_score,
    fill,
    over,
    cascade,
    a32,
    b32,
    floors,
    known_q,
    known_c,
):  # pragma: no cover
    """[`top_rows`][top_rows] of the transposed tile (tile row ``i`` worth ``rs[i]`` times its
    values, the scores of item ``row0 + i`` for the rows ``col0 + j``)."""
    rows, width = tile.shape
    heap_mode = heap.shape[1] > 0
    cap = buf_col.shape[1]
    known = known_q.shape[0] > 0
    start = np.empty(width, dtype=floor.dtype)
    for j in range(width):
        r = col0 + j
        if ks[r] > 0:
            _shared_floor(floors, floor, r)
            start[j] = _admit(floor[r], margin[r], rel, 1.0)
        else:
            start[j] = np.inf
    for i in range(rows):
        row = tile[i]
        scale = rs[i]
        for b in range(0, width, LANES):
            bits = at_least_mask(row, b, scale, start)
            while bits:
                j = b + trailing_zeros(bits)
                bits &= bits - np.uint64(1)
                s = tile_value(row, j) * scale
                r = col0 + j
                if s >= start[j] and s > -np.inf and not over[r]:
                    if known and known_c[row0 + i] == known_q[r]:  # as in [`top_rows`][top_rows]
                        continue
                    if cascade:
                        s = _dot32(a32[r], b32[row0 + i])
                    if s >= floor[r]:
                        f = fill[r]
                        if heap_mode:  # the floor may rise
                            _offer(
                                r,
                                s,
                                row0 + i,
                                ks,
                                slack,
                                heap,
                                size,
                                floor,
                                buf_col,
                                buf_score,
                                fill,
                                over,
                            )
                            start[j] = _admit(floor[r], margin[r], rel, 1.0)
                        elif f == cap:
                            _keep(
                                r,
                                s,
                                row0 + i,
                                ks,
                                slack,
                                heap,
                                size,
                                floor,
                                buf_col,
                                buf_score,
                                fill,
                                over,
                            )
                            start[j] = _admit(floor[r], margin[r], rel, 1.0)
                        else:
                            buf_col[r, f] = row0 + i
                            buf_score[r, f] = s
                            fill[r] = f + 1


@numba.njit(parallel=True, cache=True, boundscheck=False)
def union_kth(scores, fills, floors, ks, out):  # pragma: no cover - compiled
    """Per row, the ``ks[r]``-th largest of the workers' buffers ``scores[w, r, :fills[w, r]]``
    (``-inf`` when they hold fewer). Only the items at or above the highest of the row's floors
    (``floors[w, r]``) are selected from where ``ks[r]`` of them are (the ``ks[r]`` largest are
    then among them: the same value); rows in runs of [`RUN_ROWS`][RUN_ROWS], one buffer a run."""
    workers, rows, width = scores.shape
    for t in numba.prange((rows + RUN_ROWS - 1) // RUN_ROWS):
        values = np.empty(workers * width, dtype=scores.dtype)
        for r in range(t * RUN_ROWS, min(rows, (t + 1) * RUN_ROWS)):
            k = ks[r]
            out[r] = -np.inf
            floor = floors[0, r]
            for w in range(1, workers):
                floor = max(floor, floors[w, r])
            n = 0
            total = 0
            for w in range(workers):
                total += fills[w, r]
                for a in range(fills[w, r]):
                    v = scores[w, r, a]
                    values[n] = v
                    n += v >= floor  # branch-free: kept where at or above the floor
            if k <= 0 or total < k:
                continue
            if n < k:  # fewer than k above the floor: all of them
                n = 0
                for w in range(workers):
                    for a in range(fills[w, r]):
                        values[n] = scores[w, r, a]
                        n += 1
            out[r] = np.float64(select(values[:n], n - k))


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _collect_count(scores, fills, lo, over, counts):  # pragma: no cover - compiled
    workers, rows, _ = scores.shape
    for r in numba.prange(rows):
        n = 0
        if not over[r]:
            for w in range(workers):
                for a in range(fills[w, r]):
                    n += scores[w, r, a] >= lo[r]
        counts[r] = n


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _collect_sorted(scores, cols, fills, lo, r, n, out_rows, out_cols):  # pragma: no cover
    """Row ``r``'s items at or above ``lo[r]`` from ``n`` on, their columns sorted."""
    first = n
    for w in range(scores.shape[0]):
        for a in range(fills[w, r]):
            if scores[w, r, a] >= lo[r]:
                out_rows[n] = r
                out_cols[n] = cols[w, r, a]
                n += 1
    out_cols[first:n] = np.sort(out_cols[first:n])
    return n


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _collect_fill(
    scores, cols, fills, lo, over, starts, width, out_rows, out_cols
):  # pragma: no cover
    """The rows' items (counted by [`_collect_count`][_collect_count]) in ascending column order:
    through a bitmap of the ``width`` columns where it has few words per item (set branch-free,
    read word by word), else sorted; rows in runs of [`RUN_ROWS`][RUN_ROWS]."""
    workers, rows, _ = scores.shape
    words = (width + 63) >> 6
    for t in numba.prange((rows + RUN_ROWS - 1) // RUN_ROWS):
        bits = np.zeros(words, dtype=np.uint64)
        for r in range(t * RUN_ROWS, min(rows, (t + 1) * RUN_ROWS)):
            n, stop = starts[r], starts[r + 1]
            if over[r] or stop == n:
                continue
            if words > 4 * (stop - n):
                _collect_sorted(scores, cols, fills, lo, r, n, out_rows, out_cols)
                continue
            low = lo[r]
            for w in range(workers):
                for a in range(fills[w, r]):
                    j = cols[w, r, a]
                    bits[j >> 6] |= np.uint64(scores[w, r, a] >= low) << np.uint64(j & 63)
            for q in range(words):
                b = bits[q]
                if b:
                    bits[q] = 0
                    while b:
                        if n < stop:
                            out_rows[n] = r
                            out_cols[n] = (q << 6) + np.int64(trailing_zeros(b))
                        n += 1
                        b &= b - np.uint64(1)
            if n != stop:  # a column twice (never, by the pass): the row sorted instead
                _collect_sorted(scores, cols, fills, lo, r, starts[r], out_rows, out_cols)


def collect_top(
    scores: np.ndarray,
    cols: np.ndarray,
    fills: np.ndarray,
    lo: np.ndarray,
    over: np.ndarray,
    width: int,
    with_scores: bool = False,
) -> tuple[np.ndarray, ...]:
    """The workers' buffered items (``(workers, rows, cap)`` scores and columns, ``fills`` used)
    at or above each row's ``lo``, rows not ``over``: flat ``(rows, columns)``, by row then
    column (columns below ``width``); with ``with_scores``, by row, each row's items in buffer
    order, and their buffered scores third."""
    counts = np.empty(len(lo), dtype=np.int64)
    _collect_count(scores, fills, lo, over, counts)
    starts = np.zeros(len(lo) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    out_rows = np.empty(int(starts[-1]), dtype=np.int64)
    out_cols = np.empty(int(starts[-1]), dtype=np.int64)
    if not with_scores:
        _collect_fill(scores, cols, fills, lo, over, starts, width, out_rows, out_cols)
        return out_rows, out_cols
    out_scores = np.empty(int(starts[-1]), dtype=scores.dtype)
    _collect_scores(scores, cols, fills, lo, over, starts, out_rows, out_cols, out_scores)
    return out_rows, out_cols, out_scores


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _collect_scores(
    scores, cols, fills, lo, over, starts, out_rows, out_cols, out_scores
):  # pragma: no cover - compiled
    """The rows' items (counted by [`_collect_count`][_collect_count]) with their buffered
    scores, in buffer order: a row's items gathered branch-free into a buffer (each written, the
    next place moved by its comparison: a branch there is mispredicted about every other item),
    then copied; rows in runs of [`RUN_ROWS`][RUN_ROWS], one buffer a run."""
    workers, rows, width = scores.shape
    for t in numba.prange((rows + RUN_ROWS - 1) // RUN_ROWS):
        kept_cols = np.empty(workers * width, dtype=cols.dtype)
        kept_scores = np.empty(workers * width, dtype=scores.dtype)
        for r in range(t * RUN_ROWS, min(rows, (t + 1) * RUN_ROWS)):
            first = starts[r]
            if over[r] or starts[r + 1] == first:
                continue
            low = lo[r]
            n = 0
            for w in range(workers):
                for q in range(fills[w, r]):
                    s = scores[w, r, q]
                    kept_cols[n] = cols[w, r, q]
                    kept_scores[n] = s
                    n += s >= low
            out_rows[first : first + n] = r
            out_cols[first : first + n] = kept_cols[:n]
            out_scores[first : first + n] = kept_scores[:n]


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _before(value, glob, p, q):  # pragma: no cover - compiled
    """Whether item ``p`` ranks before item ``q`` by the tie rule: a higher score, or an equal
    one and a lower index."""
    return value[p] > value[q] or (value[p] == value[q] and glob[p] < glob[q])


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _insert(order, lo, hi, value, glob):  # pragma: no cover - compiled
    """``order[lo:hi]`` (item positions) sorted by the tie rule: by insertion up to
    [`INSERTION`][INSERTION] items, else stable on the index, then stable on the value (a run of
    many tied items stays ``n log n``)."""
    if hi - lo > INSERTION:
        run = order[lo:hi].copy()
        run = run[np.argsort(glob[run], kind="mergesort")]
        order[lo:hi] = run[np.argsort(-value[run], kind="mergesort")]
        return
    for a in range(lo + 1, hi):
        p = order[a]
        b = a
        while b > lo and _before(value, glob, p, order[b - 1]):
            order[b] = order[b - 1]
            b -= 1
        order[b] = p


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _radix_high(keys, spare, n):  # pragma: no cover - compiled
    """``keys[:n]`` sorted by their high 32 bits, ascending and stable (equal high bits keep their
    order): four passes of 8 bits from the lowest, a pass skipped where every key has the same
    digit. Returns the array that holds the result (``keys`` or ``spare``, of at least ``n``).
    0.54–0.70× the time of numba's quicksort on the lists' 60–90 items a row."""
    counts = np.empty(256, dtype=np.int64)
    source, target = keys, spare
    for shift in range(32, 64, 8):
        counts[:] = 0
        for i in range(n):
            counts[(source[i] >> np.uint64(shift)) & np.uint64(255)] += 1
        if counts[(source[0] >> np.uint64(shift)) & np.uint64(255)] == n:
            continue
        total = 0
        for d in range(256):
            c = counts[d]
            counts[d] = total
            total += c
        for i in range(n):
            d = (source[i] >> np.uint64(shift)) & np.uint64(255)
            target[counts[d]] = source[i]
            counts[d] += 1
        source, target = target, source
    return source


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _mark_row(order, near, filt, gap, a, b, cols, code, r_codes):  # pragma: no cover - compiled
    """Row ``order[a:b]``'s runs of items each within ``gap`` of the one before: every item of
    a run near, unless ``r_codes`` is given (not empty) and the run's items are all relevant
    (``r_codes[cols[p]] == code``) or all not ([`order_rows`][order_rows])."""
    settle = r_codes.shape[0] > 0
    i = a
    while i < b - 1:
        if np.float64(filt[order[i]]) - np.float64(filt[order[i + 1]]) > gap:
            i += 1
            continue
        first = settle and r_codes[cols[order[i]]] == code
        mixed = not settle
        u = i + 1
        while True:
            if settle:
                mixed |= (r_codes[cols[order[u]]] == code) != first
            if u + 1 == b or np.float64(filt[order[u]]) - np.float64(filt[order[u + 1]]) > gap:
                break
            u += 1
        if mixed:
            for j in range(i, u + 1):
                near[order[j]] = True
        i = u + 1


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _mark_rows(starts, order, filt, gap, near, cols, q_codes, r_codes):  # pragma: no cover
    settle = q_codes.shape[0] > 0
    for r in numba.prange(starts.shape[0] - 1):
        code = q_codes[r] if settle else 0
        _mark_row(order, near, filt, gap[r], starts[r], starts[r + 1], cols, code, r_codes)


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _order_rows(starts, filt, gap, order, near, cols, q_codes, r_codes):  # pragma: no cover
    rows = starts.shape[0] - 1
    settle = q_codes.shape[0] > 0
    for t in numba.prange((rows + RUN_ROWS - 1) // RUN_ROWS):
        keys = np.empty(INSERTION, dtype=np.uint64)
        spare = np.empty(INSERTION, dtype=np.uint64)
        for r in range(t * RUN_ROWS, min(rows, (t + 1) * RUN_ROWS)):
            a, b = starts[r], starts[r + 1]
            n = b - a
            if n == 0:
                continue
            if keys.shape[0] < n:
                keys = np.empty(n, dtype=np.uint64)
                spare = np.empty(n, dtype=np.uint64)
            for i in range(n):  # the score's bits in ascending order, the item below them
                keys[i] = (_ordered_bits(np.float32(filt[a + i])) << np.uint64(32)) | np.uint64(i)
            row = _radix_high(keys, spare, n)
            for i in range(n):  # descending
                order[a + i] = a + np.int64(row[n - 1 - i] & np.uint64(0xFFFFFFFF))
            _mark_row(order, near, filt, gap[r], a, b, cols, q_codes[r] if settle else 0, r_codes)


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _near_run(order, near, t, b):  # pragma: no cover - compiled
    """The next run of ``near`` items of ``order[t:b]``: ``(start, end)``, ``(b, b)`` if none."""
    while t < b and not near[order[t]]:
        t += 1
    u = t
    while u < b and near[order[u]]:
        u += 1
    return t, u


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _split_runs(starts, order, near, value, glob, bound, closer):  # pragma: no cover - compiled
    rows = starts.shape[0] - 1
    for r in numba.prange(rows):
        a, b = starts[r], starts[r + 1]
        t, u = _near_run(order, near, a, b)
        while t < b:
            _insert(order, t, u, value, glob)
            for i in range(t, u - 1):
                p, q = order[i], order[i + 1]
                if value[p] - value[q] <= bound[p] + bound[q]:
                    closer[p] = True
                    closer[q] = True
            t, u = _near_run(order, near, u, b)


def split_runs(
    starts: np.ndarray,
    order: np.ndarray,
    near: np.ndarray,
    value: np.ndarray,
    glob: np.ndarray,
    bound: np.ndarray,
) -> np.ndarray:
    """The ``near`` items of [`order_rows`][order_rows]'s order that their closer scores
    ``value`` (each within ``bound`` of its exact score) cannot rank: each run of near items
    sorted by ``value`` (in place, by the tie rule), the items within the sum of their bounds
    of the next or the previous one of their run (a bool per item)."""
    closer = np.zeros(value.shape[0], dtype=np.bool_)
    _split_runs(starts, order, near, value, glob, bound, closer)
    return closer


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _rank_rows(
    starts, order, value, glob, near, ks, out_index, out_value, tails
):  # pragma: no cover
    """Each row's lists ([`rank_rows`][rank_rows]) and its count of tail items, whose indices
    [`_fill_tails`][_fill_tails] reads from the order sorted here."""
    rows, width = out_index.shape
    for r in numba.prange(rows):
        a, b = starts[r], starts[r + 1]
        t, u = _near_run(order, near, a, b)
        while t < b:  # each run of near items, scored exactly, sorted again among itself
            _insert(order, t, u, value, glob)
            t, u = _near_run(order, near, u, b)
        k = max(min(ks[r], b - a), 0)
        for i in range(width):
            if i < k:
                out_index[r, i] = glob[order[a + i]]
                out_value[r, i] = value[order[a + i]]
            else:
                out_index[r, i] = -1
                out_value[r, i] = -np.inf
        tails[r] = 0
        if k > 0 and k == ks[r]:
            kth = value[order[a + k - 1]]
            n = 0
            while a + k + n < b and value[order[a + k + n]] == kth:
                n += 1
            tails[r] = n


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _fill_tails(starts, order, glob, ks, tails, tail_index):  # pragma: no cover - compiled
    for r in numba.prange(tails.shape[0]):
        for n in range(tails[r]):
            tail_index[r, n] = glob[order[starts[r] + ks[r] + n]]


def order_rows(
    starts: np.ndarray, filt: np.ndarray, gap: np.ndarray, relevance: tuple | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's items (``starts[r]:starts[r + 1]`` of the flat arrays) by descending filter
    score ``filt`` (float32 or float64; equal scores in any order): the order of their
    positions; and which items lie within ``gap[r]`` (float64) of the next or the previous item
    of that order (``near``, a bool per item: every item of equal score among them).

    With ``relevance = (cols, q_codes, r_codes)`` (int64: the items' columns, the rows' and the
    columns' codes), a run of such items (each within the gap of the one before) whose items
    are all relevant to their row (``r_codes[cols[p]] == q_codes[r]``) or all not is left out of
    ``near``: it keeps the filter's order. Ranked exactly or not, the relevance it gives each
    place is the same, and none of its items ties or passes one outside it (more than the gap
    away)."""
    order = np.empty(filt.shape[0], dtype=np.int64)
    near = np.zeros(filt.shape[0], dtype=np.bool_)
    codes = relevance or (NO_CODES, NO_CODES, NO_CODES)
    if filt.dtype == np.float32:  # the scores' bits and the item's place, one sort key
        _order_rows(starts, filt, gap, order, near, *codes)
        return order, near
    rows = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    order = np.lexsort((-filt, rows)).astype(np.int64)
    _mark_rows(starts, order, filt, gap, near, *codes)
    return order, near


def rank_rows(
    starts: np.ndarray,
    order: np.ndarray,
    value: np.ndarray,
    glob: np.ndarray,
    near: np.ndarray,
    ks: np.ndarray,
    width: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """[`segment_top`][segment_top]'s lists from [`order_rows`][order_rows]'s order once the
    ``near`` items' values are exact (the others' estimates keep the order of their filter
    scores): each run of near items in the order sorted again by the tie rule (a higher value,
    then a lower index ``glob``), then per row the ``ks[r]`` first items (``(c, width)``
    indices and values, ``-1``/``-inf`` padding) and the tail of items equal to the ``k``-th
    (indices, values)."""
    c = ks.shape[0]
    out_index = np.empty((c, width), dtype=np.int64)
    out_value = np.empty((c, width), dtype=np.float64)
    tails = np.zeros(c, dtype=np.int64)
    _rank_rows(starts, order, value, glob, near, ks, out_index, out_value, tails)
    tail_index = np.full((c, int(tails.max(initial=0))), -1, dtype=np.int64)
    if tail_index.shape[1]:  # the rows' runs are sorted now: their tails read from the order
        _fill_tails(starts, order, glob, ks, tails, tail_index)
    kth = out_value[np.arange(c), np.clip(ks - 1, 0, max(width - 1, 0))] if width else out_value
    tail_value = np.where(tail_index >= 0, kth[:, None] if width else 0.0, -np.inf)
    return out_index, out_value, tail_index, tail_value.astype(np.float64)


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _pair_dots_numba(a, b, rows, cols, out):  # pragma: no cover - compiled
    for p in numba.prange(rows.shape[0]):
        out[p] = _dot(a[rows[p]], b[cols[p]])


def pair_dots(a: np.ndarray, b: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """float32 filter scores of the pairs ``(a[rows[p]], b[cols[p]])``, in any summation order
    (SIMD): the float32 stage of the low-precision cascade, within the float32 filter's bound."""
    out = np.empty(len(rows), dtype=np.float32)
    if len(rows):
        _pair_dots_numba(
            a,
            b,
            np.ascontiguousarray(rows, dtype=np.int64),
            np.ascontiguousarray(cols, dtype=np.int64),
            out,
        )
    return out


# ----------------------------------------------------------------------------------------------
# Threads: single-threaded BLAS and torch inside the workers, one limit for concurrent calls.

POOLS: dict[int, ThreadPoolExecutor] = {}
_CONTROLLER: list[Any] = []
_LIMIT_LOCK = threading.Lock()
_CONTROLLER_LOCK = threading.Lock()
LIMIT_STATE: dict[str, Any] = {"users": 0, "keeper": None}


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
    takes it, the last one out gives it back ([`_BlasLimit`][_BlasLimit]). torch's and OpenMP's
    thread counts are per thread: the workers set their own
    ([`_one_thread_worker`][_one_thread_worker]) and no calling thread's is touched, nor torch's
    default for new threads. Calls from several Python threads, in any order of entry and exit,
    leave every setting as they found it."""
    with _LIMIT_LOCK:
        if LIMIT_STATE["users"] == 0:
            LIMIT_STATE["keeper"] = _BlasLimit()
        LIMIT_STATE["users"] += 1
    try:
        yield torch.get_num_threads()
    finally:
        with _LIMIT_LOCK:
            LIMIT_STATE["users"] -= 1
            if LIMIT_STATE["users"] == 0:
                LIMIT_STATE["keeper"].restore()
                LIMIT_STATE["keeper"] = None


@functools.cache
def torch_mkl() -> ctypes.CDLL | None:
    """The MKL that torch's x86 builds link into ``torch_cpu`` (out of threadpoolctl's sight: its
    ``blas`` limit does not reach it), or ``None`` where torch has none."""
    folder = Path(torch.__file__).parent / "lib"
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll"):
        if (folder / name).exists():
            try:
                lib = ctypes.CDLL(str(folder / name))
                lib.MKL_Set_Num_Threads_Local.argtypes = [ctypes.c_int]
                lib.MKL_Get_Max_Threads.argtypes = []
            except (OSError, AttributeError):
                return None
            return lib
    return None


def _one_thread_worker() -> None:
    """A tile worker's start: its own OpenMP thread count (torch's intra-op threads) and its
    own count of torch's MKL threads set to one.

    torch sets a thread's OpenMP count when the thread first uses it, so it is used first; the
    counts are the worker's own, and torch's default for other threads is left as it is. Without
    the MKL count, each worker's float32 ``torch.mm`` ran on as many threads as ``MKL_NUM_THREADS``
    (or the cores): on 2 cores, two workers' 1,024² tiles took 1.8–1.9 ms each (d = 128) where
    single-threaded they take 1.6 ms."""
    torch.get_num_threads()
    _blas_controller().limit(limits=1, user_api="openmp")
    mkl = torch_mkl()
    if mkl is not None:
        mkl.MKL_Set_Num_Threads_Local(1)


def pool(workers: int) -> ThreadPoolExecutor:
    with _LIMIT_LOCK:
        if workers not in POOLS:
            POOLS[workers] = ThreadPoolExecutor(
                workers, thread_name_prefix="recallkit-tiles", initializer=_one_thread_worker
            )
        return POOLS[workers]
