"""``recallkit evaluate`` end to end on image folders and manifests written with Pillow."""

from __future__ import annotations

import json
import re
from html import unescape

import numpy as np
import pytest
import torch

from tests.runner.checks import valid_run

# The hand case (conftest.hand_case), encoder = mean RGB, cosine similarity:
#   q1 (250, 10, 0), cat: cos with red (255,0,0) = 250/|q1| = 0.9992; with orange (200,50,0)
#       = 50500/(250.20*206.16) = 0.979; green 0.04; blue 0. Nearest: red (cat) -> rank 0.
#   q2 (0, 0, 250), cat: blue (dog, gallery 3) cos 1; red, green, orange all exactly 0 (a tie,
#       broken by the lower gallery index: red, index 0, a cat) -> first hit rank 1.
#   q3 (10, 250, 0), dog: green (cat) 0.9992, orange (dog) 14500/(250.20*206.16) = 0.281,
#       red 0.04, blue 0 -> first hit rank 1.
# recall@1 = 1/3, recall@2 = 3/3 = 1.
HAND_RANKS = [0, 1, 1]


def _evaluate(cli, hand_case, encoder_module, tmp_path, *extra):
    query, gallery = hand_case
    name, _ = encoder_module
    return cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        f"{name}:mean_rgb",
        "--ks",
        "1",
        "2",
        "--cache-dir",
        tmp_path / "cache",
        *extra,
    )


def test_hand_case_exact_recall_and_report(cli, hand_case, encoder_module, tmp_path, read_json):
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, "--json", tmp_path / "run.json")
    assert res.rc == 0, res.err
    # The seed's report template, exactly, then the worst classes.
    expected_report = (
        "[evaluation]\n"
        "  num queries:   3\n"
        "  num gallery:   4\n"
        "  embedding_dim: 3\n"
        "\n"
        "[metrics]\n"
        "  recall@1: 0.3333\n"
        "  recall@2: 1.0000\n"
    )
    assert res.out.startswith(expected_report)
    record = read_json(tmp_path / "run.json")
    assert record["metrics"] == {"recall@1": 1 / 3, "recall@2": 1.0}
    assert record["queries"]["first_hit_rank"] == HAND_RANKS
    query, _ = hand_case
    # Each query by its path relative to the folder: the same on every machine.
    expected_ids = ["cat/q1.png", "cat/q2.png", "dog/q3.png"]
    assert record["queries"]["ids"] == expected_ids
    assert record["queries"]["paths"] == expected_ids
    assert all((query / name).is_file() for name in expected_ids)
    assert record["queries"]["labels"] == ["cat", "cat", "dog"]


def test_json_schema(cli, hand_case, encoder_module, tmp_path, read_json):
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, "--json", tmp_path / "run.json")
    assert res.rc == 0, res.err
    record = valid_run(tmp_path / "run.json")
    assert record["format"] == "recallkit.evaluation/4"
    expected_keys = {
        "format",
        "recallkit_version",
        "created",
        "tag",
        "producer",
        "metric",
        "definitions",
        "ks",
        "effective_ks",
        "metrics",
        "num_queries",
        "num_evaluated",
        "num_excluded",
        "num_gallery",
        "embedding_dim",
        "query_source",
        "gallery_source",
        "sources",
        "encoder",
        "cache",
        "seconds",
        "skipped_images",
        "worst_classes",
        "queries",
        "num_tied",
        "bounds",
    }
    assert set(record) == expected_keys
    # q2 (0, 0, 250) scores 0 against cat/a, cat/b and dog/a alike: its first hit (cat/a, rank
    # 1) is tied with dog/a, so rank 1 or 2 by the tie rule; recall@2 is 2/3 or 1.
    assert record["num_tied"] == 1
    assert record["bounds"] == {"recall@1": [1 / 3, 1 / 3], "recall@2": [2 / 3, 1.0]}
    assert record["ks"] == [1, 2]
    assert record["metric"] == "cosine"
    assert record["definitions"]["similarity"] == "cosine"
    assert record["definitions"]["self_exclusion"] == "ids"  # path identities
    assert (record["num_queries"], record["num_gallery"], record["embedding_dim"]) == (3, 4, 3)
    assert record["num_excluded"] == 0
    assert record["cache"] == {"gallery": "miss", "query": "miss"}
    assert record["encoder"]["encoder"].startswith("callable:")
    assert set(record["queries"]) == {
        "ids",
        "labels",
        "paths",
        "first_hit_rank",
        "values",
        "nearest_label",
    }
    # Paths relative to the query folder; each query's nearest gallery item's label (q1: red,
    # a cat; q2: blue, a dog; q3: green, a cat).
    assert record["queries"]["paths"] == ["cat/q1.png", "cat/q2.png", "dog/q3.png"]
    assert record["queries"]["nearest_label"] == ["cat", "dog", "cat"]
    assert record["queries"]["values"] == {"recall@1": [1.0, 0.0, 0.0], "recall@2": [1.0] * 3}
    assert record["skipped_images"] == []
    assert record["sources"]["options"]["ks"] == ["1", "2"]


