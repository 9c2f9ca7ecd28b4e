"""Image-text retrieval: COCO 5k and Flickr30k 1k (Karpathy test splits), both directions.

Convention (VSE++, Faghri et al. 2018; ALBEF/BLIP and open_clip's retrieval evaluation):

* text→image: each caption has exactly one correct image; its 0-indexed rank ``r`` is the number
  of images ranked above it. ``recall@K = mean(r < K)`` over captions.
* image→text: an image's rank is the rank of its best-ranked caption (any of its captions in the
  top K is a hit). ``recall@K = mean(r < K)`` over images.
* mean and median rank are reported 1-indexed, as VSE++ does: ``mean_rank = mean(r) + 1`` and
  ``median_rank = floor(median(r)) + 1``.
* ties: an equal score ranks the lower index first (images for text→image, captions for
  image→text): the 0-indexed, lower-index-first rank convention of
  [`recallkit.ground_truth_ranks`][recallkit.ground_truth.ground_truth_ranks].

The ranks come from the core's ``recallkit.ground_truth.Ranker``
(embeddings: chunked, no full similarity matrix; or a given matrix), one code path for both; the
result's ``bounds`` give each recall with every exact tie broken in the query's favour and against
it.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from recallkit._inputs import checks as _checks
from recallkit.exceptions import RecallkitError, Text
from recallkit.ground_truth import Ranker, Ranks, recall_from_ranks
from recallkit.options import Options, accepts
from recallkit.protocols import _common
from recallkit.protocols._common import PathLike, protocol_result
from recallkit.result import Result

__all__ = [
    "KARPATHY_COUNTS",
    "KarpathySplit",
    "image_text_recall",
    "image_text_recall_from_scores",
    "read_karpathy_split",
]

KARPATHY_COUNTS: dict[tuple[str, str], tuple[int, int]] = {
    ("coco", "test"): (5000, 25010),
    ("flickr30k", "test"): (1000, 5000),
    ("flickr8k", "test"): (1000, 5000),
}
"""Expected ``(images, captions)`` of the Karpathy test splits, all captions kept, by
``(dataset, split)``."""
_SPLITS = ("train", "val", "test", "restval")
CONVENTION = (
    "VSE++ ranks: best caption for image→text, 1-indexed mean/median rank, lower index on ties"
)


@dataclass(frozen=True, eq=False)
class KarpathySplit:
    """One split of a Karpathy annotation file, in file order.

    ``caption_image[j]`` is the row in ``image_names`` of caption ``j``'s image; caption and image
    embeddings are expected in this order (images in file order, each image's captions in order).

    Attributes
    ----------
    dataset : str
        The file's ``dataset`` field (``"coco"``, ``"flickr30k"``, ...).
    split : str
        The split read (``"test"``, ...).
    image_names : tuple of str
        Each image's ``filename``, in file order.
    image_ids : tuple of int
        Each image's ``imgid``.
    captions : tuple of str
        Every kept caption (``raw``), image by image.
    caption_image : numpy.ndarray of int64, shape (n_captions,)
        The row in ``image_names`` of each caption's image.
    """

    dataset: str
    split: str
    image_names: tuple[str, ...]
    image_ids: tuple[int, ...]
    captions: tuple[str, ...]
    caption_image: np.ndarray

    @property
    def num_images(self) -> int:
        """The number of images of the split."""
        return len(self.image_names)

    @property
    def num_captions(self) -> int:
        """The number of captions of the split."""
        return len(self.captions)


def read_karpathy_split(
    path: PathLike,
    split: str = "test",
    *,
    captions_per_image: int | None = None,
    check_counts: bool = True,
) -> KarpathySplit:
    """Read ``dataset_coco.json`` / ``dataset_flickr30k.json`` (Karpathy & Fei-Fei 2015).

    The file is ``{"dataset": ..., "images": [{"filename", "split", "imgid", "sentences":
    [{"raw", "tokens", "imgid", "sentid"}], ...}]}``. Images whose ``split`` equals ``split`` are
    kept in file order, with all their sentences (``captions_per_image=5`` keeps the first five,
    as VSE++/SCAN do: 25,000 COCO captions instead of 25,010).

    With ``check_counts`` (default), the test splits of COCO (5,000 images, 25,010 captions),
    Flickr30k and Flickr8k (1,000 and 5,000) are checked; a difference is an error naming the file.
    A sentence whose ``imgid`` is not its image's is an error naming the caption.

    Parameters
    ----------
    path : str or os.PathLike
        The Karpathy annotation file (``dataset_coco.json``, ``dataset_flickr30k.json``, ...).
    split : {'test', 'val', 'train', 'restval'}, default 'test'
        The split to keep.
    captions_per_image : int, optional
        Keep each image's first captions only (``5``: VSE++ and SCAN's 25,000 COCO captions); all
        by default.
    check_counts : bool, default True
        Check the sizes of the known test splits
        ([`KARPATHY_COUNTS`][recallkit.protocols.image_text.KARPATHY_COUNTS]).

    Returns
    -------
    KarpathySplit
        The split's images and captions, in file order.

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "dataset_toy.json"
    >>> _ = p.write_text(json.dumps({"dataset": "toy", "images": [
    ...     {"filename": "a.jpg", "imgid": 0, "split": "test",
    ...      "sentences": [{"raw": "a cat", "imgid": 0, "sentid": 0},
    ...                    {"raw": "a pet", "imgid": 0, "sentid": 1}]},
    ...     {"filename": "b.jpg", "imgid": 1, "split": "train", "sentences": []}]}))
    >>> s = read_karpathy_split(p)
    >>> s.image_names, s.captions, s.caption_image.tolist()
    (('a.jpg',), ('a cat', 'a pet'), [0, 0])
    """
    func = "read_karpathy_split"
    _checks.check_choice(split, _SPLITS, func, "split")
    if captions_per_image is not None and (
        isinstance(captions_per_image, bool)
        or not isinstance(captions_per_image, numbers.Integral)
        or captions_per_image <= 0
    ):
        raise _checks.fail(
            func, "captions_per_image", "a positive integer or None", captions_per_image
        )
    data = _common.load_json(path, "Karpathy split")
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{path}: expected a JSON object with an 'images' list")
    dataset = str(data.get("dataset", os.path.basename(str(path))))
    names, ids, captions, owner = [], [], [], []
    for position, image in enumerate(data["images"]):
        where = f"{path}: images[{position}]"
        _common.require_keys(image, ("filename", "split", "sentences"), where)
        if image["split"] != split:
            continue
        imgid = image.get("imgid", position)
        row = len(names)
        folder = image.get("filepath")
        names.append(f"{folder}/{image['filename']}" if folder else str(image["filename"]))
        ids.append(int(image.get("cocoid", imgid)))
        image_name = f"image {imgid} ({names[-1]})"
        for caption in _captions(image["sentences"], captions_per_image, path, imgid, image_name):
            captions.append(caption)
            owner.append(row)
    if not names:
        raise ValueError(f"{path}: no image has split {split!r}")
    expected = KARPATHY_COUNTS.get((dataset, split))
    if check_counts and expected is not None:
        got = (len(names), len(captions))
        want = (expected[0], expected[1] if captions_per_image is None else None)
        if got[0] != want[0] or (want[1] is not None and got[1] != want[1]):
            raise RecallkitError(
                Text(
                    f"{path}: the Karpathy {split!r} split of {dataset} has {got[0]} images and "
                    f"{got[1]} captions; expected {expected[0]} and {expected[1]} "
                    "(pass {fix} to evaluate partial data)",
                    fix=("check_counts", False),
                )
            )
    caption_image = np.asarray(owner, dtype=np.int64)
    caption_image.setflags(write=False)
    return KarpathySplit(dataset, split, tuple(names), tuple(ids), tuple(captions), caption_image)


def _captions(
    sentences: Any, captions_per_image: int | None, path: Any, imgid: Any, image: str
) -> list[str]:
    """An image's captions (each sentence's ``raw`` text, or its tokens joined), the first
    ``captions_per_image`` of them when given; errors name the file and ``image``."""
    if not isinstance(sentences, list) or not all(isinstance(x, dict) for x in sentences):
        raise ValueError(
            f"{path}: {image}: 'sentences' must be a list of JSON objects, one per caption. "
            f"Got {type(sentences).__name__}."
        )
    if captions_per_image is not None:
        sentences = sentences[:captions_per_image]
    out = []
    for sentence in sentences:
        if "imgid" in sentence and sentence["imgid"] != imgid:
            raise ValueError(
                f"{path}: caption {sentence.get('sentid', '?')} listed under {image} points at "
                f"image {sentence['imgid']}"
            )
        raw = sentence.get("raw")
        out.append(str(raw) if raw is not None else " ".join(sentence.get("tokens", [])))
    return out


def _check_caption_image(caption_image: Any, num_images: int, func: str) -> np.ndarray:
    """``caption_image`` as int64, every caption pointing at an existing image."""
    array = _common.integer_rows(caption_image, func, "caption_image", "one image row per caption")
    bad = np.nonzero((array < 0) | (array >= num_images))[0]
    if bad.size:
        raise _checks.fail(
            func,
            "caption_image",
            f"image rows in [0, {num_images})",
            f"caption {int(bad[0])} pointing at unknown image {int(array[bad[0]])}",
        )
    return array


def _captions_of_images(caption_image: np.ndarray, num_images: int, func: str) -> np.ndarray:
    """``(num_images, max_captions)`` caption indices per image, padded with -1."""
    counts = np.bincount(caption_image, minlength=num_images)
    empty = np.nonzero(counts == 0)[0]
    if empty.size:
        raise _checks.fail(
            func,
            "caption_image",
            "covering every image (image→text needs a caption per image)",
            f"no caption for image {int(empty[0])}",
        )
    order = np.argsort(caption_image, kind="stable")  # groups captions by image, keeps their order
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot = np.arange(len(order)) - np.repeat(starts, counts)
    out = np.full((num_images, int(counts.max())), -1, dtype=np.int64)
    out[caption_image[order], slot] = order
    return out


def _result(t2i: Ranks, i2t: Ranks, ks: tuple[int, ...], name: str) -> Result:
    metrics: dict[str, float] = {}
    bounds: dict[str, tuple[float, float]] = {}
    tied = np.zeros(len(i2t.ranks) + len(t2i.ranks), dtype=bool)
    offset = 0
    for direction, ranks in (("i2t", i2t), ("t2i", t2i)):
        part = recall_from_ranks(
            ranks.ranks,
            ks,
            optimistic=ranks.optimistic,
            pessimistic=ranks.pessimistic,
            name=f"{direction}_recall@{{k}}",
        )
        metrics.update(part)
        bounds.update(part.bounds)
        tied[offset : offset + part.num_queries] = part.tied
        offset += part.num_queries
    recalls = list(metrics.values())
    for direction, ranks in (("i2t", i2t.ranks), ("t2i", t2i.ranks)):
        metrics[f"{direction}_mean_rank"] = float(ranks.mean()) + 1.0
        metrics[f"{direction}_median_rank"] = math.floor(float(np.median(ranks))) + 1.0
    metrics["rmean"] = float(np.mean(recalls))
    return protocol_result(
        f"{name}: {len(i2t.ranks)} images, {len(t2i.ranks)} captions",
        metrics,
        convention=CONVENTION,
        num_queries=len(t2i.ranks) + len(i2t.ranks),
        per_query={"t2i_ranks": t2i.ranks, "i2t_ranks": i2t.ranks},
        plain=[k for k in metrics if k.endswith("_rank")],
        bounds=bounds,
        tied=tied,
    )


def _recall(
    func: str,
    t2i: Ranker,
    i2t: Ranker,
    caption_image: Any,
    ks: Sequence[int],
    name: str,
) -> Result:
    """Both directions' ranks from rankers texts→images and images→texts."""
    ks = _checks.check_ks(ks, func)
    num_images = t2i.num_reference
    caption_image = _check_caption_image(caption_image, num_images, func)
    t2i.check_rows(len(caption_image), Text("caption of {c}", c="caption_image"))
    per_image = _captions_of_images(caption_image, num_images, func)
    t2i_ranks = t2i.ranks(caption_image[:, None]).map(lambda r: r[:, 0])
    i2t_ranks = i2t.ranks(per_image, reduce="min").map(lambda r: r[:, 0])
    return _result(t2i_ranks, i2t_ranks, ks, name)


