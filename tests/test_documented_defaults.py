"""Every default a public docstring names is its signature's default.

A numpydoc entry ``name : type, default X`` (a Python literal, or a name of the callable's
module that holds the value) and a choice marked ``'X' (default...)`` in the entry's text must
name the value the signature gives ``name`` (a default said in words, ``default every format``,
names no value to compare): the page a user reads and the
call they make agree. The public callables are those of ``recallkit.__all__``, of
``recallkit.pml``, ``recallkit.comparison`` and ``recallkit.stats``, and every name the
reference pages (``docs/reference/*.md``) show, with the public methods of each class.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import types
from pathlib import Path

import pytest

import recallkit

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("recallkit.pml", "recallkit.comparison", "recallkit.stats")
ENTRY = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*:\s*(.*)$")
TYPE_DEFAULT = re.compile(r"(?:^|,)\s*default[:=]?\s+(.+?)\s*$")
MARKED = re.compile(r"""(['"])([^'"]+)\1\s*\(default\b""")


def _module_members(module: types.ModuleType) -> list[tuple[str, object]]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    out = []
    for name in names:
        obj = getattr(module, name)
        if callable(obj) and getattr(obj, "__module__", None) == module.__name__:
            out.append((f"{module.__name__}.{name}", obj))
    return out


def _resolve(path: str) -> object:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


def public_callables() -> dict[str, object]:
    """Each public callable by its dotted path, classes' public methods included."""
    found: dict[str, object] = {}
    for name in recallkit.__all__:
        obj = getattr(recallkit, name)
        if callable(obj):
            found[f"recallkit.{name}"] = obj
    for module in MODULES:
        found.update(_module_members(importlib.import_module(module)))
    for page in sorted((ROOT / "docs/reference").glob("*.md")):
        for target in re.findall(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.MULTILINE):
            obj = _resolve(target)
            if isinstance(obj, types.ModuleType):
                found.update(_module_members(obj))
            elif callable(obj):
                found[target] = obj
    for path, obj in list(found.items()):
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                if name.startswith("_") and name != "__call__":
                    continue
                if isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                if inspect.isfunction(member):
                    found[f"{path}.{name}"] = getattr(obj, name)
    return found


def parameter_entries(doc: str) -> list[tuple[list[str], str, str]]:
    """``(names, type, text)`` of each entry of the numpydoc ``Parameters`` and ``Other
    Parameters`` sections of ``doc``."""
    lines = inspect.cleandoc(doc).splitlines()
    entries: list[tuple[list[str], str, str]] = []
    inside = False
    for i, line in enumerate(lines):
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()):
            inside = line.strip() in ("Parameters", "Other Parameters")
            continue
        if not inside or re.fullmatch(r"-{3,}", line.strip()):
            continue
        match = ENTRY.match(line)
        if match and not line.startswith(" "):
            names = [n.strip().lstrip("*") for n in match.group(1).split(",")]
            entries.append((names, match.group(2), ""))
        elif entries and line.startswith(" "):
            names, kind, text = entries[-1]
            entries[-1] = (names, kind, f"{text} {line.strip()}")
    return entries


def _same(written: str, default: object, where: dict) -> bool | None:
    """Whether ``written`` (a docstring's default) names ``default``: a Python literal, or a
    name of the callable's module (``FASHIONIQ_CATEGORIES``) that holds it; ``None`` for words
    (``every format``), which name no value to compare."""
    try:
        value = ast.literal_eval(written.replace("_", "") if written[:1].isdigit() else written)
    except (ValueError, SyntaxError):
        if re.fullmatch(r"[A-Za-z_][\w.]*", written):
            head, *rest = written.split(".")
            if head not in where:
                return written in (getattr(default, "__name__", None), repr(default))
            value = where[head]
            for part in rest:
                value = getattr(value, part)
            return value is default or value == default
        return None
    if isinstance(value, tuple | list) and isinstance(default, tuple | list):
        return tuple(value) == tuple(default)
    return type(value) is type(default) and value == default


def mismatches(obj: object) -> list[str]:
    """What ``obj``'s docstring says of its defaults that its signature does not."""
    doc = inspect.getdoc(obj)
    if not doc:
        return []
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    params = signature.parameters
    where = vars(inspect.getmodule(obj) or recallkit)
    problems = []
    for names, kind, text in parameter_entries(doc):
        written = TYPE_DEFAULT.search(kind)
        marked = MARKED.search(text) if kind.lstrip().startswith("{") else None
        for name in names:
            if name not in params:
                continue
            default = params[name].default
            if written is not None:
                if default is inspect.Parameter.empty:
                    problems.append(
                        f"{name}: documented default {written.group(1)}, none in the signature"
                    )
                elif _same(written.group(1), default, where) is False:
                    problems.append(
                        f"{name}: documented default {written.group(1)}, signature {default!r}"
                    )
            if marked is not None and default is not inspect.Parameter.empty:
                if marked.group(2) != default:
                    problems.append(
                        f"{name}: {marked.group(0)!r} in its text, signature {default!r}"
                    )
    return problems


PUBLIC = public_callables()


def test_the_public_callables_are_found():
    for path in (
        "recallkit.pml.ExactKNN",
        "recallkit.pml.RecallCalculator",
        "recallkit.pml.ExactKNN.__call__",
        "recallkit.Evaluator",
        "recallkit.Options",
        "recallkit.comparison.compare",
        "recallkit.recall_at_k",
    ):
        assert any(k == path or k.endswith(path.split(".", 1)[1]) for k in PUBLIC), path
    checked = [
        p
        for p, obj in PUBLIC.items()
        if any(
            TYPE_DEFAULT.search(kind) for _, kind, _ in parameter_entries(inspect.getdoc(obj) or "")
        )
    ]
    assert len(checked) >= 20


@pytest.mark.parametrize("path", sorted(PUBLIC))
def test_documented_defaults_are_the_signatures(path):
    assert mismatches(PUBLIC[path]) == []


NAMES = ("a",)


def test_a_wrong_documented_default_is_found():
    def f(metric="euclidean", k=10, flag=False, ks=(1, 2), names=("b",)):
        """Example.

        Parameters
        ----------
        metric : {'cosine', 'dot', 'euclidean'}, default 'cosine'
            The similarity: 'cosine' (default), 'dot' or 'euclidean'.
        k : int, default 10_000
            A count.
        flag : bool, default False
            A flag.
        ks : sequence of int, default (1, 2)
            Some K.
        names : tuple of str, default NAMES
            Some names.
        """

    assert mismatches(f) == [
        "metric: documented default 'cosine', signature 'euclidean'",
        "metric: \"'cosine' (default\" in its text, signature 'euclidean'",
        "k: documented default 10_000, signature 10",
        "names: documented default NAMES, signature ('b',)",
    ]
