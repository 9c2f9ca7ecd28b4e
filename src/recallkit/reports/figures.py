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
        The figure (names drawn as written, never as mathtext), laid out for its size; ``None``
        when no run holds a recall@K.
    """
    from matplotlib.figure import Figure

    curves = []
    for run in summary.runs:
        points = sorted((k, name) for name in run.metrics if (k := _recall_k(name)) is not None)
        if points:
            curves.append((run.name, points))
    if not curves:
        return None
    fig = Figure(figsize=(6.4, 3.8), dpi=100)
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
    title = ax.set_title(f"recall@K of {who}{bars}", fontsize="medium")
    # Handles and names given: a name that begins with "_" is still in the legend.
    legend = ax.legend(
        handles,
        [name for name, _ in curves],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize="small",
        borderaxespad=0,
    )
    _lay_out_curves(fig, ax, title, legend)
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
        The figure (names drawn as written, never as mathtext), laid out for its size.
    """
    from matplotlib.figure import Figure

    metrics = list(metrics if metrics is not None else comparison.metrics)
    pairs = list(dict.fromkeys((r.a, r.b) for r in comparison.rows))
    height = 0.9 + len(metrics) * (0.55 + 0.32 * len(pairs))
    fig = Figure(figsize=(6.8, height), dpi=100)
    axes = fig.subplots(len(metrics), 1, squeeze=False)[:, 0]
    conf = f"{100 * comparison.confidence:g}%"
    titles = []
    for ax, metric in zip(axes, metrics, strict=True):
        rows = [comparison.row(metric, a, b) for a, b in pairs]
        labels = [f"{r.a} − {r.b}" for r in rows]
        # One line of intervals (broken by NaN) and one of markers per colour, not per row.
        for significant in (True, False):
            chosen = [(y, r) for y, r in enumerate(rows) if bool(r.significant) is significant]
            if not chosen:
                continue
            colour = SIGNIFICANT if significant else NOT_SIGNIFICANT
            spans = [(y, r) for y, r in chosen if not math.isnan(r.low)]
            if spans:
                ax.plot(
                    [x for _, r in spans for x in (r.low, r.high, math.nan)],
                    [v for y, _ in spans for v in (y, y, math.nan)],
                    color=colour,
                    linewidth=2,
                    solid_capstyle="butt",
                )
            ax.plot(
                [r.difference for _, r in chosen],
                [y for y, _ in chosen],
                marker="o",
                markersize=7,
                color=colour,
                markerfacecolor=colour if significant else "white",
                linestyle="none",
            )
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(rows)), labels)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        lower = direction(metric) == "lower"
        side = "left" if lower else "right"
        title = ax.set_title(
            f"{metric} ({'lower' if lower else 'higher'} is better: {side} of 0, the first run "
            "is better)",
            fontsize="small",
            loc="left",
        )
        titles.append(title)
        ax.grid(True, axis="x", alpha=0.3)
        ax.tick_params(labelsize="small")
    axes[-1].set_xlabel(f"difference a − b with its {conf} paired bootstrap interval")
    test = {"auto": "McNemar (0/1) or randomization", "randomization": "randomization"}.get(
        comparison.test, "bootstrap"
    )
    suptitle = fig.suptitle(
        f"Paired differences of {len(comparison.runs)} runs\nfilled red: significant "
        f"({test} test, {comparison.correction}, alpha {comparison.alpha:g})",
        fontsize="medium",
        va="top",
    )
    _lay_out_panels(fig, list(axes), titles, suptitle, "small")
    return fig


# The figures' layout, computed once when a figure is made, from the sizes of its texts in
# points, rather than by a layout engine at every draw: each axes gets the room its titles,
# labels and tick labels need, and the rest of the figure.

#: Points kept free between the figure's edge and what is drawn, and between stacked panels.
_EDGE = 4.0
_GAP = 6.0


