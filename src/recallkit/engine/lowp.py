"""Low-precision (int8, bfloat16) filter tiles for the CPU, with rigorous per-row error bounds.

The CPU engine's filter is a GEMM over the filter rows (unit rows for cosine; rows scaled by a
power of two for dot and euclidean) in tiles ``A (<=768, w) @ B (<=768, w).T``; only items
within the filter's error bound of a decision are scored again. A tile can be computed in low
precision first: the items its wider window cannot rule out are scored in float32 at once (the
float32 dot product of the same filter rows), and float32's window in float64 (a cascade). This
module provides the first stage:

* [`prepare`][prepare] turns a side's float32 filter rows ``x`` (``n × w``) into an
  [`Int8Side`][Int8Side] (``x̂_i = s_i q_i``, integer codes and a float32 scale per row) or a
  [`BF16Side`][BF16Side], with per-row upper bounds on ``‖x‖``, ``‖x̂‖`` and ``‖x - x̂‖``; each row is
  prepared from its own values alone. ``"int8"`` codes lie in ``[-127, 127]``; ``"int7"`` codes in
  ``[-63, 63]``, stored as ``uint8`` with a zero point of 64.
* a [`Kernel`][Kernel] multiplies two sides: ONNX Runtime's ``MatMulIntegerToFloat`` (``int7``
  rows against ``int8`` rows, exact int32 sums, the ``int8`` side's scale applied in its output
  stage), ``torch._int_mm`` (``int8`` against ``int8``) or torch's ``bfloat16`` matmul.
  [`tile_product`][tile_product] writes ``x̂_i · ŷ_j`` into a float32 buffer (with ``scaled=False``,
  ``x̂_i · ŷ_j / s_i``: the engine's tile kernels apply the row scale themselves).
* [`row_bounds`][row_bounds] gives ``eps_i >= max_j |tile[i, j] - x_i · y_j|``, where ``x_i · y_j``
  is the exact real dot product of the float32 filter rows.
* [`usable`][usable] checks a kernel on this machine before it is trusted (below), and
  [`worth_timing`][worth_timing] says which precisions the CPU has instructions for.

Saturation. Every fast int8 kernel for x86 without VNNI (ONNX Runtime's and oneDNN's U8S8
kernels, fbgemm) multiplies with ``vpmaddubsw``, which adds each pair of adjacent ``u8 × s8``
products into a *saturating* int16: with codes of 8 bits on the unsigned side (or signed codes
shifted by 128 to make them unsigned) a pair reaches ``2 · 255 · 127 > 32767`` and the int32 sum
silently comes out wrong. The ``int7`` side's stored codes are at most 127, so no pair can
exceed ``2 · 127 · 128 = 32512`` and the sum is exact on every path (with VNNI, ``vpdpbusd``
widens to int32 and is exact at any code). [`usable`][usable] multiplies code patterns that saturate
a kernel which shifts or widens the codes in any other way, and compares with the exact integer
product; a kernel that differs in one entry is never used for that width.

Error bound. Notation per row: ``x`` the float32 filter row, ``x̂`` its low-precision value
(``s_i q_i`` for int8 and int7, the bfloat16 row for bfloat16), ``ν ≥ ‖x‖``, ``ν̂ ≥ ‖x̂‖``,
``ρ ≥ ‖x - x̂‖`` (2-norms, computed in float64 and rounded up); over the rows ``j`` of the other
side's range, ``N̂ = max_j ν̂_j`` and ``P = max_j ρ_j``; ``u = 2^-24``.

1. Representation. ``x·y - x̂·ŷ = (x - x̂)·ŷ + x·(y - ŷ)``, so by Cauchy–Schwarz
   ``|x·y - x̂·ŷ| <= ρ_x ν̂_y + ν_x ρ_y <= ρ_x N̂ + ν_x P``. The two sides may be quantised
   differently (int7 against int8): each enters with its own residual.
2. int8 product. ``v = q_x·q_y`` is an exact int32 (``|v| <= w 127²``, partial sums below
   ``w · 255 · 128``, which [`INT8_MAX_WIDTH`][INT8_MAX_WIDTH] keeps under ``2^31``). The tile value
   is ``v s_y s_x`` with at most three roundings to float32 (``u`` relative each): converting
   ``v`` (exact when ``|v| <= 2^24``), multiplying by the right side's scale (the kernel's output
   stage), and applying the row's scale, either by a float32 multiplication or by dividing a
   threshold by it in float64 and rounding the quotient outwards (a relative ``2^-53``, below
   ``u``; a quotient below float32's range rounds outwards to a subnormal or zero, which only
   widens the window). Only the row scale's multiplication may underflow (absolute error
   ``< 2^-126``): ``fl(v)`` is 0 or at least 1 and ``s_y >= 2^-100``. With
   ``|v| s_x s_y = |x̂·ŷ| <= ν̂_x N̂``: ``|tile - x̂·ŷ| <= 4u ν̂_x N̂ + 2^-125``
   ([`INT8_PRODUCT_UNITS`][INT8_PRODUCT_UNITS], [`INT8_PRODUCT_TINY`][INT8_PRODUCT_TINY]).
3. bfloat16 product. Products of bfloat16 values are exact in float32 (8-bit significands), and
   torch's CPU kernels accumulate in float32 (``aten/src/ATen/native/CPUBlas.cpp``: oneDNN with
   float32 accumulation, OpenBLAS ``sbgemm`` or the reference loop in ``opmath_t``) and round the
   result to bfloat16 (nearest even). The rounding error of any summation order of ``w`` terms
   is at most ``γ_w Σ_k |x̂_k ŷ_k| <= γ_w ν̂_x ν̂_y`` with ``γ_w = w u / (1 - w u)`` (Higham,
   *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.1 and §4.2); with flush-to-zero
   or gradual underflow each of the ``w`` products and ``w`` additions may add ``< 2^-126``. The
   output's rounding to bfloat16 adds ``2^-8 |σ| + 2^-126``. Together
   ``|tile - x̂·ŷ| <= (γ_w + 2^-8 (1 + γ_w)) ν̂_x N̂ + (w + 1) 2^-123``. Input rows have their
   bfloat16 subnormals flushed to zero at preparation (the residual covers them).
4. ``eps_i = ρ_i N̂ + ν_i P + c ν̂_i N̂ + a``, with ``(c, a) = (4u, 2^-125)`` for int8 and
   ``(γ_w + 2^-8 (1 + γ_w), (w + 1) 2^-123)`` for bfloat16, evaluated in float64 and rounded up
   ([`row_bounds`][row_bounds]). Only the other side's range enters through maxima, so a row's bound
   does not depend on the rows that share its chunk. With ``value_relative=True`` the output
   rounding is charged to the tile value instead: ``|tile - x·y| <= e_i + r |tile|``.

Scales. A row's scale is ``max|x_i| / levels`` rounded up to float32 ([`int8_scales`][int8_scales]),
so every row uses its whole code range: on unit rows the residual, and with it the window, is
about 1.4 times smaller than with the power of two just above that value, which would make every
scaling exact but leave up to half the range unused. The price is the roundings of item 2, about
``3 · 2^-24`` of the score against a window of ``10^-2``. ``x̂ = s q`` stays exact in float64
([`prepare_int8`][prepare_int8]).

Norms. A row's norm is computed as ``sqrt(Σ_k v_k²)`` in float64. Every value is zero or
between ``2^-149`` and ``2^33`` in magnitude (float32 rows below [`MAX_ABS`][MAX_ABS]; ``s q`` and
``x - s q`` are multiples of ``2^-149``, and so is the bfloat16 residual), so every square is
zero or a normal float64 and no sum over- or underflows; over any summation order the computed
root is below the true norm by a relative ``(w + 4) 2^-53`` at most, so it is multiplied by
``1 + (w + 4) 2^-52`` and moved up one float64 step.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np
import torch

from recallkit.exceptions import RecallkitError, Text

PRECISIONS = ("float32", "bfloat16", "int8")
FORMS = ("int8", "int7", "bfloat16")

UNIT = 2.0**-24
"""float32 unit roundoff."""
BF16_UNIT = 2.0**-8
"""bfloat16 unit roundoff (8-bit significand, round to nearest): ``|bf16(v) - v| <= 2^-8 |v|``."""
TINY = 2.0**-126
"""Smallest positive normal float32 (and bfloat16)."""
INT8_MAX_WIDTH = (2**31 - 1) // (255 * 128)
"""Widest rows for int8 tiles: int32 partial sums stay exact even in kernels that shift int8
codes to uint8 (``w · 255 · 128 < 2^31``; the plain bound ``w · 127² < 2^31`` is looser)."""
INT8_MIN_EXPONENT = -100
"""int8 scales are at least ``2^-100``: rows of smaller values quantise to coarse codes (their
residual bounds account for it) so that the float32 scalings stay exact or underflow once."""
MAX_ABS = 2.0**32
"""Filter values a low-precision side holds: finite and below this in magnitude (the engine's
filter rows are below 1 except for rows its scaling caps; those run in float32)."""
INT7_ZERO_POINT = 64
"""``int7`` codes ``q`` in ``[-63, 63]`` are stored as ``q + 64`` (``uint8``, at most 127)."""
LEVELS = {"int8": 127, "int7": 63}
INT8_PRODUCT_UNITS = 4
"""An int8 tile value carries at most three float32 roundings relative to ``x̂·ŷ`` (the int32
sum's conversion, the right side's scale, the row scale or a threshold divided by it: module
docstring, item 2); the bound charges four units."""
INT8_PRODUCT_TINY = 2.0**-125
"""The absolute part of an int8 tile value's error: the row scale's multiplication may underflow
(below ``2^-126``); the conversion and the right side's scale cannot (``|v| >= 1`` or ``v = 0``,
``s_y >= 2^-100``)."""

_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
# ONNX Runtime's int8 kernels: AVX2 (pairs of u8 × s8 products, or u8 × u8 widened), AVX-VNNI and
# AVX512-VNNI on x86; the dot-product instructions on Arm.
_ORT_FLAGS = ("avx2", "asimddp", "i8mm")


# ---------------------------------------------------------------------------------------------
# CPU capabilities


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (Linux; empty elsewhere or if unreadable),
    plus ``"torch:<capability>"`` from
    [`torch.backends.cpu.get_cpu_capability`][torch.backends.cpu.get_cpu_capability] (the vector ISA
    torch's own kernels use, e.g. ``"torch:avx2"``)."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() in ("flags", "features"):
                    flags.update(value.split())
    except OSError:
        pass
    try:
        flags.add("torch:" + torch.backends.cpu.get_cpu_capability().lower())
    except Exception:  # pragma: no cover - very old torch
        pass
    return frozenset(flags)


def worth_timing(flags: frozenset[str] | None = None) -> tuple[str, ...]:
    """The precisions worth timing on this CPU: always ``"float32"``; ``"bfloat16"`` with
    AVX512-BF16 or AMX-BF16; ``"int8"`` where an int8 kernel has the instructions it needs
    ([`kernels_for`][kernels_for]: ONNX Runtime with AVX2 or Arm's dot products, torch with VNNI or
    AMX).

    Without them the low-precision products run far below the float32 rate. The flags only rule
    precisions out: the engine chooses by timing real tiles, since a flag says nothing about the
    kernel a library picks."""
    flags = cpu_flags() if flags is None else flags
    out = ["float32"]
    if kernels_for("bfloat16", flags):
        out.append("bfloat16")
    if kernels_for("int8", flags):
        out.append("int8")
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Prepared sides


@dataclass(frozen=True, eq=False)
class _Side:
    norm: np.ndarray
    """``(n,)`` float64, ``>= ‖x̂_i‖``."""
    residual: np.ndarray
    """``(n,)`` float64, ``>= ‖x_i - x̂_i‖``."""
    source_norm: np.ndarray
    """``(n,)`` float64, ``>= ‖x_i‖``."""

    @property
    def n(self) -> int:
        return int(self.norm.shape[0])


@dataclass(frozen=True, eq=False)
class Int8Side(_Side):
    """A side quantised with a scale per row: ``x̂_i = s_i q_i``, ``|q_i| <= levels``
    (127 for ``"int8"``, 63 for ``"int7"``), stored as ``q + zero_point``."""

    codes: torch.Tensor
    """``(n, w)`` contiguous: ``int8`` codes (``"int8"``) or ``uint8`` codes plus 64
    (``"int7"``)."""
    scale: np.ndarray
    """``(n,)`` float64 holding float32 values: ``max|x_i| / levels`` rounded up to float32, at
    least ``2^-100`` ([`int8_scales`][int8_scales])."""
    scale32: np.ndarray
    """``scale`` as float32 (exact)."""
    form: str = "int8"
    cache: dict = field(default_factory=dict, repr=False)

    precision = "int8"

    @property
    def w(self) -> int:
        return int(self.codes.shape[1])

    @property
    def zero_point(self) -> int:
        return INT7_ZERO_POINT if self.form == "int7" else 0

    def values(self) -> np.ndarray:
        """The integer codes ``q`` (int64)."""
        return self.codes.numpy().astype(np.int64) - self.zero_point

    def dequantised(self) -> np.ndarray:
        """``s_i q_i`` in float64 (exact)."""
        return self.values().astype(np.float64) * self.scale[:, None]

    def columns(self, start: int, stop: int) -> np.ndarray:
        """Codes of rows ``start:stop`` transposed, ``(w, stop - start)`` contiguous: the right
        operand of a GEMM (kept, one copy per range)."""
        key = (start, stop)
        found = self.cache.get(key)
        if found is None:
            found = np.ascontiguousarray(self.codes.numpy()[start:stop].T)
            self.cache[key] = found
        return found


@dataclass(frozen=True, eq=False)
class BF16Side(_Side):
    """A side rounded to bfloat16 (nearest even; subnormal results flushed to zero)."""

    rows: torch.Tensor
    """``(n, w)`` ``torch.bfloat16``, contiguous."""

    precision = "bfloat16"
    form = "bfloat16"

    @property
    def w(self) -> int:
        return int(self.rows.shape[1])

    @property
    def scale32(self) -> np.ndarray:
        return np.ones(self.n, np.float32)

    def dequantised(self) -> np.ndarray:
        """The bfloat16 rows in float64 (exact)."""
        return self.rows.float().numpy().astype(np.float64)


Side = Int8Side | BF16Side


def _as_rows(x: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    x = np.ascontiguousarray(x)
    if x.dtype != np.float32 or x.ndim != 2 or x.shape[1] < 1:
        raise ValueError(f"expected float32 rows (n, w >= 1), got {x.dtype} {x.shape}")
    return x


def holds(x: np.ndarray | torch.Tensor) -> bool:
    """Whether every value of ``x`` is finite and below [`MAX_ABS`][MAX_ABS] in magnitude: rows a
    low-precision side can hold (the engine runs other filter rows in float32)."""
    if isinstance(x, torch.Tensor):
        if x.numel() == 0:
            return True
        low, high = torch.aminmax(x)  # nan propagates and compares False
        return bool(-MAX_ABS < float(low) and float(high) < MAX_ABS)
    return bool(x.size == 0 or (-MAX_ABS < x.min() and x.max() < MAX_ABS))


def _check_range(largest: np.ndarray) -> None:
    """Raise unless every row's largest magnitude (``largest``, from the preparing kernel; a
    non-finite value's is above [`MAX_ABS`][MAX_ABS]) is below [`MAX_ABS`][MAX_ABS]:
    [`holds`][holds]."""
    if largest.size and not largest.max() < MAX_ABS:
        raise ValueError(
            "low-precision rows must be finite and below 2^32 in magnitude (lowp.holds); "
            "the engine runs other rows in float32"
        )


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _norm_up(acc, w):  # pragma: no cover - compiled
    """The rounded-up norm of a row of ``w`` values whose squares sum to ``acc`` (module
    docstring, "Norms")."""
    if acc == 0.0:
        return 0.0
    return np.nextafter(math.sqrt(acc) * (1.0 + (w + 4) * 2.0**-52), np.inf)


@numba.njit(nogil=True, cache=True, boundscheck=False, fastmath={"reassoc"})
def _square_sums(x, h):  # pragma: no cover - compiled
    """The sums of the squares of ``x``, ``h`` and ``x - h`` in float64, in any order (SIMD):
    [`_norm_up`][_norm_up]'s margin bounds the rounding of any order of the sum. (Its own operations
    stay outside this function's ``fastmath``.)"""
    ax = 0.0
    aq = 0.0
    ar = 0.0
    for k in range(x.shape[0]):
        v = np.float64(x[k])
        d = np.float64(h[k])
        ax += v * v
        aq += d * d
        ar += (v - d) * (v - d)
    return ax, aq, ar


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _side_norms(x, h, i, source, norm, residual):  # pragma: no cover - compiled
    """Row ``i``'s rounded-up norms of ``x``, of its low-precision value ``x̂ = h`` and of
    ``x - x̂`` (each exact in float64)."""
    w = x.shape[0]
    ax, aq, ar = _square_sums(x, h)
    source[i] = _norm_up(ax, w)
    norm[i] = _norm_up(aq, w)
    residual[i] = _norm_up(ar, w)


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def largest_magnitude(u):  # pragma: no cover - compiled
    """The largest magnitude in a row of float32 (``u``: its ``uint32`` bit patterns) or float64
    values (``uint64`` patterns), in float64 (exact): the largest pattern with its sign bit
    shifted out (non-negative floats order as their patterns; a non-finite value's is above
    every finite one's). An integer reduction, which the compiler vectorises; a float ``max``
    with its NaN rules is not."""
    word = u.dtype.type
    m = word(0)
    for k in range(u.shape[0]):
        m = max(m, word(u[k] << word(1)))  # back to the pattern's width: the sign bit drops
    b = np.int64(m >> word(1))
    frac, bias = (23, 150) if u.itemsize == 4 else (52, 1075)
    e = b >> frac
    f = np.float64(b & ((np.int64(1) << frac) - 1))
    if e == 0:  # subnormal
        return math.ldexp(f, 1 - bias)
    return math.ldexp(f + math.ldexp(1.0, frac), e - bias)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _scale_of(m, levels):  # pragma: no cover - compiled
    """The scale of a row whose largest magnitude is ``m``: the smallest float32 value ``s`` with
    ``m <= levels s`` (``levels s`` is exact in float64), at least ``2^-100``, so that
    ``|rint(x_k / s)| <= levels`` and the row's largest value takes the largest code."""
    s = math.ldexp(1.0, INT8_MIN_EXPONENT)
    if m > 0.0:
        t = np.float32(m / levels)
        if np.float64(t) * levels < m:
            t = np.nextafter(t, np.float32(np.inf))
        if np.float64(t) > s:
            s = np.float64(t)
    return s


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _quantise(
    x, xu, levels, offset, held, codes, scale, norm, residual, source, largest
):  # pragma: no cover - compiled
    """Per row: the largest magnitude (``xu``: ``x``'s bit patterns), the scale
    ([`_scale_of`][_scale_of]), the codes ``rint(x / s) + offset`` and the rounded-up norms of
    ``x``, ``s q`` and ``x - s q`` (all exact in float64; ``held``: a row of ``s q`` per thread)."""
    n, w = x.shape
    for i in numba.prange(n):
        t = numba.get_thread_id()
        m = largest_magnitude(xu[i])
        largest[i] = m
        s = _scale_of(m, levels)
        scale[i] = s
        for k in range(w):
            q = np.rint(np.float64(x[i, k]) / s)
            codes[i, k] = q + offset
            held[t, k] = q * s
        _side_norms(x[i], held[t], i, source, norm, residual)


