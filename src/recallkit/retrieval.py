"""The label form: a reference item is relevant to a query when it has the query's label.

recall@K, precision@K, IR-recall@K, MAP@K, MAP@R and R-precision (:mod:`recallkit.metrics`)
come from one pass of the engine: each query's first-hit rank and its exact ranked list, read by
every metric asked for. :func:`retrieval_metrics` returns several metrics from that one pass;
:func:`recall_at_k`, :func:`map_at_r`, :func:`r_precision` and :func:`map_at_k` ask for one
family each.

Self-matches are removed only as the caller says: ``query_in_reference=True`` (PML's
convention: ``reference[:n]`` is the query, row for row; checked by value) or
``query_ids``/``reference_ids`` (every reference item whose id equals the query's). Nothing is
inferred from equal vectors or equal labels; but passing the query set itself as the reference
without saying ``query_in_reference`` is an error, since scoring each query against itself is
the most common mistake of the field.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from recallkit import _checks, engine, metrics
from recallkit._codes import dense_codes
from recallkit.metrics import Spec
from recallkit.options import Options, check_flag
from recallkit.result import Result


@dataclass(frozen=True)
class LabelProblem:
    """Validated inputs: the search space, label codes (the positives) and exclusions."""

    space: engine.Space
    positives: engine.LabelPositives
    exclusions: engine.Exclusions | None
    query_in_reference: bool
    options: Options
    query_ids: list[Any] | None = None

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

    @property
    def candidates(self) -> int:
        """Reference items a query is ranked among (K beyond it is clamped)."""
        return self.space.num_reference - int(self.query_in_reference)


def same_rows(query: Any, reference: Any) -> bool:
    """Whether ``query`` and ``reference`` are the same array (one object, or views of the same
    memory with the same shape)."""
    if query is reference:
        return True
    if isinstance(query, torch.Tensor) and isinstance(reference, torch.Tensor):
        return (
            query.device == reference.device
            and query.data_ptr() == reference.data_ptr()
            and query.shape == reference.shape
            and query.stride() == reference.stride()
        )
    if isinstance(query, np.ndarray) and isinstance(reference, np.ndarray):
        return (
            query.shape == reference.shape
            and query.strides == reference.strides
            and query.__array_interface__["data"][0] == reference.__array_interface__["data"][0]
        )
    return False


def _self_match_error(func: str) -> ValueError:
    return ValueError(
        f"The 'query_in_reference' parameter of {func} must be given when the query set is "
        "passed as the reference: pass query_in_reference=True to remove each query's own row "
        "(leave-one-out, as in CUB, Cars196, SOP and iNaturalist), or query_in_reference=False "
        "if the reference is a separate gallery that happens to be this array. Got None (not "
        "given), which would count each query as its own nearest neighbour."
    )


def build(
    func: str,
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    *,
    query_in_reference: bool | None,
    query_ids: Any,
    reference_ids: Any,
    options: Options,
) -> LabelProblem:
    """Validate the label-form arguments of ``func`` and build its problem."""
    same = same_rows(query, reference)
    if query_in_reference is None:
        if same and query_ids is None:
            raise _self_match_error(func)
        query_in_reference = False
    query_in_reference = check_flag(query_in_reference, func, "query_in_reference")
    space = engine.prepare(
        query, reference, options.metric, options.device, func, precision=options.precision,
        query_is_reference=same and query_in_reference,
    )  # fmt: skip
    n, m = space.num_query, space.num_reference
    _checks.check_length(query_labels, n, "query_labels", func, "query")
    _checks.check_length(reference_labels, m, "reference_labels", func, "reference")
    q_codes, r_codes = dense_codes(
        query_labels, reference_labels, ("query_labels", "reference_labels"), func
    )
    pairs: list[engine.Pairs] = []
    if query_in_reference:
        _check_reference_starts_with_query(func, query, reference, space, q_codes, r_codes, same)
        pairs.append(engine.Pairs.diagonal(n))
    if (query_ids is None) != (reference_ids is None):
        missing = "reference_ids" if reference_ids is None else "query_ids"
        raise _checks.fail(func, missing, "given together with the other ids", None)
    codes = None
    plain_ids = None
    if query_ids is not None:
        _checks.check_length(query_ids, n, "query_ids", func, "query")
        _checks.check_length(reference_ids, m, "reference_ids", func, "reference")
        codes = dense_codes(query_ids, reference_ids, ("query_ids", "reference_ids"), func)
        plain_ids = query_ids.tolist() if hasattr(query_ids, "tolist") else list(query_ids)
    exclusions = engine.Exclusions.of(pairs, n, m, codes)
    positives = engine.LabelPositives(q_codes, r_codes)
    return LabelProblem(space, positives, exclusions, query_in_reference, options, plain_ids)


def _check_reference_starts_with_query(
    func: str,
    query: Any,
    reference: Any,
    space: engine.Space,
    q_codes: np.ndarray,
    r_codes: np.ndarray,
    same: bool,
) -> None:
    """``query_in_reference=True`` means ``reference[:n]`` is the query, row for row: checked by
    value (the rows as scored) and by label."""
    n, m = space.num_query, space.num_reference
    if m < n:
        raise _checks.fail(
            func, "reference",
            f"at least as long as the query ({n} rows) when query_in_reference=True", f"{m} rows",
        )  # fmt: skip
    if not same:
        head = _reference_head(reference, n, space)
        rows = space.query.raw
        differ = ~torch.eq(head.to(rows.device, rows.dtype), rows).all(dim=1)
        if bool(differ.any()):
            row = int(torch.nonzero(differ)[0, 0])
            raise _checks.fail(
                func,
                "reference",
                "to begin with the query's rows, value for value, when query_in_reference=True "
                "(pass query_in_reference=False for a separate gallery, or query_ids/"
                "reference_ids to remove items by id)",
                f"reference row {row} differs from query row {row}",
            )
    if not np.array_equal(q_codes, r_codes[:n]):
        row = int(np.nonzero(q_codes != r_codes[:n])[0][0])
        raise _checks.fail(
            func,
            "reference_labels",
            "equal to query_labels on its first len(query) rows when query_in_reference=True",
            f"a different label at row {row}",
        )


def _reference_head(reference: Any, n: int, space: engine.Space) -> torch.Tensor:
    """The first ``n`` reference rows as the engine scores them."""
    if space.single is not None:
        return space.single.data[:n]
    if engine.is_streamed(reference):
        block = np.array(reference[0:n])
        return engine.prepare_rows(torch.from_numpy(block), "reference", "", space.metric,
                                   space.device).raw  # fmt: skip
    heads = []
    for block in space.blocks():
        heads.append(block.data[: max(0, n - block.offset)])
        if block.offset + block.rows >= n:
            break
    return torch.cat(heads)[:n]


def list_widths(specs: Sequence[Spec], num_relevant: np.ndarray, num_reference: int) -> np.ndarray:
    """Per query, the ranked list the metrics read: ``K`` (at most the reference) or ``R``."""
    widths = np.zeros(len(num_relevant), dtype=np.int64)
    for spec in specs:
        if spec.needs == "k":
            widths = np.maximum(widths, min(spec.k, num_reference))
        elif spec.needs == "r":
            widths = np.maximum(widths, num_relevant)
    return widths


class Collector:
    """Per-query values of the metrics ``specs``, filled chunk by chunk from the engine's
    answers, and the :class:`~recallkit.result.Result` they make."""

    def __init__(
        self,
        specs: Sequence[Spec],
        num_relevant: np.ndarray,
        candidates: int,
        divisor: str = "min_k_r",
    ) -> None:
        n = len(num_relevant)
        self.specs = tuple(specs)
        self.num_relevant = num_relevant
        self.candidates = candidates
        self.divisor = divisor
        self.ranks = np.full(n, -1, dtype=np.int64)
        self.values = {s.name: np.full(n, np.nan) for s in specs}
        self.optimistic = {s.name: np.full(n, np.nan) for s in specs}
        self.pessimistic = {s.name: np.full(n, np.nan) for s in specs}

    @property
    def first_hit(self) -> bool:
        return any(s.kind == "recall" for s in self.specs)

    @property
    def lists(self) -> bool:
        return any(s.needs != "rank" for s in self.specs)

    def add(
        self,
        start: int,
        stop: int,
        part: engine.ChunkResult,
        relevance: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """One chunk: its first-hit ranks and tie counts, and the relevance of its ranked lists
        as the tie rule orders them, relevant-first and relevant-last (:func:`relevance`)."""
        r = self.num_relevant[start:stop]
        common = dict(num_relevant=r, candidates=self.candidates, divisor=self.divisor)
        if self.first_hit:
            self.ranks[start:stop] = part.ranks[:, 0]
            low, high = metrics.rank_bounds(
                part.ranks, part.ties_before, part.ties, part.tied_positives
            )
            orders = (part.ranks[:, 0], low[:, 0], high[:, 0])
        for spec in self.specs:
            if spec.kind == "recall":
                args = [{"ranks": x} for x in orders]
            else:
                args = [{"relevant": x} for x in relevance]
            targets = (self.values, self.optimistic, self.pessimistic)
            for arg, target in zip(args, targets, strict=True):
                target[spec.name][start:stop] = metrics.per_query(spec, **arg, **common)

    def result(
        self,
        func: str,
        *,
        lone_queries: str,
        num_reference: int,
        embedding_dim: int,
        query_ids: list[Any] | None = None,
        definitions: dict[str, Any] | None = None,
        info: dict[str, Any] | None = None,
    ) -> Result:
        evaluated = self.num_relevant > 0
        candidates = self.candidates
        ks = tuple(s.k for s in self.specs if s.kind == "recall")
        effective = tuple(min(k, max(candidates, 1)) for k in ks)
        clamped = [s.name for s in self.specs if s.k is not None
                   and s.kind in ("recall", "precision") and s.k > max(candidates, 1)]  # fmt: skip
        if clamped:
            warnings.warn(
                f"{func}: {', '.join(clamped)} {'asks' if len(clamped) == 1 else 'ask'} for more "
                f"than the {candidates} candidates "
                "per query; K is clamped to them (every query with a correct neighbour is a "
                "hit there).",
                UserWarning,
                stacklevel=4,
            )
        if not evaluated.any() and lone_queries == "skip":
            warnings.warn(
                f"{func}: all {len(evaluated)} queries are lone (no reference item has their "
                "label after self-exclusion); every metric is undefined and reported as NaN.",
                RuntimeWarning,
                stacklevel=4,
            )
        means = {k: metrics.mean_over(v, evaluated, lone_queries) for k, v in self.values.items()}
        bounds = {
            name: (
                metrics.mean_over(self.pessimistic[name], evaluated, lone_queries),
                metrics.mean_over(self.optimistic[name], evaluated, lone_queries),
            )
            for name in self.values
        }
        tied = np.zeros(len(evaluated), dtype=bool)
        for name in self.values:
            tied |= evaluated & (self.optimistic[name] != self.pessimistic[name])
        return Result(
            means,
            num_queries=len(evaluated),
            evaluated=evaluated,
            per_query=self.values,
            first_hit_ranks=self.ranks if ks else None,
            ks=ks or None,
            effective_ks=effective or None,
            num_reference=num_reference,
            embedding_dim=embedding_dim,
            bounds=bounds,
            tied=tied,
            query_ids=query_ids,
            definitions=definitions,
            info=info,
        )


def relevance(
    index: np.ndarray,
    score: np.ndarray,
    relevant: np.ndarray,
    tail_index: np.ndarray,
    tail_relevant: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The relevance of ranked lists ``(c, w)`` as the tie rule orders them, and with every
    group of exact ties reordered relevant-first and relevant-last (tails included)."""
    valid = index >= 0
    tail_valid = tail_index >= 0
    opt, pess = metrics.tie_orders(
        score, relevant, valid, (tail_relevant & tail_valid).sum(axis=1), tail_valid.sum(axis=1)
    )
    return relevant, opt, pess


