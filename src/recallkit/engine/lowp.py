"""Low-precision (bfloat16, int8) filter tiles for the CPU, with rigorous per-row error bounds.

The CPU engine's filter is a float32 GEMM over the filter rows (unit rows for cosine; rows scaled
by a power of two for dot and euclidean), in tiles ``A (<=1024, w) @ B (<=1024, w).T``, and only
items within the filter's error bound of a threshold are scored again exactly. On CPUs that
multiply bfloat16 or int8 faster than float32 (AVX512-BF16, AVX512-VNNI, AMX), a tile can first be
computed in low precision; its wider window is then scored in float32, and float32's window in
float64 (a cascade). This module provides that first stage:

* :func:`prepare` turns a side's float32 filter rows ``x`` (``n × w``) into a :class:`Int8Side` or
  a :class:`BF16Side`: the low-precision rows ``x̂`` and, per row, upper bounds on ``‖x‖``,
  ``‖x̂‖`` and ``‖x - x̂‖``. Each row is prepared from its own values alone.
* :func:`tile_product` writes ``x̂_i · ŷ_j`` for a range of rows of each side into a float32
  buffer: ``torch._int_mm`` (exact int32) and two power-of-two scalings for int8; torch's CPU
  ``bfloat16 @ bfloat16.T`` for bfloat16.
* :func:`row_bounds` gives ``eps_i >= max_j |tile[i, j] - x_i · y_j|``, where ``x_i · y_j`` is
  the exact real dot product of the float32 filter rows (the float32 and float64 stages of the
  cascade have their own bounds).
* :func:`cpu_flags`, :func:`worth_timing` and :func:`probe_rate` say which precisions are worth
  timing on this CPU, :func:`verify` checks the arithmetic the bounds assume on this machine's
  code path, and :func:`window_ratio` compares window widths for the engine's cost estimate.

Which precision a tile pass uses is decided by timing real tiles on the machine at hand; the CPU
flags only rule out precisions without hardware support (there, torch emulates them at a few
GFLOP/s).

Error bound. Notation per row: ``x`` the float32 filter row, ``x̂`` its low-precision value
(exactly representable: ``s_i q_i`` for int8, the bfloat16 row for bfloat16), ``ν ≥ ‖x‖``,
``ν̂ ≥ ‖x̂‖``, ``ρ ≥ ‖x - x̂‖`` (2-norms, computed in float64 and rounded up); over the rows ``j``
of the other side's range, ``N̂ = max_j ν̂_j`` and ``P = max_j ρ_j``; ``u = 2^-24``.

1. Representation. ``x·y - x̂·ŷ = (x - x̂)·ŷ + x·(y - ŷ)``, so by Cauchy–Schwarz
   ``|x·y - x̂·ŷ| <= ρ_x ν̂_y + ν_x ρ_y <= ρ_x N̂ + ν_x P``.
2. int8 product. ``v = q_x·q_y`` is an exact int32 (``|v| <= w 127²``; the VNNI kernels shift
   int8 codes to uint8, so partial sums stay below ``w·255·128``, which :data:`INT8_MAX_WIDTH`
   keeps under ``2^31``). Converting ``v`` to float32 rounds to nearest: ``|fl(v) - v| <= u |v|``
   (exact when ``|v| <= 2^24``). Multiplying by ``s_x`` then ``s_y`` (powers of two, float32) is
   exact except that the second product may underflow (absolute error ``< 2^-126``, flushed or
   gradual). With ``|v| s_x s_y = |x̂·ŷ| <= ν̂_x N̂``:
   ``|tile - x̂·ŷ| <= u ν̂_x N̂ + 2^-126``.
3. bfloat16 product. Products of bfloat16 values are exact in float32 (8-bit significands), and
   torch's CPU kernels accumulate in float32 (see below). The rounding error of any summation
   order (blocked, vectorised, fused multiply-add) of ``w`` terms is at most
   ``γ_w Σ_k |x̂_k ŷ_k| <= γ_w ν̂_x ν̂_y`` with ``γ_w = w u / (1 - w u)`` (Higham, *Accuracy and
   Stability of Numerical Algorithms*, 2nd ed., §3.1 and §4.2); with flush-to-zero or gradual
   underflow each of the ``w`` products and ``w`` additions may add ``< 2^-126``, so the float32
   sum ``σ`` has ``|σ - x̂·ŷ| <= γ_w ν̂_x N̂ + w 2^-124``. The output is rounded to bfloat16
   (round to nearest even, 8-bit significand, unit roundoff ``2^-8``): ``|tile - σ| <= 2^-8 |σ| +
   2^-126`` with ``|σ| <= (1 + γ_w) ν̂_x N̂ + w 2^-124``. Together
   ``|tile - x̂·ŷ| <= (γ_w + 2^-8 (1 + γ_w)) ν̂_x N̂ + (w + 1) 2^-123``. Input rows have their
   bfloat16 subnormals flushed to zero at preparation (the residual covers them), so kernels that
   treat subnormal inputs as zero compute the same products.
4. ``eps_i = ρ_i N̂ + ν_i P + c ν̂_i N̂ + a``, with ``(c, a) = (u, 2^-125)`` for int8 and
   ``(γ_w + 2^-8 (1 + γ_w), (w + 1) 2^-123)`` for bfloat16, evaluated in float64 and rounded up
   (:func:`row_bounds`). Only the other side's range enters through maxima, so a row's bound does
   not depend on the rows that share its chunk. With ``value_relative=True`` the output rounding
   is charged to the tile value instead: ``|tile - x·y| <= e_i + r |tile|`` with
   ``r = 2^-8 / (1 - 2^-8)`` (bfloat16) or ``u / (1 - u)`` (int8), which is narrower for items whose
   score is well below ``ν̂_i N̂``.

Norms. A row's norm is computed as ``2^e sqrt(Σ_k (v_k 2^-e)²)`` in float64 with ``2^e`` the
power of two just above ``max_k |v_k|`` (so no square overflows and the largest is at least
``1/4``); over any summation order the computed root is below the true norm by a relative
``(w + 4) 2^-53`` at most (squares and additions ``γ_{w+1}``, underflow of small squares below
``2^-53`` relative, the square root ``2^-53``), so it is multiplied by ``1 + (w + 4) 2^-52`` and
moved up one float64 step.

torch's CPU bfloat16 matmul. ``a @ b.T`` dispatches to ``at::native::cpublas::gemm`` for
``BFloat16`` (``aten/src/ATen/native/CPUBlas.cpp``). Where oneDNN supports bfloat16
(``ideep::has_bf16_type_support()``: AVX512 with BW/VL/DQ, or AVX2-VNNI-2) and ``m n k > 16³``,
it runs a oneDNN matmul with bfloat16 sources and destination, which accumulates in float32 and
converts the result to bfloat16 with round-to-nearest-even (``vcvtneps2bf16`` or its emulation;
AVX512-BF16 ``vdpbf16ps`` and AMX ``tdpbf16ps`` accumulate pairs of exact products in float32).
Elsewhere (OpenBLAS ``sbgemm`` when torch is built with it, else the reference kernel in
``aten/src/ATen/native/cpu/BlasKernel.cpp``) the dot products are summed in float32 (``opmath_t``)
and the float32 result is converted to bfloat16 (round to nearest even). No CPU path accumulates
in bfloat16, and every path returns a bfloat16 tensor (there is no CPU ``mm`` with a float32
output for bfloat16 inputs). :func:`verify` checks this on the running machine, with inputs that
attain the bound and inputs for which bfloat16 accumulation (up to 64 lanes) or rounding towards
zero would break it. ``torch._int_mm`` on the CPU runs oneDNN's s8·s8→s32 matmul
where AVX512-VNNI is present and an exact int32 loop elsewhere.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import numba
import numpy as np
import torch

PRECISIONS = ("float32", "bfloat16", "int8")

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
residual bounds account for it) so that both float32 scalings stay exact or underflow once."""
MAX_ABS = 2.0**32
"""Filter values must be finite and below this in magnitude (the engine's rows are below 1)."""

