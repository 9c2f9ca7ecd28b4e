"""Benchmark: recallkit's recall@K and MAP@R against the GEMM floor and the peers, in one run.

Prints wall time, the ratio to the GEMM floor (the same chunked similarity multiplication alone,
with torch and with numpy's BLAS; the faster is the floor), the peak resident memory beyond the
inputs, and whether the methods agree where their tie rules allow.

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_recall.py
    uv run --frozen --no-sync --env-file tests/cpu.env \
        python benchmarks/bench_recall.py --scale small

Data: synthetic class clusters (about 5 items per class at SOP scale, 100 classes at CUB scale),
L2-normalised float32, evaluated leave-one-out (the test split against itself).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import math
import time
from collections.abc import Callable
from typing import Any

import faiss
import numpy as np
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

import recallkit
from recallkit import _engine
from recallkit.pml import ExactKNN

SCALES = {
    # name: (rows, classes, dims)
    "sop": (60_502, 60_502 // 5, (512, 128)),
    "cub": (5_924, 100, (512, 128)),
    "small": (12_000, 2_400, (128,)),
}
KS = (1, 10, 100, 1000)


def _read_kib(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field):
                return int(line.split()[1])
    return 0


def _reset_peak() -> int:
    """Reset the resident-set high-water mark (Linux clear_refs) and return current RSS (KiB)."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass
    return _read_kib("VmRSS:")