@accepts(scope="engine")
def image_text_recall(
    images: Any,
    texts: Any,
    caption_image: Sequence[int] | np.ndarray,
    ks: Sequence[int] = (1, 5, 10),
    *,
    name: str = "image-text",
    options: Options,
) -> Result:
    """Image→text and text→image recall@K, mean and median rank, from embeddings.

    ``images`` is ``(n_images, d)``, ``texts`` ``(n_captions, d)`` and ``caption_image[j]`` the
    image row of caption ``j`` (``caption_image`` of a
    [`KarpathySplit`][recallkit.protocols.image_text.KarpathySplit]). Keys:
    ``i2t_recall@K``, ``t2i_recall@K`` (in the order of ``ks``), ``i2t_mean_rank``,
    ``i2t_median_rank``, ``t2i_mean_rank``, ``t2i_median_rank`` (1-indexed) and ``rmean``, the mean
    of the recalls (ALBEF's ``r_mean``). ``per_query`` holds the 0-indexed ranks. The ranking
    follows the module's convention (lower index first on equal scores); no full matrix is built.
    ``options``: ``metric``, ``chunk_size``, ``device``, ``precision``
    ([`recallkit.Options`][recallkit.options.Options]).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> images = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> texts = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> r = image_text_recall(images, texts, [0, 1, 1], ks=(1,), metric="dot")
    >>> r["t2i_recall@1"], r["i2t_recall@1"], r.per_query["t2i_ranks"].tolist()
    (0.6666666666666666, 1.0, [0, 1, 0])
    """
    func = "image_text_recall"
    num_images = _num_rows(images, func, "images")
    captions = _check_caption_image(caption_image, num_images, func)
    _checks.check_rows(
        texts, len(captions), func, "texts", Text("caption of {c}", c="caption_image")
    )
    t2i = Ranker.from_embeddings(texts, images, func, options, "texts", "images")
    i2t = Ranker.from_embeddings(images, texts, func, options, "images", "texts")
    return _recall(func, t2i, i2t, caption_image, ks, name)


