"""Sharded evaluation over ``torch.distributed``: exact recall@K, MAP@R and R-precision.

Each process holds only its shard of the embeddings (as a ``DistributedSampler`` gives them,
padding duplicates included) with each row's index in the dataset. Every process returns the
result of the single-process evaluation on the whole split ordered by dataset index, bit for bit
in the reported values.

What crosses processes (``n`` queries, ``d`` dimensions, world size ``W``):

* once: every process's dataset indices (8 bytes per row) to find padding duplicates;
* per query chunk of ``c`` rows: the chunk, broadcast by its owner (``c·(4d + 8 + 8 + 8)``
  bytes: float32 rows, label, index, id), then per-query partial results reduced across
  processes: best positive score and index, positive count, count ranked above (``4·8·c``);
* for MAP@R / R-precision: each process's top-R list per query (index, score, relevance:
  ``24·c·R`` bytes from every process) to merge the global top-R exactly;
* at the end: the per-query first-hit ranks and AP@R values (``n·16`` bytes, gathered).

No process ever receives another's reference shard. Everything goes through the public
``torch.distributed`` collectives (``all_gather``, ``broadcast``, ``all_reduce``), so it runs on
gloo (CPU) and nccl (GPU) alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from recallkit import _checks, _engine
from recallkit.ranking import _precision_sum
from recallkit.recall import result_from_ranks
from recallkit.result import RecallResult

_OPS = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM}


@dataclass(frozen=True)
class ShardedResult:
    """The whole split's metrics, the same on every process.

    ``recall`` is a :class:`recallkit.RecallResult` whose per-query arrays follow the dataset
    index order (``recall.query_ids`` holds the indices); ``bytes_communicated`` counts what
    this process sent and received through the collectives.
    """

    recall: RecallResult
    map_at_r: float | None
    r_precision: float | None
    bytes_communicated: int

    def to_dict(self) -> dict[str, Any]:
        out = {**self.recall, "map_at_r": self.map_at_r, "r_precision": self.r_precision}
        return out


class _Comm:
    """Collectives over a process group, counting the bytes each call moves for this process."""

    def __init__(self, group: Any, device: torch.device) -> None:
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.device = device
        self.bytes = 0

    def _size(self, t: torch.Tensor) -> int:
        return t.numel() * t.element_size()

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        t = t.contiguous().to(self.device)
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t, group=self.group)
        self.bytes += self._size(t) * self.world
        return out

    def all_gather_varying(self, t: torch.Tensor) -> list[torch.Tensor]:
        """All-gather 1-D or 2-D tensors whose first dimension differs across processes."""
        n = torch.tensor([t.shape[0]], dtype=torch.int64, device=self.device)
        sizes = [int(s) for s in self.all_gather(n)]
        padded = t.new_zeros((max(sizes), *t.shape[1:]))
        padded[: t.shape[0]] = t
        return [g[:s] for g, s in zip(self.all_gather(padded), sizes, strict=True)]

    def broadcast(self, t: torch.Tensor, src: int) -> torch.Tensor:
        t = t.contiguous().to(self.device)
        dist.broadcast(
            t, src=dist.get_global_rank(self.group, src) if self.group else src, group=self.group
        )
        self.bytes += self._size(t)
        return t

    def reduce(self, op: str, t: torch.Tensor) -> torch.Tensor:
        out = t.to(self.device, copy=True).contiguous()
        dist.all_reduce(out, op=_OPS[op], group=self.group)
        self.bytes += self._size(out)
        return out.to(t.device)


def _int_values(x: Any, n: int, name: str, func: str) -> torch.Tensor:
    array = np.asarray(x.cpu() if torch.is_tensor(x) else x)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise _checks.fail(func, name, "a 1-D array of integers", f"{array.dtype} {array.shape}")
    t = torch.from_numpy(array.astype(np.int64))
    _checks.check_length(t, n, name, func, "embeddings")
    return t.to(torch.int64)


def _check_indices(index: torch.Tensor, name: str, func: str) -> torch.Tensor:
    if bool((index < 0).any()):
        row = int(torch.nonzero(index < 0)[0, 0])
        raise _checks.fail(func, name, "non-negative dataset indices", f"a negative at row {row}")
    return index


def _first_occurrences(comm: _Comm, index: torch.Tensor) -> torch.Tensor:
    """Mask of this process's rows that hold the first occurrence of their dataset index."""
    gathered = [g.cpu() for g in comm.all_gather_varying(index.to(comm.device))]
    everything = torch.cat(gathered).numpy()
    _, first = np.unique(everything, return_index=True)
    keep = np.zeros(len(everything), dtype=bool)
    keep[first] = True
    start = sum(len(g) for g in gathered[: comm.rank])
    return torch.from_numpy(keep[start : start + len(index)])


