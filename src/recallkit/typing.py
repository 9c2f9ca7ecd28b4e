"""The types of recallkit's public signatures, by name: what each argument may be.

Functions take arrays in whatever form a pipeline holds them: numpy arrays (memory maps are
read from their file block by block, never loaded whole), torch tensors on any device, nested
Python sequences, and recallkit's own ``recallkit._inputs.io.EmbeddingFile``. Labels and ids
are
compared by value and never cast to float: integers of any size, strings, bytes or tuples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Hashable, Sequence

    import numpy.typing as npt
    import torch

    from recallkit._inputs.io import EmbeddingFile

__all__ = ["Embeddings", "Ids", "Labels", "Ranks", "Scores"]

#: Embeddings, one row per item, shape ``(n, d)``: a numpy array or memory map, a torch tensor
#: on any device, a ``recallkit._inputs.io.EmbeddingFile``, or nested sequences of numbers.
Embeddings: TypeAlias = "npt.ArrayLike | torch.Tensor | EmbeddingFile"
#: One label per row, shape ``(n,)``: integers of any size, strings, bytes or tuples, as a
#: sequence, a numpy array or a torch tensor; compared by value.
Labels: TypeAlias = "Sequence[Hashable] | npt.ArrayLike | torch.Tensor"
#: One id per row, shape ``(n,)``, compared by value as labels are: items with equal ids are
#: the same item (a query never retrieves an item with its own id).
Ids: TypeAlias = "Sequence[Hashable] | npt.ArrayLike | torch.Tensor"
#: A score matrix, shape ``(n_queries, n_references)``: higher is better.
Scores: TypeAlias = "npt.ArrayLike | torch.Tensor"
#: Integer ranks or indices, as an array or nested sequences.
Ranks: TypeAlias = "npt.ArrayLike | torch.Tensor"
