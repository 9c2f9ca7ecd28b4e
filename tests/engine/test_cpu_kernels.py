"""The compiled helpers of the CPU kernels against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from recallkit.engine.cpu_kernels import select


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
