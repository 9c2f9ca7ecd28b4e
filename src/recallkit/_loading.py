"""What loads when: public names on first use, optional packages by the extra that installs them.

**Names on first use** (PEP 562): a package lists its public names and their modules
([`exports`][exports]), and importing the package loads none of them (so ``recallkit --help``
imports neither numpy nor torch).

**Optional packages.** The core install (``pip install /path/to/recallkit``) holds what the exact
engine and the
recipes need: numpy, torch, numba, threadpoolctl, ONNX Runtime (the int8 filter that
``precision="auto"`` picks on CPUs without VNNI), pytorch-metric-learning and faiss-cpu. The
other packages come with extras named after what a user wants ([`EXTRAS`][EXTRAS], the same lists
as ``pyproject.toml``):

- ``images``: encoding images (Pillow, torchvision, safetensors weights, tqdm's progress bar);
- ``plot``: the history plot and the PNG failure grid (matplotlib);
- ``datasets``: the benchmark readers' extra formats (scipy for Cars196's ``.mat`` files,
  Pillow for ``Split.open_image``);
- ``demo``: ``recallkit demo`` (scikit-learn's digits, Pillow, matplotlib);
- ``torchmetrics``, ``lightning``: the integrations; ``all``: every one of them.

A feature calls [`require`][require] with the modules it imports before it reads or writes anything;
a module that is missing, or installed but broken (an ``OSError`` from a shared library, a
``RuntimeError`` such as torchvision's ``operator torchvision::nms does not exist`` beside
another torch), raises one [`MissingExtraError`][MissingExtraError]: one line naming the feature,
what is missing, the extra and the command that installs it. The command line prints it as its usual
one-line error (exit status 2).

This module imports nothing but the standard library.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["EXTRAS", "PACKAGES", "MissingExtraError", "available", "exports", "require"]

#: Import name -> (the distribution that provides it, the extra that installs it).
PACKAGES: Mapping[str, tuple[str, str]] = {
    "PIL": ("Pillow", "images"),
    "torchvision": ("torchvision", "images"),
    "safetensors": ("safetensors", "images"),
    "tqdm": ("tqdm", "images"),
    "matplotlib": ("matplotlib", "plot"),
    "scipy": ("scipy", "datasets"),
    "sklearn": ("scikit-learn", "demo"),
    "torchmetrics": ("torchmetrics", "torchmetrics"),
    "lightning": ("lightning", "lightning"),
}

#: Each extra and the distributions it installs (``pyproject.toml`` pins their versions; a
#: test keeps the two equal).
EXTRAS: Mapping[str, tuple[str, ...]] = {
    "images": ("torchvision", "Pillow", "safetensors", "tqdm"),
    "plot": ("matplotlib",),
    "datasets": ("scipy", "Pillow"),
    "demo": ("scikit-learn", "matplotlib", "Pillow"),
    "torchmetrics": ("torchmetrics",),
    "lightning": ("lightning",),
}

#: What to do about a module that is installed but fails to import, beyond reinstalling it.
_BROKEN_HINTS: Mapping[str, str] = {
    "torchvision": "reinstall torchvision from the index torch came from (for CPU torch: "
    "pip install --force-reinstall torchvision --index-url "
    "https://download.pytorch.org/whl/cpu)",
}


class MissingExtraError(ModuleNotFoundError):
    """A feature whose optional packages are missing or broken: one line that names the
    feature, the packages, the extra and the install command. A ``ModuleNotFoundError`` (an
    ``ImportError``), as the import it stands for would raise.

    >>> print(MissingExtraError("recallkit plot", ["matplotlib"], "plot"))
    ... # doctest: +NORMALIZE_WHITESPACE
    recallkit plot needs matplotlib, which is not installed (the 'plot' extra):
    pip install matplotlib, or pip install '/path/to/recallkit[plot]' from a clone.
    """

    def __init__(
        self,
        feature: str,
        missing: list[str],
        extra: str,
        broken: tuple[str, BaseException] | None = None,
    ) -> None:
        self.feature = feature
        self.missing = list(missing)
        self.extra = extra
        self.broken = broken
        names = [PACKAGES.get(m, (m, extra))[0] for m in self.missing]
        clone = f"pip install '/path/to/recallkit[{extra}]' from a clone"
        if broken is not None:
            module, error = broken
            name = PACKAGES.get(module, (module, extra))[0]
            reason = _first_line(error)
            fix = _BROKEN_HINTS.get(module, f"reinstall it: pip install --force-reinstall {name}")
            text = (
                f"{feature} needs {name}, which is installed but cannot be imported "
                f"({type(error).__name__}: {reason}): {fix}."
            )
        else:
            which = "which is" if len(names) == 1 else "which are"
            text = (
                f"{feature} needs {_and(names)}, {which} not installed (the '{extra}' extra): "
                f"pip install {' '.join(names)}, or {clone}."
            )
        super().__init__(text, name=(self.missing or [None])[0])


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else "no message"
    return text if len(text) <= 200 else text[:197] + "..."


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _import(module: str) -> BaseException | None:
    """Import ``module``; the error that stopped it, or ``None``."""
    try:
        importlib.import_module(module)
    except (ImportError, OSError, RuntimeError, AttributeError) as error:
        return error
    return None


def _missing(module: str, error: BaseException) -> bool:
    """Whether ``error`` says ``module`` itself (not one of its own imports) is absent."""
    if not isinstance(error, ModuleNotFoundError):
        return False
    top = module.split(".")[0]
    return error.name is None or error.name == top or error.name == module


def _absent(module: str) -> bool:
    """Whether ``module`` is not installed, by its spec alone (nothing imported but its
    parent packages)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package is absent
        return True
    except Exception:  # a broken install: its import says what is wrong
        return False


def require(feature: str, *modules: str, extra: str | None = None) -> None:
    """Import ``modules`` (import names: ``"PIL"``, ``"matplotlib"``) for ``feature``, or raise
    one [`MissingExtraError`][MissingExtraError] naming every missing one and the extra that
    installs them (``extra``, else the extra of the first missing module in [`PACKAGES`][PACKAGES]).
    A module that is installed but fails to import is named with its error and how to repair it.

    >>> require("the standard library", "json")
    >>> require("recallkit demo", "no_such_module_xyz", extra="demo")
    ... # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    Traceback (most recent call last):
    ...
    recallkit._loading.MissingExtraError: recallkit demo needs no_such_module_xyz,
    which is not installed (the 'demo' extra): ...
    """
    # An absent module is found from its spec, before anything is imported (an import of the
    # others can take seconds): then only the absent ones are tried, and named.
    absent = [module for module in modules if _absent(module)]
    missing: list[str] = []
    for module in absent or modules:
        error = _import(module)
        if error is None:
            continue
        top = module.split(".")[0]
        which = extra or PACKAGES.get(top, (top, "all"))[1]
        if not _missing(module, error):
            raise MissingExtraError(feature, [top], which, broken=(top, error)) from error
        if top not in missing:
            missing.append(top)
    if missing:
        which = extra or PACKAGES.get(missing[0], (missing[0], "all"))[1]
        raise MissingExtraError(feature, missing, which) from None


def available(module: str) -> bool:
    """Whether ``module`` imports (installed and not broken); imports it if so.

    >>> available("json"), available("no_such_module_xyz")
    (True, False)
    """
    return _import(module) is None


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
