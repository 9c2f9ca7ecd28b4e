"""FashionIQ (Wu et al. 2021, CVPR): composed retrieval of dresses, shirts and tops, validation.

Protocol of the CIR literature (CLIP4Cir, Pic2Word, SEARLE; the test split's labels are not
public, so papers report the validation split):

* per category (``dress``, ``shirt``, ``toptee``) the candidates are that category's validation
  images (``image_splits/split.<category>.val.json``), the reference (``candidate``) image
  included, as those codes do (``exclude_reference=True`` removes it);
* each entry of ``captions/cap.<category>.val.json`` is one query, with one correct image
  (``target``); ``recall@10`` and ``recall@50`` per category;
* ``mean_recall@K`` is the unweighted mean over the three categories, for each K of ``ks``;
  ``average = (mean_recall@10 + mean_recall@50) / 2`` exactly, whatever other K are asked for,
  and it is reported only when ``ks`` include 10 and 50 (with other ks there is no ``average``,
  never a mean over different cut-offs). The means are reported only when all three categories
  are given.

Ranks come from [`recallkit.ground_truth_ranks`][recallkit.ground_truth.ground_truth_ranks] /
``..._from_embeddings``; on equal scores the lower image index (split-file order) ranks first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recallkit._inputs import checks as _checks
from recallkit.exceptions import Text
from recallkit.ground_truth import Ranker, Ranks, recall_from_ranks
from recallkit.options import Options, accepts
from recallkit.protocols import _common
from recallkit.protocols._common import Expect, PathLike, protocol_result
from recallkit.protocols._names import FASHIONIQ_CATEGORIES
from recallkit.result import Result

__all__ = [
    "FASHIONIQ_CATEGORIES",
    "FashionIQCategory",
    "FashionIQQuery",
    "fashioniq_recall",
    "fashioniq_recall_from_scores",
    "read_fashioniq",
]

CONVENTION = "per-category gallery, reference kept, unweighted mean over categories"
#: The cut-offs whose means ``average`` combines (the literature's R@10 and R@50).
AVERAGE_KS = (10, 50)


@dataclass(frozen=True)
class FashionIQQuery:
    """One FashionIQ query: the reference (``candidate``) image, its target and two captions.

    Attributes
    ----------
    candidate : str
        The reference image's name.
    target : str
        The target image's name.
    captions : tuple of str
        The two modification captions.
    """

    candidate: str
    target: str
    captions: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class FashionIQCategory:
    """One category's validation queries and gallery (split-file order).

    Attributes
    ----------
    category : str
        ``"dress"``, ``"shirt"`` or ``"toptee"``.
    image_names : tuple of str
        The gallery's image names, in split-file order (the rows of its embeddings).
    queries : tuple of FashionIQQuery
        The queries, in file order.
    """

    category: str
    image_names: tuple[str, ...]
    queries: tuple[FashionIQQuery, ...]


def _check_category(category: Any, func: str, name: str = "categories") -> str:
    if category not in FASHIONIQ_CATEGORIES:
        raise _checks.fail(
            func, name, f"FashionIQ categories among {FASHIONIQ_CATEGORIES}", repr(category)
        )
    return category


def read_fashioniq(
    root: PathLike, categories: Sequence[str] = FASHIONIQ_CATEGORIES, *, split: str = "val"
) -> dict[str, FashionIQCategory]:
    """Read FashionIQ's caption files and image splits for ``categories``.

    The files are ``captions/cap.<category>.<split>.json`` and
    ``image_splits/split.<category>.<split>.json``.

    Captions are ``[{"candidate", "target", "captions": [two strings]}]``, the split file a list of
    image names. A category outside dress/shirt/toptee is an error; so is a query whose candidate
    or target is not an image of its category's split (naming the query).

    Parameters
    ----------
    root : str or os.PathLike
        The FashionIQ folder holding ``captions/`` and ``image_splits/``.
    categories : sequence of str, default FASHIONIQ_CATEGORIES
        The categories to read, among ``"dress"``, ``"shirt"``, ``"toptee"``.
    split : str, default 'val'
        The split in the file names.

    Returns
    -------
    dict of str to FashionIQCategory
        Category -> its queries and gallery, in the order of ``categories``.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "captions").mkdir(); (root / "image_splits").mkdir()
    >>> _ = (root / "image_splits/split.dress.val.json").write_text(json.dumps(["B1", "B2"]))
    >>> _ = (root / "captions/cap.dress.val.json").write_text(json.dumps([
    ...     {"candidate": "B1", "target": "B2", "captions": ["is red", "is longer"]}]))
    >>> read_fashioniq(root, ["dress"])["dress"].queries[0].target
    'B2'
    """
    func = "read_fashioniq"
    if isinstance(categories, str):
        categories = [categories]
    root = Path(root)
    out: dict[str, FashionIQCategory] = {}
    for category in categories:
        _check_category(category, func)
        split_path = root / "image_splits" / f"split.{category}.{split}.json"
        captions_path = root / "captions" / f"cap.{category}.{split}.json"
        what = f"FashionIQ {category}"
        names = _common.load_json_list(split_path, f"{what} image split", "image names")
        names = tuple(str(n) for n in names)
        known = _common.index_of(names, f"{split_path}: image")
        entries = _common.load_json_list(captions_path, f"{what} captions", "queries")
        queries = []
        for position, entry in enumerate(entries):
            where = f"{captions_path}: query {position}"
            _common.require_keys(entry, ("candidate", "target", "captions"), where)
            query = FashionIQQuery(
                str(entry["candidate"]),
                str(entry["target"]),
                tuple(str(c) for c in entry["captions"]),
            )
            for role in ("candidate", "target"):
                if getattr(query, role) not in known:
                    raise ValueError(
                        f"{where} ({category}): {role} {getattr(query, role)!r} "
                        f"is not an image of {split_path}"
                    )
            queries.append(query)
        out[category] = FashionIQCategory(category, names, tuple(queries))
    return out


def _category_indices(part: FashionIQCategory) -> tuple[np.ndarray, np.ndarray]:
    position = {name: i for i, name in enumerate(part.image_names)}
    target = np.array([position[q.target] for q in part.queries], dtype=np.int64)
    reference = np.array([position[q.candidate] for q in part.queries], dtype=np.int64)
    return target, reference


def _check_data(data: Any, func: str) -> Mapping[str, FashionIQCategory]:
    if not isinstance(data, Mapping) or not data:
        raise _checks.fail(
            func,
            "data",
            "a mapping category -> FashionIQCategory (see read_fashioniq)",
            type(data).__name__,
        )
    for category, part in data.items():
        _check_category(category, func, "data")
        if not isinstance(part, FashionIQCategory):
            raise _checks.fail(func, "data", "FashionIQCategory values", type(part).__name__)
    return data


def _check_inputs(inputs: Any, data: Mapping[str, FashionIQCategory], func: str, name: str) -> None:
    if not isinstance(inputs, Mapping):
        raise _checks.fail(func, name, "a mapping category -> array", type(inputs).__name__)
    for category in inputs:
        _check_category(category, func, name)
    if set(inputs) != set(data):
        raise _checks.fail(
            func,
            name,
            Text(f"one entry per category of {{d}} {sorted(data)}", d="data"),
            sorted(inputs),
        )


def _clash(part: FashionIQCategory, target: np.ndarray, reference: np.ndarray) -> None:
    same = np.nonzero(target == reference)[0]
    if same.size:
        q = part.queries[int(same[0])]
        raise ValueError(
            f"FashionIQ {part.category} query {int(same[0])}: target {q.target!r} is the "
            "reference; it cannot be excluded"
        )


def _combine(parts: dict[str, Result], ks: tuple[int, ...], note: str) -> Result:
    metrics: dict[str, float] = {}
    if set(parts) == set(FASHIONIQ_CATEGORIES):
        for k in ks:
            metrics[f"mean_recall@{k}"] = float(np.mean([p[f"recall@{k}"] for p in parts.values()]))
        if all(k in ks for k in AVERAGE_KS):
            metrics["average"] = float(np.mean([metrics[f"mean_recall@{k}"] for k in AVERAGE_KS]))
    return protocol_result(
        "FashionIQ val",
        metrics,
        convention=CONVENTION + note,
        num_queries=sum(p.num_queries for p in parts.values()),
        parts=parts,
    )


def _part(category: str, ranks: Ranks, ks: tuple[int, ...]) -> Result:
    recall = recall_from_ranks(
        ranks.ranks, ks, optimistic=ranks.optimistic, pessimistic=ranks.pessimistic
    )
    return protocol_result(
        category,
        recall,
        convention=CONVENTION,
        num_queries=len(ranks.ranks),
        per_query={"ranks": ranks.ranks},
        bounds=recall.bounds,
        tied=recall.tied,
    )


def _recall(
    func: str,
    make: Callable[[str, Expect], Ranker],
    inputs: Mapping[str, tuple[str, Any]],
    data: Any,
    ks: Any,
    exclude_reference: bool,
) -> Result:
    """Per category, the ranks from ``make(category, expected shapes)``; ``inputs`` maps each
    argument name to the mapping it must hold one entry per category of."""
    ks = _checks.check_ks(ks, func)
    data = _check_data(data, func)
    for name, values in inputs.items():
        _check_inputs(values, data, func, name)
    parts: dict[str, Result] = {}
    for category in FASHIONIQ_CATEGORIES:
        if category not in data:
            continue
        part = data[category]
        target, reference = _category_indices(part)
        shapes = (
            len(part.queries),
            f"{category} query",
            len(part.image_names),
            f"{category} image",
        )
        ranker = make(category, shapes)
        if exclude_reference:
            _clash(part, target, reference)
        skipped = _common.without_references(ranker, reference) if exclude_reference else None
        ranks = ranker.ranks(target[:, None], skipped).map(lambda r: r[:, 0])
        parts[category] = _part(category, ranks, ks)
    return _combine(parts, ks, "; reference removed" if exclude_reference else "")


@accepts(scope="engine")
def fashioniq_recall(
    queries: Mapping[str, Any],
    galleries: Mapping[str, Any],
    data: Mapping[str, FashionIQCategory],
    *,
    ks: Sequence[int] = (10, 50),
    exclude_reference: bool = False,
    options: Options,
) -> Result:
    """FashionIQ recall@K per category, the mean over categories and their average.

    ``queries[c]`` has one row per query of ``data[c]``, ``galleries[c]`` one row per image of
    ``data[c].image_names``. The result's ``parts`` hold each category's recall@K and ranks;
    with all three categories the result has ``mean_recall@K`` for each K and, when ``ks``
    include 10 and 50, ``average = (mean_recall@10 + mean_recall@50) / 2``. ``options``:
    ``metric``, ``chunk_size``, ``device``, ``precision``
    ([`recallkit.Options`][recallkit.options.Options]).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> part = FashionIQCategory("dress", ("B1", "B2", "B3"), (FashionIQQuery("B1", "B3", ("c",)),))
    >>> gallery = np.array([[1.0, 0.0], [0.5, 0.5], [0.6, 0.4]])
    >>> r = fashioniq_recall({"dress": np.array([[1.0, 0.0]])}, {"dress": gallery}, {"dress": part},
    ...                      ks=(1, 2), metric="dot")
    >>> dict(r.parts["dress"]), dict(r)  # reference B1 ranks first; means need all 3 categories
    ({'recall@1': 0.0, 'recall@2': 1.0}, {})
    """
    func = "fashioniq_recall"

    def make(category: str, shapes: Expect) -> Ranker:
        return Ranker.from_embeddings(
            queries[category], galleries[category], func, options, "queries", "galleries", shapes
        )

    inputs = {"queries": queries, "galleries": galleries}
    return _recall(func, make, inputs, data, ks, exclude_reference)


def fashioniq_recall_from_scores(
    scores: Mapping[str, Any],
    data: Mapping[str, FashionIQCategory],
    *,
    ks: Sequence[int] = (10, 50),
    exclude_reference: bool = False,
) -> Result:
    """[`fashioniq_recall`][fashioniq_recall] from one ``(queries, images)`` similarity matrix per
    category.

    {sections}
    """
    func = "fashioniq_recall_from_scores"

    def make(category: str, shapes: Expect) -> Ranker:
        return Ranker.from_scores(scores[category], func, expect=shapes)

    return _recall(func, make, {"scores": scores}, data, ks, exclude_reference)


# The docstring parts fashioniq_recall and its from-scores form share (_common.document).
_TIES = """\
Ties: on equal scores the lower reference index (the image earlier in the category's
``image_names``) ranks first.

