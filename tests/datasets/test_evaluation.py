"""evaluate_benchmark against hand-computed values and an independent brute force."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from recallkit.datasets import (
    BENCHMARK_INFO,
    Benchmark,
    Split,
    evaluate_benchmark,
    load_benchmark,
)
from recallkit.result import Result

pytestmark = pytest.mark.filterwarnings("ignore:recall_at_k. ks .* are clamped:UserWarning")


def _recall(result):
    """The recall@K values of a result, in order."""
    return {k: v for k, v in result.items() if k.startswith("recall@")}


def _self_benchmark(name, labels):
    test = Split("test", Path("/data"), tuple(f"{i}.jpg" for i in range(len(labels))), labels)
    info = BENCHMARK_INFO[name]
    return Benchmark(name, info.title, info.protocol, {"test": test}, Path("/data"))


def _inshop(query_labels, gallery_labels):
    query = Split(
        "query", Path("/d"), tuple(f"q{i}" for i in range(len(query_labels))), query_labels
    )
    gallery = Split(
        "gallery", Path("/d"), tuple(f"g{i}" for i in range(len(gallery_labels))), gallery_labels
    )
    info = BENCHMARK_INFO["inshop"]
    return Benchmark(
        "inshop", info.title, info.protocol, {"query": query, "gallery": gallery}, Path("/d")
    )


def test_all_tied_scores_rank_the_lower_index_first():
    # Every image has the same embedding, so every score ties and each query ranks the others
    # by index. Labels 101, 101, 102, 102: queries 0 and 1 find each other first (hit at 1);
    # query 2 sees 0, 1, 3 and query 3 sees 0, 1, 2: first hit at rank 2 (hit from K = 4).
    cub = _self_benchmark("cub", np.array([101, 101, 102, 102]))
    result = evaluate_benchmark(cub, np.ones((4, 2), dtype=np.float32), metric="dot")
    assert _recall(result) == {
        "recall@1": 0.5,
        "recall@2": 0.5,
        "recall@4": 1.0,
        "recall@8": 1.0,
    }
    # R = 1 for every query: R-precision and AP@R are both "hit at rank 0": 1, 1, 0, 0.
    assert (result["MAP@R"], result["R-precision"]) == (0.5, 0.5)
    assert result.num_queries == 4 and result.num_reference == 4


def test_inshop_query_against_gallery_by_hand():
    # Query 0 = [1, 0] (item 2), query 1 = [0, 1] (item 4); gallery [2, 0] item 4, [1, 0] item 2,
    # [0, 1] item 4; dot scores: query 0 -> 2, 1, 0 (its item at rank 1); query 1 -> 0, 0, 1
    # (gallery 2 first, then the tie 0 before 1).
    shop = _inshop(np.array([2, 4]), np.array([4, 2, 4]))
    query = np.array([[1, 0], [0, 1]], dtype=np.float32)
    gallery = np.array([[2, 0], [1, 0], [0, 1]], dtype=np.float32)
    result = evaluate_benchmark(shop, query, gallery, metric="dot")
    assert result["recall@1"] == 0.5
    assert [result[f"recall@{k}"] for k in (10, 20, 30, 40, 50)] == [1.0] * 5
    # Query 0: R = 1, top 1 is item 4: AP@R = R-precision = 0. Query 1: R = 2, ranked relevance
    # T, T (gallery 2, then gallery 0 before the tied gallery 1): AP@R = R-precision = 1.
    assert (result["MAP@R"], result["R-precision"]) == (0.5, 0.5)
    assert result.num_reference == 3  # nothing excluded: the gallery is disjoint


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("name", ["cub", "sop", "inaturalist"])
def test_self_protocols_match_brute_force_with_ties_duplicates_and_lone_queries(
    name, seed, brute_force
):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    labels = rng.integers(0, max(2, n // 3), size=n) + BENCHMARK_INFO[name].label_ranges["test"][0]
    # Small integers: exact float32 dot products, many ties and duplicate rows.
    x = rng.integers(-1, 3, size=(n, 3)).astype(np.float32)
    bench = _self_benchmark(name, labels)
    ks = bench.protocol.ks
    expected_recall, expected_map, expected_rp = brute_force(x, x, labels, labels, ks, True)
    if not expected_recall or all(math.isnan(v) for v in expected_recall.values()):
        pytest.skip("every query is lone")
    result = evaluate_benchmark(bench, x, metric="dot")
    assert list(_recall(result)) == [f"recall@{k}" for k in ks]
    assert _recall(result) == pytest.approx(expected_recall, rel=1e-12)
    assert result["MAP@R"] == pytest.approx(expected_map, rel=1e-12)
    assert result["R-precision"] == pytest.approx(expected_rp, rel=1e-12)
    lone = sum(1 for i in range(n) if (labels == labels[i]).sum() == 1)
    assert result.num_excluded == lone


@pytest.mark.parametrize("seed", range(6))
def test_inshop_matches_brute_force(seed, brute_force):
    rng = np.random.default_rng(100 + seed)
    n, m = int(rng.integers(1, 25)), int(rng.integers(1, 25))
    query_labels = rng.integers(1, 6, size=n)
    gallery_labels = rng.integers(1, 6, size=m)
    query = rng.integers(-2, 3, size=(n, 4)).astype(np.float32)
    gallery = rng.integers(-2, 3, size=(m, 4)).astype(np.float32)
    if not np.isin(query_labels, gallery_labels).any():
        gallery_labels[0] = query_labels[0]
    shop = _inshop(query_labels, gallery_labels)
    ks = shop.protocol.ks
    expected_recall, expected_map, expected_rp = brute_force(
        query, gallery, query_labels, gallery_labels, ks, False
    )
    result = evaluate_benchmark(shop, query, gallery, metric="dot")
    assert _recall(result) == pytest.approx(expected_recall, rel=1e-12)
    assert result["MAP@R"] == pytest.approx(expected_map, rel=1e-12)
    assert result["R-precision"] == pytest.approx(expected_rp, rel=1e-12)


def test_loaded_benchmark_and_result_outputs(tmp_path, fmt):
    # Miniature CUB: test ids 6-8 class 101, id 9 class 102 (a lone query).
    fmt.write_cub(tmp_path, [(1, 3), (2, 2), (101, 3), (102, 1)])
    cub = load_benchmark("cub", tmp_path, allow_partial=True, check_images=False)
    x = np.array([[1, 0], [1, 0], [0, 1], [1, 0]], dtype=np.float32)
    # Query 0 ([1, 0]): candidates 1 (score 1, class 101), 2 (0), 3 (1, class 102): hit at 1.
    # Query 1: same, hit at 1. Query 2 ([0, 1]): candidates 0, 1, 3 all score 0: 0 first, hit.
    # Query 3 is lone. So recall@K = 1 over 3 queries, R = 2 each: query 0 ranks 1, 3, 2
    # (relevance T, F): AP@R = 1/2, R-precision 1/2; query 1 ranks 0, 3, 2: the same; query 2
    # ranks 0, 1, 3: AP@R = R-precision = 1.
    result = evaluate_benchmark(cub, x, metric="dot")
    assert isinstance(result, Result)
    assert _recall(result) == {
        "recall@1": 1.0,
        "recall@2": 1.0,
        "recall@4": 1.0,
        "recall@8": 1.0,
    }
    assert result.num_excluded == 1
    assert result["MAP@R"] == pytest.approx(2 / 3) and result["R-precision"] == pytest.approx(2 / 3)
    assert not result.info["complete"]
    data = json.loads(json.dumps(result.to_dict()))
    assert data["benchmark"] == "cub" and data["ks"] == [1, 2, 4, 8]
    assert data["query_in_reference"] is True and data["gallery_split"] is None
    assert data["metrics"]["MAP@R"] == pytest.approx(2 / 3)
    assert result.table().splitlines()[:2] == [
        "recall@1  recall@2  recall@4  recall@8  MAP@R   R-precision",
        "1.0000    1.0000    1.0000    1.0000    0.6667  0.6667",
    ]
    # Every evaluated query meets a tie at its first hit: queries 0 and 1 score 1 with their
    # positive and with item 3 (class 102), query 2 scores 0 with everything. Against the
    # query, each tie puts the negative first: recall@1 would be 0.
    assert result.num_tied == 3 and result.bounds["recall@1"] == (0.0, 1.0)


def test_all_lone_queries_give_nan():
    cub = _self_benchmark("cub", np.array([101, 102]))
    with pytest.warns(RuntimeWarning, match="lone"):
        result = evaluate_benchmark(cub, np.eye(2, dtype=np.float32))
    assert math.isnan(result["recall@1"])
    assert math.isnan(result["MAP@R"]) and math.isnan(result["R-precision"])
    assert result.to_dict()["metrics"]["MAP@R"] is None


def test_bad_input():
    cub = _self_benchmark("cub", np.array([101, 101, 102]))
    with pytest.raises(
        ValueError,
        match=r"'query_embeddings' parameter of evaluate_benchmark .*"
        r"'test' split of cub \(3 rows.*Got shape \(2, 4\)",
    ):
        evaluate_benchmark(cub, np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"'query_embeddings' .* Got shape \(3,\)"):
        evaluate_benchmark(cub, np.zeros(3))
    with pytest.raises(
        ValueError,
        match="'gallery_embeddings' parameter of evaluate_benchmark must be None for cub",
    ):
        evaluate_benchmark(cub, np.ones((3, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="'benchmark' parameter of evaluate_benchmark must be"):
        evaluate_benchmark("cub", np.ones((3, 2)))
    with pytest.raises(ValueError, match="metric"):
        evaluate_benchmark(cub, np.ones((3, 2)), metric="l1")
    shop = _inshop(np.array([1]), np.array([1, 2]))
    with pytest.raises(
        ValueError, match=r"'gallery_embeddings' parameter .* must be given for inshop"
    ):
        evaluate_benchmark(shop, np.ones((1, 2)))
    with pytest.raises(ValueError, match=r"'gallery_embeddings' .*'gallery' split of inshop"):
        evaluate_benchmark(shop, np.ones((1, 2)), np.ones((3, 2)))
