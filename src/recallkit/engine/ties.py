"""The tie rule, in one place: a higher score ranks first; equal scores rank the lower index first.

Every decision of the engine that orders two candidates goes through these functions: the rank
of a threshold item (how many candidates *beat* it), the best of several candidates, the merge of
ranked lists from several blocks or processes, and the order of a ranked list. Scores here are
the exact scores ([`recallkit.engine.exact`][recallkit.engine.exact]), so an exact tie is a tie of
the inputs, never an artefact of rounding.

The tie rule also decides which tied items a rank counts. Beside each rank the engine counts the
items *tied* with the threshold item (equal exact score), so that every metric can report the
value the tie rule gives together with its optimistic and pessimistic values (ties broken in the
query's favour or against it; ``recallkit.metrics``).

All functions are deterministic on every device: no scatter reductions with ``amin``/``amax``
(which ``torch.use_deterministic_algorithms`` refuses on CUDA), only stable sorts, gathers and
integer counts.
"""

from __future__ import annotations

import numpy as np
import torch

#: The index of "no item": larger than every real index, so the lower-index rule never picks it.
SENTINEL = int(np.iinfo(np.int64).max)


def beats(
    score: torch.Tensor, index: torch.Tensor, best: torch.Tensor, where: torch.Tensor
) -> torch.Tensor:
    """Whether ``(score, index)`` ranks before ``(best, where)``: a higher score, or an equal
    score and a lower index."""
    return (score > best) | ((score == best) & (index < where))


def merge_best(
    best: torch.Tensor, where: torch.Tensor, score: torch.Tensor, index: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The better of ``(best, where)`` and ``(score, index)``, element by element."""
    better = beats(score, index, best, where)
    return torch.where(better, score, best), torch.where(better, index, where)


def ranked_order(score: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Per row of ``(c, w)`` tensors, the permutation that sorts by higher score, then lower
    index (padding: index ``-1`` with score ``-inf``, last). Two stable sorts."""
    key = torch.where(index >= 0, index, torch.full_like(index, SENTINEL))
    order = torch.sort(key, dim=1, stable=True).indices
    by_score = torch.sort(-score.gather(1, order), dim=1, stable=True).indices
    return order.gather(1, by_score)


def segment_best(
    rows: torch.Tensor, score: torch.Tensor, index: torch.Tensor, count: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row ``0..count-1``, the best of the items ``(rows[p], score[p], index[p])`` by the
    tie rule, and how many items score exactly that best: ``(best, where, equal)``, with
    ``(-inf, SENTINEL, 0)`` for a row without items. Items with a negative row are padding.
    Every shape is known in advance (no host synchronisation on a GPU)."""
    device = score.device
    if rows.numel() == 0:
        best = torch.full((count,), -torch.inf, dtype=score.dtype, device=device)
        where = torch.full((count,), SENTINEL, dtype=torch.int64, device=device)
        return best, where, torch.zeros(count, dtype=torch.int64, device=device)
    valid = rows >= 0
    key_row = torch.where(valid, rows, torch.full_like(rows, count))
    key_index = torch.where(valid, index, torch.full_like(index, SENTINEL))
    value = torch.where(valid, score, torch.full_like(score, -torch.inf))
    order = torch.sort(key_index, stable=True).indices
    order = order[torch.sort(-value[order], stable=True).indices]
    order = order[torch.sort(key_row[order], stable=True).indices]
    sizes = torch.zeros(count + 1, dtype=torch.int64, device=device)
    sizes.scatter_add_(0, key_row, torch.ones_like(key_row))
    first = (torch.cumsum(sizes, 0) - sizes)[:count].clamp(max=rows.numel() - 1)
    pick = order[first]
    has = sizes[:count] > 0
    best = torch.where(has, value[pick], torch.full_like(value[pick], -torch.inf))
    where = torch.where(has, key_index[pick], torch.full_like(pick, SENTINEL))
    at_best = valid & (value == best[rows.clamp(min=0, max=max(count - 1, 0))])
    at_best &= torch.isfinite(value)
    equal = torch.zeros(count + 1, dtype=torch.int64, device=device)
    equal.scatter_add_(0, key_row, at_best.to(torch.int64))
    return best, where, equal[:count]


def split_tail(
    index: torch.Tensor,
    score: torch.Tensor,
    ks: torch.Tensor,
    tail_width: int | None = None,
    kmax: int | None = None,
    kmin: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of ranked candidates (best first by the tie rule, ``-1`` padding) cut at
    ``ks[i]``: the top-``k`` list ``(c, max ks)`` and its *tail*, the candidates beyond ``k``
    whose score equals the ``k``-th's (``(c, t)``, ``-1``/``-inf`` padding). The tail holds
    every item that a tie rule other than the lower index could have put in the list. A fixed
    ``tail_width`` and ``kmax`` (the largest k, if the host knows it) keep the shapes known in
    advance (no host synchronisation); ``kmin``, at most the smallest k (if the host knows it),
    lets the tail be looked for beyond it only."""
    c, width = index.shape
    device = index.device
    if kmax is None:
        kmax = int(ks.max()) if c else 0
    ks = ks.to(device)[:, None]
    position = torch.arange(width, device=device)[None, :]
    inside = position < ks
    last = (ks - 1).clamp(min=0, max=max(width - 1, 0))
    if width:
        kth = score.gather(1, last)
        full = (ks > 0) & (ks <= width) & (index.gather(1, last) >= 0)
    else:
        kth = torch.full((c, 1), -torch.inf, dtype=score.dtype, device=device)
        full = torch.zeros((c, 1), dtype=torch.bool, device=device)
    # Copies of the kept columns only, padding written in place.
    top_index = index[:, :kmax].masked_fill(~inside[:, :kmax], -1)
    top_score = score[:, :kmax].masked_fill(~inside[:, :kmax], -torch.inf)
    if kmax > width:
        top_index = torch.nn.functional.pad(top_index, (0, kmax - width), value=-1)
        top_score = torch.nn.functional.pad(top_score, (0, kmax - width), value=-torch.inf)
    # Tail items lie beyond every row's k: only columns kmin: can hold one.
    kmin = min(max(kmin, 0), width)
    beyond = slice(kmin, width)
    tail = (~inside[:, beyond]) & (index[:, beyond] >= 0) & full & (score[:, beyond] == kth)
    del inside
    if tail_width is None:
        tail_width = int(tail.sum(dim=1).max()) if c and width else 0
    # Tail items keep their order (stable sort moves them to the front of each row).
    order = torch.sort((~tail).to(torch.int8), dim=1, stable=True).indices[:, :tail_width]
    kept = tail.gather(1, order)
    order = order + kmin
    tail_index = torch.where(kept, index.gather(1, order), torch.full_like(order, -1))
    tail_score = torch.where(
        kept,
        score.gather(1, order),
        torch.full(order.shape, -torch.inf, dtype=score.dtype, device=device),
    )
    return top_index, top_score, tail_index, tail_score
