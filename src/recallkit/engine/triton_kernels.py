"""Triton kernels for the device path: exact scores, fused exact counting, the fused filter pass.

Every function here issues a fixed number of kernel launches per call (one; two for
[`exact_best`][exact_best]), whatever the dimension and the number of pairs, and never synchronises
with the host: outputs are device tensors of sizes known from the inputs' shapes.

**Exact scores.** For a pair (query row ``i``, reference row ``j``), rows float32 or float64
(the two may differ), optional float64 row multipliers ``qs``, ``rs`` (powers of two; ``None``
is 1.0) and float64 row auxiliaries ``q_aux``, ``r_aux``:

    dot = 0.0                                   # float64
    for k in 0 .. d-1:                          # ascending, one rounding per * and per +
        dot = dot + (f64(q[i, k]) * qs[i]) * (f64(r[j, k]) * rs[j])
    mode 0 (dot):       dot
    mode 1 (cosine):    dot / (q_aux[i] * r_aux[j])
    mode 2 (euclidean): 2.0 * dot - r_aux[j]

the definition of ``recallkit._kernels`` (there with ``qs = rs = 1``), bit for bit on every
device. Each lane of a program owns one pair and walks ``k`` sequentially, so the sum is never
reassociated across ``k`` (the lanes run pairs in parallel); every float64 division is IEEE
round-to-nearest (``div.rn.f64``). Fused multiply-add contraction is turned off by launching the
exact kernel with Triton's ``enable_fp_fusion=False`` option (LLVM emits separate
``mul.rn.f64``/``add.rn.f64`` and ptxas runs with ``--fmad=false``; the fused multiply-adds
left in the machine code are those of ``div.rn.f64``'s correctly rounded sequence). The other
kernels are launched with ``enable_fp_fusion=True``, explicitly: their rounding does not matter,
Triton 3.9 warns when the option is left unset, and its default changes in 3.10.

**Filter pass.** [`filter_window`][filter_window] computes the filter scores of one query chunk
against one reference block with ``tl.dot`` (float32 accumulation; float32 inputs with IEEE float32
multiplies, ``input_precision="ieee"``, not TF32) and applies the thresholds inside the kernel,
so the score matrix is never written: per row and slot the count above the slot, the window
``[lo, hi]`` appended to a fixed-capacity buffer through one atomic counter per tile, and
optionally each row's largest considered score.

**Block sizes.** On CUDA: 128 pairs per program (one per thread, 4 warps) for the exact kernels;
64 pairs x 64 dimensions for [`pair_dots`][pair_dots]; for [`filter_window`][filter_window] 64 x 64
x 32 tiles (4 warps) for float32, whose IEEE dot runs on the CUDA cores, and 128 x 128 x 64 tiles (8
warps, 3 stages) for bfloat16/float16, which use the tensor cores. These are conventional starting
points, not tuned figures. Under the interpreter every block is 16 (32 pairs for the exact
kernels): the interpreter runs one program at a time with numpy, so small blocks keep small
tests fast while still spanning several programs.

**Interpreter.** With ``TRITON_INTERPRET=1`` the kernels run on CPU tensors through Triton's
numpy interpreter (the project's CPU test environment, ``tests/cpu.env``, sets it). Triton 3.9
reads the variable when ``@triton.jit`` decorates a function (``triton.knobs.runtime.interpret``,
read from the environment at each access), not at launch; and Triton's own library functions
(``tl.zeros``, ``tl.sum``, ``tl.max``, ``tl.cumsum``, ...) are decorated when ``triton`` is
imported. This module therefore keeps its kernels as plain functions, decorates them on first
use once per setting, and calls no decorated library function: ``tl.full`` instead of
``tl.zeros``, ``tl.reduce``/``tl.associative_scan`` (built-ins) with the library's combine
functions instead of ``tl.sum``/``tl.max``/``tl.cumsum``. So the interpreter runs these kernels
whenever the variable is set before their first call, even after ``triton`` was imported.
Compiling for a GPU needs the variable unset when ``triton`` is imported (its library is then
compiled, not interpreted); [`available`][available] checks both.

The interpreter differs from a GPU in three ways that matter here: numpy never contracts a
multiply-add (so only a GPU, or the PTX, shows that fusion is off); its ``tl.dot`` multiplies
bfloat16 bit patterns as integers, so bfloat16 tiles are widened to float32 before the dot there
(exact: bfloat16 products fit a float32); and it ignores launch options (``num_warps``,
``num_stages``, ``enable_fp_fusion``).
"""

