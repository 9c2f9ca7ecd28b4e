"""The device back end's Triton kernels: one launch per step of a chunk, whatever the dimension.

[`TritonKernels`][TritonKernels] gives
[`recallkit.engine.device.DeviceBackend`][recallkit.engine.device.DeviceBackend] the kernels of
[`recallkit.engine.triton_kernels`][recallkit.engine.triton_kernels]: the exact float64 scores (one
lane per pair, the definition's fixed order, no fused multiply-add), the float32 re-scores of the
cascade, and the fused filter pass of the thresholds (the filter GEMM and the window of every slot
in one launch, the score matrix never written). Its products are ``tl.dot`` with float32
accumulation, so torch's TF32, reduced-precision-reduction and float16-accumulation settings do not
reach them.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
import torch

from recallkit.engine import filters, triton_kernels
from recallkit.engine.device import DeviceBackend, TorchKernels, low_rows
from recallkit.engine.pairs import Exclusions, LabelPositives, Pairs
from recallkit.engine.protocol import ChunkResult, Request
from recallkit.engine.space import Block, Rows, Space, prepare
from recallkit.exceptions import RecallkitWarning, warn
from recallkit.options import Options

#: Set to "triton" (the engine's ``RECALLKIT_BACKEND``), the kernels run unchecked: a test of
#: the kernels themselves.
FORCED = ("RECALLKIT_BACKEND", "triton")


def usable(device: torch.device | None = None) -> bool:
    """Whether the Triton kernels run for tensors on ``device`` (default: CUDA, or the CPU
    under ``TRITON_INTERPRET=1``) and, unless forced (``RECALLKIT_BACKEND=triton``), gave the
    torch back end's answers on the process's first use of ``device``
    ([`probe`][probe]: else one warning, and the torch back end runs there)."""
    if device is None:
        device = torch.device("cpu" if triton_kernels.interpreting() else "cuda")
    if not triton_kernels.available(device):
        return False
    if os.environ.get(FORCED[0], "").strip().lower() == FORCED[1]:
        return True
    return checked(device)


# ----------------------------------------------------------------------------------------------
# The first use on a device: the fused kernels against the torch back end.

_CHECKED: dict[str, bool] = {}
_CHECKING = threading.Lock()


def checked(device: torch.device) -> bool:
    """Whether the fused kernels gave the torch back end's answers on ``device``: the first call
    in a process for each device runs [`probe`][probe]; on a difference, or an error, one
    [`RecallkitWarning`][recallkit.exceptions.RecallkitWarning] names the card and the
    difference, and every later call answers ``False`` (the torch back end runs there)."""
    key = str(device)
    with _CHECKING:
        if key not in _CHECKED:
            difference = probe(device)
            _CHECKED[key] = difference is None
            if difference is not None:
                said = (
                    f"the fused Triton kernels on {card(device)} did not give the torch back "
                    f"end's ranks on a small tie-heavy check ({difference}); this process runs "
                    "the torch back end there (the same exact ranks, slower)"
                )
                warn(RecallkitWarning("recallkit", said))
        return _CHECKED[key]


def card(device: torch.device) -> str:
    """The device in words: ``NVIDIA H100 80GB HBM3 (cuda:0)``, or the CPU under Triton's
    interpreter."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"{torch.cuda.get_device_name(index)} (cuda:{index})"
    return f"{device} (Triton's interpreter)" if device.type == "cpu" else str(device)


def probe_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The check's rows and labels: 40 small-integer rows of dimension 6, every third a
    duplicate of another, so that exact scores tie often; four classes."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(-2, 3, size=(40, 6)).astype(np.float32)
    rows[::3] = rows[rng.integers(0, 40, size=len(rows[::3]))]
    rows[np.abs(rows).sum(axis=1) == 0, 0] = 1.0  # no zero row (cosine)
    return rows, np.arange(40) % 4


