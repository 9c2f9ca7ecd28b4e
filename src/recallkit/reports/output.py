"""Writing a report: each format to its file, the statistics computed once for all of them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from recallkit.reports.data import ReportError, Summary, summarize
from recallkit.reports.tables import csv_table, json_table, latex, markdown
from recallkit.runfiles._atomic import atomic_write

__all__ = ["EXTENSIONS", "FORMATS", "format_of", "render", "write_all", "write_report"]

#: Every format a report is written in, and the file name each takes in a folder.
FORMATS = {
    "markdown": "table.md",
    "latex": "table.tex",
    "csv": "table.csv",
    "json": "table.json",
    "html": "report.html",
}
#: File extensions -> format.
EXTENSIONS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".tex": "latex",
    ".csv": "csv",
    ".json": "json",
    ".html": "html",
    ".htm": "html",
}


def format_of(path: str | os.PathLike[str]) -> str:
    """The format of a report file, by its extension.

    >>> format_of("results/table.tex")
    'latex'
    """
    suffix = Path(path).suffix.lower()
    if suffix not in EXTENSIONS:
        raise ReportError(
            f"The report file '{path}' must end in {', '.join(sorted(set(EXTENSIONS)))} "
            "(markdown, latex, csv, json or html)."
        )
    return EXTENSIONS[suffix]


def render(
    summary: Summary,
    format: str,
    *,
    intervals: str = "none",
    digits: int = 4,
    image_root: Sequence[str | os.PathLike[str]] = (),
    log: Callable[[str], None] | None = None,
) -> str:
    """``summary`` as text in ``format`` ([`FORMATS`][FORMATS])."""
    if format == "markdown":
        return markdown(summary, intervals=intervals, digits=digits)
    if format == "latex":
        return latex(summary, intervals=intervals, digits=digits)
    if format == "csv":
        return csv_table(summary, with_intervals=intervals != "none")
    if format == "json":
        return json_table(summary)
    if format == "html":
        from recallkit.reports.html import render_html

        return render_html(summary, image_root=image_root, log=log)
    raise ReportError(f"A report's format is one of {', '.join(FORMATS)}. Got {format!r}.")


def write_report(
    runs: Any,
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    intervals: str = "none",
    digits: int = 4,
    image_root: Sequence[str | os.PathLike[str]] = (),
    **options: Any,
) -> Path:
    """Write the report of ``runs`` to ``path`` (atomically) and return it.

    Parameters
    ----------
    runs : Summary, run, sequence of runs, or mapping of name to run
        A [`Summary`][recallkit.reports.data.Summary], or runs as
        [`summarize`][recallkit.reports.data.summarize] takes them.
    path : str or path-like
        The file to write.
    format : {'markdown', 'latex', 'csv', 'json', 'html'}, optional
        The format (default: by the file's extension: ``.html`` the self-contained page, ``.md``,
        ``.tex`` and ``.csv`` the runs × metrics table, ``.json`` the flat
        ``{run: {metric: value}}``).
    intervals : {'none', 'ci', 'pm'}, default 'none'
        How the Markdown and LaTeX tables show each value's interval, and whether the CSV holds
        them.
    digits : int, default 4
        Decimals of the Markdown and LaTeX tables.
    image_root : sequence of path-like, default ()
        Folders the queries' image paths are relative to, for the HTML page's thumbnails
        (``recallkit.reports.html.image_roots``).
    **options : Any
        [`summarize`][recallkit.reports.data.summarize]'s keyword arguments (``names``,
        ``metrics``, ``baseline``, ``test``, ``n_resamples``, ...) when ``runs`` is not a
        summary.

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    path = Path(path)
    format = format or format_of(path)
    summary = runs if isinstance(runs, Summary) else summarize(runs, **options)
    text = render(summary, format, intervals=intervals, digits=digits, image_root=image_root)
    with atomic_write(path, "w") as handle:
        handle.write(text)
    return path


def write_all(
    summary: Summary,
    folder: str | os.PathLike[str],
    formats: Sequence[str] = tuple(FORMATS),
    **options: Any,
) -> list[Path]:
    """Write ``summary`` in each of ``formats`` into ``folder``.

    Parameters
    ----------
    summary : Summary
        The runs and their statistics ([`summarize`][recallkit.reports.data.summarize]).
    folder : str or path-like
        The folder (made when missing); ``recallkit.reports.output.FORMATS`` names each
        format's file in it.
    formats : sequence of str, default every format
        Of ``'markdown'``, ``'latex'``, ``'csv'``, ``'json'``, ``'html'``.
    **options : Any
        ``intervals``, ``digits``, ``image_root`` and ``log``, as
        [`write_report`][recallkit.reports.output.write_report] and
        [`render_html`][recallkit.reports.html.render_html] take them.

    Returns
    -------
    list of pathlib.Path
        The files written, in the order of ``formats``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name in formats:
        text = render(summary, name, **options)
        path = folder / FORMATS[name]
        with atomic_write(path, "w") as handle:
            handle.write(text)
        out.append(path)
    return out
