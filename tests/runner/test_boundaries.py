"""Files, caches, history and comparisons at their edges: nothing silently wrong, nothing half.

Concurrent history appends, symlinked outputs, symlink loops in image folders, shared manifest
ids in ``compare``, encoders the cache cannot see into, unusable caches, full disks, stale
temporaries, FIFOs, huge images and broken manifests.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import stat
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from recallkit.runfiles import _atomic
from recallkit.runner import append_history, from_folder, load_image, read_history
from tests.runner.checks import one_error_line as _one_error_line

HAND_RANKS = [0, 1, 1]  # conftest.hand_case with the mean-RGB encoder (see test_evaluate_cli)
# The hand case's gallery in folder order, mean RGB (conftest.hand_case).
HAND_GALLERY = np.array([[255, 0, 0], [0, 255, 0], [200, 50, 0], [0, 0, 255]], np.float64)


def _evaluate(cli, hand_case, module, cache, *extra, factory="mean_rgb"):
    query, gallery = hand_case
    return cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        f"{module}:{factory}",
        "--ks",
        "1",
        "2",
        "--cache-dir",
        cache,
        *extra,
    )


def _path_of_fd(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


# ------------------------------------------------------------------ history: concurrency


def _append_many(path: str, worker: int, count: int, barrier, results) -> None:
    try:
        barrier.wait()
        got = [
            append_history(path, {"tag": f"w{worker}-{j}", "recall": {"recall@1": 0.5}})
            for j in range(count)
        ]
    except BaseException as error:  # reported to the test, which must not wait forever
        got = [f"{type(error).__name__}: {error}"]
    results.put((worker, got))


@pytest.mark.skipif(sys.platform != "linux", reason="forks workers; flock is POSIX")
def test_concurrent_appends_keep_every_record_and_count_each_once(tmp_path):
    history = tmp_path / "runs.jsonl"
    workers, per_worker = 4, 25
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(workers)
    results = context.Queue()
    processes = [
        context.Process(target=_append_many, args=(str(history), w, per_worker, barrier, results))
        for w in range(workers)
    ]
    for p in processes:
        p.start()
    returned = dict(results.get() for _ in range(workers))
    for p in processes:
        p.join()
    assert all(isinstance(c, int) for got in returned.values() for c in got), returned
    records = read_history(history)
    total = workers * per_worker
    assert len(records) == total
    expected_tags = {f"w{w}-{j}" for w in range(workers) for j in range(per_worker)}
    assert {r["tag"] for r in records} == expected_tags
    # Each append saw a distinct count: together exactly 1..total.
    counts = sorted(c for got in returned.values() for c in got)
    assert counts == list(range(1, total + 1))
    # Within one worker the counts grow, and each count is its record's line number.
    for w, got in returned.items():
        assert got == sorted(got)
        for j, count in enumerate(got):
            assert records[count - 1]["tag"] == f"w{w}-{j}"


def test_untagged_runs_are_named_by_their_position(tmp_path):
    history = tmp_path / "runs.jsonl"
    history.write_text('{"tag": "a", "recall": {"recall@1": 0.5}}')  # no final newline
    assert append_history(history, {"tag": None, "recall": {"recall@1": 1.0}}) == 2
    assert history.read_text().splitlines() == [
        '{"tag": "a", "recall": {"recall@1": 0.5}}',
        '{"tag": "run-2", "recall": {"recall@1": 1.0}}',
    ]


# ------------------------------------------------------------------ symlinked outputs


def test_history_through_a_dangling_link_creates_its_target(tmp_path):
    (tmp_path / "link.jsonl").symlink_to("real.jsonl")
    assert append_history(tmp_path / "link.jsonl", {"tag": "a", "recall": {}}) == 1
    assert append_history(tmp_path / "link.jsonl", {"tag": "b", "recall": {}}) == 2
    assert (tmp_path / "link.jsonl").is_symlink()
    assert (tmp_path / "real.jsonl").read_text() == (
        '{"tag": "a", "recall": {}}\n{"tag": "b", "recall": {}}\n'
    )


def test_history_and_run_file_through_symlinks_keep_link_and_mode(
    cli, hand_case, encoder_module, tmp_path
):
    real = tmp_path / "store"
    real.mkdir()
    (real / "runs.jsonl").write_text('{"tag": "old", "recall": {"recall@1": 0.5}}\n')
    (real / "run.json").write_text("{}\n")
    for name in ("runs.jsonl", "run.json"):
        os.chmod(real / name, 0o600)
        (tmp_path / f"link-{name}").symlink_to(real / name)
    res = _evaluate(
        cli,
        hand_case,
        encoder_module[0],
        tmp_path / "cache",
        "--history",
        tmp_path / "link-runs.jsonl",
        "--json",
        tmp_path / "link-run.json",
    )
    assert res.rc == 0, res.err
    assert "(2 runs)" in res.err
    for name in ("runs.jsonl", "run.json"):
        link = tmp_path / f"link-{name}"
        assert link.is_symlink() and os.readlink(link) == str(real / name)
        assert stat.S_IMODE(os.stat(real / name).st_mode) == 0o600
    lines = (real / "runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["tag"] for line in lines] == ["old", "run-2"]
    record = json.loads((real / "run.json").read_text())
    assert record["queries"]["first_hit_rank"] == HAND_RANKS
    assert sorted(p.name for p in real.iterdir()) == ["run.json", "runs.jsonl"]


def test_atomic_write_keeps_an_existing_mode_and_gives_new_files_the_umask_mode(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    with _atomic.atomic_write(target) as handle:
        handle.write("new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    try:
        with _atomic.atomic_write(tmp_path / "fresh.txt") as handle:
            handle.write("x")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o644


# ------------------------------------------------------------------ symlink loops


def _two_classes(root, make_image):
    for name in ("1.png", "2.png", "3.png"):
        make_image(root / "red" / name, (200, 0, 0))
    make_image(root / "blue" / "1.png", (0, 0, 200))
    make_image(root / "blue" / "deep" / "2.png", (0, 0, 200))


@pytest.mark.parametrize("link", ["self", "up"])
def test_symlink_loop_counts_each_real_file_once(tmp_path, make_image, link):
    root = tmp_path / "data"
    _two_classes(root, make_image)
    if link == "self":
        (root / "red" / "self").symlink_to(".")  # a loop
    else:
        (root / "red" / "up").symlink_to("..")  # a loop through the root: reaches blue too
    (root / "red" / "again.png").symlink_to(root / "red" / "1.png")  # a second name
    images = from_folder(root)
    expected = [
        (root / "blue" / "1.png", "blue"),
        (root / "blue" / "deep" / "2.png", "blue"),
        (root / "red" / "1.png", "red"),
        (root / "red" / "2.png", "red"),
        (root / "red" / "3.png", "red"),
    ]
    assert list(zip(images.paths, images.labels, strict=True)) == expected
    assert len(set(images.ids)) == 5


def test_symlink_loop_in_the_cli(cli, tmp_path, make_image, read_json):
    root = tmp_path / "data"
    for i in range(3):
        make_image(root / "red" / f"{i}.png", (200, 0, 0))
        make_image(root / "blue" / f"{i}.png", (0, 0, 200))
    (root / "red" / "self").symlink_to(".")
    np.save(tmp_path / "e.npy", np.array([[0, 1]] * 3 + [[1, 0]] * 3, dtype=np.float32))
    res = cli(
        "evaluate",
        "--images",
        root,
        "--embeddings",
        tmp_path / "e.npy",
        "--ks",
        "1",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    record = read_json(tmp_path / "r.json")
    assert record["num_queries"] == 6 and record["metrics"] == {"recall@1": 1.0}


# ------------------------------------------------------------------ compare: shared ids


def _shared_id_runs(cli, tmp_path, make_image):
    """Two runs of one 20-row manifest (11 rows share the id x); b lists the rows reversed."""
    rng = np.random.default_rng(7)
    embeddings = rng.normal(size=(20, 4)).astype(np.float32)
    rows = []
    for i in range(20):
        make_image(tmp_path / "img" / f"{i:02d}.png", (i, i, i))
        ident = "x" if i < 11 else f"u{i}"
        rows.append(f"img/{i:02d}.png,c{i % 3},{ident}")
    (tmp_path / "a.csv").write_text("path,label,id\n" + "\n".join(rows) + "\n")
    (tmp_path / "b.csv").write_text("path,label,id\n" + "\n".join(rows[::-1]) + "\n")
    np.save(tmp_path / "a.npy", embeddings)
    np.save(tmp_path / "b.npy", embeddings[::-1].copy())
    for side in ("a", "b"):
        res = cli(
            "evaluate",
            "--images",
            tmp_path / f"{side}.csv",
            "--embeddings",
            tmp_path / f"{side}.npy",
            "--ks",
            "1",
            "3",
            "--json",
            tmp_path / f"{side}.json",
        )
        assert res.rc == 0, res.err


def test_compare_pairs_shared_manifest_ids_by_image(cli, tmp_path, make_image, read_json):
    _shared_id_runs(cli, tmp_path, make_image)
    a, b = read_json(tmp_path / "a.json"), read_json(tmp_path / "b.json")
    # The same images and embeddings: each image's rank is the same in both runs.
    by_path_a = dict(zip(a["queries"]["paths"], a["queries"]["first_hit_rank"], strict=True))
    by_path_b = dict(zip(b["queries"]["paths"], b["queries"]["first_hit_rank"], strict=True))
    assert by_path_a == by_path_b
    assert len(set(a["queries"]["first_hit_rank"][:11])) > 1  # the shared-id rows differ
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--json", tmp_path / "c.json")
    assert res.rc == 0, res.err
    comparison = read_json(tmp_path / "c.json")
    assert [row["metric"] for row in comparison["comparisons"]] == list(a["metrics"])
    for row in comparison["comparisons"]:
        assert (row["difference"], row["low"], row["high"]) == (0.0, 0.0, 0.0)
        assert (row["only_a"], row["only_b"]) == (0, 0)
        assert row["value_a"] == row["value_b"] == a["metrics"][row["metric"]]


def test_compare_names_real_paths_when_queries_differ(cli, tmp_path, make_image, read_json):
    _shared_id_runs(cli, tmp_path, make_image)
    b = read_json(tmp_path / "b.json")
    real = b["queries"]["paths"][0]
    b["queries"]["paths"][0] = real.replace(".png", "-other.png")
    (tmp_path / "b.json").write_text(json.dumps(b))
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json")
    line = _one_error_line(res, "did not evaluate the same queries: 1 only in a, 1 only in b")
    assert f"({real})" in line  # the image's path relative to its manifest, no residue
    assert (tmp_path / real).is_file()


def test_compare_refuses_a_repeated_image_with_the_same_id(cli, tmp_path, make_image):
    make_image(tmp_path / "img" / "a.png", (1, 2, 3))
    make_image(tmp_path / "img" / "b.png", (3, 2, 1))
    (tmp_path / "m.csv").write_text("path,label,id\nimg/a.png,c,x\nimg/a.png,c,x\nimg/b.png,c,y\n")
    np.save(tmp_path / "e.npy", np.eye(3, dtype=np.float32))
    res = cli(
        "evaluate",
        "--images",
        tmp_path / "m.csv",
        "--embeddings",
        tmp_path / "e.npy",
        "--ks",
        "1",
        "--json",
        tmp_path / "a.json",
    )
    assert res.rc == 0, res.err
    res = cli("compare", tmp_path / "a.json", tmp_path / "a.json")
    _one_error_line(res, "has 2 queries with id 'x' and path", "a.png", "cannot be paired")


# ------------------------------------------------------------------ encoders the key cannot see

SHIFTED_SOURCE = '''
"""An encoder whose output depends on an environment variable the cache key cannot see."""
import os

import numpy as np


def shifted():
    def encode(images):
        shift = float(os.environ["RK_TEST_SHIFT"])
        return np.stack(
            [np.asarray(i, dtype=np.float64).reshape(-1, 3).mean(axis=0) + shift for i in images]
        ).astype(np.float32)

    return encode
'''


@pytest.fixture
def shifted_module(tmp_path, monkeypatch):
    name = f"rk_test_shifted_{os.getpid()}_{time.monotonic_ns()}"
    folder = tmp_path / "shifted"
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent(SHIFTED_SOURCE))
    monkeypatch.syspath_prepend(str(folder))
    yield name
    sys.modules.pop(name, None)


def _gallery_entry(cache: Path) -> np.ndarray:
    arrays = [np.load(p) for p in sorted(cache.glob("*.npy"))]
    return [a for a in arrays if len(a) == 4]


def test_encoder_id_separates_what_the_source_cannot(
    cli, hand_case, shifted_module, tmp_path, monkeypatch
):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RK_TEST_SHIFT", "1")
    first = _evaluate(cli, hand_case, shifted_module, cache, factory="shifted")
    assert first.rc == 0, first.err
    monkeypatch.setenv("RK_TEST_SHIFT", "2")
    # Without an id the entry of SHIFT=1 is reused, and the output says what the key was.
    stale = _evaluate(cli, hand_case, shifted_module, cache, factory="shifted")
    assert stale.rc == 0, stale.err
    hit = next(line for line in stale.err.splitlines() if "gallery embeddings: cache hit" in line)
    assert "keyed by its name and source code alone" in hit and "--encoder-id" in hit
    # With an id that changes with the variable, a new entry of the true embeddings.
    fresh = _evaluate(
        cli, hand_case, shifted_module, cache, "--encoder-id", "shift-2", factory="shifted"
    )
    assert fresh.rc == 0, fresh.err
    assert "gallery embeddings: cache miss" in fresh.err
    entries = _gallery_entry(cache)
    assert len(entries) == 2
    assert sorted(float(e[0, 1]) for e in entries) == [1.0, 2.0]  # green of red (255, 0, 0)
    new = next(e for e in entries if e[0, 1] == 2.0)
    np.testing.assert_array_equal(new, (HAND_GALLERY + 2).astype(np.float32))
    again = _evaluate(
        cli, hand_case, shifted_module, cache, "--encoder-id", "shift-2", factory="shifted"
    )
    hit = next(line for line in again.err.splitlines() if "gallery embeddings: cache hit" in line)
    assert "alone" not in hit


def test_encoder_id_needs_an_encoder(cli, tmp_path, make_image):
    make_image(tmp_path / "imgs" / "a" / "1.png", (1, 2, 3))
    make_image(tmp_path / "imgs" / "a" / "2.png", (3, 2, 1))
    np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
    res = cli(
        "evaluate",
        "--images",
        tmp_path / "imgs",
        "--embeddings",
        tmp_path / "e.npy",
        "--encoder-id",
        "v1",
    )
    _one_error_line(res, "--encoder-id goes with --model or --callable")


# ------------------------------------------------------------------ unusable caches


def test_unusable_cache_dir_warns_and_goes_on(cli, hand_case, encoder_module, tmp_path):
    not_a_folder = tmp_path / "cache-file"
    not_a_folder.write_text("a file, not a folder")
    res = _evaluate(cli, hand_case, encoder_module[0], not_a_folder, "--json", tmp_path / "r.json")
    assert res.rc == 0, res.err
    warnings = [line for line in res.err.splitlines() if "warning:" in line]
    assert len(warnings) == 2  # gallery and query
    assert all(f"the embedding cache '{not_a_folder}' cannot be written" in w for w in warnings)
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["queries"]["first_hit_rank"] == HAND_RANKS
    assert record["cache"] == {"gallery": "not stored", "query": "not stored"}
    assert not_a_folder.read_text() == "a file, not a folder"


def test_read_only_cache_dir_warns_and_goes_on(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    def read_only(target):
        raise OSError(errno.EROFS, "Read-only file system", str(target))

    monkeypatch.setattr(_atomic, "_open_temporary", read_only)
    cache = tmp_path / "cache"
    res = _evaluate(cli, hand_case, encoder_module[0], cache)
    assert res.rc == 0, res.err
    warnings = [line for line in res.err.splitlines() if "warning:" in line]
    assert warnings == [
        f"recallkit evaluate: warning: the embedding cache '{cache}' cannot be written "
        f"(Read-only file system); the {side} embeddings were not stored and the run goes on "
        "without the cache"
        for side in ("gallery", "query")
    ]
    assert "recall@1: 0.3333" in res.out


def test_full_disk_while_caching_is_one_line_and_leaves_nothing(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    real_sync = _atomic.sync

    def sync(fd):
        if ".npy." in os.path.basename(_path_of_fd(fd)):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_sync(fd)

    monkeypatch.setattr(_atomic, "sync", sync)
    cache = tmp_path / "cache"
    res = _evaluate(cli, hand_case, encoder_module[0], cache, "--json", tmp_path / "r.json")
    _one_error_line(res, "No space left on device")
    assert list(cache.iterdir()) == []  # neither a .json without its .npy nor a temporary
    assert not (tmp_path / "r.json").exists()


def test_an_entry_missing_either_half_is_a_miss(cli, hand_case, encoder_module, tmp_path):
    cache = tmp_path / "cache"
    assert _evaluate(cli, hand_case, encoder_module[0], cache).rc == 0
    gallery_npy = next(p for p in cache.glob("*.npy") if len(np.load(p)) == 4)
    gallery_npy.with_suffix(".json").unlink()
    res = _evaluate(cli, hand_case, encoder_module[0], cache)
    assert "gallery embeddings: cache miss" in res.err
    assert "query embeddings: cache hit" in res.err
    gallery_npy.unlink()
    res = _evaluate(cli, hand_case, encoder_module[0], cache)
    assert "gallery embeddings: cache miss" in res.err


def test_stale_temporaries_are_removed_and_young_ones_kept(
    cli, hand_case, encoder_module, tmp_path
):
    cache = tmp_path / "cache"
    cache.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    old = time.time() - _atomic.STALE_SECONDS - 60
    stale = [cache / ".0a1b.npy.k1ll3d.tmp", out / ".r.json.k1ll3d.tmp"]
    young = [cache / ".0a1b.npy.wr1t1ng.tmp", out / ".r.json.wr1t1ng.tmp"]
    for path in stale + young:
        path.write_bytes(b"half")
    for path in stale:
        os.utime(path, (old, old))
    res = _evaluate(cli, hand_case, encoder_module[0], cache, "--json", out / "r.json")
    assert res.rc == 0, res.err
    assert [p.exists() for p in stale] == [False, False]
    assert [p.exists() for p in young] == [True, True]


# ------------------------------------------------------------------ full disk on the outputs


def _outputs_case(tmp_path):
    history = tmp_path / "runs.jsonl"
    history.write_text('{"tag": "old", "recall": {"recall@1": 0.5}}\n')
    return history, (
        "--json",
        tmp_path / "r.json",
        "--history",
        history,
        "--show-out",
        tmp_path / "g.html",
        "--show-queries",
        "2",
    )


def _only(tmp_path, *names):
    """The files in tmp_path besides the fixtures' folders: exactly ``names``."""
    fixtures = {"query", "gallery", "modules", "cache", "default-cache"}
    return sorted(p.name for p in tmp_path.iterdir() if p.name not in fixtures) == sorted(names)


