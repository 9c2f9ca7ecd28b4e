"""Sharded evaluation over ``torch.distributed``: exact label-form metrics of a split whose
rows are spread across processes.

Each process holds only its shard of the embeddings (as a ``DistributedSampler`` gives them,
padding duplicates included) with each row's index in the dataset. Every process returns the
result of the single-process evaluation on the whole split ordered by dataset index, bit for bit
in the reported values.

What crosses processes (``n`` queries, ``d`` dimensions, world size ``W``):

* once: every process's dataset indices (8 bytes per row) to find the rows held twice
  (``DistributedSampler`` padding), and those rows themselves, to check that they are one
  item's; the distinct labels (and ids) of every process, so that all agree on one dense code
  for each (labels and ids are any integers: negative, up to ``2**63 - 1``);
* per query chunk of ``c`` rows: the chunk, broadcast by its owner (``c·(4d + 8 + 8 + 8)``
  bytes: float32 rows, label, index, id), then per-query partial results reduced across
  processes: best positive score and index, positive count, counts ranked above and tied;
* for the list metrics (MAP@R, R-precision, ...): each process's ranked list per query (index,
  score, relevance: ``24·c·w`` bytes from every process, ``w`` the list width) to merge the
  global list exactly;
* at the end: the per-query values (gathered).

No process ever receives another's reference shard. Everything goes through the public
``torch.distributed`` collectives (``all_gather``, ``broadcast``, ``all_reduce``), so it runs on
gloo (CPU) and nccl (GPU) alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from recallkit import _averaging as averaging
from recallkit import engine
from recallkit import metrics as registry
from recallkit._inputs import checks as _checks
from recallkit._labels import form as label_form
from recallkit.engine import ties
from recallkit.options import Options, accepts
from recallkit.result import Result
from recallkit.typing import Embeddings, Ids, Labels
from recallkit.typing import Ranks as RankArray

_OPS = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM}


class _Comm:
    """Collectives over a process group, counting the bytes each call moves for this process:
    the engine's [`Reducer`][recallkit.engine.protocol.Reducer]."""

    def __init__(self, group: Any, device: torch.device) -> None:
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.device = device
        self.bytes = 0

    def _size(self, t: torch.Tensor) -> int:
        return t.numel() * t.element_size()

    def gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        t = t.contiguous().to(self.device)
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t, group=self.group)
        self.bytes += self._size(t) * self.world
        return out

    def gather_varying(self, t: torch.Tensor) -> list[torch.Tensor]:
        """All-gather tensors whose first or second dimension differs across processes
        (padded with ``-1``; ``dim`` 0 for rows, 1 for columns of 2-D tensors)."""
        shape = torch.tensor(list(t.shape), dtype=torch.int64, device=self.device)
        shapes = [tuple(int(v) for v in s) for s in self.gather(shape)]
        big = tuple(max(s[i] for s in shapes) for i in range(t.dim()))
        padded = torch.full(big, -1, dtype=t.dtype, device=t.device)
        padded[tuple(slice(0, n) for n in t.shape)] = t
        out = self.gather(padded)
        return [g[tuple(slice(0, n) for n in s)] for g, s in zip(out, shapes, strict=True)]

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
    if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
        raise _checks.fail(func, name, "integers within int64", f"{array.max()}")
    t = torch.from_numpy(array.astype(np.int64))
    _checks.check_length(t, n, name, func, "embeddings")
    return t


def _check_indices(index: torch.Tensor, name: str, func: str) -> torch.Tensor:
    if bool((index < 0).any()):
        row = int(torch.nonzero(index < 0)[0, 0])
        raise _checks.fail(func, name, "non-negative dataset indices", f"a negative at row {row}")
    return index


#: How far apart two embeddings of one item may be: an item embedded again in another batch
#: (``DistributedSampler``'s padding) may differ in its last bits, not more.
SAME_ITEM_RTOL = 1e-3
# Rows held twice compared at a time (their rows cross processes in steps of this many).
_REPEATS_STEP = 4096


