"""Exact recall@K after every epoch of a metric-learning training loop, on one or more processes.

Launch on CPU with two processes (gloo), from the repository root::

    uv run --frozen --no-sync torchrun --nproc-per-node 2 -m docs.recipes.training

or on one process::

    uv run --frozen --no-sync python -m docs.recipes.training

A small network is trained with pytorch-metric-learning's ``MultiSimilarityLoss`` on synthetic
class clusters; under ``torchrun`` each process trains on its ``DistributedSampler`` share and
the gradients are averaged across processes after each backward pass, as
``DistributedDataParallel`` does (wrapping the model in it works the same; the recipe averages
by hand to keep its start-up short on the CPU). After every epoch each process
embeds its ``DistributedSampler`` share of the validation split (whose classes the training
never sees, as in the metric-learning benchmarks) and feeds the batches to a
[`recallkit.Evaluator`][recallkit.Evaluator] with their dataset indices; ``compute()`` gives every
process the exact recall@K and MAP@R of the whole split, without any process holding every
embedding, and appends the epoch to a history file (``recallkit plot HISTORY -o recall.png`` draws
it). Rank 0 prints the table.

``--out DIR`` keeps the history there and, for checking, each process's validation embeddings
of each epoch (``epoch-N-rankR.pt``); ``--epochs N`` sets the number of epochs (default 4).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from pytorch_metric_learning import losses
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from recallkit import Evaluator

KS = (1, 2, 4, 8)
LR = 0.3


def synthetic_split(
    n: int, classes: range, dim: int = 32, seed: int = 0, noise: float = 1.4
) -> TensorDataset:
    """Noisy class clusters ``(inputs, labels, dataset indices)``; the class centres depend on
    the class alone, so splits with disjoint ``classes`` share no class."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.tensor(list(classes))[torch.randint(0, len(classes), (n,), generator=g)]
    centres = torch.randn(max(classes) + 1, dim, generator=torch.Generator().manual_seed(1234))
    inputs = centres[labels] + noise * torch.randn(n, dim, generator=g)
    return TensorDataset(inputs, labels, torch.arange(n))


def make_model(dim: int = 32, out: int = 16) -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial model on every process, as DDP requires
    return torch.nn.Sequential(torch.nn.Linear(dim, 64), torch.nn.ReLU(), torch.nn.Linear(64, out))


def average_gradients(model: torch.nn.Module, world: int) -> None:
    """Average the gradients across processes (what DistributedDataParallel does)."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def sgd_step(model: torch.nn.Module, lr: float) -> None:
    """A plain gradient step (a ``torch.optim`` optimiser works the same; the recipe does
    without one to keep its start-up short)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad


def validate(model, loader, evaluator: Evaluator, tag: str, out: Path | None, rank: int):
    """Embed this process's validation share into ``evaluator``; the whole split's result."""
    model.eval()
    evaluator.reset()
    kept = []
    with torch.no_grad():
        for x, y, index in loader:
            embeddings = model(x)
            evaluator.update(embeddings, y, index)
            kept.append((embeddings, y, index))
    result = evaluator.compute(tag=tag)
    if out is not None:  # only for checking the numbers; the evaluation needs none of it
        parts = [torch.cat(p) for p in zip(*kept, strict=True)]
        torch.save(
            dict(zip(("embeddings", "labels", "ids"), parts, strict=True)),
            out / f"{tag}-rank{rank}.pt",
        )
    model.train()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the history's folder (default: a temporary one)")
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args(argv)
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="recallkit-train-"))
    out.mkdir(parents=True, exist_ok=True)

    train = synthetic_split(640, range(0, 40), seed=1)
    val = synthetic_split(301, range(40, 60), seed=2)  # unseen classes; 301 rows: padding
    train_sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    val_sampler = DistributedSampler(val, num_replicas=world, rank=rank, shuffle=True, seed=0)
    train_loader = DataLoader(train, batch_size=64 // world, sampler=train_sampler)
    val_loader = DataLoader(val, batch_size=50, sampler=val_sampler)

    model = make_model()
    loss_fn = losses.MultiSimilarityLoss()
    evaluator = Evaluator(ks=KS, history=out / "history.jsonl")

    results = [validate(model, val_loader, evaluator, "epoch-0", args.out, rank)]
    for epoch in range(1, args.epochs + 1):
        train_sampler.set_epoch(epoch)
        for x, y, _ in train_loader:
            model.zero_grad()
            loss_fn(model(x), y).backward()
            if distributed:
                average_gradients(model, world)
            sgd_step(model, lr=LR)
        results.append(validate(model, val_loader, evaluator, f"epoch-{epoch}", args.out, rank))

    if rank == 0:
        names = [f"recall@{k}" for k in KS] + ["MAP@R"]
        print(
            f"[{world} process{'es' if world > 1 else ''}] exact metrics of the "
            f"{results[0].num_queries} validation rows after each epoch"
        )
        print("epoch  " + "  ".join(f"{n:>8}" for n in names))
        for epoch, result in enumerate(results):
            print(f"{epoch:>5}  " + "  ".join(f"{result[n]:>8.4f}" for n in names))
        print(f"history: {out / 'history.jsonl'}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
