"""Benchmark: memory and time of the label-form metrics as the classes get coarse.

Positives are compared by label code per chunk, never materialised as pairs, so the memory of
recall@K and MAP@R stays within the chunk budget plus the inputs whatever the class sizes.
Prints, for each class count, the wall time, its ratio to the 1,000-class run, and the peak
resident memory beyond the inputs.

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_labels.py

Data: synthetic class clusters (``bench_recall.make_data``), float32, L2-normalised,
leave-one-out.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from bench_recall import measure

import recallkit


def make_data(rows: int, classes: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=rows)
    centers = rng.standard_normal((classes, dim)).astype(np.float32)
    x = centers[labels] + rng.standard_normal((rows, dim)).astype(np.float32) * np.float32(2.2)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--map-rows", type=int, default=8_000)
    parser.add_argument("--dim", type=int, default=128)
    args = parser.parse_args()
    w = np.eye(4, dtype=np.float32)
    recallkit.recall_at_k(w, w, [0, 0, 1, 1], [0, 0, 1, 1], (1,), query_in_reference=True)
    recallkit.map_at_r(w, w, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, d={args.dim}")
    print(f"{'metric':<14}{'rows':>8}{'classes':>9}{'time s':>9}{'x 1000 cl.':>11}{'peak GiB':>10}")
    base = None
    for classes in (1000, 10, 2):
        x, labels = make_data(args.rows, classes, args.dim)
        _, seconds, peak = measure(
            lambda x=x, labels=labels: recallkit.recall_at_k(
                x, x, labels, labels, (1, 10, 100), query_in_reference=True
            )
        )
        base = base or seconds
        print(
            f"{'recall_at_k':<14}{args.rows:>8,}{classes:>9,}{seconds:9.2f}"
            f"{seconds / base:11.2f}{peak:10.2f}",
            flush=True,
        )
    base = None
    for classes in (1000, 2):
        x, labels = make_data(args.map_rows, classes, args.dim)
        _, seconds, peak = measure(
            lambda x=x, labels=labels: recallkit.map_at_r(
                x, x, labels, labels, query_in_reference=True
            )
        )
        base = base or seconds
        print(
            f"{'map_at_r':<14}{args.map_rows:>8,}{classes:>9,}{seconds:9.2f}"
            f"{seconds / base:11.2f}{peak:10.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
