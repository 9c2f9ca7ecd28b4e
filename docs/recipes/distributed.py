"""Sharded evaluation at the end of a DDP epoch: every rank gets the whole split's recall@K.

Launch on CPU with two processes (gloo), from the repository root::

    uv run --frozen --no-sync torchrun --nproc-per-node 2 -m docs.recipes.distributed

Each rank embeds only its ``DistributedSampler`` shard of a synthetic validation split (padding
duplicates included), then calls [`recallkit.evaluate_sharded`][recallkit.evaluate_sharded] with the
dataset indices of its rows. For the demonstration, rank 0 then gathers every shard and runs the
single-process functions on the whole split: the numbers are identical. Run without ``torchrun`` it
uses one process.
"""

from __future__ import annotations

import os
import tempfile

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import recallkit


def synthetic_split(n: int = 1_001, classes: int = 120, dim: int = 32) -> TensorDataset:
    """A validation split of noisy class clusters (inputs) with integer labels."""
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, classes, (n,), generator=g)
    centers = torch.randn(classes, dim, generator=g)
    inputs = centers[labels] + 0.9 * torch.randn(n, dim, generator=g)
    return TensorDataset(inputs, labels)


def embed_shard(model: torch.nn.Module, dataset: TensorDataset, sampler: DistributedSampler):
    """This rank's embeddings, labels and dataset indices, in sampler order."""
    indices = torch.tensor(list(iter(sampler)))
    loader = DataLoader(dataset, batch_size=128, sampler=sampler)
    with torch.inference_mode():
        parts = [(model(x), y) for x, y in loader]
    embeddings = torch.cat([p[0] for p in parts])
    labels = torch.cat([p[1] for p in parts])
    return embeddings, labels, indices


def main() -> None:
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        store = tempfile.mktemp(prefix="recallkit-dist-")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same model on every rank, as DDP keeps it
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 16))
    dataset = synthetic_split()
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
    embeddings, labels, indices = embed_shard(model, dataset, sampler)

    result = recallkit.evaluate_sharded(embeddings, labels, indices, ks=(1, 2, 4, 8))
    sharded = dict(result)
    print(
        f"[rank {rank}/{world}] {len(indices)} rows held; sharded: "
        + "  ".join(f"{k}={v:.4f}" for k, v in sharded.items())
        + f"  ({result.info['bytes_communicated']:,} bytes through collectives)",
        flush=True,
    )
    # For the comparison only (the library never does this): gather every shard, drop the
    # sampler's padding duplicates and order the rows by dataset index.
    gathered = [torch.empty_like(t) for t in (embeddings, labels, indices) for _ in range(world)]
    for i, t in enumerate((embeddings, labels, indices)):
        dist.all_gather(gathered[i * world : (i + 1) * world], t)
    if rank == 0:
        all_x, all_y, all_i = (torch.cat(gathered[i * world : (i + 1) * world]) for i in range(3))
        first = {int(v): j for j, v in reversed(list(enumerate(all_i.tolist())))}
        rows = torch.tensor([first[v] for v in sorted(first)])
        x, y = all_x[rows], all_y[rows]
        names = ["recall@1", "recall@2", "recall@4", "recall@8", "MAP@R", "R-precision"]
        single = recallkit.retrieval_metrics(x, x, y, y, names, query_in_reference=True)
        print(
            "[single process]      all rows; "
            + "  ".join(f"{k}={v:.4f}" for k, v in single.items())
        )
        print(f"identical: {dict(single) == sharded}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
