"""Sharded evaluation on 1, 2 and 3 gloo processes equals the single-process result, for every
metric of the registry and any integer labels and ids (negative, extreme)."""

from __future__ import annotations

import contextlib
import pickle
import time
from unittest import mock

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import recallkit
from recallkit.engine import device
from tests import registry_cases

# Labels and ids of every sign and size an int64 holds (a negative code once meant "none").
EXTREMES = np.array(
    [-(2**63), -(2**62) - 7, -12, -1, 0, 1, 5, 2**31, 2**40 + 1, 2**62, 2**63 - 2, 2**63 - 1],
    dtype=np.int64,
)


def _data(seed: int, n: int = 100):
    """Dot-product data with exact ties, duplicates across shards and lone queries; labels and
    ids drawn from :data:`EXTREMES` and negative numbers."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-1, 2, size=(n, 4)).astype(np.float32)
    x[rng.integers(0, n, size=n // 3)] = x[5]
    labels = EXTREMES[rng.integers(0, len(EXTREMES), size=n)]
    labels[:3] = [-100, -101, 2**63 - 3]  # lone under leave-one-out
    ids = rng.integers(-20, 20, size=n)
    ids[::17] = EXTREMES[: len(ids[::17])]
    return x, labels, ids


# Every metric of the registry: first-hit ranks (recall@K, MRR, MnR, MedR), lists of K and R.
NAMES = registry_cases.names((1, 2, 5, 20))


def _shards(mode: str, n: int, world: int, seed: int) -> list[np.ndarray]:
    if mode == "sampler":
        # DistributedSampler(shuffle=True)'s assignment: a permutation padded by repetition.
        perm = np.random.default_rng(seed).permutation(n)
        total = -(-n // world) * world
        padded = np.concatenate([perm, perm[: total - n]])
        return [padded[r::world] for r in range(world)]
    # Uneven contiguous shards, one of them small.
    cuts = sorted(np.random.default_rng(seed).choice(np.arange(1, n), world - 1, replace=False))
    return np.split(np.arange(n), cuts)


def _spawn(fn, args, world, limit=240.0):
    """Run ``fn`` on ``world`` processes; fail (and stop them) past ``limit`` seconds."""
    ctx = mp.spawn(fn, args=args, nprocs=world, join=False)
    deadline = time.monotonic() + limit
    while not ctx.join(timeout=5):  # join returns False while some process still runs
        if time.monotonic() > deadline:
            for process in ctx.processes:
                process.kill()
            pytest.fail(f"{world} processes did not finish within {limit} s")


def _worker(rank, world, init, cases, seed, out):
    torch.set_num_threads(1)  # world processes share this machine's cores
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        for i, (mode, kwargs) in enumerate(cases):
            _run_case(rank, world, mode, kwargs, seed, f"{out}.{i}")
    finally:
        dist.destroy_process_group()


def _run_case(rank, world, mode, kwargs, seed, out):
    x, labels, ids = _data(seed)
    if mode == "restarted":  # every rank numbers its own rows from 0: a mistake
        mine = _shards("uneven", len(x), world, seed)[rank]
        try:
            recallkit.evaluate_sharded(
                torch.from_numpy(x[mine]), labels[mine], np.arange(len(mine))
            )
        except ValueError as error:
            message = str(error)
        else:
            message = "no error"
        with open(f"{out}.{rank}", "wb") as handle:
            pickle.dump({"error": message}, handle)
        return
    mine = _shards(mode, len(x), world, seed)[rank]
    extra = {"average": kwargs["average"]} if "average" in kwargs else {}
    if kwargs.get("use_ids"):
        extra = {"ids": ids[mine]}
    if kwargs.get("gallery"):
        gallery = _shards("uneven", len(x), world, seed + 1)[rank]
        q = mine[mine % 2 == 0]
        extra.update(
            reference=torch.from_numpy(x[gallery]),
            reference_labels=labels[gallery],
            reference_indices=gallery,
        )
        if kwargs.get("use_ids"):
            extra.update(ids=ids[q], reference_ids=ids[gallery])
        mine = q
    with contextlib.ExitStack() as stack:
        if kwargs.get("torch_path"):  # the path CUDA runs, with capacities of one slot
            stack.enter_context(mock.patch.dict("os.environ", {"RECALLKIT_BACKEND": "torch"}))
            stack.enter_context(mock.patch.object(device, "MIN_CAPACITY", 1))
            stack.enter_context(mock.patch.object(device, "TOP_EXTRA", 0))
        result = recallkit.evaluate_sharded(
            torch.from_numpy(x[mine]),
            labels[mine],
            mine,
            ks=(1, 2, 5, 20),
            metrics=NAMES,
            metric="dot",
            chunk_size=kwargs.get("chunk_size"),
            **extra,
        )
    with open(f"{out}.{rank}", "wb") as handle:
        pickle.dump(
            {
                "ranks": result.first_hit_ranks.tolist(),
                "values": dict(result),
                "bounds": result.bounds,
                "ids": result.query_ids,
                "labels": result.query_labels,
                "definitions": result.definitions,
                "bytes": result.info["bytes_communicated"],
                "per_query": {k: v.tolist() for k, v in result.per_query.items()},
            },
            handle,
        )


def _single(seed, kwargs):
    x, labels, ids = _data(seed)
    extra = {"query_in_reference": True}
    average = {"average": kwargs["average"]} if "average" in kwargs else {}
    q = np.arange(len(x))
    if kwargs.get("use_ids"):
        extra = {"query_in_reference": True, "query_ids": ids, "reference_ids": ids}
    if kwargs.get("gallery"):
        q = q[q % 2 == 0]
        extra = {}
        if kwargs.get("use_ids"):
            extra = {"query_ids": ids[q], "reference_ids": ids}
    args = (x[q], x, labels[q], labels)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = recallkit.retrieval_metrics(*args, NAMES, metric="dot", **extra, **average)
    return {
        "ranks": r.first_hit_ranks.tolist(),
        "values": dict(r),
        "bounds": r.bounds,
        "ids": q.tolist(),
        "labels": tuple(labels[q].tolist()),
        "definitions": r.definitions,
        "per_query": {k: v.tolist() for k, v in r.per_query.items()},
    }


CASES = {
    # world size: [(shard mode, options)], run in one process group per world size.
    1: [
        ("sampler", {"use_ids": True}),
        ("sampler", {"gallery": True, "average": "class"}),
    ],
    2: [
        ("sampler", {}),
        ("uneven", {"gallery": True}),
        ("sampler", {"torch_path": True, "chunk_size": 9, "average": "class"}),
        ("restarted", {}),
    ],
    3: [
        ("sampler", {"chunk_size": 7}),
        ("uneven", {"use_ids": True}),
        ("sampler", {"gallery": True, "use_ids": True, "chunk_size": 5}),
        ("restarted", {}),
    ],
}


@pytest.mark.parametrize("world", sorted(CASES))
def test_sharded_equals_single_process(tmp_path, world):
    seed = 3
    init = f"file://{tmp_path}/init"
    out = str(tmp_path / "result")
    _spawn(_worker, (world, init, CASES[world], seed, out), world)
    for i, (mode, kwargs) in enumerate(CASES[world]):
        if mode == "restarted":
            for rank in range(world):
                with open(f"{out}.{i}.{rank}", "rb") as handle:
                    message = pickle.load(handle)["error"]
                # Index 0 is held by every rank, with other rows: one line naming 'indices'.
                assert "'indices' parameter of evaluate_sharded" in message, message
                assert "index 0 with another" in message and "\n" not in message
            continue
        _check_case(f"{out}.{i}", world, _single(seed, kwargs))


def _check_case(out, world, expected):
    for rank in range(world):
        with open(f"{out}.{rank}", "rb") as handle:
            got = pickle.load(handle)
        assert list(got["ids"]) == expected["ids"]
        assert got["ranks"] == expected["ranks"]
        assert got["values"] == expected["values"]  # bit for bit, every metric
        assert got["labels"] == expected["labels"]
        assert got["definitions"] == expected["definitions"]
        assert got["bounds"] == expected["bounds"]  # ties broken both ways, exactly
        assert got["bytes"] > 0
        # Every metric's value of every query, bit for bit (NaN for the lone ones).
        assert list(got["per_query"]) == NAMES
        for name in NAMES:
            a, b = np.array(got["per_query"][name]), np.array(expected["per_query"][name])
            assert np.array_equal(a, b, equal_nan=True), name


def test_bad_input_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match=r"initialised torch\.distributed"):
        recallkit.evaluate_sharded(torch.eye(3), [0, 1, 2], [0, 1, 2])
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/init", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match=r"'indices' parameter .* negative at row 1"):
            recallkit.evaluate_sharded(torch.eye(3), [0, 1, 2], [0, -1, 2])
        with pytest.raises(ValueError, match=r"'labels' parameter .* integers"):
            recallkit.evaluate_sharded(torch.eye(3), ["a", "b", "c"], [0, 1, 2])
    finally:
        dist.destroy_process_group()
