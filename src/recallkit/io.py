"""Embedding files: load whole, or open for streaming (``.npy`` memory map, ``.safetensors``).

A gallery larger than memory is opened with :func:`open_embeddings` and passed to the metric
functions as the reference: it is then read and scored block by block, with bounded resident
memory. The runner's gallery cache (a ``.npy`` file) opens the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from recallkit._checks import fail


class EmbeddingFile:
    """A 2-D embedding array on disk, read in row slices: ``file[start:stop]`` -> numpy.

    Passed as ``reference`` to :func:`recallkit.recall_at_k` and the other metric functions,
    it is streamed in blocks instead of being loaded.
    """

    is_streamed_embeddings = True

    def __init__(self, path: str | os.PathLike[str], key: str | None = None) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise fail("open_embeddings", "path", "an existing file", str(self.path))
        suffix = self.path.suffix.lower()
        if suffix == ".npy":
            # Read the header only; rows are read with explicit reads, so that resident memory
            # holds one block at a time (a memory map would keep every page it touched).
            with open(self.path, "rb") as handle:
                version = np.lib.format.read_magic(handle)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, fortran, dtype = read_header(handle)
                self._data_offset = handle.tell()
            if fortran or dtype.hasobject:
                raise fail("open_embeddings", "path", "a C-ordered numeric .npy", str(path))
            self._dtype = dtype
            self._array = shape
            self._slice = None
        elif suffix == ".safetensors":
            from safetensors import safe_open

            self._handle = safe_open(str(self.path), framework="numpy")
            keys = list(self._handle.keys())
            if key is None and len(keys) != 1:
                raise fail("open_embeddings", "key", f"one of {keys}", None)
            self._slice = self._handle.get_slice(key or keys[0])
            self._array = None
        else:
            raise fail("open_embeddings", "path", "a .npy or .safetensors file", str(path))
        shape = self._array if self._array is not None else tuple(self._slice.get_shape())
        if len(shape) != 2:
            raise fail("open_embeddings", "path", "a 2-D array", f"shape {shape}")
        self.shape = tuple(int(s) for s in shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        if self._slice is not None:
            return np.asarray(self._slice[rows])
        start, stop, step = rows.indices(self.shape[0]) if isinstance(rows, slice) else (0, 0, 0)
        if not isinstance(rows, slice) or step != 1:
            raise TypeError("EmbeddingFile supports contiguous row slices: file[start:stop]")
        row_bytes = self.shape[1] * self._dtype.itemsize
        out = np.empty((max(stop - start, 0), self.shape[1]), dtype=self._dtype)
        with open(self.path, "rb") as handle:
            handle.seek(self._data_offset + start * row_bytes)
            handle.readinto(memoryview(out).cast("B"))
        return out

    def __repr__(self) -> str:
        return f"EmbeddingFile({str(self.path)!r}, shape={self.shape})"


def open_embeddings(path: str | os.PathLike[str], key: str | None = None) -> EmbeddingFile:
    """Open an embedding file for streaming, without reading it.

    >>> import numpy as np, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "gallery.npy"
    >>> np.save(path, np.eye(3, dtype=np.float16))
    >>> open_embeddings(path).shape
    (3, 3)
    """
    return EmbeddingFile(path, key)


def load_embeddings(path: str | os.PathLike[str], key: str | None = None) -> torch.Tensor:
    """Load a whole ``.npy``, ``.pt`` or ``.safetensors`` embedding file as a tensor."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".pt":
        value: Any = torch.load(path, map_location="cpu", weights_only=True)
        if isinstance(value, dict):
            value = value[key] if key else next(iter(value.values()))
        return torch.as_tensor(value)
    return torch.from_numpy(np.ascontiguousarray(EmbeddingFile(path, key)[:]))
