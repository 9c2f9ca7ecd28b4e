"""Exact retrieval metrics inside a training loop: feed batches, compute at the end of the epoch.

[`Evaluator`][Evaluator] collects the validation embeddings batch by batch (on whatever device they
are: GPU batches stay on the GPU until [`Evaluator.compute`][Evaluator.compute]) and computes the
metrics of the whole split in one exact pass:

* in one process (no ``torch.distributed`` process group, or a world size of 1) with
  [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics] on the rows collected;
* under an initialised process group with
  [`recallkit.evaluate_sharded`][recallkit.sharded.evaluate_sharded]: each rank keeps only its own
  rows, no rank ever holds every embedding, and every rank gets the same result, equal bit for bit
  to the single-process one. Rows are identified by their dataset index (``ids``, required there),
  so the rows that ``DistributedSampler`` repeats to pad the last batch are counted once.

Memory per rank is what the engine needs for the rank's own rows (the rows and the engine's
prepared copies of them) plus the working memory of one query chunk
(the ``memory_budget`` option; ``chunk_size`` sets the chunk directly): the rows of the
other ranks are never gathered, only broadcast chunk by chunk.

The protocol is PML's and the metric-learning papers' (Musgrave et al. 2020, "A Metric Learning
Reality Check"): the validation split is searched against itself, each query's own row left
out (``query_in_reference=True``, the default), or queries against a separate gallery
(``query_in_reference=False``, the gallery given with
[`Evaluator.update_reference`][Evaluator.update_reference], as the In-Shop benchmark splits it).

An epoch ends at [`compute`][Evaluator.compute] (``epoch_ends="compute"``, the default): the next
batch begins the next epoch, so a forgotten [`reset`][Evaluator.reset] cannot return the last
epoch's values or count its rows twice. Every batch is checked as it arrives (finite
embeddings of one dimension, integer labels, non-negative ids), and an error names the batch and
the row; an id given again in an epoch must carry the same embedding and label (the rows
``DistributedSampler`` repeats to pad do; across ranks the rows are compared by digest at
[`compute`][Evaluator.compute]).

With ``history=`` each [`compute`][Evaluator.compute] appends the epoch's record to a history file
([`recallkit.runfiles.records`][recallkit.runfiles.records], the format of ``recallkit evaluate
--history``), so ``recallkit plot
runs.jsonl -o recall.png`` draws recall@K across epochs; ``run_file="runs/{tag}.json"`` also
writes each epoch's run file with the per-query ranks, for ``recallkit compare``. Under
``torch.distributed`` only rank 0 writes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recallkit import _averaging as averaging
from recallkit import metrics as registry
from recallkit._inputs import checks as _checks
from recallkit.options import Options, accepts, check_flag, fill_docs
from recallkit.result import Result
from recallkit.runfiles import records
from recallkit.sharded import same_row
from recallkit.typing import Embeddings, Ids, Labels

#: What ends an epoch: ``"compute"`` (the first update after a compute begins the next one) or
#: ``"reset"`` (only [`Evaluator.reset`][Evaluator.reset]; torchmetrics' convention).
EPOCH_ENDS = ("compute", "reset")
# The dtypes rows may have, as codes exchanged between ranks to check they agree.
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _distributed(group: Any) -> tuple[int, int]:
    """``(rank, world size)`` of ``group`` under an initialised process group, else ``(0, 1)``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _integers(values: Any, n: int, name: str, func: str) -> torch.Tensor:
    """``values`` as a 1-D integer tensor of length ``n``; a tensor keeps its device (its
    values are not read here, so a GPU tensor costs no synchronisation)."""
    if isinstance(values, torch.Tensor):
        t = values.detach()
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise _checks.fail(func, name, "integers", f"a tensor of dtype {t.dtype}")
        if t.ndim != 1:
            raise _checks.fail(func, name, "a 1-D array", f"shape {tuple(t.shape)}")
        t = t.clone()
    else:
        array = _checks.as_integers(values, func, name)
        if array.ndim != 1:
            raise _checks.fail(func, name, "a 1-D array", f"shape {array.shape}")
        t = torch.from_numpy(array)
    _checks.check_length(t, n, name, func, "embeddings")
    return t


