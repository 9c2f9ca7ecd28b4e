"""CUDA runs give the CPU's exact results (skipped without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recallkit import map_at_r, nearest_neighbors, recall_at_k

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
def test_cuda_equals_cpu(precision):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 64)).astype(np.float32)
    x[1500:] = x[:1500] + rng.standard_normal((1500, 64)).astype(np.float32) * 1e-5
    labels = rng.integers(0, 300, size=3000)
    cpu = recall_at_k(x, x, labels, labels, (1, 5), query_in_reference=True)
    gpu = recall_at_k(
        x, x, labels, labels, (1, 5), query_in_reference=True, device="cuda", precision=precision
    )
    np.testing.assert_array_equal(cpu.first_hit_ranks, gpu.first_hit_ranks)
    assert map_at_r(x, x, labels, labels, query_in_reference=True) == map_at_r(
        x, x, labels, labels, query_in_reference=True, device="cuda", precision=precision
    )
    a = nearest_neighbors(x[:100], x, 10)
    b = nearest_neighbors(torch.from_numpy(x[:100]).cuda(), torch.from_numpy(x).cuda(), 10)
    assert torch.equal(a[0], b[0].cpu())
