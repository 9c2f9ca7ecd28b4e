"""Low-precision CPU filter tiles (:mod:`recallkit.engine.lowp`): the error bounds hold against
an independent float64 reference, on random and on adversarial rows.

The reference is computed here: products of float32 values are exact in float64, summed with
``math.fsum`` (correctly rounded) for small cases, or by a float64 GEMM less its own rounding
bound ``γ_w Σ|x_k y_k|`` (``u = 2^-53``) for larger ones. Each assertion is ``|tile - x·y| <=
eps`` with the reference's error subtracted from ``eps``; the adversarial cases also assert that
the actual error comes close to ``eps`` (so that a bound half as large would fail them).

Measured on Gaussian unit rows (256 × 256 rows; ``eps`` is the window half-width, the ratio is
``eps_i / max_j |tile - x·y|``, medians over rows):

============  ====  ========  ============
precision     w     eps       bound/actual
============  ====  ========  ============
int8          128   0.021     5.8
int8          512   0.027     11.2
bfloat16      128   0.0076    9.3
bfloat16      512   0.0074    17.9
============  ====  ========  ============

With ``value_relative=True``, bfloat16's bound is ``0.0037 + 0.0039 |tile|`` at ``w = 128``
(``0.0043`` at each row's 10th best score of 256). For comparison, the engine's float32 bound
on unit rows is ``2 (w + 9) 2^-24``: ``1.6e-5`` at ``w = 128``.

A Cauchy–Schwarz bound against the worst row of the other side is loose by about ``sqrt(w)`` on
random rows, whose rounding errors do not align; the adversarial rows show it is attained.
"""

from __future__ import annotations

import math
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from recallkit.engine import lowp

LOW = ("int8", "bfloat16")
WIDTHS = (1, 2, 7, 128, 513, 2049)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def unit_rows(rng: np.random.Generator, n: int, w: int) -> np.ndarray:
    g = rng.standard_normal((n, w))
    return (g / np.linalg.norm(g, axis=1, keepdims=True)).astype(np.float32)


