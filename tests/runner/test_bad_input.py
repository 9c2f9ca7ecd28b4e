"""Every bad input: a one-line message, exit status 2, no traceback, no partial output file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from recallkit.runner import encode_all
from recallkit.runner.encode import BadImagesError
from tests.runner.checks import one_error_line as _assert_user_error
from tests.runner.checks import only_error_line


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
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        _callable(encoder_module),
        "--cache-dir",
        tmp_path / "cache",
        "--json",
        tmp_path / "r.json",
    )
    line = _assert_user_error(res, "2 gallery images could not be read", "--skip-bad")
    assert "c_garbage.png" in line and "c_truncated.png" in line
    assert not (tmp_path / "r.json").exists()
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*.npy"))


def test_skip_bad_continues_and_reports(cli, broken_gallery, encoder_module, tmp_path, read_json):
    query, gallery = broken_gallery
    args = (
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        _callable(encoder_module),
        "--cache-dir",
        tmp_path / "cache",
        "--skip-bad",
        "--ks",
        "1",
        "2",
        "--json",
        tmp_path / "r.json",
    )
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
        "evaluate",
        "--images",
        tmp_path,
        "--embeddings",
        tmp_path / "e.npy",
        "--json",
        tmp_path / "r.json",
    )
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
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--no-cache",
        "--callable",
        spec.format(mod=encoder_module[0]),
    )
    _assert_user_error(res, fragment)


def test_label_only_in_query_with_lone_queries_error(
    cli, hand_case, encoder_module, tmp_path, make_image
):
    query, gallery = hand_case
    make_image(query / "bird" / "q4.png", (1, 1, 1))
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        _callable(encoder_module),
        "--no-cache",
        "--json",
        tmp_path / "r.json",
        "--lone-queries",
        "error",
    )
    _assert_user_error(res, "The query labels must be", "1 lone query, the first at row 0")
    assert "--lone-queries error" in res.err and "lone_queries" not in res.err
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["--images", "{tmp}/nowhere", "--embeddings", "{tmp}/e.npy"],
            "do not exist: there is no folder or manifest at that",
        ),
        (
            ["--images", "{tmp}/empty", "--embeddings", "{tmp}/e.npy"],
            "holds no images in class subfolders",
        ),
        (["--images", "{tmp}/imgs", "--query", "{tmp}/imgs"], "Give the data one way"),
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
        "evaluate",
        "--images",
        tmp_path / "imgs",
        "--embeddings",
        tmp_path / "e.npy",
        "--json",
        tmp_path / "r.json",
    )
    _assert_user_error(res, "None of the 2 queries has a gallery image with its label")
    assert not (tmp_path / "r.json").exists()


def test_every_query_lone_on_saved_arrays(cli, tmp_path):
    # Three rows of three labels, each searched against the others: every query is lone.
    np.save(tmp_path / "e.npy", np.eye(3, dtype=np.float32))
    np.save(tmp_path / "y.npy", np.array([4, 5, 6]))
    args = ["evaluate", "--embeddings", tmp_path / "e.npy", "--labels", tmp_path / "y.npy"]
    res = cli(*args, "--json", tmp_path / "r.json")
    # Under --lone-queries skip (the default): one line and nothing else, worded for arrays.
    assert res.out == ""
    assert res.err.splitlines() == [
        (
            "recallkit evaluate: error: None of the 3 queries has a gallery row with its label "
            "(after excluding itself), so every metric is undefined; --lone-queries zero counts "
            "such queries as 0."
        )
    ]
    assert res.rc == 2 and not (tmp_path / "r.json").exists()
    # Under --lone-queries zero: the library's value, 0 for every metric.
    res = cli(
        *args,
        "--lone-queries",
        "zero",
        "--ks",
        "1",
        "--metrics",
        "recall@1",
        "MAP@R",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    assert "recall@1: 0.0000" in res.out and "MAP@R:    0.0000" in res.out
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["metrics"] == {"recall@1": 0.0, "MAP@R": 0.0}
    assert "3 of 3 queries have no gallery row with their label and count as 0" in res.err


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
    with pytest.raises(ValueError, match="returns one embedding row per image"):
        encode_all([good], lambda b: np.zeros((2, 2)), progress=False)
    with pytest.raises(ValueError, match="'images' parameter of encode_all must be non-empty"):
        encode_all([], encoder)


# ------------------------------------------------------------------ errors said with the options


def _images_and_embeddings(tmp_path, make_image, embeddings):
    """Two cats and two dogs, with ``embeddings`` saved as e.npy beside them."""
    for i, (label, rgb) in enumerate([("cat", (9, 0, 0)), ("cat", (8, 1, 0)), ("dog", (0, 0, 9))]):
        make_image(tmp_path / "imgs" / label / f"{i}.png", rgb)
    make_image(tmp_path / "imgs" / "dog" / "3.png", (0, 1, 8))
    np.save(tmp_path / "e.npy", np.asarray(embeddings, dtype=np.float32))
    return tmp_path / "imgs", tmp_path / "e.npy"


def test_a_zero_embedding_names_the_option_and_the_metric(cli, tmp_path, make_image):
    images, embeddings = _images_and_embeddings(
        tmp_path, make_image, [[1, 0], [0, 0], [0, 1], [0.1, 0.9]]
    )
    res = cli("evaluate", "--images", images, "--embeddings", embeddings)
    only_error_line(
        res,
        "recallkit evaluate: error: --embeddings must be non-zero rows under --metric cosine. "
        "Got a zero vector in row 1.",
    )


def test_bad_images_name_the_flag_only(cli, broken_gallery, encoder_module, tmp_path):
    query, gallery = broken_gallery
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        _callable(encoder_module),
        "--no-cache",
    )
    line = _assert_user_error(res, "or pass --skip-bad to continue without them.")
    assert "skip_bad" not in line


@pytest.mark.parametrize(
    ("option", "env"),
    [
        (["--cache-dir", "~rk_no_such_user/cache"], {}),
        ([], {"RECALLKIT_CACHE": "~rk_no_such_user/cache"}),
    ],
    ids=["option", "variable"],
)
def test_a_cache_dir_in_an_unknown_users_home(
    cli, hand_case, encoder_module, monkeypatch, option, env
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    query, gallery = hand_case
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        _callable(encoder_module),
        *option,
    )
    source = "--cache-dir" if option else "The environment variable RECALLKIT_CACHE"
    only_error_line(
        res,
        f"recallkit evaluate: error: {source} '~rk_no_such_user/cache' starts with the home "
        "folder of user 'rk_no_such_user', who is not known here; give the folder's full path.",
    )


def test_an_empty_cache_dir_is_refused(cli, hand_case, encoder_module):
    query, gallery = hand_case
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        _callable(encoder_module),
        "--cache-dir",
        "",
    )
    only_error_line(
        res, "recallkit evaluate: error: --cache-dir is empty; give a folder (or --no-cache)."
    )


def test_an_encoder_that_raises_is_named_with_its_error(cli, hand_case, encoder_module, tmp_path):
    module, path = encoder_module
    with path.open("a") as handle:
        handle.write(
            "\n\ndef failing(images):\n"
            "    raise ValueError(f'cannot embed {len(images)} images:\\n  out of cheese')\n"
        )
    query, gallery = hand_case
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        f"{module}:failing",
        "--no-cache",
        "--json",
        tmp_path / "r.json",
    )
    line = _assert_user_error(res)
    # The gallery (4 images, one batch) is encoded first; the message is on one line.
    assert line == (
        f"recallkit evaluate: error: The encoder --callable {module}:failing raised ValueError on "
        "a batch of 4 image(s): cannot embed 4 images: out of cheese."
    )
    assert not (tmp_path / "r.json").exists()


def test_a_sparse_tensor_as_embeddings(cli, tmp_path, make_image):
    import warnings

    import torch

    images, _ = _images_and_embeddings(tmp_path, make_image, np.eye(4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(torch.eye(4, 2).to_sparse(), tmp_path / "sparse.pt")
    res = cli("evaluate", "--images", images, "--embeddings", tmp_path / "sparse.pt")
    only_error_line(
        res,
        f"recallkit evaluate: error: The embeddings file '{tmp_path / 'sparse.pt'}' holds a "
        "tensor of layout torch.sparse_coo (not dense); save it as a dense tensor "
        "(tensor.to_dense() for a sparse one, tensor.dequantize() for a quantized one).",
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--json", "/dev/null"],
            (
                "--json '/dev/null' is not a regular file (a device, a pipe or a socket); give "
                "the name of a file to write."
            ),
        ),
        (["--history", "{tmp}/imgs"], "--history takes a file name; '{tmp}/imgs' is a folder."),
        (
            ["--show-out", "{tmp}/e.npy/grid.png"],
            "--show-out '{tmp}/e.npy/grid.png': '{tmp}/e.npy' is a file, not a folder.",
        ),
        (
            ["--embeddings", "{tmp}/imgs"],
            "The embeddings file '{tmp}/imgs' is a folder, not a file.",
        ),
        (["--device", "gpu0"], "Unknown device 'gpu0' (use cpu, cuda, cuda:N or auto)."),
        (["--allow-partial"], "--allow-partial goes with --benchmark."),
    ],
)
def test_outputs_inputs_and_devices_checked_first(cli, tmp_path, make_image, args, line):
    images, embeddings = _images_and_embeddings(
        tmp_path, make_image, [[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]]
    )
    argv = ["--images", images, *[a.format(tmp=tmp_path) for a in args]]
    if "--embeddings" not in args:
        argv += ["--embeddings", embeddings]
    res = cli("evaluate", *argv)
    only_error_line(res, "recallkit evaluate: error: " + line.format(tmp=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.npy", "imgs"]


# -------------------------------------------------------------------- a partial benchmark copy


@pytest.fixture
def partial_cub(tmp_path, make_image):
    """A CUB-200-2011 folder with 2 test classes of 2 images and 1 training image.

    Embeddings of the test split (classes 101 and 102, in file order): each image is nearest to
    the other image of its class, so recall@1 is 1.
    """
    root = tmp_path / "CUB"
    rows = [
        (1, "101.A/a1.jpg", 101, (200, 0, 0)),
        (2, "101.A/a2.jpg", 101, (190, 10, 0)),
        (3, "102.B/b1.jpg", 102, (0, 0, 200)),
        (4, "102.B/b2.jpg", 102, (0, 10, 190)),
        (5, "001.C/c1.jpg", 1, (9, 9, 9)),
    ]
    root.mkdir()
    (root / "images.txt").write_text("".join(f"{i} {p}\n" for i, p, _, _ in rows))
    (root / "image_class_labels.txt").write_text("".join(f"{i} {c}\n" for i, _, c, _ in rows))
    for _, rel, _, rgb in rows:
        make_image(root / "images" / rel, rgb)
    np.save(tmp_path / "cub.npy", np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], np.float32))
    return root, tmp_path / "cub.npy"


def test_a_partial_benchmark_copy_names_allow_partial(cli, partial_cub, tmp_path):
    root, embeddings = partial_cub
    res = cli("evaluate", "--benchmark", "cub", "--root", root, "--embeddings", embeddings)
    only_error_line(
        res,
        f"recallkit evaluate: error: {root / 'images.txt'} gives the CUB-200-2011 train split 1 "
        "images of 1 classes; the benchmark has 5,864 images of 100 classes. Pass "
        "--allow-partial to load a partial or modified copy (its results are not comparable "
        "with published numbers).",
    )


def test_allow_partial_evaluates_and_says_the_copy_is_incomplete(
    cli, partial_cub, tmp_path, read_json
):
    root, embeddings = partial_cub
    res = cli(
        "evaluate",
        "--benchmark",
        "cub",
        "--root",
        root,
        "--embeddings",
        embeddings,
        "--allow-partial",
        "--ks",
        "1",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    assert res.out.startswith(
        "[evaluation]\n"
        "  num queries:   4\n"
        "  num gallery:   4\n"
        "  embedding_dim: 2\n"
        "\n"
        "[metrics]\n"
        "  recall@1: 1.0000\n"
        "\n"
        "[benchmark]\n"
        "  CUB-200-2011: incomplete (a partial or modified copy); the numbers are not "
        "comparable with published ones\n"
    )
    record = read_json(tmp_path / "r.json")
    assert record["sources"]["benchmark"] == {
        "name": "cub",
        "title": "CUB-200-2011",
        "complete": False,
    }
    assert record["sources"]["options"]["allow_partial"] is True
    assert record["queries"]["first_hit_rank"] == [0, 0, 0, 0]


def test_a_missing_benchmark_root_is_one_sentence(cli, tmp_path):
    np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
    res = cli(
        "evaluate",
        "--benchmark",
        "cub",
        "--root",
        tmp_path / "nowhere",
        "--embeddings",
        tmp_path / "e.npy",
    )
    only_error_line(
        res,
        f"recallkit evaluate: error: --root must be an existing folder. Got "
        f"'{tmp_path / 'nowhere'}', which does not exist or is not a folder.",
    )
    res = cli(
        "evaluate", "--benchmark", "cubs", "--root", tmp_path, "--embeddings", tmp_path / "e.npy"
    )
    only_error_line(
        res,
        "recallkit evaluate: error: --benchmark must be one of 'cub', 'cars196', 'sop', "
        "'inaturalist', 'inshop'. Got 'cubs'.",
    )


def test_skip_bad_leaves_out_missing_benchmark_images(cli, partial_cub, tmp_path):
    root, _ = partial_cub
    (root / "images" / "102.B" / "b2.jpg").unlink()
    args = (
        "evaluate",
        "--benchmark",
        "cub",
        "--root",
        root,
        "--allow-partial",
        "--callable",
        "recallkit.runner.encoders:pixels",
        "--no-cache",
        "--ks",
        "1",
    )
    res = cli(*args)
    only_error_line(
        res,
        f"recallkit evaluate: error: 1 of the 5 images listed in {root / 'images.txt'} are not "
        f"on disk (e.g. {root / 'images' / '102.B' / 'b2.jpg'}). Pass --skip-bad to leave them "
        "out.",
    )
    res = cli(*args, "--skip-bad")
    assert res.rc == 0, res.err
    assert res.err.splitlines()[0] == (
        f"recallkit evaluate: warning: CUB-200-2011: left out 1 of the 5 images listed in "
        f"{root / 'images.txt'} that are not on disk (e.g. {root / 'images' / '102.B' / 'b2.jpg'});"
        " results are not comparable with published numbers."
    )
    # b1 is now alone in class 102: 3 queries, 1 excluded, the two of class 101 hit at rank 0.
    assert "  num queries:   3\n  num excluded:  1\n" in res.out
    assert "  recall@1: 1.0000\n\n[benchmark]\n  CUB-200-2011: incomplete" in res.out