Parameters
----------
"""
_EMBEDDINGS = (
    _TIES
    + """\
queries : mapping of str to torch.Tensor or numpy.ndarray, shape (n_queries, d)
    Category -> one composed-query embedding per query of ``data[category]``, in file order.
galleries : mapping of str to torch.Tensor or numpy.ndarray, shape (n_images, d)
    Category -> one embedding per image of ``data[category].image_names``."""
)
_SCORES = (
    _TIES
    + """\
scores : mapping of str to torch.Tensor or numpy.ndarray, shape (n_queries, n_images)
    Category -> the similarity of each query to each image of the category (higher is better)."""
)
_PARAMETERS = """\
data : mapping of str to FashionIQCategory
    Category -> its queries and gallery
    ([`read_fashioniq`][recallkit.protocols.fashioniq.read_fashioniq]).
ks : sequence of int, default (10, 50)
    The K of ``recall@K``.
exclude_reference : bool, default False
    Remove each query's reference (``candidate``) image from its gallery (the literature's
    codes keep it)."""
_RESULT = """\
Returns
-------
Result
    A [`recallkit.Result`][recallkit.result.Result]; its ``parts`` hold each category's
    ``recall@K`` and ranks. With all three categories it has ``mean_recall@K`` for each K and,
    when ``ks`` include 10 and 50, ``average``."""
_EMBEDDINGS_SECTIONS = f"{_EMBEDDINGS}\n{_PARAMETERS}\n{{options}}\n\n{_RESULT}"
_SCORES_SECTIONS = f"{_SCORES}\n{_PARAMETERS}\n\n{_RESULT}"
_common.document(fashioniq_recall, sections=_EMBEDDINGS_SECTIONS)
_common.document(fashioniq_recall_from_scores, sections=_SCORES_SECTIONS)
