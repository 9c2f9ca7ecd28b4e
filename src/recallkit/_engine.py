"""The chunked scoring engine shared by every metric of recallkit.

Queries are processed in chunks of rows, references in blocks (one block when the reference is in
memory; several when it is streamed from disk or sharded across processes). Each (chunk, block)
pair is one GEMM: the full n×m matrix is never built.

Scores are "higher is better": cosine similarity, the inner product (``metric="dot"``), or, for
euclidean, ``2 q·r - |r|²``, which orders candidates exactly as ``-|q - r|²`` (``|q|²`` is
constant along a row).

What "exact" means. The decisive score of a pair is defined from the raw input rows (float32, or
float64 when a side is float64 or integer) with one fixed order of operations in float64
(:mod:`recallkit._kernels`): products in float64, summed in index order, norms the same way,
cosine as ``dot / (sqrt(|q|²) · sqrt(|r|²))``. Every back end (numba on the CPU, the torch kernels
that CUDA runs) reproduces it bit for bit. A rank is the number of candidates whose exact score is
higher, or equal with a lower reference index. So ranks are a function of the input embeddings
alone: the same for every chunk size, block split, shard split, thread count, BLAS and device.

How it is fast. A GEMM in float32 (float64 for float64 inputs; optionally bfloat16/float16 on
CUDA) over rows that are normalised (cosine) or scaled by a power of two (dot, euclidean; so no
score overflows or underflows) gives filter scores with a rigorous error bound ``eps`` that covers
the GEMM's rounding, the rounding of its inputs and of the normalisation, and underflow. An item
more than ``eps`` above (below) a threshold is certainly above (below) it; only the few items
within ``eps`` are scored exactly.

Every ranking statistic is computed in two steps per query: the threshold item (the best positive,
or a given ground-truth item) with its exact score and global index, then the count of candidates
that rank above it. Both steps combine across blocks and shards by max/min and sum, which is what
makes streamed and distributed evaluation exact. Positives are given by label codes (compared per
chunk, never materialised as pairs) or by explicit index lists (ground truth).

On the CPU the GEMM runs in cache-sized tiles, each consumed at once by a numba kernel, so a
chunk's scores are never written to memory; leave-one-out on one tensor computes each tile once
for both of its sides (:mod:`recallkit._tiles`). With few positives per query (fine labels) the
best positive is found from the positives' own filter scores, before any pass.

Where the torch kernels run (CUDA), every step of a chunk stays on the device, with windows of
fixed capacity, so that a call synchronises with the host a constant number of times
(:mod:`recallkit._device`); a float16/bfloat16 filter is the first stage of a cascade whose
window is scored again in float32 before the exact scores.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from recallkit import _checks, _device, _kernels, _tiles

DEFAULT_MEMORY_BUDGET = 256 * 2**20
MIN_CHUNK_ROWS = 64
MAX_CHUNK_ROWS = 4096
SENTINEL = np.iinfo(np.int64).max
# Float64 inputs beyond this magnitude could overflow the exact float64 scores.
FLOAT64_LIMIT = 2.0**400
_PREP_ROWS = 8192


def resolve_device(device: Any, *tensors: torch.Tensor) -> torch.device:
    """The device the work runs on: ``device`` if given, else the first input's device."""
    if device is not None:
        return torch.device(device)
    return tensors[0].device


def work_dtype(dtype: Any) -> torch.dtype:
    """The dtype rows are kept in: float64 for float64 (and integer) inputs, else float32."""
    if dtype in (torch.float64, np.float64, np.dtype(np.float64)):
        return torch.float64
    if isinstance(dtype, np.dtype) and dtype.kind in "iu":
        return torch.float64
    if isinstance(dtype, torch.dtype) and not dtype.is_floating_point:
        return torch.float64
    return torch.float32


@dataclass
class Rows:
    """Validated rows on the device: ``raw`` (float32 or float64), ``sq``, float64 ``|x|²``
    summed in index order, and ``norm = sqrt(sq)`` correctly rounded (the exact score's)."""

    raw: torch.Tensor
    sq: torch.Tensor
    norm: torch.Tensor

    @classmethod
    def of(cls, raw: torch.Tensor) -> Rows:
        sq = _kernels.row_sq_norms(raw)
        return cls(raw, sq, _kernels.row_norms(sq))

    def __getitem__(self, rows: slice) -> Rows:
        return Rows(self.raw[rows], self.sq[rows], self.norm[rows])

    def aux(self, metric: str) -> torch.Tensor:
        """What the exact score needs besides the rows: norms (cosine) or ``|x|²``."""
        return self.norm if metric == "cosine" else self.sq


def prepare_rows(
    x: torch.Tensor,
    name: str,
    func: str,
    metric: str,
    device: torch.device,
    offset: int = 0,
) -> Rows:
    """Validate embedding rows: upcast, reject non-finite, huge and (for cosine) zero rows."""
    raw = x.to(device=device, dtype=work_dtype(x.dtype)).contiguous()
    _checks.check_finite_rows(raw, offset, name, func)
    if raw.dtype == torch.float64 and raw.numel():
        big = raw.abs().amax(dim=1) > FLOAT64_LIMIT
        if bool(big.any()):
            row = int(torch.nonzero(big)[0, 0]) + offset
            raise _checks.fail(
                func,
                name,
                "of magnitude at most 2**400 (exact float64 scores would overflow)",
                f"a larger value in row {row}",
            )
    rows = Rows.of(raw)
    if metric == "cosine":
        _checks.check_zero_rows(rows.sq, offset, name, func)
    return rows


def _pow2_scale(sq: torch.Tensor) -> float:
    """A power of two that brings the largest row norm into [0.5, 1)."""
    top = float(sq.max()) if sq.numel() else 0.0
    if top <= 0.0:
        return 1.0
    _, exponent = math.frexp(math.sqrt(top))
    return math.ldexp(1.0, -exponent)


def filter_dtype(*dtypes: torch.dtype) -> torch.dtype:
    return torch.float64 if torch.float64 in dtypes else torch.float32