def label_metrics(
    func: str, problem: LabelProblem, specs: Sequence[Spec], divisor: str = "min_k_r"
) -> Result:
    """The metrics ``specs`` of a label problem, from one pass (module docstring)."""
    options = problem.options
    space = problem.space
    n = space.num_query
    num_relevant = problem.num_relevant
    if options.lone_queries == "error" and not (num_relevant > 0).all():
        i = int(np.argmin(num_relevant > 0))
        raise _checks.fail(
            func,
            "query_labels",
            "labels each shared with a reference item (lone_queries='error')",
            f"{n - int((num_relevant > 0).sum())} lone queries, the first at row {i}",
        )
    collector = Collector(specs, num_relevant, problem.candidates, divisor)
    request = engine.Request(
        positives=problem.positives,
        top_k=list_widths(specs, num_relevant, space.num_reference) if collector.lists else None,
        exclusions=problem.exclusions,
        first_hit=collector.first_hit,
    )
    codes, ref = problem.query_codes, problem.reference_codes
    for part in engine.run(space, request, options.chunk_size):
        a, b = part.start, part.stop
        rel = None
        if collector.lists:
            index = part.top_index.cpu().numpy()
            tail = part.tail_index.cpu().numpy()
            rel = relevance(
                index, part.top_score.cpu().numpy(),
                (index >= 0) & (ref[np.maximum(index, 0)] == codes[a:b, None]),
                tail, (tail >= 0) & (ref[np.maximum(tail, 0)] == codes[a:b, None]),
            )  # fmt: skip
        collector.add(a, b, part, rel)
    return collector.result(
        func,
        lone_queries=options.lone_queries,
        num_reference=space.num_reference,
        embedding_dim=space.dim,
        query_ids=problem.query_ids,
        definitions=_definitions(problem),
    )


