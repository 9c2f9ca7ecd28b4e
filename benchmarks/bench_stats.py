"""Benchmark: time and memory of recallkit.stats at the size of a large test split.

Times each function at ``--n`` per-query values (60,502 by default: the queries of Stanford
Online Products' test split) and ``--resamples`` resamples (10,000), ``--repeats`` times (the
minimum and median CPU time: other work on the machine slows a call, never speeds it), then
calls it again under tracemalloc for the peak memory numpy allocated (the batch, and one float
per resample). Prints the CPU model (from /proc/cpuinfo), one line per function, and the
process's peak resident memory. ``--scipy`` also times scipy.stats.bootstrap and
permutation_test on the same input and checks that they agree.

``--report`` times ``recallkit report`` (a new Python process each time, its start included) of
three runs of 2,000 queries with eight metrics (recall@1,2,4,8, MAP@R, R-precision, nDCG@10,
MRR; synthetic embeddings of 100 classes), once per format, ``--repeats`` times each.

``--trainings`` simulates two trainings of one model, many times: the same 2,000 images (100
classes, d = 64, fixed noise per image), each training its own small random perturbation of the
embedding map (``I + 0.15 G / 8``, ``G`` Gaussian), compared by ``recallkit.compare`` (2,000
resamples): how often MAP@R and recall@1 differ "significantly".

``--coverage`` simulates the coverage of the 95 % class-resampled interval of a class average
(``bootstrap_interval(..., groups=)``) with 10 to 200 classes: 2,000 draws of classes each
(recall@K-like hits, class means from Beta(3, 2), 3 to 29 queries a class).

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_stats.py \
        [--n 60502] [--resamples 10000] [--repeats 3] [--scipy] [--report] [--coverage]
        [--trainings]

Data: synthetic per-query values: recall@1 hits (0 or 1) for the bootstrap of one system,
average precisions (multiples of 1/3, 1/2, ...) for the comparisons of two, 11,318 classes.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

from recallkit import stats


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def measure(call: Callable[[], Any], repeats: int) -> tuple[Any, list[float], list[float], float]:
    """The result, the wall and CPU times in seconds of each of ``repeats`` calls (the CPU time
    is the steadier on a shared machine), and the peak memory numpy allocated in MiB (traced in
    one more call: tracemalloc would slow the timed ones)."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return result, walls, cpus, peak


def report_runs(folder: str) -> list[str]:
    """Three run files of 2,000 queries (100 classes, d = 64, three noise levels) with eight
    metrics each."""
    import recallkit
    from recallkit.runfiles import records

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 100, 2000)
    centers = rng.normal(size=(100, 64))
    metrics = ["recall@1", "recall@2", "recall@4", "recall@8", "MAP@R", "R-precision"]
    metrics += ["nDCG@10", "MRR"]
    paths = []
    for i, noise in enumerate((1.6, 1.76, 2.08)):
        x = centers[labels] + noise * np.random.default_rng(i + 1).normal(size=(2000, 64))
        result = recallkit.retrieval_metrics(x, x, labels, labels, metrics, query_in_reference=True)
        path = f"{folder}/run{i}.json"
        records.write_run(path, records.evaluation_record(result, tag=f"run{i}"))
        paths.append(path)
    return paths


def time_report(repeats: int) -> None:
    """``recallkit report`` of three 2,000-query runs, per format: min and median wall and CPU
    seconds of a new process (Python's start included)."""
    with tempfile.TemporaryDirectory() as folder:
        paths = report_runs(folder)
        print(f"recallkit report of 3 runs x 2,000 queries x 8 metrics, {repeats} times a format")
        print(f"{'format':<10}{'wall min':>10}{'median':>8}{'CPU min':>9}{'median':>8}")
        for extension in ("md", "tex", "csv", "json", "html"):
            walls, cpus = [], []
            for _ in range(repeats):
                command = [sys.executable, "-m", "recallkit", "report", *paths, "--quiet"]
                command += ["--intervals", "ci", "-o", f"{folder}/table.{extension}"]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                subprocess.run(command, check=True)
                walls.append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            print(
                f"{extension:<10}{min(walls):>10.2f}{statistics.median(walls):>8.2f}"
                f"{min(cpus):>9.2f}{statistics.median(cpus):>8.2f}"
            )


def trainings(sims: int = 40) -> None:
    """How often two trainings of one model differ significantly (module docstring)."""
    import warnings

    import recallkit
    from recallkit import comparison

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    n, classes, d = 2000, 100, 64
    significant = {"MAP@R": 0, "recall@1": 0}
    for s in range(sims):
        labels = rng.integers(0, classes, n)
        images = rng.normal(size=(classes, d))[labels] + 1.6 * rng.normal(size=(n, d))
        runs = {}
        for name in ("a", "b"):
            x = images @ (np.eye(d) + 0.15 * rng.normal(size=(d, d)) / np.sqrt(d))
            runs[name] = recallkit.retrieval_metrics(
                x, x, labels, labels, list(significant), query_in_reference=True
            )
        for row in comparison.compare(runs, n_resamples=2000, seed=s).rows:
            significant[row.metric] += row.significant
    shown = ", ".join(f"{k} {v} of {sims}" for k, v in significant.items())
    print(f"two trainings of one model, significantly different (alpha 0.05): {shown}")


