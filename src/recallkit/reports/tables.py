"""Tables of runs × metrics: Markdown, LaTeX (booktabs), CSV, flat JSON, and the terminal's text.

Each row is a run, each column a metric. In Markdown and LaTeX the best value of each column
is bold (by the metric's direction: lower is better for MnR and MedR, marked ↓), and a value
carries superscript letters naming the runs it is significantly better than (each run's letter
is in the first column; ranx's convention), from
[`recallkit.compare`][recallkit.comparison.compare]. ``intervals="ci"`` adds each value's bootstrap
interval, ``"pm"`` its half-width (±). CSV holds the values at full precision (with ``low``/``high``
and ``better than`` columns when asked), and JSON the flat ``{run: {metric: value}}`` that scripts
read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from recallkit.reports.data import Summary, direction, summarize

__all__ = ["FORMATS", "INTERVALS", "csv_table", "json_table", "latex", "markdown", "table", "text"]

#: The table formats [`table`][table] writes.
FORMATS = ("markdown", "latex", "csv", "json")
#: How a table shows intervals: not at all, as ``[low, high]``, or as ``± half-width``.
INTERVALS = ("none", "ci", "pm")

_TESTS = {
    "auto": "McNemar's exact test (0/1 values, as recall@K's) or Fisher's paired randomization "
    "test (the other metrics)",
    "randomization": "Fisher's paired randomization test",
    "bootstrap": "the paired bootstrap test",
}


def _check(value: str, choices: Sequence[str], what: str) -> str:
    if value not in choices:
        raise ValueError(f"A table's {what} is one of {', '.join(choices)}. Got {value!r}.")
    return value


def table(runs: Any, format: str = "markdown", **options: Any) -> str:
    """The runs × metrics table of ``runs`` as text in ``format``.

    Parameters
    ----------
    runs : Summary, run, sequence of runs, or mapping of name to run
        A [`Summary`][recallkit.reports.data.Summary], or runs as
        [`summarize`][recallkit.reports.data.summarize] takes them.
    format : {'markdown', 'latex', 'csv', 'json'}, default 'markdown'
        The table's format.
    **options : Any
        ``intervals`` (``'none'``, ``'ci'``, ``'pm'``) and ``digits`` (4): how Markdown and
        LaTeX show the values; and [`summarize`][recallkit.reports.data.summarize]'s keyword
        arguments (``names``, ``metrics``, ``baseline``, ``test``, ...) when ``runs`` is not a
        summary.

    Returns
    -------
    str
        The table (Markdown and LaTeX with their legend; names escaped for the format).

    >>> run = {"tag": "a", "metrics": {"recall@1": 0.5},
    ...        "queries": {"ids": ["q1", "q2"], "first_hit_rank": [0, 3]}}
    >>> print(table(run, "csv"), end="")
    run,recall@1
    a,0.5
    """
    _check(format, FORMATS, "format")
    shown = {k: options.pop(k) for k in ("intervals", "digits") if k in options}
    summary = runs if isinstance(runs, Summary) else _summary(runs, shown, options)
    if format == "markdown":
        return markdown(summary, **shown)
    if format == "latex":
        return latex(summary, **shown)
    if format == "csv":
        return csv_table(summary, with_intervals=shown.get("intervals", "none") != "none")
    return json_table(summary)


def _summary(runs: Any, shown: dict[str, Any], options: dict[str, Any]) -> Summary:
    options.setdefault("with_intervals", shown.get("intervals", "none") != "none")
    return summarize(runs, **options)


def _number(value: float, digits: int) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _header(metric: str, arrow: str) -> str:
    return f"{metric} {arrow}" if direction(metric) == "lower" else metric


def _cells(summary: Summary, intervals: str, digits: int, style: dict[str, Any]) -> list[list[str]]:
    """Each run's row: its letter, its name and each metric's cell in ``style``."""
    _check(intervals, INTERVALS, "intervals")
    letter = summary.letters
    best = {m: set(summary.best(m, digits)) for m in summary.metrics}
    rows = []
    for run in summary.runs:
        row = [letter[run.name], style["name"](run.name)]
        for m in summary.metrics:
            value = run.metrics.get(m, math.nan)
            cell = _number(value, digits)
            if cell == "-":
                row.append(style["missing"])
                continue
            if run.name in best[m]:
                cell = style["bold"](cell)
            beaten = "".join(letter[n] for n in summary.beats(run.name, m))
            if beaten:
                cell += style["sup"](beaten)
            spread = summary.intervals.get(run.name, {}).get(m)
            if intervals != "none" and spread is not None and not math.isnan(spread.low):
                if intervals == "ci":
                    extra = f"[{_number(spread.low, digits)}, {_number(spread.high, digits)}]"
                else:
                    extra = f"{style['pm']} {_number((spread.high - spread.low) / 2, digits)}"
                cell += " " + style["small"](extra)
            row.append(cell)
        rows.append(row)
    return rows


def legend(
    summary: Summary,
    intervals: str = "none",
    *,
    arrow: str = "↓",
    pm: str = "±",
    name: Callable[[str], str] = str,
) -> list[str]:
    """The sentences that explain a table's marks: bold, the arrow, letters, intervals (a run's
    name written by ``name``, the format's escape)."""
    lower = any(direction(m) == "lower" for m in summary.metrics)
    if len(summary.runs) > 1:
        out = [
            "Bold: the best value of each column"
            + (f" ({arrow}: lower is better)." if lower else ".")
        ]
    else:
        out = [f"{arrow}: lower is better."] if lower else []
    c = summary.comparison
    if c is not None:
        against = f" (each run against {name(c.baseline)} only)" if c.baseline else ""
        correction = (
            "adjusted by Holm's method over the pairs of each metric"
            if c.correction == "holm"
            else "not adjusted"
        )
        out.append(
            f"Superscript letters: significantly better than the run of that letter{against} "
            f"({_TESTS[c.test]} on {c.num_queries} paired queries, {c.n_resamples} resamples, "
            f"seed {c.seed}; p-values {correction}; alpha {c.alpha:g})."
        )
    if intervals != "none":
        conf = summary.settings.get("confidence", 0.95)
        what = "[low, high]:" if intervals == "ci" else f"{pm}: half the width of"
        over = {i.resampled for per in summary.intervals.values() for i in per.values()}
        resampled = " or ".join(sorted(over)) or "queries"
        out.append(
            f"{what} the {100 * conf:g}% percentile bootstrap interval over the {resampled} "
            f"({summary.settings.get('n_resamples')} resamples, seed "
            f"{summary.settings.get('seed')})."
        )
    return out


