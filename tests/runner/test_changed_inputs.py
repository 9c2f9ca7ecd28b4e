"""An input file rewritten during a command: one line, exit status 2, no report, nothing written.

Each test rewrites a file the command has read while the command computes (the function that
computes is patched to rewrite it first), then checks the error line and that no output file
exists. The rewrites that keep the file's size also keep its modification time, as a rewrite
within one tick of the file system's clock does: only the content check sees them.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

import recallkit.protocols.image_text as image_text
import recallkit.reports.data as report_data
import recallkit.runner.pipeline as pipeline
from recallkit.runfiles.definitions import definitions


def _rewrite(path, data: bytes, *, same_time: bool = True) -> None:
    """Rewrite ``path`` in place (the same inode) with ``data``; with ``same_time``, keep its
    modification time (a rewrite within the clock's tick)."""
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.truncate(0)
        handle.write(data)
    if same_time:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_ino == before.st_ino


def _rewriting(monkeypatch, module, name, path, data, **how):
    """Patch ``module.name`` (the function that computes) to rewrite ``path`` first."""
    real = getattr(module, name)

    def patched(*args, **kwargs):
        _rewrite(path, data, **how)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, patched)


def _saved(tmp_path, n=60, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, n)
    x = (rng.standard_normal((5, 8))[labels] + rng.standard_normal((n, 8))).astype(np.float32)
    return x, labels


def _outputs(tmp_path):
    return [tmp_path / "run.json", tmp_path / "runs.jsonl"]


def _npy_bytes(array) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def _refused(res, path, how, doing="evaluated", command="evaluate"):
    assert res.rc == 2, (res.out, res.err)
    assert res.out == ""  # no report
    assert res.err.splitlines(keepends=True)[-1] == (
        f"recallkit {command}: error: '{path}' changed while it was being {doing} ({how}); "
        "nothing was written.\n"
    )


def test_a_gallery_rewritten_during_the_run_is_refused(cli, tmp_path, monkeypatch):
    # The reported case: --gallery-embeddings rewritten in place while the run computes; the
    # new file has the same size, and the same modification time.
    x, labels = _saved(tmp_path)
    files = {}
    for name, value in (("q", x[:20]), ("g", x), ("ql", labels[:20]), ("gl", labels)):
        files[name] = tmp_path / f"{name}.npy"
        np.save(files[name], value)
    _rewriting(monkeypatch, pipeline, "run_evaluation", files["g"], _npy_bytes(x[::-1]))
    res = cli(
        "evaluate",
        "--query-embeddings",
        files["q"],
        "--gallery-embeddings",
        files["g"],
        "--query-labels",
        files["ql"],
        "--gallery-labels",
        files["gl"],
        "--json",
        tmp_path / "run.json",
        "--history",
        tmp_path / "runs.jsonl",
    )
    _refused(res, files["g"], "contents")
    assert not any(p.exists() for p in _outputs(tmp_path))


def test_embeddings_truncated_during_the_run_are_refused(cli, tmp_path, monkeypatch):
    x, labels = _saved(tmp_path)
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    size = os.path.getsize(tmp_path / "e.npy")
    _rewriting(
        monkeypatch, pipeline, "run_evaluation", tmp_path / "e.npy", b"\x93NUMPY", same_time=False
    )
    res = cli(
        "evaluate",
        "--embeddings",
        tmp_path / "e.npy",
        "--labels",
        tmp_path / "l.npy",
        "--json",
        tmp_path / "run.json",
    )
    assert res.rc == 2 and res.out == ""
    # The modification time changes too unless the rewrite lands in the clock's tick.
    assert re.fullmatch(
        rf"recallkit evaluate: error: '{re.escape(str(tmp_path / 'e.npy'))}' changed while it "
        rf"was being evaluated \(size {size} -> 6 bytes(, modification time)?, contents\); "
        r"nothing was written\.\n",
        res.err,
    ), res.err
    assert not (tmp_path / "run.json").exists()


@pytest.mark.parametrize("kind", ["text", "npy"])
def test_labels_rewritten_during_the_run_are_refused(cli, tmp_path, monkeypatch, kind):
    x, labels = _saved(tmp_path)
    np.save(tmp_path / "e.npy", x)
    if kind == "text":
        path = tmp_path / "l.txt"
        path.write_text("".join(f"c{v}\n" for v in labels))
        new = "".join(f"c{v}\n" for v in labels[::-1]).encode()
    else:
        path = tmp_path / "l.npy"
        np.save(path, labels)
        new = _npy_bytes(labels[::-1].copy())
    _rewriting(monkeypatch, pipeline, "run_evaluation", path, new)
    res = cli(
        "evaluate",
        "--embeddings",
        tmp_path / "e.npy",
        "--labels",
        path,
        "--history",
        tmp_path / "runs.jsonl",
    )
    _refused(res, path, "contents")
    assert not (tmp_path / "runs.jsonl").exists()


