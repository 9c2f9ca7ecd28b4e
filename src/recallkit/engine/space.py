"""The search space: prepared query rows and a reference held as blocks, and the memory budget.

Queries are processed in chunks of rows, references in blocks (one block when the reference is
in memory; several when it is streamed from disk or too wide for the budget; one block of this
process's rows when it is sharded across processes). Each (chunk, block) pair is one filter
GEMM: the full n×m matrix is never built.

Rows are validated once here: finite, of one dimension, magnitudes the exact float64 score can
hold, and (cosine) not zero.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from recallkit._inputs import checks as _checks
from recallkit.engine import exact, filters
from recallkit.exceptions import Text
from recallkit.options import DEFAULT_MEMORY_BUDGET, Options, parse_bytes

MIN_CHUNK_ROWS = 64
MAX_CHUNK_ROWS = 4096
# Float64 inputs beyond this magnitude could overflow the exact float64 dot products.
FLOAT64_LIMIT = 2.0**400
GPU_MEMORY_VARIABLE = "RECALLKIT_GPU_MEMORY"
# Bytes per filter score that a chunk's masks and temporaries take on the device back end,
# besides the score.
DEVICE_BYTES_PER_SCORE = 8
# Fixed window capacities of the device back end: at least this many pairs per window, and a
# ranked list's top-k width beyond k, at least (learned per call above them).
MIN_CAPACITY = 256
TOP_EXTRA = 32
PRECISIONS = ("auto", "float32", "bfloat16", "float16", "int8")


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
        sq = exact.row_sq_norms(raw)
        return cls(raw, sq, exact.row_norms(sq))

    def __getitem__(self, rows: slice) -> Rows:
        return Rows(self.raw[rows], self.sq[rows], self.norm[rows])

    def aux(self, metric: str) -> torch.Tensor:
        """What the exact score needs besides the rows: norms (cosine) or ``|x|²``."""
        return self.norm if metric == "cosine" else self.sq


def prepare_rows(
    x: torch.Tensor, name: str, func: str, metric: str, device: torch.device, offset: int = 0
) -> Rows:
    """Validate embedding rows: upcast, reject non-finite, huge (dot, euclidean) and (cosine)
    zero rows; under cosine, rows of extreme magnitude are rescaled
    ([`exact.cosine_rows`][exact.cosine_rows])."""
    raw = x.to(device=device, dtype=work_dtype(x.dtype)).contiguous()
    if raw.dtype != torch.float32:  # float32 rows: from their squared norms, below
        _checks.check_finite_rows(raw, offset, name, func)
    if metric == "cosine":
        raw = exact.cosine_rows(raw)
    elif raw.dtype == torch.float64 and raw.numel():
        big = raw.abs().amax(dim=1) > FLOAT64_LIMIT
        if bool(big.any()):
            row = int(torch.nonzero(big)[0, 0]) + offset
            raise _checks.fail(
                func,
                name,
                Text(
                    f"of magnitude at most 2**400 under the {metric!r} metric (exact float64 "
                    "scores would overflow; {cos} accepts any magnitude)",
                    cos=("metric", "cosine"),
                ),
                f"a larger value in row {row}",
            )
    rows = Rows.of(raw)
    if raw.dtype == torch.float32:
        _checks.check_finite_squares(rows.sq, offset, name, func)
    if metric == "cosine":
        _checks.check_zero_rows(rows.sq, offset, name, func)
    return rows


@dataclass
class Block:
    """Prepared reference rows ``offset..offset+rows``, or the rows at ``global_index``.

    ``data``, ``sq`` and ``norm`` are the rows and what their exact scores need; ``gemm`` is what
    the filter GEMM multiplies ([`filters.reference_filter`][filters.reference_filter]), ``scale``
    its power-of-two scale and ``max_norm`` the largest norm of its rows (the error bound).
    ``cache`` holds what a back end derives from the block (a low-precision copy, device tensors).
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
    cache: dict = field(default_factory=dict)

    def aux(self, metric: str) -> torch.Tensor:
        return self.norm if metric == "cosine" else self.sq

    def view(self, start: int, stop: int) -> Block:
        """Rows ``start:stop`` of this in-memory block, as a block of their own."""
        return Block(
            self.offset + start,
            stop - start,
            self.data[start:stop],
            self.sq[start:stop],
            self.norm[start:stop],
            self.gemm[start:stop],
            self.scale,
            self.max_norm,
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
) -> Block:
    """A reference block: validated rows, their norms and the filter rows in ``dtype``."""
    rows = x if isinstance(x, Rows) else prepare_rows(x, name, func, metric, device, offset)
    gemm, scale, max_norm = filters.reference_filter(rows.raw, rows.sq, rows.norm, metric, dtype)
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
    )


