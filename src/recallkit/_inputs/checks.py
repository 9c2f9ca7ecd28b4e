"""Validation at the public boundary: small helpers that raise ``ValueError`` naming the argument.

Messages follow scikit-learn's parameter validation: which parameter, of which function, what it
must be, and what it got. The checks that need numpy alone live in
[`recallkit._inputs.values`][recallkit._inputs.values] (for the modules that must not import
torch) and are re-exported here, so that this module is the one toolbox to import.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from recallkit._inputs.pinned import read_mapped
from recallkit._inputs.values import (
    as_values,
    check_batch,
    check_choice,
    check_columns,
    check_length,
    check_positive_int,
    check_rows,
    check_seed,
    check_unit_interval,
    per,
)
from recallkit.exceptions import ParameterError, Text, fail
from recallkit.options import SIMILARITIES as METRICS
from recallkit.options import check_device

__all__ = [
    "METRICS",
    "ParameterError",
    "as_values",
    "check_batch",
    "check_choice",
    "check_columns",
    "check_device",
    "check_length",
    "check_positive_int",
    "check_rows",
    "check_seed",
    "check_unit_interval",
    "fail",
    "per",
]


def as_embeddings(x: Any, name: str, func: str, *, ndim: int = 2) -> torch.Tensor:
    """Return ``x`` as an ``ndim``-D floating torch tensor (no copy where possible), or raise.

    Accepts dense torch tensors and numpy arrays of real numbers, and nested sequences of
    numbers. A memory-mapped array is read whole from the file it maps, never through the
    mapping ([`recallkit._inputs.pinned.read_mapped`][recallkit._inputs.pinned.read_mapped]): a file
    truncated or rewritten meanwhile is
    a ``ValueError``, not a ``SIGBUS``. Integer arrays are converted to float64
    (exact up to 2**53; larger magnitudes raise); numpy float types wider
    than float64 (``np.longdouble``) are converted to float64, the widest type the scores are
    computed in (a value beyond the float64 range raises); big-endian arrays are converted to
    the native byte order. Empty, wrongly shaped, NaN and infinite inputs raise ``ValueError``,
    and so do object, string, bytes, boolean, complex and date arrays, sparse, quantized and
    meta-device tensors. ``ndim`` is 2 for ``(n, d)`` embeddings (the default) and 3 for ``g``
    candidates per query, ``(n, g, d)``.
    """
    if isinstance(x, torch.Tensor):
        tensor = _dense_tensor(x, name, func)
    elif isinstance(x, np.ndarray):
        if x.dtype.kind not in "iuf":  # refused before a memory map is read
            real_array(np.empty(0, dtype=x.dtype), name, func)
        x = read_mapped(x, func, name)
        tensor = torch.from_numpy(np.ascontiguousarray(real_array(x, name, func)))
    elif isinstance(x, Sequence) and not isinstance(x, str | bytes):
        try:
            array = np.asarray(x)
        except (TypeError, ValueError):
            raise fail(func, name, "a rectangular array of numbers", "ragged rows") from None
        if array.dtype.kind not in "iuf":
            got = "ragged rows or values that are not numbers"
            if array.dtype.kind in "bcUS":
                got = f"values of dtype {array.dtype}"
            raise fail(func, name, "a rectangular array of real numbers", got)
        tensor = torch.from_numpy(array.astype(np.float64))
    else:
        raise fail(func, name, "a torch.Tensor, numpy.ndarray or nested sequence", type(x).__name__)
    if tensor.ndim != ndim:
        shape = "(n, d)" if ndim == 2 else "(n, g, d)"
        raise fail(func, name, f"a {ndim}-D array of shape {shape}", f"shape {tuple(tensor.shape)}")
    if tensor.shape[0] == 0:
        raise fail(func, name, "non-empty", "0 rows")
    if tensor.shape[-1] == 0:
        raise fail(func, name, "of positive dimension", "d = 0")
    if 0 in tensor.shape:
        raise fail(func, name, "non-empty", f"shape {tuple(tensor.shape)}")
    if tensor.is_complex() or tensor.dtype == torch.bool:
        raise fail(func, name, "real-valued", tensor.dtype)
    if not tensor.is_floating_point():
        if tensor.dtype in (torch.uint16, torch.uint32, torch.uint64):  # few torch kernels
            wide = real_array(tensor.cpu().numpy(), name, func)
            return torch.from_numpy(wide).to(tensor.device)
        _check_integer_range(int(tensor.min()), int(tensor.max()), name, func)
        tensor = tensor.to(torch.float64)
    return tensor


def _check_integer_range(low: int, high: int, name: str, func: str) -> None:
    """Integers are scored exactly in float64, which holds every integer up to 2**53."""
    if max(-low, high) > 2**53:
        raise fail(func, name, "integers of magnitude at most 2**53", "a larger value")


def _dense_tensor(x: torch.Tensor, name: str, func: str) -> torch.Tensor:
    """``x`` detached, if it is a dense tensor holding data."""
    if x.layout != torch.strided:
        raise fail(func, name, "a dense tensor", f"a tensor of layout {x.layout}")
    if x.device.type == "meta":
        raise fail(func, name, "a tensor holding data", "a tensor on the meta device")
    if x.is_quantized:
        raise fail(func, name, "a tensor of real numbers", f"a quantized tensor ({x.dtype})")
    return x.detach()


def real_array(x: np.ndarray, name: str, func: str) -> np.ndarray:
    """``x`` as a numpy array torch can take: native byte order, float16/32/64.

    Integers become float64 (a magnitude above 2**53 raises); wider floats (``np.longdouble``)
    become float64 (a value beyond its range raises); object,
    string, bytes, boolean, complex, record and date arrays raise. Usable on each block of a
    streamed reference.
    """
    kind = x.dtype.kind
    if kind in "bc":
        raise fail(func, name, "real-valued", f"dtype {x.dtype}")
    if kind not in "iuf":
        raise fail(func, name, "an array of real numbers", f"dtype {x.dtype}")
    if kind in "iu":
        if x.size:
            _check_integer_range(int(x.min()), int(x.max()), name, func)
        return x.astype(np.float64)
    if kind == "f" and x.dtype.type not in (np.float16, np.float32, np.float64):
        with np.errstate(over="ignore"):
            wide = x.astype(np.float64)
        overflow = np.isfinite(x) & ~np.isfinite(wide)
        if overflow.any():
            row = int(np.argwhere(overflow)[0][0])
            raise fail(
                func, name, "within the float64 range", f"{x.dtype} {x[overflow][0]} in row {row}"
            )
        return wide
    if not x.dtype.isnative:
        return x.astype(x.dtype.newbyteorder("="))
    return x


def check_finite_rows(block: torch.Tensor, offset: int, name: str, func: str) -> None:
    """Raise if a row of ``block`` (rows ``offset..``) holds NaN or infinity, naming the row."""
    if not block.numel():
        return
    low, high = torch.aminmax(block, dim=1)  # one pass; NaN propagates, infinities show
    bad = ~(torch.isfinite(low) & torch.isfinite(high))
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0]) + offset
        raise fail(func, name, "finite (no NaN or infinity)", f"a non-finite value in row {row}")


def check_finite_squares(sq: torch.Tensor, offset: int, name: str, func: str) -> None:
    """[`check_finite_rows`][check_finite_rows] of float32 rows from their float64 sums of
    squares ``sq``: a sum is finite exactly when its row is (a finite float32 square is below
    2**256, a sum of fewer than 2**700 of them below float64's largest value), read in one pass
    over the rows' norms instead of their values."""
    bad = ~torch.isfinite(sq)
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0, 0]) + offset
        raise fail(func, name, "finite (no NaN or infinity)", f"a non-finite value in row {row}")