def _definitions(problem: LabelProblem) -> dict[str, Any] | None:
    if problem.query_in_reference:
        exclusion = "query_in_reference"
        if problem.query_ids is not None:
            exclusion = "query_in_reference+ids"
    elif problem.query_ids is not None:
        exclusion = "ids"
    else:
        exclusion = "none"
    return definitions_of(problem.options.metric, exclusion, problem.options.lone_queries)


def definitions_of(metric: str, exclusion: str, lone_queries: str) -> dict[str, Any] | None:
    """The definition fingerprint of a label-form result (:mod:`recallkit.definitions`)."""
    try:
        from recallkit import definitions
    except ImportError:  # pragma: no cover - the module ships with the package
        return None
    return definitions.definitions(metric, exclusion, lone_queries)


# ----------------------------------------------------------------------------------------------
# Public functions.

_OPTIONS_DOC = """
    Self-matches are excluded only when asked: ``query_in_reference=True`` means
    ``reference[:len(query)]`` is the query, row for row (PML's convention; checked value for
    value), and each query's own row is removed; ``query_ids``/``reference_ids`` remove every
    reference item whose id equals the query's. Passing the query set itself as ``reference``
    without ``query_in_reference`` raises ``ValueError``.
"""


def retrieval_metrics(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    metrics: Sequence[str] = ("recall@1", "MAP@R", "R-precision"),
    *,
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    divisor: str = "min_k_r",
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "auto",
    lone_queries: str = "skip",
) -> Result:
    """Several label-form metrics from one pass of the engine (:mod:`recallkit.metrics`).

    ``metrics`` names them: ``"recall@K"`` (hit@K), ``"precision@K"``, ``"IR-recall@K"``,
    ``"MAP@K"`` (``divisor`` as in :func:`map_at_k`), ``"MAP@R"``, ``"R-precision"``, or their
    aliases (PML's names among them). The first-hit ranks and the ranked lists every metric
    reads are computed once; the result holds each metric's mean, its per-query values
    (``per_query[name]``), the counts, and the tie bounds.

    Options (:class:`recallkit.Options`): ``metric`` (``"cosine"``, ``"dot"``,
    ``"euclidean"``), ``chunk_size``, ``device``, ``precision``, ``lone_queries``
    (``"skip"``: lone queries are left out of the means; ``"zero"``: they count as 0;
    ``"error"``: they raise).
    {options}
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> r = retrieval_metrics(x, x, [0, 0, 1, 1], [0, 0, 1, 1], ["recall@1", "MAP@R"],
    ...                       query_in_reference=True)
    >>> dict(r)
    {'recall@1': 0.5, 'MAP@R': 0.5}
    """
    func = "retrieval_metrics"
    specs = metrics_parse(metrics, func)
    _checks.check_choice(divisor, _DIVISORS, func, "divisor")
    options = Options.of(func, metric=metric, chunk_size=chunk_size, device=device,
                         precision=precision, lone_queries=lone_queries)  # fmt: skip
    problem = build(
        func, query, reference, query_labels, reference_labels,
        query_in_reference=query_in_reference, query_ids=query_ids, reference_ids=reference_ids,
        options=options,
    )  # fmt: skip
    return label_metrics(func, problem, specs, divisor)


