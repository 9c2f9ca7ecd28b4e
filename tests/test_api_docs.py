"""The API reference: every public name has an entry on a reference page, and its docstring
(numpydoc) documents every parameter, what it returns and, for a ranking function, the tie
rule. The site itself is built with warnings as errors by ``.ci/run`` (``mkdocs build
--strict``)."""

from __future__ import annotations

import re
from pathlib import Path

import griffe
import pytest

import recallkit

ROOT = Path(__file__).resolve().parents[1]
# Public names beyond the package root's, documented on the reference pages too.
EXTRA = ["recallkit.pml.ExactKNN", "recallkit.pml.RecallCalculator"]
# The ranking functions and classes: their docstrings name the tie rule.
RANKING = {
    "retrieval_metrics",
    "recall_at_k",
    "map_at_r",
    "r_precision",
    "map_at_k",
    "ground_truth_ranks",
    "ground_truth_ranks_from_embeddings",
    "recall_at_k_from_scores",
    "nearest_neighbors",
    "nearest_neighbors_from_scores",
    "evaluate_sharded",
    "Evaluator",
    "ExactKNN",
    "RecallCalculator",
}


def _paths() -> list[str]:
    """The defining module path of each public name."""
    out = []
    for name in recallkit.__all__:
        obj = getattr(recallkit, name)
        out.append(f"{obj.__module__}.{obj.__qualname__}")
    return out + EXTRA


@pytest.fixture(scope="module")
def package():
    loader = griffe.GriffeLoader(force_inspection=True, docstring_parser="numpy")
    for module in {p.rsplit(".", 1)[0] for p in _paths()}:
        loader.load(module)
    return loader.modules_collection


def test_every_public_name_is_on_a_reference_page():
    pages = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs/reference").glob("*.md"))
    shown = set(re.findall(r"^::: (\S+)", pages, flags=re.MULTILINE))
    assert sorted(set(_paths()) - shown) == []


def _sections(obj) -> dict[str, list]:
    out: dict[str, list] = {}
    for section in obj.docstring.parse("numpy") if obj.docstring else []:
        out.setdefault(section.kind.value, []).append(section)
    return out


def _documented(sections) -> set[str]:
    names = set()
    kinds = ("parameters", "other parameters", "attributes")  # a dataclass: its fields
    for section in [s for kind in kinds for s in sections.get(kind, [])]:
        for item in section.value:
            names.update(part.strip().lstrip("*") for part in item.name.split(","))
    return names


def _check(obj, path: str, problems: list[str], needs_returns: bool) -> None:
    sections = _sections(obj)
    wanted = [
        p.name
        for p in obj.parameters
        if p.name not in ("self", "cls") and p.kind.value != "variadic positional"
    ]
    missing = [n for n in wanted if n not in _documented(sections)]
    if missing:
        problems.append(f"{path}: parameters not documented: {missing}")
    if needs_returns and "returns" not in sections:
        problems.append(f"{path}: no Returns section")


@pytest.mark.parametrize("path", _paths())
def test_every_public_name_documents_its_parameters_and_returns(package, path):
    obj = package[path]
    problems: list[str] = []
    if obj.is_class:
        init = obj.members.get("__init__")
        if init is not None:
            _check(init if init.docstring else obj, path, problems, needs_returns=False)
        for name, member in obj.members.items():
            inherited = name in dir(dict)  # Result's read-only mapping methods
            if name.startswith("_") or inherited or not member.is_function or member.is_alias:
                continue
            returns = str(member.returns) not in ("None", "")
            _check(member, f"{path}.{name}", problems, needs_returns=returns)
    else:
        _check(obj, path, problems, needs_returns=str(obj.returns) != "None")
    text = " ".join((obj.docstring.value if obj.docstring else "").split())
    if path.rsplit(".", 1)[1] in RANKING and "lower reference index" not in text:
        problems.append(f"{path}: the tie rule ('lower reference index') is not stated")
    assert problems == []
