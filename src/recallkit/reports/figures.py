"""The report's figures, drawn with matplotlib (imported when a figure is drawn): recall@K
curves of every run on one figure, and the paired differences of a comparison with their
intervals. Each figure's title and axes say what it shows: the metric, the runs, which way is
better.
"""

from __future__ import annotations

import functools
import io
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from recallkit.comparison import Comparison
from recallkit.reports.data import Summary, direction
from recallkit.runfiles._atomic import atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["FIGURE_FORMATS", "difference_figure", "recall_curves", "save", "svg"]

#: The files a figure is written to, by extension.
FIGURE_FORMATS = (".png", ".svg", ".pdf")
#: Colours of runs, in run order (matplotlib's tab10), and of significant / other differences.
COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
SIGNIFICANT = "#c0392b"
NOT_SIGNIFICANT = "#7f7f7f"
#: matplotlib's settings while a figure is built and drawn: text as it is written, so that a run
#: name, tag or metric with ``$`` is never read as mathtext (nor as LaTeX).
PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}

_Draw = TypeVar("_Draw", bound=Callable[..., Any])


def plain_text(draw: _Draw) -> _Draw:
    """``draw`` run under [`PLAIN_TEXT`][recallkit.reports.figures.PLAIN_TEXT]."""

    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context(PLAIN_TEXT):
            return draw(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _recall_k(name: str) -> int | None:
    from recallkit.metrics import Recall, parse_one

    metric = parse_one(name)
    return metric.k if isinstance(metric, Recall) else None


@plain_text
def recall_curves(summary: Summary) -> Figure | None:
    """recall@K against K, one line per run with its bootstrap intervals, on one figure.

    Parameters
    ----------
    summary : Summary
        The runs ([`summarize`][recallkit.reports.data.summarize]).

    Returns
    -------
    matplotlib.figure.Figure or None
        The figure (names drawn as written, never as mathtext); ``None`` when no run holds a
        recall@K.
    """
    from matplotlib.figure import Figure

    curves = []
    for run in summary.runs:
        points = sorted((k, name) for name in run.metrics if (k := _recall_k(name)) is not None)
        if points:
            curves.append((run.name, points))
    if not curves:
        return None
    fig = Figure(figsize=(6.4, 3.8), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ks = sorted({k for _, points in curves for k, _ in points})
    handles = []
    for i, (name, points) in enumerate(curves):
        x = [k for k, _ in points]
        y = [summary.value(name, m) for _, m in points]
        spread = summary.intervals.get(name, {})
        low = [
            y_ - spread[m].low if m in spread else 0.0 for y_, (_, m) in zip(y, points, strict=True)
        ]
        high = [
            spread[m].high - y_ if m in spread else 0.0
            for y_, (_, m) in zip(y, points, strict=True)
        ]
        err = None if not spread else [[max(v, 0.0) for v in low], [max(v, 0.0) for v in high]]
        handles.append(
            ax.errorbar(
                x,
                y,
                yerr=err,
                marker="o",
                capsize=3,
                label=name,
                color=COLOURS[i % len(COLOURS)],
                clip_on=False,
            )
        )
    if len(ks) > 1 and ks[-1] / ks[0] >= 10:
        ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("K")
    ax.set_ylabel("recall@K (higher is better)")
    ax.grid(True, alpha=0.3)
    conf = f"{100 * summary.settings.get('confidence', 0.95):g}%"
    bars = f", bars: {conf} bootstrap intervals" if any(summary.intervals.values()) else ""
    who = curves[0][0] if len(curves) == 1 else f"{len(curves)} runs"
    ax.set_title(f"recall@K of {who}{bars}", fontsize="medium")
    # Handles and names given: a name that begins with "_" is still in the legend.
    ax.legend(
        handles,
        [name for name, _ in curves],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize="small",
        borderaxespad=0,
    )
    return fig


@plain_text
def difference_figure(comparison: Comparison, metrics: Sequence[str] | None = None) -> Figure:
    """Per metric, each pair's difference ``a - b`` with its paired bootstrap interval.

    A difference is filled red when significant, hollow grey when not; the zero line marks no
    difference, and each panel's title says on which side ``a`` is better.

    Parameters
    ----------
    comparison : Comparison
        The comparison ([`recallkit.compare`][recallkit.comparison.compare]).
    metrics : sequence of str, optional
        The metrics, one panel each (default: every metric compared).

    Returns
    -------
    matplotlib.figure.Figure
        The figure (names drawn as written, never as mathtext).
    """
    from matplotlib.figure import Figure

    metrics = list(metrics if metrics is not None else comparison.metrics)
    pairs = list(dict.fromkeys((r.a, r.b) for r in comparison.rows))
    height = 0.9 + len(metrics) * (0.55 + 0.32 * len(pairs))
    fig = Figure(figsize=(6.8, height), dpi=100, layout="constrained")
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    conf = f"{100 * comparison.confidence:g}%"
    for ax, metric in zip(axes, metrics, strict=True):
        rows = [comparison.row(metric, a, b) for a, b in pairs]
        labels = [f"{r.a} − {r.b}" for r in rows]
        for y, r in enumerate(rows):
            colour = SIGNIFICANT if r.significant else NOT_SIGNIFICANT
            if not math.isnan(r.low):
                ax.plot([r.low, r.high], [y, y], color=colour, linewidth=2, solid_capstyle="butt")
            ax.plot(
                [r.difference],
                [y],
                marker="o",
                markersize=7,
                color=colour,
                markerfacecolor=colour if r.significant else "white",
                linestyle="none",
            )
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(rows)), labels)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        lower = direction(metric) == "lower"
        side = "left" if lower else "right"
        ax.set_title(
            f"{metric} ({'lower' if lower else 'higher'} is better: {side} of 0, the first run "
            "is better)",
            fontsize="small",
            loc="left",
        )
        ax.grid(True, axis="x", alpha=0.3)
        ax.tick_params(labelsize="small")
    axes[-1].set_xlabel(f"difference a − b with its {conf} paired bootstrap interval")
    test = {"auto": "McNemar (0/1) or randomization", "randomization": "randomization"}.get(
        comparison.test, "bootstrap"
    )
    fig.suptitle(
        f"Paired differences of {len(comparison.runs)} runs\nfilled red: significant "
        f"({test} test, {comparison.correction}, alpha {comparison.alpha:g})",
        fontsize="medium",
    )
    return fig


_XML_HEAD = re.compile(r"^.*?(?=<svg)", re.S)


@plain_text
def svg(fig: Figure, title: str) -> str:
    """The figure as inline SVG text (no XML prologue; text kept as text, so that it is
    searchable and small), labelled ``title`` for screen readers."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "recallkit"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = _XML_HEAD.sub("", buffer.getvalue(), count=1)
    from html import escape

    return text.replace("<svg ", f'<svg role="img" aria-label="{escape(title)}" ', 1)


@plain_text
def save(fig: Figure, out: str | os.PathLike[str]) -> Path:
    """Write ``fig`` to ``out`` (``.png``, ``.svg`` or ``.pdf``, by its extension), atomically."""
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in FIGURE_FORMATS:
        raise ValueError(f"The chart file '{out}' must end in {', '.join(FIGURE_FORMATS)}.")
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "recallkit"}):
        with atomic_write(out, "wb") as handle:
            fig.savefig(handle, format=suffix[1:], metadata=_metadata(suffix))
    return out


def _metadata(suffix: str) -> dict[str, Any]:
    if suffix == ".svg":
        return {"Date": None}
    if suffix == ".pdf":
        return {"CreationDate": None, "ModDate": None}
    return {}
