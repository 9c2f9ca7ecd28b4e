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
    b = nearest_neighbors(
        torch.from_numpy(x[:100]).cuda(), torch.from_numpy(x).cuda(), 10, precision=precision
    )
    assert torch.equal(a[0], b[0].cpu()) and torch.equal(a[1], b[1].cpu())


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_cuda_exact_scores_equal_numba_bit_for_bit(metric):
    from recallkit import _kernels

    rng = np.random.default_rng(1)
    x = rng.standard_normal((500, 96)).astype(np.float32)
    x[250:] = np.nextafter(x[:250], np.float32(np.inf))
    for dtype in (torch.float32, torch.float64):
        t = torch.from_numpy(x).to(dtype)
        sq = _kernels.row_sq_norms(t)
        sq_cuda = _kernels.row_sq_norms(t.cuda())
        assert torch.equal(sq, sq_cuda.cpu())
        aux = _kernels.row_norms(sq) if metric == "cosine" else sq
        aux_cuda = _kernels.row_norms(sq_cuda) if metric == "cosine" else sq_cuda
        assert torch.equal(aux, aux_cuda.cpu())
        rows = torch.arange(500).repeat_interleave(500)
        cols = torch.arange(500).repeat(500)
        cpu = _kernels.exact_scores(t, aux, t, aux, rows, cols, metric)
        gpu = _kernels.exact_scores(t.cuda(), aux_cuda, t.cuda(), aux_cuda, rows, cols, metric)
        assert torch.equal(cpu, gpu)
