"""Benchmark: recallkit's recall@K and MAP@R in each filter precision, against the GEMM floors
and the peers, in one run.

Prints the processor and the instructions the precision choice looks for, then per scale the
wall time, the ratio to the float32 GEMM floor (the same n × n similarity multiplication alone:
torch, numpy's BLAS chunked, numpy's BLAS on row slices of one thread each; the fastest is the
floor), the peak resident memory beyond the inputs, and whether the methods agree where their
tie rules allow. The tile floors are the engine's own tile products on its tiles (``cpu.TILE``),
one thread per tile, as the tile pass issues them (float32: its BLAS choice; each low-precision
kernel of ``lowp.KERNELS`` that runs here and passes its self-check), timed on a sample of the
tiles and scaled to all of them.

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_recall.py
    uv run --frozen --no-sync --env-file tests/cpu.env \
        python benchmarks/bench_recall.py --scale cub --precisions all

recallkit runs with ``precision="auto"`` and with each precision given explicitly: by default
every precision at CUB scale, and at SOP scale float32 plus the low precisions this processor
has instructions for (``--precisions all`` times every one everywhere). After each scale the
engine's own account of the choice is printed (``cpu.precision_report``).

Data: synthetic class clusters (about 5 items per class at SOP scale, 100 classes at CUB scale),
L2-normalised float32, evaluated leave-one-out (the test split against itself). Before a
dimension is timed, recall@K and MAP@R run in each precision on its first 3,000 rows, which
loads the compiled kernels of each code path and opens the int8 kernels at that width. Each
method is then timed once at SOP scale and best of two at the smaller scales, where what is
left of a first call's fixed costs would otherwise dominate a sub-second run; the peak memory
is the first call's. The noise of
each dimension is set so that recall is a trained model's (SOP recall@1 about 0.8, CUB about
0.65, printed in each row); SOP at d = 128 also runs a hard setting (recall@1 about 0.06:
noise that dominates the class centres), recallkit and the floors only.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import math
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import faiss
import numpy as np
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

import recallkit
from recallkit.pml import ExactKNN

try:  # the engine package (bench_versions.py also imports this file for an older checkout)
    from recallkit import engine
    from recallkit.engine import cpu, lowp
except ImportError:  # pragma: no cover - an older checkout
    engine = cpu = lowp = None

SCALES = {
    # name: (rows, classes, ((dim, noise, setting), ...)): the noise of each dimension gives the
    # recall of trained models (SOP recall@1 about 0.8, CUB about 0.65); "hard" keeps a setting
    # whose noise dominates its class centres (recallkit and the floors only).
    "sop": (
        60_502,
        60_502 // 5,
        ((512, 2.2, "trained"), (128, 1.4, "trained"), (128, 2.2, "hard")),
    ),
    "cub": (5_924, 100, ((512, 3.5, "trained"), (128, 2.2, "trained"))),
    "small": (12_000, 2_400, ((128, 1.4, "trained"),)),
}
KS = (1, 10, 100, 1000)
PRECISIONS = ("float32", "bfloat16", "int8")
WARM_ROWS = 3000  # the subset each precision runs on before a width is timed


def cpu_model() -> str:
    """The processor's name and the instructions the precision choice looks for."""
    name = "unknown processor"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    flags = lowp.cpu_flags()
    wanted = ("avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8")
    shown = " ".join(f"{f}:{'yes' if f in flags else 'no'}" for f in wanted)
    if os.environ.get("RECALLKIT_AVX2_ONLY") == "1":
        shown += "; as an AVX2-only CPU through benchmarks/avx2_only.py"
    return f"{name} ({shown})"


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


def make_data(
    rows: int, classes: int, dim: int, seed: int = 0, noise: float = 2.2
) -> tuple[np.ndarray, np.ndarray]:
    """Class centres (standard normal) plus ``noise`` times standard normal noise per item,
    L2-normalised, in a random order."""
    rng = np.random.default_rng(seed)
    labels = np.sort(rng.integers(0, classes, size=rows))
    centers = rng.standard_normal((classes, dim)).astype(np.float32)
    spread = rng.standard_normal((rows, dim)).astype(np.float32)
    x = centers[labels] + spread * np.float32(noise)
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


