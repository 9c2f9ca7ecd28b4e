"""R-precision, MAP@R, MAP@K and AP@K against the brute force and PML's own values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from recallkit import average_precision_at_k, map_at_k, map_at_r, r_precision
from tests import brute


def _case(rng, n_ref=70, d=4, classes=6):
    x = rng.integers(-1, 2, size=(n_ref, d)).astype(np.float32)
    x[rng.integers(0, n_ref, size=n_ref // 4)] = x[1]
    labels = rng.integers(0, classes, size=n_ref)
    labels[-1] = classes + 5  # a lone query under leave-one-out
    return x, labels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_map_at_r_and_r_precision_against_brute_force(seed, backend):
    rng = np.random.default_rng(seed)
    x, labels = _case(rng)
    s = brute.scores64(x, x, "dot")
    rows = brute.top_r_metrics(s, labels, labels, brute.excluded_sets(len(x), len(x), True))
    ok = [row for row in rows if row[0] > 0]
    assert float(
        map_at_r(x, x, labels, labels, query_in_reference=True, metric="dot", chunk_size=7)
    ) == pytest.approx(np.mean([r[2] for r in ok]), abs=1e-15)
    assert float(
        r_precision(x, x, labels, labels, query_in_reference=True, metric="dot")
    ) == pytest.approx(np.mean([r[1] for r in ok]), abs=1e-15)


@pytest.mark.parametrize("divisor", ["min_k_r", "r", "hits"])
def test_map_at_k_divisors_against_brute_force(divisor, backend):
    rng = np.random.default_rng(4)
    x, labels = _case(rng)
    s = brute.scores64(x, x, "dot")
    excluded = brute.excluded_sets(len(x), len(x), True)
    expected = []
    for i, row in enumerate(s):
        order = brute.ranked(row, excluded[i])
        rel = [labels[j] == labels[i] for j in order]
        if sum(rel):
            expected.append(brute.ap_at_k(rel, sum(rel), 5, divisor))
    got = float(
        map_at_k(x, x, labels, labels, k=5, divisor=divisor, query_in_reference=True, metric="dot")
    )
    assert got == pytest.approx(np.mean(expected), abs=1e-15)


def test_average_precision_divisors_by_hand():
    # Relevant items at ranks 0 and 3 (0-indexed), R = 4, K = 5:
    # precision at them: 1/1 and 2/4 -> sum 1.5.
    ranks = [[0, 3]]
    assert average_precision_at_k(ranks, [4], k=5, divisor="min_k_r").tolist() == [1.5 / 4]
    assert average_precision_at_k(ranks, [4], k=5, divisor="r").tolist() == [1.5 / 4]
    assert average_precision_at_k(ranks, [4], k=5, divisor="hits").tolist() == [1.5 / 2]
    # K = 2: only rank 0 counts -> sum 1; min(K, R) = 2; R = 4; hits = 1.
    assert average_precision_at_k(ranks, [4], k=2, divisor="min_k_r").tolist() == [0.5]
    assert average_precision_at_k(ranks, [4], k=2, divisor="r").tolist() == [0.25]
    assert average_precision_at_k(ranks, [4], k=2, divisor="hits").tolist() == [1.0]
    # A perfect ranking scores 1 under min(K, R) even when R > K.
    assert average_precision_at_k([[0, 1, 2]], [9], k=3).tolist() == [1.0]
    with pytest.raises(ValueError, match="'divisor' parameter"):
        average_precision_at_k(ranks, k=2, divisor="interpolated")


def test_pml_values_match_on_tie_free_data():
    # Float data without ties: PML's MAP@R / R-precision (faiss k-NN) equal recallkit's.
    rng = np.random.default_rng(7)
    x = rng.standard_normal((120, 8)).astype(np.float32)
    labels = rng.integers(0, 12, size=120)
    calc = AccuracyCalculator(
        include=("mean_average_precision_at_r", "r_precision"),
        k="max_bin_count",
        device=torch.device("cpu"),
    )
    pml = calc.get_accuracy(torch.from_numpy(x), torch.from_numpy(labels))
    assert float(
        map_at_r(x, x, labels, labels, query_in_reference=True, metric="euclidean")
    ) == pytest.approx(pml["mean_average_precision_at_r"], abs=1e-12)
    assert float(
        r_precision(x, x, labels, labels, query_in_reference=True, metric="euclidean")
    ) == pytest.approx(pml["r_precision"], abs=1e-12)
