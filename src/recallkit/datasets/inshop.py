"""In-Shop Clothes Retrieval (Liu et al., DeepFashion, CVPR 2016): train, query and gallery.

File read: ``list_eval_partition.txt`` (in ``root/Eval`` as distributed, or in ``root``): a count
line, the header ``image_name item_id evaluation_status``, then one space-padded line per image,
``<image_name> <item_id> <train|query|gallery>``. Image names (``img/WOMEN/...``) are resolved
against ``root/Img`` when that folder exists (the DeepFashion layout), else against ``root``.

Train is 25,882 images of 3,997 items; query 14,218 and gallery 12,612 images of the same 3,985
other items. The label is the number of the item id (``id_00000080`` -> 80).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from recallkit.datasets import _files
from recallkit.datasets.base import Benchmark, DatasetError, Split
from recallkit.exceptions import Text

__all__ = ["load_inshop"]

_NAME = "inshop"
_FILE = "list_eval_partition.txt"
_HEADER = ["image_name", "item_id", "evaluation_status"]
_ITEM = re.compile(r"id_([0-9]{8})")
_STATUSES = ("train", "query", "gallery")


@_files.loader(_NAME)
def load_inshop(load: _files.Loading) -> Benchmark:
    """Load In-Shop Clothes Retrieval from ``list_eval_partition.txt``.

    Parameters
    ----------
    root : str or os.PathLike
        The benchmark folder (with ``Eval/`` and ``Img/``), or a folder holding
        ``list_eval_partition.txt`` and the ``img/`` folder.
    {flags}

    Returns
    -------
    Benchmark
        A [`Benchmark`][Benchmark] with splits ``train``, ``query`` and ``gallery`` (file order),
        labels the item number. The protocol searches the gallery with the query images.

    Raises
    ------
    DatasetFileNotFoundError
        A missing file or (unless ``skip_missing``) image.
    DatasetError
        A count line that disagrees with the rows, a wrong header, a malformed line,
        an item id not of the form ``id_<8 digits>``, an unknown status, a duplicate image, a
        train item that is also a query or gallery item, or (unless ``allow_partial``) split
        sizes or query/gallery items that differ from the benchmark's.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "list_eval_partition.txt").write_text(
    ...     "2\\nimage_name item_id evaluation_status\\n"
    ...     "img/MEN/Denim/id_00000080/01_1_front.jpg   id_00000080  query\\n"
    ...     "img/MEN/Denim/id_00000080/01_2_side.jpg    id_00000080  gallery\\n")
    >>> shop = load_inshop(folder, allow_partial=True, check_images=False)
    >>> shop.splits["query"].labels.tolist(), shop.protocol.gallery_split
    ([80], 'gallery')
    """
    folder = _files.find_folder(load.root, _FILE, ["Eval"])
    path = _files.require_file(folder, _FILE, load.title, [load.root / "Eval", load.root])
    rows = _read_rows(path)
    names, items, statuses = rows.columns
    _files.check_relative_paths(names, "image_name", path, rows.line)
    _files.check_unique(names, "image_name", path, rows.line)
    labels = _item_numbers(items, rows)
    masks = _status_masks(statuses, rows)
    _check_items(labels, items, masks, rows, load.allow_partial)
    image_root = load.root / "Img" if (load.root / "Img").is_dir() else load.root
    splits = {}
    for name in _STATUSES:
        index = np.flatnonzero(masks[name])
        relative = tuple(names[i] for i in index.tolist())
        splits[name] = Split(name, image_root, relative, labels[index])
    return load.finish(splits, [path])


def _read_rows(path: Path) -> _files.Rows:
    """The image rows of ``list_eval_partition.txt``, after its count line and header."""
    lines = _files.read_lines(path)
    if len(lines) < 2:
        raise DatasetError(
            f"{path}: expected a count line and the header {' '.join(_HEADER)!r}; the file has "
            f"{len(lines)} line(s)."
        )
    if not _files.is_decimal(lines[0].strip()) or lines[0].strip().startswith(("-", "+")):
        raise DatasetError(
            f"{path}, line 1: expected the number of images (ASCII digits). "
            f"Got {lines[0].strip()!r}."
        )
    declared = int(lines[0].strip())
    if lines[1].split() != _HEADER:
        raise DatasetError(
            f"{path}, line 2: expected the header {' '.join(_HEADER)!r}. Got {lines[1].strip()!r}."
        )
    rows = _files.Rows(path, lines[2:], 3, " ".join(_HEADER), 3)
    if rows.size != declared:
        raise DatasetError(
            f"{path}, line 1: the file declares {declared:,} images but lists {rows.size:,}."
        )
    return rows


def _item_numbers(items: list[str], rows: _files.Rows) -> np.ndarray:
    """The number of each ``id_<8 digits>`` item id (the label)."""
    item_numbers: dict[str, int] = {}
    for i, item in enumerate(items):
        if item not in item_numbers:
            match = _ITEM.fullmatch(item)
            if match is None or int(match.group(1)) == 0:
                raise DatasetError(
                    f"{rows.path}, line {rows.line(i)}: the item_id must be id_ followed by 8 "
                    f"digits (not all zero). Got {item!r}."
                )
            item_numbers[item] = int(match.group(1))
    return np.fromiter((item_numbers[item] for item in items), dtype=np.int64, count=rows.size)


def _status_masks(statuses: list[str], rows: _files.Rows) -> dict[str, np.ndarray]:
    """One row mask per evaluation status (train, query, gallery); another status raises."""
    status = np.array(statuses)
    known = np.isin(status, _STATUSES)
    if not known.all():
        i = int(np.flatnonzero(~known)[0])
        raise DatasetError(
            f"{rows.path}, line {rows.line(i)}: the evaluation_status must be one of "
            f"{', '.join(_STATUSES)}. Got {statuses[i]!r}."
        )
    return {name: status == name for name in _STATUSES}


def _check_items(
    labels: np.ndarray,
    items: list[str],
    masks: dict[str, np.ndarray],
    rows: _files.Rows,
    allow_partial: bool,
) -> None:
    """Train items are not test items; query and gallery share their items (unless partial)."""
    path = rows.path
    test_items = labels[masks["query"] | masks["gallery"]]
    overlap = np.flatnonzero(masks["train"] & np.isin(labels, test_items))
    if overlap.size:
        i = int(overlap[0])
        raise DatasetError(
            f"{path}, line {rows.line(i)}: train item {items[i]} is also a query or gallery "
            "item; the In-Shop split has disjoint items."
        )
    if not allow_partial:
        query_items = set(labels[masks["query"]].tolist())
        gallery_items = set(labels[masks["gallery"]].tolist())
        if query_items != gallery_items:
            raise DatasetError(
                Text(
                    f"{path}: {len(query_items ^ gallery_items):,} item(s) have query images "
                    "but no "
                    "gallery image, or the reverse; the In-Shop split has the same items in both. "
                    "Pass {fix} to load a partial or modified copy.",
                    fix=("allow_partial", True),
                )
            )
