"""Benchmark on a GPU: recallkit's exact recall@K against the GEMM floors and a naive top-k.

Prints, per scale: the chunked GEMM floors (float32, TF32, bfloat16, each with one row
reduction), the naive ``mm + topk`` recall (inexact under ties), recallkit's recall@K in each
precision, MAP@R, ``nearest_neighbors(k=100)``, the peak GPU memory beyond the inputs and the
host synchronisations of each call (torch's CUDA sync debug mode); then the torch operations and
Triton kernel launches of one call per back end (which do not grow with the dimension on the
fused path), the same ranks inside ``torch.autocast`` and under deterministic algorithms, and
that CUDA gives the CPU's ranks on a duplicate-heavy set. Runs from a plain source checkout
(torch, numpy, numba, threadpoolctl, and triton for the fused kernels; no uv needed):

    PYTHONPATH=src python benchmarks/bench_gpu.py                 # on a CUDA machine
    PYTHONPATH=src python benchmarks/bench_gpu.py --device cpu --scale tiny   # a smoke run

On the CPU the device path runs with ``--backend torch`` (and ``triton`` under
``TRITON_INTERPRET=1``). Measurements past ``--budget`` seconds in total are left out and say so.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Deterministic cuBLAS GEMMs need a fixed workspace, set before CUDA starts (PyTorch's notes on
# reproducibility); the deterministic check below runs under it.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import recallkit
from recallkit.engine import triton_backend, triton_kernels

SCALES = {
    # name: (rows, classes, dim, ks, duplicates)
    "sop": (60_502, 60_502 // 5, 512, (1, 10, 100, 1000), 0.0),
    "inat": (136_093, 2_452, 512, (1, 4, 16, 32), 0.0),
    "dups": (40_000, 4_000, 256, (1, 10, 100), 0.2),
    "tiny": (3_000, 300, 64, (1, 10), 0.2),
}


def make_data(rows: int, classes: int, dim: int, duplicates: float, seed: int = 0):
    """Synthetic class clusters, L2-normalised float32; a share of rows are exact or near
    (1e-6) duplicates of others."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=rows)
    centres = rng.standard_normal((classes, dim)).astype(np.float32)
    x = centres[labels] + rng.standard_normal((rows, dim)).astype(np.float32) * np.float32(2.2)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    n = int(rows * duplicates / 2)
    if n:
        source = rng.integers(0, rows - 2 * n, size=n)
        x[rows - 2 * n : rows - n] = x[source]
        noise = rng.standard_normal((n, dim)).astype(np.float32) * np.float32(1e-6)
        x[rows - n :] = x[source] + noise
        labels[rows - 2 * n : rows - n] = labels[source]
        labels[rows - n :] = labels[source]
    return np.ascontiguousarray(x), labels


class Clock:
    def __init__(self, device: torch.device, budget: float) -> None:
        self.device = device
        self.budget = budget
        self.start = time.perf_counter()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time(self, fn: Callable[[], Any]) -> tuple[Any, float, float, int | None] | None:
        """``(value, seconds, peak GiB beyond what was allocated before, host synchronisations)``,
        or None past the budget. Synchronisations are counted on CUDA only (``None`` else)."""
        if time.perf_counter() - self.start > self.budget:
            return None
        base = 0
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            base = torch.cuda.memory_allocated(self.device)
        self.sync()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if self.device.type == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            t0 = time.perf_counter()
            try:
                value = fn()
            finally:
                if self.device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
        self.sync()
        seconds = time.perf_counter() - t0
        peak = 0.0
        syncs = None
        if self.device.type == "cuda":
            peak = (torch.cuda.max_memory_allocated(self.device) - base) / 2**30
            syncs = sum("synchronizing" in str(w.message) for w in caught)
        return value, seconds, peak, syncs


