"""The device path's Triton kernels, run on CPU tensors through Triton's interpreter.

Exact scores are compared bit for bit with the numba kernel and with a numpy float64 loop of the
definition written here; the filter pass with a brute force of its rule on integer-valued rows,
whose filter scores are exact in float32 whatever the summation order. The interpreter never
fuses a multiply-add, so the fused-multiply-add case is also checked where a GPU would differ:
in the PTX the exact kernel compiles to for sm_90 (no GPU needed).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")

from recallkit.engine import exact  # noqa: E402
from recallkit.engine import triton_kernels as tk  # noqa: E402
from tests import brute  # noqa: E402

SENTINEL = 2**63 - 1
METRICS = ("dot", "cosine", "euclidean")


@pytest.fixture(autouse=True)
def _interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# ---------------------------------------------------------------------------------------------
# Independent references.


def definition(q, r, qa, ra, rows, cols, metric, qs=None, rs=None):
    """The exact score, a numpy float64 loop: products then one addition per dimension."""
    q = np.asarray(q, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    qs = np.ones(len(q)) if qs is None else np.asarray(qs, dtype=np.float64)
    rs = np.ones(len(r)) if rs is None else np.asarray(rs, dtype=np.float64)
    live = rows >= 0
    i, j = np.where(live, rows, 0), cols
    x = q[i] * qs[i][:, None]
    y = r[j] * rs[j][:, None]
    dot = np.zeros(len(rows))
    for k in range(q.shape[1]):
        dot = dot + x[:, k] * y[:, k]
    if metric == "cosine":
        out = dot / (qa[i] * ra[j])
    elif metric == "euclidean":
        out = 2.0 * dot - ra[j]
    else:
        out = dot
    return np.where(live, out, -np.inf)


def sq_loop(x):
    x = np.asarray(x, dtype=np.float64)
    s = np.zeros(len(x))
    for k in range(x.shape[1]):
        s = s + x[:, k] * x[:, k]
    return s


def aux(x, metric):
    """(aux as the kernels take it, numpy copy): norms for cosine, squared norms otherwise."""
    s = sq_loop(x)
    a = np.sqrt(s) if metric == "cosine" else s
    return torch.from_numpy(a), a


def hard_rows(n, d, seed, dtype):
    """Random rows with an exact duplicate, a row one ulp above another in every element, and a
    row one ulp away in its last element only: near-ties at every level of the exact score."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(dtype)
    x[1] = x[0]
    x[2] = np.nextafter(x[0], dtype(np.inf))
    x[3] = x[0]
    x[3, -1] = np.nextafter(x[0, -1], dtype(-np.inf))
    return x


def all_pairs(n, m, seed, padding=5):
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), m)
    cols = np.tile(np.arange(m), n)
    rows = np.concatenate([rows, np.full(padding, -1)])
    cols = np.concatenate([cols, rng.integers(0, m, padding)])
    order = rng.permutation(len(rows))
    return rows[order], cols[order]


def t64(x):
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.int64))


def numba_scores(q, qa, r, ra, rows, cols, metric):
    """The CPU path's kernel on the non-padding pairs."""
    live = rows >= 0
    out = np.full(len(rows), -np.inf)
    got = exact.exact_numba(
        torch.from_numpy(q), qa, torch.from_numpy(r), ra, t64(rows[live]), t64(cols[live]), metric
    )
    out[live] = got.numpy()
    return out


