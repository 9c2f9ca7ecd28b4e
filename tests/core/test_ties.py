"""Tie-aware results: each metric's value under the tie rule, and its pessimistic and optimistic
values, equal a brute force that enumerates every order of the exactly tied items.

The brute force (independent of recallkit) scores every pair in float64 with the definition's
fixed order (``tests/brute.py``), groups each query's candidates by equal score, and walks every
permutation of every group (the inputs are small); a metric's bounds are its minimum and maximum
over those orders, averaged over the evaluated queries, and a query is *tied* when some metric
takes more than one value.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import recallkit
from tests import brute

KS = (1, 2, 3)
NAMES = (
    *(f"recall@{k}" for k in KS),
    "precision@2",
    "IR-recall@2",
    "MAP@3",
    "MAP@R",
    "R-precision",
)


def _orders(row: np.ndarray, candidates: list[int]):
    """Every order of ``candidates`` by decreasing score, ties in any order."""
    groups = []
    for _, members in itertools.groupby(
        sorted(candidates, key=lambda j: -row[j]), key=lambda j: row[j]
    ):
        groups.append(list(members))
    for choice in itertools.product(*(itertools.permutations(g) for g in groups)):
        yield [j for group in choice for j in group]


def _value(name: str, rel: list[bool], r: int) -> float:
    if name.startswith("recall@"):
        k = int(name.split("@")[1])
        return float(any(rel[: min(k, len(rel))]))
    if name == "precision@2":
        return sum(rel[:2]) / min(2, len(rel))
    if name == "IR-recall@2":
        return sum(rel[:2]) / r
    if name == "MAP@3":
        return brute.ap_at_k(rel, r, 3, "min_k_r")
    top = rel[:r]
    if name == "MAP@R":
        return sum(sum(top[: p + 1]) / (p + 1) for p in range(r) if top[p]) / r
    return sum(top) / r  # R-precision


def _brute(x, labels, metric):
    s = brute.fixed_order_scores64(x, x, metric)
    n = len(x)
    low = {name: [] for name in NAMES}
    high = {name: [] for name in NAMES}
    rule = {name: [] for name in NAMES}
    tied = 0
    for i in range(n):
        candidates = [j for j in range(n) if j != i]
        rel_of = {j: labels[j] == labels[i] for j in candidates}
        r = sum(rel_of.values())
        if r == 0:
            continue
        values = {name: set() for name in NAMES}
        for order in _orders(s[i], candidates):
            rel = [rel_of[j] for j in order]
            for name in NAMES:
                values[name].add(_value(name, rel, r))
        ranked = brute.ranked(s[i], {i})
        rel = [rel_of[j] for j in ranked]
        for name in NAMES:
            low[name].append(min(values[name]))
            high[name].append(max(values[name]))
            rule[name].append(_value(name, rel, r))
        tied += any(len(v) > 1 for v in values.values())
    return (
        {k: float(np.mean(v)) for k, v in rule.items()},
        {k: (float(np.mean(low[k])), float(np.mean(high[k]))) for k in NAMES},
        tied,
    )


def _data(seed: int, n: int = 11, d: int = 3):
    """Rows with few distinct values: many exact ties, duplicates and all-tied rows."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-1, 2, size=(n, d)).astype(np.float32)
    x[x.sum(axis=1) == 0, 0] = 1.0  # no zero rows (cosine)
    x[rng.integers(0, n, n // 3)] = x[0]
    labels = rng.integers(0, 3, n)
    return x, labels


def test_the_issues_example_by_hand():
    # Four identical rows, labels [0, 0, 1, 1], leave-one-out: every candidate ties. The lower
    # index first gives queries 0 and 1 their positive at rank 0, queries 2 and 3 at rank 2.
    x = np.ones((4, 5))
    r = recallkit.recall_at_k(x, x, [0, 0, 1, 1], [0, 0, 1, 1], (1,), query_in_reference=True)
    assert r["recall@1"] == 0.5
    assert r.bounds["recall@1"] == (0.0, 1.0)
    assert r.num_tied == 4
    d = r.to_dict()
    assert d["num_tied"] == 4 and d["bounds"] == {"recall@1": [0.0, 1.0]}


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bounds_and_num_tied_equal_every_tie_order(backend, metric, seed):
    x, labels = _data(seed)
    expected, bounds, tied = _brute(x, labels, metric)
    for chunk_size in (1, 4, None):
        r = recallkit.retrieval_metrics(
            x,
            x,
            labels,
            labels,
            NAMES,
            query_in_reference=True,
            metric=metric,
            chunk_size=chunk_size,
        )
        for name in NAMES:
            assert r[name] == pytest.approx(expected[name], abs=1e-15), name
            low, high = r.bounds[name]
            assert (low, high) == pytest.approx(bounds[name], abs=1e-15), name
        assert r.num_tied == tied


def test_ground_truth_bounds_equal_every_tie_order():
    rng = np.random.default_rng(4)
    s = rng.integers(0, 3, size=(30, 8)).astype(np.float32)
    gt = rng.integers(0, 8, size=30)
    ranks = recallkit.ground_truth_ranks(s, gt, tie_bounds=True)
    for i in range(30):
        positions = set()
        for order in _orders(s[i], list(range(8))):
            positions.add(order.index(int(gt[i])))
        assert ranks.optimistic[i] == min(positions)
        assert ranks.pessimistic[i] == max(positions)
        assert ranks.ranks[i] == brute.gt_rank(s[i], int(gt[i]), set())
    result = recallkit.recall_from_ranks(
        ranks.ranks, [1, 3], optimistic=ranks.optimistic, pessimistic=ranks.pessimistic
    )
    for k in (1, 3):
        assert result.bounds[f"recall@{k}"] == (
            float(np.mean(ranks.pessimistic < k)),
            float(np.mean(ranks.optimistic < k)),
        )
    flips = ((ranks.optimistic < 1) != (ranks.pessimistic < 1)) | (
        (ranks.optimistic < 3) != (ranks.pessimistic < 3)
    )
    assert flips.any() and result.num_tied == int(np.count_nonzero(flips))


def test_ground_truth_from_embeddings_bounds_on_every_back_end(backend):
    x, _ = _data(5, n=10)
    targets = np.arange(10)[::-1].copy()
    s = brute.fixed_order_scores64(x, x, "dot")
    ranks = recallkit.ground_truth_ranks_from_embeddings(
        x, x, targets, metric="dot", tie_bounds=True, chunk_size=3
    )
    for i in range(10):
        positions = {order.index(int(targets[i])) for order in _orders(s[i], list(range(10)))}
        assert (ranks.optimistic[i], ranks.pessimistic[i]) == (min(positions), max(positions))


def test_no_tie_means_equal_bounds():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((40, 8))
    labels = rng.integers(0, 4, 40)
    r = recallkit.retrieval_metrics(x, x, labels, labels, NAMES, query_in_reference=True)
    assert r.num_tied == 0
    assert all(r.bounds[k] == (r[k], r[k]) for k in NAMES)
    assert "num_tied" not in r.to_dict() and "[ties]" not in r.report()
    assert not math.isnan(r["MAP@R"])