def evaluate_sharded(
    embeddings: Any,
    labels: Any,
    indices: Any,
    ks: Any = (1, 2, 4, 8),
    *,
    reference: Any = None,
    reference_labels: Any = None,
    reference_indices: Any = None,
    ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    ranking_metrics: bool = True,
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "float32",
    group: Any = None,
) -> ShardedResult:
    """Exact recall@K (and MAP@R, R-precision) of a split sharded across processes.

    Without ``reference`` the split is evaluated against itself (leave-one-out): each query's
    own row is removed by its dataset index. With ``reference`` (this process's shard of a
    separate gallery, with ``reference_indices``) the queries are evaluated against the whole
    gallery. ``ids``/``reference_ids`` additionally remove every reference item whose id equals
    the query's (for example several photos of one object). Ties rank the lower dataset index
    first. Labels, indices and ids are integers. Rows with a dataset index already held by an
    earlier process (``DistributedSampler`` padding) are counted once.

    The values equal :func:`recallkit.recall_at_k` (``query_in_reference=True`` for
    leave-one-out), :func:`recallkit.map_at_r` and :func:`recallkit.r_precision` on the
    concatenated data sorted by dataset index.

    Example (inside ``torchrun``)::

        sampler = DistributedSampler(val_set, shuffle=False)
        emb, lab = extract_embeddings(model, DataLoader(val_set, sampler=sampler))
        result = evaluate_sharded(emb, lab, torch.tensor(list(sampler)), ks=(1, 2, 4, 8))
    """
    func = "evaluate_sharded"
    ks = _checks.check_ks(ks, func)
    chunk_size = _checks.check_chunk_size(chunk_size, func)
    if not dist.is_available() or not dist.is_initialized():
        raise _checks.fail(
            func, "group", "an initialised torch.distributed process group", "no process group"
        )
    _checks.check_metric(metric, func)
    if precision not in _engine.PRECISIONS:
        raise _checks.fail(
            func, "precision", f"one of {tuple(_engine.PRECISIONS)}", repr(precision)
        )
    q = _Shard.of(embeddings, labels, indices, ids, "", func)
    r = (
        q
        if reference is None
        else _reference_shard(
            q, reference, reference_labels, reference_indices, ids, reference_ids, func
        )
    )
    dev = _engine.resolve_device(device, q.rows)
    comm = _Comm(group, dev if dist.get_backend(group) == "nccl" else torch.device("cpu"))
    leave_one_out = reference is None
    local = _Local.of(comm, q, r, leave_one_out, metric, dev, precision, func)
    size = chunk_size or _engine.chunk_rows(local.space, None)
    sizes = [
        int(s) for s in comm.all_gather(torch.tensor([len(local.meta[0])], device=comm.device))
    ]
    parts: list[tuple[torch.Tensor, ...]] = []
    for owner in range(comm.world):
        for start, stop in _engine.chunks(sizes[owner], size):
            mine = comm.rank == owner
            raw = comm.broadcast(
                local.queries[start:stop]
                if mine
                else torch.empty((stop - start, q.rows.shape[1]), dtype=local.queries.dtype),
                owner,
            ).to(dev)
            meta = comm.broadcast(
                local.meta[:, start:stop]
                if mine
                else torch.empty((3, stop - start), dtype=torch.int64),
                owner,
            ).cpu()
            parts.append(
                _chunk_statistics(
                    comm, local, _engine.Rows.of(raw), meta.numpy(), leave_one_out, ranking_metrics
                )
            )
    return _gathered_result(
        parts,
        ks,
        local.total_reference - int(leave_one_out),
        local.total_reference,
        q.rows.shape[1],
        ranking_metrics,
        comm.bytes,
    )


