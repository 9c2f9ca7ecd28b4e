"""Arrays that one tile pass hands on to the next.

A pass's states are large and short-lived: at Cars196 scale (8,131 queries, ranked lists of 83)
each worker's top-k buffers take 15 MB. An array fresh from the allocator may be mapped afresh,
and the operating system then faults in and zeroes each page of it on its first write, inside
the tile kernels. A pass takes such arrays from here ([`empty`][empty], [`zeros`][zeros]) and
gives them back once it has read them ([`give`][give]); the next pass of the same shape (the next
epoch's evaluation) takes them again, mapped. On 2 cores of an AMD EPYC at Cars196 scale, d = 128,
a call then met about 300 page faults and 2–3 ms of system time against 800–1,800 and 14–16 ms,
its median time 0.94–0.98×; at d = 512 the allocator had kept the memory mapped either way.

At most [`LIMIT`][LIMIT] bytes are kept between passes, the arrays given back longest ago dropped
first; [`clear`][clear] drops them all. An array is handed to one taker at a time (a lock guards
the pool), so concurrent calls never share one. What an array held before is never read: a taker
gets it as ``np.empty`` would give it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = ["LIMIT", "clear", "empty", "give", "held", "zeros"]

LIMIT = 256 * 2**20
"""Bytes of arrays kept between passes at most (the default memory budget's size)."""

_lock = threading.Lock()
_free: OrderedDict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] = OrderedDict()
_held = [0]


def _key(shape: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    return shape, np.dtype(dtype)


def empty(shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype``, as ``np.empty`` gives it:
    one given back by an earlier pass where there is one, else a new one."""
    key = _key(shape, dtype)
    with _lock:
        arrays = _free.get(key)
        if arrays:
            array = arrays.pop()
            if not arrays:
                del _free[key]
            _held[0] -= array.nbytes
            return array
    return np.empty(key[0], dtype=key[1])


def zeros(shape: int | tuple[int, ...], dtype: Any) -> np.ndarray:
    """[`empty`][empty], filled with zeros."""
    array = empty(shape, dtype)
    array.fill(0)
    return array


def give(*arrays: np.ndarray | None) -> None:
    """Hand ``arrays`` on to later passes (``None`` and arrays that do not own their memory are
    skipped). The caller reads and writes them no more."""
    with _lock:
        for array in arrays:
            if array is None or not array.flags.owndata or not array.flags.c_contiguous:
                continue
            if array.nbytes == 0 or array.nbytes > LIMIT:
                continue
            key = (array.shape, array.dtype)
            _free.setdefault(key, []).append(array)
            _free.move_to_end(key)
            _held[0] += array.nbytes
        while _held[0] > LIMIT:
            key, arrays = next(iter(_free.items()))
            _held[0] -= arrays.pop(0).nbytes
            if not arrays:
                del _free[key]


def held() -> int:
    """Bytes of arrays kept for later passes."""
    return _held[0]


def clear() -> None:
    """Drop every array kept (their memory goes back to the allocator)."""
    with _lock:
        _free.clear()
        _held[0] = 0
