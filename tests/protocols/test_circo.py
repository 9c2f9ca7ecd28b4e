"""CIRCO: mAP@K with the official divisor and the alternative, recall@K, files in and out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recallkit.protocols import (
    CIRCOQuery,
    CIRCOSplit,
    circo_metrics,
    circo_metrics_from_predictions,
    circo_metrics_from_scores,
    circo_rankings,
    circo_rankings_from_scores,
    read_circo,
    read_coco_image_ids,
    write_circo_submission,
)
from tests.protocols import official

IDS = [10, 20, 30, 40, 50]
DATA = CIRCOSplit(
    "val",
    (
        CIRCOQuery(0, 10, "c", "s", 30, (30, 40, 50)),
        CIRCOQuery(1, 50, "c", "s", 20, (20,)),
    ),
)
#                 10   20   30   40   50
SIM = np.array([[0.9, 0.5, 0.5, 0.8, 0.1], [0.1, 0.1, 0.1, 0.1, 0.1]])


def test_hand_computed_map_both_divisors():
    # Query 0 ranks 10, 40, 20, 30, 50 (20 and 30 tie; 20 has the lower index): ground truths 30,
    # 40, 50 at ranks 3, 1, 4. Query 1: every score ties, 20 is at rank 1.
    r = circo_metrics_from_scores(SIM, IDS, DATA, ks=(2, 5))
    assert r.per_query["gt_ranks"].tolist() == [[3, 1, 4], [1, -1, -1]]
    assert r.per_query["target_ranks"].tolist() == [3, 1]
    # AP@2, query 0: one hit at position 2 -> (1/2) / min(2, 3) = 1/4; query 1: (1/2) / min(2, 1).
    # AP@5, query 0: hits at 2, 4, 5 -> (1/2 + 2/4 + 3/5) / 3; query 1 stays 1/2.
    assert r["mAP@2"] == pytest.approx((1 / 4 + 1 / 2) / 2)
    assert r["mAP@5"] == pytest.approx(((1 / 2 + 2 / 4 + 3 / 5) / 3 + 1 / 2) / 2)
    assert r["recall@2"] == 0.5 and r["recall@5"] == 1.0
    assert list(r) == ["mAP@2", "mAP@5", "recall@2", "recall@5"]

    # Dividing by R (the SQUARE recipe) changes only the query with R = 3 > K = 2.
    alt = circo_metrics_from_scores(SIM, IDS, DATA, ks=(2, 5), divisor="r")
    assert alt["mAP@2"] == pytest.approx((1 / 6 + 1 / 2) / 2)
    assert alt["mAP@5"] == pytest.approx(r["mAP@5"])
    assert "SQUARE" in alt.convention and "official" in r.convention
    ranked = official.ranked_ids(SIM, IDS)
    assert alt["mAP@2"] == pytest.approx(
        np.mean(
            [
                official.square_map(ranked[i], list(q.gt_img_ids), 2)
                for i, q in enumerate(DATA.queries)
            ]
        )
    )


def test_semantic_map_at_10_per_aspect():
    data = CIRCOSplit(
        "val",
        (
            CIRCOQuery(0, 10, "c", "s", 30, (30, 40, 50), ("cardinality", "negation")),
            CIRCOQuery(1, 50, "c", "s", 20, (20,), ("viewpoint", "negation", "colour")),
        ),
    )
    # AP@10 (divisor min(10, R)): query 0's ground truths at ranks 3, 1, 4 -> hits at positions
    # 2, 4, 5: (1/2 + 2/4 + 3/5) / 3. Query 1: its one ground truth at position 2: 1/2.
    ap0, ap1 = (1 / 2 + 2 / 4 + 3 / 5) / 3, 1 / 2
    r = circo_metrics_from_scores(SIM, IDS, data, ks=(2,))
    assert list(r) == [
        "mAP@2",
        "recall@2",
        "mAP@10[cardinality]",  # the official order: cardinality, ..., negation, ..., viewpoint
        "mAP@10[negation]",
        "mAP@10[viewpoint]",
        "mAP@10[colour]",  # not an official aspect: after them
    ]
    assert r["mAP@10[cardinality]"] == pytest.approx(ap0)
    assert r["mAP@10[negation]"] == pytest.approx((ap0 + ap1) / 2)
    assert r["mAP@10[viewpoint]"] == pytest.approx(ap1)
    assert r["mAP@10[colour]"] == r["mAP@10[viewpoint]"]
    assert r.per_query["AP@10"].tolist() == pytest.approx([ap0, ap1])
    assert "mAP@10[negation]" in r.table()
    # The same from the ranked lists (query 0: 10, 40, 20, 30, 50; query 1: 10, 20, ...).
    lists = {"0": [10, 40, 20, 30, 50], "1": [10, 20, 30, 40, 50]}
    assert dict(circo_metrics_from_predictions(lists, data, ks=(2,))) == pytest.approx(dict(r))
    # No aspects in the annotations (the test split): no semantic keys.
    assert "mAP@10[negation]" not in circo_metrics_from_scores(SIM, IDS, DATA, ks=(2,))


def test_hand_computed_with_the_reference_removed():
    r = circo_metrics_from_scores(SIM, IDS, DATA, ks=(2,), exclude_reference=True)
    # Without 10, query 0 ranks 40, 20, 30, 50: 40 at 0 -> AP@2 = 1 / min(2, 3) = 1/2. Query 1
    # without 50: unchanged (rank 1).
    assert r.per_query["gt_ranks"][0].tolist() == [2, 0, 3]
    assert r["mAP@2"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert "reference removed" in r.convention


def _random_case(rng):
    ids = rng.choice(np.arange(1, 10**6), size=int(rng.integers(60, 90)), replace=False)
    queries = []
    for q in range(int(rng.integers(1, 25))):
        picked = rng.choice(ids, size=int(rng.integers(2, 14)), replace=False).tolist()
        aspects = rng.choice(official.CIRCO_ASPECTS, size=int(rng.integers(0, 4)), replace=False)
        queries.append(
            CIRCOQuery(q, picked[0], "c", "s", picked[1], tuple(picked[1:]), tuple(aspects))
        )
    data = CIRCOSplit("val", tuple(queries))
    query = rng.integers(-2, 3, size=(len(queries), 3)).astype(np.float32)
    images = rng.integers(-2, 3, size=(len(ids), 3)).astype(np.float32)
    return ids, data, query, images


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("divisor", ["min_k_r", "r"])
def test_random_ties_against_the_official_evaluation(seed, divisor):
    rng = np.random.default_rng(seed)
    ids, data, query, images = _random_case(rng)
    sim = official.scores64(query, images, "dot")
    predictions = dict(enumerate(official.ranked_ids(sim, ids.tolist(), k=50)))
    gts = {q.id: list(q.gt_img_ids) for q in data.queries}
    targets = {q.id: q.target_img_id for q in data.queries}
    aspects = {q.id: q.semantic_aspects for q in data.queries}
    expected = official.circo_official(predictions, gts, targets, (5, 10, 25, 50), divisor, aspects)
    r = circo_metrics(
        query, images, ids, data, metric="dot", divisor=divisor, chunk_size=int(rng.integers(1, 9))
    )
    assert dict(r) == pytest.approx(expected, abs=1e-12)
    assert dict(circo_metrics_from_scores(sim, ids, data, divisor=divisor)) == pytest.approx(
        expected, abs=1e-12
    )
    as_json = {str(k): v for k, v in predictions.items()}
    assert dict(circo_metrics_from_predictions(as_json, data, divisor=divisor)) == pytest.approx(
        expected, abs=1e-12
    )
    assert circo_rankings(query, images, ids, data, metric="dot") == predictions
    assert circo_rankings_from_scores(sim, ids, data) == predictions


def test_rankings_with_the_reference_removed():
    rng = np.random.default_rng(11)
    ids, data, query, images = _random_case(rng)
    sim = official.scores64(query, images, "dot")
    refs = [q.reference_img_id for q in data.queries]
    expected = dict(enumerate(official.ranked_ids(sim, ids.tolist(), exclude=refs, k=50)))
    assert (
        circo_rankings(query, images, ids, data, metric="dot", exclude_reference=True) == expected
    )


def test_reader_and_submission(tmp_path):
    (tmp_path / "annotations").mkdir()
    entries = [
        {
            "reference_img_id": 85932,
            "target_img_id": 9761,
            "relative_caption": "is held by a girl",
            "shared_concept": "a teddy bear",
            "gt_img_ids": [9761, 489535, 57541],
            "id": 0,
            "semantic_aspects": ["addition"],
        },
        {
            "reference_img_id": 1,
            "target_img_id": 2,
            "relative_caption": "r",
            "shared_concept": "s",
            "gt_img_ids": [2],
            "id": 1,
        },
    ]
    (tmp_path / "annotations" / "val.json").write_text(json.dumps(entries))
    (tmp_path / "annotations" / "test.json").write_text(
        json.dumps(
            [{"reference_img_id": 85932, "relative_caption": "c", "shared_concept": "s", "id": 0}]
        )
    )
    data = read_circo(tmp_path, "val")
    assert data.queries[0] == CIRCOQuery(
        0, 85932, "is held by a girl", "a teddy bear", 9761, (9761, 489535, 57541), ("addition",)
    )
    assert read_circo(tmp_path / "annotations" / "val.json").queries == data.queries
    test = read_circo(tmp_path, "test")
    assert not test.has_targets and test.queries[0].gt_img_ids == ()

    info = tmp_path / "image_info_unlabeled2017.json"
    info.write_text(
        json.dumps(
            {
                "images": [
                    {"id": 85932, "file_name": "000000085932.jpg"},
                    {"id": 7, "file_name": "000000000007.jpg"},
                ]
            }
        )
    )
    ids = read_coco_image_ids(info)
    assert ids.tolist() == [85932, 7]
    rankings = circo_rankings_from_scores(np.array([[0.1, 0.9]]), ids, test)
    assert rankings == {0: [7, 85932]}
    path = write_circo_submission(tmp_path / "out" / "test.json", rankings)
    assert json.loads(path.read_text()) == {"0": [7, 85932]}
    with pytest.raises(ValueError, match="at most 50 ids per query"):
        write_circo_submission(tmp_path / "bad.json", {3: list(range(51))})
    with pytest.raises(ValueError, match="a repeat for query 3"):
        write_circo_submission(tmp_path / "bad.json", {3: [1, 2, 1]})
    assert not (tmp_path / "bad.json").exists()


def test_bad_input_names_the_query(tmp_path):
    with pytest.raises(
        ValueError, match="query 1: ground-truth image 20 is not among the 'image_ids'"
    ):
        circo_metrics_from_scores(np.zeros((2, 4)), [10, 30, 40, 50], DATA)
    with pytest.raises(ValueError, match="query 0: reference image 10 is not among"):
        circo_metrics_from_scores(np.zeros((2, 4)), [20, 30, 40, 50], DATA)
    with pytest.raises(ValueError, match=r"'image_ids' parameter .* distinct"):
        circo_metrics_from_scores(np.zeros((2, 5)), [10, 20, 30, 40, 40], DATA)
    with pytest.raises(ValueError, match="a repeated image id in the ranking of query 1"):
        circo_metrics_from_predictions({"0": [30], "1": [20, 40, 20]}, DATA)
    with pytest.raises(ValueError, match=r"missing queries \[1\]"):
        circo_metrics_from_predictions({"0": [30]}, DATA)
    with pytest.raises(ValueError, match=r"unknown queries \[7\]"):
        circo_metrics_from_predictions({"0": [30], "1": [20], "7": [1]}, DATA)
    with pytest.raises(ValueError, match="'divisor' parameter"):
        circo_metrics_from_scores(SIM, IDS, DATA, divisor="hits")
    own = CIRCOSplit("val", (CIRCOQuery(3, 10, "c", "s", 10, (10,)),))
    with pytest.raises(ValueError, match="query 3: the reference image is a ground truth"):
        circo_metrics_from_scores(np.zeros((1, 5)), IDS, own, exclude_reference=True)

    path = tmp_path / "val.json"
    base = {
        "reference_img_id": 1,
        "target_img_id": 2,
        "relative_caption": "r",
        "gt_img_ids": [2, 3],
        "id": 4,
    }
    for entries, message in (
        ([base, base], "query id 4 appears twice"),
        ([{**base, "gt_img_ids": [2, 3, 2]}], "query 4: gt_img_ids has a repeated image id"),
        ([{**base, "target_img_id": 9}], "query 4: target_img_id 9 is not among its gt_img_ids"),
        ([{"id": 4}], "missing field"),
        # A bare string would otherwise be read letter by letter as aspects.
        ([{**base, "semantic_aspects": "cardinality"}], "'semantic_aspects' must be a list"),
        ([{**base, "semantic_aspects": [1]}], "entry 0: 'semantic_aspects' must be a list of str"),
    ):
        path.write_text(json.dumps(entries))
        with pytest.raises(ValueError, match=message):
            read_circo(path)