def exact_dots(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x·y`` for every pair of rows in float64, and a bound on its distance to the exact value."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    w = x.shape[1]
    if x.shape[0] * y.shape[0] <= 4096:
        ref = np.array([[math.fsum(xi * yj) for yj in y64] for xi in x64]).reshape(
            x.shape[0], y.shape[0]
        )
        return ref, 2.0**-52 * np.abs(ref) + 2.0**-1074
    ref = x64 @ y64.T
    return ref, 2.0 * (w + 2) * 2.0**-53 * (np.abs(x64) @ np.abs(y64).T) + 2.0**-1074


def check(precision, x, y, a_rows=None, b_rows=None):
    """Assert both bound forms for every pair; return (max error per row, eps)."""
    a, b = lowp.prepare(x, precision), lowp.prepare(y, precision)
    ra = range(*a_rows) if a_rows else range(x.shape[0])
    rb = range(*b_rows) if b_rows else range(y.shape[0])
    tile = np.full((len(ra), len(rb)), np.nan, np.float32)
    lowp.tile_product(a, b, tile, a_rows, b_rows)
    eps = lowp.row_bounds(a, b, a_rows, b_rows)
    e, r = lowp.row_bounds(a, b, a_rows, b_rows, value_relative=True)
    ref, ref_err = exact_dots(x[ra.start : ra.stop], y[rb.start : rb.stop])
    err = np.abs(tile.astype(np.float64) - ref)
    assert eps.shape == (len(ra),) and np.all(np.isfinite(eps))
    assert np.all(err <= eps[:, None] - ref_err), np.max(err - eps[:, None])
    assert np.all(err <= e[:, None] + r * np.abs(tile) - ref_err)
    return (err + ref_err).max(axis=1), eps


# --------------------------------------------------------------------------------------------
# The bound holds


@pytest.mark.parametrize("precision", LOW)
@pytest.mark.parametrize("w", WIDTHS)
def test_bound_on_gaussian_rows(precision, w):
    rng = np.random.default_rng(w)
    check(precision, unit_rows(rng, 48, w), unit_rows(rng, 40, w))


def _pair(value_x, value_y, w, rows=8):
    x = np.tile(np.asarray(value_x, np.float32).reshape(1, -1), (rows, 1))
    y = np.tile(np.asarray(value_y, np.float32).reshape(1, -1), (rows, 1))
    return np.broadcast_to(x, (rows, w)).copy(), np.broadcast_to(y, (rows, w)).copy()


def _bf16_cases(w):
    """Adversarial bfloat16 rows: name -> (x, y, minimal attained fraction of eps)."""
    k = np.arange(w)
    c = 2.0**-5
    below = np.float32(c * (1 + 2.0**-8 - 2.0**-23))  # just below the midpoint: rounds down
    above = np.float32(c * (1 + 2.0**-8 + 2.0**-23))  # just above: rounds up
    signs = np.where(k % 3 == 0, -1.0, 1.0)
    trunc = np.zeros(w)
    trunc[0], trunc[1:2] = 1.0, 2.0**-3 * (1 - 2.0**-7)
    one_large = np.full(w, 2.0**-12 * (1 + 2.0**-8 - 2.0**-23))
    one_large[0] = 1.0
    cases = {
        # input roundings all of one sign along parallel rows; w = 257 also ties on output
        "below": (*_pair(below, below, w), 0.99 if w == 257 else 0.6),
        "above": (*_pair(above, above, w), 0.3),
        "signed": (*_pair(below * signs, below * signs, w), 0.6),
        "one_large": (*_pair(one_large, one_large, w), 0.0),
        "truncation": (*_pair(trunc, trunc, w), 0.0),
        "small_terms": (*_pair(np.where(k < 64, 1.0, 2.0**-8), np.ones(w), w), 0.0),
    }
    return cases


def _int8_cases(w):
    k = np.arange(w)
    s = 2.0**-7
    spike = np.full(w, 2.0**-12)
    spike[0] = 1.0

    def pinned(v):  # a first entry of 127 s sets the row's scale to s; the rest round by s / 2
        row = np.full(w, v)
        row[0] = 127 * s
        return row

    # residuals parallel to the rows but for the first entry: Cauchy–Schwarz is nearly an
    # equality (the cosine of (0, 1, ..., 1) and (127, 100.5, ..., 100.5): 0.889 at w = 7)
    near = 0.88 if w < 63 else 0.985  # 0.987 at w = 63
    cases = {
        "below": (*_pair(pinned((100.5 - 2.0**-16) * s), pinned((100.5 - 2.0**-16) * s), w), near),
        "above": (*_pair(pinned((100.5 + 2.0**-16) * s), pinned((100.5 + 2.0**-16) * s), w), near),
        "ties": (*_pair(pinned(100.5 * s), pinned(100.5 * s), w), near),  # half to even: down
        "spike": (*_pair(spike, spike, w), 0.0),
        "saturation": (*_pair(127 * s, np.where((k // 2) % 3 == 2, -127, 127) * s, w), 0.0),
        "odd_codes": (*_pair(127 * s, (2 * (k % 64) - 63.0) * s, w), 0.0),
    }
    return cases


@pytest.mark.parametrize("w", (1, 7, 63, 257, 2049))
@pytest.mark.parametrize("precision", LOW)
def test_bound_on_adversarial_rows(precision, w):
    cases = _int8_cases(w) if precision == "int8" else _bf16_cases(w)
    for name, (x, y, attained) in cases.items():
        err, eps = check(precision, x, y)
        if attained and w > 1:
            assert np.all(err >= attained * eps), (name, np.min(err / eps))


def test_bf16_output_rounding_is_to_8_bits():
    """A sum that ties in bfloat16 (257 c², nearest even 256 c²) on top of aligned input
    roundings: the error is 3.012 c², which a bound with output rounding 2^-9 (2.51 c²) misses."""
    c = 2.0**-5
    x, y = _pair(
        np.float32(c * (1 + 2.0**-8 - 2.0**-23)), np.float32(c * (1 + 2.0**-8 - 2.0**-23)), 257
    )
    err, eps = check("bfloat16", x, y)
    assert np.all(err > 3.01 * c * c) and np.all(err > 0.997 * eps)


def _sequential_float32_bf16(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """bfloat16 tiles summed in float32 in index order (one legitimate kernel order)."""
    xh = torch.from_numpy(x).bfloat16().float().numpy()
    yh = torch.from_numpy(y).bfloat16().float().numpy()
    acc = np.zeros((x.shape[0], y.shape[0]), np.float32)
    for k in range(x.shape[1]):
        acc += np.multiply.outer(xh[:, k], yh[:, k])  # exact products, float32 additions
    return torch.from_numpy(acc).bfloat16().float().numpy()


@pytest.mark.parametrize("w", (1025, 2049))
def test_bf16_bound_covers_float32_accumulation(w):
    """``1 + 2^-8`` then ``w - 2`` terms of ``2^-24`` along parallel rows: summed in index order
    each small term ties and is dropped, and the result ties in bfloat16 too. The float32
    accumulation error ``(w - 2) 2^-24`` is what ``γ_w ν̂ N̂`` is for; the bound is attained."""
    row = np.full(w, 2.0**-12, np.float32)
    row[:2] = 1.0, 2.0**-4
    x, y = _pair(row, row, w)
    a, b = lowp.prepare_bf16(x), lowp.prepare_bf16(y)
    eps = lowp.row_bounds(a, b)
    ref, ref_err = exact_dots(x, y)
    tile = _sequential_float32_bf16(x, y)
    assert np.all(tile == 1.0)
    err = np.abs(tile - ref)
    assert np.all(err <= eps[:, None] - ref_err) and np.all(err >= 0.99 * eps[:, None])
    check("bfloat16", x, y)  # and torch's kernel, whatever its order


def test_product_terms_follow_the_derivation():
    assert lowp.product_terms("int8", 100) == (4 * 2.0**-24, 2.0**-125)
    g = Fraction(257, 2**24) / (1 - Fraction(257, 2**24))
    c, a = lowp.product_terms("bfloat16", 257)
    exact = g + Fraction(1, 256) * (1 + g)
    assert exact <= Fraction(c) <= exact * (1 + Fraction(1, 10**12))
    assert a == 258 * 2.0**-123


@pytest.mark.parametrize("precision", LOW)
def test_rows_of_very_different_norms(precision):
    """Per-row bounds: tiny rows get tiny windows and still hold, whatever shares their chunk."""
    rng = np.random.default_rng(5)
    w = 65
    scales = np.array([1, 2.0**-10, 2.0**-40, 2.0**-100, 2.0**-120, 2.0**-126, 0, 1], np.float32)
    x = unit_rows(rng, 8, w) * scales[:, None]
    y = unit_rows(rng, 6, w)
    y[1] *= 2.0**-30
    _, eps = check(precision, x, y)
    assert eps[1] < 2.0**-9 * eps[0] and eps[2] < 2.0**-30 * eps[0] and eps[6] < 2.0**-100


@pytest.mark.parametrize("precision", LOW)
def test_values_near_underflow(precision):
    """Subnormal float32 inputs, and products far below float32's range, also of rows exactly
    representable in low precision (no residual: only the underflow term covers them)."""
    rng = np.random.default_rng(6)
    w = 33
    tiny = (rng.standard_normal((6, w)) * 2.0**-131).astype(np.float32)  # subnormal
    small = (rng.standard_normal((6, w)) * 2.0**-70).astype(np.float32)
    grid = (rng.integers(-127, 128, (6, w)) * 2.0**-80).astype(np.float32)  # tile ~ 2^-141
    grid[:, 0] = 127 * 2.0**-80  # each row's maximum: scale 2^-80, every value a code times it
    mixed = unit_rows(rng, 6, w)
    mixed[:, ::2] = tiny[:, ::2]
    x = np.concatenate([tiny, small, mixed])
    for y in (x, unit_rows(rng, 5, w), small):
        check(precision, x, y)
    assert lowp.prepare(grid, precision).residual.max() == 0
    check(precision, grid, grid)


@pytest.mark.parametrize("precision", LOW)
def test_ranges_and_strided_output(precision):
    rng = np.random.default_rng(7)
    x, y = unit_rows(rng, 50, 31), unit_rows(rng, 40, 31)
    check(precision, x, y, (3, 41), (5, 17))
    a, b = lowp.prepare(x, precision), lowp.prepare(y, precision)
    big = np.full((64, 64), 7.0, np.float32)
    lowp.tile_product(a, b, big[10:48, 20:32], (3, 41), (5, 17))
    full = lowp.tile_product(a, b, np.empty((50, 40), np.float32))
    assert np.all(big[:10] == 7) and np.all(big[:, :20] == 7) and np.all(big[:, 32:] == 7)
    sub, ref = big[10:48, 20:32], full[3:41, 5:17]
    if precision == "int8":
        assert np.array_equal(sub, ref)  # exact int32 sums: the tile shape cannot matter
    else:
        eps = lowp.row_bounds(a, b)[3:41]
        assert np.all(np.abs(sub - ref) <= 2 * eps[:, None])


# --------------------------------------------------------------------------------------------
# The bound is not absurdly loose


@pytest.mark.parametrize(
    ("precision", "w", "max_eps", "max_ratio"),
    [
        ("int8", 128, 0.03, 9),
        ("int8", 512, 0.035, 17),
        ("bfloat16", 128, 0.0085, 14),
        ("bfloat16", 512, 0.0085, 27),
    ],
)
def test_bound_is_not_absurdly_loose(precision, w, max_eps, max_ratio):
    rng = np.random.default_rng(w)
    x, y = unit_rows(rng, 256, w), unit_rows(rng, 256, w)
    err, eps = check(precision, x, y)
    ratio = np.median(eps / err)
    assert 1 < ratio < max_ratio and np.median(eps) < max_eps


# --------------------------------------------------------------------------------------------
# Preparation


def _norm_bound_ok(bound: float, v: np.ndarray) -> bool:
    """``bound >= ‖v‖`` exactly (rationals), and not inflated beyond 1e-12."""
    sq = sum((Fraction(float(t)) ** 2 for t in v), Fraction(0))
    b = Fraction(float(bound))
    return b * b >= sq and (sq == 0 or float(b * b / sq) < 1 + 1e-12)


def _smallest_scale(m: float, levels: int) -> float:
    """The smallest float32 value ``s >= 2^-100`` with ``m <= levels s`` (rationals)."""
    s = np.float32(m / levels)
    while Fraction(float(s)) * levels < Fraction(m):
        s = np.nextafter(s, np.float32(np.inf))
    while s > 0 and Fraction(float(np.nextafter(s, np.float32(0)))) * levels >= Fraction(m):
        s = np.nextafter(s, np.float32(0))
    return max(float(s), 2.0**-100)


def test_int8_round_trip():
    rng = np.random.default_rng(8)
    x = np.concatenate([unit_rows(rng, 6, 37) * np.float32(2.0**-k) for k in (0, 3, 60)])
    x[0] *= np.float32(0.1)
    x[0, 5] = 127 * 2.0**-8  # a maximum exactly on 127 s: s = 2^-8
    x[1, :] = 0
    x[2, 0] = 1.0  # max 1: s = 1/127 rounded up to float32
    x[3, :] = 1e-36  # below 127 · 2^-100: clamped scale, codes 0
    x[4, :] = 0  # float32 subnormals only: the largest magnitude's pattern has no exponent
    x[4, :3] = [2.0**-140, -(2.0**-149), 3 * 2.0**-147]
    x[5, 7] = -np.float32(2.0**31.9)  # the largest magnitude negative, near the range's end
    side = lowp.prepare_int8(x)
    codes = side.codes.numpy()
    assert side.codes.dtype == torch.int8 and side.codes.is_contiguous()
    for i, row in enumerate(x.astype(np.float64)):
        s = _smallest_scale(float(np.abs(row).max()), 127)
        assert side.scale[i] == s and side.scale32[i] == np.float32(s)
        q = np.array([round(Fraction(float(t)) / Fraction(s)) for t in row])  # half to even
        assert np.array_equal(codes[i], q) and np.abs(q).max() <= 127
        deq = side.dequantised()[i]
        assert all(Fraction(float(d)) == Fraction(s) * int(c) for d, c in zip(deq, q, strict=True))
        residual = row - deq
        assert all(
            Fraction(float(r)) == Fraction(float(t)) - Fraction(float(d))
            for r, t, d in zip(residual, row, deq, strict=True)
        )  # exact in float64
        assert _norm_bound_ok(side.norm[i], deq)
        assert _norm_bound_ok(side.source_norm[i], row)
        assert _norm_bound_ok(side.residual[i], residual)
    assert side.scale[0] == 2.0**-8 and np.all(codes[3] == 0)
    assert side.scale[2] == float(np.nextafter(np.float32(1 / 127), np.float32(1)))
    assert Fraction(side.scale[2]) * 127 > 1 and np.abs(codes[2]).max() == 127
    assert lowp.int8_scales(x).tolist() == side.scale.tolist()


def test_bf16_round_trip():
    rng = np.random.default_rng(9)
    x = unit_rows(rng, 4, 41)
    # value -> its bfloat16: ties to even, just above a tie, subnormals (flushed), rounding up
    # into the normal range, carry into the exponent
    special = {
        1 + 2.0**-8: 1.0,
        1 + 3 * 2.0**-8: 1 + 2.0**-6,
        1 + 2.0**-8 + 2.0**-23: 1 + 2.0**-7,
        -(1 + 2.0**-8): -1.0,
        2.0**-127: 0.0,
        2.0**-126 * (1 - 2.0**-9): 2.0**-126,
        2.0**-126 * (1 - 2.0**-7): 0.0,
        -0.0: 0.0,
        65504.0: 65536.0,
    }
    expect = list(special.values())
    x = np.concatenate([x, np.resize(np.array(list(special), np.float32), (1, 41))])
    subnormal = np.zeros((1, 41), np.float32)  # every value flushed: the row's x̂ is zero
    subnormal[0, :3] = [2.0**-140, -(2.0**-149), 3 * 2.0**-130]
    x = np.concatenate([x, subnormal, -x[:1] * np.float32(2.0**31)])
    side = lowp.prepare_bf16(x)
    deq = side.dequantised()
    assert deq[4, : len(expect)].tolist() == expect
    reference = torch.from_numpy(x).bfloat16().float().numpy().astype(np.float64)
    reference[np.abs(reference) < 2.0**-126] = 0.0  # subnormals flushed at preparation
    assert np.array_equal(deq, reference)
    for i, row in enumerate(x.astype(np.float64)):
        assert _norm_bound_ok(side.norm[i], deq[i])
        assert _norm_bound_ok(side.source_norm[i], row)
        assert _norm_bound_ok(side.residual[i], row - deq[i])


@pytest.mark.parametrize("precision", LOW)
def test_preparation_is_per_row(precision):
    rng = np.random.default_rng(10)
    x = unit_rows(rng, 30, 19) * (2.0 ** -rng.integers(0, 90, 30)).astype(np.float32)[:, None]
    whole = lowp.prepare(x, precision)
    perm = rng.permutation(30)
    shuffled = lowp.prepare(x[perm], precision)
    for i in range(30):
        alone = lowp.prepare(x[i : i + 1], precision)
        j = int(np.flatnonzero(perm == i)[0])
        for side, k in ((whole, i), (shuffled, j)):
            assert np.array_equal(side.dequantised()[k], alone.dequantised()[0])
            for field in ("norm", "residual", "source_norm"):
                assert getattr(side, field)[k] == getattr(alone, field)[0]


def test_int8_tile_is_the_rounded_scalings_of_the_exact_sum():
    """The int32 sums converted (exact below 2^24), then each scale applied in float32."""
    rng = np.random.default_rng(11)
    x = unit_rows(rng, 20, 1000) * np.float32(2.0**-3)
    y = unit_rows(rng, 30, 1000) * np.float32(2.0**20)  # scales above 1
    a, b = lowp.prepare_int8(x), lowp.prepare_int8(y)
    tile = lowp.tile_product(a, b, np.empty((20, 30), np.float32))
    v = a.codes.numpy().astype(np.int64) @ b.codes.numpy().astype(np.int64).T
    assert np.abs(v).max() <= 2**24
    want = (v.astype(np.float32) * b.scale32[None, :]) * a.scale32[:, None]
    assert np.array_equal(tile, want)
    exact = v * a.scale[:, None] * b.scale[None, :]  # float64: 1e-16 relative
    c, tiny = lowp.product_terms("int8", 1000)
    bound = c * np.abs(exact) + tiny
    assert np.all(np.abs(tile - exact) <= bound) and np.any(tile != exact.astype(np.float32))


def test_int32_overflow_is_refused():
    assert lowp.INT8_MAX_WIDTH * 255 * 128 < 2**31 <= (lowp.INT8_MAX_WIDTH + 1) * 255 * 128
    assert lowp.INT8_MAX_WIDTH * 127**2 < 2**31
    for w in (lowp.INT8_MAX_WIDTH, lowp.INT8_MAX_WIDTH + 1):
        x = np.full((1, w), 127 * 2.0**-7, np.float32)
        side = lowp.prepare_int8(x)
        out = np.empty((1, 1), np.float32)
        if w > lowp.INT8_MAX_WIDTH:
            with pytest.raises(ValueError, match="int32"):
                lowp.tile_product(side, side, out)
        else:
            lowp.tile_product(side, side, out)
            assert out[0, 0] == np.float32(w * 127 * 127 * 2.0**-14)


def test_invalid_inputs_are_refused():
    x = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError):
        lowp.prepare_int8(np.array([[np.inf, 0]], np.float32))
    with pytest.raises(ValueError):
        lowp.prepare_bf16(np.array([[np.nan, 0]], np.float32))
    with pytest.raises(ValueError):
        lowp.prepare_bf16(x.astype(np.float64))
    with pytest.raises(ValueError):
        lowp.prepare(x, "float16")
    with pytest.raises((TypeError, ValueError)):
        lowp.tile_product(lowp.prepare_int8(x), lowp.prepare_bf16(x), np.empty((2, 2), np.float32))
    with pytest.raises(ValueError):
        lowp.tile_product(
            lowp.prepare_int8(x), lowp.prepare_int8(x[:, :3]), np.empty((2, 2), np.float32)
        )
    with pytest.raises(ValueError):
        lowp.tile_product(lowp.prepare_int8(x), lowp.prepare_int8(x), np.empty((2, 3), np.float32))
    with pytest.raises(ValueError, match="out must be float32 of shape"):  # bits: bfloat16 only
        lowp.tile_product(lowp.prepare_int8(x), lowp.prepare_int8(x), np.empty((2, 2), np.uint16))


def test_a_bfloat16_tile_can_hold_the_products_own_bits():
    """For bfloat16 sides ``tile_product`` writes the bfloat16 results' bits into a uint16 tile
    (what the engine's tiles hold, ``lowp.tile_dtype``): their widening is the float32 tile, also
    into a strided tile."""
    rng = np.random.default_rng(5)
    a, b = lowp.prepare_bf16(unit_rows(rng, 30, 17)), lowp.prepare_bf16(unit_rows(rng, 20, 17))
    wide = lowp.tile_product(a, b, np.empty((30, 20), np.float32))
    bits = lowp.tile_product(a, b, np.empty((30, 20), lowp.tile_dtype("bfloat16")))
    assert bits.dtype == np.uint16
    np.testing.assert_array_equal((bits.astype(np.uint32) << 16).view(np.float32), wide)
    big = np.zeros((40, 40), np.uint16)
    lowp.tile_product(a, b, big[5:15, 3:23], (2, 12))
    assert np.array_equal(big[5:15, 3:23], bits[2:12]) and not big[:5].any()
    assert lowp.tile_dtype("int8") == np.float32
    assert lowp.tile_dtype("float32", np.float64) == np.float64


# --------------------------------------------------------------------------------------------
# Capabilities, timing, self-check


def _flags_here() -> set[str]:
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        return set()
    return {
        f
        for line in text.splitlines()
        if line.startswith("flags")
        for f in line.split(":")[1].split()
    }


def test_worth_timing_follows_the_flags():
    flags = _flags_here()
    assert flags <= lowp.cpu_flags()
    assert "torch:" + torch.backends.cpu.get_cpu_capability().lower() in lowp.cpu_flags()
    expect = ["float32"]
    if flags & {"avx512_bf16", "amx_bf16"}:
        expect.append("bfloat16")
    if flags & {"avx2", "asimddp", "i8mm", "avx512_vnni", "avx_vnni", "amx_int8"}:
        expect.append("int8")  # ONNX Runtime's kernels (AVX2 and up), torch's (VNNI, AMX)
    assert lowp.worth_timing() == tuple(expect)
    assert lowp.worth_timing(frozenset({"amx_bf16", "amx_int8"})) == ("float32", "bfloat16", "int8")
    assert lowp.worth_timing(frozenset({"avx2"})) == ("float32", "int8")
    assert lowp.worth_timing(frozenset({"sse4_2"})) == ("float32",)
    assert lowp.worth_timing(frozenset()) == ("float32",)
    assert [k.name for k in lowp.kernels_for("int8", frozenset({"avx2"}))] == ["onnxruntime"]


@pytest.mark.parametrize("precision", ["bfloat16", "torch-int8"])
def test_verify_passes_here_and_catches_a_weaker_arithmetic(precision, monkeypatch):
    kernel = lowp.KERNELS.get(precision, precision)
    assert lowp.verify(kernel, widths=(1, 63, 257))
    if precision == "bfloat16":  # a bound assuming output rounding to 9 bits is caught
        monkeypatch.setattr(lowp, "BF16_UNIT", 2.0**-9)
    else:  # and a bound half as large
        monkeypatch.setattr(lowp, "_round_up", lambda v: v * 0.5)
    assert not lowp.verify(kernel, widths=(257,))


def test_probe_rate():
    threads = torch.get_num_threads()
    for precision in lowp.PRECISIONS:
        rate = lowp.probe_rate(precision, 33, rows=64, repeats=1)
        assert math.isfinite(rate) and rate > 1e6
    assert torch.get_num_threads() == threads
    with pytest.raises(ValueError):
        lowp.probe_rate("float16", 8)


def test_window_ratio():
    assert lowp.window_ratio(np.array([0.5, 1.5]), np.array([0.25, 0.25])) == 4.0
    assert lowp.window_ratio(np.zeros(2), np.zeros(2)) == 1.0
    assert lowp.window_ratio(np.ones(2), np.zeros(2)) == math.inf


# --------------------------------------------------------------------------------------------
# int7 × int8 through ONNX Runtime, and the self-check that guards every int8 kernel


ORT = lowp.KERNELS["onnxruntime"]
needs_ort = pytest.mark.skipif(ORT.available() is not None, reason="onnxruntime not installed")


def test_int7_codes_and_scales():
    """``int7``: codes in [-63, 63] stored plus 64 (never above 127: no pair of ``u8 × s8``
    products can saturate an int16), the smallest float32 scale with max|x| <= 63 s."""
    x = np.array([[63 * 2.0**-7, -0.1, 0.0], [1.0, 0.5, -1.0], [0.0, 0.0, 0.0]], np.float32)
    side = lowp.prepare(x, "int7")
    assert side.codes.dtype == torch.uint8 and int(side.codes.max()) <= 127
    s1 = float(np.float32(1 / 63))  # rounds up: the smallest float32 s with 63 s >= 1
    below = np.nextafter(np.float32(s1), np.float32(0))
    assert Fraction(float(below)) * 63 < 1 <= Fraction(s1) * 63
    assert side.scale.tolist() == [2.0**-7, s1, 2.0**-100]
    # rint(-12.8) = -13; 0.5 / s1 is just below 31.5
    assert side.values().tolist() == [[63, -13, 0], [63, 31, -63], [0, 0, 0]]
    assert np.array_equal(side.dequantised(), side.values() * side.scale[:, None])


@needs_ort
@pytest.mark.parametrize("w", (1, 7, 128, 513))
def test_onnxruntime_tiles_are_exact_and_within_the_bound(w):
    rng = np.random.default_rng(w)
    x, y = unit_rows(rng, 37, w), unit_rows(rng, 45, w)
    a, b = lowp.prepare(x, "int7"), lowp.prepare(y, "int8")
    tile = lowp.tile_product(a, b, np.empty((37, 45), np.float32), kernel=ORT)
    v = a.values() @ b.values().T  # the exact integer product, then the two exact scalings
    want = (v.astype(np.float32) * b.scale32[None, :]) * a.scale32[:, None]
    assert np.array_equal(tile, want)
    eps = lowp.row_bounds(a, b)
    ref, ref_err = exact_dots(x, y)
    assert np.all(np.abs(tile - ref) <= eps[:, None] - ref_err)
    assert lowp.usable(ORT, w) is None


class _ShiftedPairs(lowp.Kernel):
    """A kernel as some int8 libraries run it on AVX2: the signed codes of the left side shifted
    by 128 to make them unsigned, each pair of adjacent ``u8 × s8`` products summed in a
    saturating int16 (``vpmaddubsw``), the shift taken off again with the right side's sums."""

    name = "shifted-pairs"
    a_form, b_form = "int7", "int8"

    def product(self, a, b, out, a0, a1, b0, b1):
        shifted = a.values()[a0:a1] + 128  # 65..191: pairs reach 2 · 191 · 127 > 32767
        right = b.values()[b0:b1]
        w = shifted.shape[1] + shifted.shape[1] % 2
        left = np.zeros((shifted.shape[0], w), np.int64)
        left[:, : shifted.shape[1]] = shifted
        other = np.zeros((right.shape[0], w), np.int64)
        other[:, : right.shape[1]] = right
        pairs = (
            left[:, None, 0::2] * other[None, :, 0::2] + left[:, None, 1::2] * other[None, :, 1::2]
        )
        total = np.clip(pairs, -32768, 32767).sum(axis=2) - 128 * right.sum(axis=1)[None, :]
        out[...] = total.astype(np.float32) * b.scale32[b0:b1][None, :]


def test_the_self_check_refuses_a_saturating_kernel_and_auto_says_why():
    kernel = _ShiftedPairs()
    rng = np.random.default_rng(3)
    small = lowp.prepare(unit_rows(rng, 8, 16) * np.float32(0.05), "int7")  # small codes: exact
    right = lowp.prepare(unit_rows(rng, 8, 16), "int8")
    out = np.empty((8, 8), np.float32)
    kernel.product(small, right, out, 0, 8, 0, 8)  # exact where no pair saturates
    exact = small.values() @ right.values().T
    assert np.array_equal(out, exact.astype(np.float32) * right.scale32[None, :])
    reason = lowp.check_int8(kernel, 64)
    assert reason is not None and "differ from the exact product" in reason
    assert lowp.check_int8(ORT, 64) is None if ORT.available() is None else True
    lowp.KERNELS[kernel.name] = kernel
    try:
        assert "not exact" in lowp.usable(kernel, 64)
        from recallkit.engine import cpu

        report = cpu.precision_report(64)
        assert "shifted-pairs (int8): not exact" in report
    finally:
        del lowp.KERNELS[kernel.name]


def test_the_report_names_the_instructions_a_kernel_lacks(monkeypatch):
    # An AVX2-only CPU: ONNX Runtime's int8 kernel runs there, torch's int8 and bfloat16 ones
    # have no instructions (and are not self-checked on their slow fallbacks).
    checked = []
    monkeypatch.setattr(lowp, "cpu_flags", lambda: frozenset({"avx2", "fma", "torch:avx2"}))
    monkeypatch.setattr(lowp, "usable", lambda kernel, w: checked.append(kernel.name))
    from recallkit.engine import cpu

    lines = cpu.precision_report(64).splitlines()
    assert lines[0] == "CPU tiles of width 64; precisions with instructions here: " + (
        "float32, int8" if ORT.available() is None else "float32"
    )
    assert (
        "  torch-int8 (int8): no int8 instructions here (avx512_vnni or avx_vnni or amx_int8)"
        in lines
    )
    assert (
        "  torch-bfloat16 (bfloat16): no bfloat16 instructions here (avx512_bf16 or amx_bf16)"
        in lines
    )
    assert checked == (["onnxruntime"] if ORT.available() is None else [])


def test_largest_magnitude_from_bit_patterns():
    rng = np.random.default_rng(11)
    rows = [
        rng.standard_normal(n).astype(np.float32) * np.float32(2.0**e)
        for n, e in ((1, 0), (7, -140), (33, -149), (64, 30), (5, -126))
    ]
    below_normal = np.float32(2.0**-126) * np.float32(1 - 2.0**-23)  # the largest subnormal
    values = (
        [0.0, -0.0],
        [-(2.0**-149)],
        [3 * 2.0**-148, -1.0],
        [below_normal],
        [-(2.0**31.5), 2.0**31],
    )
    rows += [np.array(v, np.float32) for v in values]
    wide = [rng.standard_normal(n) * 2.0**e for n, e in ((9, 0), (17, -1070), (3, 900))]
    wide += [np.array(v) for v in ([5e-324, -(2.0**-1022)], [-(2.0**1023) * 1.5, 1.0], [-0.0])]
    for row in rows + wide:
        bits = row.view(np.uint32 if row.dtype == np.float32 else np.uint64)
        assert lowp.largest_magnitude(bits) == float(np.abs(row.astype(np.float64)).max())
    for dtype, bits in ((np.float32, np.uint32), (np.float64, np.uint64)):
        for bad in (np.inf, -np.inf, np.nan):
            row = np.array([1.0, bad, -2.0], dtype).view(bits)
            assert lowp.largest_magnitude(row) >= lowp.MAX_ABS


def test_holds():
    assert lowp.holds(np.ones((2, 3), np.float32)) and lowp.holds(torch.ones(0, 3))
    below = float(np.nextafter(np.float32(2.0**32), np.float32(0)))
    for bad in (2.0**32, -(2.0**32), np.inf, -np.inf, np.nan, -(2.0**33)):
        x = np.zeros((3, 3), np.float32)
        x[0, 0] = below  # the preparing kernels find each row's largest magnitude
        x[1, 2] = bad
        assert not lowp.holds(x) and not lowp.holds(torch.from_numpy(x))
        for form in ("int8", "int7", "bfloat16"):
            with pytest.raises(ValueError, match=r"lowp\.holds"):
                lowp.prepare(x, form)
    x = np.full((2, 3), -below, np.float32)
    assert lowp.holds(x) and all(lowp.prepare(x, f).n == 2 for f in ("int8", "int7", "bfloat16"))


def test_onnxruntime_is_loaded_on_first_int8_use_only():
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, recallkit, recallkit.engine.cpu\n"
        "x = np.eye(8, dtype=np.float32)\n"
        "recallkit.recall_at_k(x, x, [0] * 8, [0] * 8, (1,), query_in_reference=True)\n"
        "print('onnxruntime' in sys.modules)\n"
    )
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert done.stdout.split()[-1] == "False"


def _run_round(choice, names, times, lead):
    """Picks one tile and records ``times[name]`` for it; returns the name picked."""
    name = choice.pick(names, lead=lead)
    choice.record(name, times[name])
    return name


def test_choice_times_each_name_in_rounds_forward_then_backward():
    names = ("float32", "bf16", "int8")
    choice = lowp.Choice(warm=set(names))
    times = {"float32": 3.0, "bf16": 1.0, "int8": 2.0}
    picked = [_run_round(choice, names, times, lead=2) for _ in range(6 * (2 + lowp.SAMPLES))]
    per_round = 2 + lowp.SAMPLES  # the round's first `lead` tiles are not timed
    expect = [n for n in (*names, *reversed(names)) for _ in range(per_round)]
    assert picked == expect
    assert {n: len(t) for n, t in choice.times.items()} == dict.fromkeys(names, 2 * lowp.SAMPLES)
    assert all(choice.pick(names) == "bf16" for _ in range(5))  # chosen: no more timing
    before = {n: list(t) for n, t in choice.times.items()}
    choice.record("bf16", 99.0)
    assert choice.times == before


def test_choice_takes_the_least_median_not_the_least_time():
    # float32 has the single fastest tile (beside idle cores), int8 the faster typical tile.
    names = ("float32", "int8")
    choice = lowp.Choice(warm=set(names))
    samples = {"float32": iter([0.9, 2.6, 2.7, 2.5, 2.6, 2.8]), "int8": iter([1.5] * 6)}
    while choice.round < 4:
        name = choice.pick(names, lead=0)
        choice.record(name, next(samples[name]))
    assert choice.pick(names) == "int8"
    assert choice.medians() == {"float32": 2.6, "int8": 1.5}


def test_untimed_tiles_run_in_the_last_choice_until_this_one_is_made():
    names = ("float32", "bf16", "int8")
    times = {"float32": 3.0, "bf16": 2.0, "int8": 1.0}
    for last, expect in (("bf16", "bf16"), (None, "float32"), ("int4", "float32")):
        choice = lowp.Choice(warm=set(names), untimed=last)
        assert choice.pick(names, timed=False) == expect  # not timed, not recorded
        choice.record(expect, 0.5)
        assert choice.times == {} and choice.round == 0
        while choice.round < len(choice.rounds):
            _run_round(choice, names, times, lead=1)
        assert choice.pick(names, timed=False) == "int8"  # this pass's choice, once made


def test_untimed_tiles_of_a_pass_run_in_the_previous_pass_choice(monkeypatch):
    # A symmetric auto pass's diagonal tiles (not timed) run in the kind the previous pass over
    # tiles of the same width chose; a process's first pass runs them in float32.
    key = ("tiles", torch.float32, 3)
    monkeypatch.setattr(lowp, "CHOICES", {})
    qf = SimpleNamespace(rows=torch.zeros((2, 3)))
    block = SimpleNamespace(gemm=torch.zeros((2, 3)))
    names = ("float32", "torch-bfloat16")
    first = lowp.TilePass(None, qf, block, 0, True, None, names, None)
    assert first.choice.untimed is None and lowp.CHOICES[key] is first.choice
    first.choice.chosen = "torch-bfloat16"
    second = lowp.TilePass(None, qf, block, 0, True, None, names, None)
    assert second.choice.untimed == "torch-bfloat16" and lowp.CHOICES[key] is second.choice


def test_after_a_clear_choice_the_next_passes_run_it_untimed_until_one_weighs_again(monkeypatch):
    # A call's chunks are passes over tiles of one width: once a pass's choice is clear (every
    # other kind at least CLEAR times slower), the next REWEIGH - 1 passes run the chosen kind
    # alone (no tile in the slower kind), and the one after weighs again; a close choice is
    # weighed again at once.
    key = ("tiles", torch.float32, 3)
    monkeypatch.setattr(lowp, "CHOICES", {})
    qf = SimpleNamespace(rows=torch.zeros((2, 3)))
    block = SimpleNamespace(gemm=torch.zeros((2, 3)))
    names = ("float32", "onnxruntime")

    class Space:  # a call's prepared rows, as the passes of one call share them
        pass

    call, other_call = Space(), Space()

    def weighed(int8_time, space=call):
        tp = lowp.TilePass(space, qf, block, 0, True, None, names, None)
        assert tp.names == names and lowp.CHOICES[key] is tp.choice
        tp.choice.times = {"float32": [1.0, 1.0, 1.0], "onnxruntime": [int8_time] * 3}
        tp.choice.round = len(names) * 2
        tp.choice.rounds = [*names, *reversed(names)]
        assert tp.choice.pick(names) == ("onnxruntime" if int8_time < 1.0 else "float32")
        return tp

    first = weighed(0.7)  # float32 is 1.43 times slower: clear
    assert first.choice.settled(names)
    for _ in range(lowp.REWEIGH - 1):
        tp = lowp.TilePass(call, qf, block, 0, True, None, names, None)
        assert tp.names == ("onnxruntime",) and tp.choice.pick(tp.names) == "onnxruntime"
        assert lowp.CHOICES[key] is first.choice
    close = weighed(0.9)  # the REWEIGH-th pass weighs again; float32 only 1.11 times slower
    assert not close.choice.settled(names)
    weighed(0.7)  # not clear: the next pass weighs at once
    weighed(0.7, other_call)  # another call weighs its own data, clear choice or not


def test_a_small_call_weighs_its_kinds_pass_by_pass_across_its_calls(monkeypatch):
    # A call of fewer than AUTO_TILES full tiles has too few tiles to weigh the kinds tile by
    # tile: each pass runs one kind in all its tiles and its whole time is that kind's sample,
    # in rounds forward then backward across the calls of one shape and request (a kind's first
    # pass in the process warms it up, untimed); the kind of least time (a load only adds time
    # to a pass) then runs SMALL_REWEIGH passes, and the next pass weighs again.
    monkeypatch.setattr(lowp, "CHOICES", {})
    monkeypatch.setattr(lowp, "WARM", {})
    qf = SimpleNamespace(rows=torch.zeros((2, 3)))
    block = SimpleNamespace(gemm=torch.zeros((2, 3)))
    names = ("float32", "torch-bfloat16", "onnxruntime")
    # Each kind's pass times in turn, its first a warm-up (not kept): bfloat16 has the least
    # time (its second pass met a load), onnxruntime the least median.
    seconds = {"float32": [9.0, 3.0, 3.0], "torch-bfloat16": [9.0, 1.0, 5.0]}
    seconds["onnxruntime"] = [9.0, 2.0, 2.0]
    cub = (5924, 5924, "lists, symmetric")

    def call(shape=cub, kinds=names):
        tp = lowp.TilePass(None, qf, block, 0, True, None, kinds, None, repeated=shape)
        (name,) = tp.names  # every tile of the pass in one kind, not timed tile by tile
        assert tp.choice.pick(tp.names) == name and tp.choice.rounds == []
        tp.passed(seconds[name].pop(0) if seconds[name] else 0.5)
        return name

    f32, bf16, ort = names
    assert [call() for _ in range(9)] == [f32, f32, bf16, bf16, ort, ort, ort, bf16, f32]
    made = lowp.CHOICES[("tiles", torch.float32, 3, cub, names)]
    assert made.times == {f32: [3.0, 3.0], bf16: [1.0, 5.0], ort: [2.0, 2.0]}
    assert made.medians() == {f32: 3.0, bf16: 1.0, ort: 2.0}  # the least of each
    assert made.chosen is None  # the next pass chooses
    assert [call() for _ in range(lowp.SMALL_REWEIGH)] == [bf16] * lowp.SMALL_REWEIGH
    assert made.times[bf16] == [1.0, 5.0]  # the chosen kind's passes are not timed
    assert lowp.CHOICES[("tiles", torch.float32, 3, cub, names)] is made
    assert call() == f32  # weighs again, the kinds warm: each pass timed
    assert lowp.CHOICES[("tiles", torch.float32, 3, cub, names)] is not made
    # Another shape or request weighs on its own.
    assert call((8131, 8131, "counts, symmetric")) == f32
    other = lowp.CHOICES[("tiles", torch.float32, 3, (8131, 8131, "counts, symmetric"), names)]
    assert other.times == {}  # its first float32 pass warms its own kernels up
    assert lowp.CHOICES[("tiles", torch.float32, 3, cub, names)].times == {"float32": [0.5]}
    # Other kinds (a precision asked for: its kernels) weigh under a key of their own.
    again = lowp.CHOICES[("tiles", torch.float32, 3, cub, names)]
    assert call(kinds=(bf16, ort)) == bf16
    assert lowp.CHOICES[("tiles", torch.float32, 3, cub, (bf16, ort))].rounds == [
        bf16,
        ort,
        ort,
        bf16,
    ]
    assert lowp.CHOICES[("tiles", torch.float32, 3, cub, names)] is again


def test_only_calls_of_enough_tiles_weigh_and_only_small_ones_across_calls():
    from recallkit.engine import cpu

    t = cpu.TILE
    small = SimpleNamespace(num_query=4 * t - 1, num_reference=4 * t - 1, options=None)
    small.options = SimpleNamespace(precision="auto")
    qf = SimpleNamespace(rows=torch.zeros((2, 3)))
    assert lowp.full_tiles(small, t) == 9 < lowp.WEIGH_TILES
    assert lowp.tile_kinds(small, qf, None, False, t) == ("float32",)
    cub = SimpleNamespace(num_query=5924, num_reference=5924)
    assert lowp.full_tiles(cub, t) == (5924 // t) ** 2 >= lowp.WEIGH_TILES
    assert lowp.repeated(cub, t, True, False, True) == (5924, 5924, "lists, symmetric")
    assert lowp.repeated(cub, t, False, True, True) == (5924, 5924, "counts and lists")
    sop = SimpleNamespace(num_query=20 * t, num_reference=20 * t)
    assert (
        lowp.full_tiles(sop, t) == lowp.AUTO_TILES
        and lowp.repeated(sop, t, True, True, False) is None
    )


def test_a_tile_runs_in_float32_while_another_thread_prepares_the_chosen_kind(monkeypatch):
    # A worker does not wait while another prepares the sides of the kind a round times: its
    # tile runs in float32, which the round does not time, and the kind is built once.
    import threading

    monkeypatch.setattr(lowp, "CHOICES", {})
    qf = SimpleNamespace(rows=torch.zeros((2, 3)))
    block = SimpleNamespace(gemm=torch.zeros((2, 3)))
    names = ("torch-bfloat16", "float32")
    tp = lowp.TilePass(None, qf, block, 0, True, None, names, None)
    tp.choice.warm.update(names)
    started, release, builds = threading.Event(), threading.Event(), []

    def build(name):
        builds.append(name)
        started.set()
        release.wait(10)
        return lowp.TileKind(name, "bfloat16", None, None)

    monkeypatch.setattr(tp, "_build", build)
    builder = threading.Thread(target=lambda: builds.append(tp.pick().name))
    builder.start()
    assert started.wait(10)
    other = tp.pick()
    assert other.name == "float32" and other is tp.kinds["float32"]
    tp.choice.record(other.name, 0.5)
    assert tp.choice.times == {} and tp.choice.round == 0
    release.set()
    builder.join(10)
    assert builds == ["torch-bfloat16", "torch-bfloat16"]  # built once, then picked
    assert tp.pick().name == "torch-bfloat16" and builds == ["torch-bfloat16"] * 2


def test_a_tile_runs_in_the_fastest_prepared_kind_while_another_prepares_the_next(monkeypatch):
    # Once kinds are timed, a worker waiting for another's preparation runs the prepared kind of
    # least median time (not float32, not a kind timed but not prepared in this pass), untimed.
    import threading

    monkeypatch.setattr(lowp, "CHOICES", {})
    qf = SimpleNamespace(rows=torch.zeros((2, 3)))
    block = SimpleNamespace(gemm=torch.zeros((2, 3)))
    names = ("float32", "torch-bfloat16", "onnxruntime", "torch-int8")
    tp = lowp.TilePass(None, qf, block, 0, True, None, names, None)
    tp.choice.warm.update(names)
    tp.kinds["torch-bfloat16"] = lowp.TileKind("torch-bfloat16", "bfloat16", None, None)
    tp.choice.times = {
        "float32": [2.0, 2.0, 2.0],
        "torch-bfloat16": [3.0, 1.0, 1.0],
        "torch-int8": [0.5] * 3,
    }
    tp.choice.round = 2  # the round of onnxruntime, not yet prepared
    started, release = threading.Event(), threading.Event()

    def build(name):
        started.set()
        release.wait(10)
        return lowp.TileKind(name, "int8", None, None)

    monkeypatch.setattr(tp, "_build", build)
    builder = threading.Thread(target=tp.pick)
    builder.start()
    assert started.wait(10)
    other = tp.pick()
    assert other is tp.kinds["torch-bfloat16"]
    tp.choice.record(other.name, 0.1)
    assert tp.choice.times["torch-bfloat16"] == [3.0, 1.0, 1.0] and tp.choice.round == 2
    release.set()
    builder.join(10)
    assert tp.pick().name == "onnxruntime"


def test_choice_drops_warm_up_lead_and_stale_tiles():
    import threading

    names = ("a", "b")
    choice = lowp.Choice(warm={"b"})
    first = choice.pick(names, lead=2)
    choice.record(first, 50.0)  # a's first tile in the process: warm-up
    assert choice.warm == {"a", "b"} and choice.times == {}
    assert choice.pick(names, lead=2) == "a"  # the round's second tile: still the lead
    choice.record("a", 40.0)
    assert choice.times == {}
    # An untimed tile (a diagonal tile) runs in the first name and is not recorded.
    assert choice.pick(names, timed=False, lead=2) == "a"
    choice.record("a", 30.0)
    assert choice.times == {}
    times = {"a": 1.0, "b": 2.0}
    while choice.round == 0:
        _run_round(choice, names, times, lead=2)
    # Rounds a, b, b, a: a tile of round 1 (b) picked by another worker and recorded once round
    # 2 (b again) is under way is dropped, though its name is the round's.
    assert [_run_round(choice, names, times, lead=2) for _ in range(2)] == ["b", "b"]  # lead
    picked, ready, go = [], threading.Event(), threading.Event()

    def slow_worker():
        picked.append(choice.pick(names, lead=2))
        ready.set()
        go.wait()
        choice.record(picked[0], 20.0)

    worker = threading.Thread(target=slow_worker)
    worker.start()
    ready.wait()
    while choice.round == 1:
        _run_round(choice, names, times, lead=2)
    go.set()
    worker.join()
    assert picked == ["b"] and choice.round == 2 and choice.rounds[2] == "b"
    assert choice.times == {"a": [1.0] * lowp.SAMPLES, "b": [2.0] * lowp.SAMPLES}
    assert choice.pick(("only",)) == "only"


def test_a_bfloat16_pass_admits_list_items_by_the_bound_charged_to_the_value(monkeypatch):
    """A bfloat16 pass of ranked lists (leave-one-out on one tensor: symmetric, each tile read
    along its rows and its columns) admits an item of value ``v`` within ``margin_i + rel |v|``
    of row ``i``'s floor. Every pair's tile value lies that close to the float32 score the
    kernels give it, read either way; ``rel`` is bfloat16's output rounding, and below
    ``|v| = 0.5`` the margin is narrower than the absolute bound's (``eps + eps32``)."""
    import recallkit
    from recallkit.engine import consumers, cpu
    from recallkit.engine.cpu_kernels import _dot32

    monkeypatch.setattr(cpu, "TILE", 64)
    rng = np.random.default_rng(5)
    n, w = 160, 96
    x = torch.from_numpy(unit_rows(rng, n, w))
    labels = torch.from_numpy(rng.integers(0, 8, n))
    seen = []
    run_tiles = cpu.run_tiles

    def spy(tp, excluded, symmetric, consumers_, cached=None):
        seen.append((tp, symmetric, next(c for c in consumers_ if isinstance(c, consumers.Top))))
        return run_tiles(tp, excluded, symmetric, consumers_, cached)

    monkeypatch.setattr(cpu, "run_tiles", spy)
    recallkit.retrieval_metrics(
        x, x, labels, labels, ["MAP@R"], query_in_reference=True, precision="bfloat16"
    )
    ((tp, symmetric, top),) = seen
    assert symmetric
    kind = tp.kinds["torch-bfloat16"]
    margin, rel = top.margin(kind)
    output = lowp.BF16_UNIT / (1 - lowp.BF16_UNIT)  # |σ - bf16(σ)| <= 2^-8 |σ|, charged to bf16(σ)
    assert output * (1 + 2.0**-20) <= rel <= output * (1 + 2.0**-19)
    tile = np.empty((n, n), np.uint16)
    kind.product(0, 0, tile)
    v = (tile.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    s32 = np.array([[_dot32(a, b) for b in tp.b32] for a in tp.a32], np.float64)
    assert np.all(np.abs(v - s32) <= margin[:, None] + rel * np.abs(v))  # along the rows
    assert np.all(np.abs(v - s32.T) <= margin[None, :] + rel * np.abs(v))  # along the columns
    absolute = (kind.eps + top.eps).numpy()
    assert np.all(margin + 0.5 * rel < absolute)
    assert np.all(margin + rel > absolute * (1 - 2.0**-10))  # no looser at |v| = 1
