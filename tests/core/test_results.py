"""One result type and one glossary of counts for every result the library returns.

``num_queries`` is every query given, ``num_evaluated`` those counted in the means and
``num_excluded`` the lone ones: the same in the attributes, ``report()`` and ``to_dict()``.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from recallkit import map_at_r, recall_at_k, recall_from_ranks, retrieval_metrics
from recallkit.datasets import evaluate_benchmark
from recallkit.datasets.base import BENCHMARK_INFO, Benchmark, Split
from recallkit.protocols import genecis_recall
from recallkit.protocols._common import protocol_result
from recallkit.result import Result

# Rows 0 and 1 (label 0) point along x, row 2 (label 1) along y. With the own row removed, query 0
# finds row 1 first (rank 0), query 1 finds row 0 (rank 0); query 2 is lone (no other label-1 row).
X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
LABELS = [0, 0, 1]


def _with_a_lone_query() -> Result:
    return recall_at_k(X, X, LABELS, LABELS, ks=(1,), query_in_reference=True)


def test_counts_mean_the_same_in_attributes_report_and_dict():
    r = _with_a_lone_query()
    assert (r.num_queries, r.num_evaluated, r.num_excluded, r.num_reference) == (3, 2, 1, 3)
    assert r.report() == (
        "[evaluation]\n"
        "  num queries:   3\n"
        "  num excluded:  1\n"
        "  num gallery:   3\n"
        "  embedding_dim: 2\n"
        "\n"
        "[metrics]\n"
        "  recall@1: 1.0000"
    )
    d = json.loads(json.dumps(r.to_dict()))
    counts = {k: d[k] for k in ("num_queries", "num_evaluated", "num_excluded", "num_reference")}
    assert counts == {"num_queries": 3, "num_evaluated": 2, "num_excluded": 1, "num_reference": 3}
    assert d["metrics"] == {"recall@1": 1.0} and d["first_hit_ranks"] == [0, 0, -1]


def test_report_without_lone_queries_is_the_three_line_template():
    r = Result(
        {"recall@1": 0.5}, first_hit_ranks=np.array([0, 2]), num_reference=4, embedding_dim=3
    )
    assert r.report().splitlines()[:4] == [
        "[evaluation]",
        "  num queries:   2",
        "  num gallery:   4",
        "  embedding_dim: 3",
    ]


def _benchmark() -> Benchmark:
    test = Split("test", Path("/d"), ("a", "b", "c"), np.array(LABELS))
    info = BENCHMARK_INFO["cub"]
    return Benchmark("cub", info.title, info.protocol, {"test": test}, Path("/d"), complete=False)


def test_benchmark_result_uses_the_same_counts():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # K = 2, 4 and 8 exceed the 2 candidates
        result = evaluate_benchmark(_benchmark(), X)
    assert isinstance(result, Result)
    d = result.to_dict()
    assert (d["num_queries"], d["num_evaluated"], d["num_excluded"]) == (3, 2, 1)
    assert d["num_reference"] == 3
    # Read like a dict: recall@K in the protocol's order, then MAP@R and R-precision. Both
    # evaluated queries have R = 1 and find their one relevant item first.
    assert dict(result) == {
        "recall@1": 1.0,
        "recall@2": 1.0,
        "recall@4": 1.0,
        "recall@8": 1.0,
        "MAP@R": 1.0,
        "R-precision": 1.0,
    }
    assert result.metrics() == dict(result) and result.table() == result.report()


def test_nan_becomes_none_in_every_result():
    labels = [0, 1, 2]  # every query lone
    with pytest.warns(RuntimeWarning, match="all 3 queries are lone"):
        recall = recall_at_k(X, X, labels, labels, ks=(1,), query_in_reference=True)
    assert math.isnan(recall["recall@1"])
    assert recall.to_dict()["metrics"] == {"recall@1": None}
    assert (recall.num_queries, recall.num_evaluated, recall.num_excluded) == (3, 0, 3)

    with pytest.warns(RuntimeWarning, match="all 3 queries are lone"):
        both = retrieval_metrics(
            X, X, labels, labels, ["recall@1", "MAP@R"], query_in_reference=True
        )
    assert both.to_dict()["metrics"] == {"recall@1": None, "MAP@R": None}

    protocol = protocol_result("toy", {"recall@1": math.nan}, convention="c", num_queries=0)
    assert protocol.to_dict()["metrics"] == {"recall@1": None}
    assert json.dumps(protocol.to_dict())  # JSON has no NaN: nothing left to refuse


def test_one_lone_query_policy_for_every_metric():
    """The same behaviour for every metric when no query can be evaluated: NaN and a warning
    (``lone_queries="skip"``), 0 (``"zero"``), or an error (``"error"``)."""
    labels = [0, 1, 2]
    for func in (recall_at_k, map_at_r):
        args = (X, X, labels, labels) + (((1,),) if func is recall_at_k else ())
        with pytest.warns(RuntimeWarning, match="lone"):
            assert math.isnan(float(func(*args, query_in_reference=True)))
        zero = func(*args, query_in_reference=True, lone_queries="zero")
        assert float(zero) == 0.0 and zero.num_excluded == 3
        with pytest.raises(ValueError, match="3 lone queries, the first at row 0"):
            func(*args, query_in_reference=True, lone_queries="error")
    # Two evaluated queries of three: "zero" averages over all three, "skip" over the two.
    partial = [0, 0, 1]
    skip = map_at_r(X, X, partial, partial, query_in_reference=True)
    zero = map_at_r(X, X, partial, partial, query_in_reference=True, lone_queries="zero")
    assert float(skip) == 1.0 and float(zero) == pytest.approx(2 / 3, abs=1e-15)


@pytest.mark.parametrize(
    "result",
    [
        Result({"recall@1": 0.5}, first_hit_ranks=np.array([0])),
        protocol_result("toy", {"recall@1": 0.5}, convention="c", num_queries=2),
        genecis_recall(np.array([[0.9, 0.1], [0.2, 0.8]]), ks=(1,)),
        recall_from_ranks([0, 2], [1]),
        recall_at_k(X, X, LABELS, LABELS, ks=(1,), query_in_reference=True),
    ],
    ids=["Result", "protocol", "genecis_recall", "recall_from_ranks", "recall_at_k"],
)
def test_results_are_read_only_metric_mappings(result):
    assert isinstance(result, Result)
    with pytest.raises(TypeError):
        result["recall@1"] = 0.0
    assert list(result) == ["recall@1"]
    assert float(result) == result["recall@1"]
