"""CIRR: the removed reference, the subset, hard and soft targets, files in and out."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recallkit.protocols import (
    CIRRQuery,
    CIRRSplit,
    cirr_rankings,
    cirr_rankings_from_scores,
    cirr_recall,
    cirr_recall_from_scores,
    read_cirr,
    write_cirr_submission,
)
from tests.protocols import official

NAMES = ("r", "t", "m1", "m2", "x", "y")
QUERIES = (
    CIRRQuery(1, "r", "q1", ("r", "t", "m1", "m2", "x"), "t", {"t": 1.0, "m1": 0.5, "x": -1.0}),
    CIRRQuery(2, "m1", "q2", ("m1", "r", "m2"), "r", {"r": 1.0, "x": 0.5}),
)
DATA = CIRRSplit("val", "rc2", NAMES, ("",) * 6, QUERIES)
#                  r    t    m1   m2   x    y
SIM = np.array([[0.9, 0.5, 0.5, 0.7, 0.1, 0.5], [0.3, 0.3, 0.8, 0.2, 0.4, 0.1]])


def test_hand_computed_hard_targets():
    r = cirr_recall_from_scores(SIM, DATA, ks=(1, 2, 5), subset_ks=(1, 2))
    # Query 1 without its reference r (0.9): m2 0.7, then t, m1, y tie at 0.5 and t has the lowest
    # index -> t ranks 1 (2 if r stayed). Subset {t, m1, m2, x}: m2, t, m1, x -> 1.
    # Query 2 without m1 (0.8): x 0.4, then r and t tie at 0.3, r first -> 1.
    # Subset {r, m2}: r -> 0.
    assert r.per_query["ranks"].tolist() == [1, 1]
    assert r.per_query["subset_ranks"].tolist() == [1, 0]
    assert dict(r) == {
        "recall@1": 0.0,
        "recall@2": 1.0,
        "recall@5": 1.0,
        "recall_subset@1": 0.5,
        "recall_subset@2": 1.0,
        "avg": 0.75,  # (recall@5 + recall_subset@1) / 2
    }
    expected = official.cirr_hard(
        SIM, NAMES, ["r", "m1"], ["t", "r"], [q.members for q in QUERIES], (1, 2, 5), (1, 2)
    )
    assert dict(r) == expected


def test_hand_computed_soft_targets():
    r = cirr_recall_from_scores(SIM, DATA, ks=(1, 2, 5), subset_ks=(1, 2), target="soft")
    # Query 1 (m2, t, m1, y, x): top 1 holds no soft target -> 0; top 2 holds t -> 1.0; the -1 of
    # x never lowers the score below 0. Query 2 (x, r, t, ...): top 1 is x -> 0.5; top 2 -> 1.0.
    # Subsets: query 1 (m2, t, m1, x) -> 0 then 1.0; query 2 (r, m2) -> 1.0 at once.
    assert dict(r) == {
        "recall@1": 0.25,
        "recall@2": 1.0,
        "recall@5": 1.0,
        "recall_subset@1": 0.5,
        "recall_subset@2": 1.0,
        "avg": 0.75,
    }
    expected = official.cirr_soft(
        SIM,
        NAMES,
        ["r", "m1"],
        [q.target_soft for q in QUERIES],
        [q.members for q in QUERIES],
        (1, 2, 5),
        (1, 2),
    )
    assert dict(r) == expected
    assert "CIRPLANT" in r.convention


def test_embeddings_give_the_matrix_result():
    # dot(query_i, e_j) = 10 * SIM[i, j] exactly: integer scores keep the ties exact.
    query = np.rint(10 * SIM).astype(np.float32)
    for target in ("hard", "soft"):
        r = cirr_recall(
            query, np.eye(6), DATA, ks=(1, 2, 5), subset_ks=(1, 2), target=target, metric="dot"
        )
        assert dict(r) == dict(
            cirr_recall_from_scores(SIM, DATA, ks=(1, 2, 5), subset_ks=(1, 2), target=target)
        )


def _random_split(rng, num_images, num_queries, set_size=6):
    names = tuple(f"img{i}" for i in range(num_images))
    queries = []
    for q in range(num_queries):
        members = [names[i] for i in rng.choice(num_images, size=set_size, replace=False)]
        reference, target, also, no = members[:4]
        rng.shuffle(members)
        soft = {target: 1.0, also: 0.5, no: -1.0}
        if q % 3 == 0:  # a soft value on the reference itself (the data has such mistakes)
            soft[reference] = 1.0
        queries.append(CIRRQuery(100 + q, reference, "c", tuple(members), target, soft))
    return CIRRSplit("val", "rc2", names, ("",) * num_images, tuple(queries))


@pytest.mark.parametrize("seed", range(5))
def test_random_ties_against_the_official_definitions(seed):
    rng = np.random.default_rng(seed)
    data = _random_split(rng, int(rng.integers(8, 40)), int(rng.integers(1, 30)))
    n, m = len(data.queries), len(data.image_names)
    query = rng.integers(-2, 3, size=(n, 3)).astype(np.float32)
    images = rng.integers(-2, 3, size=(m, 3)).astype(np.float32)
    sim = official.scores64(query, images, "dot")
    refs = [q.reference for q in data.queries]
    members = [q.members for q in data.queries]
    hard = official.cirr_hard(
        sim, data.image_names, refs, [q.target_hard for q in data.queries], members
    )
    soft = official.cirr_soft(
        sim, data.image_names, refs, [q.target_soft for q in data.queries], members
    )
    chunk = int(rng.integers(1, 9))
    assert dict(cirr_recall(query, images, data, metric="dot", chunk_size=chunk)) == pytest.approx(
        hard
    )
    assert dict(cirr_recall_from_scores(sim, data)) == pytest.approx(hard)
    assert dict(cirr_recall(query, images, data, metric="dot", target="soft")) == pytest.approx(
        soft
    )
    assert dict(cirr_recall_from_scores(sim, data, target="soft")) == pytest.approx(soft)


def test_rankings_and_submission_files(tmp_path):
    rng = np.random.default_rng(3)
    data = _random_split(rng, 70, 12)
    query = rng.integers(-2, 3, size=(12, 3)).astype(np.float32)
    images = rng.integers(-2, 3, size=(70, 3)).astype(np.float32)
    recall, subset = cirr_rankings(query, images, data, metric="dot")
    sim = official.scores64(query, images, "dot")
    refs = [[q.reference] for q in data.queries]
    expected = official.top_names(sim, data.image_names, refs, 50)
    assert list(recall) == [q.pairid for q in data.queries]
    assert list(recall.values()) == expected
    not_in_set = [
        [n for n in data.image_names if n not in q.members or n == q.reference]
        for q in data.queries
    ]
    assert list(subset.values()) == official.top_names(sim, data.image_names, not_in_set, 3)
    assert cirr_rankings_from_scores(sim, data) == (recall, subset)

    path = write_cirr_submission(tmp_path / "sub" / "recall.json", recall)
    payload = json.loads(path.read_text())
    assert payload["version"] == "rc2" and payload["metric"] == "recall"
    assert payload["100"] == expected[0] and len(payload) == 2 + 12
    path = write_cirr_submission(tmp_path / "subset.json", subset, metric="recall_subset")
    assert json.loads(path.read_text())["metric"] == "recall_subset"
    with pytest.raises(ValueError, match="at most 3 names per query for 'recall_subset'"):
        write_cirr_submission(tmp_path / "bad.json", recall, metric="recall_subset")
    with pytest.raises(ValueError, match="a repeat for pairid 5"):
        write_cirr_submission(tmp_path / "bad.json", {5: ["a", "b", "a"]})
    assert not (tmp_path / "bad.json").exists()


def _write_cirr(root, split, entries, names):
    (root / "captions").mkdir(parents=True, exist_ok=True)
    (root / "image_splits").mkdir(parents=True, exist_ok=True)
    (root / "image_splits" / f"split.rc2.{split}.json").write_text(
        json.dumps({n: f"./{n}.png" for n in names})
    )
    (root / "captions" / f"cap.rc2.{split}.json").write_text(json.dumps(entries))


def test_reader_on_official_files(tmp_path):
    names = [f"dev-{i}-0-img0" for i in range(8)]
    entries = [
        {
            "pairid": 12063,
            "reference": names[0],
            "target_hard": names[1],
            "target_soft": {names[1]: 1.0, names[2]: 0.5},
            "caption": "add a dog",
            "img_set": {"id": 3, "members": names[:6]},
            "id": 0,
        },
        {
            "pairid": 7,
            "reference": names[6],
            "target_hard": names[7],
            "target_soft": {names[7]: 1.0},
            "caption": "remove it",
            "img_set": {"id": 4, "members": [names[6], names[7], *names[:4]]},
        },
    ]
    _write_cirr(tmp_path, "val", entries, names)
    data = read_cirr(tmp_path, "val")
    assert data.image_names == tuple(names) and data.image_paths[0] == f"./{names[0]}.png"
    assert data.queries[0] == CIRRQuery(
        12063, names[0], "add a dog", tuple(names[:6]), names[1], {names[1]: 1.0, names[2]: 0.5}
    )
    assert data.has_targets

    test_entries = [
        {
            "pairid": 1,
            "reference": names[0],
            "caption": "c",
            "img_set": {"id": 1, "members": names[:6]},
        }
    ]
    _write_cirr(tmp_path, "test1", test_entries, names)
    test = read_cirr(tmp_path, "test1")
    assert not test.has_targets
    with pytest.raises(ValueError, match="split 'test1' has none"):
        cirr_recall_from_scores(np.zeros((1, 8)), test)
    recall, subset = cirr_rankings_from_scores(np.arange(8.0)[None, ::-1], test, k=3)
    # Scores 7..0 by index; the reference (index 0, score 7) is removed.
    assert recall == {1: names[1:4]} and subset == {1: names[1:4]}


def test_bad_input_names_the_query(tmp_path):
    names = ["a", "b", "c"]
    entry = {
        "pairid": 9,
        "reference": "a",
        "target_hard": "b",
        "target_soft": {},
        "caption": "",
        "img_set": {"id": 0, "members": ["a", "b", "zz"]},
    }
    _write_cirr(tmp_path, "val", [entry], names)
    with pytest.raises(ValueError, match="pairid 9: img_set member 'zz' is not an image of"):
        read_cirr(tmp_path)
    _write_cirr(tmp_path, "val", [{**entry, "reference": "q"}], names)
    with pytest.raises(ValueError, match="pairid 9: reference 'q'"):
        read_cirr(tmp_path)
    _write_cirr(tmp_path, "val", [{**entry, "img_set": {"id": 0, "members": names}}] * 2, names)
    with pytest.raises(ValueError, match="pairid 9 appears twice"):
        read_cirr(tmp_path)
    with pytest.raises(FileNotFoundError, match="CIRR image split file not found"):
        read_cirr(tmp_path, "train")

    outside = CIRRSplit(
        "val", "rc2", ("a", "b", "c"), ("",) * 3, (CIRRQuery(4, "a", "", ("a", "c"), "b"),)
    )
    with pytest.raises(ValueError, match="pairid 4: target_hard is not in its img_set"):
        cirr_recall_from_scores(np.zeros((1, 3)), outside)
    itself = CIRRSplit(
        "val", "rc2", ("a", "b"), ("",) * 2, (CIRRQuery(5, "a", "", ("a", "b"), "a"),)
    )
    with pytest.raises(ValueError, match="pairid 5: target_hard is the reference image"):
        cirr_recall_from_scores(np.zeros((1, 2)), itself)
    with pytest.raises(ValueError, match="'scores' parameter of cirr_recall_from_scores"):
        cirr_recall_from_scores(np.zeros((2, 5)), DATA)
    with pytest.raises(ValueError, match="'images' parameter of cirr_recall"):
        cirr_recall(np.zeros((2, 3)), np.ones((5, 3)), DATA)
    with pytest.raises(ValueError, match="'target' parameter"):
        cirr_recall_from_scores(SIM, DATA, target="medium")