@contextlib.contextmanager
def tf32_matmul(on: bool):
    """TF32 float32 products on or off, through the precision API this torch has
    (``fp32_precision`` where it exists: reading ``allow_tf32`` after it was set raises)."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        old = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if on else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = old
    else:  # pragma: no cover - torch without the new API
        old = matmul.allow_tf32
        matmul.allow_tf32 = on
        try:
            yield
        finally:
            matmul.allow_tf32 = old


def gemm_floor(x: torch.Tensor, rows: int, dtype: torch.dtype, tf32: bool) -> float:
    """The chunked similarity GEMM plus one row reduction (what any exact method must read)."""
    with tf32_matmul(tf32):
        a = x.to(dtype)
        total = torch.zeros((), device=x.device)
        for start in range(0, x.shape[0], rows):
            s = a[start : start + rows] @ a.T
            total += s.float().amax(dim=1).sum()
        return float(total)


def naive_recall(x: torch.Tensor, labels: torch.Tensor, ks: tuple[int, ...], rows: int) -> dict:
    """``mm`` + ``topk(max K)`` per chunk with the own row masked: not exact under ties."""
    kmax = max(ks)
    hits = torch.zeros(len(ks), device=x.device)
    counted = torch.zeros((), device=x.device)
    counts = torch.bincount(labels)
    lone = counts[labels] < 2
    for start in range(0, x.shape[0], rows):
        stop = min(start + rows, x.shape[0])
        s = x[start:stop] @ x.T
        s[torch.arange(stop - start), torch.arange(start, stop)] = -torch.inf
        idx = torch.topk(s, kmax, dim=1).indices
        match = labels[idx] == labels[start:stop, None]
        first = torch.where(match.any(1), match.float().argmax(1), kmax)
        keep = ~lone[start:stop]
        for i, k in enumerate(ks):
            hits[i] += ((first < k) & keep).sum()
        counted += keep.sum()
    return {f"recall@{k}": float(hits[i] / counted) for i, k in enumerate(ks)}


def run_scale(name: str, device: torch.device, clock: Clock) -> None:
    rows, classes, dim, ks, dups = SCALES[name]
    x_np, labels = make_data(rows, classes, dim, dups)
    x = torch.from_numpy(x_np).to(device)
    lab = torch.from_numpy(labels).to(device)
    chunk = 8192 if device.type == "cuda" else 1024
    print(
        f"\n== {name}: {rows:,}² leave-one-out, d={dim}, {classes:,} classes, ks={ks}, "
        f"{dups:.0%} (near-)duplicates, {device} =="
    )
    base = "bf16" if device.type == "cuda" else "fp32"  # the floor ratios are taken against
    print(
        f"{'method':<34}{'time s':>9}{'x ' + base + ' floor':>13}{'peak GiB':>10}"
        f"{'syncs':>7}  result"
    )
    floor: dict[str, float] = {}

    def row(label: str, fn: Callable[[], Any], key: str | None = None) -> Any:
        out = clock.time(fn)
        if out is None:
            print(f"{label:<34}{'left out (time budget)':>32}")
            return None
        value, seconds, peak, syncs = out
        if key:
            floor[key] = seconds
        ratio = seconds / floor[base] if base in floor else float("nan")
        shown = value
        if isinstance(value, dict):
            shown = {k: round(v, 4) for k, v in value.items()}
        elif isinstance(value, float):
            shown = round(value, 6)
        count = "-" if syncs is None else str(syncs)
        print(f"{label:<34}{seconds:9.3f}{ratio:13.2f}{peak:10.2f}{count:>7}  {shown}", flush=True)
        return value

    row("GEMM floor float32", lambda: gemm_floor(x, chunk, torch.float32, False), "fp32")
    if device.type == "cuda":
        row("GEMM floor TF32", lambda: gemm_floor(x, chunk, torch.float32, True), "tf32")
        row("GEMM floor bfloat16", lambda: gemm_floor(x, chunk, torch.bfloat16, False), "bf16")
    row(f"naive mm+topk({max(ks)})", lambda: naive_recall(x, lab, ks, chunk))
    precisions = ("float32", "bfloat16", "float16") if device.type == "cuda" else ("float32",)
    for p in precisions:
        row(
            f"recall_at_k {p}",
            lambda p=p: dict(
                recallkit.recall_at_k(x, x, lab, lab, ks, query_in_reference=True, precision=p)
            ),
        )
    for p in precisions:
        row(
            f"map_at_r {p}",
            lambda p=p: dict(
                recallkit.map_at_r(x, x, lab, lab, query_in_reference=True, precision=p)
            ),
        )
    row(
        "r_precision float32",
        lambda: dict(recallkit.r_precision(x, x, lab, lab, query_in_reference=True)),
    )
    for p in precisions[:2]:
        row(
            f"nearest_neighbors k=100 {p}",
            lambda p=p: tuple(
                recallkit.nearest_neighbors(x, x, 100, query_in_reference=True, precision=p)[
                    0
                ].shape
            ),
        )


def check_cuda_equals_cpu(clock: Clock) -> None:
    rows, classes, dim, ks, dups = 20_000, 2_000, 256, (1, 10), 0.2
    x, labels = make_data(rows, classes, dim, dups, seed=1)
    cpu = recallkit.recall_at_k(x, x, labels, labels, ks, query_in_reference=True)
    cpu_map = recallkit.map_at_r(x, x, labels, labels, query_in_reference=True)
    cpu_nn = recallkit.nearest_neighbors(x[:2000], x, 50)
    print(f"\n== CUDA == CPU on {rows:,}² d={dim} with 20% (near-)duplicates ==")
    for p in ("float32", "bfloat16", "float16"):
        out = clock.time(
            lambda p=p: (
                recallkit.recall_at_k(
                    x, x, labels, labels, ks, query_in_reference=True, device="cuda", precision=p
                ),
                recallkit.map_at_r(
                    x, x, labels, labels, query_in_reference=True, device="cuda", precision=p
                ),
            )
        )
        if out is None:
            print(f"{p}: left out (time budget)")
            continue
        (gpu, gpu_map), _, _, _ = out
        ranks = int((gpu.first_hit_ranks != cpu.first_hit_ranks).sum())
        q, r = torch.from_numpy(x[:2000]).cuda(), torch.from_numpy(x).cuda()
        nn = recallkit.nearest_neighbors(q, r, 50, precision=p)
        same_nn = np.array_equal(nn[0].cpu().numpy(), cpu_nn[0]) and np.array_equal(
            nn[1].cpu().numpy(), cpu_nn[1]
        )
        print(
            f"{p}: first-hit ranks differing: {ranks} of {rows}; MAP@R equal: "
            f"{dict(gpu_map) == dict(cpu_map)}; nearest_neighbors(k=50) equal: {same_nn}",
            flush=True,
        )


class Counting(TorchDispatchMode):
    """Counts the torch operations dispatched inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def backend(name: str | None):
    """``RECALLKIT_BACKEND`` set to ``name`` inside the block (``None``: the default choice)."""
    old = os.environ.get("RECALLKIT_BACKEND")
    if name is None:
        os.environ.pop("RECALLKIT_BACKEND", None)
    else:
        os.environ["RECALLKIT_BACKEND"] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RECALLKIT_BACKEND", None)
        else:
            os.environ["RECALLKIT_BACKEND"] = old


