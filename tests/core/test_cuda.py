"""CUDA runs give the CPU's exact results (skipped without a GPU), with the torch kernels and
with the fused Triton kernels, inside autocast, under TF32 and deterministic settings; host
synchronisations per call do not grow with the number of chunks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from recallkit import (
    ground_truth_ranks_from_embeddings,
    map_at_r,
    nearest_neighbors,
    r_precision,
    recall_at_k,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture(params=["torch", "triton"])
def kernels(request, monkeypatch):
    """Each device back end: the torch kernels, and the Triton kernels (where they compile)."""
    if request.param == "triton":
        from recallkit.engine import triton_kernels

        if not triton_kernels.available(torch.device("cuda")):
            pytest.skip("Triton cannot compile here (TRITON_INTERPRET set, or no Triton)")
    monkeypatch.setenv("RECALLKIT_BACKEND", request.param)
    return request.param


@pytest.mark.parametrize("precision", ["float32", "float16", "bfloat16"])
def test_cuda_equals_cpu(precision, kernels):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3000, 64)).astype(np.float32)
    x[1500:] = x[:1500] + rng.standard_normal((1500, 64)).astype(np.float32) * 1e-5
    labels = rng.integers(0, 300, size=3000)
    cpu = recall_at_k(x, x, labels, labels, (1, 5), query_in_reference=True)
    gpu = recall_at_k(
        x, x, labels, labels, (1, 5), query_in_reference=True, device="cuda", precision=precision
    )
    np.testing.assert_array_equal(cpu.first_hit_ranks, gpu.first_hit_ranks)
    assert float(map_at_r(x, x, labels, labels, query_in_reference=True)) == float(
        map_at_r(x, x, labels, labels, query_in_reference=True, device="cuda", precision=precision)
    )
    a = nearest_neighbors(x[:100], x, 10)
    b = nearest_neighbors(
        torch.from_numpy(x[:100]).cuda(), torch.from_numpy(x).cuda(), 10, precision=precision
    )
    assert np.array_equal(a[0], b[0].cpu().numpy()) and np.array_equal(a[1], b[1].cpu().numpy())


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_cuda_exact_scores_equal_numba_bit_for_bit(metric):
    from recallkit.engine import exact, triton_kernels

    rng = np.random.default_rng(1)
    x = rng.standard_normal((500, 96)).astype(np.float32)
    x[250:] = np.nextafter(x[:250], np.float32(np.inf))
    for dtype in (torch.float32, torch.float64):
        t = torch.from_numpy(x).to(dtype)
        sq = exact.row_sq_norms(t)
        sq_cuda = exact.row_sq_norms(t.cuda())
        assert torch.equal(sq, sq_cuda.cpu())
        aux = exact.row_norms(sq) if metric == "cosine" else sq
        aux_cuda = exact.row_norms(sq_cuda) if metric == "cosine" else sq_cuda
        assert torch.equal(aux, aux_cuda.cpu())
        rows = torch.arange(500).repeat_interleave(500)
        cols = torch.arange(500).repeat(500)
        cpu = exact.exact_numba(t, aux, t, aux, rows, cols, metric)
        tc = t.cuda()
        gpu = exact.exact_torch(tc, aux_cuda, tc, aux_cuda, rows.cuda(), cols.cuda(), metric)
        assert torch.equal(cpu, gpu.cpu())
        if triton_kernels.available(torch.device("cuda")):
            fused = triton_kernels.exact_scores(
                tc, aux_cuda, tc, aux_cuda, rows.cuda(), cols.cuda(), metric
            )
            assert torch.equal(cpu, fused.cpu())


def _duplicate_heavy(seed: int = 2, n: int = 4000, d: int = 48, classes: int = 400):
    """Class clusters where 20% of the rows are exact or near (1e-6) copies of others: many
    exact ties and near-ties inside every precision's window."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centres = rng.standard_normal((classes, d)).astype(np.float32)
    x = centres[labels] + 1.5 * rng.standard_normal((n, d)).astype(np.float32)
    k = n // 10
    source = rng.integers(0, n - 2 * k, k)
    x[n - 2 * k : n - k] = x[source]
    x[n - k :] = x[source] + (1e-6 * rng.standard_normal((k, d))).astype(np.float32)
    labels[n - 2 * k : n - k] = labels[source]
    labels[n - k :] = labels[source]
    return np.ascontiguousarray(x), labels


