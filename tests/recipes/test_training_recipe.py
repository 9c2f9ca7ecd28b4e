"""The training recipe under torchrun (2 gloo processes) and on one process: each epoch's
numbers equal the single-process metrics of that epoch's validation embeddings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import recallkit
from recallkit.runner import read_history

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["recall@1", "recall@2", "recall@4", "recall@8", "MAP@R", "R-precision"]
EPOCHS = 2


def _whole_split(out: Path, tag: str, world: int):
    """Every process's saved rows of one epoch, each dataset index once, in index order."""
    parts = [torch.load(out / f"{tag}-rank{r}.pt") for r in range(world)]
    x = torch.cat([p["embeddings"] for p in parts])
    y = torch.cat([p["labels"] for p in parts])
    ids = torch.cat([p["ids"] for p in parts])
    first = {int(i): j for j, i in reversed(list(enumerate(ids.tolist())))}
    rows = torch.tensor([first[i] for i in sorted(first)])
    return x[rows], y[rows], len(ids)


@pytest.mark.parametrize("world", [2, 1])
def test_training_recipe(tmp_path, world):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    # --standalone: a free port, as other tests may run at the same time.
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(world),
    ]
    command = [
        *(launch if world > 1 else [sys.executable]),
        "-m",
        "docs.recipes.training",
        "--out",
        str(tmp_path),
        "--epochs",
        str(EPOCHS),
    ]
    out = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=True
    ).stdout
    label = "[2 processes]" if world > 1 else "[1 process]"
    assert f"{label} exact metrics of the 301 validation rows after each epoch" in out
    records = read_history(tmp_path / "history.jsonl")
    assert [r["tag"] for r in records] == [f"epoch-{e}" for e in range(EPOCHS + 1)]
    table = [line.split() for line in out.splitlines() if line[:5].strip().isdigit()]
    assert len(table) == EPOCHS + 1
    for epoch, (record, row) in enumerate(zip(records, table, strict=True)):
        x, y, held = _whole_split(tmp_path, f"epoch-{epoch}", world)
        assert len(x) == 301 and held == (302 if world > 1 else 301)  # one padding row
        whole = recallkit.retrieval_metrics(x, x, y, y, NAMES, query_in_reference=True)
        assert record["metrics"] == dict(whole)  # exact: the history keeps the floats
        assert row == [str(epoch)] + [f"{whole[n]:.4f}" for n in NAMES[:5]]
    assert records[-1]["metrics"]["MAP@R"] > records[0]["metrics"]["MAP@R"]  # it trained
