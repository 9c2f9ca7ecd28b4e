"""The Python API: ``evaluate`` and ``encode_all``, checked against an independent brute force."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from recallkit import runner
from recallkit.runner.pipeline import run_evaluation, top_k, worst_classes
from recallkit.runner.sources import ImageSet


def _ranked(q, g, q_id, g_ids):
    """Gallery indices best first: float64 dot products, full stable sort on (-score, index)."""
    scores = g.astype(np.float64) @ q.astype(np.float64)
    candidates = [j for j in range(len(g)) if g_ids is None or g_ids[j] != q_id]
    return sorted(candidates, key=lambda j: (-scores[j], j))


def _brute_ranks(q, g, q_labels, g_labels, q_ids=None, g_ids=None):
    out = []
    for i in range(len(q)):
        order = _ranked(q[i], g, None if q_ids is None else q_ids[i], g_ids)
        hits = [pos for pos, j in enumerate(order) if g_labels[j] == q_labels[i]]
        out.append(hits[0] if hits else -1)
    return np.array(out)


@pytest.mark.filterwarnings("ignore:recall_at_k. ks:UserWarning")
@pytest.mark.parametrize("seed", range(6))
def test_random_against_brute_force(seed):
    # Small integer embeddings with metric="dot": every score is exact in float32, so ties are
    # real ties (broken by the lower gallery index); repeated ids exclude groups; some labels
    # are rare, so some queries are lone.
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 25)), int(rng.integers(1, 30))
    q = rng.integers(-2, 3, (n, 3)).astype(np.float32)
    g = rng.integers(-2, 3, (m, 3)).astype(np.float32)
    g[: m // 3] = g[m // 3 : 2 * (m // 3)]  # duplicate rows
    q_labels = rng.integers(0, 6, n).tolist()
    g_labels = rng.integers(0, 4, m).tolist()
    q_ids = rng.integers(0, 10, n).tolist()
    g_ids = rng.integers(0, 10, m).tolist()
    result = runner.evaluate(
        list(range(n)),
        q_labels,
        list(range(m)),
        g_labels,
        None,
        ks=(1, 2, 5),
        query_ids=q_ids,
        gallery_ids=g_ids,
        query_embeddings=q,
        gallery_embeddings=g,
        metric="dot",
        progress=False,
    )
    expected = _brute_ranks(q, g, q_labels, g_labels, q_ids, g_ids)
    np.testing.assert_array_equal(result.first_hit_ranks, expected)
    evaluated = expected >= 0
    if evaluated.any():
        for k in (1, 2, 5):
            hits = int(np.count_nonzero(expected[evaluated] < k))
            assert result[f"recall@{k}"] == hits / int(evaluated.sum())
    # Neighbour lists of the failure grid: the brute force's first K, in order.
    run = run_evaluation(
        ImageSet(tuple(range(n)), tuple(q_labels), tuple(map(str, q_ids)), "q"),
        ImageSet(tuple(range(m)), tuple(g_labels), tuple(map(str, g_ids)), "g"),
        None,
        (1,),
        query_embeddings=q,
        gallery_embeddings=g,
        metric="dot",
        progress=False,
    )
    k = 4
    got = top_k(run, np.arange(n), k)
    for i in range(n):
        want = _ranked(q[i], g, str(q_ids[i]), [str(x) for x in g_ids])[:k]
        assert [j for j in got[i].tolist() if j >= 0] == want


def test_all_equal_scores_break_ties_by_gallery_index():
    # Every score is equal (zero vectors are not allowed under cosine, so metric="dot" with
    # equal rows): the ranking is the gallery order. Query label 1 first appears at index 2.
    g = np.ones((4, 2), np.float32)
    result = runner.evaluate(
        ["q"],
        [1],
        list(range(4)),
        [0, 0, 1, 1],
        None,
        ks=(2, 3),
        query_embeddings=np.ones((1, 2), np.float32),
        gallery_embeddings=g,
        metric="dot",
        progress=False,
    )
    assert result.first_hit_ranks.tolist() == [2]
    assert dict(result) == {"recall@2": 0.0, "recall@3": 1.0}


def test_worst_classes_against_counts():
    # Three classes of four queries, leave-one-out by id: each class's recall@K is the share of
    # its evaluated queries whose brute-force first-hit rank is below K.
    rng = np.random.default_rng(3)
    q = rng.integers(-2, 3, (12, 3)).astype(np.float32)
    labels = ["a", "b", "c"] * 4
    run = run_evaluation(
        ImageSet(tuple(range(12)), tuple(labels), tuple(map(str, range(12))), "s"),
        ImageSet(tuple(range(12)), tuple(labels), tuple(map(str, range(12))), "s"),
        None,
        (1, 3),
        query_embeddings=q,
        gallery_embeddings=q,
        metric="dot",
        progress=False,
    )
    ranks = _brute_ranks(q, q, labels, labels, list(range(12)), list(range(12)))
    rows = worst_classes(run, 3, confusions=False)
    for row in rows:
        mine = np.array([lab == row.label for lab in labels]) & (ranks >= 0)
        assert row.queries == int(mine.sum())
        assert row.recall["recall@1"] == np.count_nonzero(ranks[mine] < 1) / mine.sum()
        assert row.recall["recall@3"] == np.count_nonzero(ranks[mine] < 3) / mine.sum()
    keys = [(r.recall["recall@1"], r.recall["recall@3"], r.label) for r in rows]
    assert keys == sorted(keys)


def test_evaluate_overlapping_paths_excludes_self(tmp_path, make_image):
    # Gallery: r1 (255,0,0) "r", r2 (250,0,5) "r", b1 (0,0,255) "b"; queries are r1 and b1 (the
    # same files). Excluding itself by path: r1 -> r2 (cos ~1, label r) rank 0; b1 has no other
    # "b" image: lone, excluded. recall@1 = 1/1.
    r1 = make_image(tmp_path / "r1.png", (255, 0, 0))
    r2 = make_image(tmp_path / "r2.png", (250, 0, 5))
    b1 = make_image(tmp_path / "b1.png", (0, 0, 255))

    def mean_rgb(batch):
        return np.stack([np.asarray(i, np.float32).reshape(-1, 3).mean(0) for i in batch])

    result = runner.evaluate(
        [str(r1), tmp_path / "." / "b1.png"],
        ["r", "b"],
        [r1, r2, b1],
        ["r", "r", "b"],
        mean_rgb,
        ks=(1,),
        progress=False,
    )
    assert result.first_hit_ranks.tolist() == [0, -1]
    assert (result["recall@1"], result.num_excluded) == (1.0, 1)


def test_encode_all_batches_and_in_memory_images():
    images = [Image.new("RGB", (2, 2), (i, 0, 0)) for i in range(5)]
    sizes = []

    def encoder(batch):
        sizes.append(len(batch))
        return np.array([[np.asarray(im)[0, 0, 0], 1.0] for im in batch])

    out = runner.encode_all(images, encoder, batch_size=2, progress=False)
    assert sizes == [2, 2, 1]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out[:, 0], [0, 1, 2, 3, 4])


def test_encode_images_skip_bad(tmp_path, make_image):
    good = make_image(tmp_path / "g.png", (4, 5, 6))
    bad = tmp_path / "b.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    enc = runner.encode_images(
        [bad, good], lambda b: np.ones((len(b), 2)), skip_bad=True, progress=False
    )
    assert enc.kept.tolist() == [False, True]
    assert np.isnan(enc.embeddings[0]).all()
    assert [b.path for b in enc.bad] == [str(bad)]


def test_evaluate_argument_errors():
    emb = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="'query_labels' parameter of evaluate"):
        runner.evaluate(
            [0, 1], [0], [0, 1], [0, 1], None, query_embeddings=emb, gallery_embeddings=emb
        )
    with pytest.raises(ValueError, match="'ks' parameter of evaluate must be positive"):
        runner.evaluate(
            [0, 1],
            [0, 1],
            [0, 1],
            [0, 1],
            None,
            ks=(0,),
            query_embeddings=emb,
            gallery_embeddings=emb,
        )
    with pytest.raises(ValueError, match="'encoder_fn' parameter of evaluate must be given"):
        runner.evaluate([0, 1], [0, 1], [0, 1], [0, 1], None)
    with pytest.raises(ValueError, match="given together"):
        runner.evaluate(
            [0, 1],
            [0, 1],
            [0, 1],
            [0, 1],
            None,
            query_ids=[1, 2],
            query_embeddings=emb,
            gallery_embeddings=emb,
        )
    with pytest.raises(ValueError, match="have 3 rows but the gallery set has 2"):
        runner.evaluate(
            [0, 1],
            [0, 1],
            [0, 1],
            [0, 1],
            None,
            query_embeddings=emb,
            gallery_embeddings=np.ones((3, 2)),
        )
    with pytest.raises(ValueError, match="single path"):
        runner.evaluate("folder", [0], [0], [0], None)


def test_package_exports():
    import recallkit

    assert runner.evaluate is not None and runner.encode_all is not None
    if hasattr(recallkit, "evaluate"):  # re-exported by the package (the lead's __init__)
        assert recallkit.evaluate is runner.evaluate
        assert recallkit.encode_all is runner.encode_all
