"""Metrics against run tag (epochs, checkpoints, models) from a history file, drawn with matplotlib.

Runs whose tags read as steps of one training (``epoch-1``, ``epoch-2``, ...) are drawn as a
line across them, at their numbers; runs that are different models (any other tags) as bars,
never joined by a line. The title and the axes name the metrics, and a lower-is-better metric
(MnR, MedR) is drawn on an axis of its own that says so.

Each history record carries the definitions its values were computed under
(``recallkit.runfiles.definitions``). A run whose definitions differ from the reference run's
(the
first run that records them, normally run 1) is marked ``*`` on the x axis, and a run that
records none (written before they were recorded) ``?``, when others do; the axis label says
what the marks mean, and a note names the runs and the fields. matplotlib comes with the
``plot`` extra; without it [`plot_history`][plot_history] raises one
[`recallkit._loading.MissingExtraError`][recallkit._loading.MissingExtraError] before it reads or
writes anything.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recallkit._loading import require
from recallkit.exceptions import RunnerError
from recallkit.runfiles._atomic import atomic_write
from recallkit.runfiles.definitions import check_definitions, differences
from recallkit.runfiles.records import metrics_of
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


def _lower(name: str) -> bool:
    """Whether lower values of metric ``name`` are better (MnR, MedR)."""
    from recallkit.metrics import parse_one

    metric = parse_one(name)
    return metric is not None and metric.direction == "lower"


def _listed(keys: Sequence[str], most: int = 4) -> str:
    """Metric names as a title says them: ``recall@K (K = 1, 5, 10)`` when they are all
    recall@K, else ``a, b and c`` (the first ``most``, then how many more).

    >>> _listed(["recall@1", "recall@10"]), _listed(["MAP@R"]), _listed(["recall@1", "MnR"])
    ('recall@K (K = 1, 10)', 'MAP@R', 'recall@1 and MnR')
    """
    ks = [_recall_k(k) for k in keys]
    if len(keys) > 1 and all(k is not None for k in ks):
        return f"recall@K (K = {', '.join(map(str, ks))})"
    if len(keys) > most:
        return f"{', '.join(keys[:most])} and {len(keys) - most} more"
    return keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"


def _axis_label(keys: Sequence[str]) -> str:
    """What the y axis shows: ``recall@K`` when every line is a recall@K, else the metrics'
    names; ``(lower is better)`` for MnR and MedR.

    >>> _axis_label(["recall@1", "recall@5"]), _axis_label(["MnR", "MedR"])
    ('recall@K', 'MnR, MedR (lower is better)')
    """
    if len(keys) > 1 and all(_recall_k(k) is not None for k in keys):
        label = "recall@K"
    else:
        label = ", ".join(keys) if len(keys) <= 4 else f"{', '.join(keys[:3])}, ..."
    return label + (" (lower is better)" if keys and all(_lower(k) for k in keys) else "")


#: The tags that read as steps of one training: an optional word (epoch, step, ...) and a number.
_STEP = re.compile(
    r"^(?P<unit>epochs?|ep|e|steps?|s|iters?|iterations?|it|checkpoints?|ckpt|rounds?)?"
    r"[-_ .=@:]?(?P<n>\d+)$",
    re.I,
)
_UNITS = {"e": "epoch", "ep": "epoch", "s": "step", "it": "iteration", "iter": "iteration",
          "ckpt": "checkpoint"}  # fmt: skip
#: How a history is drawn: ``auto`` (a line when the tags read as steps, else bars), or one.
KINDS = ("auto", "line", "points", "bars")


def steps(tags: Sequence[Any]) -> tuple[str, list[int]] | None:
    """``(unit, numbers)`` when the tags read as steps of one training (``epoch-1``,
    ``epoch-2``, ``step_500``, ``3``: one word or none, and numbers that increase), else
    ``None``: the runs are then different models, drawn as bars or points, not a line.

    >>> steps(["epoch-0", "epoch-1", "epoch-3"])
    ('epoch', [0, 1, 3])
    >>> steps(["resnet50", "vit-b16"]) is None, steps(["epoch-2", "epoch-1"]) is None
    (True, True)
    """
    units, numbers = set(), []
    for tag in tags:
        match = _STEP.match(str(tag).strip())
        if match is None:
            return None
        unit = (match.group("unit") or "").lower()
        unit = unit[:-1] if len(unit) > 1 and unit.endswith("s") else unit
        unit = _UNITS.get(unit, unit)
        units.add(unit)
        numbers.append(int(match.group("n")))
    if len(units) != 1 or any(b <= a for a, b in itertools.pairwise(numbers)):
        return None
    return units.pop() or "step", numbers


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
    not one ([`check_definitions`][recallkit.runfiles.definitions.check_definitions]) is a
    [`RunnerError`][recallkit.exceptions.RunnerError] naming the run.

    >>> from recallkit.runfiles.definitions import definitions
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


def _limits(values: Sequence[float]) -> tuple[float, float]:
    """The y-axis range of a rank metric (MnR, MedR): the values with a tenth of their range
    as margin (at least 0.5), never below 0."""
    finite = [float(v) for v in values if not math.isnan(float(v))]
    if not finite:
        return 0.0, 1.0
    low, high = min(finite), max(finite)
    margin = max((high - low) / 10, 0.5)
    return max(0.0, low - margin), high + margin


def _plain_text(draw: Callable[..., Any]) -> Callable[..., Any]:
    """``draw`` run with matplotlib's text drawn as written: a tag, title or metric name with
    ``$`` is never read as mathtext (nor as LaTeX)."""

    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
            return draw(*args, **kwargs)

    return wrapper


@_plain_text
def history_figure(
    records: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    title: str,
    marks: Sequence[str] | None = None,
    kind: str = "auto",
) -> Figure:
    """The history plot as a matplotlib figure: each metric across the runs, tags on x.

    ``kind`` is ``"line"`` (runs that are steps of one training, placed at their numbers),
    ``"points"`` or ``"bars"`` (runs that are different models: no line joins them), or
    ``"auto"``: a line when the tags read as steps ([`steps`][steps]), else bars. Metrics where
    higher is better share one panel (within [0, 1]); lower-is-better ones (MnR, MedR) get a
    panel of their own, its axis saying so. ``marks`` (from
    [`definitions_marks`][definitions_marks]) follow the tags, and the x label explains them.
    """
    from matplotlib.figure import Figure

    if kind not in KINDS:
        raise RunnerError(f"A plot's kind is one of {', '.join(KINDS)}. Got {kind!r}.")
    marks = list(marks) if marks is not None else [""] * len(records)
    tags = [f"{r['tag']} {m}" if m else str(r["tag"]) for r, m in zip(records, marks, strict=True)]
    sequence = steps([r["tag"] for r in records])
    if kind == "auto":
        kind = "line" if sequence is not None and len(records) > 1 else "bars"
    groups = [g for g in ([k for k in keys if not _lower(k)], [k for k in keys if _lower(k)]) if g]
    if kind == "line" and sequence is not None:
        x: list[float] = [float(n) for n in sequence[1]]
        unit = sequence[0]
    else:
        x = [float(i) for i in range(len(records))]
        unit = "run"
    fig = Figure(figsize=(6.8, 1.2 + 2.6 * len(groups)), dpi=100, layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False, sharex=True)[:, 0]
    colour = 0  # each metric its own colour, across the panels
    for ax, group in zip(axes, groups, strict=True):
        plotted: list[float] = []
        width = 0.8 / len(group)
        for j, key in enumerate(group):
            colour += 1
            y = [metrics_of(r).get(key) for r in records]
            values = [float("nan") if v is None else float(v) for v in y]
            plotted += values
            if kind == "bars":
                offset = [v - 0.4 + width * (j + 0.5) for v in x]
                bars = ax.bar(offset, values, width=width * 0.95, label=key, color=f"C{colour - 1}")
                if len(records) * len(group) <= 24:
                    ax.bar_label(bars, fmt="%.3f" if not _lower(key) else "%.1f", fontsize=6.5)
            else:
                # clip_on=False: a point at exactly 0 or 1 sits on the axis edge and shows whole.
                style = "-" if kind == "line" else "none"
                ax.plot(
                    x,
                    values,
                    marker="o",
                    linestyle=style,
                    label=key,
                    color=f"C{colour - 1}",
                    clip_on=False,
                )
        lower = _lower(group[0])
        if kind == "bars":  # bars start at 0: their length is the value
            finite = [v for v in plotted if not math.isnan(v)]
            ax.set_ylim(0.0, max(max(finite, default=1.0) * 1.08, 1.0) if lower else 1.0)
        else:
            ax.set_ylim(*(_limits(plotted) if lower else recall_limits(plotted)))
        ax.set_ylabel(_axis_label(group))
        ax.grid(True, axis="y" if kind == "bars" else "both", alpha=0.3)
        # Beside the axes, not over them: a legend inside covers the highest lines.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", borderaxespad=0)
    slanted = len(tags) > 6 or sum(len(t) for t in tags) > 60
    axes[-1].set_xticks(x, tags, rotation=30 if slanted else 0, ha="right" if slanted else "center")
    legend = []
    if OTHER in marks:
        ref = next(i for i, r in enumerate(records) if r.get("definitions") is not None)
        legend.append(f"{OTHER} other definitions than run {ref + 1}")
    if UNKNOWN in marks:
        legend.append(f"{UNKNOWN} definitions not recorded")
    axes[-1].set_xlabel(unit + (f"   ({'; '.join(legend)})" if legend else ""))
    axes[0].set_title(title, fontsize="medium")
    return fig


def plot_title(
    keys: Sequence[str], records: Sequence[Mapping[str, Any]], kind: str, name: str
) -> str:
    """The title of a history plot: the metrics, and across what they are drawn.

    >>> runs = [{"tag": "epoch-1"}, {"tag": "epoch-2"}]
    >>> plot_title(["MAP@R"], runs, "auto", "runs.jsonl")
    'MAP@R across epochs (runs.jsonl)'
    >>> plot_title(["recall@1", "MnR"], [{"tag": "resnet50"}, {"tag": "vit"}], "auto", "h.jsonl")
    'recall@1 and MnR of 2 runs (h.jsonl)'
    """
    sequence = steps([r["tag"] for r in records])
    if sequence is not None and len(records) > 1 and kind in ("auto", "line"):
        return f"{_listed(keys)} across {sequence[0]}s ({name})"
    return f"{_listed(keys)} of {len(records)} run{'s' if len(records) != 1 else ''} ({name})"


@_plain_text
def plot_history(
    history: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    out: str | os.PathLike[str],
    *,
    ks: Sequence[int] | None = None,
    metrics: Sequence[str] | None = None,
    kind: str = "auto",
    title: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Draw metrics over the runs of ``history``, in file order, tags on the x axis.

    ``history`` is a history file (``--history runs.jsonl``) or its records. ``metrics`` (names
    or aliases) and ``ks`` (recall@K) choose what is drawn, by default every metric; ``kind``
    how ([`history_figure`][history_figure]: a line only for runs that are steps of one training).
    The title names the metrics ([`plot_title`][plot_title]). ``out`` ends in ``.png``, ``.svg`` or
    ``.pdf``; it is written atomically. Runs whose definitions differ from the first run's are
    marked ([`definitions_marks`][definitions_marks]), and the notes that name them go to ``log``
    when given. Returns ``out``.

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
    if kind not in KINDS:
        raise RunnerError(f"A plot's kind is one of {', '.join(KINDS)}. Got {kind!r}.")
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
    wanted: list[str] = []
    if ks is not None:
        wanted += [_recall_name(int(k)) for k in ks]
    if metrics is not None:
        wanted += [_canonical(m) for m in metrics]
    if wanted:
        wanted = list(dict.fromkeys(wanted))
        missing = [k for k in wanted if k not in keys]
        if missing:
            raise RunnerError(
                f"The history {source} has no {', '.join(missing)}; it has {', '.join(keys)}."
            )
        keys = wanted
    marks, notes = definitions_marks(records, source)
    name = Path(source).name
    fig = history_figure(records, keys, title or plot_title(keys, records, kind, name), marks, kind)
    with atomic_write(out, "wb") as handle:
        fig.savefig(handle, format=out.suffix.lower()[1:])
    for note in notes:
        if log is not None:
            log(note)
    return out


def _canonical(name: str) -> str:
    """A metric's name as records hold it (an alias, ``map@r``, as ``MAP@R``)."""
    from recallkit.metrics import parse_one

    metric = parse_one(name)
    return name if metric is None else metric.name