@dataclass
class Space:
    """Prepared queries and a reference: in memory (one block) or streamed block by block
    (``streamed`` is then what the blocks are read from: a pinned file, never a mapping)."""

    query: Rows
    metric: str
    num_reference: int
    dim: int
    device: torch.device
    block_source: Callable[[], Iterator[Block]]
    single: Block | None = None
    block_rows: int = 0
    filter_dtype: torch.dtype = torch.float32
    query_is_reference: bool = False
    extra: dict = field(default_factory=dict)
    options: Options = field(default_factory=Options)
    streamed: Any = None

    @property
    def num_query(self) -> int:
        return self.query.raw.shape[0]

    def chunk(self, start: int, stop: int) -> Rows:
        return self.query[start:stop]

    def sampled_scores(self, rows: np.ndarray, scores: Any = None) -> Any:
        """The filter scores of a sample of queries ``rows`` against the one block, kept for
        the call's next choice of path on the same sample (the first-hit ranks' and the top-k
        floors' samples are alike where every query has a list): with ``scores``, keeps them;
        without, those kept for these rows (``None`` if another sample's)."""
        if scores is not None:
            self.extra["sampled_scores"] = (np.array(rows, dtype=np.int64), scores)
            return scores
        kept = self.extra.get("sampled_scores")
        return kept[1] if kept is not None and np.array_equal(kept[0], rows) else None

    def subset(self, rows: np.ndarray) -> Space:
        """The space of queries ``rows`` (an int64 array) against the same reference."""
        index = torch.from_numpy(rows).to(self.query.raw.device)
        query = Rows(self.query.raw[index], self.query.sq[index], self.query.norm[index])
        return replace(self, query=query, query_is_reference=False, extra={})

    def blocks(self) -> Iterator[Block]:
        if self.single is not None:
            yield self.single
        else:
            yield from self.block_source()

    def own_rows(self, block: Block) -> bool:
        """Leave-one-out on one tensor (cosine or dot): the queries' filter rows are the
        block's own."""
        return self.query_is_reference and block is self.single and self.metric != "euclidean"


def is_streamed(x: Any) -> bool:
    """Whether ``x`` is a reference read block by block (a numpy memory map, an
    ``recallkit._inputs.io.EmbeddingFile``)."""
    return isinstance(x, np.memmap) or getattr(x, "is_streamed_embeddings", False)


def filter_dtype(*dtypes: torch.dtype) -> torch.dtype:
    return torch.float64 if torch.float64 in dtypes else torch.float32


def _streamed_dtype(reference: Any, func: str) -> torch.dtype:
    dtype = np.dtype(getattr(reference, "dtype", np.float32))
    if dtype.kind not in "fiu":
        raise _checks.fail(func, "reference", "real-valued (float or integer)", f"dtype {dtype}")
    return work_dtype(dtype)


