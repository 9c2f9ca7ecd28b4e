"""CIRCO (Baldrati et al. 2023, ICCV): composed image retrieval with several ground truths.

Official evaluation (``miccunifi/CIRCO`` ``src/evaluation.py``, also the test server):

* candidates: the COCO 2017 unlabeled images (123,403); the reference image is **not** removed
  (``exclude_reference=True`` removes it, as CIRR does).
* ``mAP@K`` (K = 5, 10, 25, 50):

      AP@K = (1 / min(K, R)) * sum_{i <= K, item i relevant} precision@i

  with R the query's number of ground truths (``gt_img_ids``). ``divisor="r"`` divides by R
  instead, as the scoring recipe of SQUARE (Wu et al. 2025, arXiv:2509.26330) writes it; the two
  differ only for queries with more than K ground truths, where dividing by R caps AP@K below 1.
* ``recall@K``: a hit when the primary target (``target_img_id``, the image the caption was
  written for) is in the top K.
* ``mAP@10[<aspect>]``, the evaluation's per-aspect "semantic mAP@10": for each semantic
  aspect (``semantic_aspects`` of the val annotations: ``cardinality``, ``addition``,
  ``negation``, ``direct_addressing``, ``compare_change``, ``comparative_statement``,
  ``statement_with_conjunction``, ``spatial_relations_background``, ``viewpoint``), the mean
  AP@10 over the queries whose ``semantic_aspects`` include it. A query counts once for each
  of its aspects. Reported (always at K = 10, whatever ``ks``; with the chosen ``divisor``) for
  each aspect that at least one query has, in the order above, then any other aspect name
  found in the data in sorted order; an aspect without queries is left out (the official
  script prints NaN for it).

Ranks come from the core's ``recallkit.ground_truth.Ranker`` over
embeddings or a given similarity matrix (every ground truth's rank, one code path for both), AP from
[`recallkit.average_precision_at_k`][recallkit.ground_truth.average_precision_at_k]; on equal scores
the lower image index ranks first, and the recall@K bounds give the values under the other tie
orders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recallkit._inputs import checks as _checks
from recallkit.exceptions import RecallkitError, Text
from recallkit.ground_truth import Ranker, Ranks, average_precision_at_k, recall_from_ranks
from recallkit.options import Options, accepts
from recallkit.protocols import _common
from recallkit.protocols._common import Expect, PathLike, protocol_result
from recallkit.result import Result

__all__ = [
    "CIRCO_SEMANTIC_ASPECTS",
    "CIRCOQuery",
    "CIRCOSplit",
    "circo_metrics",
    "circo_metrics_from_predictions",
    "circo_metrics_from_scores",
    "circo_rankings",
    "circo_rankings_from_scores",
    "read_circo",
    "read_coco_image_ids",
    "write_circo_submission",
]

DIVISORS = {
    "min_k_r": "AP@K / min(K, R) (official CIRCO evaluation)",
    "r": "AP@K / R (SQUARE scoring recipe)",
}
SUBMISSION_SIZE = 50
CIRCO_SEMANTIC_ASPECTS = (
    "cardinality",
    "addition",
    "negation",
    "direct_addressing",
    "compare_change",
    "comparative_statement",
    "statement_with_conjunction",
    "spatial_relations_background",
    "viewpoint",
)
"""The semantic aspects of CIRCO's annotations, in the official evaluation's order."""
SEMANTIC_K = 10


@dataclass(frozen=True)
class CIRCOQuery:
    """One CIRCO query; ``target_img_id`` and ``gt_img_ids`` are absent from the test split.

    Attributes
    ----------
    id : int
        The query's id.
    reference_img_id : int
        The COCO id of the reference image.
    relative_caption : str
        The modification caption.
    shared_concept : str
        What the reference and the targets share.
    target_img_id : int or None, default None
        The primary target (the image the caption was written for); ``None`` in ``test``.
    gt_img_ids : tuple of int, default ()
        Every ground truth, the primary target included.
    semantic_aspects : tuple of str, default ()
        The query's aspects, among
        [`CIRCO_SEMANTIC_ASPECTS`][recallkit.protocols.circo.CIRCO_SEMANTIC_ASPECTS].
    """

    id: int
    reference_img_id: int
    relative_caption: str
    shared_concept: str
    target_img_id: int | None = None
    gt_img_ids: tuple[int, ...] = ()
    semantic_aspects: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class CIRCOSplit:
    """The queries of ``annotations/<split>.json`` in file order.

    Attributes
    ----------
    split : str
        The split's name (``"val"`` or ``"test"``).
    queries : tuple of CIRCOQuery
        The queries, in file order.
    """

    split: str
    queries: tuple[CIRCOQuery, ...]

    @property
    def has_targets(self) -> bool:
        """Whether every query has its target and ground truths (not ``test``)."""
        return all(q.target_img_id is not None and q.gt_img_ids for q in self.queries)


def read_circo(path: PathLike, split: str = "val") -> CIRCOSplit:
    """Read CIRCO's ``annotations/<split>.json`` (``path`` is the file or the CIRCO folder).

    Entries are ``{"id", "reference_img_id", "target_img_id", "relative_caption",
    "shared_concept", "gt_img_ids", "semantic_aspects"}`` (no targets or aspects in ``test``).
    Repeated query ids, repeated ground truths, a target missing from its ground truths and
    ``semantic_aspects`` that is not a list of strings are errors naming the query.

    Parameters
    ----------
    path : str or os.PathLike
        The annotation file, or the CIRCO folder holding ``annotations/``.
    split : {'val', 'test'}, default 'val'
        The split to read (the file ``annotations/<split>.json``).

    Returns
    -------
    CIRCOSplit
        The queries, in file order.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "val.json"
    >>> _ = p.write_text(json.dumps([{"id": 0, "reference_img_id": 85932, "target_img_id": 9761,
    ...     "relative_caption": "is held by a girl", "shared_concept": "a teddy bear",
    ...     "gt_img_ids": [9761, 489535]}]))
    >>> read_circo(p).queries[0].gt_img_ids
    (9761, 489535)
    """
    path = Path(path)
    if path.is_dir():
        path = path / "annotations" / f"{split}.json"
    entries = _common.load_json_list(path, "CIRCO annotation", "queries")
    queries, seen = [], set()
    for position, entry in enumerate(entries):
        _common.require_keys(
            entry, ("id", "reference_img_id", "relative_caption"), f"{path}: entry {position}"
        )
        aspects = entry.get("semantic_aspects") or []
        if not isinstance(aspects, list) or not all(isinstance(a, str) for a in aspects):
            raise ValueError(
                f"{path}: entry {position}: 'semantic_aspects' must be a list of strings"
            )
        query = CIRCOQuery(
            id=int(entry["id"]),
            reference_img_id=int(entry["reference_img_id"]),
            relative_caption=str(entry["relative_caption"]),
            shared_concept=str(entry.get("shared_concept", "")),
            target_img_id=None
            if entry.get("target_img_id") is None
            else int(entry["target_img_id"]),
            gt_img_ids=tuple(int(i) for i in entry.get("gt_img_ids") or ()),
            semantic_aspects=tuple(aspects),
        )
        if query.id in seen:
            raise ValueError(f"{path}: CIRCO query id {query.id} appears twice")
        seen.add(query.id)
        if len(set(query.gt_img_ids)) != len(query.gt_img_ids):
            raise ValueError(f"{path}: CIRCO query {query.id}: gt_img_ids has a repeated image id")
        if query.target_img_id is not None and query.target_img_id not in query.gt_img_ids:
            raise ValueError(
                f"{path}: CIRCO query {query.id}: target_img_id {query.target_img_id} "
                "is not among its gt_img_ids"
            )
        queries.append(query)
    return CIRCOSplit(split, tuple(queries))


def read_coco_image_ids(path: PathLike) -> np.ndarray:
    """Image ids of a COCO image-info file (``image_info_unlabeled2017.json``), in file order.

    Parameters
    ----------
    path : str or os.PathLike
        A COCO image-info JSON file (``{"images": [{"id", ...}]}``).

    Returns
    -------
    numpy.ndarray of int64, shape (n_images,)
        The image ids, in file order.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "info.json"
    >>> _ = p.write_text(json.dumps({"images": [{"id": 243611, "file_name": "000000243611.jpg"}]}))
    >>> read_coco_image_ids(p).tolist()
    [243611]
    """
    data = _common.load_json(path, "COCO image info")
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{path}: expected a JSON object with an 'images' list")
    try:
        ids = np.array([int(image["id"]) for image in data["images"]], dtype=np.int64)
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path}: every entry of 'images' needs an integer 'id'") from None
    _common.index_of(ids.tolist(), f"{path}: image id")
    return ids


@dataclass(frozen=True)
class _Targets:
    reference: np.ndarray  # (n,) positions in the pool
    gt: np.ndarray  # (n, g) positions, -1 pad
    num_gt: np.ndarray  # (n,)
    target_column: np.ndarray  # (n,) column of target_img_id in ``gt``


def _positions(image_ids: Any, func: str) -> dict[int, int]:
    ids = _common.integer_rows(image_ids, func, "image_ids", "one id per image")
    try:
        return _common.index_of(ids.tolist(), "image_ids")
    except ValueError as error:
        raise _checks.fail(func, "image_ids", "distinct", str(error)) from None


def _targets(data: CIRCOSplit, position: dict[int, int], func: str, need_targets: bool) -> _Targets:
    if not isinstance(data, CIRCOSplit):
        raise _checks.fail(func, "data", "a CIRCOSplit (see read_circo)", type(data).__name__)
    if need_targets and not data.has_targets:
        raise _checks.fail(
            func,
            "data",
            f"a split with ground truths (split {data.split!r} has none)",
            "queries without gt_img_ids",
        )
    reference, gt, columns = [], [], []
    for q in data.queries:
        if q.reference_img_id not in position:
            raise RecallkitError(
                Text(
                    f"CIRCO query {q.id}: reference image {q.reference_img_id} is not among the "
                    "{ids}",
                    ids="image_ids",
                )
            )
        reference.append(position[q.reference_img_id])
        if not need_targets:
            continue
        for image in q.gt_img_ids:
            if image not in position:
                raise RecallkitError(
                    Text(
                        f"CIRCO query {q.id}: ground-truth image {image} is not among the {{ids}}",
                        ids="image_ids",
                    )
                )
        gt.append([position[i] for i in q.gt_img_ids])
        columns.append(q.gt_img_ids.index(q.target_img_id))
    gt_array = _common.pad_lists(gt) if need_targets else np.empty((0, 1), dtype=np.int64)
    return _Targets(
        np.asarray(reference, dtype=np.int64),
        gt_array,
        (gt_array >= 0).sum(axis=1),
        np.asarray(columns, dtype=np.int64),
    )


def _check_reference_not_gt(data: CIRCOSplit, t: _Targets) -> None:
    clash = np.nonzero((t.gt == t.reference[:, None]).any(axis=1))[0]
    if clash.size:
        q = data.queries[int(clash[0])]
        raise ValueError(
            f"CIRCO query {q.id}: the reference image is a ground truth; it cannot be excluded"
        )


def _result(
    data: CIRCOSplit,
    gt_ranks: np.ndarray,
    num_gt: np.ndarray,
    target: np.ndarray | Ranks,
    ks: tuple[int, ...],
    divisor: str,
    note: str,
) -> Result:
    metrics: dict[str, float] = {}
    if not isinstance(target, Ranks):  # ranked lists: no tie to break
        target = Ranks(target, target, target)
    target_ranks = target.ranks
    per_query: dict[str, np.ndarray] = {"gt_ranks": gt_ranks, "target_ranks": target_ranks}
    for k in ks:
        ap = np.asarray(
            average_precision_at_k(gt_ranks, num_gt, k, divisor=divisor), dtype=np.float64
        )
        metrics[f"mAP@{k}"] = float(ap.mean())
        per_query[f"AP@{k}"] = ap
    recall = recall_from_ranks(
        target_ranks, ks, optimistic=target.optimistic, pessimistic=target.pessimistic
    )
    metrics.update(recall)
    aspects = _aspects(data)
    if aspects:
        key = f"AP@{SEMANTIC_K}"
        if key not in per_query:
            per_query[key] = np.asarray(
                average_precision_at_k(gt_ranks, num_gt, SEMANTIC_K, divisor=divisor),
                dtype=np.float64,
            )
        for aspect in aspects:
            has = np.array([aspect in q.semantic_aspects for q in data.queries])
            metrics[f"mAP@{SEMANTIC_K}[{aspect}]"] = float(per_query[key][has].mean())
    return protocol_result(
        f"CIRCO {data.split}",
        metrics,
        convention=DIVISORS[divisor] + note,
        num_queries=len(data.queries),
        per_query=per_query,
        bounds=recall.bounds,
        tied=recall.tied,
    )


def _aspects(data: CIRCOSplit) -> list[str]:
    """The semantic aspects the queries have: the official ones in order, then others sorted."""
    found = {a for q in data.queries for a in q.semantic_aspects}
    official = [a for a in CIRCO_SEMANTIC_ASPECTS if a in found]
    return official + sorted(found - set(official))


def _check_options(func: str, ks: Any, divisor: str) -> tuple[int, ...]:
    _checks.check_choice(divisor, tuple(DIVISORS), func, "divisor")
    return _checks.check_ks(ks, func)


def _note(exclude_reference: bool) -> str:
    return "; reference removed" if exclude_reference else ""


def _skipped(ranker: Ranker, t: _Targets, exclude_reference: bool) -> Any:
    return _common.without_references(ranker, t.reference) if exclude_reference else None


def _prepared(
    func: str,
    make: Callable[[Expect], Ranker],
    image_ids: Any,
    data: CIRCOSplit,
    need_targets: bool,
) -> tuple[Ranker, _Targets]:
    """The ranker of the queries against the images, and the queries' images as positions."""
    position = _positions(image_ids, func)
    t = _targets(data, position, func, need_targets=need_targets)
    image = Text("id of {i}", i="image_ids")
    return make(_common.queries_of_data(len(data.queries), len(position), image)), t


