"""Benchmark: several metrics from one pass against one metric alone.

Times, on one synthetic split evaluated leave-one-out, ``map_at_r`` alone, ``recall_at_k``
alone, ``retrieval_metrics`` with recall@K, MAP@R and R-precision together, and
``evaluate_benchmark`` on a CUB-like benchmark built from the same rows (its protocol's recall@1,
2, 4, 8, MAP@R and R-precision), each the best of ``--repeat`` runs, and prints each time as a
ratio to ``map_at_r`` alone and to the float32 GEMM floor measured in the same run. One pass
costs about what its most expensive metric costs: the tile products and the exact re-scoring are
shared, and only the per-query statistics are added.

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_metrics.py
    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_metrics.py \
        --rows 60502 --classes 12100

Data: synthetic class clusters, L2-normalised float32 (default 8,000 rows, d = 128, 100
classes).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_recall import cpu_model, gemm_floor_numpy_split, gemm_floor_torch, make_data, measure

import recallkit
from recallkit import engine
from recallkit.datasets import evaluate_benchmark
from recallkit.datasets.base import BENCHMARK_INFO, Benchmark, Split


def best(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float]:
    """The value, the best wall time of ``repeat`` runs, and the largest peak memory (GiB)."""
    runs = [measure(fn) for _ in range(repeat)]
    return runs[0][0], min(r[1] for r in runs), max(r[2] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8_000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; torch {torch.__version__}, threads {torch.get_num_threads()}")
    x, labels = make_data(args.rows, args.classes, args.dim)
    xt = torch.from_numpy(x)
    w = np.eye(4, dtype=np.float32)
    recallkit.retrieval_metrics(w, w, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True)
    space = engine.prepare(xt, xt, recallkit.Options(), "bench")
    chunk = engine.chunk_rows(space, None)
    del space
    ks = (1, 2, 4, 8)
    names = [f"recall@{k}" for k in ks] + ["MAP@R", "R-precision"]
    test = Split("test", Path("/bench"), tuple(f"{i}.jpg" for i in range(args.rows)), labels)
    protocol = BENCHMARK_INFO["cub"].protocol
    bench = Benchmark(
        "cub", "synthetic CUB-like", protocol, {"test": test}, Path("/bench"), complete=False
    )
    kw = {"query_in_reference": True}
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("GEMM floor float32, torch.mm (chunked)", lambda: gemm_floor_torch(xt, chunk)),
        ("GEMM floor float32, numpy (row-split)", lambda: gemm_floor_numpy_split(x, chunk)),
        ("map_at_r", lambda: dict(recallkit.map_at_r(xt, xt, labels, labels, **kw))),
        (
            "recall_at_k ks=(1, 2, 4, 8)",
            lambda: dict(recallkit.recall_at_k(xt, xt, labels, labels, ks, **kw)),
        ),
        ("r_precision", lambda: dict(recallkit.r_precision(xt, xt, labels, labels, **kw))),
        (
            "retrieval_metrics recall@K+MAP@R+R-precision",
            lambda: dict(recallkit.retrieval_metrics(xt, xt, labels, labels, names, **kw)),
        ),
        ("evaluate_benchmark (CUB protocol)", lambda: dict(evaluate_benchmark(bench, xt))),
    ]
    print(
        f"\n== {args.rows:,} x {args.rows:,} leave-one-out, d={args.dim}, {args.classes:,} "
        f"classes, best of {args.repeat} =="
    )
    print(f"{'method':<48}{'time s':>9}{'x floor':>9}{'x MAP@R':>9}{'peak GiB':>10}  result")
    times: dict[str, float] = {}
    values: dict[str, Any] = {}
    for label, fn in cases:
        value, seconds, peak = best(fn, args.repeat)
        times[label], values[label] = seconds, value
        floor = min(v for k, v in times.items() if k.startswith("GEMM"))
        ratio = f"{seconds / floor:9.2f}" if not label.startswith("GEMM") else f"{'':>9}"
        to_map = f"{seconds / times['map_at_r']:9.2f}" if "map_at_r" in times else f"{'':>9}"
        shown = {k: round(v, 4) for k, v in value.items()} if isinstance(value, dict) else ""
        print(f"{label:<48}{seconds:9.2f}{ratio}{to_map}{peak:10.2f}  {shown}", flush=True)
    one = values["retrieval_metrics recall@K+MAP@R+R-precision"]
    alone = ("map_at_r", "recall_at_k ks=(1, 2, 4, 8)", "r_precision")
    separate = {k: v for label in alone for k, v in values[label].items()}
    benchmark = "evaluate_benchmark (CUB protocol)"
    print(
        f"one pass equals the separate calls: {one == separate}; evaluate_benchmark equals "
        f"them: {values[benchmark] == separate}; evaluate_benchmark / map_at_r = "
        f"{times[benchmark] / times['map_at_r']:.3f}; the three separate calls / map_at_r = "
        f"{sum(times[label] for label in alone) / times['map_at_r']:.3f}"
    )


if __name__ == "__main__":
    main()
