"""Benchmark: one evaluation per epoch at CUB and Cars scale, as a user meets it.

Prints the processor and its instruction sets first, then per scale (CUB-200-2011's 5,924 test
images in 100 classes, Cars196's 8,131 in 98) and width (d = 128 and 512) the wall time of each
method, called in turn in every round (alternating calls: a load that comes and goes falls on
every method alike), its minimum and median over the rounds, and its ratio to the float32 GEMM
floor and to PML's ``AccuracyCalculator`` within each round (min and median of those ratios):

* the GEMM floor: the n × n float32 similarity product alone, the faster of one ``torch.mm``
  into a reused buffer and numpy's BLAS on row slices (one thread each), in each round;
* ``recallkit.recall_at_k`` with ks 1, 2, 4, 8;
* ``recallkit.retrieval_metrics``: recall@1, 2, 4, 8, MAP@R and R-precision in one pass;
* PML's ``AccuracyCalculator`` with ``k="max_bin_count"`` (precision@1, MAP@R, R-precision) on
  its default faiss k-NN and on recallkit's ``ExactKNN``;
* faiss ``IndexFlatIP`` searched for 9 neighbours and recall@1, 2, 4, 8 from them.

Before the rounds, every method runs untimed until ``precision="auto"`` has chosen its kind of
tile for each call of the setting (a call of this size weighs the kinds pass by pass across the
calls of its shape, as an evaluation after every epoch repeats it: the first calls of a process,
about a dozen here); the count of those calls and ``cpu.precision_report`` are printed after
each table.

Every method evaluates the test split against itself, leave-one-out; the values are checked
equal (recall@K with faiss's, precision@1, MAP@R and R-precision with PML's on ``ExactKNN``
exactly, and with PML's default faiss k-NN to within float32 near-ties).

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_epoch.py
    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/avx2_only.py \\
        benchmarks/bench_epoch.py --rounds 7

Data: synthetic class clusters, L2-normalised float32, with the noise of each width set so that
recall@1 is a trained model's (about 0.65, as in ``bench_recall.py``).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import faiss
import numpy as np
import torch
from bench_recall import cpu_model, make_data, settle
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from threadpoolctl import threadpool_limits

import recallkit
from recallkit.engine import lowp
from recallkit.pml import ExactKNN

SCALES = {"cub": (5_924, 100), "cars": (8_131, 98)}
NOISE = {512: 3.5, 128: 2.2}  # recall@1 about 0.65 (bench_recall.py's CUB setting)
KS = (1, 2, 4, 8)
NAMES = [f"recall@{k}" for k in KS] + ["MAP@R", "R-precision"]
PML = ("precision_at_1", "mean_average_precision_at_r", "r_precision")


def gemm_floor(x: np.ndarray, out: np.ndarray, pool: ThreadPoolExecutor, workers: int) -> float:
    """The n × n product alone: the faster of ``torch.mm`` into ``out`` and numpy's BLAS on row
    slices, one single-threaded call per thread (as the engine's tiles run)."""
    xt = torch.from_numpy(x)
    ot = torch.from_numpy(out)
    start = time.perf_counter()
    torch.mm(xt, xt.T, out=ot)
    one = time.perf_counter() - start
    cuts = np.linspace(0, len(x), workers + 1).astype(int)
    start = time.perf_counter()
    with threadpool_limits(1, user_api="blas"):
        jobs = [
            pool.submit(np.matmul, x[a:b], x.T, out=out[a:b]) for a, b in itertools.pairwise(cuts)
        ]
        for job in jobs:
            job.result()
    return min(one, time.perf_counter() - start)


def faiss_recall(x: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """recall@1, 2, 4, 8 from faiss ``IndexFlatIP`` (each query's own row dropped by index)."""
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    _, idx = index.search(x, max(KS) + 1)
    own = idx == np.arange(len(x))[:, None]
    keep = ~own
    keep[~own.any(axis=1), -1] = False
    idx = idx[keep].reshape(len(x), max(KS))
    hit = labels[idx] == labels[:, None]
    counts = np.bincount(labels)
    ok = counts[labels] > 1
    first = np.where(hit.any(axis=1), hit.argmax(axis=1), np.iinfo(np.int64).max)
    return {f"recall@{k}": float(np.mean(first[ok] < k)) for k in KS}


def run(name: str, rows: int, classes: int, dim: int, rounds: int, pool, workers: int) -> None:
    x, labels = make_data(rows, classes, dim, noise=NOISE[dim])
    xt, lt = torch.from_numpy(x), torch.from_numpy(labels)
    out = np.empty((rows, rows), dtype=np.float32)
    kw: dict[str, Any] = {"query_in_reference": True}
    pml_faiss = AccuracyCalculator(include=PML, k="max_bin_count", device=torch.device("cpu"))
    pml_exact = AccuracyCalculator(
        include=PML,
        k="max_bin_count",
        device=torch.device("cpu"),
        knn_func=ExactKNN(metric="cosine"),  # recallkit ranks by cosine
    )
    cases: dict[str, Callable[[], Any]] = {
        "GEMM floor float32": lambda: gemm_floor(x, out, pool, workers),
        "recallkit.recall_at_k ks=1,2,4,8": lambda: dict(
            recallkit.recall_at_k(xt, xt, lt, lt, KS, **kw)
        ),
        "recallkit.retrieval_metrics (one pass)": lambda: dict(
            recallkit.retrieval_metrics(xt, xt, lt, lt, NAMES, **kw)
        ),
        "PML AccuracyCalculator (faiss)": lambda: pml_faiss.get_accuracy(xt, lt),
        "PML AccuracyCalculator (ExactKNN)": lambda: pml_exact.get_accuracy(xt, lt),
        "faiss IndexFlatIP k=9, recall@K": lambda: faiss_recall(x, labels),
    }
    values = {label: fn() for label, fn in cases.items()}  # a first call each, not timed
    # ``auto`` weighs its kinds of tile across the calls of one shape (a call of this size has
    # too few tiles to weigh within itself): the calls before it has chosen are an evaluation's
    # first epochs, run here untimed.
    warm = 1 + settle([fn for lb, fn in cases.items() if not lb.startswith("GEMM")], dim, rows)
    times: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(rounds):
        for label, fn in cases.items():
            if label.startswith("GEMM"):
                times[label].append(fn())
                continue
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    floor = times["GEMM floor float32"]
    pml = times["PML AccuracyCalculator (faiss)"]
    print(
        f"\n== {name}: {rows:,} x {rows:,} leave-one-out, d={dim}, {classes} classes, "
        f"{rounds} rounds of alternating calls =="
    )
    head = f"{'method':<42}{'min s':>8}{'median s':>10}{'x floor':>16}{'x PML':>16}"
    print(head + "   (ratios within a round: min / median)")
    for label, seconds in times.items():
        to_floor = [t / f for t, f in zip(seconds, floor, strict=True)]
        to_pml = [t / p for t, p in zip(seconds, pml, strict=True)]
        print(
            f"{label:<42}{min(seconds):8.3f}{statistics.median(seconds):10.3f}"
            f"{min(to_floor):8.2f}{statistics.median(to_floor):8.2f}"
            f"{min(to_pml):8.2f}{statistics.median(to_pml):8.2f}"
        )
    print(f"untimed calls before the rounds: {warm}; " + lowp.precision_report(dim))
    rk = values["recallkit.retrieval_metrics (one pass)"]
    exact, fast = (
        values["PML AccuracyCalculator (ExactKNN)"],
        values["PML AccuracyCalculator (faiss)"],
    )
    recall = values["recallkit.recall_at_k ks=1,2,4,8"]
    pairs = (("recall@1", "precision_at_1"), ("MAP@R", PML[1]), ("R-precision", PML[2]))
    same_exact = all(rk[a] == exact[b] or abs(rk[a] - exact[b]) < 1e-12 for a, b in pairs)
    near_faiss = max(abs(rk[a] - fast[b]) for a, b in pairs)
    same_recall = all(recall[k] == rk[k] for k in recall)
    same_faiss = all(recall[k] == values["faiss IndexFlatIP k=9, recall@K"][k] for k in recall)
    print(
        f"values: {', '.join(f'{k} {v:.4f}' for k, v in rk.items())}\n"
        f"recall_at_k = retrieval_metrics: {same_recall}; = faiss: {same_faiss}; "
        f"PML (ExactKNN) = recallkit (to 1e-12): {same_exact}; "
        f"largest |PML (faiss) - recallkit| = {near_faiss:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=[*SCALES, "all"], default="all")
    parser.add_argument("--dim", type=int, choices=(128, 512), action="append")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    workers = torch.get_num_threads()
    faiss.omp_set_num_threads(workers)
    print(f"CPU: {cpu_model()}")
    print(f"instruction sets: {' '.join(sorted(f for f in lowp.cpu_flags() if 'avx' in f))}")
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, faiss {faiss.__version__}, "
        f"threads {workers}; precision='auto' weighs {', '.join(lowp.worth_timing())} here"
    )
    scales = list(SCALES) if args.scale == "all" else [args.scale]
    with ThreadPoolExecutor(workers) as pool:
        for name in scales:
            for dim in args.dim or (512, 128):
                run(name, *SCALES[name], dim, args.rounds, pool, workers)


if __name__ == "__main__":
    main()
