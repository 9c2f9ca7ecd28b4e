"""One validation toolbox (``recallkit._inputs.checks``): the same rule for ks and chunk_size
everywhere.

Every public function that takes ``ks`` refuses a K given twice (a repeat would silently drop a
``recall@K`` key), and every function that takes ``chunk_size`` refuses anything but a positive
integer, naming itself in the error, the sharded evaluation included.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from recallkit import (
    evaluate_sharded,
    ground_truth_ranks_from_embeddings,
    map_at_k,
    map_at_r,
    nearest_neighbors,
    r_precision,
    recall_at_k,
    recall_at_k_from_scores,
    recall_from_ranks,
)
from recallkit.pml import ExactKNN, RecallCalculator
from recallkit.protocols import genecis_recall, image_text_recall_from_scores

X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
LABELS = [0, 0, 1, 1]
SCORES = np.array([[0.9, 0.1], [0.2, 0.8]])

WITH_KS = {
    "recall_at_k": lambda ks: recall_at_k(X, X, LABELS, LABELS, ks, query_in_reference=True),
    "recall_from_ranks": lambda ks: recall_from_ranks([0, 1], ks),
    "recall_at_k_from_scores": lambda ks: recall_at_k_from_scores(SCORES, [0, 1], ks),
    "RecallCalculator": lambda ks: RecallCalculator(ks=ks),
    "evaluate_sharded": lambda ks: evaluate_sharded(X, LABELS, [0, 1, 2, 3], ks),
    "genecis_recall": lambda ks: genecis_recall(SCORES, ks),
    "image_text_recall_from_scores": lambda ks: image_text_recall_from_scores(SCORES, [0, 1], ks),
}


@pytest.mark.parametrize("func", list(WITH_KS))
def test_a_repeated_k_is_refused_everywhere(func):
    message = rf"'ks' parameter of {func} must be distinct \(each K once\)\. Got \[1, 5, 1\], "
    with pytest.raises(ValueError, match=message + "with 1 twice"):
        WITH_KS[func]((1, 5, 1))


def test_distinct_ks_keep_their_order():
    r = recall_at_k(X, X, LABELS, LABELS, (2, 1), query_in_reference=True)
    # Query 0 (label 0): row 1 (label 0) is nearest: rank 0. Query 1: row 0, rank 0. Query 2
    # (label 1): row 3 nearest, rank 0; query 3: row 2, rank 0. Every query hits at 1 and 2.
    assert list(r) == ["recall@2", "recall@1"] and r.ks == (2, 1)
    assert recall_from_ranks([0, 3], np.array([5, 1])) == {"recall@5": 1.0, "recall@1": 0.5}


WITH_CHUNK_SIZE = {
    "recall_at_k": lambda c: recall_at_k(X, X, LABELS, LABELS, chunk_size=c),
    "r_precision": lambda c: r_precision(X, X, LABELS, LABELS, chunk_size=c),
    "map_at_r": lambda c: map_at_r(X, X, LABELS, LABELS, chunk_size=c),
    "map_at_k": lambda c: map_at_k(X, X, LABELS, LABELS, chunk_size=c),
    "ground_truth_ranks_from_embeddings": lambda c: ground_truth_ranks_from_embeddings(
        X, X, [0, 1, 2, 3], chunk_size=c
    ),
    "nearest_neighbors": lambda c: nearest_neighbors(X, X, 2, chunk_size=c),
    "ExactKNN": lambda c: ExactKNN(chunk_size=c),
    # Checked before the process group is looked for: no torch.distributed needed here.
    "evaluate_sharded": lambda c: evaluate_sharded(X, LABELS, [0, 1, 2, 3], chunk_size=c),
}


@pytest.mark.parametrize("chunk_size", [0, -2, 2.0, True, "8"])
@pytest.mark.parametrize("func", list(WITH_CHUNK_SIZE))
def test_chunk_size_is_checked_everywhere(func, chunk_size):
    message = f"'chunk_size' parameter of {func} must be a positive integer. Got {chunk_size!r}."
    with pytest.raises(ValueError, match=re.escape(message)):
        WITH_CHUNK_SIZE[func](chunk_size)


@pytest.mark.parametrize("chunk_size", [None, 1, np.int64(3)])
def test_valid_chunk_sizes_give_the_same_ranks(chunk_size):
    # Rows 0 and 1 point along x, rows 2 and 3 along y: each query's nearest other row is its
    # partner (rank 0 for the partner's label).
    r = recall_at_k(X, X, LABELS, LABELS, (1,), query_in_reference=True, chunk_size=chunk_size)
    assert r.first_hit_ranks.tolist() == [0, 0, 0, 0]


def test_ks_as_arrays_and_tensors():
    # A 0-d array or tensor is one K; a 1-D one is a sequence of Ks.
    import torch

    r = recall_at_k(X, X, LABELS, LABELS, np.array(2), query_in_reference=True)
    assert r.ks == (2,) and r["recall@2"] == 1.0
    r = recall_at_k(X, X, LABELS, LABELS, torch.tensor([3, 1]), query_in_reference=True)
    assert r.ks == (3, 1)
    with pytest.raises(ValueError, match=r"'ks' parameter of recall_at_k must be positive"):
        recall_at_k(X, X, LABELS, LABELS, np.array([1, 0]), query_in_reference=True)


BAD_OPTIONS = [
    ({"precision": ["float32"]}, "'precision' parameter of recall_at_k must be one of"),
    ({"device": "tpu"}, "'device' parameter of recall_at_k must be a device name"),
    ({"device": "meta"}, "'device' parameter of recall_at_k must be a device that holds data"),
    ({"query_in_reference": "yes"}, "'query_in_reference' parameter of recall_at_k must be True"),
    ({"metric": "cos"}, "'metric' parameter of recall_at_k must be one of"),
]


@pytest.mark.parametrize("options, message", BAD_OPTIONS)
def test_bad_options_are_refused_before_any_work(options, message, monkeypatch):
    from recallkit.engine import space

    def never(*args, **kwargs):
        raise AssertionError("the engine ran before the options were checked")

    monkeypatch.setattr(space, "prepare_rows", never)
    options = {"query_in_reference": True, **options}
    with pytest.raises(ValueError, match=re.escape(message)):
        recall_at_k(X, X, LABELS, LABELS, (1,), **options)


def test_cuda_without_a_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible")
    with pytest.raises(ValueError, match=r"must be an available device \(no CUDA GPU is visible\)"):
        recall_at_k(X, X, LABELS, LABELS, (1,), query_in_reference=True, device="cuda")


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64, np.int8, np.int64])
def test_integer_embeddings_of_every_type_are_scored_exactly(dtype):
    import torch

    # Rows 0 and 1 point along x, rows 2 and 3 along y (scaled integers): partners first.
    x = np.array([[10, 0], [9, 1], [0, 10], [1, 9]]) * (2**40 if dtype == np.int64 else 1)
    for given in (x.astype(dtype), torch.from_numpy(x.astype(dtype))):
        r = recall_at_k(given, given, LABELS, LABELS, (1,), query_in_reference=True)
        assert r.first_hit_ranks.tolist() == [0, 0, 0, 0]


def test_unsigned_integers_beyond_2_to_53_are_refused():
    import torch

    big = [[2**53 + 1, 0], [1, 1]]
    for given in (np.array(big, dtype=np.uint64), torch.tensor(big, dtype=torch.uint64)):
        with pytest.raises(ValueError, match=r"'query' parameter .* magnitude at most 2\*\*53"):
            recall_at_k(given, X, [0, 1], LABELS, (1,), query_in_reference=False)