from __future__ import annotations

import os

import torch

try:  # Triton ships with torch's CUDA wheels on Linux; elsewhere it may be absent.
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the platform
    triton = None
    tl = None

MODES = {"dot": 0, "cosine": 1, "euclidean": 2}
SENTINEL = 2**63 - 1  # ``where`` of a row without a pair

# What the exact kernel does with each score (a compile-time switch of one kernel).
_SCORES, _BEATS, _BEST, _AT_BEST = 0, 1, 2, 3

_EXACT_BLOCK = {"cuda": 128, "interpreter": 32}
_PAIR_BLOCKS = {"cuda": (64, 64), "interpreter": (16, 16)}
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) of filter_window.
_FILTER_BLOCKS = {
    ("cuda", 32): (64, 64, 32, 4, 3),
    ("cuda", 16): (128, 128, 64, 8, 3),
    ("interpreter", 32): (16, 16, 16, 1, 1),
    ("interpreter", 16): (16, 16, 16, 1, 1),
}


def interpreting() -> bool:
    """Whether Triton is set to interpret kernels (``TRITON_INTERPRET``), read now."""
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _library_compiles() -> bool:
    """Whether Triton's own library was decorated for compiling (``TRITON_INTERPRET`` unset
    when ``triton`` was imported)."""
    return isinstance(tl.standard.cdiv, triton.runtime.jit.JITFunction)


def available(device: torch.device | str) -> bool:
    """Whether these kernels run for tensors on ``device``: Triton importable, and compiled
    kernels on an available CUDA device, or CPU tensors under the interpreter."""
    if triton is None:
        return False
    device = torch.device(device)
    if device.type == "cpu":
        return interpreting()
    if device.type == "cuda":
        return not interpreting() and _library_compiles() and torch.cuda.is_available()
    return False


# ---------------------------------------------------------------------------------------------
# Kernels, as plain functions: _kernel decorates them on first use.


def _exact_kernel(
    q_ptr,
    r_ptr,
    qa_ptr,
    ra_ptr,
    qs_ptr,
    rs_ptr,
    rows_ptr,
    cols_ptr,
    slots_ptr,
    index_ptr,
    best_ptr,
    where_ptr,
    out_ptr,
    counts_ptr,
    ties_ptr,
    n_pairs,
    dim,
    g,
    sq0,
    sq1,
    sr0,
    sr1,
    sc0,
    sc1,
    st0,
    st1,
    MODE: tl.constexpr,
    HAS_QS: tl.constexpr,
    HAS_RS: tl.constexpr,
    ACTION: tl.constexpr,
    HAS_TIES: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One pair per lane; ``ACTION`` 0 stores the score, 1 counts the slots it beats, 2 stores
    it and raises its row's best (float atomic max: integer atomics on the bit pattern, order
    independent), 3 reads it back and, at its row's best, lowers the row's index and counts."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < n_pairs
    i = tl.load(rows_ptr + offs, mask=inside, other=-1)
    live = i >= 0
    i = tl.where(live, i, 0)
    j = tl.load(cols_ptr + offs, mask=live, other=0)
    if ACTION == 3:
        e = tl.load(out_ptr + offs, mask=live, other=0.0)
    else:
        if HAS_QS:
            qs = tl.load(qs_ptr + i, mask=live, other=1.0)
        if HAS_RS:
            rs = tl.load(rs_ptr + j, mask=live, other=1.0)
        q_row = q_ptr + i * sq0
        r_row = r_ptr + j * sr0
        dot = tl.full([BLOCK], 0.0, dtype=tl.float64)
        for k in range(0, dim):  # sequential in k for every lane: the definition's order
            x = tl.load(q_row + k * sq1, mask=live, other=0.0).to(tl.float64)
            y = tl.load(r_row + k * sr1, mask=live, other=0.0).to(tl.float64)
            if HAS_QS:
                x = x * qs
            if HAS_RS:
                y = y * rs
            dot = dot + x * y
        if MODE == 1:
            qa = tl.load(qa_ptr + i, mask=live, other=1.0)
            ra = tl.load(ra_ptr + j, mask=live, other=1.0)
            e = dot / (qa * ra)  # float64: IEEE div.rn.f64
        elif MODE == 2:
            ra = tl.load(ra_ptr + j, mask=live, other=0.0)
            e = 2.0 * dot - ra
        else:
            e = dot
    if ACTION == 0:
        tl.store(out_ptr + offs, tl.where(live, e, float("-inf")), mask=inside)
    elif ACTION == 1:
        t = tl.load(slots_ptr + offs, mask=live, other=0)
        b = tl.load(best_ptr + i * g + t, mask=live, other=0.0)
        w = tl.load(where_ptr + i * g + t, mask=live, other=0)
        gi = tl.load(index_ptr + j, mask=live, other=0)
        one = tl.full([BLOCK], 1, dtype=tl.int64)
        beats = live & ((e > b) | ((e == b) & (gi < w)))
        tl.atomic_add(counts_ptr + i * sc0 + t * sc1, one, mask=beats, sem="relaxed")
        if HAS_TIES:
            tie = live & (e == b) & (gi != w)
            tl.atomic_add(ties_ptr + i * st0 + t * st1, one, mask=tie, sem="relaxed")
    elif ACTION == 2:
        tl.store(out_ptr + offs, e, mask=live)
        ok = live & (e == e)  # a NaN score is never a row's best
        tl.atomic_max(best_ptr + i, e, mask=ok, sem="relaxed")
    else:
        ok = live & (e == e)
        b = tl.load(best_ptr + i, mask=ok, other=0.0)
        hit = ok & (e == b)
        gi = tl.load(index_ptr + j, mask=hit, other=0)
        one = tl.full([BLOCK], 1, dtype=tl.int64)
        tl.atomic_min(where_ptr + i, gi, mask=hit, sem="relaxed")
        tl.atomic_add(ties_ptr + i, one, mask=hit, sem="relaxed")


