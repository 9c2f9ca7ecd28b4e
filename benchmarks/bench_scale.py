"""Benchmark past one process: iNaturalist scale, a gallery streamed from disk, gloo ranks.

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_scale.py
    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_scale.py --part ranks

Parts:

* ``inat``: 136,093 x 136,093 leave-one-out at d = 512 (the iNaturalist 2018 test split's size,
  about 55 items per class), recall@{1,4,16,32} against the GEMM floor measured in the same run,
  with peak resident memory beyond the inputs.
* ``streamed``: a 2,000,000-row float16 gallery written to a ``.npy`` file and evaluated through
  :func:`recallkit._inputs.io.open_embeddings` (never loaded whole), with peak resident memory, and
  the
  same values as the in-memory evaluation.
* ``ranks``: :func:`recallkit.evaluate_sharded` on 2 and 4 gloo processes on this machine, bytes
  through the collectives per rank, and agreement with the single-process result.
"""

from __future__ import annotations

import argparse
import os
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from bench_recall import gemm_floor_numpy_split, make_data, measure

import recallkit
from recallkit import engine
from recallkit._inputs.io import open_embeddings


def part_inat() -> None:
    rows, classes, dim, ks = 136_093, 2_452, 512, (1, 4, 16, 32)
    x, labels = make_data(rows, classes, dim)
    xt = torch.from_numpy(x)
    space = engine.prepare(xt, xt, recallkit.Options(), "bench")
    chunk = engine.chunk_rows(space, None)
    del space
    print(
        f"\n== inat: {rows:,} x {rows:,} leave-one-out, d={dim}, {classes:,} classes, "
        f"chunk={chunk} rows, {torch.get_num_threads()} threads =="
    )
    _, floor, floor_peak = measure(lambda: gemm_floor_numpy_split(x, chunk))
    print(
        f"GEMM floor (numpy BLAS, row-split threads): {floor:8.1f} s   "
        f"peak {floor_peak:.2f} GiB beyond the inputs"
    )
    result, seconds, peak = measure(
        lambda: recallkit.recall_at_k(xt, xt, labels, labels, ks, query_in_reference=True)
    )
    print(
        f"recallkit.recall_at_k:                      {seconds:8.1f} s   "
        f"peak {peak:.2f} GiB beyond the inputs   x floor {seconds / floor:.3f}"
    )
    print("   " + "  ".join(f"{k}={v:.4f}" for k, v in result.items()))


def _write_gallery(path: Path, rows: int, dim: int, classes: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    centers = rng.standard_normal((classes, dim)).astype(np.float32)
    labels = rng.integers(0, classes, size=rows)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(rows, dim))
    for start in range(0, rows, 100_000):
        stop = min(start + 100_000, rows)
        noise = rng.standard_normal((stop - start, dim)).astype(np.float32)
        out[start:stop] = (centers[labels[start:stop]] + 2.0 * noise).astype(np.float16)
    out.flush()
    del out
    return labels


def part_streamed(rows: int = 2_000_000, dim: int = 256, queries: int = 2_000) -> None:
    classes = 50_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gallery.npy"
        start = time.perf_counter()
        g_labels = _write_gallery(path, rows, dim, classes)
        print(
            f"\n== streamed: {rows:,} x {dim} float16 gallery on disk "
            f"({path.stat().st_size / 2**30:.2f} GiB, written in "
            f"{time.perf_counter() - start:.1f} s), {queries:,} queries =="
        )
        rng = np.random.default_rng(2)
        pick = rng.choice(rows, size=queries, replace=False)
        gallery = open_embeddings(path)
        query = np.stack([gallery[i : i + 1][0] for i in pick]).astype(np.float32)
        query += rng.standard_normal(query.shape).astype(np.float32) * 1.5
        q_labels = g_labels[pick]
        ks = (1, 10, 100)
        # Each query is a noisy copy of a gallery row: that row is excluded by id.
        ids = {"query_ids": pick, "reference_ids": np.arange(rows)}
        streamed, seconds, peak = measure(
            lambda: recallkit.recall_at_k(query, gallery, q_labels, g_labels, ks, **ids)
        )
        print(
            f"streamed from disk:  {seconds:7.1f} s   peak resident {peak:.2f} GiB beyond the "
            f"queries (the file is {path.stat().st_size / 2**30:.2f} GiB)"
        )
        print("   " + "  ".join(f"{k}={v:.4f}" for k, v in streamed.items()))
        memory = torch.from_numpy(np.load(path).astype(np.float32))
        loaded, seconds, peak = measure(
            lambda: recallkit.recall_at_k(query, memory, q_labels, g_labels, ks, **ids)
        )
        same = dict(loaded) == dict(streamed) and bool(
            np.array_equal(loaded.first_hit_ranks, streamed.first_hit_ranks)
        )
        print(
            f"in memory (float32): {seconds:7.1f} s   peak {peak:.2f} GiB beyond the inputs; "
            f"identical values and ranks: {same}"
        )


def _rank_worker(rank: int, world: int, init: str, rows: int, dim: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    x, labels = make_data(rows, rows // 5, dim)
    sampler = np.concatenate([np.arange(rows), np.arange(-(-rows // world) * world - rows)])
    mine = sampler[rank::world]
    start = time.perf_counter()
    result = recallkit.evaluate_sharded(
        torch.from_numpy(x[mine]), labels[mine], mine, ks=(1, 10, 100)
    )
    seconds = time.perf_counter() - start
    with open(f"{out}.{rank}", "wb") as handle:
        pickle.dump(
            (
                {k: v for k, v in result.items() if k.startswith("recall@")},
                result["MAP@R"],
                result["R-precision"],
                result.info["bytes_communicated"],
                seconds,
            ),
            handle,
        )
    dist.destroy_process_group()


def part_ranks(rows: int = 20_000, dim: int = 128) -> None:
    x, labels = make_data(rows, rows // 5, dim)
    start = time.perf_counter()
    single = recallkit.recall_at_k(x, x, labels, labels, (1, 10, 100), query_in_reference=True)
    map_r = float(recallkit.map_at_r(x, x, labels, labels, query_in_reference=True))
    r_prec = float(recallkit.r_precision(x, x, labels, labels, query_in_reference=True))
    print(
        f"\n== ranks: {rows:,} x {rows:,} leave-one-out, d={dim}; single process "
        f"{time.perf_counter() - start:.1f} s (recall, MAP@R, R-precision) =="
    )
    reference_bytes = rows * dim * 4
    for world in (2, 4):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r")
            mp.spawn(_rank_worker, args=(world, f"file://{tmp}/init", rows, dim, out), nprocs=world)
            results = [pickle.load(open(f"{out}.{r}", "rb")) for r in range(world)]
        same = all(r[0] == dict(single) and r[1] == map_r and r[2] == r_prec for r in results)
        sent = [r[3] for r in results]
        print(
            f"{world} gloo ranks: {max(r[4] for r in results):6.1f} s; bytes through the "
            f"collectives per rank {min(sent):,}-{max(sent):,} "
            f"({max(sent) / reference_bytes:.2f}x one copy of the embeddings); identical to "
            f"the single process: {same}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["inat", "streamed", "ranks", "all"], default="all")
    args = parser.parse_args()
    parts = ["ranks", "streamed", "inat"] if args.part == "all" else [args.part]
    for name in parts:
        {"inat": part_inat, "streamed": part_streamed, "ranks": part_ranks}[name]()


if __name__ == "__main__":
    main()
