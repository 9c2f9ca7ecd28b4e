"""A reference streamed from disk gives exactly the in-memory results."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from recallkit import engine as recallkit_engine
from recallkit import (
    ground_truth_ranks_from_embeddings,
    map_at_r,
    nearest_neighbors,
    r_precision,
    recall_at_k,
)
from recallkit._inputs import io as recallkit_io
from recallkit._inputs import pinned as recallkit_pinned
from recallkit._inputs.io import load_embeddings, open_embeddings
from recallkit.engine import space
from recallkit.options import Options


@pytest.fixture()
def data():
    rng = np.random.default_rng(0)
    reference = rng.standard_normal((1000, 16)).astype(np.float16)
    reference[500:520] = reference[:20]  # duplicates across block boundaries
    labels = rng.integers(0, 60, size=1000)
    query = rng.standard_normal((70, 16)).astype(np.float32)
    q_labels = rng.integers(0, 65, size=70)
    return query, reference, q_labels, labels


@pytest.mark.parametrize("fmt", ["npy", "safetensors"])
def test_streamed_equals_in_memory(tmp_path, data, fmt, monkeypatch):
    query, reference, q_labels, labels = data
    path = tmp_path / f"gallery.{fmt}"
    if fmt == "npy":
        np.save(path, reference)
    else:
        save_file({"embeddings": reference}, str(path))
    streamed = open_embeddings(path)
    # Small blocks force many of them (and a short last one) through the streamed path.
    monkeypatch.setattr(space, "_streamed_block_rows", lambda m, d, n, budget: 128)
    memory = torch.from_numpy(reference.astype(np.float32))
    for metric in ("cosine", "euclidean"):
        a = recall_at_k(query, memory, q_labels, labels, (1, 5, 50), metric=metric)
        b = recall_at_k(query, streamed, q_labels, labels, (1, 5, 50), metric=metric)
        np.testing.assert_array_equal(a.first_hit_ranks, b.first_hit_ranks)
        assert dict(a) == dict(b)
        assert float(map_at_r(query, memory, q_labels, labels, metric=metric)) == float(
            map_at_r(query, streamed, q_labels, labels, metric=metric)
        )
    assert float(r_precision(query, memory, q_labels, labels)) == float(
        r_precision(query, streamed, q_labels, labels)
    )
    gt = np.arange(70) * 7
    np.testing.assert_array_equal(
        ground_truth_ranks_from_embeddings(query, memory, gt),
        ground_truth_ranks_from_embeddings(query, streamed, gt),
    )
    ia, va = nearest_neighbors(query, memory, 9)
    ib, vb = nearest_neighbors(query, streamed, 9)
    assert np.array_equal(ia, ib) and np.array_equal(va, vb)


def test_memmap_array_is_streamed(tmp_path, data):
    query, reference, q_labels, labels = data
    np.save(tmp_path / "g.npy", reference)
    mm = np.load(tmp_path / "g.npy", mmap_mode="r")
    a = recall_at_k(query, reference, q_labels, labels, (1, 10))
    b = recall_at_k(query, mm, q_labels, labels, (1, 10))
    np.testing.assert_array_equal(a.first_hit_ranks, b.first_hit_ranks)


def test_wide_in_memory_reference_is_scored_in_blocks(data):
    # A reference too wide for the memory budget is split into block views; same results.
    query, reference, q_labels, labels = data
    memory = torch.from_numpy(reference.astype(np.float32))
    before = recall_at_k(query, memory, q_labels, labels, (1, 5, 50))
    before_map = float(map_at_r(query, memory, q_labels, labels))
    before_nn = nearest_neighbors(query, memory, 7)
    small = "200000"  # bytes: a few blocks of the reference
    assert space.prepare(query, memory, Options.of("t", memory_budget=small), "t").single is None
    after = recall_at_k(query, memory, q_labels, labels, (1, 5, 50), memory_budget=small)
    np.testing.assert_array_equal(before.first_hit_ranks, after.first_hit_ranks)
    assert float(map_at_r(query, memory, q_labels, labels, memory_budget=small)) == before_map
    after_nn = nearest_neighbors(query, memory, 7, memory_budget=small)
    assert np.array_equal(before_nn[0], after_nn[0]) and np.array_equal(before_nn[1], after_nn[1])


def test_embedding_file_reads_row_slices(tmp_path):
    array = np.arange(24, dtype=np.float16).reshape(6, 4)
    np.save(tmp_path / "e.npy", array)
    file = open_embeddings(tmp_path / "e.npy")
    assert file.shape == (6, 4)
    np.testing.assert_array_equal(file[2:5], array[2:5])
    np.testing.assert_array_equal(file[4:100], array[4:])
    with pytest.raises(TypeError, match="contiguous row slices"):
        file[[0, 2]]


def _gallery(tmp_path):
    # 1000 rows of 4 float32: row i is (i, 1, 2, 3); the data starts after a 128-byte header.
    array = np.tile(np.arange(4, dtype=np.float32), (1000, 1))
    array[:, 0] = np.arange(1000)
    path = tmp_path / "g.npy"
    np.save(path, array)
    return path, array


def test_truncated_npy_is_refused_naming_the_file(tmp_path):
    path, _ = _gallery(tmp_path)
    data = path.read_bytes()
    assert len(data) == 128 + 1000 * 4 * 4
    half = tmp_path / "half.npy"
    half.write_bytes(data[: len(data) // 2])
    message = (
        rf"must be a complete \.npy file \(16128 bytes .*Got 8064 bytes in {re.escape(str(half))}"
    )
    with pytest.raises(ValueError, match=rf"'path' parameter of open_embeddings {message}"):
        open_embeddings(half)
    with pytest.raises(ValueError, match=rf"'path' parameter of load_embeddings {message}"):
        load_embeddings(half)
    query = np.ones((2, 4), dtype=np.float32)
    with pytest.raises(ValueError, match=re.escape(str(half))):
        recall_at_k(query, open_embeddings(half), [0, 1], np.arange(1000) % 2, (1,))


def _rewritten(path, old_stat):
    """Give a file rewritten in place a modification time 1 s after the one it had when opened,
    so that the test does not depend on the clock's resolution."""
    os.utime(path, ns=(old_stat.st_atime_ns, old_stat.st_mtime_ns + 10**9))


