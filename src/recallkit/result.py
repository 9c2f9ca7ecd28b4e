"""The library's result types: a read-only mapping ``metric name -> float`` and what lies behind it.

:class:`MetricResult` is the base of every result the library returns (:class:`RecallResult`,
:class:`recallkit.protocols.ProtocolResult`, :class:`recallkit.datasets.BenchmarkResult`): the
values are read like a dict, ``to_dict()`` is JSON-ready (NaN, an undefined mean, becomes
``None``) and ``report()`` is the text to print.

The counts have one meaning wherever they appear (attributes, ``report()``, ``to_dict()``):

* ``num_queries``: every query given, lone ones included;
* ``num_evaluated``: the queries counted in the means, those with at least one relevant
  reference item after self-exclusion;
* ``num_excluded``: the lone queries (``num_queries - num_evaluated``), left out of every mean;
* ``num_reference``: the reference (gallery) items searched.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np


def json_float(value: float) -> float | None:
    """``value``, or ``None`` for NaN (JSON has no NaN)."""
    return None if math.isnan(value) else value


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces.

    >>> print(format_table(["a", "bb"], [["xyz", "1"]]))
    a    bb
    xyz  1
    """
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


class MetricResult(Mapping[str, float]):
    """A read-only mapping ``metric name -> float``, in the order the metrics were computed.

    Subclasses add what lies behind the values (counts, per-query arrays) and extend
    :meth:`to_dict` and :meth:`report`.

    >>> r = MetricResult({"recall@1": 0.5, "MAP@R": float("nan")})
    >>> dict(r), r.to_dict()
    ({'recall@1': 0.5, 'MAP@R': nan}, {'metrics': {'recall@1': 0.5, 'MAP@R': None}})
    >>> print(r.report())
    metric    value
    recall@1  0.5000
    MAP@R     -
    """

    _values: dict[str, float]

    def __init__(self, values: Mapping[str, float]) -> None:
        self._set_values(values)

    def _set_values(self, values: Mapping[str, float]) -> None:
        # object.__setattr__: frozen dataclass subclasses set their values here too.
        object.__setattr__(self, "_values", {str(k): float(v) for k, v in values.items()})

    def __getitem__(self, key: str) -> float:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({{{self._repr_values()}}})"

    def _repr_values(self) -> str:
        return ", ".join(f"{k!r}: {v:.4f}" for k, v in self._values.items())

    def json_metrics(self) -> dict[str, float | None]:
        """The values as a plain dict, NaN as ``None``."""
        return {k: json_float(v) for k, v in self._values.items()}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"metrics": {name: value or None}}``, extended by subclasses."""
        return {"metrics": self.json_metrics()}

    def report(self) -> str:
        """A plain-text table of the values, 4 decimals (``-`` for NaN)."""
        rows = [[k, "-" if math.isnan(v) else f"{v:.4f}"] for k, v in self._values.items()]
        return format_table(["metric", "value"], rows)


class RecallResult(MetricResult):
    """A read-only mapping ``"recall@K" -> float`` in the order of the requested ks.

    Each value is an exact fraction, hits over evaluated queries, divided once in float64.
    ``first_hit_ranks[i]`` is the 0-indexed rank of query ``i``'s first correct neighbour among
    its non-excluded reference items, or ``-1`` for a lone query (no reference item with its
    label), which is left out of every mean and counted in ``num_excluded``. The counts follow
    the module's glossary (``num_queries`` counts every query given).

    >>> r = RecallResult((1, 2), (1, 2), np.array([0, 1, -1]), num_reference=4, embedding_dim=8)
    >>> dict(r), r.num_queries, r.num_evaluated, r.num_excluded
    ({'recall@1': 0.5, 'recall@2': 1.0}, 3, 2, 1)
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
        total = self.num_evaluated
        values = {}
        for k, k_eff in zip(self.ks, self.effective_ks, strict=True):
            hits = int(np.count_nonzero(self.hits(k_eff)))
            values[f"recall@{k}"] = hits / total if total else math.nan
        super().__init__(values)

    @property
    def num_queries(self) -> int:
        """Every query given, lone ones included."""
        return len(self.first_hit_ranks)

    @property
    def evaluated(self) -> np.ndarray:
        """Mask of the queries counted in the mean (not lone)."""
        return self.first_hit_ranks >= 0

    @property
    def num_evaluated(self) -> int:
        """The queries counted in the mean: at least one relevant reference item."""
        return int(np.count_nonzero(self.evaluated))

    @property
    def num_excluded(self) -> int:
        """Lone queries: no reference item with their label after self-exclusion."""
        return self.num_queries - self.num_evaluated

    def counts(self) -> dict[str, int]:
        """``num_queries``, ``num_evaluated``, ``num_excluded`` and ``num_reference``."""
        return {
            "num_queries": self.num_queries,
            "num_evaluated": self.num_evaluated,
            "num_excluded": self.num_excluded,
            "num_reference": self.num_reference,
        }

    def hits(self, k: int) -> np.ndarray:
        """Per-query hit at ``k`` (False for lone queries)."""
        ranks = self.first_hit_ranks
        return (ranks >= 0) & (ranks < k)

    def __repr__(self) -> str:
        return (
            f"RecallResult({{{self._repr_values()}}}, num_evaluated={self.num_evaluated}, "
            f"num_excluded={self.num_excluded}, num_reference={self.num_reference})"
        )

    def report(self) -> str:
        """The report text: ``[evaluation]`` counts, then one ``recall@K:`` line per K.

        ``num queries`` counts every query given; when some are lone (excluded from the means),
        a ``num excluded`` line follows it. ``to_dict()`` has every count.

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
        lines = ["[evaluation]", f"  {'num queries:':<15}{self.num_queries}"]
        if self.num_excluded:
            lines.append(f"  {'num excluded:':<15}{self.num_excluded}")
        lines += [
            f"  {'num gallery:':<15}{self.num_reference}",
            f"  {'embedding_dim:':<15}{self.embedding_dim}",
            "",
            "[recall]",
        ]
        lines += [f"  {k + ':':<{width + 1}}{v:.4f}" for k, v in self._values.items()]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: values (NaN as ``None``), counts, ks and first-hit ranks."""
        out: dict[str, Any] = {
            "recall": self.json_metrics(),
            "ks": list(self.ks),
            "effective_ks": list(self.effective_ks),
            **self.counts(),
            "embedding_dim": self.embedding_dim,
            "first_hit_ranks": self.first_hit_ranks.tolist(),
        }
        if self.query_ids is not None:
            out["query_ids"] = list(self.query_ids)
        return out