def image_text_recall_from_scores(
    scores: Any,
    caption_image: Sequence[int] | np.ndarray,
    ks: Sequence[int] = (1, 5, 10),
    *,
    name: str = "image-text",
) -> Result:
    """The same metrics from an ``(n_images, n_captions)`` similarity matrix (higher is better).

    {sections}

    Examples
    --------
    >>> import numpy as np
    >>> s = np.array([[0.9, 0.5, 0.5], [0.1, 0.5, 0.2]])
    >>> r = image_text_recall_from_scores(s, [0, 1, 1], ks=(1,))
    >>> r.per_query["t2i_ranks"].tolist(), r.per_query["i2t_ranks"].tolist()
    ([0, 1, 1], [0, 0])

    Caption 1 scores 0.5 with both images: image 0, the lower index, ranks first.
    """
    func = "image_text_recall_from_scores"
    matrix = _checks.as_scores(scores, func)
    t2i = Ranker.from_scores(np.ascontiguousarray(matrix.T), func, "scores", transposed=True)
    i2t = Ranker.from_scores(matrix, func, "scores")
    return _recall(func, t2i, i2t, caption_image, ks, name)


def _num_rows(x: Any, func: str, name: str) -> int:
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] == 0:
        raise _checks.fail(func, name, "a non-empty 2-D array", f"shape {shape}")
    return int(shape[0])


