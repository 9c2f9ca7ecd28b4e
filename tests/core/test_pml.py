"""The PML layer: ExactKNN inside AccuracyCalculator, and RecallCalculator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from recallkit.pml import ExactKNN, RecallCalculator

CPU = torch.device("cpu")
METRICS = ("precision_at_1", "r_precision", "mean_average_precision_at_r", "mean_average_precision")


def test_exact_knn_matches_pml_default_on_tie_free_data():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((150, 6)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 15, size=150))
    ours = AccuracyCalculator(
        include=METRICS, k="max_bin_count", device=CPU, knn_func=ExactKNN(metric="euclidean")
    )
    theirs = AccuracyCalculator(include=METRICS, k="max_bin_count", device=CPU)
    a = ours.get_accuracy(x[:60], labels[:60], x, labels, ref_includes_query=True)
    b = theirs.get_accuracy(x[:60], labels[:60], x, labels, ref_includes_query=True)
    assert a == pytest.approx(b, abs=1e-12)


def test_exact_knn_removes_own_row_not_duplicate():
    # Rows 0 and 1 are the same vector with labels 0 and 1; row 2 is far (label 0).
    # Query 0 (own row removed) finds row 1 first: precision_at_1 miss for query 0 and 1.
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    labels = torch.tensor([0, 1, 0])
    calc = AccuracyCalculator(include=("precision_at_1",), device=CPU, knn_func=ExactKNN())
    # Query 1 is lone (label 1 appears once) and left out. Query 0 misses: its duplicate row 1
    # has the other label. Query 2 (label 0) ties rows 0 and 1 and takes row 0 (lower index):
    # a hit. 1/2.
    assert calc.get_accuracy(x, labels)["precision_at_1"] == 0.5
    dist, idx = ExactKNN()(x, 2, x, True)
    assert idx.tolist() == [[1, 2], [0, 2], [0, 1]]
    assert dist[0].tolist() == [1.0, 0.0]


def test_exact_knn_exclude_ids():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    _, idx = ExactKNN()(x[:1], 2, x, False, exclude_ids=(["a"], ["a", "a", "b", "c"]))
    assert idx.tolist() == [[2, 3]]


def test_recall_calculator_reports_recall_with_pml_semantics():
    # 1-D dot-product "embeddings" with a lone query (label 9 appears once).
    # Leave-one-out ranking (dot, ties to lower index), values 3, 2, 1, 1, 5:
    # q0 (3, a): order 4(5,c) 1(2,a) ... -> first hit rank 1.
    # q1 (2, a): order 4(c) 0(a) -> rank 1.   q2 (1, b): order 4(c) 0(a) 1(a) 3(b) -> rank 3.
    # q3 (1, b): order 4, 0, 1, 2(b) -> rank 3.   q4 (5, c): lone.
    x = torch.tensor([[3.0], [2.0], [1.0], [1.0], [5.0]])
    labels = ["a", "a", "b", "b", "c"]
    calc = RecallCalculator(ks=(1, 2, 4), metric="dot", device=CPU)
    out = calc.get_accuracy(x, labels, include=("recall_at_1", "recall_at_2", "recall_at_4"))
    assert out == {"recall_at_1": 0.0, "recall_at_2": 0.5, "recall_at_4": 1.0}
    # avg_of_avgs: per class a: hits@2 = (1, 1) -> 1; b: (0, 0) -> 0; mean 0.5.
    calc = RecallCalculator(ks=(2,), metric="dot", device=CPU, avg_of_avgs=True)
    assert calc.get_accuracy(x, labels, include=("recall_at_2",)) == {"recall_at_2": 0.5}


def test_recall_calculator_keeps_huge_labels_apart():
    big = 2**24
    x = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = np.array([big, big + 1, big + 1, big], dtype=np.int64)
    calc = RecallCalculator(ks=(1,), device=CPU)
    out = calc.get_accuracy(x, labels, include=("precision_at_1", "recall_at_1"))
    # Each query's nearest neighbour has the other label: 0 for both metrics. Through a
    # float32 cast the two labels would merge and both metrics would read 1.
    assert out == {"precision_at_1": 0.0, "recall_at_1": 0.0}


def test_recall_calculator_separate_reference():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    ref = torch.tensor([[0.9, 0.1], [0.1, 0.9], [1.0, 1.0]])
    calc = RecallCalculator(ks=(1, 2), device=CPU)
    out = calc.get_accuracy(q, [0, 1], ref, [1, 0, 1], include=("recall_at_1", "recall_at_2"))
    # q0 (1,0): order 0 (label 1), 2, 1 (label 0) -> rank 2. q1: order 1 (label 0), 2 (label 1)
    # -> rank 1.
    assert out == {"recall_at_1": 0.0, "recall_at_2": 0.5}
