"""Memory maps are read from the file they map, never through the mapping, on every path.

A file truncated under a numpy memory map turns the next read of a lost page into SIGBUS, which
kills the process with nothing printed (exit status 135 in a shell). Every case that would
read a truncated mapping if the library regressed runs in a child process, so that a crash
fails the test instead of killing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import recallkit
from recallkit import engine as recallkit_engine
from recallkit._inputs import pinned as _pinned
from recallkit._inputs.io import open_embeddings, pin, read_through
from recallkit.pml import ExactKNN

# 300 rows of 8 float32 after a 128-byte header: 9728 bytes.
ROWS, DIM, SIZE = 300, 8, 128 + 300 * 8 * 4


def _data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((ROWS, DIM)).astype(np.float32), np.arange(ROWS) % 7


def _child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


# The reproducer: a memory map, its file truncated by another process, then the call. The child
# prints the error's one line on stderr and exits with status 2; a SIGBUS would end it with -7.
REPRODUCER = """
    import os, sys
    import numpy as np
    import recallkit

    path, case = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    labels = np.arange(300) % 7
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    os.truncate(path, 1000)
    query, reference = {
        "query": (mapped, x),
        "reference": (x, mapped),
        "leave-one-out": (mapped, mapped),
    }[case]
    loo = case == "leave-one-out"
    try:
        recallkit.recall_at_k(query, reference, labels, labels, (1,), query_in_reference=loo)
    except ValueError as error:
        print(error, file=sys.stderr)
        sys.exit(2)
    print("no error")
"""


@pytest.mark.parametrize(
    ("case", "name"),
    [("query", "query"), ("reference", "reference"), ("leave-one-out", "reference")],
)
def test_a_truncated_memory_map_is_one_line_not_a_sigbus(tmp_path, case, name):
    path = tmp_path / "g.npy"
    done = _child(REPRODUCER, str(path), case)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-2000:])
    assert done.stderr == (
        f"The '{name}' parameter of recall_at_k must be a memory map within its file ({SIZE} "
        f"bytes). Got 1000 bytes in {path} (truncated).\n"
    )


# Every entry point that takes embeddings, labels or scores, given one truncated memory map.
EVERY_ENTRY_POINT = """
    import os, sys
    import numpy as np
    import torch
    import recallkit
    from recallkit.pml import ExactKNN, RecallCalculator

    folder = sys.argv[1]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    labels = np.arange(300) % 7
    scores = x @ x.T
    store = "file://" + os.path.join(folder, "store")
    torch.distributed.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    group = torch.distributed.group.WORLD

    def truncated(name, array):
        path = os.path.join(folder, name + ".npy")
        np.save(path, array)
        mapped = np.load(path, mmap_mode="r")
        os.truncate(path, 1000)
        return mapped

    def recall(q, r, **kwargs):
        return recallkit.recall_at_k(q, r, labels, labels, (1,), **kwargs)

    def calculator(*args):
        return RecallCalculator(ks=(1,)).get_accuracy(*args)

    ranks = recallkit.ground_truth_ranks_from_embeddings
    rows = np.arange(300)
    CASES = {
        "query": (x, lambda m: recall(m, x, query_in_reference=False)),
        "query_view": (x, lambda m: recall(np.asarray(m)[::-1], x, query_in_reference=False)),
        "reference": (x, lambda m: recall(x, m, query_in_reference=False)),
        "loo": (x, lambda m: recall(m, m, query_in_reference=True)),
        "metrics": (
            x,
            lambda m: recallkit.retrieval_metrics(
                m, x, labels, labels, ["MAP@R"], query_in_reference=False
            ),
        ),
        "labels": (
            labels,
            lambda m: recallkit.recall_at_k(x, x, m, labels, (1,), query_in_reference=True),
        ),
        "nn_query": (x, lambda m: recallkit.nearest_neighbors(m, x, 3)),
        "nn_reference": (x, lambda m: recallkit.nearest_neighbors(x, m, 3)),
        "ranks_query": (x, lambda m: ranks(m, x, rows)),
        "ranks_reference": (x, lambda m: ranks(x, m, rows)),
        "ranks_scores": (scores, lambda m: recallkit.ground_truth_ranks(m, rows)),
        "knn_loo": (x, lambda m: ExactKNN()(m, 3)),
        "knn_query": (x, lambda m: ExactKNN()(m, 3, x, False)),
        "calculator_loo": (x, lambda m: calculator(m, labels)),
        "calculator_reference": (x, lambda m: calculator(x, labels, m, labels, False)),
        "sharded": (x, lambda m: recallkit.evaluate_sharded(m, labels, rows, (1,), group=group)),
        "evaluator": (x, lambda m: recallkit.Evaluator(ks=(1,)).update(m, labels)),
    }
    for name, (array, call) in CASES.items():
        try:
            call(truncated(name, array))
            print(f"{name}: no error", flush=True)
        except ValueError as error:
            print(f"{name}: {error}", flush=True)
