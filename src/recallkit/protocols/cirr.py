"""CIRR (Liu et al. 2021, ICCV): composed image retrieval on real-life images.

Validation protocol (CLIP4Cir, SEARLE and most zero-shot CIR papers; the test split is scored by
the benchmark's server from the same definitions):

* ``recall@K`` (K = 1, 5, 10, 50): the candidates are every image of the split (``image_splits/
  split.rc2.<split>.json``) **except the query's reference image**; a hit when ``target_hard``
  is among the top K.
* ``recall_subset@K`` (K = 1, 2, 3): the candidates are the query's image set
  (``img_set.members``) without the reference (5 images), in the same ranking.
* ``avg = (recall@5 + recall_subset@1) / 2``, the number the CIRR papers rank by.

``target="soft"`` follows instead the dataset authors' CIRPLANT code: each query scores
``max(0, max{target_soft[t] : t in the top K})`` (soft values are 1 for the true target, 0.5 for
"also acceptable", -1 for "no"), averaged over queries, for both recall and recall_subset.

Ranks come from the core's ``recallkit.ground_truth.Ranker`` over
embeddings or a given similarity matrix (one code path for both), the reference skipped; on equal
scores the lower image index (split-file order) ranks first, and the hard-target recall bounds give
the values under the other tie orders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recallkit._inputs import checks as _checks
from recallkit.exceptions import Text
from recallkit.ground_truth import Ranker, Ranks, recall_from_ranks
from recallkit.options import Options, accepts
from recallkit.protocols import _common
from recallkit.protocols._common import Expect, PathLike, protocol_result
from recallkit.result import Result

__all__ = [
    "CIRRQuery",
    "CIRRSplit",
    "cirr_rankings",
    "cirr_rankings_from_scores",
    "cirr_recall",
    "cirr_recall_from_scores",
    "read_cirr",
    "write_cirr_submission",
]

CONVENTIONS = {
    "hard": "reference removed; hit on target_hard (CLIP4Cir/SEARLE validation)",
    "soft": "reference removed; max(0, best target_soft value in the top K) (CIRPLANT validation)",
}
SUBMISSION_SIZES = {"recall": 50, "recall_subset": 3}


@dataclass(frozen=True)
class CIRRQuery:
    """One CIRR query: a reference image, a modification caption and (val/train) its targets.

    Attributes
    ----------
    pairid : int
        The query's id (the key of the server's submission).
    reference : str
        The reference image's name.
    caption : str
        The modification caption.
    members : tuple of str
        The names of the query's image set (``img_set.members``), the reference included.
    target_hard : str or None, default None
        The target image's name (``None`` in ``test1``).
    target_soft : mapping of str to float, default {}
        The soft targets: 1 for the true target, 0.5 "also acceptable", -1 "no".
    """

    pairid: int
    reference: str
    caption: str
    members: tuple[str, ...]
    target_hard: str | None = None
    target_soft: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class CIRRSplit:
    """A CIRR split: the candidate images in split-file order, and the queries in file order.

    Attributes
    ----------
    split : str
        The split's name (``"val"``, ``"test1"``, ``"train"``).
    version : str
        The annotation version (``"rc2"``).
    image_names : tuple of str
        The candidate images' names, in split-file order (the rows of ``images``).
    image_paths : tuple of str
        Each image's relative path, row for row.
    queries : tuple of CIRRQuery
        The queries, in file order.
    """

    split: str
    version: str
    image_names: tuple[str, ...]
    image_paths: tuple[str, ...]
    queries: tuple[CIRRQuery, ...]

    @property
    def has_targets(self) -> bool:
        """Whether every query has its target (not ``test1``)."""
        return all(q.target_hard is not None for q in self.queries)


def read_cirr(root: PathLike, split: str = "val", *, version: str = "rc2") -> CIRRSplit:
    """Read CIRR's caption file and image split of ``split`` under ``root``.

    The files are ``captions/cap.<version>.<split>.json`` and
    ``image_splits/split.<version>.<split>.json``.

    Captions are ``[{"pairid", "reference", "target_hard", "target_soft", "caption",
    "img_set": {"id", "members"}}]`` (no targets in ``test1``); the split file maps each image
    name to its relative path. A reference, target or set member that is not an image of the
    split is an error naming the query's pairid.

    Parameters
    ----------
    root : str or os.PathLike
        The CIRR folder holding ``captions/`` and ``image_splits/``.
    split : {'val', 'test1', 'train'}, default 'val'
        The split to read.
    version : str, default 'rc2'
        The annotation version in the file names.

    Returns
    -------
    CIRRSplit
        The candidate images in split-file order and the queries in file order.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "captions").mkdir(); (root / "image_splits").mkdir()
    >>> names = ["a", "b", "c"]
    >>> _ = (root / "image_splits/split.rc2.val.json").write_text(
    ...     json.dumps({n: f"./dev/{n}.png" for n in names}))
    >>> _ = (root / "captions/cap.rc2.val.json").write_text(json.dumps([{"pairid": 7,
    ...     "reference": "a", "target_hard": "b", "target_soft": {"b": 1.0},
    ...     "caption": "make it b", "img_set": {"id": 1, "members": names}}]))
    >>> data = read_cirr(root)
    >>> data.image_names, data.queries[0].target_hard
    (('a', 'b', 'c'), 'b')
    """
    root = Path(root)
    captions_path = root / "captions" / f"cap.{version}.{split}.json"
    split_path = root / "image_splits" / f"split.{version}.{split}.json"
    images = _common.load_json(split_path, "CIRR image split")
    if not isinstance(images, dict) or not images:
        raise ValueError(f"{split_path}: expected a non-empty JSON object name -> path")
    names = tuple(str(n) for n in images)
    known = set(names)
    entries = _common.load_json_list(captions_path, "CIRR captions", "queries")
    queries, seen = [], set()
    for position, entry in enumerate(entries):
        where = f"{captions_path}: entry {position}"
        _common.require_keys(entry, ("pairid", "reference", "caption", "img_set"), where)
        pairid = int(entry["pairid"])
        if pairid in seen:
            raise ValueError(f"{captions_path}: pairid {pairid} appears twice")
        seen.add(pairid)
        members = entry["img_set"].get("members") if isinstance(entry["img_set"], dict) else None
        if not isinstance(members, list):
            raise ValueError(
                f"{captions_path}: CIRR query pairid {pairid}: img_set has no members list"
            )
        soft = entry.get("target_soft") or {}
        query = CIRRQuery(
            pairid=pairid,
            reference=str(entry["reference"]),
            caption=str(entry["caption"]),
            members=tuple(str(m) for m in members),
            target_hard=None if entry.get("target_hard") is None else str(entry["target_hard"]),
            target_soft={str(k): float(v) for k, v in soft.items()},
        )
        _check_known(query, known, split_path)
        queries.append(query)
    return CIRRSplit(split, version, names, tuple(str(p) for p in images.values()), tuple(queries))


def _check_known(query: CIRRQuery, known: set[str], split_path: Path) -> None:
    roles = [("reference", query.reference)]
    roles += [("target_hard", query.target_hard)] if query.target_hard is not None else []
    roles += [("target_soft", name) for name in query.target_soft]
    roles += [("img_set member", name) for name in query.members]
    for role, name in roles:
        if name not in known:
            raise ValueError(
                f"CIRR query pairid {query.pairid}: {role} {name!r} is not an image of {split_path}"
            )


@dataclass(frozen=True)
class _Indices:
    """Per query, the images whose ranks the protocol needs, as one padded array.

    ``candidates[i]`` lists image indices: the set members other than the reference first
    (``num_members[i]`` of them, ascending), then the hard target and the soft targets that are
    not members. ``-1`` pads. The ``*_column`` arrays point into ``candidates`` (-1: none).
    """

    reference: np.ndarray  # (n,)
    candidates: np.ndarray  # (n, c)
    num_members: np.ndarray  # (n,)
    target_column: np.ndarray | None  # (n,)
    soft_column: np.ndarray | None  # (n, t)
    soft_value: np.ndarray | None  # (n, t)


def _indices(data: CIRRSplit, func: str, need_targets: bool) -> _Indices:
    if not isinstance(data, CIRRSplit):
        raise _checks.fail(func, "data", "a CIRRSplit (see read_cirr)", type(data).__name__)
    if need_targets and not data.has_targets:
        raise _checks.fail(
            func,
            "data",
            f"a split with targets (split {data.split!r} has none; use cirr_rankings)",
            "queries without target_hard",
        )
    position = {name: i for i, name in enumerate(data.image_names)}
    reference = np.array([position[q.reference] for q in data.queries], dtype=np.int64)
    rows, sizes, target_column, soft_column, soft_value = [], [], [], [], []
    for q, ref in zip(data.queries, reference, strict=True):
        row = sorted({position[m] for m in q.members} - {int(ref)})
        if not row:
            raise ValueError(
                f"CIRR query pairid {q.pairid}: img_set has no member but the reference"
            )
        sizes.append(len(row))
        column = {image: j for j, image in enumerate(row)}
        if need_targets:
            target = position[q.target_hard]
            if target == ref:
                raise ValueError(
                    f"CIRR query pairid {q.pairid}: target_hard is the reference image"
                )
            # Soft values on the reference itself are dropped: it is not a candidate.
            soft = [(position[n], v) for n, v in q.target_soft.items() if position[n] != ref]
            for image in [target] + [p for p, _ in soft]:
                if image not in column:
                    column[image] = len(row)
                    row.append(image)
            target_column.append(column[target])
            soft_column.append([column[p] for p, _ in soft])
            soft_value.append([v for _, v in soft])
        rows.append(row)
    if not need_targets:
        return _Indices(reference, _common.pad_lists(rows), np.asarray(sizes), None, None, None)
    columns = _common.pad_lists(soft_column)
    values = np.zeros(columns.shape, dtype=np.float64)
    for i, row in enumerate(soft_value):
        values[i, : len(row)] = row
    return _Indices(
        reference,
        _common.pad_lists(rows),
        np.asarray(sizes, dtype=np.int64),
        np.asarray(target_column, dtype=np.int64),
        columns,
        values,
    )


def _at(ranks: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``ranks[i, columns[i, j]]``, ``-1`` where the column is ``-1``."""
    taken = np.take_along_axis(ranks, np.maximum(columns, 0), axis=1)
    return np.where(columns >= 0, taken, -1)


