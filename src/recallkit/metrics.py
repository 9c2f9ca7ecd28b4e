"""Every label-form metric, defined once: its name, what it needs from the engine, and its
per-query statistic.

A metric is asked for by name (``"recall@10"``, ``"MAP@R"``, ...; :func:`parse` also takes the
aliases of the table below). The engine computes, in one pass, what all asked metrics need: the
first-hit rank of each query (recall@K) and its exact top-``w`` list (``w`` the largest list a
metric needs: ``K``, or the query's ``R``); each metric is then a pure function of those
per-query arrays (:func:`per_query`), averaged over the evaluated queries.

Definitions (``R`` = relevant reference items of the query after self-exclusion; ``rel_i`` =
whether the item at 0-indexed rank ``i`` is relevant; ``P@i`` = precision of the first ``i``):

=================  =============================================================================
``recall@K``       hit@K: 1 if one of the K nearest is relevant (rank of the first hit < K), the
                   deep-metric-learning recall@K (Oh Song et al. 2016; Musgrave et al. 2020);
                   PML's ``precision_at_1`` at K = 1. Alias ``hit@K``.
``precision@K``    ``Σ_{i<K} rel_i / K``: the fraction of the K nearest that are relevant (IR).
``IR-recall@K``    ``Σ_{i<K} rel_i / R``: the fraction of the relevant items found in the K nearest
                   (the information-retrieval recall; torchmetrics ``RetrievalRecall``).
``MAP@K``          ``Σ_{i<K} rel_i P@(i+1) / D`` with ``D = min(K, R)`` (CIRCO, Baldrati et al.
                   2023), ``R`` (PML ``mean_average_precision``) or the hits in the top K
                   (torchmetrics, OML), by ``divisor``.
``MAP@R``          ``Σ_{i<R} rel_i P@(i+1) / R`` (Musgrave et al. 2020).
``R-precision``    ``Σ_{i<R} rel_i / R`` (Musgrave et al. 2020).
=================  =============================================================================

K above the candidates of a query is clamped to them (``effective_ks``) for recall@K and
precision@K. Lone queries (``R = 0``) have no value (NaN) and are left out of every mean, or
count as 0, or raise, by ``lone_queries`` (:data:`LONE_QUERIES`).

Ties: every value is the one the tie rule gives (lower reference index first). Beside it,
:func:`tie_orders` and :func:`rank_bounds` give each query's value with every exact tie broken in
its favour (optimistic) or against it (pessimistic), from the same pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from recallkit import _checks

DIVISORS = ("min_k_r", "r", "hits")
#: What a metric does with a lone query (no relevant item): ``"skip"`` leaves it out of the
#: means (counted in ``num_excluded``; every value NaN with a warning when all queries are
#: lone), ``"zero"`` counts it as 0, ``"error"`` raises ``ValueError`` if any query is lone.
LONE_QUERIES = ("skip", "zero", "error")


@dataclass(frozen=True)
class Kind:
    """One family of metrics: its canonical name (``{K}`` for the cut-off), the aliases it is
    also asked by, its name in pytorch-metric-learning's ``AccuracyCalculator`` (``None``: not
    one of PML's), and what it needs: ``"rank"`` (first-hit ranks), ``"k"`` (lists of K) or
    ``"r"`` (lists of R)."""

    key: str
    name: str
    aliases: tuple[str, ...]
    pml: str | None
    needs: str


KINDS = {
    kind.key: kind
    for kind in (
        Kind(
            "recall", "recall@{K}", ("hit@{K}", "recall_at_{K}", "r@{K}"), "recall_at_{K}", "rank"
        ),
        Kind("precision", "precision@{K}", ("ir_precision@{K}",), None, "k"),
        Kind("ir_recall", "IR-recall@{K}", ("ir_recall@{K}",), None, "k"),
        Kind("map_at_k", "MAP@{K}", ("map_at_{K}", "mean_average_precision_at_{K}"), None, "k"),
        Kind(
            "map_at_r",
            "MAP@R",
            ("map_at_r", "mean_average_precision_at_r", "map@r"),
            "mean_average_precision_at_r",
            "r",
        ),
        Kind("r_precision", "R-precision", ("r_precision", "rprecision"), "r_precision", "r"),
    )
}


@dataclass(frozen=True)
class Spec:
    """One metric asked for: its kind and cut-off ``k`` (``None`` for the R-based ones)."""

    kind: str
    k: int | None = None

    @property
    def name(self) -> str:
        """The canonical name, used as the result's key, in run files and by the CLI."""
        return KINDS[self.kind].name.replace("{K}", str(self.k))

    @property
    def needs(self) -> str:
        return KINDS[self.kind].needs

    @property
    def pml(self) -> str | None:
        """The metric's key in PML's ``AccuracyCalculator`` (``precision_at_1`` for recall@1)."""
        template = KINDS[self.kind].pml
        if template is None:
            return None
        if self.kind == "recall" and self.k == 1:
            return "precision_at_1"
        return template.replace("{K}", str(self.k))


