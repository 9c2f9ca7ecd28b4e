"""Exact at every magnitude: rows whose norms span the whole range of their type rank exactly as
the definition says, whatever rows share a chunk, on the numba tiles and on the torch path.

The reference is independent of recallkit (``tests/brute.py``): the exact score as
:mod:`recallkit.engine.exact` defines it (float64 products each rounded, summed in index order,
``sq(x) = dot(x, x)``, cosine ``dot / (sqrt(sq(q)) sqrt(sq(r)))``, euclidean ``2 dot - sq(r)``;
under cosine a float64 row whose largest magnitude lies outside ``[2**-500, 2**500]`` is first
multiplied by the power of two that brings it to ``[0.5, 1)``), then a full stable sort on
``(-score, index)``. Each case mixes rows of tiny and huge norm in alternate order, so that chunks
of 1, 2, 3 and the default size group them differently.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from recallkit import (
    ground_truth_ranks,
    ground_truth_ranks_from_embeddings,
    map_at_k,
    map_at_r,
    nearest_neighbors,
    recall_at_k,
)
from tests import brute

CHUNKS = (None, 1, 2, 3)
METRICS = ("cosine", "dot", "euclidean")
# log10 of the row norms each case spans: float64 dot/euclidean stay below the documented
# 2**400 limit on every entry; cosine takes any finite row; float32 spans its normal range.
SPANS = {
    (np.float64, "cosine"): (-300.0, 300.0),
    (np.float64, "dot"): (-300.0, 120.0),
    (np.float64, "euclidean"): (-300.0, 120.0),
    (np.float32, "cosine"): (-38.0, 38.0),
    (np.float32, "dot"): (-38.0, 38.0),
    (np.float32, "euclidean"): (-38.0, 38.0),
}


# ----------------------------------------------------------------------------------------------
# The independent reference.


def _prescaled(x: np.ndarray) -> np.ndarray:
    """Cosine rows: float64 rows of largest magnitude outside [2**-500, 2**500] times the power
    of two that brings that magnitude into [0.5, 1) (exact)."""
    if x.dtype != np.float64:
        return x.astype(np.float64)
    out = x.copy()
    for i, row in enumerate(x):
        top = np.abs(row).max()
        if top > 0 and (top < 2.0**-500 or top > 2.0**500):
            _, exponent = np.frexp(top)
            out[i] = np.ldexp(row, -int(exponent))
    return out


def exact_scores(query: np.ndarray, reference: np.ndarray, metric: str) -> np.ndarray:
    """The definition's float64 scores (:func:`tests.brute.fixed_order_scores64`), cosine rows
    prescaled first."""
    if metric == "cosine":
        query, reference = _prescaled(query), _prescaled(reference)
    with np.errstate(under="ignore"):
        return brute.fixed_order_scores64(query, reference, metric)


def order(row: np.ndarray) -> list[int]:
    """Indices best first: higher score, then lower index."""
    return sorted(range(len(row)), key=lambda j: (-row[j], j))


def first_hits(s: np.ndarray, q_labels, r_labels) -> list[int]:
    out = []
    for i, row in enumerate(s):
        ranked = order(row)
        hits = [p for p, j in enumerate(ranked) if r_labels[j] == q_labels[i]]
        out.append(hits[0] if hits else -1)
    return out


def ap_at_r(s: np.ndarray, q_labels, r_labels) -> list[float]:
    """AP@R per query ``(1/R) Σ_{p < R, rel(p)} hits(p)/(p+1)``; NaN for a lone query."""
    out = []
    for i, row in enumerate(s):
        rel = [r_labels[j] == q_labels[i] for j in order(row)]
        big_r = sum(rel)
        if big_r == 0:
            out.append(np.nan)
            continue
        total = sum(sum(rel[: p + 1]) / (p + 1) for p in range(big_r) if rel[p])
        out.append(total / big_r)
    return out


def gt_ranks(s: np.ndarray, targets) -> list[int]:
    return [order(row).index(int(t)) for row, t in zip(s, targets, strict=True)]


# ----------------------------------------------------------------------------------------------
# Data: alternating tiny and huge rows, exact power-of-two copies, several labels.


def _rows(rng, n: int, d: int, dtype, span: tuple[float, float]) -> np.ndarray:
    """``n`` random directions with norms spread over ``10**span`` (the ends included),
    alternately from the low and the high half, so neighbouring rows differ most."""
    low, high = span
    exps = np.concatenate([[low, high], rng.uniform(low, high, n - 2)])
    half = (low + high) / 2
    small = sorted(e for e in exps if e <= half)
    large = sorted((e for e in exps if e > half), reverse=True)
    mixed = [x for pair in zip(small, large, strict=False) for x in pair]
    mixed += small[len(large) :] + large[len(small) :]
    direction = rng.standard_normal((n, d))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    with np.errstate(under="ignore"):
        x = direction * (10.0 ** np.array(mixed))[:, None]
        return x.astype(dtype)


def _case(seed: int, dtype, metric: str):
    rng = np.random.default_rng(seed)
    span = SPANS[(dtype, metric)]
    query = _rows(rng, 7, 3, dtype, span)
    reference = _rows(rng, 24, 3, dtype, span)
    # Exact copies of a query among the references, and power-of-two multiples of a reference
    # (a tie under cosine, a different magnitude under dot and euclidean).
    reference[5] = query[2]
    factor = 2.0**-60 if dtype == np.float32 else 2.0**-200
    with np.errstate(under="ignore"):
        reference[9] = (reference[3].astype(np.float64) * factor).astype(dtype)
        reference[17] = reference[8] * dtype(2.0**20)
    q_labels = rng.integers(0, 3, len(query))
    r_labels = rng.integers(0, 3, len(reference))
    return query, reference, q_labels, r_labels


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_every_magnitude_ranks_as_the_definition(dtype, metric, backend):
    for seed in range(3):
        query, reference, q_labels, r_labels = _case(seed, dtype, metric)
        assert np.isfinite(reference).all() and (np.abs(reference).max(axis=1) > 0).all()
        s = exact_scores(query, reference, metric)
        assert np.isfinite(s).all()
        hits = first_hits(s, q_labels, r_labels)
        ap = ap_at_r(s, q_labels, r_labels)
        targets = np.arange(len(query)) * 3 % len(reference)
        want_gt = gt_ranks(s, targets)
        k = 10
        want_index = np.array([order(row)[:k] for row in s])
        want_score = np.take_along_axis(s, want_index, axis=1)
        for chunk in CHUNKS:
            options = dict(metric=metric, chunk_size=chunk)
            where = f"seed {seed}, chunk_size {chunk}"
            result = recall_at_k(query, reference, q_labels, r_labels, ks=(1, 5), **options)
            assert result.first_hit_ranks.tolist() == hits, where
            per_query = map_at_r(query, reference, q_labels, r_labels, **options).per_query
            np.testing.assert_array_equal(per_query["MAP@R"], ap, err_msg=where)
            index, score = nearest_neighbors(query, reference, k, **options)
            np.testing.assert_array_equal(index, want_index, err_msg=where)
            np.testing.assert_array_equal(score, want_score, err_msg=where)
            ranks = ground_truth_ranks_from_embeddings(query, reference, targets, **options)
            assert ranks.tolist() == want_gt, where


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_score_matrix_of_every_magnitude(dtype):
    # Matrices whose entries span the type's range (and its subnormals): ranks by value alone.
    rng = np.random.default_rng(7)
    span = (-300, 300) if dtype == np.float64 else (-40, 38)
    values = rng.choice([-1.0, 1.0], (6, 40)) * 10.0 ** rng.uniform(*span, (6, 40))
    values[:, 10] = values[:, 3]  # exact ties
    values[:, 11] = 0.0
    values[:, 12] = -0.0
    s = values.astype(dtype)
    targets = np.array([3, 10, 11, 12, 0, 39])
    assert ground_truth_ranks(s, targets).tolist() == gt_ranks(s.astype(np.float64), targets)


def test_float64_dot_scores_in_the_subnormal_range(backend):
    # Queries near 1e-300 against references near 1e-12: exact scores are subnormal (a few
    # significant bits, many exact ties), below what a purely relative bound can cover.
    for seed in range(20):
        rng = np.random.default_rng(seed)
        directions = rng.standard_normal((30, 3))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
        query = directions[:6] * 10.0 ** rng.uniform(-310, -295, (6, 1))
        reference = directions[6:] * 10.0 ** rng.uniform(-16, -8, (24, 1))
        q_labels = rng.integers(0, 3, 6)
        r_labels = rng.integers(0, 3, 24)
        s = exact_scores(query, reference, "dot")
        assert (np.abs(s) < np.finfo(np.float64).tiny).mean() > 0.5 and len(np.unique(s)) > 12
        want_index = np.array([order(row) for row in s])
        for chunk in (None, 1):
            options = dict(metric="dot", chunk_size=chunk)
            index, score = nearest_neighbors(query, reference, 24, **options)
            np.testing.assert_array_equal(index, want_index, err_msg=f"seed {seed}")
            np.testing.assert_array_equal(score, np.take_along_axis(s, want_index, axis=1))
            result = recall_at_k(query, reference, q_labels, r_labels, ks=(1,), **options)
            assert result.first_hit_ranks.tolist() == first_hits(s, q_labels, r_labels)


# ----------------------------------------------------------------------------------------------
# The reproducers.


@pytest.mark.parametrize("chunk", CHUNKS)
def test_float32_euclidean_tiny_query_against_huge_reference(chunk, backend):
    reference = np.array([[1e19], [1.0], [3.0]], dtype=np.float32)
    query = np.array([[1e-20], [2.0]], dtype=np.float32)
    options = dict(metric="euclidean", chunk_size=chunk)
    # By hand, -|q - r|²: query 0 (1e-20) is nearest r1 (label 0), then r2, then r0 (label 0);
    # query 1 (2.0) is equidistant from r1 (label 0) and r2 (label 1): r1 first (lower index).
    result = recall_at_k(query, reference, [0, 1], [0, 0, 1], ks=(1,), **options)
    assert result.first_hit_ranks.tolist() == [0, 1]
    index, score = nearest_neighbors(query[:1], reference, 3, **options)
    assert index.tolist() == [[1, 2, 0]]
    # 2 q·r - |r|² in float64 of the float32 inputs: 2e-20 - 1, 6e-20 - 9, 2e-20·1e19 - 1e38.
    q0, big = float(np.float32(1e-20)), float(np.float32(1e19))
    assert score.tolist() == [[2 * q0 - 1.0, 2 * q0 * 3.0 - 9.0, 2 * q0 * big - big * big]]
    # Query 0 alone: its ranking r1, r2, r0 has relevance [1, 0, 1] and R = 2.
    one = dict(query=query[:1], reference=reference, query_labels=[0])
    one["reference_labels"] = [0, 0, 1]
    assert float(map_at_k(**one, k=1, **options)) == 1.0
    assert float(map_at_k(**one, k=3, **options)) == (1.0 + 2.0 / 3.0) / 2.0
    assert float(map_at_r(**one, **options)) == 0.5
    # With r1 the only relevant item (R = 1), the perfect ranking scores 1 on both.
    one["reference_labels"] = [1, 0, 1]
    assert float(map_at_r(**one, **options)) == 1.0
    assert float(map_at_k(**one, k=3, **options)) == 1.0


def test_float64_dot_tiny_and_huge_queries_in_one_chunk(backend):
    rng = np.random.default_rng(2024)
    for trial in range(200):
        directions = rng.standard_normal((8, 4))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
        query = directions[:2] * np.array([[1e-99], [1e71]])
        reference = directions[2:] * np.array([[1e116], [1e37], [1e116], [1e37], [1e37], [1e116]])
        q_labels = rng.integers(0, 2, 2)
        r_labels = rng.integers(0, 2, 6)
        s = exact_scores(query, reference, "dot")
        want = first_hits(s, q_labels, r_labels)
        for chunk in (None, 1):  # both rows in one chunk, and each alone
            result = recall_at_k(
                query, reference, q_labels, r_labels, ks=(1,), metric="dot", chunk_size=chunk
            )
            assert result.first_hit_ranks.tolist() == want, (trial, chunk)


@pytest.mark.parametrize("metric", METRICS)
def test_float64_beyond_2_400_is_refused_under_dot_and_euclidean(metric):
    reference = np.array([[1.0, 0.0], [2.0**401, 0.0]])
    query = np.array([[1.0, 1.0]])
    if metric == "cosine":  # any finite magnitude: r1 = (1, 0) direction, tied with r0
        index, _ = nearest_neighbors(query, reference, 2, metric=metric)
        assert index.tolist() == [[0, 1]]
        return
    with pytest.raises(ValueError, match=r"'reference' parameter of nearest_neighbors .*2\*\*400"):
        nearest_neighbors(query, reference, 2, metric=metric)
    with pytest.raises(ValueError, match=r"'query' parameter of recall_at_k .*row 0"):
        recall_at_k(reference[1:] * -1, query, [0], [0], ks=1, metric=metric)
    # 2**400 itself is inside the limit: first under dot, furthest under euclidean.
    reference[1, 0] = 2.0**400
    index, _ = nearest_neighbors(query, reference, 2, metric=metric)
    assert index.tolist() == ([[1, 0]] if metric == "dot" else [[0, 1]])


@pytest.mark.parametrize("chunk", CHUNKS)
def test_cosine_row_scaled_by_2_minus_600(chunk, backend):
    rng = np.random.default_rng(600)
    query = rng.standard_normal((4, 5))
    reference = rng.standard_normal((12, 5))
    labels = [0, 1, 2, 0]
    r_labels = rng.integers(0, 3, 12)
    tiny_query = query.copy()
    tiny_query[1] *= 2.0**-600
    tiny_reference = reference.copy()
    tiny_reference[[2, 7]] *= 2.0**-600
    assert (tiny_query[1] != 0).all() and (tiny_query[1] ** 2 == 0).all()  # squares underflow
    options = dict(metric="cosine", chunk_size=chunk)
    s = exact_scores(query, reference, "cosine")
    want = first_hits(s, labels, r_labels)
    index, score = nearest_neighbors(query, reference, 12, **options)
    assert index.tolist() == [order(row) for row in s]
    for q, r in ((tiny_query, reference), (query, tiny_reference), (tiny_query, tiny_reference)):
        result = recall_at_k(q, r, labels, r_labels, ks=(1,), **options)
        assert result.first_hit_ranks.tolist() == want
        i, v = nearest_neighbors(q, r, 12, **options)
        np.testing.assert_array_equal(i, index)
        np.testing.assert_array_equal(v, score)  # the scale is exact: the same bits


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_no_floating_point_warning_at_extreme_magnitudes(dtype, metric):
    # No filter value overflows or underflows into a warning (numpy's matmul in the tiles warns
    # on an overflow or an inf - inf; a warning here is an error).
    query, reference, q_labels, r_labels = _case(0, dtype, metric)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recall_at_k(query, reference, q_labels, r_labels, ks=(1,), metric=metric)
        nearest_neighbors(query, reference, 5, metric=metric)


# ----------------------------------------------------------------------------------------------
# Every precision accepts what float32 accepts, with the same values.

LOW = ("bfloat16", "int8")


@pytest.mark.parametrize("metric", METRICS)
def test_every_precision_ranks_every_magnitude_as_the_definition(metric):
    """The CPU's low-precision filters (whose scaling cannot hold every row: those rows run in
    float32) give the definition's values at every entry point: the label form, the ground-truth
    form and nearest neighbours."""
    from recallkit import retrieval_metrics

    query, reference, q_labels, r_labels = _case(0, np.float32, metric)
    s = exact_scores(query, reference, metric)
    hits = first_hits(s, q_labels, r_labels)
    targets = np.arange(len(query)) * 3 % len(reference)
    want_gt = gt_ranks(s, targets)
    want_index = np.array([order(row)[:6] for row in s])
    for precision in LOW:
        for chunk in (None, 2):
            options = dict(metric=metric, chunk_size=chunk, precision=precision)
            where = f"{precision}, chunk_size {chunk}"
            result = retrieval_metrics(
                query, reference, q_labels, r_labels, ["recall@1"], **options
            )
            assert result.first_hit_ranks.tolist() == hits, where
            index, score = nearest_neighbors(query, reference, 6, **options)
            np.testing.assert_array_equal(index, want_index, err_msg=where)
            np.testing.assert_array_equal(score, np.take_along_axis(s, want_index, axis=1))
            ranks = ground_truth_ranks_from_embeddings(query, reference, targets, **options)
            assert ranks.tolist() == want_gt, where


@pytest.mark.parametrize("precision", ("float32", *LOW))
def test_euclidean_query_of_norm_2e_minus_19_in_every_precision(precision):
    # Its euclidean filter row carries -c/s with c near 2**62 (the query's scale): beyond what
    # a low-precision side holds, so that row's filter runs in float32; the ranks are the
    # definition's in every precision.
    rng = np.random.default_rng(19)
    reference = rng.standard_normal((40, 8)).astype(np.float32)
    query = rng.standard_normal((3, 8))
    query = (query / np.linalg.norm(query, axis=1, keepdims=True) * 2e-19).astype(np.float32)
    s = exact_scores(query, reference, "euclidean")
    want = np.array([order(row) for row in s])
    options = dict(metric="euclidean", precision=precision)
    index, score = nearest_neighbors(query, reference, 40, **options)
    np.testing.assert_array_equal(index, want)
    np.testing.assert_array_equal(score, np.take_along_axis(s, want, axis=1))
    targets = np.array([5, 17, 33])
    ranks = ground_truth_ranks_from_embeddings(query, reference, targets, **options)
    assert ranks.tolist() == gt_ranks(s, targets)