retrieval_metrics.__doc__ = retrieval_metrics.__doc__.replace("{options}", _OPTIONS_DOC)
metrics_parse = metrics.parse
_DIVISORS = metrics.DIVISORS


def _one(
    func: str,
    specs: Sequence[Spec],
    args: tuple,
    *,
    query_in_reference: bool | None,
    query_ids: Any,
    reference_ids: Any,
    divisor: str = "min_k_r",
    **options: Any,
) -> Result:
    opts = Options.of(func, **options)
    problem = build(
        func, *args, query_in_reference=query_in_reference, query_ids=query_ids,
        reference_ids=reference_ids, options=opts,
    )  # fmt: skip
    return label_metrics(func, problem, specs, divisor)


def recall_at_k(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    ks: Any = (1, 5, 10),
    *,
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "auto",
    lone_queries: str = "skip",
) -> Result:
    """Recall@K of label-form retrieval: a hit when one of the K nearest shares the label.

    For a query ``q`` with first-hit rank ``r(q)`` (0-indexed rank of its nearest reference
    item with the same label)::

        recall@K = |{q evaluated : r(q) < K}| / |{q evaluated}|

    This is the deep-metric-learning convention (Oh Song et al. 2016, CVPR; Musgrave et al. 2020,
    "A Metric Learning Reality Check"), equal to PML's ``precision_at_1`` at K = 1. It is *not*
    the information-retrieval recall (``"IR-recall@K"`` of :func:`retrieval_metrics`).

    Ranking: scores are cosine similarity, inner product (``metric="dot"``) or negative
    Euclidean distance (``metric="euclidean"``); a GEMM only filters, and candidates within its
    error bound of a decision are re-scored exactly in float64, so ranks do not depend on
    chunking, threads, BLAS, precision or device. On equal scores the lower reference index
    ranks first; ``result.bounds`` and ``result.num_tied`` say what other tie orders would give.
    The rank is counted, never sorted, chunk by chunk: the full n×m matrix is never built.
    {options}
    Queries left with no reference item of their label are lone: excluded from the mean and
    counted in ``num_excluded``; when all are lone the values are NaN and a warning says so
    (``lone_queries`` chooses otherwise). K above the number of candidates is clamped
    (``effective_ks``), with a warning.

    Labels may be integers (of any size, or floats with an integral value), strings, bytes or
    tuples, compared by value; they are mapped to dense codes, never cast to float or string.
    The labels of one call are all of one kind: numbers mixed with strings (``[1, "1"]``) raise
    ``ValueError``, and so do labels given as ``None``, a dict, a set or an iterator.

    Args:
        query: ``(n, d)`` embeddings, torch tensor or numpy array.
        reference: ``(m, d)`` embeddings (a memory map or :class:`recallkit.io.EmbeddingFile`
            is streamed).
        query_labels, reference_labels: one label per row.
        ks: positive integers; the result's keys are ``"recall@K"`` in this order.
        query_in_reference: the first ``n`` reference rows are the queries.
        query_ids, reference_ids: ids whose equality marks a self-match.
        metric, chunk_size, device, precision, lone_queries: :class:`recallkit.Options`.

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> r = recall_at_k(x, x, [0, 1, 1, 0], [0, 1, 1, 0], ks=(1, 2), query_in_reference=True)
    >>> dict(r)
    {'recall@1': 0.0, 'recall@2': 0.5}
    """
    func = "recall_at_k"
    ks = _checks.check_ks(ks, func)
    return _one(
        func, metrics.recall_specs(ks), (query, reference, query_labels, reference_labels),
        query_in_reference=query_in_reference, query_ids=query_ids, reference_ids=reference_ids,
        metric=metric, chunk_size=chunk_size, device=device, precision=precision,
        lone_queries=lone_queries,
    )  # fmt: skip


