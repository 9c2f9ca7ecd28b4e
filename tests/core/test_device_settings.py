"""The device path under the torch settings users run with, on the CPU: autocast regions, TF32
and float16-accumulation flags, deterministic algorithms, the torch floor; and the fused Triton
path (under ``TRITON_INTERPRET=1``) issues a number of kernel launches and torch operations per
chunk that does not grow with the embedding dimension.

What CUDA runs is the torch back end (``RECALLKIT_BACKEND=torch``) or its Triton kernels
(``RECALLKIT_BACKEND=triton``); both run here on CPU tensors. Expected values come from
``tests/brute.py`` or from the numba back end on the same inputs.
"""

from __future__ import annotations

import ast
import collections
import pathlib

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import recallkit
from recallkit import engine
from recallkit.engine import device, filters, triton_kernels
from tests import brute

ENGINE = pathlib.Path(engine.__file__).parent


def test_autocast_changes_no_rank_on_the_torch_path(monkeypatch):
    # 6,000 x 256 Gaussian rows, 1,500 classes, leave-one-out: inside a bfloat16 autocast
    # region a GEMM run in bfloat16 under a float32 bound changed 730 first-hit ranks.
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((6000, 256)).astype(np.float32))
    labels = rng.integers(0, 1500, 6000)
    expected = recallkit.recall_at_k(x, x, labels, labels, (1, 10), query_in_reference=True)
    monkeypatch.setenv("RECALLKIT_BACKEND", "torch")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = recallkit.recall_at_k(x, x, labels, labels, (1, 10), query_in_reference=True)
        nn = recallkit.nearest_neighbors(x[:200], x, 5)
    assert np.array_equal(inside.first_hit_ranks, expected.first_hit_ranks)
    monkeypatch.setenv("RECALLKIT_BACKEND", "numba")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tiles = recallkit.recall_at_k(x, x, labels, labels, (1, 10), query_in_reference=True)
    assert np.array_equal(tiles.first_hit_ranks, expected.first_hit_ranks)
    reference = recallkit.nearest_neighbors(x[:200], x, 5)
    assert torch.equal(nn[0], reference[0]) and torch.equal(nn[1], reference[1])


