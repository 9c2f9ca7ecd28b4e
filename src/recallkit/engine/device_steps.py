"""Steps of the torch back end ([`recallkit.engine.device`][recallkit.engine.device]) that hold no
state of their own: the cascade's float32 window, a deterministic per-row maximum, the record of
a chunk's filter pass, a chunk's answer from its host fields, and the timing of a step on a
device."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from recallkit.engine import filters, protocol, ties
from recallkit.engine.protocol import Capacities, ChunkResult, compact


def window32(
    f32: torch.Tensor,
    centre: torch.Tensor,
    eps32: torch.Tensor,
    rows: torch.Tensor,
    local: torch.Tensor,
    slot: torch.Tensor,
    total: torch.Tensor,
    over: torch.Tensor,
    caps: Capacities,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The cascade's middle step: the low-precision window's pairs scored in float32 (``f32``);
    those certainly above their slot's threshold added to ``total`` (in place), those inside the
    float32 window kept, compacted, for the exact scores. Returns the kept pairs and the
    overflow flag."""
    c, g = total.shape
    lo32, hi32 = filters.bounds(centre, eps32[:, None], torch.float32)
    at = rows.clamp(min=0) * g + slot.clamp(min=0)
    lo_at, hi_at = lo32.reshape(-1)[at], hi32.reshape(-1)[at]
    valid = rows >= 0
    total += protocol.count_into(c * g, at, valid & (f32 > hi_at)).view(c, g)
    keep = valid & (f32 >= lo_at) & (f32 <= hi_at)
    picked, flag = compact(keep, caps, "window32")
    sel = picked[:, 0]
    rows = torch.where(sel >= 0, rows[sel.clamp(min=0)], -1)
    local, slot = local[sel.clamp(min=0)], slot[sel.clamp(min=0)]
    return rows, local, slot, over | flag


def segment_max(rows: torch.Tensor, values: torch.Tensor, c: int) -> torch.Tensor:
    """Per row ``0..c-1`` the largest of ``values`` (``-inf`` for none; negative rows are
    padding), deterministically."""
    best, _, _ = ties.segment_best(rows, values.to(torch.float64), torch.zeros_like(rows), c)
    return best


@dataclass
class Pass:
    """A chunk's filter scores against one block, with their bound; with a low-precision
    filter, also the float32 filter rows' bound (the cascade)."""

    scores: torch.Tensor
    qf: filters.QueryFilter
    eps: torch.Tensor
    eps32: torch.Tensor | None
    low: bool


def result(start: int, stop: int, host: dict[str, Any]) -> ChunkResult:
    """A chunk's answer from its fields on the host (lists: CPU or device tensors)."""
    if "tied_positives" in host:
        host["tied_positives"] = host["tied_positives"].reshape(-1)
    return ChunkResult(start, stop, **host)


def timed(f: Callable[[], Any], device: torch.device) -> float:
    """Seconds of the fastest of three runs of ``f`` (after one warm-up) on ``device``."""
    f()
    best = math.inf
    for _ in range(3):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        f()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)
