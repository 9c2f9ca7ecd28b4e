"""The HTML report: one self-contained file for one run or a comparison of several.

The page opens offline: its styles and script are inline, its figures inline SVG (drawn by
matplotlib), its thumbnails ``data:`` URIs, and a Content-Security-Policy forbids any request
(``default-src 'none'``). It shows, in this order: what a reader needs first (each metric's
best run, the significant differences, the worst classes), the runs (name, dataset, encoder,
counts), the metrics with their bootstrap intervals and significance letters, each value's
interval and tie bounds in full, the differences of a comparison (chart and table), recall@K
curves of every run on one figure, a per-class table of every metric (sortable by a click on a
header, filtered, paginated in the page's script: the classes are one JSON blob), the failure
gallery, the queries that only one run gets right at rank 0, and the definitions.
[`SECTIONS`][recallkit.reports.html.SECTIONS] lists them; each decides once whether it is on the
page.

The page is safe to write on a run file someone else wrote: every name, label, id and path is
written as text (the JSON block with ``\\u003c``-style escapes), and thumbnails are read only from
inside the run file's folder and the folders the caller names, after links are resolved
([`image_roots`][recallkit.reports.html.image_roots]); a query shown without one is counted, and
the page says once how many and why.

A run of 60,502 queries and 11,316 classes (Stanford Online Products' size) gives a page of
about 1 MB that headless Chromium opens in about 0.1 s (``benchmarks/bench_report.py``).
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from dataclasses import field as default
from importlib import resources
from pathlib import Path
from typing import Any

from recallkit import metrics as registry
from recallkit.reports.data import (
    Failure,
    OnlyOne,
    ReportRun,
    Summary,
    by_class,
    direction,
    failures,
    only_one_right,
    query_at,
)
from recallkit.reports.tables import legend
from recallkit.runfiles.definitions import _version

__all__ = ["PAGE_SIZE", "render_html"]

#: Classes per page of the per-class table.
PAGE_SIZE = 50
#: Thumbnails' longest side, in pixels.
THUMB = 96
#: The image formats a thumbnail is decoded from (Pillow's names): raster formats Pillow reads
#: itself, none that calls out to another program (EPS runs Ghostscript).
DECODERS = ("PNG", "JPEG", "GIF", "BMP", "WEBP", "TIFF", "PPM")
PAGER_FILTER = (
    "<input type='search' id='class-filter' placeholder='filter classes' "
    "aria-label='filter classes'>"
)
PAGER = (
    "<span id='class-pager'><button type='button' data-step='first'>«</button> "
    "<button type='button' data-step='-1'>‹</button> <span class='where'></span> "
    "<button type='button' data-step='1'>›</button> "
    "<button type='button' data-step='last'>»</button></span>"
)
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _label(value: Any) -> str:
    """A label as the page shows it: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _number(value: float | None, digits: int = 4) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _signed(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:+.4f}"