def measure(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Run ``fn``; return its value, wall seconds and peak RSS growth in GiB."""
    base = _reset_peak()
    start = time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - start
    peak = _read_kib("VmHWM:")
    return value, seconds, max(peak - base, 0) / 2**20


def make_data(rows: int, classes: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.sort(rng.integers(0, classes, size=rows))
    centers = rng.standard_normal((classes, dim)).astype(np.float32)
    noise = rng.standard_normal((rows, dim)).astype(np.float32)
    x = centers[labels] + noise * np.float32(2.2)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    perm = rng.permutation(rows)
    return np.ascontiguousarray(x[perm]), labels[perm]


def gemm_floor_torch(x: torch.Tensor, rows: int) -> float:
    """The similarity GEMM alone, chunked, into a reused output buffer (torch.mm)."""
    out = torch.empty(rows, x.shape[0])
    checksum = 0.0
    for start in range(0, x.shape[0], rows):
        block = x[start : start + rows]
        torch.mm(block, x.T, out=out[: block.shape[0]])
        checksum += float(out[0, 0])
    return checksum


def gemm_floor_numpy(x: np.ndarray, rows: int) -> float:
    """The similarity GEMM alone, chunked, into a reused output buffer (numpy's BLAS)."""
    out = np.empty((rows, x.shape[0]), dtype=x.dtype)
    checksum = 0.0
    for start in range(0, x.shape[0], rows):
        block = x[start : start + rows]
        np.matmul(block, x.T, out=out[: block.shape[0]])
        checksum += float(out[0, 0])
    return checksum


def gemm_floor_numpy_split(x: np.ndarray, rows: int) -> float:
    """The GEMM alone as recallkit runs it on the CPU: single-threaded BLAS calls on row slices
    of each chunk, one per thread (faster here than one multi-threaded call)."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    workers = torch.get_num_threads()
    out = np.empty((rows, x.shape[0]), dtype=x.dtype)
    checksum = 0.0
    with ThreadPoolExecutor(workers) as pool, threadpool_limits(1, user_api="blas"):
        for start in range(0, x.shape[0], rows):
            block = x[start : start + rows]
            cuts = np.linspace(0, block.shape[0], workers + 1).astype(int)
            jobs = [
                pool.submit(np.matmul, block[a:b], x.T, out=out[a:b])
                for a, b in itertools.pairwise(cuts)
            ]
            for job in jobs:
                job.result()
            checksum += float(out[0, 0])
    return checksum


def faiss_recall(x: np.ndarray, labels: np.ndarray, ks: tuple[int, ...]) -> dict[str, float]:
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    _, idx = index.search(x, max(ks) + 1)
    # Drop each query's own row by index (faiss puts it anywhere among equal scores).
    own = idx == np.arange(len(x))[:, None]
    keep = ~own
    keep[~own.any(axis=1), -1] = False
    idx = idx[keep].reshape(len(x), max(ks))
    hit = labels[idx] == labels[:, None]
    counts = np.bincount(labels, minlength=labels.max() + 1)
    ok = counts[labels] > 1
    first = np.where(hit.any(axis=1), hit.argmax(axis=1), np.iinfo(np.int64).max)
    return {f"recall@{k}": float(np.mean(first[ok] < k)) for k in ks}


def naive_recall(x: np.ndarray, labels: np.ndarray, ks: tuple[int, ...]) -> dict[str, float]:
    """A naive numpy recall@K (the full n×n matrix, argpartition), self-matches removed by id."""
    ids = np.arange(len(x))
    keep = np.array([lbl in set(labels[ids != i]) for i, lbl in enumerate(labels)])
    q, ql, qid = x[keep], labels[keep], ids[keep]
    sims = q @ x.T
    sims = np.where(qid[:, None] == ids[None, :], -np.inf, sims)
    top_k_max = min(max(ks), len(x))
    top = np.argpartition(-sims, top_k_max - 1, axis=1)[:, :top_k_max]
    order = np.argsort(-sims[np.arange(len(q))[:, None], top], axis=1)
    sorted_top = np.take_along_axis(top, order, axis=1)
    return {
        f"recall@{k}": float(np.any(labels[sorted_top[:, :k]] == ql[:, None], axis=1).mean())
        for k in ks
    }


def run_scale(name: str, with_naive: bool) -> None:
    rows, classes, dims = SCALES[name]
    for dim in dims:
        run_dim(name, rows, classes, dim, with_naive)
        gc.collect()


def run_dim(name: str, rows: int, classes: int, dim: int, with_naive: bool) -> None:
    x, labels = make_data(rows, classes, dim)
    xt = torch.from_numpy(x)
    space = _engine.prepare(xt, xt, "cosine", None, "bench")
    chunk = _engine.chunk_rows(space, None)
    del space
    print(
        f"\n== {name}: {rows:,} x {rows:,} leave-one-out, d={dim}, {classes:,} classes, "
        f"ks={KS}, chunk={chunk} rows, {torch.get_num_threads()} threads =="
    )
    print(f"{'method':<44}{'time s':>9}{'x floor':>9}{'peak GiB':>10}  result")
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}

    def row(label: str, fn: Callable[[], Any], floor: float | None = None) -> Any:
        value, seconds, peak = measure(fn)
        timings[label] = seconds
        ratio = f"{seconds / floor:9.2f}" if floor else f"{'':>9}"
        shown = value if not isinstance(value, float) or math.isnan(value) else round(value, 4)
        if isinstance(value, dict):
            shown = {k: round(v, 4) for k, v in value.items()}
        print(f"{label:<44}{seconds:9.2f}{ratio}{peak:10.2f}  {shown}", flush=True)
        results[label] = value
        return value

    row("GEMM floor, torch.mm (chunked)", lambda: gemm_floor_torch(xt, chunk))
    row("GEMM floor, numpy BLAS (chunked)", lambda: gemm_floor_numpy(x, chunk))
    row("GEMM floor, numpy BLAS (row-split threads)", lambda: gemm_floor_numpy_split(x, chunk))
    floor = min(timings.values())
    rk = row(
        "recallkit.recall_at_k",
        lambda: dict(recallkit.recall_at_k(xt, xt, labels, labels, KS, query_in_reference=True)),
        floor,
    )
    rk_map = row(
        "recallkit.map_at_r",
        lambda: recallkit.map_at_r(xt, xt, labels, labels, query_in_reference=True),
        floor,
    )
    row(
        "recallkit.r_precision",
        lambda: recallkit.r_precision(xt, xt, labels, labels, query_in_reference=True),
        floor,
    )
    fa = row(f"faiss IndexFlatIP k={max(KS) + 1}", lambda: faiss_recall(x, labels, KS), floor)
    calc = AccuracyCalculator(include=("precision_at_1",), k=1, device=torch.device("cpu"))
    p1 = row(
        "PML AccuracyCalculator precision_at_1",
        lambda: calc.get_accuracy(xt, torch.from_numpy(labels))["precision_at_1"],
        floor,
    )
    calc = AccuracyCalculator(
        include=("mean_average_precision_at_r",), k="max_bin_count", device=torch.device("cpu")
    )
    pml_map = row(
        "PML AccuracyCalculator MAP@R (max_bin_count)",
        lambda: calc.get_accuracy(xt, torch.from_numpy(labels))["mean_average_precision_at_r"],
        floor,
    )
    if with_naive:
        sd = row("naive numpy (full matrix)", lambda: naive_recall(x, labels, KS), floor)
        print(f"agree naive numpy:  {all(abs(sd[k] - rk[k]) < 1e-12 for k in rk)}")
    exact_calc = AccuracyCalculator(
        include=("mean_average_precision_at_r",),
        k="max_bin_count",
        device=torch.device("cpu"),
        knn_func=ExactKNN(metric="cosine"),  # recallkit.map_at_r ranks by cosine
    )
    pml_exact = exact_calc.get_accuracy(xt, torch.from_numpy(labels))
    print(
        f"agree faiss: {all(abs(fa[k] - rk[k]) < 1e-12 for k in rk)}   "
        f"agree PML p@1: {abs(p1 - rk['recall@1']) < 1e-12}   "
        f"PML MAP@R - recallkit MAP@R = {pml_map - rk_map:.2e} (faiss float32 near-ties); "
        "PML MAP@R with recallkit's ExactKNN - recallkit MAP@R = "
        f"{pml_exact['mean_average_precision_at_r'] - rk_map:.2e} (order of the float64 mean)"
    )
    rk_t = timings["recallkit.recall_at_k"]
    print(
        f"recall@K / floor = {rk_t / floor:.3f}; recall@K / faiss = "
        f"{rk_t / timings[f'faiss IndexFlatIP k={max(KS) + 1}']:.3f}; MAP@R / recall@K = "
        f"{timings['recallkit.map_at_r'] / rk_t:.3f}; R-precision / recall@K = "
        f"{timings['recallkit.r_precision'] / rk_t:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=[*SCALES, "all"], default="all")
    args = parser.parse_args()
    faiss.omp_set_num_threads(torch.get_num_threads())
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, faiss {faiss.__version__}, "
        f"threads {torch.get_num_threads()}"
    )
    # Warm the numba kernels so compilation is not timed.
    w = np.eye(4, dtype=np.float32)
    recallkit.recall_at_k(w, w, [0, 0, 1, 1], [0, 0, 1, 1], (1,), query_in_reference=True)
    recallkit.map_at_r(w, w, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True)
    scales = ["cub", "sop"] if args.scale == "all" else [args.scale]
    for name in scales:
        run_scale(name, with_naive=name != "sop")


if __name__ == "__main__":
    main()