def _metrics(
    func: str,
    make: Callable[[Expect], Ranker],
    image_ids: Any,
    data: CIRCOSplit,
    ks: Any,
    divisor: str,
    exclude_reference: bool,
) -> Result:
    """The metrics from a ranker of the queries against the images (embeddings or scores)."""
    ks = _check_options(func, ks, divisor)
    ranker, t = _prepared(func, make, image_ids, data, need_targets=True)
    if exclude_reference:
        _check_reference_not_gt(data, t)
    ranks = ranker.ranks(t.gt, _skipped(ranker, t, exclude_reference), reduce="none")
    rows = np.arange(len(t.gt))
    target = ranks.map(lambda r: r[rows, t.target_column])
    return _result(data, ranks.ranks, t.num_gt, target, ks, divisor, _note(exclude_reference))


@accepts(scope="engine")
def circo_metrics(
    query: Any,
    images: Any,
    image_ids: Any,
    data: CIRCOSplit,
    *,
    ks: Sequence[int] = (5, 10, 25, 50),
    divisor: str = "min_k_r",
    exclude_reference: bool = False,
    options: Options,
) -> Result:
    """CIRCO mAP@K and recall@K from embeddings.

    ``query`` has one row per query of ``data``, ``images`` one row per id of ``image_ids``
    (the candidate pool). Keys: ``mAP@K`` then ``recall@K``, then ``mAP@10[<aspect>]`` for
    each semantic aspect the queries have (module docstring; none when the annotations have no
    ``semantic_aspects``); ``per_query`` holds every ground truth's 0-indexed rank, the primary
    target's rank and the per-query AP@K (and AP@10 when there are aspects). ``options``:
    ``metric``, ``chunk_size``, ``device``, ``precision``
    ([`recallkit.Options`][recallkit.options.Options]).

    {embeddings}
    {metric_parameters}
    {options}

    {result}

    Examples
    --------
    >>> import numpy as np
    >>> data = CIRCOSplit("val", (CIRCOQuery(0, 10, "x", "y", 30, (30, 40)),))
    >>> images = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.8, 0.2]])
    >>> query = np.array([[1.0, 0.0]])
    >>> r = circo_metrics(query, images, [10, 20, 30, 40], data, ks=(2, 4), metric="dot")
    >>> r.per_query["gt_ranks"].tolist()
    [[3, 2]]
    >>> round(r["mAP@4"], 4)  # (1/3 + 2/4) / min(4, 2)
    0.4167
    """
    func = "circo_metrics"
    make = _common.embeddings_ranker(query, images, func, options)
    return _metrics(func, make, image_ids, data, ks, divisor, exclude_reference)


