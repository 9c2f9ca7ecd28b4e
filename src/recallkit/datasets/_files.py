"""Private helpers shared by the benchmark parsers: finding files, splitting lines, checking counts.

Every error names the file, and the line where one line is at fault. Numbers are read
strictly: ASCII decimal digits only (``1_0``, Arabic-Indic or full-width digits are not
numbers, though Python's ``int`` would take them), and image paths must be relative paths
that stay inside the dataset folder, without NUL characters.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import posixpath
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from recallkit._inputs.pinned import read_file
from recallkit.datasets.base import (
    BENCHMARK_INFO,
    Benchmark,
    DatasetError,
    DatasetFileNotFoundError,
    Split,
)
from recallkit.exceptions import ParameterError, Text, fail


class MissingFolderError(ParameterError, DatasetFileNotFoundError):
    """A loader's folder argument that is not an existing folder."""


def check_root(root: object, function: str) -> Path:
    """Validate the ``root`` argument of a loader: an existing folder."""
    if not isinstance(root, (str, os.PathLike)):
        raise fail(function, "root", "a folder path (str or os.PathLike)", type(root).__name__)
    path = Path(os.path.abspath(os.fspath(root)))
    if not path.is_dir():
        got = f"{str(path)!r}, which does not exist or is not a folder"
        raise MissingFolderError(function, "root", "an existing folder", got)
    return path


def check_flags(function: str, **flags: object) -> None:
    """Each keyword must be a bool."""
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise fail(function, name, "True or False", repr(value))
    if flags.get("skip_missing") and not flags.get("check_images", True):
        raise fail(
            function,
            "skip_missing",
            Text(
                "False unless {check}: images are only found missing when they are checked",
                check=("check_images", True),
            ),
            "True with check_images=False",
        )


def find_folder(root: Path, marker: str, nested: Sequence[str] = ()) -> Path:
    """The first of ``root`` and ``root/<nested>`` that contains the file ``marker``."""
    candidates = [root, *(root / name for name in nested)]
    for folder in candidates:
        if (folder / marker).is_file():
            return folder
    return root


def require_file(folder: Path, name: str, title: str, looked_in: Sequence[Path] = ()) -> Path:
    """``folder/name``, or a DatasetFileNotFoundError that says where it was looked for."""
    path = folder / name
    if path.is_file():
        return path
    places = ", ".join(repr(str(p)) for p in (looked_in or [folder]))
    raise DatasetFileNotFoundError(
        f"{title} needs the annotation file {name}, which was not found in {places}. "
        "Pass the folder that holds the files as distributed (nothing is downloaded)."
    )


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (a byte-order mark and CR-LF line ends are accepted),
    read through one descriptor and checked unchanged
    ([`recallkit._inputs.pinned.read_file`][recallkit._inputs.pinned.read_file])."""
    try:
        text = read_file(path, f"The annotation file '{path}'").decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DatasetError(
            f"{path} is not a UTF-8 text file (byte {error.start} cannot be decoded); "
            "is it the annotation file as distributed?"
        ) from None
    return text.splitlines()


class Rows:
    """The whitespace-separated fields of the lines of one annotation file.

    ``columns[j][i]`` is field ``j`` of row ``i``; blank lines are skipped, and ``line(i)`` gives
    row ``i``'s 1-based line number in the file for error messages.
    """

    def __init__(self, path: Path, lines: Sequence[str], ncols: int, fields: str, first: int):
        self.path = path
        self._first = first
        self._numbers: list[int] | None = None
        # Fast path: count the fields of each line without keeping the per-line lists (keeping
        # 100,000s of small lists costs more in garbage collection than the split itself), then
        # take the columns from one flat split.
        if all(len(row) == ncols for row in map(str.split, lines)):
            flat = "\n".join(lines).split()
            self.size = len(lines)
            self.columns = [flat[j::ncols] for j in range(ncols)]
            return
        kept: list[list[str]] = []
        numbers: list[int] = []
        for i, line in enumerate(lines):
            row = line.split()
            if not row:
                continue
            if len(row) != ncols:
                raise DatasetError(
                    f"{path}, line {first + i}: expected {ncols} fields ({fields}), "
                    f"found {len(row)}: {line.strip()!r}."
                )
            kept.append(row)
            numbers.append(first + i)
        self._numbers = numbers
        self.size = len(kept)
        self.columns = [[row[j] for row in kept] for j in range(ncols)]

    def line(self, row: int) -> int:
        """1-based line number of row ``row``."""
        if self._numbers is None:
            return self._first + row
        return self._numbers[row]

    def ints(self, column: int, name: str) -> np.ndarray:
        """Column ``column`` as int64; a non-integer field is an error naming its line."""
        return parse_ints(self.columns[column], name, self.path, self.line)


_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INTS = re.compile(r"(?:[+-]?[0-9]+\n)*[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_FLOATS = re.compile(
    r"(?:[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\n)*"
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?",
    re.ASCII,
)


def is_decimal(value: str) -> bool:
    """Whether ``value`` is an optionally signed run of ASCII digits.

    >>> is_decimal("-12"), is_decimal("1_0"), is_decimal("\u0661\u0660"), is_decimal(" 1")
    (True, False, False, False)
    """
    return _INT.fullmatch(value) is not None


def parse_ints(values: Sequence[str], name: str, path: Path, line) -> np.ndarray:
    """Decimal strings (ASCII digits) to int64; the first bad one is an error naming its line."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    if _INTS.fullmatch("\n".join(values)) is not None:
        try:
            return np.array(values, dtype=np.int64).reshape(len(values))
        except (ValueError, OverflowError):
            pass
    parsed: list[int] = []
    for i, value in enumerate(values):
        number = int(value) if is_decimal(value) else None
        if number is None or not -(2**63) <= number < 2**63:
            raise DatasetError(
                f"{path}, line {line(i)}: the {name} must be an integer. Got {value!r}."
            ) from None
        parsed.append(number)
    return np.array(parsed, dtype=np.int64).reshape(len(values))


