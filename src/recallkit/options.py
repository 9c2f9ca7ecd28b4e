"""The options every ranking entry point shares, validated once.

``metric``, ``chunk_size``, ``device``, ``precision`` (and, for the label form, ``lone_queries``)
mean the same everywhere: in :func:`recallkit.recall_at_k` and the other metric functions, the
benchmark protocols (``cirr_recall(..., metric="dot", precision="bfloat16")``), the benchmark
splits (:func:`recallkit.datasets.evaluate_benchmark`), sharded evaluation, the PML layer, the
runner and the command line (``--metric``, ``--device``, ``--precision``).
Entry points that pass them on take them as keywords and build one :class:`Options` with
:meth:`Options.of`, which names the function called in every error.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from recallkit import _checks
from recallkit.metrics import LONE_QUERIES

METRICS = _checks.METRICS
PRECISIONS = ("auto", "float32", "bfloat16", "float16", "int8")


@dataclass(frozen=True)
class Options:
    """How the engine ranks (every option is checked when the options are built).

    Attributes:
        metric: ``"cosine"`` (default), ``"dot"`` or ``"euclidean"`` (ordered as
            ``-|q - r|²``).
        chunk_size: query rows per chunk (default: sized from the memory budget; ranks do not
            depend on it).
        device: where the work runs (default: the query's device), ``"cpu"`` or ``"cuda"``
            (``"cuda:1"``); on CUDA chunks are sized from a GPU memory budget
            (``RECALLKIT_GPU_MEMORY``, else a quarter of the free memory).
        precision: the filter GEMM's type: ``"auto"`` (default: float32 on CUDA; on the CPU
            the fastest of float32 and, where the processor has the instructions, bfloat16 and
            int8, timed on the first tiles), ``"float32"``, ``"bfloat16"``, ``"float16"``
            (CUDA) or ``"int8"`` (CPU). A lower precision is a wider filter whose window is
            scored again in float32, then exactly: the results are identical in every
            precision.
        lone_queries: label form: what a query without a relevant item does
            (:data:`recallkit.metrics.LONE_QUERIES`): ``"skip"`` (default), ``"zero"`` or
            ``"error"``.
    """

    metric: str = "cosine"
    chunk_size: int | None = None
    device: Any = None
    precision: str = "auto"
    lone_queries: str = "skip"

    @classmethod
    def of(cls, func: str, options: Options | None = None, **keywords: Any) -> Options:
        """Options from keywords (those of this class; any other raises ``ValueError`` naming
        ``func``), over ``options`` if given, checked."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(keywords) - names)
        if unknown:
            raise _checks.fail(
                func, unknown[0], f"one of the options {tuple(sorted(names))}", "an unknown keyword"
            )
        base = options if options is not None else cls()
        return replace(base, **keywords).checked(func)

    def checked(self, func: str) -> Options:
        """These options, each checked (errors name ``func`` and the option)."""
        _checks.check_metric(self.metric, func)
        chunk = _checks.check_chunk_size(self.chunk_size, func)
        device = None if self.device is None else _checks.check_device(self.device, func)
        if not isinstance(self.precision, str) or self.precision not in PRECISIONS:
            raise _checks.fail(func, "precision", f"one of {PRECISIONS}", repr(self.precision))
        if not isinstance(self.lone_queries, str) or self.lone_queries not in LONE_QUERIES:
            raise _checks.fail(
                func, "lone_queries", f"one of {LONE_QUERIES}", repr(self.lone_queries)
            )
        return Options(self.metric, chunk, device, self.precision, self.lone_queries)

    def search(self) -> dict[str, Any]:
        """The options as keywords of the metric functions (``metric``, ``chunk_size``,
        ``device``, ``precision``)."""
        return {
            "metric": self.metric,
            "chunk_size": self.chunk_size,
            "device": self.device,
            "precision": self.precision,
        }


def check_flag(value: Any, func: str, name: str) -> bool:
    """``value`` if it is a bool (``numpy.bool_`` too), else ``ValueError`` naming it."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise _checks.fail(func, name, "True or False", repr(value))


def device_of(options: Options, tensor: torch.Tensor) -> torch.device:
    """Where the work runs: the option, else the tensor's device."""
    return options.device if options.device is not None else tensor.device
