"""Embedding files: load whole, or open for streaming (``.npy``, ``.safetensors``).

A gallery larger than memory is opened with [`open_embeddings`][open_embeddings] and passed to the
metric functions as the reference: it is then read and scored block by block, with bounded resident
memory. The runner's gallery cache (a ``.npy`` file) opens the same way.

A file must hold a 2-D array of real numbers: float16, float32, float64 or integers (and
bfloat16 in ``.safetensors``, read as float32). Big-endian ``.npy`` files are converted to the
native byte order as they are read. Strings, bytes, objects, booleans, complex numbers, dates,
structured records and float types wider than float64 are refused with a ``ValueError`` naming
the file and its dtype. A file shorter than its header says (an interrupted copy or download)
is refused when it is opened, and a damaged ``.safetensors`` header raises a ``ValueError``
naming the file.

An opened file is pinned: it is read through the descriptor opened first, at the offset and
with the dtype of the header read then. Replacing the file (a new file renamed over the path)
does not change what is read; rewriting it in place (a new size, modification time or header)
makes the next read raise a ``ValueError`` saying the file changed since it was opened, and a
read that returns fewer bytes than asked raises instead of returning uninitialised rows.

A numpy memory map (``np.load(path, mmap_mode="r")``, or any view of one) is never read
through its mapping, where a file truncated by another process kills the process with
``SIGBUS``: it is read from the file it maps. As a streamed gallery it is pinned as an opened
file is ([`pin`][pin]), block by block; anywhere else (a query, a gallery in memory, a score
matrix, labels) its values are read whole through one descriptor
([`recallkit._inputs.pinned.read_mapped`][recallkit._inputs.pinned.read_mapped]). When the query and
the gallery map one file (leave-one-out on one memory map), the query is read through the gallery's
descriptor ([`read_through`][read_through]). A file truncated before or during the call, or
rewritten in place during it, is a one-line ``ValueError`` naming it, never a mixed result or a
``SIGBUS``. Left to their mapping are a copy-on-write map (``mode="c"``, whose pages may hold writes
the file does not) and a map whose path names another file since it was mapped (replaced by a
rename; seen on Linux), whose old file can no longer be truncated through the path.

[`read_array`][read_array] reads a whole file through one descriptor and refuses it when it changed
while it was read: its size, modification time or sampled contents
([`recallkit._inputs.pinned.FileState`][recallkit._inputs.pinned.FileState]).

[`read_array`][read_array] is the one whole-file reader of ``.npy``, ``.pt``/``.pth`` and
``.safetensors`` arrays of any shape (a file holding several named tensors included); the
command line's embedding, score and index files are read through it, each command adding its
own rules on shape and values. A tensor saved in another layout than dense (sparse, quantized,
nested) is refused with a ``ValueError`` naming the file. ``.safetensors`` files are read by
this module's own reader of the format (a JSON header, then the raw little-endian data), so
reading them needs no optional package.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recallkit._inputs import pinned as _pinned
from recallkit._inputs.checks import ParameterError, fail
from recallkit._inputs.pinned import FileState

# safetensors dtype names accepted for embeddings -> their (little-endian) numpy dtype. BF16 is
# read as its 16-bit patterns and widened to float32 exactly.
_SAFETENSORS_DTYPES = {
    "F16": "<f2",
    "BF16": "<u2",
    "F32": "<f4",
    "F64": "<f8",
    "I8": "i1",
    "I16": "<i2",
    "I32": "<i4",
    "I64": "<i8",
    "U8": "u1",
    "U16": "<u2",
    "U32": "<u4",
    "U64": "<u8",
}
# A header longer than this is a damaged file (safetensors itself stops at 100 MB).
_MAX_HEADER = 100_000_000
#: Positional reads ([`recallkit._inputs.pinned.read_at`][recallkit._inputs.pinned.read_at]); the
#: readers below call it by this name.
_read_at = _pinned.read_at


def _check_npy_dtype(dtype: np.dtype, path: Path, func: str) -> None:
    """Refuse ``.npy`` dtypes that are not real numbers torch can hold."""
    if dtype.hasobject or dtype.kind not in "fiu" or dtype.itemsize > 8:
        raise fail(
            func,
            "path",
            "a .npy file of real numbers (float16, float32, float64 or integers)",
            f"dtype {dtype} in {path}",
        )


def _read_bytes(fd: int, size: int, offset: int) -> bytes:
    buffer = bytearray(size)
    got = _read_at(fd, memoryview(buffer), offset)
    return bytes(buffer[:got])


class EmbeddingFile:
    """A 2-D embedding array on disk, read in row slices: ``file[start:stop]`` -> numpy.

    Passed as ``reference`` to [`recallkit.recall_at_k`][recallkit.retrieval.recall_at_k] and the
    other metric functions, it is streamed in blocks instead of being loaded. Rows come back in the
    native byte order. A truncated ``.npy`` is refused when it is opened; a short read raises
    ``ValueError``.

    The file is pinned when it is opened: its descriptor stays open (until [`close`][close], or
    the end of a ``with`` block) and every block is read through it, at the offset and with the
    dtype its header gave. A file replaced by another one afterwards (a new file renamed over
    the path) therefore still reads as the file that was opened. A file rewritten in place
    (the same file with another size, modification time or header) is detected on every read
    and raises ``ValueError`` naming it, rather than mixing old layout and new bytes.
    """

    is_streamed_embeddings = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        key: str | None = None,
        *,
        _func: str = "open_embeddings",
        _raw: tuple[_pinned.Mapped, int, FileState] | None = None,
        _any_shape: bool = False,
    ) -> None:
        self._func = _func
        self._fd: int | None = None
        self._any_shape = _any_shape
        self._raw: _pinned.Mapped | None = None
        self.path = Path(path)
        if _raw is not None:  # a memory map's values: their layout, the open file, its state
            self._open_raw(*_raw)
            return
        if not self.path.is_file():
            raise fail(self._func, "path", "an existing file", str(self.path))
        suffix = self.path.suffix.lower()
        if suffix not in (".npy", ".safetensors"):
            raise fail(self._func, "path", "a .npy or .safetensors file", str(path))
        try:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except OSError as error:
            reason = error.strerror or str(error)
            raise fail(self._func, "path", "a readable file", f"{self.path}: {reason}") from None
        try:
            stat = os.fstat(self._fd)
            self._widen_bf16 = False
            if suffix == ".npy":
                shape = self._open_npy(stat.st_size)
            else:
                shape = self._open_safetensors(key, stat.st_size)
            if len(shape) != 2 and not _any_shape:
                raise fail(self._func, "path", "a 2-D array", f"shape {shape} in {self.path}")
        except BaseException:
            self.close()
            raise
        # The file as opened: its identity, size, modification time and the header parsed.
        self._state = FileState.known(
            stat, self.path, ((0, len(self._header)),), self._header, "header"
        )
        self.shape = tuple(int(s) for s in shape)

    def _open_raw(self, place: _pinned.Mapped, fd: int, state: FileState) -> None:
        self._fd = fd
        self._raw = place
        self._state = state.stat_only("header")  # checked on every block: size and time
        self._widen_bf16 = False
        self._fortran = False
        self._dtype = np.dtype(place.dtype)
        self._data_offset = place.offset
        self._header = b""
        self.shape = place.shape

    def _open_npy(self, size: int) -> tuple[int, ...]:
        # Read the header only; rows are read with explicit reads, so that resident memory
        # holds one block at a time (a memory map would keep every page it touched).
        assert self._fd is not None
        # The magic string, the version and the header's length (2 bytes in version 1, else 4).
        prefix = _read_bytes(self._fd, 12, 0)
        length = len(prefix)
        if prefix[:6] == b"\x93NUMPY" and prefix[6:7] == b"\x01" and len(prefix) >= 10:
            length = 10 + int.from_bytes(prefix[8:10], "little")
        elif prefix[:6] == b"\x93NUMPY" and len(prefix) >= 12:
            length = 12 + int.from_bytes(prefix[8:12], "little")
        self._header = _read_bytes(self._fd, min(length, _MAX_HEADER), 0)
        try:
            handle = io.BytesIO(self._header)
            version = np.lib.format.read_magic(handle)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(handle)
            self._data_offset = handle.tell()
        except ValueError as error:
            raise fail(
                self._func, "path", "a readable .npy file", f"{self.path}: {error}"
            ) from None
        if self._any_shape:  # a whole array of any dtype the caller checks; no objects
            if dtype.hasobject:
                raise fail(
                    self._func,
                    "path",
                    "a .npy file without Python objects",
                    f"dtype {dtype} in {self.path}",
                )
        else:
            _check_npy_dtype(dtype, self.path, self._func)
        self._fortran = bool(fortran) and self._any_shape
        if fortran and not self._any_shape:
            raise fail(self._func, "path", "a C-ordered .npy", f"{self.path} (Fortran)")
        self._dtype = dtype
        expected = self._data_offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size < expected:
            raise fail(
                self._func,
                "path",
                f"a complete .npy file ({expected} bytes for shape {tuple(shape)} {dtype})",
                f"{size} bytes in {self.path} (truncated)",
            )
        return tuple(shape)

    def _open_safetensors(self, key: str | None, size: int) -> tuple[int, ...]:
        # The format: an 8-byte little-endian header length N, N bytes of JSON
        # {name: {"dtype", "shape", "data_offsets": [begin, end]}}, then the data.
        assert self._fd is not None

        def damaged(reason: str) -> ValueError:
            return fail(
                self._func, "path", "a readable .safetensors file", f"{self.path}: {reason}"
            )

        prefix = _read_bytes(self._fd, 8, 0)
        if len(prefix) < 8:
            raise damaged(f"{size} bytes, shorter than the 8-byte header length")
        length = int.from_bytes(prefix, "little")
        if length > min(size - 8, _MAX_HEADER):
            raise damaged(f"a header of {length} bytes in a file of {size} bytes (truncated?)")
        self._header = prefix + _read_bytes(self._fd, length, 8)
        try:
            header = json.loads(self._header[8:].decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise damaged(f"the header is not JSON ({error})") from None
        if not isinstance(header, dict):
            raise damaged("the header is not a JSON object")
        tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
        keys = list(tensors)
        if key is None and len(keys) != 1:
            raise fail(self._func, "key", f"one of {keys}", None)
        if key is not None and key not in keys:
            raise fail(self._func, "key", f"one of {keys}", repr(key))
        entry = tensors[key if key is not None else keys[0]]
        try:
            dtype, shape = entry["dtype"], tuple(int(n) for n in entry["shape"])
            begin, end = (int(n) for n in entry["data_offsets"])
        except (TypeError, KeyError, ValueError):
            raise damaged("a tensor entry without dtype, shape and data_offsets") from None
        if dtype not in _SAFETENSORS_DTYPES:
            raise fail(
                self._func,
                "path",
                "a .safetensors tensor of real numbers (floats or integers)",
                f"dtype {dtype} in {self.path}",
            )
        self._dtype = np.dtype(_SAFETENSORS_DTYPES[dtype])
        self._widen_bf16 = dtype == "BF16"
        nbytes = int(np.prod(shape, dtype=np.int64)) * self._dtype.itemsize
        if min(shape, default=0) < 0 or not 0 <= begin <= end or end - begin != nbytes:
            raise damaged(f"data offsets {begin}:{end} do not fit shape {shape} {dtype}")
        self._data_offset = 8 + length + begin
        if self._data_offset + nbytes > size:
            raise damaged(
                f"{size} bytes, but its tensor ends at byte {self._data_offset + nbytes} "
                "(truncated)"
            )
        return shape

    def _check_unchanged(self) -> int:
        """The open descriptor, once the file is known to be as it was opened."""
        if self._fd is None:
            raise ValueError(f"The embedding file '{self.path}' was closed.")
        state = self._state
        changed = state.differences(FileState.of(self._fd, self.path, state.spans, state.what))
        if changed:
            raise self._changed(changed)
        return self._fd

    def _changed(self, changed: list[str]) -> ValueError:
        return _pinned.FileChanged(
            f"The embedding file '{self.path}' changed since it was opened (it was "
            f"rewritten in place: {', '.join(changed)}); open it again to read it."
        )

    def _ended_early(self, rows: slice, short: _pinned.ShortRead) -> ValueError:
        return ValueError(
            f"{self.path} ended early: rows {rows.start}:{rows.stop} need {short.wanted} bytes "
            f"at offset {short.offset}, read {short.got} (was the file truncated after it was "
            "opened?)."
        )

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        if not isinstance(rows, slice) or rows.indices(self.shape[0])[2] != 1:
            raise TypeError("EmbeddingFile supports contiguous row slices: file[start:stop]")
        start, stop, _ = rows.indices(self.shape[0])
        fd = self._check_unchanged()
        if self._raw is not None:  # a memory map's rows, wherever its strides put them
            place = self._raw
            try:
                out = _pinned.read_strided(
                    fd,
                    place.offset + start * place.strides[0],
                    (max(stop - start, 0), *place.shape[1:]),
                    place.strides,
                    self._dtype,
                )
            except _pinned.ShortRead as short:
                raise self._ended_early(slice(start, stop), short) from None
            return out if out.dtype.isnative else out.astype(out.dtype.newbyteorder("="))
        row_bytes = self.shape[1] * self._dtype.itemsize
        out = np.empty((max(stop - start, 0), self.shape[1]), dtype=self._dtype)
        wanted = out.nbytes
        got = 0
        offset = self._data_offset + start * row_bytes
        if wanted:
            got = _read_at(fd, memoryview(out).cast("B"), offset)
        if got != wanted:
            short = _pinned.ShortRead(offset, wanted, got)
            raise self._ended_early(slice(start, stop), short)
        if self._widen_bf16:  # bfloat16 is the upper half of a float32
            return (out.astype(np.uint32) << 16).view(np.float32)
        if not out.dtype.isnative:
            out = out.astype(out.dtype.newbyteorder("="))
        return out

    def read_all(self) -> np.ndarray:
        """The whole array (any shape), read through the pinned descriptor and checked
        unchanged before and after the read (size, modification time, header and sampled
        contents: [`recallkit._inputs.pinned.FileState`][recallkit._inputs.pinned.FileState])."""
        fd = self._check_unchanged()
        before = FileState.of(fd, self.path)
        if self._raw is not None:
            out = self[0 : self.shape[0]] if len(self.shape) == 2 else self._read_raw_whole(fd)
        else:
            out = np.empty(self.shape, dtype=self._dtype, order="F" if self._fortran else "C")
            flat = (out.T if self._fortran else out).reshape(-1)  # the file's order: a view
            got = _read_at(fd, memoryview(flat).cast("B"), self._data_offset) if out.size else 0
            if got != out.nbytes:
                raise ValueError(
                    f"{self.path} ended early: {got} of {out.nbytes} bytes were read "
                    "(was the file truncated while it was read?)."
                )
        self._check_unchanged()
        changed = before.differences(FileState.of(fd, self.path, before.spans))
        if changed:
            raise self._changed(changed)
        _pinned.note(before)
        if self._widen_bf16:
            return (out.astype(np.uint32) << 16).view(np.float32)
        if not out.dtype.isnative:
            out = out.astype(out.dtype.newbyteorder("="))
        return out

    def _read_raw_whole(self, fd: int) -> np.ndarray:
        place = self._raw
        assert place is not None
        try:
            return _pinned.read_strided(fd, place.offset, place.shape, place.strides, self._dtype)
        except _pinned.ShortRead as short:
            raise self._ended_early(slice(0, self.shape[0]), short) from None

    def read_view(self, x: Any, name: str) -> Any:
        """``x``'s values read through this file's descriptor when ``x`` is a memory map of
        this very file ([`recallkit._inputs.pinned.mapped`][recallkit._inputs.pinned.mapped]),
        checked as every block is; ``x`` itself otherwise. ``name`` is the parameter ``x`` was given
        as."""
        place = _pinned.mapped(x)
        if place is None or self._fd is None or not self._maps(place):
            return x
        fd = self._check_unchanged()
        end = place.extent()[1]
        if end > self._state.size:
            raise fail(
                self._func,
                name,
                f"a memory map within its file ({end} bytes)",
                f"{self._state.size} bytes in {place.path} (truncated)",
            )
        try:
            out = _pinned.read_strided(fd, place.offset, place.shape, place.strides, place.dtype)
        except _pinned.ShortRead as short:
            raise self._ended_early(slice(0, place.shape[0] if place.shape else 1), short) from None
        self._check_unchanged()
        return out

    def _maps(self, place: _pinned.Mapped) -> bool:
        """Whether ``place`` lies in the file this one has open."""
        if place.inode is not None:
            return place.inode == self._state.inode
        try:
            stat = os.stat(place.path)
        except OSError:
            return False
        return (stat.st_dev, stat.st_ino) == (self._state.device, self._state.inode)

    def close(self) -> None:
        """Close the file; reading afterwards raises ``ValueError``."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> EmbeddingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return f"EmbeddingFile({str(self.path)!r}, shape={self.shape})"


