"""Shared types of the benchmark loaders, and the table of each benchmark's protocol.

The table [`BENCHMARK_INFO`][BENCHMARK_INFO] is the single source of the split sizes, label ranges,
K values, query/gallery composition and citations: the loaders check files against it, the
evaluation reads its protocol, and the README's protocol table is rendered from it
([`recallkit.datasets.protocol_table`][recallkit.datasets.protocol_table]).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

import numpy as np

from recallkit._loading import require
from recallkit.exceptions import RecallkitError, Text

__all__ = [
    "BENCHMARK_INFO",
    "Benchmark",
    "BenchmarkInfo",
    "DatasetError",
    "DatasetFileNotFoundError",
    "Protocol",
    "Split",
]


class DatasetError(RecallkitError):
    """A benchmark's annotation files are malformed or differ from its documented counts.

    The message names the file (and the line, where one line is at fault).

    Parameters
    ----------
    text : str or Text
        The message (as [`RecallkitError`][recallkit.exceptions.RecallkitError]).
    """


class DatasetFileNotFoundError(DatasetError, FileNotFoundError):
    """An annotation file, or an image it lists, is not on disk.

    Parameters
    ----------
    text : str or Text
        The message, naming the file (as [`RecallkitError`][recallkit.exceptions.RecallkitError]).
    """

    def __init__(self, text: str | Text) -> None:  # the signature the docs read, written out
        super().__init__(text)


@dataclasses.dataclass(frozen=True)
class Protocol:
    """How a benchmark is evaluated: which split queries which, and at which K.

    Attributes
    ----------
    ks : tuple of int
        The K of recall@K reported by the papers.
    query_split : str
        The split whose images are the queries.
    gallery_split : str or None
        The split searched; ``None`` when the query split is searched (each query's
        own image excluded).
    query_in_reference : bool
        Whether the queries are part of the searched set (their own row is
        then excluded), i.e. ``gallery_split is None``.
    citation : str
        The paper that set the convention.

    Examples
    --------
    >>> Protocol(ks=(1, 2), query_split="test", gallery_split=None, query_in_reference=True,
    ...          citation="x").ks
    (1, 2)
    """

    ks: tuple[int, ...]
    query_split: str
    gallery_split: str | None
    query_in_reference: bool
    citation: str

    def __post_init__(self) -> None:
        if self.query_in_reference != (self.gallery_split is None):
            raise ValueError(
                "The 'query_in_reference' parameter of Protocol must be True exactly when "
                f"'gallery_split' is None. Got {self.query_in_reference} with "
                f"gallery_split={self.gallery_split!r}."
            )


@dataclasses.dataclass(frozen=True)
class BenchmarkInfo:
    """What the official files of a benchmark hold, and how it is evaluated.

    Attributes
    ----------
    name : str
        Registry name (``"cub"``, ...).
    title : str
        The benchmark's usual name.
    protocol : Protocol
        The evaluation protocol.
    split_sizes : mapping of str to int
        Number of images per split in the official files.
    split_classes : mapping of str to int
        Number of distinct labels per split in the official files.
    label_ranges : mapping of str to (int, int)
        Inclusive (low, high) range of the labels of each split, as in the files.
    dataset_citation : str
        The paper that released the images.
    annotation_files : tuple of str
        The files the loader reads.
    crop : bool, default False
        Whether bounding boxes exist (``crop=True`` is accepted).

    """

    name: str
    title: str
    protocol: Protocol
    split_sizes: Mapping[str, int]
    split_classes: Mapping[str, int]
    label_ranges: Mapping[str, tuple[int, int]]
    dataset_citation: str
    annotation_files: tuple[str, ...]
    crop: bool = False


_OH_SONG_2016 = (
    "Oh Song et al., Deep Metric Learning via Lifted Structured Feature Embedding, CVPR 2016"
)

BENCHMARK_INFO: Mapping[str, BenchmarkInfo] = MappingProxyType(
    {
        "cub": BenchmarkInfo(
            name="cub",
            title="CUB-200-2011",
            protocol=Protocol(
                ks=(1, 2, 4, 8),
                query_split="test",
                gallery_split=None,
                query_in_reference=True,
                citation=_OH_SONG_2016,
            ),
            split_sizes=MappingProxyType({"train": 5864, "test": 5924}),
            split_classes=MappingProxyType({"train": 100, "test": 100}),
            label_ranges=MappingProxyType({"train": (1, 100), "test": (101, 200)}),
            dataset_citation="Wah et al., The Caltech-UCSD Birds-200-2011 Dataset, "
            "Caltech CNS-TR-2011-001, 2011",
            annotation_files=("images.txt", "image_class_labels.txt"),
            crop=True,
        ),
        "cars196": BenchmarkInfo(
            name="cars196",
            title="Cars196",
            protocol=Protocol(
                ks=(1, 2, 4, 8),
                query_split="test",
                gallery_split=None,
                query_in_reference=True,
                citation=_OH_SONG_2016,
            ),
            split_sizes=MappingProxyType({"train": 8054, "test": 8131}),
            split_classes=MappingProxyType({"train": 98, "test": 98}),
            label_ranges=MappingProxyType({"train": (1, 98), "test": (99, 196)}),
            dataset_citation="Krause et al., 3D Object Representations for Fine-Grained "
            "Categorization, 3dRR workshop at ICCV 2013",
            annotation_files=(
                "cars_annos.mat",
                "cars_train_annos.mat + cars_test_annos_withlabels.mat",
            ),
            crop=True,
        ),
        "sop": BenchmarkInfo(
            name="sop",
            title="Stanford Online Products",
            protocol=Protocol(
                ks=(1, 10, 100, 1000),
                query_split="test",
                gallery_split=None,
                query_in_reference=True,
                citation=_OH_SONG_2016,
            ),
            split_sizes=MappingProxyType({"train": 59551, "test": 60502}),
            split_classes=MappingProxyType({"train": 11318, "test": 11316}),
            label_ranges=MappingProxyType({"train": (1, 11318), "test": (11319, 22634)}),
            dataset_citation=_OH_SONG_2016,
            annotation_files=("Ebay_train.txt", "Ebay_test.txt"),
        ),
        "inaturalist": BenchmarkInfo(
            name="inaturalist",
            title="iNaturalist 2018",
            protocol=Protocol(
                ks=(1, 4, 16, 32),
                query_split="test",
                gallery_split=None,
                query_in_reference=True,
                citation="Brown et al., Smooth-AP: Smoothing the Path Towards Large-Scale "
                "Image Retrieval, ECCV 2020",
            ),
            split_sizes=MappingProxyType({"train": 325846, "test": 136093}),
            split_classes=MappingProxyType({"train": 5690, "test": 2452}),
            label_ranges=MappingProxyType({"train": (0, 8141), "test": (0, 8141)}),
            dataset_citation="Van Horn et al., The iNaturalist Species Classification and "
            "Detection Dataset, CVPR 2018",
            annotation_files=("Inaturalist_train_set1.txt", "Inaturalist_test_set1.txt"),
        ),
        "inshop": BenchmarkInfo(
            name="inshop",
            title="In-Shop Clothes",
            protocol=Protocol(
                ks=(1, 10, 20, 30, 40, 50),
                query_split="query",
                gallery_split="gallery",
                query_in_reference=False,
                citation="Liu et al., DeepFashion: Powering Robust Clothes Recognition and "
                "Retrieval with Rich Annotations, CVPR 2016",
            ),
            split_sizes=MappingProxyType({"train": 25882, "query": 14218, "gallery": 12612}),
            split_classes=MappingProxyType({"train": 3997, "query": 3985, "gallery": 3985}),
            label_ranges=MappingProxyType(
                {"train": (1, 99999999), "query": (1, 99999999), "gallery": (1, 99999999)}
            ),
            dataset_citation="Liu et al., DeepFashion: Powering Robust Clothes Recognition and "
            "Retrieval with Rich Annotations, CVPR 2016",
            annotation_files=("list_eval_partition.txt",),
        ),
    }
)
"""Registry name -> [`BenchmarkInfo`][recallkit.datasets.BenchmarkInfo] of each benchmark
(read-only): the split sizes, label ranges, protocol and citations the loaders check the files
against and [`evaluate_benchmark`][recallkit.datasets.evaluate_benchmark] evaluates with."""


def _readonly(array: np.ndarray | None, dtype: type | None) -> np.ndarray | None:
    if array is None:
        return None
    out = np.array(array, dtype=dtype, copy=True)
    out.setflags(write=False)
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class Split:
    """One split of a benchmark: image paths and their labels, row for row.

    The arrays are read-only. ``paths`` (absolute ``pathlib.Path`` objects) is built
    on first use: building 460,000 of them takes longer than parsing the files.

    Attributes
    ----------
    name : str
        ``"train"``, ``"test"``, ``"query"`` or ``"gallery"``.
    root : pathlib.Path
        The folder the relative paths are relative to.
    relative_paths : tuple of str
        Each image's path as written in the annotation file (``/``-separated).
    labels : numpy.ndarray of int64, shape (n,)
        Class label of each image, as in the files (1-indexed where the files are).
    coarse_labels : numpy.ndarray of int64, shape (n,), or None, default None
        Label of the coarser level (super class) where the benchmark has one,
        else ``None``.
    bboxes : numpy.ndarray of float64, shape (n, 4), or None, default None
        Boxes ``(left, upper, right, lower)`` in pixels, as passed to
        ``PIL.Image.crop``, when the benchmark was loaded with ``crop=True``; else ``None``.

    Examples
    --------
    >>> split = Split("test", Path("/data"), ("a/1.jpg", "b/2.jpg"), np.array([3, 4]))
    >>> len(split), split.paths[1].as_posix(), split.labels.dtype.name
    (2, '/data/b/2.jpg', 'int64')
    """

    name: str
    root: Path
    relative_paths: tuple[str, ...]
    labels: np.ndarray
    coarse_labels: np.ndarray | None = None
    bboxes: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.relative_paths)
        object.__setattr__(self, "root", Path(os.path.abspath(self.root)))
        object.__setattr__(self, "relative_paths", tuple(self.relative_paths))
        object.__setattr__(self, "labels", _readonly(self.labels, np.int64))
        object.__setattr__(self, "coarse_labels", _readonly(self.coarse_labels, np.int64))
        object.__setattr__(self, "bboxes", _readonly(self.bboxes, np.float64))
        for field in ("labels", "coarse_labels"):
            value = getattr(self, field)
            if value is not None and value.shape != (n,):
                raise ValueError(
                    f"The '{field}' parameter of Split must have one entry per path ({n}). "
                    f"Got shape {value.shape}."
                )
        if self.bboxes is not None and self.bboxes.shape != (n, 4):
            raise ValueError(
                f"The 'bboxes' parameter of Split must have shape ({n}, 4). "
                f"Got {self.bboxes.shape}."
            )

    def __len__(self) -> int:
        return len(self.relative_paths)

    @functools.cached_property
    def paths(self) -> tuple[Path, ...]:
        """Absolute path of each image, row for row with ``labels``."""
        root = self.root
        return tuple(root / rel for rel in self.relative_paths)

    def subset(self, indices: Sequence[int] | np.ndarray) -> Split:
        """The split restricted to the given rows (integer indices or a boolean mask), in order.

        Parameters
        ----------
        indices : sequence of int or numpy.ndarray, shape (k,) of int or (n,) of bool
            The rows to keep, in the order given, or a boolean mask of the ``n`` rows.

        Returns
        -------
        Split
            A new split of the same name and root: the rows' paths, labels, coarse labels and
            boxes.

        Examples
        --------
        >>> split = Split("test", Path("/data"), ("a.jpg", "b.jpg", "c.jpg"), np.array([1, 1, 2]))
        >>> split.subset([2, 0]).relative_paths
        ('c.jpg', 'a.jpg')
        """
        index = np.asarray(indices)
        if index.dtype == np.bool_:
            index = np.flatnonzero(index)
        index = index.astype(np.int64, copy=False)
        return Split(
            self.name,
            self.root,
            tuple(self.relative_paths[i] for i in index.tolist()),
            self.labels[index],
            None if self.coarse_labels is None else self.coarse_labels[index],
            None if self.bboxes is None else self.bboxes[index],
        )

    def open_image(self, index: int):
        """Open image ``index`` as an RGB ``PIL.Image``, cropped to its box when ``bboxes`` is set.

        A box reaching past the image edge is clipped to the image. Pillow comes with the
        ``datasets`` extra (and the ``images`` one).

        Parameters
        ----------
        index : int
            The row of the image (0-indexed, row for row with ``labels``).

        Returns
        -------
        PIL.Image.Image
            The image in RGB mode, read into memory (the file is closed).
        """
        require("recallkit.datasets.Split.open_image", "PIL", extra="datasets")
        from PIL import Image

        with Image.open(self.root / self.relative_paths[index]) as image:
            image = image.convert("RGB")
        if self.bboxes is not None:
            left, upper, right, lower = self.bboxes[index].tolist()
            width, height = image.size
            box = (max(0, left), max(0, upper), min(width, right), min(height, lower))
            image = image.crop(tuple(round(v) for v in box))
        return image


@dataclasses.dataclass(frozen=True, eq=False)
class Benchmark:
    """A loaded benchmark: its splits and the protocol it is evaluated with.

    Attributes
    ----------
    name : str
        Registry name (``"cub"``, ``"cars196"``, ``"sop"``, ``"inaturalist"``, ``"inshop"``).
    title : str
        The benchmark's usual name.
    protocol : Protocol
        K values and query/gallery composition ([`Protocol`][Protocol]).
    splits : dict of str to Split
        ``{"train": Split, "test": Split}`` (In-Shop: ``train``, ``query``, ``gallery``).
    root : pathlib.Path
        The folder it was loaded from.
    files : tuple of pathlib.Path, default ()
        The annotation files that were read.
    complete : bool, default True
        ``True`` when every split has its documented size and no image was skipped, so
        results are comparable with published numbers.
    skipped : tuple of pathlib.Path, default ()
        Absolute paths of listed images that were not on disk and were left out
        (``skip_missing=True``).

    """

    name: str
    title: str
    protocol: Protocol
    splits: dict[str, Split]
    root: Path
    files: tuple[Path, ...] = ()
    complete: bool = True
    skipped: tuple[Path, ...] = ()

    def evaluation_splits(self) -> tuple[Split, Split, bool]:
        """The (query split, gallery split, query_in_reference) of the protocol.

        When the protocol evaluates a split against itself, the gallery is the same object as the
        query and ``query_in_reference`` is ``True`` (each query's own image is excluded).

        Returns
        -------
        tuple of (Split, Split, bool)
            The split whose images are the queries, the split they search, and whether the
            queries are part of it (each query's own image then excluded).

        Examples
        --------
        >>> p = BENCHMARK_INFO["cub"].protocol
        >>> test = Split("test", Path("/d"), ("a.jpg",), np.array([101]))
        >>> bench = Benchmark("cub", "CUB-200-2011", p, {"test": test}, Path("/d"))
        >>> query, gallery, self_excluded = bench.evaluation_splits()
        >>> query is gallery, self_excluded
        (True, True)
        """
        query = self.splits[self.protocol.query_split]
        if self.protocol.gallery_split is None:
            return query, query, True
        return query, self.splits[self.protocol.gallery_split], self.protocol.query_in_reference

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={len(split)}" for name, split in self.splits.items())
        return f"Benchmark({self.name!r}, {sizes}, root={str(self.root)!r})"
