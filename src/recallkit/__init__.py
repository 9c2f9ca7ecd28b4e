"""recallkit: exact, deterministic, memory-bounded recall@K and retrieval metrics.

The functional layer (``recall_at_k``, ``ground_truth_ranks``, ``map_at_r``, ...) holds every
metric once; :mod:`recallkit.pml`, the runner and the command line call into it.
"""

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