@dataclass
class _Batches:
    """The rows of one role (queries, or the separate gallery) collected on this rank in the
    current epoch, each batch checked as it arrives."""

    role: str
    rows: list[torch.Tensor] = field(default_factory=list)
    labels: list[torch.Tensor] = field(default_factory=list)
    ids: list[torch.Tensor] = field(default_factory=list)
    with_ids: bool | None = None
    count: int = 0
    batches: int = 0
    # id -> (global row, batch, row in the batch) of its first occurrence this epoch
    seen: dict[int, tuple[int, int, int]] = field(default_factory=dict)

    def add(
        self, embeddings: Any, labels: Any, ids: Any, func: str, other: _Batches | None = None
    ) -> None:
        batch = self.batches
        where = f"batch {batch} (batches count from 0 in each epoch)"
        try:
            x = _checks.as_embeddings(embeddings, "embeddings", func)
        except ValueError as error:
            raise _in_batch(error, where) from None
        if self.rows:
            first = self.rows[0]
            if (x.shape[1], x.dtype, x.device) != (first.shape[1], first.dtype, first.device):
                raise _checks.fail(
                    func,
                    "embeddings",
                    f"of the dimension, dtype and device of the earlier batches (dimension "
                    f"{first.shape[1]}, {first.dtype}, {first.device})",
                    f"dimension {x.shape[1]}, {x.dtype}, {x.device} in {where}",
                )
        if other is not None and other.dim is not None and x.shape[1] != other.dim:
            wanted = f"of dimension {other.dim}, as the {other.role} rows"
            raise _checks.fail(func, "embeddings", wanted, f"dimension {x.shape[1]} in {where}")
        n = x.shape[0]
        bad = ~torch.isfinite(x).all(dim=1)
        if bool(bad.any()):
            row = int(torch.nonzero(bad)[0, 0])
            raise _checks.fail(
                func,
                "embeddings",
                "finite (no NaN or infinity)",
                f"a non-finite value in row {row} of {where}",
            )
        y = _integers(labels, n, "labels", func)
        i = None if ids is None else _integers(ids, n, "ids", func)
        if self.with_ids is not None and self.with_ids != (i is not None):
            had = "with" if self.with_ids else "without"
            raise _checks.fail(
                func,
                "ids",
                f"given for every batch or for none (the earlier batches came {had})",
                "None" if i is None else "ids",
            )
        if i is not None:
            self._check_ids(x, y, i, func, where)
        # A copy: the caller may reuse or change its buffer after update.
        self.rows.append(x.clone())
        self.labels.append(y)
        if i is not None:
            self.ids.append(i)
        self.with_ids = i is not None
        self.count += n
        self.batches += 1

    def _check_ids(
        self, x: torch.Tensor, y: torch.Tensor, ids: torch.Tensor, func: str, where: str
    ) -> None:
        """Dataset indices are non-negative, and an index given again this epoch (a row that
        DistributedSampler repeats) carries the same embedding and label."""
        values = ids.cpu().numpy().astype(np.int64)
        if values.size and int(values.min()) < 0:
            row = int(np.flatnonzero(values < 0)[0])
            raise _checks.fail(
                func,
                "ids",
                "non-negative dataset indices",
                f"{int(values[row])} in row {row} of {where}",
            )
        new: dict[int, tuple[int, int, int]] = {}
        for row, value in enumerate(values.tolist()):
            first = self.seen.get(value) or new.get(value)
            if first is None:
                new[value] = (self.count + row, self.batches, row)
                continue
            g, b0, r0 = first
            same_label = int(y[row]) == int(self._label(g) if g < self.count else y[r0])
            earlier = self._row(g) if g < self.count else x[r0]
            if not (same_label and same_row(earlier, x[row])):
                what = "label" if not same_label else "embedding"
                raise _checks.fail(
                    func,
                    "ids",
                    "one dataset index per item of the epoch: an index given again carries its "
                    "label and embedding again (as DistributedSampler repeats items to pad the "
                    "last batch; the embedding equal up to a relative 1e-3); call reset() at the "
                    "start of each epoch, or let compute() end it",
                    f"index {value} in row {row} of {where} with another {what} than in row "
                    f"{r0} of batch {b0}",
                )
        self.seen.update(new)

    def _locate(self, g: int) -> tuple[int, int]:
        sizes = np.cumsum([t.shape[0] for t in self.rows])
        b = int(np.searchsorted(sizes, g, side="right"))
        return b, g - (int(sizes[b - 1]) if b else 0)

    def _row(self, g: int) -> torch.Tensor:
        b, r = self._locate(g)
        return self.rows[b][r]

    def _label(self, g: int) -> int:
        b, r = self._locate(g)
        return int(self.labels[b][r])

    @property
    def dim(self) -> int | None:
        return int(self.rows[0].shape[1]) if self.rows else None

    def joined(self) -> tuple[torch.Tensor, np.ndarray, np.ndarray | None]:
        """The rows (on their device), labels and ids (int64 on the host), concatenated once:
        the batches are replaced by the concatenation, so the rows are held once."""
        if len(self.rows) > 1:
            self.rows = [torch.cat(self.rows)]
        if len(self.labels) > 1 or (self.labels and self.labels[0].device.type != "cpu"):
            self.labels = [torch.cat([t.cpu() for t in self.labels]).to(torch.int64)]
        if len(self.ids) > 1 or (self.ids and self.ids[0].device.type != "cpu"):
            self.ids = [torch.cat([t.cpu() for t in self.ids]).to(torch.int64)]
        labels = self.labels[0].to(torch.int64).numpy()
        ids = self.ids[0].to(torch.int64).numpy() if self.ids else None
        return self.rows[0], labels, ids

    def clear(self) -> None:
        self.rows, self.labels, self.ids = [], [], []
        self.with_ids, self.count, self.batches = None, 0, 0
        self.seen = {}