"""


def test_every_entry_point_refuses_a_truncated_memory_map(tmp_path):
    done = _child(EVERY_ENTRY_POINT, str(tmp_path))
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())

    def truncated(func, name, case, size=SIZE):
        return (
            f"The '{name}' parameter of {func} must be a memory map within its file ({size} "
            f"bytes). Got 1000 bytes in {tmp_path / case}.npy (truncated)."
        )

    assert lines == {
        "query": truncated("recall_at_k", "query", "query"),
        "query_view": truncated("recall_at_k", "query", "query_view"),
        "reference": truncated("recall_at_k", "reference", "reference"),
        "loo": truncated("recall_at_k", "reference", "loo"),
        "metrics": truncated("retrieval_metrics", "query", "metrics"),
        "labels": truncated("recall_at_k", "query_labels", "labels", 128 + 300 * 8),
        "nn_query": truncated("nearest_neighbors", "query", "nn_query"),
        "nn_reference": truncated("nearest_neighbors", "reference", "nn_reference"),
        "ranks_query": truncated("ground_truth_ranks_from_embeddings", "query", "ranks_query"),
        "ranks_reference": truncated(
            "ground_truth_ranks_from_embeddings", "reference", "ranks_reference"
        ),
        "ranks_scores": truncated(
            "ground_truth_ranks", "scores", "ranks_scores", 128 + 300 * 300 * 4
        ),
        "knn_loo": truncated("ExactKNN", "reference", "knn_loo"),
        "knn_query": truncated("ExactKNN", "query", "knn_query"),
        "calculator_loo": truncated("RecallCalculator.get_accuracy", "reference", "calculator_loo"),
        "calculator_reference": truncated(
            "RecallCalculator.get_accuracy", "reference", "calculator_reference"
        ),
        "sharded": truncated("evaluate_sharded", "embeddings", "sharded"),
        "evaluator": truncated("Evaluator.update", "embeddings", "evaluator")[:-1]
        + " in batch 0 (batches count from 0 in each epoch).",
    }


# The file truncated during the call, once the call has read the query (the engine runs).
DURING_THE_CALL = """
    import os, sys
    import numpy as np
    import recallkit
    from recallkit import engine

    path, case = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    labels = np.arange(300) % 7
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    run = engine.run

    def truncating(*args, **kwargs):
        os.truncate(path, 1000)
        return run(*args, **kwargs)

    engine.run = truncating
    query, reference = {"reference": (x, mapped), "leave-one-out": (mapped, mapped)}[case]
    loo = case == "leave-one-out"
    try:
        recallkit.recall_at_k(query, reference, labels, labels, (1,), query_in_reference=loo)
    except ValueError as error:
        print(error, file=sys.stderr)
        sys.exit(2)
    print("no error")