def first_repeat(values: Sequence) -> tuple[int, int] | None:
    """The rows ``(first, again)`` of the first value seen twice, or None when all differ."""
    if len(set(values)) == len(values):
        return None
    seen: dict = {}
    for i, value in enumerate(values):
        if value in seen:
            return seen[value], i
        seen[value] = i
    return None  # pragma: no cover - a repeat is found above


def check_unique(values: Sequence, name: str, path: Path, line) -> None:
    """Raise when a value appears twice, naming both lines."""
    repeat = first_repeat(values)
    if repeat is not None:
        first, i = repeat
        raise DatasetError(
            f"{path}: duplicate {name} {values[i]!r} on lines {line(first)} and {line(i)}."
        )


def check_range(
    values: np.ndarray, low: int, high: int, name: str, path: Path, line, context: str = ""
) -> None:
    """Raise when a value lies outside [low, high], naming the first such line."""
    bad = np.flatnonzero((values < low) | (values > high))
    if bad.size:
        i = int(bad[0])
        raise DatasetError(
            f"{path}, line {line(i)}: the {name} must be between {low} and {high}{context}. "
            f"Got {int(values[i])}."
        )


def check_counts(
    name: str, splits: dict[str, Split], source: str | Mapping[str, str], allow_partial: bool
) -> bool:
    """Compare each split with its documented size and class count; True when all match.

    A difference is an error naming ``source`` (per split, when a mapping) unless
    ``allow_partial``.
    """
    info = BENCHMARK_INFO[name]
    complete = True
    for split_name, split in splits.items():
        size = len(split)
        classes = int(np.unique(split.labels).size)
        expected_size = info.split_sizes[split_name]
        expected_classes = info.split_classes[split_name]
        if size == expected_size and classes == expected_classes:
            continue
        complete = False
        if not allow_partial:
            where = source if isinstance(source, str) else source[split_name]
            raise DatasetError(
                Text(
                    f"{where} gives the {info.title} {split_name} split {size:,} images of "
                    f"{classes:,} classes; the benchmark has {expected_size:,} images of "
                    f"{expected_classes:,} classes. Pass {{fix}} to load a partial or "
                    "modified copy (its results are not comparable with published numbers).",
                    fix=("allow_partial", True),
                )
            )
    return complete


def find_missing(split: Split) -> np.ndarray:
    """Boolean mask of the rows whose image is not on disk (one os.path.exists per image)."""
    base = os.path.join(str(split.root), "")
    exists = os.path.exists
    return np.fromiter(
        (not exists(base + rel) for rel in split.relative_paths), dtype=np.bool_, count=len(split)
    )


def splits_by_label_range(
    name: str,
    image_root: Path,
    relative: Sequence[str],
    labels: np.ndarray,
    bboxes: np.ndarray | None,
) -> dict[str, Split]:
    """Train and test splits by the benchmark's class ranges (CUB and Cars196 convention)."""
    splits: dict[str, Split] = {}
    for split_name in ("train", "test"):
        low, high = BENCHMARK_INFO[name].label_ranges[split_name]
        rows = np.flatnonzero((labels >= low) & (labels <= high))
        splits[split_name] = Split(
            split_name,
            image_root,
            tuple(relative[i] for i in rows.tolist()),
            labels[rows],
            None,
            None if bboxes is None else bboxes[rows],
        )
    return splits