_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
_INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
_BATCH_ELEMENTS = 2**21  # rows are prepared in batches of about this many values


# ---------------------------------------------------------------------------------------------
# CPU capabilities


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (Linux; empty elsewhere or if unreadable),
    plus ``"torch:<capability>"`` from :func:`torch.backends.cpu.get_cpu_capability` (the vector
    ISA torch's own kernels use, e.g. ``"torch:avx2"``)."""
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
    AVX512-BF16 or AMX-BF16; ``"int8"`` with AVX512-VNNI, AVX-VNNI or AMX-INT8.

    Without these instructions torch emulates the low-precision products far below the float32
    rate. The flags only rule precisions out: the engine chooses by timing real tiles
    (:func:`probe_rate`, then its own tile timings), since a flag says nothing about the kernel
    torch picks (``torch._int_mm`` uses oneDNN only with AVX512-VNNI, for instance).
    """
    flags = cpu_flags() if flags is None else flags
    out = ["float32"]
    if any(f in flags for f in _BF16_FLAGS):
        out.append("bfloat16")
    if any(f in flags for f in _INT8_FLAGS):
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
    """A side quantised to int8 with a power-of-two scale per row: ``x̂_i = s_i q_i``."""

    codes: torch.Tensor
    """``(n, w)`` int8, contiguous, values in ``[-127, 127]``."""
    scale: np.ndarray
    """``(n,)`` float64 powers of two: the smallest ``s_i >= 2^-100`` with
    ``max|x_i| <= 127 s_i``."""
    scale32: np.ndarray
    """``scale`` as float32 (exact)."""

    precision = "int8"

    @property
    def w(self) -> int:
        return int(self.codes.shape[1])

    def dequantised(self) -> np.ndarray:
        """``s_i q_i`` in float64 (exact)."""
        return self.codes.numpy().astype(np.float64) * self.scale[:, None]


@dataclass(frozen=True, eq=False)
class BF16Side(_Side):
    """A side rounded to bfloat16 (nearest even; subnormal results flushed to zero)."""

    rows: torch.Tensor
    """``(n, w)`` ``torch.bfloat16``, contiguous."""

    precision = "bfloat16"

    @property
    def w(self) -> int:
        return int(self.rows.shape[1])

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


def _check_range(x: np.ndarray) -> None:
    if x.size and not np.all(np.abs(x) < MAX_ABS):  # also rejects nan and inf
        raise ValueError("filter rows must be finite and below 2^32 in magnitude")


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _raw_norms(v, out):  # pragma: no cover - compiled
    """``out[i] = 2^e sqrt(Σ_k (v[i, k] 2^-e)²)`` in float64, ``2^e`` just above ``max|v[i]|``."""
    n, w = v.shape
    for i in range(n):
        m = 0.0
        for k in range(w):
            a = abs(np.float64(v[i, k]))
            if a > m:
                m = a
        if m == 0.0:
            out[i] = 0.0
            continue
        e = math.frexp(m)[1]
        down = math.ldexp(1.0, -e)
        acc = 0.0
        for k in range(w):
            z = np.float64(v[i, k]) * down
            acc += z * z
        out[i] = math.sqrt(acc) * math.ldexp(1.0, e)


def _norms_up(v: np.ndarray) -> np.ndarray:
    """Per-row 2-norms of ``v`` (float32 or float64, exact values), rounded up."""
    raw = np.empty(v.shape[0], np.float64)
    _raw_norms(v, raw)
    return np.nextafter(raw * (1.0 + (v.shape[1] + 4) * 2.0**-52), np.inf) * (raw > 0)


def _batches(n: int, w: int):
    step = max(1, _BATCH_ELEMENTS // w)
    for start in range(0, n, step):
        yield start, min(n, start + step)


def int8_scales(x: np.ndarray) -> np.ndarray:
    """Per row, the smallest power of two ``s >= 2^-100`` with ``max|x_i| <= 127 s`` (float64)."""
    m = np.abs(x).max(axis=1).astype(np.float64)
    e = np.frexp(m)[1] - 7  # m / 2^e in [64, 128)
    e = np.where(m > np.ldexp(127.0, e), e + 1, e)
    e = np.maximum(np.where(m > 0, e, INT8_MIN_EXPONENT), INT8_MIN_EXPONENT)
    return np.ldexp(1.0, e)


def prepare_int8(x: np.ndarray | torch.Tensor) -> Int8Side:
    """Quantise float32 filter rows ``(n, w)`` to int8 codes with a power-of-two scale per row.

    ``q_i = round(x_i / s_i)`` (nearest even) with :func:`int8_scales`, so ``|q_i| <= 127`` and
    ``s_i q_i`` is exact in float32 and float64. The residual ``x_ik - s_i q_ik`` is exact in
    float64: it is ``x_ik`` where ``q_ik = 0``; elsewhere ``|x_ik| >= s_i / 2``, so it is a multiple
    of ``ulp(x_ik) >= 2^-24 s_i`` no larger than ``s_i / 2`` (24 bits).
    """
    x = _as_rows(x)
    _check_range(x)
    n, w = x.shape
    scale = int8_scales(x)
    codes = np.empty((n, w), np.int8)
    norm = np.empty(n)
    residual = np.empty(n)
    source = np.empty(n)
    for start, stop in _batches(n, w):
        xb = x[start:stop].astype(np.float64)
        s = scale[start:stop, None]
        q = np.rint(xb / s)
        codes[start:stop] = q
        source[start:stop] = _norms_up(x[start:stop])
        norm[start:stop] = _norms_up(q * s)
        residual[start:stop] = _norms_up(xb - q * s)
    return Int8Side(
        norm=norm,
        residual=residual,
        source_norm=source,
        codes=torch.from_numpy(codes),
        scale=scale,
        scale32=scale.astype(np.float32),
    )


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest, ties to even), as ``uint16`` bit patterns;
    results below ``2^-126`` in magnitude (bfloat16 subnormals) become ``+0``."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(
        np.uint16
    )
    r[(r & np.uint16(0x7F80)) == 0] = 0
    return r


def _bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def prepare_bf16(x: np.ndarray | torch.Tensor) -> BF16Side:
    """Round float32 filter rows ``(n, w)`` to bfloat16 (:func:`bf16_bits`).

    The residual ``x - x̂`` is exact in float32: ``x̂`` is within a factor 2 of ``x`` (Sterbenz)
    or zero.
    """
    x = _as_rows(x)
    _check_range(x)
    n, w = x.shape
    bits = np.empty((n, w), np.uint16)
    norm = np.empty(n)
    residual = np.empty(n)
    source = np.empty(n)
    for start, stop in _batches(n, w):
        xb = x[start:stop]
        bb = bf16_bits(xb)
        bits[start:stop] = bb
        xh = _bits_to_float32(bb)
        source[start:stop] = _norms_up(xb)
        norm[start:stop] = _norms_up(xh)
        residual[start:stop] = _norms_up(xb - xh)
    rows = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    return BF16Side(norm=norm, residual=residual, source_norm=source, rows=rows)


def prepare(x: np.ndarray | torch.Tensor, precision: str) -> Side:
    """A side's float32 filter rows prepared for ``precision`` (``"int8"`` or ``"bfloat16"``)."""
    if precision == "int8":
        return prepare_int8(x)
    if precision == "bfloat16":
        return prepare_bf16(x)
    raise ValueError(f"no low-precision side for {precision!r}")


# ---------------------------------------------------------------------------------------------
# Tile products

_work = threading.local()


def _workspace(dtype: torch.dtype, rows: int, cols: int) -> torch.Tensor:
    """A per-thread contiguous ``(rows, cols)`` scratch tensor, reused across tiles."""
    key = f"buf_{dtype}"
    buf = getattr(_work, key, None)
    if buf is None or buf.numel() < rows * cols:
        buf = torch.empty(max(rows * cols, 1), dtype=dtype)
        setattr(_work, key, buf)
    return buf[: rows * cols].view(rows, cols)


@numba.njit(nogil=True, cache=True, boundscheck=False)
def _int8_scale(c, sa, sb, out):  # pragma: no cover - compiled
    """``out[i, j] = (float32(c[i, j]) * sa[i]) * sb[j]``, each step rounded to float32."""
    for i in range(c.shape[0]):
        a = sa[i]
        for j in range(c.shape[1]):
            out[i, j] = (np.float32(c[i, j]) * a) * sb[j]


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


def _pair(a: Side, b: Side) -> None:
    if type(a) is not type(b):
        raise TypeError(f"sides of different precisions: {a.precision} and {b.precision}")
    if a.w != b.w:
        raise ValueError(f"sides of different widths: {a.w} and {b.w}")


def tile_product(
    a: Side,
    b: Side,
    out: np.ndarray,
    a_rows: tuple[int, int] | slice | None = None,
    b_rows: tuple[int, int] | slice | None = None,
) -> np.ndarray:
    """``out[i, j] = x̂_i · ŷ_j`` (float32) for rows ``a_rows`` of ``a`` and ``b_rows`` of ``b``.

    ``out`` is a float32 array of shape ``(rows, cols)`` (any strides, e.g. a view of a larger
    tile buffer); it is returned. The computation runs on torch's intra-op threads: the engine
    calls it from one worker thread per tile with ``torch.set_num_threads(1)``. Scratch memory is
    one tile per thread, kept between calls.
    """
    _pair(a, b)
    a0, a1 = _range(a_rows, a.n)
    b0, b1 = _range(b_rows, b.n)
    rows, cols = a1 - a0, b1 - b0
    if out.dtype != np.float32 or out.shape != (rows, cols):
        raise ValueError(
            f"out must be float32 of shape {(rows, cols)}, got {out.dtype} {out.shape}"
        )
    if rows == 0 or cols == 0:
        return out
    if isinstance(a, Int8Side):
        if a.w > INT8_MAX_WIDTH:
            raise ValueError(
                f"int8 tiles need w <= {INT8_MAX_WIDTH} for exact int32 sums, got w = {a.w}"
            )
        c = _workspace(torch.int32, rows, cols)
        torch._int_mm(a.codes[a0:a1], b.codes[b0:b1].T, out=c)
        _int8_scale(c.numpy(), a.scale32[a0:a1], b.scale32[b0:b1], out)
        return out
    t = _workspace(torch.bfloat16, rows, cols)
    torch.mm(a.rows[a0:a1], b.rows[b0:b1].T, out=t)
    torch.from_numpy(out).copy_(t)
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
        return UNIT, 2.0**-125
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
    ``j`` of ``b_rows``, for the tile of :func:`tile_product` (float64, ``(rows,)``).

    ``eps_i = ρ_i N̂ + ν_i P + c ν̂_i N̂ + a`` (module docstring). With ``value_relative``,
    returns ``(e, r)`` with ``|tile[i, j] - x_i · y_j| <= e_i + r |tile[i, j]|``, where the output
    rounding is charged to the tile value rather than to ``ν̂_i N̂``.
    """
    _pair(a, b)
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
        # |tile - x̂·ŷ| <= u |v| s s + 2^-126, |v| s s <= (|tile| + 2^-126) / (1 - u)
        r = UNIT / (1.0 - UNIT)
        c, abs_term = 0.0, 2.0**-124
    else:
        # |tile - σ| <= 2^-8 |σ| + 2^-126 and |σ| <= (|tile| + 2^-126) / (1 - 2^-8)
        r = BF16_UNIT / (1.0 - BF16_UNIT)
        c, abs_term = _gamma(w), (w + 2) * 2.0**-123
    e = _round_up(rho * n_hat + nu * p + _up(c) * (nu_hat * n_hat) + abs_term)
    return e, _up(r)


def window_ratio(eps_low: np.ndarray, eps_ref: np.ndarray) -> float:
    """How much wider the low-precision windows are than the reference (float32) windows:
    ``Σ eps_low / Σ eps_ref`` over the rows.

    Where scores are locally evenly spread around the thresholds, the number of items a window
    catches grows in proportion to its width, so this is the expected ratio of the number of
    items re-scored in float32 after a low-precision tile to the number re-scored exactly after a
    float32 tile. ``inf`` if the reference windows are all empty and the low ones are not.
    """
    low = float(np.sum(np.asarray(eps_low, np.float64)))
    ref = float(np.sum(np.asarray(eps_ref, np.float64)))
    if ref > 0:
        return low / ref
    return 1.0 if low == 0 else math.inf


# ---------------------------------------------------------------------------------------------
# Timing and self-checks


def probe_rate(precision: str, w: int, rows: int = 256, repeats: int = 3) -> float:
    """Operations per second (multiplications and additions, ``2 rows² w / seconds``, best of
    ``repeats`` after one warm-up) of a single-threaded ``rows × rows × w`` tile of Gaussian unit
    rows.

    ``"int8"`` and ``"bfloat16"`` time :func:`tile_product` (the low-precision product and its
    conversion to float32; preparation excluded); ``"float32"`` times torch's float32 ``mm``
    into a preallocated output (torch's BLAS, which may differ from the engine's). torch's
    intra-op thread count is set to 1 for the probe (process-wide) and restored afterwards, so
    call it before starting worker threads. A cheap first look; the engine decides by timing its
    own tiles.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, w)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True).astype(np.float32)
    out = np.empty((rows, rows), np.float32)
    if precision == "float32":
        t = torch.from_numpy(x)
        o = torch.from_numpy(out)

        def run() -> None:
            torch.mm(t, t.T, out=o)
    else:
        side = prepare(x, precision)

        def run() -> None:
            tile_product(side, side, out)

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


