"""A reference streamed from disk gives exactly the in-memory results."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from recallkit import (
    _engine,
    ground_truth_ranks_from_embeddings,
    map_at_r,
    nearest_neighbors,
    r_precision,
    recall_at_k,
)
from recallkit.io import open_embeddings


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
    monkeypatch.setattr(_engine, "_streamed_block_rows", lambda m, d, n: 128)
    memory = torch.from_numpy(reference.astype(np.float32))
    for metric in ("cosine", "euclidean"):
        a = recall_at_k(query, memory, q_labels, labels, (1, 5, 50), metric=metric)
        b = recall_at_k(query, streamed, q_labels, labels, (1, 5, 50), metric=metric)
        np.testing.assert_array_equal(a.first_hit_ranks, b.first_hit_ranks)
        assert dict(a) == dict(b)
        assert map_at_r(query, memory, q_labels, labels, metric=metric) == map_at_r(
            query, streamed, q_labels, labels, metric=metric
        )
    assert r_precision(query, memory, q_labels, labels) == r_precision(
        query, streamed, q_labels, labels
    )
    gt = np.arange(70) * 7
    np.testing.assert_array_equal(
        ground_truth_ranks_from_embeddings(query, memory, gt),
        ground_truth_ranks_from_embeddings(query, streamed, gt),
    )
    ia, va = nearest_neighbors(query, memory, 9)
    ib, vb = nearest_neighbors(query, streamed, 9)
    assert torch.equal(ia, ib) and torch.equal(va, vb)


def test_memmap_array_is_streamed(tmp_path, data):
    query, reference, q_labels, labels = data
    np.save(tmp_path / "g.npy", reference)
    mm = np.load(tmp_path / "g.npy", mmap_mode="r")
    a = recall_at_k(query, reference, q_labels, labels, (1, 10))
    b = recall_at_k(query, mm, q_labels, labels, (1, 10))
    np.testing.assert_array_equal(a.first_hit_ranks, b.first_hit_ranks)


def test_wide_in_memory_reference_is_scored_in_blocks(data, monkeypatch):
    # A reference too wide for the memory budget is split into block views; same results.
    query, reference, q_labels, labels = data
    memory = torch.from_numpy(reference.astype(np.float32))
    before = recall_at_k(query, memory, q_labels, labels, (1, 5, 50))
    before_map = map_at_r(query, memory, q_labels, labels)
    before_nn = nearest_neighbors(query, memory, 7)
    monkeypatch.setattr(_engine, "DEFAULT_MEMORY_BUDGET", 200_000)
    assert _engine.prepare(query, memory, "cosine", None, "t").single is None
    after = recall_at_k(query, memory, q_labels, labels, (1, 5, 50))
    np.testing.assert_array_equal(before.first_hit_ranks, after.first_hit_ranks)
    assert map_at_r(query, memory, q_labels, labels) == before_map
    after_nn = nearest_neighbors(query, memory, 7)
    assert torch.equal(before_nn[0], after_nn[0]) and torch.equal(before_nn[1], after_nn[1])


def test_embedding_file_reads_row_slices(tmp_path):
    array = np.arange(24, dtype=np.float16).reshape(6, 4)
    np.save(tmp_path / "e.npy", array)
    file = open_embeddings(tmp_path / "e.npy")
    assert file.shape == (6, 4)
    np.testing.assert_array_equal(file[2:5], array[2:5])
    np.testing.assert_array_equal(file[4:100], array[4:])
    with pytest.raises(TypeError, match="contiguous row slices"):
        file[[0, 2]]
