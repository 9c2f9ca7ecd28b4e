"""Headless Chromium for the browser tests (the HTML report, the documentation site), through
Playwright and the system's Chromium: nothing is downloaded.

Without Playwright or Chromium a browser test is skipped with the reason (``-ra`` prints it);
with ``RECALLKIT_REQUIRE_BROWSER=1`` (as ``.ci/run`` sets it) it fails, naming what to install.
``RECALLKIT_CHROMIUM`` names another Chromium executable.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Chromium's flags: no sandbox (root in CI), no GPU, and no request of its own to the network.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def missing(test: str, what: str) -> None:
    """Skip ``test`` (a few words naming it) for want of ``what``, or fail when required."""
    reason = f"{test} needs {what}"
    if os.environ.get("RECALLKIT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (RECALLKIT_REQUIRE_BROWSER=1 asks for it)", pytrace=False)
    pytest.skip(reason)


def chromium(test: str) -> Iterator[Any]:
    """A launched headless Chromium, closed after the ``yield`` (for a module fixture)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing(test, "Playwright's Python package: pip install playwright (in the dev group)")
    executable = os.environ.get("RECALLKIT_CHROMIUM") or shutil.which("chromium")
    executable = executable or "/usr/bin/chromium"
    if not Path(executable).is_file():
        missing(
            test,
            f"Chromium at {executable}: apt-get install chromium (Debian), or set "
            "RECALLKIT_CHROMIUM to a Chromium executable",
        )
    with sync_playwright() as p:
        try:
            launched = p.chromium.launch(executable_path=executable, args=ARGS)
        except Exception as error:  # a browser that does not start says why
            missing(test, f"a Chromium that starts ({executable}: {str(error).splitlines()[0]})")
        yield launched
        launched.close()
