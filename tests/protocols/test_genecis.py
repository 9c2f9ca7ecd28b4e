"""GeneCIS: per-sample galleries, pessimistic or official ties, sizes read from the data."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from recallkit.protocols import (
    GENECIS_TASKS,
    genecis_recall,
    genecis_recall_from_embeddings,
    genecis_summary,
    read_genecis,
)
from recallkit.protocols.genecis import read_genecis_tasks
from tests.protocols import official


def test_hand_computed_pessimistic_ties():
    scores = np.array(
        [
            [0.9, 0.1, 0.2, 0.3],  # target alone on top -> 0
            [0.5, 0.5, 0.1, 0.5],  # two distractors tie with the target -> 2, never 0
            [0.2, 0.7, 0.9, 0.1],  # two distractors above -> 2
            [0.4, 0.4, 0.4, 0.4],  # all equal -> below all three distractors -> 3
        ]
    )
    r = genecis_recall(scores, ks=(1, 2, 3))
    assert r.per_query["ranks"].tolist() == [0, 2, 2, 3]
    assert dict(r) == {"recall@1": 0.25, "recall@2": 0.25, "recall@3": 0.75}
    assert r.per_query["gallery_sizes"].tolist() == [4, 4, 4, 4]
    # Moving the target to another column changes nothing but its position.
    moved = np.stack([np.roll(row, 2) for row in scores])
    assert genecis_recall(moved, ks=(1, 2, 3), target_index=2).per_query["ranks"].tolist() == [
        0,
        2,
        2,
        3,
    ]


def test_hand_computed_official_ties():
    # The official script's stable descending sort: equal scores keep column order.
    scores = np.array(
        [
            [0.9, 0.1, 0.2, 0.3],  # target alone on top -> 0
            [0.5, 0.5, 0.1, 0.5],  # ties with two distractors; column 0 comes first -> 0
            [0.2, 0.7, 0.9, 0.1],  # two distractors above -> 2
            [0.4, 0.4, 0.4, 0.4],  # all equal -> first -> 0
        ]
    )
    r = genecis_recall(scores, ks=(1, 2, 3), ties="official")
    assert r.per_query["ranks"].tolist() == [0, 0, 2, 0]
    assert dict(r) == {"recall@1": 0.75, "recall@2": 0.75, "recall@3": 1.0}
    assert "official" in r.convention
    # Target in column 2: distractors in columns 0 and 1 come before it on a tie, column 3 after.
    # Row 1 becomes [0.1, 0.5, 0.5, 0.5] -> 1 (column 1); row 3 [0.4] * 4 -> 2.
    moved = np.stack([np.roll(row, 2) for row in scores])
    r = genecis_recall(moved, ks=(1,), target_index=2, ties="official")
    assert r.per_query["ranks"].tolist() == [0, 1, 2, 2]
    # A duplicate of the target among the distractors: official rank 0, pessimistic rank 1.
    q = np.array([[1.0, 0.0]])
    c = np.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    assert genecis_recall_from_embeddings(q, c, ties="official").per_query["ranks"].tolist() == [0]
    assert genecis_recall_from_embeddings(q, c).per_query["ranks"].tolist() == [1]
    with pytest.raises(ValueError, match="'ties' parameter of genecis_recall"):
        genecis_recall(scores, ties="optimistic")
    # One summary never mixes the two rules.
    parts = {"focus_object": genecis_recall(scores), "change_object": r}
    with pytest.raises(ValueError, match=r"'results' parameter of genecis_summary.*one tie rule"):
        genecis_summary(parts)


def test_embeddings_with_a_duplicate_of_the_target():
    q = np.array([[1.0, 0.0], [0.0, 2.0]])
    c = np.array(
        [
            [[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]],  # cosine: the distractor [2, 0] equals the target
            [[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]],  # the target wins
        ]
    )
    r = genecis_recall_from_embeddings(q, torch.from_numpy(c), ks=(1, 2))
    assert r.per_query["ranks"].tolist() == [1, 0]
    # Dot products: sample 0's distractor scores 2 > 1; sample 1's [1, 1] ties the target at 2.
    assert genecis_recall_from_embeddings(q, c, metric="dot").per_query["ranks"].tolist() == [1, 1]
    # Euclidean: both targets are the nearest (distances 0 and 1, against 1 and 2 at best).
    assert genecis_recall_from_embeddings(q, c, metric="euclidean").per_query["ranks"].tolist() == [
        0,
        0,
    ]


def test_variable_gallery_sizes():
    scores = np.array([[0.5, 0.6, np.nan, np.nan], [0.5, 0.1, 0.2, 0.9], [0.3, 0.3, 0.3, np.nan]])
    r = genecis_recall(scores, ks=(1, 2), gallery_sizes=[2, 4, 3])
    # Sample 0 has 2 candidates (0.6 above) -> 1; sample 1: 0.9 above -> 1; sample 2: two ties -> 2.
    assert r.per_query["ranks"].tolist() == [1, 1, 2]
    with pytest.raises(
        ValueError, match="'scores' parameter of genecis_recall must be free of NaN"
    ):
        genecis_recall(scores)


@pytest.mark.parametrize("seed", range(5))
def test_random_ties_against_the_pessimistic_definition(seed):
    rng = np.random.default_rng(seed)
    n, width = int(rng.integers(1, 40)), int(rng.integers(2, 16))
    scores = rng.integers(0, 4, size=(n, width)).astype(np.float32)
    sizes = rng.integers(1, width + 1, size=n)
    target = np.array([rng.integers(0, s) for s in sizes])
    expected, ranks = official.genecis_pessimistic(scores, target, sizes)
    r = genecis_recall(scores, target_index=target, gallery_sizes=sizes)
    assert r.per_query["ranks"].tolist() == ranks.tolist()
    assert dict(r) == pytest.approx(expected)

    query = rng.integers(-2, 3, size=(n, 3)).astype(np.float32)
    cands = rng.integers(-2, 3, size=(n, width, 3)).astype(np.float32)
    sim = np.einsum("nd,ngd->ng", query.astype(np.float64), cands.astype(np.float64))
    expected, ranks = official.genecis_pessimistic(sim)
    r = genecis_recall_from_embeddings(query, cands, metric="dot")
    assert r.per_query["ranks"].tolist() == ranks.tolist()


@pytest.mark.parametrize("seed", range(5))
def test_random_ties_against_the_official_order(seed):
    rng = np.random.default_rng(100 + seed)
    n, width = int(rng.integers(1, 40)), int(rng.integers(2, 16))
    scores = rng.integers(0, 4, size=(n, width)).astype(np.float32)
    sizes = rng.integers(1, width + 1, size=n)
    target = np.array([rng.integers(0, s) for s in sizes])
    expected, ranks = official.genecis_official(scores, target, sizes)
    r = genecis_recall(scores, target_index=target, gallery_sizes=sizes, ties="official")
    assert r.per_query["ranks"].tolist() == ranks.tolist()
    assert dict(r) == pytest.approx(expected)
    # The pessimistic rank is never below the official one.
    pessimistic = genecis_recall(scores, target_index=target, gallery_sizes=sizes)
    assert (pessimistic.per_query["ranks"] >= r.per_query["ranks"]).all()


def test_summary_averages_recall_at_1_over_the_four_tasks():
    results = {
        task: genecis_recall(np.array([[1.0, 0.0]] * (i + 1) + [[0.0, 1.0]]), task=task)
        for i, task in enumerate(GENECIS_TASKS)
    }
    # recall@1 per task: 1/2, 2/3, 3/4, 4/5; their unweighted mean.
    s = genecis_summary(results)
    assert s["average_recall@1"] == pytest.approx((1 / 2 + 2 / 3 + 3 / 4 + 4 / 5) / 4)
    assert list(s.parts) == list(GENECIS_TASKS) and s.num_queries == 2 + 3 + 4 + 5
    assert dict(genecis_summary({"focus_object": results["focus_object"]})) == {}
    with pytest.raises(ValueError, match="'results' parameter of genecis_summary"):
        genecis_summary({"colour": results["focus_object"]})


def test_reader_on_official_files(tmp_path):
    vg = {"image_id": "2376", "instance_bbox": [10, 20, 30, 40]}
    entries = [
        {
            "reference": vg,
            "condition": "color",
            "target": {"image_id": "9", "instance_bbox": [1, 2, 3, 4]},
            "gallery": [vg] * 9,
        }
    ]
    (tmp_path / "focus_attribute.json").write_text(json.dumps(entries))
    coco = [
        {
            "reference": {"val_image_id": 1},
            "condition": "dog",
            "target": {"val_image_id": 2},
            "gallery": [{"val_image_id": i} for i in range(3, 17)],
        }
    ]
    for task in ("change_attribute", "focus_object", "change_object"):
        (tmp_path / f"{task}.json").write_text(json.dumps(entries if "attribute" in task else coco))
    tasks = read_genecis_tasks(tmp_path)
    fa = tasks["focus_attribute"]
    assert (
        fa.samples[0].target == "vg:9:1,2,3,4" and fa.samples[0].reference == "vg:2376:10,20,30,40"
    )
    assert fa.gallery_sizes.tolist() == [10]
    assert tasks["change_object"].gallery_sizes.tolist() == [15]
    assert tasks["change_object"].samples[0].candidates[:3] == ("coco:2", "coco:3", "coco:4")

    bad = tmp_path / "focus_object.json"
    bad.write_text(json.dumps([coco[0], {**coco[0], "target": None}]))
    with pytest.raises(ValueError, match="focus_object sample 1: the sample has no target"):
        read_genecis(bad)
    bad.write_text(json.dumps([{**coco[0], "gallery": []}]))
    with pytest.raises(ValueError, match="sample 0: 'gallery' must be a non-empty list"):
        read_genecis(bad)
    with pytest.raises(ValueError, match="'task' parameter of read_genecis"):
        read_genecis(tmp_path / "focus_attribute.json", task="attribute")


def test_bad_input():
    with pytest.raises(ValueError, match="sample 1's gallery has no target"):
        genecis_recall(np.zeros((2, 3)), target_index=[0, -1])
    with pytest.raises(ValueError, match="sample 0's gallery has no target"):
        genecis_recall(np.zeros((2, 4)), target_index=[3, 0], gallery_sizes=[3, 4])
    with pytest.raises(ValueError, match="'gallery_sizes' parameter"):
        genecis_recall(np.zeros((2, 3)), gallery_sizes=[3, 5])
    with pytest.raises(ValueError, match="'candidates' parameter"):
        genecis_recall_from_embeddings(np.zeros((2, 3)), np.zeros((3, 4, 3)))
