"""Recall@K against run tag (epochs, checkpoints) from a history file, drawn with matplotlib."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recallkit._atomic import atomic_write
from recallkit.runner._errors import RunnerError
from recallkit.runner.history import read_history

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_FORMATS = (".png", ".svg", ".pdf")


def _recall_keys(records: Sequence[Mapping[str, Any]]) -> list[str]:
    keys: list[str] = []
    for record in records:
        for key in record["recall"]:
            if key not in keys:
                keys.append(key)
    return sorted(keys, key=lambda k: int(k.split("@")[1]) if k.split("@")[-1].isdigit() else 0)


def recall_limits(values: Sequence[float]) -> tuple[float, float]:
    """The y-axis range of the recall plot: the values' range with a margin, within [0, 1].

    The margin is a tenth of the range, at least 0.02, so that 0.73 -> 0.80 fills the plot
    instead of a sliver of a 0-1 axis; NaN values are left out (none at all: 0 to 1).

    >>> recall_limits([0.73, 0.80])
    (0.71, 0.82)
    >>> recall_limits([0.0, 1.0])
    (0.0, 1.0)
    >>> recall_limits([0.5])
    (0.48, 0.52)
    """
    finite = [float(v) for v in values if not math.isnan(float(v))]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    margin = max((high - low) / 10, 0.02)
    return round(max(0.0, low - margin), 10), round(min(1.0, high + margin), 10)


def history_figure(
    records: Sequence[Mapping[str, Any]], keys: Sequence[str], title: str
) -> Figure:
    """The recall plot as a matplotlib figure: one line per key of ``recall``, tags on x."""
    from matplotlib.figure import Figure

    tags = [str(r["tag"]) for r in records]
    x = list(range(len(records)))
    fig = Figure(figsize=(6.4, 3.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    plotted: list[float] = []
    for key in keys:
        y = [r["recall"].get(key) for r in records]
        values = [float("nan") if v is None else float(v) for v in y]
        plotted += values
        # clip_on=False: a point at exactly 0 or 1 sits on the axis edge and shows whole.
        ax.plot(x, values, marker="o", label=key, clip_on=False)
    slanted = len(tags) > 6
    ax.set_xticks(x, tags, rotation=30 if slanted else 0, ha="right" if slanted else "center")
    ax.set_xlabel("run")
    ax.set_ylabel("recall@K")
    ax.set_ylim(*recall_limits(plotted))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    ax.set_title(title, fontsize="medium")
    return fig


def plot_history(
    history: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    out: str | os.PathLike[str],
    *,
    ks: Sequence[int] | None = None,
    title: str | None = None,
) -> Path:
    """Draw one line per recall@K over the runs of ``history``, in file order, tags on the x axis.

    ``history`` is a history file (``--history runs.jsonl``) or its records. ``out`` ends in
    ``.png``, ``.svg`` or ``.pdf``; it is written atomically. Returns ``out``.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "recall.png"
    >>> runs = [{"tag": "epoch-1", "recall": {"recall@1": 0.5}},
    ...         {"tag": "epoch-2", "recall": {"recall@1": 0.75}}]
    >>> plot_history(runs, out).stat().st_size > 0
    True
    """
    out = Path(out)
    if out.suffix.lower() not in _FORMATS:
        raise RunnerError(f"The plot file '{out}' must end in {', '.join(_FORMATS)}.")
    if isinstance(history, str | os.PathLike):
        source = str(history)
        records = read_history(history)
    else:
        source = "runs"
        records = list(history)
    if not records:
        raise RunnerError(f"The history {source} has no runs to plot.")
    keys = _recall_keys(records)
    if ks is not None:
        wanted = [f"recall@{int(k)}" for k in ks]
        missing = [k for k in wanted if k not in keys]
        if missing:
            raise RunnerError(
                f"The history {source} has no {', '.join(missing)}; it has {', '.join(keys)}."
            )
        keys = wanted
    fig = history_figure(records, keys, title or f"recall@K across runs ({Path(source).name})")
    with atomic_write(out, "wb") as handle:
        fig.savefig(handle, format=out.suffix.lower()[1:])
    return out
