"""``RecallResult``: recall@K values with the counts and per-query ranks behind them."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np


class RecallResult(Mapping[str, float]):
    """A read-only mapping ``"recall@K" -> float`` in the order of the requested ks.

    Each value is an exact fraction, hits over evaluated queries, divided once in float64.
    ``first_hit_ranks[i]`` is the 0-indexed rank of query ``i``'s first correct neighbour among
    its non-excluded reference items, or ``-1`` for a lone query (no reference item with its
    label), which is left out of every mean and counted in ``num_excluded``.

    >>> r = RecallResult((1, 2), (1, 2), np.array([0, 1, -1]), num_reference=4, embedding_dim=8)
    >>> dict(r), r.num_evaluated, r.num_excluded
    ({'recall@1': 0.5, 'recall@2': 1.0}, 2, 1)
    """

    def __init__(
        self,
        ks: tuple[int, ...],
        effective_ks: tuple[int, ...],
        first_hit_ranks: np.ndarray,
        *,
        num_reference: int,
        embedding_dim: int,
        query_ids: list[Any] | None = None,
    ) -> None:
        self.ks = tuple(ks)
        self.effective_ks = tuple(effective_ks)
        self.first_hit_ranks = np.asarray(first_hit_ranks, dtype=np.int64)
        self.first_hit_ranks.setflags(write=False)
        self.num_reference = int(num_reference)
        self.embedding_dim = int(embedding_dim)
        self.query_ids = query_ids
        evaluated = self.evaluated
        self._values = {}
        for k, k_eff in zip(self.ks, self.effective_ks, strict=True):
            hits = int(np.count_nonzero(self.hits(k_eff)))
            total = int(np.count_nonzero(evaluated))
            self._values[f"recall@{k}"] = hits / total if total else math.nan

    @property
    def num_queries(self) -> int:
        """All queries given, lone ones included."""
        return len(self.first_hit_ranks)

    @property
    def evaluated(self) -> np.ndarray:
        """Mask of the queries counted in the mean (not lone)."""
        return self.first_hit_ranks >= 0

    @property
    def num_evaluated(self) -> int:
        return int(np.count_nonzero(self.evaluated))

    @property
    def num_excluded(self) -> int:
        """Lone queries: no reference item with their label after self-exclusion."""
        return self.num_queries - self.num_evaluated

    def hits(self, k: int) -> np.ndarray:
        """Per-query hit at ``k`` (False for lone queries)."""
        ranks = self.first_hit_ranks
        return (ranks >= 0) & (ranks < k)

    def __getitem__(self, key: str) -> float:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        values = ", ".join(f"{k!r}: {v:.4f}" for k, v in self._values.items())
        return (
            f"RecallResult({{{values}}}, num_evaluated={self.num_evaluated}, "
            f"num_excluded={self.num_excluded}, num_reference={self.num_reference})"
        )

    def report(self) -> str:
        """The seed's report text: ``[evaluation]`` counts, then one ``recall@K:`` line per K.

        ``num queries`` counts the evaluated queries (lone ones are excluded, as the seed's
        rule says); ``to_dict()`` has every count.

        >>> r = RecallResult((1, 10), (1, 10), np.array([0, 3]), num_reference=5, embedding_dim=4)
        >>> print(r.report())
        [evaluation]
          num queries:   2
          num gallery:   5
          embedding_dim: 4
        <BLANKLINE>
        [recall]
          recall@1:  0.5000
          recall@10: 1.0000
        """
        width = max(len(k) for k in self._values) + 1
        lines = [
            "[evaluation]",
            f"  {'num queries:':<15}{self.num_evaluated}",
            f"  {'num gallery:':<15}{self.num_reference}",
            f"  {'embedding_dim:':<15}{self.embedding_dim}",
            "",
            "[recall]",
        ]
        lines += [f"  {k + ':':<{width + 1}}{v:.4f}" for k, v in self._values.items()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: values, counts, ks and per-query first-hit ranks."""
        out: dict[str, Any] = {
            "recall": {k: (None if math.isnan(v) else v) for k, v in self._values.items()},
            "ks": list(self.ks),
            "effective_ks": list(self.effective_ks),
            "num_queries": self.num_queries,
            "num_evaluated": self.num_evaluated,
            "num_excluded": self.num_excluded,
            "num_reference": self.num_reference,
            "embedding_dim": self.embedding_dim,
            "first_hit_ranks": self.first_hit_ranks.tolist(),
        }
        if self.query_ids is not None:
            out["query_ids"] = list(self.query_ids)
        return out