def pin(reference: Any, func: str, name: str = "reference") -> Any:
    """A 2-D numpy memory map ([`recallkit._inputs.pinned.mapped`][recallkit._inputs.pinned.mapped]:
    any view, any strides) as a pinned [`EmbeddingFile`][EmbeddingFile] of the file it maps: its
    rows then read through one descriptor, checked on every read, never through the mapping. A file
    already too short for its values is a ``ValueError`` naming parameter ``name`` of ``func``.
    Anything else, a copy-on-write map and a map whose path now names another file come back as they
    are."""
    place = _pinned.mapped(reference) if isinstance(reference, np.memmap) else None
    if place is None or len(place.shape) != 2 or 0 in place.shape:
        return reference
    opened = _pinned.open_mapped(place, func, name)
    if opened is None:
        return reference
    return EmbeddingFile(place.path, _func=func, _raw=(place, *opened))


def read_through(file: Any, x: Any, name: str = "query") -> Any:
    """``x`` read through the descriptor of the pinned ``file`` when ``x`` is a memory map of
    the same file (leave-one-out on one memory map: the query read as the gallery's rows are,
    from the file as pinned); ``x`` itself otherwise."""
    return file.read_view(x, name) if isinstance(file, EmbeddingFile) else x


def open_embeddings(path: str | os.PathLike[str], key: str | None = None) -> EmbeddingFile:
    """Open an embedding file for streaming, without reading it.

    The dtype, the header and (for ``.npy``) the file size are checked here: a truncated file
    raises ``ValueError`` naming it, before anything is scored.

    >>> import numpy as np, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "gallery.npy"
    >>> np.save(path, np.eye(3, dtype=np.float16))
    >>> open_embeddings(path).shape
    (3, 3)
    """
    return EmbeddingFile(path, key)