def device_backends(device: torch.device) -> list[str]:
    """The device-path back ends that run here: torch always, Triton on CUDA where it is
    installed or on the CPU under ``TRITON_INTERPRET=1``."""
    names = ["torch"]
    if triton_backend.usable(device):
        names.append("triton")
    return names


def count_operations(device: torch.device) -> None:
    """Torch operations and Triton launches of one call per back end, at two dimensions, on
    two chunks of queries: on the fused path they do not depend on the dimension."""
    # On the CPU the Triton kernels are interpreted, one Python step per program and dimension:
    # a small call at smaller dimensions.
    rows, chunk = (8192, 4096) if device.type == "cuda" else (96, 48)
    dims, k = ((64, 1024), 100) if device.type == "cuda" else ((32, 128), 10)
    print(f"\n== operations per call: {rows:,} queries in 2 chunks of {chunk:,}, {device} ==")
    print(f"{'back end':<10}{'d':>6}  {'call':<28}{'torch ops':>11}  Triton launches")
    launches: collections.Counter = collections.Counter()
    kernel = triton_kernels._kernel

    def counted(name):
        launches[name] += 1
        return kernel(name)

    triton_kernels._kernel = counted
    try:
        for name in device_backends(device):
            for d in dims:
                x_np, labels = make_data(rows, rows // 4, d, 0.1, seed=2)
                x, lab = torch.from_numpy(x_np).to(device), torch.from_numpy(labels).to(device)
                calls = {
                    "recall_at_k ks=(1, 10)": partial(recallkit.recall_at_k, ks=(1, 10)),
                    "map_at_r": recallkit.map_at_r,
                    f"nearest_neighbors k={k}": None,
                }
                for call, fn in calls.items():
                    launches.clear()
                    with backend(name), Counting() as mode:
                        if fn is None:
                            recallkit.nearest_neighbors(
                                x, x, k, query_in_reference=True, chunk_size=chunk
                            )
                        else:
                            fn(x, x, lab, lab, query_in_reference=True, chunk_size=chunk)
                    shown = ", ".join(f"{k} {v}" for k, v in sorted(launches.items())) or "-"
                    print(f"{name:<10}{d:>6}  {call:<28}{mode.ops:>11}  {shown}", flush=True)
    finally:
        triton_kernels._kernel = kernel


def check_settings(device: torch.device) -> None:
    """The ranks inside ``torch.autocast`` and under deterministic algorithms equal the plain
    call's."""
    x_np, labels = make_data(4000, 400, 256, 0.2, seed=3)
    x, lab = torch.from_numpy(x_np).to(device), torch.from_numpy(labels).to(device)

    def ranks() -> np.ndarray:
        return recallkit.recall_at_k(x, x, lab, lab, (1,), query_in_reference=True).first_hit_ranks

    plain = ranks()
    print(f"\n== settings a training loop leaves behind, 4,000² d=256, {device} ==")
    for dtype in (torch.bfloat16, torch.float16):
        with torch.autocast(device.type, dtype=dtype):
            inside = ranks()
        print(f"inside torch.autocast({dtype}): ranks differing {int((inside != plain).sum())}")
    with tf32_matmul(True):
        tf32 = ranks()
    print(f"with TF32 float32 products: ranks differing {int((tf32 != plain).sum())}")
    torch.use_deterministic_algorithms(True)
    try:
        deterministic = ranks()
    finally:
        torch.use_deterministic_algorithms(False)
    print(f"under deterministic algorithms: ranks differing {int((deterministic != plain).sum())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=[*SCALES, "all"], default="all")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds for all timings")
    parser.add_argument(
        "--counts",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="count the torch operations and Triton launches of one call per back end",
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "numba", "torch", "triton"),
        default="auto",
        help="the back end of the timed calls (RECALLKIT_BACKEND; auto: Triton on CUDA where it "
        "runs, numba on the CPU)",
    )
    args = parser.parse_args()
    if args.backend != "auto":
        os.environ["RECALLKIT_BACKEND"] = args.backend
    device = torch.device(args.device)
    chosen = os.environ.get("RECALLKIT_BACKEND", "auto")
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, device {device}, back end {chosen}, "
        f"Triton runs here: {triton_backend.usable(device)}",
        end="",
    )
    if device.type == "cuda":
        print(f" ({torch.cuda.get_device_name(device)})")
    else:
        print()
    w = np.eye(4, dtype=np.float32)
    for dev in {"cpu", device.type}:
        t = torch.from_numpy(w).to(dev)
        recallkit.recall_at_k(t, t, [0, 0, 1, 1], [0, 0, 1, 1], (1,), query_in_reference=True)
        recallkit.map_at_r(t, t, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True)
    clock = Clock(device, args.budget)
    scales = ["sop", "inat", "dups"] if args.scale == "all" else [args.scale]
    for name in scales:
        run_scale(name, device, clock)
    if args.counts:
        count_operations(device)
    check_settings(device)
    if device.type == "cuda":
        check_cuda_equals_cpu(clock)


if __name__ == "__main__":
    main()
