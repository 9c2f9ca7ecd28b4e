"""The distributed recipe under torchrun (2 gloo processes) prints identical numbers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_recipe_under_torchrun():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",  # a free port: other tests may run at the same time
            "--nproc-per-node",
            "2",
            "-m",
            "docs.recipes.distributed",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    ).stdout
    assert out.count("sharded: recall@1=") == 2
    assert "[rank 1/2] 501 rows held" in out
    assert "identical: True" in out