def _in_batch(error: ValueError, where: str) -> ValueError:
    """``error`` (a check of the embeddings) with the batch it was found in."""
    if isinstance(error, _checks.ParameterError):
        return _checks.fail(error.func, error.name, error.requirement, f"{error.got} in {where}")
    return error


def _first_by_id(ids: np.ndarray, name: str, func: str) -> tuple[np.ndarray, list[int]]:
    """The rows holding the first occurrence of each id, ordered by id, and those ids."""
    if ids.size and int(ids.min()) < 0:
        row = int(np.flatnonzero(ids < 0)[0])
        raise _checks.fail(func, name, "non-negative dataset indices", f"a negative at row {row}")
    unique, first = np.unique(ids, return_index=True)
    return first, unique.tolist()


def _check_path(value: Any, name: str, func: str) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise _checks.fail(func, name, "a file path (str or os.PathLike) or None", repr(value))
    path = Path(value)
    if path.is_dir():
        raise _checks.fail(func, name, "a file path, not a folder", repr(str(path)))
    return path


class Evaluator:
    """Collect embeddings batch by batch; compute exact retrieval metrics of the whole split.

    Under an initialised process group of more than one process every rank calls
    [`update`][update] with its own batches and their dataset indices (``ids``) and
    [`compute`][compute] at the same point; each gets the same
    [`recallkit.Result`][recallkit.result.Result], equal bit for bit to the one-process result.
    Ranks are exact, and on equal scores the lower reference index (the lower dataset index, under
    ``torch.distributed``) ranks first.

    Parameters
    ----------
    ks : sequence of int, default (1, 2, 4, 8)
        The K of recall@K (positive, distinct).
    metrics : sequence of str, optional
        The metrics by name, as in
        [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics] (``"recall@K"``,
        ``"MAP@R"``, ``"MnR"``, PML's names, ...); by default recall@K for ``ks``, then MAP@R and
        R-precision, as [`recallkit.evaluate_sharded`][recallkit.sharded.evaluate_sharded]. Given,
        it replaces that list.
    query_in_reference : bool, default True
        ``True``: the rows of [`update`][update] are searched against themselves, each query's own
        row left out; ``False``: they are queries against the gallery given with
        [`update_reference`][update_reference].
    history : str or os.PathLike, optional
        A history file (``.jsonl``) to which each [`compute`][compute] appends its record.
    run_file : str, optional
        A path with ``{tag}`` (``"runs/{tag}.json"``): each [`compute`][compute] writes its run file
        there, with each query's values, which ``recallkit compare`` and ``recallkit report``
        read.
    group : torch.distributed.ProcessGroup, optional
        The process group (default: the whole world).
    epoch_ends : {"compute", "reset"}, default "compute"
        ``"compute"``: [`compute`][compute] ends the epoch, and the next batch begins a new one;
        ``"reset"``: the rows stay until [`reset`][reset] (torchmetrics' convention).
    {options}

    Examples
    --------
    >>> import torch
    >>> ev = Evaluator(ks=(1, 2), metrics=["recall@1", "recall@2"])
    >>> x = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> ev.update(x[:2], torch.tensor([0, 1]))
    >>> ev.update(x[2:], torch.tensor([1, 0]))
    >>> dict(ev.compute())
    {'recall@1': 0.0, 'recall@2': 0.5}
    """

    @accepts("Evaluator")
    def __init__(
        self,
        ks: Any = (1, 2, 4, 8),
        metrics: Sequence[str] | None = None,
        *,
        query_in_reference: bool = True,
        history: str | os.PathLike[str] | None = None,
        run_file: str | None = None,
        group: Any = None,
        epoch_ends: str = "compute",
        options: Options,
    ) -> None:
        func = "Evaluator"
        self.ks = _checks.check_ks(ks, func)
        chosen = registry.default(self.ks) if metrics is None else registry.parse(metrics, func)
        averaging.check(chosen, options.lone_queries, func)
        self.metrics = tuple(registry.names_of(chosen))
        self.options = options
        self.query_in_reference = check_flag(query_in_reference, func, "query_in_reference")
        self.history = _check_path(history, "history", func)
        if run_file is not None and (
            not isinstance(run_file, str | os.PathLike) or "{tag}" not in os.fspath(run_file)
        ):
            raise _checks.fail(
                func,
                "run_file",
                "a path containing '{tag}' (\"runs/{tag}.json\") or None",
                repr(run_file),
            )
        self.run_file = None if run_file is None else os.fspath(run_file)
        self.group = group
        self.epoch_ends = _checks.check_choice(epoch_ends, EPOCH_ENDS, func, "epoch_ends")
        self.computes = 0
        self._ended = False
        self._query = _Batches("embeddings")
        self._reference = _Batches("reference")

    def __repr__(self) -> str:
        held = f"{self._query.count} rows"
        if not self.query_in_reference:
            held += f", {self._reference.count} gallery rows"
        return f"Evaluator(metrics={list(self.metrics)}, {held})"

    @property
    def num_rows(self) -> int:
        """Rows collected on this rank by [`update`][update] since the last [`reset`][reset]."""
        return self._query.count

    @property
    def num_reference_rows(self) -> int:
        """Gallery rows collected on this rank by [`update_reference`][update_reference]."""
        return self._reference.count

    def update(self, embeddings: Embeddings, labels: Labels, ids: Ids | None = None) -> None:
        """Add a batch of the split's rows.

        Every batch has the dimension, dtype and device of the first one, and ids or none.

        Parameters
        ----------
        embeddings : array_like of shape (b, d)
            The batch's embeddings (any device; kept there until [`compute`][compute]).
        labels : array_like of int, shape (b,)
            Their labels (integers of any sign and size).
        ids : array_like of int, shape (b,), optional
            Their dataset indices, non-negative; required under ``torch.distributed``. An
            index given again carries the same label and embedding (``DistributedSampler``'s
            padding), and is counted once.
        """
        self._add(self._query, embeddings, labels, ids, "Evaluator.update")

    def update_reference(
        self, embeddings: Embeddings, labels: Labels, ids: Ids | None = None
    ) -> None:
        """Add a batch of the separate gallery (``query_in_reference=False``), as
        [`update`][update] adds queries.

        Parameters
        ----------
        embeddings : array_like of shape (b, d)
            The gallery batch's embeddings.
        labels : array_like of int, shape (b,)
            Their labels.
        ids : array_like of int, shape (b,), optional
            The gallery's own dataset indices (required under ``torch.distributed``).
        """
        func = "Evaluator.update_reference"
        if self.query_in_reference:
            raise _checks.fail(
                func,
                "query_in_reference",
                "False for a separate gallery (with True the rows of update() are the gallery)",
                "True",
            )
        self._add(self._reference, embeddings, labels, ids, func)

    def _add(self, batches: _Batches, embeddings: Any, labels: Any, ids: Any, func: str) -> None:
        _, world = _distributed(self.group)
        if ids is None and world > 1:
            raise _checks.fail(
                func,
                "ids",
                f"given under torch.distributed (world size {world}): the rows' "
                "dataset indices, by which the rows DistributedSampler repeats are counted once",
                None,
            )
        if self._ended:  # the first batch after compute() begins the next epoch
            self.reset()
        other = self._reference if batches is self._query else self._query
        batches.add(embeddings, labels, ids, func, other)

    def reset(self) -> None:
        """Forget the rows collected: begin a new epoch (with ``epoch_ends="compute"``, the
        default, the first [`update`][update] after [`compute`][compute] does it too)."""
        self._ended = False
        self._query.clear()
        self._reference.clear()

    def compute(self, *, tag: str | None = None) -> Result:
        """The metrics of every row of the epoch (every row since the last [`reset`][reset]), on
        every rank alike.

        With ``epoch_ends="compute"`` (the default) compute ends the epoch: it may be called
        again for the same values, and the next [`update`][update] or
        [`update_reference`][update_reference] begins a new epoch, so that a forgotten
        [`reset`][reset] can neither return the last epoch's values nor count its rows twice. With
        ``epoch_ends="reset"`` (torchmetrics' convention) the rows stay until [`reset`][reset].

        Parameters
        ----------
        tag : str, optional
            The run's name in the history and run files (default ``epoch-N``, ``N`` the number
            of computes so far, this one included); a plain name (no path separator, not
            ``..``): run files stay in the folder of ``run_file``.

        Returns
        -------
        Result
            The metrics of the split, as
            [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics] gives them on the
            rows collected, ordered by dataset index when ``ids`` were given.
        """
        func = "Evaluator.compute"
        if tag is not None:
            records.check_tag(tag, func)
        rank, world = _distributed(self.group)
        self._check_ready(world, func)
        if world > 1:
            result = self._sharded()
        else:
            result = self._single(func)
        self.computes += 1
        self._ended = self.epoch_ends == "compute"
        if rank == 0 and (self.history is not None or self.run_file is not None):
            self._write(result, tag if tag is not None else f"epoch-{self.computes}")
        return result

    # -- internals ------------------------------------------------------------------------------

    def _check_ready(self, world: int, func: str) -> None:
        """Raise, on every rank alike, when a rank has no rows or the ranks' rows disagree."""
        roles = [self._query] if self.query_in_reference else [self._query, self._reference]
        local = []
        for b in roles:
            dtype = _DTYPES.index(b.rows[0].dtype) if b.rows and b.rows[0].dtype in _DTYPES else -1
            local += [b.count, b.dim or 0, dtype]
        table = [local]
        if world > 1:
            import torch.distributed as dist

            device = torch.device("cpu")
            if dist.get_backend(self.group) == "nccl":
                device = torch.device("cuda", torch.cuda.current_device())
            mine = torch.tensor(local, dtype=torch.int64, device=device)
            everyone = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(everyone, mine, group=self.group)
            table = [t.cpu().tolist() for t in everyone]
        for j, b in enumerate(roles):
            counts = [row[3 * j] for row in table]
            method = "update" if b is self._query else "update_reference"
            if not any(counts):
                what = "rows" if b is self._query else "gallery rows"
                raise RuntimeError(
                    f"{func} was called before any {method}: there are no {what} to evaluate "
                    f"(call {method}(embeddings, labels, ids) with the epoch's batches first; "
                    "reset() forgets them)."
                )
            empty = [r for r, c in enumerate(counts) if c == 0]
            if empty:
                raise RuntimeError(
                    f"{func}: rank {empty[0]} of {world} holds no rows of {method} (every rank "
                    "needs some, as DistributedSampler gives each rank a share)."
                )
            shapes = {(row[3 * j + 1], row[3 * j + 2]) for row in table}
            if len(shapes) > 1:
                shown = ", ".join(
                    f"rank {r}: dimension {row[3 * j + 1]}, "
                    f"{_DTYPES[row[3 * j + 2]] if row[3 * j + 2] >= 0 else 'other'}"
                    for r, row in enumerate(table)
                )
                raise ValueError(
                    f"{func}: the ranks' {b.role} have different dimensions or dtypes ({shown}); "
                    "every rank must embed with the same model and dtype."
                )

    def _single(self, func: str) -> Result:
        from recallkit.retrieval import retrieval_metrics

        x, labels, ids = self._query.joined()
        query_ids = None
        if ids is not None:  # rows ordered by dataset index, each once: as under distributed
            rows, query_ids = _first_by_id(ids, "ids", func)
            x, labels = x[torch.from_numpy(rows).to(x.device)], labels[rows]
        if self.query_in_reference:
            reference, reference_labels = x, labels
        else:
            reference, reference_labels, r_ids = self._reference.joined()
            if r_ids is not None:
                rows, _ = _first_by_id(r_ids, "ids", "Evaluator.update_reference")
                reference = reference[torch.from_numpy(rows).to(reference.device)]
                reference_labels = reference_labels[rows]
        result = retrieval_metrics(
            x,
            reference,
            labels,
            reference_labels,
            self.metrics,
            query_in_reference=self.query_in_reference,
            options=self.options,
        )
        return result if query_ids is None else result.replace(query_ids=query_ids)

    def _sharded(self) -> Result:
        from recallkit.sharded import check_items, evaluate_sharded

        x, labels, ids = self._query.joined()
        check_items(self.group, x, labels, ids, "ids", "Evaluator.update")
        gallery: dict[str, Any] = {}
        if not self.query_in_reference:
            r, r_labels, r_ids = self._reference.joined()
            check_items(self.group, r, r_labels, r_ids, "ids", "Evaluator.update_reference")
            gallery = dict(reference=r, reference_labels=r_labels, reference_indices=r_ids)
        return evaluate_sharded(
            x,
            labels,
            ids,
            self.ks,
            metrics=self.metrics,
            group=self.group,
            **gallery,
            options=self.options,
        )

    def _write(self, result: Result, tag: str) -> None:
        record = records.evaluation_record(
            result, tag=tag, metric=self.options.metric, producer="recallkit.Evaluator"
        )
        if self.run_file is not None:
            records.write_run(records.run_path(self.run_file, tag, "Evaluator.compute"), record)
        if self.history is not None:
            records.append_history(self.history, record, stacklevel=4)


Evaluator.__doc__ = fill_docs(Evaluator.__doc__)
