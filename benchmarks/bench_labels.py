"""Benchmark: memory and time of the label-form metrics from two classes to one class per row.

With few classes each query has many relevant items (R): recall@K keeps each chunk's filter
scores to find the best positive, and MAP@R, R-precision, MAP@K and nDCG@K read ranked lists of
up to R items per query. Chunks are sized from the memory budget with the widest list of the
request counted per row, so the peak stays near the budget whatever the classes.

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_labels.py

Prints the CPU, then per case the wall time and the peak resident memory beyond the inputs
against the memory budget (``--memory-budget``, default the library's: 256 MiB on the CPU).
Each case runs in a fresh Python process: the imports, the inputs and a warm-up call of the
same functions on 300 rows (which loads the compiled kernels), then the resident-set high-water
mark is reset (Linux ``/proc/self/clear_refs``; elsewhere the growth of ``ru_maxrss``) and the
call is measured: the peak minus the resident memory before the call, every allocator counted
(numpy's, torch's, numba's) with glibc's own retention. The peak includes the engine's prepared
copy of the rows (4 d bytes a row: 29 MiB at 60,000 × 128) and the per-query results besides a
chunk's working memory, which the budget bounds.

Data: synthetic class clusters (``bench_recall.make_data``), 60,000 × 128 float32,
L2-normalised, leave-one-out (the rows against themselves), as SOP. ``recall@K`` (K = 1, 10,
100) runs on every row; ``MAP@R`` and ``mix`` (recall@1, MAP@R, R-precision, MAP@100,
nDCG@100 from one pass) on the first ``--list-queries`` rows as queries (still against all
60,000: the chunks are the full run's, the time a fraction of it). "one per row" is one class
per row: the rows against themselves without leave-one-out, each query's one relevant item its
own row.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time

CLASSES = ("2", "10", "100", "1000", "row")
METRICS = ("recall@K", "MAP@R", "mix")
MIX = ["recall@1", "MAP@R", "R-precision", "MAP@100", "nDCG@100"]


def _kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> tuple[int, bool]:
    """The resident memory now (bytes) and whether the high-water mark could be reset to it."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        now = _kib("VmRSS:")
        if now is not None:
            return now * 1024, True
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, False


def _peak(reset: bool) -> int:
    if reset:
        return (_kib("VmHWM:") or 0) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def child(args: argparse.Namespace) -> None:
    """One case in this (fresh) process: one JSON line on stdout."""
    import numpy as np
    from bench_recall import make_data

    import recallkit
    from recallkit import engine

    rows = args.rows
    classes = rows if args.classes == "row" else int(args.classes)
    x, labels = make_data(rows, classes, args.dim)
    if args.classes == "row":
        labels = np.arange(rows)
    options = {} if args.memory_budget is None else {"memory_budget": args.memory_budget}
    loo = args.classes != "row"  # one class per row: the rows as a gallery of their own

    def call(n: int, ref=x, rl=labels, **kw):
        q, ql = (ref, rl) if n >= len(ref) else (ref[:n], rl[:n])
        if not loo:  # the rows against themselves, no row left out
            q, ql = ref, rl
        kw = dict(query_in_reference=loo, **options, **kw)
        if args.metric == "recall@K":
            return recallkit.recall_at_k(q, ref, ql, rl, (1, 10, 100), **kw)
        if args.metric == "MAP@R":
            return recallkit.map_at_r(q, ref, ql, rl, **kw)
        return recallkit.retrieval_metrics(q, ref, ql, rl, MIX, **kw)

    # Warm-up on 300 rows: two classes and the case's own, each filter precision (its kernels
    # loaded, the int8 sessions opened), so that the call measured holds memory, not code.
    for warm in (labels[:300] % 2, labels[:300]):
        for precision in ("float32", "bfloat16", "int8"):
            call(150, x[:300], warm, precision=precision)
    queries = rows if args.metric == "recall@K" or not loo else min(args.list_queries, rows)
    # The resident memory when the engine starts on the first chunk: the prepared rows and the
    # per-query arrays are held by then, the chunks' working memory comes after.
    run, first = engine.run, []

    def spy(*a, **kw):
        first.append(_kib("VmRSS:"))
        yield from run(*a, **kw)

    engine.run = spy
    base, reset = _reset_peak()
    start = time.perf_counter()
    result = call(queries)
    seconds = time.perf_counter() - start
    peak = _peak(reset)
    held = first[0] * 1024 - base if first and first[0] is not None else None
    out = {"queries": queries, "seconds": seconds, "extra": max(peak - base, 0), "held": held}
    print(json.dumps({**out, "values": dict(result)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument(
        "--list-queries",
        type=int,
        default=2_000,
        help="queries of the MAP@R and mix cases (against every row)",
    )
    parser.add_argument("--memory-budget", default=None, help="bytes or 512MiB (default: 256 MiB)")
    parser.add_argument("--classes", nargs="+", default=list(CLASSES), choices=CLASSES)
    parser.add_argument("--metrics", nargs="+", default=list(METRICS), choices=METRICS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--metric", help=argparse.SUPPRESS)
    args = parser.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    if args.child:
        args.classes = args.classes[0]
        child(args)
        return
    import torch
    from bench_recall import cpu_model

    from recallkit.engine.space import memory_budget
    from recallkit.options import Options

    budget = memory_budget(
        Options.of("bench_labels", memory_budget=args.memory_budget), torch.device("cpu")
    )
    mib = 2**20
    print(f"CPU: {cpu_model()}")
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}; {args.rows:,} x "
        f"{args.dim} float32, memory budget {budget / mib:.0f} MiB"
    )
    print(
        "MiB beyond the inputs: at the peak; held when the first chunk starts (the prepared rows "
        "and the per-query arrays); the chunks' share (the peak less that), against the budget"
    )
    head = f"{'metrics':<10}{'classes':>12}{'queries':>9}{'time s':>9}{'peak':>8}{'held':>8}"
    print(head + f"{'chunks':>8}{'x budget':>10}")
    for metric in args.metrics:
        for classes in args.classes:
            command = [sys.executable, os.path.abspath(__file__), "--child"]
            command += ["--metric", metric, "--classes", classes, "--rows", str(args.rows)]
            command += ["--dim", str(args.dim), "--list-queries", str(args.list_queries)]
            if args.memory_budget is not None:
                command += ["--memory-budget", args.memory_budget]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"{metric:<10}{classes:>12}  failed: {done.stderr.strip()[-500:]}")
                continue
            out = json.loads(done.stdout.strip().splitlines()[-1])
            name = "one per row" if classes == "row" else f"{int(classes):,}"
            held = out["held"] if out["held"] is not None else 0
            chunks = out["extra"] - held
            print(
                f"{metric:<10}{name:>12}{out['queries']:>9,}{out['seconds']:9.1f}"
                f"{out['extra'] / mib:8.0f}{held / mib:8.0f}{chunks / mib:8.0f}"
                f"{chunks / budget:10.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
