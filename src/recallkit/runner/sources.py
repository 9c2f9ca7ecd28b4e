"""Where the images and labels come from: image folders, CSV/TSV manifests, benchmarks.

Every source yields an [`ImageSet`][ImageSet]: image paths, one label each, and one identity each.
The identity (the resolved path, or a manifest's ``id`` column) is what self-match exclusion
compares: a query never retrieves a gallery item with its own identity. Each item also has a
*name* that travels: its path relative to the folder, manifest or benchmark it came from (or
its manifest id), the same on every machine and for every copy of the dataset; run files
record names, never this machine's absolute paths.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recallkit._inputs.pinned import read_file
from recallkit.exceptions import RunnerError

#: File name endings read as images (lower case), as torchvision's ``ImageFolder`` does.
IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
)
_MAX_LISTED = 5


@dataclass(frozen=True)
class ImageSet:
    """Images with one label and one identity each, in a fixed order.

    ``items`` are paths (or, from the Python API, in-memory images); ``labels`` are the labels as
    the source spells them (folder names, manifest text, benchmark integers); ``ids`` are the
    identities compared for self-match exclusion (``None`` when the items have none);
    ``names`` the items' names in run files (relative paths or manifest ids; ``None``: their
    positions) and ``root`` the folder their paths are relative to.

    >>> s = ImageSet((Path("a.png"), Path("b.png")), ("cat", "dog"), ("a", "b"), "example")
    >>> len(s), s.labels[1]
    (2, 'dog')
    """

    items: tuple[Any, ...]
    labels: tuple[Any, ...]
    ids: tuple[str, ...] | None
    source: str
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    names: tuple[str, ...] | None = None
    root: Path | None = None

    def __len__(self) -> int:
        return len(self.items)

    @property
    def paths(self) -> tuple[Path, ...]:
        """The items as paths (raises if an item is an in-memory image)."""
        out = []
        for item in self.items:
            if not isinstance(item, str | os.PathLike):
                raise TypeError(f"{self.source} holds in-memory images, not paths")
            out.append(Path(item))
        return tuple(out)

    def has_paths(self) -> bool:
        """Whether every item is a path."""
        return all(isinstance(item, str | os.PathLike) for item in self.items)

    def subset(self, keep: Sequence[bool]) -> ImageSet:
        """The items where ``keep`` is true, in order."""
        idx = [i for i, k in enumerate(keep) if k]
        return ImageSet(
            tuple(self.items[i] for i in idx),
            tuple(self.labels[i] for i in idx),
            None if self.ids is None else tuple(self.ids[i] for i in idx),
            self.source,
            self.meta,
            None if self.names is None else tuple(self.names[i] for i in idx),
            self.root,
        )

    def name_of(self, path: str | os.PathLike[str]) -> str:
        """A path as run files record it: relative to [`root`][root] (POSIX separators), or its
        file name when there is no root."""
        return relative_name(path, self.root)

    @property
    def portable_source(self) -> str:
        """[`source`][source] with the folder or file named without the machine's path (an
        absolute path in it cut to its name)."""
        if "portable_source" in self.meta:
            return self.meta["portable_source"]
        words = self.source.split(" ")
        return " ".join(Path(w).name if os.path.isabs(w) and len(w) > 1 else w for w in words)


def relative_name(path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> str:
    """``path`` relative to ``root`` with POSIX separators (``..`` where it lies outside), or
    its file name when ``root`` is ``None``.

    >>> relative_name("/data/cub/images/001/a.jpg", "/data/cub"), relative_name("/x/b.png", None)
    ('images/001/a.jpg', 'b.png')
    """
    if root is None:
        return Path(path).name
    return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(root))).as_posix()


def path_identity(path: str | os.PathLike[str]) -> str:
    """The identity of an image file: its absolute, symlink-resolved path.

    >>> path_identity("/tmp/../tmp/x.png") == path_identity("/tmp/x.png")
    True
    """
    return os.path.realpath(os.fspath(path))


def _walk_class(class_dir: Path) -> list[tuple[Path, tuple[Any, ...], bool]]:
    """The image files under ``class_dir``: ``(path, (st_dev, st_ino), reached through a link)``.

    Symbolic links to folders are followed, but each real folder is entered once (its
    ``(st_dev, st_ino)`` is remembered), so a link loop such as ``ln -s . cat/self`` ends.
    """
    found: list[tuple[Path, tuple[Any, ...], bool]] = []
    visited: set[tuple[int, int]] = set()
    linked: list[str] = []  # folders reached through a symlink, as path prefixes

    def through_link(path: str) -> bool:
        return any(path == p or path.startswith(p + os.sep) for p in linked)

    for dirpath, dirnames, filenames in os.walk(class_dir, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        if (st.st_dev, st.st_ino) in visited:
            dirnames[:] = []
            continue
        visited.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        subfolders = [os.path.join(dirpath, d) for d in dirnames]
        linked += [p for p in subfolders if os.path.islink(p)]
        via_link = through_link(dirpath)
        for name in filenames:
            if name.startswith(".") or Path(name).suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            path = os.path.join(dirpath, name)
            try:
                fst = os.stat(path)
            except OSError:  # a dangling link: listed, and reported as unreadable when read
                found.append((Path(path), ("unreadable", path), via_link))
                continue
            found.append((Path(path), (fst.st_dev, fst.st_ino), via_link or os.path.islink(path)))
    return found


def from_folder(root: str | os.PathLike[str], *, what: str = "image folder") -> ImageSet:
    """Read a class-per-subfolder image folder: ``root/<label>/**/<image>``.

    Labels are the subfolder names; images are the files with an image extension
    ([`IMAGE_EXTENSIONS`][IMAGE_EXTENSIONS]), found recursively, sorted by class then path; hidden
    files and files directly in ``root`` are ignored. Identities are the resolved paths.

    Symbolic links are followed, and each real file is counted once: a link loop (``ln -s .
    cat/self``) or a second link to the same file adds nothing. A file reached both directly
    under one class and through a link from another belongs to the class that holds it
    directly; otherwise to the first class (in sorted order) and the first path that reaches
    it.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> for name in ("cat/1.png", "cat/2.png", "dog/1.jpg", "notes.txt"):
    ...     (root / name).parent.mkdir(exist_ok=True); (root / name).touch()
    >>> (root / "cat" / "self").symlink_to(".")
    >>> s = from_folder(root)
    >>> [p.name for p in s.paths], s.labels
    (['1.png', '2.png', '1.jpg'], ('cat', 'cat', 'dog'))
    """
    root = Path(root)
    if not root.is_dir():
        raise RunnerError(f"The {what} '{root}' is not a directory.")
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    per_class = [sorted(_walk_class(c), key=lambda entry: entry[0]) for c in classes]
    # Each real file once: the first direct occurrence wins, else the first one.
    owner: dict[tuple[Any, ...], tuple[int, int]] = {}
    for c, entries in enumerate(per_class):
        for j, (_, key, via_link) in enumerate(entries):
            if key not in owner:
                owner[key] = (c, j)
            elif not via_link and per_class[owner[key][0]][owner[key][1]][2]:
                owner[key] = (c, j)
    paths: list[Path] = []
    labels: list[str] = []
    for c, entries in enumerate(per_class):
        for j, (path, key, _) in enumerate(entries):
            if owner[key] == (c, j):
                paths.append(path)
                labels.append(classes[c].name)
    if not paths:
        raise RunnerError(
            f"The {what} '{root}' holds no images in class subfolders "
            f"(expected {root}/<label>/<image>, with extensions "
            f"{', '.join(sorted(IMAGE_EXTENSIONS))})."
        )
    ids = tuple(path_identity(p) for p in paths)
    meta = {"kind": "folder", "portable_source": f"{what} {root.resolve().name}"}
    names = tuple(relative_name(p, root) for p in paths)
    return ImageSet(tuple(paths), tuple(labels), ids, f"{what} {root}", meta, names, root)


def _delimiter(path: Path, first_line: str) -> str:
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        return "\t"
    if suffix == ".csv":
        return ","
    return "\t" if "\t" in first_line else ","


def _listing(problems: list[str]) -> str:
    shown = "; ".join(problems[:_MAX_LISTED])
    more = len(problems) - _MAX_LISTED
    return shown + (f"; and {more} more" if more > 0 else "")


_SEPARATORS = {",": "','", "\t": "tabs", ";": "';'", "|": "'|'"}


def _other_separator(path: Path, lines: list[str], rows: list[list[str] | None], used: str) -> str:
    """The hint for a manifest written with another separator, or ``""``.

    It applies when no row splits on ``used`` while another separator is in every line.
    """
    if any(row is not None and len(row) > 1 for row in rows):
        return ""
    found = [s for s in _SEPARATORS if s != used and all(s in line for line in lines)]
    if not found:
        return ""
    separator = found[0]
    name = _SEPARATORS[separator]
    suffix = path.suffix.lower()
    if suffix == ".tsv":
        reads = "recallkit reads .tsv files as tab-separated: separate the columns by tabs"
        if separator == ",":
            reads += ", or name the file .csv"
    elif suffix == ".csv":
        reads = "recallkit reads comma-separated files: separate the columns by commas"
        if separator == "\t":
            reads += ", or name the file .tsv"
    else:
        reads = (
            "recallkit reads comma-separated files (tab-separated ones when the first line has "
            "a tab, or the name ends in .tsv): separate the columns by commas"
        )
    return f"the file seems to use {name} as separator; {reads}"


def from_manifest(path: str | os.PathLike[str], *, what: str = "manifest") -> ImageSet:
    """Read a CSV or TSV manifest with columns ``path,label[,id]``, one image per row.

    The delimiter is a tab for ``.tsv``, a comma for ``.csv``, else a tab if the first line has
    one. A manifest written with another separator (``;`` in a ``.csv``, commas in a ``.tsv``)
    is refused with a message that names the separator it seems to use. A first row
    ``path,label[,id]`` is a header (then the columns may come in any order and
    other columns are ignored). Blank lines and lines starting with ``#`` are skipped. Each
    line is one row: a quoted field cannot span lines, and an unterminated quote is an error
    naming the line. Relative paths are relative to the manifest's folder; a path that is not
    a regular file (a folder, a FIFO) is an error. The ``id`` column, when present, is the
    identity used for self-match exclusion (rows with equal ids never retrieve each other);
    otherwise the resolved path is. Every problem of the manifest is reported in one error,
    by kind (lines that cannot be read, rows without a path or label, files that do not
    exist), each kind with its first few rows and their line numbers, and a count.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "a.png").touch(); (root / "b.png").touch()
    >>> _ = (root / "m.csv").write_text("path,label\\na.png,cat\\nb.png,dog\\n")
    >>> s = from_manifest(root / "m.csv")
    >>> [p.name for p in s.paths], s.labels
    (['a.png', 'b.png'], ('cat', 'dog'))
    """
    path = Path(path)
    numbered, rows, unreadable = _manifest_lines(path, what)
    columns: dict[str, int] = {"path": 0, "label": 1, "id": 2}
    width: int | None = None
    first = [cell.strip().lower() for cell in rows[0] or []]
    if "path" in first and "label" in first:
        columns = {name: first.index(name) for name in ("path", "label", "id") if name in first}
        numbered, rows = numbered[1:], rows[1:]
        if not rows:
            raise RunnerError(f"The {what} '{path}' has a header but no rows.")
    else:
        width = 3
    base = path.parent
    found = _Listed()
    for (line_no, _), row in zip(numbered, rows, strict=True):
        if row is not None:
            found.add(line_no, [cell.strip() for cell in row], columns, width, base)
    problems = []
    if unreadable:
        problems.append(
            f"has {len(unreadable)} unreadable line(s) (an unterminated quote? a quoted field "
            f"cannot span lines): {_listing(unreadable)}"
        )
    if found.malformed:
        problems.append(f"has {len(found.malformed)} bad row(s): {_listing(found.malformed)}")
    if found.missing:
        problems.append(
            f"lists {len(found.missing)} file(s) that do not exist (relative paths are read from "
            f"{base}): {_listing(found.missing)}"
        )
    if problems:
        raise RunnerError(f"The {what} '{path}' " + ". It also ".join(problems) + ".")
    meta = {"kind": "manifest", "portable_source": f"{what} {path.name}"}
    return ImageSet(
        tuple(found.items),
        tuple(found.labels),
        tuple(found.ids),
        f"{what} {path}",
        meta,
        tuple(found.names),
        base,
    )


def _manifest_lines(
    path: Path, what: str
) -> tuple[list[tuple[int, str]], list[list[str] | None], list[str]]:
    """The manifest's rows: ``(line number, text)`` of each line that is not blank or a
    comment, its cells (``None`` where the line cannot be read), and what could not be read."""
    if not path.is_file():
        raise RunnerError(f"The {what} '{path}' does not exist or is not a file.")
    kind = array_file_kind(path)
    if kind is not None:
        raise RunnerError(
            f"The {what} '{path}' is {kind}, not a folder or a CSV/TSV manifest of images: "
            "saved embeddings go in --embeddings, with their labels in --labels."
        )
    try:  # through one descriptor, checked unchanged (and recorded for the command line)
        text = _text(read_file(path, f"The {what} '{path}'"))
    except (OSError, UnicodeDecodeError) as error:
        raise RunnerError(f"The {what} '{path}' cannot be read: {error}.") from None
    numbered = [
        (i + 1, line)
        for i, line in enumerate(text.splitlines())
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not numbered:
        raise RunnerError(f"The {what} '{path}' has no rows (expected path,label[,id]).")
    delimiter = _delimiter(path, numbered[0][1])
    kind = "TSV" if delimiter == "\t" else "CSV"
    unreadable: list[str] = []
    rows: list[list[str] | None] = []
    for line_no, line in numbered:
        if "\x00" in line:
            unreadable.append(f"line {line_no} holds a NUL character")
            rows.append(None)
            continue
        try:
            rows.append(next(csv.reader([line], delimiter=delimiter, strict=True)))
        except csv.Error as error:
            unreadable.append(f"line {line_no} cannot be read as {kind}: {error}")
            rows.append(None)
    hint = _other_separator(path, [line for _, line in numbered], rows, delimiter)
    if hint:
        raise RunnerError(f"The {what} '{path}': {hint}.")
    return numbered, rows, unreadable


@dataclass
class _Listed:
    """The images a manifest lists, row by row, and the rows it refuses."""

    items: list[Path] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def add(
        self, line_no: int, cells: list[str], columns: dict[str, int], width: int | None, base: Path
    ) -> None:
        """Adds the row of ``line_no`` (its stripped ``cells``), or notes why it is refused."""
        if width is not None and len(cells) > width:
            self.malformed.append(
                f"line {line_no} has {len(cells)} fields, expected path,label[,id]"
            )
            return

        def cell(name: str) -> str:
            index = columns.get(name)
            return cells[index] if index is not None and index < len(cells) else ""

        file, label, ident = cell("path"), cell("label"), cell("id")
        if not file:
            self.malformed.append(f"line {line_no} has no path")
            return
        if not label:
            self.malformed.append(f"line {line_no} ({file}) has no label")
            return
        full = Path(file) if Path(file).is_absolute() else base / file
        if not full.is_file():
            if full.exists():
                self.malformed.append(f"line {line_no} ({file}) is not a regular file")
            else:
                self.missing.append(f"line {line_no}: {file}")
            return
        self.items.append(full)
        self.labels.append(label)
        self.ids.append(ident or path_identity(full))
        self.names.append(ident or relative_name(full, base))


_MAGIC = (
    (b"\x93NUMPY", "a NumPy array file"),
    (b"PK\x03\x04", "a zip archive (a .npz or torch file)"),
    (b"\x80", "a pickle (a torch file)"),
)


def array_file_kind(path: Path) -> str | None:
    """What binary array file ``path`` is (``"a NumPy array file"``, ...), by its first bytes
    or its suffix; ``None`` for anything else (text)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
    except OSError:
        return None
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if path.suffix.lower() == ".safetensors":
        return "a safetensors file"
    return None