def same_row(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two embeddings can be one item's: equal up to a relative ``SAME_ITEM_RTOL`` of
    the larger magnitude (an item embedded in another batch differs in its last bits)."""
    a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
    scale = float(torch.maximum(a64.abs().max(), b64.abs().max())) if a64.numel() else 0.0
    return bool(((a64 - b64).abs() <= SAME_ITEM_RTOL * scale).all())


def first_occurrences(comm: _Comm, shard: _Shard, name: str, func: str) -> torch.Tensor:
    """Mask of this process's rows that hold the first occurrence (in rank order, then row
    order) of their dataset index. A row held again (``DistributedSampler`` pads the last batch
    with repeats) must be the same item: the same label (and id) and the same embedding
    ([`same_row`][same_row]); otherwise every process raises the same ``ValueError``, naming
    ``name`` and the index."""
    index = shard.index
    gathered = [g.cpu() for g in comm.gather_varying(index.to(comm.device))]
    everything = torch.cat(gathered).numpy()
    values, first, counts = np.unique(everything, return_index=True, return_counts=True)
    keep = np.zeros(len(everything), dtype=bool)
    keep[first] = True
    start = sum(len(g) for g in gathered[: comm.rank])
    repeated = values[counts > 1]
    for at in range(0, len(repeated), _REPEATS_STEP):
        _check_repeats(comm, repeated[at : at + _REPEATS_STEP], shard, name, func)
    return torch.from_numpy(keep[start : start + len(index)])


def check_items(
    group: Any, rows: torch.Tensor, labels: Any, index: Any, name: str, func: str
) -> None:
    """Raise, on every process alike, when a dataset index held twice (on one process or two)
    carries another label or embedding ([`first_occurrences`][first_occurrences]'s rule, named
    ``name`` in ``func``'s message)."""
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    shard = _Shard(
        rows,
        torch.as_tensor(np.asarray(labels, dtype=np.int64)),
        torch.as_tensor(np.asarray(index, dtype=np.int64)),
        None,
    )
    first_occurrences(_Comm(group, device), shard, name, func)


def _check_repeats(comm: _Comm, repeated: np.ndarray, shard: _Shard, name: str, func: str) -> None:
    """Raise on every process alike when a dataset index of ``repeated`` carries different
    labels, ids or embeddings on two of its rows (every process sees every such row)."""
    index, rows, labels, ids = shard.index, shard.rows, shard.labels, shard.ids
    mine = torch.from_numpy(np.isin(index.cpu().numpy(), repeated))
    where = torch.nonzero(mine)[:, 0]
    keys = [index[where], labels[where].cpu(), where]
    if ids is not None:
        keys.append(ids[where].cpu())
    packed = torch.stack([k.to(torch.int64).cpu() for k in keys])
    held = [g.cpu() for g in comm.gather_varying(packed.to(comm.device))]
    shared = [g.cpu() for g in comm.gather_varying(rows[where].to(comm.device, torch.float64).T)]
    first: dict[int, tuple[int, torch.Tensor, torch.Tensor]] = {}
    for rank, (meta, data) in enumerate(zip(held, shared, strict=True)):
        for j in range(meta.shape[1]):
            value, key = int(meta[0, j]), meta[1:, j]
            row = data[:, j]
            if value not in first:
                first[value] = (rank, key, row)
                continue
            rank0, key0, row0 = first[value]
            what = None
            if int(key[0]) != int(key0[0]):
                what = "label"
            elif ids is not None and int(key[2]) != int(key0[2]):
                what = "id"
            elif not same_row(row0, row):
                what = "embedding"
            if what is not None:
                here = f"rank {rank}, row {int(key[1])}"
                there = f"rank {rank0}, row {int(key0[1])}"
                raise _checks.fail(
                    func,
                    name,
                    "one dataset index per item: an index held twice (as DistributedSampler "
                    "repeats items to pad the last batch) carries the same label and embedding "
                    "(equal up to a relative 1e-3) each time",
                    f"index {value} with another {what} at {here} than at {there}",
                )


def _shared_codes(comm: _Comm, *parts: torch.Tensor) -> tuple[np.ndarray, list[np.ndarray]]:
    """Dense codes for integers spread across processes: every process's distinct values are
    gathered, so that all agree on one code per value (increasing with the value). Returns the
    distinct values (code ``c`` is ``values[c]``) and each part as codes."""
    local = np.unique(np.concatenate([p.cpu().numpy() for p in parts]))
    gathered = comm.gather_varying(torch.from_numpy(local).to(comm.device))
    values = np.unique(np.concatenate([g.cpu().numpy() for g in gathered]))
    return values, [np.searchsorted(values, p.cpu().numpy()).astype(np.int64) for p in parts]


@accepts()
def evaluate_sharded(
    embeddings: Embeddings,
    labels: Labels,
    indices: RankArray,
    ks: Sequence[int] = (1, 2, 4, 8),
    *,
    metrics: Sequence[str] | None = None,
    reference: Embeddings | None = None,
    reference_labels: Labels | None = None,
    reference_indices: RankArray | None = None,
    ids: Ids | None = None,
    reference_ids: Ids | None = None,
    ranking_metrics: bool = True,
    group: Any = None,
    options: Options,
) -> Result:
    """Exact label-form metrics of a split sharded across processes.

    Without ``reference`` the split is evaluated against itself (leave-one-out): each query's
    own row is removed by its dataset index. With ``reference`` (this process's shard of a
    separate gallery, with ``reference_indices``) the queries are evaluated against the whole
    gallery. Ties: on equal scores the lower reference index (the lower dataset index) ranks
    first. Labels, indices and ids are integers of any sign and size: every process agrees on
    one dense code for each. A dataset index held twice (``DistributedSampler``'s padding)
    must carry the same label and embedding each time, and is counted once; anything else is
    a ``ValueError`` naming the index.

    The result equals [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics]
    (``query_in_reference=True`` for leave-one-out) on the concatenated data sorted by dataset
    index, bit for bit in every per-query value, at every world size.

    Parameters
    ----------
    embeddings : array_like of shape (n_local, d)
        This process's rows (any device).
    labels : array_like of int, shape (n_local,)
        Their labels.
    indices : array_like of int, shape (n_local,)
        Their dataset indices, non-negative.
    ks : sequence of int, default (1, 2, 4, 8)
        The K of recall@K when ``metrics`` is not given.
    metrics : sequence of str, optional
        Any metrics of [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics]; by
        default recall@K for ``ks``, then MAP@R and R-precision (unless ``ranking_metrics=False``).
    reference : array_like of shape (m_local, d), optional
        This process's shard of a separate gallery.
    reference_labels : array_like of int, shape (m_local,), optional
        Its labels (with ``reference``).
    reference_indices : array_like of int, shape (m_local,), optional
        Its dataset indices (with ``reference``).
    ids, reference_ids : array_like of int, optional
        Ids of the rows and of the gallery's rows: every reference item whose id equals the
        query's is removed (several photos of one object).
    ranking_metrics : bool, default True
        Add MAP@R and R-precision to the default metrics.
    group : torch.distributed.ProcessGroup, optional
        The process group (default: the whole world).
    {options}

    Returns
    -------
    Result
        The same result on every process; ``query_ids`` holds the dataset indices,
        ``query_labels`` the labels, ``info["bytes_communicated"]`` what this process sent
        and received.

    Examples
    --------
    Inside ``torchrun``:

        sampler = DistributedSampler(val_set, shuffle=False)
        emb, lab = extract_embeddings(model, DataLoader(val_set, sampler=sampler))
        result = evaluate_sharded(emb, lab, torch.tensor(list(sampler)), ks=(1, 2, 4, 8))
    """
    func = "evaluate_sharded"
    ks = _checks.check_ks(ks, func)
    chosen = (
        registry.default(ks, ranking_metrics) if metrics is None else registry.parse(metrics, func)
    )
    averaging.check(chosen, options.lone_queries, func)
    if not dist.is_available() or not dist.is_initialized():
        raise _checks.fail(
            func, "group", "an initialised torch.distributed process group", "no process group"
        )
    q = _Shard.of(embeddings, labels, indices, ids, "", func)
    r = (
        q
        if reference is None
        else _reference_shard(
            q, reference, reference_labels, reference_indices, ids, reference_ids, func
        )
    )
    run = _Run.of(q, r, reference is None, group, options, func)
    score_bytes = engine.backend_for(run.local.space).score_bytes
    size = options.chunk_size or engine.chunk_rows(run.local.space, None, score_bytes=score_bytes)
    return _result(run, _scan(run, size, chosen), func, options, metrics is not None)


@dataclass(frozen=True)
class _Run:
    """One sharded call's state on this process: the communicator, the device, the label of
    each shared label code, this process's prepared part, and the split's shape."""

    comm: _Comm
    device: torch.device
    label_values: np.ndarray
    local: _Local
    leave_one_out: bool
    dim: int

    @classmethod
    def of(
        cls, q: _Shard, r: _Shard, leave_one_out: bool, group: Any, options: Options, func: str
    ) -> _Run:
        """Connects to ``group`` and prepares this process's part (labels and ids coded alike
        on every process)."""
        dev = options.device if options.device is not None else q.rows.device
        comm = _Comm(group, dev if dist.get_backend(group) == "nccl" else torch.device("cpu"))
        label_values = _code(comm, q, r, "labels")
        if q.ids is not None:
            _code(comm, q, r, "ids")
        local = _Local.of(comm, q, r, leave_one_out, options, dev, func)
        return cls(comm, dev, label_values, local, leave_one_out, q.rows.shape[1])


#: What a scan leaves: each chunk's values, dataset indices and class codes, in scan order.
_Scanned = tuple[list[label_form.Values], list[np.ndarray], list[np.ndarray]]


def _scan(run: _Run, size: int, chosen: Sequence[registry.Metric]) -> _Scanned:
    """Every process's queries, chunk by chunk in rank order, against the whole reference: each
    owner broadcasts its chunk (rows and their ``(class, index, id)`` codes) and every process
    fills its part of the chunk's values."""
    comm, local = run.comm, run.local
    sizes = [int(s) for s in comm.gather(torch.tensor([len(local.meta[0])], device=comm.device))]
    parts: list[label_form.Values] = []
    index: list[np.ndarray] = []
    classes: list[np.ndarray] = []
    for owner in range(comm.world):
        for start, stop in engine.chunks(sizes[owner], size):
            mine = comm.rank == owner
            raw = comm.broadcast(
                local.queries[start:stop]
                if mine
                else torch.empty((stop - start, run.dim), dtype=local.queries.dtype),
                owner,
            ).to(run.device)
            meta = (
                comm.broadcast(
                    local.meta[:, start:stop]
                    if mine
                    else torch.empty((3, stop - start), dtype=torch.int64),
                    owner,
                )
                .cpu()
                .numpy()
            )
            parts.append(
                label_form.shard_chunk(
                    comm,
                    local.space,
                    local.labels,
                    local.ids,
                    local.total_reference,
                    engine.Rows.of(raw),
                    meta,
                    run.leave_one_out,
                    chosen,
                    lambda part, top_k, c_labels: _global_lists(comm, part, top_k, local, c_labels),
                )
            )
            index.append(meta[1].copy())
            classes.append(meta[0].copy())
    return parts, index, classes


def _result(run: _Run, scanned: _Scanned, func: str, options: Options, by_metrics: bool) -> Result:
    """The chunks' values joined in dataset-index order, as one result."""
    parts, index, classes = scanned
    order = np.argsort(np.concatenate(index), kind="stable")
    values = label_form.joined(parts, order)
    exclusion = "query_in_reference" if run.leave_one_out else "none"
    if run.local.ids is not None:
        exclusion = "query_in_reference+ids" if run.leave_one_out else "ids"
    codes = np.concatenate(classes)[order]
    return values.result(
        func,
        options,
        exclusion=exclusion,
        classes=codes,
        num_reference=run.local.total_reference,
        embedding_dim=run.dim,
        parameter="metrics" if by_metrics else "ks",
        query_ids=np.concatenate(index)[order].tolist(),
        query_labels=run.label_values[codes].tolist(),
        info={"bytes_communicated": run.comm.bytes},
    )


def _code(comm: _Comm, q: _Shard, r: _Shard, field: str) -> np.ndarray:
    """Replace the ``field`` (labels or ids) of the query and reference shards by dense codes
    that every process shares; return the distinct values."""
    shards = [q] if r is q else [q, r]
    values, codes = _shared_codes(comm, *(getattr(x, field) for x in shards))
    for shard, code in zip(shards, codes, strict=True):
        setattr(shard, field, torch.from_numpy(code))
    return values


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
    """This process's part: its reference rows (first occurrences, sorted by dataset index) as
    the engine's shard space, with labels and ids, and its queries with their ``(label, index,
    id)`` rows."""

    space: engine.Space
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
        options: Options,
        dev: torch.device,
        func: str,
    ) -> _Local:
        keep_r = first_occurrences(comm, r, "indices" if r is q else "reference_indices", func)
        r_rows = torch.nonzero(keep_r)[:, 0][torch.argsort(r.index[keep_r], stable=True)]
        in_order = len(r_rows) == len(r.index) and bool(
            (r_rows == torch.arange(len(r_rows))).all()
        )  # rows already first occurrences in dataset order (an unshuffled sampler): no copy
        reference = r.rows if in_order else r.rows[r_rows]
        space = engine.shard(q.rows, reference, r.index[r_rows], options, func, dev)
        total = int(comm.reduce("sum", torch.tensor([r_rows.numel()], device=comm.device)).item())
        if leave_one_out:  # the queries are the reference rows, in the block's order
            q_rows = r_rows
            queries = space.single.data
        else:
            keep_q = first_occurrences(comm, q, "indices", func)
            q_rows = torch.nonzero(keep_q)[:, 0]
            queries = engine.prepare_rows(
                q.rows[q_rows], "embeddings", func, options.metric, dev
            ).raw
        ids = q.ids[q_rows] if q.ids is not None else torch.full((len(q_rows),), -1)
        return cls(
            space,
            r.labels[r_rows].numpy(),
            r.ids[r_rows].numpy() if r.ids is not None else None,
            total,
            queries,
            torch.stack([q.labels[q_rows], q.index[q_rows], ids]),
        )


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


