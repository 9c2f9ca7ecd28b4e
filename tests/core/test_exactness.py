"""The exact score is a function of the input rows alone: every back end, filter rounding and
normalisation order gives the same ranks; no overflow, dtype or label-set size changes a result.

Expected values come from hand computation or from ``brute.fixed_order_scores64`` (the
definition, written independently) with a full stable sort.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from recallkit import (
    ground_truth_ranks_from_embeddings,
    map_at_r,
    nearest_neighbors,
    r_precision,
    recall_at_k,
    retrieval_metrics,
)
from recallkit._inputs.io import open_embeddings
from recallkit.engine import cpu, device, exact, filters, lowp
from tests import brute


def _near_ties(seed: int = 0, n: int = 300, d: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """Clusters with exact duplicates and rows that differ in the last bits."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((6, d))
    x = centres[rng.integers(0, 6, n)] + 0.05 * rng.standard_normal((n, d))
    x = x.astype(np.float32)
    x[n // 3 : n // 2] = x[: n // 2 - n // 3]  # exact duplicates
    near = x[n // 2 : n // 2 + 40].copy()
    x[n // 2 + 40 : n // 2 + 80] = np.nextafter(near, np.float32(np.inf))  # one ulp apart
    labels = rng.integers(0, 5, n)
    return x, labels


def _brute_first_hits(x, labels, metric):
    s = brute.fixed_order_scores64(x, x, metric)
    excluded = brute.excluded_sets(len(x), len(x), query_in_reference=True)
    return brute.first_hit_ranks(s, labels, labels, excluded), s, excluded


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_torch_kernels_equal_numba_bit_for_bit(metric, dtype):
    x, _ = _near_ties(1)
    x = x.astype(dtype)
    t = torch.from_numpy(x)
    sq = exact.row_sq_norms(t)  # numba on CPU tensors
    np.testing.assert_array_equal(sq.numpy(), brute_sq(x))
    np.testing.assert_array_equal(exact.row_norms(sq).numpy(), np.sqrt(sq.numpy()))
    aux = sq if metric != "cosine" else exact.row_norms(sq)
    rows = torch.arange(len(x)).repeat_interleave(len(x))
    cols = torch.arange(len(x)).repeat(len(x))
    scores = {
        "numba": exact.exact_numba(t, aux, t, aux, rows, cols, metric),
        "torch": exact.exact_torch(t, aux, t, aux, rows, cols, metric),
    }
    assert torch.equal(scores["numba"], scores["torch"])
    expected = brute.fixed_order_scores64(x, x, metric).reshape(-1)
    np.testing.assert_array_equal(scores["numba"].numpy(), expected)


def test_squared_norms_of_rows_side_by_side_equal_the_definition():
    # The CPU kernel sums four rows' squares side by side, each in its own index order: every
    # count of rows around a multiple of four, values whose sums depend on the order.
    rng = np.random.default_rng(2)
    for n in range(1, 11):
        x = (rng.standard_normal((n, 67)) * 2.0 ** rng.integers(-30, 30, (n, 67))).astype(
            np.float32
        )
        out = np.empty(n)
        exact._sq_numba(x, out)  # the kernel itself (row_sq_norms may run torch's operations)
        np.testing.assert_array_equal(out, brute_sq(x))
        np.testing.assert_array_equal(exact.row_sq_norms(torch.from_numpy(x)).numpy(), out)


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_runs_of_pairs_scored_side_by_side_equal_the_definition(metric):
    # The CPU kernel scores eight pairs of one row side by side: runs of every length around
    # eight, a row in several runs, a run longer than a thread's piece, unsorted and repeated
    # columns, padding rows (-1) between.
    x, _ = _near_ties(3)
    n = len(x)
    t = torch.from_numpy(x)
    sq = exact.row_sq_norms(t)
    aux = sq if metric != "cosine" else exact.row_norms(sq)
    rng = np.random.default_rng(4)
    rows, cols = [], []
    for length in (1, 7, 8, 9, 3, 15, 16, 17, 2, 23, 40, 600, 8):  # 600: cut into pieces
        row = -1 if length in (2, 3) else int(rng.integers(0, n))
        rows += [row] * length
        cols += rng.integers(0, n, length).tolist()
    rows[-8:] = [rows[0]] * 8  # the first run's row again, apart from it
    rows_t, cols_t = torch.tensor(rows), torch.tensor(cols)
    got = exact.exact_numba(t, aux, t, aux, rows_t, cols_t, metric)
    s = brute.fixed_order_scores64(x, x, metric)
    expected = [s[r, c] if r >= 0 else -np.inf for r, c in zip(rows, cols, strict=True)]
    np.testing.assert_array_equal(got.numpy(), np.array(expected))
    assert torch.equal(got, exact.exact_torch(t, aux, t, aux, rows_t, cols_t, metric))


def _fused_dot(q: np.ndarray, r: np.ndarray) -> float:
    """``Σ_k q_k·r_k`` in index order with each product added by a fused multiply-add (the sum
    of the exact product and the running total, rounded once: rational arithmetic)."""
    total = 0.0
    for a, b in zip(q.tolist(), r.tolist(), strict=True):
        total = float(Fraction(a) * Fraction(b) + Fraction(total))
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_product_is_rounded_before_it_is_added_unless_it_is_exact(dtype):
    # The CPU kernel adds a product of two float32 values in one fused instruction (the product
    # is exact in float64, so the sum is rounded once either way); float64 values are multiplied,
    # rounded, then added. Full-precision float64 rows tell the two apart.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((24, 29)).astype(dtype)
    t = torch.from_numpy(x)
    sq = exact.row_sq_norms(t)
    rows = torch.arange(len(x)).repeat_interleave(len(x))
    cols = torch.arange(len(x)).repeat(len(x))
    got = exact.exact_numba(t, sq, t, sq, rows, cols, "dot").numpy().reshape(len(x), len(x))
    np.testing.assert_array_equal(got, brute.fixed_order_scores64(x, x, "dot"))
    wide = x.astype(np.float64)
    fused = np.array([[_fused_dot(a, b) for b in wide] for a in wide])
    if dtype == np.float32:
        np.testing.assert_array_equal(got, fused)
    else:
        assert (fused != got).sum() > 10  # the fused sums differ: the test tells them apart


def brute_sq(x: np.ndarray) -> np.ndarray:
    """``sq(x)`` as defined: float64 squares summed in index order."""
    total = np.zeros(len(x))
    for k in range(x.shape[1]):
        total = total + x[:, k].astype(np.float64) * x[:, k].astype(np.float64)
    return total


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_ranks_equal_the_definition_on_both_back_ends(backend, metric):
    x, labels = _near_ties(2)
    expected, s, excluded = _brute_first_hits(x, labels, metric)
    for chunk_size in (7, None):
        result = recall_at_k(
            x,
            x,
            labels,
            labels,
            (1, 5),
            query_in_reference=True,
            metric=metric,
            chunk_size=chunk_size,
        )
        np.testing.assert_array_equal(result.first_hit_ranks, expected)
    idx, val = nearest_neighbors(x, x, 6, query_in_reference=True, metric=metric)
    for i in range(len(x)):
        order = brute.ranked(s[i], excluded[i])[:6]
        assert idx[i].tolist() == order
        np.testing.assert_array_equal(val[i], s[i, order])


def _perturbed_filter(monkeypatch, seed: int = 0) -> None:
    """Replace the GEMM filter by one with another reduction order (columns reversed, float32
    rows normalised by torch in float32) plus noise of half the error bound, on both back
    ends (the CPU's tiles and whole-block GEMMs, the torch path's product)."""
    rng = np.random.default_rng(seed)
    real_filter = filters.reference_filter

    def reference_filter(raw, sq, norm, metric, dtype, scale=None):
        if metric != "cosine":
            return real_filter(raw, sq, norm, metric, dtype, scale)
        x = raw.to(torch.float32)
        gemm = (x / torch.linalg.vector_norm(x.flip(1), dim=1)[:, None]).to(dtype)
        return gemm, 1.0, float(filters.robust_norms(gemm).max())

    def noisy(qf, gemm, max_norm, dim, scale, metric):
        a = qf.rows.flip(1).to(torch.float64)
        b = gemm.flip(1).to(torch.float64)
        scores = (a @ b.T).to(gemm.dtype)
        product = filters.Product.plain(gemm.dtype)
        eps = filters.error_bound(product, qf, max_norm, dim, scale, metric)[:, None]
        noise = torch.from_numpy(rng.uniform(-0.5, 0.5, tuple(scores.shape)))
        return (scores + (noise * eps).to(scores.dtype)).contiguous()

    def block_scores(space, qf, block):
        return noisy(qf, block.gemm, block.max_norm, space.dim, block.scale, space.metric)

    def tile_scores(qf, block, row0, col0, out):
        rows, cols = out.shape
        sub = qf[torch.arange(row0, row0 + rows)]
        gemm = block.gemm[col0 : col0 + cols]
        out[:] = noisy(
            sub,
            gemm,
            block.max_norm,
            block.data.shape[1],
            block.scale,
            "cosine" if block.scale == 1.0 else "dot",
        ).numpy()

    def product(self, qf, block, low):
        scores = noisy(qf, block.gemm, block.max_norm, block.data.shape[1], block.scale, "dot")
        return scores, filters.Product.plain(block.gemm.dtype)

    monkeypatch.setattr(filters, "reference_filter", reference_filter)
    monkeypatch.setattr(cpu, "block_scores", block_scores)
    monkeypatch.setattr(cpu, "tile_scores", tile_scores)
    monkeypatch.setattr(device.TorchKernels, "product", product)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("classes", [5, 75])
def test_filter_rounding_and_normalisation_order_change_nothing(
    monkeypatch, backend, metric, classes
):
    # 5 classes: positives found through the filter; 75 (4 rows each): scored exactly first.
    x, _ = _near_ties(3)
    labels = np.random.default_rng(3).integers(0, classes, len(x))
    before = recall_at_k(x, x, labels, labels, (1, 5), query_in_reference=True, metric=metric)
    nn_before = nearest_neighbors(x, x, 8, query_in_reference=True, metric=metric)
    wide_before = nearest_neighbors(x, x, 40, query_in_reference=True, metric=metric)
    map_before = float(map_at_r(x, x, labels, labels, query_in_reference=True, metric=metric))
    _perturbed_filter(monkeypatch)
    after = recall_at_k(x, x, labels, labels, (1, 5), query_in_reference=True, metric=metric)
    np.testing.assert_array_equal(before.first_hit_ranks, after.first_hit_ranks)
    nn_after = nearest_neighbors(x, x, 8, query_in_reference=True, metric=metric)
    assert np.array_equal(nn_before[0], nn_after[0]) and np.array_equal(nn_before[1], nn_after[1])
    wide_after = nearest_neighbors(x, x, 40, query_in_reference=True, metric=metric)
    assert np.array_equal(wide_before[0], wide_after[0])
    assert (
        float(map_at_r(x, x, labels, labels, query_in_reference=True, metric=metric)) == map_before
    )
    expected, _, _ = _brute_first_hits(x, labels, metric)
    np.testing.assert_array_equal(after.first_hit_ranks, expected)


def test_rows_normalised_elsewhere_are_other_inputs_but_raw_rows_decide():
    # The cosine score is computed from the raw rows: scaling a row by a power of two (exact)
    # changes nothing, whatever the filter does with it.
    x, labels = _near_ties(4)
    scaled = x * np.float32(2.0**-20)
    a = recall_at_k(x, x, labels, labels, (1,), query_in_reference=True)
    b = recall_at_k(scaled, scaled, labels, labels, (1,), query_in_reference=True)
    np.testing.assert_array_equal(a.first_hit_ranks, b.first_hit_ranks)


OVERFLOW = np.array([[1e20, 0], [1e20, 1e19], [-1e20, 0], [3e19, 0]], dtype=np.float32)


@pytest.mark.parametrize("metric", ["dot", "euclidean"])
def test_scores_beyond_float32_do_not_overflow(backend, metric):
    labels = [0, 0, 1, 1]
    # By hand: queries 0-2 have their positive first; query 3 (3e19, 0) ranks both label-0
    # rows (scores 3e39, or distances 7e19) above its positive (-3e39, or 1.3e20).
    result = recall_at_k(
        OVERFLOW, OVERFLOW, labels, labels, (1, 3), query_in_reference=True, metric=metric
    )
    assert result.first_hit_ranks.tolist() == [0, 0, 0, 2]
    assert dict(result) == {"recall@1": 0.75, "recall@3": 1.0}
    idx, val = nearest_neighbors(OVERFLOW, OVERFLOW, 3, query_in_reference=True, metric=metric)
    assert idx.tolist() == [[1, 3, 2], [0, 3, 2], [3, 0, 1], [0, 1, 2]]
    assert np.isfinite(val).all()
    s = brute.fixed_order_scores64(OVERFLOW, OVERFLOW, metric)
    np.testing.assert_array_equal(val[0], s[0, [1, 3, 2]])


def test_float64_reference_is_scored_in_float64_in_memory_and_streamed(tmp_path):
    q = np.array([[1.0, 0.0]], dtype=np.float32)
    r = np.array([[1.0, 2e-4], [1.0, 1e-4]], dtype=np.float64)
    # cos(q, r1) = 1/sqrt(1 + 1e-8) > cos(q, r0) = 1/sqrt(1 + 4e-8): r1 (label 0) is first.
    # In float32 both normalised rows round to (1, ~1e-4) with cosine 1.0: a tie r0 would win.
    path = tmp_path / "r.npy"
    np.save(path, r)
    for reference in (r, np.load(path, mmap_mode="r"), open_embeddings(path)):
        result = recall_at_k(q, reference, [0], [1, 0], (1,))
        assert result["recall@1"] == 1.0


def test_integer_embeddings_are_scored_exactly():
    q = np.array([[2**24 + 1]], dtype=np.int64)
    r = np.array([[2**24], [2**24 + 1]], dtype=np.int64)
    # q·r1 = (2**24+1)**2 > q·r0; float32 would round all three to 2**24 and tie.
    assert recall_at_k(q, r, [0], [1, 0], (1,), metric="dot")["recall@1"] == 1.0
    idx, val = nearest_neighbors(q, r, 2, metric="dot")
    assert idx.tolist() == [[1, 0]]
    assert val.tolist() == [[float((2**24 + 1) ** 2), float((2**24 + 1) * 2**24)]]


def test_integer_embeddings_beyond_float64_precision_are_rejected():
    x = np.array([[2**53 + 1, 0], [1, 1]], dtype=np.int64)
    with pytest.raises(ValueError, match=r"'query' parameter of recall_at_k .* 2\*\*53"):
        recall_at_k(x, x, [0, 1], [0, 1], (1,), query_in_reference=True)


def test_huge_float64_values_are_rejected_where_scores_would_overflow():
    # dot and euclidean scores of 1e300 rows overflow float64; cosine does not depend on a
    # row's scale, and scores such rows exactly (scaled by a power of two first).
    x = np.array([[1e300, 0.0], [1.0, 1.0], [1e-300, 0.0]])
    for metric in ("dot", "euclidean"):
        with pytest.raises(ValueError, match=r"'reference' parameter of recall_at_k .* row 0"):
            recall_at_k(x, x, [0, 1, 0], [0, 1, 0], (1,), query_in_reference=True, metric=metric)
    r = recall_at_k(x, x, [0, 1, 0], [0, 1, 0], (1,), query_in_reference=True)
    # Rows 0 and 2 point along x (cosine 1), row 1 at 45 degrees: both label-0 rows hit first.
    assert r.first_hit_ranks.tolist() == [0, -1, 0]


def test_tiny_vectors_are_not_zero_vectors(backend):
    x = np.array([[1e-45, 0.0], [1e-45, 1e-45], [0.0, 1e-45]], dtype=np.float32)
    result = recall_at_k(x, x, [0, 0, 1], [0, 0, 1], (1,), query_in_reference=True)
    # Row 0 and row 2 are orthogonal; row 1 is 45 degrees from both and ties: lower index 0.
    assert result.first_hit_ranks.tolist() == [0, 0, -1]


def test_huge_k_is_clamped_before_allocating():
    x = np.eye(6, dtype=np.float32)
    with pytest.warns(UserWarning, match="exceeds the 6 reference items"):
        idx, val = nearest_neighbors(x, x, 10**9, query_in_reference=True)
    assert idx.shape == (6, 6)
    assert idx[0].tolist() == [1, 2, 3, 4, 5, -1]
    assert val.dtype == np.float64


@pytest.mark.parametrize("classes", [1, 2, 3])
def test_coarse_labels_agree_with_brute_force(backend, classes):
    rng = np.random.default_rng(classes)
    x = rng.integers(-2, 3, (400, 6)).astype(np.float32)  # many exact ties
    x[x.sum(axis=1) == 0, 0] = 1.0
    labels = rng.integers(0, classes, 400)
    expected, s, excluded = _brute_first_hits(x, labels, "cosine")
    for chunk_size in (1, 33, None):
        result = recall_at_k(
            x, x, labels, labels, (1, 10), query_in_reference=True, chunk_size=chunk_size
        )
        np.testing.assert_array_equal(result.first_hit_ranks, expected)
    per_query = brute.top_r_metrics(s, labels, labels, excluded)
    ok = [row for row in per_query if row[0] > 0]
    assert float(
        map_at_r(x, x, labels, labels, query_in_reference=True, chunk_size=50)
    ) == pytest.approx(np.mean([row[2] for row in ok]), abs=1e-15)
    assert float(r_precision(x, x, labels, labels, query_in_reference=True)) == pytest.approx(
        np.mean([row[1] for row in ok]), abs=1e-15
    )


def test_coarse_labels_streamed_use_the_gemm_filter(tmp_path, backend):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((50, 8)).astype(np.float32)
    r = rng.standard_normal((500, 8)).astype(np.float32)
    r[250:260] = r[240:250]
    q_labels, r_labels = rng.integers(0, 2, 50), rng.integers(0, 2, 500)
    path = tmp_path / "r.npy"
    np.save(path, r)
    s = brute.fixed_order_scores64(q, r, "cosine")
    expected = brute.first_hit_ranks(s, q_labels, r_labels, [set()] * 50)
    streamed = recall_at_k(q, open_embeddings(path), q_labels, r_labels, (1,))
    np.testing.assert_array_equal(streamed.first_hit_ranks, expected)


def test_precision_is_accepted_everywhere_and_changes_nothing_on_the_cpu():
    from recallkit import ground_truth_ranks_from_embeddings
    from recallkit.pml import ExactKNN

    x, _ = _near_ties(5, n=200)
    b = nearest_neighbors(x, x, 5)
    for precision in ("bfloat16", "int8", "float32", "auto"):
        a = nearest_neighbors(x, x, 5, precision=precision)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), precision
    gt = np.arange(200)
    assert (
        ground_truth_ranks_from_embeddings(x, x, gt, precision="int8").tolist()
        == ground_truth_ranks_from_embeddings(x, x, gt).tolist()
    )
    assert torch.equal(
        ExactKNN(precision="bfloat16")(x, 3, x, True)[1], ExactKNN()(x, 3, x, True)[1]
    )
    with pytest.raises(ValueError, match="'precision' parameter of nearest_neighbors"):
        nearest_neighbors(x, x, 5, precision="int4")
    for rows in (x, x.astype(np.float64)):  # float64 inputs too: said, never ignored
        with pytest.raises(ValueError, match="precision='float16' filters on CUDA"):
            nearest_neighbors(rows, rows, 5, precision="float16")


def _bf16_toward(bits: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """bfloat16 tile bits moved by ``noise`` and rounded to bfloat16 on the original's side: a
    value between the original ``v`` and ``v + noise`` (so no further than the noise)."""
    v = (bits.astype(np.uint32) << 16).view(np.float32)
    y = v + noise
    y_bits = y.view(np.uint32)
    toward_zero = y_bits & np.uint32(0xFFFF0000)
    away = ((toward_zero + np.uint32(0x10000)) >> 16).astype(np.uint16)
    beyond = (np.sign(v) == np.sign(y)) & (np.abs(v) > np.abs(y)) & (toward_zero != y_bits)
    return np.where(beyond, away, (toward_zero >> 16).astype(np.uint16))


def _noisy_low_tiles(monkeypatch, share: float, seed: int = 7) -> list[int]:
    """Replace the low-precision tile product by the real one plus uniform noise of ``share``
    times its error bound per row (``lowp.row_bounds``), or of the same bound charged to the value
    (``value_relative``, the ranked lists' margin) where that is smaller; returns a list that
    counts the tiles."""
    real = lowp.tile_product
    rng = np.random.default_rng(seed)
    tiles = []
    for kernel in lowp.KERNELS.values():  # the kernels' self-checks see the real products
        for width in (24, 25):
            lowp.usable(kernel, width)

    def noisy(a, b, out, a_rows=None, b_rows=None, scaled=True, kernel=None):
        real(a, b, out, a_rows, b_rows, scaled, kernel)
        eps = lowp.row_bounds(a, b, a_rows, b_rows)
        e, r = lowp.row_bounds(a, b, a_rows, b_rows, value_relative=True)
        if not scaled:  # the tile in units of each row's scale
            unit = a.scale32[slice(*a_rows) if a_rows else slice(None)]
            eps, e = eps / unit, e / unit
        value = (out.astype(np.uint32) << 16).view(np.float32) if out.dtype == np.uint16 else out
        bound = np.minimum(eps[:, None], e[:, None] + r * np.abs(value.astype(np.float64)))
        noise = (rng.uniform(-share, share, out.shape) * bound).astype(np.float32)
        if out.dtype == np.uint16:  # a bfloat16 tile's bits
            out[...] = _bf16_toward(out, noise)
        else:
            out += noise
        tiles.append(out.size)
        return out

    monkeypatch.setattr(lowp, "tile_product", noisy)
    return tiles


def _low_precision_results(x, labels, metric, precision):
    kw = dict(query_in_reference=True, metric=metric, precision=precision, chunk_size=64)
    ranks = recall_at_k(x, x, labels, labels, (1, 5), **kw).first_hit_ranks
    return ranks, nearest_neighbors(x, x, 9, **kw)[0]


@pytest.mark.parametrize("precision", ["bfloat16", "int8"])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_low_precision_tiles_off_by_half_their_bound_change_nothing(monkeypatch, precision, metric):
    # The bound of each precision is the window: tile scores moved by half of it (on top of
    # their real error, well below it) leave every rank, list and value the definition's.
    x, _ = _near_ties(11, n=260)
    labels = np.random.default_rng(11).integers(0, 40, len(x))  # thresholds, then one pass
    tiles = _noisy_low_tiles(monkeypatch, 0.5)
    ranks, index = _low_precision_results(x, labels, metric, precision)
    expected, s, excluded = _brute_first_hits(x, labels, metric)
    np.testing.assert_array_equal(ranks, expected)
    for i in range(len(x)):
        order = [j for j in np.lexsort((np.arange(len(x)), -s[i])) if j not in excluded[i]]
        assert index[i].tolist() == order[:9], i
    assert tiles, "the low-precision tiles ran"


@pytest.mark.parametrize("precision", ["bfloat16", "int8"])
def test_low_precision_tiles_off_by_twenty_times_their_bound_are_seen(monkeypatch, precision):
    # The same check can fail: noise of 20 times the bound moves items across the windows.
    x, _ = _near_ties(11, n=260)
    labels = np.random.default_rng(11).integers(0, 40, len(x))
    expected, s, excluded = _brute_first_hits(x, labels, "cosine")
    tiles = _noisy_low_tiles(monkeypatch, 20.0)
    ranks, index = _low_precision_results(x, labels, "cosine", precision)
    want = np.array(
        [
            [j for j in np.lexsort((np.arange(len(x)), -s[i])) if j not in excluded[i]][:9]
            for i in range(len(x))
        ]
    )
    assert tiles and (not np.array_equal(ranks, expected) or not np.array_equal(index, want))


def _duplicate_heavy(seed: int = 5, n: int = 300, d: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """150 identical rows and 20 one ulp away (windows far wider than the kernels' capacity),
    fine labels (60 classes), 40 of the identical rows in one class."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[10:160] = x[10]
    x[200:220] = np.nextafter(x[10], np.float32(np.inf))
    labels = rng.integers(0, 60, n)
    labels[10:50] = 0  # 40 identical positives of one another
    return x, labels


@pytest.mark.parametrize("tile", [11, 1024])
@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("chunk_size", [40, None])
def test_tiles_overflow_and_exclusions_across_tiles_equal_the_definition(
    monkeypatch, tile, metric, chunk_size
):
    # Tiles of 11 rows split rows and exclusion lists (id groups of 3); 150 identical rows
    # overflow the window (32) and the top-k buffer (2 k + 64) of the queries that meet them.
    monkeypatch.setattr(cpu, "TILE", tile)
    x, labels = _duplicate_heavy()
    ids = np.arange(len(x)) // 3  # each query excludes its own id group (3 rows)
    s = brute.fixed_order_scores64(x, x, metric)
    excluded = brute.excluded_sets(len(x), len(x), query_ids=ids, reference_ids=ids)
    # chunk_size=None: one chunk, and a symmetric problem for cosine and dot (both sides of
    # each off-diagonal tile are read from one GEMM).
    options = dict(query_ids=ids, reference_ids=ids, metric=metric, chunk_size=chunk_size)
    result = recall_at_k(x, x, labels, labels, (1, 10), **options)
    np.testing.assert_array_equal(
        result.first_hit_ranks, brute.first_hit_ranks(s, labels, labels, excluded)
    )
    per_query = brute.top_r_metrics(s, labels, labels, excluded)
    expected_map = np.mean([ap for r, _, ap in per_query if r > 0])
    assert float(map_at_r(x, x, labels, labels, **options)) == pytest.approx(
        expected_map, abs=1e-15
    )
    assert float(r_precision(x, x, labels, labels, **options)) == pytest.approx(
        np.mean([p for r, p, _ in per_query if r > 0]), abs=1e-15
    )
    groups = [[j for j in range(len(x)) if ids[j] == ids[i]] for i in range(len(x))]
    for k in (5, 40):  # a heap per row, and a reservoir (k > cpu.HEAP_K)
        idx, val = nearest_neighbors(x, x, k, exclude=groups, metric=metric, chunk_size=chunk_size)
        for i in range(len(x)):
            order = brute.ranked(s[i], excluded[i])[:k]
            assert idx[i].tolist() == order
            np.testing.assert_array_equal(val[i], s[i, order])
    targets = [[j for j in range(len(x)) if labels[j] == labels[i]][:5] for i in range(len(x))]
    ranks = ground_truth_ranks_from_embeddings(
        x, x, targets, reduce="none", metric=metric, chunk_size=chunk_size
    )
    for i in range(len(x)):
        order = brute.ranked(s[i], set())
        assert ranks[i, : len(targets[i])].tolist() == [order.index(j) for j in targets[i]]


@pytest.mark.parametrize("precision", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("with_ids", [False, True])
def test_top_r_lists_offered_their_positives_first_equal_the_definition(
    monkeypatch, precision, with_ids
):
    # Leave-one-out on one tensor in tiles of 16 rows: a symmetric pass (each off-diagonal tile
    # read along its rows and along its columns) whose top-R lists are offered each query's
    # positives before the pass and skip them in it (cpu.Top's known items). Classes of 1 to 45
    # items: heaps (R <= cpu.HEAP_K) and a reservoir (R = 44); ids exclude pairs of rows.
    monkeypatch.setattr(cpu, "TILE", 16)
    seeded = []
    seed_top = cpu.kernels.seed_top
    monkeypatch.setattr(cpu.kernels, "seed_top", lambda *a: seeded.append(1) or seed_top(*a))
    rng = np.random.default_rng(11)
    sizes = [45, *rng.integers(1, 9, 70)]
    labels = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    n = len(labels)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    ids = np.arange(n) // 2 if with_ids else None
    options = dict(
        query_in_reference=not with_ids, query_ids=ids, reference_ids=ids, precision=precision
    )
    s = brute.fixed_order_scores64(x, x, "cosine")
    excluded = brute.excluded_sets(n, n, not with_ids, ids, ids)
    per_query = brute.top_r_metrics(s, labels, labels, excluded)
    got = map_at_r(x, x, labels, labels, **options).per_query["MAP@R"]
    np.testing.assert_allclose(got, [ap for _, _, ap in per_query], rtol=0, atol=1e-15)
    got = r_precision(x, x, labels, labels, **options).per_query["R-precision"]
    np.testing.assert_allclose(got, [p for _, p, _ in per_query], rtol=0, atol=1e-15)
    assert len(seeded) == 2


@pytest.mark.parametrize("product", ["numpy", "torch"])
def test_either_blas_gives_the_definition(monkeypatch, product):
    # The tile GEMM is numpy's or torch's BLAS, whichever is faster on the machine.
    monkeypatch.setattr(cpu, "choose_product", lambda dtype, width: product)
    monkeypatch.setattr(cpu, "TILE", 64)
    x, _ = _near_ties(6)
    labels = np.arange(len(x)) // 3
    expected, s, _ = _brute_first_hits(x, labels, "cosine")
    result = recall_at_k(x, x, labels, labels, (1,), query_in_reference=True)
    np.testing.assert_array_equal(result.first_hit_ranks, expected)
    idx, _ = nearest_neighbors(x, x[::-1].copy(), 4)
    for i in range(len(x)):
        assert idx[i].tolist() == brute.ranked(s[i, ::-1], set())[:4]


def test_top_r_keeps_a_negative_tied_with_the_last_positive_whatever_its_filter_score(
    monkeypatch,
):
    # Reference 0 (label 1) and 3 (label 0) are the same vector: tied exact scores, and the
    # lower index ranks first, so the top-3 of the query is [1, 2, 0]: AP@R = (1 + 1) / 3.
    # The filter of column 0 is lowered by half its error bound: the R-th positive's filter
    # score must not be taken as a floor without the error margin.
    rng = np.random.default_rng(7)
    q = np.zeros((1, 8), dtype=np.float32)
    q[0, 0] = 1.0
    reference = rng.standard_normal((100, 8)).astype(np.float32)
    reference[:, 0] = -np.abs(reference[:, 0]) - 1.0  # distractors: negative cosine
    reference[1] = [1, 0.1, 0, 0, 0, 0, 0, 0]
    reference[2] = [1, 0.3, 0, 0, 0, 0, 0, 0]
    reference[0] = reference[3] = [1, 0.6, 0, 0, 0, 0, 0, 0]
    labels = np.full(100, 2)
    labels[[1, 2, 3]] = 0
    labels[0] = 1
    assert float(map_at_r(q, reference, [0], labels)) == pytest.approx(2 / 3, abs=1e-15)
    real = cpu.tile_scores

    def lowered(qf, block, row0, col0, out):
        real(qf, block, row0, col0, out)
        if col0 == 0:
            product = filters.Product.plain(qf.rows.dtype)
            eps = filters.error_bound(product, qf, block.max_norm, 8, block.scale, "cosine")
            out[:, 0] -= (0.5 * eps.numpy()[row0 : row0 + out.shape[0]]).astype(out.dtype)

    monkeypatch.setattr(cpu, "tile_scores", lowered)
    assert float(map_at_r(q, reference, [0], labels)) == pytest.approx(2 / 3, abs=1e-15)
    idx, _ = nearest_neighbors(q, reference, 3)
    assert idx.tolist() == [[1, 2, 0]]


@pytest.mark.parametrize("shift", [0.0, 0.9])
def test_lists_read_by_the_metrics_order_items_by_their_exact_scores_within_twice_the_bound(
    monkeypatch, shift
):
    # The metrics' lists score exactly only the candidates within twice the filter's bound of
    # another. Reference 0 (the query's one positive) scores a little above reference 1 (a
    # negative), far less than the bound apart; their filter scores are moved apart by up to
    # 0.9 of the bound each, reference 1 above: still within twice the bound, so both are
    # scored exactly and reference 0 ranks first (MAP@R 1, recall@1 1).
    q = np.zeros((1, 8), dtype=np.float32)
    q[0, 0] = 1.0
    rng = np.random.default_rng(3)
    reference = rng.standard_normal((50, 8)).astype(np.float32)
    reference[:, 0] = -np.abs(reference[:, 0]) - 1.0  # distractors: negative cosine
    reference[0] = [1, 0.6, 0, 0, 0, 0, 0, 0]
    reference[1] = [1, np.nextafter(np.float32(0.6), np.float32(1)), 0, 0, 0, 0, 0, 0]
    labels = np.arange(50) + 1
    labels[0] = 0
    s = brute.fixed_order_scores64(q, reference, "cosine")
    assert 0 < s[0, 0] - s[0, 1] < 1e-7
    real = cpu.tile_scores

    def moved(qf, block, row0, col0, out):
        real(qf, block, row0, col0, out)
        product = filters.Product.plain(qf.rows.dtype)
        eps = filters.error_bound(product, qf, block.max_norm, 8, block.scale, "cosine").numpy()
        assert (eps > 1e-7).all()
        if col0 == 0:
            out[:, 0] -= (shift * eps[row0 : row0 + out.shape[0]]).astype(out.dtype)
            out[:, 1] += (shift * eps[row0 : row0 + out.shape[0]]).astype(out.dtype)

    monkeypatch.setattr(cpu, "tile_scores", moved)
    # The positive's filter score from the tile too (not scored before the pass).
    monkeypatch.setattr(cpu.CpuBackend, "_known", lambda *args: None)
    got = retrieval_metrics(q, reference, [0], labels, ["MAP@R", "recall@1"])
    assert got.per_query["MAP@R"].tolist() == [1.0]
    assert got.per_query["recall@1"].tolist() == [1.0]


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_closer_scores_lie_within_their_bounds_of_the_exact_scores(metric, dtype):
    # Summed in any order, vectorised: within the bound of the definition's scores, on rows
    # with cancellation (large opposite terms), near ties and ordinary rows; the bound stays
    # far below float32's filter bound (a part in 10**12 of the norms here).
    rng = np.random.default_rng(8)
    x, _ = _near_ties(8, n=200, d=40)
    x = x.astype(dtype)
    x[:20] = (rng.standard_normal((20, 40)) * 1e3).astype(dtype)
    x[20:40] = x[:20] * -1 + rng.standard_normal((20, 40)).astype(dtype)  # cancellation
    t = torch.from_numpy(x)
    sq = exact.row_sq_norms(t)
    norm = exact.row_norms(sq)
    aux = norm if metric == "cosine" else sq
    rows = np.repeat(np.arange(len(x)), len(x))
    cols = np.tile(np.arange(len(x)), len(x))
    got, bound = exact.close_scores(t, t, aux, aux, norm, norm, rows, cols, metric)
    want = brute.fixed_order_scores64(x, x, metric).reshape(-1)
    assert (np.abs(got - want) <= bound).all()
    assert (got != want).any()  # another order of additions: not the same bits everywhere
    scale = norm.numpy()[rows] * norm.numpy()[cols]
    assert (bound <= 1e-12 * (scale if metric != "cosine" else 1.0) * 10).all()
