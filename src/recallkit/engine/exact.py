"""The exact score that decides every rank, computed the same way on every back end.

The exact score of a pair is defined from the rows as the engine keeps them (float32, or float64
when a side is float64 or integer) with one fixed order of operations in float64:

* ``dot(q, r) = Σ_k q_k·r_k``, each product and each partial sum rounded to float64, ``k = 0..d-1``
  in index order (no fused multiply-add of float64 values; the product of two float32 values is
  exact in float64, so the CPU kernel adds it in one fused instruction, the same bits);
* ``sq(x) = dot(x, x)``, the same way;
* cosine: ``dot(q, r) / (norm(q) · norm(r))`` with ``norm(x) = sqrt(sq(x))`` correctly rounded
  (IEEE 754; [`row_norms`][row_norms]); dot: ``dot(q, r)``; euclidean: ``2·dot(q, r) - sq(r)``,
  which orders candidates as ``-|q - r|²`` (``|q|²`` is constant along a query's row).

Under cosine a float64 row whose largest magnitude lies outside ``[2**-500, 2**500]`` is first
multiplied by a power of two that brings it to ``[0.5, 1)`` ([`cosine_rows`][cosine_rows]): exact,
and cosine does not depend on a row's scale, so the definition covers every finite row that is not
zero (an unscaled ``2**-600`` row would have a squared norm that underflows float64). Every other
row is used as given, so float32 inputs and float64 inputs of ordinary magnitude are scored
bit for bit as written above.

This module holds the numba kernels (CPU arrays: eight pairs of a query at a time, both cores)
and the torch operations (any device: products first, then one float64 addition per dimension in
index order); the Triton kernel of
[`recallkit.engine.triton_kernels`][recallkit.engine.triton_kernels] computes the same bits on CUDA
in one launch.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from recallkit.engine import jit

MODES = {"dot": 0, "cosine": 1, "euclidean": 2}
# Float64 rows scored under cosine keep their scale inside [2**-LIMIT, 2**LIMIT].
COSINE_SCALE_LIMIT = 500


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _sq_numba(x, out):  # pragma: no cover - compiled
    """Each row's squares summed in index order, four rows side by side (four sums in flight:
    a sum's additions wait on each other, four sums' do not; each row's order is its own)."""
    n, d = x.shape
    for g in numba.prange((n + 3) // 4):
        i = 4 * g
        if i + 4 <= n:
            s0 = s1 = s2 = s3 = 0.0
            for k in range(d):
                v0 = np.float64(x[i, k])
                v1 = np.float64(x[i + 1, k])
                v2 = np.float64(x[i + 2, k])
                v3 = np.float64(x[i + 3, k])
                s0 += v0 * v0
                s1 += v1 * v1
                s2 += v2 * v2
                s3 += v3 * v3
            out[i], out[i + 1], out[i + 2], out[i + 3] = s0, s1, s2, s3
            continue
        for r in range(i, n):
            s = 0.0
            for k in range(d):
                v = np.float64(x[r, k])
                s += v * v
            out[r] = s


def row_sq_norms(x: torch.Tensor) -> torch.Tensor:
    """``sq(x_i)`` of every row in float64, summed in index order, on ``x``'s device: a numba
    pass on CPU rows once its kernel is compiled
    ([`recallkit.engine.jit.usable`][recallkit.engine.jit.usable]), else torch operations (the same
    bits)."""
    if x.device.type == "cpu":
        out = np.empty(x.shape[0], dtype=np.float64)
        args = (x.detach().contiguous().numpy(), out)
        if jit.usable(_sq_numba, args):
            _sq_numba(*args)
            return torch.from_numpy(out)
    acc = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    columns = x.detach().T.to(torch.float64)
    for k in range(x.shape[1]):
        v = columns[k]
        acc = acc + v * v
    return acc


def row_norms(sq: torch.Tensor) -> torch.Tensor:
    """``sqrt(sq)``, correctly rounded on every device.

    torch's vectorised CPU square root is not correctly rounded for float64 (it differs from
    IEEE 754 in the last bit for about 1% of inputs), so the CPU uses numpy's; CUDA's float64
    square root is IEEE 754.
    """
    if sq.device.type == "cpu":
        return torch.from_numpy(np.sqrt(sq.numpy()))
    return torch.sqrt(sq)


def cosine_rows(raw: torch.Tensor) -> torch.Tensor:
    """``raw`` with every float64 row of extreme magnitude scaled by a power of two into
    ``[0.5, 1)`` (module docstring); the same tensor when no row needs it."""
    if raw.dtype != torch.float64 or not raw.numel():
        return raw
    top = raw.abs().amax(dim=1)
    low, high = 2.0**-COSINE_SCALE_LIMIT, 2.0**COSINE_SCALE_LIMIT
    extreme = ((top < low) | (top > high)) & (top > 0)
    if not bool(extreme.any()):
        return raw
    out = raw.clone()
    rows = torch.nonzero(extreme)[:, 0]
    for i in rows.tolist():
        _, exponent = math.frexp(float(top[i]))
        out[i] = torch.ldexp(raw[i], torch.tensor(-exponent, dtype=torch.int64))
    return out


@intrinsic
def _fused(typingctx, a, b, c):
    """``a·b + c`` rounded once (LLVM's ``fma``: one instruction on x86-64 CPUs since 2013)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        fn = builder.module.declare_intrinsic("llvm.fma", [ir.DoubleType()] * 3)
        return builder.call(fn, args)

    return sig, codegen


def add_product(total: float, q: float, r: float) -> float:
    """``total + q·r`` as the definition rounds it: the product rounded to float64, then the sum.
    For two float32 values the float64 product is exact (48 significant bits of 53), so one fused
    multiply-add rounds the same sum once, to the same bits, in one instruction; other types
    round the product, then the sum."""
    return total + float(q) * float(r)


@overload(add_product, inline="always")
def _add_product(total, q, r):  # pragma: no cover - compiled
    if q == types.float32 and r == types.float32:
        return lambda total, q, r: _fused(np.float64(q), np.float64(r), total)
    return lambda total, q, r: total + np.float64(q) * np.float64(r)


@numba.njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _finish(dot, q_aux, r_aux, mode):  # pragma: no cover - compiled
    """A pair's score from its ``dot`` (module docstring)."""
    if mode == 1:
        return dot / (q_aux * r_aux)
    if mode == 2:
        return 2.0 * dot - r_aux
    return dot


@numba.njit(parallel=True, cache=True, boundscheck=False)
def _exact_numba(
    query, reference, q_aux, r_aux, rows, cols, starts, order, mode, out
):  # pragma: no cover - compiled
    """The pairs in runs of one query row (``starts``: where each run begins, then the end),
    the runs in ``order``. Eight pairs of a run are scored side by side: eight independent
    chains of additions, each in index order (the same bits as one at a time), which the CPU
    overlaps where one chain waits on each addition; float32 rows add each product in one fused
    instruction, the same bits ([`add_product`][add_product])."""
    dim = query.shape[1]
    for s in numba.prange(order.shape[0]):
        g = order[s]
        p, stop = starts[g], starts[g + 1]
        i = rows[p]
        if i < 0:
            out[p:stop] = -np.inf
            continue
        qa = q_aux[i]
        while p + 8 <= stop:
            j0, j1, j2, j3 = cols[p], cols[p + 1], cols[p + 2], cols[p + 3]
            j4, j5, j6, j7 = cols[p + 4], cols[p + 5], cols[p + 6], cols[p + 7]
            d0 = d1 = d2 = d3 = d4 = d5 = d6 = d7 = 0.0
            for k in range(dim):
                v = query[i, k]
                d0 = add_product(d0, v, reference[j0, k])
                d1 = add_product(d1, v, reference[j1, k])
                d2 = add_product(d2, v, reference[j2, k])
                d3 = add_product(d3, v, reference[j3, k])
                d4 = add_product(d4, v, reference[j4, k])
                d5 = add_product(d5, v, reference[j5, k])
                d6 = add_product(d6, v, reference[j6, k])
                d7 = add_product(d7, v, reference[j7, k])
            out[p] = _finish(d0, qa, r_aux[j0], mode)
            out[p + 1] = _finish(d1, qa, r_aux[j1], mode)
            out[p + 2] = _finish(d2, qa, r_aux[j2], mode)
            out[p + 3] = _finish(d3, qa, r_aux[j3], mode)
            out[p + 4] = _finish(d4, qa, r_aux[j4], mode)
            out[p + 5] = _finish(d5, qa, r_aux[j5], mode)
            out[p + 6] = _finish(d6, qa, r_aux[j6], mode)
            out[p + 7] = _finish(d7, qa, r_aux[j7], mode)
            p += 8
        for t in range(p, stop):
            j = cols[t]
            dot = 0.0
            for k in range(dim):
                dot = add_product(dot, query[i, k], reference[j, k])
            out[t] = _finish(dot, qa, r_aux[j], mode)


@numba.njit(parallel=True, cache=True, boundscheck=False, fastmath={"reassoc", "contract"})
def _close_numba(
    query, reference, q_aux, r_aux, q_norm, r_norm, rows, cols, mode, out, bound
):  # pragma: no cover - compiled
    """Each pair's score with its dot product summed in any order (vectorised), and a bound on
    its distance to the exact score ([`close_scores`][close_scores])."""
    dim = query.shape[1]
    n = dim + 1
    unit = 2.0**-53
    gamma = n * unit / (1.0 - n * unit)
    for p in numba.prange(rows.shape[0]):
        i, j = rows[p], cols[p]
        dot = 0.0
        for k in range(dim):
            dot += np.float64(query[i, k]) * np.float64(reference[j, k])
        # Both sums lie within gamma |q| |r| of the real dot product (Cauchy-Schwarz): twice
        # that apart; doubled again for the roundings of the norms and of the bound itself.
        apart = 4.0 * gamma * q_norm[i] * r_norm[j] + 4.0 * n * 2.0**-1074  # and underflow
        if mode == 1:
            score = dot / (q_aux[i] * r_aux[j])
            out[p] = score
            bound[p] = 2.0 * apart / (q_aux[i] * r_aux[j]) + 8.0 * unit * (abs(score) + 1.0)
        elif mode == 2:
            score = 2.0 * dot - r_aux[j]
            out[p] = score
            bound[p] = 4.0 * apart + 8.0 * unit * (abs(score) + r_aux[j] + 2.0 * abs(dot))
        else:
            out[p] = dot
            bound[p] = 2.0 * apart


def close_scores(
    query: torch.Tensor,
    reference: torch.Tensor,
    q_aux: torch.Tensor,
    r_aux: torch.Tensor,
    q_norm: torch.Tensor,
    r_norm: torch.Tensor,
    rows: np.ndarray,
    cols: np.ndarray,
    metric: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Scores of ``(query[rows[p]], reference[cols[p]])`` (CPU tensors) with the dot product
    summed in any order, vectorised, and per pair a bound on their distance to the exact scores
    (module docstring): two pairs whose scores differ by more than the sum of their bounds rank
    in that order by their exact scores, and do not tie. ``q_norm``/``r_norm``: the rows' norms.
    Returns ``(scores, bounds)``, float64."""
    out = np.empty(rows.shape[0], dtype=np.float64)
    bound = np.empty(rows.shape[0], dtype=np.float64)
    if rows.shape[0]:
        _close_numba(
            query.detach().numpy(),
            reference.detach().numpy(),
            q_aux.numpy(),
            r_aux.numpy(),
            q_norm.numpy(),
            r_norm.numpy(),
            rows,
            cols,
            MODES[metric],
            out,
            bound,
        )
    return out, bound


#: This module's numba kernels, by name
#: ([`recallkit.engine.cpu.first_compile`][recallkit.engine.cpu.first_compile]).
NUMBA_KERNELS = {"sq": _sq_numba, "exact": _exact_numba}

RUN = 256  # pairs of one row scored by one thread at most: a few long rows still use every core


def _runs(rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of pairs with one row, cut into pieces of at most [`RUN`][RUN] pairs (their
    starts, then the end), and the order to score them in: by their first column, so that rows
    whose candidates overlap (the items of a class in each other's lists) are scored close in
    time, their reference rows still in cache."""
    starts = np.concatenate(([0], np.flatnonzero(rows[1:] != rows[:-1]) + 1))
    pieces = -(-np.diff(np.append(starts, len(rows))) // RUN)
    if pieces.max() > 1:
        first = np.repeat(np.cumsum(pieces) - pieces, pieces)
        starts = np.repeat(starts, pieces) + RUN * (np.arange(int(pieces.sum())) - first)
    order = np.argsort(cols[starts], kind="stable").astype(np.int64)
    return np.append(starts, len(rows)).astype(np.int64), order


def exact_numba(
    query: torch.Tensor,
    q_aux: torch.Tensor,
    reference: torch.Tensor,
    r_aux: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    metric: str,
) -> torch.Tensor:
    """Exact float64 scores (module docstring) of ``(query[rows[p]], reference[cols[p]])`` for
    CPU tensors; a negative row marks a padding pair that scores ``-inf``."""
    out = np.empty(rows.shape[0], dtype=np.float64)
    if rows.numel():
        r, c = rows.cpu().numpy(), cols.cpu().numpy()
        _exact_numba(
            query.detach().numpy(),
            reference.detach().numpy(),
            q_aux.numpy(),
            r_aux.numpy(),
            r,
            c,
            *_runs(r, c),
            MODES[metric],
            out,
        )
    return torch.from_numpy(out)


def _exact_torch(query, reference, q_aux, r_aux, rows, cols, mode):
    # Products first (each rounded to float64 once), then one addition per dimension in index
    # order: the definition's order of operations, d element-wise additions.
    products = (query[rows].to(torch.float64) * reference[cols].to(torch.float64)).T.contiguous()
    dot = torch.zeros(rows.shape[0], dtype=torch.float64, device=query.device)
    for k in range(query.shape[1]):
        dot = dot + products[k]
    if mode == 1:
        return dot / (q_aux[rows] * r_aux[cols])
    if mode == 2:
        return 2.0 * dot - r_aux[cols]
    return dot


def exact_torch(
    query: torch.Tensor,
    q_aux: torch.Tensor,
    reference: torch.Tensor,
    r_aux: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    metric: str,
) -> torch.Tensor:
    """[`exact_numba`][exact_numba] with torch operations on ``query``'s device (the same bits)."""
    mode = MODES[metric]
    rows = rows.to(query.device)
    cols = cols.to(reference.device)
    out = torch.empty(rows.shape[0], dtype=torch.float64, device=query.device)
    step = max(1024, (1 << 24) // max(query.shape[1], 1))  # float64 products: 128 MiB at most
    for start in range(0, rows.numel(), step):
        r = rows[start : start + step]
        c = cols[start : start + step]
        exact = _exact_torch(query, reference, q_aux, r_aux, r.clamp(min=0), c.clamp(min=0), mode)
        out[start : start + step] = torch.where(r < 0, -torch.inf, exact)
    return out
