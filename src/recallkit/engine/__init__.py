"""The exact ranking engine shared by every metric of recallkit.

Scores are "higher is better": cosine similarity, the inner product (``metric="dot"``), or, for
euclidean, ``2 q·r - |r|²``, which orders candidates exactly as ``-|q - r|²``.

What "exact" means. The decisive score of a pair is defined from the input rows with one fixed
order of operations in float64 (:mod:`recallkit.engine.exact`); every back end reproduces it bit
for bit. A rank is the number of candidates whose exact score is higher, or equal with a lower
reference index (:mod:`recallkit.engine.ties`). So ranks are a function of the input embeddings
alone: the same for every chunk size, block split, shard split, thread count, BLAS, precision
and device.

How it is fast. A GEMM in float32 (float64 for float64 inputs; optionally a lower precision)
gives filter scores with a rigorous error bound (:mod:`recallkit.engine.filters`); only the items
within the bound of a decision are scored exactly. Every statistic is computed in two steps per
query: the threshold item (the best positive, or a given target) with its exact score and
global index, then the count of candidates that rank above it; and ranked lists keep every item
the filter cannot rule out of the top k. Both steps combine across blocks and processes by
max/min and sum, which makes streamed and sharded evaluation exact.

The layers, each importing only those below it:

* shared pieces: :mod:`.space` (rows, blocks, the memory budget), :mod:`.filters` (filter rows
  and bounds), :mod:`.pairs` (positives and exclusions as codes), :mod:`.ties` (the tie rule),
  :mod:`.exact` (the exact score), :mod:`.protocol` (requests, results, the back-end protocol);
* back ends, beside each other: :mod:`.cpu` (numba tiles), :mod:`.device` (torch, for CUDA and
  any device, with the fused kernels of :mod:`.triton_kernels` where Triton runs), and
  :mod:`.matrix` (similarity matrices given as exact scores);
* this dispatcher, which picks the back end once per call.

``RECALLKIT_BACKEND`` (``numba``, ``torch``, ``triton``) forces a back end, for tests and
debugging: ``torch`` runs the device path on CPU tensors (what CUDA runs), ``triton`` its fused
kernels (on the CPU under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import torch

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
#: The oldest torch the engine runs on: ``torch.mm(..., out_dtype=)`` (the float32 accumulation
#: of the low-precision filter on CUDA) arrived in 2.8, ``nonzero_static`` on CUDA before it.
MIN_TORCH = (2, 8)


def check_torch(version: str | None = None) -> None:
    """Raise ``ImportError`` if torch (``version``, default the installed one) is older than
    :data:`MIN_TORCH`."""
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
    """Every chunk of the request's answer, in query order (:mod:`.protocol`); chunks of
    ``chunk_size`` queries, default the space's ``options.chunk_size`` (else sized from the
    memory budget)."""
    if chunk_size is None and space.options is not None:
        chunk_size = space.options.chunk_size
    yield from backend_for(space).run(space, request, chunk_size)


def run_chunk(
    space: Space, chunk: Rows, request: Request, reducer: Reducer | None = None
) -> ChunkResult:
    """One chunk of query rows against this process's reference, thresholds reduced across
    processes by ``reducer`` (sharded evaluation)."""
    return backend_for(space).run_chunk(space, chunk, request, reducer)
