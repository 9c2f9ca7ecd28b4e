"""Row kernels over one chunk of float32 scores, and the exact float64 re-scoring of candidates.

The float32 GEMM scores are a filter: an item whose float32 score is further than the GEMM's
error bound from a threshold is certainly above or below it; items inside that window are
re-scored exactly (float64 products of the prepared float32 vectors, summed in index order), and
only those decide. Every rank and every top-k list is therefore a function of the embeddings
alone, whatever the BLAS, its blocking, the chunk size, the thread count or the device.

Two back ends produce the same windows: numba kernels for CPU arrays (one fused pass over each
row, no temporaries, both cores) and torch operations for other devices.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

_BIG_INDEX = np.iinfo(np.int64).max
WINDOW_CAP = 32


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
                root = heap[0]
        out[i] = heap[0]


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _exact_numba(query, reference, rows, cols, euclidean, out):  # pragma: no cover
    dim = query.shape[1]
    for p in numba.prange(rows.shape[0]):
        q = query[rows[p]]
        r = reference[cols[p]]
        dot = 0.0
        square = 0.0
        for k in range(dim):
            rk = np.float64(r[k])
            dot += np.float64(q[k]) * rk
            square += rk * rk
        out[p] = 2.0 * dot - square if euclidean else dot


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _segment_top_numba(starts, glob, exact, ks, out_index, out_value):  # pragma: no cover
    for i in numba.prange(starts.shape[0] - 1):
        lo = starts[i]
        hi = starts[i + 1]
        k = min(ks[i], hi - lo)
        if k <= 0:
            continue
        # Stable on -score: items arrive in ascending index, so equal scores keep index order.
        order = np.argsort(-exact[lo:hi], kind="mergesort")
        for a in range(k):
            out_index[i, a] = glob[lo + order[a]]
            out_value[i, a] = exact[lo + order[a]]


def segment_top(
    rows: torch.Tensor, glob: torch.Tensor, exact: torch.Tensor, ks: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row, the ``ks[i]`` best window items by (-exact score, index): ``(c, width)`` arrays.

    ``rows`` are the items' rows (ascending index within a row); padding is ``-1``/``-inf``.
    """
    c = ks.shape[0]
    r = rows.numpy()
    if r.size and np.any(r[1:] < r[:-1]):
        order = np.argsort(r, kind="stable")
        r, glob, exact = r[order], glob[order], exact[order]
    starts = np.zeros(c + 1, dtype=np.int64)
    starts[1:] = np.cumsum(np.bincount(r, minlength=c))
    out_index = np.full((c, width), -1, dtype=np.int64)
    out_value = np.full((c, width), -np.inf, dtype=np.float64)
    _segment_top_numba(
        starts,
        np.ascontiguousarray(glob.numpy()),
        np.ascontiguousarray(exact.numpy()),
        ks.numpy().astype(np.int64),
        out_index,
        out_value,
    )
    return torch.from_numpy(out_index), torch.from_numpy(out_value)


def exact_scores(
    query: torch.Tensor,
    reference: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    euclidean: bool,
) -> torch.Tensor:
    """Float64 scores of the pairs ``(query[rows[p]], reference[cols[p]])``, summed in order.

    The score is ``q·r`` (or ``2 q·r - |r|²`` for euclidean), each product exact in float64.
    """
    out = np.empty(rows.shape[0], dtype=np.float64)
    if not rows.numel():
        return torch.from_numpy(out)
    if query.device.type == "cpu" and reference.device.type == "cpu":
        _exact_numba(
            query.detach().numpy(),
            reference.detach().numpy(),
            rows.numpy(),
            cols.numpy(),
            euclidean,
            out,
        )
        return torch.from_numpy(out)
    # On a GPU: bring only the rows involved to the CPU, in bounded batches.
    step = 1 << 16
    for start in range(0, rows.numel(), step):
        r = rows[start : start + step].to(query.device)
        c = cols[start : start + step].to(reference.device)
        q = query[r].detach().cpu().numpy()
        ref = reference[c].detach().cpu().numpy()
        pos = np.arange(len(q), dtype=np.int64)
        _exact_numba(q, ref, pos, pos, euclidean, out[start : start + step])
    return torch.from_numpy(out)


def _use_numba(scores: torch.Tensor, backend: str | None) -> bool:
    if backend is None:
        return scores.device.type == "cpu"
    return backend == "numba"


