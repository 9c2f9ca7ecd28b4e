"""Benchmark: the first call in a fresh process, with numba's kernel cache empty (cold) and full
(warm), next to faiss.

Each case runs in a fresh Python process, ``--repeat`` times, and prints the minimum, median and
maximum of:

* ``import recallkit`` alone;
* the first ``recall_at_k`` (ks 1 and 10) on 300 × 16 float32 rows, leave-one-out, after
  ``import recallkit`` (the call imports torch and the engine);
* the first ``AccuracyCalculator.get_accuracy`` of pytorch-metric-learning (precision_at_1 and
  MAP@R, leave-one-out, 300 × 16) with recallkit's ``ExactKNN`` and with PML's default,
  faiss's ``IndexFlatL2`` (``FaissKNN``), both after PML and torch are imported.

"cold" gives each process an empty cache folder (``NUMBA_CACHE_DIR``), "warm" one that a process
of the same case filled before. The library's default (``RECALLKIT_COLD_START`` unset) runs a
small cold call on the torch back end, which compiles nothing; ``RECALLKIT_COLD_START=compile``
compiles at once, which is what the cold rows marked "compile" cost. The last column says
whether the process printed the compile line. ``--kernels`` prints what the kernels of a first
recall@K and a first MAP@R take to compile (on 300 rows; then, with those cached, on 3,000 rows
the kernels a symmetric pass runs along a tile's columns, and on 20,480 rows, 400 tiles, those of
the low precisions), by the groups of ``recallkit.engine.cpu.first_compile`` (the seconds its
table holds), and numba's start in a process that loads them from the cache (its first kernel:
``cpu.START_SECONDS``).

    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_first_call.py
    uv run --frozen --no-sync --env-file tests/cpu.env python benchmarks/bench_first_call.py \
        --kernels
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = "compiling recallkit's kernels, once:"

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import recallkit
imported = time.perf_counter() - start
import numpy as np
case = sys.argv[1]
rng = np.random.default_rng(0)
x = rng.standard_normal((300, 16)).astype(np.float32)
y = rng.integers(0, 30, 300)
if case == "recall":
    start = time.perf_counter()
    recallkit.recall_at_k(x, x, y, y, ks=(1, 10), query_in_reference=True)
    first = time.perf_counter() - start
else:
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from recallkit.pml import ExactKNN
    knn = {} if case == "faiss" else {"knn_func": ExactKNN()}
    calc = AccuracyCalculator(
        include=("precision_at_1", "mean_average_precision_at_r"),
        device=torch.device("cpu"),
        **knn,
    )
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    start = time.perf_counter()
    calc.get_accuracy(xt, yt, xt, yt, ref_includes_query=True)
    first = time.perf_counter() - start
from recallkit.engine import exact
folder = str(exact._sq_numba._cache.cache_path)
print(json.dumps({"import": imported, "first": first, "folder": folder}))
"""

KERNELS = r"""
import json, sys, threading, time
from numba.core import event
import numpy as np
seconds = {}
local = threading.local()

class Compiles(event.Listener):
    def on_start(self, ev):
        local.depth = getattr(local, "depth", []) + [time.perf_counter()]

    def on_end(self, ev):
        began = local.depth.pop()
        f = ev.data["dispatcher"].py_func
        if f.__module__.startswith("recallkit.") and not local.depth:
            name = f"{f.__module__.rsplit('.', 1)[1]}.{f.__qualname__}"
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - began

event.register("numba:compile", Compiles())
import recallkit
case = sys.argv[1]
# 300 rows: one tile; 3,000: a symmetric pass reads tiles along their columns too; 20,480: 400
# full tiles, where precision="auto" weighs the low precisions.
n = {"recall": 300, "map": 300, "map wide": 3000, "recall wide": 20480}[case]
rng = np.random.default_rng(0)
x = rng.standard_normal((n, 16)).astype(np.float32)
y = rng.integers(0, n // 10, n)
if case.startswith("recall"):
    recallkit.recall_at_k(x, x, y, y, ks=(1, 10), query_in_reference=True)
else:
    recallkit.map_at_r(x, x, y, y, query_in_reference=True)
print(json.dumps(seconds))
"""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown processor"


SOURCE = [ROOT / "src"]  # the source tree timed (--src)