def circo_metrics_from_scores(
    scores: Any,
    image_ids: Any,
    data: CIRCOSplit,
    *,
    ks: Sequence[int] = (5, 10, 25, 50),
    divisor: str = "min_k_r",
    exclude_reference: bool = False,
) -> Result:
    """[`circo_metrics`][circo_metrics] from a ``(queries, images)`` similarity matrix.

    {scores}
    {metric_parameters}

    {result}
    """
    func = "circo_metrics_from_scores"
    make = _common.scores_ranker(scores, func)
    return _metrics(func, make, image_ids, data, ks, divisor, exclude_reference)


def circo_metrics_from_predictions(
    predictions: Mapping[Any, Sequence[int]],
    data: CIRCOSplit,
    *,
    ks: Sequence[int] = (5, 10, 25, 50),
    divisor: str = "min_k_r",
) -> Result:
    """CIRCO metrics of ranked lists ``{query id: [image ids, best first]}`` (a submission file).

    As the official ``evaluation.py``: every query of ``data`` must have a list; a ground truth
    absent from a list counts as not retrieved. A list that repeats an image id is rejected
    (the official code would count the repeat twice).

    Parameters
    ----------
    predictions : mapping of int to sequence of int
        ``query id -> `` image ids, best first (a submission's lists); every query of ``data``
        needs one.
    data : CIRCOSplit
        The queries with their ground truths
        ([`read_circo`][recallkit.protocols.circo.read_circo]).
    {ap}

    Returns
    -------
    Result
        A [`recallkit.Result`][recallkit.result.Result]: ``mAP@K`` then ``recall@K`` (in the order
        of ``ks``), then ``mAP@10[<aspect>]`` for each semantic aspect the queries have.

    Examples
    --------
    >>> data = CIRCOSplit("val", (CIRCOQuery(0, 10, "x", "y", 30, (30, 40)),))
    >>> r = circo_metrics_from_predictions({"0": [20, 40, 30]}, data, ks=(1, 3))
    >>> r["mAP@3"], r["recall@1"], r["recall@3"]  # AP@3 = (1/2 + 2/3) / 2
    (0.5833333333333333, 0.0, 1.0)
    """
    func = "circo_metrics_from_predictions"
    ks = _check_options(func, ks, divisor)
    if not isinstance(data, CIRCOSplit):
        raise _checks.fail(func, "data", "a CIRCOSplit (see read_circo)", type(data).__name__)
    if not data.has_targets:
        raise _checks.fail(
            func, "data", "a split with ground truths", f"split {data.split!r} without gt_img_ids"
        )
    if not isinstance(predictions, Mapping):
        raise _checks.fail(
            func,
            "predictions",
            "a mapping query id -> ranked image ids",
            type(predictions).__name__,
        )
    lists: dict[int, list[int]] = {}
    for key, ranking in predictions.items():
        try:
            query_id = int(key)
            ids = [int(i) for i in ranking]
        except (TypeError, ValueError):
            raise _checks.fail(
                func,
                "predictions",
                "integer query ids and image ids",
                f"{key!r}: {ranking!r}"[:200],
            ) from None
        if len(set(ids)) != len(ids):
            raise _checks.fail(
                func,
                "predictions",
                "rankings without repeated image ids",
                f"a repeated image id in the ranking of query {query_id}",
            )
        lists[query_id] = ids
    wanted = [q.id for q in data.queries]
    missing = [i for i in wanted if i not in lists]
    extra = sorted(set(lists) - set(wanted))
    if missing or extra:
        raise _checks.fail(
            func,
            "predictions",
            Text("one ranking per query of {d}", d="data"),
            f"missing queries {missing[:5]}, unknown queries {extra[:5]}",
        )
    width = max(len(q.gt_img_ids) for q in data.queries)
    gt_ranks = np.full((len(wanted), width), -1, dtype=np.int64)
    target = np.empty(len(wanted), dtype=np.int64)
    not_found = np.iinfo(np.int64).max
    for row, q in enumerate(data.queries):
        where = {image: i for i, image in enumerate(lists[q.id])}
        gt_ranks[row, : len(q.gt_img_ids)] = [where.get(i, -1) for i in q.gt_img_ids]
        target[row] = where.get(q.target_img_id, not_found)
    num_gt = np.array([len(q.gt_img_ids) for q in data.queries], dtype=np.int64)
    return _result(data, gt_ranks, num_gt, target, ks, divisor, "; from ranked lists")