def _within_set(ranks: np.ndarray, idx: _Indices, columns: np.ndarray) -> np.ndarray:
    """Rank of each given candidate among the query's set members, from the full ranks.

    The subset ranking is the full ranking restricted to the members (as the official code
    filters the sorted list): a member's subset rank is the number of members ranked above it.
    Candidates that are not members get ``-1``.
    """
    width = ranks.shape[1]
    is_member = np.arange(width)[None, :] < idx.num_members[:, None]
    member_ranks = np.where(is_member, ranks, np.iinfo(np.int64).max)
    own = _at(ranks, columns)
    above = (member_ranks[:, None, :] < own[:, :, None]).sum(axis=2)
    inside = (columns >= 0) & (columns < idx.num_members[:, None])
    return np.where(inside, above, -1)


def _soft_scores(ranks: np.ndarray, values: np.ndarray, k: int) -> np.ndarray:
    """Per query ``max(0, max{value_t : 0 <= rank_t < k})`` (CIRPLANT's soft recall)."""
    found = (ranks >= 0) & (ranks < k)
    return np.where(found, values, 0.0).max(axis=1).clip(min=0.0)


def _score(
    data: CIRRSplit,
    idx: _Indices,
    all_ranks: Ranks,
    ks: tuple[int, ...],
    subset_ks: tuple[int, ...],
    target: str,
) -> Result:
    """Metrics from the core's ranks of every candidate of ``idx`` (reference excluded)."""
    metrics: dict[str, float] = {}
    bounds: dict[str, tuple[float, float]] = {}
    tied = None
    ranks = all_ranks.ranks
    if target == "hard":
        outside = np.nonzero(idx.target_column >= idx.num_members)[0]
        if outside.size:
            q = data.queries[int(outside[0])]
            raise ValueError(f"CIRR query pairid {q.pairid}: target_hard is not in its img_set")
        full = all_ranks.map(lambda r: _at(r, idx.target_column[:, None])[:, 0])
        sub = _within_set(ranks, idx, idx.target_column[:, None])[:, 0]
        recall = recall_from_ranks(
            full.ranks, ks, optimistic=full.optimistic, pessimistic=full.pessimistic
        )
        metrics.update(recall)
        bounds.update(recall.bounds)
        tied = recall.tied
        for key, value in recall_from_ranks(sub, subset_ks).items():
            metrics[key.replace("recall@", "recall_subset@")] = value
        full = full.ranks
        per_query = {"ranks": full, "subset_ranks": sub}
    else:
        n = len(data.queries)
        full = _at(ranks, idx.soft_column)
        sub = _within_set(ranks, idx, idx.soft_column)
        for k in ks:
            metrics[f"recall@{k}"] = float(_soft_scores(full, idx.soft_value, k).sum() / n)
        for k in subset_ks:
            metrics[f"recall_subset@{k}"] = float(_soft_scores(sub, idx.soft_value, k).sum() / n)
        per_query = {"soft_ranks": full, "soft_subset_ranks": sub, "soft_values": idx.soft_value}
    if "recall@5" in metrics and "recall_subset@1" in metrics:
        metrics["avg"] = (metrics["recall@5"] + metrics["recall_subset@1"]) / 2
    return protocol_result(
        f"CIRR {data.split}",
        metrics,
        convention=CONVENTIONS[target],
        num_queries=len(data.queries),
        per_query=per_query,
        bounds=bounds,
        tied=tied,
    )


