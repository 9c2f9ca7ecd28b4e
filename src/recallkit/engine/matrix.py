"""Requests on a similarity matrix given by the caller, whose entries are the exact scores.

The same [`Request`][recallkit.engine.protocol.Request] and
[`ChunkResult`][recallkit.engine.protocol.ChunkResult] as on embeddings, so that every metric and
every protocol is written once over either kind of input: the scores are exact as given, so there is
no filter, and ranks, ties and lists are counted directly on row chunks of the matrix (copies, with
skipped entries at ``-inf``), with the tie rule of [`recallkit.engine.ties`][recallkit.engine.ties].
Chunks are sized from the memory budget. Works on any device the matrix lives on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from recallkit.engine import ties
from recallkit.engine.pairs import ChunkExclusions, Pairs
from recallkit.engine.protocol import ChunkResult, Request
from recallkit.engine.space import memory_budget


class _MatrixBlock:
    """The whole column range of a matrix, as the block the exclusions are expressed in."""

    offset = 0
    global_index = None

    def __init__(self, rows: int) -> None:
        self.rows = rows


def chunk_rows(matrix: torch.Tensor, slots: int = 1, options: Any = None) -> int:
    """Rows per chunk: a chunk's copy and its comparison masks within the memory budget
    ([`recallkit.engine.space.memory_budget`][recallkit.engine.space.memory_budget] of ``options``,
    default the defaults)."""
    m = max(matrix.shape[1], 1)
    per_row = m * (matrix.element_size() + 2 * max(slots, 1)) + 64
    return int(max(1, memory_budget(options, matrix.device) // per_row))


def run(matrix: torch.Tensor, request: Request, options: Any = None) -> Iterator[ChunkResult]:
    """Every chunk's answer to ``request`` over the rows of ``matrix`` ``(n, m)``, chunks sized
    from the memory budget of ``options`` (a [`recallkit.Options`][recallkit.options.Options],
    default the defaults)."""
    n, m = matrix.shape
    size = chunk_rows(matrix, request.slots(), options)
    block = _MatrixBlock(m)
    for start in range(0, n, size):
        stop = min(start + size, n)
        scores = matrix[start:stop].clone()
        excluded = ChunkExclusions(request.exclusions, start, stop, scores.device)
        _mask(scores, excluded, block)
        out = ChunkResult(start, stop)
        if request.thresholds:
            _thresholds(scores, request, start, stop, excluded, block, out)
        if request.lists:
            ks = torch.from_numpy(np.ascontiguousarray(request.top_k[start:stop], dtype=np.int64))
            out.top_index, out.top_score, out.tail_index, out.tail_score = top(scores, ks)
        yield out


def _mask(scores: torch.Tensor, excluded: ChunkExclusions, block: _MatrixBlock) -> None:
    r, local, _ = excluded.in_block(block)
    if r.numel():
        scores[r.to(scores.device), local.to(scores.device)] = -torch.inf
    codes = excluded.codes(block)
    if codes is not None:
        q = torch.from_numpy(codes[0]).to(scores.device)[:, None]
        c = torch.from_numpy(codes[1]).to(scores.device)[None, :]
        scores.masked_fill_((q >= 0) & (q == c), -torch.inf)


def _thresholds(
    scores: torch.Tensor,
    request: Request,
    start: int,
    stop: int,
    excluded: ChunkExclusions,
    block: _MatrixBlock,
    out: ChunkResult,
) -> None:
    c, m = scores.shape
    device = scores.device
    if request.targets is not None:
        where = torch.from_numpy(np.ascontiguousarray(request.targets[start:stop])).to(device)
        best = scores.gather(1, where.clamp(min=0)).to(torch.float64)
        best = torch.where(where >= 0, best, torch.full_like(best, -torch.inf))
        equal = torch.zeros(c, dtype=torch.int64, device=device)
    else:
        positives = request.positives
        if not isinstance(positives, Pairs):
            codes = torch.from_numpy(positives.query_codes[start:stop]).to(device)
            ref = torch.from_numpy(positives.reference_codes).to(device)
            mask = (codes[:, None] == ref[None, :]) & torch.isfinite(scores)
            rows, cols = torch.nonzero(mask, as_tuple=True)
        else:
            rows, cols = positives.expand(start, stop, device)
            keep = torch.isfinite(scores[rows, cols])
            rows, cols = rows[keep], cols[keep]
        value = scores[rows, cols].to(torch.float64)
        b, w, equal = ties.segment_best(rows, value, cols, c)
        best, where = b[:, None], w[:, None]
    columns = torch.arange(m, device=device)[None, :]
    g = best.shape[1]
    ranks = torch.empty((c, g), dtype=torch.int64, device=device)
    tied = torch.empty_like(ranks)
    before = torch.empty_like(ranks)
    s = scores.to(torch.float64)
    for t in range(g):
        b, w = best[:, t : t + 1], where[:, t : t + 1]
        same = s == b
        lower = same & (columns < w)
        ranks[:, t] = (s > b).sum(dim=1) + lower.sum(dim=1)
        tied[:, t] = (same & (columns != w)).sum(dim=1)
        before[:, t] = lower.sum(dim=1)
    found = torch.isfinite(best)
    out.ranks = torch.where(found, ranks, torch.full_like(ranks, -1)).cpu().numpy()
    out.ties = torch.where(found, tied, torch.zeros_like(tied)).cpu().numpy()
    out.ties_before = torch.where(found, before, torch.zeros_like(before)).cpu().numpy()
    out.tied_positives = (equal - 1).clamp(min=0).cpu().numpy()


def top(
    scores: torch.Tensor, ks: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row's top-``ks[i]`` columns of exact scores by the tie rule, ``(c, max k)``
    (``-1``/``-inf`` padding), and the tail (columns beyond k tied with the k-th)."""
    c, m = scores.shape
    device = scores.device
    ks = ks.to(device)
    kmax = min(int(ks.max()) if c else 0, m)
    if kmax == 0:
        empty = torch.full((c, 0), -1, dtype=torch.int64, device=device)
        return empty, empty.to(torch.float64), empty.clone(), empty.to(torch.float64)
    values = torch.topk(scores, kmax, dim=1).values
    k_row = ks.clamp(max=m)
    kth = values.gather(1, (k_row.clamp(min=1) - 1)[:, None])
    candidate = (scores >= kth) & torch.isfinite(scores) & (k_row[:, None] > 0)
    rows, cols = torch.nonzero(candidate, as_tuple=True)  # row-major: columns ascending
    value = scores[rows, cols].to(torch.float64)
    order = torch.sort(-value, stable=True).indices
    order = order[torch.sort(rows[order], stable=True).indices]
    rows, cols, value = rows[order], cols[order], value[order]
    starts = torch.zeros(c + 1, dtype=torch.int64, device=device)
    starts[1:] = torch.cumsum(torch.bincount(rows, minlength=c), 0)
    position = torch.arange(rows.numel(), device=device) - starts[rows]
    k_of = k_row[rows]
    inside = position < k_of
    index = torch.full((c, kmax), -1, dtype=torch.int64, device=device)
    score = torch.full((c, kmax), -torch.inf, dtype=torch.float64, device=device)
    index[rows[inside], position[inside]] = cols[inside]
    score[rows[inside], position[inside]] = value[inside]
    kth64 = kth[:, 0].to(torch.float64)
    tail = ~inside & (value == kth64[rows])
    t_rows, t_pos = rows[tail], (position - k_of)[tail]
    width = int(t_pos.max()) + 1 if t_pos.numel() else 0
    tail_index = torch.full((c, width), -1, dtype=torch.int64, device=device)
    tail_score = torch.full((c, width), -torch.inf, dtype=torch.float64, device=device)
    tail_index[t_rows, t_pos] = cols[tail]
    tail_score[t_rows, t_pos] = value[tail]
    return index, score, tail_index, tail_score