"""


@pytest.mark.parametrize("case", ["reference", "leave-one-out"])
def test_a_memory_map_truncated_during_the_call_is_one_line_not_a_sigbus(tmp_path, case):
    path = tmp_path / "g.npy"
    done = _child(DURING_THE_CALL, str(path), case)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-2000:])
    # The modification time changes too unless the truncation lands in the clock tick of the
    # file's writing.
    assert done.stderr.startswith(
        f"The embedding file '{path}' changed since it was opened (it was rewritten in place: "
        f"size {SIZE} -> 1000 bytes"
    )
    assert done.stderr.endswith("); open it again to read it.\n")
    assert done.stderr.count("\n") == 1


def _later(path, data):
    """Rewrite ``path`` in place with ``data`` (same size), its modification time 1 s later."""
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(128)
        handle.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))


def test_a_query_rewritten_while_it_is_read_is_refused(tmp_path, monkeypatch):
    x, labels = _data()
    path = tmp_path / "q.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    read_at = _pinned.read_at
    done = []

    def racing(fd, view, offset):  # the rows are read, then the file is rewritten
        got = read_at(fd, view, offset)
        if offset == 128 and not done:
            done.append(_later(path, (x * 2).tobytes()))
        return got

    monkeypatch.setattr(_pinned, "read_at", racing)
    with pytest.raises(ValueError) as caught:
        recallkit.recall_at_k(mapped, x, labels, labels, (1,), query_in_reference=False)
    assert str(caught.value) == (
        f"The memory-mapped file '{path}' changed while it was read (it was rewritten in "
        "place: modification time, contents); map it again to read it."
    )


def test_leave_one_out_rewritten_during_the_call_is_refused(tmp_path, monkeypatch):
    # The query is read through the gallery's descriptor, so the two cannot come from two
    # versions of the file: a rewrite after the query was read stops the gallery's next block.
    x, labels = _data()
    path = tmp_path / "g.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    run = recallkit_engine.run

    def rewritten(*args, **kwargs):
        _later(path, (x[::-1] * 2).tobytes())
        return run(*args, **kwargs)

    monkeypatch.setattr(recallkit_engine, "run", rewritten)
    with pytest.raises(ValueError) as caught:
        recallkit.recall_at_k(mapped, mapped, labels, labels, (1, 5), query_in_reference=True)
    assert str(caught.value) == (
        f"The embedding file '{path}' changed since it was opened (it was rewritten in place: "
        "modification time); open it again to read it."
    )


def test_leave_one_out_on_one_memory_map_reads_the_file_once_pinned(tmp_path):
    x, labels = _data()
    path = tmp_path / "g.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    pinned = pin(mapped, "f")
    assert pinned.shape == (ROWS, DIM)
    query = read_through(pinned, mapped)
    assert type(query) is np.ndarray and query.flags.writeable
    np.testing.assert_array_equal(query, x)
    assert read_through(pinned, x) is x  # not a map of that file: as it is
    expected = recallkit.recall_at_k(x, x, labels, labels, (1, 5), query_in_reference=True)
    got = recallkit.recall_at_k(mapped, mapped, labels, labels, (1, 5), query_in_reference=True)
    assert dict(got) == dict(expected)
    assert got.first_hit_ranks.tolist() == expected.first_hit_ranks.tolist()


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize(
    "view",
    ["whole", "rows reversed", "every other row", "columns 2:6", "transposed twice", "one row"],
)
def test_every_view_of_a_memory_map_reads_exactly(tmp_path, monkeypatch, order, view):
    # Reads of at most 256 bytes: every view is split into several, along its largest stride.
    monkeypatch.setattr(_pinned, "READ_BYTES", 256)
    x, labels = _data()
    path = tmp_path / "g.npy"
    np.save(path, np.asarray(x, order=order))
    mapped = np.load(path, mmap_mode="r")
    take = {
        "whole": lambda a: a,
        "rows reversed": lambda a: a[::-1],
        "every other row": lambda a: a[::2],
        "columns 2:6": lambda a: a[:, 2:6],
        "transposed twice": lambda a: a.T.T,
        "one row": lambda a: a[5:6],
    }[view]
    expected, part = take(x), take(mapped)
    read = _pinned.read_mapped(part, "f", "query")
    assert type(read) is np.ndarray and read.flags.c_contiguous
    np.testing.assert_array_equal(read, expected)
    n = len(expected)
    for query, reference in ((part, expected), (expected, part), (part, part)):
        got = recallkit.nearest_neighbors(query, reference, min(3, n), metric="dot")
        want = recallkit.nearest_neighbors(expected, expected, min(3, n), metric="dot")
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
    if n == ROWS:
        got = recallkit.recall_at_k(part, part, labels, labels, (1, 5), query_in_reference=True)
        want = recallkit.recall_at_k(
            expected, expected, labels, labels, (1, 5), query_in_reference=True
        )
        assert got.first_hit_ranks.tolist() == want.first_hit_ranks.tolist()


def test_a_memory_map_whose_file_was_replaced_reads_its_own_values(tmp_path):
    # A new file renamed over the path: the map still holds the old one, and so does the call.
    if _pinned.mapped(np.load(_saved(tmp_path / "probe.npy"), mmap_mode="r")).inode is None:
        pytest.skip("the system does not say which file a mapping maps (/proc/self/maps)")
    x, _ = _data()
    path = tmp_path / "g.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    np.save(tmp_path / "new.npy", -x)
    os.replace(tmp_path / "new.npy", path)
    np.testing.assert_array_equal(_pinned.read_mapped(mapped, "f", "query"), x)
    expected = recallkit.nearest_neighbors(x, x, 3, metric="dot")
    for query, reference in ((mapped, x), (x, mapped), (mapped, mapped)):
        got = recallkit.nearest_neighbors(query, reference, 3, metric="dot")
        assert got[0].tolist() == expected[0].tolist()


def _saved(path):
    np.save(path, np.ones((2, 2), dtype=np.float32))
    return path


def test_a_copy_on_write_map_keeps_its_own_writes(tmp_path):
    x, _ = _data()
    path = tmp_path / "g.npy"
    np.save(path, x)
    private = np.load(path, mmap_mode="c")
    private[:] = -private  # in the mapping only: the file keeps x
    assert _pinned.mapped(private) is None
    expected = recallkit.nearest_neighbors(-x, -x, 3, metric="dot")
    got = recallkit.nearest_neighbors(private, private, 3, metric="dot")
    assert got[0].tolist() == expected[0].tolist()


def test_a_memory_map_query_is_read_as_a_writable_copy_without_a_warning(tmp_path):
    x, labels = _data()
    path = tmp_path / "q.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns of a tensor over a read-only mapping
        got = recallkit.recall_at_k(mapped, x, labels, labels, (1, 5), query_in_reference=True)
    expected = recallkit.recall_at_k(x, x, labels, labels, (1, 5), query_in_reference=True)
    assert got.first_hit_ranks.tolist() == expected.first_hit_ranks.tolist()


def test_exact_knn_on_one_memory_map_is_leave_one_out(tmp_path):
    x, _ = _data()
    path = tmp_path / "g.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    want_d, want_i = ExactKNN(metric="dot")(x, 3)
    got_d, got_i = ExactKNN(metric="dot")(mapped, 3)
    assert got_i.tolist() == want_i.tolist() and got_d.tolist() == want_d.tolist()


def test_file_state_sees_a_rewrite_that_keeps_size_and_time(tmp_path):
    path = tmp_path / "g.npy"
    x, _ = _data()
    np.save(path, x)
    fd = os.open(path, os.O_RDONLY)
    try:
        state = _pinned.FileState.of(fd, path)
    finally:
        os.close(fd)
    assert state.differences(state.now()) == []
    before = os.stat(path)
    with open(path, "r+b") as handle:  # the last value, same size
        handle.seek(before.st_size - 4)
        handle.write(np.float32(7).tobytes())
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same clock tick
    assert state.differences(state.now()) == ["contents"]
    os.replace(_saved(tmp_path / "other.npy"), path)
    assert state.differences(state.now()) == ["it was replaced by another file"]
    os.remove(path)
    assert state.differences(state.now()) == ["it was removed"]


def test_an_opened_file_reads_a_query_map_of_itself_through_its_descriptor(tmp_path):
    x, _ = _data()
    path = tmp_path / "g.npy"
    np.save(path, x)
    with open_embeddings(path) as gallery:
        query = read_through(gallery, np.load(path, mmap_mode="r")[:10])
        np.testing.assert_array_equal(query, x[:10])


def test_a_short_read_of_a_memory_map_raises_instead_of_returning_garbage(tmp_path, monkeypatch):
    x, _ = _data()
    path = tmp_path / "g.npy"
    np.save(path, x)
    mapped = np.load(path, mmap_mode="r")
    read_at = _pinned.read_at

    def half(fd, view, offset):  # the rows (after the 128-byte header) stop halfway
        return read_at(fd, view[: len(view) // 2] if offset >= 128 else view, offset)

    monkeypatch.setattr(_pinned, "read_at", half)
    with pytest.raises(ValueError) as caught:
        _pinned.read_mapped(mapped, "f", "query")
    assert str(caught.value) == (
        f"The memory-mapped file '{path}' ended early: 9600 bytes at offset 128, read 4800 "
        "(was it truncated while it was read?)."
    )
    with pytest.raises(ValueError) as caught:
        pin(mapped, "f")[10:12]
    # Rows 10:12 are 2 x 8 float32 = 64 bytes at 128 + 10 * 32 = 448; half came back.
    assert str(caught.value) == (
        f"{path} ended early: rows 10:12 need 64 bytes at offset 448, read 32 (was the file "
        "truncated after it was opened?)."
    )
