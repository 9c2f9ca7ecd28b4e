"""The compiled helpers of the CPU kernels against numpy."""

from __future__ import annotations

import numpy as np
import pytest

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
                new_start, new_hits = _raise_floor(row, scale, start, hits, k, slack, margin, 0,
                                                   floor)  # fmt: skip
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
    assert _raise_floor(row, 1.0, np.float32(-np.inf), width, 4, 1e-6, 0.0, 0, floor) == (
        -np.inf, width)
    assert floor[0] == -np.inf