def test_file_truncated_after_opening_is_refused_on_read(tmp_path):
    path, array = _gallery(tmp_path)
    file = open_embeddings(path)
    np.testing.assert_array_equal(file[998:1000], array[998:])
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.truncate(128 + 999 * 16)  # the last row is gone
    _rewritten(path, before)
    message = (
        f"The embedding file '{path}' changed since it was opened (it was rewritten in place: "
        "size 16128 -> 16112 bytes, modification time); open it again to read it."
    )
    for rows in (slice(0, 999), slice(998, 1000)):
        with pytest.raises(ValueError) as caught:
            file[rows]
        assert str(caught.value) == message


def test_a_short_read_raises_instead_of_returning_uninitialised_rows(tmp_path, monkeypatch):
    path, array = _gallery(tmp_path)
    file = open_embeddings(path)
    real = recallkit_io._read_at

    def half(fd, view, offset):  # rows (after the 128-byte header) stop halfway
        return real(fd, view[: len(view) // 2] if offset >= 128 else view, offset)

    monkeypatch.setattr(recallkit_io, "_read_at", half)
    np.testing.assert_array_equal(file[0:0], array[0:0])  # nothing asked, nothing missing
    with pytest.raises(ValueError) as caught:
        file[998:1000]
    # Rows 998:1000 are 2 x 4 float32 = 32 bytes at 128 + 998 * 16 = 16096; half came back.
    assert str(caught.value) == (
        f"{path} ended early: rows 998:1000 need 32 bytes at offset 16096, read 16 (was the "
        "file truncated after it was opened?)."
    )


def test_npy_rewritten_in_place_with_another_dtype_is_refused(tmp_path):
    # The reported case: float32 (1000, 16) opened, then float64 data saved at the same path.
    # Reading the new bytes with the old dtype and offset gave recall@1 0.02 instead of 1.0.
    rng = np.random.default_rng(5)
    gallery = rng.standard_normal((1000, 16)).astype(np.float32)
    path = tmp_path / "g.npy"
    np.save(path, gallery)
    file = open_embeddings(path)
    labels = np.arange(1000)
    assert (
        recall_at_k(gallery[:50], file, labels[:50], labels, (1,), query_in_reference=False)[
            "recall@1"
        ]
        == 1.0
    )
    before = os.stat(path)
    np.save(path, gallery.astype(np.float64))  # np.save truncates and rewrites the same file
    _rewritten(path, before)
    assert os.stat(path).st_ino == before.st_ino
    message = (
        f"The embedding file '{path}' changed since it was opened (it was rewritten in place: "
        "size 64128 -> 128128 bytes, modification time, header); open it again to read it."
    )
    with pytest.raises(ValueError) as caught:
        recall_at_k(gallery[:50], file, labels[:50], labels, (1,), query_in_reference=False)
    assert str(caught.value) == message
    # Opened again, the new file is read with its own header: the same rows, in float64.
    again = open_embeddings(path)
    np.testing.assert_array_equal(again[0:1000], gallery.astype(np.float64))


def test_npy_rewritten_in_place_with_the_same_layout_is_refused(tmp_path):
    # Same size and header: only the modification time tells the rewrite apart.
    path, array = _gallery(tmp_path)
    file = open_embeddings(path)
    before = os.stat(path)
    np.save(path, array[::-1].copy())
    _rewritten(path, before)
    with pytest.raises(ValueError, match="rewritten in place: modification time\\);"):
        file[0:10]


@pytest.mark.parametrize("fmt", ["npy", "safetensors"])
def test_a_file_replaced_after_opening_still_reads_as_opened(tmp_path, fmt):
    # A new file renamed over the path (np.save to a temporary file, then os.replace) leaves
    # the opened file as it was: its rows are read, exactly.
    rng = np.random.default_rng(6)
    gallery = rng.standard_normal((300, 8)).astype(np.float32)
    path = tmp_path / f"g.{fmt}"
    save = np.save if fmt == "npy" else lambda p, a: save_file({"embeddings": a}, str(p))
    save(path, gallery)
    file = open_embeddings(path)
    fresh = tmp_path / f"fresh.{fmt}"
    save(fresh, rng.standard_normal((500, 4)))  # another dtype, shape and size
    os.replace(fresh, path)
    assert file.shape == (300, 8)
    np.testing.assert_array_equal(file[0:300], gallery)
    labels = np.arange(300)
    assert (
        recall_at_k(gallery[:40], file, labels[:40], labels, (1,), query_in_reference=False)[
            "recall@1"
        ]
        == 1.0
    )
    assert open_embeddings(path).shape == (500, 4)  # opened again: the new file


def test_safetensors_rewritten_in_place_is_refused(tmp_path):
    path = tmp_path / "g.safetensors"
    gallery = np.arange(40, dtype=np.float32).reshape(10, 4)
    save_file({"embeddings": gallery}, str(path))
    file = open_embeddings(path)
    np.testing.assert_array_equal(file[2:4], gallery[2:4])
    before = os.stat(path)
    with open(path, "r+b") as handle:  # overwrite the data in place, as a writer reusing it
        handle.seek(before.st_size - 16)
        handle.write(np.zeros(4, dtype=np.float32).tobytes())
    _rewritten(path, before)
    with pytest.raises(ValueError) as caught:
        file[0:10]
    assert str(caught.value) == (
        f"The embedding file '{path}' changed since it was opened (it was rewritten in place: "
        "modification time); open it again to read it."
    )


def test_embedding_file_closes(tmp_path):
    path, array = _gallery(tmp_path)
    with open_embeddings(path) as file:
        np.testing.assert_array_equal(file[5:7], array[5:7])
    with pytest.raises(ValueError) as caught:
        file[5:7]
    assert str(caught.value) == f"The embedding file '{path}' was closed."


def test_bfloat16_safetensors_streams_as_float32(tmp_path):
    from safetensors.torch import save_file as save_torch

    values = torch.tensor([[1.5, -2.0], [0.25, 3.0], [-0.5, 8.0]], dtype=torch.bfloat16)
    save_torch({"e": values}, str(tmp_path / "b.safetensors"))
    file = open_embeddings(tmp_path / "b.safetensors")
    rows = file[1:3]
    assert rows.dtype == np.float32 and rows.tolist() == [[0.25, 3.0], [-0.5, 8.0]]


def test_truncated_safetensors_names_the_file(tmp_path):
    path = tmp_path / "g.safetensors"
    save_file({"embeddings": np.ones((1000, 4), dtype=np.float32)}, str(path))
    data = path.read_bytes()
    for name, size in (("half.safetensors", len(data) // 2), ("tiny.safetensors", 5)):
        broken = tmp_path / name
        broken.write_bytes(data[:size])
        with pytest.raises(
            ValueError, match=rf"'path' .* readable \.safetensors .*{re.escape(str(broken))}"
        ):
            load_embeddings(broken)
        with pytest.raises(
            ValueError, match=rf"'path' parameter of open_embeddings.*{re.escape(str(broken))}"
        ):
            open_embeddings(broken)


def test_big_endian_npy_is_read_in_native_order(tmp_path):
    _, array = _gallery(tmp_path)
    np.save(tmp_path / "be.npy", array.astype(">f4"))
    loaded = load_embeddings(tmp_path / "be.npy")
    assert loaded.dtype == torch.float32
    np.testing.assert_array_equal(loaded.numpy(), array)
    file = open_embeddings(tmp_path / "be.npy")
    assert file[10:12].dtype.isnative
    np.testing.assert_array_equal(file[10:12], array[10:12])
    # Row i = (i, 1, 2, 3): under dot scores, the nearest row of any positive query is row 999.
    idx, _ = nearest_neighbors(np.array([[1.0, 0.0, 0.0, 0.0]]), file, 2, metric="dot")
    assert idx.tolist() == [[999, 998]]


@pytest.mark.parametrize(
    "array",
    [
        np.array([["a", "b"]]),
        np.array([[b"a", b"b"]]),
        np.array([[1 + 2j, 0]], dtype=np.complex64),
        np.array([[True, False]]),
        np.array([[1.0, 2.0]], dtype=np.longdouble),
        np.zeros((1, 2), dtype=[("a", np.float32)]),
    ],
    ids=["str", "bytes", "complex", "bool", "longdouble", "record"],
)
def test_npy_of_non_real_dtype_is_refused(tmp_path, array):
    path = tmp_path / "x.npy"
    np.save(path, array)
    dtype = re.escape(str(array.dtype))
    for func in (open_embeddings, load_embeddings):
        with pytest.raises(
            ValueError, match=rf"real numbers .*Got dtype {dtype} in {re.escape(str(path))}"
        ):
            func(path)


def test_object_npy_is_refused(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.array([[1.0, 2.0]], dtype=object), allow_pickle=True)
    with pytest.raises(
        ValueError, match=rf"real numbers .*Got dtype object in {re.escape(str(path))}"
    ):
        load_embeddings(path)


def test_bfloat16_safetensors_is_read_as_float32(tmp_path):
    from safetensors.torch import save_file as save_torch

    values = torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.bfloat16)
    save_torch({"e": values}, str(tmp_path / "b.safetensors"))
    loaded = load_embeddings(tmp_path / "b.safetensors")
    assert loaded.dtype == torch.float32
    assert loaded.tolist() == [[1.5, -2.0], [0.25, 3.0]]


def _touch_later(path, data):
    """Rewrite ``path`` in place with ``data`` and a modification time that differs."""
    with open(path, "r+b") as handle:
        handle.seek(len(data) // 2)
        handle.write(data[len(data) // 2 :])
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_a_memory_map_rewritten_in_place_during_a_call_is_refused(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    gallery = rng.standard_normal((300, 8)).astype(np.float32)
    labels = rng.integers(0, 5, 300)
    path = tmp_path / "g.npy"
    np.save(path, gallery)
    mapped = np.load(path, mmap_mode="r")
    run = recallkit_engine.run

    def rewritten(space, request, *args, **kwargs):  # the file changes once the call began
        _touch_later(path, (gallery[::-1] * 2).tobytes())
        return run(space, request, *args, **kwargs)

    monkeypatch.setattr(recallkit_engine, "run", rewritten)
    with pytest.raises(ValueError, match=r"g\.npy' changed since it was opened"):
        recall_at_k(gallery[:20], mapped, labels[:20], labels, (1,), query_in_reference=False)


def test_a_memory_map_truncated_before_it_is_read_is_refused_not_a_signal(tmp_path):
    rng = np.random.default_rng(1)
    gallery = rng.standard_normal((200, 8)).astype(np.float32)
    path = tmp_path / "g.npy"
    np.save(path, gallery)
    mapped = np.load(path, mmap_mode="r")
    os.truncate(path, os.path.getsize(path) // 2)  # reading the mapping now: SIGBUS
    with pytest.raises(ValueError, match=r"truncated"):
        recall_at_k(
            gallery[:10],
            mapped,
            np.zeros(10, int),
            np.zeros(200, int),
            (1,),
            query_in_reference=False,
        )


def test_a_whole_file_rewritten_while_it_is_read_is_refused(tmp_path, monkeypatch):
    from recallkit._inputs.io import read_array

    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    path = tmp_path / "e.npy"
    np.save(path, x)
    read_at = recallkit_io._read_at
    target = [path]

    def racing(fd, view, offset):
        got = read_at(fd, view, offset)
        if len(view) > 64:  # the data, not the header: the file changes under the read
            _touch_later(target[0], (x + 1).tobytes())
        return got

    monkeypatch.setattr(recallkit_io, "_read_at", racing)
    with pytest.raises(ValueError, match=r"changed since it was opened"):
        read_array(path, what="embeddings")
    monkeypatch.setattr(recallkit_pinned, "read_at", racing)  # the whole-file reads
    for suffix in (".safetensors", ".pt"):
        other = target[0] = tmp_path / f"e{suffix}"
        if suffix == ".pt":
            torch.save(torch.from_numpy(x), other)
        else:
            save_file({"embeddings": x}, str(other))
        with pytest.raises(ValueError, match="changed while it was read"):
            read_array(other, what="embeddings")