def class_coverage(sims: int = 2000, resamples: int = 2000) -> None:
    """The coverage of the 95 % class-resampled interval of a class average, by classes."""
    rng = np.random.default_rng(0)
    truth = 0.6  # the mean of Beta(3, 2): the class average over all classes
    print(f"coverage of the 95% class-resampled interval ({sims} simulations a row):")
    for classes in (10, 20, 40, 100, 200):
        covered = 0
        for s in range(sims):
            mu = rng.beta(3, 2, classes)
            groups = np.repeat(np.arange(classes), rng.integers(3, 30, classes))
            values = (rng.random(groups.size) < mu[groups]) * 1.0
            low, high = stats.bootstrap_interval(
                values, groups=groups, n_resamples=resamples, seed=s
            )
            covered += low <= truth <= high
        print(f"  {classes:>4} classes: {covered / sims:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60_502)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=11_318)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scipy", action="store_true", help="also time scipy's own functions")
    parser.add_argument("--report", action="store_true", help="time recallkit report")
    parser.add_argument("--coverage", action="store_true", help="simulate class coverage")
    parser.add_argument("--trainings", action="store_true", help="simulate two trainings")
    args = parser.parse_args()
    if args.report:
        time_report(args.repeats)
    if args.coverage:
        class_coverage()
    if args.trainings:
        trainings()
    if args.report or args.coverage or args.trainings:
        return
    rng = np.random.default_rng(0)
    n, r = args.n, args.resamples
    hits = (rng.random(n) < 0.79).astype(np.float64)
    ap_a = rng.choice([0.0, 1 / 3, 0.5, 2 / 3, 1.0], size=n, p=[0.1, 0.1, 0.2, 0.2, 0.4])
    ap_b = np.where(rng.random(n) < 0.7, ap_a, rng.choice([0.0, 0.5, 1.0], size=n))
    groups = rng.integers(0, args.classes, size=n)

    print(f"CPU: {cpu_model()}; numpy {np.__version__}; n = {n:,}, resamples = {r:,}")
    runs = {
        "bootstrap_interval mean": lambda: stats.bootstrap_interval(hits, n_resamples=r),
        "bootstrap_interval median": lambda: stats.bootstrap_interval(
            ap_a, np.median, n_resamples=r
        ),
        "bootstrap_interval mean, groups": lambda: stats.bootstrap_interval(
            hits, groups=groups, n_resamples=r
        ),
        "paired_bootstrap mean": lambda: stats.paired_bootstrap(ap_a, ap_b, n_resamples=r),
        "randomization_test mean": lambda: stats.randomization_test(ap_a, ap_b, n_resamples=r),
        "bootstrap_intervals, 8 metrics": lambda: stats.bootstrap_intervals(
            [hits, ap_a, ap_b, 1 - hits, ap_a[::-1], ap_b[::-1], hits[::-1], 1 - hits[::-1]],
            n_resamples=r,
        )[0],
    }
    print(f"{args.repeats} calls each; CPU seconds min and median")
    print(f"{'function':<36}{'CPU min':>8}{'median':>8}{'peak MiB':>10}  result")
    for name, call in runs.items():
        result, _, cpus, peak = measure(call, args.repeats)
        shown = ", ".join(f"{v:.6g}" for v in np.atleast_1d(result))
        print(f"{name:<36}{min(cpus):>8.2f}{statistics.median(cpus):>8.2f}{peak:>10.1f}  {shown}")

    if args.scipy:
        from scipy import stats as sps

        def scipy_bootstrap() -> tuple[float, float]:
            res = sps.bootstrap(
                (hits,),
                np.mean,
                method="percentile",
                n_resamples=r,
                batch=100,
                rng=np.random.default_rng(0),
            )
            return res.confidence_interval

        def scipy_test() -> float:
            res = sps.permutation_test(
                (ap_a, ap_b),
                lambda x, y, axis=-1: np.mean(x, axis=axis) - np.mean(y, axis=axis),
                permutation_type="samples",
                vectorized=True,
                n_resamples=r,
                batch=100,
                rng=np.random.default_rng(0),
            )
            return res.pvalue

        for name, call, ours in (
            ("scipy bootstrap mean (batch 100)", scipy_bootstrap, runs["bootstrap_interval mean"]),
            ("scipy permutation_test (batch 100)", scipy_test, runs["randomization_test mean"]),
        ):
            wall, cpu = time.perf_counter(), time.process_time()
            result = call()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            same = np.allclose(np.atleast_1d(result), np.atleast_1d(ours()), rtol=0, atol=1e-12)
            print(f"{name:<36}{wall:>8.2f}{cpu:>8.2f}{'':>10}  agrees with ours: {same}")

    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"peak resident memory of the process: {peak_rss:.0f} MiB")


if __name__ == "__main__":
    main()
