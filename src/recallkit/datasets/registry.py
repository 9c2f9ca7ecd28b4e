"""The benchmark registry: one loader per name, and [`load_benchmark`][load_benchmark] to call it by
name."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import MappingProxyType

from recallkit.datasets.base import BENCHMARK_INFO, Benchmark
from recallkit.datasets.cars import load_cars196
from recallkit.datasets.cub import load_cub
from recallkit.datasets.inaturalist import load_inaturalist
from recallkit.datasets.inshop import load_inshop
from recallkit.datasets.sop import load_sop
from recallkit.exceptions import fail

__all__ = ["BENCHMARKS", "load_benchmark", "protocol_table"]

BENCHMARKS: Mapping[str, Callable[..., Benchmark]] = MappingProxyType(
    {
        "cub": load_cub,
        "cars196": load_cars196,
        "sop": load_sop,
        "inaturalist": load_inaturalist,
        "inshop": load_inshop,
    }
)
"""Registry name -> loader (read-only). Every loader takes ``(root, *, allow_partial=False,
skip_missing=False, check_images=True)``; those of CUB and Cars196 also take ``crop``."""


def load_benchmark(
    name: str,
    root: str | os.PathLike[str],
    *,
    allow_partial: bool = False,
    skip_missing: bool = False,
    crop: bool = False,
    check_images: bool = True,
) -> Benchmark:
    """Load a benchmark's conventional metric-learning splits from its official files on disk.

    Nothing is downloaded: ``root`` is the folder holding the files as distributed (see each
    loader: [`load_cub`][recallkit.datasets.load_cub],
    [`load_cars196`][recallkit.datasets.load_cars196], [`load_sop`][recallkit.datasets.load_sop],
    [`load_inaturalist`][recallkit.datasets.load_inaturalist],
    [`load_inshop`][recallkit.datasets.load_inshop]). Split sizes are checked against the documented
    counts; a difference is an error naming the file unless ``allow_partial=True``.

    Parameters
    ----------
    name : str
        One of ``"cub"``, ``"cars196"``, ``"sop"``, ``"inaturalist"``, ``"inshop"``.
    root : str or os.PathLike
        The benchmark's folder.
    allow_partial : bool, default False
        Accept split sizes that differ from the benchmark's (a subset, a
        miniature copy); ``Benchmark.complete`` is then False.
    skip_missing : bool, default False
        Leave out listed images that are not on disk, with a warning, instead of
        raising.
    crop : bool, default False
        Fill ``Split.bboxes`` with the bounding boxes (CUB and Cars196 only). The standard
        protocol uses full images.
    check_images : bool, default True
        Check that each listed image exists (one ``os.path.exists`` per image).

    Returns
    -------
    Benchmark
        The [`Benchmark`][Benchmark]: splits, labels and protocol.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "images.txt").write_text("1 001.A/a.jpg\\n2 101.B/b.jpg\\n")
    >>> _ = (folder / "image_class_labels.txt").write_text("1 1\\n2 101\\n")
    >>> bench = load_benchmark("cub", folder, allow_partial=True, check_images=False)
    >>> sorted(bench.splits), bench.protocol.ks, bench.protocol.gallery_split
    (['test', 'train'], (1, 2, 4, 8), None)
    >>> load_benchmark("cars", folder)
    Traceback (most recent call last):
    ...
    recallkit.exceptions.ParameterError: The 'name' parameter of load_benchmark must be one of \
'cub', 'cars196', 'sop', 'inaturalist', 'inshop'. Got 'cars'.
    """
    func = "load_benchmark"
    if not isinstance(name, str) or name not in BENCHMARKS:
        choices = ", ".join(repr(n) for n in BENCHMARKS)
        raise fail(func, "name", f"one of {choices}", repr(name))
    if not isinstance(crop, bool):
        raise fail(func, "crop", "True or False", repr(crop))
    options = dict(
        allow_partial=allow_partial, skip_missing=skip_missing, check_images=check_images
    )
    if crop:
        if not BENCHMARK_INFO[name].crop:
            croppable = ", ".join(repr(n) for n, info in BENCHMARK_INFO.items() if info.crop)
            raise ValueError(
                f"The 'crop' parameter of {func} can be True only for {croppable}: "
                f"{BENCHMARK_INFO[name].title} has no bounding boxes. Got crop=True with "
                f"name={name!r}."
            )
        options["crop"] = True
    return BENCHMARKS[name](root, **options)


def protocol_table() -> str:
    """The protocol of every benchmark as a Markdown table (the README's table).

    Returns
    -------
    str
        A Markdown table, one row per benchmark of
        [`BENCHMARK_INFO`][recallkit.datasets.base.BENCHMARK_INFO]: what is searched, whether each
        query's own image is excluded, the K values and the paper that set the convention.

    Examples
    --------
    >>> print(protocol_table().splitlines()[2])
    | CUB-200-2011 | test against itself | yes | 1, 2, 4, 8 | Oh Song et al., Deep Metric \
Learning via Lifted Structured Feature Embedding, CVPR 2016 |
    """
    lines = [
        "| benchmark | evaluated | self excluded | K values | convention |",
        "| --- | --- | --- | --- | --- |",
    ]
    for info in BENCHMARK_INFO.values():
        protocol = info.protocol
        if protocol.gallery_split is None:
            evaluated = f"{protocol.query_split} against itself"
        else:
            evaluated = f"{protocol.query_split} against {protocol.gallery_split}"
        excluded = "yes" if protocol.query_in_reference else "no (disjoint)"
        ks = ", ".join(str(k) for k in protocol.ks)
        lines.append(f"| {info.title} | {evaluated} | {excluded} | {ks} | {protocol.citation} |")
    return "\n".join(lines)