def test_full_disk_on_the_run_file_writes_nothing(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    history, outputs = _outputs_case(tmp_path)
    before = history.read_text()
    real_sync = _atomic.sync

    def sync(fd):
        if os.path.basename(_path_of_fd(fd)).startswith(".r.json."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_sync(fd)

    monkeypatch.setattr(_atomic, "sync", sync)
    res = _evaluate(cli, hand_case, encoder_module[0], tmp_path / "cache", *outputs)
    _one_error_line(res, "Cannot write the run file", "r.json", "No space left on device")
    assert history.read_text() == before
    assert _only(tmp_path, "runs.jsonl")


def test_a_failed_rename_names_what_was_already_written(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    # The history line is appended, then the grid and the run file renamed into place, in
    # that order: the run file's target turned into a folder meanwhile, its rename fails.
    from recallkit.cli.commands import evaluate as evaluate_command

    history, outputs = _outputs_case(tmp_path)
    real_append = evaluate_command.append_history

    def append_then_block_the_run_file(path, record):
        count = real_append(path, record)
        (tmp_path / "r.json").mkdir()
        return count

    monkeypatch.setattr(evaluate_command, "append_history", append_then_block_the_run_file)
    res = _evaluate(cli, hand_case, encoder_module[0], tmp_path / "cache", *outputs)
    line = _one_error_line(res, f"Cannot write the output '{tmp_path / 'r.json'}'")
    assert line.endswith(f"Written before it: {history}, {tmp_path / 'g.html'}."), line
    assert len(history.read_text().splitlines()) == 2
    assert (tmp_path / "g.html").read_text().startswith("<!doctype html>")
    assert (tmp_path / "r.json").is_dir() and _only(tmp_path, "runs.jsonl", "g.html", "r.json")


@pytest.mark.parametrize("existing", [True, False])
def test_full_disk_on_the_history_writes_nothing(
    cli, hand_case, encoder_module, tmp_path, monkeypatch, existing
):
    history, outputs = _outputs_case(tmp_path)
    if not existing:
        history.unlink()
    before = history.read_text() if existing else None
    real_write_all = _atomic.write_all

    def write_half(fd, data):
        real_write_all(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_atomic, "write_all", write_half)
    res = _evaluate(cli, hand_case, encoder_module[0], tmp_path / "cache", *outputs)
    _one_error_line(res, "Cannot write the history file", "runs.jsonl", "No space left")
    if existing:
        assert history.read_text() == before  # the half line was cut off again
        assert _only(tmp_path, "runs.jsonl")
    else:
        assert _only(tmp_path)


def test_all_outputs_written_together(cli, hand_case, encoder_module, tmp_path):
    history, outputs = _outputs_case(tmp_path)
    res = _evaluate(cli, hand_case, encoder_module[0], tmp_path / "cache", *outputs)
    assert res.rc == 0, res.err
    assert _only(tmp_path, "runs.jsonl", "r.json", "g.html")
    assert f"history: {history} (2 runs)" in res.err
    assert (tmp_path / "g.html").read_text().count('<td class="q">') == 2


# ------------------------------------------------------------------ images that are not images


@pytest.fixture
def fifo_image(hand_case):
    """A FIFO named like an image in the gallery.

    A writer thread keeps offering it bytes, so that code which opened it like a file would
    read garbage and fail instead of waiting forever for a writer.
    """
    _, gallery = hand_case
    fifo = gallery / "dog" / "c_fifo.png"
    os.mkfifo(fifo)
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            try:
                with open(fifo, "wb") as handle:  # waits for a reader
                    handle.write(b"not an image")
            except OSError:  # the reader went away first
                continue

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    yield fifo
    stop.set()
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # releases a writer waiting in open()
    thread.join()
    os.close(fd)


def test_fifo_named_like_an_image_is_refused_not_waited_on(
    cli, hand_case, encoder_module, fifo_image, tmp_path
):
    with pytest.raises(OSError, match="not a regular file"):
        load_image(fifo_image)
    res = _evaluate(cli, hand_case, encoder_module[0], tmp_path / "cache")
    _one_error_line(res, "1 gallery image could not be read", "c_fifo.png (not a regular file)")
    res = _evaluate(
        cli,
        hand_case,
        encoder_module[0],
        tmp_path / "cache",
        "--skip-bad",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    record = json.loads((tmp_path / "r.json").read_text())
    # The skipped image by its path relative to the gallery folder, as every path of a run file.
    assert record["skipped_images"] == [["dog/c_fifo.png", "not a regular file"]]
    assert fifo_image == tmp_path / "gallery" / "dog" / "c_fifo.png"
    assert record["queries"]["first_hit_rank"] == HAND_RANKS


def test_huge_image_in_the_grid_gets_a_placeholder(cli, tmp_path, make_image, monkeypatch):
    from PIL import Image

    make_image(tmp_path / "imgs" / "a" / "1.png", (200, 0, 0))
    make_image(tmp_path / "imgs" / "a" / "2.png", (0, 200, 0))
    make_image(tmp_path / "imgs" / "b" / "1.png", (0, 0, 200), size=(2, 2))
    np.save(tmp_path / "e.npy", np.array([[1, 0], [0, 1], [1, 0.1]], dtype=np.float32))
    # 4x4 = 16 pixels is over twice this limit: Pillow raises DecompressionBombError, as for a
    # 400-megapixel photo under the default limit; the 2x2 image stays under it.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 7)
    res = cli(
        "evaluate",
        "--images",
        tmp_path / "imgs",
        "--embeddings",
        tmp_path / "e.npy",
        "--ks",
        "1",
        "--show-out",
        tmp_path / "g.png",
    )
    assert res.rc == 0, res.err
    assert "Traceback" not in res.err
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ manifests


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        (
            'path,label\na.png,cat\n"b.png,dog\n',
            ["line 3 cannot be read as CSV", "unterminated quote"],
        ),
        ("path,label\na.png,cat\nb\x00.png,dog\n", ["line 3 holds a NUL character"]),
        ("path,label\na.png,cat\nsub,dog\n", ["line 3 (sub) is not a regular file"]),
    ],
)
def test_manifest_errors_name_the_file_and_line(cli, tmp_path, make_image, text, fragments):
    make_image(tmp_path / "a.png", (1, 2, 3))
    make_image(tmp_path / "b.png", (3, 2, 1))
    (tmp_path / "sub").mkdir()
    manifest = tmp_path / "m.csv"
    manifest.write_text(text)
    np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
    res = cli("evaluate", "--images", manifest, "--embeddings", tmp_path / "e.npy")
    _one_error_line(res, f"'{manifest}'", *fragments)


def test_cli_reports_any_system_error_in_one_line(cli, tmp_path, monkeypatch):
    import recallkit.runfiles.records as records

    def fail(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "a.json"))

    monkeypatch.setattr(records, "load_run", fail)
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json")
    _one_error_line(res, f"Permission denied: '{tmp_path / 'a.json'}'.")


# ------------------------------------------------------------------ embedding files


def test_big_endian_and_extended_precision_embedding_files(cli, tmp_path, make_image, read_json):
    for name in ("a/1", "a/2", "b/1", "b/2"):
        make_image(tmp_path / "imgs" / f"{name}.png", (1, 2, 3))
    # Each image's nearest other image is its class partner: a/1-a/2 cos 0.994, b/1-b/2 too.
    values = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]])
    np.save(tmp_path / "be.npy", values.astype(">f4"))
    res = cli(
        "evaluate",
        "--images",
        tmp_path / "imgs",
        "--embeddings",
        tmp_path / "be.npy",
        "--ks",
        "1",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    assert read_json(tmp_path / "r.json")["queries"]["first_hit_rank"] == [0, 0, 0, 0]
    extended = np.dtype(np.longdouble)
    if extended.itemsize > 8:  # where long double is wider than float64 (x86-64 Linux)
        np.save(tmp_path / "ld.npy", values.astype(extended))
        res = cli("evaluate", "--images", tmp_path / "imgs", "--embeddings", tmp_path / "ld.npy")
        _one_error_line(res, f"holds {extended} (extended precision)", "as float32 or float64")
