"""recall_at_k against hand-computed cases and the brute force in tests/brute.py."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from recallkit import Result, recall_at_k
from tests import brute


def _rows(rng, count, d, unit):
    """Small-integer rows; with ``unit``, four entries of +-1 (norm 2, so cosine is exact)."""
    if not unit:
        return rng.integers(-1, 2, size=(count, d)).astype(np.float32)
    rows = np.zeros((count, d), dtype=np.float32)
    for row in rows:
        row[rng.choice(d, size=4, replace=False)] = rng.choice([-1.0, 1.0], size=4)
    return rows


def _integer_case(rng, n, m, d, classes, query_in_reference=False, unit=False):
    """Embeddings whose scores are exact in float32 (dot products of small integers, or of
    +-1/2 entries after cosine normalisation), so ties are exact and the brute force agrees."""
    reference = _rows(rng, m, d, unit)
    reference[rng.integers(0, m, size=m // 4)] = reference[0]  # duplicates of one row
    r_labels = rng.integers(0, classes, size=m)
    if query_in_reference:
        return reference[:n], reference, r_labels[:n], r_labels
    query = _rows(rng, n, d, unit)
    q_labels = rng.integers(0, classes + 2, size=n)  # some labels absent: lone queries
    return query, reference, q_labels, r_labels


def test_hand_computed_leave_one_out():
    # Four points on a line, dot product on 1-D "embeddings" with exact ties:
    # rows 0..3 = 1, 1, 2, 0 with labels a, b, a, b.
    # Query 0 (1): scores to 1,2,3 = 1,2,0 -> order 2(a), 1(b), 3(b): first hit rank 0.
    # Query 1 (1): scores to 0,2,3 = 1,2,0 -> order 2(a), 0(a), 3(b): label b first at rank 2.
    # Query 2 (2): scores to 0,1,3 = 2,2,0 -> tie 0 before 1 -> order 0(a): rank 0.
    # Query 3 (0): scores to 0,1,2 all 0 -> order 0(a), 1(b): rank 1.
    x = np.array([[1.0], [1.0], [2.0], [0.0]])
    labels = ["a", "b", "a", "b"]
    r = recall_at_k(x, x, labels, labels, ks=(1, 2, 3), query_in_reference=True, metric="dot")
    assert r.first_hit_ranks.tolist() == [0, 2, 0, 1]
    assert dict(r) == {"recall@1": 2 / 4, "recall@2": 3 / 4, "recall@3": 4 / 4}
    assert list(r) == ["recall@1", "recall@2", "recall@3"]


def test_self_match_not_inferred_from_equal_vectors():
    # Reference row 1 duplicates the query; without any flag it is a real neighbour (a hit).
    q = np.array([[1.0, 0.0]])
    ref = np.array([[0.0, 1.0], [1.0, 0.0]])
    assert recall_at_k(q, ref, [7], [7, 7], ks=(1,))["recall@1"] == 1.0
    # With ids saying reference 1 *is* the query, it is removed and the other one is rank 0.
    r = recall_at_k(q, ref, [7], [7, 7], ks=(1,), query_ids=["x"], reference_ids=["y", "x"])
    assert r.first_hit_ranks.tolist() == [0]


def test_query_in_reference_removes_own_row_only():
    # Query 0 and reference row 1 are identical; only row 0 (the query itself) is removed,
    # so the duplicate at row 1 is the first neighbour.
    x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    r = recall_at_k(x[:1], x, [0], [0, 1, 0], ks=(1, 2), query_in_reference=True)
    assert r.first_hit_ranks.tolist() == [1]


def test_lone_queries_counted_and_excluded():
    q = np.eye(3, dtype=np.float32)
    ref = np.eye(3, dtype=np.float32)
    r = recall_at_k(q, ref, [0, 1, 9], [0, 1, 2], ks=(1,), query_in_reference=False)
    assert r.num_excluded == 1 and r.num_evaluated == 2 and r.num_queries == 3
    assert r["recall@1"] == 1.0
    assert r.first_hit_ranks.tolist() == [0, 0, -1]


def test_all_lone_is_nan_with_warning():
    with pytest.warns(RuntimeWarning, match="all 2 queries are lone"):
        r = recall_at_k(np.eye(2), np.eye(2), [5, 6], [0, 1], ks=(1,), query_in_reference=False)
    assert math.isnan(r["recall@1"])


def test_k_above_reference_is_clamped_with_warning():
    with pytest.warns(UserWarning, match="clamped"):
        r = recall_at_k(
            np.eye(3), np.eye(3), [0, 0, 1], [0, 0, 1], ks=(1, 50), query_in_reference=True
        )
    assert r.effective_ks == (1, 2)
    # Query 2 (label 1) is lone; queries 0 and 1 find each other at some rank < 2.
    assert r["recall@50"] == 1.0 and r.num_excluded == 1


def test_huge_int_labels_are_not_merged():
    # 2**24 and 2**24 + 1 are equal in float32; they must stay distinct classes.
    big = 2**24
    x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    r = recall_at_k(
        x, x, [big, big + 1, big], [big, big + 1, big], ks=(1,), query_in_reference=True
    )
    # Query 0's nearest is row 1 (label big+1): a miss; its own class-mate row 2 is rank 1.
    assert r.first_hit_ranks.tolist() == [1, -1, 1]


def test_tuple_and_string_labels():
    x = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    r = recall_at_k(
        x,
        x,
        [("a", 1), ("a", 1), ("b", 2)],
        [("a", 1), ("a", 1), ("b", 2)],
        ks=(1,),
        query_in_reference=True,
    )
    assert r.first_hit_ranks.tolist() == [0, 0, -1]


def test_report_and_dict():
    x = np.array([[1.0], [1.0], [2.0], [0.0]])
    with pytest.warns(UserWarning, match="clamped"):
        r = recall_at_k(
            x, x, [0, 1, 0, 1], [0, 1, 0, 1], ks=(1, 10), query_in_reference=True, metric="dot"
        )
    assert r.report() == (
        "[evaluation]\n"
        "  num queries:   4\n"
        "  num gallery:   4\n"
        "  embedding_dim: 1\n"
        "\n"
        "[metrics]\n"
        "  recall@1:  0.5000\n"
        "  recall@10: 1.0000\n"
        "\n"
        "[ties] 2 of 4 queries depend on the tie rule (lower reference index first); "
        "pessimistic - optimistic:\n"
        "  recall@1:  0.2500 - 0.7500"
    )
    # Query 2 (score 2) ties rows 0 (its label) and 1 at 2: a hit by the lower index, a miss
    # against it; query 3 (score 0 with everything) finds its positive, row 1, after row 0:
    # a miss by the lower index, a hit in its favour. recall@10 does not depend on ties.
    d = json.loads(json.dumps(r.to_dict()))
    assert d["first_hit_ranks"] == [0, 2, 0, 1]
    assert d["num_tied"] == 2 and d["bounds"]["recall@1"] == [0.25, 0.75]
    assert d["bounds"]["recall@10"] == [1.0, 1.0]
    assert d["effective_ks"] == [1, 3]
    assert isinstance(r, Result)
    with pytest.raises(TypeError):
        r["recall@1"] = 0.0  # read-only mapping


@pytest.mark.parametrize("metric", ["dot", "cosine", "euclidean"])
@pytest.mark.parametrize("mode", ["none", "flag", "ids"])
def test_random_against_brute_force(metric, mode, backend):
    rng = np.random.default_rng(hash((metric, mode)) % 2**32)
    for trial in range(6):
        n, m, d = int(rng.integers(1, 40)), int(rng.integers(40, 90)), int(rng.integers(4, 7))
        q, ref, ql, rl = _integer_case(
            rng,
            n,
            m,
            d,
            classes=int(rng.integers(2, 8)),
            query_in_reference=mode == "flag",
            unit=metric == "cosine",
        )
        qids = rids = None
        if mode == "ids":
            rids = rng.integers(0, 10, size=m)
            qids = rng.integers(0, 10, size=n)
        s = brute.scores64(q, ref, metric)
        excluded = brute.excluded_sets(n, m, mode == "flag", qids, rids)
        expected = brute.first_hit_ranks(s, ql, rl, excluded)
        for chunk in (1, 3, 64, None):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # all-lone and clamped-K cases are legal here
                got = recall_at_k(
                    q,
                    ref,
                    ql,
                    rl,
                    ks=(1, 2, 5, 10),
                    query_in_reference=mode == "flag",
                    query_ids=qids,
                    reference_ids=rids,
                    metric=metric,
                    chunk_size=chunk,
                )
            np.testing.assert_array_equal(got.first_hit_ranks, expected, err_msg=str(trial))
            assert dict(got) == pytest.approx(brute.recall(expected, (1, 2, 5, 10)), nan_ok=True)


def test_cosine_exact_on_power_of_two_norms(backend):
    # Rows with four entries of +-1 have norm 2: normalised entries are +-0.5, exact in float32,
    # so cosine scores (multiples of 1/4) tie exactly and the brute force is exact too.
    rng = np.random.default_rng(3)
    base = _rows(rng, 400, 6, unit=True)
    labels = rng.integers(0, 5, size=400)
    n = 120
    s = brute.scores64(base[:n], base, "cosine")
    expected = brute.first_hit_ranks(s, labels[:n], labels, brute.excluded_sets(n, 400, True))
    for chunk in (1, 7, 128, None):
        got = recall_at_k(
            base[:n], base, labels[:n], labels, ks=(1,), query_in_reference=True, chunk_size=chunk
        )
        np.testing.assert_array_equal(got.first_hit_ranks, expected)


def test_all_equal_scores_tie_to_lower_index(backend):
    # Every score is equal: the ranking is the index order, so the first hit is the lowest
    # index with the label (own row removed).
    x = np.ones((6, 3), dtype=np.float32)
    labels = [0, 1, 2, 0, 1, 2]
    r = recall_at_k(x, x, labels, labels, ks=(1,), query_in_reference=True)
    # Query 0: candidates 1,2,3,..: its label 0 first at index 3 -> rank 2 (after 1, 2).
    # Query 1: candidates 0,2,3,4: label 1 at index 4 -> rank 3. Query 2: 0,1,3,4,5 -> rank 4.
    # Query 3: label 0 at index 0 -> rank 0. Query 4: index 1 -> 1. Query 5: index 2 -> 2.
    assert r.first_hit_ranks.tolist() == [2, 3, 4, 0, 1, 2]


def test_torch_inputs_and_half_precision():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float16)
    r = recall_at_k(
        x, x, torch.tensor([0, 0, 1]), torch.tensor([0, 0, 1]), ks=(1,), query_in_reference=True
    )
    assert r.first_hit_ranks.tolist() == [0, 0, -1]


def test_chunk_size_does_not_change_float_scores():
    # Real-valued data: the padded-GEMM engine gives identical ranks for every chunk size.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 16)).astype(np.float32)
    x[150:] = x[:150] + rng.standard_normal((150, 16)).astype(np.float32) * 1e-4
    labels = rng.integers(0, 30, size=300)
    runs = [
        recall_at_k(
            x, x, labels, labels, ks=(1, 5), query_in_reference=True, chunk_size=c
        ).first_hit_ranks
        for c in (1, 5, 64, 299, None)
    ]
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0], other)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ks": (0,)}, "'ks' parameter of recall_at_k must be positive integers. Got 0"),
        ({"ks": (1.5,)}, "'ks' parameter"),
        ({"ks": ()}, "'ks' parameter"),
        ({"metric": "l1"}, "'metric' parameter"),
        ({"chunk_size": 0}, "'chunk_size' parameter"),
        ({"query_ids": [1, 2]}, "'reference_ids' parameter .* given together"),
        ({"query_ids": [1], "reference_ids": [1, 2, 3]}, "'query_ids' parameter .* length 2"),
    ],
)
def test_bad_arguments(kwargs, match):
    x = np.eye(3)[:2]
    ref = np.eye(3)
    with pytest.raises(ValueError, match=match):
        recall_at_k(x, ref, [0, 1], [0, 1, 2], **kwargs)


def test_bad_embeddings():
    ref = np.eye(3)
    nan = np.eye(3)
    nan[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"'query' parameter .* non-finite value in row 1"):
        recall_at_k(nan, ref, [0, 1, 2], [0, 1, 2])
    zero = np.eye(3)
    zero[2] = 0
    with pytest.raises(ValueError, match=r"'reference' parameter .* zero vector in row 2"):
        recall_at_k(np.eye(3), zero, [0, 1, 2], [0, 1, 2])
    with pytest.raises(ValueError, match=r"'reference' parameter .* dimension 2"):
        recall_at_k(np.eye(3), np.eye(2), [0, 1, 2], [0, 1])
    with pytest.raises(ValueError, match=r"'query' parameter .* non-empty"):
        recall_at_k(np.zeros((0, 3)), ref, [], [0, 1, 2])
    with pytest.raises(ValueError, match=r"'reference_labels' parameter .* length 3"):
        recall_at_k(np.eye(3), ref, [0, 1, 2], [0, 1])
    with pytest.raises(ValueError, match=r"'query' parameter .* 2-D"):
        recall_at_k(np.ones(3), ref, [0], [0, 1, 2])
    with pytest.raises(ValueError, match=r"'reference_labels' parameter .* row 1"):
        recall_at_k(np.eye(3), ref, [0, 1, 2], [0, 5, 2], query_in_reference=True)


@pytest.mark.parametrize("metric", ["dot", "euclidean"])
def test_real_valued_data_matches_float64_brute_force(metric, backend):
    # Gaussian float32 data with near-ties: the float32 GEMM only filters; ranks must equal the
    # float64 ranking of the same float32 vectors exactly, for every chunk size.
    rng = np.random.default_rng(21)
    x = rng.standard_normal((400, 24)).astype(np.float32)
    x[200:300] = x[:100] + rng.standard_normal((100, 24)).astype(np.float32) * 1e-6
    x[300:320] = x[:20]  # exact duplicates
    labels = rng.integers(0, 40, size=400)
    s = brute.scores64(x, x, metric)
    expected = brute.first_hit_ranks(s, labels, labels, brute.excluded_sets(400, 400, True))
    for chunk in (1, 13, 64, None):
        got = recall_at_k(
            x, x, labels, labels, ks=(1,), query_in_reference=True, metric=metric, chunk_size=chunk
        )
        np.testing.assert_array_equal(got.first_hit_ranks, expected)


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_float32_rows_with_an_infinity_are_named_and_the_largest_finite_values_pass(metric):
    # float32 rows are checked from their float64 sums of squares: infinities and NaN in rows
    # 3 and 5 are named (the first), rows of float32's largest values are finite and pass.
    x = np.eye(8, dtype=np.float32)
    x[3, 1] = np.inf
    x[5, 0] = -np.inf
    with pytest.raises(ValueError, match=r"'query' parameter .* non-finite value in row 3"):
        recall_at_k(x, np.eye(8, dtype=np.float32), range(8), range(8), metric=metric)
    x[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"'reference' parameter .* non-finite value in row 3"):
        recall_at_k(np.eye(8, dtype=np.float32), x, range(8), range(8), metric=metric)
    big = np.full((4, 8), np.finfo(np.float32).max, dtype=np.float32)
    big[2:] *= -1
    labels = [0, 0, 1, 1]
    result = recall_at_k(big, big, labels, labels, ks=(1,), query_in_reference=True, metric=metric)
    assert float(result) == 1.0
