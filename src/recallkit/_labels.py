"""Dense integer codes for labels and ids: never through floats.

PML casts labels to float32, which merges integers above 2**24 (16,777,217 == 16,777,216 in
float32). recallkit maps every label (int64, string, tuple) to a dense int64 code instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from recallkit._checks import fail


def _as_array(values: Any, name: str, func: str) -> np.ndarray:
    """Return a 1-D numpy array of ``values``, or an object array of tuples."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    if isinstance(values, np.ndarray):
        array = values
    else:
        values = list(values)
        if any(isinstance(v, tuple | list) for v in values):
            array = np.empty(len(values), dtype=object)
            array[:] = [tuple(v) if isinstance(v, list) else v for v in values]
        else:
            array = np.asarray(values)
    if array.ndim != 1:
        raise fail(func, name, "one-dimensional (one label per row)", f"shape {array.shape}")
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise fail(func, name, "integers, strings or tuples", "non-integral floats")
        array = array.astype(np.int64)
    elif array.dtype.kind == "b":
        array = array.astype(np.int64)
    return array


def dense_codes(
    first: Any, second: Any, names: tuple[str, str], func: str
) -> tuple[np.ndarray, np.ndarray]:
    """Map two label sequences to dense int64 codes over their union.

    Equal labels get equal codes; integer labels keep their exact int64 value (no float cast);
    strings and tuples are compared by value.

    >>> q, r = dense_codes([2**40 + 1, 7], [7, 2**40, 2**40 + 1], ("a", "b"), "f")
    >>> q.tolist(), r.tolist()
    ([2, 0], [0, 1, 2])
    """
    a = _as_array(first, names[0], func)
    b = _as_array(second, names[1], func)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        both = np.concatenate([a.astype(np.int64), b.astype(np.int64)])
        _, codes = np.unique(both, return_inverse=True)
    elif a.dtype.kind in "US" and b.dtype.kind in "US":
        both = np.concatenate([a.astype(str), b.astype(str)])
        _, codes = np.unique(both, return_inverse=True)
    else:
        # Mixed or tuple labels: codes in order of first appearance, compared by value.
        table: dict[Any, int] = {}
        codes = np.fromiter(
            (table.setdefault(_hashable(v), len(table)) for v in (*a.tolist(), *b.tolist())),
            dtype=np.int64,
            count=len(a) + len(b),
        )
    codes = codes.astype(np.int64).reshape(-1)
    return codes[: len(a)], codes[len(a) :]


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
