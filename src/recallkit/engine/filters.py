"""The GEMM filter: its rows, its scales and its rigorous error bound.

A GEMM over *filter rows* gives every pair a filter score with a bound ``eps`` on its distance
from the scaled exact score ([`recallkit.engine.exact`][recallkit.engine.exact]):

    |filter(i, j) - scale_i · scale_ref · exact(i, j)| <= eps_i      for every column j.

An item further than ``eps_i`` above (below) a threshold is certainly above (below) it; only the
items within ``eps_i`` are scored exactly, and only those exact scores decide.

Filter rows are normalised (cosine: ``x / |x|``, scale 1) or multiplied by a power of two, which
is exact (dot: ``c x``; euclidean: reference ``[s r, s² |r|²]`` against query
``[2 c q, -c / s]``, whose product is ``c s (2 q·r - |r|²)``). The reference side has one scale
``s`` per block (the candidates of a row are compared on one scale); each query row has its own
scale ``c_i``, so its filter row, its bound and its window depend on that row alone, never on
which rows share its chunk. Scales bring a row's norm into ``[0.5, 1)``, capped so that no filter
value or product can overflow: ``c_i · s <= 2**MAX_SCALE_LOG2`` and, for euclidean, ``c_i / s``
at most ``2**100`` (``2**14`` for a float16 GEMM). A row left tiny by a cap (or a float32 row
whose entries underflow) only widens its own window: the bound's absolute term covers every
value that underflows.

The bound (standard GEMM error analysis over ``t = d + 1`` terms, ``|fl(a·b) - a·b| <= t u
|a| |b|``, Higham 2002, §3.5) is ``eps_i = γ |a_i| max_j |b_j| + absolute_i`` with ``γ`` doubled
for safety over: the accumulation's unit roundoff ``u``, the rounding of the GEMM's inputs to its
type (low precision, TF32), the rounding of its output, the float64 error of the normalisation
and of the exact score itself (``2 d 2**-53``); ``absolute_i`` covers underflow in the GEMM and
in the exact score (scaled by ``scale_i · s``). [`Product`][Product] says which of these a back
end's GEMM has.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import torch

from recallkit.engine import exact, jit, lowp
from recallkit.exceptions import RecallkitError, Text

# Low-precision GEMM types, by the public name of a precision.
LOW_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# Relative rounding of a GEMM input converted to each type (truncation included).
INPUT_ROUNDING = {
    torch.float64: 0.0,
    torch.float32: 0.0,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}
# Half the smallest subnormal of each type: the absolute rounding of an underflowing value.
TINY = {
    torch.float64: 2.0**-1074,
    torch.float32: 2.0**-149,
    torch.bfloat16: 2.0**-133,
    torch.float16: 2.0**-24,
}
UNIT = {torch.float64: 2.0**-53, torch.float32: 2.0**-24}
MAX_SCALE_LOG2 = 900
EUCLIDEAN_RATIO_LOG2 = {torch.float16: 14}
DEFAULT_RATIO_LOG2 = 100


@dataclass(frozen=True)
class Product:
    """How a back end's GEMM computes filter scores: the type its inputs are rounded to, the
    unit roundoff of its accumulation, and the relative rounding of its output."""

    dtype: torch.dtype
    unit: float
    input_rounding: float = 0.0
    output_rounding: float = 0.0

    @classmethod
    def plain(cls, dtype: torch.dtype) -> Product:
        """A GEMM in ``dtype`` (float32 or float64) with ``dtype`` accumulation."""
        return cls(dtype, UNIT[dtype])


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _robust_norm(row, bits):  # pragma: no cover - compiled
    """[`robust_norms`][robust_norms] of one CPU row in float64 (``bits``: its bit patterns): the
    row times ``2**half`` then ``2**rest``, its squares summed in four interleaved sums (every
    fourth square each: four additions in flight), then those (any order is within the bound's
    float64 term)."""
    top = lowp.largest_magnitude(bits)
    if top == 0.0:
        return 0.0
    exponent = math.frexp(top)[1]
    half = (-exponent) // 2
    first, second = math.ldexp(1.0, half), math.ldexp(1.0, -exponent - half)
    s0 = s1 = s2 = s3 = 0.0
    w = row.shape[0]
    k = 0
    while k + 4 <= w:
        v0 = (np.float64(row[k]) * first) * second
        v1 = (np.float64(row[k + 1]) * first) * second
        v2 = (np.float64(row[k + 2]) * first) * second
        v3 = (np.float64(row[k + 3]) * first) * second
        s0 += v0 * v0
        s1 += v1 * v1
        s2 += v2 * v2
        s3 += v3 * v3
        k += 4
    while k < w:
        v = (np.float64(row[k]) * first) * second
        s0 += v * v
        k += 1
    return math.ldexp(math.sqrt((s0 + s1) + (s2 + s3)), exponent)


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _robust_norms_numba(x, bits, out):  # pragma: no cover - compiled
    for i in numba.prange(x.shape[0]):
        out[i] = _robust_norm(x[i], bits[i])


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _filter_rows_numba(x, factor, divide, held, held_bits, out, norms):  # pragma: no cover
    """Per row, ``v = float64(x_i) / factor_i`` (``divide``) or ``· factor_i``, written to ``out``
    in its type, and (``norms`` not empty) [`robust_norms`][robust_norms] of ``v`` in float64
    (``held``: a row of ``v`` per thread, ``held_bits`` its bit patterns)."""
    for i in numba.prange(x.shape[0]):
        t = numba.get_thread_id()
        v = held[t]
        for k in range(x.shape[1]):
            a = np.float64(x[i, k])
            v[k] = a / factor[i] if divide else a * factor[i]
            out[i, k] = v[k]
        if norms.shape[0]:
            norms[i] = _robust_norm(v, held_bits[t])


#: This module's numba kernels, by name
#: ([`recallkit.engine.cpu.first_compile`][recallkit.engine.cpu.first_compile]).
NUMBA_KERNELS = {"robust_norms": _robust_norms_numba, "filter_rows": _filter_rows_numba}


def filter_rows(
    raw: torch.Tensor, factor: torch.Tensor, divide: bool, dtype: torch.dtype, norms: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """CPU rows ``raw`` divided (``divide``) or multiplied by a float64 factor per row in float64,
    rounded to ``dtype``, in one pass without a float64 copy of the rows; with ``norms``, also
    the float64 rows' [`robust_norms`][robust_norms] (any order of the squares' sum is within the
    bound's float64 term). The same roundings as the torch operations, which run instead while
    the kernel is not loaded ([`recallkit.engine.jit.usable`][recallkit.engine.jit.usable])."""
    n, d = raw.shape
    out = torch.empty((n, d), dtype=dtype)
    found = np.empty(n if norms else 0, dtype=np.float64)
    if n:
        held = np.empty((numba.config.NUMBA_NUM_THREADS, d), dtype=np.float64)
        args = (
            raw.detach().contiguous().numpy(),
            np.ascontiguousarray(factor.numpy(), dtype=np.float64),
            divide,
            held,
            held.view(np.uint64),
            out.numpy(),
            found,
        )
        if not jit.usable(_filter_rows_numba, args):  # the torch operations: the same values
            v = raw.detach().to(torch.float64)
            v = v / factor[:, None] if divide else v * factor[:, None]
            return v.to(dtype), robust_norms(v) if norms else None
        _filter_rows_numba(*args)
    return out, torch.from_numpy(found) if norms else None


def largest_norm(x: torch.Tensor) -> torch.Tensor:
    """The largest of [`robust_norms`][robust_norms] (0 for no rows), a float64 scalar on ``x``'s
    device: CPU rows in one numba pass (no float64 copy;
    [`recallkit.engine.jit.usable`][recallkit.engine.jit.usable]), other rows in torch operations,
    8192 rows at a time."""
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        if not x.shape[0]:
            return torch.zeros((), dtype=torch.float64)
        rows = x.detach().contiguous().numpy()
        bits = rows.view(np.uint32 if rows.dtype == np.float32 else np.uint64)
        norms = np.empty(rows.shape[0], dtype=np.float64)
        if jit.usable(_robust_norms_numba, (rows, bits, norms)):
            _robust_norms_numba(rows, bits, norms)
            return torch.from_numpy(norms).max()
    top = torch.zeros((), dtype=torch.float64, device=x.device)
    for start in range(0, x.shape[0], 8192):  # no float64 copy of the whole block
        top = torch.maximum(top, robust_norms(x[start : start + 8192]).max())
    return top


def robust_norms(x: torch.Tensor, fused: bool = False) -> torch.Tensor:
    """Euclidean norms of the rows of ``x`` in float64, without underflow or overflow (each row
    is divided by a power of two near its largest magnitude first, as two exact factors: one
    would overflow for subnormal rows). CPU rows in one numba pass each (``fused``, once the
    kernel is usable: [`recallkit.engine.jit.usable`][recallkit.engine.jit.usable]), otherwise torch
    operations (what a device runs: no host read); any order of the squares' sum is within the
    bound's float64 term."""
    if fused and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        out = np.empty(x.shape[0], dtype=np.float64)
        if not x.shape[0]:
            return torch.from_numpy(out)
        rows = x.detach().contiguous().numpy()
        args = (rows, rows.view(np.uint32 if rows.dtype == np.float32 else np.uint64), out)
        if jit.usable(_robust_norms_numba, args):
            _robust_norms_numba(*args)
            return torch.from_numpy(out)
    x = x.to(torch.float64)
    top = x.abs().amax(dim=1) if x.shape[1] else torch.zeros(x.shape[0], dtype=torch.float64)
    _, exponent = torch.frexp(top)
    half = torch.div(-exponent, 2, rounding_mode="floor").to(torch.float64)
    rest = -exponent.to(torch.float64) - half
    scaled = (x * torch.exp2(half)[:, None]) * torch.exp2(rest)[:, None]
    return torch.linalg.vector_norm(scaled, dim=1) * torch.exp2(-half - rest)