def test_float32_matmul_settings_are_read_and_widen_the_bound(monkeypatch):
    matmul = torch.backends.cuda.matmul
    saved = (matmul.fp32_precision, torch.get_float32_matmul_precision())
    cuda = torch.device("cuda")
    try:
        matmul.fp32_precision = "tf32"  # the new API: reading allow_tf32 now raises
        assert filters.float32_matmul_rounding(cuda) == 2.0**-10
        matmul.fp32_precision = "ieee"
        assert filters.float32_matmul_rounding(cuda) == 0.0
        torch.set_float32_matmul_precision("medium")  # may multiply in bfloat16
        assert filters.float32_matmul_rounding(cuda) == 2.0**-8
        assert filters.float32_matmul_rounding(torch.device("cpu")) == 2.0**-8
    finally:
        matmul.fp32_precision = saved[0]
        torch.set_float32_matmul_precision(saved[1])
    qf = filters.QueryFilter(
        torch.ones(1, 4) / 2, torch.ones(1, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    )
    plain = filters.error_bound(filters.Product.plain(torch.float32), qf, 1.0, 4, 1.0, "cosine")
    tf32 = filters.error_bound(
        filters.Product(torch.float32, 2.0**-23, 2.0**-10), qf, 1.0, 4, 1.0, "cosine"
    )
    assert float(tf32) > float(plain) * 100


def test_float16_accumulation_is_refused_for_a_float16_filter(monkeypatch):
    monkeypatch.setattr(filters, "_fp16_accumulation", lambda: True)
    with pytest.raises(ValueError, match="allow_fp16_accumulation is True"):
        device.check_low_precision(torch.float16, "cuda")
    device.check_low_precision(torch.bfloat16, "cuda")  # bfloat16 accumulates in float32
    device.check_low_precision(torch.float16, "cpu")  # the CPU's products sum in float32


# Operations that torch.use_deterministic_algorithms(True) refuses on CUDA (torch's list).
REFUSED = {
    "scatter_reduce",
    "scatter_reduce_",
    "index_reduce",
    "index_reduce_",
    "put_",
    "histc",
    "median",
    "kthvalue",
    "EmbeddingBag",
}


def test_the_device_path_calls_nothing_deterministic_mode_refuses():
    found = []
    for name in (
        "device.py",
        "protocol.py",
        "ties.py",
        "pairs.py",
        "filters.py",
        "exact.py",
        "triton_backend.py",
    ):
        tree = ast.parse((ENGINE / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in REFUSED:
                found.append((name, node.attr, node.lineno))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "bincount":
                if any(k.arg == "weights" for k in node.keywords):
                    found.append((name, "bincount(weights=)", node.lineno))
    assert found == []


def test_deterministic_mode_runs_the_torch_path(monkeypatch):
    monkeypatch.setenv("RECALLKIT_BACKEND", "torch")
    x, labels = _clusters(300, 16)
    expected = brute.first_hit_ranks(
        brute.fixed_order_scores64(x, x, "cosine"),
        labels,
        labels,
        brute.excluded_sets(300, 300, query_in_reference=True),
    )
    torch.use_deterministic_algorithms(True)
    try:
        r = recallkit.recall_at_k(
            x, x, labels, labels, (1,), query_in_reference=True, chunk_size=64
        )
    finally:
        torch.use_deterministic_algorithms(False)
    assert np.array_equal(r.first_hit_ranks, expected)


def test_an_old_torch_is_refused_with_the_floor():
    with pytest.raises(ImportError, match=r"needs torch >= 2.8 .* found torch 2.5.1"):
        engine.check_torch("2.5.1+cu121")
    engine.check_torch("2.8.0")
    engine.check_torch("2.15.0.dev20261101")


def _clusters(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n // 4, n)
    centres = rng.standard_normal((n // 4, d))
    x = (centres[labels] + 0.7 * rng.standard_normal((n, d))).astype(np.float32)
    x[n // 2 : n // 2 + n // 10] = x[: n // 10]  # exact duplicates
    labels[n // 2 : n // 2 + n // 10] = labels[: n // 10]
    return x, labels


class _Counting(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.skipif(not triton_kernels.interpreting(), reason="needs TRITON_INTERPRET=1")
def test_launches_per_chunk_do_not_grow_with_the_dimension(monkeypatch):
    """The fused path: the same torch operations and Triton launches for recall@K at d = 64
    and d = 256 (32 rows, one chunk), and for ground-truth ranks and nearest neighbours at
    d = 16 and 80 (1 and 5 of the interpreter's 16-wide dimension blocks; 48 rows, two chunks
    of 24): an interpreted launch costs d steps. The torch path's exact scores take one
    addition per dimension."""
    monkeypatch.setenv("RECALLKIT_BACKEND", "triton")
    monkeypatch.setattr(device.DeviceBackend, "exact_is_cheaper", lambda *a: True)
    launches: collections.Counter = collections.Counter()
    kernel = triton_kernels._kernel

    def counting(name):
        launches[name] += 1
        return kernel(name)

    def count(call, d, n):
        x, labels = _clusters(n, d)
        launches.clear()
        with _Counting() as mode:
            call(x, labels)
        return sum(mode.ops.values()), dict(launches)

    def recall(x, labels):
        recallkit.recall_at_k(x, x, labels, labels, (1, 5), query_in_reference=True)

    def others(x, labels):
        targets = np.stack([np.arange(48), (np.arange(48) + 5) % 48], axis=1)
        recallkit.ground_truth_ranks_from_embeddings(x, x, targets, reduce="none", chunk_size=24)
        recallkit.nearest_neighbors(x, x, 4, query_in_reference=True, chunk_size=24)

    monkeypatch.setattr(triton_kernels, "_kernel", counting)
    for call, dims, n in ((recall, (64, 256), 32), (others, (16, 80), 48)):
        low, high = (count(call, d, n) for d in dims)
        assert low == high, call.__name__
        assert low[1]["exact"] > 0 and low[1]["filter"] > 0, call.__name__
    monkeypatch.setenv("RECALLKIT_BACKEND", "torch")
    torch_counts = {}
    for d in (16, 80):
        x, labels = _clusters(48, d)
        with _Counting() as mode:
            recallkit.recall_at_k(
                x, x, labels, labels, (1,), query_in_reference=True, chunk_size=24
            )
        torch_counts[d] = sum(mode.ops.values())
    assert torch_counts[80] > torch_counts[16] + 60  # d additions per exact batch