def prepare(
    query: Any,
    reference: Any,
    options: Any,
    func: str,
    reference_block_rows: int | None = None,
    query_is_reference: bool | None = None,
) -> Space:
    """Validate and prepare embeddings under ``options`` (a
    [`recallkit.Options`][recallkit.options.Options]: the engine reads ``metric`` and ``device``
    here, the others from the space when it runs).

    Rows are kept as float32 (float16/bfloat16 inputs are upcast) or float64 (float64 and
    integer inputs); exact scores are float64 either way, and a float64 side (in memory or
    streamed) makes the filter GEMM float64 too. A memory-mapped numpy reference
    (``np.load(path, mmap_mode="r")``) or a ``recallkit._inputs.io.EmbeddingFile`` is streamed
    in
    blocks, never loaded whole; a memory map is pinned first
    ([`recallkit._inputs.io.pin`][recallkit._inputs.io.pin]), its blocks read from its file, never
    through the mapping. Queries are loaded whole (a memory map through one checked descriptor:
    [`recallkit._inputs.checks.as_embeddings`][recallkit._inputs.checks.as_embeddings]; the
    reference's own when it maps the same file). ``query_is_reference`` (default: ``query is
    reference``) says that the queries are the reference rows themselves, prepared once.
    """
    metric, device = options.metric, options.device
    _checks.check_metric(metric, func)
    if query_is_reference is None:
        query_is_reference = query is reference
    streamed = is_streamed(reference) or reference_block_rows is not None
    if isinstance(reference, np.memmap):
        from recallkit._inputs.io import pin, read_through

        # Read from the file it maps, through one checked descriptor (never the mapping); a
        # query that maps the same file (leave-one-out) is read through the same descriptor.
        reference = pin(reference, func)
        query = read_through(reference, query)
    q = _checks.as_embeddings(query, "query", func)
    if streamed:
        shape = tuple(reference.shape)
        if len(shape) != 2 or shape[0] == 0:
            raise _checks.fail(func, "reference", "a non-empty 2-D array", f"shape {shape}")
        m, d = shape
        r_dtype = _streamed_dtype(reference, func)
    else:
        r = q if query_is_reference else _checks.as_embeddings(reference, "reference", func)
        m, d = r.shape
        r_dtype = work_dtype(r.dtype)
    if q.shape[1] != d:
        raise _checks.fail(
            func, "reference", f"of the query's dimension {q.shape[1]}", f"dimension {d}"
        )
    dev = _checks.check_device(device, func) if device is not None else q.device
    fdtype = filter_dtype(work_dtype(q.dtype), r_dtype)
    common = dict(filter_dtype=fdtype, options=options)
    if not streamed:
        r_rows = prepare_rows(r, "reference", func, metric, dev)
        block = make_block(r_rows, 0, func, metric, dev, fdtype)
        q_rows = r_rows if query_is_reference else prepare_rows(q, "query", func, metric, dev)
        common["query_is_reference"] = query_is_reference
        if dev.type != "cpu" or m * 4 * 256 <= memory_budget(options, dev):
            return Space(q_rows, metric, m, d, dev, lambda: iter(()), single=block, **common)
        # A reference too wide for chunks of 256 query rows within the budget is scored in
        # blocks (views of the prepared tensors): large GEMMs, bounded score buffers.
        rows = _streamed_block_rows(m, d, q.shape[0], memory_budget(options, dev))

        def views() -> Iterator[Block]:
            for start, stop in chunks(m, rows):
                yield block.view(start, stop)

        return Space(q_rows, metric, m, d, dev, views, block_rows=rows, **common)
    q_rows = prepare_rows(q, "query", func, metric, dev)
    rows = reference_block_rows or _streamed_block_rows(
        m, d, q.shape[0], memory_budget(options, dev)
    )

    def source() -> Iterator[Block]:
        for start, stop in chunks(m, rows):
            part = _checks.real_array(np.array(reference[start:stop]), "reference", func)
            _checks.check_block_shape(part, stop - start, d, "reference", func)
            raw = torch.from_numpy(part)  # a writable copy
            yield make_block(raw, start, func, metric, dev, fdtype)

    return Space(q_rows, metric, m, d, dev, source, block_rows=rows, streamed=reference, **common)


def shard(
    queries: torch.Tensor,
    reference: torch.Tensor,
    global_index: torch.Tensor,
    options: Any,
    func: str,
    device: torch.device,
) -> Space:
    """This process's part of a sharded problem: its reference rows (``global_index`` their
    dataset indices, ascending) as one block, and no queries of its own (each chunk of queries
    is broadcast by its owner and run with
    [`recallkit.engine.run_chunk`][recallkit.engine.run_chunk]). ``queries`` gives the query rows'
    dtype."""
    fdtype = filter_dtype(work_dtype(queries.dtype), work_dtype(reference.dtype))
    block = make_block(
        reference, 0, func, options.metric, device, fdtype, global_index=global_index.to(device)
    )
    empty = prepare_rows(queries[:0], "embeddings", func, options.metric, device)
    return Space(
        empty,
        options.metric,
        int(reference.shape[0]),
        int(reference.shape[1]),
        device,
        lambda: iter(()),
        single=block,
        filter_dtype=fdtype,
        options=options,
    )


