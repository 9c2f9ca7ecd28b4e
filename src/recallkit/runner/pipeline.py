"""Images and labels in, metrics out: encode (once, cached), then one pass of the core.

The metrics are the core's ([`recallkit._labels.form`][recallkit._labels.form], the pass behind
[`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics]); this module only encodes,
passes the identities that exclude self-matches, and reads the core's per-query first-hit ranks for
the per-class breakdown. The neighbour lists the breakdown's confusions and the failure grid show
come from the same pass (``neighbors``), under the same options (device, precision).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recallkit import metrics as registry
from recallkit._inputs import checks as _checks
from recallkit._labels import form as label_form
from recallkit.exceptions import RunnerError, fail
from recallkit.ground_truth import nearest_neighbors
from recallkit.options import Options, accepts
from recallkit.result import Result as RecallResult
from recallkit.runfiles.records import dumps_run, evaluation_record, json_label
from recallkit.runner.cache import encode_cached
from recallkit.runner.encode import BadImage
from recallkit.runner.encoders import Encoder, function_encoder
from recallkit.runner.sources import ImageSet, path_identity


@dataclass
class Run:
    """Everything one evaluation produced: the sets actually evaluated, embeddings, the result.

    ``query`` and ``gallery`` are the image sets after unreadable images were skipped;
    ``skipped`` lists those; ``cache`` says per side ``"hit"``, ``"miss"``, ``"off"`` or
    ``"precomputed"``. ``neighbors`` holds each query's nearest gallery indices from the same
    pass (``-1`` beyond its candidates), ``codes`` the query and gallery labels as the core
    coded them.
    """

    query: ImageSet
    gallery: ImageSet
    query_embeddings: np.ndarray
    gallery_embeddings: np.ndarray
    result: RecallResult
    options: Options = field(default_factory=Options)
    encoder: dict[str, Any] | None = None
    skipped: tuple[BadImage, ...] = ()
    cache: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    neighbors: np.ndarray | None = None
    codes: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def metric(self) -> str:
        return self.options.metric

    @property
    def device(self) -> str | None:
        return None if self.options.device is None else str(self.options.device)

    @property
    def ids(self) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
        """``(query ids, gallery ids)`` when both sides have identities."""
        if self.query.ids is None or self.gallery.ids is None:
            return None
        return self.query.ids, self.gallery.ids

    @property
    def definitions(self) -> dict[str, Any]:
        """The definitions of the result
        ([`recallkit.runfiles.definitions.definitions`][recallkit.runfiles.definitions.definitions]).

        Self-matches are excluded by identity (``"ids"``) when both sides have identities, and
        not at all (``"none"``) otherwise; lone queries as the options say.
        """
        return dict(self.result.definitions)


def _say(progress: bool | None) -> Callable[[str], None]:
    if progress is False:
        return lambda _message: None
    return lambda message: print(message, file=sys.stderr)


def _same_items(a: ImageSet, b: ImageSet) -> bool:
    return len(a) == len(b) and a.has_paths() and b.has_paths() and a.items == b.items


def _check_embeddings(array: Any, rows: int, name: str, what: str) -> np.ndarray:
    if isinstance(array, torch.Tensor):  # kept in its own type (bfloat16, which numpy lacks,
        array = array.detach().to("cpu")  # becomes float32 exactly)
        array = (array.float() if array.dtype == torch.bfloat16 else array).numpy()
    array = np.asarray(array)
    if array.ndim != 2:
        raise RunnerError(
            f"The {name} must be a 2-D array, one row per {what} image. Got shape {array.shape}."
        )
    if array.shape[0] != rows:
        raise RunnerError(
            f"The {name} have {array.shape[0]} rows but the {what} set has {rows} images; "
            "they must be row-aligned (row i is image i)."
        )
    return array


@accepts()
def run_evaluation(
    query: ImageSet,
    gallery: ImageSet,
    encoder: Encoder | None,
    ks: Sequence[int] = (1, 5, 10),
    *,
    metrics: Sequence[str] = (),
    query_embeddings: Any = None,
    gallery_embeddings: Any = None,
    batch_size: int = 32,
    cache_dir: str | os.PathLike[str] | None = None,
    skip_bad: bool = False,
    progress: bool | None = None,
    neighbors: int = 1,
    query_in_reference: bool | None = None,
    options: Options,
) -> Run:
    """Encode both sets (the gallery first, each once, through the cache) and compute recall@K
    for ``ks`` and the ``metrics`` named
    ([`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics]'s names), in one pass of
    the core, which also keeps each query's ``neighbors`` nearest gallery items.

    When query and gallery are the same files (leave-one-out), they are encoded once. Self-
    matches are excluded through the sets' identities (``ImageSet.ids``), or, with
    ``query_in_reference=True`` (one set of saved rows against itself), by row.

    {options}

    >>> s = ImageSet(("a", "b", "c"), ("x", "x", "y"), ("a", "b", "c"), "toy")
    >>> e = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    >>> run = run_evaluation(s, s, None, (1,), query_embeddings=e, gallery_embeddings=e,
    ...                      neighbors=2)
    >>> run.result.first_hit_ranks.tolist(), top_k(run, [0, 2], 2).tolist()
    ([0, 0, -1], [[1, 2], [1, 0]])
    >>> [(row.label, row.queries, row.recall) for row in worst_classes(run)]
    [('x', 2, {'recall@1': 1.0})]
    """
    func = "evaluate"
    ks = _checks.check_ks(ks, func)
    chosen = registry.parse([*registry.names_of(registry.recall(ks)), *metrics], func)
    say = _say(progress)
    seconds: dict[str, float] = {}
    sides, cache, reasons = _encode_sides(
        {"gallery": gallery, "query": query},
        {"gallery": gallery_embeddings, "query": query_embeddings},
        encoder,
        seconds,
        dict(
            cache_dir=cache_dir,
            batch_size=batch_size,
            skip_bad=skip_bad,
            progress=progress,
            log=say,
        ),
        func,
    )
    final, skipped = _without_skipped(sides, reasons, say)
    (q_set, q_emb), (g_set, g_emb) = final["query"], final["gallery"]
    if len(q_set) == 0 or len(g_set) == 0:
        side = "query" if len(q_set) == 0 else "gallery"
        raise RunnerError(f"No {side} image is left to evaluate.")
    ids: dict[str, Any] = {}
    if query_in_reference:
        pass
    elif q_set.ids is not None and g_set.ids is not None:
        ids = {"query_ids": list(q_set.ids), "reference_ids": list(g_set.ids)}
    elif label_form.same_memory(q_emb, g_emb):
        raise RunnerError(
            "The query and gallery are the same embeddings and the images carry no ids, so "
            "each query would retrieve itself: give query_ids and gallery_ids (a query never "
            "retrieves a gallery image with its own id)."
        )
    start = time.perf_counter()
    problem = label_form.build(
        func,
        q_emb,
        g_emb,
        list(q_set.labels),
        list(g_set.labels),
        query_in_reference=True if query_in_reference else (None if ids else False),
        query_ids=ids.get("query_ids"),
        reference_ids=ids.get("reference_ids"),
        options=options,
    )
    result, kept = label_form.evaluate(func, problem, chosen, parameter="ks", keep=neighbors)
    seconds["recall"] = time.perf_counter() - start
    return Run(
        q_set,
        g_set,
        q_emb,
        g_emb,
        result,
        options,
        encoder.describe() if encoder is not None else None,
        tuple(skipped.values()),
        cache,
        seconds,
        kept,
        (problem.positives.query_codes, problem.positives.reference_codes),
    )


def _encode_sides(
    sets: dict[str, ImageSet],
    given: dict[str, Any],
    encoder: Encoder | None,
    seconds: dict[str, float],
    options: dict[str, Any],
    func: str,
) -> tuple[dict[str, tuple[ImageSet, np.ndarray, np.ndarray]], dict[str, str], dict[str, str]]:
    """Each side's embeddings: given, the gallery's again (same files), or encoded through the
    cache. Returns ``(images, embeddings, kept mask)`` per side, the cache status per side and
    the reason each unreadable image was skipped."""
    sides: dict[str, tuple[ImageSet, np.ndarray, np.ndarray]] = {}
    cache: dict[str, str] = {}
    reasons: dict[str, str] = {}
    for side in ("gallery", "query"):
        images = sets[side]
        if given[side] is not None:
            array = _check_embeddings(given[side], len(images), f"{side} embeddings", side)
            sides[side] = (images, array, np.ones(len(images), dtype=bool))
            cache[side] = "precomputed"
            continue
        if side == "query" and given["gallery"] is None and _same_items(images, sets["gallery"]):
            _, array, kept = sides["gallery"]
            sides[side] = (images, array, kept)
            cache[side] = "same as gallery"
            continue
        if encoder is None:
            raise fail(func, "encoder_fn", f"given when the {side} embeddings are not", None)
        start = time.perf_counter()
        encoding, status = encode_cached(
            list(images.items), encoder, desc=f"encoding {side}", what=side, **options
        )
        seconds[f"encode_{side}"] = time.perf_counter() - start
        cache[side] = status
        for bad in encoding.bad:
            reasons.setdefault(bad.path, bad.reason)
        sides[side] = (images, encoding.embeddings, encoding.kept)
    return sides, cache, reasons


def _without_skipped(
    sides: dict[str, tuple[ImageSet, np.ndarray, np.ndarray]],
    reasons: dict[str, str],
    say: Callable[[str], None],
) -> tuple[dict[str, tuple[ImageSet, np.ndarray]], dict[str, BadImage]]:
    """Each side without its unreadable images, and those images (said in one note)."""
    skipped: dict[str, BadImage] = {}
    final: dict[str, tuple[ImageSet, np.ndarray]] = {}
    for side in ("query", "gallery"):
        images, array, kept = sides[side]
        if not kept.all():
            for i in np.flatnonzero(~kept):
                item = images.items[int(i)]
                path = os.fspath(item)
                skipped.setdefault(path, BadImage(path, reasons.get(path, "unreadable")))
            images, array = images.subset(kept.tolist()), array[kept]
        final[side] = (images, array)
    if skipped:
        listed = "; ".join(f"{b.path} ({b.reason})" for b in list(skipped.values())[:5])
        more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
        say(f"note: skipped {len(skipped)} unreadable image(s): {listed}{more}")
    return final, skipped


def _image_set(
    images: Sequence[Any], labels: Sequence[Any], ids: Sequence[Any] | None, side: str
) -> ImageSet:
    func = "evaluate"
    if isinstance(images, str | os.PathLike):
        raise fail(
            func,
            f"{side}_images",
            "a sequence of images or paths",
            f"a single path {os.fspath(images)!r}",
        )
    items = tuple(images)
    labels = list(labels.tolist() if hasattr(labels, "tolist") else labels)
    _checks.check_length(labels, len(items), f"{side}_labels", func, f"{side}_images")
    if ids is not None:
        ids = list(ids.tolist() if hasattr(ids, "tolist") else ids)
        _checks.check_length(ids, len(items), f"{side}_ids", func, f"{side}_images")
        ids = tuple(ids)
    elif items and all(isinstance(i, str | os.PathLike) for i in items):
        ids = tuple(path_identity(i) for i in items)
    return ImageSet(items, tuple(labels), ids, f"{side} images")


@accepts()
def evaluate(
    query_images: Sequence[Any],
    query_labels: Sequence[Any],
    gallery_images: Sequence[Any],
    gallery_labels: Sequence[Any],
    encoder_fn: Callable[[list[Any]], Any] | None,
    ks: Sequence[int] = (1, 5, 10),
    *,
    batch_size: int = 32,
    cache_dir: str | os.PathLike[str] | None = None,
    query_ids: Sequence[Any] | None = None,
    gallery_ids: Sequence[Any] | None = None,
    query_embeddings: Any = None,
    gallery_embeddings: Any = None,
    skip_bad: bool = False,
    encoder_id: str | None = None,
    progress: bool | None = None,
    metrics: Sequence[str] = (),
    options: Options,
) -> RecallResult:
    """Recall@K of ``encoder_fn`` on query and gallery images.

    Each image set is encoded once with ``encoder_fn`` (a batch, a list of RGB PIL images for
    paths, to a ``(batch, dim)`` array or tensor), or taken from ``query_embeddings`` /
    ``gallery_embeddings`` (row-aligned). Recall is
    [`recallkit.recall_at_k`][recallkit.retrieval.recall_at_k] (cosine by default: L2-normalised;
    ties go to the lower gallery index): a query is a hit at K when one of its K nearest gallery
    images shares its label.

    Self-matches are excluded by identity: a query never retrieves a gallery image with its own
    id, which is its resolved path when the images are paths (so overlapping query and gallery
    lists work), or ``query_ids``/``gallery_ids`` when given. Queries whose label no remaining
    gallery image has are excluded and counted (``num_excluded``).

    With ``cache_dir``, each set's embeddings are stored there as ``.npy`` and reused while the
    files (sizes, modification times), the encoder (``encoder_id`` or its qualified name, and a
    digest of the torch weights it holds and of its source file) are unchanged. An
    ``encoder_fn`` that holds no torch module is so keyed by its name and source file alone:
    when its output depends on anything else (weights it loads itself, environment variables,
    other files), give an ``encoder_id`` that changes with it; a cache hit without one says
    so. A cache folder that cannot be written gives a warning and the run goes on. Unreadable
    images raise [`BadImagesError`][recallkit.runner.encode.BadImagesError] listing them, or are
    left out with ``skip_bad=True``.

    ``metrics`` adds other metrics of
    [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics] to recall@K.

    {options}

    >>> import numpy as np
    >>> from PIL import Image
    >>> imgs = [Image.new("RGB", (2, 2), c) for c in [(9, 0, 0), (8, 1, 0), (0, 0, 9)]]
    >>> mean_rgb = lambda batch: np.stack([np.asarray(i, float).mean((0, 1)) for i in batch])
    >>> r = evaluate(imgs[:1], ["red"], imgs, ["red", "red", "blue"], mean_rgb, ks=(1, 2),
    ...              query_ids=["a"], gallery_ids=["a", "b", "c"], progress=False)
    >>> dict(r)
    {'recall@1': 1.0, 'recall@2': 1.0}
    """
    q_set = _image_set(query_images, query_labels, query_ids, "query")
    g_set = _image_set(gallery_images, gallery_labels, gallery_ids, "gallery")
    if (query_ids is None) != (gallery_ids is None):
        raise ValueError(
            "The 'query_ids' and 'gallery_ids' parameters of evaluate must be given together."
        )
    if (q_set.ids is None) != (g_set.ids is None):
        q_set = ImageSet(q_set.items, q_set.labels, None, q_set.source)
        g_set = ImageSet(g_set.items, g_set.labels, None, g_set.source)
    encoder = None if encoder_fn is None else function_encoder(encoder_fn, encoder_id)
    run = run_evaluation(
        q_set,
        g_set,
        encoder,
        ks,
        metrics=metrics,
        query_embeddings=query_embeddings,
        gallery_embeddings=gallery_embeddings,
        batch_size=batch_size,
        cache_dir=cache_dir,
        skip_bad=skip_bad,
        progress=progress,
        options=options,
    )
    return run.result


# --- neighbours, per-class breakdown -------------------------------------------------------


def top_k(run: Run, query_rows: Sequence[int] | np.ndarray, k: int) -> np.ndarray:
    """The ``k`` nearest gallery indices of the given queries (``-1`` where none is left).

    Read from the run's own pass when it kept ``k`` neighbours (``run_evaluation(...,
    neighbors=k)``); else the core's exact k-NN under the run's options. Each query's own
    identity is excluded; ties go to the lower gallery index, as in recall@K.
    """
    rows = np.asarray(query_rows, dtype=np.int64)
    if len(rows) == 0:
        return np.zeros((0, k), dtype=np.int64)
    k = min(k, len(run.gallery))
    if run.neighbors is not None and run.neighbors.shape[1] >= k:
        return run.neighbors[rows, :k].copy()
    exclude_ids = None
    if run.ids is not None:
        q_ids, g_ids = run.ids
        exclude_ids = ([q_ids[int(i)] for i in rows], list(g_ids))
    indices, _ = nearest_neighbors(
        run.query_embeddings[rows],
        run.gallery_embeddings,
        k,
        exclude_ids=exclude_ids,
        options=run.options,
    )
    if isinstance(indices, torch.Tensor):
        indices = indices.cpu().numpy()
    return np.asarray(indices, dtype=np.int64)


@dataclass(frozen=True)
class ClassRow:
    """One line of the per-class breakdown."""

    label: Any
    queries: int
    recall: dict[str, float]
    confused_with: Any = None
    confused_count: int = 0
    missed_at_1: int = 0


def label_codes(run: Run) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """The query and gallery labels as the core coded them (dense int64), and the label of
    each code."""
    q_codes, g_codes = run.codes
    names: list[Any] = [None] * (int(max(q_codes.max(), g_codes.max())) + 1)
    for codes, labels in ((q_codes, run.query.labels), (g_codes, run.gallery.labels)):
        first = np.unique(codes, return_index=True)
        for code, index in zip(*first, strict=True):
            names[int(code)] = labels[int(index)]
    return q_codes, g_codes, names


def worst_classes(run: Run, n: int = 5, *, confusions: bool = True) -> list[ClassRow]:
    """The ``n`` query classes with the lowest recall (at the first K, then the next ones).

    Per class, recall@K is the share of its evaluated queries that the core marked as hits at
    K (``RecallResult.hits``); ties are ordered by label. With ``confusions``, the class most
    often retrieved first instead (by the queries missed at rank 1) is named, from the core's
    exact k-NN.
    """
    result = run.result
    if n <= 0 or result.num_evaluated == 0:
        return []
    q_codes, g_codes, names = label_codes(run)
    evaluated = result.evaluated
    num_codes = len(names)
    counts = np.bincount(q_codes[evaluated], minlength=num_codes)
    present = np.flatnonzero(counts)
    share: dict[int, np.ndarray] = {}
    for k, k_eff in zip(result.ks, result.effective_ks, strict=True):
        hits = np.bincount(q_codes[result.hits(k_eff)], minlength=num_codes)
        share[k] = hits[present] / counts[present]
    # Order: lowest recall at the first K, then the following Ks, then label order.
    label_rank = np.argsort(np.argsort(np.array([str(names[c]) for c in present]), kind="stable"))
    keys = [label_rank] + [share[k] for k in reversed(result.ks)]
    order = np.lexsort(keys)[:n]
    chosen = present[order]
    confused: dict[int, tuple[Any, int, int]] = {}
    if confusions:
        missed = np.flatnonzero(evaluated & (result.first_hit_ranks > 0) & np.isin(q_codes, chosen))
        if len(missed):
            first = top_k(run, missed, 1)[:, 0]
            ok = first >= 0
            for code in chosen:
                mine = (q_codes[missed] == code) & ok
                if not mine.any():
                    continue
                got = np.bincount(g_codes[first[mine]], minlength=num_codes)
                top = int(np.argmax(got))
                confused[int(code)] = (names[top], int(got[top]), int(mine.sum()))
    rows = []
    for j, code in zip(order, chosen, strict=True):
        c = confused.get(int(code))
        rows.append(
            ClassRow(
                names[int(code)],
                int(counts[code]),
                {registry.Recall(k).name: float(share[k][j]) for k in result.ks},
                c[0] if c else None,
                c[1] if c else 0,
                c[2] if c else 0,
            )
        )
    return rows


def _short(value: Any, width: int = 24) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def format_worst_classes(rows: Sequence[ClassRow], total_classes: int, first_k: int) -> str:
    """The ``[worst classes]`` table printed after the report."""
    if not rows:
        return ""
    keys = list(rows[0].recall)
    width = max([len("label")] + [len(_short(r.label)) for r in rows])
    head = f"  {'label':<{width}}  {'queries':>7}" + "".join(f"  {k:>9}" for k in keys)
    head += "  most often ranked first instead"
    lines = [
        f"[worst classes]  (lowest recall@{first_k} first; {len(rows)} of {total_classes})",
        head,
    ]
    for r in rows:
        line = f"  {_short(r.label):<{width}}  {r.queries:>7}"
        line += "".join(f"  {v:>9.4f}" for v in r.recall.values())
        if r.confused_with is not None:
            line += f"  {_short(r.confused_with)} ({r.confused_count} of {r.missed_at_1} misses)"
        lines.append(line.rstrip())
    return "\n".join(lines)


def num_query_classes(run: Run) -> int:
    """Distinct labels among the evaluated queries."""
    q_codes, _, _ = label_codes(run)
    return len(np.unique(q_codes[run.result.evaluated]))


def failure_grid(
    run: Run,
    out: str | os.PathLike[str],
    *,
    k: int = 8,
    queries: int = 8,
    title: str | None = None,
) -> Path:
    """Draw the ``queries`` worst queries of ``run`` with their top-``k`` gallery images.

    The worst queries are those whose first correct neighbour ranks lowest
    ([`worst_queries`][recallkit.runner.grid.worst_queries]); neighbours come from [`top_k`][top_k].
    The file is a PNG or a self-contained HTML page, by its extension. When no query misses (every
    evaluated query's nearest gallery image shares its label) there is no failure to show:
    the grid then shows the first queries under a title that says so
    ([`grid_title`][grid_title]), and a ``UserWarning`` says it too.
    """
    from recallkit.runner.grid import check_grid, draw_grid

    check_grid(Path(out).suffix)  # before the neighbours are computed
    return draw_grid(_grid_rows(run, k, queries), out, title=grid_title(run, title))


def grid_title(run: Run, title: str | None = None) -> str | None:
    """The failure grid's title: ``title``, or, when no query misses, one that says so.

    With no miss a ``UserWarning`` says that there is no failure to show.
    """
    result = run.result
    evaluated = int(result.num_evaluated)
    if evaluated == 0 or bool((result.first_hit_ranks[result.evaluated] > 0).any()):
        return title
    warnings.warn(
        f"no failure to show: each of the {evaluated} evaluated queries has a gallery image of "
        "its label at rank 0 (recall@1 = 1); the failure grid shows the first queries, titled "
        "so.",
        UserWarning,
        stacklevel=3,
    )
    text = (
        f"No failures: each of the {evaluated} evaluated queries finds an image of its label "
        "at rank 0; the first queries are shown"
    )
    return f"{text} ({title})" if title else text


def _grid_rows(run: Run, k: int, queries: int) -> list[Any]:
    from recallkit.runner.grid import grid_rows, worst_queries

    rows = worst_queries(run.result, queries)
    neighbours = top_k(run, rows, k)
    return grid_rows(
        run.query.items,
        run.query.labels,
        run.gallery.items,
        run.gallery.labels,
        rows.tolist(),
        neighbours,
        run.result.first_hit_ranks,
    )


def render_failure_grid(
    run: Run, suffix: str, *, k: int = 8, queries: int = 8, title: str | None = None
) -> bytes:
    """The bytes of the [`failure_grid`][failure_grid] file with extension ``suffix``, not
    written."""
    from recallkit.runner.grid import check_grid, render_grid

    check_grid(suffix)
    return render_grid(_grid_rows(run, k, queries), suffix, title=grid_title(run, title))


# --- the run file (--json) -----------------------------------------------------------------


def run_record(
    run: Run,
    *,
    tag: str | None = None,
    worst: Sequence[ClassRow] = (),
    sources: dict[str, Any] | None = None,
    absolute_paths: bool = False,
) -> dict[str, Any]:
    """The run as a JSON-ready dict (the ``--json`` file): values, counts, setup, per query its
    name, label, path, first-hit rank, value of every metric and nearest gallery item's label.

    ``queries`` holds, row for row, each query's name (its path relative to the folder,
    manifest or benchmark it came from, or its manifest id: [`ImageSet`][ImageSet]), label, image
    path (relative likewise; ``null`` for an in-memory image), first-hit rank (0-indexed, ``-1``
    for an excluded query), values, and the label of its nearest gallery item
    (``nearest_label``, [`nearest_labels`][nearest_labels]: what the report's per-class confusions
    count). ``recallkit compare`` pairs two runs on name and path together (a manifest's ids may
    repeat), so that the same images evaluated from two folders or machines pair. No absolute
    path of this machine is written (paths given on the command line are recorded relative to
    the current folder, or by name) unless
    ``absolute_paths``. ``definitions`` holds the definitions the values rest on (similarity,
    tie rule, exactness, self-exclusion, lone queries, averaging, K clamp, versions) and their
    ``id`` (``recallkit.runfiles.definitions``): ``compare`` refuses two runs whose definitions
    differ, and ``plot`` marks them.
    """
    result = run.result
    query = run.query
    has_paths = [isinstance(item, str | os.PathLike) for item in query.items]
    if absolute_paths:
        names = query.ids
        paths = [
            os.path.abspath(i) if p else None for i, p in zip(query.items, has_paths, strict=True)
        ]
    else:
        names = query.names
        paths = [
            query.name_of(i) if p else None for i, p in zip(query.items, has_paths, strict=True)
        ]
    if names is None:
        names = tuple(str(i) for i in range(len(query)))
    roots = [s.root for s in (run.query, run.gallery) if s.root is not None]
    portable = (lambda value: value) if absolute_paths else (lambda value: _portable(value, roots))
    extra = {
        "query_source": query.source if absolute_paths else query.portable_source,
        "gallery_source": run.gallery.source if absolute_paths else run.gallery.portable_source,
        "sources": portable(sources or {}),
        "encoder": portable(run.encoder),
        "cache": portable(run.cache),
        "seconds": {k: round(v, 3) for k, v in run.seconds.items()},
        "skipped_images": [[portable(b.path), b.reason] for b in run.skipped],
        "worst_classes": [
            {
                "label": json_label(r.label),
                "queries": r.queries,
                "recall": r.recall,
                "confused_with": json_label(r.confused_with),
                "confused_count": r.confused_count,
                "missed_at_1": r.missed_at_1,
            }
            for r in worst
        ],
    }
    record = evaluation_record(
        result,
        tag=tag,
        metric=run.metric,
        query_ids=[str(i) for i in names],
        producer="recallkit evaluate",
        extra=extra,
    )
    record["definitions"] = run.definitions
    record["queries"]["labels"] = [json_label(v) for v in query.labels]
    record["queries"]["paths"] = paths
    record["queries"]["nearest_label"] = nearest_labels(run)
    return record


def nearest_labels(run: Run) -> list[Any]:
    """Each query's nearest gallery item's label (``None`` for a query with no candidate), from
    the run's own pass when it kept a neighbour ([`top_k`][top_k]).

    A query whose nearest label differs from its own missed at rank 0; over a class's missed
    queries, the most frequent nearest label is the class it is most confused with (the
    report's per-class table).
    """
    if len(run.query) == 0:
        return []
    first = top_k(run, np.arange(len(run.query)), 1)[:, 0]
    labels = run.gallery.labels
    return [None if j < 0 else json_label(labels[int(j)]) for j in first.tolist()]


def _portable(value: Any, roots: Sequence[Path]) -> Any:
    """``value`` with every absolute path in it (strings, in dicts and lists) made relative to
    the dataset's root or the current folder when it lies within one, else cut to its name."""
    if isinstance(value, dict):
        return {k: _portable(v, roots) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_portable(v, roots) for v in value]
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not os.path.isabs(value) or len(value) < 2:
        return value
    for base in (*roots, Path.cwd()):
        relative = os.path.relpath(value, base)
        if not relative.startswith(".."):
            return Path(relative).as_posix()
    return Path(value).name


#: JSON text of a run record
#: ([`recallkit.runfiles.records.dumps_run`][recallkit.runfiles.records.dumps_run]).
dumps_record = dumps_run
