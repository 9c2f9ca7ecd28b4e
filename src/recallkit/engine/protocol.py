"""The contract between the engine's dispatcher and its back ends.

A :class:`Request` says what one pass over the queries computes; a back end answers with one
:class:`ChunkResult` per chunk of queries. A back end is a module-level object with the
:class:`Backend` methods; it may compute a chunk however it likes (tiles on the CPU, whole
chunks on a GPU, fused kernels) as long as every number it returns is the one the definitions
give: ranks counted with the tie rule (:mod:`recallkit.engine.ties`) over exact scores
(:mod:`recallkit.engine.exact`).

What a request can ask for, in one pass:

* **thresholds**: per query, the rank of its best relevant item (``positives``: label codes or
  explicit lists), or the rank of each of its ``targets``; with the tie counts around it;
* **ranked lists**: per query, its exact top-``top_k[i]`` reference items and their exact
  scores, with the *tail* (items beyond the list tied with its last item).

Both may be asked together: a back end then computes each filter score once for both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from recallkit.engine.pairs import Exclusions, LabelPositives, Pairs
from recallkit.engine.space import Rows, Space


@dataclass(frozen=True)
class Request:
    """What one pass computes for every query (module docstring).

    ``positives`` and ``targets`` are exclusive (a rank per query, or per target slot);
    ``top_k`` (int64 per query) asks for ranked lists; ``exclusions`` are skipped by all.
    With ``first_hit=False`` the label ``positives`` are no threshold: they only let a back
    end start each list from its k-th positive when ``top_k`` is at most each query's number
    of positives (a cheaper pass). ``lists_on_device`` keeps the ranked lists where the work
    runs (else they come back as CPU tensors).
    """

    positives: LabelPositives | Pairs | None = None
    targets: np.ndarray | None = None
    top_k: np.ndarray | None = None
    exclusions: Exclusions | None = None
    first_hit: bool = True
    lists_on_device: bool = False

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
    temporaries), for :func:`recallkit.engine.space.chunk_rows`."""

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