def _reference_shard(
    q: _Shard,
    reference: Any,
    labels: Any,
    indices: Any,
    ids: Any,
    reference_ids: Any,
    func: str,
) -> _Shard:
    if indices is None:
        raise _checks.fail(func, "reference_indices", "given with 'reference'", None)
    if ids is not None and reference_ids is None:
        raise _checks.fail(func, "reference_ids", "given with 'ids'", None)
    r = _Shard.of(
        reference, labels, indices, reference_ids if ids is not None else None, "reference_", func
    )
    if r.rows.shape[1] != q.rows.shape[1]:
        raise _checks.fail(func, "reference", f"of dimension {q.rows.shape[1]}", r.rows.shape[1])
    return r


@dataclass
class _Local:
    """This process's part: its reference block (first occurrences, sorted by dataset index)
    with labels and ids, and its queries with their ``(label, index, id)`` rows."""

    space: _engine.Space
    block: _engine.Block
    labels: np.ndarray
    ids: np.ndarray | None
    total_reference: int
    queries: torch.Tensor
    meta: torch.Tensor

    @classmethod
    def of(
        cls,
        comm: _Comm,
        q: _Shard,
        r: _Shard,
        leave_one_out: bool,
        metric: str,
        dev: torch.device,
        precision: str,
        func: str,
    ) -> _Local:
        keep_r = _first_occurrences(comm, r.index)
        r_rows = torch.nonzero(keep_r)[:, 0][torch.argsort(r.index[keep_r])]
        fdtype = _engine.filter_dtype(
            _engine.work_dtype(q.rows.dtype), _engine.work_dtype(r.rows.dtype)
        )
        block = _engine.make_block(
            r.rows[r_rows],
            0,
            func,
            metric,
            dev,
            fdtype,
            global_index=r.index[r_rows].to(dev),
            precision=precision,
        )
        space = _engine.Space(
            _engine.prepare_rows(q.rows[:0], "embeddings", func, metric, dev),
            metric,
            int(r_rows.numel()),
            q.rows.shape[1],
            dev,
            lambda: iter(()),
            single=block,
            precision=precision,
            filter_dtype=fdtype,
        )
        total = int(comm.reduce("sum", torch.tensor([r_rows.numel()], device=comm.device)).item())
        keep_q = keep_r if leave_one_out else _first_occurrences(comm, q.index)
        q_rows = torch.nonzero(keep_q)[:, 0]
        ids = q.ids[q_rows] if q.ids is not None else torch.zeros(len(q_rows), dtype=torch.int64)
        return cls(
            space,
            block,
            r.labels[r_rows].numpy(),
            r.ids[r_rows].numpy() if r.ids is not None else None,
            total,
            _engine.prepare_rows(q.rows[q_rows], "embeddings", func, metric, dev).raw,
            torch.stack([q.labels[q_rows], q.index[q_rows], ids]),
        )


def _gathered_result(
    parts: list[tuple[torch.Tensor, ...]],
    ks: tuple[int, ...],
    candidates: int,
    total_reference: int,
    dim: int,
    ranking_metrics: bool,
    communicated: int,
) -> ShardedResult:
    """The whole split's result from every chunk's statistics, in dataset index order."""
    index = torch.cat([p[0] for p in parts])
    order = torch.argsort(index)
    first_hit, r_total = (torch.cat([p[i] for p in parts])[order].numpy() for i in (1, 2))
    recall = result_from_ranks(
        ks,
        first_hit,
        candidates=candidates,
        num_reference=total_reference,
        embedding_dim=dim,
        query_ids=index[order].tolist(),
    )
    map_r = rprec = None
    ok = r_total > 0
    if ranking_metrics and ok.any():
        ap, hits = (torch.cat([p[i] for p in parts])[order].numpy() for i in (3, 4))
        map_r = float((ap[ok] / r_total[ok]).mean())
        rprec = float((hits[ok] / r_total[ok]).mean())
    return ShardedResult(recall, map_r, rprec, communicated)


@dataclass
class _Shard:
    """One process's rows with their integer labels, dataset indices and ids."""

    rows: torch.Tensor
    labels: torch.Tensor
    index: torch.Tensor
    ids: torch.Tensor | None

    @classmethod
    def of(cls, rows: Any, labels: Any, index: Any, ids: Any, prefix: str, func: str) -> _Shard:
        name = f"{prefix}embeddings" if prefix else "embeddings"
        x = _checks.as_embeddings(rows, "reference" if prefix else name, func)
        n = x.shape[0]
        return cls(
            x,
            _int_values(labels, n, f"{prefix}labels", func),
            _check_indices(
                _int_values(index, n, f"{prefix}indices", func), f"{prefix}indices", func
            ),
            _int_values(ids, n, f"{prefix}ids", func) if ids is not None else None,
        )


