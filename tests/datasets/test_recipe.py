"""The benchmark recipe runs, prints each table, and its numbers equal the brute force."""

from __future__ import annotations

import pytest

from docs.recipes import benchmarks as recipe


def _recall(result):
    """The recall@K values of a result, in order."""
    return {k: v for k, v in result.items() if k.startswith("recall@")}


def test_recipe_runs_and_matches_brute_force(capsys, brute_force):
    results = recipe.main()
    out = capsys.readouterr().out
    assert list(results) == ["cub", "cars196", "sop", "inaturalist", "inshop"]
    # Miniatures: 6 test classes x 4 images (CUB, Cars196, iNaturalist), 6 x 3 (SOP), and
    # 6 In-Shop items with 2 query and 2 gallery images each.
    assert "CUB-200-2011 (cub): test (24 images) against itself, self excluded" in out
    assert "Cars196 (cars196): test (24 images) against itself" in out
    assert "Stanford Online Products (sop): test (18 images) against itself" in out
    assert "K 100, 1000 clamped" in out
    assert "iNaturalist 2018 (inaturalist): test (24 images)" in out
    assert "In-Shop Clothes (inshop): query (12) against gallery (12)" in out
    assert "recall@1  recall@10  recall@20  recall@30  recall@40  recall@50  MAP@R" in out
    assert "recall@1  recall@4  recall@16  recall@32  MAP@R" in out
    for name, (benchmark, query_embeddings, gallery_embeddings, result) in results.items():
        query, gallery, self_excluded = benchmark.evaluation_splits()
        assert not benchmark.complete and result.info["protocol"].ks == benchmark.protocol.ks
        gallery_x = query_embeddings if gallery_embeddings is None else gallery_embeddings
        recall, map_r, r_precision = brute_force(
            query_embeddings.numpy(),
            gallery_x.numpy(),
            query.labels,
            gallery.labels,
            benchmark.protocol.ks,
            self_excluded,
            metric="cosine",
        )
        assert _recall(result) == pytest.approx(recall, abs=1e-12), name
        assert result["MAP@R"] == pytest.approx(map_r, abs=1e-6), name
        assert result["R-precision"] == pytest.approx(r_precision, abs=1e-6), name
        assert result.table() in out