#: What a name becomes in Markdown: HTML's specials as entities (no raw HTML, no autolink), the
#: marks of emphasis, code, links and table cells escaped by a backslash, line breaks as spaces.
_MARKDOWN = {
    "&": "&amp;",
    "<": "&lt;",
    ">": "&gt;",
    "\\": "\\\\",
    "`": "\\`",
    "*": "\\*",
    "_": "\\_",
    "[": "\\[",
    "]": "\\]",
    "|": "\\|",
    "\n": " ",
    "\r": " ",
}


def markdown_escape(text: str) -> str:
    r"""``text`` as Markdown shows it as text, never as markup (HTML, emphasis, links, cells).

    >>> print(markdown_escape("<b>a_b</b> | [x](y)"))
    &lt;b&gt;a\_b&lt;/b&gt; \| \[x\](y)
    """
    return "".join(_MARKDOWN.get(c, c) for c in str(text))


def markdown(summary: Summary, *, intervals: str = "none", digits: int = 4) -> str:
    """The table in GitHub Markdown, its legend below.

    >>> q = {"ids": ["q"], "first_hit_rank": [1]}
    >>> runs = {"x": {"metrics": {"MnR": 2.0}, "queries": q},
    ...         "y": {"metrics": {"MnR": 3.0}, "queries": q}}
    >>> s = summarize(runs, with_intervals=False, tests=False)
    >>> print(markdown(s), end="")
    | # | run | MnR ↓ |
    | --- | --- | ---: |
    | a | x | **2.0000** |
    | b | y | 3.0000 |
    <BLANKLINE>
    Bold: the best value of each column (↓: lower is better).
    """
    style = {
        "name": markdown_escape,
        "missing": "-",
        "bold": lambda t: f"**{t}**",
        "sup": lambda t: f"<sup>{t}</sup>",
        "small": lambda t: t,
        "pm": "±",
    }
    head = ["#", "run", *(markdown_escape(_header(m, "↓")) for m in summary.metrics)]
    lines = [
        "| " + " | ".join(head) + " |",
        "| --- | --- |" + " ---: |" * len(summary.metrics),
    ]
    for row in _cells(summary, intervals, digits, style):
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append(" ".join(legend(summary, intervals, name=markdown_escape)))
    return "\n".join(lines) + "\n"


