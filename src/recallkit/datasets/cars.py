"""Cars196 (Krause et al., 2013) with the metric-learning split of Oh Song et al. (CVPR 2016).

Two packagings are read (``root`` is the folder that holds them):

- ``cars_annos.mat``: struct array ``annotations`` with ``relative_im_path`` (``car_ims/...``),
  ``bbox_x1``, ``bbox_y1``, ``bbox_x2``, ``bbox_y2``, ``class`` (1–196) and ``test`` (the
  *classification* flag, not used); images under ``car_ims/``. Used when present.
- the devkit: ``cars_train_annos.mat`` and ``cars_test_annos_withlabels.mat`` (in ``root`` or
  ``root/devkit``), struct arrays with ``fname``, the bbox fields and ``class``; images under
  ``cars_train/`` and ``cars_test/``. File names restart in each folder, so an image is keyed by
  folder and name. ``cars_meta.mat`` (class names) is not needed.

Train is classes 1–98 (8,054 images), test is classes 99–196 (8,131 images). The two packagings
list the images in different orders (rows follow the file order), which only matters for exact
ties.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from recallkit._inputs.pinned import FileChanged, read_file
from recallkit._loading import require
from recallkit.datasets import _files
from recallkit.datasets.base import (
    Benchmark,
    DatasetError,
    DatasetFileNotFoundError,
)

__all__ = ["load_cars196"]

_NAME = "cars196"
_BOX_FIELDS = ("bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2")


@_files.loader(
    _NAME, crop=True, partial=" (results are then not\n    comparable with published numbers)"
)
def load_cars196(load: _files.Loading) -> Benchmark:
    """Load Cars196 with train = classes 1–98 and test = classes 99–196, from either packaging.

    Parameters
    ----------
    root : str or os.PathLike
        The folder that holds ``cars_annos.mat`` and ``car_ims/``, or the devkit's
        annotation files (directly or in ``devkit/``) with ``cars_train/`` and ``cars_test/``.
        When both are present, ``cars_annos.mat`` is used.
    {flags}
    crop : bool, default False
        Fill ``Split.bboxes`` from the bbox fields. MATLAB's 1-based inclusive
        ``(x1, y1, x2, y2)`` becomes the ``PIL.Image.crop`` box ``(x1 - 1, y1 - 1, x2, y2)``.
        Off by default: the standard protocol uses the full images.

    Returns
    -------
    Benchmark
        A [`Benchmark`][Benchmark] with splits ``train`` and ``test``, labels the ``class`` field
        (1-indexed).

    Raises
    ------
    DatasetFileNotFoundError
        No packaging found, or (unless ``skip_missing``) a missing
        image.
    DatasetError
        An unreadable ``.mat`` file, a missing field, a duplicate image, a class
        outside 1–196, or (unless ``allow_partial``) a split size that differs.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> load_cars196(tempfile.mkdtemp())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    recallkit.datasets.base.DatasetFileNotFoundError: Cars196 needs cars_annos.mat ...
    """
    relative, classes, boxes, entry, files = _read_annotations(load.root)
    _check_entries(relative, classes, entry)
    bboxes = _crop_boxes(boxes, entry) if load.crop else None
    splits = _files.splits_by_label_range(_NAME, load.root, relative, classes, bboxes)
    return load.finish(splits, files)


def _read_annotations(
    root: Path,
) -> tuple[list[str], np.ndarray, np.ndarray, list[str], list[Path]]:
    """Image paths, classes, MATLAB boxes, error locations and files read, of either packaging.

    ``cars_annos.mat`` (with ``car_ims/``) when present, else the devkit's train and test files.
    """
    annos = root / "cars_annos.mat"
    if annos.is_file():
        fields = _read_struct(annos, "annotations", ("relative_im_path", "class", *_BOX_FIELDS))
        relative = _strings(fields["relative_im_path"], "relative_im_path", annos)
        classes = _ints(fields["class"], "class", annos)
        boxes = np.stack([_ints(fields[f], f, annos) for f in _BOX_FIELDS], axis=1)
        return relative, classes, boxes, _entry_names(annos, len(relative)), [annos]
    train_file, test_file = _devkit_files(root)
    relative, class_parts, box_parts, entry = [], [], [], []
    for path, image_folder in ((train_file, "cars_train"), (test_file, "cars_test")):
        fields = _read_struct(path, "annotations", ("fname", "class", *_BOX_FIELDS))
        names = _strings(fields["fname"], "fname", path)
        relative.extend(f"{image_folder}/{name}" for name in names)
        class_parts.append(_ints(fields["class"], "class", path))
        box_parts.append(
            np.stack([_ints(fields[f], f, path) for f in _BOX_FIELDS], axis=1).reshape(-1, 4)
        )
        entry.extend(_entry_names(path, len(names)))
    classes = np.concatenate(class_parts)
    boxes = np.concatenate(box_parts)
    return relative, classes, boxes, entry, [train_file, test_file]


def _check_entries(relative: list[str], classes: np.ndarray, entry: list[str]) -> None:
    """Raise on a path leaving the dataset folder, a class outside 1–196 or an image listed
    twice, naming the entry."""
    _files.check_relative_paths(relative, "image path", "", entry.__getitem__)
    bad = np.flatnonzero((classes < 1) | (classes > 196))
    if bad.size:
        i = int(bad[0])
        raise DatasetError(
            f"{entry[i]}: the class must be between 1 and 196. Got {int(classes[i])}."
        )
    repeat = _files.first_repeat(relative)
    if repeat is not None:
        first, i = repeat
        raise DatasetError(
            f"{entry[i]}: duplicate image {relative[i]!r}, also listed at {entry[first]}."
        )


def _crop_boxes(boxes: np.ndarray, entry: list[str]) -> np.ndarray:
    """MATLAB's 1-based inclusive ``(x1, y1, x2, y2)`` as ``PIL.Image.crop`` boxes, checked."""
    bboxes = boxes.astype(np.float64)
    bboxes[:, :2] -= 1
    bad = np.flatnonzero(
        (bboxes[:, 0] < 0)
        | (bboxes[:, 1] < 0)
        | (bboxes[:, 2] <= bboxes[:, 0])
        | (bboxes[:, 3] <= bboxes[:, 1])
    )
    if bad.size:
        i = int(bad[0])
        raise DatasetError(
            f"{entry[i]}: a box needs 1 <= bbox_x1 <= bbox_x2 and 1 <= bbox_y1 <= bbox_y2. "
            f"Got {boxes[i].tolist()}."
        )
    return bboxes