def gemm_floor_tiles(x: np.ndarray, way: str, sample: int) -> tuple[float, int, int]:
    """The n × n product as the tile pass issues it, on ``cpu.TILE`` tiles, one tile per worker
    thread, each thread single-threaded: ``way`` "float32" (the engine's BLAS choice,
    ``cpu.tile_scores``) or a low-precision kernel of ``lowp.KERNELS`` (its sides prepared
    first, not timed), into the tiles the engine uses (``lowp.tile_dtype``: a bfloat16 product
    stays in bfloat16). Times at most ``sample`` tiles (spread over the matrix) and returns the
    time scaled to every tile, with the tiles timed and the tiles in all."""
    from concurrent.futures import ThreadPoolExecutor

    from recallkit.engine import filters

    n, tile = len(x), cpu.TILE
    if way == "float32":
        rows = torch.from_numpy(x)
        qf = filters.QueryFilter(rows, torch.ones(n, dtype=torch.float64), torch.ones(n))
        block = engine.make_block(rows, 0, "bench", "cosine", torch.device("cpu"), torch.float32)

        def compute(out, a, b):
            cpu.tile_scores(qf, block, a, b, out)
    else:
        kernel = lowp.KERNELS[way]
        left, right = lowp.prepare(x, kernel.a_form), lowp.prepare(x, kernel.b_form)

        def compute(out, a, b):
            r, c = out.shape
            lowp.tile_product(left, right, out, (a, a + r), (b, b + c), scaled=False, kernel=kernel)

    starts = range(0, n, tile)
    every = [(a, b) for a in starts for b in starts]
    step = max(1, len(every) // sample)
    timed = every[::step][:sample]
    workers = torch.get_num_threads()
    dtype = lowp.tile_dtype("float32" if way == "float32" else lowp.KERNELS[way].precision)
    buffers = [np.empty((tile, tile), dtype) for _ in range(workers)]

    def product(job: tuple[int, tuple[int, int]]) -> None:
        slot, (a, b) = job
        rows, cols = min(tile, n - a), min(tile, n - b)
        compute(buffers[slot][:rows, :cols], a, b)

    with cpu.single_threaded(), ThreadPoolExecutor(workers) as pool:
        list(pool.map(product, [(i % workers, t) for i, t in enumerate(timed[:workers])]))
        start = time.perf_counter()
        list(pool.map(product, [(i % workers, t) for i, t in enumerate(timed)]))
        seconds = time.perf_counter() - start
    return seconds * len(every) / len(timed), len(timed), len(every)


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


SETTLE_CALLS = 24


def settle(calls: list[Callable[[], Any]], dim: int, rows: int) -> int:
    """Runs ``calls`` in turn until ``precision="auto"`` has chosen its kind of tile for every
    call of ``rows`` queries of this width that weighs them across calls (a call of fewer than
    ``lowp.AUTO_TILES`` full tiles, as an evaluation after every epoch repeats it), at most
    [`SETTLE_CALLS`][SETTLE_CALLS] times; returns how many times. Those calls are an
    evaluation's first epochs: the timings that follow are the later ones'."""

    def weighing() -> bool:
        return any(
            len(key) == 5 and key[2] == dim and key[3][0] == rows and made.chosen is None
            for key, made in lowp.CHOICES.items()
        )

    done = 0
    while done < SETTLE_CALLS and (done == 0 or weighing()):
        for call in calls:
            call()
        done += 1
    return done


def run_scale(
    name: str,
    with_naive: bool,
    precisions: tuple[str, ...],
    sample: int,
    rounds: int = 0,
    widths: list[int] | None = None,
) -> None:
    rows, classes, dims = SCALES[name]
    for dim, noise, setting in dims:
        if widths and dim not in widths:
            continue
        run_dim(name, rows, classes, dim, with_naive, precisions, sample, noise, setting, rounds)
        gc.collect()


def run_dim(
    name: str,
    rows: int,
    classes: int,
    dim: int,
    with_naive: bool,
    precisions: tuple[str, ...],
    sample: int,
    noise: float = 2.2,
    setting: str = "trained",
    rounds: int = 0,
) -> None:
    x, labels = make_data(rows, classes, dim, noise=noise)
    xt = torch.from_numpy(x)
    space = engine.prepare(xt, xt, recallkit.Options(), "bench")
    chunk = engine.chunk_rows(space, None)
    del space
    print(
        f"\n== {name}: {rows:,} x {rows:,} leave-one-out, d={dim}, {classes:,} classes, noise "
        f"{noise} ({setting}), ks={KS}, chunk={chunk} rows, {torch.get_num_threads()} threads =="
    )
    repeat = 1 if rows > 20_000 else 2  # sub-second runs: best of two, after a first call
    print(f"best of {repeat} calls each" if repeat > 1 else "one call each")
    print(f"{'method':<52}{'time s':>9}{'x floor':>9}{'peak GiB':>10}  result")
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}

    def row(label: str, fn: Callable[[], Any], floor: float | None = None) -> Any:
        value, seconds, peak = measure(fn)
        for _ in range(repeat - 1):
            seconds = min(seconds, measure(fn)[1])
        timings[label] = seconds
        ratio = f"{seconds / floor:9.2f}" if floor else f"{'':>9}"
        shown = value if not isinstance(value, float) or math.isnan(value) else round(value, 4)
        if isinstance(value, dict):
            shown = {k: round(v, 4) for k, v in value.items()}
        print(f"{label:<52}{seconds:9.2f}{ratio}{peak:10.2f}  {shown}", flush=True)
        results[label] = value
        return value

    row("GEMM floor float32, torch.mm (chunked)", lambda: gemm_floor_torch(xt, chunk))
    row("GEMM floor float32, numpy BLAS (chunked)", lambda: gemm_floor_numpy(x, chunk))
    row("GEMM floor float32, numpy (row-split threads)", lambda: gemm_floor_numpy_split(x, chunk))
    floor = min(timings.values())
    low_floors = {}  # on the tile shape, float32's first: the ratios below are to it
    weighed = [k.name for p in lowp.worth_timing()[1:] for k in lowp.kernels_for(p)]
    for way in ("float32", *weighed):  # the kernels precision="auto" weighs here
        if way != "float32" and lowp.usable(lowp.KERNELS[way], dim) is not None:
            print(f"GEMM floor {way}: {lowp.usable(lowp.KERNELS[way], dim)}")
            continue
        seconds, timed, total = gemm_floor_tiles(x, way, sample)
        low_floors[way] = seconds
        label = f"GEMM floor {way}, {cpu.TILE}² tiles ({timed}/{total} timed)"
        ratio = seconds / low_floors["float32"]
        print(
            f"{label:<52}{seconds:9.2f}{seconds / floor:9.2f}{'':>10}  scaled; "
            f"{ratio:.2f} x float32's tiles",
            flush=True,
        )

    def recall(precision: str) -> dict[str, float]:
        result = recallkit.recall_at_k(
            xt, xt, labels, labels, KS, query_in_reference=True, precision=precision
        )
        return dict(result)

    # A width's first call loads the compiled kernels of its code paths and opens and checks
    # the int8 kernels (docs/performance.md, "The first call in a process"): each precision
    # runs once on a subset first, so that no row pays what a row before it paid.
    sub, sub_labels = xt[:WARM_ROWS], labels[:WARM_ROWS]
    for precision in ("auto", *precisions):
        recallkit.recall_at_k(
            sub, sub, sub_labels, sub_labels, KS, query_in_reference=True, precision=precision
        )
        recallkit.map_at_r(
            sub, sub, sub_labels, sub_labels, query_in_reference=True, precision=precision
        )

    names = [f"recall@{k}" for k in KS] + ["MAP@R", "R-precision"]
    kw: dict[str, Any] = {"query_in_reference": True}
    untimed = settle(
        [
            lambda: recall("auto"),
            lambda: recallkit.map_at_r(xt, xt, labels, labels, **kw),
            lambda: recallkit.r_precision(xt, xt, labels, labels, **kw),
            lambda: recallkit.retrieval_metrics(xt, xt, labels, labels, names, **kw),
        ],
        dim,
        rows,
    )
    print(f"({untimed} untimed calls of each auto method first, until auto chose its tiles)")
    if rounds:  # the engine alone, in alternating calls
        floors = {  # the fastest of the floors above, timed again in each round
            "GEMM floor float32, torch.mm (chunked)": lambda: gemm_floor_torch(xt, chunk),
            "GEMM floor float32, numpy BLAS (chunked)": lambda: gemm_floor_numpy(x, chunk),
            "GEMM floor float32, numpy (row-split threads)": lambda: gemm_floor_numpy_split(
                x, chunk
            ),
        }
        fastest = floors[min(floors, key=timings.get)]
        alternate(xt, labels, precisions, rounds, fastest, setting != "hard")
        print(cpu.precision_report(dim))
        return
    rk = row("recallkit.recall_at_k precision=auto", lambda: recall("auto"), floor)
    agree = []
    for precision in precisions:
        value = row(
            f"recallkit.recall_at_k precision={precision}", partial(recall, precision), floor
        )
        agree.append(value == rk)
    if setting == "hard":  # recallkit and the floors only
        print(f"every precision gives the same values: {all(agree)}")
        print(cpu.precision_report(dim))
        return
    rk_map = row(
        "recallkit.map_at_r",
        lambda: float(recallkit.map_at_r(xt, xt, labels, labels, query_in_reference=True)),
        floor,
    )
    rk_rp = row(
        "recallkit.r_precision",
        lambda: float(recallkit.r_precision(xt, xt, labels, labels, query_in_reference=True)),
        floor,
    )
    both = row(
        "recallkit.retrieval_metrics recall@K+MAP@R+R-prec",
        lambda: dict(
            recallkit.retrieval_metrics(xt, xt, labels, labels, names, query_in_reference=True)
        ),
        floor,
    )
    separate = {**rk, "MAP@R": rk_map, "R-precision": rk_rp}
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
        f"every precision gives the same values: {all(agree)}   "
        f"one pass equals the separate calls: {separate == both}"
    )
    print(
        f"agree faiss: {all(abs(fa[k] - rk[k]) < 1e-12 for k in rk)}   "
        f"agree PML p@1: {abs(p1 - rk['recall@1']) < 1e-12}   "
        f"PML MAP@R - recallkit MAP@R = {pml_map - rk_map:.2e} (faiss float32 near-ties); "
        "PML MAP@R with recallkit's ExactKNN - recallkit MAP@R = "
        f"{pml_exact['mean_average_precision_at_r'] - rk_map:.2e} (order of the float64 mean)"
    )
    rk_t = timings["recallkit.recall_at_k precision=auto"]
    one_pass = timings["recallkit.retrieval_metrics recall@K+MAP@R+R-prec"]
    per_precision = "; ".join(
        f"{p} {timings[f'recallkit.recall_at_k precision={p}'] / floor:.3f}" for p in precisions
    )
    tiles = ", ".join(f"{w} {t / low_floors['float32']:.2f}" for w, t in low_floors.items())
    pml_map_t = timings["PML AccuracyCalculator MAP@R (max_bin_count)"]
    print(
        f"recall@K (auto) / float32 floor = {rk_t / floor:.3f} ({per_precision}); "
        f"tile floors / float32's tiles: {tiles}; recall@K / faiss = "
        f"{rk_t / timings[f'faiss IndexFlatIP k={max(KS) + 1}']:.3f}; MAP@R / recall@K = "
        f"{timings['recallkit.map_at_r'] / rk_t:.3f}; R-precision / recall@K = "
        f"{timings['recallkit.r_precision'] / rk_t:.3f}; three metrics in one pass / MAP@R = "
        f"{one_pass / timings['recallkit.map_at_r']:.3f}; MAP@R / PML MAP@R = "
        f"{timings['recallkit.map_at_r'] / pml_map_t:.3f}"
        f"; recall@K / PML p@1 = "
        f"{rk_t / timings['PML AccuracyCalculator precision_at_1']:.3f}"
    )
    print(cpu.precision_report(dim))


