"""Dense integer codes for labels and ids: never through floats, never through strings.

PML casts labels to float32, which merges integers above 2**24 (16,777,217 == 16,777,216 in
float32). recallkit maps every label to a dense int64 code instead, comparing labels by value:

* numbers (integers of any width, booleans, and floats with an integral value) compare as exact
  integers: ``3``, ``3.0`` and ``np.uint8(3)`` are one label; ``2**64 - 1`` (uint64) and ``-1``
  are two, and so are the floats ``1e20`` and ``2e20``. A float that is not integral (``0.5``),
  NaN or infinite raises;
* strings compare as strings, bytes as bytes, tuples (or lists, one per row) element by element.

All labels of one call are of one kind: numbers mixed with strings (``[1, "1"]``, which numpy
would silently turn into ``["1", "1"]``), or query labels of another kind than the reference
labels, raise ``ValueError``. Labels are given as a sequence or array with one label per row;
``None``, dicts, sets and iterators (whose length and order are not those of the rows) raise.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterator, Mapping, Sequence, Set
from typing import Any

import numpy as np

from recallkit._inputs.pinned import read_mapped
from recallkit.exceptions import fail

_INT64 = np.iinfo(np.int64)
_KINDS = {
    "number": "numbers",
    "str": "strings",
    "bytes": "bytes",
    "tuple": "tuples",
}


def _element_kind(kind: type) -> str | None:
    """The label kind of a Python or numpy scalar type; ``None`` if it cannot be a label."""
    if issubclass(kind, bool | np.bool_ | numbers.Integral):
        return "int"
    if issubclass(kind, numbers.Real):
        return "float"
    if issubclass(kind, str):
        return "str"
    if issubclass(kind, bytes):
        return "bytes"
    if issubclass(kind, tuple | list):
        return "tuple"
    return None


def _as_array(values: Any, name: str, func: str) -> tuple[str, np.ndarray]:
    """``(kind, array)``: the kind of the labels ([`_KINDS`][_KINDS], or ``"empty"``) and a 1-D
    array.

    Numbers come back as int64, or as an object array of Python ints when a value lies beyond
    int64; strings and bytes as numpy string arrays or object arrays; tuples as object arrays.
    """
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported
    if torch is not None and isinstance(values, torch.Tensor):
        tensor = values.detach().cpu()
        if tensor.is_floating_point() and tensor.dtype not in (torch.float32, torch.float64):
            tensor = tensor.to(torch.float64)  # bfloat16 and float16: exact in float64
        values = tensor.numpy()
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise fail(func, name, "one-dimensional (one label per row)", f"shape {values.shape}")
        values = read_mapped(values, func, name)  # a memory map: from its file, not the mapping
        if values.dtype == object:
            return _from_objects(values.tolist(), name, func)
        if values.size == 0:
            return "empty", np.empty(0, dtype=np.int64)
        return _from_typed(values, name, func)
    if (
        values is None
        or isinstance(values, str | bytes | Mapping | Set | Iterator)
        or not (isinstance(values, Sequence) or hasattr(values, "__array__"))
        or not hasattr(values, "__len__")
    ):
        raise fail(
            func,
            name,
            "a sequence or array with one label per row",
            type(values).__name__,
        )
    if not isinstance(values, Sequence):  # an array-like such as a pandas Series
        return _as_array(np.asarray(values), name, func)
    return _from_objects(list(values), name, func)


def _from_typed(array: np.ndarray, name: str, func: str) -> tuple[str, np.ndarray]:
    kind = array.dtype.kind
    if kind == "U":
        return "str", array
    if kind == "S":
        return "bytes", array
    if kind == "b":
        return "number", array.astype(np.int64)
    if kind == "i":
        return "number", array.astype(np.int64)
    if kind == "u":
        if array.max() > _INT64.max:
            return "number", _objects([int(v) for v in array.tolist()])
        return "number", array.astype(np.int64)
    if kind == "f":
        bad = ~np.isfinite(array)
        bad[~bad] = array[~bad] != np.floor(array[~bad])
        if bad.any():
            i = int(np.argmax(bad))
            raise fail(func, name, "integers, strings or tuples", f"{array[i]} at row {i}")
        if array.min() >= -(2.0**63) and array.max() < 2.0**63:
            return "number", array.astype(np.int64)  # exact: integral values in range
        return "number", _objects([int(v) for v in array])  # exact for every float type
    raise fail(func, name, "numbers, strings or tuples", f"dtype {array.dtype}")


def _from_objects(values: list[Any], name: str, func: str) -> tuple[str, np.ndarray]:
    if not values:
        return "empty", np.empty(0, dtype=np.int64)
    kinds: set[str] = set()
    for kind in set(map(type, values)):
        found = _element_kind(kind)
        if found is None:
            raise fail(func, name, "numbers, strings or tuples", f"a label of type {kind.__name__}")
        kinds.add(found)
    groups = {"number" if k in ("int", "float") else k for k in kinds}
    if len(groups) > 1:
        mix = " and ".join(_KINDS[k] for k in sorted(groups))
        raise fail(func, name, "labels of one kind (numbers, strings or tuples)", f"{mix} mixed")
    (group,) = groups
    if group == "tuple":
        return group, _objects([tuple(v) if isinstance(v, list) else v for v in values])
    if group in ("str", "bytes"):
        return group, _objects(values)
    if kinds == {"int"}:
        try:
            return group, np.asarray(values, dtype=np.int64)
        except OverflowError:
            pass
    ints = []
    for i, v in enumerate(values):
        if not isinstance(v, bool | np.bool_ | numbers.Integral):
            if not math.isfinite(v) or v % 1 != 0:
                raise fail(func, name, "integers, strings or tuples", f"{v!r} at row {i}")
        ints.append(int(v))
    if min(ints) >= _INT64.min and max(ints) <= _INT64.max:
        return group, np.asarray(ints, dtype=np.int64)
    return group, _objects(ints)


def _objects(values: list[Any]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def dense_codes(
    first: Any, second: Any, names: tuple[str, str], func: str
) -> tuple[np.ndarray, np.ndarray]:
    """Map two label sequences to dense int64 codes over their union.

    Equal labels get equal codes and distinct labels distinct codes, by value (module
    docstring). Numbers, strings and bytes get codes in increasing order of value, tuples in
    order of first appearance.

    >>> q, r = dense_codes([2**40 + 1, 7], [7, 2**40, 2**40 + 1], ("a", "b"), "f")
    >>> q.tolist(), r.tolist()
    ([2, 0], [0, 1, 2])
    >>> q, r = dense_codes([2**64 - 1, 1e20], [-1, 2e20], ("a", "b"), "f")
    >>> q.tolist(), r.tolist()
    ([1, 2], [0, 3])
    """
    kind_a, a = _as_array(first, names[0], func)
    kind_b, b = _as_array(second, names[1], func)
    if "empty" not in (kind_a, kind_b) and kind_a != kind_b:
        raise fail(
            func,
            names[1],
            f"labels of the same kind as '{names[0]}' ({_KINDS[kind_a]})",
            _KINDS[kind_b],
        )
    if a.dtype != object and b.dtype != object:
        # numpy arrays of one kind (int64, or numpy strings): codes in sorted order of value.
        both = np.concatenate([a, b]) if len(a) and len(b) else (a if len(a) else b)
        _, codes = np.unique(both, return_inverse=True)
    else:
        values = [*a.tolist(), *b.tolist()]
        if "tuple" not in (kind_a, kind_b):
            order = sorted(set(values))  # numbers, strings or bytes: one total order
        else:
            try:
                order = list(dict.fromkeys(values))  # first appearance
            except TypeError:
                raise fail(
                    func, names[0], "hashable labels", "a tuple holding an unhashable value"
                ) from None
        table = {value: code for code, value in enumerate(order)}
        codes = np.fromiter((table[v] for v in values), dtype=np.int64, count=len(values))
    codes = codes.astype(np.int64).reshape(-1)
    return codes[: len(a)], codes[len(a) :]
