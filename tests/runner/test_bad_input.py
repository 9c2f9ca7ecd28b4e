"""Every bad input: a one-line message, exit status 2, no traceback, no partial output file."""

from __future__ import annotations

import numpy as np
import pytest

from recallkit.runner import encode_all
from recallkit.runner.encode import BadImagesError
from tests.runner.checks import one_error_line as _assert_user_error


def _callable(encoder_module):
    return f"{encoder_module[0]}:mean_rgb"


@pytest.fixture
def broken_gallery(hand_case):
    """The hand case plus an unreadable and a truncated image in the gallery."""
    _, gallery = hand_case
    (gallery / "cat" / "c_garbage.png").write_bytes(b"this is not an image")
    whole = (gallery / "cat" / "a.png").read_bytes()
    (gallery / "dog" / "c_truncated.png").write_bytes(whole[: len(whole) // 2])
    return hand_case


def test_bad_images_are_all_listed(cli, broken_gallery, encoder_module, tmp_path):
    query, gallery = broken_gallery
    res = cli(
        "evaluate", "--query", query, "--gallery", gallery, "--callable",
        _callable(encoder_module), "--cache-dir", tmp_path / "cache", "--json", tmp_path / "r.json",
    )  # fmt: skip
    line = _assert_user_error(res, "2 gallery images could not be read", "--skip-bad")
    assert "c_garbage.png" in line and "c_truncated.png" in line
    assert not (tmp_path / "r.json").exists()
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*.npy"))


def test_skip_bad_continues_and_reports(cli, broken_gallery, encoder_module, tmp_path, read_json):
    query, gallery = broken_gallery
    args = (
        "evaluate", "--query", query, "--gallery", gallery, "--callable",
        _callable(encoder_module), "--cache-dir", tmp_path / "cache", "--skip-bad",
        "--ks", "1", "2", "--json", tmp_path / "r.json",
    )  # fmt: skip
    res = cli(*args)
    assert res.rc == 0, res.err
    assert "skipped 2 unreadable image(s)" in res.err
    record = read_json(tmp_path / "r.json")
    assert sorted(p.rsplit("/", 1)[1] for p, _ in record["skipped_images"]) == [
        "c_garbage.png",
        "c_truncated.png",
    ]
    # The readable gallery is the hand case's: the same ranks.
    assert record["queries"]["first_hit_rank"] == [0, 1, 1]
    assert record["num_gallery"] == 4
    # From the cache, the bad rows are remembered: without --skip-bad it fails again.
    without = [a for a in args if a != "--skip-bad"]
    again = cli(*without[:-1], tmp_path / "r2.json")
    _assert_user_error(again, "2 gallery images could not be read")
    assert not (tmp_path / "r2.json").exists()
    hit = cli(*args)
    assert "gallery embeddings: cache hit" in hit.err
    assert hit.rc == 0


def test_manifest_rows(cli, tmp_path, make_image):
    make_image(tmp_path / "a.png", (1, 2, 3))
    (tmp_path / "m.csv").write_text("path,label\na.png,cat\nmissing.png,cat\ngone.png,dog\n")
    res = cli("evaluate", "--images", tmp_path / "m.csv", "--embeddings", tmp_path / "e.npy")
    _assert_user_error(res, "lists 2 file(s) that do not exist", "line 3: missing.png")
    (tmp_path / "m.csv").write_text("path,label\na.png,cat\na.png,\n")
    res = cli("evaluate", "--images", tmp_path / "m.csv", "--embeddings", tmp_path / "e.npy")
    _assert_user_error(res, "line 3 (a.png) has no label")
    (tmp_path / "m.csv").write_text("a.png,cat,x,extra\n")
    res = cli("evaluate", "--images", tmp_path / "m.csv", "--embeddings", tmp_path / "e.npy")
    _assert_user_error(res, "line 1 has 4 fields")
    (tmp_path / "m.csv").write_text("# only a comment\n")
    res = cli("evaluate", "--images", tmp_path / "m.csv", "--embeddings", tmp_path / "e.npy")
    _assert_user_error(res, "has no rows")


def test_embedding_rows_must_match(cli, tmp_path, make_image):
    make_image(tmp_path / "a" / "1.png", (1, 2, 3))
    make_image(tmp_path / "a" / "2.png", (1, 2, 3))
    np.save(tmp_path / "e.npy", np.ones((3, 4), np.float32))
    res = cli(
        "evaluate", "--images", tmp_path, "--embeddings", tmp_path / "e.npy",
        "--json", tmp_path / "r.json",
    )  # fmt: skip
    _assert_user_error(res, "has 3 rows but there are 2 images")
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("no_such_module_rk:make", "Cannot import 'no_such_module_rk'"),
        ("{mod}:no_such_name", "has no attribute 'no_such_name'"),
        ("{mod}", "must look like package.module:callable"),
        ("{mod}:broken", "raised RuntimeError: no weights here"),
        ("{mod}:NOT_CALLABLE", "is a int, not a callable"),
    ],
)
def test_callable_errors(cli, hand_case, encoder_module, tmp_path, spec, fragment):
    query, gallery = hand_case
    res = cli(
        "evaluate", "--query", query, "--gallery", gallery, "--no-cache",
        "--callable", spec.format(mod=encoder_module[0]),
    )  # fmt: skip
    _assert_user_error(res, fragment)


