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

import torch

from recallkit.engine import filters, triton_kernels
from recallkit.engine.device import TorchKernels, low_rows
from recallkit.engine.space import Block, Rows, Space


def usable(device: torch.device | None = None) -> bool:
    """Whether the Triton kernels run for tensors on ``device`` (default: CUDA, or the CPU
    under ``TRITON_INTERPRET=1``)."""
    if device is None:
        device = torch.device("cpu" if triton_kernels.interpreting() else "cuda")
    return triton_kernels.available(device)


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