recall_at_k.__doc__ = recall_at_k.__doc__.replace("{options}", _OPTIONS_DOC)


def r_precision(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    *,
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "auto",
    lone_queries: str = "skip",
) -> Result:
    """R-precision: the fraction of relevant items among the first R, averaged over queries.

    ``R`` is the number of reference items with the query's label (self-matches excluded as
    in :func:`recall_at_k`); lone queries (R = 0) are left out, as in PML. Ties rank the lower
    reference index first. (Musgrave et al. 2020, "A Metric Learning Reality Check".) The result
    holds ``"R-precision"``; ``float(result)`` is its value.

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(r_precision(x, x, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True))
    0.5
    """
    return _one(
        "r_precision", (metrics.Spec("r_precision"),),
        (query, reference, query_labels, reference_labels),
        query_in_reference=query_in_reference, query_ids=query_ids, reference_ids=reference_ids,
        metric=metric, chunk_size=chunk_size, device=device, precision=precision,
        lone_queries=lone_queries,
    )  # fmt: skip


def map_at_r(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    *,
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "auto",
    lone_queries: str = "skip",
) -> Result:
    """MAP@R (Musgrave et al. 2020): mean over queries of ``(1/R) Σ_{i ≤ R} rel(i) · P@i``.

    ``R`` is the number of reference items with the query's label after self-exclusion; lone
    queries are left out. Identical to PML's ``mean_average_precision_at_r`` on the same inputs
    (with ``k="max_bin_count"``), except that ties rank the lower reference index first. The
    result holds ``"MAP@R"``; ``float(result)`` is its value.

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(map_at_r(x, x, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True))
    0.5
    """
    return _one(
        "map_at_r", (metrics.Spec("map_at_r"),), (query, reference, query_labels, reference_labels),
        query_in_reference=query_in_reference, query_ids=query_ids, reference_ids=reference_ids,
        metric=metric, chunk_size=chunk_size, device=device, precision=precision,
        lone_queries=lone_queries,
    )  # fmt: skip