def _reference_filter(rows: Rows, metric: str, dtype: torch.dtype) -> tuple[torch.Tensor, float]:
    """The GEMM's reference rows and their scale: normalised (cosine, scale 1), or scaled by a
    power of two ``c`` (dot: ``c r``; euclidean: ``[c r, c² |r|²]``)."""
    n, d = rows.raw.shape
    scale = 1.0 if metric == "cosine" else _pow2_scale(rows.sq)
    width = d + (metric == "euclidean")
    out = torch.empty((n, width), dtype=dtype, device=rows.raw.device)
    for start in range(0, n, _PREP_ROWS):
        stop = min(start + _PREP_ROWS, n)
        x = rows.raw[start:stop].to(torch.float64)
        sq = rows.sq[start:stop]
        if metric == "cosine":
            out[start:stop] = (x / rows.norm[start:stop, None]).to(dtype)
        else:
            out[start:stop, :d] = (x * scale).to(dtype)
            if metric == "euclidean":
                out[start:stop, d] = (sq * (scale * scale)).to(dtype)
    return out, scale


@dataclass
class QueryFilter:
    """A query chunk's GEMM rows against one block, their scale and their float64 norms."""

    rows: torch.Tensor
    scale: float
    norms: torch.Tensor
    use_low: bool = False


def query_filter(
    metric: str, chunk: Rows, block: Block, dtype: torch.dtype, scale: float | None = None
) -> QueryFilter:
    """The chunk's GEMM rows such that ``filter = scale · block.scale · exact score``.

    cosine: ``q/|q|`` (scale 1); dot: ``c q``; euclidean: ``[2 c q, -c / block.scale]``, so that
    the product with ``[s r, s² |r|²]`` is ``c s (2 q·r - |r|²)``. ``c`` is ``scale`` if given
    (a power of two), else the one that brings the chunk's largest norm into [0.5, 1).
    """
    x = chunk.raw.to(torch.float64)
    if metric == "cosine":
        scale = 1.0
        rows = x / chunk.norm[:, None]
    else:
        scale = _pow2_scale(chunk.sq) if scale is None else scale
        rows = x * scale
        if metric == "euclidean":
            extra = torch.full_like(rows[:, :1], -scale / block.scale)
            rows = torch.cat([2.0 * rows, extra], dim=1)
    norms = torch.linalg.vector_norm(rows, dim=1)
    # float16's range is narrow: a euclidean query far smaller than the reference keeps float32.
    use_low = block.low is not None and (metric != "euclidean" or scale / block.scale <= 2**14)
    return QueryFilter(rows.to(dtype).contiguous(), scale, norms, use_low)