def _global_lists(
    comm: _Comm,
    part: engine.ChunkResult,
    ks: np.ndarray,
    local: _Local,
    c_labels: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Each query's global ranked list, merged exactly from every process's list and tail,
    with its relevance (each process knows the labels of its own rows): ``(index, score,
    relevant, tail_index, tail_relevant)``."""
    block, ref_labels = local.space.single, local.labels

    def labelled(index: torch.Tensor) -> torch.Tensor:
        if not block.rows:
            return torch.zeros(index.shape, dtype=torch.bool)
        position = torch.searchsorted(block.global_index.cpu(), index.clamp(min=0))
        position = position.clamp(max=block.rows - 1)
        same = torch.from_numpy(ref_labels[position.numpy()] == c_labels[:, None])
        return (index >= 0) & same

    index = torch.cat([part.top_index.cpu(), part.tail_index.cpu()], 1)
    score = torch.cat([part.top_score.cpu(), part.tail_score.cpu()], 1).to(torch.float64)
    packed = torch.stack([index.to(torch.float64), score, labelled(index).to(torch.float64)])
    gathered = [g.cpu() for g in comm.gather_varying(packed.to(comm.device))]
    all_index, all_score, all_rel = (torch.cat([g[i] for g in gathered], 1) for i in range(3))
    all_index = all_index.to(torch.int64)
    all_score = torch.where(all_index >= 0, all_score, torch.full_like(all_score, -torch.inf))
    order = ties.ranked_order(all_score, all_index)
    all_index, all_score, all_rel = (t.gather(1, order) for t in (all_index, all_score, all_rel))
    top_i, top_s, tail_i, _ = ties.split_tail(all_index, all_score, torch.from_numpy(ks))
    width = top_i.shape[1]
    rel_top = (all_rel[:, :width] > 0) & (top_i >= 0)
    # The tail's relevance: the items after the list that split_tail kept (equal to the k-th).
    tail_rel = _tail_relevance(all_index, all_rel, tail_i)
    return top_i.numpy(), top_s.numpy(), rel_top.numpy(), tail_i.numpy(), tail_rel


def _tail_relevance(index: torch.Tensor, rel: torch.Tensor, tail: torch.Tensor) -> np.ndarray:
    """The relevance of the tail items, looked up by index in the merged candidates."""
    out = np.zeros(tail.shape, dtype=bool)
    if tail.numel() == 0:
        return out
    idx, rv, t = index.numpy(), rel.numpy() > 0, tail.numpy()
    for i in np.flatnonzero((t >= 0).any(axis=1)):
        lookup = dict(zip(idx[i].tolist(), rv[i].tolist(), strict=True))
        out[i] = [lookup.get(v, False) if v >= 0 else False for v in t[i].tolist()]
    return out