def _entry_names(path: Path, n: int) -> list[str]:
    """Error locations of a struct array's entries, 1-based as MATLAB counts them."""
    return [f"{path}, annotations({i})" for i in range(1, n + 1)]


def _devkit_files(root: Path) -> tuple[Path, Path]:
    folders = [root / "devkit", root]
    found: dict[str, Path] = {}
    for name in ("cars_train_annos.mat", "cars_test_annos_withlabels.mat"):
        for folder in folders:
            if (folder / name).is_file():
                found[name] = folder / name
                break
    if len(found) == 2:
        return found["cars_train_annos.mat"], found["cars_test_annos_withlabels.mat"]
    places = ", ".join(repr(str(f)) for f in folders)
    if "cars_train_annos.mat" in found:
        unlabelled = any((f / "cars_test_annos.mat").is_file() for f in folders)
        note = (
            " cars_test_annos.mat has no class labels; the test labels are in "
            "cars_test_annos_withlabels.mat, distributed separately."
            if unlabelled
            else ""
        )
        raise DatasetFileNotFoundError(
            f"Cars196 needs cars_test_annos_withlabels.mat beside cars_train_annos.mat; not "
            f"found in {places}.{note}"
        )
    raise DatasetFileNotFoundError(
        f"Cars196 needs cars_annos.mat (with car_ims/) in {str(root)!r}, or the devkit's "
        f"cars_train_annos.mat and cars_test_annos_withlabels.mat (with cars_train/ and "
        f"cars_test/) in {places}; none was found. Pass the folder that holds the files as "
        "distributed (nothing is downloaded)."
    )


def _read_struct(path: Path, variable: str, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The named fields of the struct array ``variable`` of a .mat file, as 1-D object arrays."""
    require("Reading Cars196's .mat files (recallkit.datasets.load_cars196)", "scipy")
    from scipy.io import loadmat
    from scipy.io.matlab import MatReadError

    try:
        data = read_file(path, f"The annotation file '{path}'")  # checked unchanged
        contents = loadmat(io.BytesIO(data), squeeze_me=True, struct_as_record=True)
    except FileChanged:
        raise
    except (MatReadError, ValueError, TypeError, OSError) as error:
        raise DatasetError(f"{path} is not a readable MATLAB .mat file: {error}") from None
    if variable not in contents:
        raise DatasetError(f"{path} has no variable {variable!r}; is it the file as distributed?")
    struct = np.atleast_1d(contents[variable])
    names = struct.dtype.names or ()
    missing = [field for field in fields if field not in names]
    if missing:
        raise DatasetError(
            f"{path}: the struct {variable!r} lacks the field(s) {', '.join(missing)} "
            f"(it has {', '.join(names) or 'no fields'})."
        )
    return {field: struct[field].reshape(-1) for field in fields}


def _ints(values: np.ndarray, field: str, path: Path) -> np.ndarray:
    listed = values.tolist()
    out = None
    if not any(isinstance(value, str | bytes) for value in listed):  # "1_0" is not a number
        try:
            out = np.array(listed, dtype=np.float64).reshape(len(values))
        except (ValueError, TypeError):
            out = None
    if out is not None and np.isfinite(out).all() and (out == np.round(out)).all():
        return out.astype(np.int64)
    for i, value in enumerate(values.tolist()):
        if not _is_integral(value):
            raise DatasetError(
                f"{path}, annotations({i + 1}): the {field} field must be an integer. "
                f"Got {value!r}."
            )
    raise DatasetError(f"{path}: the {field} field could not be read.")  # pragma: no cover


def _is_integral(value: object) -> bool:
    if np.ndim(value) != 0 or isinstance(value, str | bytes):
        return False
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and number == round(number)


def _strings(values: np.ndarray, field: str, path: Path) -> list[str]:
    out = values.tolist()
    for i, value in enumerate(out):
        if not isinstance(value, str) or not value.strip():
            raise DatasetError(
                f"{path}, annotations({i + 1}): the {field} field must be a file name. "
                f"Got {value!r}."
            )
    return [value.strip() for value in out]