class _Ruler:
    """Sizes in points of the texts of ``fig``, as a PNG at the figure's dpi lays them out.

    Text hinted to the pixels is up to a tenth wider at small sizes than its outlines in an
    SVG or PDF file, and at most a fraction of a point narrower (which the margins leave room
    for): measured so, a text has its room in every format."""

    def __init__(self, fig: Figure) -> None:
        from matplotlib.backends.backend_agg import RendererAgg

        self.dpi = float(fig.dpi)
        self.fig = fig
        self.width, self.height = (float(v) * 72 for v in fig.get_size_inches())
        # Its canvas is never drawn on: the smallest will do.
        self.renderer = RendererAgg(1, 1, self.dpi)
        self._texts: dict[tuple[str, Any], tuple[float, float]] = {}
        self._sizes: dict[int, tuple[Any, tuple[float, float]]] = {}

    def size(self, artist: Any) -> tuple[float, float]:
        """Width and height of a text or legend (measured once); ``(0, 0)`` when it draws
        nothing."""
        if not artist.get_visible() or (hasattr(artist, "get_text") and not artist.get_text()):
            return 0.0, 0.0
        if id(artist) not in self._sizes:
            box = artist.get_window_extent(self.renderer)
            scale = 72 / self.dpi
            self._sizes[id(artist)] = artist, (box.width * scale, box.height * scale)
        return self._sizes[id(artist)][1]

    def text(self, text: str, fontsize: Any) -> tuple[float, float]:
        """Width and height of one line of ``text`` in ``fontsize``; ``(0, 0)`` when empty."""
        from matplotlib.text import Text

        if not text:
            return 0.0, 0.0
        if (text, fontsize) not in self._texts:
            artist = Text(0, 0, text, fontsize=fontsize)
            artist.set_figure(self.fig)
            self._texts[text, fontsize] = self.size(artist)
        return self._texts[text, fontsize]

    def ticks(self, axis: Any, fontsize: Any) -> tuple[list[float], float, float]:
        """The widths of the tick labels (in ``fontsize``) that ``axis`` shows for the axes'
        present position, in order, their height, and the height of its offset text (with its
        pad; 0 if none). The axis's ticks themselves are made when the figure is drawn."""
        locs = list(axis.get_majorticklocs())
        labels = axis.major.formatter.format_ticks(locs)
        low, high = sorted(axis.get_view_interval())
        slack = 1e-9 * (high - low)
        shown = [t for x, t in zip(locs, labels, strict=True) if low - slack <= x <= high + slack]
        sizes = [self.text(t, fontsize) for t in shown]
        offset = self.text(axis.major.formatter.get_offset(), axis.offsetText.get_fontsize())
        extra = offset[1] + axis.OFFSETTEXTPAD if offset[1] else 0.0
        return [w for w, _ in sizes], max((h for _, h in sizes), default=0.0), extra


def _tick_room(axis: str) -> float:
    """Points from an axes' edge to its tick labels (tick length and pad, ticks outside)."""
    import matplotlib

    rc = matplotlib.rcParams
    inside = rc[f"{axis}tick.direction"] == "in"
    return (0.0 if inside else rc[f"{axis}tick.major.size"]) + rc[f"{axis}tick.major.pad"]


