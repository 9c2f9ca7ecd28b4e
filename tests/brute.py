"""Independent, obviously correct references for the tests: float64, full stable sort.

Nothing here imports recallkit: expected values never come from the code under test.
"""

from __future__ import annotations

import numpy as np


def scores64(query: np.ndarray, reference: np.ndarray, metric: str) -> np.ndarray:
    q = np.asarray(query, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if metric == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        r = r / np.linalg.norm(r, axis=1, keepdims=True)
    if metric == "euclidean":
        return -((q[:, None, :] - r[None, :, :]) ** 2).sum(axis=2)
    return q @ r.T


def ranked(row: np.ndarray, excluded: set[int]) -> list[int]:
    """Candidate indices of one row, best first: sort on (-score, index), excluded removed."""
    order = sorted(range(len(row)), key=lambda j: (-row[j], j))
    return [j for j in order if j not in excluded]


def excluded_sets(n, m, query_in_reference=False, query_ids=None, reference_ids=None):
    sets = [set() for _ in range(n)]
    for i in range(n):
        if query_in_reference:
            sets[i].add(i)
        if query_ids is not None:
            sets[i].update(j for j in range(m) if reference_ids[j] == query_ids[i])
    return sets


def first_hit_ranks(s, q_labels, r_labels, excluded) -> np.ndarray:
    out = []
    for i, row in enumerate(s):
        order = ranked(row, excluded[i])
        hits = [p for p, j in enumerate(order) if r_labels[j] == q_labels[i]]
        out.append(hits[0] if hits else -1)
    return np.array(out)


def recall(ranks: np.ndarray, ks) -> dict[str, float]:
    ok = ranks >= 0
    return {f"recall@{k}": float(np.mean(ranks[ok] < k)) if ok.any() else np.nan for k in ks}


def top_r_metrics(s, q_labels, r_labels, excluded):
    """Per query (R, R-precision, AP@R) with R the relevant count; lone queries get R = 0."""
    out = []
    for i, row in enumerate(s):
        order = ranked(row, excluded[i])
        rel = [r_labels[j] == q_labels[i] for j in order]
        r = sum(rel)
        if r == 0:
            out.append((0, np.nan, np.nan))
            continue
        top = rel[:r]
        ap = sum(sum(top[: p + 1]) / (p + 1) for p in range(r) if top[p]) / r
        out.append((r, sum(top) / r, ap))
    return out


def ap_at_k(rel: list[bool], r: int, k: int, divisor: str) -> float:
    top = rel[:k]
    total = sum(sum(top[: p + 1]) / (p + 1) for p in range(len(top)) if top[p])
    d = {"min_k_r": min(k, r), "r": r, "hits": sum(top)}[divisor]
    return total / d if d else 0.0


def gt_rank(row: np.ndarray, target: int, excluded: set[int]) -> int:
    return ranked(row, excluded).index(target)


def fixed_order_scores64(query: np.ndarray, reference: np.ndarray, metric: str) -> np.ndarray:
    """The exact score as recallkit defines it: float64 products summed in index order.

    ``dot = Σ_k q_k r_k`` (k ascending, every step rounded to float64), ``sq(x) = dot(x, x)``;
    cosine ``dot / (sqrt(sq(q)) sqrt(sq(r)))``, euclidean ``2 dot - sq(r)``.
    """
    q = np.asarray(query, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    dot = np.zeros((len(q), len(r)))
    q_sq = np.zeros(len(q))
    r_sq = np.zeros(len(r))
    for k in range(q.shape[1]):
        dot = dot + q[:, k, None] * r[None, :, k]
        q_sq = q_sq + q[:, k] * q[:, k]
        r_sq = r_sq + r[:, k] * r[:, k]
    if metric == "cosine":
        return dot / (np.sqrt(q_sq)[:, None] * np.sqrt(r_sq)[None, :])
    if metric == "euclidean":
        return 2.0 * dot - r_sq[None, :]
    return dot


def relevance_lists(s, q_labels, r_labels, excluded):
    """Per query ``(rel, R, C)``: the relevance of its candidates in rank order, its relevant
    count and its candidate count (after the exclusions)."""
    out = []
    for i, row in enumerate(s):
        order = ranked(row, excluded[i])
        rel = [r_labels[j] == q_labels[i] for j in order]
        out.append((rel, sum(rel), len(order)))
    return out


def _running(terms):
    """A running sum, left to right, in Python floats."""
    total = 0.0
    for t in terms:
        total += t
    return total


def metric(name: str, k: int | None, rel: list[bool], r: int, c: int, divisor="min_k_r"):
    """One query's value of a metric from its definition (docs/metrics.md), sums taken left to
    right in rank order; NaN for a lone query."""
    import math

    if r == 0:
        return float("nan")
    first = rel.index(True) if True in rel else None
    if name == "recall":
        return 1.0 if first is not None and first < k else 0.0
    if name == "mrr":
        if first is None or (k is not None and first >= k):
            return 0.0
        return 1.0 / (first + 1.0)
    if name == "precision":
        cut = max(min(k, c), 1)
        return sum(rel[:cut]) / cut
    if name == "ir_recall":
        return sum(rel[:k]) / r
    if name == "r_precision":
        return sum(rel[:r]) / r
    if name in ("map_at_r", "map_at_k"):
        cut = r if name == "map_at_r" else k
        hits, terms = 0, []
        for p, is_rel in enumerate(rel[:cut]):
            if is_rel:
                hits += 1
                terms.append(hits / (p + 1))
        total = _running(terms)
        if name == "map_at_r":
            return total / r
        d = {"min_k_r": min(k, r), "r": r, "hits": sum(rel[:k])}[divisor]
        return total / d if d else 0.0
    if name == "ndcg":
        dcg = _running(1.0 / math.log2(p + 2) for p, is_rel in enumerate(rel[:k]) if is_rel)
        ideal = _running(1.0 / math.log2(p + 2) for p in range(min(k, r)))
        return dcg / ideal
    if name in ("mean_rank", "median_rank"):  # 1-indexed rank of the first relevant item
        return float(first + 1)
    raise KeyError(name)


def summary(name: str, values) -> float:
    """A metric's value over queries from its per-query values (lone queries removed): the
    median, floored, for MedR (VSE++: ``floor(median(r)) + 1`` of 0-indexed ranks), else the
    mean; NaN for none."""
    import math

    values = [float(v) for v in values]
    if not values:
        return float("nan")
    if name == "median_rank":
        return float(math.floor(np.median(values)))
    return float(np.mean(values))


def class_summary(name: str, values, classes) -> float:
    """The unweighted mean over classes of each class's :func:`summary` (``average="class"``),
    classes in increasing order; float64 sums left to right."""
    per = []
    for c in sorted(set(classes)):
        per.append(summary(name, [v for v, k in zip(values, classes, strict=True) if k == c]))
    return _running(per) / len(per) if per else float("nan")