def _rankings(
    func: str,
    make: Callable[[Expect], Ranker],
    image_ids: Any,
    data: CIRCOSplit,
    k: int,
    exclude_reference: bool,
) -> dict[int, list[int]]:
    k = _checks.check_positive_int(k, func, "k")
    ranker, t = _prepared(func, make, image_ids, data, need_targets=False)
    top, _ = ranker.lists(k, _skipped(ranker, t, exclude_reference))
    return _as_ids(data, top.cpu().numpy(), image_ids)


@accepts(scope="engine")
def circo_rankings(
    query: Any,
    images: Any,
    image_ids: Any,
    data: CIRCOSplit,
    *,
    k: int = SUBMISSION_SIZE,
    exclude_reference: bool = False,
    options: Options,
) -> dict[int, list[int]]:
    """Top-``k`` image ids per query id (the server's submission lists), exact and chunked.

    {embeddings}
    {ranking_parameters}
    {options}

    {rankings}

    Examples
    --------
    >>> import numpy as np
    >>> data = CIRCOSplit("test", (CIRCOQuery(0, 10, "x", "y"),))
    >>> images = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    >>> circo_rankings(np.array([[1.0, 0.0]]), images, [10, 20, 30], data, k=2)
    {0: [10, 30]}
    """
    func = "circo_rankings"
    make = _common.embeddings_ranker(query, images, func, options)
    return _rankings(func, make, image_ids, data, k, exclude_reference)