def _full(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else repr(float(value))


# ----------------------------------------------------------------------------------------------
# Thumbnails: read only from inside the run file's folder or a folder the caller names.


def _resolved(path: str | os.PathLike[str]) -> Path | None:
    """``path`` with its links resolved, or ``None`` when it cannot be (a name too long, a
    null byte, a loop of links)."""
    try:
        return Path(path).resolve()
    except (OSError, ValueError, RuntimeError):
        return None


def _test(check: Callable[[], bool]) -> bool:
    """``check()``, false where the file system refuses the question (a name too long)."""
    try:
        return check()
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class ImageRoots:
    """Where a run's query images are looked for, and the only folders they are read from."""

    #: The folders the queries' paths are tried against, in order (links resolved).
    search: tuple[Path, ...]
    #: The folders a thumbnail may be read from: the run file's and those given (links resolved).
    allowed: tuple[Path, ...]
    #: The image folders the run file records that lie outside ``allowed`` (not searched).
    refused: tuple[str, ...] = ()


def image_roots(run: ReportRun, given: Sequence[str | os.PathLike[str]] = ()) -> ImageRoots:
    """The folders ``run``'s query paths may be relative to, and those images may be read from.

    Images are read only from inside the folders ``given`` (``--images``) and the run file's own
    folder, after links are resolved; the image folder or manifest the run file records
    (``sources``, relative to the run file) is searched when it lies inside them.

    Parameters
    ----------
    run : ReportRun
        The run (its record's ``sources`` and its file).
    given : sequence of path-like
        Folders the caller names.

    Returns
    -------
    ImageRoots
        The folders searched, those allowed, and the recorded folders refused.
    """
    given_dirs = [r for r in map(_resolved, given) if r is not None and _test(r.is_dir)]
    own = None if run.path is None else _resolved(run.path.parent)
    own = own if own is not None and _test(own.is_dir) else None
    allowed = list(dict.fromkeys(given_dirs + ([own] if own is not None else [])))
    search, refused = list(given_dirs), []
    sources = run.record.get("sources") if isinstance(run.record.get("sources"), dict) else {}
    options = sources.get("options") if isinstance(sources.get("options"), dict) else {}
    named = [sources.get("images"), options.get("images"), options.get("query")]
    named.append(options.get("root"))
    for value in named:
        if not isinstance(value, str) or not value or run.path is None:
            continue
        candidate = _resolved(run.path.parent / value)
        if candidate is None:
            continue
        if not any(candidate.is_relative_to(a) for a in allowed):
            refused.append(value)
            continue
        if _test(candidate.is_file):
            candidate = candidate.parent
        if _test(candidate.is_dir):
            search.append(candidate)
    if own is not None:
        search.append(own)
    return ImageRoots(tuple(dict.fromkeys(search)), tuple(allowed), tuple(dict.fromkeys(refused)))


#: Why a query shown has no thumbnail, as the page's note says it.
_WHY = {
    "no path": ("has no image path", "have no image path", " (saved arrays or in-memory images)"),
    "not found": (
        "is not found",
        "are not found",
        (
            " in the run file's folder or the image folder it records (name the folder with "
            "--images)"
        ),
    ),
    "outside": (
        "lies outside",
        "lie outside",
        (
            " the run file's folder and the folders named with --images, so not read (name the "
            "folder with --images to show them)"
        ),
    ),
    "not an image": (
        "does not name",
        "do not name",
        " an image file (by the extension), so not read",
    ),
    "unreadable": ("cannot", "cannot", " be read as an image"),
}


class Thumbnails:
    """``data:`` URIs of query images, when Pillow is installed and the files are images inside
    the folders a run allows ([`image_roots`][recallkit.reports.html.image_roots]); what was not
    shown is counted for the page's note."""

    def __init__(self, roots: dict[str, ImageRoots]) -> None:
        self.roots = roots
        self._cache: dict[Path, str | None] = {}
        self._found: dict[tuple[str, str | None], tuple[str | None, str]] = {}
        #: Per run and query path: ``"shown"`` or why not (``_WHY``).
        self.outcomes: dict[tuple[str, str | None], str] = {}
        try:
            from PIL import Image
        except ImportError:
            self.available = False
            self.extensions: set[str] = set()
        else:
            self.available = True
            self.extensions = {
                ext for ext, kind in Image.registered_extensions().items() if kind in DECODERS
            }

    def uri(self, run: str, path: str | None, *, counted: bool = True) -> str | None:
        """The thumbnail of the query image ``path`` of ``run`` (``None`` when not shown)."""
        if not self.available:
            return None
        key = (run, path)
        if key not in self._found:
            self._found[key] = self._find(self.roots[run], path)
        uri, outcome = self._found[key]
        if counted:
            self.outcomes[(run, path)] = outcome
        return uri

    def _find(self, roots: ImageRoots, path: str | None) -> tuple[str | None, str]:
        if not path:
            return None, "no path"
        outside = False
        for root in roots.search:
            real = _resolved(root / path)
            if real is None:
                continue
            if not any(real.is_relative_to(a) for a in roots.allowed):
                outside = True  # not even asked whether it exists
                continue
            if real.suffix.lower() not in self.extensions:
                return None, "not an image"
            if _test(real.is_file):
                if real not in self._cache:
                    self._cache[real] = _thumbnail(real)
                uri = self._cache[real]
                return uri, "shown" if uri else "unreadable"
        return None, "outside" if outside else "not found"

    def note(self) -> str | None:
        """What the page says of the queries shown without a thumbnail (``None``: none)."""
        counts = Counter(self.outcomes.values())
        missing = len(self.outcomes) - counts["shown"]
        refused = sorted({v for r in self.roots.values() for v in r.refused})
        if not missing and not refused:
            return None
        parts = [
            f"{counts[k]} {one if counts[k] == 1 else many}{rest}"
            for k, (one, many, rest) in _WHY.items()
            if counts[k]
        ]
        total = len(self.outcomes)
        text = (
            f"{missing} of the {total} quer{'y' if total == 1 else 'ies'} shown "
            f"{'has' if missing == 1 else 'have'} no thumbnail"
        )
        text += (": " + "; ".join(parts)) if parts else ""
        if refused:
            text += (
                f". The image folder{'s' if len(refused) > 1 else ''} "
                f"{', '.join(repr(v) for v in refused)} that a run file records lie"
                f"{'' if len(refused) > 1 else 's'} outside its folder: not searched"
            )
        return text + "."


def _thumbnail(path: Path) -> str | None:
    """The thumbnail of the image file ``path`` as a ``data:`` URI, ``None`` when it cannot be
    read as an image (a decoder's error of any kind, or a decompression bomb)."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path, formats=DECODERS) as opened:
                image = opened.convert("RGB")
    except Exception:  # a decoder reading any bytes may raise anything
        return None
    small = max(image.size) < THUMB // 2
    if small:  # digits of 8×8: scaled up without blurring, kept as PNG
        scale = max(1, THUMB // max(image.size))
        image = image.resize((image.width * scale, image.height * scale), Image.NEAREST)
    image.thumbnail((THUMB, THUMB))
    buffer = io.BytesIO()
    if small:
        image.save(buffer, format="PNG", optimize=True)
        kind = "png"
    else:
        image.save(buffer, format="JPEG", quality=82)
        kind = "jpeg"
    return f"data:image/{kind};base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


# ----------------------------------------------------------------------------------------------
# The page's parts.


def _title(summary: Summary) -> str:
    names = summary.names
    if len(names) == 1:
        return f"recallkit report: {names[0]}"
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"recallkit report: {shown} compared"


def _findings(summary: Summary, classes: dict[str, list[Any]]) -> str:
    items = []
    c = summary.comparison
    for metric in summary.metrics[:10]:
        best = summary.best(metric) if len(summary.runs) > 1 else summary.names
        if not best:
            continue
        value = summary.value(best[0], metric)
        spread = summary.intervals.get(best[0], {}).get(metric)
        interval = ""
        if spread is not None and not math.isnan(spread.low):
            interval = f" [{_number(spread.low)}, {_number(spread.high)}]"
        if len(summary.runs) == 1:
            if not math.isnan(value):
                arrow = " (lower is better)" if direction(metric) == "lower" else ""
                items.append(f"<b>{_e(metric)}</b> {_number(value)}{interval}{arrow}")
            continue
        beaten = summary.beats(best[0], metric)
        others = len(summary.runs) - 1
        if c is not None and metric in c.metrics:
            if c.baseline is not None and best[0] != c.baseline:
                others = 1
            verdict = (
                f"significantly better than {', '.join(map(_e, beaten))}"
                if beaten
                else "not significantly better than any other run"
            )
            if beaten and len(beaten) == others:
                verdict = "significantly better than " + (
                    "every other run" if others > 1 else _e(beaten[0])
                )
        else:
            verdict = "not tested"
        items.append(
            f"<b>{_e(metric)}</b>: best {_e(' = '.join(best))} ({_number(value)}{interval}), "
            f"{verdict}"
        )
    if c is not None:
        significant = [r for r in c.rows if r.significant]
        items.append(
            f"{len(significant)} of {len(c.rows)} paired differences are significant "
            '(<a href="#differences">differences</a>)'
        )
    for name, rows in classes.items():
        if not rows or summary.metrics[0] not in rows[0].values:
            continue
        metric = summary.metrics[0]
        worst = _worst(rows, metric)[:3]
        if worst:
            shown = "; ".join(
                f"{_e(_label(r.label))} ({_number(r.values[metric])}"
                + (
                    f", taken for {_e(_label(r.confused_with))}"
                    if r.confused_with is not None
                    else ""
                )
                + ")"
                for r in worst
            )
            who = "" if len(summary.runs) == 1 else f" of {_e(name)}"
            items.append(
                f'worst classes{who} by {_e(metric)}: {shown} (<a href="#classes">all classes</a>)'
            )
    return "<ul class='findings'>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _worst(rows: Sequence[Any], metric: str) -> list[Any]:
    sign = 1 if direction(metric) == "higher" else -1
    kept = [r for r in rows if not math.isnan(r.values.get(metric, math.nan))]
    return sorted(kept, key=lambda r: (sign * r.values[metric], -r.queries))


def _runs_table(summary: Summary) -> str:
    head = [
        "#",
        "run",
        "dataset (queries; gallery)",
        "encoder",
        "queries",
        "evaluated",
        "lone",
        "gallery",
        "dim",
        "similarity",
        "file",
    ]
    rows = []
    for run, letter in zip(summary.runs, summary.letters.values(), strict=True):
        r = run.record
        benchmark = (r.get("sources") or {}).get("benchmark") or {}
        dataset = benchmark.get("title") or r.get("query_source") or "–"
        if r.get("gallery_source") and r.get("gallery_source") != r.get("query_source"):
            dataset = f"{dataset}; {r['gallery_source']}"
        if benchmark and benchmark.get("complete") is False:
            dataset += " (incomplete copy)"
        rows.append(
            [
                letter,
                run.name,
                dataset,
                _encoder(r.get("encoder")),
                r.get("num_queries", len(r["queries"]["ids"])),
                r.get("num_evaluated", "–"),
                r.get("num_excluded", "–"),
                r.get("num_gallery", "–"),
                r.get("embedding_dim", "–"),
                r.get("metric") or (r.get("definitions") or {}).get("similarity") or "–",
                "–" if run.path is None else run.path.name,
            ]
        )
    text = {0, 1, 2, 3, 9, 10}
    return _scroll(_table(head, rows, text, attrs='id="runs-table"'))


def _encoder(encoder: Any) -> str:
    if not isinstance(encoder, dict):
        return "–"
    name = encoder.get("encoder") or encoder.get("model") or "–"
    digest = encoder.get("weights_digest") or encoder.get("weights")
    if isinstance(digest, str) and len(digest) > 16:
        digest = digest[:12]
    return f"{name} (weights {digest})" if digest else str(name)


def _scroll(table: str) -> str:
    """A wide table in a box that scrolls sideways, not the page."""
    return f"<div class='scroll'>{table}</div>"


def _head(head: Sequence[str], text: set[int], attrs: str = "") -> str:
    """A table's opening and header row; the columns in ``text`` hold text (left-aligned)."""
    marked = ' class="text"'
    cells = "".join(
        f'<th scope="col"{marked if i in text else ""}>{_e(h)}</th>' for i, h in enumerate(head)
    )
    return f"<table {attrs}><thead><tr>{cells}</tr></thead><tbody>"


def _table(
    head: Sequence[str], rows: Sequence[Sequence[Any]], text: set[int], attrs: str = ""
) -> str:
    def cls(i: int) -> str:
        return ' class="text"' if i in text else ""

    parts = [_head(head, text, attrs)]
    for row in rows:
        parts.append("<tr>" + "".join(f"<td{cls(i)}>{_e(v)}</td>" for i, v in enumerate(row)))
        parts.append("</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def _metrics_table(summary: Summary) -> str:
    letter = summary.letters
    best = {m: set(summary.best(m, 4)) for m in summary.metrics}
    parts = ['<table id="metrics-table"><thead><tr><th scope="col" class="text">#</th>']
    parts.append('<th scope="col" class="text">run</th>')
    for m in summary.metrics:
        arrow = " ↓" if direction(m) == "lower" else ""
        parts.append(f'<th scope="col">{_e(m)}{arrow}</th>')
    parts.append("</tr></thead><tbody>")
    for run in summary.runs:
        parts.append(
            f'<tr><td class="text">{letter[run.name]}</td><td class="text name">{_e(run.name)}</td>'
        )
        for m in summary.metrics:
            value = run.metrics.get(m, math.nan)
            spread = summary.intervals.get(run.name, {}).get(m)
            classes = "best" if run.name in best[m] else ""
            beaten = summary.beats(run.name, m)
            sup = (
                f'<sup class="beats" title="significantly better than {_e(", ".join(beaten))}">'
                f"{''.join(letter[n] for n in beaten)}</sup>"
                if beaten
                else ""
            )
            ci = ""
            if spread is not None and not math.isnan(spread.low):
                ci = f'<span class="ci">[{_number(spread.low)}, {_number(spread.high)}]</span>'
            parts.append(
                f'<td class="{classes}" data-run="{_e(run.name)}" data-metric="{_e(m)}" '
                f'data-value="{_full(value)}"><span class="v">{_number(value)}</span>{sup}{ci}</td>'
            )
        parts.append("</tr>")
    parts.append("</tbody></table>")
    return _scroll("".join(parts))


def _detail_table(summary: Summary) -> str:
    conf = f"{100 * summary.settings.get('confidence', 0.95):g}%"
    head = ["run", "metric", "value", f"{conf} low", f"{conf} high", "resampled"]
    head += ["ties: worst", "ties: best", "summary"]
    parts = [_head(head, {0, 1, 5, 8}, 'id="detail-table"')]
    for run in summary.runs:
        bounds = run.record.get("bounds") or {}
        for m in summary.metrics:
            if m not in run.metrics:
                continue
            value = run.metrics[m]
            spread = summary.intervals.get(run.name, {}).get(m)
            pessimistic, optimistic = bounds.get(m, (value, value))
            pessimistic = math.nan if pessimistic is None else pessimistic
            optimistic = math.nan if optimistic is None else optimistic
            metric = registry.parse_one(m)
            cells = [
                ("text", "", run.name),
                ("text", "", m),
                ("", f' data-field="value" data-value="{_full(value)}"', _number(value)),
            ]
            for field, v in (
                ("low", spread.low if spread else math.nan),
                ("high", spread.high if spread else math.nan),
            ):
                cells.append(("", f' data-field="{field}" data-value="{_full(v)}"', _number(v)))
            cells.append(("text", "", spread.resampled if spread else "–"))
            for field, v in (("pessimistic", pessimistic), ("optimistic", optimistic)):
                cells.append(("", f' data-field="{field}" data-value="{_full(v)}"', _number(v)))
            cells.append(("text", "", metric.summary if metric else "–"))
            parts.append(f'<tr data-run="{_e(run.name)}" data-metric="{_e(m)}">')
            parts += [f'<td class="{c}"{a}>{_e(t)}</td>' for c, a, t in cells]
            parts.append("</tr>")
    parts.append("</tbody></table>")
    return _scroll("".join(parts))


def _differences(summary: Summary) -> str:
    c = summary.comparison
    if c is None:  # one run, or runs that do not pair: no differences to show
        return ""
    conf = f"{100 * c.confidence:g}%"
    only = any(r.only_a is not None for r in c.rows)
    head = ["metric", "a", "b", "a − b", f"{conf} interval", "p", "p adjusted", "verdict"]
    if only:
        head += ["right in a only", "right in b only"]
    parts = [_head(head, {0, 1, 2, 7}, 'id="differences-table"')]
    for r in c.rows:
        verdict = f"{r.better} better" if r.significant else "not significant"
        cells = [
            ("text", r.metric),
            ("text", r.a),
            ("text", r.b),
            ("", _signed(r.difference)),
            ("", f"[{_signed(r.low)}, {_signed(r.high)}]"),
            ("", f"{r.p_value:.4f}"),
            ("", f"{r.p_adjusted:.4f}"),
            ("text verdict", verdict),
        ]
        if only:
            cells += [("", "–" if r.only_a is None else r.only_a)]
            cells += [("", "–" if r.only_b is None else r.only_b)]
        sig = ' class="sig"' if r.significant else ""
        parts.append(
            f'<tr{sig} data-metric="{_e(r.metric)}" data-a="{_e(r.a)}" data-b="{_e(r.b)}" '
            f'data-difference="{_full(r.difference)}" data-p-adjusted="{_full(r.p_adjusted)}">'
        )
        parts += [f'<td class="{k}">{_e(v)}</td>' for k, v in cells]
        parts.append("</tr>")
    parts.append("</tbody></table>")
    return _scroll("".join(parts))


def _class_blob(summary: Summary, classes: dict[str, list[Any]]) -> dict[str, Any] | None:
    runs = [name for name, rows in classes.items() if rows]
    if not runs:
        return None
    metrics = [m for m in summary.metrics if any(m in classes[n][0].values for n in runs)]
    columns = [
        {"label": "class", "type": "text"},
        {"label": "queries", "type": "int", "title": "the class's queries that count"},
    ]
    for m in metrics:
        lower = direction(m) == "lower"
        columns.append(
            {
                "label": m + (" ↓" if lower else ""),
                "type": "num",
                "title": f"{m} over the class's queries ({'lower' if lower else 'higher'} is "
                "better)",
            }
        )
    columns += [
        {
            "label": "missed at rank 0",
            "type": "int",
            "title": "queries whose nearest gallery item is of another class",
        },
        {
            "label": "most confused with",
            "type": "text",
            "title": "the class the nearest gallery item of its missed queries most often has",
        },
        {"label": "of the missed", "type": "int", "title": "how many missed queries it took"},
    ]
    rows: dict[str, list[list[Any]]] = {}
    for name in runs:
        out = []
        for r in classes[name]:
            values = [r.values.get(m, math.nan) for m in metrics]
            out.append(
                [
                    _label(r.label),
                    r.queries,
                    *[None if math.isnan(v) else round(v, 6) for v in values],
                    r.missed_at_1,
                    None if r.confused_with is None else _label(r.confused_with),
                    r.confused_count if r.confused_with is not None else None,
                ]
            )
        rows[name] = out
    first = 2 if metrics else 0
    order = "ascending"
    if metrics and direction(metrics[0]) == "lower":
        order = "descending"
    return {
        "runs": runs,
        "columns": columns,
        "rows": rows,
        "sort": {"column": first, "order": order},
        "page_size": PAGE_SIZE,
    }


# ----------------------------------------------------------------------------------------------
# Queries: the failures and the queries one run only gets right.


@dataclass
class _Page:
    """What the sections of one page read: computed once, each optional part decided once."""

    summary: Summary
    classes: dict[str, list[Any]]
    thumbs: Thumbnails
    #: Per run: its worst queries and the number missed at rank 0.
    failures: dict[str, tuple[list[Failure], int]]
    #: The queries one run of a pair only gets right.
    only: list[OnlyOne]
    shown: int
    #: matplotlib is installed.
    plots: bool
    blob: dict[str, Any] | None = None
    examples: dict[str, dict[str, list[Failure]]] = default(default_factory=dict)


def _examples(run: ReportRun) -> dict[str, list[Failure]]:
    """Per label (its JSON text), the first few queries of ``run`` that carry it: where the card
    of a missed query finds a picture of the class it was taken for."""
    labels = run.record["queries"].get("labels")
    out: dict[str, list[Failure]] = {}
    for i, label in enumerate(labels or ()):
        found = out.setdefault(json.dumps(label, sort_keys=True), [])
        if len(found) < 4:
            found.append(query_at(run, i))
    return out


def _example_image(page: _Page, run: str, label: Any) -> str | None:
    """A thumbnail of a query of ``run`` labelled ``label`` (``None`` when none can be shown)."""
    if label is None or not page.thumbs.available:
        return None
    if run not in page.examples:
        page.examples[run] = _examples(page.summary.run(run))
    for q in page.examples[run].get(json.dumps(label, sort_keys=True), ()):
        image = page.thumbs.uri(run, q.path, counted=False)
        if image:
            return image
    return None


def _image(alt: str, image: str | None, title: str = "") -> str:
    if image:
        return f'<img alt="{_e(alt)}" title="{_e(title or alt)}" src="{image}">'
    return f'<div class="noimg" title="{_e(title or alt)}">no image</div>'


def _card(q: Failure, image: str | None, lines: Sequence[str], beside: str = "") -> str:
    """One query's card: its thumbnail (and ``beside`` it, what it was taken for), its lines."""
    body = "".join(f"<div>{line}</div>" for line in lines)
    pictures = f"<div class='pictures'>{_image(q.id, image)}{beside}</div>"
    cls = "card pair" if beside else "card"
    return f'<figure class="{cls}" data-query="{_e(q.id)}">{pictures}{body}</figure>'


def _compact(head: Sequence[str], rows: Sequence[Sequence[Any]], attrs: str) -> str:
    """Queries without images as a compact table, not a wall of placeholders."""
    return _scroll(_table(head, rows, {0, 1, 3}, attrs=f'class="compact" {attrs}'))


def _failure_cards(page: _Page, run: str, shown: Sequence[Failure]) -> str:
    images = [page.thumbs.uri(run, q.path) for q in shown]
    if not any(images):
        rows = [[q.id, _label(q.label), q.first_hit_rank, _label(q.nearest_label)] for q in shown]
        head = ["query", "label", "first hit: rank", "nearest item's label"]
        return _compact(head, rows, f'data-run="{_e(run)}"')
    cards = []
    for q, image in zip(shown, images, strict=True):
        lines = [f'<span class="lab">{_e(_label(q.label))}</span>', _e(q.id)]
        lines.append(f"first hit: rank {q.first_hit_rank}")
        beside = ""
        if q.nearest_label is not None:
            lines.append(f'<span class="wrong">nearest: {_e(_label(q.nearest_label))}</span>')
            example = _example_image(page, run, q.nearest_label)
            if example is not None and q.nearest_label != q.label:
                what = f"a query of {_label(q.nearest_label)}, the class of the nearest item"
                beside = _image(what, example)
        cards.append(_card(q, image, lines, beside))
    return '<div class="gallery">' + "".join(cards) + "</div>"


def _failures_section(page: _Page) -> str:
    parts = [
        "<p class='note'>The evaluated queries whose first relevant gallery item ranks lowest "
        "(0-indexed: rank 0 is the nearest), each with its label and the label of its nearest "
        "gallery item; beside the query, a query of that class (the run file records the "
        "nearest item's class, not the item)"
        + ("" if page.thumbs.available else " (thumbnails need Pillow)")
        + ".</p>"
    ]
    for run in page.summary.runs:
        shown, missed = page.failures[run.name]
        total = int(run.record.get("num_evaluated") or 0) or len(run.record["queries"]["ids"])
        parts.append(
            f"<h3>{_e(run.name)}: {missed} of {total} queries missed at rank 0; the "
            f"{len(shown)} whose first relevant item ranks lowest</h3>"
        )
        if not shown:
            parts.append("<p>No query misses: every nearest gallery item is relevant.</p>")
            continue
        parts.append(_failure_cards(page, run.name, shown))
    return "".join(parts)


def _only_one_side(page: _Page, winner: str, loser: str, listed: Sequence[Any]) -> str:
    images = [page.thumbs.uri(winner, q.path) for q, _ in listed]
    if not any(images):
        rows = [[q.id, _label(q.label), other] for q, other in listed]
        return _compact(["query", "label", f"{loser}: rank"], rows, f'data-run="{_e(winner)}"')
    cards = []
    for (q, other), image in zip(listed, images, strict=True):
        lines = [f'<span class="lab">{_e(_label(q.label))}</span>', _e(q.id)]
        lines.append(f"{_e(loser)}: rank {other}")
        cards.append(_card(q, image, lines))
    return '<div class="gallery">' + "".join(cards) + "</div>"


def _only_one_section(page: _Page) -> str | None:
    if page.summary.comparison is None:
        return None
    parts = [
        (
            "<p class='note'>Queries whose nearest gallery item is relevant in one run and "
            "not in the other (recall@1), with the other run's rank of the first relevant item. "
            f"Where there are more than {page.shown}, those shown say the most: the queries the "
            "other run ranks worst (the largest rank change), taken in turn from each class "
            "(classes in the order of their largest change) so that they spread over the "
            "classes, then shown by that rank, largest first.</p>"
        )
    ]
    for pair in page.only:
        for winner, loser, listed, total in (
            (pair.a, pair.b, pair.only_a, pair.count_a),
            (pair.b, pair.a, pair.only_b, pair.count_b),
        ):
            classes = len({json.dumps(q.label, sort_keys=True) for q, _ in listed})
            more = (
                f"; the {len(listed)} that say the most, from {classes} "
                f"class{'' if classes == 1 else 'es'}"
                if total > len(listed)
                else ""
            )
            parts.append(
                f"<h3>right at rank 0 in {_e(winner)}, not in {_e(loser)}: {total} "
                f"quer{'y' if total == 1 else 'ies'}{more}</h3>"
            )
            if listed:
                parts.append(_only_one_side(page, winner, loser, listed))
    return "".join(parts)


def _definitions(summary: Summary) -> str:
    parts = []
    ids = {(r.record.get("definitions") or {}).get("id") for r in summary.runs}
    records = [(r.name, r.record.get("definitions")) for r in summary.runs]
    if len(ids) == 1:
        records = records[:1]
        who = "every run" if len(summary.runs) > 1 else records[0][0]
    for name, record in records:
        if len(ids) != 1:
            who = name
        if not record:
            parts.append(
                f"<p>{_e(who)}: no definitions record (a run file written before recallkit "
                "recorded them).</p>"
            )
            continue
        items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in record.items())
        parts.append(f"<h3>Definitions of {_e(who)}</h3><dl class='defs'>{items}</dl>")
    rows = []
    for m in summary.metrics:
        metric = registry.parse_one(m)
        if metric is None:
            rows.append([m, "–", "–", "–"])
            continue
        rows.append([m, metric.formula or "–", metric.summary, f"{metric.direction} is better"])
    parts.append("<h3>The metrics</h3>")
    parts.append(_table(["metric", "per query", "summary", "direction"], rows, {0, 1, 2, 3}))
    parts.append(
        "<p class='note'>r: the 0-indexed rank of a query's first relevant gallery item; R: its "
        "relevant items; rel<sub>i</sub>: whether the item at rank i is relevant. Lone queries "
        "(no relevant item) count as the definitions' <code>lone_queries</code> says.</p>"
    )
    return "".join(parts)


# ----------------------------------------------------------------------------------------------
# The page: a table of sections, each decided once.


def _findings_section(page: _Page) -> str:
    return _findings(page.summary, page.classes)


def _runs_section(page: _Page) -> str:
    return _runs_table(page.summary)


def _notes(summary: Summary) -> str:
    return "".join(f"<p class='note'>Note: {_e(n)}</p>" for n in summary.notes)


def _metrics_section(page: _Page) -> str:
    summary = page.summary
    return "".join(
        [
            "<p class='note'>" + _e(" ".join(legend(summary, "ci"))) + "</p>",
            _metrics_table(summary),
            "<h3>Intervals and tie bounds</h3>",
            (
                "<p class='note'>Each value with its bootstrap interval (over the queries, or the "
                "classes of a class average) and its tie bounds: the value with every exact tie "
                "broken against the queries (worst) and in their favour (best); equal to the value "
                "when no tie matters.</p>"
            ),
            _detail_table(summary),
            _notes(summary) if summary.comparison is None else "",
        ]
    )


def _differences_section(page: _Page) -> str | None:
    c = page.summary.comparison
    if c is None:
        return None
    if page.plots:
        from recallkit.reports.figures import difference_figure, svg

        chart = f"<div class='figure'>{svg(difference_figure(c), 'paired differences')}</div>"
    else:
        chart = "<p class='note'>(The chart of the differences needs matplotlib.)</p>"
    return "".join(
        [
            (
                f"<p class='note'>Each pair's difference a − b with its {100 * c.confidence:g}% "
                "paired bootstrap interval; p from the paired test, adjusted for the pairs of "
                "each metric; significant rows are shaded. ‘Right in a only’ counts the queries "
                "that run a finds a relevant item for within K and run b does not (recall@K).</p>"
            ),
            chart,
            _differences(page.summary),
            _notes(page.summary),
        ]
    )


def _curves_section(page: _Page) -> str | None:
    if not page.plots:
        return None
    from recallkit.reports.figures import recall_curves, svg

    curves = recall_curves(page.summary)
    if curves is None:
        return None
    return f"<div class='figure'>{svg(curves, 'recall@K of every run')}</div>"


def _classes_section(page: _Page) -> str | None:
    blob = page.blob
    if blob is None:
        return None
    first = page.summary.metrics[0] if page.summary.metrics else ""
    chooser = ""
    if len(blob["runs"]) > 1:
        options = "".join(f"<option>{_e(n)}</option>" for n in blob["runs"])
        chooser = f"<label>run <select id='class-run'>{options}</select></label>"
    return "".join(
        [
            (
                f"<p class='note'>Every query class with each metric over its queries, sorted by "
                f"{_e(first)}, worst first: the worst classes are on top. Click a column header to "
                "sort by it (again to reverse). ‘Most confused with’ is the class that the nearest "
                "gallery item of the class's missed queries most often has.</p>"
            ),
            f"<div class='controls'>{chooser}{PAGER_FILTER}<span id='class-count'></span>",
            f"{PAGER}</div>",
            _scroll("<table id='class-table'><thead></thead><tbody></tbody></table>"),
        ]
    )


def _definitions_section(page: _Page) -> str:
    return _definitions(page.summary)


#: The page's sections in order: anchor, title, and what draws it (``None``: not on this page).
SECTIONS: tuple[tuple[str, str, Callable[[_Page], str | None]], ...] = (
    ("findings", "At a glance", _findings_section),
    ("runs", "Runs", _runs_section),
    ("metrics", "Metrics", _metrics_section),
    ("differences", "Differences", _differences_section),
    ("curves", "recall@K", _curves_section),
    ("classes", "Classes", _classes_section),
    ("failures", "Failures", _failures_section),
    ("only-one", "Right in one run only", _only_one_section),
    ("definitions", "Definitions", _definitions_section),
)


def _blob(data: dict[str, Any]) -> str:
    """``data`` as JSON text that is safe inside a ``<script>`` element: ``<``, ``>`` and ``&``
    written as ``\\u003c``-style escapes (valid JSON that no ``</script>`` or ``<!--`` ends)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for c in "<>&\u2028\u2029":
        text = text.replace(c, f"\\u{ord(c):04x}")
    return text


def _asset(name: str) -> str:
    return resources.files("recallkit.reports").joinpath(f"assets/{name}").read_text("utf-8")


def _has_matplotlib(log: Callable[[str], None] | None) -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if log is not None:
            log("matplotlib is not installed: the report has no figures (pip install matplotlib)")
        return False
    return True


def _page(
    summary: Summary, image_root: Sequence[str | os.PathLike[str]], shown: int, plots: bool
) -> _Page:
    """Everything the sections read, with the thumbnails of every query shown looked up once."""
    classes = {run.name: by_class(run, summary.metrics) for run in summary.runs}
    roots = {run.name: image_roots(run, image_root) for run in summary.runs}
    page = _Page(
        summary,
        classes,
        Thumbnails(roots),
        {run.name: failures(run, shown) for run in summary.runs},
        only_one_right(summary, shown),
        shown,
        plots,
        _class_blob(summary, classes),
    )
    for name, (listed, _) in page.failures.items():
        for q in listed:
            page.thumbs.uri(name, q.path)
    for pair in page.only:
        for winner, listed in ((pair.a, pair.only_a), (pair.b, pair.only_b)):
            for q, _ in listed:
                page.thumbs.uri(winner, q.path)
    return page


def render_html(
    summary: Summary,
    *,
    image_root: Sequence[str | os.PathLike[str]] = (),
    failures_shown: int = 24,
    log: Callable[[str], None] | None = None,
) -> str:
    """The report of ``summary`` as one self-contained HTML page (module docstring).

    Parameters
    ----------
    summary : Summary
        The runs and their statistics ([`summarize`][recallkit.reports.data.summarize]).
    image_root : sequence of path-like, default ()
        Folders the queries' paths are relative to, beside the image folder a run file records;
        thumbnails are read only from these folders and each run file's own
        (``recallkit.reports.html.image_roots``).
    failures_shown : int, default 24
        The worst queries shown per run, and the queries per side of each pair that only one
        run gets right.
    log : callable, optional
        Called with each note for the reader (a missing package, thumbnails not shown).

    Returns
    -------
    str
        The page.
    """
    page = _page(summary, image_root, failures_shown, _has_matplotlib(log))
    drawn = [(key, title, draw(page)) for key, title, draw in SECTIONS]
    drawn = [(key, title, body) for key, title, body in drawn if body is not None]
    missing = page.thumbs.note()
    if missing is not None:
        if log is not None:
            log(f"thumbnails: {missing}")
        at = next(i for i, (key, _, _) in enumerate(drawn) if key == "failures")
        key, title, body = drawn[at]
        drawn[at] = (key, title, f"<p class='note'>Thumbnails: {_e(missing)}</p>{body}")
    if log is not None and not page.thumbs.available:
        log("Pillow is not installed: the failure gallery shows the queries' ids, no thumbnails")
    title = _title(summary)
    body = [
        f"<nav>{''.join(f'<a href=#{k}>{_e(t)}</a>' for k, t, _ in drawn)}</nav><main>",
        f"<h1>{_e(title)}</h1><p class='muted'>{_e(_subtitle(summary))}</p>",
        *(f"<h2 id='{key}'>{_e(t)}</h2>{section}" for key, t, section in drawn),
        f"<footer class='note'><p>Written by recallkit {_e(_version())}.</p></footer></main>",
    ]
    data = {"title": title, "runs": summary.names, "classes": page.blob}
    return "".join(
        [
            "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>",
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\">",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            f"<title>{_e(title)}</title><style>{_asset('report.css')}</style></head><body>",
            "".join(body),
            f"<script type='application/json' id='report-data'>{_blob(data)}</script>",
            f"<script>{_asset('report.js')}</script>",
            "</body></html>\n",
        ]
    )


def _subtitle(summary: Summary) -> str:
    first = summary.runs[0].record
    parts = []
    n = first.get("num_queries", len(first["queries"]["ids"]))
    parts.append(f"{n:,} queries")
    if first.get("num_gallery") is not None:
        parts.append(f"{first['num_gallery']:,} gallery items")
    similarity = first.get("metric") or (first.get("definitions") or {}).get("similarity")
    if similarity:
        parts.append(f"{similarity} similarity")
    if len(summary.runs) > 1:
        parts.append(f"{len(summary.runs)} runs")
    return " · ".join(parts)
