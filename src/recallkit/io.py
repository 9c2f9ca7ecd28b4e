"""Embedding files: load whole, or open for streaming (``.npy`` memory map, ``.safetensors``).

A gallery larger than memory is opened with :func:`open_embeddings` and passed to the metric
functions as the reference: it is then read and scored block by block, with bounded resident
memory. The runner's gallery cache (a ``.npy`` file) opens the same way.

A file must hold a 2-D array of real numbers: float16, float32, float64 or integers (and
bfloat16 in ``.safetensors``, read as float32). Big-endian ``.npy`` files are converted to the
native byte order as they are read. Strings, bytes, objects, booleans, complex numbers, dates,
structured records and float types wider than float64 are refused with a ``ValueError`` naming
the file and its dtype. A ``.npy`` file shorter than its header says (an interrupted copy or
download) is refused when it is opened, and a read that returns fewer bytes than asked (the file
shrank afterwards) raises instead of returning uninitialised rows; a damaged ``.safetensors``
file raises a ``ValueError`` naming the file.

:func:`read_array` is the one whole-file reader of ``.npy``, ``.pt``/``.pth`` and
``.safetensors`` arrays of any shape (a file holding several named tensors included); the
command line's embedding, score and index files are read through it, each command adding its
own rules on shape and values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recallkit._checks import fail

# safetensors dtype names accepted for embeddings (BF16 is read as float32).
_SAFETENSORS_DTYPES = (
    *("F16", "BF16", "F32", "F64"),
    *("I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64"),
)


def _check_npy_dtype(dtype: np.dtype, path: Path, func: str) -> None:
    """Refuse ``.npy`` dtypes that are not real numbers torch can hold."""
    if dtype.hasobject or dtype.kind not in "fiu" or dtype.itemsize > 8:
        raise fail(
            func,
            "path",
            "a .npy file of real numbers (float16, float32, float64 or integers)",
            f"dtype {dtype} in {path}",
        )


class EmbeddingFile:
    """A 2-D embedding array on disk, read in row slices: ``file[start:stop]`` -> numpy.

    Passed as ``reference`` to :func:`recallkit.recall_at_k` and the other metric functions,
    it is streamed in blocks instead of being loaded. Rows come back in the native byte order.
    A truncated ``.npy`` is refused when it is opened; a short read raises ``ValueError``.
    """

    is_streamed_embeddings = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        key: str | None = None,
        *,
        _func: str = "open_embeddings",
    ) -> None:
        self._func = _func
        self.path = Path(path)
        if not self.path.is_file():
            raise fail(self._func, "path", "an existing file", str(self.path))
        suffix = self.path.suffix.lower()
        if suffix == ".npy":
            shape = self._open_npy()
            self._slice = None
        elif suffix == ".safetensors":
            shape = self._open_safetensors(key)
        else:
            raise fail(self._func, "path", "a .npy or .safetensors file", str(path))
        if len(shape) != 2:
            raise fail(self._func, "path", "a 2-D array", f"shape {shape} in {self.path}")
        self.shape = tuple(int(s) for s in shape)

    def _open_npy(self) -> tuple[int, ...]:
        # Read the header only; rows are read with explicit reads, so that resident memory
        # holds one block at a time (a memory map would keep every page it touched).
        try:
            with open(self.path, "rb") as handle:
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
        _check_npy_dtype(dtype, self.path, self._func)
        if fortran:
            raise fail(self._func, "path", "a C-ordered .npy", f"{self.path} (Fortran)")
        self._dtype = dtype
        expected = self._data_offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = os.path.getsize(self.path)
        if size < expected:
            raise fail(
                self._func,
                "path",
                f"a complete .npy file ({expected} bytes for shape {tuple(shape)} {dtype})",
                f"{size} bytes in {self.path} (truncated)",
            )
        return tuple(shape)

    def _open_safetensors(self, key: str | None) -> tuple[int, ...]:
        from safetensors import safe_open

        try:
            self._handle = safe_open(str(self.path), framework="pt")
            keys = list(self._handle.keys())
        except Exception as error:  # safetensors raises its own error types
            raise fail(
                self._func, "path", "a readable .safetensors file", f"{self.path}: {error}"
            ) from None
        if key is None and len(keys) != 1:
            raise fail(self._func, "key", f"one of {keys}", None)
        if key is not None and key not in keys:
            raise fail(self._func, "key", f"one of {keys}", repr(key))
        self._slice = self._handle.get_slice(key if key is not None else keys[0])
        dtype = self._slice.get_dtype()
        if dtype not in _SAFETENSORS_DTYPES:
            raise fail(
                self._func,
                "path",
                "a .safetensors tensor of real numbers (floats or integers)",
                f"dtype {dtype} in {self.path}",
            )
        return tuple(self._slice.get_shape())

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        if self._slice is not None:
            try:
                tensor = self._slice[rows]
            except Exception as error:  # safetensors raises its own error types
                raise ValueError(f"Cannot read rows {rows} of {self.path}: {error}") from None
            if tensor.dtype == torch.bfloat16:
                tensor = tensor.float()
            return tensor.numpy()
        start, stop, step = rows.indices(self.shape[0]) if isinstance(rows, slice) else (0, 0, 0)
        if not isinstance(rows, slice) or step != 1:
            raise TypeError("EmbeddingFile supports contiguous row slices: file[start:stop]")
        row_bytes = self.shape[1] * self._dtype.itemsize
        out = np.empty((max(stop - start, 0), self.shape[1]), dtype=self._dtype)
        wanted = out.nbytes
        with open(self.path, "rb") as handle:
            handle.seek(self._data_offset + start * row_bytes)
            view = memoryview(out).cast("B")
            got = 0
            while got < wanted:
                count = handle.readinto(view[got:])
                if not count:
                    break
                got += count
        if got != wanted:
            raise ValueError(
                f"{self.path} ended early: rows {start}:{stop} need {wanted} bytes at offset "
                f"{self._data_offset + start * row_bytes}, read {got} (was the file truncated "
                "after it was opened?)."
            )
        if not out.dtype.isnative:
            out = out.astype(out.dtype.newbyteorder("="))
        return out

    def __repr__(self) -> str:
        return f"EmbeddingFile({str(self.path)!r}, shape={self.shape})"


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


def _load_pt(path: Path) -> Any:
    """The object of a ``.pt``/``.pth`` file (tensors, dicts and lists only: no pickled code)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def _names(data: dict[Any, Any]) -> str:
    names = [str(k) for k in data]
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
    if not path.is_file():
        raise ValueError(f"{name} does not exist.")
    suffix = path.suffix.lower()
    if suffix not in ARRAY_SUFFIXES:
        raise ValueError(f"{name} must end in {', '.join(ARRAY_SUFFIXES)}.")
    try:
        if suffix == ".npy":
            data: Any = np.load(path, allow_pickle=False)
        elif suffix == ".safetensors":
            from safetensors.torch import load_file

            data = load_file(str(path))
        else:
            data = _load_pt(path)
    except Exception as error:  # numpy, torch and safetensors raise many types
        raise ValueError(f"{name} cannot be read: {error}") from None
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
            raise ValueError(
                f"{name} holds {len(data)} tensors ({_names(data)}); {several_hint}."
            )
    elif key is not None:
        raise ValueError(f"{name} holds one array, not several named ones; drop '#{key}'.")
    if isinstance(data, torch.Tensor):
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
    wanted = (ndim,) if isinstance(ndim, int) else ndim
    if wanted is not None and array.ndim not in wanted:
        dims = " or ".join(f"{d}-D" for d in wanted)
        raise ValueError(f"{name} must hold a {dims} array. Got shape {array.shape}.")
    if not array.dtype.isnative:  # a big-endian file: the same values in native byte order
        array = array.astype(array.dtype.newbyteorder("="))
    return array


def load_embeddings(path: str | os.PathLike[str], key: str | None = None) -> torch.Tensor:
    """Load a whole ``.npy``, ``.pt`` or ``.safetensors`` embedding file as a tensor.

    ``.npy`` and ``.safetensors`` files are checked as by :func:`open_embeddings` (a truncated
    or damaged file, or a dtype other than real numbers, raises ``ValueError`` naming the file);
    a ``.pt`` file that cannot be read raises ``ValueError`` naming it.
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
    return torch.from_numpy(
        np.ascontiguousarray(EmbeddingFile(path, key, _func="load_embeddings")[:])
    )