def circo_rankings_from_scores(
    scores: Any,
    image_ids: Any,
    data: CIRCOSplit,
    *,
    k: int = SUBMISSION_SIZE,
    exclude_reference: bool = False,
) -> dict[int, list[int]]:
    """[`circo_rankings`][circo_rankings] from a ``(queries, images)`` similarity matrix.

    {scores}
    {ranking_parameters}

    {rankings}
    """
    func = "circo_rankings_from_scores"
    make = _common.scores_ranker(scores, func)
    return _rankings(func, make, image_ids, data, k, exclude_reference)


def _as_ids(data: CIRCOSplit, top: np.ndarray, image_ids: Any) -> dict[int, list[int]]:
    ids = np.asarray(image_ids, dtype=np.int64)
    return {q.id: ids[row[row >= 0]].tolist() for q, row in zip(data.queries, top, strict=True)}


def write_circo_submission(path: PathLike, rankings: Mapping[int, Sequence[int]]) -> Path:
    """Write ``{"<query id>": [top-50 image ids]}`` atomically (the CIRCO server's format).

    At most 50 ids per query, no repeated id (an error names the query).

    Parameters
    ----------
    {path}
    rankings : mapping of int to sequence of int
        ``query id -> `` image ids, best first
        ([`circo_rankings`][recallkit.protocols.circo.circo_rankings]).

    {written}

    Examples
    --------
    >>> import tempfile, pathlib, json
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "circo.json"
    >>> _ = write_circo_submission(p, {0: [9761, 489535]})
    >>> json.loads(p.read_text())
    {'0': [9761, 489535]}
    """
    func = "write_circo_submission"
    payload: dict[str, list[int]] = {}
    for query_id, ids in rankings.items():
        ids = [int(i) for i in ids]
        _common.check_ranking(ids, SUBMISSION_SIZE, func, "ids per query", f"query {query_id}")
        payload[str(int(query_id))] = ids
    return _common.write_json(path, payload)