@dataclass
class Block:
    """Prepared reference rows ``offset..offset+rows``, or the rows at ``global_index``.

    ``data`` and ``sq`` are the raw rows and their float64 squared norms (exact scores); ``gemm``
    is what the GEMM multiplies (``_reference_filter``), ``scale`` its power-of-two scale and
    ``max_norm`` the largest norm of its rows (the error bound).
    """

    offset: int
    rows: int
    data: torch.Tensor
    sq: torch.Tensor
    norm: torch.Tensor
    gemm: torch.Tensor
    scale: float
    max_norm: float
    global_index: torch.Tensor | None = None
    low: torch.Tensor | None = None

    def globals_of(self, local: torch.Tensor) -> torch.Tensor:
        """Global reference indices of local columns."""
        if self.global_index is None:
            return local + self.offset
        return self.global_index.to(local.device)[local]

    def locals_of(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Local positions of global indices ``cols`` and the mask of those in this block."""
        if self.global_index is None:
            inside = (cols >= self.offset) & (cols < self.offset + self.rows)
            return cols - self.offset, inside
        index = self.global_index.to(cols.device)
        pos = torch.searchsorted(index, cols)
        found = pos < self.rows
        inside = found & (index[pos.clamp(max=max(self.rows - 1, 0))] == cols)
        return pos, inside

    def view(self, start: int, stop: int) -> Block:
        """Rows ``start:stop`` of this in-memory block, as a block of their own."""
        low = None if self.low is None else self.low[start:stop]
        return Block(
            self.offset + start,
            stop - start,
            self.data[start:stop],
            self.sq[start:stop],
            self.norm[start:stop],
            self.gemm[start:stop],
            self.scale,
            self.max_norm,
            None,
            low,
        )


def make_block(
    x: torch.Tensor | Rows,
    offset: int,
    func: str,
    metric: str,
    device: torch.device,
    dtype: torch.dtype,
    name: str = "reference",
    global_index: torch.Tensor | None = None,
    precision: str = "float32",
) -> Block:
    """A reference block: validated rows, their norms and the GEMM filter rows in ``dtype``."""
    rows = x if isinstance(x, Rows) else prepare_rows(x, name, func, metric, device, offset)
    gemm, scale = _reference_filter(rows, metric, dtype)
    top = torch.zeros((), dtype=torch.float64, device=gemm.device)
    for start, stop in chunks(gemm.shape[0], _PREP_ROWS):  # no float64 copy of the whole block
        norms = torch.linalg.vector_norm(gemm[start:stop].to(torch.float64), dim=1)
        top = torch.maximum(top, norms.max())
    max_norm = float(top)
    low = None
    # The low-precision filter runs where the torch kernels do (CUDA; the CPU when forced).
    if PRECISIONS[precision] is not None and dtype == torch.float32:
        if not _kernels._use_numba(rows.raw, None):
            low = gemm.to(PRECISIONS[precision])
    return Block(
        offset,
        rows.raw.shape[0],
        rows.raw,
        rows.sq,
        rows.norm,
        gemm,
        scale,
        max_norm,
        global_index,
        low,
    )


def _exact(
    space: Space,
    chunk: Rows,
    block: Block,
    rows: torch.Tensor,
    cols: torch.Tensor,
    backend: str | None,
) -> torch.Tensor:
    """Exact scores of the pairs (chunk row, block-local column)."""
    aux = block.norm if space.metric == "cosine" else block.sq
    return _kernels.exact_scores(
        chunk.raw, chunk.aux(space.metric), block.data, aux, rows, cols, space.metric, backend
    )


@dataclass
class Space:
    """Prepared queries and a reference: in memory (one block) or streamed block by block."""

    query: Rows
    metric: str
    num_reference: int
    dim: int
    device: torch.device
    block_source: Callable[[], Iterator[Block]]
    single: Block | None = None
    block_rows: int = 0
    precision: str = "float32"
    filter_dtype: torch.dtype = torch.float32
    query_is_reference: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def num_query(self) -> int:
        return self.query.raw.shape[0]

    def chunk(self, start: int, stop: int) -> Rows:
        return self.query[start:stop]

    def blocks(self) -> Iterator[Block]:
        if self.single is not None:
            yield self.single
        else:
            yield from self.block_source()


def _is_streamed(x: Any) -> bool:
    return isinstance(x, np.memmap) or getattr(x, "is_streamed_embeddings", False)


PRECISIONS = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Relative rounding of the GEMM inputs at each precision (TF32 when CUDA allows it).
_INPUT_ROUNDING = {"float32": 0.0, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# Half the smallest subnormal of each GEMM type: the absolute rounding of an underflowing value.
_TINY = {
    torch.float64: 2.0**-1074,
    torch.float32: 2.0**-149,
    torch.bfloat16: 2.0**-133,
    torch.float16: 2.0**-24,
}


def _streamed_dtype(reference: Any, func: str) -> torch.dtype:
    dtype = np.dtype(getattr(reference, "dtype", np.float32))
    if dtype.kind not in "fiu":
        raise _checks.fail(func, "reference", "real-valued (float or integer)", f"dtype {dtype}")
    return work_dtype(dtype)


def prepare(
    query: Any,
    reference: Any,
    metric: str,
    device: Any,
    func: str,
    reference_block_rows: int | None = None,
    precision: str = "float32",
) -> Space:
    """Validate and prepare embeddings.

    Rows are kept as float32 (float16/bfloat16 inputs are upcast) or float64 (float64 and
    integer inputs); exact scores are float64 either way, and a float64 side (in memory or
    streamed) makes the GEMM filter float64 too. A memory-mapped numpy reference
    (``np.load(path, mmap_mode="r")``) or a :class:`recallkit.io.EmbeddingFile` is streamed in
    blocks, never loaded whole. ``precision="float16"``/``"bfloat16"`` runs the GEMM filter in
    that type on CUDA (float32 accumulation); the exact scores keep the results identical.
    """
    _checks.check_metric(metric, func)
    if precision not in PRECISIONS:
        raise _checks.fail(func, "precision", f"one of {tuple(PRECISIONS)}", repr(precision))
    q = _checks.as_embeddings(query, "query", func)
    streamed = _is_streamed(reference) or reference_block_rows is not None
    if streamed:
        shape = tuple(reference.shape)
        if len(shape) != 2 or shape[0] == 0:
            raise _checks.fail(func, "reference", "a non-empty 2-D array", f"shape {shape}")
        m, d = shape
        r_dtype = _streamed_dtype(reference, func)
    else:
        r = _checks.as_embeddings(reference, "reference", func)
        m, d = r.shape
        r_dtype = work_dtype(r.dtype)
    if q.shape[1] != d:
        raise _checks.fail(
            func, "reference", f"of the query's dimension {q.shape[1]}", f"dimension {d}"
        )
    dev = resolve_device(device, q)
    fdtype = filter_dtype(work_dtype(q.dtype), r_dtype)
    if not streamed:
        r_rows = prepare_rows(r, "reference", func, metric, dev)
        block = make_block(r_rows, 0, func, metric, dev, fdtype, precision=precision)
        if query is reference:
            q_rows = r_rows  # leave-one-out on one tensor: prepare it once
        else:
            q_rows = prepare_rows(q, "query", func, metric, dev)
        common = dict(
            precision=precision, filter_dtype=fdtype, query_is_reference=query is reference
        )
        if m * 4 * 256 <= DEFAULT_MEMORY_BUDGET or dev.type == "cuda":
            return Space(q_rows, metric, m, d, dev, lambda: iter(()), single=block, **common)
        # A reference too wide for chunks of 256 query rows within the budget is scored in
        # blocks (views of the prepared tensors): large GEMMs, bounded score buffers.
        rows = _streamed_block_rows(m, d, q.shape[0])

        def views() -> Iterator[Block]:
            for start, stop in chunks(m, rows):
                yield block.view(start, stop)

        return Space(q_rows, metric, m, d, dev, views, block_rows=rows, **common)
    q_rows = prepare_rows(q, "query", func, metric, dev)
    rows = reference_block_rows or _streamed_block_rows(m, d, q.shape[0])

    def source() -> Iterator[Block]:
        for start, stop in chunks(m, rows):
            block = _checks.real_array(np.array(reference[start:stop]), "reference", func)
            raw = torch.from_numpy(block)  # a writable copy
            yield make_block(raw, start, func, metric, dev, fdtype, precision=precision)

    return Space(
        q_rows,
        metric,
        m,
        d,
        dev,
        source,
        block_rows=rows,
        precision=precision,
        filter_dtype=fdtype,
    )


def _streamed_block_rows(m: int, d: int, n: int) -> int:
    per_row = d * 8 * 2 + min(n, MAX_CHUNK_ROWS) * 6
    return int(min(m, max(MIN_CHUNK_ROWS, DEFAULT_MEMORY_BUDGET // per_row)))


GPU_MEMORY_VARIABLE = "RECALLKIT_GPU_MEMORY"
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
# Bytes per filter score that a chunk's masks and temporaries take on a GPU, besides the score.
DEVICE_BYTES_PER_SCORE = 8


def memory_budget(device: torch.device) -> int:
    """Bytes a query chunk's working memory may take on ``device``.

    The CPU: ``DEFAULT_MEMORY_BUDGET`` (256 MiB). Another device: the ``RECALLKIT_GPU_MEMORY``
    environment variable when it is set (bytes, or with a binary unit: ``512MiB``, ``8GiB``),
    else a quarter of the free memory of a CUDA device at the call, and at least 256 MiB.
    """
    if device.type == "cpu":
        return DEFAULT_MEMORY_BUDGET
    text = os.environ.get(GPU_MEMORY_VARIABLE, "").strip()
    if text:
        match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*(?:([kmgt])i?b?|b)?", text.lower())
        value = float(match.group(1)) * _UNITS[match.group(2) or ""] if match else 0.0
        if value < 1:
            raise ValueError(
                f"The {GPU_MEMORY_VARIABLE} environment variable must be a positive number of "
                f"bytes, optionally with a binary unit (512MiB, 8GiB). Got {text!r}."
            )
        return int(value)
    if device.type == "cuda":
        return max(DEFAULT_MEMORY_BUDGET, torch.cuda.mem_get_info(device)[0] // 4)
    return DEFAULT_MEMORY_BUDGET


def chunk_rows(space: Space, chunk_size: int | None, per_row_bytes: int = 0) -> int:
    """Rows per query chunk: ``chunk_size`` if given, else sized from :func:`memory_budget`.

    A chunk of ``c`` rows against ``m`` reference columns (or a block of them) holds about
    ``c · (m · (e + x) + per_row_bytes + 16 d)`` bytes: filter scores of ``e`` bytes (4, or 8
    for float64), ``x`` bytes per score of masks and temporaries on a GPU
    (``DEVICE_BYTES_PER_SCORE``; none on the CPU), ``per_row_bytes`` for ranked lists and the
    rows themselves. ``c`` is the most that fits the budget (on a GPU, and with fewer than 2**31
    scores), rounded down to a multiple of 64, within [64, 4096].
    """
    if chunk_size is not None:
        return chunk_size
    columns = space.single.rows if space.single is not None else space.block_rows
    element = 8 if space.filter_dtype == torch.float64 else 4
    per_row = columns * element + per_row_bytes + space.dim * 16
    if space.device.type != "cpu":
        per_row += columns * DEVICE_BYTES_PER_SCORE
    rows = memory_budget(space.device) // max(per_row, 1)
    if space.device.type != "cpu":
        # A chunk's masks stay below 2**31 elements, the limit of torch's index kernels.
        rows = min(rows, (2**31 - 1) // max(columns, 1))
    return int(max(MIN_CHUNK_ROWS, min(MAX_CHUNK_ROWS, rows // 64 * 64)))


def block_scores(space: Space, qf: QueryFilter, block: Block) -> torch.Tensor:
    """Filter scores of a query chunk against one block, ``(rows, block.rows)``.

    On the CPU: numpy's BLAS, single-threaded, on row slices run by a thread pool, into a reused
    buffer, which leaves no BLAS threads spinning while the numba kernels run next. Its rounding
    does not matter (module docstring). On CUDA (and wherever the torch kernels run):
    ``torch.mm``; a low-precision filter multiplies in that type with float32 accumulation.
    """
    a_t = qf.rows
    rows, cols = a_t.shape[0], block.rows
    if qf.use_low:
        a_low = a_t.to(block.low.dtype)
        if a_t.device.type == "cpu":  # the same products, summed in float32
            return a_low.to(torch.float32) @ block.low.to(torch.float32).T
        return torch.mm(a_low, block.low.T, out_dtype=torch.float32)
    if a_t.device.type != "cpu" or not _kernels._use_numba(a_t, None):
        return a_t @ block.gemm.T
    a = a_t.numpy()
    size = rows * cols
    buffer = space.extra.get("buffer")
    if buffer is None or buffer.size < size or buffer.dtype != a.dtype:
        buffer = np.empty(size, dtype=a.dtype)
        space.extra["buffer"] = buffer
    out = buffer[:size].reshape(rows, cols)
    b = block.gemm.numpy().T
    workers = max(1, min(torch.get_num_threads(), rows))
    bounds = np.linspace(0, rows, workers + 1).astype(int)
    with _blas_controller().limit(limits=1, user_api="blas"):
        if workers == 1:
            np.matmul(a, b, out=out)
        else:
            jobs = [
                _pool(workers).submit(np.matmul, a[lo:hi], b, out=out[lo:hi])
                for lo, hi in itertools.pairwise(bounds)
                if hi > lo
            ]
            for job in jobs:
                job.result()
    return torch.from_numpy(out)


_POOLS: dict[int, ThreadPoolExecutor] = {}
_CONTROLLER: list[Any] = []


def _blas_controller() -> Any:
    """One ``threadpoolctl`` controller per process (the CPU path only; building it scans the
    loaded libraries)."""
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]


def _pool(workers: int) -> ThreadPoolExecutor:
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="recallkit-gemm")
    return _POOLS[workers]


def _top_floor(
    kth: torch.Tensor, eps: torch.Tensor, dtype: torch.dtype, ks: torch.Tensor
) -> torch.Tensor:
    """``(c, 1)`` lower bounds of the top-k windows: the k-th filter score minus ``2 eps``,
    rounded down to ``dtype`` (every finite score where fewer than k exist; none where k = 0)."""
    lo = kth - 2 * eps
    lo = torch.where(torch.isneginf(kth), torch.full_like(lo, torch.finfo(dtype).min), lo)
    lo, _ = _bounds(lo[:, None], torch.zeros_like(eps)[:, None], dtype)
    lo[ks[:, None] <= 0] = torch.inf
    return lo


def error_bound(
    space: Space, qf: QueryFilter, block: Block, on_device: bool = False
) -> torch.Tensor:
    """Per query row, a bound on |filter score - scale · exact score| against this block (CPU,
    or the rows' device with ``on_device``).

    Standard GEMM error analysis over ``t = d + 1`` terms, ``|fl(a·b) - a·b| <= t u |a| |b|``;
    plus the rounding of the GEMM's inputs to their type (and of low-precision or TF32 inputs),
    the float64 error of the normalisation and of the exact score itself (``2 d 2^-53``), all
    doubled for safety; plus an absolute term for values that underflow.
    """
    dtype = block.gemm.dtype
    unit = 2.0**-53 if dtype == torch.float64 else 2.0**-24
    rounding = _INPUT_ROUNDING[space.precision] if qf.use_low else 0.0
    if space.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        rounding = max(rounding, 2.0**-10)
    terms = space.dim + 1
    gamma = 2.0 * ((terms + 8) * unit + 2.0 * rounding + 2.0 * space.dim * 2.0**-53)
    tiny = _TINY[block.low.dtype if qf.use_low else dtype]
    norms = qf.norms
    absolute = 4.0 * terms * tiny * (1.0 + norms + block.max_norm)
    bound = gamma * norms * block.max_norm + absolute
    return bound if on_device else bound.cpu()


class Pairs:
    """Per-query sets of global reference indices (ground truth, or candidates to exclude), as CSR.

    ``expand(start, stop)`` returns flat ``(rows, cols)`` tensors for queries ``start:stop``, with
    rows local to the chunk and ``cols`` ascending within a row.
    """

    def __init__(self, indptr: torch.Tensor, indices: torch.Tensor, num_query: int) -> None:
        self.indptr = indptr
        self.indices = indices
        self.num_query = num_query

    @classmethod
    def by_code(cls, query_codes: np.ndarray, reference_codes: np.ndarray) -> Pairs:
        """Pairs ``(i, j)`` with equal codes (ids): each query's reference items of its code."""
        groups = _Groups(np.asarray(reference_codes, dtype=np.int64))
        lo, hi = groups.ranges(np.asarray(query_codes, dtype=np.int64))
        _, cols = groups.expand(lo, hi)
        indptr = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
        return cls(torch.from_numpy(indptr), torch.from_numpy(cols), len(lo))

    @classmethod
    def diagonal(cls, n: int) -> Pairs:
        """Query ``i`` paired with reference ``i``."""
        return cls(torch.arange(n + 1, dtype=torch.int64), torch.arange(n), n)

    @classmethod
    def from_lists(cls, lists: Any, num_query: int) -> Pairs:
        """From an ``(n, g)`` array padded with ``-1`` or a list of index lists."""
        if isinstance(lists, np.ndarray) and lists.ndim == 2:
            keep = lists >= 0
            counts = keep.sum(axis=1)
            flat = lists[keep]
        else:
            counts = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
            flat = np.fromiter(
                (v for x in lists for v in x), dtype=np.int64, count=int(counts.sum())
            )
            keep = flat >= 0
            row = np.repeat(np.arange(len(lists)), counts)[keep]
            counts = np.bincount(row, minlength=len(lists))
            flat = flat[keep]
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(torch.from_numpy(indptr), torch.from_numpy(flat.astype(np.int64)), num_query)

    @classmethod
    def union(cls, parts: Sequence[Pairs], num_query: int, num_reference: int) -> Pairs:
        """The union of several pair sets, each pair once, columns ascending within a query."""
        keys = []
        for pairs in parts:
            rows, cols = pairs.expand(0, num_query, torch.device("cpu"))
            keys.append(rows * num_reference + cols)
        key = torch.unique(torch.cat(keys)) if keys else torch.empty(0, dtype=torch.int64)
        rows, cols = key // num_reference, key % num_reference
        indptr = torch.zeros(num_query + 1, dtype=torch.int64)
        indptr[1:] = torch.bincount(rows, minlength=num_query).cumsum(0)
        return cls(indptr, cols, num_query)

    def counts(self) -> torch.Tensor:
        return self.indptr[1:] - self.indptr[:-1]

    def expand(
        self, start: int, stop: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        counts = self.indptr[start + 1 : stop + 1] - self.indptr[start:stop]
        rows = torch.repeat_interleave(torch.arange(stop - start), counts)
        return rows.to(device), self.indices[lo:hi].to(device)


class _Groups:
    """Positions of equal codes, grouped: ``members[starts[g]:starts[g+1]]`` (ascending) hold
    code ``uniq[g]``. O(m) memory whatever the number of classes."""

    def __init__(self, codes: np.ndarray) -> None:
        self.members = np.argsort(codes, kind="stable").astype(np.int64)
        self.uniq, first = np.unique(codes[self.members], return_index=True)
        self.starts = np.append(first, len(codes)).astype(np.int64)

    def ranges(self, query_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query code, the ``[lo, hi)`` range of its group in ``members`` (empty if none)."""
        if not len(self.uniq):
            zero = np.zeros(len(query_codes), dtype=np.int64)
            return zero, zero.copy()
        g = np.searchsorted(self.uniq, query_codes)
        gc = np.minimum(g, len(self.uniq) - 1)
        found = (g < len(self.uniq)) & (self.uniq[gc] == query_codes)
        lo = np.where(found, self.starts[gc], 0)
        hi = np.where(found, self.starts[gc + 1], 0)
        return lo.astype(np.int64), hi.astype(np.int64)

    def expand(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat ``(rows, members)`` of the ranges, members ascending within a row."""
        sizes = hi - lo
        rows = np.repeat(np.arange(len(lo), dtype=np.int64), sizes)
        begin = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        position = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(begin - lo, sizes)
        return rows, self.members[position]


class LabelPositives:
    """Positives by label: reference ``j`` is a positive of query ``i`` when their codes are equal.

    Codes are compared per chunk and block (on the device the chunk runs on); positive pairs are
    never materialised for the whole problem, so memory does not grow with the class sizes.
    ``reference_codes`` are aligned with the blocks' rows (``offset + local``).
    """

    def __init__(self, query_codes: np.ndarray, reference_codes: np.ndarray) -> None:
        self.query_codes = np.ascontiguousarray(query_codes, dtype=np.int64)
        self.reference_codes = np.ascontiguousarray(reference_codes, dtype=np.int64)
        self._groups: dict[tuple[int, int], _Groups] = {}

    def _group(self, offset: int, rows: int) -> _Groups:
        key = (offset, rows)
        if key not in self._groups:
            self._groups[key] = _Groups(self.reference_codes[offset : offset + rows])
        return self._groups[key]

    def counts(self) -> np.ndarray:
        """Reference items with each query's label (before exclusions)."""
        lo, hi = self._group(0, len(self.reference_codes)).ranges(self.query_codes)
        return hi - lo

    def num_relevant(self, exclusions: Pairs | None, block: Block | None = None) -> np.ndarray:
        """Positives per query minus the excluded ones (``block`` maps global columns to
        ``reference_codes`` positions when the reference is a sharded block)."""
        counts = self.counts()
        if exclusions is not None:
            rows, cols = exclusions.expand(0, exclusions.num_query, torch.device("cpu"))
            if block is not None:
                cols, inside = block.locals_of(cols)
                rows, cols = rows[inside], cols[inside]
            rows, cols = rows.numpy(), cols.numpy()
            same = self.reference_codes[cols] == self.query_codes[rows]
            counts = counts - np.bincount(rows[same], minlength=len(counts))
        return counts

    def pair_count(self, block: Block, start: int, stop: int) -> int:
        lo, hi = self._group(block.offset, block.rows).ranges(self.query_codes[start:stop])
        return int((hi - lo).sum())

    def _ranges(
        self, block: Block, start: int, stop: int, excluded: ChunkPairs
    ) -> tuple[np.ndarray, ...]:
        groups = self._group(block.offset, block.rows)
        lo, hi = groups.ranges(self.query_codes[start:stop])
        return (
            self.query_codes[start:stop],
            lo,
            hi,
            groups.members,
            *excluded.csr(block, stop - start),
        )

    def filter_candidates(
        self,
        qf: QueryFilter,
        block: Block,
        start: int,
        stop: int,
        excluded: ChunkPairs,
        eps: torch.Tensor,
    ) -> ChunkPairs:
        """The chunk's non-excluded positives whose filter score (computed for these pairs
        alone) is within ``2 eps`` of the row's best positive's: the only ones whose exact score
        can be the best."""
        rows, local = _kernels.label_best_candidates(
            qf.rows, block.gemm, *self._ranges(block, start, stop, excluded), eps
        )
        return ChunkPairs(rows, block.globals_of(local))

    def kth_filter(
        self,
        qf: QueryFilter,
        block: Block,
        start: int,
        stop: int,
        excluded: ChunkPairs,
        ks: np.ndarray,
    ) -> np.ndarray:
        """Each row's ``ks[i]``-th best filter score among its non-excluded positives
        (``-inf`` when it has fewer)."""
        return _kernels.label_kth(
            qf.rows, block.gemm, *self._ranges(block, start, stop, excluded), ks
        )

    def candidates(
        self, scores: torch.Tensor, eps: torch.Tensor, block: Block, start: int, stop: int
    ) -> ChunkPairs:
        """Positives whose filter score is within ``2 eps`` of the row's best positive's (CPU)."""
        groups = self._group(block.offset, block.rows)
        lo, hi = groups.ranges(self.query_codes[start:stop])
        rows, local = _kernels.positive_window(scores, lo, hi, groups.members, eps)
        return ChunkPairs(rows, block.globals_of(local.to(block.data.device)).cpu())


def chunks(num: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` pairs covering ``range(num)`` in steps of ``size``."""
    for start in range(0, num, size):
        yield start, min(start + size, num)


@dataclass
class ChunkPairs:
    """A chunk's pairs: chunk-local rows and global reference columns."""

    rows: torch.Tensor
    cols: torch.Tensor

    @classmethod
    def of(cls, pairs: Pairs | None, start: int, stop: int, device: torch.device) -> ChunkPairs:
        if pairs is None:
            empty = torch.empty(0, dtype=torch.int64, device=device)
            return cls(empty, empty)
        return cls(*pairs.expand(start, stop, device))

    def csr(self, block: Block, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The pairs in ``block`` as CSR over the chunk's ``rows``, local columns ascending."""
        r, local, _ = self.in_block(block)
        r, local = r.cpu().numpy(), local.cpu().numpy()
        order = np.lexsort((local, r))
        ptr = np.zeros(rows + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(np.bincount(r, minlength=rows))
        return ptr, np.ascontiguousarray(local[order], dtype=np.int64)

    def in_block(self, block: Block) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(rows, local cols, global cols)`` of the pairs that fall in ``block``."""
        local, inside = block.locals_of(self.cols)
        return self.rows[inside], local[inside], self.cols[inside]


def _masked(scores: torch.Tensor, excluded: ChunkPairs, block: Block) -> torch.Tensor:
    rows, local, _ = excluded.in_block(block)
    if rows.numel():
        scores[rows.to(scores.device), local.to(scores.device)] = -torch.inf
    return scores


def merge_best(
    best: torch.Tensor, where: torch.Tensor, score: torch.Tensor, index: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The better of (best, where) and (score, index): higher score, then lower index."""
    better = (score > best) | ((score == best) & (index < where))
    return torch.where(better, score, best), torch.where(better, index, where)


def _without(pairs: ChunkPairs, excluded: ChunkPairs) -> ChunkPairs:
    """``pairs`` minus the ``excluded`` (row, column) pairs."""
    if excluded.rows.numel() == 0 or pairs.rows.numel() == 0:
        return pairs
    rows, cols = pairs.rows.cpu(), pairs.cols.cpu()
    key = (rows * (2**40) + cols).numpy()
    gone = np.sort((excluded.rows.cpu() * (2**40) + excluded.cols.cpu()).numpy())
    found = gone[np.minimum(np.searchsorted(gone, key), len(gone) - 1)] == key
    keep = torch.from_numpy(~found)
    return ChunkPairs(rows[keep], cols[keep])


def _best_exact(
    space: Space, chunk: Rows, positives: ChunkPairs, block: Block, backend: str | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's best of the given positives in this block, by exact score then lower index:
    ``(score, global index)``, ``(-inf, SENTINEL)`` where there is none."""
    rows_in_chunk = chunk.raw.shape[0]
    best = torch.full((rows_in_chunk,), -torch.inf, dtype=torch.float64)
    where = torch.full((rows_in_chunk,), SENTINEL, dtype=torch.int64)
    rows, local, glob = positives.in_block(block)
    if rows.numel() == 0:
        return best, where
    rows, local, glob = rows.cpu(), local.cpu(), glob.cpu()
    exact = _exact(space, chunk, block, rows, local, backend)
    best.scatter_reduce_(0, rows, exact, reduce="amax")
    at_best = exact == best[rows]
    where.scatter_reduce_(0, rows[at_best], glob[at_best], reduce="amin")
    return best, where


def _bounds(
    centre: torch.Tensor, eps: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Filter bounds ``centre -/+ eps`` rounded outwards to ``dtype``; +inf where disabled."""
    lo = (centre - eps).to(dtype)
    hi = (centre + eps).to(dtype)
    lo = torch.nextafter(lo, torch.full_like(lo, -torch.inf))
    hi = torch.nextafter(hi, torch.full_like(hi, torch.inf))
    # Excluded candidates score -inf: a finite lower bound keeps them out of every window.
    lo = lo.clamp(min=torch.finfo(dtype).min)
    off = ~torch.isfinite(centre)
    return torch.where(off, torch.inf, lo), torch.where(off, torch.inf, hi)


Reducer = Callable[[str, torch.Tensor], torch.Tensor]


def _no_reduce(op: str, x: torch.Tensor) -> torch.Tensor:
    return x


Positives = LabelPositives | Pairs


def _own_rows(space: Space, block: Block) -> bool:
    """Leave-one-out on one tensor (cosine or dot): the query's GEMM rows are the block's own."""
    return space.query_is_reference and block is space.single and space.metric != "euclidean"


def _filter(
    space: Space, chunk: Rows, block: Block, start: int, stop: int, scale: float | None = None
) -> QueryFilter:
    """The chunk's filter rows against ``block`` (:func:`query_filter`; ``scale`` as there)."""
    if _own_rows(space, block):
        rows = block.gemm[start:stop]
        if space.metric == "cosine":
            norms = torch.ones(stop - start, dtype=torch.float64, device=rows.device)
        else:
            norms = torch.linalg.vector_norm(rows.to(torch.float64), dim=1)
        return QueryFilter(rows, block.scale, norms, block.low is not None)
    return query_filter(space.metric, chunk, block, block.gemm.dtype, scale)


def _scored(
    space: Space, chunk: Rows, block: Block, excluded: ChunkPairs, start: int, stop: int
) -> tuple[torch.Tensor, QueryFilter]:
    qf = _filter(space, chunk, block, start, stop)
    return _masked(block_scores(space, qf, block), excluded, block), qf


def _one_chunk(space: Space, chunk_size: int | None, state_bytes: int) -> bool:
    """Whether all queries run as one chunk: a leave-one-out problem on one tensor on the CPU's
    tile pass (symmetric: each off-diagonal tile serves both of its sides), when the per-row
    state of the pass (``state_bytes`` per query and worker) fits the memory budget."""
    if chunk_size is not None or space.single is None or not _own_rows(space, space.single):
        return False
    if not (space.device.type == "cpu" and _kernels._use_numba(space.query.raw, None)):
        return False
    workers = torch.get_num_threads()
    return space.num_query * state_bytes * workers <= DEFAULT_MEMORY_BUDGET


def threshold_ranks(
    space: Space,
    chunk: Rows,
    start: int,
    stop: int,
    exclusions: Pairs | None,
    positives: Positives | None = None,
    targets: torch.Tensor | None = None,
    reduce: Reducer = _no_reduce,
    backend: str | None = None,
) -> torch.Tensor:
    """Ranks of threshold items for the query chunk ``chunk`` (global rows ``start:stop``).

    With ``positives`` (label codes or index lists): one slot per query, the best positive
    (``-1`` when there is none). With ``targets`` (``(c, g)`` global indices, ``-1`` padding): one
    slot per target. ``reduce(op, tensor)`` combines partial results across processes
    (``"max"``, ``"min"``, ``"sum"``); identity in one process. Returns a ``(c, g)`` int64 CPU
    tensor.
    """
    if _device.applies(space, backend):
        return _device.threshold_ranks(
            space, chunk, start, stop, exclusions, positives, targets, reduce, backend
        )
    rows = stop - start
    excluded = ChunkPairs.of(exclusions, start, stop, space.device)
    single = space.single is not None
    cached: list[tuple[torch.Tensor, QueryFilter]] = []
    listed = None
    if positives is not None:
        best = torch.full((rows, 1), -torch.inf, dtype=torch.float64)
        where = torch.full((rows, 1), SENTINEL, dtype=torch.int64)
        if isinstance(positives, Pairs):
            listed = ChunkPairs.of(positives, start, stop, torch.device("cpu"))
    else:
        targets = targets.cpu()
        best = torch.full(targets.shape, -torch.inf, dtype=torch.float64)
        where = torch.where(targets >= 0, targets, torch.full_like(targets, SENTINEL))
    # Step 1: each slot's threshold item, its exact score and global index, across blocks.
    for block in space.blocks():
        if positives is None:
            local, inside = block.locals_of(targets.clamp(min=0))
            inside &= targets >= 0
            r, t = inside.nonzero(as_tuple=True)
            best[r, t] = _exact(space, chunk, block, r, local[r, t], backend)
        elif listed is not None or _exact_is_cheaper(positives, block, start, stop):
            # Few positives (fine labels, index lists): score them all exactly.
            pairs = listed
            if listed is None:
                qf = _filter(space, chunk, block, start, stop)
                eps = error_bound(space, qf, block)
                pairs = positives.filter_candidates(qf, block, start, stop, excluded, eps)
            else:
                pairs = _without(pairs, excluded)
            b, w = _best_exact(space, chunk, pairs, block, backend)
            best[:, 0], where[:, 0] = merge_best(best[:, 0], where[:, 0], b, w)
        else:
            # Many positives (coarse labels): the best positive's filter score narrows them down
            # to a few candidates; the scores are kept for step 2 (one block, in memory).
            scores, qf = _scored(space, chunk, block, excluded, start, stop)
            eps = error_bound(space, qf, block)
            cand = positives.candidates(scores, eps, block, start, stop)
            b, w = _best_exact(space, chunk, cand, block, backend)
            best[:, 0], where[:, 0] = merge_best(best[:, 0], where[:, 0], b, w)
            if single:
                cached.append((scores, qf))
    local_best, best = best, reduce("max", best)
    if positives is not None:
        # Among processes holding a positive with the global best score, the lowest index wins.
        keep = (local_best == best) & torch.isfinite(best)
        where = reduce("min", torch.where(keep, where, torch.full_like(where, SENTINEL)))
    # Step 2: count the candidates that rank above each threshold item, across blocks.
    total = torch.zeros(best.shape, dtype=torch.int64)
    for i, block in enumerate(space.blocks()):
        qf = cached[i][1] if cached else _filter(space, chunk, block, start, stop)
        eps = error_bound(space, qf, block)
        centre = best * (qf.scale * block.scale)
        lo, hi = _bounds(centre, eps[:, None], qf.rows.dtype)
        if not cached:
            symmetric = _tiles.is_symmetric(space, qf, block, excluded)
            above, wr, wt, wj = _tiles.window(space, qf, block, excluded, lo, hi, symmetric)
        else:
            above, wr, wt, wj = _kernels.window(cached[i][0], lo, hi, block.rows, backend)
        exact = _exact(space, chunk, block, wr, wj, backend)
        glob = block.globals_of(wj.to(block.data.device)).cpu()
        b, w = best[wr, wt], where[wr, wt]
        beats = (exact > b) | ((exact == b) & (glob < w))
        slot = (wr * best.shape[1] + wt)[beats]
        total += above + torch.bincount(slot, minlength=best.numel()).view(best.shape)
    total = reduce("sum", total)
    return torch.where(torch.isfinite(best), total, torch.full_like(total, -1))


def _exact_is_cheaper(positives: Positives, block: Block, start: int, stop: int) -> bool:
    """Whether scoring the chunk's positives in ``block`` exactly costs less than a GEMM pass."""
    if isinstance(positives, Pairs):
        return True
    return positives.pair_count(block, start, stop) * 16 <= (stop - start) * block.rows


def first_hit_ranks(
    space: Space,
    positives: Positives,
    exclusions: Pairs | None,
    chunk_size: int | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """0-indexed rank of each query's best positive among non-excluded references (-1: none).

    The rank is the number of non-excluded references with a higher exact score, or an equal
    score and a lower index: counted, never sorted.
    """
    size = chunk_rows(space, chunk_size)
    if _device.applies(space, backend):
        return _device.first_hit_ranks(space, positives, exclusions, size, backend)
    state = _tiles.window_state_bytes(1)
    n = space.num_query
    if _one_chunk(space, chunk_size, state) and _exact_is_cheaper(positives, space.single, 0, n):
        size = max(n, 1)
    out = np.empty(space.num_query, dtype=np.int64)
    for start, stop in chunks(space.num_query, size):
        ranks = threshold_ranks(
            space,
            space.chunk(start, stop),
            start,
            stop,
            exclusions,
            positives=positives,
            backend=backend,
        )
        out[start:stop] = ranks[:, 0].numpy()
    return out


def slot_ranks(
    space: Space,
    targets: np.ndarray,
    exclusions: Pairs | None,
    chunk_size: int | None = None,
    backend: str | None = None,
) -> np.ndarray:
    """Rank of every target position ``targets[i, t]`` (``-1`` padding gives ``-1``).

    Other targets of the same query count as candidates like any other item.
    """
    size = chunk_rows(space, chunk_size)
    if _device.applies(space, backend):
        return _device.slot_ranks(space, targets, exclusions, size, backend)
    out = np.empty(targets.shape, dtype=np.int64)
    all_targets = torch.from_numpy(targets)
    for start, stop in chunks(space.num_query, size):
        t = all_targets[start:stop]
        ranks = threshold_ranks(
            space, space.chunk(start, stop), start, stop, exclusions, targets=t, backend=backend
        )
        out[start:stop] = torch.where(t >= 0, ranks, torch.full_like(ranks, -1)).numpy()
    return out


def merge_ranked(
    index: torch.Tensor, score: torch.Tensor, k: int, *payload: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """The exact top-``k`` per row of several ranked lists laid side by side (global indices,
    ``-1`` padding), by higher score then lower index; ``payload`` tensors follow their items.

    Returns ``(index, score, *payload)``, each ``(c, k)``.
    """
    score = torch.where(index >= 0, score, torch.full_like(score, -torch.inf))
    key = torch.where(index >= 0, index, torch.full_like(index, SENTINEL))
    order = torch.sort(key, dim=1, stable=True).indices
    order = order.gather(1, torch.sort(-score.gather(1, order), dim=1, stable=True).indices)
    order = order[:, :k]
    return tuple(t.gather(1, order) for t in (index, score, *payload))


def ranked_chunk(
    space: Space,
    chunk: Rows,
    start: int,
    stop: int,
    ks: torch.Tensor,
    exclusions: Pairs | None,
    backend: str | None = None,
    positives: LabelPositives | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-``ks[i]`` global indices and exact scores of a query chunk, across blocks.

    ``positives`` (optional, one in-memory block, few positives per query) give each row a
    lower bound of its k-th score before the pass (:meth:`LabelPositives.kth_filter`). Returns
    CPU tensors ``(c, max(ks))``: indices (``-1`` padding) and float64 scores.
    """
    if _device.applies(space, backend):
        return _device.ranked_chunk(space, chunk, start, stop, ks, exclusions, backend)
    rows = stop - start
    ks = ks.cpu()
    kmax = int(ks.max()) if rows else 0
    excluded = ChunkPairs.of(exclusions, start, stop, space.device)
    index = torch.full((rows, kmax), -1, dtype=torch.int64)
    value = torch.full((rows, kmax), -torch.inf, dtype=torch.float64)
    for block in space.blocks():
        qf = _filter(space, chunk, block, start, stop)
        eps = error_bound(space, qf, block)
        kb = ks.clamp(max=block.rows)
        # Every item of the exact top-k scores at least the k-th filter score minus 2 eps.
        floor = None
        if block is space.single and positives is not None:
            if _exact_is_cheaper(positives, block, start, stop):
                # At least k positives: the k-th best exact score is at least the k-th best
                # positive's, so no item of the top-k has a filter score below that positive's
                # minus 2 eps.
                kth = positives.kth_filter(qf, block, start, stop, excluded, kb.numpy())
                lo, _ = _bounds(
                    torch.from_numpy(kth - 2.0 * eps.numpy())[:, None],
                    0.0 * eps[:, None],
                    qf.rows.dtype,
                )
                floor = np.where(np.isfinite(kth), lo[:, 0].numpy(), -np.inf)
        symmetric = _tiles.is_symmetric(space, qf, block, excluded)
        wr, wj = _tiles.top(space, qf, block, excluded, kb, eps, symmetric, backend, floor)
        exact = _exact(space, chunk, block, wr, wj, backend)
        glob = block.globals_of(wj.to(block.data.device)).cpu()
        new_index, new_value = _kernels.segment_top(wr, glob, exact, ks, kmax)
        if space.single is not None:
            index, value = new_index, new_value
        else:
            index, value = merge_ranked(
                torch.cat([index, new_index], 1), torch.cat([value, new_value], 1), kmax
            )
    beyond = torch.arange(kmax)[None, :] >= ks[:, None]
    index[beyond], value[beyond] = -1, -torch.inf
    return index, value


def ranked_lists(
    space: Space,
    ks: np.ndarray,
    exclusions: Pairs | None,
    chunk_size: int | None = None,
    backend: str | None = None,
    on_device: bool = False,
    positives: LabelPositives | None = None,
) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """Yield ``(start, stop, indices, scores)``: each query's exact top-``ks[i]``, best first.

    Ties rank the lower reference index first; unused slots hold index ``-1``. Chunks are sized
    so that the lists of one chunk stay within the memory budget. The lists are CPU tensors, or
    with ``on_device`` where the work runs. ``positives`` (label problems) only speed it up.
    """
    kmax = int(ks.max(initial=0))
    size = chunk_rows(space, chunk_size, per_row_bytes=kmax * 40)
    if _device.applies(space, backend):
        yield from _device.ranked_lists(space, ks, exclusions, size, backend, on_device)
        return
    state = _tiles.top_state_bytes(kmax)
    if _one_chunk(space, chunk_size, state + kmax * 40):
        size = max(space.num_query, 1)
    all_ks = torch.from_numpy(ks.astype(np.int64))
    for start, stop in chunks(space.num_query, size):
        chunk = space.chunk(start, stop)
        ks_chunk = all_ks[start:stop]
        index, value = ranked_chunk(
            space, chunk, start, stop, ks_chunk, exclusions, backend, positives
        )
        yield start, stop, index, value
