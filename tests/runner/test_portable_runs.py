"""Run files travel: the same images evaluated from two copies of a folder pair query by
query, and no run file holds the machine's paths unless asked."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest


def _folder(root, make_image):
    colours = {"cat": [(200, 10, 10), (190, 20, 10), (10, 10, 200)], "dog": [(10, 200, 10)]}
    for label, rgbs in colours.items():
        for i, rgb in enumerate(rgbs):
            make_image(root / label / f"{i}.png", rgb)
    return root


def _evaluate(cli, folder, embeddings, out, *extra):
    return cli(
        "evaluate",
        "--images",
        folder,
        "--embeddings",
        embeddings,
        "--ks",
        "1",
        "--json",
        out,
        *extra,
    )


def test_the_same_images_from_two_folders_compare(cli, tmp_path, make_image, read_json):
    first = _folder(tmp_path / "here" / "images", make_image)
    second = tmp_path / "elsewhere" / "copy"
    shutil.copytree(first, second)
    x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]], dtype=np.float32)
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "f.npy", x[[1, 0, 2, 3]])
    assert _evaluate(cli, first, tmp_path / "e.npy", tmp_path / "a.json").rc == 0
    assert _evaluate(cli, second, tmp_path / "f.npy", tmp_path / "b.json").rc == 0
    a, b = read_json(tmp_path / "a.json"), read_json(tmp_path / "b.json")
    # Sorted folder order: cat/0, cat/1, cat/2, dog/0, named relative to their folder.
    names = ["cat/0.png", "cat/1.png", "cat/2.png", "dog/0.png"]
    assert a["queries"]["ids"] == b["queries"]["ids"] == names
    assert a["queries"]["paths"] == names
    assert a["query_source"] == "folder images"  # the folder by name, not by path
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json")
    assert res.rc == 0, res.err
    assert "4 paired queries" in res.out or "paired queries" in res.out
    for record in (a, b):
        text = json.dumps(record)
        assert str(tmp_path) not in text and "/tmp/" not in text


@pytest.mark.absolute_paths
def test_absolute_paths_are_written_when_asked(cli, tmp_path, make_image, read_json):
    folder = _folder(tmp_path / "images", make_image)
    np.save(tmp_path / "e.npy", np.eye(4, 2, dtype=np.float32) + 0.5)
    res = _evaluate(cli, folder, tmp_path / "e.npy", tmp_path / "a.json", "--absolute-paths")
    assert res.rc == 0, res.err
    record = read_json(tmp_path / "a.json")
    assert record["queries"]["paths"][0] == str((folder / "cat" / "0.png").resolve())


def test_compare_refuses_other_queries_saying_what_differs(cli, tmp_path, make_image):
    folder = _folder(tmp_path / "images", make_image)
    np.save(tmp_path / "e.npy", np.eye(4, 2, dtype=np.float32) + 0.5)
    assert _evaluate(cli, folder, tmp_path / "e.npy", tmp_path / "a.json").rc == 0
    (folder / "dog" / "0.png").rename(folder / "dog" / "renamed.png")
    assert _evaluate(cli, folder, tmp_path / "e.npy", tmp_path / "b.json").rc == 0
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json")
    assert res.rc == 2
    line = next(line for line in res.err.splitlines() if "error:" in line)
    # The numbers of queries, how many differ, and the first differing one, by name.
    assert "(4 queries)" in line and "did not evaluate the same queries" in line
    assert "'dog/0.png'" in line
