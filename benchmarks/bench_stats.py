"""Benchmark: time and memory of recallkit.stats at the size of a large test split.

Times each function on one core at ``--n`` per-query values (60,502 by default: the queries of
Stanford Online Products' test split) and ``--resamples`` resamples (10,000), then calls it
again under tracemalloc for the peak memory numpy allocated (the batch, and one float per
resample). Prints the CPU model (from /proc/cpuinfo), one line per function, and the process's
peak resident memory. ``--scipy`` also times scipy.stats.bootstrap and permutation_test on the
same input and checks that they agree.

    /work/bin/rkpy benchmarks/bench_stats.py [--n 60502] [--resamples 10000] [--scipy]

Data: synthetic per-query values: recall@1 hits (0 or 1) for the bootstrap of one system,
average precisions (multiples of 1/3, 1/2, ...) for the comparisons of two, 11,318 classes.
"""

from __future__ import annotations

import argparse
import platform
import resource
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


def measure(call: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """The result, the wall and CPU times in seconds (the CPU time is the steadier on a shared
    machine), and the peak memory numpy allocated in MiB (traced in a second call: tracemalloc
    would slow the timed one)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return result, wall, cpu, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60_502)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=11_318)
    parser.add_argument("--scipy", action="store_true", help="also time scipy's own functions")
    args = parser.parse_args()
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
    }
    print(f"{'function':<36}{'wall s':>8}{'CPU s':>8}{'peak MiB':>10}  result")
    for name, call in runs.items():
        result, wall, cpu, peak = measure(call)
        shown = ", ".join(f"{v:.6g}" for v in np.atleast_1d(result))
        print(f"{name:<36}{wall:>8.2f}{cpu:>8.2f}{peak:>10.1f}  {shown}")

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
