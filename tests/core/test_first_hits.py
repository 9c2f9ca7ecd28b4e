"""First-hit ranks read from the ranked lists of the same pass (``recallkit._labels.first_hits``):
the definition's values (the float64 brute force of tests/brute.py), the same result as the
count in the pass, the fields read by hand, the choice of path, and the engine's helpers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import recallkit
from recallkit import engine
from recallkit._labels import first_hits, form
from recallkit.metrics import parse
from recallkit.options import Options
from tests import brute

NAMES = ["recall@1", "recall@2", "recall@4", "MAP@R", "R-precision"]


@pytest.fixture
def from_lists(monkeypatch):
    """Every call with lists and first-hit ranks reads the ranks from its lists; returns the
    rows each count of the queries the lists miss took."""
    monkeypatch.setattr(first_hits, "MIN_QUERIES", 0)
    monkeypatch.setattr(first_hits, "SAMPLE", 4)
    monkeypatch.setattr(first_hits, "MISS_LIMIT", 1.0)
    counted = first_hits.counted
    seen: list[int] = []

    def spy(problem, rows):
        seen.append(len(rows))
        return counted(problem, rows)

    monkeypatch.setattr(first_hits, "counted", spy)
    return seen


def _data(seed: int, n: int, d: int = 4):
    """Small integers: exact scores, many ties, duplicate rows; labels with a lone one."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    x[rng.integers(0, n, 6)] = x[2]
    x[:, 0] = 3.0  # no zero row (cosine)
    labels = rng.integers(0, 6, n)
    labels[-1] = 99  # a lone query with leave-one-out
    return x, labels


