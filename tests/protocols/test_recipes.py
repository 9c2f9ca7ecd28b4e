"""The two protocol recipes run and print every benchmark's table."""

from __future__ import annotations

import json

from docs.recipes import composed_retrieval, image_text
from recallkit.protocols import read_genecis_tasks, read_karpathy_split


def test_image_text_recipe_prints_both_tables(capsys):
    image_text.main()
    out = capsys.readouterr().out
    assert (
        "coco test (synthetic): 200 images" in out
        and "flickr30k test (synthetic): 100 images" in out
    )
    assert out.count("t2i_median_rank") == 2


def test_image_text_recipe_writes_the_karpathy_format(tmp_path):
    path = image_text.write_karpathy_file(tmp_path, "flickr30k", num_test=4, captions_per_image=5)
    payload = json.loads(path.read_text())
    assert payload["dataset"] == "flickr30k" and {im["split"] for im in payload["images"]} == {
        "test",
        "train",
    }
    split = read_karpathy_split(path, check_counts=False)
    assert (split.num_images, split.num_captions) == (4, 20)


def test_composed_retrieval_recipe_prints_every_benchmark(capsys):
    composed_retrieval.main()
    out = capsys.readouterr().out
    for title in ("CIRR val", "CIRCO val", "FashionIQ val", "GeneCIS"):
        assert title in out
    assert "cirr_test1_recall.json: 60 queries, 50 names each" in out
    assert "cirr_test1_recall_subset.json: 60 queries, 3 names each" in out
    assert "circo_test.json: 30 queries" in out
    assert "average_recall@1" in out and "mean_recall@50" in out
    assert "mAP@10[cardinality]" in out and "mAP@10[viewpoint]" in out


def test_genecis_files_have_the_documented_gallery_sizes(tmp_path):
    import numpy as np

    composed_retrieval.write_genecis_files(tmp_path, num_samples=3, rng=np.random.default_rng(0))
    sizes = {
        task: data.gallery_sizes.tolist() for task, data in read_genecis_tasks(tmp_path).items()
    }
    assert sizes == {
        "focus_attribute": [10] * 3,
        "change_attribute": [10] * 3,
        "focus_object": [15] * 3,
        "change_object": [15] * 3,
    }
