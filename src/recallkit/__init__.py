"""recallkit: exact, deterministic, memory-bounded recall@K and retrieval metrics.

The functional layer (``recall_at_k``, ``retrieval_metrics``, ``ground_truth_ranks``,
``map_at_r``, ...) holds every metric once, on one engine ([`recallkit.engine`][recallkit.engine]);
[`recallkit.pml`][recallkit.pml], the benchmark protocols and splits, the image runner
([`recallkit.runner`][recallkit.runner]) and the command line call into it.

The names below load on first use (PEP 562), so ``import recallkit`` is cheap: the metric modules
(and torch) load with the first metric used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from recallkit._loading import exports as _exports

if _TYPE_CHECKING:
    from recallkit.comparison import Comparison, Interval, compare, intervals
    from recallkit.evaluator import Evaluator
    from recallkit.exceptions import ParameterError, RecallkitError, RecallkitWarning
    from recallkit.ground_truth import (
        Ranks,
        average_precision_at_k,
        ground_truth_ranks,
        ground_truth_ranks_from_embeddings,
        nearest_neighbors,
        nearest_neighbors_from_scores,
        recall_at_k_from_scores,
        recall_from_ranks,
    )
    from recallkit.options import Options
    from recallkit.result import Result
    from recallkit.retrieval import map_at_k, map_at_r, r_precision, recall_at_k, retrieval_metrics
    from recallkit.sharded import evaluate_sharded

# Public name -> the module that defines it.
_HOMES = {
    "Comparison": "recallkit.comparison",
    "Evaluator": "recallkit.evaluator",
    "Interval": "recallkit.comparison",
    "Options": "recallkit.options",
    "ParameterError": "recallkit.exceptions",
    "RecallkitError": "recallkit.exceptions",
    "RecallkitWarning": "recallkit.exceptions",
    "Ranks": "recallkit.ground_truth",
    "Result": "recallkit.result",
    "average_precision_at_k": "recallkit.ground_truth",
    "compare": "recallkit.comparison",
    "evaluate_sharded": "recallkit.sharded",
    "ground_truth_ranks": "recallkit.ground_truth",
    "ground_truth_ranks_from_embeddings": "recallkit.ground_truth",
    "intervals": "recallkit.comparison",
    "map_at_k": "recallkit.retrieval",
    "map_at_r": "recallkit.retrieval",
    "nearest_neighbors": "recallkit.ground_truth",
    "nearest_neighbors_from_scores": "recallkit.ground_truth",
    "r_precision": "recallkit.retrieval",
    "recall_at_k": "recallkit.retrieval",
    "recall_at_k_from_scores": "recallkit.ground_truth",
    "recall_from_ranks": "recallkit.ground_truth",
    "retrieval_metrics": "recallkit.retrieval",
}

__all__ = [
    "Comparison",
    "Evaluator",
    "Interval",
    "Options",
    "ParameterError",
    "Ranks",
    "RecallkitError",
    "RecallkitWarning",
    "Result",
    "average_precision_at_k",
    "compare",
    "evaluate_sharded",
    "ground_truth_ranks",
    "ground_truth_ranks_from_embeddings",
    "intervals",
    "map_at_k",
    "map_at_r",
    "nearest_neighbors",
    "nearest_neighbors_from_scores",
    "r_precision",
    "recall_at_k",
    "recall_at_k_from_scores",
    "recall_from_ranks",
    "retrieval_metrics",
]
__version__ = "0.1.0"


__getattr__, __dir__ = _exports(__name__, globals(), _HOMES, ("__version__",))