#: The keywords every loader takes, with their defaults; ``crop`` only where boxes exist.
FLAGS = {"allow_partial": False, "skip_missing": False, "check_images": True, "crop": False}

#: The keywords' entries of every loader's Parameters section, written once: ``{sizes}`` is the
#: benchmark's split sizes, ``{partial}``, ``{skip}`` and ``{check}`` a loader's own remarks
#: (a remark that breaks its line indents the next as the entry's description).
FLAGS_DOC = """allow_partial : bool, default False
    Accept split sizes other than {sizes}{partial}.
skip_missing : bool, default False
    Leave out listed images that are not on disk (with a warning){skip}.
check_images : bool, default True
    Check that each listed image exists{check}."""


def loader(
    name: str, *, crop: bool = False, partial: str = "", skip: str = "", check: str = ""
) -> Callable[[Callable[[Loading], Benchmark]], Callable[..., Benchmark]]:
    """The public ``load_<name>(root, *, allow_partial=False, skip_missing=False,
    check_images=True[, crop=False])`` around ``body``, which reads the files of one checked call
    ([`Loading`][Loading]). Its docstring's ``{flags}`` marker becomes [`FLAGS_DOC`][FLAGS_DOC]
    with the benchmark's split sizes and the remarks ``partial``, ``skip`` and ``check``."""
    function = f"load_{name}"
    taken = {flag: default for flag, default in FLAGS.items() if crop or flag != "crop"}

    def wrap(body: Callable[[Loading], Benchmark]) -> Callable[..., Benchmark]:
        def load(root: str | os.PathLike[str], **flags: bool) -> Benchmark:
            for flag in flags:
                if flag not in taken:  # the words of Python's own error for a keyword-only list
                    raise TypeError(f"{function}() got an unexpected keyword argument {flag!r}")
            folder = check_root(root, function)
            flags = {**taken, **flags}
            check_flags(function, **flags)
            return body(Loading(name, folder, **{k: bool(v) for k, v in flags.items()}))

        sizes = " / ".join(f"{n:,}" for n in BENCHMARK_INFO[name].split_sizes.values())
        text = FLAGS_DOC.format(sizes=sizes, partial=partial, skip=skip, check=check)
        head = body.__doc__[: body.__doc__.index("{flags}")]
        indent = head[head.rfind("\n") + 1 :]
        load.__doc__ = body.__doc__.replace("{flags}", text.replace("\n", "\n" + indent))
        load.__name__ = load.__qualname__ = function
        load.__module__ = body.__module__
        keyword = inspect.Parameter.KEYWORD_ONLY
        load.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter(
                    "root",
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    annotation="str | os.PathLike[str]",
                ),
                *(
                    inspect.Parameter(f, keyword, default=d, annotation="bool")
                    for f, d in taken.items()
                ),
            ],
            return_annotation="Benchmark",
        )
        return load

    return wrap


@dataclasses.dataclass(frozen=True)
class Loading:
    """One call of a loader: the benchmark's name, its root folder and the common flags."""

    name: str
    root: Path
    allow_partial: bool
    skip_missing: bool
    check_images: bool
    crop: bool = False

    @property
    def title(self) -> str:
        return BENCHMARK_INFO[self.name].title

    def finish(
        self,
        splits: dict[str, Split],
        files: Sequence[Path] | Mapping[str, Path],
        source: str | None = None,
    ) -> Benchmark:
        """Check counts and images, then assemble the Benchmark.

        ``files`` are the annotation files read, or one per split (then each split's messages
        name its file); ``source`` names the file(s) in messages instead.
        """
        if isinstance(files, Mapping):
            source = {split: str(path) for split, path in files.items()}
            files = list(files.values())
        info = BENCHMARK_INFO[self.name]
        names = [str(f) for f in files]
        all_files = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 2 else names)
        source = source or all_files
        complete = check_counts(self.name, splits, source, self.allow_partial)
        listed_in = source if isinstance(source, str) else all_files
        skipped: list[Path] = []
        masks = {n: find_missing(split) for n, split in splits.items()} if self.check_images else {}
        total = sum(len(split) for split in splits.values())
        missing = sum(int(mask.sum()) for mask in masks.values())
        if missing:
            examples = [
                str(split.root / split.relative_paths[i])
                for split_name, split in splits.items()
                for i in np.flatnonzero(masks[split_name])[:3].tolist()
            ][:3]
            if not self.skip_missing:
                hint = (
                    " None of them exists: is {root} the folder that holds the images?"
                    if missing == total
                    else ""
                )
                raise DatasetFileNotFoundError(
                    Text(
                        f"{missing:,} of the {total:,} images listed in {listed_in} are not on "
                        f"disk "
                        f"(e.g. {examples[0]}).{hint} Pass {{skip}} to leave them out{{nocheck}}.",
                        skip=("skip_missing", True),
                        root="root",
                        nocheck=Text(", or {off} to skip the check", off=("check_images", False)),
                    )
                )
            for split_name, split in list(splits.items()):
                mask = masks[split_name]
                skipped.extend(split.root / split.relative_paths[i] for i in np.flatnonzero(mask))
                splits[split_name] = split.subset(~mask)
            complete = False
            warnings.warn(
                f"{info.title}: left out {missing:,} of the {total:,} images listed in {listed_in} "
                f"that are not on disk (e.g. {examples[0]}); results are not comparable with "
                "published numbers.",
                UserWarning,
                stacklevel=4,
            )
        return Benchmark(
            name=self.name,
            title=info.title,
            protocol=info.protocol,
            splits=splits,
            root=self.root,
            files=tuple(files),
            complete=complete,
            skipped=tuple(skipped),
        )


