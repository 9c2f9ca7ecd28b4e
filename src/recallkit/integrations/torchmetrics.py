"""A torchmetrics ``Metric`` of exact retrieval metrics: [`RetrievalMetrics`][RetrievalMetrics].

Requires torchmetrics: ``pip install torchmetrics`` beside recallkit (``pip install
'/path/to/recallkit[torchmetrics]'`` installs both from a clone; ``uv sync`` in the clone
installs it with the development tools).

torchmetrics synchronises a metric by all-gathering its states onto every process
(``sync_on_compute``, ``dist_sync_on_step``): for a retrieval metric the states are the
embeddings, so every rank would hold every embedding. This metric keeps its rows in a
[`recallkit.Evaluator`][recallkit.evaluator.Evaluator] instead, outside torchmetrics' states, with
both kinds of sync off, and [`RetrievalMetrics.compute`][RetrievalMetrics.compute] runs the sharded
exact evaluation across the process group itself
([`recallkit.evaluate_sharded`][recallkit.sharded.evaluate_sharded]): each rank keeps its own rows,
and every rank gets the same values, equal to the single-process ones.

``import recallkit.integrations.torchmetrics`` alone does not load torchmetrics (which loads
Pillow and matplotlib): the class is built from torchmetrics' ``Metric`` when it is first
looked up (``from recallkit.integrations.torchmetrics import RetrievalMetrics``).

>>> import torch
>>> from recallkit.integrations.torchmetrics import RetrievalMetrics
>>> metric = RetrievalMetrics(ks=(1, 2), metrics=["recall@1", "recall@2"])
>>> x = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
>>> metric.update(x, torch.tensor([0, 1, 1, 0]))
>>> {k: float(v) for k, v in metric.compute().items()}
{'recall@1': 0.0, 'recall@2': 0.5}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from recallkit._inputs import checks as _checks
from recallkit.evaluator import Evaluator
from recallkit.integrations import built_on_first_use, framework_class
from recallkit.result import Result

__all__ = ["RetrievalMetrics"]  # noqa: F822 (built on first use: __getattr__)

_SYNC = ("dist_sync_on_step", "sync_on_compute", "dist_sync_fn")


#: The class's docstring: the class is built when its framework is first imported.
_METRICS_DOC = """Exact recall@K (and MAP@R, R-precision, any metric of the registry) of the rows
given to [`update`][update].