def _check_options(
    func: str, ks: Any, subset_ks: Any, target: str
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    _checks.check_choice(target, tuple(CONVENTIONS), func, "target")
    return _checks.check_ks(ks, func), _checks.check_ks(subset_ks, func, "subset_ks")


def _prepared(
    func: str, make: Callable[[Expect], Ranker], data: CIRRSplit, need_targets: bool
) -> tuple[Ranker, _Indices]:
    idx = _indices(data, func, need_targets=need_targets)
    image = Text("image of {d}", d="data")
    return make(_common.queries_of_data(len(data.queries), len(data.image_names), image)), idx


def _recall(
    func: str,
    make: Callable[[Expect], Ranker],
    data: CIRRSplit,
    ks: Any,
    subset_ks: Any,
    target: str,
) -> Result:
    ks, subset_ks = _check_options(func, ks, subset_ks, target)
    ranker, idx = _prepared(func, make, data, need_targets=True)
    skipped = _common.without_references(ranker, idx.reference)
    ranks = ranker.ranks(idx.candidates, skipped, reduce="none")
    return _score(data, idx, ranks, ks, subset_ks, target)


@accepts(scope="engine")
def cirr_recall(
    query: Any,
    images: Any,
    data: CIRRSplit,
    *,
    ks: Sequence[int] = (1, 5, 10, 50),
    subset_ks: Sequence[int] = (1, 2, 3),
    target: str = "hard",
    options: Options,
) -> Result:
    """CIRR recall@K, recall_subset@K and their average from embeddings.

    ``query`` holds one composed-query embedding per query of ``data`` (file order), ``images``
    one embedding per image of ``data.image_names`` (split-file order). Keys: ``recall@K``,
    ``recall_subset@K`` and ``avg`` (when K = 5 and subset K = 1 are asked). See the module
    docstring for both ``target`` conventions; ``per_query`` holds the 0-indexed ranks. One
    chunked pass of the core ranks the set members and targets among all images; the subset
    ranks are read from those ranks. ``options``: ``metric``, ``chunk_size``, ``device``,
    ``precision`` ([`recallkit.Options`][recallkit.options.Options]).

    Ties: on equal scores the lower reference index (the image earlier in ``data.image_names``)
    ranks first.

    Parameters
    ----------
    query : torch.Tensor or numpy.ndarray, shape (n_queries, d)
        One composed-query embedding per query of ``data``, in file order.
    images : torch.Tensor or numpy.ndarray, shape (n_images, d)
        One embedding per image of ``data.image_names``, in split-file order.
    data : CIRRSplit
        The split, from [`read_cirr`][recallkit.protocols.cirr.read_cirr] (with targets).
    ks : sequence of int, default (1, 5, 10, 50)
        The K of ``recall@K``.
    subset_ks : sequence of int, default (1, 2, 3)
        The K of ``recall_subset@K`` (at most the 5 images of a set less the reference).
    target : {'hard', 'soft'}, default 'hard'
        ``"hard"``: a hit when ``target_hard`` is in the top K; ``"soft"``: the ``target_soft``
        scores of the dataset authors' code (the module's docstring).
    {options}

    Returns
    -------
    Result
        A [`recallkit.Result`][recallkit.result.Result]: ``recall@K`` (in the order of ``ks``),
        ``recall_subset@K`` (of ``subset_ks``) and ``avg`` (when K = 5 and subset K = 1 are asked);
        ``per_query`` holds the 0-indexed ``ranks`` and ``subset_ranks``.

    Examples
    --------
    >>> import numpy as np
    >>> data = CIRRSplit("val", "rc2", ("a", "b", "c", "d"), ("",) * 4, (
    ...     CIRRQuery(1, "a", "x", ("a", "b", "c"), "b", {"b": 1.0}),))
    >>> images = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    >>> query = np.array([[1.0, 0.0]])
    >>> r = cirr_recall(query, images, data, ks=(1, 2), subset_ks=(1,), metric="dot")
    >>> r.per_query["ranks"].tolist(), r.per_query["subset_ranks"].tolist()
    ([2], [1])
    """
    func = "cirr_recall"
    make = _common.embeddings_ranker(query, images, func, options)
    return _recall(func, make, data, ks, subset_ks, target)


def cirr_recall_from_scores(
    scores: Any,
    data: CIRRSplit,
    *,
    ks: Sequence[int] = (1, 5, 10, 50),
    subset_ks: Sequence[int] = (1, 2, 3),
    target: str = "hard",
) -> Result:
    """[`cirr_recall`][cirr_recall] from a ``(queries, images)`` similarity matrix (higher is
    better).

    Ties: on equal scores the lower reference index (the image earlier in ``data.image_names``)
    ranks first.

    Parameters
    ----------
    scores : torch.Tensor or numpy.ndarray, shape (n_queries, n_images)
        The similarity of each query to each image of ``data.image_names`` (higher is better).
    data : CIRRSplit
        The split, from [`read_cirr`][recallkit.protocols.cirr.read_cirr] (with targets).
    ks : sequence of int, default (1, 5, 10, 50)
        The K of ``recall@K``.
    subset_ks : sequence of int, default (1, 2, 3)
        The K of ``recall_subset@K`` (at most the 5 images of a set less the reference).
    target : {'hard', 'soft'}, default 'hard'
        ``"hard"``: a hit when ``target_hard`` is in the top K; ``"soft"``: the ``target_soft``
        scores of the dataset authors' code (the module's docstring).

    Returns
    -------
    Result
        A [`recallkit.Result`][recallkit.result.Result]: ``recall@K`` (in the order of ``ks``),
        ``recall_subset@K`` (of ``subset_ks``) and ``avg`` (when K = 5 and subset K = 1 are asked);
        ``per_query`` holds the 0-indexed ``ranks`` and ``subset_ranks``.

    Examples
    --------
    >>> import numpy as np
    >>> data = CIRRSplit("val", "rc2", ("a", "b", "c"), ("",) * 3, (
    ...     CIRRQuery(1, "a", "x", ("a", "b", "c"), "b", {"b": 1.0, "c": 0.5}),))
    >>> s = np.array([[9.0, 0.5, 0.5]])  # the reference "a" is removed; "b" wins the tie with "c"
    >>> dict(cirr_recall_from_scores(s, data, ks=(1,), subset_ks=(1,)))
    {'recall@1': 1.0, 'recall_subset@1': 1.0}
    """
    func = "cirr_recall_from_scores"
    return _recall(func, _common.scores_ranker(scores, func), data, ks, subset_ks, target)


def _rankings(
    data: CIRRSplit, idx: _Indices, top: np.ndarray, member_ranks: np.ndarray
) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """Name lists: the top-k of the full ranking, and the members in subset-rank order."""
    names = np.asarray(data.image_names, dtype=object)
    members = idx.candidates
    columns = np.where(members >= 0, np.arange(members.shape[1])[None, :], -1)
    position = _within_set(member_ranks, idx, columns)
    ordered = np.full(members.shape, -1, dtype=np.int64)
    rows, cols = np.nonzero(position >= 0)
    ordered[rows, position[rows, cols]] = members[rows, cols]
    size = SUBMISSION_SIZES["recall_subset"]
    recall = {
        q.pairid: names[row[row >= 0]].tolist() for q, row in zip(data.queries, top, strict=True)
    }
    subset = {
        q.pairid: names[row[row >= 0][:size]].tolist()
        for q, row in zip(data.queries, ordered, strict=True)
    }
    return recall, subset


def _ranked(
    func: str, make: Callable[[Expect], Ranker], data: CIRRSplit, k: int
) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    k = _checks.check_positive_int(k, func, "k")
    ranker, idx = _prepared(func, make, data, need_targets=False)
    skipped = _common.without_references(ranker, idx.reference)
    top, _ = ranker.lists(k, skipped)
    member_ranks = ranker.ranks(idx.candidates, skipped, reduce="none").ranks
    return _rankings(data, idx, top.cpu().numpy(), member_ranks)


@accepts(scope="engine")
def cirr_rankings(
    query: Any,
    images: Any,
    data: CIRRSplit,
    *,
    k: int = 50,
    options: Options,
) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """Top-``k`` image names per pairid (reference removed) and the top 3 of each image set.

    These are the two lists the CIRR server scores (``metric`` "recall" and "recall_subset");
    pass each to [`write_cirr_submission`][write_cirr_submission]. Works on any split, ``test1``
    included. The lists come from the core's exact ranked lists and ranks of the members.

    Ties: on equal scores the lower reference index (the image earlier in ``data.image_names``)
    ranks first.

    Parameters
    ----------
    query : torch.Tensor or numpy.ndarray, shape (n_queries, d)
        One composed-query embedding per query of ``data``, in file order.
    images : torch.Tensor or numpy.ndarray, shape (n_images, d)
        One embedding per image of ``data.image_names``, in split-file order.
    data : CIRRSplit
        The split, from [`read_cirr`][recallkit.protocols.cirr.read_cirr] (``test1`` included).
    k : int, default 50
        How many names each query's list holds (the server takes at most 50).
    {options}

    Returns
    -------
    tuple of (dict of int to list of str, dict of int to list of str)
        ``pairid -> `` the top ``k`` image names (reference removed), and ``pairid -> `` the set's
        members in rank order (at most 3): the ``"recall"`` and ``"recall_subset"`` submissions.

    Examples
    --------
    >>> import numpy as np
    >>> data = CIRRSplit("test1", "rc2", ("a", "b", "c", "d"), ("",) * 4, (
    ...     CIRRQuery(5, "a", "x", ("a", "b", "c")),))
    >>> images = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    >>> cirr_rankings(np.array([[1.0, 0.0]]), images, data, k=2, metric="dot")
    ({5: ['d', 'c']}, {5: ['c', 'b']})
    """
    func = "cirr_rankings"
    return _ranked(func, _common.embeddings_ranker(query, images, func, options), data, k)


def cirr_rankings_from_scores(
    scores: Any, data: CIRRSplit, *, k: int = 50
) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """[`cirr_rankings`][cirr_rankings] from a ``(queries, images)`` similarity matrix.

    Ties: on equal scores the lower reference index (the image earlier in ``data.image_names``)
    ranks first.

    Parameters
    ----------
    scores : torch.Tensor or numpy.ndarray, shape (n_queries, n_images)
        The similarity of each query to each image of ``data.image_names`` (higher is better).
    data : CIRRSplit
        The split, from [`read_cirr`][recallkit.protocols.cirr.read_cirr].
    k : int, default 50
        How many names each query's list holds.

    Returns
    -------
    tuple of (dict of int to list of str, dict of int to list of str)
        ``pairid -> `` the top ``k`` image names (reference removed), and ``pairid -> `` the set's
        members in rank order (at most 3): the ``"recall"`` and ``"recall_subset"`` submissions.
    """
    func = "cirr_rankings_from_scores"
    return _ranked(func, _common.scores_ranker(scores, func), data, k)


def write_cirr_submission(
    path: PathLike,
    rankings: Mapping[int, Sequence[str]],
    *,
    metric: str = "recall",
    version: str = "rc2",
) -> Path:
    """Write the CIRR server's JSON atomically: ``{"version", "metric", "<pairid>": [names]}``.

    ``metric="recall"`` takes at most 50 names per query, ``"recall_subset"`` at most 3 (the
    server's limits); a ranking with a repeated name is an error naming the pairid.

    Parameters
    ----------
    {path}
    rankings : mapping of int to sequence of str
        ``pairid -> `` image names, best first (one of the two mappings of
        [`cirr_rankings`][recallkit.protocols.cirr.cirr_rankings]).
    metric : {'recall', 'recall_subset'}, default 'recall'
        Which of the server's two submissions this is.
    version : str, default 'rc2'
        The dataset version the server expects.

    {written}

    Examples
    --------
    >>> import tempfile, pathlib, json
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "recall.json"
    >>> _ = write_cirr_submission(p, {12063: ["test1-233-3-img1", "test1-969-1-img0"]})
    >>> json.loads(p.read_text())
    {'version': 'rc2', 'metric': 'recall', '12063': ['test1-233-3-img1', 'test1-969-1-img0']}
    """
    func = "write_cirr_submission"
    _checks.check_choice(metric, tuple(SUBMISSION_SIZES), func, "metric")
    limit = SUBMISSION_SIZES[metric]
    payload: dict[str, Any] = {"version": version, "metric": metric}
    for pairid, names in rankings.items():
        names = [str(n) for n in names]
        where = f"pairid {pairid}"
        _common.check_ranking(names, limit, func, f"names per query for {metric!r}", where)
        payload[str(int(pairid))] = names
    return _common.write_json(path, payload)


_common.document(write_cirr_submission, path=_common.SUBMISSION_PATH, written=_common.WRITTEN)
