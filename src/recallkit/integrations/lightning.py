"""A Lightning callback that logs exact retrieval metrics of each validation epoch:
[`RetrievalCallback`][RetrievalCallback].

Requires Lightning: ``pip install lightning`` beside recallkit (``pip install
'/path/to/recallkit[lightning]'`` installs both from a clone; ``uv sync`` in the clone installs it
with the development tools).

The callback collects the validation embeddings batch by batch in a
[`recallkit.Evaluator`][recallkit.evaluator.Evaluator] (from the ``validation_step`` outputs, or a
``collect`` hook), computes the metrics of the whole validation split at ``on_validation_epoch_end``
(under DDP with the sharded exact evaluation: each rank keeps its own rows, every rank gets the same
values) and logs them with ``pl_module.log`` (``val/recall@1``, ...). Under DDP the rows need
their dataset indices (``ids``), by which the rows Lightning's ``DistributedSampler`` repeats
are counted once: let the validation dataset yield each item's index.

``import recallkit.integrations.lightning`` alone does not load Lightning (which loads Pillow
and matplotlib): the class is built from Lightning's ``Callback`` when it is first looked up
(``from recallkit.integrations.lightning import RetrievalCallback``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from recallkit._inputs import checks as _checks
from recallkit.evaluator import Evaluator
from recallkit.integrations import built_on_first_use, framework_class
from recallkit.result import Result

__all__ = ["RetrievalCallback"]  # noqa: F822 (built on first use: __getattr__)

Collect = Callable[[Any, Any, Any, int, int], Any]


def _from_outputs(pl_module: Any, outputs: Any, batch: Any, batch_idx: int, idx: int) -> Any:
    """The default ``collect``: ``validation_step`` returns a dict with ``embeddings``,
    ``labels`` and (under DDP, required) ``ids``."""
    if not isinstance(outputs, Mapping) or not {"embeddings", "labels"} <= outputs.keys():
        got = type(outputs).__name__
        if isinstance(outputs, Mapping):
            got = f"a dict with keys {sorted(outputs)}"
        raise _checks.fail(
            "RetrievalCallback",
            "collect",
            "given, or validation_step must return a dict with "
            "'embeddings', 'labels' and optionally 'ids' (dataset indices)",
            got,
        )
    return outputs["embeddings"], outputs["labels"], outputs.get("ids")


#: The class's docstring: the class is built when its framework is first imported.
_CALLBACK_DOC = """Log exact recall@K (and MAP@R, R-precision, ...) of the validation split every
epoch.

The sanity-check validation Lightning runs before training is not evaluated. ``result``
holds the last epoch's whole [`recallkit.Result`][recallkit.result.Result] (Lightning
converts logged values to tensors; the result keeps them as Python floats). Ranks are
exact, and on equal scores the lower reference index (the lower dataset index under DDP)
ranks first, as in [`recallkit.Evaluator`][recallkit.evaluator.Evaluator].

Parameters
----------
ks : int or sequence of int, default (1, 2, 4, 8)
    The K of recall@K, as in [`recallkit.Evaluator`][recallkit.evaluator.Evaluator].
metrics : sequence of str, optional
    Metric names, as in [`recallkit.Evaluator`][recallkit.evaluator.Evaluator]; default
    recall@K for ``ks``, MAP@R and R-precision.
query_in_reference : bool, default True
    ``True``: the validation rows are searched against themselves, each query's own row
    left out; ``False``: the batches of dataloader ``gallery_dataloader`` are the gallery.
collect : callable, optional
    ``collect(pl_module, outputs, batch, batch_idx, dataloader_idx)`` returns a batch's
    ``(embeddings, labels, ids)`` (``ids`` may be ``None`` in one process), or ``None`` to
    skip the batch. Default: the ``validation_step`` output's ``"embeddings"``,
    ``"labels"`` and ``"ids"``.
gallery_dataloader : int, optional
    With ``query_in_reference=False``, the index of the validation dataloader whose
    batches are the gallery (default 1; the others give the queries).
prefix : str, default "val/"
    What the logged names start with (``"val/"``: ``val/recall@1``).
history : str or os.PathLike, optional
    As in [`recallkit.Evaluator`][recallkit.evaluator.Evaluator]; each epoch is tagged
    ``epoch-N``, ``N`` the trainer's ``current_epoch``.
run_file : str, optional
    As in [`recallkit.Evaluator`][recallkit.evaluator.Evaluator].
