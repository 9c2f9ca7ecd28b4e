"""Row kernels over one chunk of scores: rank by counting, and exact top-k, with the tie rule.

The tie rule everywhere: candidate ``j`` ranks above candidate ``t`` when its score is higher, or
equal and ``j < t`` (lower reference index first). Excluded candidates carry the score ``-inf``
and never rank above a finite score.

Two back ends compute the same integers: numba kernels for CPU tensors (one fused pass over each
row, no temporaries, both cores) and torch operations for other devices.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

_BIG_INDEX = np.iinfo(np.int64).max


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _count_before_numba(scores, cols, thresholds, positions, out):  # pragma: no cover
    rows = scores.shape[0]
    slots = thresholds.shape[1]
    for i in numba.prange(rows):
        row = scores[i]
        for t in range(slots):
            jb = positions[i, t]
            if jb < 0:
                out[i, t] = -1
                continue
            b = thresholds[i, t]
            stop = min(jb, cols)
            count = 0
            for j in range(stop):
                count += row[j] >= b
            for j in range(stop, cols):
                count += row[j] > b
            out[i, t] = count


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _topk_numba(scores, cols, ks, out_index, out_score):  # pragma: no cover - compiled
    rows = scores.shape[0]
    for i in numba.prange(rows):
        k = ks[i]
        if k <= 0:
            continue
        row = scores[i]
        # Min-heap of the best k so far; the root is the worst kept item: lowest score, and among
        # equal scores the highest index. Scanning j upwards, an item with a score equal to the
        # root's ranks below it, so only a strictly higher score may enter.
        hs = np.full(k, -np.inf, dtype=scores.dtype)
        hi = np.full(k, _BIG_INDEX, dtype=np.int64)
        for j in range(cols):
            s = row[j]
            if s > hs[0]:
                hs[0] = s
                hi[0] = j
                p = 0
                while True:
                    left = 2 * p + 1
                    if left >= k:
                        break
                    worst = left
                    right = left + 1
                    if right < k and (
                        hs[right] < hs[left] or (hs[right] == hs[left] and hi[right] > hi[left])
                    ):
                        worst = right
                    if hs[worst] < hs[p] or (hs[worst] == hs[p] and hi[worst] > hi[p]):
                        hs[p], hs[worst] = hs[worst], hs[p]
                        hi[p], hi[worst] = hi[worst], hi[p]
                        p = worst
                    else:
                        break
        # Heap to ranked order: best first, by (-score, index).
        order = np.empty(k, dtype=np.int64)
        for a in range(k):
            order[a] = a
        for a in range(1, k):
            x = order[a]
            b = a - 1
            while b >= 0 and (
                hs[order[b]] < hs[x] or (hs[order[b]] == hs[x] and hi[order[b]] > hi[x])
            ):
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = x
        for a in range(k):
            idx = hi[order[a]]
            out_index[i, a] = -1 if idx == _BIG_INDEX else idx
            out_score[i, a] = hs[order[a]]


def _use_numba(scores: torch.Tensor, backend: str | None) -> bool:
    if backend is None:
        return scores.device.type == "cpu"
    return backend == "numba"


def count_before(
    scores: torch.Tensor,
    thresholds: torch.Tensor,
    positions: torch.Tensor,
    backend: str | None = None,
    cols: int | None = None,
) -> torch.Tensor:
    """For each row ``i`` and slot ``t``, count the candidates that rank above ``positions[i, t]``.

    A candidate ``j`` ranks above the item at position ``p`` with score ``b = thresholds[i, t]``
    when ``scores[i, j] > b``, or ``scores[i, j] == b`` and ``j < p``. Slots with a negative
    position give ``-1``. Shapes: scores ``(c, m)`` float32, thresholds ``(c, g)`` float32,
    positions ``(c, g)`` int64; returns ``(c, g)`` int64. Only the first ``cols`` columns count
    (the rest is GEMM padding).
    """
    cols = scores.shape[1] if cols is None else cols
    if _use_numba(scores, backend):
        out = np.empty(tuple(thresholds.shape), dtype=np.int64)
        _count_before_numba(
            scores.contiguous().numpy(),
            cols,
            thresholds.contiguous().numpy(),
            positions.contiguous().numpy(),
            out,
        )
        return torch.from_numpy(out)
    scores = scores[:, :cols]
    columns = torch.arange(scores.shape[1], device=scores.device)
    out = torch.empty(thresholds.shape, dtype=torch.int64, device=scores.device)
    for t in range(thresholds.shape[1]):
        b = thresholds[:, t : t + 1]
        p = positions[:, t : t + 1]
        above = (scores > b) | ((scores == b) & (columns < p))
        out[:, t] = above.sum(dim=1)
    out[positions < 0] = -1
    return out


def topk(
    scores: torch.Tensor, ks: torch.Tensor, backend: str | None = None, cols: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``ks[i]`` of each row, best first, ties by lower index.

    Returns ``(indices, values)`` of shape ``(c, max(ks))``; a row's slots past its own k, and
    slots beyond its finite candidates, hold index ``-1`` and value ``-inf``. Only the first
    ``cols`` columns are candidates.
    """
    cols = scores.shape[1] if cols is None else cols
    rows = scores.shape[0]
    kmax = int(ks.max()) if rows else 0
    if _use_numba(scores, backend):
        index = np.full((rows, kmax), -1, dtype=np.int64)
        value = np.full((rows, kmax), -np.inf, dtype=scores.numpy().dtype)
        _topk_numba(
            scores.contiguous().numpy(),
            cols,
            ks.contiguous().numpy().astype(np.int64),
            index,
            value,
        )
        return torch.from_numpy(index), torch.from_numpy(value)
    return _topk_torch(scores[:, :cols], ks, kmax)


def _topk_torch(
    scores: torch.Tensor, ks: torch.Tensor, kmax: int
) -> tuple[torch.Tensor, torch.Tensor]:
    device = scores.device
    rows = scores.shape[0]
    index = torch.full((rows, kmax), -1, dtype=torch.int64, device=device)
    value = torch.full((rows, kmax), -torch.inf, dtype=scores.dtype, device=device)
    if kmax == 0:
        return index, value
    kmax = min(kmax, scores.shape[1])
    ks = ks.to(device).clamp(max=kmax)
    # torch.topk orders tied values arbitrarily, but its values are exact: the k-th value is the
    # threshold, and the tied items at the threshold are then taken in index order.
    kth = torch.topk(scores, kmax, dim=1).values.gather(1, (ks - 1).clamp(min=0)[:, None])
    above = scores > kth
    need = ks - above.sum(dim=1)
    tied = scores == kth
    chosen = above | (tied & (tied.cumsum(dim=1) <= need[:, None]))
    chosen &= (ks > 0)[:, None] & torch.isfinite(scores)
    r, c = chosen.nonzero(as_tuple=True)
    v = scores[r, c]
    order = torch.sort(-v, stable=True).indices  # c is ascending within a row already
    order = order[torch.sort(r[order], stable=True).indices]
    r, c, v = r[order], c[order], v[order]
    starts = torch.zeros(rows + 1, dtype=torch.int64, device=device)
    starts[1:] = torch.bincount(r, minlength=rows).cumsum(0)
    slot = torch.arange(r.numel(), device=device) - starts[r]
    index[r, slot] = c
    value[r, slot] = v
    return index, value
