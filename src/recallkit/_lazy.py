"""Names loaded on first use (PEP 562): a package lists its public names and their modules, and
importing the package loads none of them (so ``recallkit --help`` imports neither numpy nor
torch)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(
    package: str,
    namespace: dict[str, Any],
    homes: Mapping[str, str],
    extra: tuple[str, ...] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose names ``homes`` maps to their modules:
    a name is imported from its module when first looked up, then kept in ``namespace``; any
    other name is tried as a submodule (``recallkit.ground_truth`` after ``import recallkit``).
    ``__dir__`` lists the names and ``extra``."""

    def getattr_(name: str) -> Any:
        home = homes.get(name)
        if home is not None:
            value = getattr(importlib.import_module(home), name)
            namespace[name] = value
            return value
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted({*homes, *extra})

    return getattr_, dir_


class Module:
    """A module imported when one of its attributes is first read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)
