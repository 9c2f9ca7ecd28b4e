"""The metrics library never imports the application (command line, argparse, runner).

The library is every module of ``recallkit`` except ``__main__`` and the ``cli`` (with its
``errors`` and ``commands``), ``runner`` and ``reports`` packages. ``import recallkit`` and
every library module load no application module, and no package of an extra (Pillow,
matplotlib, torchvision, ...; the extras of ``recallkit._loading``).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import recallkit
from recallkit._loading import PACKAGES

PACKAGE = Path(recallkit.__file__).parent
APP = (
    "recallkit.cli",
    "recallkit.__main__",
    "recallkit.runner",
    "recallkit.reports",
)
# PML (recallkit.pml) imports scikit-learn, scipy and tqdm itself; tests/test_extras.py imports
# every other module with all of them absent.
FORBIDDEN = (*APP, *(m for m in PACKAGES if m not in ("sklearn", "scipy", "tqdm")))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_app(name: str) -> bool:
    return any(name == app or name.startswith(app + ".") for app in APP)


LIBRARY = sorted(name for name in map(_module_name, PACKAGE.rglob("*.py")) if not _is_app(name))


def test_the_library_is_what_remains():
    assert "recallkit.retrieval" in LIBRARY and "recallkit.protocols.cirr" in LIBRARY
    assert "recallkit.datasets.base" in LIBRARY and "recallkit._inputs.io" in LIBRARY
    assert not [name for name in LIBRARY if "runner" in name or "commands" in name]
    assert not [name for name in LIBRARY if "reports" in name]


def _imported(path: Path) -> list[str]:
    """Every module named by an import statement of ``path``, at any depth of the code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module == "recallkit":  # ``from recallkit import runner``
                names += [f"recallkit.{a.name}" for a in node.names]
            else:
                names.append(node.module)
    return names


def test_no_library_module_names_the_app_layer():
    """Not even inside a function (Pillow may be, to read an image when asked to)."""
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        if name != "recallkit" and not _is_app(name):
            bad = [m for m in _imported(path) if _is_app(m)]
            if bad:
                offenders[name] = bad
    assert offenders == {}


def test_the_check_sees_an_app_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f():\n    from recallkit.cli.errors import UsageError\n"
        "import numpy\nfrom recallkit import runner\n"
    )
    assert sorted(_imported(bad)) == ["numpy", "recallkit.cli.errors", "recallkit.runner"]


def test_importing_the_library_loads_no_app_images_or_plots():
    """One interpreter imports ``recallkit`` and then each library module in turn.

    After each import, the forbidden modules must still be absent: the first module that
    loads one (itself or through its imports) is the one reported.
    """
    script = (
        "import importlib, json, sys\n"
        f"forbidden = {FORBIDDEN!r}\n"
        "def loaded():\n"
        "    return sorted(m for m in sys.modules if m.split('.')[0] in forbidden\n"
        "                  or any(m == f or m.startswith(f + '.') for f in forbidden))\n"
        "found = {}\n"
        f"for name in {['recallkit', *LIBRARY]!r}:\n"
        "    importlib.import_module(name)\n"
        "    if loaded():\n"
        "        found[name] = loaded()\n"
        "        break\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


def test_the_root_loads_names_on_first_use():
    script = (
        "import sys, recallkit\n"
        "before = 'torch' in sys.modules or 'recallkit.retrieval' in sys.modules\n"
        "f = recallkit.recall_at_k\n"
        "from recallkit import map_at_r\n"
        "print(before, f.__module__, map_at_r.__module__, 'recallkit.runner' in sys.modules,\n"
        "      recallkit.ground_truth.__name__, hasattr(recallkit, 'nope'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [
        "False",
        "recallkit.retrieval",
        "recallkit.retrieval",
        "False",
        "recallkit.ground_truth",
        "False",
    ]


# ---------------------------------------------------------------------------------------------
# The import graph: no circle, no upward arrow, no private name across the engine's modules.

#: Layers, lowest first: a module imports only its own layer or lower ones. Inside the engine,
#: the shared pieces come first, the back ends beside each other above them, the dispatcher
#: (the package itself) on top.
LAYERS = (
    ("recallkit.exceptions",),
    ("recallkit._inputs.pinned",),
    ("recallkit.options",),
    ("recallkit._inputs.checks", "recallkit._inputs.codes", "recallkit.runfiles._atomic"),
    ("recallkit._inputs.io",),
    ("recallkit.engine.jit", "recallkit.engine.scratch"),
    (
        "recallkit.engine.exact",
        "recallkit.engine.ties",
        "recallkit.engine.cpu_kernels",
        "recallkit.engine.lowp",
        "recallkit.engine.triton_kernels",
    ),
    ("recallkit.engine.filters",),
    ("recallkit.engine.space",),
    ("recallkit.engine.pairs",),
    ("recallkit.engine.protocol",),
    ("recallkit.engine.consumers", "recallkit.engine.device_steps"),
    ("recallkit.engine.cpu", "recallkit.engine.device", "recallkit.engine.matrix"),
    ("recallkit.engine.triton_backend",),
    ("recallkit.engine",),
)


def _graph() -> dict[str, set[str]]:
    """Module -> the recallkit modules it imports (any depth of its code)."""
    names = set(map(_module_name, PACKAGE.rglob("*.py")))
    out: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # ``from a.b import c``: the module a.b.c if it is one, else names of a.b.
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in names else node.module)
        out[name] = {m for m in found if m in names and m != name}
    return out


def _layer(name: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if name in layer:
            return i
    return None


def test_the_import_graph_has_no_circle():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_no_module_imports_upwards():
    graph = _graph()
    upward = []
    for name, imported in graph.items():
        mine = _layer(name)
        for other in imported:
            theirs = _layer(other)
            if mine is not None and theirs is not None and theirs > mine:
                upward.append((name, other))
            # The engine never reaches into the library above it.
            if name.startswith("recallkit.engine") and theirs is None and other != "recallkit":
                upward.append((name, other))
            if name.startswith("recallkit.engine") and other == "recallkit":
                upward.append((name, other))
    assert upward == []
    assert {m for m in graph if m.startswith("recallkit.engine")} <= {
        m for layer in LAYERS for m in layer
    }


def test_no_private_name_crosses_the_engines_modules():
    crossing = []
    engine = PACKAGE / "engine"
    for path in engine.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("recallkit"):
                for alias in node.names:
                    if alias.name.startswith("_") and node.module != "recallkit":
                        crossing.append((path.name, alias.name))
                    modules.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                crossing.append((path.name, f"{node.value.id}.{node.attr}"))
    assert crossing == []


def test_the_package_root_lists_only_its_public_names():
    import recallkit

    names = dir(recallkit)
    assert names == sorted(["__version__", *recallkit.__all__])
    for helper in ("Any", "TYPE_CHECKING", "annotations", "importlib"):
        assert helper not in names
    assert all(hasattr(recallkit, name) for name in recallkit.__all__)