def check_zero_rows(norms: torch.Tensor, offset: int, name: str, func: str) -> None:
    """Raise if a row norm is zero: cosine similarity is undefined for a zero vector."""
    zero = norms == 0
    if bool(zero.any()):
        row = int(torch.nonzero(zero)[0, 0]) + offset
        raise fail(
            func,
            name,
            Text("non-zero rows under {m}", m=("metric", "cosine")),
            f"a zero vector in row {row}",
        )


def check_metric(metric: Any, func: str) -> str:
    """Return ``metric`` if it is one of [`METRICS`][METRICS]."""
    return check_choice(metric, METRICS, func, "metric")


def check_ks(ks: Any, func: str, name: str = "ks") -> tuple[int, ...]:
    """Return ``ks`` as a non-empty tuple of distinct positive Python ints, in the given order.

    A single integer is one K. A K given twice is refused: each K names one value of the result
    (``"recall@K"``), so a repeat would be silently dropped.
    """
    if isinstance(ks, np.ndarray | torch.Tensor) and ks.ndim == 0:
        ks = ks.item()  # a 0-d array holds one K
    elif isinstance(ks, torch.Tensor):
        ks = ks.tolist()
    if isinstance(ks, numbers.Integral) and not isinstance(ks, bool):
        ks = (ks,)
    if not isinstance(ks, Sequence | np.ndarray) or isinstance(ks, str) or len(ks) == 0:
        raise fail(func, name, "a non-empty sequence of positive integers", repr(ks))
    out = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
            raise fail(func, name, "positive integers", repr(k))
        out.append(int(k))
    repeated = [k for i, k in enumerate(out) if k in out[:i]]
    if repeated:
        raise fail(func, name, "distinct (each K once)", f"{out}, with {repeated[0]} twice")
    return tuple(out)


