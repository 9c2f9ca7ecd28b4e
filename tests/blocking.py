"""Run Python as on an install without some packages: a fresh interpreter whose imports of the
named modules fail as they would there.

A ``missing`` module raises ``ModuleNotFoundError`` (as when it is not installed: PML, for
example, imports without faiss then); a ``broken`` one raises the given error on import (as a
torchvision built for another torch raises ``RuntimeError: operator torchvision::nms does not
exist``). The finder is installed first thing, from the source of the ``-c`` script, so the
child needs nothing from this repository on its path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The packages of every extra: absent together, they leave the core install.
OPTIONAL = (
    "PIL",
    "torchvision",
    "safetensors",
    "tqdm",
    "matplotlib",
    "scipy",
    "sklearn",
    "torchmetrics",
    "lightning",
)
#: The optional packages a core install lacks (PML brings scikit-learn, scipy and tqdm).
NOT_IN_CORE = ("PIL", "torchvision", "safetensors", "matplotlib", "torchmetrics", "lightning")

_PREAMBLE = """\
import builtins, importlib.abc, sys
class _Blocked(importlib.abc.MetaPathFinder):
    missing = {missing!r}
    broken = {broken!r}
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in self.missing:
            raise ModuleNotFoundError(f"No module named {{top!r}}", name=top)
        if top in self.broken:
            kind, text = self.broken[top]
            raise getattr(builtins, kind)(text)
        return None
sys.meta_path.insert(0, _Blocked())
"""


def preamble(missing: Sequence[str] = (), broken: Mapping[str, tuple[str, str]] | None = None):
    """The source that installs the finder: ``broken`` maps a module to ``(error type, text)``."""
    return _PREAMBLE.format(missing=tuple(missing), broken=dict(broken or {}))


def run_python(
    code: str,
    *,
    missing: Sequence[str] = (),
    broken: Mapping[str, tuple[str, str]] | None = None,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with ``missing`` and ``broken`` modules."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", preamble(missing, broken) + code],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_cli(
    argv: Sequence[object],
    *,
    missing: Sequence[str] = (),
    broken: Mapping[str, tuple[str, str]] | None = None,
    cwd: Path,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``recallkit ARGV`` (its console entry point) with ``missing`` and ``broken`` modules."""
    code = (
        "import sys\n"
        f"sys.argv = ['recallkit', *{[str(a) for a in argv]!r}]\n"
        "from recallkit.cli import entry\n"
        "entry()\n"
    )
    return run_python(code, missing=missing, broken=broken, cwd=cwd, env=env)


def files_under(folder: Path) -> list[str]:
    """Every file and folder under ``folder``, relative, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
