"""The torch path (what CUDA runs), on the CPU: host synchronisations per call do not grow with
the number of chunks, overflowing window capacities change no result, and float16/bfloat16
filters are a cascade whose float64 work is float32's.

A host synchronisation is counted as a call, made from the engine's modules, of a tensor method
that reads a value back to the host (``.cpu()``, ``.item()``, ``.tolist()``, ``.numpy()``,
``bool``/``int``/``float``/``__index__``) or of ``nonzero`` (whose output size is data-dependent).
On a GPU each of these waits for the device. Expected values come from ``tests/brute.py``.
"""

from __future__ import annotations

import collections
import sys

import numpy as np
import pytest
import torch

from recallkit import (
    engine,
    ground_truth_ranks_from_embeddings,
    map_at_r,
    nearest_neighbors,
    recall_at_k,
)
from recallkit.engine import cpu, device, protocol
from recallkit.engine.space import DEVICE_BYTES_PER_SCORE as MASKS
from recallkit.options import Options
from tests import brute

ENGINE = tuple(
    f"recallkit.engine.{name}"
    for name in ("device", "exact", "filters", "pairs", "ties", "space", "protocol")
)
HOST_READS = (
    "cpu",
    "item",
    "tolist",
    "numpy",
    "nonzero",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
)


@pytest.fixture
def torch_path(monkeypatch):
    monkeypatch.setenv("RECALLKIT_BACKEND", "torch")