def test_a_manifest_rewritten_during_the_run_is_refused(cli, tmp_path, monkeypatch, make_image):
    rows = []
    for i, (label, rgb) in enumerate([("cat", (250, 0, 0)), ("cat", (240, 10, 0))] * 2):
        make_image(tmp_path / f"{i}.png", rgb)
        rows.append(f"{i}.png,{label}{i % 2}")
    manifest = tmp_path / "m.csv"
    manifest.write_text("path,label\n" + "\n".join(rows) + "\n")
    np.save(tmp_path / "e.npy", np.eye(4, dtype=np.float32) + 0.5)
    new = manifest.read_text().replace("cat0", "dog0").encode()
    _rewriting(monkeypatch, pipeline, "run_evaluation", manifest, new)
    res = cli(
        "evaluate",
        "--images",
        manifest,
        "--embeddings",
        tmp_path / "e.npy",
        "--json",
        tmp_path / "run.json",
    )
    _refused(res, manifest, "contents")
    assert not (tmp_path / "run.json").exists()


def test_an_image_rewritten_while_it_is_encoded_is_refused(
    cli, hand_case, encoder_module, tmp_path, monkeypatch, make_image
):
    # Images are checked by their size and modification time alone (never read twice).
    query, gallery = hand_case
    name, _ = encoder_module
    image = gallery / "dog" / "b.png"
    real = pipeline.label_form.evaluate

    sizes = []

    def computes(*args, **kwargs):
        before = os.stat(image)
        make_image(image, (1, 2, 3))
        os.utime(image, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
        sizes.extend([before.st_size, os.stat(image).st_size])
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline.label_form, "evaluate", computes)
    res = cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        f"{name}:mean_rgb",
        "--no-cache",
        "--json",
        tmp_path / "run.json",
    )
    resized = f"size {sizes[0]} -> {sizes[1]} bytes, " if sizes[0] != sizes[1] else ""
    _refused(res, image, resized + "modification time")
    assert not (tmp_path / "run.json").exists()


def test_a_cached_gallery_rewritten_during_the_run_is_refused(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    query, gallery = hand_case
    name, _ = encoder_module
    cache = tmp_path / "cache"
    argv = [
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        f"{name}:mean_rgb",
        "--cache-dir",
        cache,
        "--json",
        tmp_path / "run.json",
    ]
    assert cli(*argv).rc == 0  # fills the cache
    os.remove(tmp_path / "run.json")
    entry = next(cache.glob("*.npy"))
    cached = np.load(entry)
    _rewriting(monkeypatch, pipeline.label_form, "evaluate", entry, _npy_bytes(cached[::-1]))
    res = cli(*argv)
    _refused(res, entry, "contents")
    assert not (tmp_path / "run.json").exists()


def test_an_unchanged_run_writes_its_outputs(cli, tmp_path):
    x, labels = _saved(tmp_path)
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    res = cli(
        "evaluate",
        "--embeddings",
        tmp_path / "e.npy",
        "--labels",
        tmp_path / "l.npy",
        "--json",
        tmp_path / "run.json",
        "--history",
        tmp_path / "runs.jsonl",
    )
    assert res.rc == 0, res.err
    assert all(p.exists() for p in _outputs(tmp_path))


def test_protocol_embeddings_rewritten_during_the_run_are_refused(cli, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "img.npy", rng.standard_normal((4, 3)).astype(np.float32))
    np.save(tmp_path / "txt.npy", rng.standard_normal((8, 3)).astype(np.float32))
    (tmp_path / "ci.json").write_text(json.dumps([0, 0, 1, 1, 2, 2, 3, 3]))
    new = _npy_bytes(rng.standard_normal((8, 3)).astype(np.float32))
    _rewriting(monkeypatch, image_text, "image_text_recall", tmp_path / "txt.npy", new)
    res = cli(
        "image-text",
        "--caption-image",
        tmp_path / "ci.json",
        "--images",
        tmp_path / "img.npy",
        "--texts",
        tmp_path / "txt.npy",
        "--json",
        tmp_path / "m.json",
    )
    _refused(res, tmp_path / "txt.npy", "contents", command="image-text")
    assert not (tmp_path / "m.json").exists()


def test_a_run_file_rewritten_during_a_comparison_is_refused(cli, tmp_path, monkeypatch):
    def run_file(path, ranks):
        record = {
            "ks": [1, 2],
            "num_gallery": 10,
            "definitions": definitions("cosine", "ids"),
            "queries": {
                "ids": [f"q{i}" for i in range(len(ranks))],
                "labels": [0] * len(ranks),
                "first_hit_rank": list(ranks),
            },
        }
        path.write_text(json.dumps(record))
        return path

    a = run_file(tmp_path / "a.json", [0, 3, 1, 7])
    b = run_file(tmp_path / "b.json", [0, 0, 4, 1])
    new = a.read_text().replace("[0, 3, 1, 7]", "[7, 1, 3, 0]").encode()
    _rewriting(monkeypatch, report_data, "compare", a, new)  # after the files are read
    res = cli("compare", a, b, "--json", tmp_path / "c.json")
    _refused(res, a, "contents", doing="compared", command="compare")
    assert not (tmp_path / "c.json").exists()