# The docstring parts image_text_recall and its from-scores form share (_common.document).
_TIES = """\
Ties: on equal scores the lower reference index ranks first (the lower image row for
text→image, the lower caption row for image→text).

Parameters
----------
"""
_EMBEDDINGS = (
    _TIES
    + """\
images : torch.Tensor or numpy.ndarray, shape (n_images, d)
    The image embeddings, in the split's image order.
texts : torch.Tensor or numpy.ndarray, shape (n_captions, d)
    The caption embeddings, in the split's caption order.
caption_image : sequence of int or numpy.ndarray of int, shape (n_captions,)
    The image row of each caption
    ([`KarpathySplit.caption_image`][recallkit.protocols.image_text.KarpathySplit])."""
)
_SCORES = (
    _TIES
    + """\
scores : torch.Tensor or numpy.ndarray, shape (n_images, n_captions)
    The similarity of each image to each caption (higher is better).
caption_image : sequence of int or numpy.ndarray of int, shape (n_captions,)
    The image row of each caption."""
)
_PARAMETERS = """\
ks : sequence of int, default (1, 5, 10)
    The K values, positive and distinct.
name : str, default "image-text"
    The result's title."""
_RESULT = """\
Returns
-------
Result
    A [`recallkit.Result`][recallkit.result.Result]: ``i2t_recall@K`` and ``t2i_recall@K`` (in
    the order of ``ks``), ``i2t_mean_rank``, ``i2t_median_rank``, ``t2i_mean_rank``,
    ``t2i_median_rank`` (1-indexed) and ``rmean``; ``per_query`` holds the 0-indexed ranks
    (``i2t_ranks``, ``t2i_ranks``)."""
_EMBEDDINGS_SECTIONS = f"{_EMBEDDINGS}\n{_PARAMETERS}\n{{options}}\n\n{_RESULT}"
_SCORES_SECTIONS = f"{_SCORES}\n{_PARAMETERS}\n\n{_RESULT}"
_common.document(image_text_recall, sections=_EMBEDDINGS_SECTIONS)
_common.document(image_text_recall_from_scores, sections=_SCORES_SECTIONS)
