"""Lists read for their relevance alone (``engine.Request.by_relevance``; the CPU back end's
``order_rows`` with ``relevance``): a run of items the filter cannot order, all relevant or all
not, keeps the filter's order. Every value, tie bound and first-hit rank is that of exact lists:
against the float64 brute force of tests/brute.py and the same call with exact lists."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

import recallkit
from recallkit._labels import form
from recallkit.engine import cpu_kernels as kernels
from tests import brute


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_runs_of_one_relevance_are_settled_by_hand(dtype):
    """Row 0 (code 7), filter scores 5, 4.9, 4.85 | 3, 2.95 | 1, 0.9 with a gap of 0.2: three
    runs of near items, each near the next (one run of flags). Codes 7 7 7 (all relevant):
    settled; 7 2 (mixed): kept near; 2 3 (none relevant): settled. Row 1 holds nothing; row 2
    (code 3) one item, near nothing."""
    starts = np.array([0, 7, 7, 8], dtype=np.int64)
    filt = np.array([2.95, 5.0, 1.0, 4.85, 3.0, 0.9, 4.9, 8.0], dtype=dtype)
    code_of = np.array([2, 7, 2, 7, 7, 3, 7, 3], dtype=np.int64)  # each item's column's code
    cols = np.array([5, 0, 3, 1, 2, 4, 6, 7], dtype=np.int64)
    r_codes = np.empty(8, dtype=np.int64)
    r_codes[cols] = code_of
    q_codes = np.array([7, 0, 3], dtype=np.int64)
    gap = np.full(3, 0.2)
    order, near = kernels.order_rows(starts, filt, gap)
    assert order[:7].tolist() == [1, 6, 3, 4, 0, 2, 5] and near[:7].all() and not near[7]
    again, settled = kernels.order_rows(starts, filt, gap, (cols, q_codes, r_codes))
    assert np.array_equal(again, order)
    assert np.flatnonzero(settled).tolist() == [0, 4]  # the run 3 (code 7), 2.95 (code 2)


NAMES = ["recall@1", "recall@4", "MAP@R", "R-precision", "nDCG@10", "MRR"]


def _tied(seed: int, n: int = 1500, d: int = 6):
    """Class clusters rounded to quarters (many equal scores, near runs of every mixture) and
    some rows repeated."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 25, n)
    centres = rng.standard_normal((25, d))
    x = np.round(4 * (centres[labels] + 0.9 * rng.standard_normal((n, d)))) / 4
    x[rng.integers(0, n, 40)] = x[rng.integers(0, n, 40)]
    x[np.abs(x).sum(axis=1) == 0, 0] = 1.0  # cosine needs no zero row
    return x.astype(np.float32), labels


@pytest.mark.parametrize("metric", ["cosine", "euclidean", "dot"])
def test_lists_read_for_relevance_give_the_values_of_exact_lists(metric, monkeypatch):
    settled = []
    order_rows = kernels.order_rows

    def spy(starts, filt, gap, relevance=None):
        got = order_rows(starts, filt, gap, relevance)
        if relevance is not None:
            settled.append(int(order_rows(starts, filt, gap)[1].sum() - got[1].sum()))
        return got

    monkeypatch.setattr(kernels, "order_rows", spy)
    x, labels = _tied(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = recallkit.retrieval_metrics(
            x, x, labels, labels, NAMES, metric=metric, query_in_reference=True
        )
        asked = form.request
        monkeypatch.setattr(
            form, "request", lambda *a, **k: replace(asked(*a, **k), by_relevance=False)
        )
        exact = recallkit.retrieval_metrics(
            x, x, labels, labels, NAMES, metric=metric, query_in_reference=True
        )
    assert len(settled) == 1 and settled[0] > 0  # the path ran, once, and settled items
    assert got.num_tied > 0  # ties between relevant and other items: bounds to agree on
    assert got.to_dict() == exact.to_dict()
    for name in NAMES:
        assert np.array_equal(got.per_query[name], exact.per_query[name], equal_nan=True)
    n = len(x)
    s = brute.fixed_order_scores64(x, x, metric)
    excluded = brute.excluded_sets(n, n, query_in_reference=True)
    assert np.array_equal(got.first_hit_ranks, brute.first_hit_ranks(s, labels, labels, excluded))
    lists = brute.relevance_lists(s, labels, labels, excluded)
    for name, key, k in [("MAP@R", "map_at_r", None), ("R-precision", "r_precision", None)]:
        want = [brute.metric(key, k, rel, r, c) for rel, r, c in lists]
        assert np.array_equal(got.per_query[name], want, equal_nan=True)