def window(
    scores: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    cols: int,
    backend: str | None = None,
    cap: int = WINDOW_CAP,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row and slot: how many scores are above ``hi``, and which lie in ``[lo, hi]``.

    Shapes: scores ``(c, w)`` (only the first ``cols`` columns count), lo and hi ``(c, g)``.
    Returns ``above (c, g)`` and the window as flat ``(rows, slots, columns)`` tensors on the
    CPU, columns ascending within a (row, slot).
    """
    c, g = lo.shape
    if _use_numba(scores, backend):
        above = np.empty((c, g), dtype=np.int64)
        count = np.empty((c, g), dtype=np.int64)
        index = np.empty((c, g, cap), dtype=np.int64)
        s = scores.contiguous().numpy()
        lo_np = lo.contiguous().numpy().astype(s.dtype)
        hi_np = hi.contiguous().numpy().astype(s.dtype)
        _window_numba(s, cols, lo_np, hi_np, cap, above, count, index)
        kept = np.arange(cap)[None, None, :] < count[:, :, None]
        r, t, n = np.nonzero(kept)
        rows, slots, columns = r, t, index[r, t, n]
        overflow = np.argwhere(count > cap)
        if len(overflow):
            # Rare (many near-equal scores): collect those windows whole.
            extra = [_window_row(scores[i, :cols], lo[i, t], hi[i, t]) for i, t in overflow]
            keep = count[rows, slots] <= cap
            rows = np.concatenate(
                [
                    rows[keep],
                    *[np.full(len(e), i) for (i, _), e in zip(overflow, extra, strict=True)],
                ]
            )
            slots = np.concatenate(
                [
                    slots[keep],
                    *[np.full(len(e), t) for (_, t), e in zip(overflow, extra, strict=True)],
                ]
            )
            columns = np.concatenate([columns[keep], *extra])
        return (
            torch.from_numpy(above),
            torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)),
            torch.from_numpy(np.ascontiguousarray(slots, dtype=np.int64)),
            torch.from_numpy(np.ascontiguousarray(columns, dtype=np.int64)),
        )
    s = scores[:, :cols]
    above = torch.empty((c, g), dtype=torch.int64, device=scores.device)
    parts = []
    for t in range(g):
        above[:, t] = (s > hi[:, t : t + 1]).sum(dim=1)
        inside = (s >= lo[:, t : t + 1]) & (s <= hi[:, t : t + 1])
        r, j = inside.nonzero(as_tuple=True)
        parts.append((r, torch.full_like(r, t), j))
    rows, slots, columns = (torch.cat([p[i] for p in parts]).cpu() for i in range(3))
    return above.cpu(), rows, slots, columns


def _window_row(row: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> np.ndarray:
    return torch.nonzero((row >= lo) & (row <= hi))[:, 0].cpu().numpy()


def kth_largest(
    scores: torch.Tensor, ks: torch.Tensor, cols: int, backend: str | None = None
) -> torch.Tensor:
    """The ``ks[i]``-th largest score of each row (``-inf`` if fewer; ``+inf`` where k = 0)."""
    if _use_numba(scores, backend):
        out = np.empty(scores.shape[0], dtype=scores.numpy().dtype)
        _kth_numba(scores.contiguous().numpy(), cols, ks.numpy().astype(np.int64), out)
        return torch.from_numpy(out)
    s = scores[:, :cols]
    kmax = int(min(int(ks.max()), cols)) if len(ks) else 0
    out = torch.full((scores.shape[0],), -torch.inf, dtype=scores.dtype, device=scores.device)
    if kmax > 0:
        values = torch.topk(s, kmax, dim=1).values
        ks_d = ks.to(scores.device)
        fits = (ks_d <= kmax) & (ks_d > 0)
        picked = values.gather(1, (ks_d.clamp(1, kmax) - 1)[:, None])[:, 0]
        out = torch.where(fits, picked, out)
    out[ks.to(scores.device) <= 0] = torch.inf
    return out.cpu()


def count_before(
    scores: torch.Tensor, thresholds: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """For scores that are exact as given (a similarity matrix): per row and slot, how many
    candidates rank above the item at ``positions[i, t]`` with score ``thresholds[i, t]``
    (a higher score, or an equal score and a lower index). Negative positions give ``-1``."""
    thr = thresholds.to(scores.dtype)
    above, wr, wt, wj = window(scores, thr, thr, scores.shape[1])
    before = wj.to(positions.device) < positions.cpu()[wr, wt]
    slot = (wr * thr.shape[1] + wt)[before]
    out = above + torch.bincount(slot, minlength=thr.numel()).view(thr.shape)
    return torch.where(positions.cpu() >= 0, out, torch.full_like(out, -1))


def topk(scores: torch.Tensor, ks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For scores that are exact as given: each row's top-``ks[i]`` columns, best first, ties by
    lower index; ``(c, max(ks))`` CPU tensors, padded with ``-1`` and ``-inf``."""
    rows, cols = scores.shape
    kmax = int(ks.max()) if rows else 0
    kth = kth_largest(scores, ks, cols)
    floor = torch.finfo(scores.dtype).min
    lo = torch.where(torch.isneginf(kth), torch.full_like(kth, floor), kth)[:, None]
    _, wr, _, wj = window(
        scores,
        lo.to(scores.device),
        torch.full_like(lo, torch.inf).to(scores.device),
        cols,
        cap=kmax + WINDOW_CAP,
    )
    values = scores[wr.to(scores.device), wj.to(scores.device)].cpu()
    order = np.lexsort((wj.numpy(), -values.to(torch.float64).numpy(), wr.numpy()))
    wr, wj, values = wr[order], wj[order], values[order]
    starts = torch.zeros(rows + 1, dtype=torch.int64)
    starts[1:] = torch.bincount(wr, minlength=rows).cumsum(0)
    slot = torch.arange(wr.numel()) - starts[wr]
    keep = slot < ks.cpu()[wr]
    index = torch.full((rows, kmax), -1, dtype=torch.int64)
    value = torch.full((rows, kmax), -torch.inf, dtype=scores.dtype)
    index[wr[keep], slot[keep]] = wj[keep]
    value[wr[keep], slot[keep]] = values[keep]
    return index, value