def _pair_dots_kernel(
    a_ptr,
    b_ptr,
    rows_ptr,
    cols_ptr,
    out_ptr,
    n_pairs,
    width,
    sa0,
    sa1,
    sb0,
    sb1,
    BLOCK_P: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """Float32 dots of ``(a[rows[p]], b[cols[p]])``, ``BLOCK_K`` dimensions at a time."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    inside = offs < n_pairs
    i = tl.load(rows_ptr + offs, mask=inside, other=-1)
    live = i >= 0
    i = tl.where(live, i, 0)
    j = tl.load(cols_ptr + offs, mask=live, other=0)
    acc = tl.full([BLOCK_P], 0.0, dtype=tl.float32)
    for k0 in range(0, width, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        mask = live[:, None] & (k < width)[None, :]
        x = tl.load(a_ptr + i[:, None] * sa0 + k[None, :] * sa1, mask=mask, other=0.0)
        y = tl.load(b_ptr + j[:, None] * sb0 + k[None, :] * sb1, mask=mask, other=0.0)
        acc += tl.reduce(x.to(tl.float32) * y.to(tl.float32), 1, tl.standard._sum_combine)
    tl.store(out_ptr + offs, tl.where(live, acc, float("-inf")), mask=inside)


def _filter_kernel(
    a_ptr,
    b_ptr,
    lo_ptr,
    hi_ptr,
    above_ptr,
    window_ptr,
    count_ptr,
    rowmax_ptr,
    qc_ptr,
    rc_ptr,
    ex_ptr,
    pq_ptr,
    pr_ptr,
    c,
    m,
    width,
    capacity,
    sa0,
    sa1,
    sb0,
    sb1,
    se0,
    G: tl.constexpr,
    E: tl.constexpr,
    HAS_CODES: tl.constexpr,
    HAS_POSITIVES: tl.constexpr,
    HAS_ROWMAX: tl.constexpr,
    WIDEN: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """One (BLOCK_M rows, BLOCK_N columns) tile: its filter scores, kept in registers, then the
    considered pairs' counts above each slot, window entries and row maxima."""
    pid_n = tl.program_id(0)  # reference blocks on axis 0 (up to 2^31 - 1 programs)
    pid_m = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rm < c
    col_ok = rn < m
    rm64 = rm.to(tl.int64)
    rn64 = rn.to(tl.int64)
    acc = tl.full([BLOCK_M, BLOCK_N], 0.0, dtype=tl.float32)
    for k0 in range(0, width, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_ok = k < width
        x = tl.load(
            a_ptr + rm64[:, None] * sa0 + k[None, :] * sa1,
            mask=row_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        y = tl.load(
            b_ptr + rn64[None, :] * sb0 + k[:, None] * sb1,
            mask=k_ok[:, None] & col_ok[None, :],
            other=0.0,
        )
        if WIDEN:
            x = x.to(tl.float32)
            y = y.to(tl.float32)
        acc = tl.dot(x, y, acc, input_precision="ieee", out_dtype=tl.float32)
    keep = row_ok[:, None] & col_ok[None, :]
    if HAS_CODES:
        qc = tl.load(qc_ptr + rm64, mask=row_ok, other=-1)
        rc = tl.load(rc_ptr + rn64, mask=col_ok, other=-1)
        keep = keep & ((qc[:, None] < 0) | (qc[:, None] != rc[None, :]))
    for e in tl.static_range(E):
        ex = tl.load(ex_ptr + rm64 * se0 + e, mask=row_ok, other=-1)
        keep = keep & (ex[:, None] != rn64[None, :])
    if HAS_POSITIVES:
        pq = tl.load(pq_ptr + rm64, mask=row_ok, other=-1)
        pr = tl.load(pr_ptr + rn64, mask=col_ok, other=-1)
        keep = keep & (pq[:, None] == pr[None, :])
    if HAS_ROWMAX:
        top = tl.reduce(tl.where(keep, acc, float("-inf")), 1, tl.standard._elementwise_max)
        tl.atomic_max(rowmax_ptr + rm64, top, mask=row_ok, sem="relaxed")
    for t in tl.static_range(G):
        lo = tl.load(lo_ptr + rm64 * G + t, mask=row_ok, other=float("inf"))
        hi = tl.load(hi_ptr + rm64 * G + t, mask=row_ok, other=float("inf"))
        over = keep & (acc > hi[:, None])
        n_over = tl.reduce(over.to(tl.int64), 1, tl.standard._sum_combine)
        tl.atomic_add(above_ptr + rm64 * G + t, n_over, mask=row_ok & (n_over > 0), sem="relaxed")
        inside = keep & (acc >= lo[:, None]) & (acc <= hi[:, None])
        flags = inside.to(tl.int64)
        per_row = tl.reduce(flags, 1, tl.standard._sum_combine)
        total = tl.reduce(per_row, 0, tl.standard._sum_combine)
        if total > 0:  # rare: most tiles write nothing
            base = tl.atomic_add(count_ptr, total, sem="relaxed")
            # Entries of the tile's earlier rows, then of this row's earlier columns.
            before = tl.associative_scan(per_row, 0, tl.standard._sum_combine) - per_row
            within = tl.associative_scan(flags, 1, tl.standard._sum_combine)
            pos = base + before[:, None] + within - 1
            put = inside & (pos < capacity)
            at = window_ptr + pos * 3
            tl.store(at, tl.broadcast_to(rm64[:, None], [BLOCK_M, BLOCK_N]), mask=put)
            tl.store(at + 1, tl.broadcast_to(rn64[None, :], [BLOCK_M, BLOCK_N]), mask=put)
            tl.store(at + 2, tl.full([BLOCK_M, BLOCK_N], t, dtype=tl.int64), mask=put)


_SOURCES = {"exact": _exact_kernel, "pair_dots": _pair_dots_kernel, "filter": _filter_kernel}
_DECORATED: dict[tuple[str, bool], object] = {}


def _kernel(name: str):
    """The kernel ``name`` decorated for the current ``TRITON_INTERPRET`` setting (once each)."""
    if triton is None:
        raise RuntimeError("Triton is not installed")
    key = (name, interpreting())
    if not key[1] and not _library_compiles():
        raise RuntimeError(
            "Triton was imported with TRITON_INTERPRET set, so its library only interprets: "
            "unset the variable before importing triton to compile kernels"
        )
    if key not in _DECORATED:
        _DECORATED[key] = triton.jit(_SOURCES[name])
    return _DECORATED[key]


def _target(device: torch.device) -> str:
    return "interpreter" if device.type == "cpu" or interpreting() else "cuda"


# ---------------------------------------------------------------------------------------------
# Launchers.


def _mode(mode: int | str) -> int:
    m = MODES.get(mode, -1) if isinstance(mode, str) else int(mode)
    if m not in (0, 1, 2):
        raise ValueError(f"mode must be 0 (dot), 1 (cosine) or 2 (euclidean), got {mode!r}")
    return m


def _check_rows(x: torch.Tensor, name: str) -> None:
    if x.dim() != 2 or x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"{name} must be a 2-d float32 or float64 tensor, got {x.dtype} {x.shape}")


def _vector(x: torch.Tensor | None, dtype: torch.dtype, fallback: torch.Tensor) -> torch.Tensor:
    if x is None:
        return fallback
    return x.to(dtype).contiguous()


def _launch_exact(
    action,
    query,
    q_aux,
    reference,
    r_aux,
    rows,
    cols,
    mode,
    q_scale,
    r_scale,
    *,
    slots=None,
    index=None,
    best=None,
    where=None,
    out=None,
    counts=None,
    ties=None,
    g=1,
):
    _check_rows(query, "query")
    _check_rows(reference, "reference")
    rows = rows.to(torch.int64).contiguous()
    cols = cols.to(torch.int64).contiguous()
    p = rows.shape[0]
    if cols.shape[0] != p:
        raise ValueError(f"rows and cols differ in length: {p} and {cols.shape[0]}")
    if p == 0:
        return
    mode = _mode(mode)
    if (mode == 1 and q_aux is None) or (mode != 0 and r_aux is None):
        raise ValueError("cosine needs q_aux and r_aux, euclidean r_aux")
    f64 = torch.float64
    qa = _vector(q_aux, f64, rows)
    ra = _vector(r_aux, f64, rows)
    qs = _vector(q_scale, f64, rows)
    rs = _vector(r_scale, f64, rows)
    counts_s = counts.stride() if counts is not None else (0, 0)
    ties_s = ties.stride() if (ties is not None and ties.dim() == 2) else (0, 0)
    block = _EXACT_BLOCK[_target(query.device)]
    _kernel("exact")[(triton.cdiv(p, block),)](
        query,
        reference,
        qa,
        ra,
        qs,
        rs,
        rows,
        cols,
        rows if slots is None else slots,
        rows if index is None else index,
        qa if best is None else best,
        rows if where is None else where,
        qa if out is None else out,
        rows if counts is None else counts,
        rows if ties is None else ties,
        p,
        query.shape[1],
        g,
        query.stride(0),
        query.stride(1),
        reference.stride(0),
        reference.stride(1),
        counts_s[0],
        counts_s[1],
        ties_s[0],
        ties_s[1],
        MODE=mode,
        HAS_QS=q_scale is not None,
        HAS_RS=r_scale is not None,
        ACTION=action,
        HAS_TIES=ties is not None,
        BLOCK=block,
        num_warps=4,
        enable_fp_fusion=False,
    )


def exact_scores(
    query: torch.Tensor,
    q_aux: torch.Tensor | None,
    reference: torch.Tensor,
    r_aux: torch.Tensor | None,
    rows: torch.Tensor,
    cols: torch.Tensor,
    mode: int | str,
    q_scale: torch.Tensor | None = None,
    r_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact float64 scores (module docstring) of the pairs ``(rows[p], cols[p])``, ``(p,)``.

    ``mode`` is 0/``"dot"``, 1/``"cosine"`` or 2/``"euclidean"``; ``q_aux``/``r_aux`` are the
    rows' norms (cosine) or squared norms (euclidean, ``q_aux`` unused), ``None`` where unused.
    A negative row marks a padding pair, which scores ``-inf``.
    """
    out = torch.empty(rows.shape[0], dtype=torch.float64, device=query.device)
    _launch_exact(
        _SCORES, query, q_aux, reference, r_aux, rows, cols, mode, q_scale, r_scale, out=out
    )
    return out


def exact_beats(
    query: torch.Tensor,
    q_aux: torch.Tensor | None,
    reference: torch.Tensor,
    r_aux: torch.Tensor | None,
    rows: torch.Tensor,
    cols: torch.Tensor,
    slots: torch.Tensor,
    best: torch.Tensor,
    where: torch.Tensor,
    col_index: torch.Tensor,
    mode: int | str,
    counts: torch.Tensor,
    ties: torch.Tensor | None = None,
    q_scale: torch.Tensor | None = None,
    r_scale: torch.Tensor | None = None,
) -> None:
    """Count, in place, how many pairs rank before each slot's threshold item.

    For each pair ``p`` with ``i = rows[p] >= 0``, ``j = cols[p]`` (local reference row) and
    ``t = slots[p]``, with ``e`` its exact score and ``col_index[j]`` its global index: add 1 to
    ``counts[i, t]`` when ``e > best[i, t]``, or ``e == best[i, t]`` and
    ``col_index[j] < where[i, t]``; when ``ties`` is given, add 1 to ``ties[i, t]`` when
    ``e == best[i, t]`` and ``col_index[j] != where[i, t]``. ``best`` (c, g) float64, ``where``,
    ``counts``, ``ties`` (c, g) int64 (any strides for ``counts`` and ``ties``). Integer atomic
    additions commute, so the counts do not depend on the order the pairs run in.
    """
    c, g = best.shape
    shapes = {where.shape, counts.shape, (c, g) if ties is None else ties.shape}
    if shapes != {(c, g)}:
        raise ValueError("best, where, counts and ties must share one (c, g) shape")
    if counts.dtype != torch.int64 or (ties is not None and ties.dtype != torch.int64):
        raise ValueError("counts and ties must be int64")
    _launch_exact(
        _BEATS,
        query,
        q_aux,
        reference,
        r_aux,
        rows,
        cols,
        mode,
        q_scale,
        r_scale,
        slots=slots.to(torch.int64).contiguous(),
        index=col_index.to(torch.int64).contiguous(),
        best=best.to(torch.float64).contiguous(),
        where=where.to(torch.int64).contiguous(),
        counts=counts,
        ties=ties,
        g=g,
    )


def exact_best(
    query: torch.Tensor,
    q_aux: torch.Tensor | None,
    reference: torch.Tensor,
    r_aux: torch.Tensor | None,
    rows: torch.Tensor,
    cols: torch.Tensor,
    col_index: torch.Tensor,
    mode: int | str,
    c: int,
    q_scale: torch.Tensor | None = None,
    r_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each chunk row's best pair by exact score, then lowest global index.

    Returns ``best`` (c,) float64, ``where`` (c,) int64 and ``ties`` (c,) int64: the best score
    (``-inf`` where the row has no pair), its lowest global index ``col_index[cols[p]]``
    (``2**63 - 1`` where none) and how many of the row's pairs score exactly ``best`` (the best
    pair included; 0 where none). Pairs scoring NaN are ignored. Two launches: the first scores
    the pairs and raises each row's best with an atomic maximum, the second takes the atomic
    minimum of the index over the pairs at the best; both are order independent.
    """
    dev = query.device
    best = torch.full((c,), -torch.inf, dtype=torch.float64, device=dev)
    where = torch.full((c,), SENTINEL, dtype=torch.int64, device=dev)
    ties = torch.zeros(c, dtype=torch.int64, device=dev)
    scratch = torch.empty(rows.shape[0], dtype=torch.float64, device=dev)
    index = col_index.to(torch.int64).contiguous()
    for action in (_BEST, _AT_BEST):
        _launch_exact(
            action,
            query,
            q_aux,
            reference,
            r_aux,
            rows,
            cols,
            mode,
            q_scale,
            r_scale,
            index=index,
            best=best,
            where=where,
            out=scratch,
            ties=ties,
        )
    return best, where, ties


def pair_dots(a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor):
    """Float32 dots ``a[rows[p]] · b[cols[p]]`` of filter rows ``(p,)``, in no fixed summation
    order (within ``width`` float32 roundings of the exact dot); padding rows (< 0) give -inf."""
    rows = rows.to(torch.int64).contiguous()
    cols = cols.to(torch.int64).contiguous()
    p = rows.shape[0]
    out = torch.empty(p, dtype=torch.float32, device=a.device)
    if p == 0:
        return out
    block_p, block_k = _PAIR_BLOCKS[_target(a.device)]
    _kernel("pair_dots")[(triton.cdiv(p, block_p),)](
        a,
        b,
        rows,
        cols,
        out,
        p,
        a.shape[1],
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        BLOCK_P=block_p,
        BLOCK_K=block_k,
        num_warps=4,
        enable_fp_fusion=True,
    )
    return out


_FILTER_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def filter_window(
    a: torch.Tensor,
    b: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    capacity: int,
    *,
    exclude_codes: tuple[torch.Tensor, torch.Tensor] | None = None,
    exclude_lists: torch.Tensor | None = None,
    positive_codes: tuple[torch.Tensor, torch.Tensor] | None = None,
    rowmax: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused filter GEMM and threshold pass of a query chunk against a reference block.

    ``a`` (c, w) and ``b`` (m, w), both float32, bfloat16 or float16; the filter score of
    ``(i, j)`` is ``s = a_i · b_j`` (``tl.dot``, float32 accumulation, IEEE float32 multiplies
    for float32). ``lo``, ``hi`` (c, g) float32: per row and slot, the thresholds; a slot with
    ``lo = hi = +inf`` holds no finite score. A pair is *considered* unless

    * ``exclude_codes = (qc (c,), rc (m,))`` and ``qc[i] >= 0 and qc[i] == rc[j]``;
    * ``j`` is in row ``i`` of ``exclude_lists`` (c, E), padded with -1;
    * ``positive_codes = (pq (c,), pr (m,))`` and ``pq[i] != pr[j]`` (positives only).

    Returns ``above`` (c, g) int64, the number of considered pairs with ``s > hi[i, t]``;
    ``window`` (capacity, 3) int64, rows ``[i, j, t]`` of the considered pairs with
    ``lo[i, t] <= s <= hi[i, t]`` in no particular order, unused rows -1; and ``count``, a 0-d
    int64 tensor, the number of window pairs found: when it exceeds ``capacity`` only
    ``capacity`` of them (any) were written and the caller must recompute with more room.
    ``rowmax``, if given, is a (c,) float32 buffer raised in place to each row's largest
    considered ``s`` (initialise it to -inf; passing the same buffer for every block of a chunk
    leaves the chunk's maxima, e.g. the best positive's filter score with ``positive_codes``).
    One launch, the score matrix never written.
    """
    c, w = a.shape
    m = b.shape[0]
    if a.dtype not in _FILTER_DTYPES or b.dtype != a.dtype or b.shape[1] != w:
        raise ValueError(f"a and b must share a dtype of {_FILTER_DTYPES} and a width")
    if lo.dim() != 2 or lo.shape != hi.shape or lo.shape[0] != c:
        raise ValueError(f"lo and hi must be (c, g) with c = {c}")
    if lo.dtype != torch.float32 or hi.dtype != torch.float32:
        raise ValueError("lo and hi must be float32 (rounding them here could narrow the window)")
    g = lo.shape[1]
    dev = a.device
    above = torch.zeros((c, g), dtype=torch.int64, device=dev)
    window = torch.full((capacity, 3), -1, dtype=torch.int64, device=dev)
    count = torch.zeros((), dtype=torch.int64, device=dev)
    if rowmax is not None and (rowmax.shape != (c,) or rowmax.dtype != torch.float32):
        raise ValueError("rowmax must be a (c,) float32 tensor")
    if c == 0 or m == 0 or g == 0:
        return above, window, count
    lo32 = lo.contiguous()
    hi32 = hi.contiguous()
    dummy = count
    qc, rc = (dummy, dummy) if exclude_codes is None else exclude_codes
    pq, pr = (dummy, dummy) if positive_codes is None else positive_codes
    ex = dummy if exclude_lists is None else exclude_lists.to(torch.int64).contiguous()
    n_ex = 0 if exclude_lists is None else ex.shape[1]
    if exclude_lists is not None and ex.shape[0] != c:
        raise ValueError("exclude_lists must have one row per query row")
    target = _target(dev)
    bits = 32 if a.dtype == torch.float32 else 16
    bm, bn, bk, warps, stages = _FILTER_BLOCKS[(target, bits)]
    grid = (triton.cdiv(m, bn), triton.cdiv(c, bm))
    _kernel("filter")[grid](
        a,
        b,
        lo32,
        hi32,
        above,
        window,
        count,
        dummy if rowmax is None else rowmax,
        qc.to(torch.int64).contiguous(),
        rc.to(torch.int64).contiguous(),
        ex,
        pq.to(torch.int64).contiguous(),
        pr.to(torch.int64).contiguous(),
        c,
        m,
        w,
        capacity,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        ex.stride(0) if n_ex else 0,
        G=g,
        E=n_ex,
        HAS_CODES=exclude_codes is not None,
        HAS_POSITIVES=positive_codes is not None,
        HAS_ROWMAX=rowmax is not None,
        WIDEN=target == "interpreter" and a.dtype == torch.bfloat16,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        num_warps=warps,
        num_stages=stages,
        enable_fp_fusion=True,
    )
    return above, window, count