def int8_scales(x: np.ndarray, levels: int = 127) -> np.ndarray:
    """Per row, the scale [`prepare_int8`][prepare_int8] uses (float64 holding float32 values):
    ``max|x_i| / levels`` rounded up to float32, at least ``2^-100``."""
    m = np.abs(np.asarray(x, np.float32)).max(axis=1).astype(np.float64)
    t = (m / levels).astype(np.float32)  # [`_scale_of`][_scale_of], over all rows at once
    t = np.where(t.astype(np.float64) * levels < m, np.nextafter(t, np.float32(np.inf)), t)
    return np.maximum(t.astype(np.float64), 2.0**INT8_MIN_EXPONENT)


def prepare_int8(x: np.ndarray | torch.Tensor, form: str = "int8") -> Int8Side:
    """Quantise float32 filter rows ``(n, w)`` with a scale per row.

    ``q_i = rint(x_i / s_i)`` (nearest even) with the scale of [`int8_scales`][int8_scales] (a
    float32 value), so ``|q_i| <= levels`` and ``s_i q_i`` is exact in float64 (a 24-bit by 7-bit
    product). The residual ``x_ik - s_i q_ik`` is exact in float64: it is ``x_ik`` where
    ``q_ik = 0``; elsewhere ``|x_ik| >= s_i / 2``, so both terms are multiples of
    ``2^-24 2^e`` (``2^e <= s_i``) and the residual, at most ``s_i / 2``, has 24 bits. ``form``
    ``"int8"`` (``int8`` codes in ``[-127, 127]``) or ``"int7"`` (``[-63, 63]``, stored plus 64
    as ``uint8``).
    """
    levels = LEVELS[form]
    x = _as_rows(x)
    n, w = x.shape
    codes = np.empty((n, w), np.uint8 if form == "int7" else np.int8)
    scale, norm, residual, source, largest = (np.empty(n) for _ in range(5))
    offset = INT7_ZERO_POINT if form == "int7" else 0
    held = np.empty((numba.config.NUMBA_NUM_THREADS, w))  # any thread's id fits
    _quantise(
        x, x.view(np.uint32), levels, offset, held, codes, scale, norm, residual, source, largest
    )
    _check_range(largest)
    return Int8Side(
        norm=norm,
        residual=residual,
        source_norm=source,
        codes=torch.from_numpy(codes),
        scale=scale,
        scale32=scale.astype(np.float32),
        form=form,
    )


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _round_bf16(x, u, held, values, bits, norm, residual, source, largest):  # pragma: no cover
    """Per row: the largest magnitude; the float32 values ``x`` (bit patterns ``u``) rounded to
    bfloat16, nearest with ties to even, results below ``2^-126`` in magnitude (bfloat16
    subnormals) ``+0``, as ``uint16`` patterns; and the rounded-up norms of ``x``, ``x̂`` and
    ``x - x̂`` (all exact in float64). ``held``/``values``: one row of ``x̂`` per thread, as bits
    and as float32 (one buffer)."""
    n, w = x.shape
    for i in numba.prange(n):
        t = numba.get_thread_id()
        largest[i] = largest_magnitude(u[i])
        for k in range(w):
            b = np.int64(u[i, k])
            r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
            if (r & 0x7F80) == 0:
                r = 0
            bits[i, k] = r
            held[t, k] = np.uint32(r) << np.uint32(16)
        _side_norms(x[i], values[t], i, source, norm, residual)


