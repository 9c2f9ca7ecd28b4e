"""The API reference: every public name a user imports has an entry on a reference page, and
every name on a reference page is documented in numpydoc: each parameter with its type, what it
returns and, for a ranking function, the tie rule.

The names on the pages are read from the pages themselves: each ``::: path`` directive, and,
for a module or a class, the members the directive shows (its ``members:`` option, else the
public ones). They are loaded by inspection, as the site loads them, with the site's griffe
extension (``docs/reference/inspection.py``). The site itself is built with warnings as errors
by ``.ci/run`` (``mkdocs build --strict``) and by ``tests/test_site.py``.
"""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from pathlib import Path

import griffe
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "reference"
# The modules whose public names (``__all__``) a user imports: each name has a page entry.
PUBLIC = ["recallkit", "recallkit.datasets", "recallkit.protocols", "recallkit.reports"]
# Public names outside those ``__all__`` lists, documented on the reference pages too.
EXTRA = [
    "recallkit.pml.ExactKNN",
    "recallkit.pml.RecallCalculator",
    "recallkit.integrations.torchmetrics.RetrievalMetrics",
    "recallkit.integrations.lightning.RetrievalCallback",
]
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
    "RetrievalMetrics",
    "RetrievalCallback",
    "evaluate_benchmark",
    "image_text_recall",
    "image_text_recall_from_scores",
    "cirr_recall",
    "cirr_recall_from_scores",
    "cirr_rankings",
    "cirr_rankings_from_scores",
    "circo_metrics",
    "circo_metrics_from_scores",
    "circo_rankings",
    "circo_rankings_from_scores",
    "fashioniq_recall",
    "fashioniq_recall_from_scores",
    "genecis_recall",
    "genecis_recall_from_embeddings",
}
TIE_RULE = "lower reference index"
DIRECTIVE = re.compile(r"^::: (\S+)[ \t]*\n((?:[ \t]+\S.*(?:\n|$))*)", re.MULTILINE)


def _directives() -> list[tuple[str, str, dict]]:
    """Each reference page's ``:::`` directives: (page, dotted path, options)."""
    out = []
    for page in sorted(PAGES.glob("*.md")):
        for found in DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            block = yaml.safe_load(textwrap.dedent(found.group(2))) if found.group(2) else None
            out.append((page.name, found.group(1), (block or {}).get("options") or {}))
    return out


DIRECTIVES = _directives()