def _lay_out_panels(
    fig: Figure, axes: list[Any], titles: list[Any], suptitle: Any, fontsize: Any
) -> None:
    """Stack ``axes`` (one per row) under ``suptitle`` (a figure text at the top, centred),
    each with its title (``titles``, one line each) above and its x tick labels (in
    ``fontsize``, as are the y tick labels) below, the last with the x label; panels of equal
    height."""
    import matplotlib

    rc = matplotlib.rcParams
    ruler = _Ruler(fig)
    width, height = ruler.width, ruler.height
    top = _EDGE + ruler.size(suptitle)[1] + _GAP
    above = [ruler.size(title)[1] + rc["axes.titlepad"] for title in titles]
    label = ruler.size(axes[-1].xaxis.label)[1]
    label = label + axes[-1].xaxis.labelpad if label else 0.0
    y_labels = [w for ax in axes for w in ruler.ticks(ax.yaxis, fontsize)[0]]
    left = _EDGE + max(y_labels, default=0.0) + _tick_room("y")
    right = _EDGE

    def place(below: list[float]) -> None:
        fixed = top + sum(above) + sum(below) + label + _GAP * (len(axes) - 1) + _EDGE
        inner = max((height - fixed) / len(axes), 1.0)
        y = height - top
        for ax, up, down in zip(axes, above, below, strict=True):
            y -= up + inner
            ax.set_position(
                [left / width, y / height, (width - left - right) / width, inner / height]
            )
            y -= down + _GAP

    # First placed with room for one line of tick labels, to learn which ticks show
    # and how wide their labels are; then placed for those labels.
    one = ruler.text("0", fontsize)[1]
    place([_tick_room("x") + one] * len(axes))
    ticks = [ruler.ticks(ax.xaxis, fontsize) for ax in axes]
    below = [(_tick_room("x") + h if h else 0.0) + extra for _, h, extra in ticks]
    for widths, _, _ in ticks:
        if widths:
            left = max(left, _EDGE + widths[0] / 2)
            right = max(right, _EDGE + widths[-1] / 2)
    place(below)
    suptitle.set_y(1 - _EDGE / height)
    for text in [*titles, axes[-1].xaxis.label]:
        _keep_inside(ruler, text, left, width - left - right)


def _lay_out_curves(fig: Figure, ax: Any, title: Any, legend: Any) -> None:
    """Place the one axes of ``fig`` with ``title`` above, its y label and tick labels to the
    left, its x label and tick labels below, and ``legend`` to its right."""
    import matplotlib

    rc = matplotlib.rcParams
    ruler = _Ruler(fig)
    width, height = ruler.width, ruler.height
    top = _EDGE + ruler.size(title)[1] + rc["axes.titlepad"]
    x_widths, x_height, x_extra = ruler.ticks(ax.xaxis, rc["xtick.labelsize"])
    bottom = _EDGE + x_extra + (x_height + _tick_room("x") if x_height else 0.0)
    x_label = ruler.size(ax.xaxis.label)[1]
    bottom += x_label + ax.xaxis.labelpad if x_label else 0.0
    legend_width = ruler.size(legend)[0]
    # Placed once to learn the y ticks (their number follows the axes' height).
    ax.set_position([0.2, bottom / height, 0.6, (height - top - bottom) / height])
    y_widths, _, y_extra = ruler.ticks(ax.yaxis, rc["ytick.labelsize"])
    top += y_extra
    y_label = ruler.size(ax.yaxis.label)[0]
    left = _EDGE + max(y_widths, default=0.0) + _tick_room("y")
    left += y_label + ax.yaxis.labelpad if y_label else 0.0
    if x_widths:
        left = max(left, _EDGE + x_widths[0] / 2)
    # The legend's left edge is at 1.01 of the axes' width.
    inner = (width - left - _EDGE - legend_width) / 1.01
    if x_widths:
        inner = min(inner, width - left - _EDGE - x_widths[-1] / 2)
    inner = max(inner, 1.0)
    inner_height = height - top - bottom
    ax.set_position([left / width, bottom / height, inner / width, inner_height / height])
    _keep_inside(ruler, title, left, inner)


def _keep_inside(ruler: _Ruler, title: Any, left: float, inner: float) -> None:
    """Move an axes' ``title`` or x label (placed in the axes' coordinates) sideways as little
    as keeps it inside the figure, when it is wider than the room beside the axes; ``left`` and
    ``inner`` are the axes' left edge and width in points."""
    width = ruler.size(title)[0]
    if not width:
        return
    x = left + title.get_position()[0] * inner
    start = x - {"left": 0.0, "center": width / 2, "right": width}[title.get_horizontalalignment()]
    # Never past the left edge: a title wider than the figure keeps its start in view.
    shift = max(min(ruler.width - _EDGE - (start + width), 0.0), _EDGE - start)
    if shift:
        title.set_x(title.get_position()[0] + shift / inner)


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
