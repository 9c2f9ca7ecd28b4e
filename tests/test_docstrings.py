"""Every example in the package's docstrings runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import recallkit

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(recallkit.__path__, prefix="recallkit.")
    if not info.name.endswith("__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False)
    assert failures == 0