def _module_of(path: str) -> str:
    """The longest importable module that ``path`` starts with."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        try:
            importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        return ".".join(parts[:end])
    raise ImportError(path)


@pytest.fixture(scope="module")
def loader():
    extensions = griffe.load_extensions(str(PAGES / "inspection.py"))
    return griffe.GriffeLoader(
        force_inspection=True, docstring_parser="numpy", extensions=extensions
    )


def _load(loader, path: str):
    """The griffe object of ``path``; its package is loaded (inspected) once."""
    try:
        return loader.modules_collection[path]
    except KeyError:
        loader.load(_module_of(path))
    return loader.modules_collection[path]


def _target(obj):
    return obj.final_target if obj.is_alias else obj


def _runtime(path: str):
    """The Python object of the dotted ``path``."""
    module = _module_of(path)
    obj = importlib.import_module(module)
    for part in path[len(module) + 1 :].split(".") if path != module else []:
        obj = getattr(obj, part)
    return obj


def _shown(obj, options: dict) -> list:
    """The objects a directive shows: the object, and the members it lists."""
    obj = _target(obj)
    out = [obj]
    if not (obj.is_module or obj.is_class) or options.get("members") is False:
        return out
    names = options.get("members")
    if not isinstance(names, list):
        names = obj.exports if obj.is_module and obj.exports is not None else obj.members
        names = [str(n) for n in names if not str(n).startswith("_")]
        if obj.is_class and issubclass(_runtime(obj.path), dict):
            names = [n for n in names if n not in dir(dict)]  # Result's read-only mapping methods
        else:
            names = [n for n in names if n in (obj.exports or ()) or not obj.members[n].is_alias]
    for name in names:
        member = _target(obj.members[name])
        out += _shown(member, {}) if obj.is_module and member.is_class else [member]
    return out


def _sections(obj) -> dict[str, list]:
    out: dict[str, list] = {}
    for section in obj.docstring.parse("numpy") if obj.docstring else []:
        out.setdefault(section.kind.value, []).append(section)
    return out


def _documented(sections) -> dict[str, str]:
    """Each documented parameter (or dataclass field) and its type as the docstring gives it."""
    names = {}
    kinds = ("parameters", "other parameters", "attributes")  # a dataclass: its fields
    for section in [s for kind in kinds for s in sections.get(kind, [])]:
        for item in section.value:
            for part in item.name.split(","):
                names[part.strip().lstrip("*")] = str(item.annotation or "")
    return names


def problems_of(obj) -> list[str]:
    """What the docstring of ``obj`` (a griffe object) lacks; empty when documented."""
    path = obj.path
    if not obj.docstring or not obj.docstring.value.strip():
        return [f"{path}: no docstring"]
    out = []
    if obj.is_function or obj.is_class:
        function = obj
        if obj.is_class:
            init = obj.members.get("__init__")
            function = init if init is not None and not init.is_alias else obj
        sections = _sections(obj)
        if function is not obj and function.docstring:
            for kind, found in _sections(function).items():
                sections.setdefault(kind, []).extend(found)
        documented = _documented(sections)
        stray = [n for n in documented if not n.isidentifier()]  # prose after a section
        if stray:
            out.append(f"{path}: text read as a parameter or attribute: {stray}")
        wanted = [
            p.name
            for p in function.parameters
            if p.name not in ("self", "cls") and p.kind.value != "variadic positional"
        ]
        missing = [n for n in wanted if n not in documented]
        if missing:
            out.append(f"{path}: parameters not documented: {missing}")
        untyped = [n for n in wanted if n in documented and not documented[n]]
        if untyped:
            out.append(f"{path}: parameters without a type: {untyped}")
        if obj.is_function and "property" not in obj.labels:
            if str(obj.returns) not in ("None", "") and "returns" not in sections:
                out.append(f"{path}: no Returns section")
    if obj.name in RANKING and TIE_RULE not in " ".join(obj.docstring.value.split()):
        out.append(f"{path}: the tie rule ({TIE_RULE!r}) is not stated")
    return out


def _home(package: str, name: str) -> str:
    """The dotted path of the public ``name`` of ``package`` where it is defined."""
    obj = getattr(importlib.import_module(package), name)
    if hasattr(obj, "__qualname__") and hasattr(obj, "__module__"):
        return f"{obj.__module__}.{obj.__qualname__}"
    # A constant: the submodule that defines it is the one whose __all__ lists it.
    for module in sorted(m for m in sys.modules if m.startswith(package + ".")):
        if name in getattr(sys.modules[module], "__all__", ()):
            return f"{module}.{name}"
    return f"{package}.{name}"


def test_every_public_name_is_on_a_reference_page(loader):
    public = set(EXTRA)
    for package in PUBLIC:
        public.update(_home(package, name) for name in importlib.import_module(package).__all__)
    shown = {
        o.path for _, path, options in DIRECTIVES for o in _shown(_load(loader, path), options)
    }
    assert sorted(public - shown) == []


@pytest.mark.parametrize(
    ("page", "path", "options"), DIRECTIVES, ids=[f"{p}:{d}" for p, d, _ in DIRECTIVES]
)
def test_every_name_on_a_page_is_documented(loader, page, path, options):
    problems = [p for obj in _shown(_load(loader, path), options) for p in problems_of(obj)]
    assert problems == []


def test_the_check_fails_on_a_missing_section():
    """The check itself can fail: a function without Returns, a parameter without a type or not
    documented, a class whose ``__init__`` parameter is missing, a ranking function without its
    tie rule, and a constant without a docstring are each reported."""
    code = textwrap.dedent(
        '''
        LIMIT = 3

        def scale(x: float, factor: float = 2.0) -> float:
            """Scale.

            Parameters
            ----------
            x : float
                The value.
            """

        def untyped(x) -> None:
            """Untyped.

            Parameters
            ----------
            x
                The value.
            """

        class Box:
            """A box.

            Attributes
            ----------
            side : int
                Its side.

            A paragraph that reads as an attribute.
            """

            def __init__(self, size: int) -> None:
                self.size = size

        def recall_at_k(x: int) -> int:
            """Recall.

            Parameters
            ----------
            x : int
                The value.

            Returns
            -------
            int
                The same.
            """

        def fine(x: int) -> int:
            """Fine.

            Parameters
            ----------
            x : int
                The value.

            Returns
            -------
            int
                The same.
            """
        '''
    )
    module = griffe.visit("fake", Path("fake.py"), code, docstring_parser="numpy")
    found = {name: problems_of(module[name]) for name in module.members}
    assert found == {
        "LIMIT": ["fake.LIMIT: no docstring"],
        "scale": [
            "fake.scale: parameters not documented: ['factor']",
            "fake.scale: no Returns section",
        ],
        "untyped": ["fake.untyped: parameters without a type: ['x']"],
        "Box": [
            (
                "fake.Box: text read as a parameter or attribute: "
                "['A paragraph that reads as an attribute.']"
            ),
            "fake.Box: parameters not documented: ['size']",
        ],
        "recall_at_k": ["fake.recall_at_k: the tie rule ('lower reference index') is not stated"],
        "fine": [],
    }
