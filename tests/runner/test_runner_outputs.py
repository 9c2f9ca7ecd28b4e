"""What the runner says: silence when asked, every manifest problem at once, the separator of a
manifest, unreadable images by name, and a failure grid of a run without failures."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
from PIL import Image

from recallkit import runner
from recallkit.exceptions import RunnerError
from recallkit.runner.encode import UNIDENTIFIED, load_image
from recallkit.runner.sources import from_manifest
from tests.runner.checks import one_error_line


def _mean_rgb(batch):
    return np.stack([np.asarray(image, dtype=np.float64).mean(axis=(0, 1)) for image in batch])


def test_progress_false_is_silent(tmp_path, make_image, capfd):
    paths = [
        make_image(tmp_path / f"{i}.png", rgb)
        for i, rgb in enumerate([(200, 0, 0), (190, 20, 0), (0, 0, 200)])
    ]
    labels = ["r", "r", "b"]
    (tmp_path / "bad.png").write_bytes(b"not an image")
    capfd.readouterr()
    for _ in range(2):  # a cache miss, then a hit
        result = runner.evaluate(
            paths,
            labels,
            paths,
            labels,
            _mean_rgb,
            ks=(1,),
            cache_dir=tmp_path / "c",
            progress=False,
        )
        assert result["recall@1"] == 1.0  # r: each other; b: lone
    with_bad = [*paths, tmp_path / "bad.png"]
    runner.evaluate(
        with_bad,
        [*labels, "b"],
        with_bad,
        [*labels, "b"],
        _mean_rgb,
        ks=(1,),
        skip_bad=True,
        progress=False,
    )
    assert runner.encode_all(paths, _mean_rgb, progress=False).shape == (3, 3)
    assert capfd.readouterr() == ("", "")
    # Without progress=False (stderr is not a terminal here) a summary line is written: the
    # capture above would have seen it.
    runner.evaluate(paths, labels, paths, labels, _mean_rgb, ks=(1,))
    err = capfd.readouterr().err
    assert re.fullmatch(r"encoding gallery: 3 images in \d+\.\d s \([\d,]+ images/s\)\n", err)


def test_every_manifest_problem_at_once(tmp_path, make_image):
    make_image(tmp_path / "a.png", (1, 2, 3))
    (tmp_path / "folder.png").mkdir()
    lines = [
        "path,label",  # 1
        "a.png,cat",  # 2
        '"b.png,cat',  # 3: an unterminated quote
        "c.png\x00,cat",  # 4: a NUL
        ",cat",  # 5: no path
        "a.png,",  # 6: no label
        "folder.png,cat",  # 7: not a regular file
        *[f"m{i}.png,dog" for i in range(7)],  # 8-14: missing files
    ]
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunnerError) as info:
        from_manifest(tmp_path / "m.csv")
    assert str(info.value) == (
        f"The manifest '{tmp_path / 'm.csv'}' has 2 unreadable line(s) (an unterminated quote? "
        "a quoted field cannot span lines): line 3 cannot be read as CSV: unexpected end of "
        "data; line 4 holds a NUL character. It also has 3 bad row(s): line 5 has no path; line 6 "
        "(a.png) has no label; line 7 (folder.png) is not a regular file. It also lists 7 "
        f"file(s) that do not exist (relative paths are read from {tmp_path}): line 8: m0.png; "
        "line 9: m1.png; line 10: m2.png; line 11: m3.png; line 12: m4.png; and 2 more."
    )


def _write(path, rows, separator):
    path.write_text("".join(separator.join(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(
    ("name", "separator", "message"),
    [
        (
            "m.csv",
            ";",
            (
                "the file seems to use ';' as separator; recallkit reads comma-separated "
                "files: separate the columns by commas."
            ),
        ),
        (
            "m.csv",
            "\t",
            (
                "the file seems to use tabs as separator; recallkit reads comma-separated "
                "files: separate the columns by commas, or name the file .tsv."
            ),
        ),
        (
            "m.tsv",
            ",",
            (
                "the file seems to use ',' as separator; recallkit reads .tsv files as "
                "tab-separated: separate the columns by tabs, or name the file .csv."
            ),
        ),
        (
            "m.tsv",
            ";",
            (
                "the file seems to use ';' as separator; recallkit reads .tsv files as "
                "tab-separated: separate the columns by tabs."
            ),
        ),
        (
            "m.txt",
            "|",
            (
                "the file seems to use '|' as separator; recallkit reads comma-separated "
                "files (tab-separated ones when the first line has a tab, or the name ends in "
                ".tsv): "
                "separate the columns by commas."
            ),
        ),
    ],
)
def test_another_separator_is_named(cli, tmp_path, make_image, name, separator, message):
    make_image(tmp_path / "a.png", (1, 2, 3))
    make_image(tmp_path / "b.png", (1, 2, 3))
    rows = [("path", "label"), ("a.png", "cat"), ("b.png", "cat")]
    manifest = _write(tmp_path / name, rows, separator)
    np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
    res = cli("evaluate", "--images", manifest, "--embeddings", tmp_path / "e.npy")
    assert one_error_line(res) == f"recallkit evaluate: error: The manifest '{manifest}': {message}"


def test_the_right_separator_still_reads(tmp_path, make_image):
    make_image(tmp_path / "a;1.png", (1, 2, 3))
    # Commas separate; a ';' inside a path is part of it.
    s = from_manifest(_write(tmp_path / "m.csv", [("a;1.png", "x;y")], ","))
    assert ([p.name for p in s.paths], s.labels) == (["a;1.png"], ("x;y",))


def test_an_unreadable_image_is_named(cli, hand_case, tmp_path):
    query, gallery = hand_case
    bad = gallery / "cat" / "c_garbage.png"
    bad.write_bytes(b"this is not an image")
    with pytest.raises(Image.UnidentifiedImageError) as info:
        load_image(bad)
    assert str(info.value) == f"'{bad}' is not a readable image: {UNIDENTIFIED}"
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--no-cache",
        "--callable",
        "recallkit.runner.encoders:pixels",
    )
    line = one_error_line(res)
    assert f"{bad} (not a readable image: Pillow cannot identify it as any image format " in line
    assert "_io." not in res.err and "BufferedReader" not in res.err


def test_a_run_without_failures_says_so(cli, tmp_path, make_image):
    # a/1 and a/2 point one way, b/1 and b/2 the other: every query's nearest other image is
    # its class partner (rank 0), so there is no failure to show.
    root = tmp_path / "imgs"
    for rel in ("a/1.png", "a/2.png", "b/1.png", "b/2.png"):
        make_image(root / rel, (1, 2, 3))
    np.save(tmp_path / "e.npy", np.array([[1, 0], [1, 0.1], [0, 1], [0.1, 1]], np.float32))
    page = tmp_path / "grid.html"
    res = cli(
        "evaluate",
        "--images",
        root,
        "--embeddings",
        tmp_path / "e.npy",
        "--ks",
        "1",
        "--show-out",
        page,
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    assert "recall@1: 1.0000" in res.out
    warnings = [line for line in res.err.splitlines() if "warning" in line]
    assert warnings == [
        (
            "recallkit evaluate: warning: no failure to show: each of the 4 evaluated queries "
            "has a gallery image of its label at rank 0 (recall@1 = 1); the failure grid shows "
            "the first queries, titled so."
        )
    ]
    heading = html.unescape(page.read_text().split("<h3>")[1].split("</h3>")[0])
    assert heading == (
        "No failures: each of the 4 evaluated queries finds an image of its label at rank 0; "
        "the first queries are shown"
    )
    assert (tmp_path / "r.json").is_file()  # the other outputs are written as ever


def test_a_grid_with_failures_keeps_its_title(tmp_path, make_image):
    from recallkit.runner.pipeline import grid_title, run_evaluation
    from recallkit.runner.sources import from_folder

    root = tmp_path / "imgs"
    for rel in ("a/1.png", "a/2.png", "b/1.png", "b/2.png"):
        make_image(root / rel, (1, 2, 3))
    images = from_folder(root)
    # Rows a/1 (1, 0), a/2 (0, 1), b/1 (0.9, 0.1), b/2 (0, 1), cosine, self excluded:
    # a/1: b/1 .994, then a/2 and b/2 tie at 0 (lower index, a/2, first) -> rank 1;
    # a/2: b/2 1, b/1 .110, a/1 0 -> rank 2; b/1: a/1 .994, a/2 and b/2 tie at .110 -> rank 2;
    # b/2: a/2 1, b/1 .110 -> rank 1. Every query misses at rank 0.
    emb = np.array([[1, 0], [0, 1], [0.9, 0.1], [0, 1]], np.float32)
    run = run_evaluation(images, images, None, (1,), query_embeddings=emb, gallery_embeddings=emb)
    assert run.result.first_hit_ranks.tolist() == [1, 2, 2, 1]
    assert grid_title(run, "mine") == "mine" and grid_title(run) is None
    perfect = np.array([[1, 0], [1, 0.1], [0, 1], [0.1, 1]], np.float32)
    run = run_evaluation(
        images, images, None, (1,), query_embeddings=perfect, gallery_embeddings=perfect
    )
    with pytest.warns(UserWarning, match="no failure to show"):
        out = runner.failure_grid(run, tmp_path / "g.png", title="epoch 3")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.warns(UserWarning):
        assert grid_title(run, "epoch 3").endswith("the first queries are shown (epoch 3)")
