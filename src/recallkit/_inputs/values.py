"""Validation that needs numpy alone: the torch-free half of the validation toolbox.

[`recallkit._inputs.checks`][recallkit._inputs.checks] re-exports every name here beside its
torch checks; modules that must not import torch ([`recallkit.stats`][recallkit.stats],
[`recallkit.comparison`][recallkit.comparison]) import them from here. Each raises the library's
``ParameterError`` (a ``ValueError``) naming the function, the argument, what it must be and what
it got.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from recallkit.exceptions import Text, fail

__all__ = [
    "as_values",
    "check_batch",
    "check_choice",
    "check_columns",
    "check_length",
    "check_positive_int",
    "check_rows",
    "check_seed",
    "check_unit_interval",
    "per",
]


def check_choice(value: Any, choices: Sequence[str], func: str, name: str) -> str:
    """Return ``value`` if it is one of ``choices`` (a string, where every choice is one)."""
    strings = all(isinstance(c, str) for c in choices)
    if (strings and not isinstance(value, str)) or value not in choices:
        raise fail(func, name, f"one of {tuple(choices)}", repr(value))
    return value


def check_positive_int(value: Any, func: str, name: str) -> int:
    """Return ``value`` as an int if it is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise fail(func, name, "a positive integer", repr(value))
    return int(value)


def check_seed(seed: Any, func: str, name: str = "seed") -> int:
    """Return ``seed`` as an int if it is a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise fail(func, name, "a non-negative integer", repr(seed))
    return int(seed)


def check_batch(batch: Any, func: str) -> int | None:
    """``None``, or ``batch`` as a positive int."""
    return None if batch is None else check_positive_int(batch, func, "batch")


def check_unit_interval(value: Any, func: str, name: str) -> float:
    """Return ``value`` as a float if it is a real number strictly between 0 and 1."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (real and 0 < value < 1):  # NaN fails the comparison
        raise fail(func, name, "in (0, 1)", value if real else repr(value))
    return float(value)


def as_values(x: Any, func: str, name: str, each: str = "one value per query") -> np.ndarray:
    """``x`` as a non-empty 1-D contiguous float64 array of finite real numbers, or raise."""
    try:
        array = np.asarray(x)
    except (TypeError, ValueError):
        raise fail(func, name, "a 1-D array of real numbers", "ragged values") from None
    if array.dtype.kind not in "iuf":
        raise fail(func, name, "an array of real numbers", f"dtype {array.dtype}")
    if array.ndim != 1:
        raise fail(func, name, f"a 1-D array ({each})", f"shape {array.shape}")
    if array.size == 0:
        raise fail(func, name, "non-empty", "0 values")
    array = np.ascontiguousarray(array, dtype=np.float64)
    finite = np.isfinite(array)
    if not finite.all():
        index = int(np.argmin(finite))
        raise fail(func, name, "finite (no NaN or infinity)", f"{array[index]} at index {index}")
    return array


def check_length(values: Any, expected: int, name: str, func: str, of: str) -> None:
    """Raise if ``len(values)`` differs from ``expected`` (the number of rows of ``of``)."""
    try:
        length = len(values)
    except TypeError:
        raise fail(
            func,
            name,
            f"a sequence or array of length {expected} (one per row of '{of}')",
            type(values).__name__,
        ) from None
    if length != expected:
        raise fail(func, name, f"of length {expected} (one per row of '{of}')", length)


def per(what: str | Text, expected: int, unit: str) -> Text:
    """``one {unit} per {what} ({expected} {unit}s)``, ``what`` text or a ``Text`` that
    mentions another parameter (``Text("caption of {c}", c="caption_image")``)."""
    return Text(
        f"one {unit} per {{what}} ({expected} {unit}s)",
        what=what if isinstance(what, Text) else Text(what.replace("{", "{{").replace("}", "}}")),
    )


def check_rows(x: Any, expected: int, func: str, name: str, what: str | Text) -> None:
    """Raise unless ``x`` has ``expected`` rows (one per ``what``)."""
    rows = int(x.shape[0]) if hasattr(x, "shape") and len(x.shape) else len(x)
    if rows != expected:
        raise fail(func, name, per(what, expected, "row"), f"{rows} rows")


def check_columns(x: Any, expected: int, func: str, name: str, what: str | Text) -> None:
    """Raise unless ``x`` has ``expected`` columns (one per ``what``)."""
    cols = int(x.shape[1])
    if cols != expected:
        raise fail(func, name, per(what, expected, "column"), f"{cols} columns")
