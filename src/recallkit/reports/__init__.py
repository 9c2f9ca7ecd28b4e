"""Reports of runs: tables a paper can use, one self-contained HTML page, and figures.

``summarize(runs)`` reads runs ([`recallkit.Result`][recallkit.result.Result]\\ s, run records or
run files) and computes, once, what a report shows: each metric's bootstrap interval
([`recallkit.intervals`][recallkit.comparison.intervals]) and, for two or more runs, their
comparison ([`recallkit.compare`][recallkit.comparison.compare]). ``table(runs, format=...)`` gives
the runs × metrics table as Markdown, LaTeX, CSV or JSON; ``write_report(runs, path)`` writes any of
them, or the HTML page, by the file's extension. ``recallkit report`` and ``recallkit compare`` call
these.

This is the application layer: the library (``recallkit``) never imports it. matplotlib and
Pillow are imported when a figure or a thumbnail is drawn.
"""

from __future__ import annotations

from recallkit._loading import exports as _exports

_HOMES = {
    "ReportError": "recallkit.reports.data",
    "Summary": "recallkit.reports.data",
    "by_class": "recallkit.reports.data",
    "difference_figure": "recallkit.reports.figures",
    "load_runs": "recallkit.reports.data",
    "recall_curves": "recallkit.reports.figures",
    "render_html": "recallkit.reports.html",
    "summarize": "recallkit.reports.data",
    "table": "recallkit.reports.tables",
    "write_all": "recallkit.reports.output",
    "write_report": "recallkit.reports.output",
}

__all__ = sorted(_HOMES)

__getattr__, __dir__ = _exports(__name__, globals(), _HOMES)
