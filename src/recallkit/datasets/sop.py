"""Stanford Online Products (Oh Song et al., CVPR 2016), the split of its two files.

Files read (``root`` is the ``Stanford_Online_Products`` folder or the folder that contains it):
``Ebay_train.txt`` and ``Ebay_test.txt``, each with the header ``image_id class_id super_class_id
path`` and one image per line, paths relative to the folder of the files.

Train is 59,551 images of classes 1–11,318; test is 60,502 images of classes 11,319–22,634. The
super class (1–12: bicycle, cabinet, chair, ...) is kept as ``Split.coarse_labels``, a second
label level for hierarchical evaluation.
"""

from __future__ import annotations

from recallkit.datasets import _files
from recallkit.datasets.base import BENCHMARK_INFO, Benchmark, DatasetError, Split

__all__ = ["load_sop"]

_NAME = "sop"
_HEADER = ["image_id", "class_id", "super_class_id", "path"]
_FILES = {"train": "Ebay_train.txt", "test": "Ebay_test.txt"}


@_files.loader(_NAME)
def load_sop(load: _files.Loading) -> Benchmark:
    """Load Stanford Online Products: train from ``Ebay_train.txt``, test from ``Ebay_test.txt``.

    Parameters
    ----------
    root : str or os.PathLike
        The ``Stanford_Online_Products`` folder, or the folder that contains it.
    {flags}

    Returns
    -------
    Benchmark
        A [`Benchmark`][Benchmark] with splits ``train`` and ``test``: labels the ``class_id`` and
        ``coarse_labels`` the ``super_class_id`` of each line, in file order.

    Raises
    ------
    DatasetFileNotFoundError
        A missing file or (unless ``skip_missing``) image.
    DatasetError
        A wrong header, a malformed line, a duplicate image id or path, a class
        outside its split's range or a super class outside 1–12, or (unless
        ``allow_partial``) a split size that differs.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> header = "image_id class_id super_class_id path\\n"
    >>> _ = (folder / "Ebay_train.txt").write_text(header + "1 1 1 bicycle_final/a_0.JPG\\n")
    >>> _ = (folder / "Ebay_test.txt").write_text(header + "1 11319 1 bicycle_final/b_0.JPG\\n")
    >>> sop = load_sop(folder, allow_partial=True, check_images=False)
    >>> sop.splits["test"].labels.tolist(), sop.splits["test"].coarse_labels.tolist()
    ([11319], [1])
    """
    info = BENCHMARK_INFO[_NAME]
    folder = _files.find_folder(load.root, _FILES["train"], ["Stanford_Online_Products"])
    looked_in = [load.root, load.root / "Stanford_Online_Products"]
    splits: dict[str, Split] = {}
    files = {}
    for split_name, file_name in _FILES.items():
        path = _files.require_file(folder, file_name, load.title, looked_in)
        files[split_name] = path
        lines = _files.read_lines(path)
        if not lines or lines[0].split() != _HEADER:
            got = lines[0].strip() if lines else "an empty file"
            raise DatasetError(
                f"{path}, line 1: expected the header {' '.join(_HEADER)!r}. Got {got!r}."
            )
        rows = _files.Rows(path, lines[1:], 4, " ".join(_HEADER), 2)
        ids = rows.ints(0, "image_id")
        _files.check_unique(ids.tolist(), "image_id", path, rows.line)
        _files.check_relative_paths(rows.columns[3], "path", path, rows.line)
        _files.check_unique(rows.columns[3], "path", path, rows.line)
        classes = rows.ints(1, "class_id")
        low, high = info.label_ranges[split_name]
        _files.check_range(
            classes, low, high, "class_id", path, rows.line, f" in the {split_name} split"
        )
        supers = rows.ints(2, "super_class_id")
        _files.check_range(supers, 1, 12, "super_class_id", path, rows.line)
        splits[split_name] = Split(split_name, folder, tuple(rows.columns[3]), classes, supers)
    return load.finish(splits, files)