def test_label_only_in_query(cli, hand_case, encoder_module, tmp_path, make_image):
    query, gallery = hand_case
    make_image(query / "bird" / "q4.png", (1, 1, 1))
    res = cli(
        "evaluate", "--query", query, "--gallery", gallery, "--callable",
        _callable(encoder_module), "--no-cache", "--json", tmp_path / "r.json",
    )  # fmt: skip
    _assert_user_error(res, "1 query image(s) have a label that no gallery image has", "'bird'")
    assert "--allow-missing-labels" in res.err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--images", "{tmp}/nowhere"], "do not exist: there is no folder or manifest at that"),
        (["--images", "{tmp}/empty"], "holds no images in class subfolders"),
        (["--images", "{tmp}/imgs", "--query", "{tmp}/imgs"], "Give the images one way"),
        (["--query", "{tmp}/imgs"], "--gallery is missing"),
        (["--benchmark", "sop"], "--benchmark needs --root"),
        (["--images", "{tmp}/imgs"], "Give one encoder"),
        (["--images", "{tmp}/imgs", "--model", "resnet18"], "--model needs --weights"),
        (
            ["--images", "{tmp}/imgs", "--model", "resnet-18", "--weights", "{tmp}/w.pth"],
            "no model named",
        ),
        (["--images", "{tmp}/imgs", "--embeddings", "{tmp}/e.npy", "--ks", "0"], "--ks takes"),
        (
            ["--images", "{tmp}/imgs", "--embeddings", "{tmp}/e.npy", "--show-topk", "3"],
            "--show-topk needs --show-out",
        ),
        (
            ["--images", "{tmp}/imgs", "--embeddings", "{tmp}/e.npy", "--show-out", "{tmp}/g.gif"],
            "--show-out must end in .png or .html",
        ),
        (["--images", "{tmp}/imgs", "--embeddings", "{tmp}/missing.npy"], "does not exist"),
        (
            ["--query", "{tmp}/imgs", "--gallery", "{tmp}/imgs2", "--embeddings", "{tmp}/e.npy"],
            "--embeddings is for one image set",
        ),
    ],
)
def test_argument_errors(cli, tmp_path, make_image, args, fragment):
    (tmp_path / "empty").mkdir()
    make_image(tmp_path / "imgs" / "a" / "1.png", (1, 2, 3))
    make_image(tmp_path / "imgs" / "a" / "2.png", (3, 2, 1))
    make_image(tmp_path / "imgs2" / "a" / "1.png", (3, 2, 1))
    np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
    (tmp_path / "w.pth").write_bytes(b"")
    res = cli("evaluate", *[a.format(tmp=tmp_path) for a in args])
    _assert_user_error(res, fragment)


def test_nothing_to_evaluate(cli, tmp_path, make_image):
    # Two images of two classes against themselves: each query is lone once itself is excluded.
    make_image(tmp_path / "imgs" / "a" / "1.png", (1, 2, 3))
    make_image(tmp_path / "imgs" / "b" / "1.png", (3, 2, 1))
    np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
    res = cli(
        "evaluate", "--images", tmp_path / "imgs", "--embeddings", tmp_path / "e.npy",
        "--json", tmp_path / "r.json",
    )  # fmt: skip
    _assert_user_error(res, "None of the 2 queries has a gallery image with its label")
    assert not (tmp_path / "r.json").exists()


def test_argparse_errors_exit_2(cli):
    res = cli("evaluate", "--batch-size", "0")
    assert res.rc == 2
    assert "--batch-size takes a positive integer" in res.err
    assert "Traceback" not in res.err


def test_encode_all_lists_bad_images(tmp_path, make_image):
    good = make_image(tmp_path / "good.png", (1, 2, 3))
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"junk")
    calls = []

    def encoder(batch):
        calls.append(len(batch))
        return np.zeros((len(batch), 2))

    with pytest.raises(BadImagesError, match="2 images could not be read") as info:
        encode_all([bad, good, tmp_path / "missing.png"], encoder, batch_size=1, progress=False)
    assert [b.reason for b in info.value.bad][1] == "no such file"
    assert calls == []  # encoding stops at the first bad image; the rest are only opened
    with pytest.raises(ValueError, match="'batch_size' parameter of encode_all"):
        encode_all([good], encoder, batch_size=0)
    with pytest.raises(ValueError, match="must return one embedding row per image"):
        encode_all([good], lambda b: np.zeros((2, 2)), progress=False)
    with pytest.raises(ValueError, match="'images' parameter of encode_all must be non-empty"):
        encode_all([], encoder)
