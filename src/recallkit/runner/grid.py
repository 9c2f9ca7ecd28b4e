"""The failure grid: the worst queries, each followed by its top-K gallery images.

One row per query: the query image, then its K nearest gallery images best first (the core's
exact k-NN, self-matches excluded, ties to the lower gallery index), each framed green when it
shares the query's label and red when it does not. Written as PNG (matplotlib) or as a
self-contained HTML page (thumbnails embedded), chosen by the file's extension. An image that
cannot be shown (unreadable, not a regular file, or larger than Pillow's decompression-bomb
limit, ``PIL.Image.MAX_IMAGE_PIXELS``) is drawn as a grey placeholder. The HTML page needs
Pillow (the ``images`` extra), the PNG matplotlib too (the ``plot`` extra, which brings Pillow):
[`check_grid`][check_grid] says so in one line before anything is drawn or written.

Both formats carry the same legend and number the neighbours by 0-indexed rank, the base of
``first_hit_rank`` in the run file: the nearest gallery image has rank 0, and recall@K counts
a query whose first correct neighbour has rank below K.
"""

from __future__ import annotations

import base64
import html
import io
import os
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recallkit._loading import require
from recallkit.exceptions import RunnerError
from recallkit.result import Result as RecallResult
from recallkit.runfiles._atomic import atomic_write
from recallkit.runner.encode import load_image, pil_image

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CORRECT = "#1a9641"
WRONG = "#d7191c"
QUERY = "#2b83ba"
_THUMB = 96
LEGEND = (
    "Query framed blue; gallery images framed green when they share the query's label, "
    "red when not. Ranks are 0-indexed, as first_hit_rank in the run file: rank 0 is the "
    "nearest, and recall@K counts a query whose first hit has rank < K."
)


def _first_hit(row: GridRow) -> str:
    return "no hit" if row.first_hit_rank < 0 else f"rank {row.first_hit_rank}"


@dataclass(frozen=True)
class Neighbour:
    """One gallery image in a grid row."""

    image: Any
    label: Any
    correct: bool
    index: int


@dataclass(frozen=True)
class GridRow:
    """One query of the grid, with its neighbours best first."""

    image: Any
    label: Any
    first_hit_rank: int
    neighbours: tuple[Neighbour, ...]
    index: int


def worst_queries(result: RecallResult, n: int) -> np.ndarray:
    """Indices of the ``n`` evaluated queries whose first correct neighbour ranks lowest.

    Ordered by first-hit rank, largest first, then by query index.

    >>> r = RecallResult({"recall@1": 0.25}, first_hit_ranks=np.array([0, 4, -1, 4, 2]))
    >>> worst_queries(r, 3).tolist()
    [1, 3, 4]
    """
    ranks = result.first_hit_ranks
    candidates = np.flatnonzero(result.evaluated)
    order = np.lexsort((candidates, -ranks[candidates]))
    return candidates[order[: max(int(n), 0)]]


def check_grid(suffix: str, feature: str = "The failure grid") -> None:
    """Raise [`recallkit._loading.MissingExtraError`][recallkit._loading.MissingExtraError] unless
    what a grid file of this suffix needs imports: Pillow for ``.html``/``.htm`` (the ``images``
    extra), Pillow and matplotlib for ``.png`` (the ``plot`` extra)."""
    if suffix.lower() == ".png":
        require(f"{feature} as .png", "PIL", "matplotlib", extra="plot")
    else:
        require(feature, "PIL", extra="images")


