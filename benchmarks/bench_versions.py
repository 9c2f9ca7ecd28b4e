"""Benchmark for comparing two versions of recallkit on the same machine, one after the other.

Times the GEMM floor (the fastest of torch.mm and numpy's BLAS on row slices), recall@K and
MAP@R twice each, and prints the values so that the versions can be checked to agree. Point
``PYTHONPATH`` at another checkout's ``src`` to time that version:

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_versions.py \
        --rows 60502 --classes 12100 --dim 128
    PYTHONPATH=/path/to/other/src uv run --frozen --no-sync --env-file tests/cpu.env \
        python benchmarks/bench_versions.py --rows 60502 --classes 12100 --dim 128
"""

from __future__ import annotations

import argparse
import inspect
import time

import numpy as np
import torch
from bench_recall import gemm_floor_numpy_split, gemm_floor_torch, make_data

import recallkit

try:  # the engine package; an older checkout has one engine module
    from recallkit import engine
except ImportError:
    from recallkit import _engine as engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_502)
    parser.add_argument("--classes", type=int, default=12_100)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"recallkit from {recallkit.__file__}")
    x, labels = make_data(args.rows, args.classes, args.dim)
    xt = torch.from_numpy(x)
    w = np.eye(4, dtype=np.float32)
    recallkit.recall_at_k(w, w, [0, 0, 1, 1], [0, 0, 1, 1], (1,), query_in_reference=True)
    recallkit.map_at_r(w, w, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True)
    if "options" in inspect.signature(engine.prepare).parameters:
        space = engine.prepare(xt, xt, recallkit.Options(), "bench")
    else:  # an older checkout: the options one by one
        space = engine.prepare(xt, xt, "cosine", None, "bench")
    chunk = engine.chunk_rows(space, None)
    del space
    for _ in range(args.repeat):
        t = time.perf_counter()
        gemm_floor_numpy_split(x, chunk)
        split = time.perf_counter() - t
        t = time.perf_counter()
        gemm_floor_torch(xt, chunk)
        floor = min(split, time.perf_counter() - t)
        t = time.perf_counter()
        r = recallkit.recall_at_k(
            xt, xt, labels, labels, (1, 10, 100, 1000), query_in_reference=True
        )
        seconds = time.perf_counter() - t
        t = time.perf_counter()
        m = recallkit.map_at_r(xt, xt, labels, labels, query_in_reference=True)
        map_seconds = time.perf_counter() - t
        print(
            f"floor {floor:.2f} s  recall@K {seconds:.2f} s ({seconds / floor:.2f}x)  "
            f"MAP@R {map_seconds:.2f} s ({map_seconds / seconds:.2f}x recall@K)  "
            f"recall@1 {r['recall@1']!r}  MAP@R {float(m)!r}",
            flush=True,
        )


if __name__ == "__main__":
    main()
