"""griffe extension of the API reference (mkdocs.yml and ``tests/test_api_docs.py`` load it).

The reference is built by inspection (``force_inspection``: signatures and docstrings as the
options decorator builds them). Inspection alone misses two things this extension gives it:

* the classes a module builds on first use (PEP 562 ``__getattr__``: the training-loop adapters of
  ``recallkit.integrations``, which load no framework until their class is looked up): each name of
  such a module's ``__all__`` is looked up before the module is inspected;
* the docstrings of module constants (a string literal after the assignment), which exist in the
  source only: each public attribute inspected without one takes its docstring from the source.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import griffe


def _visit(module: str, path: Path | None = None) -> griffe.Module:
    """The module ``module`` as its source reads (static analysis: no import runs it)."""
    if path is None:
        path = Path(importlib.import_module(module).__file__)
    return griffe.visit(module, path, path.read_text(encoding="utf-8"))


class Inspection(griffe.Extension):
    """Look up first-use names; take the constants' docstrings from the source."""

    def on_module_node(self, *, node: Any, agent: Any, **kwargs: Any) -> None:
        module = getattr(node, "obj", None)
        if "__getattr__" in getattr(module, "__dict__", {}):
            for name in getattr(module, "__all__", ()):
                getattr(module, name)

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
            if found is not None and not found.is_alias and found.docstring is not None:
                member.docstring = griffe.Docstring(
                    found.docstring.value, lineno=found.docstring.lineno, parent=member
                )
