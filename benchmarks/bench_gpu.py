"""Benchmark on a GPU: recallkit's exact recall@K against the GEMM floors and a naive top-k.

Prints, per scale: the chunked GEMM floors (float32, TF32, bfloat16, each with one row
reduction), the naive ``mm + topk`` recall (inexact under ties), recallkit's recall@K in each
precision, MAP@R, ``nearest_neighbors(k=100)``, the peak GPU memory beyond the inputs and the
host synchronisations of each call (torch's CUDA sync debug mode); then checks that CUDA gives
the CPU's ranks on a duplicate-heavy set. Runs from a plain source checkout (torch, numpy,
numba, scipy; no uv needed):

    PYTHONPATH=src python benchmarks/bench_gpu.py                 # on a CUDA machine
    PYTHONPATH=src python benchmarks/bench_gpu.py --device cpu --scale tiny   # a smoke run

Measurements past ``--budget`` seconds in total are skipped and say so.
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import recallkit

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


def gemm_floor(x: torch.Tensor, rows: int, dtype: torch.dtype, tf32: bool) -> float:
    """The chunked similarity GEMM plus one row reduction (what any exact method must read)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        a = x.to(dtype)
        total = torch.zeros((), device=x.device)
        for start in range(0, x.shape[0], rows):
            s = a[start : start + rows] @ a.T
            total += s.float().amax(dim=1).sum()
        return float(total)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


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
            print(f"{label:<34}{'skipped (time budget)':>32}")
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
            lambda p=p: recallkit.map_at_r(x, x, lab, lab, query_in_reference=True, precision=p),
        )
    row(
        "r_precision float32",
        lambda: recallkit.r_precision(x, x, lab, lab, query_in_reference=True),
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
            print(f"{p}: skipped (time budget)")
            continue
        (gpu, gpu_map), _, _, _ = out
        ranks = int((gpu.first_hit_ranks != cpu.first_hit_ranks).sum())
        q, r = torch.from_numpy(x[:2000]).cuda(), torch.from_numpy(x).cuda()
        nn = recallkit.nearest_neighbors(q, r, 50, precision=p)
        same_nn = torch.equal(nn[0].cpu(), cpu_nn[0]) and torch.equal(nn[1].cpu(), cpu_nn[1])
        print(
            f"{p}: first-hit ranks differing: {ranks} of {rows}; MAP@R equal: "
            f"{gpu_map == cpu_map}; nearest_neighbors(k=50) equal: {same_nn}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=[*SCALES, "all"], default="all")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds for all timings")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, numpy {np.__version__}, device {device}", end="")
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
    if device.type == "cuda":
        check_cuda_equals_cpu(clock)


if __name__ == "__main__":
    main()
