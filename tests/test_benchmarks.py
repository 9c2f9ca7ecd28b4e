"""The GPU benchmark runs from a plain source checkout (``PYTHONPATH=src``), here on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_gpu_smoke_run_on_the_cpu():
    # Without TRITON_INTERPRET the operation counts cover the torch back end alone (interpreted
    # Triton kernels take minutes; tests/core/test_device_settings.py counts their launches).
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT / "src")
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_gpu.py", "--device", "cpu", "--scale", "tiny"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("== tiny: 3,000²") for line in lines)
    rows = {line.split("  ")[0].strip() for line in lines}
    for name in (
        "GEMM floor float32",
        "naive mm+topk(10)",
        "recall_at_k float32",
        "map_at_r float32",
        "r_precision float32",
        "nearest_neighbors k=100 float32",
    ):
        assert name in rows, done.stdout
    assert any("peak GiB  syncs  result" in line for line in lines), done.stdout
    assert "left out" not in done.stdout
    counts = [c for c in map(str.split, lines) if c[:1] == ["torch"] and c[1].isdigit()]
    assert [(c[1], c[2]) for c in counts] == [
        (d, call)
        for d in ("32", "128")
        for call in ("recall_at_k", "map_at_r", "nearest_neighbors")
    ], done.stdout
    for setting in (
        "inside torch.autocast(torch.bfloat16)",
        "inside torch.autocast(torch.float16)",
        "with TF32 float32 products",
        "under deterministic algorithms",
    ):
        assert f"{setting}: ranks differing 0" in lines, done.stdout