def adversarial_pairs(precision: str, w: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Named ``(x, y)`` float32 row pairs of width ``w`` that attain the bound nearly, or break it
    under a weaker arithmetic than the bound assumes.

    bfloat16: ``aligned``, every element just below a rounding midpoint and all products
    positive, so the input roundings add up along the rows and, for ``w = 257``, the sum ties and
    rounds down as well (bound attained to 0.2%); ``truncation``, a result just below a bfloat16
    midpoint (rounding towards zero errs by twice the bound); ``accumulation``, 64 ones then
    terms of ``2^-8`` against ones (a bfloat16 accumulator with up to 64 lanes drops them all,
    beyond the bound for ``w >= 100``). int8: ``aligned``, every element just below a grid
    midpoint, residuals parallel to the rows (bound attained to ``10^-5``); ``saturation``, codes
    127 against runs of two codes +-127 (kernels that sum uint8-shifted pairs in int16 saturate);
    ``odd``, odd codes (kernels that halve int8 weights lose their low bit).
    """
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
        pairs = {
            "aligned": (np.full(w, (100.5 - 2.0**-16) * s),) * 2,
            "saturation": (np.full(w, 127 * s), np.where((k // 2) % 3 == 2, -127, 127) * s),
            "odd": (np.full(w, 127 * s), (2 * (k % 64) - 63.0) * s),
        }
    else:
        raise ValueError(f"no low-precision product for {precision!r}")
    return {name: (x.astype(np.float32), y.astype(np.float32)) for name, (x, y) in pairs.items()}


def _within_bound(x: np.ndarray, y: np.ndarray, precision: str) -> bool:
    a, b = prepare(x, precision), prepare(y, precision)
    tile = tile_product(a, b, np.empty((x.shape[0], y.shape[0]), np.float32))
    eps = row_bounds(a, b)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    w = x.shape[1]
    ref = x64 @ y64.T  # its own error: at most γ_w (u = 2^-53) Σ|x_k y_k|, and underflow
    ref_err = 2.0 * (w + 2) * 2.0**-53 * (np.abs(x64) @ np.abs(y64).T) + w * 2.0**-1070
    return bool(np.all(np.abs(tile.astype(np.float64) - ref) <= eps[:, None] - ref_err))


def verify(precision: str, widths: tuple[int, ...] = (1, 63, 257, 1025)) -> bool:
    """Whether this machine's kernels for ``precision`` stay within :func:`row_bounds` on
    :func:`adversarial_pairs` and on Gaussian unit rows.

    Each pair fills a ``64 × 64`` tile (large enough for torch's optimised kernels), compared with
    float64 dot products less their own rounding bound. Run once per process before timing a
    precision; ``False`` means the low-precision filter must not be used on this machine.
    """
    rng = np.random.default_rng(0)
    for w in widths:
        for x, y in adversarial_pairs(precision, w).values():
            if not _within_bound(np.tile(x, (64, 1)), np.tile(y, (64, 1)), precision):
                return False
        g = rng.standard_normal((128, w)).astype(np.float32)
        g /= np.linalg.norm(g, axis=1, keepdims=True).astype(np.float32)
        if not _within_bound(g[:64], g[64:], precision):
            return False
    return True