def parse_floats(values: Sequence[str], name: str, path: Path, line) -> np.ndarray:
    """Decimal strings (ASCII) to float64; the first bad one is an error naming its line."""
    if not values:
        return np.zeros(0, dtype=np.float64)
    out = None
    if _FLOATS.fullmatch("\n".join(values)) is not None:
        try:
            out = np.array(values, dtype=np.float64).reshape(len(values))
        except ValueError:
            out = None
    if out is not None and np.isfinite(out).all():
        return out
    for i, value in enumerate(values):
        number = float(value) if _FLOAT.fullmatch(value) is not None else float("nan")
        if not np.isfinite(number):
            raise DatasetError(
                f"{path}, line {line(i)}: the {name} must be a finite decimal number. "
                f"Got {value!r}."
            )
    raise DatasetError(f"{path}: the {name} column could not be read.")  # pragma: no cover


def match_ids(
    ids: np.ndarray,
    other_ids: np.ndarray,
    *,
    path: Path,
    line,
    other_path: Path,
    other_line,
) -> np.ndarray:
    """For each of ``ids`` (unique), the row of ``other_ids`` (unique) holding the same id.

    Every id must appear in both files, once.
    """
    order = np.argsort(other_ids, kind="stable")
    sorted_ids = other_ids[order]
    where = np.searchsorted(sorted_ids, ids)
    clipped = np.minimum(where, max(len(sorted_ids) - 1, 0))
    found = sorted_ids[clipped] == ids if len(sorted_ids) else np.zeros(len(ids), dtype=np.bool_)
    if not found.all():
        i = int(np.flatnonzero(~found)[0])
        raise DatasetError(
            f"{other_path} has no line for image id {int(ids[i])} "
            f"(listed in {path.name}, line {line(i)})."
        )
    if len(other_ids) != len(ids):
        extra = np.flatnonzero(~np.isin(other_ids, ids))
        i = int(extra[0])
        raise DatasetError(
            f"{other_path}, line {other_line(i)}: image id {int(other_ids[i])} is not listed in "
            f"{path}."
        )
    return order[where]


def check_relative_paths(values: Sequence[str], name: str, path: Path | str, line) -> None:
    """Each image path must be relative, stay inside the dataset folder and hold no NUL.

    ``line(i)`` names row ``i`` in messages (a line number, or any text ``where(i)`` gives
    when ``path`` is empty). A path such as ``a/../b`` that stays inside is accepted.
    """
    joined = "\n".join(values)
    if (
        "\x00" not in joined
        and ".." not in joined
        and not joined.startswith("/")
        and ("\n/" not in joined and "\\" not in joined)
    ):
        return
    for i, value in enumerate(values):
        problem = None
        if "\x00" in value:
            problem = "holds a NUL character"
        elif value.startswith("/") or value.startswith("\\") or re.match(r"[A-Za-z]:[/\\]", value):
            problem = "is absolute; image paths must be relative to the dataset folder"
        else:
            normal = posixpath.normpath(value.replace("\\", "/"))
            if normal == ".." or normal.startswith("../"):
                problem = "leaves the dataset folder ('..'); image paths must stay inside it"
        if problem is not None:
            where = f"{path}, line {line(i)}" if path else str(line(i))
            raise DatasetError(f"{where}: the {name} {value!r} {problem}.")
