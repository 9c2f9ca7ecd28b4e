"""Arrays one tile pass hands on to the next (``recallkit.engine.scratch``): each taken by one
pass at a time, at most ``LIMIT`` bytes kept, and nothing a pass computes depends on what its
arrays held (values against the float64 brute force of tests/brute.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import recallkit
from recallkit.engine import cpu, scratch
from tests import brute


@pytest.fixture(autouse=True)
def empty_pool():
    scratch.clear()
    yield
    scratch.clear()


def test_an_array_given_back_is_taken_once_by_its_shape_and_type():
    a = np.empty((3, 4), dtype=np.float32)
    scratch.give(a)
    assert scratch.held() == 48
    assert scratch.empty((3, 4), np.int32) is not a  # another type
    assert scratch.empty((4, 3), np.float32) is not a  # another shape
    assert scratch.empty((3, 4), np.float32) is a
    assert scratch.held() == 0
    assert scratch.empty((3, 4), np.float32) is not a  # taken: not handed out twice
    b = np.full(5, 9, dtype=np.int64)
    scratch.give(b)
    z = scratch.zeros(5, np.int64)
    assert z is b and np.array_equal(z, np.zeros(5, dtype=np.int64))


def test_views_and_strided_arrays_are_not_kept():
    base = np.empty((4, 6), dtype=np.float64)
    scratch.give(base[1:], base[:, ::2], None, np.empty(0))
    assert scratch.held() == 0
    scratch.give(base)
    assert scratch.held() == 192


def test_the_pool_keeps_at_most_its_limit_dropping_the_oldest(monkeypatch):
    monkeypatch.setattr(scratch, "LIMIT", 3000)
    first, second, third = (np.empty(125 + i, dtype=np.float64) for i in range(3))
    scratch.give(first, second)
    assert scratch.held() == 1000 + 1008
    scratch.give(third)  # 3024 bytes: the first given goes
    assert scratch.held() == 1008 + 1016
    assert scratch.empty(125, np.float64) is not first
    assert scratch.empty(126, np.float64) is second
    scratch.give(np.empty(376, dtype=np.float64))  # more than the limit alone: not kept
    assert scratch.held() == 1016
    scratch.clear()
    assert scratch.held() == 0 and scratch.empty(127, np.float64) is not third


NAMES = ["recall@1", "recall@4", "MAP@R", "R-precision"]


def _clusters(seed: int, n: int, classes: int, d: int = 16):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centres = rng.standard_normal((classes, d))
    x = (centres[labels] + 1.6 * rng.standard_normal((n, d))).astype(np.float32)
    x[rng.integers(0, n, 8)] = x[3]  # equal rows: ties at every score they take
    return x, labels


def _poison() -> list[int]:
    """Fill every array the pool holds with what would corrupt a pass that read it: scores at
    ``+inf``, counts, columns and fills far out of range. Returns their ids."""
    ids = []
    for arrays in scratch._free.values():
        for a in arrays:
            a.fill(np.inf if a.dtype.kind == "f" else 10**6)
            ids.append(id(a))
    return ids


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_a_pass_reads_nothing_its_arrays_held(metric, monkeypatch):
    """The ranked lists (recall@K, MAP@R, R-precision in one pass) and the thresholds' windows
    (``recall_at_k``) of a call whose arrays were taken poisoned from an earlier call are the
    brute force's, and those arrays are back in the pool afterwards."""
    monkeypatch.setattr(cpu, "TILE", 256)  # a thousand items make four tiles a side
    x, labels = _clusters(1, 1000, 20)
    n = len(x)
    s = brute.fixed_order_scores64(x, x, metric)
    excluded = brute.excluded_sets(n, n, query_in_reference=True)
    ranks = brute.first_hit_ranks(s, labels, labels, excluded)
    top = brute.top_r_metrics(s, labels, labels, excluded)
    for _ in range(3):  # the first call fills the pool; the later ones take from it, poisoned
        ids = _poison()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = recallkit.retrieval_metrics(
                x, x, labels, labels, NAMES, metric=metric, query_in_reference=True
            )
            counted = recallkit.recall_at_k(
                x, x, labels, labels, [1, 4], metric=metric, query_in_reference=True
            )
        assert np.array_equal(got.first_hit_ranks, ranks)
        for k in (1, 4):
            want = np.where(ranks >= 0, (ranks < k).astype(float), np.nan)
            assert np.array_equal(got.per_query[f"recall@{k}"], want, equal_nan=True)
            assert np.array_equal(counted.per_query[f"recall@{k}"], want, equal_nan=True)
        assert np.array_equal(got.per_query["R-precision"], [t[1] for t in top], equal_nan=True)
        assert np.array_equal(got.per_query["MAP@R"], [t[2] for t in top], equal_nan=True)
        kept = {id(a) for arrays in scratch._free.values() for a in arrays}
        assert kept and set(ids) <= kept