[`update`][update] adds a batch ``(embeddings, labels, ids=None)``;
[`update_reference`][update_reference] a batch of a separate gallery; [`compute`][compute]
returns ``{name: 0-dim float64 tensor}`` and keeps the whole
[`recallkit.Result`][recallkit.result.Result] in ``result``. As in every torchmetrics
metric, the rows stay until [`reset`][reset] (which Lightning calls at the end of each epoch
where the metric is logged); a dataset index given again with other values is an error that
says so. ``forward`` only accumulates (a retrieval metric of one batch is not the split's)
and returns ``None``. Ranks are exact, and on equal scores the lower reference index (the
lower dataset index under DDP) ranks first, as in
[`recallkit.Evaluator`][recallkit.evaluator.Evaluator].

Parameters
----------
ks : int or sequence of int, default (1, 2, 4, 8)
    The K of recall@K.
metrics : sequence of str, optional
    Metric names, as in
    [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics]; default
    recall@K for ``ks``, MAP@R and R-precision.
query_in_reference : bool, default True
    ``True``: the rows are searched against themselves, each query's own row left out;
    ``False``: against the gallery of [`update_reference`][update_reference].
process_group : torch.distributed.ProcessGroup, optional
    The ``torch.distributed`` group (default: the whole world).
**options : str, int, bool or torch.device
    The options of [`recallkit.Options`][recallkit.options.Options] (``metric``,
    ``chunk_size``, ``device``, ``precision``, ``lone_queries``), and torchmetrics' own
    ``compute_on_cpu`` and ``compute_with_cache``. torchmetrics' sync options
    (``dist_sync_on_step``, ``sync_on_compute``, ``dist_sync_fn``) are refused: they would
    gather every embedding onto every rank.
"""


def _define() -> type:
    """The metric class, on torchmetrics' ``Metric``."""
    Metric = framework_class(__name__, "torchmetrics:Metric", "torchmetrics")

    class RetrievalMetrics(Metric):
        __doc__ = _METRICS_DOC

        is_differentiable = False
        higher_is_better = True
        full_state_update = False

        def __init__(
            self,
            ks: Any = (1, 2, 4, 8),
            metrics: Sequence[str] | None = None,
            *,
            query_in_reference: bool = True,
            process_group: Any = None,
            **options: Any,
        ) -> None:
            metric_keywords = _torchmetrics_keywords(options)
            super().__init__(
                dist_sync_on_step=False,
                sync_on_compute=False,
                process_group=process_group,
                **metric_keywords,
            )
            self.evaluator = Evaluator(
                ks,
                metrics,
                query_in_reference=query_in_reference,
                group=process_group,
                epoch_ends="reset",
                **options,
            )
            self.result: Result | None = None

        def update(self, embeddings: Any, labels: Any, ids: Any = None) -> None:
            """Add a batch of rows, as
            [`recallkit.Evaluator.update`][recallkit.evaluator.Evaluator.update] does.

            Parameters
            ----------
            embeddings : torch.Tensor or numpy.ndarray, shape (b, d)
                The batch's embeddings.
            labels : torch.Tensor or numpy.ndarray of int, shape (b,)
                Their labels.
            ids : torch.Tensor or numpy.ndarray of int, shape (b,), optional
                Their dataset indices (required under ``torch.distributed``).
            """
            self.evaluator.update(embeddings, labels, ids)

        def update_reference(self, embeddings: Any, labels: Any, ids: Any = None) -> None:
            """Add a batch of the separate gallery (``query_in_reference=False``).

            Parameters
            ----------
            embeddings : torch.Tensor or numpy.ndarray, shape (b, d)
                The gallery batch's embeddings.
            labels : torch.Tensor or numpy.ndarray of int, shape (b,)
                Their labels.
            ids : torch.Tensor or numpy.ndarray of int, shape (b,), optional
                Their dataset indices (required under ``torch.distributed``).
            """
            self.evaluator.update_reference(embeddings, labels, ids)
            self._computed = None

        def compute(self) -> dict[str, torch.Tensor]:
            """The metrics of every row since the last [`reset`][reset], on every rank alike.

            Returns
            -------
            dict of str to torch.Tensor
                ``{name: 0-dim float64 tensor}``, in the order of ``metrics``; the whole
                [`recallkit.Result`][recallkit.result.Result] is kept in ``result``.
            """
            self.result = self.evaluator.compute()
            return {k: torch.tensor(v, dtype=torch.float64) for k, v in self.result.items()}

        def forward(self, *args: Any, **kwargs: Any) -> None:
            """Accumulate the batch, as [`update`][update] does; returns ``None``.

            Parameters
            ----------
            *args : torch.Tensor or numpy.ndarray
                ``embeddings``, ``labels`` and ``ids``, as [`update`][update] takes them.
            **kwargs : torch.Tensor or numpy.ndarray
                The same, by name.
            """
            self.update(*args, **kwargs)

        def reset(self) -> None:
            """Forget the rows (torchmetrics calls it after each epoch's compute when logging)."""
            super().reset()
            self.evaluator.reset()
            self.result = None

    return RetrievalMetrics


def _torchmetrics_keywords(options: dict[str, Any]) -> dict[str, Any]:
    """Takes torchmetrics' own keywords out of ``options`` (the rest are recallkit's): returns
    ``compute_on_cpu`` and ``compute_with_cache`` when given; torchmetrics' sync options are
    refused unless unset (they would gather every embedding onto every rank)."""
    for name in _SYNC:
        if name in options and options[name] not in (None, False):
            raise _checks.fail(
                "RetrievalMetrics",
                name,
                "left unset: torchmetrics' sync would gather every embedding onto every rank; "
                "compute() evaluates across the ranks itself",
                repr(options[name]),
            )
        options.pop(name, None)
    return {k: options.pop(k) for k in ("compute_on_cpu", "compute_with_cache") if k in options}


__getattr__ = built_on_first_use(__name__, "RetrievalMetrics", _define)