def labels_file(path: str | os.PathLike[str], *, option: str) -> tuple[Any, ...]:
    """One label per row, from a 1-D ``.npy`` array (integers, strings, or floats with integral
    values) or a UTF-8 text file with one label per line (kept as text); a file of another kind
    is refused in a message that says what ``option`` expects.

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "labels.txt"
    >>> _ = p.write_text("cat\\ndog\\ncat\\n")
    >>> labels_file(p, option="--labels")
    ('cat', 'dog', 'cat')
    """
    import numpy as np

    path = Path(path)
    expects = f"{option} takes one label per row: a 1-D .npy array or a text file, one per line"
    if not path.is_file():
        raise RunnerError(f"{expects}; '{path}' does not exist or is not a file.")
    kind = array_file_kind(path)
    name = f"The labels file '{path}'"
    if kind == "a NumPy array file":
        try:
            data = read_file(path, name)
        except OSError as error:
            raise RunnerError(f"{expects}; '{path}' cannot be read ({error}).") from None
        try:
            array = np.load(io.BytesIO(data), allow_pickle=False)
        except (OSError, ValueError) as error:
            raise RunnerError(f"{expects}; '{path}' cannot be read ({error}).") from None
        if array.ndim != 1:
            raise RunnerError(
                f"{expects}; '{path}' holds a {array.ndim}-D {array.dtype} array of shape "
                f"{array.shape}"
                + (" (embeddings? give them to --embeddings)" if array.ndim == 2 else "")
                + "."
            )
        if array.dtype.kind not in "iubUSf":
            raise RunnerError(f"{expects}; '{path}' holds {array.dtype} values.")
        return tuple(array.tolist())
    if kind is not None:
        raise RunnerError(f"{expects}; '{path}' is {kind}.")
    try:
        text = _text(read_file(path, name))
    except (OSError, UnicodeDecodeError) as error:
        raise RunnerError(f"{expects}; '{path}' cannot be read as text ({error}).") from None
    lines = text.splitlines()
    if not lines:
        raise RunnerError(f"{expects}; '{path}' is empty.")
    return tuple(line.strip() for line in lines)


