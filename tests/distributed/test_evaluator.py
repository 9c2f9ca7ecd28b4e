"""recallkit.Evaluator on 2 gloo processes: DistributedSampler shards in, the single-process
result out on every rank, bit for bit, without any rank holding every embedding."""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import recallkit
from recallkit import Evaluator
from recallkit.runner import read_history

WORLD = 2
N = 101
# The memory case: rows large enough that their copies dominate what a process allocates.
MEM_N, MEM_D = 1000, 4096


def _data(seed: int, n: int = N, d: int = 6, ties: bool = False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    if ties:  # integer-valued rows under the dot product: exact ties across shards
        x = torch.round(x)
    # Labels of both signs (a negative code once meant "no label" under torch.distributed).
    y = torch.randint(0, 9, (n,), generator=g) - 4
    return x, y


def _sharded_batches(x, y, rank, seed, batch_size=8):
    """This rank's DistributedSampler(shuffle=True) batches: rows, labels, dataset indices."""
    data = TensorDataset(x, y, torch.arange(len(x)))
    sampler = DistributedSampler(data, num_replicas=WORLD, rank=rank, shuffle=True, seed=seed)
    return DataLoader(data, batch_size=batch_size, sampler=sampler)


# Label-form cases: (name, data keywords, Evaluator keywords).
CASES = [
    ("cosine", {"seed": 0}, {"chunk_size": 16}),
    ("dot-ties", {"seed": 1, "ties": True}, {"metric": "dot", "ks": (1, 3, 200)}),
]


def _status(key: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"{key}:\s+(\d+)", text).group(1)) * 1024


def _peak(fn):
    """``fn()`` and the growth of this process's resident memory at its peak during the call.

    The high-water mark is reset first (``/proc/self/clear_refs``); large blocks are mapped and
    unmapped by malloc (``MALLOC_MMAP_THRESHOLD_``), so resident memory follows what is held.
    """
    base = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    out = fn()
    return out, _status("VmHWM") - base


def _memory_case(rank):
    names = ["recall@1", "recall@2"]
    options = {"chunk_size": 256}
    g = torch.Generator().manual_seed(7)
    x = torch.randn(MEM_N, MEM_D, generator=g)
    y = torch.randint(0, 50, (MEM_N,), generator=g)
    warm = Evaluator(ks=(1, 2), metrics=names, **options)  # compiles the kernels first
    warm.update(x[rank:300:WORLD], y[rank:300:WORLD], torch.arange(rank, 300, WORLD))
    warm.compute()
    recallkit.retrieval_metrics(
        x[:300], x[:300], y[:300], y[:300], names, query_in_reference=True, **options
    )
    del warm
    mine = torch.arange(rank, MEM_N, WORLD)
    ev = Evaluator(ks=(1, 2), metrics=names, **options)
    for start in range(0, len(mine), 100):
        rows = mine[start : start + 100]
        ev.update(x[rows], y[rows], rows)
    own_x, own_y = x[mine].clone(), y[mine].clone()
    # The engine alone on this rank's rows: its working memory for this many rows.
    _, local = _peak(
        lambda: recallkit.retrieval_metrics(
            own_x, own_x, own_y, own_y, names, query_in_reference=True, **options
        )
    )
    result, sharded = _peak(ev.compute)

    def gathered():  # what gathering every row to this rank would take: the rows, the engine
        rows = x.clone()  # every rank's rows, received and put in dataset order
        return recallkit.retrieval_metrics(
            rows, rows, y, y, names, query_in_reference=True, **options
        )

    _, everything = _peak(gathered)
    return {
        "own_bytes": own_x.numel() * 4,
        "local": local,
        "sharded": sharded,
        "all": everything,
        "values": dict(result),
    }


