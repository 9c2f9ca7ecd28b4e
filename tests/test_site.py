"""The documentation site as a reader opens it: built once per session (``mkdocs build
--strict``, warnings as errors), then read from disk.

* No raw Sphinx markup in any built page: no role (``:func:`...```, ``:class:``, ``:mod:``,
  ``:meth:``, ``:data:``, ``:attr:``, ...), no reStructuredText ``::`` ending a paragraph, and no
  cross-reference left as text (``[name][path]`` whose target is on no page).
* Every page works from ``file://``: each link between pages names a file (``page.html``), never
  a folder, which a browser would show as a directory listing.
* In headless Chromium (Playwright), from ``file://``: the home page names the version, a
  navigation link opens a page (not a directory listing), typing in the search box lists results,
  and nothing is requested from the network.

Without Playwright or Chromium the browser test is skipped with the reason, or fails when
``RECALLKIT_REQUIRE_BROWSER=1`` (as CI sets it), as ``tests/runner/test_report.py`` does.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import recallkit
from tests.browser import chromium

ROOT = Path(__file__).resolve().parents[1]
ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|obj|exc|ref|py:\w+):(?:`|<code>)")
RST_LITERAL = re.compile(r"\w::\s*</p>")  # "Example::" closing a paragraph
# A cross-reference whose target is on no page: the text keeps its brackets ("[name][]").
UNRESOLVED = re.compile(r"\[<code>[^<]*</code>\]\[[\w.]*\]")
PRE = re.compile(r"<pre\b.*?</pre>", re.DOTALL)
HREF = re.compile(r'<a\b[^>]*\bhref="([^"]*)"')


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site, built once per test session with warnings as errors."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    return out


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def test_no_raw_sphinx_markup_in_the_built_pages(site):
    pages = _pages(site)
    assert len(pages) >= 20  # the guides and the reference pages were built
    found = []
    for page in pages:
        text = PRE.sub("", page.read_text(encoding="utf-8"))  # code blocks may hold "::"
        for pattern in (ROLE, RST_LITERAL, UNRESOLVED):
            found += [f"{page.relative_to(site)}: {m.group(0)!r}" for m in pattern.finditer(text)]
    assert found == []


def test_the_checks_find_raw_markup():
    """The patterns above match what a docstring with Sphinx markup renders to."""
    assert ROLE.search("see :func:<code>recall_at_k</code> or :class:`Result`")
    assert RST_LITERAL.search("<p>For example::</p>")
    assert not ROLE.search("<code>a:b</code> and time 10:30:")
    assert not RST_LITERAL.search("<p>a ratio 1:2.</p>")
    assert UNRESOLVED.search("the core's [<code>recallkit.ground_truth.Ranker</code>][] over")
    assert UNRESOLVED.search("[<code>FORMATS</code>][recallkit.reports.output.FORMATS] names")
    assert not UNRESOLVED.search('<a href="x.html#y"><code>FORMATS</code></a> [1][2]')


def test_every_link_between_pages_names_a_file(site):
    """From ``file://`` a link to a folder shows a directory listing: every local link of every
    page must resolve to a file of the site."""
    bad = []
    for page in _pages(site):
        for href in HREF.findall(page.read_text(encoding="utf-8")):
            parts = urlsplit(html.unescape(href))
            if parts.scheme or parts.netloc or not parts.path:
                continue  # another site, or an anchor of the same page
            target = (page.parent / unquote(parts.path)).resolve()
            if not target.is_file():
                bad.append(f"{page.relative_to(site)} -> {href}")
    assert bad == []


@pytest.fixture(scope="module")
def browser():
    yield from chromium("the site's browser test")


def test_the_site_from_disk_in_a_browser(site, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((site / "index.html").as_uri())

    # The home page names the version, in the header.
    header = page.locator(".md-header__topic").first.inner_text()
    assert f"recallkit {recallkit.__version__}" in header

    # A navigation link opens a page, not a directory listing.
    page.locator(".md-nav__link", has_text="Benchmark splits").first.click()
    page.wait_for_load_state()
    assert page.url.endswith("/reference/datasets.html")
    assert page.locator("article h1").first.inner_text().startswith("Benchmark splits")
    assert "Index of" not in page.locator("body").inner_text()
    assert page.locator("#recallkit.datasets.registry.load_benchmark".replace(".", r"\.")).count()

    # Typing in the search box lists results, which link to pages of the site.
    page.locator(".md-search__input").click()
    # Typed key by key, as a reader types: the theme searches on key events (fill() sends none).
    page.locator(".md-search__input").press_sequentially("evaluate_benchmark", delay=20)
    results = page.locator(".md-search-result__item")
    results.first.wait_for(timeout=20_000)
    assert results.count() >= 1
    link = results.first.locator("a").first.get_attribute("href")
    assert ".html" in link

    assert errors == []
    assert [u for u in requests if not u.startswith(("file://", "data:", "blob:"))] == []
    page.close()