def pow2_scales(norms: torch.Tensor, cap_log2: int = MAX_SCALE_LOG2 // 2) -> torch.Tensor:
    """Per row, the power of two that brings ``norms`` into ``[0.5, 1)`` (1 for a zero row),
    at most ``2**cap_log2`` and at least ``2**-cap_log2``."""
    _, exponent = torch.frexp(norms.to(torch.float64))
    exponent = torch.where(norms > 0, exponent, torch.zeros_like(exponent))
    exponent = exponent.clamp(-cap_log2, cap_log2)
    return torch.ldexp(torch.ones_like(norms, dtype=torch.float64), -exponent)


def reference_filter(
    raw: torch.Tensor,
    sq: torch.Tensor,
    norm: torch.Tensor,
    metric: str,
    dtype: torch.dtype,
    scale: float | None = None,
) -> tuple[torch.Tensor, float, float]:
    """A block's filter rows, their scale and their largest norm (float64).

    cosine: ``r / |r|`` (scale 1); dot: ``s r``; euclidean: ``[s r, s² |r|²]``, with ``s`` the
    power of two that brings the block's largest norm into ``[0.5, 1)`` (or ``scale``).
    """
    n, d = raw.shape
    if metric != "cosine" and scale is None:
        scale = float(pow2_scales(largest_norm(raw).reshape(1))[0])
    scale = 1.0 if metric == "cosine" else float(scale)
    if raw.device.type == "cpu" and metric != "euclidean":  # one pass, the same roundings
        factor = norm if metric == "cosine" else torch.full((n,), scale, dtype=torch.float64)
        out = filter_rows(raw, factor, metric == "cosine", dtype, norms=False)[0]
        return out, scale, float(largest_norm(out))
    width = d + (metric == "euclidean")
    out = torch.empty((n, width), dtype=dtype, device=raw.device)
    step = 8192
    for start in range(0, n, step):
        stop = min(start + step, n)
        x = raw[start:stop].to(torch.float64)
        if metric == "cosine":
            out[start:stop] = (x / norm[start:stop, None]).to(dtype)
        else:
            out[start:stop, :d] = (x * scale).to(dtype)
            if metric == "euclidean":
                out[start:stop, d] = (sq[start:stop] * (scale * scale)).to(dtype)
    return out, scale, float(largest_norm(out))


@dataclass
class QueryFilter:
    """A query chunk's filter rows against one block, with their per-row power-of-two scales
    (``filter = scale_i · block scale · exact``) and float64 norms."""

    rows: torch.Tensor
    scale: torch.Tensor
    norms: torch.Tensor

    def __getitem__(self, rows: torch.Tensor) -> QueryFilter:
        return QueryFilter(self.rows[rows], self.scale[rows], self.norms[rows])


def query_filter(
    raw: torch.Tensor,
    sq: torch.Tensor,
    norm: torch.Tensor,
    metric: str,
    block_scale: float,
    dtype: torch.dtype,
    fused: bool = False,
) -> QueryFilter:
    """The chunk's filter rows such that ``filter = scale_i · block_scale · exact score``
    (module docstring); ``fused``: on CPU rows, one pass ([`filter_rows`][filter_rows],
    [`robust_norms`][robust_norms]) without a float64 copy of the chunk (cosine and dot)."""
    if fused and raw.device.type == "cpu" and metric != "euclidean":
        if metric == "cosine":
            scale = torch.ones(raw.shape[0], dtype=torch.float64)
            rows, norms = filter_rows(raw, norm, True, dtype, norms=True)
        else:
            scale = pow2_scales(robust_norms(raw, fused))
            scale = torch.minimum(scale, torch.full_like(scale, 2.0**MAX_SCALE_LOG2 / block_scale))
            rows, norms = filter_rows(raw, scale, False, dtype, norms=True)
        return QueryFilter(rows, scale, norms)
    x = raw.to(torch.float64)
    if metric == "cosine":
        scale = torch.ones(raw.shape[0], dtype=torch.float64, device=raw.device)
        rows = x / norm[:, None]
    else:
        scale = pow2_scales(robust_norms(x, fused))
        # c_i · s stays below 2**MAX_SCALE_LOG2 (thresholds and bounds stay finite).
        scale = torch.minimum(scale, torch.full_like(scale, 2.0**MAX_SCALE_LOG2 / block_scale))
        if metric == "euclidean":
            ratio = EUCLIDEAN_RATIO_LOG2.get(dtype, DEFAULT_RATIO_LOG2)
            scale = torch.minimum(scale, torch.full_like(scale, block_scale * 2.0**ratio))
            rows = torch.cat([2.0 * x * scale[:, None], (-scale / block_scale)[:, None]], dim=1)
        else:
            rows = x * scale[:, None]
    filtered = rows.to(dtype).contiguous()
    return QueryFilter(filtered, scale, robust_norms(rows, fused))


def own_filter(
    gemm: torch.Tensor, block_scale: float, metric: str, fused: bool = False
) -> QueryFilter:
    """The filter of queries that are the block's own rows (leave-one-out on one tensor, cosine
    or dot): the block's filter rows themselves, at the block's scale (``fused`` as in
    [`query_filter`][query_filter])."""
    c = gemm.shape[0]
    scale = torch.full((c,), block_scale, dtype=torch.float64, device=gemm.device)
    if metric == "cosine":
        scale = torch.ones_like(scale)
    return QueryFilter(gemm, scale, robust_norms(gemm, fused))


def error_bound(
    product: Product, qf: QueryFilter, max_norm: float, dim: int, block_scale: float, metric: str
) -> torch.Tensor:
    """Per query row, the bound ``eps_i`` on ``|filter - scale_i · block_scale · exact|``
    (module docstring), on the rows' device, float64."""
    terms = dim + 1
    gamma = 2.0 * (
        (terms + 8) * product.unit
        + 2.0 * product.input_rounding
        + product.output_rounding
        + 2.0 * dim * 2.0**-53
    )
    tiny = TINY[product.dtype]
    norms = qf.norms.to(torch.float64)
    absolute = 4.0 * terms * tiny * (1.0 + norms + max_norm)
    if metric != "cosine":  # the exact score's own underflow, in filter units
        absolute = absolute + 8.0 * (dim + 2) * 2.0**-1074 * qf.scale * block_scale
    return gamma * norms * max_norm + absolute


def bounds(
    centre: torch.Tensor, eps: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Filter bounds ``centre -/+ eps`` rounded outwards to ``dtype``; ``+inf`` where the centre
    is not finite (a slot without a threshold item)."""
    lo = (centre - eps).to(dtype)
    hi = (centre + eps).to(dtype)
    lo = torch.nextafter(lo, torch.full_like(lo, -torch.inf))
    hi = torch.nextafter(hi, torch.full_like(hi, torch.inf))
    # Excluded candidates score -inf: a finite lower bound keeps them out of every window.
    lo = lo.clamp(min=torch.finfo(dtype).min)
    off = ~torch.isfinite(centre)
    return torch.where(off, torch.inf, lo), torch.where(off, torch.inf, hi)


def round_down(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (float64) in ``dtype``, rounded towards ``-inf`` (``-inf`` stays)."""
    y = x.to(dtype)
    too_high = y.to(torch.float64) > x
    return torch.where(too_high, torch.nextafter(y, torch.full_like(y, -torch.inf)), y)


def top_floor(
    kth: torch.Tensor, eps: torch.Tensor, dtype: torch.dtype, ks: torch.Tensor
) -> torch.Tensor:
    """``(c,)`` lower bounds of top-k windows: the k-th filter score minus ``2 eps``, rounded
    down to ``dtype``; every finite score where fewer than k exist; ``+inf`` where k = 0."""
    lo = kth.to(torch.float64) - 2.0 * eps
    lo = torch.where(torch.isneginf(kth), torch.full_like(lo, torch.finfo(dtype).min), lo)
    lo = round_down(lo, dtype)
    return torch.where(ks.to(lo.device) <= 0, torch.full_like(lo, torch.inf), lo)


def scaled_centre(best: torch.Tensor, qf: QueryFilter, block_scale: float) -> torch.Tensor:
    """Threshold items' exact scores ``(c, g)`` on the filter's scale."""
    factor = (qf.scale.to(best.device) * block_scale)[:, None]
    return best * factor


@contextlib.contextmanager
def no_autocast(device: torch.device) -> Iterator[None]:
    """The engine's GEMMs outside any caller's autocast region (CPU and the device): autocast
    would run them in bfloat16 under a bound made for float32."""
    with torch.autocast(device_type="cpu", enabled=False):
        if device.type not in ("cpu", "meta"):
            with torch.autocast(device_type=device.type, enabled=False):
                yield
        else:
            yield


def _legacy_precision() -> str | None:
    """``torch.get_float32_matmul_precision()``, or ``None`` where the new precision API is in
    use (reading the legacy setting then raises)."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return None


def _new_precision(backend: Any) -> str | None:
    """The new API's float32 precision of a backend (``"ieee"``, ``"tf32"``, ``"bf16"``), its
    inherited global one where it says ``"none"``, or ``None`` without the new API."""
    value = getattr(backend, "fp32_precision", None)
    if value is None:
        return None
    value = str(value).lower()
    if value == "none":
        value = str(getattr(torch.backends, "fp32_precision", "none")).lower()
    return None if value == "none" else value


_ROUNDING = {"ieee": 0.0, "tf32": 2.0**-10, "bf16": 2.0**-8}


def float32_matmul_rounding(device: torch.device) -> float:
    """The relative rounding of a float32 ``torch.mm`` input on ``device``: 0 in IEEE float32;
    ``2**-10`` where TF32 may be used; ``2**-8`` where bfloat16 may (``"medium"``, ``"bf16"``).
    Read through the new precision API (``torch.backends.*.matmul.fp32_precision``) where it is
    set, else the legacy one; an unknown state counts as TF32. ``"medium"`` set through the
    legacy API counts as bfloat16 on every device (torch reports CUDA's state as ``"tf32"``
    then, while its documentation allows bfloat16 products)."""
    legacy = _legacy_precision()
    if legacy == "medium":
        return 2.0**-8
    if device.type == "cuda":
        new = _new_precision(torch.backends.cuda.matmul)
    else:
        new = _new_precision(getattr(getattr(torch.backends, "mkldnn", None), "matmul", None))
    if new is not None:
        return _ROUNDING.get(new, 2.0**-8)
    if legacy not in (None, "highest"):
        return 2.0**-10
    if device.type != "cuda":
        return 0.0 if legacy == "highest" else 2.0**-10
    try:
        tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:  # legacy and new APIs mixed: assume the wider rounding
        return 2.0**-10
    return 2.0**-10 if tf32 or legacy is None else 0.0


# ----------------------------------------------------------------------------------------------
# The torch back end's products: the same results by torch operations (any device), or by the
# fused Triton kernels ([`recallkit.engine.triton_backend`][recallkit.engine.triton_backend]).


def _fp16_accumulation() -> bool:
    try:
        return bool(getattr(torch.backends.cuda.matmul, "allow_fp16_accumulation", False))
    except RuntimeError:
        return True


def check_low_precision(low: torch.dtype, device_type: str) -> None:
    """Refuse a float16 filter on a device whose float16 GEMMs may accumulate in float16
    (``torch.backends.cuda.matmul.allow_fp16_accumulation``): beyond the filter's bound."""
    if low == torch.float16 and device_type != "cpu" and _fp16_accumulation():
        raise RecallkitError(
            Text(
                "{f16} cannot run while torch.backends.cuda.matmul.allow_fp16_accumulation is "
                "True: "
                "float16 accumulation is beyond the filter's error bound. Use {bf16} or {f32}, or "
                "unset it.",
                f16=("precision", "float16"),
                bf16=("precision", "bfloat16"),
                f32=("precision", "float32"),
            )
        )


# ----------------------------------------------------------------------------------------------
# Kernel sets: the same results, computed by torch operations or by fused Triton kernels.


class TorchKernels:
    """Exact scores and float32 re-scores with torch operations (any device)."""

    name = "torch"
    fused = False  # no fused threshold pass: the chunk's scores are a torch.mm

    def exact(
        self, space: Any, chunk: Any, block: Any, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """Exact scores of ``(chunk row, local col)`` pairs; padding rows give ``-inf``."""
        cols = cols.clamp(0, max(block.rows - 1, 0))
        return exact.exact_torch(
            chunk.raw,
            chunk.aux(space.metric),
            block.data,
            block.aux(space.metric),
            rows,
            cols,
            space.metric,
        )

    def dots(
        self, a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        """float32 dot products of filter rows for pairs (any order); padding gives ``-inf``."""
        out = torch.empty(rows.shape[0], dtype=b.dtype, device=b.device)
        step = max(1024, (1 << 24) // max(b.shape[1], 1))
        for begin in range(0, rows.shape[0], step):
            r = rows[begin : begin + step]
            c = cols[begin : begin + step]
            value = (a[r.clamp(min=0)] * b[c.clamp(min=0)]).sum(dim=1)
            out[begin : begin + step] = torch.where(r >= 0, value, -torch.inf)
        return out

    def product(self, qf: QueryFilter, block: Any, low: torch.dtype | None):
        """The chunk's filter scores against ``block`` (float32, or float64) and the GEMM's
        [`Product`][Product]."""
        a = qf.rows
        if low is not None:
            b_low = low_rows(block, low)
            if a.device.type == "cpu":  # the same products, summed in float32
                scores = a.to(low).to(torch.float32) @ b_low.to(torch.float32).T
            else:
                check_low_precision(low, a.device.type)
                scores = torch.mm(a.to(low), b_low.T, out_dtype=torch.float32)
            unit = 2.0**-23 if a.device.type != "cpu" else 2.0**-24
            return scores, Product(low, unit, INPUT_ROUNDING[low])
        scores = a @ block.gemm.T
        if a.dtype == torch.float64:
            return scores, Product.plain(torch.float64)
        rounding = float32_matmul_rounding(a.device)
        unit = 2.0**-23 if rounding else 2.0**-24
        return scores, Product(torch.float32, unit, rounding)


def low_rows(block: Any, dtype: torch.dtype) -> torch.Tensor:
    """The block's filter rows in a low-precision type, kept on the block."""
    key = ("low", dtype)
    if key not in block.cache:
        block.cache[key] = block.gemm.to(dtype)
    return block.cache[key]