def _thumbnail(item: Any, size: int = _THUMB) -> Any:
    Image = pil_image()
    if isinstance(item, str | os.PathLike):
        try:
            image = load_image(item)
        except (OSError, ValueError, Image.DecompressionBombError):
            image = Image.new("RGB", (size, size), (128, 128, 128))
    elif isinstance(item, Image.Image):
        image = item.convert("RGB")
    else:
        array = np.asarray(item)
        if array.dtype != np.uint8:
            low, high = float(array.min()), float(array.max())
            array = ((array - low) / (high - low or 1.0) * 255).astype(np.uint8)
        image = Image.fromarray(array).convert("RGB")
    image = image.copy()
    if max(image.size) < size:  # upscale small images (8x8 digits) without blurring
        scale = max(1, size // max(image.size))
        image = image.resize((image.width * scale, image.height * scale), Image.NEAREST)
    image.thumbnail((size, size))
    return image


def _name(item: Any) -> str:
    return Path(item).name if isinstance(item, str | os.PathLike) else ""


def _short(value: Any, width: int = 14) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def render_grid(rows: Sequence[GridRow], suffix: str, *, title: str | None = None) -> bytes:
    """The grid as the bytes of a ``.png`` (matplotlib) or ``.html``/``.htm`` file."""
    suffix = suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise RunnerError(f"The grid file must end in .png or .html. Got {suffix!r}.")
    if not rows:
        raise RunnerError("There is no evaluated query to draw.")
    check_grid(suffix)
    if suffix == ".png":
        return _draw_png(rows, title)
    return _draw_html(rows, title).encode("utf-8")


def draw_grid(
    rows: Sequence[GridRow], out: str | os.PathLike[str], *, title: str | None = None
) -> Path:
    """Write the grid to ``out``: ``.png`` (matplotlib) or ``.html``/``.htm``; atomically."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".html", ".htm"):
        raise RunnerError(f"The grid file '{out}' must end in .png or .html.")
    check_grid(out.suffix)
    data = render_grid(rows, out.suffix, title=title)
    with atomic_write(out, "wb") as handle:
        handle.write(data)
    return out


def _png_figure(rows: Sequence[GridRow], title: str | None) -> Figure:
    """The PNG grid as a matplotlib figure (the legend below the rows)."""
    from matplotlib.figure import Figure

    k = max(len(r.neighbours) for r in rows)
    cell = 1.15
    fig = Figure(figsize=(cell * (k + 1), cell * len(rows) + 0.8), dpi=90, layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(rows), k + 1, squeeze=False))
    for i, row in enumerate(rows):
        cells = [(row.image, f"q: {_short(row.label)}", QUERY)]
        cells += [
            (nb.image, f"{j}: {_short(nb.label)}", CORRECT if nb.correct else WRONG)
            for j, nb in enumerate(row.neighbours)
        ]
        for j in range(k + 1):
            ax = axes[i, j]
            ax.set_xticks([])
            ax.set_yticks([])
            if j >= len(cells):
                ax.set_axis_off()
                continue
            image, text, colour = cells[j]
            ax.imshow(np.asarray(_thumbnail(image)), interpolation="nearest")
            for spine in ax.spines.values():
                spine.set_color(colour)
                spine.set_linewidth(3)
            ax.set_title(text, fontsize=7, color=colour, pad=2)
        axes[i, 0].set_ylabel(f"first hit\n{_first_hit(row)}", fontsize=7)
    fig.suptitle(title or "worst queries and their nearest gallery images", fontsize=8)
    fig.supxlabel(textwrap.fill(LEGEND, width=max(60, 16 * (k + 1))), fontsize=6)
    return fig


def _draw_png(rows: Sequence[GridRow], title: str | None) -> bytes:
    buffer = io.BytesIO()
    _png_figure(rows, title).savefig(buffer, format="png")
    return buffer.getvalue()


def _data_uri(item: Any) -> str:
    buffer = io.BytesIO()
    _thumbnail(item).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _html_legend() -> str:
    """[`LEGEND`][LEGEND] with its colour words in their colours."""
    text = html.escape(LEGEND)
    for word, colour in (("blue", QUERY), ("green", CORRECT), ("red", WRONG)):
        text = re.sub(rf"\b{word}\b", f"<b style='color:{colour}'>{word}</b>", text, count=1)
    return text


def _draw_html(rows: Sequence[GridRow], title: str | None) -> str:
    heading = html.escape(title or "recallkit: worst queries and their top-K gallery images")
    parts = [
        "<!doctype html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{heading}</title>",
        (
            "<style>body{font-family:sans-serif;font-size:12px}td{text-align:center;"
            "vertical-align:top;padding:3px}img{border:4px solid;display:block;margin:auto}"
            f".q img{{border-color:{QUERY}}}.ok img{{border-color:{CORRECT}}}"
            f".no img{{border-color:{WRONG}}}</style></head><body>"
        ),
        f"<h3>{heading}</h3>",
        f"<p>{_html_legend()}</p>",
        "<table>",
    ]
    for row in rows:
        query_cell = (
            f'<td class="q"><img src="{_data_uri(row.image)}" '
            f'title="{html.escape(_name(row.image))}"><br>query #{row.index}<br>'
            f"{html.escape(str(row.label))}<br>first hit: {_first_hit(row)}</td>"
        )
        cells = [query_cell]
        for j, nb in enumerate(row.neighbours):
            cls = "ok" if nb.correct else "no"
            cells.append(
                f'<td class="{cls}"><img src="{_data_uri(nb.image)}" '
                f'title="{html.escape(_name(nb.image))}"><br>rank {j}: '
                f"{html.escape(str(nb.label))}</td>"
            )
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts += ["</table></body></html>", ""]
    return "\n".join(parts)


def grid_rows(
    query_items: Sequence[Any],
    query_labels: Sequence[Any],
    gallery_items: Sequence[Any],
    gallery_labels: Sequence[Any],
    query_rows: Sequence[int],
    neighbours: np.ndarray,
    first_hit_ranks: np.ndarray,
) -> list[GridRow]:
    """Assemble grid rows from neighbour indices (``-1`` entries are dropped)."""
    out = []
    for row, idx in zip(query_rows, neighbours, strict=True):
        label = query_labels[int(row)]
        nbs = tuple(
            Neighbour(
                gallery_items[int(j)],
                gallery_labels[int(j)],
                gallery_labels[int(j)] == label,
                int(j),
            )
            for j in idx
            if j >= 0
        )
        out.append(
            GridRow(query_items[int(row)], label, int(first_hit_ranks[int(row)]), nbs, int(row))
        )
    return out