def as_integers(values: Any, func: str, name: str, what: str = "integers") -> np.ndarray:
    """``values`` (an array, tensor or sequence of integers) as an int64 numpy array.

    Indices and ranks are positions: like numpy indexing, floats (even integral ones such as
    ``2.0``), booleans and strings are refused rather than truncated or cast.
    """
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    if isinstance(values, np.ndarray) and values.dtype != object:
        if values.dtype.kind not in "iu":
            raise fail(func, name, what, f"dtype {values.dtype}")
        values = read_mapped(values, func, name)
        if values.dtype == np.uint64 and values.size and values.max() > np.iinfo(np.int64).max:
            raise fail(func, name, what, f"{values.max()} (beyond int64)")
        return values.astype(np.int64)
    if isinstance(values, str | bytes) or not hasattr(values, "__len__"):
        raise fail(func, name, f"a sequence or array of {what}", type(values).__name__)
    flat = values.reshape(-1) if isinstance(values, np.ndarray) else values
    for v in flat:
        if isinstance(v, bool | np.bool_) or not isinstance(v, numbers.Integral):
            raise fail(func, name, what, f"{v!r} ({type(v).__name__})")
    try:
        return np.asarray(values, dtype=np.int64)
    except OverflowError:
        raise fail(func, name, what, "a value beyond int64") from None


def as_scores(scores: Any, func: str, name: str = "scores") -> np.ndarray:
    """A non-empty 2-D numpy array of similarities (higher is better); NaN is refused.

    Float64 stays float64; every other real type becomes float32 (float16 and bfloat16 exactly).
    """
    if isinstance(scores, torch.Tensor):
        tensor = scores.detach().cpu()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.to(torch.float32)
        scores = tensor.numpy()
    if not isinstance(scores, np.ndarray):
        raise fail(func, name, "a torch.Tensor or numpy.ndarray", type(scores).__name__)
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise fail(func, name, "a non-empty 2-D array", f"shape {scores.shape}")
    if scores.dtype.kind not in "fiu":
        raise fail(func, name, "real-valued", scores.dtype)
    scores = read_mapped(scores, func, name)
    if scores.dtype != np.float64:
        scores = scores.astype(np.float32)
    if np.isnan(scores).any():
        row = int(np.nonzero(np.isnan(scores).any(axis=1))[0][0])
        raise fail(func, name, "free of NaN", f"NaN in row {row}")
    return scores


def check_block_shape(block: np.ndarray, rows: int, dim: int, name: str, func: str) -> None:
    """Raise unless a block read from a streamed reference has ``rows`` rows of ``dim``."""
    if block.ndim != 2 or block.shape != (rows, dim):
        raise fail(
            func,
            name,
            f"rows of dimension {dim} as its shape says",
            f"a block of shape {block.shape} where ({rows}, {dim}) was expected",
        )


def like_input(given: Any, *values: Any) -> Any:
    """``values`` in the kind of array ``given`` is: numpy arrays for anything but a torch
    tensor, torch tensors on ``given``'s device for a tensor (numpy in, numpy out; torch in,
    torch out). One value is returned as itself, several as a tuple."""
    out = []
    for value in values:
        if isinstance(given, torch.Tensor):
            tensor = (
                value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
            )
            out.append(tensor.to(given.device))
        else:
            out.append(value.cpu().numpy() if isinstance(value, torch.Tensor) else value)
    return out[0] if len(out) == 1 else tuple(out)