def _chunk_statistics(
    comm: _Comm,
    local: _Local,
    chunk: _engine.Rows,
    meta: np.ndarray,
    leave_one_out: bool,
    ranking_metrics: bool,
) -> tuple[torch.Tensor, ...]:
    """One broadcast chunk's global results: dataset indices, first-hit ranks, R, and (for the
    ranking metrics) each query's MAP@R numerator and hits within its top R."""
    c_labels, c_index, c_ids = meta
    c = len(c_labels)
    space, block, ref_labels, ref_ids = local.space, local.block, local.labels, local.ids
    positives = _engine.LabelPositives(c_labels, ref_labels)
    excluded = []
    if leave_one_out:
        own = _engine.Pairs.by_code(c_index, block.global_index.cpu().numpy())
        excluded.append(_to_global(own, block))
    if ref_ids is not None:
        excluded.append(_to_global(_engine.Pairs.by_code(c_ids, ref_ids), block))
    bound = int(block.global_index.max()) + 1 if block.rows else 1
    exclusions = _engine.Pairs.union(excluded, c, bound) if excluded else None
    ranks = _engine.threshold_ranks(
        space, chunk, 0, c, exclusions, positives=positives, reduce=comm.reduce
    )[:, 0]
    counts = torch.from_numpy(positives.num_relevant(exclusions, block))
    r_count = comm.reduce("sum", counts.to(comm.device)).cpu()
    out = [torch.from_numpy(c_index.copy()), ranks.cpu(), r_count]
    if ranking_metrics:
        rel = _global_top_r(comm, space, chunk, c, r_count, exclusions, block, ref_labels, c_labels)
        relevant = rel.numpy()
        out += [torch.from_numpy(_precision_sum(relevant)), torch.from_numpy(relevant.sum(1))]
    return tuple(out)


def _to_global(pairs: _engine.Pairs, block: _engine.Block) -> _engine.Pairs:
    """Pairs over local block positions -> the same pairs over dataset indices."""
    return _engine.Pairs(pairs.indptr, block.global_index.cpu()[pairs.indices], pairs.num_query)


def _global_top_r(
    comm: _Comm,
    space: _engine.Space,
    chunk: torch.Tensor,
    c: int,
    r_count: torch.Tensor,
    exclusions: _engine.Pairs | None,
    block: _engine.Block,
    ref_labels: np.ndarray,
    c_labels: np.ndarray,
) -> torch.Tensor:
    """Relevance of each query's global top-R list, merged exactly from every process's top-R."""
    width = int(r_count.max()) if c else 0
    if width == 0:
        return torch.zeros((c, 0), dtype=torch.bool)
    index, value = _engine.ranked_chunk(space, chunk, 0, c, r_count.to(torch.int64), exclusions)
    index, value = index[:, :width].cpu(), value[:, :width].cpu()
    if index.shape[1] < width:
        pad = width - index.shape[1]
        index = torch.cat([index, torch.full((c, pad), -1, dtype=torch.int64)], 1)
        value = torch.cat([value, torch.full((c, pad), -torch.inf, dtype=value.dtype)], 1)
    local = torch.searchsorted(block.global_index.cpu(), index.clamp(min=0))
    local = local.clamp(max=max(block.rows - 1, 0))
    rel = (index >= 0) & torch.from_numpy(
        ref_labels[local.numpy()] == c_labels[:, None]
        if block.rows
        else np.zeros_like(index.numpy(), dtype=bool)
    )
    packed = torch.stack([index.to(torch.float64), value.to(torch.float64), rel.to(torch.float64)])
    gathered = [g.cpu() for g in comm.all_gather(packed.to(comm.device))]
    idx, val, hit = (torch.cat([g[i] for g in gathered], 1) for i in range(3))
    _, _, hit = _engine.merge_ranked(idx.to(torch.int64), val, width, hit)
    beyond = torch.arange(width)[None, :] >= r_count[:, None]
    return (hit > 0) & ~beyond
