"""Ground-truth ranks, recall from ranks and seed 001's contract."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import recallkit
from recallkit import (
    ground_truth_ranks,
    ground_truth_ranks_from_embeddings,
    nearest_neighbors,
    nearest_neighbors_from_scores,
    recall_at_k_from_scores,
    recall_from_ranks,
)
from tests import brute


def test_seed_001_contract():
    # Row 0: gt 1 scores 0.8, item 0 scores 0.9 -> rank 1.
    # Row 1: all equal 0.5; gt 2 -> items 0 and 1 tie and have lower index -> rank 2.
    # Row 2: gt 0 scores 0.7, highest -> rank 0.
    sim = [[0.9, 0.8, 0.1], [0.5, 0.5, 0.5], [0.7, 0.2, 0.7]]
    assert ground_truth_ranks(sim, [1, 2, 0]).tolist() == [1, 2, 0]
    # recall@1 = 1/3 -> 0.3333; recall@2 = 2/3 -> 0.6667; recall@3 = 1.0; order of ks kept.
    assert recall_at_k_from_scores(sim, [1, 2, 0], [2, 1, 3]) == [0.6667, 0.3333, 1.0]


def test_rank_is_zero_indexed_and_tie_prefers_lower_index():
    # Item 2 ties with the ground truth at index 3 and comes first; item 1 scores higher.
    sim = np.array([[0.1, 0.9, 0.5, 0.5, 0.2]])
    assert ground_truth_ranks(sim, [3]).tolist() == [2]
    assert ground_truth_ranks(sim, [2]).tolist() == [1]


def test_several_ground_truths_min_and_none():
    sim = np.array([[0.3, 0.9, 0.3, 0.8], [0.1, 0.2, 0.3, 0.4]])
    gts = [[0, 2, 3], [1]]
    # Row 0: ranking 1, 3, 0, 2 -> ranks of 0, 2, 3 are 2, 3, 1; best 1.
    # Row 1: ranking 3, 2, 1, 0 -> rank of 1 is 2.
    assert ground_truth_ranks(sim, gts).tolist() == [1, 2]
    assert ground_truth_ranks(sim, gts, reduce="none").tolist() == [[2, 3, 1], [2, -1, -1]]


def test_exclude_removes_candidates():
    sim = np.array([[0.9, 0.8, 0.7]])
    # Without exclusion item 2 is behind 0 and 1; excluding 0 moves it to rank 1.
    assert ground_truth_ranks(sim, [2], exclude=[0]).tolist() == [1]
    assert ground_truth_ranks(sim, [2], exclude=[[0, 1]]).tolist() == [0]
    with pytest.raises(ValueError, match=r"'exclude' parameter .* disjoint .* query 0"):
        ground_truth_ranks(sim, [2], exclude=[2])


@pytest.mark.parametrize("metric", ["dot", "euclidean"])
def test_from_embeddings_against_brute_force(metric, backend):
    rng = np.random.default_rng(11)
    for _ in range(5):
        n, m, d = int(rng.integers(1, 30)), int(rng.integers(5, 60)), int(rng.integers(1, 5))
        q = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
        r = rng.integers(-2, 3, size=(m, d)).astype(np.float32)
        r[rng.integers(0, m, size=m // 3)] = r[0]
        gt = [rng.choice(m, size=int(rng.integers(1, 4)), replace=False) for _ in range(n)]
        ex = [
            [int(j)] if j not in g else []
            for g, j in zip(gt, rng.integers(0, m, size=n), strict=True)
        ]
        s = brute.scores64(q, r, metric)
        expected_none = [[brute.gt_rank(s[i], int(t), set(ex[i])) for t in gt[i]] for i in range(n)]
        expected_min = [min(x) for x in expected_none]
        for chunk in (1, 4, None):
            got = ground_truth_ranks_from_embeddings(
                q, r, gt, exclude=ex, metric=metric, chunk_size=chunk
            )
            assert got.tolist() == expected_min
            got = ground_truth_ranks_from_embeddings(
                q, r, gt, exclude=ex, metric=metric, chunk_size=chunk, reduce="none"
            )
            assert [list(row[row >= 0]) for row in got] == expected_none
        if metric == "dot":
            assert ground_truth_ranks(s, gt, exclude=ex).tolist() == expected_min


def test_nearest_neighbors_against_brute_force(backend):
    rng = np.random.default_rng(5)
    q = rng.integers(-1, 2, size=(25, 3)).astype(np.float32)
    r = rng.integers(-1, 2, size=(40, 3)).astype(np.float32)
    r[:25] = q
    s = brute.scores64(q, r, "dot")
    for chunk in (1, 7, None):
        idx, val = nearest_neighbors(
            q, r, 6, query_in_reference=True, metric="dot", chunk_size=chunk
        )
        for i in range(25):
            expected = brute.ranked(s[i], {i})[:6]
            assert idx[i].tolist() == expected
            assert val[i].tolist() == [s[i, j] for j in expected]


def test_nearest_neighbors_pads_when_k_exceeds_candidates(backend):
    # k is clamped to the 2 reference rows, with a warning; the excluded self leaves one slot
    # empty (-1, -inf). numpy in, numpy out; torch in, torch out.
    x = np.eye(2, dtype=np.float32)
    with pytest.warns(UserWarning, match="k = 3 exceeds the 2 reference items"):
        idx, val = nearest_neighbors(x, x, 3, query_in_reference=True)
    assert isinstance(idx, np.ndarray) and isinstance(val, np.ndarray)
    assert idx.tolist() == [[1, -1], [0, -1]]
    assert val[:, 0].tolist() == [0.0, 0.0]
    assert np.isneginf(val[:, 1:]).all()
    with pytest.warns(UserWarning, match="exceeds"):
        idx_t, val_t = nearest_neighbors(
            torch.from_numpy(x), torch.from_numpy(x), 3, query_in_reference=True
        )
    assert isinstance(idx_t, torch.Tensor) and idx_t.tolist() == idx.tolist()
    assert isinstance(val_t, torch.Tensor) and val_t.dtype == torch.float64


def test_recall_from_ranks_and_errors():
    assert recall_from_ranks(np.array([0, 1, 2, 3]), [1, 3]) == {"recall@1": 0.25, "recall@3": 0.75}
    with pytest.raises(
        ValueError, match=r"'ranks' parameter .* non-negative. Got -1 at position 1"
    ):
        recall_from_ranks([0, -1], [1])
    with pytest.raises(
        ValueError, match=r"'ground_truth' parameter .* \[0, 3\). Got 3 for query 0"
    ):
        ground_truth_ranks(np.eye(3), [3, 0, 0])
    with pytest.raises(ValueError, match=r"'ground_truth' parameter .* length 3"):
        ground_truth_ranks(np.eye(3), [0, 1])
    with pytest.raises(ValueError, match=r"'scores' parameter .* non-finite value in row 2"):
        ground_truth_ranks(np.array([[1.0], [2.0], [np.nan]]), [0, 0, 0])
    with pytest.raises(ValueError, match="'reduce' parameter"):
        ground_truth_ranks(np.eye(2), [0, 1], reduce="max")


def test_nearest_neighbors_from_scores_against_brute_force(backend):
    rng = np.random.default_rng(9)
    s = rng.integers(0, 4, size=(30, 25)).astype(np.float32)  # many exact ties
    exclude = rng.integers(-1, 25, size=30)
    idx, val = nearest_neighbors_from_scores(s, 7, exclude=exclude)
    for i in range(30):
        expected = brute.ranked(s[i], {int(exclude[i])} - {-1})[:7]
        assert idx[i].tolist() == expected
        assert val[i].tolist() == [s[i, j] for j in expected]


def test_numpy_in_numpy_out_torch_in_torch_out():
    scores = [[0.2, 0.9, 0.2], [0.5, 0.5, 0.5]]  # hand ranks: 1 (0.9 above), 2 (two ties first)
    for given, kind in ((np.array(scores), np.ndarray), (torch.tensor(scores), torch.Tensor)):
        ranks = recallkit.ground_truth_ranks(given, [0, 2])
        assert isinstance(ranks, kind) and ranks.tolist() == [1, 2]
        bounds = recallkit.ground_truth_ranks(given, [0, 2], tie_bounds=True)
        assert all(
            isinstance(r, kind) for r in (bounds.ranks, bounds.optimistic, bounds.pessimistic)
        )
        assert (bounds.optimistic.tolist(), bounds.pessimistic.tolist()) == ([1, 0], [2, 2])
        from_embeddings = recallkit.ground_truth_ranks_from_embeddings(given, given, [0, 1])
        assert isinstance(from_embeddings, kind)
    ap = recallkit.average_precision_at_k(torch.tensor([[0, 2]]), k=5)  # (1 + 2/3) / 2
    assert isinstance(ap, torch.Tensor) and ap.tolist() == [(1 + 2 / 3) / 2]
    assert isinstance(recallkit.average_precision_at_k([[0, 2]], k=5), np.ndarray)