def _call(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return recallkit.retrieval_metrics(*args, NAMES, **kwargs)


def _check(got, s, q_labels, r_labels, excluded):
    ranks = brute.first_hit_ranks(s, q_labels, r_labels, excluded)
    assert np.array_equal(got.first_hit_ranks, ranks)
    evaluated = ranks >= 0
    for k in (1, 2, 4):
        want = np.where(evaluated, (ranks < k).astype(float), np.nan)
        assert np.array_equal(got.per_query[f"recall@{k}"], want, equal_nan=True)
    top = brute.top_r_metrics(s, q_labels, r_labels, excluded)
    assert np.array_equal(got.per_query["R-precision"], [t[1] for t in top], equal_nan=True)
    assert np.array_equal(got.per_query["MAP@R"], [t[2] for t in top], equal_nan=True)


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("exact_pairs", [first_hits.EXACT_PAIRS, 0])
def test_ranks_from_lists_are_the_definition(backend, metric, exact_pairs, from_lists, monkeypatch):
    monkeypatch.setenv("RECALLKIT_BACKEND", backend)
    monkeypatch.setattr(first_hits, "EXACT_PAIRS", exact_pairs)  # 0: the misses in a pass
    for seed in range(3):
        x, labels = _data(seed, 70)
        n = len(x)
        s = brute.fixed_order_scores64(x, x, metric)
        got = _call(x, x, labels, labels, metric=metric, query_in_reference=True)
        _check(got, s, labels, labels, brute.excluded_sets(n, n, query_in_reference=True))
        ids = np.arange(n) % 23
        got = _call(x, x, labels, labels, metric=metric, query_ids=ids, reference_ids=ids)
        _check(got, s, labels, labels, brute.excluded_sets(n, n, query_ids=ids, reference_ids=ids))
        q, q_labels = x[:40] + 1, labels[:40] % 4  # queries of their own
        got = _call(q, x, q_labels, labels, metric=metric)
        s = brute.fixed_order_scores64(q, x, metric)
        _check(got, s, q_labels, labels, brute.excluded_sets(40, n))
    assert from_lists and sum(from_lists) > 0  # queries whose lists hold no positive


def test_reading_the_lists_gives_the_counts_result(from_lists, monkeypatch):
    """The whole result (values, tie bounds, tied queries, ranks) of both paths, on ties."""
    x, labels = _data(7, 90)
    ids = np.arange(90) % 31
    for kwargs in ({"query_in_reference": True}, {"query_ids": ids, "reference_ids": ids}):
        read = _call(x, x, labels, labels, **kwargs)
        monkeypatch.setattr(first_hits, "MIN_QUERIES", 10**9)
        counted = _call(x, x, labels, labels, **kwargs)
        monkeypatch.setattr(first_hits, "MIN_QUERIES", 0)
        assert read.to_dict() == counted.to_dict()
        assert read.bounds == counted.bounds
        assert np.array_equal(read.tied, counted.tied)
        assert read.tied.any()


def test_fields_read_by_hand():
    """Row 0: its first relevant item third, tied with the items around it and one in the
    tail; row 1: its first item; row 2: lone (no relevant item); row 3: tied with the next
    item only; row 4: tied with the tail only."""
    index = np.array([[3, 1, 5, 8], [0, 2, -1, -1], [6, 7, -1, -1], [2, 4, 6, 8], [5, 6, -1, -1]])
    inf = -np.inf
    score = np.array(
        [
            [0.9, 0.5, 0.5, 0.5],
            [0.8, 0.7, inf, inf],
            [0.4, 0.3, inf, inf],
            [0.9, 0.6, 0.6, 0.2],
            [0.9, 0.5, inf, inf],
        ]
    )
    relevant = np.array(
        [[0, 0, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 0, 1], [0, 1, 0, 0]], dtype=bool
    )
    tail_index = np.array([[9], [-1], [-1], [-1], [7]])
    tail_score = np.array([[0.5], [inf], [inf], [inf], [0.5]])
    tail_relevant = np.array([[1], [0], [0], [0], [0]], dtype=bool)
    part = engine.ChunkResult(
        0,
        5,
        top_index=torch.from_numpy(index),
        top_score=torch.from_numpy(score),
        tail_index=torch.from_numpy(tail_index),
        tail_score=torch.from_numpy(tail_score),
    )

    class Problem:
        num_relevant = np.array([3, 1, 0, 2, 1])

    lists = (index, score, relevant, tail_index, tail_relevant)
    out = first_hits.read(Problem(), 0, part, lists)
    assert out.ranks.tolist() == [[2], [0], [-1], [1], [1]]
    assert out.ties_before.tolist() == [[1], [0], [0], [0], [0]]
    assert out.ties.tolist() == [[3], [0], [0], [1], [1]]  # row 0: four items of 0.5, less itself
    assert out.tied_positives.tolist() == [2, 0, 0, 0, 0]


def _problem(x, labels):
    return form.build(
        "retrieval_metrics",
        x,
        x,
        labels,
        labels,
        query_in_reference=True,
        query_ids=None,
        reference_ids=None,
        options=Options(),
    )


def test_the_path_is_chosen_by_the_sample():
    """Trained embeddings (each query's best positive within its first R items) read the lists;
    untrained ones (most first hits beyond R) count in the pass; so do a call without lists
    and one of fewer queries than ``MIN_QUERIES``."""
    rng = np.random.default_rng(0)
    n = first_hits.MIN_QUERIES + 100
    labels = rng.integers(0, 20, n)
    centres = rng.standard_normal((20, 16))
    x = (centres[labels] + 0.05 * rng.standard_normal((n, 16))).astype(np.float32)
    problem = _problem(x, labels)
    ask = _ask(problem, NAMES)
    assert first_hits.worth_it(problem, ask)
    # Untrained: random embeddings, 100 labels of about 11 items (each query's best positive
    # within its first R items for about one query in ten).
    noise = rng.standard_normal((n, 16)).astype(np.float32)
    untrained = _problem(noise, rng.integers(0, 100, n))
    assert not first_hits.worth_it(untrained, _ask(untrained, NAMES))
    assert not first_hits.worth_it(problem, _ask(problem, ["recall@1"]))
    small = _problem(x[:500], labels[:500])
    assert not first_hits.worth_it(small, _ask(small, NAMES))


def _ask(problem, names):
    metrics = parse(names, "retrieval_metrics")
    return form.request(
        metrics, problem.positives, problem.exclusions, problem.num_relevant, problem.candidates
    )


def test_subsets_of_pairs_and_exclusions():
    pairs = engine.Pairs.from_lists([[4, 7], [], [1], [0, 2, 3]], 4)
    sub = pairs.subset(np.array([3, 0, 1]))
    assert sub.indptr.tolist() == [0, 3, 5, 5]
    assert sub.indices.tolist() == [0, 2, 3, 4, 7]
    excluded = engine.Exclusions(pairs, np.array([5, -1, 5, 2]), np.array([2, 5, 5]))
    part = excluded.subset(np.array([2, 3]))
    assert part.pairs.indptr.tolist() == [0, 1, 4]
    assert part.query_codes.tolist() == [5, 2]
    assert part.reference_codes.tolist() == [2, 5, 5]


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_exact_rows_are_the_definition(backend, metric, monkeypatch):
    monkeypatch.setenv("RECALLKIT_BACKEND", backend)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((30, 9)).astype(np.float32)
    space = engine.prepare(x, x, Options(metric=metric), "f", query_is_reference=True)
    rows = np.array([29, 0, 4, 4])
    got = engine.exact_rows(space, rows).numpy()
    want = brute.fixed_order_scores64(x[rows], x, metric)
    assert np.array_equal(got, want)
    sub = space.subset(rows)
    assert sub.num_query == 4 and not sub.query_is_reference
    assert torch.equal(sub.query.raw, space.query.raw[torch.from_numpy(rows)])


def test_filter_scores_are_a_positive_multiple_of_the_exact_ones():
    rng = np.random.default_rng(4)
    x = rng.integers(-3, 4, size=(40, 6)).astype(np.float32)
    x[:, 0] = 5.0
    space = engine.prepare(x, x, Options(metric="dot"), "f", query_is_reference=True)
    rows = np.array([1, 7, 39])
    got = engine.filter_scores(space, rows).numpy().astype(np.float64)
    exact = brute.fixed_order_scores64(x[rows], x, "dot")
    ratio = got[exact != 0] / exact[exact != 0]
    per_row = (got / np.where(exact != 0, exact, np.nan))[:, :1]
    assert (ratio > 0).all()
    assert np.allclose(got, per_row * exact, rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_every_metric_of_the_registry_from_lists(backend, from_lists, monkeypatch):
    """Every registered metric (those reading first-hit ranks beside those reading lists), on
    exact and often tied scores, is the definition's value with the ranks read from the lists."""
    from tests import registry_cases

    monkeypatch.setenv("RECALLKIT_BACKEND", backend)
    cases = registry_cases.cases((1, 3))
    names = [name for name, _, _ in cases]
    for seed, metric in enumerate(("cosine", "dot", "euclidean")):
        x, labels = _data(seed + 10, 60)
        n = len(x)
        s = brute.fixed_order_scores64(x, x, metric)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = recallkit.retrieval_metrics(
                x, x, labels, labels, names, metric=metric, query_in_reference=True
            )
        lists = brute.relevance_lists(s, labels, labels, brute.excluded_sets(n, n, True))
        for name, family, k in cases:
            want = [brute.metric(family, k, rel, r, c) for rel, r, c in lists]
            assert np.array_equal(got.per_query[name], want, equal_nan=True), (name, metric)
    assert from_lists
