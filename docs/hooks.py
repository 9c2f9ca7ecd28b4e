"""mkdocs hook: the site's name carries the package's version (``recallkit 0.1.0`` in the header
of every page), read from ``src/recallkit/__init__.py`` so that the two cannot differ."""

from __future__ import annotations

import re
from pathlib import Path

_INIT = Path(__file__).resolve().parent.parent / "src" / "recallkit" / "__init__.py"


def version() -> str:
    """The package's ``__version__``, read from its source without importing it."""
    found = re.search(r'^__version__ = "([^"]+)"$', _INIT.read_text(encoding="utf-8"), re.M)
    if found is None:
        raise ValueError(f"{_INIT}: no __version__ line")
    return found.group(1)


def on_config(config, **kwargs):
    config["site_name"] = f"{config['site_name']} {version()}"
    return config
