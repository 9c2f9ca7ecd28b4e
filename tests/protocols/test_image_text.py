"""Image-text retrieval: seed 001's contract, VSE++ ranks, the Karpathy reader."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from recallkit import recall_at_k_from_scores
from recallkit.protocols import (
    image_text_recall,
    image_text_recall_from_scores,
    read_karpathy_split,
)
from tests.protocols import official

# 3 images x 4 captions; captions 0 and 1 describe image 0, caption 2 image 1, caption 3 image 2.
SIM = np.array(
    [
        [0.9, 0.2, 0.5, 0.5],
        [0.9, 0.1, 0.5, 0.1],
        [0.3, 0.6, 0.5, 0.5],
    ]
)
CAPTION_IMAGE = [0, 0, 1, 2]


def test_hand_computed_ranks_with_ties():
    r = image_text_recall_from_scores(SIM, CAPTION_IMAGE, ks=(1, 2, 5))
    # t2i, column by column: caption 0 ties image 1 at 0.9 but image 0 has the lower index -> 0;
    # caption 1: image 2 (0.6) is above image 0 (0.2) -> 1; caption 2: image 0 ties at 0.5 with a
    # lower index -> 1; caption 3: image 0 ties at 0.5 -> 1.
    assert r.per_query["t2i_ranks"].tolist() == [0, 1, 1, 1]
    # i2t, row by row: image 0's best caption (0) is first -> 0; image 1: caption 0 (0.9) above
    # caption 2 (0.5) -> 1; image 2: caption 1 (0.6) above, caption 2 ties with a lower index -> 2.
    assert r.per_query["i2t_ranks"].tolist() == [0, 1, 2]
    assert r["t2i_recall@1"] == 0.25 and r["t2i_recall@2"] == 1.0
    assert r["i2t_recall@1"] == pytest.approx(1 / 3) and r["i2t_recall@2"] == pytest.approx(2 / 3)
    # 1-indexed: mean(0,1,1,1) + 1 = 1.75, floor(median) + 1 = 2; i2t mean(0,1,2) + 1 = 2.
    assert r["t2i_mean_rank"] == 1.75 and r["t2i_median_rank"] == 2.0
    assert r["i2t_mean_rank"] == 2.0 and r["i2t_median_rank"] == 2.0
    assert r["rmean"] == pytest.approx((1 / 3 + 2 / 3 + 1 + 0.25 + 1 + 1) / 6)
    assert list(r)[:6] == [f"{d}_recall@{k}" for d in ("i2t", "t2i") for k in (1, 2, 5)]


def test_seed_001_contract_exactly():
    # Seed 001: 0-indexed ranks, ties to the lower gallery index, 4-decimal rounding, ks order.
    sim = [[0.5, 0.5, 0.1], [0.2, 0.7, 0.7], [0.3, 0.3, 0.3]]
    gt = [1, 2, 2]
    # Query 0: gallery 0 ties gallery 1 and wins -> rank 1; query 1: gallery 1 ties and wins -> 1;
    # query 2: all tie -> rank 2. recall@1 = 0, recall@2 = 2/3 = 0.6667, recall@3 = 1.
    assert recall_at_k_from_scores(sim, gt, [3, 1, 2]) == [1.0, 0.0, 0.6667]
    assert official.seed001_recall(sim, gt, [3, 1, 2]) == [1.0, 0.0, 0.6667]
    rng = np.random.default_rng(1)
    for _ in range(20):
        n, m = rng.integers(1, 12, size=2)
        sim = rng.integers(0, 4, size=(n, m)).astype(np.float64) / 4
        gt = rng.integers(0, m, size=n).tolist()
        ks = rng.permutation(np.arange(1, m + 3))[:3].tolist()
        assert recall_at_k_from_scores(sim, gt, ks) == official.seed001_recall(sim, gt, ks)


def _random_case(rng, n_images, dim=3):
    counts = rng.integers(1, 4, size=n_images)
    caption_image = np.repeat(np.arange(n_images), counts)
    rng.shuffle(caption_image)
    images = rng.integers(-2, 3, size=(n_images, dim)).astype(np.float32)
    images[rng.integers(0, n_images)] = images[0]  # an exact duplicate image
    texts = rng.integers(-2, 3, size=(len(caption_image), dim)).astype(np.float32)
    return images, texts, caption_image


@pytest.mark.parametrize("seed", range(6))
def test_random_integer_embeddings_against_vsepp(seed):
    rng = np.random.default_rng(seed)
    images, texts, caption_image = _random_case(rng, int(rng.integers(1, 15)))
    expected, t2i, i2t = official.vsepp(
        official.scores64(images, texts, "dot"), caption_image, (1, 5, 10)
    )
    r = image_text_recall(
        images, texts, caption_image, metric="dot", chunk_size=int(rng.integers(1, 7))
    )
    assert r.per_query["t2i_ranks"].tolist() == t2i.tolist()
    assert r.per_query["i2t_ranks"].tolist() == i2t.tolist()
    assert dict(r) == pytest.approx(expected)
    scores = official.scores64(images, texts, "dot")
    assert dict(image_text_recall_from_scores(scores, caption_image)) == pytest.approx(expected)
    # The t2i recall@K, rounded to 4 decimals, is seed 001's number on the transposed matrix.
    seed = official.seed001_recall(scores.T.tolist(), caption_image.tolist(), (1, 5, 10))
    assert [round(r[f"t2i_recall@{k}"], 4) for k in (1, 5, 10)] == seed


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_other_metrics_against_brute_force(metric):
    rng = np.random.default_rng(7)
    images = rng.standard_normal((20, 8))
    texts = rng.standard_normal((50, 8))
    caption_image = rng.integers(0, 20, size=50)
    caption_image[:20] = np.arange(20)
    expected, t2i, i2t = official.vsepp(
        official.scores64(images, texts, metric), caption_image, (1, 5)
    )
    r = image_text_recall(torch.from_numpy(images), texts, caption_image, ks=(1, 5), metric=metric)
    assert r.per_query["t2i_ranks"].tolist() == t2i.tolist()
    assert r.per_query["i2t_ranks"].tolist() == i2t.tolist()
    assert dict(r) == pytest.approx(expected)


def test_all_equal_scores_rank_by_index():
    images = np.ones((3, 2))
    texts = np.ones((4, 2))
    r = image_text_recall(images, texts, [2, 0, 1, 2], ks=(1, 3), metric="dot")
    # Every score ties: a caption's image ranks at its own index; image i's best caption is its
    # lowest-index caption.
    assert r.per_query["t2i_ranks"].tolist() == [2, 0, 1, 2]
    assert r.per_query["i2t_ranks"].tolist() == [1, 2, 0]


def test_lone_image_and_unknown_image_are_errors():
    with pytest.raises(ValueError, match="caption 2 pointing at unknown image 5"):
        image_text_recall_from_scores(np.zeros((3, 3)), [0, 1, 5])
    with pytest.raises(ValueError, match="no caption for image 2"):
        image_text_recall_from_scores(np.zeros((3, 2)), [0, 1])
    with pytest.raises(ValueError, match="'texts' parameter of image_text_recall"):
        image_text_recall(np.eye(2), np.eye(3), [0, 1])
    with pytest.raises(ValueError, match="'ks' parameter"):
        image_text_recall(np.eye(2), np.eye(2), [0, 1], ks=(0,))
    with pytest.raises(ValueError, match="'scores' parameter"):
        image_text_recall_from_scores(np.array([[np.nan, 1.0]]), [0, 0])


# --------------------------------------------------------------------------------- the reader


def _karpathy(path, dataset, splits_counts, extra_caption_images=0, filepath=None):
    """Write a Karpathy file: {split: (images, captions per image)}; a few images get a sixth."""
    images, imgid, sentid = [], 0, 0
    for split, (count, per_image) in splits_counts.items():
        for i in range(count):
            n = per_image + (1 if split == "test" and i < extra_caption_images else 0)
            sentences = []
            for _ in range(n):
                sentences.append(
                    {
                        "tokens": ["a", str(sentid)],
                        "raw": f"a {sentid}",
                        "imgid": imgid,
                        "sentid": sentid,
                    }
                )
                sentid += 1
            image = {
                "filename": f"im{imgid}.jpg",
                "imgid": imgid,
                "split": split,
                "sentences": sentences,
            }
            if filepath:
                image.update(filepath=filepath, cocoid=1000 + imgid)
            images.append(image)
            imgid += 1
    path.write_text(json.dumps({"images": images, "dataset": dataset}))
    return path


def test_reader_full_size_coco_and_flickr(tmp_path):
    coco = _karpathy(
        tmp_path / "dataset_coco.json",
        "coco",
        {"train": (3, 5), "test": (5000, 5), "restval": (2, 5), "val": (4, 5)},
        extra_caption_images=10,
        filepath="val2014",
    )
    split = read_karpathy_split(coco)
    assert (split.num_images, split.num_captions) == (5000, 25010)
    assert split.image_names[0] == "val2014/im3.jpg" and split.image_ids[0] == 1003
    # The first ten test images have six captions, in file order.
    assert split.caption_image[:13].tolist() == [0] * 6 + [1] * 6 + [2]
    assert split.captions[0] == "a 15"  # 3 train images x 5 captions come first in the file
    five = read_karpathy_split(coco, captions_per_image=5)
    assert five.num_captions == 25000
    assert read_karpathy_split(coco, "val").num_images == 4

    flickr = _karpathy(
        tmp_path / "dataset_flickr30k.json", "flickr30k", {"test": (1000, 5), "train": (2, 5)}
    )
    split = read_karpathy_split(flickr)
    assert (split.num_images, split.num_captions) == (1000, 5000)
    assert split.caption_image.tolist() == np.repeat(np.arange(1000), 5).tolist()


def test_reader_count_check_and_bad_captions(tmp_path):
    short = _karpathy(
        tmp_path / "dataset_coco.json", "coco", {"test": (4999, 5)}, filepath="val2014"
    )
    with pytest.raises(ValueError, match=r"dataset_coco\.json.*4999 images.*expected 5000"):
        read_karpathy_split(short)
    assert read_karpathy_split(short, check_counts=False).num_images == 4999

    bad = tmp_path / "dataset_bad.json"
    bad.write_text(
        json.dumps(
            {
                "dataset": "bad",
                "images": [
                    {
                        "filename": "a.jpg",
                        "imgid": 0,
                        "split": "test",
                        "sentences": [{"raw": "x", "imgid": 3, "sentid": 17}],
                    }
                ],
            }
        )
    )
    with pytest.raises(ValueError, match=r"caption 17 listed under image 0 .* points at image 3"):
        read_karpathy_split(bad)
    with pytest.raises(ValueError, match="no image has split 'val'"):
        read_karpathy_split(tmp_path / "dataset_coco.json", "val")
    with pytest.raises(ValueError, match="'split' parameter of read_karpathy_split"):
        read_karpathy_split(bad, "dev")
    with pytest.raises(FileNotFoundError, match="Karpathy split file not found"):
        read_karpathy_split(tmp_path / "missing.json")
