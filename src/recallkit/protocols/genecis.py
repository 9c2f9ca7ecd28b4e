"""GeneCIS (Vaze et al. 2023, CVPR): conditional similarity, each query with its own small gallery.

Protocol (``facebookresearch/genecis``, ``eval/eval_functions.py::validate``):

* four tasks: ``focus_attribute`` and ``change_attribute`` (Visual Genome crops),
  ``focus_object`` and ``change_object`` (COCO 2017 val images); each sample of
  ``genecis/<task>.json`` has a ``reference``, a text ``condition``, a ``target`` and a
  ``gallery`` of distractors. The candidates are ``[target, *gallery]`` (the official order;
  the gallery size is read from the data, never assumed);
* ``recall@K`` (K = 1, 2, 3): a hit when the target is among the top K of its candidates;
  ``average_recall@1`` is the unweighted mean of the four tasks' recall@1.
* gallery sizes: the official loaders (``datasets/coco_dataset.py``, ``datasets/vaw_dataset.py``)
  keep every sample of the file, with no filter; their batches stack the galleries, which
  works because the released files have one gallery size per task. recallkit scores every
  sample with its own size, read from the data
  ([`GeneCISTask.gallery_sizes`][GeneCISTask.gallery_sizes]), so files with mixed sizes are scored
  too.

Ties (``ties=``), when a distractor scores exactly as the target does:

* ``"pessimistic"`` (default): the target ranks below every distractor with an equal score
  (``rank = #{distractors with score >= target's score}``); an exact duplicate of the target
  among the distractors costs a rank. The rank comes from
  [`recallkit.ground_truth_ranks`][recallkit.ground_truth.ground_truth_ranks] on the candidates
  reordered as ``[*distractors, target]`` (its lower-index-first rule then places the target after
  every tied distractor).
* ``"official"``: the official script's order. ``validate`` sorts each row with
  ``similarities.sort(dim=-1, descending=True)`` and looks for column 0; a stable descending
  sort keeps equal scores in column order, so the target (column 0) comes first among them:
  an optimistic rule (``rank = #{distractors with score > target's score}``). With
  ``target_index`` the order is still the columns' (distractors left of the target win their
  ties). ``torch.sort`` without ``stable=True`` promises no order for equal values; recallkit
  takes the stable one, so the result is defined.

The published GeneCIS numbers come from the official script: ``ties="official"`` follows its
order and reproduces them. ``"pessimistic"`` never credits a tie to the target, so its recall
is never higher. The two differ only on exact ties, which need identical candidates (features
of different images practically never tie): in the released ``change_object.json`` one sample
lists its target among its own distractors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from recallkit._inputs import checks as _checks
from recallkit.ground_truth import ground_truth_ranks, recall_from_ranks
from recallkit.options import Options, accepts
from recallkit.protocols import _common
from recallkit.protocols._common import PathLike, protocol_result
from recallkit.protocols._names import GENECIS_TASKS, TIES
from recallkit.result import Result

__all__ = [
    "GENECIS_TASKS",
    "GeneCISSample",
    "GeneCISTask",
    "genecis_recall",
    "genecis_recall_from_embeddings",
    "genecis_summary",
    "read_genecis",
    "read_genecis_tasks",
]


@dataclass(frozen=True)
class GeneCISSample:
    """One GeneCIS sample; images are the JSON objects of the file, as hashable keys.

    A key is ``"coco:<val_image_id>"`` for object tasks and ``"vg:<image_id>:<x>,<y>,<w>,<h>"``
    for attribute tasks (Visual Genome image and instance box).

    Attributes
    ----------
    reference : str
        The reference image's key.
    target : str
        The target image's key.
    condition : str
        The text condition.
    gallery : tuple of str
        The distractors' keys, in file order.
    """

    reference: str
    target: str
    condition: str
    gallery: tuple[str, ...]

    @property
    def candidates(self) -> tuple[str, ...]:
        """``(target, *gallery)``: the official candidate order, target at column 0."""
        return (self.target, *self.gallery)


@dataclass(frozen=True, eq=False)
class GeneCISTask:
    """The samples of one task file, and each sample's number of candidates.

    Attributes
    ----------
    task : str
        The task's name.
    samples : tuple of GeneCISSample
        The samples, in file order.
    """

    task: str
    samples: tuple[GeneCISSample, ...]

    @property
    def gallery_sizes(self) -> np.ndarray:
        """Candidates per sample (target included), read from the data."""
        return np.array([1 + len(s.gallery) for s in self.samples], dtype=np.int64)


def _image_key(item: Any, where: str) -> str:
    if isinstance(item, dict):
        if "val_image_id" in item:
            return f"coco:{item['val_image_id']}"
        if "image_id" in item:
            box = item.get("instance_bbox")
            suffix = ":" + ",".join(str(v) for v in box) if box is not None else ""
            return f"vg:{item['image_id']}{suffix}"
    if isinstance(item, str | int) and not isinstance(item, bool):
        return str(item)
    raise ValueError(f"{where}: an image must be an object with 'val_image_id' or 'image_id'")


def read_genecis(path: PathLike, task: str | None = None) -> GeneCISTask:
    """Read one GeneCIS task file (``genecis/<task>.json``): a list of samples.

    Each sample is ``{"reference", "target", "condition", "gallery": [...]}``. ``task`` defaults
    to the file's name. A sample without a target, or with an empty gallery, is an error naming
    the sample.

    Parameters
    ----------
    path : str or os.PathLike
        A task file (``genecis/<task>.json``).
    task : str, optional
        The task's name (default: the file's name).

    Returns
    -------
    GeneCISTask
        The task's samples, in file order.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "change_object.json"
    >>> _ = p.write_text(json.dumps([{"reference": {"val_image_id": 1}, "condition": "dog",
    ...     "target": {"val_image_id": 2}, "gallery": [{"val_image_id": 3}, {"val_image_id": 4}]}]))
    >>> t = read_genecis(p)
    >>> t.task, t.samples[0].candidates, t.gallery_sizes.tolist()
    ('change_object', ('coco:2', 'coco:3', 'coco:4'), [3])
    """
    func = "read_genecis"
    path = Path(path)
    task = path.stem if task is None else task
    _checks.check_choice(task, GENECIS_TASKS, func, "task")
    entries = _common.load_json_list(path, f"GeneCIS {task}", "samples")
    samples = []
    for position, entry in enumerate(entries):
        where = f"{path}: GeneCIS {task} sample {position}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a JSON object")
        if entry.get("target") is None:
            raise ValueError(
                f"{where}: the sample has no target (its gallery would lack its target)"
            )
        _common.require_keys(entry, ("reference", "gallery"), where)
        gallery = entry["gallery"]
        if not isinstance(gallery, list) or not gallery:
            raise ValueError(f"{where}: 'gallery' must be a non-empty list of distractors")
        samples.append(
            GeneCISSample(
                reference=_image_key(entry["reference"], where),
                target=_image_key(entry["target"], where),
                condition=str(entry.get("condition", "")),
                gallery=tuple(_image_key(g, where) for g in gallery),
            )
        )
    return GeneCISTask(task, tuple(samples))


def _check_sizes(gallery_sizes: Any, n: int, width: int, func: str) -> np.ndarray:
    if gallery_sizes is None:
        return np.full(n, width, dtype=np.int64)
    sizes = np.asarray(gallery_sizes)
    if sizes.shape != (n,) or sizes.dtype.kind not in "iu":
        raise _checks.fail(
            func, "gallery_sizes", f"{n} integers (one per sample)", f"shape {sizes.shape}"
        )
    bad = np.nonzero((sizes < 1) | (sizes > width))[0]
    if bad.size:
        raise _checks.fail(
            func,
            "gallery_sizes",
            f"in [1, {width}] (the scores' columns)",
            f"{int(sizes[bad[0]])} for sample {int(bad[0])}",
        )
    return sizes.astype(np.int64)


def _check_target(target_index: Any, sizes: np.ndarray, func: str) -> np.ndarray:
    n = len(sizes)
    if target_index is None:
        return np.zeros(n, dtype=np.int64)
    target = np.asarray(target_index)
    if target.ndim == 0:
        target = np.full(n, int(target))
    if target.shape != (n,) or target.dtype.kind not in "iu":
        raise _checks.fail(
            func, "target_index", f"{n} integers (one per sample)", f"shape {target.shape}"
        )
    bad = np.nonzero((target < 0) | (target >= sizes))[0]
    if bad.size:
        i = int(bad[0])
        raise _checks.fail(
            func,
            "target_index",
            "a column inside each sample's gallery",
            f"sample {i}'s gallery has no target (target_index {int(target[i])}, "
            f"{int(sizes[i])} candidates)",
        )
    return target.astype(np.int64)


def _pessimistic_ranks(scores: np.ndarray, target: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Core ranks with the target moved after every distractor (pessimistic ties)."""
    n, width = scores.shape
    columns = np.arange(width)
    is_target = columns[None, :] == target[:, None]
    distractors = scores[~is_target].reshape(n, width - 1)
    reordered = np.concatenate([distractors, scores[np.arange(n), target][:, None]], axis=1)
    # After removing the target, a sample's padding occupies columns sizes-1 .. width-2.
    return np.asarray(
        ground_truth_ranks(reordered, np.full(n, width - 1), exclude=_padding(sizes - 1, width - 1))
    )


