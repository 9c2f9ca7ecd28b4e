"""Thin adapters of [`recallkit.Evaluator`][recallkit.evaluator.Evaluator] to training frameworks,
each loaded only when imported (``import recallkit`` loads none of them):

* [`recallkit.integrations.torchmetrics`][recallkit.integrations.torchmetrics]: a torchmetrics
  ``Metric`` (the ``torchmetrics`` extra);
* [`recallkit.integrations.lightning`][recallkit.integrations.lightning]: a Lightning ``Callback``
  (the ``lightning`` extra).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from recallkit._loading import require


def built_on_first_use(module: str, name: str, define: Callable[[], type]) -> Callable[[str], Any]:
    """The ``__getattr__`` of the adapter module ``module``: its class ``name`` is built by
    ``define()`` when first looked up (so that importing the module loads no framework), then
    kept in the module and named as its top-level class (pickled by name)."""

    def getattr_(attribute: str) -> Any:
        if attribute != name:
            raise AttributeError(f"module {module!r} has no attribute {attribute!r}")
        cls = define()
        cls.__module__ = module
        cls.__qualname__ = name
        setattr(sys.modules[module], name, cls)
        return cls

    return getattr_


def framework_class(module: str, where: str, extra: str) -> Any:
    """The framework's class ``where`` (``"package.module:Class"``) that the adapter ``module``
    builds on; when the framework is missing or broken, the one-line error of
    [`recallkit._loading.require`][recallkit._loading.require] naming ``extra``."""
    package, _, name = where.partition(":")
    require(module, package.split(".")[0], extra=extra)
    return getattr(importlib.import_module(package), name)