def prepare_bf16(x: np.ndarray | torch.Tensor) -> BF16Side:
    """Round float32 filter rows ``(n, w)`` to bfloat16 ([`_round_bf16`][_round_bf16]).

    The residual ``x - x̂`` is exact in float32: ``x̂`` is within a factor 2 of ``x`` (Sterbenz)
    or zero.
    """
    x = _as_rows(x)
    n, w = x.shape
    bits = np.empty((n, w), np.uint16)
    norm, residual, source, largest = (np.empty(n) for _ in range(4))
    held = np.empty((numba.config.NUMBA_NUM_THREADS, w), np.uint32)  # any thread's id fits
    _round_bf16(
        x, x.view(np.uint32), held, held.view(np.float32), bits, norm, residual, source, largest
    )
    _check_range(largest)
    rows = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    return BF16Side(norm=norm, residual=residual, source_norm=source, rows=rows)


def prepare(x: np.ndarray | torch.Tensor, form: str) -> Side:
    """A side's float32 filter rows prepared as ``form`` (``"int8"``, ``"int7"`` or
    ``"bfloat16"``)."""
    if form in LEVELS:
        return prepare_int8(x, form)
    if form == "bfloat16":
        return prepare_bf16(x)
    raise ValueError(f"no low-precision side for {form!r}")


# ---------------------------------------------------------------------------------------------
# Kernels

_work = threading.local()


def _workspace(dtype: Any, rows: int, cols: int) -> Any:
    """A per-thread contiguous ``(rows, cols)`` scratch buffer (a tensor for a torch dtype, else
    an array), reused across tiles."""
    key = f"buf_{dtype}"
    buf = getattr(_work, key, None)
    size = rows * cols
    if buf is None or len(buf) < size:
        if isinstance(dtype, torch.dtype):
            buf = torch.empty(max(size, 1), dtype=dtype)
        else:
            buf = np.empty(max(size, 1), dtype)
        setattr(_work, key, buf)
    return buf[:size].reshape(rows, cols)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _scale_columns(c, sb, out):  # pragma: no cover - compiled
    """``out[i, j] = float32(c[i, j]) * sb[j]`` (two roundings to float32: module docstring,
    item 2)."""
    for i in range(c.shape[0]):
        for j in range(c.shape[1]):
            out[i, j] = np.float32(c[i, j]) * sb[j]