def _official_ranks(scores: np.ndarray, target: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Core ranks in column order (the official script's stable descending sort)."""
    width = scores.shape[1]
    return np.asarray(ground_truth_ranks(scores, target, exclude=_padding(sizes, width)))


def _padding(valid: np.ndarray, width: int) -> np.ndarray | None:
    """Per row, the columns at or beyond ``valid`` (padded -1), or None when there are none."""
    columns = np.arange(width)
    exclude = np.where(columns[None, :] >= valid[:, None], columns[None, :], -1)
    return exclude if (exclude >= 0).any() else None


def genecis_recall(
    scores: Any,
    ks: Sequence[int] = (1, 2, 3),
    *,
    target_index: Any = None,
    gallery_sizes: Any = None,
    ties: str = "pessimistic",
    task: str = "genecis",
) -> Result:
    """GeneCIS recall@K from per-sample scores ``(n, candidates)``, target at column 0.

    The layout is the official one (``[target, *gallery]``; the official ``validate`` saves
    exactly this matrix with ``--pred_save_name``). ``target_index`` gives another target column
    per sample; ``gallery_sizes`` the number of valid columns per sample when galleries differ
    in size (columns beyond are ignored, NaN allowed there). ``ties`` is ``"pessimistic"``
    (default: the target ranks below equal distractors) or ``"official"`` (the official
    script's column order: the target at column 0 wins its ties, which reproduces the
    published numbers); see the module docstring.

    Ties: with ``ties="official"`` an equal score ranks the lower reference index (the lower
    column, the target at column 0) first, as the official script does; the default
    ``"pessimistic"`` ranks the target below every distractor of equal score.

    Parameters
    ----------
    scores : torch.Tensor or numpy.ndarray, shape (n, c)
        Each sample's similarity to its ``c`` candidates, ``[target, *gallery]`` (higher is better).
    ks : sequence of int, default (1, 2, 3)
        The K of ``recall@K``.
    target_index : sequence of int or numpy.ndarray of int, shape (n,), optional
        Each sample's target column (default 0, the official layout).
    gallery_sizes : sequence of int or numpy.ndarray of int, shape (n,), optional
        The number of valid columns of each sample (``GeneCISTask.gallery_sizes``); the columns
        beyond are ignored. Default: every column.
    ties : {'pessimistic', 'official'}, default 'pessimistic'
        The tie convention (above).
    task : str, default 'genecis'
        The result's title (the task's name).

    Returns
    -------
    Result
        A [`recallkit.Result`][recallkit.result.Result]: ``recall@K`` in the order of ``ks``;
        ``per_query["ranks"]`` holds each sample's 0-indexed target rank.

    Examples
    --------
    >>> import numpy as np
    >>> s = np.array([[0.9, 0.1, 0.2], [0.5, 0.5, 0.1], [0.2, 0.7, 0.9]])
    >>> r = genecis_recall(s, ks=(1, 2))
    >>> r.per_query["ranks"].tolist(), dict(r)  # sample 1: the tie with a distractor costs a rank
    ([0, 1, 2], {'recall@1': 0.3333333333333333, 'recall@2': 0.6666666666666666})
    >>> genecis_recall(s, ks=(1, 2), ties="official").per_query["ranks"].tolist()
    [0, 0, 2]
    """
    func = "genecis_recall"
    ks = _checks.check_ks(ks, func)
    _checks.check_choice(ties, tuple(TIES), func, "ties")
    matrix = _scores_with_padding(scores, gallery_sizes, func)
    n, width = matrix.shape
    if width < 1:
        raise _checks.fail(func, "scores", "at least one column (the target)", width)
    sizes = _check_sizes(gallery_sizes, n, width, func)
    target = _check_target(target_index, sizes, func)
    if width == 1:
        optimistic = pessimistic = np.zeros(n, dtype=np.int64)
    else:
        optimistic = _official_ranks(matrix, target, sizes)
        pessimistic = _pessimistic_ranks(matrix, target, sizes)
    ranks = optimistic if ties == "official" else pessimistic
    recall = recall_from_ranks(ranks, ks, optimistic=optimistic, pessimistic=pessimistic)
    return protocol_result(
        f"GeneCIS {task}",
        recall,
        convention=TIES[ties],
        num_queries=n,
        per_query={"ranks": ranks, "gallery_sizes": sizes},
        bounds=recall.bounds,
        tied=recall.tied,
    )


def _scores_with_padding(scores: Any, gallery_sizes: Any, func: str) -> np.ndarray:
    """The score matrix, NaN allowed only past each sample's gallery size (then zeroed)."""
    if gallery_sizes is None:
        return _checks.as_scores(scores, func)
    raw = scores.detach().cpu().float().numpy() if hasattr(scores, "detach") else np.asarray(scores)
    if raw.ndim != 2 or raw.shape[0] == 0:
        raise _checks.fail(func, "scores", "a non-empty 2-D array", f"shape {raw.shape}")
    sizes = _check_sizes(gallery_sizes, raw.shape[0], raw.shape[1], func)
    valid = np.arange(raw.shape[1])[None, :] < sizes[:, None]
    filled = np.where(valid, raw, 0).astype(raw.dtype if raw.dtype == np.float64 else np.float32)
    return _checks.as_scores(filled, func)


@accepts(scope="engine")
def genecis_recall_from_embeddings(
    query: Any,
    candidates: Any,
    ks: Sequence[int] = (1, 2, 3),
    *,
    target_index: Any = None,
    gallery_sizes: Any = None,
    ties: str = "pessimistic",
    task: str = "genecis",
    options: Options,
) -> Result:
    """[`genecis_recall`][genecis_recall] from ``query`` ``(n, d)`` and ``candidates`` ``(n, c,
    d)``.

    ``candidates[i]`` are sample ``i``'s images in the official order ``[target, *gallery]``.
    ``options``: ``metric``, ``chunk_size``, ``device``
    ([`recallkit.Options`][recallkit.options.Options]; each sample has its own candidates, scored in
    float32 or float64 as given).

    Ties: with ``ties="official"`` an equal score ranks the lower reference index (the lower
    column, the target at column 0) first, as the official script does; the default
    ``"pessimistic"`` ranks the target below every distractor of equal score.

    Parameters
    ----------
    query : torch.Tensor or numpy.ndarray, shape (n, d)
        One conditioned-query embedding per sample.
    candidates : torch.Tensor or numpy.ndarray, shape (n, c, d)
        Each sample's candidate embeddings, ``[target, *gallery]``.
    ks : sequence of int, default (1, 2, 3)
        The K of ``recall@K``.
    target_index : sequence of int or numpy.ndarray of int, shape (n,), optional
        Each sample's target column (default 0, the official layout).
    gallery_sizes : sequence of int or numpy.ndarray of int, shape (n,), optional
        The number of valid columns of each sample (``GeneCISTask.gallery_sizes``); the columns
        beyond are ignored. Default: every column.
    ties : {'pessimistic', 'official'}, default 'pessimistic'
        The tie convention (above).
    task : str, default 'genecis'
        The result's title (the task's name).
    {options}

    Returns
    -------
    Result
        A [`recallkit.Result`][recallkit.result.Result]: ``recall@K`` in the order of ``ks``;
        ``per_query["ranks"]`` holds each sample's 0-indexed target rank.

    Examples
    --------
    >>> import numpy as np
    >>> q = np.array([[1.0, 0.0]])
    >>> c = np.array([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])  # a distractor equal to the target
    >>> genecis_recall_from_embeddings(q, c, ks=(1, 2)).per_query["ranks"].tolist()
    [1]
    """
    func = "genecis_recall_from_embeddings"
    _checks.check_choice(ties, tuple(TIES), func, "ties")
    scores = _common.candidate_scores(query, candidates, options=options, func=func)
    return genecis_recall(
        scores,
        ks,
        target_index=target_index,
        gallery_sizes=gallery_sizes,
        ties=ties,
        task=task,
    )


def genecis_summary(results: Mapping[str, Result]) -> Result:
    """Combine per-task results; ``average_recall@1`` is given when all four tasks are present.

    Parameters
    ----------
    results : mapping of str to Result
        Task -> its result ([`genecis_recall`][recallkit.protocols.genecis.genecis_recall]).

    Returns
    -------
    Result
        A [`recallkit.Result`][recallkit.result.Result] whose ``parts`` hold each task's result
        (in the order of [`GENECIS_TASKS`][recallkit.protocols.genecis.GENECIS_TASKS]) and whose
        ``average_recall@1`` is given when all four tasks are present.

    Examples
    --------
    >>> import numpy as np
    >>> s = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> parts = {t: genecis_recall(s, task=t) for t in GENECIS_TASKS}
    >>> genecis_summary(parts)["average_recall@1"]
    0.5
    """
    func = "genecis_summary"
    if not isinstance(results, Mapping) or not results:
        raise _checks.fail(
            func, "results", "a non-empty mapping task -> result", type(results).__name__
        )
    for task, result in results.items():
        _checks.check_choice(task, GENECIS_TASKS, func, "results")
        if "recall@1" not in result:
            raise _checks.fail(func, "results", "results holding recall@1", f"none for {task!r}")
    parts = {t: results[t] for t in GENECIS_TASKS if t in results}
    conventions = {r.convention for r in parts.values()}
    if len(conventions) > 1:
        raise _checks.fail(
            func, "results", "results under one tie rule", f"conventions {sorted(conventions)}"
        )
    metrics = {}
    if len(parts) == len(GENECIS_TASKS):
        metrics["average_recall@1"] = float(np.mean([r["recall@1"] for r in parts.values()]))
    return protocol_result(
        "GeneCIS",
        metrics,
        convention=conventions.pop(),
        num_queries=sum(r.num_queries for r in parts.values()),
        parts=parts,
    )


def read_genecis_tasks(
    root: PathLike, tasks: Sequence[str] = GENECIS_TASKS
) -> dict[str, GeneCISTask]:
    """Read ``<root>/<task>.json`` for each task (``root`` is the ``genecis`` folder).

    Parameters
    ----------
    root : str or os.PathLike
        The ``genecis`` folder.
    tasks : sequence of str, default GENECIS_TASKS
        The tasks to read.

    Returns
    -------
    dict of str to GeneCISTask
        Task -> its samples, in the order of ``tasks``.
    """
    return {task: read_genecis(Path(root) / f"{task}.json", task) for task in tasks}
