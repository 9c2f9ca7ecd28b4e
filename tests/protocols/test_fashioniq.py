"""FashionIQ: per-category galleries, the mean over categories, the official files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recallkit.protocols import (
    FASHIONIQ_CATEGORIES,
    FashionIQCategory,
    FashionIQQuery,
    fashioniq_recall,
    fashioniq_recall_from_scores,
    read_fashioniq,
)
from tests.protocols import official


def _part(category, names, pairs):
    return FashionIQCategory(
        category, tuple(names), tuple(FashionIQQuery(c, t, ("a", "b")) for c, t in pairs)
    )


def test_hand_computed_categories_and_means():
    data = {
        "dress": _part("dress", "ABC", [("A", "B"), ("B", "C")]),
        "shirt": _part("shirt", "DE", [("D", "E")]),
        "toptee": _part("toptee", "FG", [("G", "F")]),
    }
    scores = {
        # dress: query 0 ranks A (its reference, kept), then B and C tie -> B (lower index) at 1;
        # query 1: C alone on top -> 0.
        "dress": np.array([[0.9, 0.4, 0.4], [0.1, 0.2, 0.3]]),
        # shirt: D and E tie; D has the lower index -> E at 1.
        "shirt": np.array([[0.5, 0.5]]),
        # toptee: F first -> 0.
        "toptee": np.array([[0.7, 0.6]]),
    }
    r = fashioniq_recall_from_scores(scores, data, ks=(1, 2))
    assert r.parts["dress"].per_query["ranks"].tolist() == [1, 0]
    assert dict(r.parts["dress"]) == {"recall@1": 0.5, "recall@2": 1.0}
    assert dict(r.parts["shirt"]) == {"recall@1": 0.0, "recall@2": 1.0}
    assert dict(r.parts["toptee"]) == {"recall@1": 1.0, "recall@2": 1.0}
    # Unweighted means over the three categories; no "average" without K = 10 and 50.
    assert r["mean_recall@1"] == pytest.approx(0.5) and r["mean_recall@2"] == 1.0
    assert list(r) == ["mean_recall@1", "mean_recall@2"]
    assert r.num_queries == 4

    removed = fashioniq_recall_from_scores(scores, data, ks=(1, 2), exclude_reference=True)
    # Without A, dress query 0's B ties C and wins -> 0; shirt without D -> E at 0.
    assert removed.parts["dress"].per_query["ranks"].tolist() == [0, 0]
    assert removed.parts["shirt"]["recall@1"] == 1.0
    assert "reference removed" in removed.convention
    assert "dress" in r.table() and "mean_recall@1" in r.table()


def test_average_is_recall_at_10_and_50_whatever_the_ks():
    # One query per category over 60 images scored 0, -1, -2, ...: the target's column is its
    # rank. dress: rank 20 (hits at K = 50 only); shirt: rank 0 (all); toptee: rank 5 (10, 50).
    names = [f"I{i}" for i in range(60)]
    scores = -np.arange(60.0)[None, :]
    data = {
        c: _part(c, names, [("I59", f"I{rank}")])
        for c, rank in (("dress", 20), ("shirt", 0), ("toptee", 5))
    }
    r = fashioniq_recall_from_scores({c: scores for c in data}, data, ks=(1, 10, 50))
    assert [r.parts[c].per_query["ranks"].tolist() for c in data] == [[20], [0], [5]]
    assert r["mean_recall@1"] == pytest.approx(1 / 3)
    assert r["mean_recall@10"] == pytest.approx(2 / 3)
    assert r["mean_recall@50"] == 1.0
    # (R@10 + R@50) / 2, not the mean over the three ks (2/3).
    assert r["average"] == pytest.approx((2 / 3 + 1) / 2)
    assert list(r) == ["mean_recall@1", "mean_recall@10", "mean_recall@50", "average"]
    assert "average" not in fashioniq_recall_from_scores(
        {c: scores for c in data}, data, ks=(10, 20)
    )


def test_means_need_all_three_categories():
    data = {"dress": _part("dress", "AB", [("A", "B")])}
    r = fashioniq_recall_from_scores({"dress": np.array([[0.0, 1.0]])}, data, ks=(1,))
    assert dict(r) == {} and r.parts["dress"]["recall@1"] == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_random_ties_against_the_official_definition(seed):
    rng = np.random.default_rng(seed)
    data, queries, galleries, expected = {}, {}, {}, {}
    for category in FASHIONIQ_CATEGORIES:
        m = int(rng.integers(2, 70))
        names = [f"{category}{i}" for i in range(m)]
        pairs = [
            tuple(rng.choice(names, size=2, replace=False)) for _ in range(int(rng.integers(1, 30)))
        ]
        data[category] = _part(category, names, pairs)
        queries[category] = rng.integers(-2, 3, size=(len(pairs), 3)).astype(np.float32)
        galleries[category] = rng.integers(-2, 3, size=(m, 3)).astype(np.float32)
        sim = official.scores64(queries[category], galleries[category], "dot")
        expected[category] = official.fashioniq_category(sim, names, [t for _, t in pairs])
    r = fashioniq_recall(queries, galleries, data, metric="dot", chunk_size=int(rng.integers(1, 9)))
    for category in FASHIONIQ_CATEGORIES:
        assert dict(r.parts[category]) == pytest.approx(expected[category])
    for k in (10, 50):
        assert r[f"mean_recall@{k}"] == pytest.approx(
            np.mean([e[f"recall@{k}"] for e in expected.values()])
        )
    assert r["average"] == pytest.approx((r["mean_recall@10"] + r["mean_recall@50"]) / 2)


def _write(root, category, names, entries):
    (root / "image_splits").mkdir(parents=True, exist_ok=True)
    (root / "captions").mkdir(parents=True, exist_ok=True)
    (root / "image_splits" / f"split.{category}.val.json").write_text(json.dumps(names))
    (root / "captions" / f"cap.{category}.val.json").write_text(json.dumps(entries))


def test_reader_and_bad_input(tmp_path):
    for category in FASHIONIQ_CATEGORIES:
        _write(
            tmp_path,
            category,
            [f"{category}1", f"{category}2"],
            [
                {
                    "target": f"{category}2",
                    "candidate": f"{category}1",
                    "captions": ["is red", "is long"],
                }
            ],
        )
    data = read_fashioniq(tmp_path)
    assert list(data) == list(FASHIONIQ_CATEGORIES)
    assert data["shirt"].queries[0] == FashionIQQuery("shirt1", "shirt2", ("is red", "is long"))
    assert data["toptee"].image_names == ("toptee1", "toptee2")

    with pytest.raises(
        ValueError, match=r"'categories' parameter of read_fashioniq .* Got 'shoes'"
    ):
        read_fashioniq(tmp_path, ["dress", "shoes"])
    with pytest.raises(ValueError, match="'data' parameter of fashioniq_recall_from_scores"):
        fashioniq_recall_from_scores({"pants": np.zeros((1, 2))}, {"pants": data["dress"]})
    with pytest.raises(ValueError, match=r"'scores' parameter .* one entry per category"):
        fashioniq_recall_from_scores({"dress": np.zeros((1, 2))}, data)
    _write(tmp_path, "dress", ["d1"], [{"target": "d9", "candidate": "d1", "captions": ["x", "y"]}])
    with pytest.raises(ValueError, match=r"query 0 \(dress\): target 'd9' is not an image of"):
        read_fashioniq(tmp_path, "dress")
    itself = {"dress": _part("dress", "AB", [("A", "A")])}
    with pytest.raises(ValueError, match="dress query 0: target 'A' is the reference"):
        fashioniq_recall_from_scores({"dress": np.zeros((1, 2))}, itself, exclude_reference=True)