def _text(data: bytes) -> str:
    """UTF-8 text (a byte-order mark dropped), line ends as ``Path.read_text`` gives them."""
    return data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")


def from_arrays(labels: Sequence[Any], source: str) -> ImageSet:
    """The rows of saved embeddings as a set without images (its items are row numbers)."""
    rows = tuple(range(len(labels)))
    return ImageSet(rows, tuple(labels), None, source, {"arrays": True})


def from_path(path: str | os.PathLike[str], *, what: str) -> ImageSet:
    """An image folder if ``path`` is a directory, else a CSV/TSV manifest.

    >>> try:
    ...     from_path("/nonexistent/q.csv", what="query manifest")
    ... except RunnerError as error:
    ...     print(error)  # doctest: +ELLIPSIS
    The query images '/nonexistent/q.csv' do not exist: there is no folder or manifest at ...
    """
    path = Path(path)
    if not path.exists():
        images = what.replace("manifest", "images")
        raise RunnerError(
            f"The {images} '{path}' do not exist: there is no folder or manifest at that path "
            "(give a folder of class subfolders or a CSV/TSV manifest)."
        )
    if path.is_dir():
        return from_folder(path, what=what.replace("manifest", "folder"))
    return from_manifest(path, what=what)


@dataclass(frozen=True)
class BenchmarkSets:
    """A benchmark's evaluation protocol as image sets: the splits, the protocol's K values,
    the benchmark's title and whether the copy loaded is complete."""

    query: ImageSet
    gallery: ImageSet
    ks: tuple[int, ...]
    title: str = ""
    complete: bool = True