**options : str, int, bool or torch.device
    The options of [`recallkit.Options`][recallkit.options.Options]: ``metric``,
    ``chunk_size``, ``device``, ``precision``, ``lone_queries``.
"""


def _define() -> type:
    """The callback class, on Lightning's ``Callback``."""
    Callback = framework_class(__name__, "lightning.pytorch:Callback", "lightning")

    class RetrievalCallback(Callback):
        __doc__ = _CALLBACK_DOC

        def __init__(
            self,
            ks: Any = (1, 2, 4, 8),
            metrics: Sequence[str] | None = None,
            *,
            query_in_reference: bool = True,
            collect: Collect | None = None,
            gallery_dataloader: int | None = None,
            prefix: str = "val/",
            history: str | os.PathLike[str] | None = None,
            run_file: str | None = None,
            **options: Any,
        ) -> None:
            func = _FUNC
            self.evaluator = Evaluator(
                ks,
                metrics,
                query_in_reference=query_in_reference,
                history=history,
                run_file=run_file,
                **options,
            )
            if collect is not None and not callable(collect):
                raise _checks.fail(func, "collect", "a callable or None", repr(collect))
            if not isinstance(prefix, str):
                raise _checks.fail(func, "prefix", "a string", repr(prefix))
            self.collect = collect or _from_outputs
            self.gallery_dataloader = _gallery_dataloader(gallery_dataloader, query_in_reference)
            self.prefix = prefix
            self.result: Result | None = None

        def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            """Forget the rows of the last epoch (Lightning's hook).

            Parameters
            ----------
            trainer : lightning.pytorch.Trainer
                The trainer.
            pl_module : lightning.pytorch.LightningModule
                The module being validated.
            """
            self.evaluator.reset()

        def on_validation_batch_end(
            self,
            trainer: Any,
            pl_module: Any,
            outputs: Any,
            batch: Any,
            batch_idx: int,
            dataloader_idx: int = 0,
        ) -> None:
            """Add a validation batch's rows, by ``collect`` (Lightning's hook).

            Parameters
            ----------
            trainer : lightning.pytorch.Trainer
                The trainer (nothing is added during its sanity check).
            pl_module : lightning.pytorch.LightningModule
                The module being validated.
            outputs : Any
                What ``validation_step`` returned.
            batch : Any
                The batch.
            batch_idx : int
                The batch's index in its dataloader.
            dataloader_idx : int, default 0
                The dataloader's index; the gallery's (``gallery_dataloader``) adds gallery rows.
            """
            if trainer.sanity_checking:
                return
            rows = self.collect(pl_module, outputs, batch, batch_idx, dataloader_idx)
            if rows is None:
                return
            embeddings, labels, ids = rows
            if dataloader_idx == self.gallery_dataloader:
                self.evaluator.update_reference(embeddings, labels, ids)
            else:
                self.evaluator.update(embeddings, labels, ids)

        def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            """Compute the epoch's metrics and log them with ``pl_module.log`` (Lightning's hook).

            Parameters
            ----------
            trainer : lightning.pytorch.Trainer
                The trainer (its ``current_epoch`` tags the result).
            pl_module : lightning.pytorch.LightningModule
                The module that logs the values, each under ``prefix + name``.
            """
            if trainer.sanity_checking:
                return
            self.result = self.evaluator.compute(tag=f"epoch-{trainer.current_epoch}")
            for name, value in self.result.items():
                # Every rank holds the same values: no reduction across ranks; a float64
                # tensor, so that the logged value is the exact float (not float32's).
                exact = torch.tensor(value, dtype=torch.float64)
                pl_module.log(f"{self.prefix}{name}", exact, sync_dist=False, batch_size=1)
            self.evaluator.reset()

    return RetrievalCallback


_FUNC = "RetrievalCallback"


def _gallery_dataloader(index: Any, query_in_reference: bool) -> int | None:
    """The index of the validation dataloader that holds the gallery: ``None`` when the rows are
    searched against themselves, else ``index`` (1 by default), checked."""
    if query_in_reference:
        if index is not None:
            raise _checks.fail(
                _FUNC, "gallery_dataloader", "None with query_in_reference=True", repr(index)
            )
        return None
    if index is None:
        return 1
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise _checks.fail(
            _FUNC, "gallery_dataloader", "a dataloader index (0, 1, ...)", repr(index)
        )
    return index


__getattr__ = built_on_first_use(__name__, "RetrievalCallback", _define)
