"""recallkit: exact, deterministic, memory-bounded recall@K and retrieval metrics.

The functional layer (``recall_at_k``, ``ground_truth_ranks``, ``map_at_r``, ...) holds every
metric once; :mod:`recallkit.pml`, the runner and the command line call into it.

The names below load on first use (PEP 562), so ``import recallkit`` is cheap and loads no
image, plotting or command-line code: the metric modules (and torch) load with the first metric
used, the runner (``evaluate``, ``encode_all``: images in, recall@K out) with the first runner
function used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recallkit.distributed import ShardedResult, evaluate_sharded
    from recallkit.neighbors import nearest_neighbors, nearest_neighbors_from_scores
    from recallkit.ranking import average_precision_at_k, map_at_k, map_at_r, r_precision
    from recallkit.ranks import (
        ground_truth_ranks,
        ground_truth_ranks_from_embeddings,
        recall_at_k_from_scores,
        recall_from_ranks,
    )
    from recallkit.recall import recall_at_k
    from recallkit.result import RecallResult
    from recallkit.runner import encode_all, evaluate

# Public name -> the module that defines it.
_HOMES = {
    "RecallResult": "recallkit.result",
    "ShardedResult": "recallkit.distributed",
    "average_precision_at_k": "recallkit.ranking",
    "encode_all": "recallkit.runner",
    "evaluate": "recallkit.runner",
    "evaluate_sharded": "recallkit.distributed",
    "ground_truth_ranks": "recallkit.ranks",
    "ground_truth_ranks_from_embeddings": "recallkit.ranks",
    "map_at_k": "recallkit.ranking",
    "map_at_r": "recallkit.ranking",
    "nearest_neighbors": "recallkit.neighbors",
    "nearest_neighbors_from_scores": "recallkit.neighbors",
    "r_precision": "recallkit.ranking",
    "recall_at_k": "recallkit.recall",
    "recall_at_k_from_scores": "recallkit.ranks",
    "recall_from_ranks": "recallkit.ranks",
}

__all__ = [
    "RecallResult",
    "ShardedResult",
    "average_precision_at_k",
    "encode_all",
    "evaluate",
    "evaluate_sharded",
    "ground_truth_ranks",
    "ground_truth_ranks_from_embeddings",
    "map_at_k",
    "map_at_r",
    "nearest_neighbors",
    "nearest_neighbors_from_scores",
    "r_precision",
    "recall_at_k",
    "recall_at_k_from_scores",
    "recall_from_ranks",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value
    if not name.startswith("__"):
        try:  # a submodule: ``recallkit.ranks`` after a bare ``import recallkit``
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
