"""Validation at the public boundary: small helpers that raise ``ValueError`` naming the argument.

Messages follow scikit-learn's parameter validation: which parameter, of which function, what it
must be, and what it got.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

METRICS = ("cosine", "dot", "euclidean")


def fail(func: str, name: str, requirement: str, got: Any) -> ValueError:
    """Build the library's standard error for parameter ``name`` of ``func``."""
    return ValueError(f"The '{name}' parameter of {func} must be {requirement}. Got {got}.")


def as_embeddings(x: Any, name: str, func: str) -> torch.Tensor:
    """Return ``x`` as a 2-D floating torch tensor (no copy where possible), rejecting bad input.

    Accepts torch tensors and numpy arrays (memory-mapped arrays too). Integer arrays are
    converted to float64 (exact up to 2**53). Empty, non-2-D, NaN and infinite inputs raise
    ``ValueError``.
    """
    if isinstance(x, torch.Tensor):
        tensor = x.detach()
    elif isinstance(x, np.ndarray):
        tensor = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, Sequence) and not isinstance(x, str):
        try:
            tensor = torch.from_numpy(np.asarray(x, dtype=np.float64))
        except (TypeError, ValueError):
            raise fail(func, name, "a rectangular array of numbers", "ragged rows") from None
    else:
        raise fail(func, name, "a torch.Tensor, numpy.ndarray or nested sequence", type(x).__name__)
    if tensor.ndim != 2:
        raise fail(func, name, "a 2-D array of shape (n, d)", f"shape {tuple(tensor.shape)}")
    if tensor.shape[0] == 0:
        raise fail(func, name, "non-empty", "0 rows")
    if tensor.shape[1] == 0:
        raise fail(func, name, "of positive dimension", "d = 0")
    if tensor.is_complex() or tensor.dtype == torch.bool:
        raise fail(func, name, "real-valued", tensor.dtype)
    if not tensor.is_floating_point():
        # Integers are scored exactly in float64, which holds every integer up to 2**53.
        if tensor.numel() and int(tensor.abs().max()) > 2**53:
            raise fail(func, name, "integers of magnitude at most 2**53", "a larger value")
        tensor = tensor.to(torch.float64)
    return tensor


def check_finite_rows(block: torch.Tensor, offset: int, name: str, func: str) -> None:
    """Raise if a row of ``block`` (rows ``offset..``) holds NaN or infinity, naming the row."""
    bad = ~torch.isfinite(block).all(dim=1)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0]) + offset
        raise fail(func, name, "finite (no NaN or infinity)", f"a non-finite value in row {row}")


def check_zero_rows(norms: torch.Tensor, offset: int, name: str, func: str) -> None:
    """Raise if a row norm is zero: cosine similarity is undefined for a zero vector."""
    zero = norms == 0
    if bool(zero.any()):
        row = int(torch.nonzero(zero)[0, 0]) + offset
        raise fail(func, name, "non-zero rows under metric='cosine'", f"a zero vector in row {row}")


def check_metric(metric: str, func: str) -> str:
    """Return ``metric`` if it is one of :data:`METRICS`."""
    if metric not in METRICS:
        raise fail(func, "metric", f"one of {METRICS}", repr(metric))
    return metric


def check_ks(ks: Any, func: str, name: str = "ks") -> tuple[int, ...]:
    """Return ``ks`` as a non-empty tuple of positive Python ints."""
    if isinstance(ks, numbers.Integral) and not isinstance(ks, bool):
        ks = (ks,)
    if not isinstance(ks, Sequence | np.ndarray) or isinstance(ks, str) or len(ks) == 0:
        raise fail(func, name, "a non-empty sequence of positive integers", repr(ks))
    out = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
            raise fail(func, name, "positive integers", repr(k))
        out.append(int(k))
    return tuple(out)


def check_positive_int(value: Any, func: str, name: str) -> int:
    """Return ``value`` as an int if it is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise fail(func, name, "a positive integer", repr(value))
    return int(value)


def check_length(values: Any, expected: int, name: str, func: str, of: str) -> None:
    """Raise if ``len(values)`` differs from ``expected`` (the number of rows of ``of``)."""
    if len(values) != expected:
        raise fail(func, name, f"of length {expected} (one per row of '{of}')", len(values))