def _streamed_block_rows(m: int, d: int, n: int, budget: int) -> int:
    per_row = d * 8 * 2 + min(n, MAX_CHUNK_ROWS) * 6
    return int(min(m, max(MIN_CHUNK_ROWS, budget // per_row)))


def memory_budget(options: Options | None, device: torch.device) -> int:
    """Bytes a query chunk's working memory may take on ``device``: the one place the engine
    reads the budget.

    The ``memory_budget`` option when it is set. Else on the CPU 256 MiB
    (``DEFAULT_MEMORY_BUDGET``); on another device the ``RECALLKIT_GPU_MEMORY`` environment
    variable when it is set (whole bytes, or with a unit: ``512MiB``, ``8GiB`` in powers of 1024,
    ``500MB``, ``8GB`` in powers of 1000), else a quarter of the free memory of a CUDA device at
    the call, and at least 256 MiB.
    """
    chosen = None if options is None else options.memory_budget
    if chosen is not None:
        return int(chosen)
    if device.type == "cpu":
        return DEFAULT_MEMORY_BUDGET
    text = os.environ.get(GPU_MEMORY_VARIABLE, "").strip()
    if text:
        value = parse_bytes(text)
        if value is None:
            raise ValueError(
                f"The {GPU_MEMORY_VARIABLE} environment variable must be a positive number of "
                f"bytes, or one with a unit (512MiB, 8GiB: powers of 1024; 500MB, 8GB: powers of "
                f"1000). Got {text!r}."
            )
        return value
    if device.type == "cuda":
        return max(DEFAULT_MEMORY_BUDGET, torch.cuda.mem_get_info(device)[0] // 4)
    return DEFAULT_MEMORY_BUDGET


def chunk_rows(
    space: Space, chunk_size: int | None, per_row_bytes: int = 0, score_bytes: int = 0
) -> int:
    """Rows per query chunk: ``chunk_size`` if given, else sized from
    [`memory_budget`][memory_budget].

    A chunk of ``c`` rows against ``m`` reference columns (or a block of them) holds about
    ``c · (m · (e + x) + per_row_bytes + 16 d)`` bytes: filter scores of ``e`` bytes (4, or 8
    for float64), ``x = score_bytes`` bytes per score of masks and temporaries (the device back
    end's, ``DEVICE_BYTES_PER_SCORE``, on whatever device it runs; none for the CPU tiles),
    ``per_row_bytes`` for per-row state (ranked lists, targets, the CPU workers' tile states)
    and the rows themselves. ``c`` is the most that fits the budget (with masks, with fewer
    than 2**31 scores), rounded down to a multiple of 64, at most 4096; below 64 rows (ranked
    lists of tens of thousands of items per row) the most that fit, at least one.
    """
    if chunk_size is not None:
        return chunk_size
    columns = space.single.rows if space.single is not None else space.block_rows
    element = 8 if space.filter_dtype == torch.float64 else 4
    per_row = columns * (element + score_bytes) + per_row_bytes + space.dim * 16
    rows = memory_budget(space.options, space.device) // max(per_row, 1)
    if score_bytes:
        # A chunk's masks stay below 2**31 elements, the limit of torch's index kernels.
        rows = min(rows, (2**31 - 1) // max(columns, 1))
    if rows < MIN_CHUNK_ROWS:  # wide per-row state: fewer rows, never beyond the budget
        return int(max(1, rows))
    return int(min(MAX_CHUNK_ROWS, rows // MIN_CHUNK_ROWS * MIN_CHUNK_ROWS))


def chunks(num: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` pairs covering ``range(num)`` in steps of ``size``."""
    for start in range(0, num, size):
        yield start, min(start + size, num)
