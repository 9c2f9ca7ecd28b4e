"""Bad input at the public boundary raises a clear error instead of giving a wrong number.

Labels keep distinct values distinct (no merge through numpy's string or float coercion),
indices and ranks are integers (never truncated floats), and embedding arrays are real numbers
in memory (no object, string, sparse or meta input).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recallkit import (
    average_precision_at_k,
    ground_truth_ranks,
    ground_truth_ranks_from_embeddings,
    nearest_neighbors,
    nearest_neighbors_from_scores,
    recall_at_k,
)
from recallkit._inputs.codes import dense_codes

# ---------------------------------------------------------------------------------------------
# Labels: distinct values stay distinct; mixed kinds and non-sequences are refused.


def test_number_and_string_labels_are_not_merged():
    eye = np.eye(2)
    with pytest.raises(ValueError, match=r"'query_labels' parameter of recall_at_k.*numbers and"):
        recall_at_k(eye, eye, [1, "1"], [1, "1"], ks=(1,), query_in_reference=True)
    # Numbers on one side, strings on the other: no label could ever match.
    with pytest.raises(ValueError, match=r"'reference_labels' .* same kind as 'query_labels'"):
        recall_at_k(eye, eye, [1, 2], ["1", "2"], ks=(1,), query_in_reference=False)


def test_uint64_beyond_int64_is_not_minus_one():
    # q's nearest item r0 has label -1; its only positive is r1 (label 2**64 - 1), at rank 1.
    query = np.array([[1.0, 0.0]])
    reference = np.eye(2)
    q_labels = np.array([2**64 - 1], dtype=np.uint64)
    result = recall_at_k(
        query, reference, q_labels, [-1, 2**64 - 1], ks=(1, 2), query_in_reference=False
    )
    assert dict(result) == {"recall@1": 0.0, "recall@2": 1.0}
    q, r = dense_codes(q_labels, np.array([-1, 5]), ("a", "b"), "f")
    assert (q.tolist(), r.tolist()) == ([2], [0, 1])


def test_integral_floats_beyond_int64_stay_distinct():
    # r0 (nearest) has label 2e20, r1 has the query's label 1e20: first hit at rank 1.
    query = np.array([[1.0, 0.0]])
    reference = np.eye(2)
    result = recall_at_k(
        query, reference, [1e20], np.array([2e20, 1e20]), ks=(1, 2), query_in_reference=False
    )
    assert dict(result) == {"recall@1": 0.0, "recall@2": 1.0}
    q, r = dense_codes(np.array([1e20, 2e20, -3.0]), [2**70, -3], ("a", "b"), "f")
    # sorted values: -3 < 1e20 < 2e20 < 2**70 (1.18e21)
    assert (q.tolist(), r.tolist()) == ([1, 2, 0], [3, 0])


def test_numbers_compare_by_value():
    # 3, 3.0, np.uint8(3) and True/1 are the same labels whatever their type.
    q, r = dense_codes([3.0, True], np.array([1, 3], dtype=np.uint8), ("a", "b"), "f")
    assert (q.tolist(), r.tolist()) == ([1, 0], [0, 1])
    q, r = dense_codes(torch.tensor([2.0, 7.0], dtype=torch.bfloat16), [7, 2], ("a", "b"), "f")
    assert (q.tolist(), r.tolist()) == ([0, 1], [1, 0])


@pytest.mark.parametrize(
    "labels",
    [None, {0: 1, 1: 2}, {1, 2}, frozenset({1, 2}), (i for i in range(2)), iter([1, 2]), "ab"],
    ids=["none", "dict", "set", "frozenset", "generator", "iterator", "str"],
)
def test_labels_must_be_a_sequence_per_row(labels):
    eye = np.eye(2)
    with pytest.raises(ValueError, match=r"'query_labels' parameter of recall_at_k must be a seq"):
        recall_at_k(eye, eye, labels, [1, 2], ks=(1,), query_in_reference=False)


@pytest.mark.parametrize(
    ("labels", "got"),
    [([1, None], "NoneType"), ([1.5, 2], "1.5"), (np.array([1, np.nan]), "nan"), ([1j, 2], "com")],
)
def test_labels_that_are_not_labels(labels, got):
    eye = np.eye(2)
    with pytest.raises(ValueError, match=rf"'query_labels' parameter.*Got .*{got}"):
        recall_at_k(eye, eye, labels, [1, 2], ks=(1,), query_in_reference=False)


# ---------------------------------------------------------------------------------------------
# Indices and ranks: integers only, no truncation; distinct ranks per query.

SCORES = [[0.2, 0.9, 0.2], [0.5, 0.5, 0.5], [0.1, 0.3, 0.8]]


def test_integer_ground_truth_of_any_integer_type():
    # row 0: 0.9 above 0.2 -> 1; row 1: ties, lower indices 0 and 1 first -> 2; row 2: top -> 0.
    for gt in ([0, 2, 2], np.array([0, 2, 2], np.int32), torch.tensor([0, 2, 2]), [[0], [2], [2]]):
        assert ground_truth_ranks(SCORES, gt).tolist() == [1, 2, 0]


@pytest.mark.parametrize(
    "gt",
    [[0.0, 1.7, 2.0], [0, 1, 2.0], [[0, 1.7], [1], [2]], [0, True, 2], np.array([0.0, 1.0, 2.0])],
    ids=["floats", "integral-float", "rows", "bool", "float-array"],
)
def test_float_ground_truth_is_refused(gt):
    with pytest.raises(ValueError, match=r"'ground_truth' parameter of ground_truth_ranks must"):
        ground_truth_ranks(SCORES, gt)
    with pytest.raises(
        ValueError, match=r"'ground_truth' parameter of ground_truth_ranks_from_embeddings"
    ):
        ground_truth_ranks_from_embeddings(np.eye(3), np.eye(3), gt)


def test_float_exclude_is_refused():
    with pytest.raises(ValueError, match=r"'exclude' parameter of ground_truth_ranks must be int"):
        ground_truth_ranks(SCORES, [0, 1, 2], exclude=[1.5, 2, 0])
    with pytest.raises(ValueError, match=r"'exclude' parameter of ground_truth_ranks_from_emb"):
        ground_truth_ranks_from_embeddings(np.eye(3), np.eye(3), [0, 1, 2], exclude=[[1.0], [], []])
    with pytest.raises(ValueError, match=r"'exclude' parameter of nearest_neighbors_from_scores"):
        nearest_neighbors_from_scores(SCORES, 2, exclude=[[0.5], [], []])
    with pytest.raises(ValueError, match=r"'exclude' parameter of nearest_neighbors must"):
        nearest_neighbors(np.eye(3), np.eye(3), 2, exclude=[[0, 1.0], [], []])
    # Integer exclusions still work: excluding column 1 of row 0 puts it first (0.2 at 0, 2).
    assert ground_truth_ranks(SCORES, [0, 1, 2], exclude=[[1], [], []]).tolist() == [0, 1, 0]


def test_average_precision_ranks_must_be_integers():
    with pytest.raises(ValueError, match=r"'relevant_ranks' parameter of average_precision_at_k"):
        average_precision_at_k([[0.5, 1.7]], k=3)
    with pytest.raises(ValueError, match=r"'relevant_ranks' .* integer ranks"):
        average_precision_at_k(np.array([[0.0, 2.0]]), k=3)
    with pytest.raises(ValueError, match=r"'num_relevant' parameter of average_precision_at_k"):
        average_precision_at_k([[0]], [1.5], k=3)
    with pytest.raises(ValueError, match=r"'relevant_ranks' .* \(-1 for padding\). Got -2"):
        average_precision_at_k([[0, -2]], k=3)
    # Integer ranks of any type: hits at 1 and 3 of 2 relevant -> (1 + 2/3) / 2 = 5/6.
    for ranks in ([[0, 2]], np.array([[0, 2]], np.int32), torch.tensor([[0, 2, -1]])):
        assert average_precision_at_k(ranks, k=3).tolist() == [(1 + 2 / 3) / 2]


@pytest.mark.parametrize("ranks", [[[0, 0, 0]], np.array([[3, 1, 3]]), [[2], [1, 4, 1]]])
def test_repeated_ranks_are_refused(ranks):
    with pytest.raises(ValueError, match=r"'relevant_ranks' .* distinct ranks within a query"):
        average_precision_at_k(ranks, k=3)


def test_padding_is_not_a_repeated_rank():
    # -1 padding repeats freely; one hit at rank 0 of R = 1: AP = 1.
    assert average_precision_at_k(np.array([[0, -1, -1]]), k=3).tolist() == [1.0]


# ---------------------------------------------------------------------------------------------
# Embedding arrays: real numbers, dense, with data.

LABELS = [0, 1]


@pytest.mark.parametrize(
    ("query", "got"),
    [
        (np.array([[1.0, 0.0], [0.0, 1.0]], dtype=object), "dtype object"),
        (np.array([["1", "0"], ["0", "1"]]), "dtype <U1"),
        (np.array([[b"1", b"0"], [b"0", b"1"]]), "dtype |S1"),
        ([["1", "0"], ["0", "1"]], "dtype <U1"),
        ([[1, 0], [0, 2**70]], "not numbers"),
        (np.zeros((2, 2), dtype="datetime64[s]"), "dtype datetime64"),
        (torch.ones(2, 2, device="meta"), "meta device"),
        (torch.eye(2).to_sparse(), "layout torch.sparse_coo"),
    ],
    ids=["object", "str", "bytes", "str-lists", "huge-int", "datetime", "meta", "sparse"],
)
def test_non_numeric_embeddings_are_refused(query, got):
    with pytest.raises(ValueError, match=rf"'query' parameter of recall_at_k must .*Got .*{got}"):
        recall_at_k(query, np.eye(2), LABELS, LABELS, ks=(1,))
    with pytest.raises(ValueError, match=rf"'reference' parameter of recall_at_k must .*{got}"):
        recall_at_k(np.eye(2), query, LABELS, LABELS, ks=(1,))


def test_longdouble_embeddings_are_scored_as_float64():
    x = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    idx, val = nearest_neighbors(x.astype(np.longdouble), x, 3)
    ref_idx, ref_val = nearest_neighbors(x, x, 3)
    assert val.dtype == np.float64
    # cosines: row 0 -> 1, 0.6, 0; row 1 -> 1, 0.8, 0.6; row 2 -> 1, 0.8, 0.
    assert idx.tolist() == ref_idx.tolist() == [[0, 1, 2], [1, 2, 0], [2, 1, 0]]
    assert np.array_equal(val, ref_val)
    if np.finfo(np.longdouble).max > np.finfo(np.float64).max:  # x86 extended precision
        huge = np.array([[1.0, 0.0], [np.longdouble("1e400"), 1.0]], dtype=np.longdouble)
        with pytest.raises(ValueError, match=r"'query' .* within the float64 range.*row 1"):
            recall_at_k(huge, np.eye(2), LABELS, LABELS, ks=(1,))


def test_big_endian_embeddings_are_converted():
    x = np.array([[5.0, 0.0], [3.0, 4.0], [0.0, 5.0]])
    for big in (x.astype(">f8"), x.astype(">f4"), x.astype(">i4")):
        idx, val = nearest_neighbors(big, big, 2, query_in_reference=True)
        assert idx.tolist() == [[1, 2], [2, 0], [1, 0]]
        # Exact cosines 15/25 and 20/25 from the byte-swapped values, whatever the width.
        assert val.tolist() == [[0.6, 0.0], [0.8, 0.6], [0.8, 0.0]]