_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "\n": " ",  # a line break would end the legend's comment line
    "\r": " ",
}


def latex_escape(text: str) -> str:
    r"""``text`` with LaTeX's special characters escaped.

    >>> print(latex_escape("run_1 & 50%"))
    run\_1 \& 50\%
    """
    return "".join(_LATEX.get(c, c) for c in text)


def latex(summary: Summary, *, intervals: str = "none", digits: int = 4) -> str:
    r"""The table as a booktabs ``tabular`` (``\usepackage{booktabs}``), its legend in comments
    above it, ready for a caption.

    >>> q = {"ids": ["q"], "first_hit_rank": [1]}
    >>> runs = {"x": {"metrics": {"MnR": 2.0}, "queries": q},
    ...         "y": {"metrics": {"MnR": 3.0}, "queries": q}}
    >>> s = summarize(runs, with_intervals=False, tests=False)
    >>> print(latex(s), end="")
    % recallkit report (needs \usepackage{booktabs})
    % Bold: the best value of each column ($\downarrow$: lower is better).
    \begin{tabular}{llr}
    \toprule
    \# & run & MnR $\downarrow$ \\
    \midrule
    a & x & \textbf{2.0000} \\
    b & y & 3.0000 \\
    \bottomrule
    \end{tabular}
    """
    style = {
        "name": latex_escape,
        "missing": "--",
        "bold": lambda t: rf"\textbf{{{t}}}",
        "sup": lambda t: f"$^{{{t}}}$",
        "small": lambda t: rf"{{\scriptsize {t}}}",
        "pm": r"$\pm$",
    }
    head = [r"\#", "run", *(latex_escape(m) for m in summary.metrics)]
    head = [
        f"{h} $\\downarrow$" if i >= 2 and direction(summary.metrics[i - 2]) == "lower" else h
        for i, h in enumerate(head)
    ]
    lines = ["% recallkit report (needs \\usepackage{booktabs})"]
    marks = legend(summary, intervals, arrow=r"$\downarrow$", pm=r"$\pm$", name=latex_escape)
    lines += [f"% {sentence}" for sentence in marks]
    lines += [
        r"\begin{tabular}{ll" + "r" * len(summary.metrics) + "}",
        r"\toprule",
        " & ".join(head) + r" \\",
        r"\midrule",
    ]
    for row in _cells(summary, intervals, digits, style):
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def _full(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else repr(float(value))


#: A number as a spreadsheet reads one (a negative number stays a number in CSV).
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf")
#: The first characters that make spreadsheet software read a cell as a formula.
_FORMULA = ("=", "+", "-", "@", "\t", "\r", "\n")


def csv_cell(value: str) -> str:
    """``value`` as a CSV cell that spreadsheet software shows as text, never runs as a
    formula: a cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return,
    and is not a number, gets a leading apostrophe (OWASP's advice). A carriage return becomes a
    line break (which the writer quotes; Python's writer leaves a lone ``\\r`` unquoted).

    >>> csv_cell("=cmd|' /C calc'!A0"), csv_cell("-0.25"), csv_cell("-1+1"), csv_cell("a-b")
    ("'=cmd|' /C calc'!A0", '-0.25', "'-1+1", 'a-b')
    """
    value = str(value).replace("\r\n", "\n").replace("\r", "\n")
    if value.startswith(_FORMULA) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def csv_table(summary: Summary, *, with_intervals: bool = False) -> str:
    """The table as CSV: values at full precision (empty where a run has none); with
    ``with_intervals`` each metric's ``low`` and ``high`` columns, and with a comparison its
    ``better than`` column (the runs it is significantly better than, separated by ``;``)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    compared = summary.comparison is not None
    head = ["run"]
    for m in summary.metrics:
        head.append(m)
        if with_intervals:
            head += [f"{m} low", f"{m} high"]
        if compared and m in summary.comparison.metrics:
            head.append(f"{m} better than")
    writer.writerow([csv_cell(h) for h in head])
    for run in summary.runs:
        row = [run.name]
        for m in summary.metrics:
            row.append(_full(run.metrics.get(m)))
            if with_intervals:
                spread = summary.intervals.get(run.name, {}).get(m)
                row += [_full(spread.low), _full(spread.high)] if spread else ["", ""]
            if compared and m in summary.comparison.metrics:
                row.append(";".join(summary.beats(run.name, m)))
        writer.writerow([csv_cell(cell) for cell in row])
    return buffer.getvalue()


def json_table(summary: Summary) -> str:
    """The flat ``{run: {metric: value}}`` as JSON text (``null`` where undefined)."""
    return json.dumps(summary.to_dict(), indent=1) + "\n"


# ----------------------------------------------------------------------------------------------
# The terminal (recallkit compare).


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    out = []
    for r in [header, *rows]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append(("  " + "  ".join(cells)).rstrip())
    return out


def _signed(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:+.4f}"


def text(summary: Summary) -> str:
    """The comparison as the terminal shows it: each run's values with their intervals, then
    each pair's difference, its interval, p-value, adjusted p-value and verdict."""
    c = summary.comparison
    conf = f"{100 * summary.settings.get('confidence', 0.95):g}%"
    lines = []
    if c is not None:
        correction = "Holm per metric" if c.correction == "holm" else "no correction"
        lines.append(
            f"{len(c.runs)} runs, {c.num_queries} paired queries; {_TESTS[c.test]}, "
            f"{c.n_resamples} resamples, seed {c.seed}; p-values adjusted by {correction}; "
            f"alpha {c.alpha:g}"
        )
        lines.append("")
    lines.append(f"values ({conf} bootstrap interval)")
    header = ["metric", *summary.names]
    rows = []
    for m in summary.metrics:
        row = [_header(m, "(lower is better)")]
        for name in summary.names:
            value = summary.value(name, m)
            cell = _number(value, 4)
            spread = summary.intervals.get(name, {}).get(m)
            if spread is not None and not math.isnan(spread.low):
                cell += f" [{spread.low:.4f}, {spread.high:.4f}]"
            row.append(cell)
        rows.append(row)
    lines += _columns(header, rows, set())
    if c is not None:
        only = any(r.only_a is not None for r in c.rows)
        lines.append("")
        lines.append(f"differences a - b ({conf} paired bootstrap interval)")
        header = ["metric", "a", "b", "a - b", f"{conf} interval", "p", "p adjusted", "verdict"]
        if only:
            header += ["a only", "b only"]
        rows = []
        for r in c.rows:
            verdict = f"{r.better} better" if r.significant else "not significant"
            row = [
                r.metric,
                r.a,
                r.b,
                _signed(r.difference),
                f"[{_signed(r.low)}, {_signed(r.high)}]",
                f"{r.p_value:.4f}",
                f"{r.p_adjusted:.4f}",
                verdict,
            ]
            if only:
                row += ["" if r.only_a is None else str(r.only_a)]
                row += ["" if r.only_b is None else str(r.only_b)]
            rows.append(row)
        lines += _columns(header, rows, {3, 5, 6, 8, 9})
        lower = [m for m in c.metrics if direction(m) == "lower"]
        if lower:
            lines.append(f"  ({', '.join(lower)}: lower is better, so a - b < 0 favours a)")
    return "\n".join(lines) + "\n"
