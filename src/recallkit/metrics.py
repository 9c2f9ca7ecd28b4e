"""Every label-form metric, each one object in one registry.

A metric is a subclass of [`Metric`][Metric] registered with [`register`][register]. The class holds
all there is to the metric, and nothing else in the library knows it by name:

* its name (``"recall@{K}"``), its aliases and its peers' names (PML, torchmetrics, OML, ranx);
* what it asks of the engine ([`Metric.reads`][Metric.reads]: each query's first-hit rank, or its
  exact ranked list, and how long that list must be: [`Metric.width`][Metric.width]);
* its per-query statistic ([`Metric.values`][Metric.values]), computed in one fixed order of
  operations from the ranked relevance alone, so that it is bit-identical for every chunking,
  budget, streaming, precision, back end and shard split;
* its K clamp, per query, over the candidates left after every exclusion;
* its tie rule: the worst and best values over the orders of the exactly tied items
  ([`Metric.bounds`][Metric.bounds]);
* how the per-query values are summarised into the metric's value
  ([`Metric.summarize`][Metric.summarize]: the mean, or MedR's median), which way is better
  ([`Metric.direction`][Metric.direction]), what a lone query counts as under
  ``lone_queries="zero"`` ([`Metric.lone_value`][Metric.lone_value]; ``None``: the metric refuses
  ``"zero"``) and its parameters beyond K ([`Metric.parameters`][Metric.parameters]).

How the summaries are averaged (over queries, or per class first) is
[`recallkit._averaging`][recallkit._averaging]'s, the same for every metric.

Names (``R`` = relevant reference items of the query after every exclusion; ``C`` = the
query's candidates after every exclusion; ``rel_i`` = whether the item at 0-indexed rank ``i``
is relevant; ``P@i`` = precision of the first ``i``; ``r`` = the 0-indexed rank of the first
relevant item):

=================  =============================================================================
``recall@K``       hit@K: 1 if one of the K nearest is relevant (``r < K``), the
                   deep-metric-learning recall@K (Oh Song et al. 2016; Musgrave et al. 2020);
                   PML's ``precision_at_1`` at K = 1. Alias ``hit@K``.
``precision@K``    ``Σ_{i<K'} rel_i / K'`` with ``K' = min(K, C)``: the fraction of the K nearest
                   that are relevant (IR; torchmetrics ``adaptive_k``).
``IR-recall@K``    ``Σ_{i<K} rel_i / R``: the fraction of the relevant items found in the K
                   nearest (the information-retrieval recall; torchmetrics ``RetrievalRecall``).
``MAP@K``          ``Σ_{i<K} rel_i P@(i+1) / D`` with ``D = min(K, R)`` (CIRCO, Baldrati et al.
                   2023), ``R`` (PML ``mean_average_precision``) or the hits in the top K
                   (torchmetrics, OML), by ``divisor``; 0 when ``D = 0``.
``MAP@R``          ``Σ_{i<R} rel_i P@(i+1) / R`` (Musgrave et al. 2020).
``R-precision``    ``Σ_{i<R} rel_i / R`` (Musgrave et al. 2020).
``MRR``            ``1 / (r + 1)``, the reciprocal rank of the first relevant item (Voorhees,
                   TREC-8 QA, 1999); ``MRR@K``: 0 when ``r >= K``.
``nDCG@K``         ``DCG@K / IDCG@K`` with binary gains: ``DCG@K = Σ_{i<K} rel_i / log2(i + 2)``,
                   ``IDCG@K = Σ_{i<min(K, R)} 1 / log2(i + 2)`` (Järvelin & Kekäläinen 2002).
``MnR``            mean over queries of ``r + 1``, the 1-indexed rank of the first relevant
                   item (lower is better; VSE++'s ``meanr``, Faghri et al. 2018).
``MedR``           ``floor(median(r + 1))`` over queries, 1-indexed (lower is better; VSE++'s
                   ``medr = floor(median(r)) + 1``, Faghri et al. 2018).
=================  =============================================================================

Lone queries (``R = 0``) have no value (NaN): they are left out of every summary, counted as
the metric's [`lone_value`][Metric.lone_value] (0 for every metric whose best value is high), or
refused, by ``lone_queries`` ([`recallkit.options.LONE_QUERIES`][recallkit.options.LONE_QUERIES]); a
rank metric (MnR, MedR) has no value for a query without a relevant item and refuses ``"zero"``.

Fixed order. Every sum over a ranked list is a running sum in rank order (``numpy.cumsum``,
which adds left to right) read at the cut-off, so padding a list (a wider chunk) never changes a
value; counts are exact integers; every quotient is one correctly rounded division.

Ties. Every value is the one the tie rule gives (lower reference index first). Beside it,
[`Metric.bounds`][Metric.bounds] gives each query's worst and best values over every order of the
items whose exact scores are equal; [`Ranked`][Ranked] provides the orders a metric needs (each
group of equal scores relevant-first or relevant-last, the items tied beyond the list included).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import numpy as np

from recallkit.exceptions import did_you_mean, fail

DIVISORS = ("min_k_r", "r", "hits")
#: The registry: family key -> metric class, in the order metrics are documented.
REGISTRY: dict[str, type[Metric]] = {}
ORDERS = ("rule", "best", "worst")
_LARGEST_K = 2**62
# (pattern, family, whether it holds K) for every name and alias, built on first use.
_PATTERNS: list[tuple[re.Pattern[str], str, bool]] = []


def register(cls: type[Metric]) -> type[Metric]:
    """Add a metric class to the registry (its ``Metric.family`` must be new).

    Parameters
    ----------
    cls : type of Metric
        The metric class (a subclass of [`Metric`][recallkit.metrics.Metric]).

    Returns
    -------
    type of Metric
        ``cls`` itself, so that ``@register`` decorates the class.
    """
    if cls.family in REGISTRY:
        raise ValueError(f"a metric family {cls.family!r} is registered already")
    REGISTRY[cls.family] = cls
    _PATTERNS.clear()
    return cls


def unregister(family: str) -> None:
    """Remove a metric family from the registry (a metric added for a while, in a test)."""
    del REGISTRY[family]
    _PATTERNS.clear()


# ----------------------------------------------------------------------------------------------
# One chunk's ranked relevance: what every metric reads.


class Ranked:
    """The ranked relevance of a chunk of ``c`` queries, from which every metric is computed.

    ``num_relevant`` (``R``) and ``candidates`` (``C``) per query; for rank metrics the
    first-hit ranks by the tie rule and with every tie broken for (``best``) or against
    (``worst``) the query (``-1``: no relevant item); for list metrics each query's ranked list
    ``(c, w)``: ``relevant``, ``valid`` (False at padding) and exact ``score``, and the *tail*
    (``tail_count`` items beyond the list tied with its last item, ``tail_relevant`` of them
    relevant).
    """

    def __init__(
        self,
        num_relevant: np.ndarray,
        candidates: np.ndarray,
        *,
        first: np.ndarray | None = None,
        first_best: np.ndarray | None = None,
        first_worst: np.ndarray | None = None,
        relevant: np.ndarray | None = None,
        valid: np.ndarray | None = None,
        score: np.ndarray | None = None,
        tail_count: np.ndarray | None = None,
        tail_relevant: np.ndarray | None = None,
    ) -> None:
        self.num_relevant = np.asarray(num_relevant, dtype=np.int64)
        self.candidates = np.asarray(candidates, dtype=np.int64)
        self.first = first
        self.first_best = first if first_best is None else first_best
        self.first_worst = first if first_worst is None else first_worst
        c = len(self.num_relevant)
        if relevant is None:
            relevant = np.zeros((c, 0), dtype=bool)
        self.relevant = np.asarray(relevant, dtype=bool)
        self.valid = np.ones_like(self.relevant) if valid is None else np.asarray(valid, bool)
        self.score = score
        zero = np.zeros(c, dtype=np.int64)
        self.tail_count = zero if tail_count is None else np.asarray(tail_count, np.int64)
        self.tail_relevant = zero if tail_relevant is None else np.asarray(tail_relevant, np.int64)
        self._orders: dict[str, np.ndarray] = {}
        self._sums: dict[tuple[str, str], np.ndarray] = {}
        self._groups: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def width(self) -> int:
        return int(self.relevant.shape[1])

    def rank(self, order: str = "rule") -> np.ndarray:
        """First-hit ranks in ``order`` (``"rule"``, ``"best"``, ``"worst"``)."""
        return {"rule": self.first, "best": self.first_best, "worst": self.first_worst}[order]

    def groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per list position, its group of equal exact scores: ``(start, end, hits)``, the
        group's first position, its end (first position after it, counting the tail for the
        last group of the list) and its relevant items (tail included)."""
        if self._groups is None:
            self._groups = _groups(
                self.score, self.relevant, self.valid, self.tail_count, self.tail_relevant
            )
        return self._groups

    def order(self, order: str = "rule") -> np.ndarray:
        """The relevance of each list in ``order``: the tie rule's, or with every group of equal
        scores reordered relevant-first (``"best"``) or relevant-last (``"worst"``), the tail
        included (a relevant tail item may come into the list, a relevant item go out)."""
        if order == "rule" or self.score is None:
            return self.relevant
        if order not in self._orders:
            start, end, hits = self.groups()
            position = np.arange(self.width)[None, :]
            if order == "best":
                out = (position - start < hits) & self.valid
            else:
                out = (position >= end - hits) & self.valid
            self._orders[order] = out
        return self._orders[order]

    def tied_lists(self) -> np.ndarray:
        """Per query, whether its list reads differently in the best and the worst order (a
        group of equal scores, the tail included, holds relevant and other items). Only the
        lists with equal scores or a tail are reordered, as a part of their own: memory for
        the lists that have ties, not for the chunk's."""
        c = len(self.num_relevant)
        if self.score is None or self.width == 0:
            return np.zeros(c, dtype=bool)
        equal = self.score[:, 1:] == self.score[:, :-1]
        equal &= self.valid[:, 1:]
        equal &= self.valid[:, :-1]
        candidates = equal.any(axis=1) | (self.tail_count > 0)
        del equal
        out = np.zeros(c, dtype=bool)
        rows = np.flatnonzero(candidates)
        if len(rows):
            part = self.take(rows)
            out[rows] = (part.order("best") != part.order("worst")).any(axis=1)
        return out

    def running(self, what: str, order: str = "rule") -> np.ndarray:
        """Running sums along each list in ``order``, left to right: ``"hits"`` (relevant items
        so far, int64), ``"precision"`` (``Σ rel_i P@(i+1)``), ``"dcg"`` (``Σ rel_i /
        log2(i + 2)``)."""
        key = (what, order)
        if key not in self._sums:
            rel = self.order(order)
            if what == "hits":  # summed in int32 (a list is far shorter): numpy sums booleans
                # into int64 along rows several times slower
                out = np.cumsum(rel, axis=1, dtype=np.int32).astype(np.int64)
            elif what == "precision":
                hits = self.running("hits", order)
                position = np.arange(1, self.width + 1, dtype=np.float64)[None, :]
                out = np.cumsum(np.where(rel, hits / position, 0.0), axis=1)
            else:
                out = np.cumsum(np.where(rel, discounts(self.width)[None, :], 0.0), axis=1)
            self._sums[key] = out
        return self._sums[key]

    def at(self, what: str, cut: np.ndarray | int, order: str = "rule") -> np.ndarray:
        """The running sum ``what`` over the first ``cut`` positions of each list (``cut`` per
        query or one for all; beyond the list: its whole length; 0 for ``cut <= 0``)."""
        running = self.running(what, order)
        c = len(self.num_relevant)
        cut = np.broadcast_to(np.asarray(cut, dtype=np.int64), (c,))
        inside = np.minimum(cut, self.width)
        if self.width == 0:
            return np.zeros(c, dtype=running.dtype)
        out = np.take_along_axis(running, np.maximum(inside - 1, 0)[:, None], axis=1)[:, 0]
        return np.where(inside > 0, out, 0)

    def take(self, rows: np.ndarray) -> Ranked:
        """The queries ``rows`` (a mask, indices or a slice) of this chunk."""

        def part(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[rows]

        return Ranked(
            self.num_relevant[rows],
            self.candidates[rows],
            first=part(self.first),
            first_best=part(self.first_best),
            first_worst=part(self.first_worst),
            relevant=self.relevant[rows],
            valid=self.valid[rows],
            score=part(self.score),
            tail_count=self.tail_count[rows],
            tail_relevant=self.tail_relevant[rows],
        )


def _groups(
    score: np.ndarray | None,
    relevant: np.ndarray,
    valid: np.ndarray,
    tail_count: np.ndarray,
    tail_relevant: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c, w = relevant.shape
    position = np.broadcast_to(np.arange(w)[None, :], (c, w))
    single = position.copy(), position + 1, relevant.astype(np.int64)
    if score is None or w == 0:
        return single
    new = np.ones((c, w), dtype=bool)
    new[:, 1:] = (score[:, 1:] != score[:, :-1]) | ~valid[:, 1:] | ~valid[:, :-1]
    # Lists without equal scores (nor tied tail items) are groups of one item each.
    tied = np.flatnonzero(~new.all(axis=1) | (tail_count > 0))
    if len(tied) < c:
        start, end, hits = single
        if len(tied):
            part = _groups(
                score[tied], relevant[tied], valid[tied], tail_count[tied], tail_relevant[tied]
            )
            for out, got in zip((start, end, hits), part, strict=True):
                out[tied] = got
        return start, end, hits
    group = np.cumsum(new, axis=1) - 1 + (np.arange(c) * w)[:, None]
    flat = group.reshape(-1)
    size = np.bincount(flat, minlength=c * w)
    hits = np.bincount(flat, weights=relevant.reshape(-1), minlength=c * w).astype(np.int64)
    starts = np.zeros(c * w, dtype=np.int64)
    first = np.flatnonzero(new.reshape(-1))
    starts[flat[first]] = first % w
    # The last valid item's group extends into the tail.
    has = valid.any(axis=1)
    last = np.where(has, w - 1 - np.argmax(valid[:, ::-1], axis=1), 0)
    tail_group = group[np.arange(c), last][has]
    size[tail_group] += tail_count[has]
    hits[tail_group] += tail_relevant[has]
    start = starts[flat].reshape(c, w)
    return start, start + size[flat].reshape(c, w), hits[flat].reshape(c, w)


_DISCOUNTS = np.zeros(0)


def discounts(width: int) -> np.ndarray:
    """``1 / log2(i + 2)`` for ``i < width``: nDCG's position discounts, each the correctly
    rounded quotient of ``math.log2`` (the same table for every list)."""
    global _DISCOUNTS
    if len(_DISCOUNTS) < width:
        size = max(width, 2 * len(_DISCOUNTS), 64)
        _DISCOUNTS = np.array([1.0 / math.log2(i + 2) for i in range(size)])
        _DISCOUNTS.setflags(write=False)
    return _DISCOUNTS[:width]


def _ideal_dcg(cut: np.ndarray) -> np.ndarray:
    """``Σ_{i<cut} 1 / log2(i + 2)``, a running sum left to right read at ``cut``."""
    top = int(cut.max(initial=0))
    running = np.cumsum(discounts(top)) if top else np.zeros(0)
    out = running[np.maximum(cut - 1, 0)] if top else np.zeros(len(cut))
    return np.where(cut > 0, out, 0.0)


# ----------------------------------------------------------------------------------------------
# The metric objects.


class Metric:
    """One metric, at one cut-off (``k``) where it has one (module docstring).

    Subclasses set the class attributes and [`values`][values]; [`width`][width], [`bounds`][bounds]
    and [`clamped`][clamped] have defaults that fit most metrics. Instances are values: equal when
    family, ``k`` and ``divisor`` are.

    Parameters
    ----------
    k : int, optional
        The cut-off K, for a metric that has one (``None``: the metric without a cut-off).
    **parameters : str
        The metric's parameters beyond K, each one of the values its class's ``parameters``
        lists (``divisor="hits"`` for AP@K); the first of those values by default.
    """

    #: The registry key.
    family: ClassVar[str]
    #: Canonical name: ``{K}`` for the cut-off; [`name_without_k`][name_without_k] when K is
    #: optional.
    template: ClassVar[str]
    name_without_k: ClassVar[str | None] = None
    #: Other names it is asked by (lower case is matched; ``{K}`` the cut-off).
    aliases: ClassVar[tuple[str, ...]] = ()
    #: The peers' names of this metric, ``(library, name)``, with the agreement conditions in
    #: docs/metrics.md.
    peers: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: Its key in pytorch-metric-learning's ``AccuracyCalculator`` (``None``: not one of PML's).
    pml: ClassVar[str | None] = None
    #: What it reads from the engine: ``"rank"`` (first-hit ranks) or ``"list"`` (ranked lists).
    reads: ClassVar[str] = "list"
    #: Whether K above a query's candidates is clamped to them (and said in a warning).
    clamps: ClassVar[bool] = False
    #: Its parameters beyond K: name -> the values it takes, the first the default
    #: (``{"divisor": DIVISORS}`` for AP@K).
    parameters: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: ``"higher"`` or ``"lower"``: which values are better (MnR and MedR: lower).
    direction: ClassVar[str] = "higher"
    #: What [`summarize`][summarize] does, in words (``"mean"``, ``"median"``), for tables and
    #: records.
    summary: ClassVar[str] = "mean"
    #: A lone query's value under ``lone_queries="zero"`` (``None``: the metric refuses
    #: ``"zero"``, having no value that means "nothing relevant").
    lone_value: ClassVar[float | None] = 0.0
    #: ``(low, high)``: the values a query (and so the metric) can take; a run file holding
    #: another is refused.
    value_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    #: The per-query formula, for the definitions table.
    formula: ClassVar[str] = ""

    def __init__(self, k: int | None = None, **parameters: str) -> None:
        self.k = k
        unknown = sorted(set(parameters) - set(self.parameters))
        if unknown:
            raise TypeError(f"{type(self).__name__} takes no parameter {unknown[0]!r}")
        self.params = {
            name: parameters.get(name, choices[0]) for name, choices in self.parameters.items()
        }
        # The cut-off as the arrays take it: any K beyond every list reads the whole list.
        self.cut = None if k is None else min(int(k), _LARGEST_K)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Metric) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[Any, ...]:
        return (self.family, self.k, tuple(sorted(self.params.items())))

    @property
    def changed_parameters(self) -> dict[str, str]:
        """The parameters that differ from their defaults (recorded in the definitions)."""
        return {n: v for n, v in self.params.items() if v != self.parameters[n][0]}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def name(self) -> str:
        """The canonical name: the key of results, run files and reports."""
        if self.k is None:
            return self.name_without_k or self.template
        return self.template.replace("{K}", str(self.k))

    @property
    def pml_name(self) -> str | None:
        """The metric's key in PML's ``AccuracyCalculator`` (``None``: not one of PML's)."""
        return None if self.pml is None else self.pml.replace("{K}", str(self.k))

    # -- what it asks of the engine ------------------------------------------------------------

    def width(self, num_relevant: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """Per query, the length of the ranked list it reads (0: it reads the first-hit rank).

        Parameters
        ----------
        num_relevant : numpy.ndarray of int64, shape (c,)
            Each query's number of relevant reference items (``R``).
        candidates : numpy.ndarray of int64, shape (c,)
            Each query's number of candidates (``C``).

        Returns
        -------
        numpy.ndarray of int64, shape (c,)
            The length of each query's ranked list.
        """
        if self.reads == "rank":
            return np.zeros(len(num_relevant), dtype=np.int64)
        return np.minimum(self.cut, candidates).astype(np.int64)

    def clamped(self, candidates: np.ndarray) -> np.ndarray:
        """Per query, the cut-off after the clamp (K, or ``min(K, C)`` for clamping metrics).

        Parameters
        ----------
        candidates : numpy.ndarray of int64, shape (c,)
            Each query's number of candidates (``C``).

        Returns
        -------
        numpy.ndarray of int64, shape (c,)
            Each query's cut-off.
        """
        k = np.full(len(candidates), self.cut if self.cut is not None else 0, dtype=np.int64)
        return np.maximum(np.minimum(k, candidates), 1) if self.clamps else k

    # -- the statistic -------------------------------------------------------------------------

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        """Each query's value in ``order`` (lone queries: any value; the caller masks them).

        Parameters
        ----------
        ranked : Ranked
            The ranked relevance of a chunk of ``c`` queries.
        order : {'rule', 'best', 'worst'}, default 'rule'
            The order of exactly tied items: the tie rule (the lower reference index first),
            relevant items first, or relevant items last.

        Returns
        -------
        numpy.ndarray of float64, shape (c,)
            Each query's value.
        """
        raise NotImplementedError

    def bounds(self, ranked: Ranked, tied: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(pessimistic, optimistic)`` per query over every order of the exactly tied items,
        for the rows ``tied`` (a mask: the queries whose lists or first hits have a tie). The
        default takes each group of equal scores relevant-last and relevant-first, which is the
        pessimistic and the optimistic order for every metric that never gains from a relevant
        item ranked lower (for a rank metric, lower is better: relevant-last is its largest
        value).

        Parameters
        ----------
        ranked : Ranked
            The ranked relevance of a chunk of ``c`` queries.
        tied : numpy.ndarray of bool, shape (c,)
            The queries whose lists or first hits have a tie.

        Returns
        -------
        tuple of (numpy.ndarray, numpy.ndarray) of float64, shape (t,) each
            The pessimistic and optimistic value of each of the ``t`` tied queries.
        """
        part = ranked.take(tied)
        return self.values(part, "worst"), self.values(part, "best")

    def summarize(self, values: np.ndarray) -> Any:
        """The metric's value over queries from their per-query values (float64 without NaN),
        over the last axis: a float for 1-D values, one per row for a batch of resamples
        ``(b, n)`` (what bootstrap intervals ask). The mean by default; NaN when there is no
        value. A summary is monotone (a better value of one query never makes it worse), so
        the summaries of the pessimistic and optimistic per-query values bound it.

        Parameters
        ----------
        values : numpy.ndarray of float64, shape (n,) or (b, n)
            The per-query values (no NaN), or ``b`` resamples of them.

        Returns
        -------
        float or numpy.ndarray of float64, shape (b,)
            The metric's value, or one per resample.

        Examples
        --------
        >>> Recall(1).summarize(np.array([1.0, 0.0, 0.0, 1.0]))
        0.5
        """
        if values.shape[-1] == 0:
            return math.nan if values.ndim == 1 else np.full(values.shape[:-1], math.nan)
        out = values.mean(axis=-1)
        return float(out) if values.ndim == 1 else out


def _safe_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0)


@register
class Recall(Metric):
    family = "recall"
    template = "recall@{K}"
    aliases = ("hit@{K}", "recall_at_{K}", "r@{K}", "hit_rate@{K}", "cmc@{K}")
    peers = (
        ("PML", "precision_at_1 (K = 1)"),
        ("torchmetrics", "RetrievalHitRate(top_k=K)"),
        ("OML", "cmc@K"),
        ("ranx", "hit_rate@K"),
    )
    pml = "recall_at_{K}"
    reads = "rank"
    clamps = True
    formula = "1 if the first relevant item has 0-indexed rank < K"

    @property
    def pml_name(self) -> str | None:
        return "precision_at_1" if self.k == 1 else super().pml_name

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        rank = ranked.rank(order)
        return ((rank >= 0) & (rank < self.cut)).astype(np.float64)


@register
class Precision(Metric):
    family = "precision"
    template = "precision@{K}"
    aliases = ("ir_precision@{K}", "p@{K}")
    peers = (
        ("torchmetrics", "RetrievalPrecision(top_k=K, adaptive_k=True)"),
        ("OML", "precision@K"),
        ("ranx", "precision@K"),
    )
    clamps = True
    formula = "(relevant items among the first min(K, C)) / min(K, C)"

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        cut = self.clamped(ranked.candidates)
        return ranked.at("hits", cut, order) / cut.astype(np.float64)


@register
class IRRecall(Metric):
    family = "ir_recall"
    template = "IR-recall@{K}"
    aliases = ("ir_recall@{K}",)
    peers = (("torchmetrics", "RetrievalRecall(top_k=K)"), ("ranx", "recall@K"))
    formula = "(relevant items among the first K) / R"

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        return _safe_divide(ranked.at("hits", self.cut, order), ranked.num_relevant)


@register
class MAPAtK(Metric):
    family = "map_at_k"
    template = "MAP@{K}"
    aliases = ("map_at_{K}", "mean_average_precision_at_{K}", "map@{K}")
    peers = (
        ("torchmetrics", "RetrievalMAP(top_k=K) (divisor='hits')"),
        ("OML", "map@K (divisor='hits')"),
        ("ranx", "map@K (divisor='r')"),
        ("PML", "mean_average_precision with k=K (divisor='r')"),
    )
    parameters: ClassVar[dict[str, tuple[str, ...]]] = {"divisor": DIVISORS}
    formula = "AP@K = (1/D) Σ_{i<K} rel_i · P@(i+1), D by divisor; 0 when D = 0"

    @property
    def divisor(self) -> str:
        """AP@K's divisor: ``"min_k_r"``, ``"r"`` or ``"hits"``."""
        return self.params["divisor"]

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        hits = ranked.at("hits", self.cut, order) if self.divisor == "hits" else None
        divisor = ap_divisor(self.divisor, self.cut, ranked.num_relevant, hits)
        return _safe_divide(ranked.at("precision", self.cut, order), divisor)

    def bounds(self, ranked: Ranked, tied: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        worst, best = super().bounds(ranked, tied)
        if self.divisor != "hits":
            return worst, best
        # The divisor grows with the hits in the top K: a relevant item of the group that
        # straddles the cut-off may be worth more outside it. Every split of that group's
        # relevant items between inside and outside is tried, each placed first (best) or last
        # (worst) of the inside positions.
        part = ranked.take(tied)
        k = self.cut
        if part.width < k:
            return worst, best
        start, end, hits = (a[:, k - 1] for a in part.groups())
        inside = k - start
        low = np.maximum(0, hits - (end - k))
        high = np.minimum(hits, inside)
        before = part.at("hits", start)
        prefix = {o: part.at("precision", start, o) for o in ("best", "worst")}
        for h in range(int(high.max(initial=0)) + 1):
            active = (low <= h) & (h <= high) & part.valid[:, k - 1]
            if not active.any():
                continue
            rows = np.flatnonzero(active)
            t = np.arange(1, h + 1, dtype=np.float64)[None, :]
            found = before[rows, None] + t
            for o, target, pick in (("best", best, np.maximum), ("worst", worst, np.minimum)):
                first = start[rows, None] if o == "best" else k - h
                terms = found / (first + t)
                total = prefix[o][rows] + (np.cumsum(terms, axis=1)[:, -1] if h else 0.0)
                value = _safe_divide(total, before[rows] + h)
                target[rows] = pick(target[rows], value)
        return worst, best


class _TopR(Metric):
    """A metric of each query's first R items (R its relevant items): a running sum at R,
    divided by R."""

    #: The running sum read at R ([`Ranked.running`][Ranked.running]).
    running: ClassVar[str]

    def width(self, num_relevant: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        return np.asarray(num_relevant, dtype=np.int64)

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        r = ranked.num_relevant
        return _safe_divide(ranked.at(self.running, r, order), r)


@register
class MAPAtR(_TopR):
    family = "map_at_r"
    template = "MAP@R"
    aliases = ("map_at_r", "mean_average_precision_at_r", "map@r")
    peers = (("PML", "mean_average_precision_at_r"), ("OML", "map@R"))
    pml = "mean_average_precision_at_r"
    formula = "(1/R) Σ_{i<R} rel_i · P@(i+1)"
    running = "precision"


@register
class RPrecision(_TopR):
    family = "r_precision"
    template = "R-precision"
    aliases = ("r_precision", "rprecision")
    peers = (("PML", "r_precision"), ("torchmetrics", "RetrievalRPrecision"))
    pml = "r_precision"
    formula = "(relevant items among the first R) / R"
    running = "hits"


@register
class MRR(Metric):
    family = "mrr"
    template = "MRR@{K}"
    name_without_k = "MRR"
    aliases = ("mrr@{K}", "mrr", "mean_reciprocal_rank", "mean_reciprocal_rank@{K}")
    peers = (
        ("PML", "mean_reciprocal_rank (within its k neighbours)"),
        ("torchmetrics", "RetrievalMRR"),
        ("ranx", "mrr"),
    )
    pml = "mean_reciprocal_rank"
    reads = "rank"
    formula = "1 / (r + 1), r the 0-indexed rank of the first relevant item; MRR@K: 0 if r >= K"

    @property
    def pml_name(self) -> str | None:
        return self.pml if self.k is None else None

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        rank = ranked.rank(order)
        found = rank >= 0
        if self.k is not None:
            found &= rank < self.cut
        return np.where(found, 1.0 / (np.where(found, rank, 0) + 1.0), 0.0)


@register
class NDCG(Metric):
    family = "ndcg"
    template = "nDCG@{K}"
    aliases = ("ndcg@{K}", "ndcg_at_{K}")
    peers = (
        ("torchmetrics", "RetrievalNormalizedDCG(top_k=K)"),
        ("ranx", "ndcg@K"),
    )
    formula = "DCG@K / IDCG@K, binary gains, discount 1/log2(i + 2)"

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        ideal = _ideal_dcg(np.minimum(self.cut, ranked.num_relevant))
        return _safe_divide(ranked.at("dcg", self.cut, order), ideal)


@register
class MeanRank(Metric):
    family = "mean_rank"
    template = "MnR"
    aliases = ("mnr", "mean_rank", "meanr", "mean_r")
    peers = (("VSE++", "meanr (1-indexed)"), ("recallkit image_text_metrics", "*_mean_rank"))
    reads = "rank"
    direction = "lower"
    lone_value = None
    value_range = (1.0, math.inf)
    formula = "r + 1, the 1-indexed rank of the first relevant item"

    def values(self, ranked: Ranked, order: str = "rule") -> np.ndarray:
        return ranked.rank(order) + 1.0


@register
class MedianRank(MeanRank):
    family = "median_rank"
    template = "MedR"
    aliases = ("medr", "median_rank", "med_r", "mdr")
    peers = (
        ("VSE++", "medr = floor(median(r)) + 1"),
        ("recallkit image_text_metrics", "*_median_rank"),
    )
    summary = "median"
    formula = "r + 1 per query; the value is floor(median) over queries"

    def summarize(self, values: np.ndarray) -> Any:
        """``floor(median(values))`` over the last axis: with 1-indexed ranks, VSE++'s
        ``floor(median(r)) + 1``.

        >>> MedianRank().summarize(np.array([1.0, 2.0, 5.0, 8.0]))
        3.0
        """
        if values.shape[-1] == 0:
            return math.nan if values.ndim == 1 else np.full(values.shape[:-1], math.nan)
        out = np.floor(np.median(values, axis=-1))
        return float(out) if values.ndim == 1 else out


# ----------------------------------------------------------------------------------------------
# Names.


def _patterns() -> list[tuple[re.Pattern[str], str, bool]]:
    if not _PATTERNS:
        for cls in REGISTRY.values():
            texts = [cls.template, *cls.aliases]
            if cls.name_without_k is not None:
                texts.append(cls.name_without_k)
            for text in texts:
                with_k = "{k}" in text.lower()
                pattern = re.escape(text.lower()).replace(re.escape("{k}"), r"(\d+)")
                _PATTERNS.append((re.compile(f"^{pattern}$"), cls.family, with_k))
    return _PATTERNS


def parse_one(text: str, **parameters: str) -> Metric | None:
    """The metric named ``text`` (a canonical name, an alias, PML's ``precision_at_1``), or
    ``None``. ``parameters`` (``divisor="r"``) go to the metrics that take them."""
    low = text.strip().lower()
    if low == "precision_at_1":
        return Recall(1)
    for pattern, family, with_k in _patterns():
        match = pattern.match(low)
        if match:
            k = int(match.group(1)) if with_k else None
            if with_k and k <= 0:
                return None
            cls = REGISTRY[family]
            return cls(k, **{n: v for n, v in parameters.items() if n in cls.parameters})
    return None


def parse(
    names: Iterable[str] | str, func: str, name: str = "metrics", **parameters: str
) -> tuple[Metric, ...]:
    """The metrics named (canonical names or aliases, case-insensitive), in order, each once.
    An unknown name raises ``ValueError`` naming ``func`` and ``name``.

    >>> [m.name for m in parse(["hit@1", "map_at_r", "R-Precision", "precision_at_1", "mrr"], "f")]
    ['recall@1', 'MAP@R', 'R-precision', 'MRR']
    """
    if isinstance(names, str):
        names = [names]
    try:
        given = list(names)
    except TypeError:
        raise fail(func, name, "a sequence of metric names", type(names).__name__) from None
    if not given:
        raise fail(func, name, "at least one metric name", "none")
    out: list[Metric] = []
    for text in given:
        if not isinstance(text, str):
            raise fail(func, name, "metric names (strings)", repr(text))
        metric = parse_one(text, **parameters)
        if metric is None:
            got = repr(text) + did_you_mean(text, spellings(text))
            raise fail(func, name, f"metric names such as {examples()}", got)
        if metric not in out:
            out.append(metric)
    return tuple(out)


def spellings(text: str = "") -> list[str]:
    """Every valid name and alias, once each whatever its case (the canonical spelling kept);
    a name with K takes the number ``text`` holds (10 when it holds none): the names a misspelt
    ``text`` is compared with.

    >>> spellings("nDGC@5")[:3], "nDCG@5" in spellings("nDGC@5")
    (['recall@5', 'precision@5', 'IR-recall@5'], True)
    """
    found = re.search(r"\d+", text)
    k = found.group(0) if found else "10"
    names = [cls.template for cls in REGISTRY.values()]
    names += [cls.name_without_k for cls in REGISTRY.values() if cls.name_without_k]
    names += ["precision_at_1"] + [a for cls in REGISTRY.values() for a in cls.aliases]
    out: dict[str, str] = {}
    for name in names:
        name = re.sub(r"\{k\}", k, name, flags=re.IGNORECASE)
        out.setdefault(name.lower(), name)
    return list(out.values())


def examples() -> str:
    """One example name of every registered metric, for messages and help."""
    shown = []
    for cls in REGISTRY.values():
        shown.append(cls.name_without_k or cls.template.replace("{K}", "10"))
    return ", ".join(repr(s) for s in shown)


def recall(ks: Sequence[int]) -> tuple[Metric, ...]:
    """recall@K for each K."""
    return tuple(Recall(k) for k in ks)


#: The ranking metrics that accompany recall@K by default (MAP@R and R-precision, as PML and
#: Musgrave et al. 2020 report them).
RANKING = (MAPAtR(), RPrecision())


def default(ks: Sequence[int], ranking: bool = True) -> tuple[Metric, ...]:
    """The default metrics of a benchmark or training-loop evaluation: recall@K for ``ks``,
    then MAP@R and R-precision (unless ``ranking=False``)."""
    return recall(ks) + (RANKING if ranking else ())


def names_of(metrics: Sequence[Metric]) -> list[str]:
    return [m.name for m in metrics]


# ----------------------------------------------------------------------------------------------
# Ranks under other tie orders, and AP's divisor.


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


def ap_divisor(
    divisor: str, k: int, num_relevant: np.ndarray, hits: np.ndarray | None
) -> np.ndarray:
    """AP@K's divisor ``D``: ``min(K, R)`` (``"min_k_r"``), ``R`` (``"r"``) or the hits in the
    top K (``"hits"``), the one rule of the label form and of
    [`average_precision_at_k`][average_precision_at_k]."""
    if divisor == "min_k_r":
        return np.minimum(k, num_relevant)
    if divisor == "r":
        return np.asarray(num_relevant)
    return np.asarray(hits)