def test_worst_classes(cli, hand_case, encoder_module, tmp_path, read_json):
    # Per class: cat has q1 (rank 0) and q2 (rank 1): recall@1 = 1/2, recall@2 = 1;
    # dog has q3 (rank 1): recall@1 = 0, recall@2 = 1. Worst first: dog, then cat.
    # Confusions: q3 (dog) ranks green (cat) first; q2 (cat) ranks blue (dog) first.
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, "--json", tmp_path / "run.json")
    worst = read_json(tmp_path / "run.json")["worst_classes"]
    assert [(w["label"], w["queries"], w["recall"]) for w in worst] == [
        ("dog", 1, {"recall@1": 0.0, "recall@2": 1.0}),
        ("cat", 2, {"recall@1": 0.5, "recall@2": 1.0}),
    ]
    assert [(w["confused_with"], w["confused_count"], w["missed_at_1"]) for w in worst] == [
        ("cat", 1, 1),
        ("dog", 1, 1),
    ]
    assert "[worst classes]" in res.out
    assert "cat (1 of 1 misses)" in res.out


def test_failure_grid_png_and_html(cli, hand_case, encoder_module, tmp_path):
    # Worst queries (largest first-hit rank, then index): q2, q3, q1. Their top-2:
    #   q2 (cat): blue (dog, wrong), red (cat, right)
    #   q3 (dog): green (cat, wrong), orange (dog, right)
    #   q1 (cat): red (cat, right), orange (dog, wrong)
    html = tmp_path / "grid.html"
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, "--show-topk", 2, "--show-out", html)
    assert res.rc == 0, res.err
    rows = html.read_text().split("<tr>")[1:]
    assert ["query #1" in rows[0], "query #2" in rows[1], "query #0" in rows[2]] == [True] * 3
    assert [_marks(row) for row in rows] == [["no", "ok"], ["no", "ok"], ["ok", "no"]]
    png = tmp_path / "grid.png"
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, "--show-out", png)
    assert res.rc == 0, res.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size < 200_000


def _marks(row_html: str) -> list[str]:
    """The classes of a grid row's neighbour cells (after the query cell)."""
    return [piece.split('"')[0] for piece in row_html.split('<td class="')[2:]]