def _patterns() -> list[tuple[re.Pattern, str]]:
    out = []
    for kind in KINDS.values():
        for text in (kind.name, *kind.aliases):
            pattern = re.escape(text.lower()).replace(re.escape("{k}"), r"(\d+)")
            out.append((re.compile(f"^{pattern}$"), kind.key))
    return out


_PATTERNS = _patterns()


def parse(names: Iterable[str] | str, func: str, name: str = "metrics") -> tuple[Spec, ...]:
    """The metrics named (canonical names or aliases, case-insensitive), in order, each once.

    >>> [s.name for s in parse(["hit@1", "map_at_r", "R-Precision", "precision_at_1"], "f")]
    ['recall@1', 'MAP@R', 'R-precision']
    """
    if isinstance(names, str):
        names = [names]
    try:
        given = list(names)
    except TypeError:
        raise _checks.fail(func, name, "a sequence of metric names", type(names).__name__) from None
    if not given:
        raise _checks.fail(func, name, "at least one metric name", "none")
    out: list[Spec] = []
    for text in given:
        if not isinstance(text, str):
            raise _checks.fail(func, name, "metric names (strings)", repr(text))
        spec = _parse_one(text.strip())
        if spec is None:
            raise _checks.fail(func, name, f"metric names such as {_examples()}", repr(text))
        if spec not in out:
            out.append(spec)
    return tuple(out)


def _parse_one(text: str) -> Spec | None:
    low = text.lower()
    if low == "precision_at_1":
        return Spec("recall", 1)
    for pattern, key in _PATTERNS:
        match = pattern.match(low)
        if match:
            if match.groups():
                k = int(match.group(1))
                return Spec(key, k) if k > 0 else None
            return Spec(key)
    return None


def _examples() -> str:
    return "'recall@1', 'precision@10', 'IR-recall@10', 'MAP@10', 'MAP@R', 'R-precision'"


def recall_specs(ks: Sequence[int]) -> tuple[Spec, ...]:
    return tuple(Spec("recall", k) for k in ks)


# ----------------------------------------------------------------------------------------------
# Per-query statistics.


def precision_sums(relevant: np.ndarray, cutoff: np.ndarray) -> np.ndarray:
    """``Σ_{i<cutoff} rel_i · P@(i+1)`` per row of a ``(c, w)`` relevance matrix (the numerator
    of average precision), ``cutoff`` per row."""
    rel = relevant.astype(np.float64)
    position = np.arange(rel.shape[1])[None, :]
    rel = np.where(position < np.asarray(cutoff)[:, None], rel, 0.0)
    precision = np.cumsum(rel, axis=1) / (position + 1.0)
    return (precision * rel).sum(axis=1)


def relevant_in(relevant: np.ndarray, cutoff: np.ndarray) -> np.ndarray:
    """``Σ_{i<cutoff} rel_i`` per row."""
    position = np.arange(relevant.shape[1])[None, :]
    return (relevant & (position < np.asarray(cutoff)[:, None])).sum(axis=1)


def ap_at_k(relevant: np.ndarray, num_relevant: np.ndarray, k: int, divisor: str) -> np.ndarray:
    """AP@K per row of a ``(c, w)`` relevance matrix (``w >= K``); a row with ``D = 0`` scores 0.

    >>> ap_at_k(np.array([[True, False, True]]), np.array([2]), 3, "min_k_r").tolist()
    [0.8333333333333333]
    """
    cut = np.full(len(relevant), k)
    total = precision_sums(relevant, cut)
    if divisor == "min_k_r":
        denominator = np.minimum(k, num_relevant).astype(np.float64)
    elif divisor == "r":
        denominator = np.asarray(num_relevant, dtype=np.float64)
    else:
        denominator = relevant_in(relevant, cut).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, total / np.where(denominator > 0, denominator, 1), 0.0)