def alternate(
    xt: torch.Tensor,
    labels: np.ndarray,
    precisions: tuple[str, ...],
    rounds: int,
    floor: Callable[[], Any],
    with_map: bool,
) -> None:
    """``rounds`` rounds of the float32 floor, ``recall_at_k`` in ``auto`` and each precision,
    and ``map_at_r`` (``auto``), each called once per round in turn; prints per method the
    minimum and median time and, within each round, its ratio to the floor and to ``auto``."""
    kw: dict[str, Any] = {"query_in_reference": True}
    cases: dict[str, Callable[[], Any]] = {"float32 floor": floor}
    for p in ("auto", *precisions):
        cases[f"recall_at_k {p}"] = partial(
            lambda p: dict(recallkit.recall_at_k(xt, xt, labels, labels, KS, precision=p, **kw)),
            p,
        )
    if with_map:
        cases["map_at_r auto"] = lambda: float(recallkit.map_at_r(xt, xt, labels, labels, **kw))
    times: dict[str, list[float]] = {k: [] for k in cases}
    values: dict[str, Any] = {}
    for _ in range(rounds):
        for label, fn in cases.items():
            values[label], seconds, _ = measure(fn)
            times[label].append(seconds)
    floor_t, auto_t = times["float32 floor"], times["recall_at_k auto"]
    print(f"{rounds} rounds of alternating calls (ratios within a round: min / median)")
    print(f"{'method':<28}{'min s':>9}{'median s':>10}{'x floor':>16}{'x auto':>16}")
    for label, seconds in times.items():
        to_floor = [t / f for t, f in zip(seconds, floor_t, strict=True)]
        to_auto = [t / a for t, a in zip(seconds, auto_t, strict=True)]
        print(
            f"{label:<28}{min(seconds):9.2f}{statistics.median(seconds):10.2f}"
            f"{min(to_floor):8.2f}{statistics.median(to_floor):8.2f}"
            f"{min(to_auto):8.2f}{statistics.median(to_auto):8.2f}"
        )
    fixed = [times[f"recall_at_k {p}"] for p in precisions]
    best = [min(ts) for ts in zip(*fixed, strict=True)]
    ratio = [a / b for a, b in zip(auto_t, best, strict=True)]
    same = all(values[f"recall_at_k {p}"] == values["recall_at_k auto"] for p in precisions)
    line = (
        f"auto / fastest fixed precision of the round: min {min(ratio):.3f}, median "
        f"{statistics.median(ratio):.3f}; every precision gives the same values: {same}"
    )
    if with_map:
        to_recall = [m / a for m, a in zip(times["map_at_r auto"], auto_t, strict=True)]
        line += (
            f"; map_at_r / recall_at_k (auto): min {min(to_recall):.3f}, median "
            f"{statistics.median(to_recall):.3f}"
        )
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=[*SCALES, "all"], default="all")
    parser.add_argument(
        "--precisions",
        choices=("default", "all"),
        default="default",
        help="precisions timed explicitly: every one at CUB scale and those this processor has "
        "instructions for elsewhere (default), or every one everywhere",
    )
    parser.add_argument(
        "--floor-tiles", type=int, default=64, help="tiles timed for the bf16/int8 floors"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=0,
        help="time the engine alone (floor, recall_at_k in each precision, map_at_r) in this "
        "many rounds of alternating calls, without the peers",
    )
    parser.add_argument("--dim", type=int, action="append", help="only these widths")
    args = parser.parse_args()
    faiss.omp_set_num_threads(torch.get_num_threads())
    print(f"CPU: {cpu_model()}")
    print(
        f"torch {torch.__version__}, numpy {np.__version__}, faiss {faiss.__version__}, "
        f"threads {torch.get_num_threads()}; precision='auto' chooses among "
        f"{', '.join(lowp.worth_timing())} here"
    )
    # Warm the numba kernels so compilation is not timed.
    w = np.eye(4, dtype=np.float32)
    for precision in ("auto", *PRECISIONS):
        recallkit.recall_at_k(
            w, w, [0, 0, 1, 1], [0, 0, 1, 1], (1,), query_in_reference=True, precision=precision
        )
    recallkit.map_at_r(w, w, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True)
    scales = ["cub", "sop"] if args.scale == "all" else [args.scale]
    worth = set(lowp.worth_timing())
    for name in scales:
        everything = args.precisions == "all" or name != "sop"
        precisions = tuple(p for p in PRECISIONS if everything or p in worth)
        run_scale(name, name != "sop", precisions, args.floor_tiles, args.rounds, args.dim)


if __name__ == "__main__":
    main()