def _worker(rank, init, out):
    torch.set_num_threads(1)  # the processes share this machine's cores
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    got = {}
    try:
        for name, data, kwargs in CASES:
            x, y = _data(**data)
            ev = Evaluator(**kwargs)
            for xb, yb, ib in _sharded_batches(x, y, rank, seed=data["seed"]):
                ev.update(xb, yb, ib)
            result = ev.compute()
            got[name] = {
                "values": dict(result),
                "ranks": result.first_hit_ranks.tolist(),
                "ids": result.query_ids,
                "bounds": dict(result.bounds),
                "num_tied": result.num_tied,
                "num_queries": result.num_queries,
                "definitions": result.definitions,
                "held": ev.num_rows,
            }

        # A separate gallery: queries and gallery both sharded, the gallery with padding too.
        q, ql = _data(2, n=61)
        gx, gl = _data(3, n=41)
        ev = Evaluator(ks=(1, 2, 5), query_in_reference=False)
        for xb, yb, ib in _sharded_batches(q, ql, rank, seed=4):
            ev.update(xb, yb, ib)
        for xb, yb, ib in _sharded_batches(gx, gl, rank, seed=5, batch_size=16):
            ev.update_reference(xb, yb, ib)
        result = ev.compute()
        got["gallery"] = {
            "values": dict(result),
            "ranks": result.first_hit_ranks.tolist(),
            "ids": result.query_ids,
            "num_reference": result.num_reference,
        }

        # Only rank 0 writes the history; every rank computes.
        x, y = _data(0)
        ev = Evaluator(ks=(1, 2), history=Path(out) / "history.jsonl")
        for xb, yb, ib in _sharded_batches(x, y, rank, seed=0):
            ev.update(xb, yb, ib)
        got["history"] = [dict(ev.compute(tag=f"epoch-{e}")) for e in range(2)]
        dist.barrier()

        # Without ids the rows cannot be told apart from the sampler's repeats.
        try:
            Evaluator().update(x[:4], y[:4])
        except ValueError as error:
            got["no_ids"] = str(error)

        # One rank without rows: every rank gets the same error, none waits forever.
        ev = Evaluator()
        if rank == 0:
            ev.update(x[:4], y[:4], torch.arange(4))
        try:
            ev.compute()
        except RuntimeError as error:
            got["empty_rank"] = str(error)

        try:  # the torchmetrics adapter, where torchmetrics is installed
            from recallkit.integrations.torchmetrics import RetrievalMetrics
        except ImportError:
            pass
        else:
            metric = RetrievalMetrics(ks=(1, 2, 4))
            for xb, yb, ib in _sharded_batches(x, y, rank, seed=0):
                metric.update(xb, yb, ib)
            got["torchmetrics"] = {k: v.item() for k, v in metric.compute().items()}

        got["memory"] = _memory_case(rank)
    finally:
        dist.destroy_process_group()
    with open(Path(out) / f"rank{rank}.pkl", "wb") as handle:
        pickle.dump(got, handle)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both ranks' results (the workers run once for the whole module)."""
    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("measures resident memory through /proc (Linux)")
    out = tmp_path_factory.mktemp("evaluator")
    init = f"file://{tempfile.mktemp(prefix='recallkit-evaluator-')}"
    old = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"  # inherited by the spawned workers
    try:
        ctx = mp.spawn(_worker, args=(init, str(out)), nprocs=WORLD, join=False)
        deadline = time.monotonic() + 300
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                for process in ctx.processes:
                    process.kill()
                pytest.fail("the 2 processes did not finish within 300 s")
    finally:
        if old is None:
            del os.environ["MALLOC_MMAP_THRESHOLD_"]
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = old
    ranks = []
    for rank in range(WORLD):
        with open(out / f"rank{rank}.pkl", "rb") as handle:
            ranks.append(pickle.load(handle))
    return out, ranks


