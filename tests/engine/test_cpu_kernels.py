"""The compiled helpers of the CPU kernels against numpy."""

from __future__ import annotations

import itertools

import numba
import numpy as np
import pytest
import torch

from recallkit.engine import cpu_kernels as kernels
from recallkit.engine.cpu_kernels import RAISE_CLOSE, _raise_floor, select


@pytest.mark.parametrize("seed", range(4))
def test_select_is_the_order_statistic(seed):
    rng = np.random.default_rng(seed)
    for n in (1, 2, 3, 7, 64, 501):
        # Few distinct values (long runs of ties), all equal, sorted, reversed and random.
        for values in (
            rng.integers(0, 3, n).astype(np.float32),
            np.full(n, 0.5),
            np.arange(n, dtype=np.float64),
            np.arange(n, dtype=np.float64)[::-1].copy(),
            np.where(rng.random(n) < 0.2, -np.inf, rng.standard_normal(n)),
        ):
            expected = np.sort(values, kind="stable")
            for j in {0, n // 3, n // 2, n - 1}:
                got = select(values.copy(), j)
                assert got == expected[j], (n, j)


@pytest.mark.parametrize("seed", range(3))
def test_a_raised_floor_stays_below_the_kth_score_and_leaves_few_items_above(seed):
    """:func:`_raise_floor` on one tile row: the new floor is at most the row's k-th largest
    value (times the row's scale) less the margin and the slack, the count it returns is that of
    its new start, and on distinct values at most ``k + RAISE_CLOSE`` items remain above the
    start (masked ``-inf`` entries are never items); with fewer than ``k`` items it changes
    nothing."""
    rng = np.random.default_rng(seed)
    width = 1024
    for k in (1, 5, 58):
        for scale, margin, slack in ((1.0, 0.0, 1e-5), (0.5, 0.01, 1e-5), (2.0**-7, 0.0, 1e-6)):
            grid = rng.permutation(width).astype(np.float32) * np.float32(2.0**-10) - 0.5
            grid[rng.random(width) < 0.1] = -np.inf
            for start in (np.float32(-np.inf), np.float32(-0.4)):
                row = grid.copy()
                floor = np.array([-np.inf if start == -np.inf else start * scale], np.float32)
                hits = int((row >= start).sum())
                new_start, new_hits = _raise_floor(
                    row, scale, start, hits, k, slack, margin, 0.0, 0, floor
                )
                finite = np.sort(row[row > -np.inf])[::-1]
                kth = float(finite[k - 1]) * scale
                assert float(floor[0]) <= kth - margin - slack + 1e-7, (k, scale, start)
                assert new_hits == int((row >= new_start).sum())
                assert float(new_start) * scale <= float(floor[0]) - margin
                if margin == 0.0:
                    assert new_hits <= k + RAISE_CLOSE, (k, scale, start, new_hits)
    row = np.full(width, -np.inf, np.float32)
    row[:3] = (0.1, 0.2, 0.3)
    floor = np.array([-np.inf], np.float32)
    assert _raise_floor(row, 1.0, np.float32(-np.inf), width, 4, 1e-6, 0.0, 0.0, 0, floor) == (
        -np.inf,
        width,
    )
    assert floor[0] == -np.inf


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_row_norms_are_the_norms_within_the_float64_term(dtype):
    """:func:`filters.robust_norms` in one numba pass (``fused``) and in torch operations, both
    against the correctly rounded norm (``math.fsum`` of exact squares of power-of-two scaled
    rows): within ``d`` float64 units, at ordinary, huge and subnormal magnitudes, and zero on a
    zero row (also with no columns)."""
    import math

    from recallkit.engine import filters

    rng = np.random.default_rng(0)
    huge = 1e300 if dtype == np.float64 else 1e38
    tiny = 5e-324 if dtype == np.float64 else 1e-45
    for magnitude in (1.0, huge, tiny, 1e-300 if dtype == np.float64 else 1e-40):
        x = (rng.standard_normal((64, 37)) * magnitude).astype(dtype)
        x[3] = 0.0
        x[5, :] = 0.0
        x[5, 7] = magnitude  # one non-zero entry
        assert np.isfinite(x).all()
        expected = []
        for row in x.astype(np.float64):
            top = float(np.abs(row).max())
            if top == 0.0:
                expected.append(0.0)
                continue
            e = math.frexp(top)[1]
            scaled = [math.ldexp(v, -e) for v in row]  # exact: no entry underflows here
            expected.append(math.ldexp(math.sqrt(math.fsum(v * v for v in scaled)), e))
        expected = np.array(expected)
        for fused in (True, False):
            got = filters.robust_norms(torch.from_numpy(x), fused).numpy()
            assert got[3] == 0.0
            np.testing.assert_allclose(got, expected, rtol=40 * 2.0**-53, atol=0)
    empty = filters.robust_norms(torch.zeros((4, 0), dtype=torch.float32), True)
    assert empty.tolist() == [0.0] * 4
    assert filters.robust_norms(torch.zeros((0, 3)), True).shape == (0,)


@pytest.mark.parametrize("metric", ["cosine", "dot"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_pass_filter_rows_are_the_torch_filter_rows(metric, dtype):
    """The CPU's one-pass filter rows (:func:`filters.filter_rows`, no float64 copy of the rows)
    against the torch operations that devices run: the query filter's rows and scales bit for
    bit and its norms within ``d`` float64 units; the block filter's rows bit for bit (queries
    of mixed magnitudes, a float32 and a float64 filter) and its largest norm likewise."""
    from recallkit.engine import exact, filters

    rng = np.random.default_rng(3)
    raw = torch.from_numpy(rng.standard_normal((70, 33)) * rng.uniform(1e-3, 1e3, (70, 1)))
    raw = raw.to(dtype)
    sq = exact.row_sq_norms(raw)
    norm = exact.row_norms(sq)
    for filter_dtype in (torch.float32, torch.float64):
        one = filters.query_filter(raw, sq, norm, metric, 0.5, filter_dtype, fused=True)
        ref = filters.query_filter(raw, sq, norm, metric, 0.5, filter_dtype, fused=False)
        assert one.rows.dtype == filter_dtype and torch.equal(one.rows, ref.rows)
        assert torch.equal(one.scale, ref.scale)
        np.testing.assert_allclose(one.norms, ref.norms, rtol=40 * 2.0**-53, atol=0)
        rows, scale, top = filters.reference_filter(raw, sq, norm, metric, filter_dtype)
        x = raw.to(torch.float64)
        want = x / norm[:, None] if metric == "cosine" else x * scale
        assert torch.equal(rows, want.to(filter_dtype))
        expected = float(filters.robust_norms(rows).max())
        assert abs(top - expected) <= 40 * 2.0**-53 * expected
    assert filters.largest_norm(torch.zeros((0, 4))).item() == 0.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_finite_check_names_the_first_bad_row(bad):
    from recallkit._inputs import checks as _checks

    x = torch.zeros((50, 9))
    x[41, 8] = bad
    x[17, 0] = bad
    with pytest.raises(ValueError, match="non-finite value in row 117"):
        _checks.check_finite_rows(x, 100, "query", "f")
    _checks.check_finite_rows(torch.zeros((0, 9)), 0, "query", "f")
    _checks.check_finite_rows(torch.zeros((5, 0)), 0, "query", "f")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("k", [3, 40])
@pytest.mark.parametrize("cascade, rel", [(False, 0.0), (True, 0.0), (True, 0.05)])
def test_running_top_k_keeps_every_item_of_the_top_k(seed, k, cascade, rel):
    """:func:`top_rows` and :func:`top_cols` (the transposed reading) over a tile whose rows hold
    from none to hundreds of items above their starting floor (the block-by-block and the
    whole-row listing of items): a row's heap holds its k best float32 scores, a reservoir every
    item at or above its k-th best, and both readings keep the same items. With ``cascade`` the
    tile is a perturbed copy of the float32 scores, each value ``v`` within ``margin + rel |v|``
    (``rel > 0``: a bound charged partly to the value, as bfloat16's output rounding; scores up to
    about 8 in magnitude, so that ``rel |v|`` exceeds ``margin`` many times), raised or lowered by
    half that or more, and the kernels score the items they admit as ``a32 · b32``."""
    from recallkit.engine.cpu_kernels import NO_CODES, _dot32, top_cols, top_rows

    rng = np.random.default_rng(seed)
    n, d = 96, 8
    a32 = rng.standard_normal((n, d)).astype(np.float32)
    b32 = rng.standard_normal((n, d)).astype(np.float32)
    # The float32 scores the kernels compute for admitted items (their own summation order).
    exact = np.array([[_dot32(x, y) for y in b32] for x in a32], dtype=np.float32)
    margin = np.full(n, 0.05)
    # |δ| <= 0.04 + 0.9 rel |exact| keeps |δ| <= margin + rel |tile| (rel <= 0.05)
    sign = np.where(rng.random(exact.shape) < 0.5, -1.0, 1.0)
    delta = sign * rng.uniform(0.5, 1.0, exact.shape) * (0.04 + 0.9 * rel * np.abs(exact))
    tile = (exact - delta).astype(np.float32) if cascade else exact
    assert np.all(np.abs(tile - exact) <= margin[:, None] + rel * np.abs(tile))
    tile = np.ascontiguousarray(tile, dtype=np.float32)
    tile[5, 7] = -np.inf  # a masked pair is never an item
    # Starting floors from far below every score (all items above it) to near the k-th best.
    position = n - k - 1 - np.arange(n) % (n - k - 1)
    floor0 = np.where(
        np.arange(n) % 3 == 0, -1e30, np.sort(exact, axis=1)[np.arange(n), position] - 0.5
    )
    ks = np.full(n, k, dtype=np.int64)
    ks[11] = 0  # a row that wants nothing
    slack = np.full(n, 1e-3)
    heap_k = k if k <= 32 else 0
    kept = []
    for kernel, source in ((top_rows, tile), (top_cols, tile.T.copy())):
        floor = floor0.astype(np.float32)
        state = dict(
            heap=np.empty((n, heap_k), np.float32),
            size=np.zeros(n, np.int64),
            floor=floor,
            buf_col=np.empty((n, 2 * k + 64), np.int64),
            buf_score=np.empty((n, 2 * k + 64), np.float32),
            fill=np.zeros(n, np.int64),
            over=np.zeros(n, bool),
        )
        kernel(
            source,
            np.ones(n, np.float32),
            0,
            0,
            ks,
            slack,
            margin if cascade else 0 * margin,
            rel,
            *state.values(),
            cascade,
            a32,
            b32,
            floor[None, :].copy(),
            NO_CODES,
            NO_CODES,
        )
        assert not state["over"].any()
        rows = {}
        for r in range(n):
            scores = np.where(np.isfinite(tile[r]), exact[r], -np.inf)
            if ks[r] == 0:
                assert state["fill"][r] == 0 and state["size"][r] == 0
                continue
            kth = np.sort(scores)[-k]
            if heap_k:
                got = np.sort(state["heap"][r, : state["size"][r]])
                np.testing.assert_array_equal(got, np.sort(scores)[-k:])
                rows[r] = tuple(got)
            else:
                cols = state["buf_col"][r, : state["fill"][r]]
                assert set(np.flatnonzero(scores >= kth)) <= set(cols.tolist())
                np.testing.assert_array_equal(
                    state["buf_score"][r, : state["fill"][r]], exact[r, cols]
                )
                rows[r] = tuple(sorted(c for c in cols.tolist() if exact[r, c] >= kth))
        kept.append(rows)
    assert kept[0] == kept[1]


@pytest.mark.parametrize("k", [3, 40])
def test_items_offered_before_the_pass_count_once(k):
    """:func:`seed_top` offers each row its known items, those whose column code is the row's
    (a score ``-inf``: a skipped one, never offered); the pass then skips them
    (:func:`top_rows`, the transposed :func:`top_cols`). The heap holds the k best of all items,
    each once; a reservoir every item at or above that k-th best, each once. Before the pass a
    row with k known items or more has its floor at their k-th best less the slack, one with
    fewer none."""
    from recallkit.engine.cpu_kernels import seed_top, top_cols, top_rows

    rng = np.random.default_rng(3)
    n, width = 60, 140
    tile = rng.standard_normal((n, width)).astype(np.float32)
    row_codes = (np.arange(n) % 4).astype(np.int64)
    row_codes[7] = 9  # a row that knows nothing
    col_codes = rng.choice(4, width, p=[0.6, 0.2, 0.1, 0.1]).astype(np.int64)
    col_codes[np.flatnonzero(col_codes == 0)[:k]] = 5
    row_codes[9] = 5  # a row that knows exactly k items
    known = col_codes[None, :] == row_codes[:, None]  # code 0: about 80 items, others fewer
    skipped = known & (rng.random((n, width)) < 0.1)
    skipped[9] = False
    tile[skipped] = -np.inf
    ptr = np.concatenate([[0], np.cumsum(known.sum(1))]).astype(np.int64)
    cols = np.nonzero(known)[1].astype(np.int64)
    ks = np.full(n, k, dtype=np.int64)
    ks[5] = 0  # a row that wants nothing
    slack = np.full(n, 1e-3)
    heap_k = k if k <= 32 else 0
    cap = 2 * k + 64
    for kernel, source in ((top_rows, tile), (top_cols, tile.T.copy())):
        state = dict(
            heap=np.empty((n, heap_k), np.float32),
            size=np.zeros(n, np.int64),
            floor=np.full(n, -np.inf, np.float32),
            buf_col=np.empty((n, cap), np.int64),
            buf_score=np.empty((n, cap), np.float32),
            fill=np.zeros(n, np.int64),
            over=np.zeros(n, bool),
        )
        seed_top(ptr, cols, tile[known], ks, slack, *state.values())
        few = 0
        for r in range(n):
            offered = np.sort(tile[r, known[r] & np.isfinite(tile[r])])
            if ks[r] == 0:
                assert state["floor"][r] == -np.inf and state["fill"][r] == 0
            elif len(offered) < k:
                few += 1
                assert state["floor"][r] == -np.inf and state["fill"][r] == len(offered)
            else:
                assert state["floor"][r] == np.float32(np.float64(offered[-k]) - 1e-3)
        assert few > 0 and few < n - 1
        kernel(
            source,
            np.ones(source.shape[0], np.float32),
            0,
            0,
            ks,
            slack,
            np.zeros(n),
            0.0,
            *state.values(),
            False,
            np.zeros((n, 1), np.float32),
            np.zeros((width, 1), np.float32),
            state["floor"][None, :].copy(),
            row_codes,
            col_codes,
        )
        assert not state["over"].any()
        for r in range(n):
            if ks[r] == 0:
                assert state["fill"][r] == 0 and state["size"][r] == 0
                continue
            items = np.flatnonzero(np.isfinite(tile[r]))
            kth = np.sort(tile[r, items])[-k]
            listed = state["buf_col"][r, : state["fill"][r]].tolist()
            assert len(set(listed)) == len(listed)  # each item once
            assert set(items[tile[r, items] >= kth]) <= set(listed) <= set(items)
            if heap_k:
                np.testing.assert_array_equal(
                    np.sort(state["heap"][r, : state["size"][r]]), np.sort(tile[r, items])[-k:]
                )


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("k", [3, 40])
def test_a_bfloat16_tile_is_read_as_the_float32_tile_that_widens_it(seed, k):
    """The tile kernels read a bfloat16 product's own bits (uint16) as exactly the float32 tile
    that widens them: the same masks, window counts and items, and running top-k states, in both
    readings (two full blocks of items and a partial one)."""
    from recallkit.engine import cpu_kernels as ck

    rng = np.random.default_rng(seed)
    n, d = 150, 8
    a32 = rng.standard_normal((n, d)).astype(np.float32)
    b32 = rng.standard_normal((n, d)).astype(np.float32)
    rounded = torch.from_numpy(a32 @ b32.T).to(torch.bfloat16)
    bits = rounded.view(torch.int16).numpy().view(np.uint16).copy()
    wide = rounded.float().numpy().copy()
    assert ck.tile_value(bits[4], 9) == wide[4, 9]
    ptr = np.arange(n + 1, dtype=np.int64) * 2  # row i excludes columns 2i and 2i + 1 (mod n)
    cols = np.sort((np.arange(2 * n).reshape(n, 2) % n), axis=1).ravel().astype(np.int64)
    for tile in (bits, wide):
        ck.mask_tile(tile, 0, 0, ptr, cols)
    np.testing.assert_array_equal((bits.astype(np.uint32) << 16).view(np.float32), wide)
    assert np.isneginf(wide[0, 0]) and ck.tile_value(bits[0], 0) == -np.inf

    ones = np.ones(n, np.float32)
    centre = np.sort(wide, axis=1)[:, [-k, -2]]
    lo, hi = centre - 0.2, centre + 0.2
    windows = []
    for tile in (bits, wide):
        got = []
        state = (
            np.zeros((n, 2), np.int64),
            np.zeros((n, 2), np.int64),
            np.zeros((n, 2, 32), np.int64),
        )
        ck.window_rows(tile, ones, 0, 0, lo, hi, 32, *state, False, a32, b32, lo, hi)
        got += [s.copy() for s in state]
        state = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros((n, 32), np.int64))
        ck.window_cols(
            tile,
            ones,
            0,
            0,
            lo[:, 0].copy(),
            hi[:, 0].copy(),
            32,
            *state,
            False,
            a32,
            b32,
            lo[:, 0].copy(),
            hi[:, 0].copy(),
        )
        got += list(state)
        for kernel in (ck.top_rows, ck.top_cols):
            floor = np.full(n, -1e30, np.float32)
            heap_k = k if k <= 32 else 0
            state = (
                np.zeros((n, heap_k), np.float32),
                np.zeros(n, np.int64),
                floor,
                np.zeros((n, 2 * k + 64), np.int64),
                np.zeros((n, 2 * k + 64), np.float32),
                np.zeros(n, np.int64),
                np.zeros(n, bool),
            )
            kernel(
                tile,
                ones,
                0,
                0,
                np.full(n, k, np.int64),
                np.full(n, 1e-3),
                np.zeros(n),
                0.0,
                *state,
                False,
                a32,
                b32,
                floor[None, :].copy(),
                ck.NO_CODES,
                ck.NO_CODES,
            )
            got += list(state)
        windows.append(got)
    assert windows[0][0].sum() > 0 and windows[0][1].sum() > 0  # items above and inside
    for x, y in zip(*windows, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("bfloat16", [False, True])
def test_window_kernels_count_items_on_the_bounds_as_inside(bfloat16):
    """:func:`window_rows` and :func:`window_cols` (no cascade) against a brute force over a tile
    of values on a grid of 1/16 whose windows' bounds are grid values: an item equal to ``lo``
    or ``hi`` is inside, above means above ``hi``, ``-inf`` entries are never counted; rows of
    scale 1, 2 and 1/2 (exact), two full blocks of 64 items and a partial one, items listed in
    column order up to the cap and counted past it."""
    from recallkit.engine import cpu_kernels as ck

    rng = np.random.default_rng(5)
    rows, width, n, cap = 40, 150, 200, 8
    row0, col0 = 30, 20
    values = rng.integers(-16, 17, (rows, width)).astype(np.float32) / 16
    values[rng.random((rows, width)) < 0.05] = -np.inf
    if bfloat16:  # the grid is exact in bfloat16: the tile holds its bits
        tile = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    else:
        tile = values
    rs = rng.choice(np.array([1.0, 2.0, 0.5], np.float32), rows)
    lo = rng.integers(-8, 8, (n, 2)).astype(np.float32) / 16
    hi = lo + rng.integers(0, 5, (n, 2)).astype(np.float32) / 16
    a32 = np.zeros((n, 4), np.float32)
    scored = values * rs[:, None]  # exact

    above, count = np.zeros((n, 2), np.int64), np.zeros((n, 2), np.int64)
    index = np.full((n, 2, cap), -1, np.int64)
    ck.window_rows(tile, rs, row0, col0, lo, hi, cap, above, count, index, False, a32, a32, lo, hi)
    for i in range(rows):
        r = row0 + i
        for t in range(2):
            s = scored[i]
            inside = np.flatnonzero((s >= lo[r, t]) & (s <= hi[r, t]))
            assert above[r, t] == int((s > hi[r, t]).sum())
            assert count[r, t] == inside.size
            stored = index[r, t, : min(cap, inside.size)]
            np.testing.assert_array_equal(stored, col0 + inside[:cap])
    assert above[row0 : row0 + rows].sum() > 0 and count[row0 : row0 + rows].sum() > rows
    bounds = np.concatenate([lo[row0 : row0 + rows], hi[row0 : row0 + rows]], axis=1)
    assert (scored[:, :, None] == bounds[:, None, :]).sum() > rows  # items on the bounds

    low, high = lo[:, 0].copy(), hi[:, 0].copy()
    above, count = np.zeros(n, np.int64), np.zeros(n, np.int64)
    index = np.full((n, cap), -1, np.int64)
    ck.window_cols(
        tile, rs, row0, col0, low, high, cap, above, count, index, False, a32, a32, low, high
    )
    for j in range(width):
        r = col0 + j
        s = scored[:, j]
        inside = np.flatnonzero((s >= low[r]) & (s <= high[r]))
        assert above[r] == int((s > high[r]).sum())
        assert count[r] == inside.size
        np.testing.assert_array_equal(index[r, : min(cap, inside.size)], row0 + inside[:cap])


def _best_by_hand(rows, score, index, count):
    """Per row: the highest score, lowest index among equals (a full stable sort of the row's
    items), and how many finite items score exactly that."""
    best = [-np.inf] * count
    where = [np.iinfo(np.int64).max] * count
    equal = [0] * count
    for r in range(count):
        items = [(float(score[p]), int(index[p])) for p in range(len(rows)) if rows[p] == r]
        if not items:
            continue
        ranked = sorted(items, key=lambda item: (-item[0], item[1]))
        best[r], where[r] = ranked[0]
        equal[r] = sum(1 for s, _ in items if s == best[r] and np.isfinite(s))
    return best, where, equal


@pytest.mark.parametrize("seed", range(6))
def test_one_pass_segment_best_is_the_tie_rule_and_the_torch_reduction(seed):
    """The CPU back end's per-row best (``cpu_kernels.segment_best``) against a full sort of
    each row's items by hand, and bit for bit against ``ties.segment_best`` (padding rows,
    ``-inf`` items, rows without items, many ties, zeros of both signs)."""
    from recallkit.engine import cpu_kernels, ties

    rng = np.random.default_rng(seed)
    count = 23
    n = int(rng.integers(0, 400))
    rows = rng.integers(-1, count, n)
    score = rng.integers(-3, 3, n).astype(np.float64) / 2
    score[rng.random(n) < 0.1] = -np.inf
    score[rng.random(n) < 0.1] = -0.0
    index = rng.permutation(10 * n + 1)[:n].astype(np.int64)
    t = [torch.from_numpy(a) for a in (rows, score, index)]
    got = cpu_kernels.segment_best(*t, count)
    want = ties.segment_best(*t, count)
    best, where, equal = _best_by_hand(rows, score, index, count)
    assert got[0].tolist() == best and got[1].tolist() == where and got[2].tolist() == equal
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
        assert torch.equal(torch.signbit(a.double()), torch.signbit(b.double()))


@pytest.mark.parametrize("seed", range(6))
def test_one_pass_split_tail_is_the_torch_split(seed):
    """The CPU back end's cut of ranked lists at k (``cpu_kernels.split_tail``): the top-k by
    hand (the first k columns, padding beyond) and the tail (items after the k-th that score
    exactly the k-th), and bit for bit ``ties.split_tail``, with and without ``kmin``."""
    from recallkit.engine import cpu_kernels, ties

    rng = np.random.default_rng(seed)
    c, width = 17, int(rng.integers(0, 12))
    score = -np.sort(rng.integers(0, 4, (c, width)).astype(np.float64), axis=1)
    index = np.tile(np.arange(width, dtype=np.int64), (c, 1))
    pad = rng.integers(0, width + 1, c)  # a row's lists end here: -1 / -inf after
    for r in range(c):
        index[r, pad[r] :] = -1
        score[r, pad[r] :] = -np.inf
    ks = rng.integers(0, width + 3, c).astype(np.int64)
    kmax = int(ks.max())
    for kmin in (0, int(ks.min())):
        args = (torch.from_numpy(index), torch.from_numpy(score), torch.from_numpy(ks))
        got = cpu_kernels.split_tail(*args, kmax=kmax, kmin=kmin)
        want = ties.split_tail(*args, kmax=kmax, kmin=kmin)
        for a, b in zip(got, want, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)
        top_i, top_s, tail_i, tail_s = (x.numpy() for x in got)
        for r in range(c):
            k = int(ks[r])
            kept = [int(i) for i in index[r, :k] if i >= 0]
            assert top_i[r].tolist() == kept + [-1] * (kmax - len(kept))
            shown = score[r, : len(kept)].tolist()
            assert top_s[r].tolist() == shown + [-np.inf] * (kmax - len(kept))
            tail = []
            if 0 < k <= width and index[r, k - 1] >= 0:
                tail = [
                    j
                    for j in range(k, width)
                    if index[r, j] >= 0 and score[r, j] == score[r, k - 1]
                ]
            assert [int(i) for i in tail_i[r] if i >= 0] == tail
            assert all(tail_s[r, : len(tail)] == (score[r, k - 1] if tail else 0))


@pytest.mark.parametrize("seed", range(3))
def test_union_kth_is_the_kth_largest_of_the_workers_buffers(seed):
    """:func:`union_kth` per row: the k-th largest of the workers' buffered scores together
    (numpy's sort of their concatenation), whatever the floors below which it looks first
    (floors under, among and above the scores: too few above falls back to every item); ``-inf``
    with fewer than k items, and where k is 0."""
    from recallkit.engine.cpu_kernels import union_kth

    rng = np.random.default_rng(seed)
    workers, rows, cap = 3, 150, 40
    scores = np.round(rng.standard_normal((workers, rows, cap)), 1).astype(np.float32)  # ties
    fills = rng.integers(0, cap + 1, (workers, rows)).astype(np.int64)
    ks = rng.integers(0, 50, rows).astype(np.int64)
    floors = rng.choice([-np.inf, -1.0, 0.0, 0.5, 3.0], (workers, rows)).astype(np.float32)
    out = np.empty(rows)
    union_kth(scores, fills, floors, ks, out)
    for r in range(rows):
        items = np.sort(np.concatenate([scores[w, r, : fills[w, r]] for w in range(workers)]))
        k = ks[r]
        expected = items[-k] if 0 < k <= len(items) else -np.inf
        assert out[r] == expected, r


@pytest.mark.parametrize("width", [300, 100_000])
def test_collected_top_items_are_each_rows_items_at_or_above_its_floor_by_column(width):
    """:func:`collect_top`: every buffered item at or above its row's floor, rows that overflowed
    left out, flat by row then ascending column; read through a bitmap of the columns (a narrow
    block) or sorted (a wide one, few items per bitmap word), the same pairs. With their scores
    (gathered branch-free, row by row in runs): the same items, each row's in buffer order."""
    from recallkit.engine.cpu_kernels import collect_top

    rng = np.random.default_rng(5)
    workers, rows, cap = 2, 90, 30
    scores = rng.standard_normal((workers, rows, cap)).astype(np.float32)
    cols = np.empty((workers, rows, cap), dtype=np.int64)
    for r in range(rows):  # distinct columns per row, across the workers
        picked = rng.choice(min(width, 300), workers * cap, replace=False)
        cols[:, r] = picked.reshape(workers, cap) * (width // 300)
    fills = rng.integers(0, cap + 1, (workers, rows)).astype(np.int64)
    lo = rng.choice([-np.inf, -0.5, 0.0, 1.0, np.inf], rows).astype(np.float32)
    over = rng.random(rows) < 0.1
    got_rows, got_cols = collect_top(scores, cols, fills, lo, over, width)
    expected = [
        (r, int(cols[w, r, a]))
        for r in range(rows)
        if not over[r]
        for w in range(workers)
        for a in range(fills[w, r])
        if scores[w, r, a] >= lo[r]
    ]
    assert list(zip(got_rows.tolist(), got_cols.tolist(), strict=True)) == sorted(expected)
    # With their scores: by row, each row's items in buffer order (the first worker's first).
    in_order = [
        (r, int(cols[w, r, a]), float(scores[w, r, a]))
        for r in range(rows)
        if not over[r]
        for w in range(workers)
        for a in range(fills[w, r])
        if scores[w, r, a] >= lo[r]
    ]
    got = collect_top(scores, cols, fills, lo, over, width, with_scores=True)
    assert got[2].dtype == np.float32
    assert list(zip(*(g.tolist() for g in got), strict=True)) == in_order


def test_label_scores_and_best_positive_candidates_come_from_one_scoring():
    """:func:`label_scores` with a bound: each row's positives (its label's members, less its
    excluded columns and those sharing its exclusion code) scored as float32 dot products of the
    rows, ``-inf`` where skipped; and the candidates for its best positive, those within
    ``2 eps`` of the best score, by row then column (none where every positive is skipped)."""
    from recallkit.engine.cpu_kernels import label_scores
    from recallkit.engine.pairs import Groups

    rng = np.random.default_rng(2)
    n, m, d = 40, 70, 16
    a = rng.standard_normal((n, d)).astype(np.float32)
    b = rng.standard_normal((m, d)).astype(np.float32)
    b[5] = b[3]  # two columns of one label with equal scores
    q_codes = rng.integers(0, 5, n).astype(np.int64)
    r_codes = rng.integers(0, 5, m).astype(np.int64)
    r_codes[5] = r_codes[3]
    groups = Groups(r_codes)
    lo, hi = groups.ranges(q_codes)
    excluded = [np.sort(rng.choice(m, 3, replace=False)) for _ in range(n)]
    excluded[0] = groups.members[lo[0] : hi[0]]  # a row whose positives are all skipped
    ex_ptr = np.concatenate([[0], np.cumsum([len(e) for e in excluded])]).astype(np.int64)
    ex_cols = np.concatenate(excluded).astype(np.int64)
    qx = rng.integers(-1, 3, n).astype(np.int64)
    rx = rng.integers(-1, 3, m).astype(np.int64)
    eps = torch.full((n,), 0.5, dtype=torch.float64)
    args = (torch.from_numpy(a), torch.from_numpy(b), q_codes, lo, hi, groups.members)
    (ptr, cols, scores), (rows, local) = label_scores(*args, ex_ptr, ex_cols, (qx, rx), eps)
    alone, none = label_scores(*args, ex_ptr, ex_cols, (qx, rx))
    assert none is None
    assert all(np.array_equal(x, y) for x, y in zip(alone, (ptr, cols, scores), strict=True))
    expected = []
    for i in range(n):
        positives = np.flatnonzero(r_codes == q_codes[i])
        assert np.array_equal(cols[ptr[i] : ptr[i + 1]], positives)
        skipped = np.isin(positives, excluded[i]) | ((qx[i] >= 0) & (rx[positives] == qx[i]))
        row = scores[ptr[i] : ptr[i + 1]]
        assert np.all(row[skipped] == -np.inf)
        exact = (a[i].astype(np.float64) * b[positives].astype(np.float64)).sum(1)
        assert np.allclose(row[~skipped], exact[~skipped], rtol=0, atol=1e-4)
        if (~skipped).any():
            best = row.max()
            expected += [
                (i, int(j)) for j, s in zip(positives, row, strict=True) if s >= best - 1.0
            ]
    assert not any(i == 0 for i, _ in expected)
    assert list(zip(rows.tolist(), local.tolist(), strict=True)) == expected


@pytest.mark.parametrize("seed", range(3))
def test_segment_top_ranks_each_rows_items_by_the_tie_rule(seed):
    """:func:`segment_top` per row: its k best items by the tie rule (higher score, then lower
    index; numpy's lexsort), ``-1``/``-inf`` past them, and the tail of the items beyond them
    tied with the k-th; short rows (sorted by insertion) and long ones (merge sort) alike, rows
    that ask for nothing or for more than they hold."""
    from recallkit.engine.cpu_kernels import INSERTION, segment_top

    rng = np.random.default_rng(seed)
    c = 40
    sizes = rng.choice([0, 1, 5, INSERTION, INSERTION + 1, 300], c)
    rows = np.repeat(np.arange(c), sizes).astype(np.int64)
    glob = np.concatenate([np.sort(rng.choice(1000, n, replace=False)) for n in sizes])
    glob = glob.astype(np.int64)
    exact = np.round(rng.standard_normal(len(rows)), 1)  # many ties
    exact[rng.random(len(rows)) < 0.05] = -np.inf
    ks = rng.integers(0, 120, c).astype(np.int64)
    ks[:3] = (0, 400, 1)
    width = int(ks.max())
    index, value, tail_index, tail_value = (
        t.numpy()
        for t in segment_top(
            torch.from_numpy(rows),
            torch.from_numpy(glob),
            torch.from_numpy(exact),
            torch.from_numpy(ks),
            width,
        )
    )
    for i in range(c):
        s, g = exact[rows == i], glob[rows == i]
        order = np.lexsort((g, -s))
        k = min(ks[i], len(s))
        assert np.array_equal(index[i, :k], g[order[:k]])
        assert np.array_equal(value[i, :k], s[order[:k]])
        assert np.all(index[i, k:] == -1) and np.all(value[i, k:] == -np.inf)
        tied = []
        if 0 < ks[i] <= len(s):
            tied = [int(j) for j in g[order[k:]][s[order[k:]] == s[order[k - 1]]]]
        assert tail_index[i][tail_index[i] >= 0].tolist() == tied
        assert np.all(tail_value[i][: len(tied)] == (s[order[k - 1]] if tied else 0))


@numba.njit(cache=False)
def _masks(row, scale, start):
    """Every item's bit of ``at_least_mask``, 64 items a mask, as booleans."""
    out = np.zeros(row.shape[0], dtype=np.bool_)
    for b in range(0, row.shape[0], kernels.LANES):
        bits = kernels.at_least_mask(row, b, scale, start)
        for t in range(kernels.LANES):
            if (bits >> np.uint64(t)) & np.uint64(1):
                out[b + t] = True
    return out


@pytest.mark.parametrize("width", [64, 100, 130, 1024])
@pytest.mark.parametrize("kind", ["float32", "float64", "bfloat16"])
def test_comparison_masks_are_each_items_scaled_value_against_its_threshold(width, kind):
    # Values on the thresholds (at or above counts), -inf, rows read with a stride (no vector
    # load), a scalar threshold and one per item, no scale and a row scale: every bit is the
    # comparison numpy makes in the same types.
    rng = np.random.default_rng(width)
    wide = rng.standard_normal(width).astype(np.float32)
    wide[::7] = -np.inf
    if kind == "bfloat16":
        bits = (wide.view(np.uint32) >> 16).astype(np.uint16)
        row, values = bits, (bits.astype(np.uint32) << 16).view(np.float32)
    else:
        row = wide.astype(kind)
        values = row
    thresholds = values.astype(np.float32).copy()
    thresholds[1::3] = np.nextafter(thresholds[1::3], np.float32(np.inf))  # just above
    thresholds[::7] = np.float32(-3.0)
    scale = np.dtype(np.float64 if kind == "float64" else np.float32).type(1.375)
    limit = thresholds.astype(values.dtype)
    products = values * scale  # rounded in the row's type: on these thresholds, at or above
    on_products = products.astype(limit.dtype)
    on_products[1::3] = np.nextafter(on_products[1::3], limit.dtype.type(np.inf))
    on_products[::7] = -3.0
    cases = [
        (scale, on_products, products >= on_products),
        (None, np.float32(0.25), values >= np.float32(0.25)),
        (None, limit, values >= limit),
        (scale, limit, values * scale >= limit),
        (scale, np.float32(0.25), values * scale >= np.float32(0.25)),
    ]
    for s, start, expected in cases:
        assert expected.any() and not expected.all()
        np.testing.assert_array_equal(_masks(row, s, start), expected)
        strided = np.repeat(row, 2)[::2]  # the same values, read with a stride
        assert strided.strides[0] != strided.itemsize
        np.testing.assert_array_equal(_masks(strided, s, start), expected)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rows_ordered_by_filter_score_mark_the_items_within_the_gap_of_a_neighbour(seed, dtype):
    # Rows of 0 to 130 items (past the insertion limit), equal filter scores and scores one
    # gap apart: the order is by descending score and ``near`` marks exactly the items whose
    # next or previous score in that order is within the row's gap (equal scores always).
    # float64 scores 1e-10 apart, equal once rounded to float32, keep their own order.
    from recallkit.engine.cpu_kernels import order_rows

    rng = np.random.default_rng(seed)
    sizes = [0, 1, 2, 5, 40, 97, 130, 300]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    filt = (rng.integers(-40, 40, starts[-1]) * 0.125).astype(dtype)
    filt[::9] = np.nextafter(filt[::9], dtype(1.0))  # a step far below the gaps
    filt[starts[-2] :] = rng.standard_normal(300)  # every bit of the scores differs somewhere
    gap = rng.choice([0.0, 0.125, 0.3], len(sizes))
    gap[-1] = 1e-3
    if dtype == np.float64:
        filt[::5] += rng.integers(1, 9, len(filt[::5])) * 1e-10
        gap = rng.choice([0.0, 1e-12], len(sizes))
    order, near = order_rows(starts, filt, gap)
    for r, (a, b) in enumerate(itertools.pairwise(starts)):
        got = order[a:b]
        assert sorted(got.tolist()) == list(range(a, b))
        values = filt[got].astype(np.float64)
        assert (np.diff(values) <= 0).all()
        close = np.diff(-values) <= gap[r]
        want = np.zeros(b - a, dtype=bool)
        want[:-1] |= close
        want[1:] |= close
        assert near[got].tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(3))
def test_ranked_rows_from_the_filter_order_are_segment_top_of_the_same_values(seed):
    # Near items carry other (exact) values inside their run, the rest keep the filter order:
    # the lists, padding and tails are segment_top's of the same values (the tie rule; its
    # rows list their items by ascending index, rank_rows' in any order).
    from recallkit.engine.cpu_kernels import INSERTION, order_rows, rank_rows, segment_top

    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 120, 30)
    c = len(sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(starts[-1])
    filt = (rng.integers(0, 60, total) * np.float32(0.5)).astype(np.float32)
    long = int(np.argmax(sizes))  # one run of near items past the insertion limit
    filt[starts[long] : starts[long + 1]] = np.float32(7.5)
    assert sizes[long] > INSERTION
    rows = np.repeat(np.arange(c), sizes)
    glob = np.concatenate([np.sort(rng.permutation(1000)[:n]) for n in sizes]).astype(np.int64)
    gap = np.full(c, 0.25)
    # rank_rows reads each row's items in any order: a shuffle within each row.
    perm = np.concatenate([a + rng.permutation(b - a) for a, b in itertools.pairwise(starts)])
    order, near = order_rows(starts, filt[perm], gap)
    value = filt[perm].astype(np.float64)
    # The near items' "exact" values: within their run, ties kept (equal filter scores stay
    # equal on some, split on others), never past a neighbouring run.
    shift = rng.choice([0.0, 0.0, 0.1, -0.1], total)
    value[near] += shift[near]
    ks = np.minimum(rng.integers(0, 70, c), np.maximum(sizes, 0)).astype(np.int64)
    ks[:3] = [0, sizes[1], sizes[2] + 5]
    width = int(ks.max())
    got = rank_rows(starts, order, value, glob[perm], near, ks, width)
    in_index_order = np.empty(total)
    in_index_order[perm] = value
    want = segment_top(
        torch.from_numpy(rows),
        torch.from_numpy(glob),
        torch.from_numpy(in_index_order),
        torch.from_numpy(ks),
        width,
    )
    assert got[2].shape[1] > 0  # tails: items equal to some row's k-th beyond it
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w.numpy())


def test_runs_split_by_closer_scores_mark_the_items_their_bounds_cannot_order():
    # Runs of near items (in order_rows' order) sorted by their closer values; an item is
    # marked when the next or the previous one of its run lies within their two bounds.
    from recallkit.engine.cpu_kernels import order_rows, split_runs

    rng = np.random.default_rng(2)
    sizes = [0, 3, 12, 40, 100]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(starts[-1])
    filt = (rng.integers(0, 25, total) * np.float32(0.5)).astype(np.float32)
    filt[starts[4] :] = np.float32(3.0)  # a run of 100 near items: past the insertion limit
    gap = np.full(len(sizes), 0.25)
    order, near = order_rows(starts, filt, gap)
    value = filt.astype(np.float64) + rng.choice([0.0, 0.01, 0.02, 0.05], total)
    bound = rng.choice([0.0, 0.004, 0.006], total)
    glob = rng.permutation(total).astype(np.int64)
    closer = split_runs(starts, order, near, value, glob, bound)
    want = np.zeros(total, dtype=bool)
    for a, b in itertools.pairwise(starts):
        t = a
        while t < b:
            if not near[order[t]]:
                t += 1
                continue
            u = t
            while u < b and near[order[u]]:
                u += 1
            run = sorted(order[t:u], key=lambda p: (-value[p], glob[p]))
            assert order[t:u].tolist() == run  # sorted in place
            for p, q in itertools.pairwise(run):
                if value[p] - value[q] <= bound[p] + bound[q]:
                    want[p] = want[q] = True
            t = u
    assert want.any() and (near & ~want).any()
    np.testing.assert_array_equal(closer, want)
