"""iNaturalist 2018 (Van Horn et al., CVPR 2018) with the retrieval split of Smooth-AP.

Files read (``root`` holds them and the ``train_val2018/`` image folder):
``Inaturalist_train_set1.txt`` and ``Inaturalist_test_set1.txt``, published with Smooth-AP
(Brown et al., ECCV 2020): one image path per line,
``train_val2018/<supercategory>/<category_id>/<file>.jpg``.

The class is the category folder (the iNaturalist 2018 category id, 0–8,141, as in the path); the
supercategory is a second level, numbered by its position in
[`INATURALIST_SUPERCATEGORIES`][INATURALIST_SUPERCATEGORIES]. Train is 325,846 images of 5,690
categories, test 136,093 images of 2,452 other categories.
"""

from __future__ import annotations

import re

import numpy as np

from recallkit.datasets import _files
from recallkit.datasets.base import Benchmark, DatasetError, Split

__all__ = ["INATURALIST_SUPERCATEGORIES", "load_inaturalist"]

_NAME = "inaturalist"
_FILES = {"train": "Inaturalist_train_set1.txt", "test": "Inaturalist_test_set1.txt"}
_FOLDER = re.compile(r"train_val2018/([^/\s]+)/([0-9]+)")
_PARENT = re.compile(r"^(.*)/", re.MULTILINE)

INATURALIST_SUPERCATEGORIES: tuple[str, ...] = (
    "Actinopterygii",
    "Amphibia",
    "Animalia",
    "Arachnida",
    "Aves",
    "Bacteria",
    "Chromista",
    "Fungi",
    "Insecta",
    "Mammalia",
    "Mollusca",
    "Plantae",
    "Protozoa",
    "Reptilia",
)
"""The 14 supercategories of iNaturalist 2018, alphabetical; ``coarse_labels`` index this tuple."""
_SUPER_INDEX = {name: i for i, name in enumerate(INATURALIST_SUPERCATEGORIES)}


@_files.loader(
    _NAME,
    check=" (460,000 ``os.path.exists`` calls:\n"
    "    seconds on a local disk, longer on a network file system)",
)
def load_inaturalist(load: _files.Loading) -> Benchmark:
    """Load iNaturalist 2018 with the Smooth-AP split files ``Inaturalist_{train,test}_set1.txt``.

    Parameters
    ----------
    root : str or os.PathLike
        The folder that holds the two split files and ``train_val2018/``.
    {flags}

    Returns
    -------
    Benchmark
        A [`Benchmark`][Benchmark] with splits ``train`` and ``test``: labels the category id of
        each path, ``coarse_labels`` the index of its supercategory in
        [`INATURALIST_SUPERCATEGORIES`][INATURALIST_SUPERCATEGORIES], rows in file order.

    Raises
    ------
    DatasetFileNotFoundError
        A missing file or (unless ``skip_missing``) image.
    DatasetError
        A line that is not ``train_val2018/<supercategory>/<category_id>/<file>``,
        an unknown supercategory, a category outside 0–8,141 or under two supercategories, a
        duplicate path, a category in both splits, or (unless ``allow_partial``) a split size
        that differs.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "Inaturalist_train_set1.txt").write_text(
    ...     "train_val2018/Plantae/7477/a.jpg\\ntrain_val2018/Plantae/7477/b.jpg\\n")
    >>> _ = (folder / "Inaturalist_test_set1.txt").write_text("train_val2018/Aves/3000/c.jpg\\n")
    >>> inat = load_inaturalist(folder, allow_partial=True, check_images=False)
    >>> test = inat.splits["test"]
    >>> test.labels.tolist(), INATURALIST_SUPERCATEGORIES[test.coarse_labels[0]]
    ([3000], 'Aves')
    """
    splits: dict[str, Split] = {}
    files = {}
    first_line: dict[int, tuple[str, int]] = {}
    for split_name, file_name in _FILES.items():
        path = _files.require_file(load.root, file_name, load.title)
        files[split_name] = path
        relative, joined, line = _read_paths(path)
        labels, coarse = _parse_folders(relative, joined, path, line)
        if split_name == "test":
            train_labels = splits["train"].labels
            shared = np.flatnonzero(np.isin(labels, train_labels))
            if shared.size:
                i = int(shared[0])
                where, at = first_line[int(labels[i])]
                raise DatasetError(
                    f"{path}, line {line(i)}: category {int(labels[i])} is also in the train "
                    f"split ({where}, line {at}); the Smooth-AP split has disjoint categories."
                )
        else:
            unique, index = np.unique(labels, return_index=True)
            first_line = {
                int(u): (file_name, line(int(j)))
                for u, j in zip(unique.tolist(), index.tolist(), strict=True)
            }
        splits[split_name] = Split(split_name, load.root, relative, labels, coarse)
    return load.finish(splits, files)


