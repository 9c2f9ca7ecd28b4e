"""griffe extension of the API reference (mkdocs.yml and ``tests/test_api_docs.py`` load it).

The reference is built by inspection (``force_inspection``: signatures and docstrings as the
options decorator builds them). Inspection alone misses two things this extension gives it:

* the classes a module builds on first use (PEP 562 ``__getattr__``: the training-loop adapters of
  ``recallkit.integrations``, which load no framework until their class is looked up): each name of
  such a module's ``__all__`` is looked up before the module is inspected;
* the docstrings of module constants (a string literal after the assignment, or ``#:`` comment
  lines above it), which exist in the source only: each public attribute inspected without one
  takes its docstring from the source (and none takes the docstring of its value's type, which
  inspection would give it); a dataclass field with a default takes its description from its
  class's docstring.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import griffe


def _visit(module: str, path: Path | None = None) -> griffe.Module:
    """The module ``module`` as its source reads (static analysis: no import runs it)."""
    if path is None:
        path = Path(importlib.import_module(module).__file__)
    return griffe.visit(module, path, path.read_text(encoding="utf-8"))


def _comment(found: griffe.Object) -> str:
    """The ``#:`` comment lines right above a definition, as its docstring (Sphinx's form)."""
    lines = found.filepath.read_text(encoding="utf-8").splitlines()[: found.lineno - 1]
    block = []
    while lines and lines[-1].startswith("#:"):
        block.insert(0, lines.pop()[2:].strip())
    return " ".join(block)


class Inspection(griffe.Extension):
    """Look up first-use names; take the constants' docstrings from the source."""

    def on_module_node(self, *, node: Any, agent: Any, **kwargs: Any) -> None:
        module = getattr(node, "obj", None)
        if "__getattr__" in getattr(module, "__dict__", {}):
            for name in getattr(module, "__all__", ()):
                getattr(module, name)

    def on_attribute_instance(
        self, *, node: Any, attr: griffe.Attribute, agent: Any, **kwargs: Any
    ) -> None:
        # Inspection gives an attribute its value's type's docstring ("bool(x) -> bool ..."):
        # not the attribute's.
        value = getattr(node, "obj", None)
        doc = getattr(type(value), "__doc__", None)
        if attr.docstring is not None and isinstance(doc, str) and doc:
            if attr.docstring.value == inspect.cleandoc(doc):
                attr.docstring = None

    def on_module_members(
        self, *, node: Any, mod: griffe.Module, agent: Any, **kwargs: Any
    ) -> None:
        if not isinstance(agent, griffe.Inspector) or mod.filepath is None:
            return
        constants = [
            member
            for name, member in mod.members.items()
            if not name.startswith("_")
            and not member.is_alias
            and member.is_attribute
            and member.docstring is None
        ]
        if not constants:
            return
        path = mod.filepath if not isinstance(mod.filepath, list) else mod.filepath[0]
        source = _visit(mod.name, path)
        for member in constants:
            found = source.members.get(member.name)
            if found is not None and found.is_alias:  # imported: read where it is defined
                module, _, name = found.target_path.rpartition(".")
                found = _visit(module).members.get(name)
            if found is None or found.is_alias:
                continue
            text = found.docstring.value if found.docstring else _comment(found)
            if text:
                member.docstring = griffe.Docstring(text, lineno=found.lineno, parent=member)

    def on_class_members(self, *, node: Any, cls: griffe.Class, agent: Any, **kwargs: Any) -> None:
        # A dataclass field with a default is a class attribute too: it takes the description
        # its class's docstring gives it (Attributes or Parameters), which inspection leaves out.
        if not isinstance(agent, griffe.Inspector) or not cls.docstring:
            return
        described = {}
        for section in cls.docstring.parse("numpy"):
            if section.kind.value in ("attributes", "parameters"):
                described.update({item.name: item.description for item in section.value})
        for name, member in cls.members.items():
            if member.is_attribute and member.docstring is None and described.get(name):
                member.docstring = griffe.Docstring(described[name], parent=member)
