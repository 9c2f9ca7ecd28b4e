"""The protocols and the benchmark loaders import the metric modules, never the package root.

``from recallkit import ground_truth_ranks`` would run ``recallkit/__init__`` for a name that
lives in ``recallkit.ranks``, and ties the protocols to whatever the root re-exports. Private
submodules (``from recallkit import _checks``) are modules, and allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import recallkit

PACKAGE = Path(recallkit.__file__).parent
LAYERS = sorted([*PACKAGE.glob("protocols/*.py"), *PACKAGE.glob("datasets/*.py")])


def _is_module(name: str) -> bool:
    return (PACKAGE / f"{name}.py").is_file() or (PACKAGE / name / "__init__.py").is_file()


def _root_names(path: Path) -> list[str]:
    """Names a module imports from the package root that are not submodules."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "recallkit" and not node.level:
            names += [a.name for a in node.names if not _is_module(a.name)]
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names if a.name == "recallkit"]
    return names


@pytest.mark.parametrize("path", LAYERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_imports_name_the_metric_module(path):
    assert _root_names(path) == []


def test_the_check_sees_a_root_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from recallkit import engine, ground_truth_ranks\nimport recallkit\n")
    assert _root_names(bad) == ["ground_truth_ranks", "recallkit"]