def _read_paths(path):
    """The non-blank lines of a split file, stripped, and a row -> line number function."""
    lines = [line.strip() for line in _files.read_lines(path)]
    if all(lines):
        numbers = None
        relative = lines
    else:
        numbers = [i + 1 for i, line in enumerate(lines) if line]
        relative = [line for line in lines if line]

    def line(row: int) -> int:
        return row + 1 if numbers is None else numbers[row]

    joined = "\n".join(relative)
    if " " in joined or "\t" in joined or "/\n" in joined + "\n":
        for i, rel in enumerate(relative):
            if len(rel.split()) != 1 or rel.endswith("/"):
                raise DatasetError(
                    f"{path}, line {line(i)}: expected one path "
                    f"train_val2018/<supercategory>/<category_id>/<file>. Got {rel!r}."
                )
    _files.check_relative_paths(relative, "path", path, line)
    _files.check_unique(relative, "path", path, line)
    return relative, joined, line


def _parse_folders(relative: list[str], joined: str, path, line) -> tuple[np.ndarray, np.ndarray]:
    """Category id and supercategory index of each path, from its folders."""
    folder_of = _PARENT.findall(joined)  # each line's text up to its last "/"
    if len(folder_of) != len(relative):
        i = next(i for i, rel in enumerate(relative) if "/" not in rel)
        raise DatasetError(
            f"{path}, line {line(i)}: expected train_val2018/<supercategory>/<category_id>/"
            f"<file>. Got {relative[i]!r}."
        )
    folders = {folder: code for code, folder in enumerate(dict.fromkeys(folder_of))}
    codes = np.array(list(map(folders.__getitem__, folder_of)), dtype=np.int64)
    folder_names = list(folders)
    category_of = np.empty(len(folder_names), dtype=np.int64)
    super_of = np.empty(len(folder_names), dtype=np.int64)
    owner: dict[int, str] = {}
    for code, folder in enumerate(folder_names):
        match = _FOLDER.fullmatch(folder)
        problem = None
        if match is None:
            problem = "expected train_val2018/<supercategory>/<category_id>/<file>"
        elif match.group(1) not in _SUPER_INDEX:
            problem = (
                f"unknown supercategory {match.group(1)!r} (expected one of "
                f"{', '.join(INATURALIST_SUPERCATEGORIES)})"
            )
        elif not 0 <= int(match.group(2)) <= 8141:
            problem = f"the category id must be between 0 and 8141, got {int(match.group(2))}"
        elif owner.get(int(match.group(2)), match.group(1)) != match.group(1):
            problem = (
                f"category {int(match.group(2))} is also under supercategory "
                f"{owner[int(match.group(2))]!r}"
            )
        if problem is not None:
            i = int(np.flatnonzero(codes == code)[0])
            raise DatasetError(f"{path}, line {line(i)}: {problem}. Got {relative[i]!r}.")
        category = int(match.group(2))
        owner[category] = match.group(1)
        category_of[code] = category
        super_of[code] = _SUPER_INDEX[match.group(1)]
    return category_of[codes], super_of[codes]