# The docstring parts the scoring functions share, written once (_common.document).
_TIES = """\
Ties: on equal scores the lower reference index (the image earlier in ``image_ids``) ranks
first.

Parameters
----------
"""
_DATA = """
data : CIRCOSplit
    The queries, from [`read_circo`][recallkit.protocols.circo.read_circo]."""
_EMBEDDINGS = (
    _TIES
    + """\
query : torch.Tensor or numpy.ndarray, shape (n_queries, d)
    One composed-query embedding per query of ``data``, in file order.
images : torch.Tensor or numpy.ndarray, shape (n_images, d)
    One embedding per candidate image, row for row with ``image_ids``.
image_ids : sequence of int or numpy.ndarray of int, shape (n_images,)
    The COCO id of each candidate image
    ([`read_coco_image_ids`][recallkit.protocols.circo.read_coco_image_ids])."""
    + _DATA
)
_SCORES = (
    _TIES
    + """\
scores : torch.Tensor or numpy.ndarray, shape (n_queries, n_images)
    The similarity of each query to each candidate image (higher is better).
image_ids : sequence of int or numpy.ndarray of int, shape (n_images,)
    The COCO id of each candidate image, column for column."""
    + _DATA
)
_AP_PARAMETERS = """\
ks : sequence of int, default (5, 10, 25, 50)
    The K of ``mAP@K`` and ``recall@K``.
divisor : {'min_k_r', 'r'}, default 'min_k_r'
    What AP@K divides by: ``min(K, R)`` (the official evaluation) or ``R`` (the module's
    docstring)."""