def map_at_k(
    query: Any,
    reference: Any,
    query_labels: Any,
    reference_labels: Any,
    k: int = 10,
    *,
    divisor: str = "min_k_r",
    query_in_reference: bool | None = None,
    query_ids: Any = None,
    reference_ids: Any = None,
    metric: str = "cosine",
    chunk_size: int | None = None,
    device: Any = None,
    precision: str = "auto",
    lone_queries: str = "skip",
) -> Result:
    """Mean AP@K over evaluated queries, label form (:func:`recallkit.metrics.ap_at_k`).

    ``divisor`` is ``"min_k_r"`` (default, a perfect ranking scores 1; CIRCO), ``"r"`` (PML) or
    ``"hits"`` (torchmetrics, OML). Lone queries (R = 0) are left out. K above the reference
    size reads the whole ranking. The result holds ``"MAP@K"``.

    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(map_at_k(x, x, [0, 0, 1, 1], [0, 0, 1, 1], k=2, query_in_reference=True))
    0.75
    """
    func = "map_at_k"
    k = _checks.check_positive_int(k, func, "k")
    _checks.check_choice(divisor, metrics.DIVISORS, func, "divisor")
    return _one(
        func, (metrics.Spec("map_at_k", k),), (query, reference, query_labels, reference_labels),
        query_in_reference=query_in_reference, query_ids=query_ids, reference_ids=reference_ids,
        divisor=divisor, metric=metric, chunk_size=chunk_size, device=device,
        precision=precision, lone_queries=lone_queries,
    )  # fmt: skip
