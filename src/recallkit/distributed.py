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
    q = _checks.as_embeddings(embeddings, "embeddings", func)
    dev = _engine.resolve_device(device, q)
    comm_device = dev if dist.get_backend(group) == "nccl" else torch.device("cpu")
    comm = _Comm(group, comm_device)
    q_labels = _int_values(labels, q.shape[0], "labels", func)
    q_index = _check_indices(_int_values(indices, q.shape[0], "indices", func), "indices", func)
    q_ids = _int_values(ids, q.shape[0], "ids", func) if ids is not None else None
    leave_one_out = reference is None
    if leave_one_out:
        r, r_labels, r_index, r_ids = q, q_labels, q_index, q_ids
    else:
        r = _checks.as_embeddings(reference, "reference", func)
        r_labels = _int_values(reference_labels, r.shape[0], "reference_labels", func)
        if reference_indices is None:
            raise _checks.fail(func, "reference_indices", "given with 'reference'", None)
        r_index = _check_indices(
            _int_values(reference_indices, r.shape[0], "reference_indices", func),
            "reference_indices",
            func,
        )
        r_ids = None
        if q_ids is not None:
            if reference_ids is None:
                raise _checks.fail(func, "reference_ids", "given with 'ids'", None)
            r_ids = _int_values(reference_ids, r.shape[0], "reference_ids", func)
    if r.shape[1] != q.shape[1]:
        raise _checks.fail(func, "reference", f"of dimension {q.shape[1]}", r.shape[1])

    # The local reference block: first occurrences only, sorted by dataset index.
    keep_r = _first_occurrences(comm, r_index)
    order = torch.argsort(r_index[keep_r])
    r_rows = torch.nonzero(keep_r)[:, 0][order]
    fdtype = _engine.filter_dtype(_engine.work_dtype(q.dtype), _engine.work_dtype(r.dtype))
    block = _engine.make_block(
        r[r_rows], 0, func, metric, dev, fdtype, global_index=r_index[r_rows].to(dev)
    )
    space = _engine.Space(
        _engine.prepare_rows(q[:0], "embeddings", func, metric, dev),
        metric,
        int(r_rows.numel()),
        q.shape[1],
        dev,
        lambda: iter(()),
        single=block,
        filter_dtype=fdtype,
    )
    ref_labels = r_labels[r_rows].numpy()
    ref_ids = r_ids[r_rows].numpy() if r_ids is not None else None
    total_reference = int(
        comm.reduce("sum", torch.tensor([r_rows.numel()], device=comm.device)).item()
    )

    keep_q = _first_occurrences(comm, q_index) if not leave_one_out else keep_r
    q_rows = torch.nonzero(keep_q)[:, 0]
    sizes = [int(s) for s in comm.all_gather(torch.tensor([q_rows.numel()], device=comm.device))]
    local_q = _engine.prepare_rows(q[q_rows], "embeddings", func, metric, dev).raw
    size = chunk_size or _engine.chunk_rows(space, None)

    all_index, all_ranks, all_ap, all_rprec, all_r = [], [], [], [], []
    for owner in range(comm.world):
        for start in range(0, sizes[owner], size):
            stop = min(start + size, sizes[owner])
            c = stop - start
            if comm.rank == owner:
                chunk = local_q[start:stop]
                meta = torch.stack(
                    [
                        q_labels[q_rows[start:stop]],
                        q_index[q_rows[start:stop]],
                        q_ids[q_rows[start:stop]]
                        if q_ids is not None
                        else torch.zeros(c, dtype=torch.int64),
                    ]
                )
            else:
                chunk = torch.empty((c, q.shape[1]), dtype=local_q.dtype)
                meta = torch.empty((3, c), dtype=torch.int64)
            raw = comm.broadcast(chunk, owner).to(dev)
            chunk = _engine.Rows.of(raw)
            meta = comm.broadcast(meta, owner).cpu()
            c_labels, c_index, c_ids = meta.numpy()
            positives = _engine.LabelPositives(c_labels, ref_labels)
            excluded = []
            if leave_one_out:
                excluded.append(
                    _to_global(
                        _engine.Pairs.by_code(c_index, block.global_index.cpu().numpy()), block
                    )
                )
            if ref_ids is not None:
                excluded.append(_to_global(_engine.Pairs.by_code(c_ids, ref_ids), block))
            bound = int(block.global_index.max()) + 1 if block.rows else 1
            exclusions = _engine.Pairs.union(excluded, c, bound) if excluded else None
            ranks = _engine.threshold_ranks(
                space, chunk, 0, c, exclusions, positives=positives, reduce=comm.reduce
            )[:, 0]
            counts = torch.from_numpy(positives.num_relevant(exclusions, block))
            r_count = comm.reduce("sum", counts.to(comm.device)).cpu()
            all_index.append(torch.from_numpy(c_index.copy()))
            all_ranks.append(ranks.cpu())
            all_r.append(r_count)
            if ranking_metrics:
                rel = _global_top_r(
                    comm, space, chunk, c, r_count, exclusions, block, ref_labels, c_labels
                )
                positions = torch.arange(1, rel.shape[1] + 1, dtype=torch.float64)
                hits = rel.to(torch.float64)
                ap = (hits.cumsum(1) / positions * hits).sum(1)
                all_ap.append(ap)
                all_rprec.append(hits.sum(1))
    index = torch.cat(all_index)
    order = torch.argsort(index)
    first_hit = torch.cat(all_ranks)[order].numpy()
    r_total = torch.cat(all_r)[order].numpy()
    candidates = total_reference - int(leave_one_out)
    effective = tuple(min(k, max(candidates, 1)) for k in ks)
    recall = RecallResult(
        ks,
        effective,
        first_hit,
        num_reference=total_reference,
        embedding_dim=q.shape[1],
        query_ids=index[order].tolist(),
    )
    map_r = rprec = None
    if ranking_metrics:
        ok = r_total > 0
        if ok.any():
            ap = torch.cat(all_ap)[order].numpy()
            hits = torch.cat(all_rprec)[order].numpy()
            map_r = float((ap[ok] / r_total[ok]).mean())
            rprec = float((hits[ok] / r_total[ok]).mean())
    return ShardedResult(recall, map_r, rprec, comm.bytes)


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
    idx = torch.cat([g[0] for g in gathered], 1).to(torch.int64)
    val = torch.cat([g[1] for g in gathered], 1)
    hit = torch.cat([g[2] for g in gathered], 1)
    key = torch.where(idx >= 0, idx, torch.full_like(idx, _engine.SENTINEL))
    first = torch.sort(key, dim=1, stable=True).indices
    val, hit = val.gather(1, first), hit.gather(1, first)
    best = torch.sort(-val, dim=1, stable=True).indices[:, :width]
    hit = hit.gather(1, best)
    beyond = torch.arange(width)[None, :] >= r_count[:, None]
    return (hit > 0) & ~beyond