class Kernel:
    """A low-precision GEMM: ``product(a, b, out, a0, a1, b0, b1)`` writes
    ``x̂_i · ŷ_j / s_i`` (rows ``a0:a1`` of ``a``, ``b0:b1`` of ``b``) into the contiguous float32
    ``out``; ``a_form``/``b_form`` are the sides it multiplies."""

    name = "kernel"
    precision = "int8"
    a_form = "int8"
    b_form = "int8"
    flags: tuple[str, ...] = ()

    def available(self) -> str | None:
        """``None`` where the kernel can run here, else why not."""
        return None

    def product(self, a: Side, b: Side, out: np.ndarray, a0: int, a1: int, b0: int, b1: int):
        raise NotImplementedError


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: int | bytes | str) -> bytes:
    """One protobuf field: a varint (``int``) or a length-delimited value."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _onnx_matmul(zero_point: int = INT7_ZERO_POINT) -> bytes:
    """A one-node ONNX model, serialised: ``Y = MatMulIntegerToFloat(A, B, 1, b_scale, z)``
    (``com.microsoft`` domain) with ``A`` ``uint8 [n, w]``, ``B`` ``int8 [w, m]``, ``b_scale``
    ``float [m]``, ``Y`` ``float [n, m]``: ``Y = (A - z) B · b_scale``, ``z = zero_point``.

    Written with the field numbers of ``onnx/onnx.proto`` (ModelProto, GraphProto, NodeProto,
    TensorProto, ValueInfoProto, TypeProto) so that the ``onnx`` package is not needed; ONNX
    Runtime validates the model when the session is created."""
    uint8, int8, float32 = 2, 3, 1  # TensorProto.DataType

    def tensor(name: str, elem: int, dims: list[int | str]) -> bytes:
        shape = b"".join(
            _field(1, _field(1, d) if isinstance(d, int) else _field(2, d)) for d in dims
        )
        return _field(1, name) + _field(2, _field(1, _field(1, elem) + _field(2, shape)))

    def constant(name: str, elem: int, raw: bytes) -> bytes:
        return _field(2, elem) + _field(8, name) + _field(9, raw)

    node = b"".join(_field(1, n) for n in ("A", "B", "a_scale", "b_scale", "a_zero"))
    node += _field(2, "Y") + _field(4, "MatMulIntegerToFloat") + _field(7, "com.microsoft")
    graph = (
        _field(1, node)
        + _field(2, "recallkit_int8_tile")
        + _field(5, constant("a_scale", float32, np.float32(1.0).tobytes()))
        + _field(5, constant("a_zero", uint8, bytes([zero_point])))
        + _field(11, tensor("A", uint8, ["n", "w"]))
        + _field(11, tensor("B", int8, ["w", "m"]))
        + _field(11, tensor("b_scale", float32, ["m"]))
        + _field(12, tensor("Y", float32, ["n", "m"]))
    )
    opsets = _field(8, _field(1, "") + _field(2, 13))
    opsets += _field(8, _field(1, "com.microsoft") + _field(2, 1))
    return _field(1, 8) + _field(2, "recallkit") + opsets + _field(7, graph)


class OnnxInt8(Kernel):
    """ONNX Runtime's ``MatMulIntegerToFloat``: ``int7`` rows (``uint8``, zero point 64)
    against ``int8`` rows, exact int32 sums (MLAS's U8S8 kernels), the right side's scale applied
    in the output stage. One session, one thread (``intra_op_num_threads = 1``, no spinning): it
    runs in the calling worker thread; each thread binds its own inputs and output buffer."""

    name = "onnxruntime"
    a_form = "int7"
    b_form = "int8"
    flags = _ORT_FLAGS
    zero_point = INT7_ZERO_POINT

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.session: Any = None
        self.local = threading.local()

    def available(self) -> str | None:
        try:
            import onnxruntime  # noqa: F401
        except ModuleNotFoundError as error:
            if error.name == "onnxruntime":
                return "onnxruntime is not installed"
            return f"onnxruntime cannot be imported: {error}"
        except (ImportError, OSError, RuntimeError) as error:  # a broken install
            return f"onnxruntime cannot be imported: {type(error).__name__}: {error}"
        return None

    def _session(self) -> Any:
        with self.lock:
            if self.session is None:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.intra_op_num_threads = 1
                options.inter_op_num_threads = 1
                options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                options.log_severity_level = 3
                options.enable_cpu_mem_arena = False  # no memory kept between tiles
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                options.add_session_config_entry("session.inter_op.allow_spinning", "0")
                self.session = ort.InferenceSession(
                    _onnx_matmul(self.zero_point), options, providers=["CPUExecutionProvider"]
                )
            return self.session

    def product(self, a, b, out, a0, a1, b0, b1):
        session = self._session()
        binding = getattr(self.local, "binding", None)
        if binding is None:
            binding = self.local.binding = session.io_binding()
        binding.bind_cpu_input("A", a.codes.numpy()[a0:a1])
        binding.bind_cpu_input("B", b.columns(b0, b1))
        binding.bind_cpu_input("b_scale", np.ascontiguousarray(b.scale32[b0:b1]))
        binding.bind_output("Y", "cpu", 0, np.float32, out.shape, out.ctypes.data)
        session.run_with_iobinding(binding)


class TorchInt8(Kernel):
    """``torch._int_mm`` (oneDNN's s8·s8→s32 where AVX512-VNNI or AMX is present, an exact
    int32 loop elsewhere), then the right side's scale."""

    name = "torch-int8"
    flags = _VNNI_FLAGS

    def product(self, a, b, out, a0, a1, b0, b1):
        c = _workspace(torch.int32, a1 - a0, b1 - b0)
        torch._int_mm(a.codes[a0:a1], b.codes[b0:b1].T, out=c)
        _scale_columns(c.numpy(), b.scale32[b0:b1], out)


class TorchBF16(Kernel):
    """torch's CPU ``bfloat16 @ bfloat16.T`` (float32 accumulation, bfloat16 output)."""

    name = "torch-bfloat16"
    precision = "bfloat16"
    a_form = b_form = "bfloat16"
    flags = _BF16_FLAGS

    def product(self, a, b, out, a0, a1, b0, b1):
        if out.dtype == np.uint16:  # the bfloat16 results' bits
            torch.mm(a.rows[a0:a1], b.rows[b0:b1].T, out=torch.from_numpy(out).view(torch.bfloat16))
            return
        t = _workspace(torch.bfloat16, a1 - a0, b1 - b0)
        torch.mm(a.rows[a0:a1], b.rows[b0:b1].T, out=t)
        torch.from_numpy(out).copy_(t)


KERNELS: dict[str, Kernel] = {k.name: k for k in (OnnxInt8(), TorchInt8(), TorchBF16())}
#: This module's numba kernels, by name
#: ([`recallkit.engine.cpu.first_compile`][recallkit.engine.cpu.first_compile]).
NUMBA_KERNELS = {"quantise": _quantise, "round_bf16": _round_bf16, "scale_columns": _scale_columns}


def kernels_for(precision: str, flags: frozenset[str] | None = None) -> tuple[Kernel, ...]:
    """The kernels of ``precision`` that can run here and whose instructions the CPU has."""
    flags = cpu_flags() if flags is None else flags
    return tuple(
        k
        for k in KERNELS.values()
        if k.precision == precision and has_instructions(k, flags) and k.available() is None
    )


def has_instructions(kernel: Kernel, flags: frozenset[str]) -> bool:
    """Whether the CPU has one of the instruction sets ``kernel.flags`` names (any CPU where it
    names none)."""
    return not kernel.flags or any(f in flags for f in kernel.flags)


def _range(rows: tuple[int, int] | slice | None, n: int) -> tuple[int, int]:
    if rows is None:
        return 0, n
    if isinstance(rows, slice):
        start, stop, step = rows.indices(n)
        if step != 1:
            raise ValueError("row ranges must be contiguous")
        return start, max(start, stop)
    start, stop = rows
    if not 0 <= start <= stop <= n:
        raise ValueError(f"row range {rows} outside 0..{n}")
    return int(start), int(stop)


def kernel_of(a: Side, b: Side, kernel: Kernel | None = None) -> Kernel:
    """The kernel that multiplies these sides (``kernel`` if given): by their forms."""
    if a.w != b.w:
        raise ValueError(f"sides of different widths: {a.w} and {b.w}")
    if kernel is None:
        kernel = next(
            (k for k in KERNELS.values() if (k.a_form, k.b_form) == (a.form, b.form)), None
        )
    if kernel is None or (kernel.a_form, kernel.b_form) != (a.form, b.form):
        raise TypeError(f"no kernel multiplies {a.form} rows by {b.form} rows")
    if kernel.precision == "int8" and a.w > INT8_MAX_WIDTH:
        raise ValueError(
            f"int8 tiles need w <= {INT8_MAX_WIDTH} for exact int32 sums, got w = {a.w}"
        )
    return kernel


def tile_product(
    a: Side,
    b: Side,
    out: np.ndarray,
    a_rows: tuple[int, int] | slice | None = None,
    b_rows: tuple[int, int] | slice | None = None,
    scaled: bool = True,
    kernel: Kernel | None = None,
) -> np.ndarray:
    """``out[i, j] = x̂_i · ŷ_j`` (float32) for rows ``a_rows`` of ``a`` and ``b_rows`` of ``b``;
    with ``scaled=False``, ``x̂_i · ŷ_j / s_i`` (the engine's tile kernels apply the row scale
    ``a.scale32`` themselves). ``out`` is a float32 array of shape ``(rows, cols)`` (any strides),
    or for bfloat16 sides a uint16 array that receives the bfloat16 results' bits; it is
    returned. The kernel ([`kernel_of`][kernel_of]) runs in the calling thread."""
    kernel = kernel_of(a, b, kernel)
    a0, a1 = _range(a_rows, a.n)
    b0, b1 = _range(b_rows, b.n)
    rows, cols = a1 - a0, b1 - b0
    allowed = (np.float32, np.uint16) if kernel.precision == "bfloat16" else (np.float32,)
    if out.dtype not in allowed or out.shape != (rows, cols):
        raise ValueError(
            f"out must be {' or '.join(t.__name__ for t in allowed)} of shape {(rows, cols)}, "
            f"got {out.dtype} {out.shape}"
        )
    if rows == 0 or cols == 0:
        return out
    target = out if out.flags.c_contiguous else _workspace(out.dtype.type, rows, cols)
    kernel.product(a, b, target, a0, a1, b0, b1)
    if scaled and a.form in LEVELS:
        np.multiply(target, a.scale32[a0:a1, None], out=target)
    if target is not out:
        out[...] = target
    return out


# ---------------------------------------------------------------------------------------------
# Error bounds


def _gamma(w: int) -> float:
    return w * UNIT / (1.0 - w * UNIT)


def _up(v: float) -> float:
    # a few float64 operations on non-negative terms: relative error below 2^-50
    return float(np.nextafter(v * (1.0 + 2.0**-48), np.inf))


def product_terms(precision: str, w: int) -> tuple[float, float]:
    """``(c, a)`` of the tile product's error ``|tile - x̂·ŷ| <= c ν̂_x N̂ + a`` (module docstring,
    items 2 and 3), rounded up."""
    if precision == "int8":
        return INT8_PRODUCT_UNITS * UNIT, INT8_PRODUCT_TINY
    if precision == "bfloat16":
        if w * UNIT >= 0.5:
            raise ValueError(f"rows too wide for a float32 accumulation bound: w = {w}")
        g = _gamma(w)
        return _up(g + BF16_UNIT * (1.0 + g)), (w + 1) * 2.0**-123
    raise ValueError(f"no low-precision product for {precision!r}")


def _round_up(v: np.ndarray) -> np.ndarray:
    # a few float64 operations on non-negative terms: relative error below 2^-50
    return np.nextafter(v * (1.0 + 2.0**-48), np.inf)


def row_bounds(
    a: Side,
    b: Side,
    a_rows: tuple[int, int] | slice | None = None,
    b_rows: tuple[int, int] | slice | None = None,
    value_relative: bool = False,
) -> np.ndarray | tuple[np.ndarray, float]:
    """Per row ``i`` of ``a_rows``, ``eps_i >= max_j |tile[i, j] - x_i · y_j|`` over the rows
    ``j`` of ``b_rows``, for the tile of [`tile_product`][tile_product] (float64, ``(rows,)``).

    ``eps_i = ρ_i N̂ + ν_i P + c ν̂_i N̂ + a`` (module docstring). With ``value_relative``,
    returns ``(e, r)`` with ``|tile[i, j] - x_i · y_j| <= e_i + r |tile[i, j]|``, where the output
    rounding is charged to the tile value rather than to ``ν̂_i N̂``.
    """
    if a.precision != b.precision or a.w != b.w:
        raise TypeError(f"sides of different kinds: {a.form} ({a.w}) and {b.form} ({b.w})")
    a0, a1 = _range(a_rows, a.n)
    b0, b1 = _range(b_rows, b.n)
    if b1 == b0:
        zero = np.zeros(a1 - a0)
        return (zero, 0.0) if value_relative else zero
    n_hat = float(b.norm[b0:b1].max())
    p = float(b.residual[b0:b1].max())
    rho, nu, nu_hat = a.residual[a0:a1], a.source_norm[a0:a1], a.norm[a0:a1]
    w = a.w
    c, abs_term = product_terms(a.precision, w)
    if not value_relative:
        return _round_up(rho * n_hat + nu * p + c * (nu_hat * n_hat) + abs_term)
    if a.precision == "int8":
        # |tile - x̂·ŷ| <= 3u' |v| s s + t, |v| s s <= (|tile| + t) / (1 - 3u') (u' = u(1 + u))
        r = INT8_PRODUCT_UNITS * UNIT / (1.0 - INT8_PRODUCT_UNITS * UNIT)
        c, abs_term = 0.0, 2.0 * INT8_PRODUCT_TINY
    else:
        # |tile - σ| <= 2^-8 |σ| + 2^-126 and |σ| <= (|tile| + 2^-126) / (1 - 2^-8)
        r = BF16_UNIT / (1.0 - BF16_UNIT)
        c, abs_term = _gamma(w), (w + 2) * 2.0**-123
    e = _round_up(rho * n_hat + nu * p + _up(c) * (nu_hat * n_hat) + abs_term)
    return e, _up(r)


def window_ratio(eps_low: np.ndarray, eps_ref: np.ndarray) -> float:
    """How much wider the low-precision windows are than the reference (float32) windows:
    ``Σ eps_low / Σ eps_ref`` over the rows (``inf`` if the reference windows are all empty and
    the low ones are not)."""
    low = float(np.sum(np.asarray(eps_low, np.float64)))
    ref = float(np.sum(np.asarray(eps_ref, np.float64)))
    if ref > 0:
        return low / ref
    return 1.0 if low == 0 else math.inf


# ---------------------------------------------------------------------------------------------
# Self-checks


def code_patterns(w: int, a_form: str, b_form: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Named ``(a, b)`` integer code matrices of width ``w`` (``48 × w`` and ``80 × w``) at the
    edges of each form's range, arranged so that a kernel that does not keep every product and
    partial sum exact gets some entry wrong: runs of two equal-signed extreme codes (``vpmaddubsw``
    saturates a pair once the unsigned side exceeds 7 bits, as when signed codes are shifted by
    128), long runs of one sign (16-bit accumulation), odd codes (kernels that halve a side), and
    random codes over the whole range."""
    top_a, top_b = LEVELS.get(a_form, 127), LEVELS.get(b_form, 127)
    k = np.arange(w)
    rng = np.random.default_rng(w)
    run = np.where((k // 2) % 3 == 2, -1, 1)
    rows = {
        "high": np.full(w, top_a),
        "low": np.full(w, -top_a),
        "alternating": np.where(k % 2, -top_a, top_a),
        "odd": (2 * (k % (top_a + 1)) - top_a).clip(-top_a, top_a),
    }
    cols = {
        "pairs": run * top_b,
        "positive": np.full(w, top_b),
        "negative": np.full(w, -top_b),
        "odd": (2 * (k % (top_b + 1)) - top_b).clip(-top_b, top_b),
    }
    out = []
    for name, row in rows.items():
        a = np.tile(row, (48, 1))
        b = np.stack([cols[c] for c in cols] * 20)
        out.append((name, a, b))
    a = rng.integers(-top_a, top_a + 1, (48, w))
    out.append(("random", a, rng.integers(-top_b, top_b + 1, (80, w))))
    return out


def _side_of_codes(codes: np.ndarray, form: str, scale: np.ndarray) -> Int8Side:
    offset = INT7_ZERO_POINT if form == "int7" else 0
    stored = (codes + offset).astype(np.uint8 if form == "int7" else np.int8)
    ones = np.ones(len(codes))
    return Int8Side(
        norm=ones,
        residual=ones,
        source_norm=ones,
        codes=torch.from_numpy(stored),
        scale=scale,
        scale32=scale.astype(np.float32),
        form=form,
    )


def check_int8(kernel: Kernel, w: int) -> str | None:
    """``None`` if ``kernel`` computes every entry of [`code_patterns`][code_patterns] exactly at
    width ``w`` (the exact integer product converted to float32, times the right side's power-of-two
    scale), else what it got wrong."""
    for name, a, b in code_patterns(w, kernel.a_form, kernel.b_form):
        scale = np.ldexp(1.0, -np.arange(len(b)) % 9 - 3)
        a_side = _side_of_codes(a, kernel.a_form, np.ones(len(a)))
        b_side = _side_of_codes(b, kernel.b_form, scale)
        out = np.full((len(a), len(b)), np.nan, np.float32)
        try:
            kernel.product(a_side, b_side, out, 0, len(a), 0, len(b))
        except Exception as error:  # a kernel that cannot run is not used
            return f"{name} codes: {type(error).__name__}: {error}"
        exact = a.astype(np.int64) @ b.astype(np.int64).T
        want = exact.astype(np.float32) * scale.astype(np.float32)[None, :]
        wrong = int(np.sum(out != want))
        if wrong:
            return f"{name} codes: {wrong} of {out.size} entries differ from the exact product"
    return None


def adversarial_pairs(precision: str, w: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Named ``(x, y)`` float32 row pairs of width ``w`` that attain the bound nearly, or break it
    under a weaker arithmetic than the bound assumes (bfloat16: ``aligned``, ``truncation``,
    ``accumulation``; int8: ``aligned``, ``saturation``, ``odd``)."""
    k = np.arange(w)
    if precision == "bfloat16":
        acc = np.where(k < 64, 1.0, 2.0**-8)
        trunc = np.zeros(w)
        trunc[0] = 1.0
        trunc[1:2] = 2.0**-3 * (1 - 2.0**-7)  # 1 + 2^-6 - 2^-12 + 2^-20 after squaring
        pairs = {
            "aligned": (np.full(w, 2.0**-5 * (1 + 2.0**-8 - 2.0**-23)),) * 2,
            "truncation": (trunc, trunc),
            "accumulation": (acc, np.ones(w)),
        }
    elif precision == "int8":
        s = 2.0**-7
        aligned = np.full(w, (100.5 - 2.0**-16) * s)
        aligned[0] = 127 * s  # the row's maximum sets its scale to s: the rest round by s / 2
        pairs = {
            "aligned": (aligned, aligned),
            "saturation": (np.full(w, 127 * s), np.where((k // 2) % 3 == 2, -127, 127) * s),
            "odd": (np.full(w, 127 * s), (2 * (k % 64) - 63.0) * s),
        }
    else:
        raise ValueError(f"no low-precision product for {precision!r}")
    return {name: (x.astype(np.float32), y.astype(np.float32)) for name, (x, y) in pairs.items()}


def _within_bound(x: np.ndarray, y: np.ndarray, kernel: Kernel) -> bool:
    a, b = prepare(x, kernel.a_form), prepare(y, kernel.b_form)
    tile = tile_product(a, b, np.empty((x.shape[0], y.shape[0]), np.float32), kernel=kernel)
    eps = row_bounds(a, b)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    w = x.shape[1]
    ref = x64 @ y64.T  # its own error: at most γ_w (u = 2^-53) Σ|x_k y_k|, and underflow
    ref_err = 2.0 * (w + 2) * 2.0**-53 * (np.abs(x64) @ np.abs(y64).T) + w * 2.0**-1070
    return bool(np.all(np.abs(tile.astype(np.float64) - ref) <= eps[:, None] - ref_err))


def verify(kernel: Kernel | str, widths: tuple[int, ...] = (1, 63, 257, 1025)) -> bool:
    """Whether ``kernel`` (or the first kernel of a precision) stays within
    [`row_bounds`][row_bounds] on [`adversarial_pairs`][adversarial_pairs] and on Gaussian unit
    rows, in ``64 × 64`` tiles compared with float64 dot products less their own rounding bound."""
    if isinstance(kernel, str):
        kernel = next(k for k in KERNELS.values() if k.precision == kernel)
    rng = np.random.default_rng(0)
    for w in widths:
        for x, y in adversarial_pairs(kernel.precision, w).values():
            if not _within_bound(np.tile(x, (64, 1)), np.tile(y, (64, 1)), kernel):
                return False
        g = rng.standard_normal((128, w)).astype(np.float32)
        g /= np.linalg.norm(g, axis=1, keepdims=True).astype(np.float32)
        if not _within_bound(g[:64], g[64:], kernel):
            return False
    return True


_CHECKED: dict[tuple[str, int], str | None] = {}
_CHECK_LOCK = threading.Lock()


def usable(kernel: Kernel, w: int) -> str | None:
    """``None`` if ``kernel`` may compute tiles of width ``w`` on this machine, else why not:
    it cannot run here, the rows are too wide for exact int32 sums, or its self-check failed
    (int8: [`check_int8`][check_int8], exact on saturating code patterns; bfloat16:
    [`verify`][verify], within the bound). Checked once per process and width, before the kernel's
    first tile."""
    key = (kernel.name, w)
    with _CHECK_LOCK:
        if key in _CHECKED:
            return _CHECKED[key]
        reason = kernel.available()
        if reason is None and kernel.precision == "int8" and w > INT8_MAX_WIDTH:
            reason = f"rows of width {w} exceed {INT8_MAX_WIDTH} (exact int32 sums)"
        if reason is None and kernel.precision == "int8":
            reason = check_int8(kernel, w)
            if reason is not None:
                reason = f"not exact: {reason}"
        if reason is None and kernel.precision == "bfloat16" and not verify(kernel, (w,)):
            reason = "beyond the bfloat16 bound on adversarial rows"
        _CHECKED[key] = reason
        return reason


# ---------------------------------------------------------------------------------------------
# The CPU engine's tiles: which way computes them, timed as they run

SAMPLES = 3
"""Full tiles timed with each way of computing them in each round of a [`Choice`][Choice]."""
CLEAR = 1.2
"""A choice is clear when every other kind's median tile time is at least this many times the
chosen kind's ([`Choice.settled`][Choice.settled])."""
REWEIGH = 4
"""After a pass whose choice was clear, the next ``REWEIGH - 1`` passes of the same call over
tiles of the same width and kinds (its next chunks) run the chosen kind untimed; every
``REWEIGH``-th pass weighs the kinds again, so that the choice follows the data. Weighing costs
each pass two rounds of ``workers + SAMPLES`` tiles per kind, some in the slowest kind: about 7 %
of a chunk's time at SOP scale and d = 128, where a chunk is some 60 tiles."""
WEIGH_TILES = 16
"""``precision="auto"`` weighs a low precision for calls of at least this many full tiles
(queries × reference: 3,072² rows in tiles of 768); smaller calls run float32: they gain less
from a faster tile than a low precision's first use in a process costs (compiling its kernels,
opening its sessions)."""
AUTO_TILES = 400
"""Calls of at least this many full tiles (about 15,000² rows) weigh within each call, each on
its own data: timing costs two rounds of ``workers + SAMPLES`` tiles per kind
([`Choice`][Choice]), some of them in the slowest kind, and the tiles after the timing pay for
it. Smaller calls (from [`WEIGH_TILES`][WEIGH_TILES]) have too few tiles for that: they weigh
pass by pass across the calls of the same shape and request, as an evaluation after every epoch
repeats them ([`TilePass`][TilePass]'s ``repeated``)."""
SMALL_REWEIGH = 64
"""A choice weighed across calls runs in the next ``SMALL_REWEIGH`` passes of the same shape and
request; the one after weighs again, so that the choice follows the embeddings as they train."""


class Choice:
    """The fastest of several names, timed on the tiles as they run, in rounds.

    A round gives every tile to one name: the workers then run the same kind of work side by
    side, as they will after the choice. A tile's time depends on what the other cores do (they
    share caches and memory bandwidth): a float32 tile timed beside lighter low-precision tiles
    runs faster than it will beside other float32 tiles (``docs/performance.md``). A round's
    first ``lead`` tiles (the number of workers) are not timed, since the other workers may still
    run the previous round's name; its next ``SAMPLES`` are. The names are timed in their order,
    then in reverse order, so that a drift along the pass (a ranked list's tiles cost less as its
    list fills) charges every name alike; the choice is the name of least median time (of least
    time with ``least``: a pass weighed across calls, [`TilePass`][TilePass], where a load that
    comes and goes on a shared machine only adds time to some passes). A name's
    first tile in the process (``warm``, shared between choices) warms it up and is not timed.
    A tile that is not to be timed (``timed=False``: one with less work than the others, such as
    a symmetric pass's diagonal tile, read by its rows only) runs, until the choice is made, in
    ``untimed`` (the choice of the previous pass over the same kind of tiles) when it is one of
    the names, else in the first name."""

    def __init__(
        self,
        warm: set[str] | None = None,
        untimed: str | None = None,
        samples: int = SAMPLES,
        least: bool = False,
    ) -> None:
        self.untimed = untimed
        self.per_round = samples  # times a round keeps
        self.statistic = np.min if least else np.median
        self.lock = threading.Lock()
        self.times: dict[str, list[float]] = {}
        self.warm: set[str] = set() if warm is None else warm
        self.rounds: list[str] = []
        self.round = 0  # the round under way; len(rounds) once every round is done
        self.picks = 0  # tiles given out in this round
        self.samples = 0  # times kept in this round
        self.chosen: str | None = None
        self.local = threading.local()  # the round and the tile's place in it, per thread
        self.reused = 0  # passes since this one that ran its choice untimed
        self.call: Any = None  # what the pass that made it evaluated (a weak reference)

    def pick(self, names: Sequence[str], timed: bool = True, lead: int = 1) -> str:
        """The name for the next tile of the calling thread (whose time it may then
        [`record`][record])."""
        if len(names) == 1:
            return names[0]
        with self.lock:
            self.local.token = None
            if not self.rounds:
                self.rounds = [*names, *reversed(names)]
            if self.round >= len(self.rounds):
                if self.chosen is None:
                    self.chosen = min(names, key=lambda n: float(self.statistic(self.times[n])))
                return self.chosen
            if not timed:
                return self.untimed if self.untimed in names else names[0]
            self.local.token = (self.round, self.picks >= lead)
            self.picks += 1
            return self.rounds[self.round]

    def record(self, name: str, seconds: float) -> None:
        """The time of the calling thread's last tile, computed with ``name``."""
        with self.lock:
            token, self.local.token = getattr(self.local, "token", None), None
            if token is None or token[0] != self.round or self.rounds[self.round] != name:
                return  # not a tile of the round under way
            if name not in self.warm:
                self.warm.add(name)
                return
            if not token[1]:
                return  # among the round's first tiles
            self.times.setdefault(name, []).append(seconds)
            self.samples += 1
            if self.samples >= self.per_round:
                self.round, self.picks, self.samples = self.round + 1, 0, 0

    def settled(self, names: Sequence[str]) -> bool:
        """Whether this choice was made among ``names``, each of them timed, and clearly: every
        other name's median time at least [`CLEAR`][CLEAR] times the chosen one's."""
        with self.lock:
            if self.chosen is None or not set(names) <= set(self.times):
                return False
            best = float(self.statistic(self.times[self.chosen]))
            others = [float(self.statistic(self.times[n])) for n in names if n != self.chosen]
            return all(t >= CLEAR * best for t in others)

    def medians(self) -> dict[str, float]:
        """The median time (the least with ``least``) of each name timed so far."""
        with self.lock:
            return {n: float(self.statistic(t)) for n, t in self.times.items() if t}


CHOICES: dict[tuple, Choice] = {}


WARM: dict[tuple, set[str]] = {}


def choice(*key: Any) -> Choice:
    return CHOICES.setdefault(key, Choice())


def tile_dtype(precision: str, scores: Any = np.float32) -> np.dtype:
    """What a tile of ``precision`` holds: the scores' type, or a bfloat16 product's own bits
    (uint16, read by the tile kernels without a widening copy: [`tile_product`][tile_product])."""
    return np.dtype(np.uint16) if precision == "bfloat16" else np.dtype(scores)


class TileKind:
    """One way of computing a pass's tiles: ``product(r0, c0, out)``, the row scales ``rs`` of
    its tile rows, whether it is a cascade, and its bound ``eps`` per chunk row (a tensor,
    ``(rows,)``). ``relative``: the same bound with the output's rounding charged to the value,
    ``(e, r)``: a tile value ``v`` lies within ``e_i + r |v|`` of what ``eps`` bounds
    ([`row_bounds`][row_bounds]'s ``value_relative``; ``(eps, 0.0)`` where not given). Near a
    ranked list's floor, where ``|v|`` is below 1 on unit rows, it is the narrower of the two:
    bfloat16's output rounding (``2^-8 |v|``) is half of its ``eps`` at ``|v| = 1``."""

    def __init__(self, name, precision, eps, product, scales=None, relative=None) -> None:
        self.name, self.precision, self.eps, self.product = name, precision, eps, product
        self.cascade = precision != "float32"
        self.scales = scales
        self.relative = (eps, 0.0) if relative is None else relative

    def rs(self, r0: int, rows: int, dtype: np.dtype) -> np.ndarray:
        if self.scales is None:
            return np.ones(rows, dtype=dtype)
        return self.scales[r0 : r0 + rows]


class TilePass:
    """The filter of a chunk against one block (``qf``, its float32 bound ``eps32``) and the
    kinds of tile it may use, built when first needed. ``repeated``: for a call of fewer than
    [`AUTO_TILES`][AUTO_TILES] full tiles, what its calls have in common (shape and request), the
    key its kinds are weighed under across calls (``_across``); ``None``: weighed within
    the call."""

    def __init__(
        self, space, qf, block, first, symmetric, eps32, names, float32, repeated=None
    ) -> None:
        self.space, self.qf, self.block, self.first = space, qf, block, first
        self.float32 = float32
        self.symmetric, self.eps32, self.names = symmetric, eps32, names
        self.building = threading.Lock()  # held while one kind's sides are prepared
        self.kinds = {"float32": TileKind("float32", "float32", eps32, float32)}
        self.workers = 1  # the threads computing its tiles (set by the pass that runs them)
        self.a32, self.b32 = qf.rows.numpy(), block.gemm.numpy()
        # A pass times its own tiles: the fastest kind depends on the data (the windows the
        # filter leaves, which a ranked list's first tiles, before its list fills, make wider
        # than its later ones), not on the machine alone; after a clear choice, the next passes
        # (a call's next chunks) run it until one weighs again; a small call's passes go on
        # with the weighing of the earlier calls of its shape. The weighed passes' times are
        # kept for the report.
        key = ("tiles", qf.rows.dtype, qf.rows.shape[1])
        last = CHOICES.get(key)  # its choice runs the untimed tiles (a symmetric pass's diagonal)
        warm = WARM.setdefault(key, set())
        self.choice = Choice(warm, None if last is None else last.chosen)
        self.weighing: Choice | None = None  # a small call's choice, weighed pass by pass
        if len(names) > 1 and repeated is not None:  # its own warm-ups: its kernels' first use
            across = (*key, repeated, tuple(names))  # a precision asked for weighs its kernels
            self._across(across, WARM.setdefault(across, set()), names)
        elif len(names) > 1 and _reusable(last, space, names):
            last.reused += 1  # a clear choice: this pass runs it, untimed ([`REWEIGH`][REWEIGH])
            self.names = (last.chosen,)
        elif len(names) > 1:
            self.choice.call = _reference(space)
            CHOICES[key] = self.choice

    def _across(self, key: tuple, warm: set[str], names: Sequence[str]) -> None:
        """A small call's kind, weighed pass by pass across the passes of the same ``key`` (width,
        shape, request and kinds; one call has too few tiles to weigh them tile by tile). Each pass
        runs one kind in all its tiles, and its whole time (the tiles, their consumers, the lists'
        finish: [`passed`][passed]) is that kind's sample: a kind then costs what it costs on its
        own (a ranked list's floors rise with its tiles, and a low precision's wider window admits
        more items; tiles timed beside another kind's lists would miss both). The rounds are a
        [`Choice`][Choice]'s with one pass each, the names in their order, then in reverse; a kind's
        first pass of the key in the process warms it up (``warm``: a request's kernels are loaded
        or compiled on their first use, which another request's passes of the same width need not
        have made). The least time of each kind's passes decides (a load that comes and goes adds
        time only). The choice then runs in the next [`SMALL_REWEIGH`][SMALL_REWEIGH] passes, and
        the one after weighs again."""
        last = CHOICES.get(key)
        if last is None or (last.chosen is not None and last.reused >= SMALL_REWEIGH - 1):
            last = CHOICES[key] = Choice(warm, samples=1, least=True)
        elif last.chosen is not None:
            last.reused += 1
        self.weighing = last
        self.names = (last.pick(names, lead=0),)

    def passed(self, seconds: float) -> None:
        """The pass's whole time: its kind's sample where the pass weighs across calls
        (``_across``)."""
        if self.weighing is not None:
            self.weighing.record(self.names[0], seconds)

    def kind(self, name: str) -> TileKind | None:
        """The kind ``name``, its sides prepared on first use; ``None`` (not waiting) while
        another thread prepares sides. ``kinds`` only changes under ``building``."""
        if name in self.kinds:
            return self.kinds[name]
        if not self.building.acquire(blocking=False):
            return None
        try:
            if name not in self.kinds:
                self.kinds[name] = self._build(name)
            return self.kinds[name]
        finally:
            self.building.release()

    def pick(self, timed: bool = True) -> TileKind:
        """The kind for the calling thread's next tile: the choice's, or, while another thread
        prepares the chosen kind's sides, the prepared kind of least median time so far
        (float32 before any is timed; a tile the choice then does not time)."""
        kind = self.kind(self.choice.pick(self.names, timed, self.workers))
        if kind is None:
            ready = [(t, n) for n, t in self.choice.medians().items() if n in self.kinds]
            kind = self.kinds[min(ready)[1] if ready else "float32"]
        return kind

    def _build(self, name: str) -> TileKind:
        qf, block = self.qf, self.block
        kernel = KERNELS[name]
        b_side = block_side(block, kernel.b_form)
        if self.space.own_rows(block):
            a_side = block_side(block, kernel.a_form)
        else:
            a_side = prepare(qf.rows, kernel.a_form)
        first, c = self.first, qf.rows.shape[0]
        rows = (first, first + c)
        low = row_bounds(a_side, b_side, rows)
        e, r = row_bounds(a_side, b_side, rows, value_relative=True)
        if self.symmetric:  # the transposed reading: the chunk's rows on the other side
            low = np.maximum(low, row_bounds(b_side, a_side, rows))
            e = np.maximum(e, row_bounds(b_side, a_side, rows, value_relative=True)[0])

        def product(r0, c0, out):
            rows, cols = out.shape
            tile_product(
                a_side,
                b_side,
                out,
                (first + r0, first + r0 + rows),
                (c0, c0 + cols),
                scaled=False,
                kernel=kernel,
            )

        scales = a_side.scale32[first : first + c] if kernel.precision == "int8" else None
        relative = (self.eps32 + torch.from_numpy(e), r)
        eps = self.eps32 + torch.from_numpy(low)
        return TileKind(name, kernel.precision, eps, product, scales, relative)


def _reference(space: Any) -> Any:
    """A weak reference to the call's space (``None`` where it takes none)."""
    try:
        return weakref.ref(space)
    except TypeError:
        return None


def _reusable(last: Choice | None, space: Any, names: Sequence[str]) -> bool:
    """Whether a pass of the call of ``space`` runs ``last``'s choice untimed: made by a pass of
    the same call (another call's data may favour another kind), clear, and not yet run by
    ``REWEIGH - 1`` passes."""
    if last is None or last.call is None or last.call() is not space or space is None:
        return False
    return last.reused < REWEIGH - 1 and last.settled(names)


def block_side(block: Any, form: str) -> Any:
    """The block's filter rows as a low-precision side, kept on the block."""
    key = ("lowp", form)
    if key not in block.cache:
        block.cache[key] = prepare(block.gemm, form)
    return block.cache[key]


def _numpy_product(a: torch.Tensor, b: torch.Tensor, out: np.ndarray) -> None:
    np.matmul(a.numpy(), b.numpy().T, out=out)


def _torch_product(a: torch.Tensor, b: torch.Tensor, out: np.ndarray) -> None:
    torch.mm(a, b.T, out=torch.from_numpy(out))


BLAS = {"numpy": _numpy_product, "torch": _torch_product}


def choose_blas(dtype: torch.dtype, width: int, ieee: bool) -> str:
    """The BLAS for the next float32 (or float64) tile of this inner dimension: numpy's and
    torch's differ by machine (OpenBLAS is the faster on some AMD servers, MKL on Intel), timed on
    the first tiles ([`Choice`][Choice]). torch's is a candidate only while its float32 matmuls are
    IEEE (``ieee``; ``torch.set_float32_matmul_precision("highest")``): otherwise oneDNN may
    multiply in bfloat16, beyond the float32 bound."""
    if not ieee:
        return "numpy"
    return choice("blas", dtype, width).pick(tuple(BLAS))


def full_tiles(space: Any, tile: int) -> int:
    """The full ``tile × tile`` tiles of a call's queries against its reference."""
    return (space.num_query // tile) * (space.num_reference // tile)


def repeated(space: Any, tile: int, symmetric: bool, window: bool, top: bool) -> tuple | None:
    """What the calls a small pass belongs to have in common, the key its kinds of tile are
    weighed under across calls ([`TilePass`][TilePass]): the shape, and what the pass keeps
    (counts, lists or both; read from both sides of a tile where ``symmetric``). ``None`` for a
    call of [`AUTO_TILES`][AUTO_TILES] full tiles or more, which weighs within itself."""
    if full_tiles(space, tile) >= AUTO_TILES:
        return None
    kept = " and ".join(n for n, used in (("counts", window), ("lists", top)) if used)
    return (space.num_query, space.num_reference, kept + (", symmetric" if symmetric else ""))


def tile_kinds(space: Any, qf: Any, block: Any, cached: bool, tile: int) -> tuple[str, ...]:
    """The kinds of tile a pass may use: float32, or the low-precision kernels the request
    allows that run here, passed their self-check and hold the rows (else float32)."""
    precision = space.options.precision  # float16: refused by engine.backend_for
    if cached or qf.rows.dtype != torch.float32 or precision == "float32":
        return ("float32",)
    if precision == "auto" and full_tiles(space, tile) < WEIGH_TILES:
        return ("float32",)
    width = qf.rows.shape[1]
    if precision == "auto":
        found = [k for p in worth_timing()[1:] for k in kernels_for(p)]
    else:  # asked for: the kernels with instructions for it, else any that runs
        found = list(kernels_for(precision)) or [
            k for k in KERNELS.values() if k.precision == precision and k.available() is None
        ]
    names = [k.name for k in found if usable(k, width) is None]
    if names and not (block_holds(block) and holds(qf.rows)):
        names = []  # rows beyond the low precision's range: float32
    if precision == "auto" or not names:
        return ("float32", *names)
    return tuple(names)


def precision_refused(asked: str, runs: str, here: str, instead: tuple[str, ...]) -> RecallkitError:
    """The error for a ``precision`` this back end does not run: where ``asked`` ``runs``, and
    the precisions to use ``here`` instead (each named as the parameter's value)."""
    parts = {f"p{i}": ("precision", p) for i, p in enumerate(instead)}
    names = [f"{{p{i}}}" for i in range(len(instead))]
    alternatives = f"{', '.join(names[:-1])} or {names[-1]}"
    return RecallkitError(
        Text(f"{{asked}} {runs}; {here} use {alternatives}", asked=("precision", asked), **parts)
    )


def block_holds(block: Any) -> bool:
    if "held" not in block.cache:
        block.cache["held"] = holds(block.gemm)
    return block.cache["held"]


def precision_report(width: int) -> str:
    """What ``precision="auto"`` weighs for float32 filter rows of ``width`` on this machine:
    each kernel with why it is not used (no instructions for it, not installed, or not exact
    in its self-check), and the times of the passes that weighed several: tile times of the
    last call that weighed within itself, pass times of each small call's shape and request."""
    flags = cpu_flags()
    worth = worth_timing(flags)
    lines = [f"CPU tiles of width {width}; precisions with instructions here: {', '.join(worth)}"]
    for kernel in KERNELS.values():
        reason = kernel.available()
        if reason is None and not has_instructions(kernel, flags):
            reason = f"no {kernel.precision} instructions here ({' or '.join(kernel.flags)})"
        reason = reason or usable(kernel, width)
        lines.append(f"  {kernel.name} ({kernel.precision}): {reason or 'usable'}")
    for key, made in list(CHOICES.items()):
        times = made.medians()
        if key[:3] != ("tiles", torch.float32, width) or not times:
            continue  # (a 5-tuple: weighed across calls of a shape, among some kinds)
        shown = ", ".join(f"{n} {t * 1e3:.2f} ms" for n, t in sorted(times.items()))
        if len(key) == 3:
            lines.append(f"  median tile times of the last pass that weighed them: {shown}")
        else:
            rows, cols, what = key[3]
            if "float32" not in key[4]:  # a low precision asked for: among its kernels
                what += f"; among {', '.join(key[4])}"
            lines.append(
                f"  least pass times of the calls of {rows:,} × {cols:,} rows ({what}): "
                f"{shown}; {made.chosen or 'none yet'} chosen"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Timing


def probe_rate(
    precision: str, w: int, rows: int = 256, repeats: int = 3, kernel: Kernel | None = None
) -> float:
    """Operations per second (``2 rows² w / seconds``, best of ``repeats`` after one warm-up) of
    a single-threaded ``rows × rows × w`` tile of Gaussian unit rows: torch's float32 ``mm``,
    or a low-precision kernel (the first of the precision that runs here, or ``kernel``) with its
    conversion to float32 (preparation excluded). torch's thread count is 1 during the probe."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, w)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True).astype(np.float32)
    out = np.empty((rows, rows), np.float32)
    run: Callable[[], Any]
    if precision == "float32":
        t, o = torch.from_numpy(x), torch.from_numpy(out)

        def run() -> None:
            torch.mm(t, t.T, out=o)
    else:
        if kernel is None:
            found = kernels_for(precision) or tuple(
                k for k in KERNELS.values() if k.precision == precision and k.available() is None
            )
            kernel = found[0]
        a, b = prepare(x, kernel.a_form), prepare(x, kernel.b_form)

        def run() -> None:
            tile_product(a, b, out, kernel=kernel)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run()
        best = math.inf
        for _ in range(max(1, repeats)):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return 2.0 * rows * rows * w / max(best, 1e-9)