ARRAY_SUFFIXES = (".npy", ".pt", ".pth", ".safetensors")


def _reason(error: Exception) -> str:
    """Why a reader refused a file: what the library's own check found, or the reader's text."""
    return str(error.got) if isinstance(error, ParameterError) else str(error)


def _load_pt(path: Any) -> Any:
    """The object of a ``.pt``/``.pth`` file (tensors, dicts and lists only: no pickled code).

    torch's own warnings on loading (deprecated storages, sparse checks) are not shown.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True)


class _OtherDtype:
    """A ``.safetensors`` tensor of a dtype that is not a real number (refused if chosen)."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


def _safetensors_tensors(data: bytes) -> dict[str, np.ndarray | _OtherDtype]:
    """Every tensor of a whole ``.safetensors`` file, read from its bytes without the
    safetensors package: real numbers and booleans as numpy arrays (bfloat16 widened to
    float32), any other dtype as [`_OtherDtype`][_OtherDtype]. A damaged file raises ``ValueError``.

    >>> header = b'{"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
    >>> body = np.array([1.5, -2], dtype="<f4").tobytes()
    >>> _safetensors_tensors(len(header).to_bytes(8, "little") + header + body)["x"].tolist()
    [1.5, -2.0]
    """
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes, shorter than the 8-byte header length")
    length = int.from_bytes(data[:8], "little")
    if length > min(len(data) - 8, _MAX_HEADER):
        raise ValueError(f"a header of {length} bytes in a file of {len(data)} bytes (truncated?)")
    try:
        header = json.loads(data[8 : 8 + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"the header is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    start = 8 + length
    tensors: dict[str, np.ndarray | _OtherDtype] = {}
    for tensor, entry in header.items():
        if tensor == "__metadata__":
            continue
        try:
            dtype, shape = str(entry["dtype"]), tuple(int(n) for n in entry["shape"])
            begin, end = (int(n) for n in entry["data_offsets"])
        except (TypeError, KeyError, ValueError):
            raise ValueError(
                f"the tensor {tensor!r} has no dtype, shape and data_offsets"
            ) from None
        numpy_dtype = "?" if dtype == "BOOL" else _SAFETENSORS_DTYPES.get(dtype)
        if numpy_dtype is None:
            tensors[tensor] = _OtherDtype(dtype)
            continue
        itemsize = np.dtype(numpy_dtype).itemsize
        count = int(np.prod(shape, dtype=np.int64))
        if min(shape, default=0) < 0 or not 0 <= begin <= end or end - begin != count * itemsize:
            raise ValueError(f"the data offsets {begin}:{end} of {tensor!r} do not fit {shape}")
        if start + end > len(data):
            raise ValueError(f"{len(data)} bytes, but {tensor!r} ends at {start + end} (truncated)")
        array = np.frombuffer(data, dtype=numpy_dtype, count=count, offset=start + begin)
        if dtype == "BF16":  # bfloat16 is the upper half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[tensor] = array.reshape(shape).copy()
    return tensors


def _not_dense(tensor: torch.Tensor) -> str:
    """What keeps ``tensor`` from being read as a numpy array, or ``""`` for a dense tensor."""
    if getattr(tensor, "is_nested", False):
        return "a nested tensor"
    if tensor.layout != torch.strided:
        return f"a tensor of layout {tensor.layout} (not dense)"
    if tensor.is_quantized:
        return f"a quantized tensor ({tensor.dtype})"
    if tensor.device.type == "meta":
        return "a tensor without data (on the meta device)"
    return ""


def _names(data: dict[Any, Any]) -> str:
    names = sorted(str(k) for k in data)
    return ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")


def read_array(
    path: str | os.PathLike[str],
    key: str | None = None,
    *,
    what: str = "array",
    ndim: int | tuple[int, ...] | None = None,
    default_key: str | None = None,
    several_hint: str = "name the one to read",
) -> np.ndarray:
    """Read a whole numeric array from a ``.npy``, ``.pt``/``.pth`` or ``.safetensors`` file.

    A file holding several named tensors (a ``.safetensors`` file, a dict in a ``.pt``) gives
    the one named ``key``; without ``key``, the one named ``default_key`` if there is one, or
    its only tensor. The values must be real numbers (floats or integers, at most 64 bits);
    bfloat16 is read as float32 and a big-endian ``.npy`` in the native byte order, and other
    dtypes are kept. ``ndim`` (one or several) checks the number of dimensions. Every problem
    is a ``ValueError`` that names the file as "the ``what`` file"; ``several_hint`` ends the
    message for a file holding several tensors and no ``key``.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "ranks.npy"
    >>> np.save(p, np.array([3, 1, 2]))
    >>> read_array(p, what="ranks", ndim=1).tolist()
    [3, 1, 2]
    >>> read_array(p, what="ranks", ndim=2)
    Traceback (most recent call last):
    ...
    ValueError: The ranks file '...ranks.npy' must hold a 2-D array. Got shape (3,).
    """
    path = Path(path)
    name = f"The {what} file '{path}'"
    data = _picked(_loaded(path, name), key, default_key, several_hint, name)
    array = _real_numbers(data, name)
    wanted = (ndim,) if isinstance(ndim, int) else ndim
    if wanted is not None and array.ndim not in wanted:
        dims = " or ".join(f"{d}-D" for d in wanted)
        raise ValueError(f"{name} must hold a {dims} array. Got shape {array.shape}.")
    if not array.dtype.isnative:  # a big-endian file: the same values in native byte order
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def _loaded(path: Path, name: str) -> Any:
    """The contents of an array file (an array, a tensor or a dict of them), read through one
    descriptor checked unchanged; every problem a ``ValueError`` naming the file."""
    if path.is_dir():
        raise ValueError(f"{name} is a folder, not a file.")
    if path.exists() and not path.is_file():
        raise ValueError(f"{name} is not a regular file (a device, a pipe or a socket).")
    if not path.is_file():
        raise ValueError(f"{name} does not exist.")
    suffix = path.suffix.lower()
    if suffix not in ARRAY_SUFFIXES:
        raise ValueError(f"{name} must end in {', '.join(ARRAY_SUFFIXES)}.")
    if path.stat().st_size == 0:
        raise ValueError(f"{name} cannot be read: it is empty.")
    if suffix == ".npy":
        with open(path, "rb") as handle:
            if handle.read(6) != b"\x93NUMPY":
                raise ValueError(
                    f"{name} cannot be read: it is not a .npy file (it does not begin with numpy's "
                    "header)."
                )
    try:
        if suffix == ".npy":
            with EmbeddingFile(path, _func="read_array", _any_shape=True) as pinned:
                data: Any = pinned.read_all()
        elif suffix == ".safetensors":
            data = _safetensors_tensors(_pinned.read_file(path, name))
        else:
            data = _load_pt(io.BytesIO(_pinned.read_file(path, name)))
    except _pinned.FileChanged as error:
        raise ValueError(str(error)) from None
    except Exception as error:  # numpy and torch raise many types
        raise ValueError(f"{name} cannot be read: {_reason(error)}") from None
    return data


def _picked(
    data: Any, key: str | None, default_key: str | None, several_hint: str, name: str
) -> Any:
    """The tensor named ``key`` (or ``default_key``, or the only one) of a file of several."""
    if isinstance(data, dict):
        if key is not None:
            if key not in data:
                raise ValueError(f"{name} has no tensor {key!r} (it has {_names(data)}).")
            data = data[key]
        elif default_key is not None and default_key in data:
            data = data[default_key]
        elif len(data) == 1:
            data = next(iter(data.values()))
        else:
            raise ValueError(f"{name} holds {len(data)} tensors ({_names(data)}); {several_hint}.")
    elif key is not None:
        raise ValueError(f"{name} holds one array, not several named ones; drop '#{key}'.")
    return data


def _real_numbers(data: Any, name: str) -> np.ndarray:
    """``data`` as a dense numpy array of real numbers (bfloat16 as float32)."""
    if isinstance(data, _OtherDtype):
        raise ValueError(
            f"{name} must hold real numbers (floats or integers of at most 64 bits). "
            f"Got dtype {data.dtype}."
        )
    if isinstance(data, torch.Tensor):
        kind = _not_dense(data)
        if kind:
            raise ValueError(
                f"{name} holds {kind}; save it as a dense tensor (tensor.to_dense() for a "
                "sparse one, tensor.dequantize() for a quantized one)."
            )
        data = data.detach().cpu()
        if data.dtype == torch.bfloat16:
            data = data.float()
        data = data.numpy()
    try:
        array = np.asarray(data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} does not hold an array: {error}") from None
    if array.dtype.kind == "f" and array.dtype.itemsize > 8:
        raise ValueError(
            f"{name} holds {array.dtype} (extended precision), which torch cannot compute "
            "with; save it as float32 or float64."
        )
    if array.dtype.hasobject or array.dtype.kind not in "fiu" or array.dtype.itemsize > 8:
        raise ValueError(
            f"{name} must hold real numbers (floats or integers of at most 64 bits). "
            f"Got dtype {array.dtype}."
        )
    return array


def load_embeddings(path: str | os.PathLike[str], key: str | None = None) -> torch.Tensor:
    """Load a whole ``.npy``, ``.pt`` or ``.safetensors`` embedding file as a tensor.

    ``.npy`` and ``.safetensors`` files are checked as by [`open_embeddings`][open_embeddings] (a
    truncated or damaged file, or a dtype other than real numbers, raises ``ValueError`` naming the
    file); a ``.pt`` file that cannot be read raises ``ValueError`` naming it.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".pt":
        try:
            value: Any = _load_pt(path)
        except Exception as error:  # torch raises many types for a damaged file
            raise fail(
                "load_embeddings", "path", "a readable .pt file", f"{path}: {error}"
            ) from None
        if isinstance(value, dict):
            value = value[key] if key else next(iter(value.values()))
        return torch.as_tensor(value)
    with EmbeddingFile(path, key, _func="load_embeddings") as file:
        return torch.from_numpy(np.ascontiguousarray(file[:]))