def _count_host_reads(monkeypatch) -> collections.Counter:
    counts: collections.Counter = collections.Counter()

    def counting(name, original):
        def wrapper(*args, **kwargs):
            if sys._getframe(1).f_globals.get("__name__") in ENGINE:
                counts[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(torch, "nonzero", counting("torch.nonzero", torch.nonzero))
    return counts


def _near_duplicates(seed: int, n: int = 256, d: int = 16, classes: int = 40):
    """Class clusters where a fifth of the rows are exact or near (1e-6) copies of others."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centres = rng.standard_normal((classes, d))
    x = (centres[labels] + 0.8 * rng.standard_normal((n, d))).astype(np.float32)
    k = n // 10
    source = rng.integers(0, n - 2 * k, k)
    x[n - 2 * k : n - k] = x[source]
    x[n - k :] = x[source] + (1e-6 * rng.standard_normal((k, d))).astype(np.float32)
    labels[n - 2 * k : n - k] = labels[source]
    labels[n - k :] = labels[source]
    return x, labels


def _calls(x, labels, coarse, targets, chunk, precision="float32"):
    """The public calls of the torch path, with their results as plain lists."""
    kw = dict(query_in_reference=True, chunk_size=chunk, precision=precision)
    return {
        "recall_at_k": recall_at_k(x, x, labels, labels, (1, 4), **kw).first_hit_ranks.tolist(),
        "recall_at_k coarse": recall_at_k(
            x, x, coarse, coarse, (1,), **kw
        ).first_hit_ranks.tolist(),
        "map_at_r": float(map_at_r(x, x, labels, labels, **kw)),
        "ground_truth_ranks min": ground_truth_ranks_from_embeddings(
            x, x, targets, chunk_size=chunk, precision=precision
        ).tolist(),
        "ground_truth_ranks none": ground_truth_ranks_from_embeddings(
            x, x, targets, reduce="none", chunk_size=chunk, precision=precision
        ).tolist(),
        "nearest_neighbors": [t.tolist() for t in nearest_neighbors(x, x, 6, **kw)],
    }


def _expected(x, labels, coarse, targets):
    s = brute.fixed_order_scores64(x, x, "cosine")
    n = len(x)
    excluded = brute.excluded_sets(n, n, query_in_reference=True)
    top_r = brute.top_r_metrics(s, labels, labels, excluded)
    slot = [[brute.gt_rank(s[i], j, set()) for j in targets[i]] for i in range(n)]
    orders = [brute.ranked(s[i], excluded[i])[:6] for i in range(n)]
    return {
        "recall_at_k": brute.first_hit_ranks(s, labels, labels, excluded).tolist(),
        "recall_at_k coarse": brute.first_hit_ranks(s, coarse, coarse, excluded).tolist(),
        "map_at_r": np.mean([r[2] for r in top_r if r[0] > 0]),
        "ground_truth_ranks min": [min(r) for r in slot],
        "ground_truth_ranks none": slot,
        "nearest_neighbors": [orders, [[s[i, j] for j in o] for i, o in enumerate(orders)]],
    }


def _case(seed: int = 0):
    x, labels = _near_duplicates(seed)
    coarse = labels % 2  # two classes: step 1 runs on the filter's window
    rng = np.random.default_rng(seed + 1)
    targets = np.stack([rng.choice(len(x), 3, replace=False) for _ in range(len(x))])
    return x, labels, coarse, targets


def _assert_expected(got, expected):
    for name, value in expected.items():
        if name == "map_at_r":
            assert got[name] == pytest.approx(value, abs=1e-15), name
        else:
            assert got[name] == value, name


def test_host_reads_per_call_do_not_grow_with_chunks(torch_path, monkeypatch):
    x, labels, coarse, targets = _case()
    expected = _expected(x, labels, coarse, targets)
    reads = {}
    for chunk in (128, 32):  # 2 and 8 chunks
        with monkeypatch.context() as m:
            counts = _count_host_reads(m)
            got = _calls(x, labels, coarse, targets, chunk)
        reads[chunk] = sum(counts.values())
        _assert_expected(got, expected)
    assert reads[32] == reads[128]


def test_host_reads_per_function(torch_path, monkeypatch):
    """Each public call alone: the same number of reads for 2 and for 8 chunks."""
    x, labels, coarse, targets = _case(1)
    seen: dict[int, dict[str, int]] = {}
    for chunk in (128, 32):
        with monkeypatch.context() as m:
            counts = _count_host_reads(m)
            for name, run in _runs(x, labels, coarse, targets, chunk).items():
                before = sum(counts.values())
                run()
                seen.setdefault(chunk, {})[name] = sum(counts.values()) - before
    assert seen[32] == seen[128]
    # A handful per call, all outside the chunk loop: preparing the inputs (row norms, scales,
    # exclusion and label pairs, most of them host tensors), the first chunk's exact window
    # sizes (it learns the capacities), and one transfer per field of the results.
    assert max(seen[32].values()) <= 24


def _runs(x, labels, coarse, targets, chunk):
    kw = dict(query_in_reference=True, chunk_size=chunk)
    return {
        "recall_at_k": lambda: recall_at_k(x, x, labels, labels, (1,), **kw),
        "recall_at_k coarse": lambda: recall_at_k(x, x, coarse, coarse, (1,), **kw),
        "map_at_r": lambda: float(map_at_r(x, x, labels, labels, **kw)),
        "ground_truth_ranks none": lambda: ground_truth_ranks_from_embeddings(
            x, x, targets, reduce="none", chunk_size=chunk
        ),
        "nearest_neighbors": lambda: nearest_neighbors(x, x, 6, **kw),
        "nearest_neighbors dot": lambda: nearest_neighbors(x, x, 6, metric="dot", **kw),
    }


def test_overflowing_capacities_are_computed_again_exactly(torch_path, monkeypatch):
    """Capacities of one slot after the learning chunk: every later chunk overflows its
    windows and top-k widths, and is computed again with exact sizes."""
    x, labels, coarse, targets = _case(2)
    expected = _expected(x, labels, coarse, targets)
    monkeypatch.setattr(device, "MIN_CAPACITY", 1)
    monkeypatch.setattr(device, "TOP_EXTRA", 0)
    monkeypatch.setattr(device.Capacities, "record", lambda self, site, found, rows: None)
    modes = collections.Counter()
    compact = device.compact

    def counting_compact(mask, caps, site):
        modes["exact sizes" if caps.learning else "capacity"] += 1
        return compact(mask, caps, site)

    monkeypatch.setattr(device, "compact", counting_compact)
    monkeypatch.setattr(protocol, "compact", counting_compact)
    for precision in ("float32", "bfloat16"):
        _assert_expected(_calls(x, labels, coarse, targets, 37, precision), expected)
    assert modes["exact sizes"] > 0 and modes["capacity"] > 0


def _count_work(monkeypatch) -> collections.Counter:
    """Pairs scored exactly in float64, and pairs re-scored in float32 by the cascade."""
    work: collections.Counter = collections.Counter()
    exact_scores, dots = device.TorchKernels.exact, device.TorchKernels.dots

    def counting_exact(self, space, chunk, block, rows, cols):
        work["float64"] += int((rows >= 0).sum())
        return exact_scores(self, space, chunk, block, rows, cols)

    def counting_dots(self, a, b, rows, cols):
        work["float32"] += int((rows >= 0).sum())
        return dots(self, a, b, rows, cols)

    monkeypatch.setattr(device.TorchKernels, "exact", counting_exact)
    monkeypatch.setattr(device.TorchKernels, "dots", counting_dots)
    return work


def test_low_precision_cascade_is_exact_and_keeps_float32s_exact_work(torch_path, monkeypatch):
    x, labels, coarse, targets = _case(3)
    expected = _expected(x, labels, coarse, targets)
    work, lists = {}, {}
    counts = _count_work(monkeypatch)
    for precision in ("float32", "bfloat16", "float16"):
        counts.clear()
        _assert_expected(_calls(x, labels, coarse, targets, 64, precision), expected)
        work[precision] = dict(counts)
        counts.clear()
        nearest_neighbors(x, x, 6, query_in_reference=True, chunk_size=64, precision=precision)
        lists[precision] = dict(counts)
    assert "float32" not in work["float32"]
    for low in ("bfloat16", "float16"):
        # Float64 scored no more pairs than with a float32 filter, and for the ranked lists
        # (where every float64 score is a window's) the low-precision window scored in float32
        # was wider than the float32 window scored in float64.
        assert 0 < work[low]["float64"] <= work["float32"]["float64"]
        assert 0 < lists[low]["float64"] <= lists["float32"]["float64"] < lists[low]["float32"]


def test_the_back_end_switch_is_public_and_checked(monkeypatch):
    x, _ = _near_duplicates(4, n=64)
    space = engine.prepare(x, x, Options(), "f")
    monkeypatch.delenv("RECALLKIT_BACKEND", raising=False)
    assert engine.backend_for(space).name == "numba"
    monkeypatch.setenv("RECALLKIT_BACKEND", "torch")
    assert engine.backend_for(space).name == "torch"
    monkeypatch.setenv("RECALLKIT_BACKEND", "cuda-please")
    with pytest.raises(ValueError, match="RECALLKIT_BACKEND environment variable must be one"):
        engine.backend_for(space)


def _wide_space(where: str, columns: int = 100_000) -> engine.Space:
    """A space of ``columns`` reference columns in blocks, d = 128 (sizing only: nothing runs)."""
    rows = engine.Rows(torch.ones(1, 128), torch.ones(1), torch.ones(1))
    return engine.Space(
        rows, "cosine", columns, 128, torch.device(where), lambda: iter(()), block_rows=columns
    )


@pytest.mark.parametrize(
    ("budget", "rows"),
    [
        # A chunk row holds 100,000 float32 scores, 8 bytes of masks per score and 16 d:
        # 1,202,048 bytes. 1 GiB // that = 893, rounded down to a multiple of 64.
        ("1GiB", 832),
        ("512MiB", 384),  # 446 -> 384
        ("2000000000", 1600),  # 1663 -> 1600
        ("8g", 4096),  # 7146, capped at 4096
        ("100", 1),  # not one row fits: one row a chunk
    ],
)
def test_gpu_chunks_are_sized_from_the_memory_setting(monkeypatch, budget, rows):
    monkeypatch.setenv("RECALLKIT_GPU_MEMORY", budget)
    assert engine.chunk_rows(_wide_space("cuda"), None, score_bytes=MASKS) == rows
    # The CPU tiles keep the 256 MiB budget and have no mask bytes: 268,435,456 // 402,048
    # = 667; the device back end on the CPU has its masks: // 1,202,048 = 223.
    assert engine.chunk_rows(_wide_space("cpu"), None) == 640
    assert engine.chunk_rows(_wide_space("cpu"), None, score_bytes=MASKS) == 192
    assert engine.chunk_rows(_wide_space("cuda"), 100, score_bytes=MASKS) == 100


def test_each_back_end_sizes_chunks_with_its_own_masks(monkeypatch):
    space = _wide_space("cpu")
    assert cpu.BACKEND.score_bytes == 0
    monkeypatch.setenv("RECALLKIT_BACKEND", "torch")
    assert engine.backend_for(space).score_bytes == MASKS == 8


def test_gpu_chunks_stay_below_two_to_the_31_scores(monkeypatch):
    monkeypatch.setenv("RECALLKIT_GPU_MEMORY", "1TiB")
    # 10,000,000 columns: the budget allows 9,162 rows, 2**31 scores 214 -> 192.
    space = _wide_space("cuda", 10_000_000)
    assert engine.chunk_rows(space, None, score_bytes=MASKS) == 192


@pytest.mark.parametrize("budget", ["lots", "-5", "0", "1.5 parsecs"])
def test_a_bad_gpu_memory_setting_names_the_variable(monkeypatch, budget):
    monkeypatch.setenv("RECALLKIT_GPU_MEMORY", budget)
    with pytest.raises(ValueError, match=r"RECALLKIT_GPU_MEMORY environment variable must be"):
        engine.chunk_rows(_wide_space("cuda"), None, score_bytes=MASKS)