def per_query(
    spec: Spec,
    *,
    ranks: np.ndarray | None = None,
    relevant: np.ndarray | None = None,
    num_relevant: np.ndarray,
    candidates: int,
    divisor: str = "min_k_r",
) -> np.ndarray:
    """Each query's value of ``spec`` (NaN for a lone query): from its first-hit rank
    (``recall@K``) or from the relevance of its ranked list (``(c, w)``, ``w`` at least what
    the metric reads)."""
    lone = num_relevant <= 0
    r = np.maximum(num_relevant, 1).astype(np.float64)
    k = None if spec.k is None else min(spec.k, max(candidates, 1))
    if spec.kind == "recall":
        value = ((ranks >= 0) & (ranks < k)).astype(np.float64)
    elif spec.kind == "precision":
        value = relevant_in(relevant, np.full(len(r), k)) / float(k)
    elif spec.kind == "ir_recall":
        value = relevant_in(relevant, np.full(len(r), spec.k)) / r
    elif spec.kind == "map_at_k":
        value = ap_at_k(relevant, num_relevant, spec.k, divisor)
    elif spec.kind == "map_at_r":
        value = precision_sums(relevant, num_relevant) / r
    else:
        value = relevant_in(relevant, num_relevant) / r
    return np.where(lone, np.nan, value)


# ----------------------------------------------------------------------------------------------
# Ties.


def rank_bounds(
    ranks: np.ndarray,
    ties_before: np.ndarray,
    ties: np.ndarray,
    tied_positives: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each threshold item's rank with every exact tie broken in the query's favour (the
    threshold first among the items tied with it) and against it (last): ``(optimistic,
    pessimistic)``. With ``tied_positives`` (first-hit ranks) the other relevant items tied with
    the best one do not delay the first hit; ``-1`` ranks stay ``-1``."""
    found = ranks >= 0
    optimistic = ranks - ties_before
    against = ties if tied_positives is None else ties - tied_positives[:, None]
    pessimistic = optimistic + against
    return np.where(found, optimistic, -1), np.where(found, pessimistic, -1)


def tie_orders(
    score: np.ndarray,
    relevant: np.ndarray,
    valid: np.ndarray,
    tail_relevant: np.ndarray,
    tail_count: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The relevance of each ranked list ``(c, w)`` (best first) with the items of every group
    of equal exact scores reordered relevant-first (optimistic) or relevant-last (pessimistic).

    The last group of a full list also holds its *tail* (``tail_count`` items beyond the list
    tied with its last item, ``tail_relevant`` of them relevant): the optimistic order can bring
    a relevant tail item into the list, the pessimistic one push a relevant item out. Padding
    (``valid`` False) is never relevant."""
    c, w = score.shape
    if w == 0:
        return relevant.copy(), relevant.copy()
    new_group = np.ones((c, w), dtype=bool)
    new_group[:, 1:] = (score[:, 1:] != score[:, :-1]) | ~valid[:, 1:] | ~valid[:, :-1]
    group = np.cumsum(new_group, axis=1) - 1 + (np.arange(c) * w)[:, None]
    flat = group.reshape(-1)
    size = np.bincount(flat, minlength=c * w)
    hits = np.bincount(flat, weights=relevant.reshape(-1).astype(np.float64), minlength=c * w)
    hits = hits.astype(np.int64)
    starts = np.zeros(c * w, dtype=np.int64)
    first = np.flatnonzero(new_group.reshape(-1))
    starts[flat[first]] = first
    position = np.arange(c * w) - starts[flat]
    # The last valid item's group extends into the tail.
    last = np.where(valid.any(axis=1), w - 1 - np.argmax(valid[:, ::-1], axis=1), -1)
    tail_group = np.where(last >= 0, group[np.arange(c), np.maximum(last, 0)], -1)
    extra_size = np.zeros(c * w, dtype=np.int64)
    extra_hits = np.zeros(c * w, dtype=np.int64)
    has = tail_group >= 0
    extra_size[tail_group[has]] = tail_count[has]
    extra_hits[tail_group[has]] = tail_relevant[has]
    total_hits = hits + extra_hits
    total_size = size + extra_size
    g = flat
    optimistic = (position < total_hits[g]).reshape(c, w) & valid
    pessimistic = (position >= (total_size[g] - total_hits[g])).reshape(c, w) & valid
    return optimistic, pessimistic


def mean_over(values: np.ndarray, evaluated: np.ndarray, lone_queries: str) -> float:
    """The mean of the evaluated queries' values (``lone_queries="zero"``: lone ones count
    as 0); NaN when there is none."""
    if lone_queries == "zero":
        values = np.where(evaluated, values, 0.0)
        return float(values.mean()) if len(values) else float("nan")
    if not evaluated.any():
        return float("nan")
    return float(values[evaluated].mean())