def _results(x, labels, device, precision="float32", chunk_size=None, metric="cosine"):
    kw = dict(query_in_reference=True, metric=metric, chunk_size=chunk_size)
    gpu = dict(kw, device=device, precision=precision)
    coarse = labels % 3  # three classes: the positives' step runs on the filter's window
    rng = np.random.default_rng(5)
    targets = rng.integers(0, len(x), size=(len(x), 4))
    nn = nearest_neighbors(x, x, 25, **gpu)
    return {
        "ranks": recall_at_k(x, x, labels, labels, (1, 10), **gpu).first_hit_ranks.tolist(),
        "coarse": recall_at_k(x, x, coarse, coarse, (1,), **gpu).first_hit_ranks.tolist(),
        "map_at_r": float(map_at_r(x, x, labels, labels, **gpu)),
        "r_precision": float(r_precision(x, x, labels, labels, **gpu)),
        "slots": ground_truth_ranks_from_embeddings(
            x,
            x,
            targets,
            reduce="none",
            metric=metric,
            chunk_size=chunk_size,
            device=device,
            precision=precision,
        ).tolist(),
        "neighbors": [nn[0].cpu().tolist(), nn[1].cpu().tolist()],
    }


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_every_precision_gives_the_cpu_results_on_near_duplicates(metric, kernels):
    x, labels = _duplicate_heavy()
    cpu = _results(x, labels, "cpu", metric=metric)
    for precision in ("float32", "bfloat16", "float16"):
        for chunk_size in (None, 700):
            gpu = _results(x, labels, "cuda", precision, chunk_size, metric)
            for name, value in cpu.items():
                assert gpu[name] == value, (precision, chunk_size, name)


def _syncs(fn) -> int:
    """Synchronising CUDA operations during ``fn()`` (torch's sync debug mode)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing" in str(w.message) for w in caught)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_host_syncs_per_call_do_not_grow_with_chunks(precision, kernels):
    x, labels = _duplicate_heavy(n=4096)
    xc = torch.from_numpy(x).cuda()
    targets = np.random.default_rng(6).integers(0, len(x), size=(len(x), 3))

    def calls(chunk):
        kw = dict(query_in_reference=True, chunk_size=chunk, precision=precision)
        return {
            "recall_at_k": lambda: recall_at_k(xc, xc, labels, labels, (1, 10), **kw),
            "map_at_r": lambda: float(map_at_r(xc, xc, labels, labels, **kw)),
            "slots": lambda: ground_truth_ranks_from_embeddings(
                xc, xc, targets, reduce="none", chunk_size=chunk, precision=precision
            ),
            "nearest_neighbors": lambda: nearest_neighbors(xc, xc, 50, **kw),
        }

    for fn in calls(2048).values():
        fn()  # warm-up: the first call of each may load kernels
    two = {name: _syncs(fn) for name, fn in calls(2048).items()}
    eight = {name: _syncs(fn) for name, fn in calls(512).items()}
    assert two == eight


def test_common_torch_settings_change_no_result(kernels):
    """Inside an autocast region, with TF32 matmuls (new and legacy APIs) and with
    deterministic algorithms on: the same results as the CPU."""
    x, labels = _duplicate_heavy(n=1500)
    cpu = _results(x, labels, "cpu")
    matmul = torch.backends.cuda.matmul
    saved = matmul.fp32_precision
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert _results(x, labels, "cuda") == cpu
        matmul.fp32_precision = "tf32"
        assert _results(x, labels, "cuda") == cpu
        torch.use_deterministic_algorithms(True)
        assert _results(x, labels, "cuda", "bfloat16") == cpu
    finally:
        torch.use_deterministic_algorithms(False)
        matmul.fp32_precision = saved
