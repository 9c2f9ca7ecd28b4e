"""Recall@K against run tag (epochs, checkpoints) from a history file, drawn with matplotlib.

Each history record carries the definitions its values were computed under
(:mod:`recallkit.definitions`). A run whose definitions differ from the reference run's (the
first run that records them, normally run 1) is marked ``*`` on the x axis, and a run that
records none (written before they were recorded) ``?``, when others do; the axis label says
what the marks mean, and a note names the runs and the fields. matplotlib comes with the
``plot`` extra; without it :func:`plot_history` raises one
:class:`recallkit._extras.MissingExtraError` before it reads or writes anything.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recallkit._atomic import atomic_write
from recallkit._extras import require
from recallkit.definitions import check_definitions, differences
from recallkit.records import metrics_of
from recallkit.runner._errors import RunnerError
from recallkit.runner.history import read_history

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_FORMATS = (".png", ".svg", ".pdf")
OTHER = "*"
UNKNOWN = "?"
_LISTED = 5


def _recall_keys(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every metric of the runs: recall@K first by K, then the others in order of appearance."""
    keys: list[str] = []
    for record in records:
        for key in metrics_of(record):
            if key not in keys:
                keys.append(key)
    recall = sorted((k for k in keys if _recall_k(k) is not None), key=_recall_k)
    return recall + [k for k in keys if _recall_k(k) is None]


def _recall_k(name: str) -> int | None:
    """The K of a recall@K name, else ``None`` (names are the metric registry's)."""
    from recallkit.metrics import Recall, parse_one

    metric = parse_one(name)
    return metric.k if isinstance(metric, Recall) else None


def _recall_name(k: int) -> str:
    from recallkit.metrics import Recall

    return Recall(k).name


def _axis_label(keys: Sequence[str]) -> str:
    """``recall@K`` when every line is a recall@K, else ``value``."""
    return "recall@K" if keys and all(_recall_k(k) is not None for k in keys) else "value"


def _run_name(number: int, record: Mapping[str, Any]) -> str:
    return f"{number} ({record.get('tag')})"


def definitions_marks(
    records: Sequence[Mapping[str, Any]], source: str = "runs"
) -> tuple[list[str], list[str]]:
    """Each run's mark on the plot, and the notes that explain them.

    The reference is the first run that records its definitions (normally run 1). A run is
    marked ``"*"`` when its definitions differ from the reference's (the ``recallkit``
    version aside), ``"?"`` when it records none while some run does, and ``""`` otherwise;
    a history in which no run records them is not marked. A ``definitions`` record that is
    not one (:func:`recallkit.definitions.check_definitions`) is a :class:`RunnerError`
    naming the run.

    >>> from recallkit.definitions import definitions
    >>> runs = [{"tag": "e1", "definitions": definitions("cosine", "ids")},
    ...         {"tag": "e2", "definitions": definitions("dot", "ids")}, {"tag": "e3"}]
    >>> marks, notes = definitions_marks(runs)
    >>> marks
    ['', '*', '?']
    >>> for note in notes:
    ...     print(note)
    run 2 (e2) of runs uses other definitions than run 1 (e1): similarity; marked * on the plot.
    run 3 (e3) of runs records no definitions (written before recallkit recorded them); marked \
? on the plot.
    """
    found: list[Mapping[str, Any] | None] = []
    for number, record in enumerate(records, start=1):
        value = record.get("definitions")
        if value is not None:
            where = f"Run {_run_name(number, record)} of {source} has a 'definitions' record that"
            try:
                check_definitions(value, where)
            except ValueError as error:
                raise RunnerError(str(error)) from None
        found.append(value)
    known = [i for i, d in enumerate(found) if d is not None]
    if not known:
        return [""] * len(records), []
    ref = known[0]
    reference = found[ref]
    assert reference is not None
    marks: list[str] = []
    other: dict[int, list[str]] = {}
    for i, d in enumerate(found):
        if d is None:
            marks.append(UNKNOWN)
            continue
        fields = differences(reference, d)
        marks.append(OTHER if fields else "")
        if fields:
            other[i] = fields
    notes = []
    if other:
        fields = list(dict.fromkeys(f for listed in other.values() for f in listed))
        runs = _runs_listed([_run_name(i + 1, records[i]) for i in other])
        verb = "uses" if len(other) == 1 else "use"
        notes.append(
            f"{runs} of {source} {verb} other definitions than run "
            f"{_run_name(ref + 1, records[ref])}: {', '.join(fields)}; marked {OTHER} on the plot."
        )
    unknown = [i for i, d in enumerate(found) if d is None]
    if unknown:
        runs = _runs_listed([_run_name(i + 1, records[i]) for i in unknown])
        verb = "records" if len(unknown) == 1 else "record"
        notes.append(
            f"{runs} of {source} {verb} no definitions (written before recallkit recorded "
            f"them); marked {UNKNOWN} on the plot."
        )
    return marks, notes