@pytest.mark.parametrize(("name", "data", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_equals_the_single_process_result_on_every_rank(runs, name, data, kwargs):
    _, ranks = runs
    x, y = _data(**data)
    options = {k: v for k, v in kwargs.items() if k != "ks"}
    ks = kwargs.get("ks", (1, 2, 4, 8))
    names = [f"recall@{k}" for k in ks] + ["MAP@R", "R-precision"]
    whole = recallkit.retrieval_metrics(x, x, y, y, names, query_in_reference=True, **options)
    recall = recallkit.recall_at_k(x, x, y, y, ks, query_in_reference=True, **options)
    for got in (r[name] for r in ranks):
        assert got["values"] == dict(whole)  # bit for bit
        assert {k: got["values"][k] for k in recall} == dict(recall)
        assert got["ranks"] == whole.first_hit_ranks.tolist()
        assert list(got["ids"]) == list(range(N))
        assert got["num_queries"] == N  # the padding row counted once
        assert got["bounds"] == dict(whole.bounds) and got["num_tied"] == whole.num_tied
        assert got["definitions"] == whole.definitions
    assert [r[name]["held"] for r in ranks] == [51, 51]  # 101 rows + 1 repeat, split in two
    if name == "dot-ties":
        assert whole.num_tied > 0  # the tie rule decides some queries across shards


def test_separate_gallery_equals_the_single_process_result(runs):
    _, ranks = runs
    q, ql = _data(2, n=61)
    gx, gl = _data(3, n=41)
    names = ["recall@1", "recall@2", "recall@5", "MAP@R", "R-precision"]
    whole = recallkit.retrieval_metrics(q, gx, ql, gl, names, query_in_reference=False)
    for got in (r["gallery"] for r in ranks):
        assert got["values"] == dict(whole)
        assert got["ranks"] == whole.first_hit_ranks.tolist()
        assert list(got["ids"]) == list(range(61)) and got["num_reference"] == 41


def test_only_rank_zero_writes_the_history(runs):
    out, ranks = runs
    records = read_history(out / "history.jsonl")
    assert [r["tag"] for r in records] == ["epoch-0", "epoch-1"]
    x, y = _data(0)
    names = ["recall@1", "recall@2", "MAP@R", "R-precision"]
    whole = dict(recallkit.retrieval_metrics(x, x, y, y, names, query_in_reference=True))
    for record in records:
        assert record["metrics"] == whole and record["num_queries"] == N
    assert ranks[0]["history"] == ranks[1]["history"] == [whole, whole]


def test_ids_are_required_and_empty_ranks_fail_alike(runs):
    _, ranks = runs
    for got in ranks:
        wanted = "'ids' parameter of Evaluator.update must be given under torch.distributed"
        assert f"{wanted} (world size 2)" in got["no_ids"]
        assert got["empty_rank"] == ranks[0]["empty_rank"]
        assert "rank 1 of 2 holds no rows of update" in got["empty_rank"]


def test_torchmetrics_adapter_under_distributed(runs):
    pytest.importorskip("torchmetrics")
    _, ranks = runs
    x, y = _data(0)
    expected = recallkit.retrieval_metrics(
        x,
        x,
        y,
        y,
        ["recall@1", "recall@2", "recall@4", "MAP@R", "R-precision"],
        query_in_reference=True,
    )
    for got in ranks:
        assert got["torchmetrics"] == dict(expected)


def test_memory_per_rank_is_its_own_rows_not_everyone(runs):
    """Peak growth of compute on each rank: at most what the engine takes for the rank's own
    rows alone plus two copies of them (their concatenation; the query chunk exchanged and its
    filter rows, half a copy each here), while gathering every row to a rank (the gathered rows
    and the engine on them) needs more than that bound."""
    _, ranks = runs
    g = torch.Generator().manual_seed(7)
    x = torch.randn(MEM_N, MEM_D, generator=g)
    y = torch.randint(0, 50, (MEM_N,), generator=g)
    expected = recallkit.retrieval_metrics(
        x, x, y, y, ["recall@1", "recall@2"], query_in_reference=True, chunk_size=256
    )
    for got in (r["memory"] for r in ranks):
        assert got["values"] == dict(expected)
        bound = got["local"] + 2 * got["own_bytes"]
        assert got["sharded"] <= bound, got
        assert got["all"] > bound, got  # the bound would catch a rank holding every row
        assert np.isfinite(got["sharded"])