def probe(device: torch.device) -> str | None:
    """The fused kernels against the torch back end on ``device``: top-10 lists and first-hit
    ranks (with their tie counts; labels in four classes, and listed positives, which leave the
    rest to the fused filter pass) of the [`probe_data`][probe_data] rows
    against themselves, each row's own left out, under each metric and in chunks of 16
    queries. ``None`` when every
    rank, index and score agrees bit for bit; else the first difference, or the error the
    kernels raised, in words."""
    rows, labels = probe_data()
    n = len(rows)
    partner = np.arange(n) ^ 1
    own = Exclusions.of([Pairs.from_lists(np.arange(n)[:, None], n)], n, n)
    requests = {
        "lists": Request(top_k=np.full(n, 10, dtype=np.int64), exclusions=own),
        "ranks": Request(positives=LabelPositives(labels, labels), exclusions=own),
        # Listed positives (its pair's other row): scored exactly, the rest counted by the
        # fused filter pass.
        "listed ranks": Request(positives=Pairs.from_lists(partner[:, None], n), exclusions=own),
    }
    ours, theirs = DeviceBackend(TritonKernels()), DeviceBackend(TorchKernels())
    # Each metric in float32 (the default filter on CUDA), and cosine in bfloat16 too (the
    # cascade: its float32 re-scores).
    settings = [(m, "float32") for m in ("euclidean", "cosine", "dot")] + [("cosine", "bfloat16")]
    for metric, precision in settings:
        options = Options(metric=metric, device=device, precision=precision).checked("recallkit")
        x = torch.from_numpy(rows)
        space = prepare(x, x, options, "recallkit", query_is_reference=True)
        for what, request in requests.items():
            try:
                got = list(ours.run(space, request, 16))
            except Exception as error:  # any failure of the kernels: the torch back end runs
                text = " ".join(str(error).split())[:200]
                return f"{metric}, {precision}, {what}: {type(error).__name__}: {text}"
            difference = _first_difference(got, list(theirs.run(space, request, 16)))
            if difference is not None:
                return f"{metric}, {precision}, {what}: {difference}"
    return None


FIELDS = ("ranks", "ties_before", "ties", "tied_positives", "top_index", "top_score")


def _first_difference(got: list[ChunkResult], want: list[ChunkResult]) -> str | None:
    if [(c.start, c.stop) for c in got] != [(c.start, c.stop) for c in want]:
        return "different chunks"
    for a, b in zip(got, want, strict=True):
        for name in FIELDS:
            x, y = _host(getattr(a, name)), _host(getattr(b, name))
            if x is None and y is None:
                continue
            if x is None or y is None or x.shape != y.shape:
                return f"{name}: of another shape"
            same = x.view(np.int64) == y.view(np.int64) if x.dtype == np.float64 else x == y
            if not same.all():
                i, j = (int(v) for v in np.argwhere(~same.reshape(len(x), -1))[0])
                x, y = x.reshape(len(x), -1), y.reshape(len(y), -1)
                return f"{name} of query {a.start + i}, place {j}: {x[i, j]!r}, torch {y[i, j]!r}"
    return None


def _host(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    if torch.is_tensor(value):
        value = value.detach().cpu()
        value = value.to(torch.float64) if value.is_floating_point() else value
        return value.numpy()
    return np.asarray(value)


def _own(*tensors: torch.Tensor | None) -> list[torch.Tensor | None]:
    """Under the interpreter, copies of CPU tensors (it re-points its arguments' storage, which
    tensors made from numpy arrays do not allow); the tensors themselves on a GPU."""
    if not triton_kernels.interpreting():
        return list(tensors)
    return [t.clone() if t is not None and t.device.type == "cpu" else t for t in tensors]


class TritonKernels(TorchKernels):
    """[`TorchKernels`][TorchKernels] with the exact scores, the re-scores and the threshold pass as
    Triton kernels."""

    name = "triton"
    fused = True

    def exact(
        self, space: Space, chunk: Rows, block: Block, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        cols = cols.clamp(0, max(block.rows - 1, 0))
        args = _own(
            chunk.raw, chunk.aux(space.metric), block.data, block.aux(space.metric), rows, cols
        )
        return triton_kernels.exact_scores(*args, space.metric)

    def dots(
        self, a: torch.Tensor, b: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor
    ) -> torch.Tensor:
        return triton_kernels.pair_dots(*_own(a, b, rows, cols))

    def window(
        self,
        qf: filters.QueryFilter,
        block: Block,
        low: torch.dtype | None,
        lo: torch.Tensor,
        hi: torch.Tensor,
        capacity: int,
        exclude_codes: tuple[torch.Tensor, torch.Tensor] | None,
        exclude_lists: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(above, window, count)`` of
        [`triton_kernels.filter_window`][triton_kernels.filter_window]."""
        a = qf.rows if low is None else qf.rows.to(low)
        b = block.gemm if low is None else low_rows(block, low)
        a, b, lo, hi, exclude_lists = _own(a, b, lo, hi, exclude_lists)
        if exclude_codes is not None:
            exclude_codes = tuple(_own(*exclude_codes))
        return triton_kernels.filter_window(
            a, b, lo, hi, capacity, exclude_codes=exclude_codes, exclude_lists=exclude_lists
        )

    def window_product(self, qf: filters.QueryFilter, low: torch.dtype | None) -> filters.Product:
        """How [`window`][window]'s ``tl.dot`` computes: IEEE float32 multiplies with float32
        accumulation, or tensor-core products of bfloat16/float16 inputs accumulated in
        float32 (a unit of ``2**-23`` covers truncating accumulators)."""
        if low is None:
            return filters.Product(torch.float32, 2.0**-23)
        return filters.Product(low, 2.0**-23, filters.INPUT_ROUNDING[low])
