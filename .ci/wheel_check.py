"""Check the installed wheel, run by ``.ci/wheel-check`` with the Python of a clean virtual
environment that holds the wheel and the core dependencies only, in an empty folder outside the
source tree: ``python wheel_check.py README.md docs/recipes/evaluation.py``.

It checks that recallkit comes from that environment (not the source tree), with ``py.typed``
and without the extras' packages; runs the README's "recall@K in ten lines" block and compares
its output with the README's; runs ``recallkit --version`` and ``recallkit evaluate`` on saved
``.npy`` arrays; checks the one-line error (exit status 2) of ``recallkit demo`` and ``recallkit
plot`` without their extras, and that they wrote nothing; and runs a copy of the evaluation
recipe (torch, numpy, PML and faiss-cpu, all in the core) against the README's table. Only the
standard library and the core install are used; any failure exits with status 1.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import io
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path.cwd()
BIN = Path(sys.executable).parent
CHECKS: list[str] = []
TIMES: list[tuple[str, float]] = []
_CLOCK = [time.perf_counter()]


def lap(name: str) -> None:
    """Record the seconds since the previous lap under ``name``."""
    now = time.perf_counter()
    TIMES.append((name, now - _CLOCK[0]))
    _CLOCK[0] = now


def check(condition: bool, what: str, detail: object = "") -> None:
    if not condition:
        print(f"wheel check FAILED: {what}\n{detail}", file=sys.stderr)
        sys.exit(1)
    CHECKS.append(what)


def block_after(text: str, heading: str, lang: str, start: int = 0) -> tuple[str, int]:
    """The first ``lang`` block after ``heading`` (from ``start``), and where it ends."""
    at = text.index(heading, start) if heading else start
    match = re.compile(rf"^```{lang}\n(.*?)^```$", re.M | re.S).search(text, at)
    assert match is not None, f"no {lang} block after {heading!r}"
    return match.group(1), match.end()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "recallkit"), *args], capture_output=True, text=True, timeout=600
    )


def one_error_line(done: subprocess.CompletedProcess[str], command: str, extra: str) -> None:
    lines = done.stderr.splitlines()
    check(done.returncode == 2, f"recallkit {command} without its extra exits 2", done)
    check(len(lines) == 1, f"recallkit {command} without its extra prints one line", done.stderr)
    check(
        lines[0].startswith(f"recallkit {command}: error: ")
        and f"(the '{extra}' extra)" in lines[0]
        and "pip install" in lines[0],
        f"recallkit {command}'s line names the '{extra}' extra and the install command",
        lines[0],
    )


def main() -> None:
    readme_path, recipe_path = Path(sys.argv[1]), Path(sys.argv[2])
    readme = readme_path.read_text(encoding="utf-8")
    source_tree = readme_path.resolve().parent
    started = _CLOCK[0] = time.perf_counter()

    # The installed package, not the source tree; core dependencies only.
    import recallkit

    location = Path(recallkit.__file__).resolve()
    check(source_tree not in location.parents, "recallkit is imported from the wheel", location)
    check((location.parent / "py.typed").is_file(), "the wheel holds py.typed")
    version = importlib.metadata.version("recallkit")
    for module in ("PIL", "matplotlib", "torchvision", "safetensors"):
        check(importlib.util.find_spec(module) is None, f"{module} is not in the core install")
    for module in ("numpy", "torch", "numba", "threadpoolctl", "pytorch_metric_learning", "faiss"):
        check(importlib.util.find_spec(module) is not None, f"{module} is in the core install")
    lap("import")

    # The README's library example, and its output as the README shows it.
    code, end = block_after(readme, "## recall@K in ten lines", "python")
    want, _ = block_after(readme, "", "text", end)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    check(out.getvalue() == want, "the README's recall@K example prints its output", out.getvalue())
    lap("README example")

    # The command line: its version, and evaluate on saved arrays.
    done = cli("--version")
    check(done.stdout.strip() == f"recallkit {version}", "recallkit --version", done)
    lap("--version")
    import numpy as np

    x = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]], dtype=np.float32)
    np.save(HERE / "x.npy", x)
    np.save(HERE / "y.npy", np.array(["cat", "cat", "dog", "dog"]))
    done = cli(
        "evaluate", "--embeddings", "x.npy", "--labels", "y.npy", "--ks", "1", "2", "--worst", "0"
    )
    check(done.returncode == 0, "recallkit evaluate --embeddings --labels runs", done)
    metrics = re.findall(r"^\s+(recall@\d+):\s+([\d.]+)$", done.stdout, flags=re.M)
    check(metrics == [("recall@1", "0.5000"), ("recall@2", "1.0000")], "its values", done.stdout)
    lap("evaluate")

    # Features whose extra is absent: one line, exit status 2, nothing written.
    before = sorted(p.name for p in HERE.iterdir())
    one_error_line(cli("demo", "--out", "demo-out", "--fast"), "demo", "demo")
    (HERE / "runs.jsonl").write_text('{"tag": "a", "recall": {"recall@1": 0.5}}\n')
    before.append("runs.jsonl")
    one_error_line(cli("plot", "runs.jsonl", "-o", "recall.png"), "plot", "plot")
    check(sorted(p.name for p in HERE.iterdir()) == sorted(before), "they wrote nothing")
    lap("demo and plot")

    # A copy of the evaluation recipe, as a user copies it: the README's table.
    shutil.copy(recipe_path, HERE / "evaluation.py")
    done = subprocess.run(
        [sys.executable, "evaluation.py"], capture_output=True, text=True, timeout=600
    )
    table, _ = block_after(readme, "## Quick start", "text")
    check(done.returncode == 0 and done.stdout == table, "the recipe copy prints the table", done)
    lap("recipe")

    seconds = time.perf_counter() - started
    laps = ", ".join(f"{name} {t:.1f} s" for name, t in TIMES)
    print(f"wheel check: {len(CHECKS)} checks passed in {seconds:.1f} s ({laps})")


if __name__ == "__main__":
    main()
