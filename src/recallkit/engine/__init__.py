"""The exact ranking engine shared by every metric of recallkit.

Scores are "higher is better": cosine similarity, the inner product (``metric="dot"``), or, for
euclidean, ``2 q·r - |r|²``, which orders candidates exactly as ``-|q - r|²``.

What "exact" means. The decisive score of a pair is defined from the input rows with one fixed
order of operations in float64 ([`recallkit.engine.exact`][recallkit.engine.exact]); every back end
reproduces it bit for bit. A rank is the number of candidates whose exact score is higher, or equal
with a lower reference index ([`recallkit.engine.ties`][recallkit.engine.ties]). So ranks are a
function of the input embeddings alone: the same for every chunk size, block split, shard split,
thread count, BLAS, precision and device.

How it is fast. A GEMM in float32 (float64 for float64 inputs; optionally a lower precision)
gives filter scores with a rigorous error bound
([`recallkit.engine.filters`][recallkit.engine.filters]); only the items within the bound of a
decision are scored exactly. Every statistic is computed in two steps per query: the threshold item
(the best positive, or a given target) with its exact score and global index, then the count of
candidates that rank above it; and ranked lists keep every item the filter cannot rule out of the
top k. Both steps combine across blocks and processes by max/min and sum, which makes streamed and
sharded evaluation exact.

The layers, each importing only those below it:

* shared pieces: [`space`][space] (rows, blocks, the memory budget), [`filters`][filters] (filter
  rows and bounds), [`pairs`][pairs] (positives and exclusions as codes), [`ties`][ties] (the tie
  rule), [`exact`][exact] (the exact score), [`protocol`][protocol] (requests, results, the back-end
  protocol);
* back ends, beside each other: [`cpu`][cpu] (numba tiles), [`device`][device] (torch, for CUDA and
  any device, with the fused kernels of [`triton_kernels`][triton_kernels] where Triton runs), and
  [`matrix`][matrix] (similarity matrices given as exact scores);
* this dispatcher, which picks the back end once per call.

``RECALLKIT_BACKEND`` (``numba``, ``torch``, ``triton``) forces a back end, for tests and
debugging: ``torch`` runs the device path on CPU tensors (what CUDA runs), ``triton`` its fused
kernels (on the CPU under ``TRITON_INTERPRET=1``).

The first call. numba compiles the CPU back end's kernels on their first use and caches them
([`jit`][jit]): seconds for a first recall@K, more for ranked lists; a process that finds them in
the cache still pays numba's start (0.3 s, a second under load) when it loads the first. While the
kernels a call on CPU tensors needs are not loaded in the process, [`run`][run] weighs what numba
would cost before its first tile (the compile seconds of the kernels its cache lacks and numba's
start, measured: [`recallkit.engine.cpu.first_compile`][recallkit.engine.cpu.first_compile]) against
what the torch back end, which needs neither, takes for the call, measured on this machine at run
time: it runs the call's first queries there (about [`PROBE_PAIRS`][PROBE_PAIRS] query-reference
pairs, or the whole call when that is not much more) and extrapolates to the rest. While the torch
seconds this process has spent so far, plus this call's, stay within numba's cost, the call runs on
torch (the same ranks, bit for bit). Once they would pass it, the process goes to numba, compiling
what the cache lacks (one line on stderr says so): this call from its first query (unless the probe
was all of it), and every later call (rent until the rent would reach the price, then buy). A small
call stays on torch; a large one, or a long run of small ones, goes to numba.
``RECALLKIT_COLD_START=compile`` goes to numba at once (the test suite sets it: each test runs the
back end it names, cold cache or not); so do a reference streamed block by block, a sharded call and
the low precisions (``int8``, ``bfloat16``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import numpy as np
import torch

from recallkit.engine import exact, filters, jit
from recallkit.engine.pairs import (
    ChunkExclusions,
    Exclusions,
    Groups,
    LabelPositives,
    Pairs,
)
from recallkit.engine.protocol import Backend, ChunkResult, Reducer, Request
from recallkit.engine.space import (
    PRECISIONS,
    Block,
    Rows,
    Space,
    chunk_rows,
    chunks,
    is_streamed,
    make_block,
    memory_budget,
    prepare,
    prepare_rows,
    shard,
    work_dtype,
)
from recallkit.exceptions import RecallkitError, Text

BACKEND_VARIABLE = "RECALLKIT_BACKEND"
BACKENDS = ("numba", "torch", "triton")
COLD_START_VARIABLE = jit.COLD_START_VARIABLE
#: While numba's kernels are not compiled, the torch back end times a call's first queries on
#: about this many query-reference pairs before the rest (the whole call up to twice as many).
PROBE_PAIRS = 1 << 20
#: The oldest torch the engine runs on: ``torch.mm(..., out_dtype=)`` (the float32 accumulation
#: of the low-precision filter on CUDA) arrived in 2.8, ``nonzero_static`` on CUDA before it.
MIN_TORCH = (2, 8)


def check_torch(version: str | None = None) -> None:
    """Raise ``ImportError`` if torch (``version``, default the installed one) is older than
    [`MIN_TORCH`][MIN_TORCH]."""
    text = torch.__version__ if version is None else version
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    if tuple(parts) < MIN_TORCH:
        floor = ".".join(map(str, MIN_TORCH))
        raise ImportError(
            f"recallkit needs torch >= {floor} (torch.mm with out_dtype, CUDA nonzero_static); "
            f"found torch {text}. Upgrade it: pip install 'torch>={floor}'."
        )


check_torch()

__all__ = [
    "BACKENDS",
    "COLD_START_VARIABLE",
    "PRECISIONS",
    "Backend",
    "Block",
    "ChunkExclusions",
    "ChunkResult",
    "Exclusions",
    "Groups",
    "LabelPositives",
    "Pairs",
    "Reducer",
    "Request",
    "Rows",
    "Space",
    "backend_for",
    "chunk_rows",
    "chunks",
    "is_streamed",
    "make_block",
    "memory_budget",
    "prepare",
    "prepare_rows",
    "run",
    "run_chunk",
    "shard",
    "work_dtype",
]


def forced_backend() -> str | None:
    """The back end named by ``RECALLKIT_BACKEND``, or ``None``."""
    name = os.environ.get(BACKEND_VARIABLE, "").strip().lower()
    if not name:
        return None
    if name not in BACKENDS:
        raise ValueError(
            f"The {BACKEND_VARIABLE} environment variable must be one of {BACKENDS}. Got {name!r}."
        )
    return name


def backend_for(space: Space) -> Backend:
    """The back end that runs requests on ``space``: numba tiles for CPU tensors; on another
    device the fused Triton kernels where Triton runs, else torch; or the one forced by
    ``RECALLKIT_BACKEND``."""
    name = forced_backend()
    if name is None:
        name = "numba" if space.device.type == "cpu" else "triton"
    if name == "numba":
        if space.options.precision == "float16":  # whatever the inputs' type: said, not ignored
            raise RecallkitError(
                Text(
                    "{f16} filters on CUDA (and the torch back end); on the CPU use {auto}, "
                    "{f32}, {bf16} or {i8}",
                    f16=("precision", "float16"),
                    auto=("precision", "auto"),
                    f32=("precision", "float32"),
                    bf16=("precision", "bfloat16"),
                    i8=("precision", "int8"),
                )
            )
        if space.device.type != "cpu":
            raise RecallkitError(
                Text(
                    f"The numba back end runs on the CPU only; the work runs on {space.device}. "
                    f"Unset {BACKEND_VARIABLE} or pass {{cpu}}.",
                    cpu=("device", "cpu"),
                )
            )
        from recallkit.engine import cpu

        return cpu.BACKEND
    return _device_backend(name, space.device)


_DEVICE_BACKENDS: dict[str, Backend] = {}


def _device_backend(name: str, where: torch.device) -> Backend:
    """The torch back end, with the Triton kernels where they run (``name`` "triton", the
    default on CUDA; an error when forced and Triton cannot run)."""
    from recallkit.engine import device

    if name == "triton":
        from recallkit.engine import triton_backend

        if not triton_backend.usable(where):
            if forced_backend() == "triton":
                raise ValueError(
                    f"{BACKEND_VARIABLE}=triton, but Triton cannot run on {where} here (on the "
                    "CPU it runs under TRITON_INTERPRET=1; on CUDA it needs triton installed "
                    "and TRITON_INTERPRET unset)."
                )
            name = "torch"
    if name not in _DEVICE_BACKENDS:
        if name == "triton":
            from recallkit.engine import triton_backend

            _DEVICE_BACKENDS[name] = device.DeviceBackend(triton_backend.TritonKernels())
        else:
            _DEVICE_BACKENDS[name] = device.DeviceBackend(device.TorchKernels())
    return _DEVICE_BACKENDS[name]


def run(space: Space, request: Request, chunk_size: int | None = None) -> Iterator[ChunkResult]:
    """Every chunk of the request's answer, in query order ([`protocol`][protocol]); chunks of
    ``chunk_size`` queries, default the space's ``options.chunk_size`` (else sized from the
    memory budget). On CPU tensors, while the kernels the request needs are not compiled or not
    loaded, the torch back end may answer instead (module docstring)."""
    if chunk_size is None and space.options is not None:
        chunk_size = space.options.chunk_size
    backend = backend_for(space)
    if backend.name == "numba":
        wait = _may_wait(space)  # checks RECALLKIT_COLD_START on every call
        cost = _numba_cost(request, space)
        if cost and wait:
            yield from _cold(space, request, chunk_size, cost)
            return
        _start_numba(space)
    yield from backend.run(space, request, chunk_size)


def filter_scores(space: Space, rows: np.ndarray) -> torch.Tensor:
    """The filter scores of queries ``rows`` (int64) against the space's one block
    (``space.single``), ``(len(rows), num_reference)`` in the filter's type: each row a positive
    multiple of the row's exact scores, within the filter's bound of it. An estimate of the
    order, for a choice of path (never a rank); no pair is skipped."""
    block = space.single
    chunk = space.query[torch.from_numpy(rows).to(space.device)]
    qf = filters.query_filter(
        chunk.raw, chunk.sq, chunk.norm, space.metric, block.scale, block.gemm.dtype, True
    )
    scores = (block.gemm @ qf.rows.T).T  # the tall product: half the time of the wide one
    return space.sampled_scores(rows, scores).clone()  # kept for the pass's own sample


def exact_rows(space: Space, rows: np.ndarray) -> torch.Tensor:
    """The exact scores (float64, [`exact`][recallkit.engine.exact]'s definition) of queries
    ``rows`` (int64) against every item of the space's one block (``space.single``),
    ``(len(rows), num_reference)``, no pair skipped: numba's kernel where this process runs
    numba, else torch's (the same bits)."""
    block = space.single
    device = space.device
    chunk = space.query[torch.from_numpy(rows).to(device)]
    r = torch.arange(len(rows), device=device).repeat_interleave(block.rows)
    c = torch.arange(block.rows, device=device).repeat(len(rows))
    metric = space.metric
    args = (chunk.raw, chunk.aux(metric), block.data, block.aux(metric), r, c, metric)
    numba = device.type == "cpu" and forced_backend() in (None, "numba") and jit.allowed()
    scores = exact.exact_numba(*args) if numba else exact.exact_torch(*args)
    return scores.view(len(rows), block.rows)


def run_chunk(
    space: Space, chunk: Rows, request: Request, reducer: Reducer | None = None
) -> ChunkResult:
    """One chunk of query rows against this process's reference, thresholds reduced across
    processes by ``reducer`` (sharded evaluation)."""
    backend = backend_for(space)
    if backend.name == "numba":
        _numba_cost(request, space)
        _start_numba(space)
    return backend.run_chunk(space, chunk, request, reducer)


_paid_lock = threading.Lock()
_paid = 0.0  # seconds this process spent on the torch back end while numba was cold


def _numba_cost(request: Request, space: Space) -> float:
    """What running the request on numba costs before its first tile, measured
    ([`recallkit.engine.cpu.first_compile`][recallkit.engine.cpu.first_compile]): the compile
    seconds of the kernels it needs and numba's cache lacks, and numba's start when no kernel is
    loaded in this process yet (0 when all are loaded). The compile seconds also go to
    [`jit.expect`][jit.expect], for the line a compile prints."""
    from recallkit.engine import cpu

    groups = cpu.first_compile(request, space)
    missing = sum(seconds for kernel, seconds in groups if not jit.cached(kernel))
    jit.expect(missing or sum(seconds for _, seconds in groups))
    started = any(jit.loaded(kernel) for kernel, _ in groups)
    return missing + (0.0 if started else cpu.START_SECONDS)


def _start_numba(space: Space) -> None:
    """The process runs numba from this call on ([`jit.allow`][jit.allow]). The first such call's
    rows were prepared by torch operations ([`jit.usable`][jit.usable]): their kernels are compiled
    or loaded now, on a row of each side, so that this call compiles what the next ones need."""
    if jit.allowed():
        return
    jit.allow()
    sides = [rows for rows in (space.query.raw, _block_rows(space)) if rows is not None]
    for raw in {rows.dtype: rows for rows in sides}.values():
        if raw.shape[0] and raw.shape[1]:
            one = raw[:1]
            exact.row_sq_norms(one)
            filters.largest_norm(one)
            if space.metric != "euclidean":  # whose filter rows are torch operations
                factor = torch.ones(1, dtype=torch.float64)
                filters.filter_rows(one, factor, True, space.filter_dtype, True)


def _block_rows(space: Space) -> torch.Tensor | None:
    return space.single.data if space.single is not None else None


def _may_wait(space: Space) -> bool:
    """Whether a call may run on torch while numba is cold: ``RECALLKIT_COLD_START`` and
    ``RECALLKIT_BACKEND`` unset (or ``auto``), no call of the process on numba yet
    ([`jit.allowed`][jit.allowed]), the reference in memory, and a precision that the torch back end
    runs on the CPU as the numba one does."""
    if jit.cold_start() != "auto" or forced_backend() is not None or jit.allowed():
        return False
    return space.single is not None and space.options.precision in ("auto", "float32")


def _cold(
    space: Space, request: Request, chunk_size: int | None, cost: float
) -> Iterator[ChunkResult]:
    """The call while numba is cold: on torch, or on numba from its first query if the torch
    seconds would pass ``cost`` (module docstring)."""
    global _paid
    from recallkit.engine import cpu

    torch_backend = _device_backend("torch", space.device)
    n, m = space.num_query, max(space.num_reference, 1)
    probe = n if n * m <= 2 * PROBE_PAIRS else max(1, min(n, PROBE_PAIRS // m))
    start = time.perf_counter()
    first = list(torch_backend.run(space, request, chunk_size, (0, probe)))
    took = time.perf_counter() - start
    rest = took * (n - probe) / probe if probe < n else 0.0
    with _paid_lock:
        paid = _paid
        _paid += took
    if paid + took + rest <= cost:  # torch costs less
        yield from first
        if probe < n:
            start = time.perf_counter()
            later = list(torch_backend.run(space, request, chunk_size, (probe, n)))
            with _paid_lock:
                _paid += time.perf_counter() - start
            yield from later
    elif probe == n:  # numba costs less from here on; this call is done
        jit.allow()
        yield from first
    else:  # numba costs less from here on, this call's rest included: from its first query
        _start_numba(space)
        yield from cpu.BACKEND.run(space, request, chunk_size)
