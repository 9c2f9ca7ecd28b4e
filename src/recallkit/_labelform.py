"""The label-form problem shared by recall@K, R-precision, MAP@R and MAP@K.

A reference item is relevant to a query when it has the query's label. Self-matches are removed
only as the caller says: ``query_in_reference=True`` (PML's convention: ``reference[:n]`` is the
query, row for row) or ``query_ids``/``reference_ids`` (every reference item whose id equals the
query's id). Nothing is inferred from equal vectors or equal labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from recallkit import _checks, _engine
from recallkit._labels import dense_codes


@dataclass(frozen=True)
class LabelProblem:
    """Validated inputs: the scoring space, label codes (the positives) and exclusions."""

    space: _engine.Space
    positives: _engine.LabelPositives
    exclusions: _engine.Pairs | None
    query_in_reference: bool
    chunk_size: int | None

    @property
    def query_codes(self) -> np.ndarray:
        return self.positives.query_codes

    @property
    def reference_codes(self) -> np.ndarray:
        return self.positives.reference_codes

    @property
    def num_relevant(self) -> np.ndarray:
        """Relevant reference items per query, after self-exclusion."""
        return self.positives.num_relevant(self.exclusions)


# The keyword options every label-form metric takes, with the meaning ``build`` gives them.
OPTIONS = (
    "query_in_reference",
    "query_ids",
    "reference_ids",
    "metric",
    "chunk_size",
    "device",
    "precision",
)


def options(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The label-form options among a metric's arguments (pass its ``locals()``)."""
    return {name: arguments[name] for name in OPTIONS}


def build(
    func: str,
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    *,
    query_in_reference: bool = False,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "float32",
) -> LabelProblem:
    """Validate the label-form arguments of ``func`` and build its problem."""
    chunk_size = _checks.check_chunk_size(chunk_size, func)
    space = _engine.prepare(query, reference, metric, device, func, precision=precision)
    n, m = space.num_query, space.num_reference
    _checks.check_length(query_labels, n, "query_labels", func, "query")
    _checks.check_length(reference_labels, m, "reference_labels", func, "reference")
    q_codes, r_codes = dense_codes(
        query_labels, reference_labels, ("query_labels", "reference_labels"), func
    )
    exclusions: list[_engine.Pairs] = []
    if query_in_reference:
        if m < n:
            raise _checks.fail(
                func,
                "reference",
                f"at least as long as the query ({n} rows) when query_in_reference=True",
                f"{m} rows",
            )
        if not np.array_equal(q_codes, r_codes[:n]):
            row = int(np.nonzero(q_codes != r_codes[:n])[0][0])
            raise _checks.fail(
                func,
                "reference_labels",
                "equal to query_labels on its first len(query) rows when query_in_reference=True",
                f"a different label at row {row}",
            )
        exclusions.append(_engine.Pairs.diagonal(n))
    if (query_ids is None) != (reference_ids is None):
        missing = "reference_ids" if reference_ids is None else "query_ids"
        raise _checks.fail(func, missing, "given together with the other ids", None)
    if query_ids is not None:
        _checks.check_length(query_ids, n, "query_ids", func, "query")
        _checks.check_length(reference_ids, m, "reference_ids", func, "reference")
        q_ids, r_ids = dense_codes(query_ids, reference_ids, ("query_ids", "reference_ids"), func)
        exclusions.append(_engine.Pairs.by_code(q_ids, r_ids))
    positives = _engine.LabelPositives(q_codes, r_codes)
    merged = _engine.Pairs.union(exclusions, n, m) if exclusions else None
    return LabelProblem(space, positives, merged, query_in_reference, chunk_size)