_EXCLUDE_REFERENCE = """
exclude_reference : bool, default False
    Remove each query's reference image from its candidates (the official evaluation keeps it)."""
_METRIC_PARAMETERS = _AP_PARAMETERS + _EXCLUDE_REFERENCE
_RANKING_PARAMETERS = (
    """\
k : int, default 50
    How many ids each list holds (the server takes 50)."""
    + _EXCLUDE_REFERENCE
)
_RESULT = """\
Returns
-------
Result
    A [`recallkit.Result`][recallkit.result.Result]: ``mAP@K`` then ``recall@K`` (in the order
    of ``ks``), then ``mAP@10[<aspect>]`` for each semantic aspect the queries have;
    ``per_query`` holds every ground truth's 0-indexed rank, the primary target's rank and each
    query's AP@K."""
_RANKINGS = """\
Returns
-------
dict of int to list of int
    ``query id -> `` the top ``k`` image ids, best first."""
_common.document(
    circo_metrics, embeddings=_EMBEDDINGS, metric_parameters=_METRIC_PARAMETERS, result=_RESULT
)
_common.document(
    circo_metrics_from_scores, scores=_SCORES, metric_parameters=_METRIC_PARAMETERS, result=_RESULT
)
_common.document(circo_metrics_from_predictions, ap=_AP_PARAMETERS)
_common.document(
    circo_rankings,
    embeddings=_EMBEDDINGS,
    ranking_parameters=_RANKING_PARAMETERS,
    rankings=_RANKINGS,
)
_common.document(
    circo_rankings_from_scores,
    scores=_SCORES,
    ranking_parameters=_RANKING_PARAMETERS,
    rankings=_RANKINGS,
)
_common.document(write_circo_submission, path=_common.SUBMISSION_PATH, written=_common.WRITTEN)