def same_bits(a, b):
    a = np.ascontiguousarray(a, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    return a.shape == b.shape and np.array_equal(a.view(np.int64), b.view(np.int64))


# ---------------------------------------------------------------------------------------------
# exact_scores


DTYPES = [
    (np.float32, np.float32),
    (np.float64, np.float64),
    (np.float32, np.float64),
    (np.float64, np.float32),
]


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("dtypes", DTYPES, ids=lambda d: f"{d[0].__name__}-{d[1].__name__}")
def test_exact_scores_bit_for_bit(metric, dtypes):
    q = hard_rows(6, 37, 1, dtypes[0])
    r = hard_rows(8, 37, 2, dtypes[1])
    r[5] = q[4]  # a reference row equal to a query row
    qa, qa_np = aux(q, metric)
    ra, ra_np = aux(r, metric)
    rows, cols = all_pairs(6, 8, 3)
    got = tk.exact_scores(
        torch.from_numpy(q), qa, torch.from_numpy(r), ra, t64(rows), t64(cols), metric
    ).numpy()
    assert same_bits(got, definition(q, r, qa_np, ra_np, rows, cols, metric))
    assert same_bits(got, numba_scores(q, qa, r, ra, rows, cols, metric))
    full = brute.fixed_order_scores64(q, r, metric)
    live = rows >= 0
    assert same_bits(got[live], full[rows[live], cols[live]])
    assert np.all(np.isneginf(got[~live]))
    # Duplicates tie; float32 rows one ulp apart differ in the exact score (their products are
    # exact in float64).
    at = {(a, b): got[p] for p, (a, b) in enumerate(zip(rows, cols, strict=True)) if a >= 0}
    assert at[(0, 0)] == at[(1, 0)] and at[(0, 4)] == at[(1, 4)]
    if dtypes[0] == np.float32:
        assert at[(0, 4)] != at[(2, 4)] and at[(0, 4)] != at[(3, 4)]


@pytest.mark.parametrize("metric", METRICS)
def test_exact_scores_one_dimension_and_scales(metric):
    rng = np.random.default_rng(4)
    q = rng.standard_normal((5, 1)).astype(np.float32)
    r = rng.standard_normal((7, 1))
    qs = 2.0 ** rng.integers(-3, 4, 5)
    rs = 2.0 ** rng.integers(-3, 4, 7)
    qa, qa_np = aux(q, metric)
    ra, ra_np = aux(r, metric)
    rows, cols = all_pairs(5, 7, 5, padding=3)
    plain = tk.exact_scores(
        torch.from_numpy(q), qa, torch.from_numpy(r), ra, t64(rows), t64(cols), metric
    ).numpy()
    assert same_bits(plain, definition(q, r, qa_np, ra_np, rows, cols, metric))
    assert same_bits(plain, numba_scores(q, qa, r, ra, rows, cols, metric))
    scaled = tk.exact_scores(
        torch.from_numpy(q),
        qa,
        torch.from_numpy(r),
        ra,
        t64(rows),
        t64(cols),
        metric,
        q_scale=torch.from_numpy(qs),
        r_scale=torch.from_numpy(rs),
    ).numpy()
    assert same_bits(scaled, definition(q, r, qa_np, ra_np, rows, cols, metric, qs, rs))
    live = rows >= 0
    assert not same_bits(scaled[live], plain[live])  # the scales are applied


def test_scales_on_many_dimensions():
    q = hard_rows(4, 23, 6, np.float64)
    r = hard_rows(5, 23, 7, np.float32)
    qs = np.array([0.5, 4.0, 1.0, 2.0**-20])
    rs = np.array([8.0, 1.0, 0.25, 2.0**30, 1.0])
    rows, cols = all_pairs(4, 5, 8, padding=2)
    qa, qa_np = aux(q * qs[:, None], "cosine")
    ra, ra_np = aux(r * rs[:, None], "cosine")
    got = tk.exact_scores(
        torch.from_numpy(q),
        qa,
        torch.from_numpy(r),
        ra,
        t64(rows),
        t64(cols),
        1,
        q_scale=torch.from_numpy(qs),
        r_scale=torch.from_numpy(rs),
    ).numpy()
    assert same_bits(got, definition(q, r, qa_np, ra_np, rows, cols, "cosine", qs, rs))


def _fma_rows():
    """Two dimensions where a fused multiply-add changes the float64 dot: the unfused sum is
    ``-(1 + 2^-29) + fl((1 + 2^-30)^2) = 0`` exactly, the fused one keeps the product's 2^-60."""
    a = 1.0 + 2.0**-30
    q = np.array([[-(1.0 + 2.0**-29), a]])
    r = np.array([[1.0, a]])
    return q, r


def test_fma_case_is_unfused():
    q, r = _fma_rows()
    first = q[0, 0] * r[0, 0]
    unfused = first + q[0, 1] * r[0, 1]
    fused = float(Fraction(first) + Fraction(q[0, 1]) * Fraction(r[0, 1]))  # one rounding
    assert unfused == 0.0 and fused == 2.0**-60  # the case discriminates
    rows, cols = t64([0, -1]), t64([0, 0])
    got = tk.exact_scores(torch.from_numpy(q), None, torch.from_numpy(r), None, rows, cols, 0)
    assert same_bits(got.numpy(), [0.0, -np.inf])
    zero = torch.zeros(1, dtype=torch.float64)
    ref = exact.exact_numba(
        torch.from_numpy(q), zero, torch.from_numpy(r), zero, rows[:1], cols[:1], "dot"
    )
    assert same_bits(ref.numpy(), [0.0])


# ---------------------------------------------------------------------------------------------
# exact_beats and exact_best


def _count_setup(metric, seed=9):
    """A (c = 5, g = 3) count pass: slot 0 at a real item, slot 1 at a score with another index
    (ties on both sides), slot 2 off (-inf); reference rows 0, 1 and 6 equal, at global indices
    where they tie."""
    q = hard_rows(5, 19, seed, np.float32)
    r = hard_rows(8, 19, seed + 1, np.float64)
    r[6] = r[0]
    qa, qa_np = aux(q, metric)
    ra, ra_np = aux(r, metric)
    col_index = np.array([40, 3, 17, 8, 25, 11, 2, 30])
    rows, cols = all_pairs(5, 8, seed + 2, padding=0)
    rows = np.repeat(rows, 3)
    cols = np.repeat(cols, 3)
    slots = np.tile(np.arange(3), len(rows) // 3)
    pad = np.array([-1, -1, -1])
    rows, cols, slots = (
        np.concatenate([v, w]) for v, w in ((rows, pad), (cols, [1, 2, 3]), (slots, [0, 1, 2]))
    )
    every = np.repeat(np.arange(5), 8), np.tile(np.arange(8), 5)
    full = definition(q, r, qa_np, ra_np, *every, metric)
    assert same_bits(full, numba_scores(q, qa, r, ra, *every, metric))
    full = full.reshape(5, 8)
    best = np.empty((5, 3))
    where = np.empty((5, 3), dtype=np.int64)
    for i in range(5):
        best[i, 0], where[i, 0] = full[i, 1], col_index[1]  # tied by rows 0 and 6
        best[i, 1], where[i, 1] = full[i, 3], col_index[3] + 5  # another index, same score
        best[i, 2], where[i, 2] = -np.inf, SENTINEL
    return q, r, qa, ra, full, col_index, rows, cols, slots, best, where


@pytest.mark.parametrize("metric", METRICS)
def test_exact_beats(metric):
    q, r, qa, ra, full, col_index, rows, cols, slots, best, where = _count_setup(metric)
    expect_counts = np.zeros((5, 3), dtype=np.int64) + np.arange(15).reshape(5, 3)
    expect_ties = np.zeros((5, 3), dtype=np.int64) + 7
    for i, j, t in zip(rows, cols, slots, strict=True):
        if i < 0:
            continue
        e, b, w, gj = full[i, j], best[i, t], where[i, t], col_index[j]
        expect_counts[i, t] += (e > b) or (e == b and gj < w)
        expect_ties[i, t] += e == b and gj != w
    counts = torch.arange(15, dtype=torch.int64).reshape(5, 3)
    ties_storage = torch.full((3, 5), 7, dtype=torch.int64)
    ties = ties_storage.T  # in place through any strides
    tk.exact_beats(
        torch.from_numpy(q),
        qa,
        torch.from_numpy(r),
        ra,
        t64(rows),
        t64(cols),
        t64(slots),
        torch.from_numpy(best),
        torch.from_numpy(where),
        t64(col_index),
        metric,
        counts,
        ties,
    )
    assert counts.tolist() == expect_counts.tolist()
    assert ties_storage.T.tolist() == expect_ties.tolist()
    # The setup's ties are real: slot 0 ties with the duplicate rows, slot 1 with row 3 itself.
    assert (expect_ties[:, 0] > 7).all() and (expect_ties[:, 1] > 7).all()
    assert (expect_counts[:, 2] == np.arange(15).reshape(5, 3)[:, 2] + 8).all()
    again = torch.zeros((5, 3), dtype=torch.int64)
    tk.exact_beats(
        torch.from_numpy(q),
        qa,
        torch.from_numpy(r),
        ra,
        t64(rows),
        t64(cols),
        t64(slots),
        torch.from_numpy(best),
        torch.from_numpy(where),
        t64(col_index),
        metric,
        again,
    )
    assert again.tolist() == (expect_counts - np.arange(15).reshape(5, 3)).tolist()


def _brute_best(full, col_index, rows, cols, c):
    best = np.full(c, -np.inf)
    where = np.full(c, SENTINEL, dtype=np.int64)
    ties = np.zeros(c, dtype=np.int64)
    for i in range(c):
        mine = [(full[i, j], col_index[j]) for a, j in zip(rows, cols, strict=True) if a == i]
        mine = [(e, g) for e, g in mine if not np.isnan(e)]
        if mine:
            best[i] = max(e for e, _ in mine)
            where[i] = min(g for e, g in mine if e == best[i])
            ties[i] = sum(e == best[i] for e, _ in mine)
    return best, where, ties


def _pairs_for_best(seed):
    """About 60% of the pairs of chunk rows 1..3, row 0 only at the three equal reference rows
    0, 1, 6 (global 40, 3, 2; row 1 twice), row 4 only padding, chunk rows 5, 6 nothing."""
    rng = np.random.default_rng(seed)
    rows, cols = all_pairs(5, 8, seed, padding=0)
    pick = (rng.random(len(rows)) < 0.6) & (rows >= 1) & (rows <= 3)
    rows = np.concatenate([rows[pick], [0, 0, 0, 0, -1, -1]])
    cols = np.concatenate([cols[pick], [0, 1, 6, 1, 2, 3]])
    order = rng.permutation(len(rows))
    return rows[order], cols[order]


@pytest.mark.parametrize("metric", METRICS)
def test_exact_best(metric):
    q, r, qa, ra, full, col_index, *_ = _count_setup(metric, seed=12)
    rows, cols = _pairs_for_best(13)
    best, where, ties = tk.exact_best(
        torch.from_numpy(q),
        qa,
        torch.from_numpy(r),
        ra,
        t64(rows),
        t64(cols),
        t64(col_index),
        metric,
        7,
    )
    b, w, n = _brute_best(full, col_index, rows, cols, 7)
    assert same_bits(best.numpy(), b)
    assert where.tolist() == w.tolist() and ties.tolist() == n.tolist()
    assert where[0] == 2 and ties[0] == 4  # the equal rows: lowest global index, all counted
    assert where[4] == where[5] == SENTINEL and np.isneginf(best[4:].numpy()).all()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_exact_best_infinite_and_nan_scores():
    big = 1e300
    q = np.array([[big, big], [big, -big], [big, big]])
    r = np.array([[-big, -big], [big, big], [1.0, 2.0], [-big, -big]])
    # Row 0 scores -inf twice; row 1 NaN (inf - inf) and -1e300; row 2 +inf and 3e300.
    rows = np.array([0, 0, 1, 1, 2, 2])
    cols = np.array([0, 3, 1, 2, 1, 2])
    full = definition(
        q, r, None, None, np.repeat(np.arange(3), 4), np.tile(np.arange(4), 3), "dot"
    ).reshape(3, 4)
    assert np.isneginf(full[0, 0]) and np.isnan(full[1, 1]) and full[2, 1] == np.inf
    col_index = np.array([9, 4, 6, 5])
    best, where, ties = tk.exact_best(
        torch.from_numpy(q),
        None,
        torch.from_numpy(r),
        None,
        t64(rows),
        t64(cols),
        t64(col_index),
        0,
        4,
    )
    assert same_bits(best.numpy(), [-np.inf, full[1, 2], np.inf, -np.inf])
    assert where.tolist() == [5, 6, 4, SENTINEL] and ties.tolist() == [2, 1, 1, 0]
    b, w, n = _brute_best(full, col_index, rows, cols, 4)
    assert same_bits(best.numpy(), b) and where.tolist() == w.tolist() == [5, 6, 4, SENTINEL]
    assert n.tolist() == [2, 1, 1, 0]
    # A NaN with the sign bit clear (x86 makes inf - inf negative, a GPU positive) must not be
    # a row's best either: row 1's auxiliary is +NaN, so all its cosine scores are.
    qa = torch.tensor([1.0, np.nan, 1.0], dtype=torch.float64)
    assert not np.signbit(qa[1].numpy())
    ones = torch.ones((3, 2), dtype=torch.float64)
    best, where, ties = tk.exact_best(
        ones, qa, ones, ones[:, 0], t64([0, 1, 1]), t64([2, 0, 1]), t64(col_index[:3]), 1, 2
    )
    assert best.tolist() == [2.0, -np.inf] and where.tolist() == [6, SENTINEL]
    assert ties.tolist() == [1, 0]


# ---------------------------------------------------------------------------------------------
# filter_window


def integer_rows(n, w, seed, dtype):
    """Integer rows in [-3, 3]: exact in every filter dtype, and so are their dot products (at
    most 9 w in magnitude), whatever the summation order."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (n, w)).astype(np.float32)
    return torch.from_numpy(x).to(dtype), x.astype(np.float64)


def brute_window(s, lo, hi, considered):
    c, g = lo.shape
    above = np.zeros((c, g), dtype=np.int64)
    window = set()
    for i in range(c):
        for t in range(g):
            for j in range(s.shape[1]):
                if considered[i, j]:
                    above[i, t] += s[i, j] > hi[i, t]
                    if lo[i, t] <= s[i, j] <= hi[i, t]:
                        window.add((i, j, t))
    return above, window


def considered_pairs(c, m, codes=None, lists=None, positives=None):
    ok = np.ones((c, m), dtype=bool)
    for i in range(c):
        for j in range(m):
            if codes is not None and codes[0][i] >= 0 and codes[0][i] == codes[1][j]:
                ok[i, j] = False
            if lists is not None and j in set(lists[i]):
                ok[i, j] = False
            if positives is not None and positives[0][i] != positives[1][j]:
                ok[i, j] = False
    return ok


def thresholds_on_scores(s, seed, g=3):
    """Slot 0 ``[s[i, j0], s[i, j1]]`` (bounds equal to scores), slot 1 the single point
    ``s[i, j2]``, slot 2 off (``lo = hi = +inf``)."""
    rng = np.random.default_rng(seed)
    c, m = s.shape
    lo = np.full((c, g), np.inf, dtype=np.float32)
    hi = np.full((c, g), np.inf, dtype=np.float32)
    for i in range(c):
        a, b, p = s[i, rng.integers(0, m, 3)]
        lo[i, 0], hi[i, 0] = min(a, b), max(a, b)
        lo[i, 1] = hi[i, 1] = p
    return lo, hi


FILTER_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _check_window(out, expect_above, expect_window, capacity):
    above, window, count = out
    assert above.dtype == window.dtype == count.dtype == torch.int64 and count.dim() == 0
    assert above.tolist() == expect_above.tolist()
    assert int(count) == len(expect_window)
    w = window.tolist()
    written = [tuple(x) for x in w if x != [-1, -1, -1]]
    assert len(written) == min(capacity, len(expect_window))
    assert len(set(written)) == len(written) and set(written) <= expect_window
    assert w[len(written) :] == [[-1, -1, -1]] * (capacity - len(written))


@pytest.mark.parametrize("dtype", FILTER_DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["plain", "excluded", "positives"])
def test_filter_window(dtype, variant):
    c, m, w = 20, 37, 21  # several programs along both axes; w not a multiple of any block
    a, a64 = integer_rows(c, w, 20, dtype)
    b, b64 = integer_rows(m, w, 21, dtype)
    b[5], b64[5] = b[4], b64[4]  # equal columns: equal scores
    s = a64 @ b64.T
    lo, hi = thresholds_on_scores(s, 22)
    rng = np.random.default_rng(23)
    kw, codes, lists, positives = {}, None, None, None
    if variant == "excluded":
        codes = (rng.integers(-1, 3, c), rng.integers(-1, 3, m))  # -1: no code, never equal
        lists = rng.integers(-1, m, (c, 2))
        lists[0] = [-1, -1]
        lists[1] = [4, 4]
        kw = dict(exclude_codes=tuple(map(t64, codes)), exclude_lists=t64(lists))
    if variant == "positives":
        positives = (rng.integers(0, 4, c), rng.integers(0, 4, m))
        positives[1][[7, 8]] = 9  # codes no query has
        positives[0][3] = 5  # a row without positives
        kw = dict(positive_codes=tuple(map(t64, positives)))
    ok = considered_pairs(c, m, codes, lists, positives)
    if variant != "plain":
        assert 0 < ok.sum() < c * m
    rowmax = torch.full((c,), -torch.inf)
    out = tk.filter_window(
        a, b, torch.from_numpy(lo), torch.from_numpy(hi), 400, rowmax=rowmax, **kw
    )
    above, window = brute_window(s, lo, hi, ok)
    assert len(window) > c and any(t == 1 for _, _, t in window)
    assert not any(t == 2 for _, _, t in window) and above[:, 2].sum() == 0
    _check_window(out, above, window, 400)
    expect_max = np.where(ok.any(axis=1), np.where(ok, s, -np.inf).max(axis=1), -np.inf)
    assert rowmax.tolist() == expect_max.tolist()
    if variant == "positives":
        assert rowmax[3] == -np.inf


def test_filter_window_capacity_overflow():
    a, a64 = integer_rows(18, 5, 30, torch.float32)
    b, b64 = integer_rows(40, 5, 31, torch.float32)
    s = a64 @ b64.T
    lo = np.full((18, 2), -4.0, dtype=np.float32)
    hi = np.full((18, 2), 4.0, dtype=np.float32)
    lo[:, 1] = hi[:, 1] = 0.0
    above, window = brute_window(s, lo, hi, np.ones(s.shape, dtype=bool))
    assert len(window) > 40
    for capacity in (0, 7, 40, len(window), len(window) + 3):
        out = tk.filter_window(a, b, torch.from_numpy(lo), torch.from_numpy(hi), capacity)
        assert out[1].shape == (capacity, 3)
        _check_window(out, above, window, capacity)


def test_filter_window_rowmax_accumulates_over_blocks():
    a, a64 = integer_rows(9, 6, 40, torch.float16)
    b, b64 = integer_rows(30, 6, 41, torch.float16)
    lo = hi = torch.full((9, 1), torch.inf)
    rowmax = torch.full((9,), -torch.inf)
    tk.filter_window(a, b[:17], lo, hi, 1, rowmax=rowmax)
    tk.filter_window(a, b[17:], lo, hi, 1, rowmax=rowmax)
    assert rowmax.tolist() == (a64 @ b64.T).max(axis=1).tolist()


# ---------------------------------------------------------------------------------------------
# pair_dots


def test_pair_dots_within_the_float32_bound():
    rng = np.random.default_rng(50)
    w = 70
    a = rng.standard_normal((10, w)).astype(np.float32)
    b = rng.standard_normal((12, w)).astype(np.float32)
    rows, cols = all_pairs(10, 12, 51, padding=4)
    got = tk.pair_dots(torch.from_numpy(a), torch.from_numpy(b), t64(rows), t64(cols)).numpy()
    assert got.dtype == np.float32
    live = rows >= 0
    x, y = a[rows[live]].astype(np.float64), b[cols[live]].astype(np.float64)
    exact = (x * y).sum(axis=1)  # products exact in float64; the sum's error is negligible here
    u = 2.0**-24
    gamma = w * u / (1 - w * u)  # any order: w roundings (products and sums) at most
    bound = gamma * np.abs(x * y).sum(axis=1)
    assert np.all(np.abs(got[live].astype(np.float64) - exact) <= bound)
    assert np.all(np.isneginf(got[~live]))


def test_pair_dots_exact_on_integer_rows():
    a, a64 = integer_rows(6, 33, 52, torch.float32)
    b, b64 = integer_rows(9, 33, 53, torch.float32)
    rows, cols = all_pairs(6, 9, 54)
    got = tk.pair_dots(a, b, t64(rows), t64(cols)).numpy()
    s = a64 @ b64.T
    assert got.tolist() == np.where(rows >= 0, s[np.maximum(rows, 0), cols], -np.inf).tolist()


def test_argument_checks():
    x = torch.ones((2, 3))
    pairs = t64([0]), t64([1])
    with pytest.raises(ValueError, match="cosine needs"):
        tk.exact_scores(x, None, x, None, *pairs, "cosine")
    with pytest.raises(ValueError, match="mode"):
        tk.exact_scores(x, None, x, None, *pairs, "manhattan")
    with pytest.raises(ValueError, match="float32 or float64"):
        tk.exact_scores(x.half(), None, x, None, *pairs, 0)
    with pytest.raises(ValueError, match="float32"):
        tk.filter_window(x, x, torch.zeros((2, 1), dtype=torch.float64), torch.zeros((2, 1)), 4)
    with pytest.raises(ValueError, match="share a dtype"):
        tk.filter_window(x, x.half(), torch.zeros((2, 1)), torch.zeros((2, 1)), 4)
    # Empty inputs launch nothing and give empty or zero results.
    empty = t64([])
    assert tk.exact_scores(x, None, x, None, empty, empty, 0).shape == (0,)
    best, where, ties = tk.exact_best(x, None, x, None, empty, empty, empty, 0, 2)
    assert best.tolist() == [-np.inf] * 2 and where.tolist() == [SENTINEL] * 2
    assert ties.tolist() == [0, 0]
    above, window, count = tk.filter_window(x[:0], x, torch.zeros((0, 2)), torch.zeros((0, 2)), 2)
    assert above.shape == (0, 2) and window.tolist() == [[-1, -1, -1]] * 2 and int(count) == 0


# ---------------------------------------------------------------------------------------------
# Launches, host reads, the interpreter switch.


def _calls(d, p):
    """Every public kernel once, with pairs over rows of dimension ``d``."""
    rng = np.random.default_rng(d)
    q = torch.from_numpy(rng.standard_normal((4, d)))
    r = torch.from_numpy(rng.standard_normal((6, d)).astype(np.float32))
    qa = torch.ones(4, dtype=torch.float64)
    ra = torch.ones(6, dtype=torch.float64)
    rows, cols = t64(rng.integers(-1, 4, p)), t64(rng.integers(0, 6, p))
    index = t64(np.arange(6))
    lo = torch.zeros((4, 2))
    zeros, best = torch.zeros_like(rows), torch.zeros((4, 1), dtype=torch.float64)
    zeros2, counts, ties = (torch.zeros((4, 1), dtype=torch.int64) for _ in range(3))
    return {
        "exact_scores": lambda: tk.exact_scores(q, qa, r, ra, rows, cols, 1),
        "exact_beats": lambda: tk.exact_beats(
            q, qa, r, ra, rows, cols, zeros, best, zeros2, index, 2, counts, ties
        ),
        "exact_best": lambda: tk.exact_best(q, qa, r, ra, rows, cols, index, 0, 4),
        "pair_dots": lambda: tk.pair_dots(q.float(), r, rows, cols),
        "filter_window": lambda: tk.filter_window(
            q.float(), r, lo, lo + 1, 8, rowmax=torch.zeros(4)
        ),
    }


def test_one_launch_per_call_whatever_d(monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction

    launches = []
    original = InterpretedFunction.run

    def counting(self, *args, **kwargs):
        launches.append((self.__name__, kwargs.get("enable_fp_fusion")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", counting)
    expected = {
        "exact_scores": 1,
        "exact_beats": 1,
        "exact_best": 2,
        "pair_dots": 1,
        "filter_window": 1,
    }
    for d, p in ((1, 3), (45, 70)):
        for name, call in _calls(d, p).items():
            launches.clear()
            call()
            assert len(launches) == expected[name], (name, d)
            fusion = {f for _, f in launches}
            assert fusion == ({False} if name.startswith("exact") else {True}), name


def test_no_host_reads(monkeypatch):
    reads = collections.Counter()
    module = tk.__name__

    def counting(name, original):
        def wrapper(*args, **kwargs):
            if sys._getframe(1).f_globals.get("__name__") == module:
                reads[name] += 1
            return original(*args, **kwargs)

        return wrapper

    for name in (
        "cpu",
        "item",
        "tolist",
        "numpy",
        "nonzero",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
    ):
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    for call in _calls(5, 40).values():
        call()
    assert reads == collections.Counter()
    # The check sees a read made from the module.
    exec(compile("x.item()", tk.__file__, "exec"), {"__name__": module, "x": torch.ones(())})
    assert reads == collections.Counter({"item": 1})


def test_interpreter_setting_read_at_first_use(monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    assert not isinstance(tk._SOURCES["exact"], (JITFunction, InterpretedFunction))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not tk.interpreting() and not tk.available("cpu")
    if isinstance(triton.language.standard.cdiv, JITFunction):  # triton imported without it
        assert type(tk._kernel("exact")) is JITFunction
    else:  # imported under the interpreter (tests/cpu.env): its library cannot compile
        with pytest.raises(RuntimeError, match="imported with TRITON_INTERPRET"):
            tk._kernel("exact")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert tk.interpreting() and tk.available("cpu")
    assert type(tk._kernel("exact")) is InterpretedFunction
    assert not tk.available("cuda")  # compiled kernels only, never the interpreter on CUDA
    assert not tk.available("meta")


# ---------------------------------------------------------------------------------------------
# A fresh interpreter with TRITON_INTERPRET unset when triton is imported: what a GPU compiles
# (PTX for sm_90, the H100/H200, built without a GPU), then the variable set late.

_FRESH = r"""
import json, os, sys
import numpy as np, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
from recallkit.engine import triton_kernels as tk

TYPES = {torch.float32: "*fp32", torch.float64: "*fp64", torch.int64: "*i64",
         torch.bfloat16: "*bf16", torch.float16: "*fp16"}
recorded = []

class Recorder:
    def __init__(self, name):
        self.name = name
    def __getitem__(self, grid):
        return lambda *args, **kwargs: recorded.append((self.name, args, kwargs))

def ptx(name, args, kwargs, **options):
    fn = JITFunction(tk._SOURCES[name])
    signature, constants = {}, {}
    for arg, value in zip(fn.arg_names, args):
        if isinstance(value, torch.Tensor):
            signature[arg] = TYPES[value.dtype]
        else:
            signature[arg] = "i32" if abs(value) < 2**31 else "i64"
    for arg, value in kwargs.items():
        if arg in fn.arg_names:
            signature[arg], constants[arg] = "constexpr", value
    launch = {k: v for k, v in kwargs.items() if k in ("num_warps", "num_stages",
                                                      "enable_fp_fusion")}
    launch.update(options)
    source = ASTSource(fn, signature, constants)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=launch).asm["ptx"]

def instructions(text):
    return {op: op in text for op in ("fma.rn.f64", "mul.rn.f64", "add.rn.f64", "div.rn.f64")}

q = torch.tensor([[-(1.0 + 2.0**-29), 1.0 + 2.0**-30]], dtype=torch.float64)
r = torch.tensor([[1.0, 1.0 + 2.0**-30]], dtype=torch.float64)
one = torch.ones(1, dtype=torch.float64)
i0 = torch.zeros(1, dtype=torch.int64)
g1 = lambda dtype: torch.zeros((1, 1), dtype=dtype)
kernel, target = tk._kernel, tk._target
tk._kernel, tk._target = Recorder, (lambda device: "cuda")
tk.exact_scores(q, one, r, one, i0, i0, 1, q_scale=one, r_scale=one)
tk.exact_beats(q, one, r.float(), one, i0, i0, i0, g1(torch.float64), g1(torch.int64), i0, 2,
               g1(torch.int64), g1(torch.int64))
tk.exact_best(q, one, r, one, i0, i0, i0, 0, 1)
tk.pair_dots(q.float(), r.float(), i0, i0)
if os.environ.get("FILTER_DTYPES"):
    for dtype in os.environ["FILTER_DTYPES"].split(","):
        dtype = getattr(torch, dtype)
        a, b = torch.zeros((4, 8), dtype=dtype), torch.zeros((5, 8), dtype=dtype)
        codes = (torch.zeros(4, dtype=torch.int64), torch.zeros(5, dtype=torch.int64))
        tk.filter_window(a, b, torch.zeros(4, 2), torch.zeros(4, 2), 3, exclude_codes=codes,
                         exclude_lists=torch.zeros((4, 2), dtype=torch.int64),
                         positive_codes=codes, rowmax=torch.zeros(4))
tk._kernel, tk._target = kernel, target
report = {"launches": []}
for name, args, kwargs in recorded:
    entry = {"name": name, "action": kwargs.get("ACTION"), "fusion": kwargs["enable_fp_fusion"],
             **instructions(ptx(name, args, kwargs))}
    if kwargs.get("ACTION") == 0:
        entry["fused"] = instructions(ptx(name, args, kwargs, enable_fp_fusion=True))
    report["launches"].append(entry)

os.environ["TRITON_INTERPRET"] = "1"  # after triton's import
report["late_exact"] = tk.exact_scores(q, None, r, None, i0, i0, 0).tolist()
x = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.0, 2.0]])
lo, hi = torch.full((3, 1), 2.0), torch.full((3, 1), 4.0)
above, window, count = tk.filter_window(x, x, lo, hi, 9)
found = sorted(w for w in window.tolist() if w != [-1, -1, -1])
report["late_filter"] = [above.tolist(), found, window.shape[0], int(count)]
rows, cols = torch.tensor([0, 1, -1]), torch.tensor([1, 1, 0])
report["late_pairs"] = tk.pair_dots(x, x, rows, cols).tolist()
print(json.dumps(report))
"""


def _fresh_interpreter(tmp_path, filter_dtypes=""):
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path), FILTER_DTYPES=filter_dtypes)
    done = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    return _fresh_interpreter(tmp_path_factory.mktemp("triton-cache"))


def test_exact_kernel_compiles_without_fused_multiply_add(fresh):
    """The exact kernel's PTX for sm_90: separate float64 multiplies and additions, an IEEE
    division, and no fused multiply-add; the same kernel with fusion on has one (the control:
    a GPU would then score ``_fma_rows`` 2^-60 instead of 0)."""
    exact = [e for e in fresh["launches"] if e["name"] == "exact"]
    assert [e["action"] for e in exact] == [0, 1, 2, 3]
    for e in exact:
        assert e["fusion"] is False and e["fma.rn.f64"] is False, e
        if e["action"] != 3:  # the last launch reads the scores back
            assert e["mul.rn.f64"] and e["add.rn.f64"], e
    assert exact[0]["div.rn.f64"]  # cosine
    assert exact[0]["fused"]["fma.rn.f64"] is True
    assert [e["name"] for e in fresh["launches"]][4:] == ["pair_dots"]


def test_interpreter_set_after_importing_triton(fresh):
    assert fresh["late_exact"] == [0.0]
    # Scores: [[5, 1, 4], [1, 10, -2], [4, -2, 4]]; window [2, 4], above 4.
    assert fresh["late_filter"] == [[[1], [1], [0]], [[0, 2, 0], [2, 0, 0], [2, 2, 0]], 9, 3]
    assert fresh["late_pairs"] == [1.0, 10.0, -np.inf]


@pytest.mark.skipif(
    not os.environ.get("RECALLKIT_COMPILE_FILTER"),
    reason="compiling the filter kernel for sm_90 takes 5-10 s a dtype: RECALLKIT_COMPILE_FILTER=1",
)
def test_filter_kernel_compiles_for_sm90(tmp_path):
    report = _fresh_interpreter(tmp_path, "float32,bfloat16,float16")
    assert [e["name"] for e in report["launches"]][-3:] == ["filter"] * 3