def environment(folder: str, cold_start: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RECALLKIT_COLD_START"}
    env["NUMBA_CACHE_DIR"] = folder
    env["PYTHONPATH"] = os.pathsep.join([str(SOURCE[0]), env.get("PYTHONPATH", "")])
    if cold_start:
        env["RECALLKIT_COLD_START"] = cold_start
    return env


def child(code: str, case: str, folder: str, cold_start: str | None) -> tuple[dict, int]:
    """Run ``code`` for ``case`` in a fresh process; its JSON line and the compile lines it
    printed on stderr."""
    done = subprocess.run(
        [sys.executable, "-c", code, case],
        cwd=ROOT,
        env=environment(folder, cold_start),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode:
        raise SystemExit(f"{case} failed:\n{done.stderr}")
    lines = sum(line.startswith(LINE) for line in done.stderr.splitlines())
    return json.loads(done.stdout.strip().splitlines()[-1]), lines


def spread(values: list[float]) -> str:
    return f"{min(values):6.2f} {statistics.median(values):6.2f} {max(values):6.2f}"


def first_calls(repeat: int, compile_repeat: int) -> None:
    cases = (
        ("recall", "recallkit recall_at_k"),
        ("knn", "PML AccuracyCalculator, recallkit ExactKNN"),
        ("faiss", "PML AccuracyCalculator, faiss IndexFlatL2"),
    )
    print(f"{'case':44s} {'cache':14s} {'first call s: min median max':>28s}  line")
    imports: list[float] = []
    folder_shown = ""
    for case, title in cases:
        modes = [("cold", None, repeat), ("warm", None, repeat)]
        if case != "faiss":
            modes.insert(1, ("cold, compile", "compile", compile_repeat))
        for mode, cold_start, runs in modes:
            times, lines = [], []
            with tempfile.TemporaryDirectory(prefix="recallkit-kernels-") as warm:
                if mode == "warm":  # filled by one process of the same case, compiling
                    child(CHILD, case, warm, "compile")
                for _ in range(runs):
                    with tempfile.TemporaryDirectory(prefix="recallkit-kernels-") as cold:
                        folder = cold if mode.startswith("cold") else warm
                        out, printed = child(CHILD, case, folder, cold_start)
                    times.append(out["first"])
                    imports.append(out["import"])
                    lines.append(printed)
                    folder_shown = folder_shown or out["folder"]
            said = "/".join(sorted({str(n) for n in lines}))
            print(f"{title:44s} {mode:14s} {spread(times):>28s}  {said}", flush=True)
    print(f"import recallkit alone: {spread(imports)} s (min median max of {len(imports)})")
    print(f"cache folder of a run (NUMBA_CACHE_DIR=...): {folder_shown}")


START = r"""
import json, time
import numpy as np
import torch
from recallkit.engine import filters
rows = np.ones((2, 2), np.float32)
kernel = filters._robust_norms_numba  # one that a first recall@K compiles, with these types
start = time.perf_counter()
kernel(rows, rows.view(np.uint32), np.empty(2))
took = time.perf_counter() - start
assert sum(kernel.stats.cache_hits.values()) == 1, "compiled, not loaded"
print(json.dumps({"start": took}))
"""


def group_of(case: str, name: str) -> str | None:
    """The group of ``first_compile`` that a kernel ``case`` compiled belongs to; a wide case
    runs on the cache its small case filled, so that it compiles only what it adds."""
    module = name.split(".", 1)[0]
    if case == "recall":
        return {"filters": "rows", "exact": "exact", "cpu_kernels": "thresholds"}[module]
    if case == "map":
        return "lists" if module == "cpu_kernels" else None
    if name.endswith("_cols"):
        return "threshold columns" if case == "recall wide" else "list columns"
    return "low precision" if case == "recall wide" else "list columns"


def kernels(repeat: int) -> None:
    groups: dict[str, list[float]] = {}
    for _ in range(repeat):
        for small in ("recall", "map"):
            with tempfile.TemporaryDirectory(prefix="recallkit-kernels-") as cold:
                for case in (small, f"{small} wide"):
                    out, _ = child(KERNELS, case, cold, "compile")
                    sums: dict[str, float] = {}
                    for name, seconds in out.items():
                        group = group_of(case, name)
                        if group is not None:
                            sums[group] = sums.get(group, 0.0) + seconds
                    for group, seconds in sums.items():
                        groups.setdefault(group, []).append(seconds)
                    if case == "recall":  # the cache now holds the kernels: numba's start
                        started, _ = child(START, case, cold, "compile")
                        groups.setdefault("start", []).append(started["start"])
    print(f"{'group':18s} {'compile s: min median max':>26s}")
    for group in (
        "rows",
        "exact",
        "thresholds",
        "lists",
        "threshold columns",
        "list columns",
        "low precision",
        "start",
    ):
        print(f"{group:18s} {spread(groups.get(group, [0.0])):>26s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="processes per case (default 5)")
    parser.add_argument(
        "--compile-repeat",
        type=int,
        default=3,
        help="processes per cold case that compiles (default 3)",
    )
    parser.add_argument("--kernels", action="store_true", help="compile seconds by kernel group")
    parser.add_argument(
        "--src", type=Path, default=SOURCE[0], help="the source tree to time (default: ./src)"
    )
    args = parser.parse_args()
    SOURCE[0] = args.src.resolve()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical cores; Python {sys.version.split()[0]}")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(SOURCE[0]), env.get("PYTHONPATH", "")])
    where = "from recallkit.engine import exact; print(exact._sq_numba._cache.cache_path)"
    default = subprocess.run(
        [sys.executable, "-c", where],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"default cache folder (NUMBA_CACHE_DIR unset): {default}")
    if args.kernels:
        kernels(args.repeat)
    else:
        first_calls(args.repeat, args.compile_repeat)


if __name__ == "__main__":
    main()