def from_benchmark(
    name: str,
    root: str | os.PathLike[str],
    *,
    allow_partial: bool = False,
    skip_missing: bool = False,
) -> BenchmarkSets:
    """Load a benchmark's query and gallery splits with
    [`recallkit.datasets.load_benchmark`][recallkit.datasets.load_benchmark] (``allow_partial`` and
    ``skip_missing`` are its options).

    Identities are the resolved paths, so when the gallery is the query split itself (SOP,
    CUB, Cars: leave-one-out) each query's own image is excluded.
    """
    try:
        from recallkit.datasets import load_benchmark
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise RunnerError(f"Benchmarks are not available in this installation: {error}.") from None
    options = {"allow_partial": True} if allow_partial else {}
    if skip_missing:
        options["skip_missing"] = True
    try:
        benchmark = load_benchmark(name, root, **options)
        query_split, gallery_split, _ = benchmark.evaluation_splits()
    except ValueError:  # the loader's own errors name the argument and the file
        raise
    except (OSError, KeyError) as error:
        raise RunnerError(f"Cannot load benchmark {name!r} from '{root}': {error}.") from None

    def as_set(split: Any, what: str) -> ImageSet:
        paths = tuple(Path(p) for p in split.paths)
        labels = tuple(int(v) for v in split.labels)
        ids = tuple(path_identity(p) for p in paths)
        names = tuple(relative_name(p, root) for p in paths)
        return ImageSet(
            paths, labels, ids, f"{name} {what}", {"kind": "benchmark"}, names, Path(root)
        )

    query = as_set(query_split, "query split")
    gallery = as_set(gallery_split, "gallery split")
    ks = tuple(int(k) for k in benchmark.protocol.ks)
    title = str(getattr(benchmark, "title", name))
    complete = bool(getattr(benchmark, "complete", True))
    return BenchmarkSets(query, gallery, ks, title, complete)