def _runs_listed(names: Sequence[str]) -> str:
    word = "run" if len(names) == 1 else "runs"
    shown = ", ".join(names[:_LISTED])
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return f"{word} {shown}{more}"


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
    records: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    title: str,
    marks: Sequence[str] | None = None,
) -> Figure:
    """The history plot as a matplotlib figure: one line per metric, tags on x.

    ``marks`` (from :func:`definitions_marks`) follow the tags, and the x label explains them.
    """
    from matplotlib.figure import Figure

    marks = list(marks) if marks is not None else [""] * len(records)
    tags = [f"{r['tag']} {m}" if m else str(r["tag"]) for r, m in zip(records, marks, strict=True)]
    x = list(range(len(records)))
    fig = Figure(figsize=(6.4, 3.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    plotted: list[float] = []
    for key in keys:
        y = [metrics_of(r).get(key) for r in records]
        values = [float("nan") if v is None else float(v) for v in y]
        plotted += values
        # clip_on=False: a point at exactly 0 or 1 sits on the axis edge and shows whole.
        ax.plot(x, values, marker="o", label=key, clip_on=False)
    slanted = len(tags) > 6
    ax.set_xticks(x, tags, rotation=30 if slanted else 0, ha="right" if slanted else "center")
    legend = []
    if OTHER in marks:
        ref = next(i for i, r in enumerate(records) if r.get("definitions") is not None)
        legend.append(f"{OTHER} other definitions than run {ref + 1}")
    if UNKNOWN in marks:
        legend.append(f"{UNKNOWN} definitions not recorded")
    ax.set_xlabel("run" + (f"   ({'; '.join(legend)})" if legend else ""))
    ax.set_ylabel(_axis_label(keys))
    ax.set_ylim(*recall_limits(plotted))
    ax.grid(True, alpha=0.3)
    # Beside the axes, not over them: a legend inside covers the highest lines.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", borderaxespad=0)
    ax.set_title(title, fontsize="medium")
    return fig


def plot_history(
    history: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    out: str | os.PathLike[str],
    *,
    ks: Sequence[int] | None = None,
    title: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Draw one line per recall@K over the runs of ``history``, in file order, tags on the x axis.

    ``history`` is a history file (``--history runs.jsonl``) or its records. ``out`` ends in
    ``.png``, ``.svg`` or ``.pdf``; it is written atomically. Runs whose definitions differ
    from the first run's are marked (:func:`definitions_marks`), and the notes that name them
    go to ``log`` when given. Returns ``out``.

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
    require("recallkit.runner.plot_history", "matplotlib", extra="plot")
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
        wanted = [_recall_name(int(k)) for k in ks]
        missing = [k for k in wanted if k not in keys]
        if missing:
            raise RunnerError(
                f"The history {source} has no {', '.join(missing)}; it has {', '.join(keys)}."
            )
        keys = wanted
    marks, notes = definitions_marks(records, source)
    name = Path(source).name
    fig = history_figure(records, keys, title or f"recall@K across runs ({name})", marks)
    with atomic_write(out, "wb") as handle:
        fig.savefig(handle, format=out.suffix.lower()[1:])
    for note in notes:
        if log is not None:
            log(note)
    return out
