"""CUB-200-2011 (Wah et al., 2011) with the metric-learning split of Oh Song et al. (CVPR 2016).

Files read (``root`` is the ``CUB_200_2011`` folder or the folder that contains it):

- ``images.txt``: ``<image_id> <relative path>``, paths relative to ``images/``;
- ``image_class_labels.txt``: ``<image_id> <class_id>``, classes 1–200;
- ``bounding_boxes.txt`` (only with ``crop=True``): ``<image_id> <x> <y> <width> <height>``.

Train is classes 1–100 (5,864 images), test is classes 101–200 (5,924 images). The file
``train_test_split.txt`` is the *classification* split (both halves hold all 200 classes) and is
not used. Only the images listed in ``images.txt`` are read; the folder is never listed, so
macOS ``._*`` files beside the images are not mistaken for images (a listed ``._*`` path is an
error).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from recallkit.datasets import _files
from recallkit.datasets.base import Benchmark, DatasetError

__all__ = ["load_cub"]

_NAME = "cub"


@_files.loader(
    _NAME,
    crop=True,
    partial=" (results are then not\n"
    "    comparable with published numbers; ``Benchmark.complete`` is False)",
    skip=" instead of\n    raising",
    check=" (one ``os.path.exists`` per image)",
)
def load_cub(load: _files.Loading) -> Benchmark:
    """Load CUB-200-2011 with train = classes 1–100 and test = classes 101–200.

    Parameters
    ----------
    root : str or os.PathLike
        The ``CUB_200_2011`` folder, or the folder that contains it.
    {flags}
    crop : bool, default False
        Read ``bounding_boxes.txt`` into ``Split.bboxes`` (boxes ``(x, y, x + width,
        y + height)``), used by ``Split.open_image``. Off by default: the standard
        metric-learning protocol uses the full images.

    Returns
    -------
    Benchmark
        A [`Benchmark`][Benchmark] with splits ``train`` and ``test``; labels are the class ids of
        ``image_class_labels.txt`` (1-indexed), rows in ``images.txt`` order.

    Raises
    ------
    DatasetFileNotFoundError
        A file or (unless ``skip_missing``) a listed image is missing.
    DatasetError
        A malformed line, a duplicate id, a class outside 1–200, or (unless
        ``allow_partial``) a split size that differs from the benchmark's.

    Examples
    --------
    A one-image-per-class miniature, hence ``allow_partial``:

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "images.txt").write_text("1 001.A/a.jpg\\n2 101.B/b.jpg\\n")
    >>> _ = (folder / "image_class_labels.txt").write_text("1 1\\n2 101\\n")
    >>> cub = load_cub(folder, allow_partial=True, check_images=False)
    >>> cub.splits["test"].labels.tolist(), cub.protocol.ks
    ([101], (1, 2, 4, 8))
    """
    folder = _files.find_folder(load.root, "images.txt", ["CUB_200_2011"])
    looked_in = [load.root, load.root / "CUB_200_2011"]
    images_file = _files.require_file(folder, "images.txt", load.title, looked_in)
    labels_file = _files.require_file(folder, "image_class_labels.txt", load.title, [folder])
    images, ids, relative = _read_images(images_file)
    labels = _read_labels(labels_file, ids, images)
    files = [images_file, labels_file]
    bboxes = None
    if load.crop:
        boxes_file = _files.require_file(folder, "bounding_boxes.txt", load.title, [folder])
        files.append(boxes_file)
        bboxes = _read_boxes(boxes_file, ids, images)
    splits = _files.splits_by_label_range(_NAME, folder / "images", relative, labels, bboxes)
    return load.finish(splits, files, source=str(images_file))


def _read_images(images_file: Path) -> tuple[_files.Rows, np.ndarray, list[str]]:
    """``images.txt``: its rows, the image ids and the paths (unique, no ``._*`` file)."""
    images, ids = _by_image_id(images_file, 2, "<image_id> <path>")
    relative = images.columns[1]
    _files.check_relative_paths(relative, "image path", images_file, images.line)
    _files.check_unique(relative, "image path", images_file, images.line)
    for i, rel in enumerate(relative):
        if os.path.basename(rel).startswith("._"):
            raise DatasetError(
                f"{images_file}, line {images.line(i)}: {rel!r} is a macOS resource-fork file "
                "('._*'), not an image; use images.txt as distributed."
            )
    return images, ids, relative


def _read_labels(labels_file: Path, ids: np.ndarray, images: _files.Rows) -> np.ndarray:
    """The class id (1–200) of each image of ``images.txt``, from ``image_class_labels.txt``."""
    rows, label_ids = _by_image_id(labels_file, 2, "<image_id> <class_id>")
    classes = rows.ints(1, "class id")
    _files.check_range(classes, 1, 200, "class id", labels_file, rows.line)
    return classes[_rows_of_images(images, ids, rows, label_ids)]


def _read_boxes(boxes_file: Path, ids: np.ndarray, images: _files.Rows) -> np.ndarray:
    """The ``(x0, y0, x1, y1)`` box of each image of ``images.txt``, from ``bounding_boxes.txt``."""
    boxes, box_ids = _by_image_id(boxes_file, 5, "<image_id> <x> <y> <width> <height>")
    values = np.stack(
        [
            _files.parse_floats(boxes.columns[j], name, boxes_file, boxes.line)
            for j, name in enumerate(("x", "y", "width", "height"), start=1)
        ],
        axis=1,
    )
    bad = np.flatnonzero((values[:, :2] < 0).any(axis=1) | (values[:, 2:] <= 0).any(axis=1))
    if bad.size:
        i = int(bad[0])
        raise DatasetError(
            f"{boxes_file}, line {boxes.line(i)}: a box needs x, y >= 0 and a positive width "
            f"and height. Got {values[i].tolist()}."
        )
    xywh = values[_rows_of_images(images, ids, boxes, box_ids)]
    return np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)


def _by_image_id(path: Path, ncols: int, fields: str) -> tuple[_files.Rows, np.ndarray]:
    """The rows of a file of ``<image_id> ...`` lines, and their image ids (each once)."""
    rows = _files.Rows(path, _files.read_lines(path), ncols, fields, 1)
    ids = rows.ints(0, "image id")
    _files.check_unique(ids.tolist(), "image id", path, rows.line)
    return rows, ids


def _rows_of_images(
    images: _files.Rows, ids: np.ndarray, rows: _files.Rows, row_ids: np.ndarray
) -> np.ndarray:
    """For each image of ``images.txt``, its row of ``rows`` (each id in both files, once)."""
    return _files.match_ids(
        ids, row_ids, path=images.path, line=images.line, other_path=rows.path, other_line=rows.line
    )