def test_leave_one_out_folder_excludes_self(cli, tmp_path, make_image, encoder_module):
    # One folder against itself. a/1 (255,0,0), a/2 (250,10,0), b/1 (0,0,255), b/2 (10,0,250):
    # without self-exclusion every query would find itself at rank 0. Excluding itself, each
    # image's nearest other image is its own class partner (cos > 0.99 vs < 0.05): recall@1 = 1.
    # c/1 (0,255,0) is alone in its class: lone, excluded and counted.
    root = tmp_path / "images"
    for rel, rgb in [
        ("a/1.png", (255, 0, 0)),
        ("a/2.png", (250, 10, 0)),
        ("b/1.png", (0, 0, 255)),
        ("b/2.png", (10, 0, 250)),
        ("c/1.png", (0, 255, 0)),
    ]:
        make_image(root / rel, rgb)
    name, _ = encoder_module
    res = cli(
        "evaluate",
        "--images",
        root,
        "--callable",
        f"{name}:mean_rgb",
        "--ks",
        "1",
        "--cache-dir",
        tmp_path / "cache",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    assert "num queries:   5\n  num excluded:  1\n" in res.out
    assert "recall@1: 1.0000" in res.out
    assert "1 of 5 queries have no gallery image" in res.err


def _ids_manifest_case(tmp_path, make_image, delimiter=","):
    # Rows (path, label, id): a cat x, b cat x, c cat y, d dog z. Embeddings (metric dot, exact):
    # a = b = (1, 0), c = (0, 1), d = (1, 1).
    # a: b is excluded (same id x); candidates c (a.c = 0), d (a.d = 1): d (dog) first,
    #    then c (cat): first hit rank 1.  b: the same, rank 1.
    # c: candidates a (0), b (0), d (1): d (dog) first, then a (cat): rank 1.
    # d: no other dog: lone, excluded. recall@1 = 0/3, recall@2 = 3/3.
    # With path identities only (no id column), a would find b (score 1, lower index than d).
    for name in "abcd":
        make_image(tmp_path / "img" / f"{name}.png", (1, 2, 3))
    rows = [
        ("img/a.png", "cat", "x"),
        ("img/b.png", "cat", "x"),
        ("img/c.png", "cat", "y"),
        ("img/d.png", "dog", "z"),
    ]
    suffix = ".tsv" if delimiter == "\t" else ".csv"
    manifest = tmp_path / f"set{suffix}"
    lines = [delimiter.join(("path", "label", "id"))] + [delimiter.join(r) for r in rows]
    manifest.write_text("\n".join(lines) + "\n")
    np.save(tmp_path / "emb.npy", np.array([[1, 0], [1, 0], [0, 1], [1, 1]], dtype=np.float32))
    return manifest


@pytest.mark.parametrize("delimiter", [",", "\t"])
def test_manifest_with_id_column(cli, tmp_path, make_image, read_json, delimiter):
    manifest = _ids_manifest_case(tmp_path, make_image, delimiter)
    res = cli(
        "evaluate",
        "--images",
        manifest,
        "--embeddings",
        tmp_path / "emb.npy",
        "--metric",
        "dot",
        "--ks",
        "1",
        "2",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    record = read_json(tmp_path / "r.json")
    assert record["queries"]["first_hit_rank"] == [1, 1, 1, -1]
    assert record["metrics"] == {"recall@1": 0.0, "recall@2": 1.0}
    assert record["num_excluded"] == 1
    assert record["queries"]["ids"] == ["x", "x", "y", "z"]


def test_manifest_without_header_or_ids(cli, tmp_path, make_image, read_json):
    # Same rows without the id column and without a header: identities are the paths, so a
    # finds b (score 1, index 1 < 3) -> rank 0; b finds a -> rank 0; c: d (1) first, then a (0,
    # tie with b, lower index) -> rank 1; d lone. recall@1 = 2/3.
    _ids_manifest_case(tmp_path, make_image)
    manifest = tmp_path / "plain.csv"
    manifest.write_text(
        "img/a.png,cat\nimg/b.png,cat\n# a comment\n\nimg/c.png,cat\nimg/d.png,dog\n"
    )
    res = cli(
        "evaluate",
        "--images",
        manifest,
        "--embeddings",
        tmp_path / "emb.npy",
        "--metric",
        "dot",
        "--ks",
        "1",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    assert read_json(tmp_path / "r.json")["queries"]["first_hit_rank"] == [0, 0, 1, -1]


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
def test_query_and_gallery_manifests_with_embedding_files(cli, tmp_path, make_image, fmt):
    # Query q (label 1) = (1, 0); gallery g0 label 2 = (2, 0), g1 label 1 = (1, 1),
    # g2 label 1 = (0, 3). Cosine: g0 1.0, g1 0.707, g2 0 -> first hit rank 1.
    for name in ("q", "g0", "g1", "g2"):
        make_image(tmp_path / f"{name}.png", (5, 5, 5))
    (tmp_path / "q.tsv").write_text("q.png\t1\n")
    (tmp_path / "g.tsv").write_text("g0.png\t2\ng1.png\t1\ng2.png\t1\n")
    q = torch.tensor([[1.0, 0.0]])
    g = torch.tensor([[2.0, 0.0], [1.0, 1.0], [0.0, 3.0]])
    if fmt == "pt":
        torch.save(q, tmp_path / "q.pt")
        torch.save({"embeddings": g}, tmp_path / "g.pt")
    else:
        from safetensors.torch import save_file

        save_file({"embeddings": q}, tmp_path / "q.safetensors")
        save_file({"x": g}, tmp_path / "g.safetensors")
    res = cli(
        "evaluate",
        "--query",
        tmp_path / "q.tsv",
        "--gallery",
        tmp_path / "g.tsv",
        "--query-embeddings",
        tmp_path / f"q.{fmt}",
        "--gallery-embeddings",
        tmp_path / f"g.{fmt}",
        "--ks",
        "1",
        "2",
    )
    assert res.rc == 0, res.err
    assert "recall@1: 0.0000" in res.out
    assert "recall@2: 1.0000" in res.out


def test_benchmark_source(cli, tmp_path, make_image, monkeypatch, read_json):
    # A stand-in benchmark whose gallery is its query split (leave-one-out, like CUB):
    # e0 label 7 (1, 0), e1 label 7 (1, 0), e2 label 8 (0, 1): e0 -> e1 rank 0, e1 -> e0 rank 0,
    # e2 is lone. Ks come from the protocol (1, 2) when --ks is not given.
    import types

    import recallkit.datasets as datasets

    paths = tuple(make_image(tmp_path / "b" / f"e{i}.png", (3, 3, 3)) for i in range(3))
    split = types.SimpleNamespace(paths=paths, labels=np.array([7, 7, 8], dtype=np.int64))
    bench = types.SimpleNamespace(
        evaluation_splits=lambda: (split, split, True),
        protocol=types.SimpleNamespace(ks=(1, 2)),
    )
    seen = {}

    def fake_load(name, root):
        seen["args"] = (name, str(root))
        return bench

    monkeypatch.setattr(datasets, "load_benchmark", fake_load)
    np.save(tmp_path / "e.npy", np.array([[1, 0], [1, 0], [0, 1]], dtype=np.float32))
    res = cli(
        "evaluate",
        "--benchmark",
        "toy",
        "--root",
        tmp_path / "b",
        "--embeddings",
        tmp_path / "e.npy",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    record = read_json(tmp_path / "r.json")
    assert seen["args"] == ("toy", str(tmp_path / "b"))
    assert record["ks"] == [1, 2]
    assert record["queries"]["first_hit_rank"] == [0, 0, -1]
    assert record["metrics"]["recall@1"] == 1.0


def test_a_label_only_in_the_query_is_excluded_and_counted(
    cli, hand_case, encoder_module, tmp_path, make_image, read_json
):
    query, _ = hand_case
    make_image(query / "bird" / "q4.png", (1, 1, 1))
    res = _evaluate(
        cli,
        hand_case,
        encoder_module,
        tmp_path,
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    record = read_json(tmp_path / "r.json")
    # Query folders in order: bird/q4, cat/q1, cat/q2, dog/q3. The bird query is excluded and
    # counted; the others rank as in the hand case.
    assert record["queries"]["first_hit_rank"] == [-1, *HAND_RANKS]
    # The counts of the glossary in recallkit.result: all 4 queries given, 3 evaluated, 1 excluded.
    counts = (record["num_queries"], record["num_evaluated"], record["num_excluded"])
    assert counts == (4, 3, 1)
    assert record["metrics"]["recall@1"] == 1 / 3


def test_callable_may_be_the_encoder_function_itself(cli, hand_case, encoder_module, tmp_path):
    """A one-argument callable is the encoder (it used to be called with no arguments)."""
    query, gallery = hand_case
    name, _ = encoder_module
    out = {}
    for target in ("mean_rgb", "mean_rgb_fn"):
        res = cli(
            "evaluate",
            "--query",
            query,
            "--gallery",
            gallery,
            "--callable",
            f"{name}:{target}",
            "--ks",
            "1",
            "2",
            "--no-cache",
            "--json",
            tmp_path / f"{target}.json",
        )
        assert res.rc == 0, res.err
        out[target] = json.loads((tmp_path / f"{target}.json").read_text())
    assert out["mean_rgb_fn"]["queries"]["first_hit_rank"] == HAND_RANKS
    assert out["mean_rgb_fn"]["metrics"] == out["mean_rgb"]["metrics"]


def test_the_weight_free_pixels_encoder(cli, hand_case, tmp_path):
    """``recallkit.runner.encoders:pixels`` on solid colours: rank by a brute force by hand.

    A solid image's row is its RGB / 255 repeated over 16x16 pixels, then 1.
    """
    query, gallery = hand_case
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--ks",
        "1",
        "--no-cache",
        "--callable",
        "recallkit.runner.encoders:pixels",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    record = json.loads((tmp_path / "r.json").read_text())

    def row(rgb):
        return np.concatenate([np.tile(np.array(rgb) / 255.0, 256), [1.0]])

    g = np.stack([row(c) for c in [(255, 0, 0), (0, 255, 0), (200, 50, 0), (0, 0, 255)]])
    q = np.stack([row(c) for c in [(250, 10, 0), (0, 0, 250), (10, 250, 0)]])
    g_labels, q_labels = ["cat", "cat", "dog", "dog"], ["cat", "cat", "dog"]
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
        g / np.linalg.norm(g, axis=1, keepdims=True)
    ).T
    ranks = []
    for i in range(3):
        order = sorted(range(4), key=lambda j: (-cos[i, j], j))
        ranks.append(next(r for r, j in enumerate(order) if g_labels[j] == q_labels[i]))
    # By hand: q1 (red) finds cat/a first; q2 (blue) finds dog/b, then dog/a (the smaller norm
    # wins at equal dot 1), then cat/a; q3 (green) finds cat/b, then dog/a.
    assert ranks == [0, 2, 1]
    assert record["queries"]["first_hit_rank"] == ranks


def test_quiet_prints_nothing_but_errors(
    cli, hand_case, encoder_module, tmp_path, read_json, make_image
):
    run_file = tmp_path / "run.json"
    extra = ("--json", run_file, "--history", tmp_path / "runs.jsonl", "--quiet")
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, *extra)
    assert (res.rc, res.out, res.err) == (0, "", "")
    assert read_json(run_file)["metrics"] == {"recall@1": 1 / 3, "recall@2": 1.0}
    # A note that would go to stderr (a query whose label the gallery lacks) is dropped too.
    query, _ = hand_case
    cats = tmp_path / "cats"
    make_image(cats / "cat" / "a.png", (255, 0, 0))
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        cats,
        "--callable",
        f"{encoder_module[0]}:mean_rgb",
        "--cache-dir",
        tmp_path / "cache",
        "--quiet",
    )
    assert (res.rc, res.out, res.err) == (0, "", "")
    res = cli("plot", tmp_path / "runs.jsonl", "-o", tmp_path / "p.png", "--quiet")
    assert (res.rc, res.out, res.err) == (0, "", "")
    assert (tmp_path / "p.png").is_file()
    res = cli("compare", run_file, run_file, "--quiet")
    assert (res.rc, res.out, res.err) == (0, "", "")
    # An error still prints its one line and exits 2.
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, "--worst", "-1", "--quiet")
    assert res.rc == 2 and res.out == ""
    expected = "--worst takes a number of classes, 0 or more. Got -1."
    assert res.err == f"recallkit evaluate: error: {expected}\n"


def test_failure_grids_share_the_legend_and_the_run_files_rank_base(
    cli, hand_case, encoder_module, tmp_path, read_json
):
    from recallkit.runner.grid import LEGEND, GridRow, Neighbour, _png_figure

    html = tmp_path / "grid.html"
    extra = ("--show-topk", 2, "--show-out", html, "--json", tmp_path / "run.json")
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, *extra)
    assert res.rc == 0, res.err
    assert read_json(tmp_path / "run.json")["queries"]["first_hit_rank"] == HAND_RANKS
    page = html.read_text()
    legend = page.split("<p>")[1].split("</p>")[0]
    assert unescape(re.sub(r"<[^>]+>", "", legend)) == LEGEND
    assert "Ranks are 0-indexed, as first_hit_rank in the run file" in LEGEND
    rows = page.split("<tr>")[1:]
    # Worst first: q2 and q3 (first_hit_rank 1), then q1 (0); neighbours numbered from rank 0.
    assert ["first hit: rank 1" in rows[0], "first hit: rank 1" in rows[1]] == [True, True]
    assert "first hit: rank 0" in rows[2]
    assert [row.count("<br>rank 0: ") + row.count("<br>rank 1: ") for row in rows] == [2, 2, 2]

    row = GridRow(
        np.zeros((4, 4, 3), np.uint8),
        "cat",
        78,
        (Neighbour(np.zeros((4, 4, 3), np.uint8), "dog", False, 3),),
        5,
    )
    fig = _png_figure([row, GridRow(row.image, "dog", -1, (), 6)], None)
    query_axes = [ax for ax in fig.axes if ax.get_ylabel()]
    assert [ax.get_ylabel() for ax in query_axes] == ["first hit\nrank 78", "first hit\nno hit"]
    assert [ax.get_title() for ax in fig.axes[:2]] == ["q: cat", "0: dog"]
    assert " ".join(fig.get_supxlabel().split()) == LEGEND
