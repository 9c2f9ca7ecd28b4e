"""The label form, one request and one pass: validated inputs, the engine's pass, the result.

A reference item is relevant to a query when it has the query's label and is not excluded (the
query's own row with ``query_in_reference=True``; every item with the query's id with
``query_ids``/``reference_ids``). [`build`][build] validates the inputs once and makes a
[`Problem`][Problem] (the prepared space, the labels as codes, the exclusions, each query's ``R``
and candidates ``C``); [`evaluate`][evaluate] asks the engine, in one pass, for what every metric
needs (first-hit ranks, ranked lists as long as the longest any metric reads) and fills a
[`Values`][Values] with each metric's per-query values and tie bounds (``recallkit.metrics``);
[`Values.result`][Values.result] makes the [`Result`][recallkit.result.Result]. Sharded evaluation
([`recallkit.sharded`][recallkit.sharded]) fills the same [`Values`][Values] from its merged chunks.

Self-matches are removed only as the caller says. When the caller says neither
``query_in_reference`` nor ids and the reference begins with the query's rows, value for value
(the same array, a copy, the same embeddings computed or loaded twice), the call is refused
with the one-line fix: each query would otherwise find itself first. The check stops at the
first differing value.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from recallkit import _averaging as averaging
from recallkit import engine
from recallkit._inputs import checks as _checks
from recallkit._inputs.codes import dense_codes
from recallkit._labels import first_hits
from recallkit.exceptions import LoneQueriesWarning, RecallkitWarning, Text, fail, warn
from recallkit.metrics import Metric, Ranked, Recall, rank_bounds
from recallkit.options import Options, changed_values, check_flag
from recallkit.result import Result


@dataclass(frozen=True)
class Problem:
    """Validated label-form inputs: the space, positives, exclusions and per-query counts."""

    space: engine.Space
    positives: engine.LabelPositives
    exclusions: engine.Exclusions | None
    query_in_reference: bool
    options: Options
    num_relevant: np.ndarray
    candidates: np.ndarray
    query_ids: list[Any] | None = None
    query_labels: list[Any] | None = None

    @property
    def self_exclusion(self) -> str:
        """The self-exclusion rule's name in the definitions record."""
        if self.query_in_reference:
            return "query_in_reference+ids" if self.query_ids is not None else "query_in_reference"
        return "ids" if self.query_ids is not None else "none"


def same_memory(query: Any, reference: Any) -> bool:
    """Whether ``query`` and ``reference`` are one array: one object, or views of the same
    memory (numpy and torch alike) with the same shape and strides."""
    if query is reference:
        return True
    a, b = _memory(query), _memory(reference)
    return a is not None and a == b


def _memory(x: Any) -> tuple[Any, ...] | None:
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided or x.device.type == "meta":
            return None
        size = x.element_size()
        return (x.device.type, x.data_ptr(), tuple(x.shape), tuple(s * size for s in x.stride()))
    if isinstance(x, np.ndarray):
        return ("cpu", x.__array_interface__["data"][0], x.shape, x.strides)
    return None


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
) -> Problem:
    """Validate the label-form arguments of ``func`` and build its [`Problem`][Problem]."""
    same = same_memory(query, reference)
    stated = query_in_reference is not None or query_ids is not None
    if query_in_reference is not None:
        query_in_reference = check_flag(query_in_reference, func, "query_in_reference")
    space = engine.prepare(
        query, reference, options, func, query_is_reference=same and bool(query_in_reference)
    )
    n, m = space.num_query, space.num_reference
    _checks.check_length(query_labels, n, "query_labels", func, "query")
    _checks.check_length(reference_labels, m, "reference_labels", func, "reference")
    if (query_ids is None) != (reference_ids is None):
        missing = "reference_ids" if reference_ids is None else "query_ids"
        raise fail(func, missing, "given together with the other ids", None)
    if not stated and m >= n and (same or starts_with_query(space, reference, same)):
        raise self_match_error(func, same)
    query_in_reference = bool(query_in_reference)
    q_codes, r_codes = dense_codes(
        query_labels, reference_labels, ("query_labels", "reference_labels"), func
    )
    pairs: list[engine.Pairs] = []
    if query_in_reference:
        check_reference_starts_with_query(func, reference, space, q_codes, r_codes, same)
        pairs.append(engine.Pairs.diagonal(n))
    codes = None
    plain_ids = None
    if query_ids is not None:
        _checks.check_length(query_ids, n, "query_ids", func, "query")
        _checks.check_length(reference_ids, m, "reference_ids", func, "reference")
        codes = dense_codes(query_ids, reference_ids, ("query_ids", "reference_ids"), func)
        plain_ids = plain_list(query_ids)
    exclusions = engine.Exclusions.of(pairs, n, m, codes)
    positives = engine.LabelPositives(q_codes, r_codes)
    num_relevant, candidates = positives.counts(exclusions)
    return Problem(
        space,
        positives,
        exclusions,
        query_in_reference,
        options,
        num_relevant,
        candidates,
        plain_ids,
        plain_list(query_labels),
    )


def plain_list(values: Any) -> list[Any]:
    """``values`` as a list of plain Python values (numpy and torch scalars unwrapped)."""
    if hasattr(values, "tolist"):
        return list(values.tolist())
    return [v.item() if isinstance(v, np.generic) else v for v in values]


def self_match_error(func: str, same: bool, name: str = "query_in_reference") -> ValueError:
    """The refusal of a reference that begins with the queries when ``name`` was not given."""
    what = "the query set itself" if same else "an array whose first rows equal the queries"
    ids = (
        "; with query_ids/reference_ids the ids say which items are the same"
        if name == "query_in_reference"
        else ""
    )
    return fail(
        func,
        name,
        Text(
            "given when the reference is " + what + ": pass {loo} to remove each query's own "
            "row (leave-one-out, as in CUB, Cars196, SOP and iNaturalist), or {keep} to keep "
            "the copies as gallery items" + ids,
            loo=(name, True),
            keep=(name, False),
        ),
        "None (not given), which would count each query as its own nearest neighbour",
    )


def starts_with_query(space: engine.Space, reference: Any, same: bool) -> bool:
    """Whether the reference's first ``len(query)`` rows equal the queries, value for value
    (as the engine scores them). Stops at the first row that differs."""
    n = space.num_query
    rows = space.query.raw
    head = _reference_head(reference, min(1, n), space)
    if not bool(torch.equal(head.to(rows.device, rows.dtype), rows[: min(1, n)])):
        return False
    return bool(torch.equal(_reference_head(reference, n, space).to(rows.device, rows.dtype), rows))


def check_reference_starts_with_query(
    func: str,
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
        raise fail(
            func,
            "reference",
            Text(
                f"at least as long as the query ({n} rows) with {{qir}}",
                qir=("query_in_reference", True),
            ),
            f"{m} rows",
        )
    if not same:
        rows = space.query.raw
        head = _reference_head(reference, n, space)
        differ = ~torch.eq(head.to(rows.device, rows.dtype), rows).all(dim=1)
        if bool(differ.any()):
            row = int(torch.nonzero(differ)[0, 0])
            raise fail(
                func,
                "reference",
                Text(
                    "the query's rows followed by the gallery, value for value, with {qir} "
                    "(pass {sep} for a separate gallery, or {ids} to remove items by id)",
                    qir=("query_in_reference", True),
                    sep=("query_in_reference", False),
                    ids="query_ids",
                ),
                f"reference row {row} differs from query row {row}",
            )
    if not np.array_equal(q_codes, r_codes[:n]):
        row = int(np.nonzero(q_codes != r_codes[:n])[0][0])
        raise fail(
            func,
            "reference_labels",
            Text(
                "equal to query_labels on its first len(query) rows with {qir}",
                qir=("query_in_reference", True),
            ),
            f"a different label at row {row}",
        )


def _reference_head(reference: Any, n: int, space: engine.Space) -> torch.Tensor:
    """The first ``n`` reference rows as the engine scores them."""
    if space.single is not None:
        return space.single.data[:n]
    if engine.is_streamed(space.streamed):  # the pinned file (never the mapping) it streams
        block = np.array(space.streamed[0:n])
        return engine.prepare_rows(
            torch.from_numpy(_checks.real_array(block, "reference", "")),
            "reference",
            "",
            space.metric,
            space.device,
        ).raw
    heads = []
    for block in space.blocks():
        heads.append(block.data[: max(0, n - block.offset)])
        if block.offset + block.rows >= n:
            break
    return torch.cat(heads)[:n]


# ----------------------------------------------------------------------------------------------
# What the engine is asked, and what it answers.


def request(
    metrics: Sequence[Metric],
    positives: Any,
    exclusions: engine.Exclusions | None,
    num_relevant: np.ndarray,
    candidates: np.ndarray,
    keep: int = 0,
    exact_scores: bool = True,
) -> engine.Request:
    """One engine request for every metric: first-hit ranks if a metric reads them, ranked lists
    as long as the longest any metric reads per query (at least ``keep``, for display).
    ``exact_scores=False``: the metrics read the lists' order and ties alone, in this process
    ([`engine.Request`][recallkit.engine.Request]); and, without lists kept for display
    (``keep``), their relevance alone (``by_relevance``)."""
    widths = np.zeros(len(num_relevant), dtype=np.int64)
    for metric in metrics:
        widths = np.maximum(widths, metric.width(num_relevant, candidates))
    if keep:
        widths = np.maximum(widths, np.minimum(keep, candidates))
    lists = keep > 0 or any(m.reads == "list" for m in metrics)
    return engine.Request(
        positives=positives,
        top_k=widths if lists else None,
        exclusions=exclusions,
        first_hit=any(m.reads == "rank" for m in metrics),
        exact_scores=exact_scores,
        by_relevance=not exact_scores and not keep,
    )


def ranked(
    part: engine.ChunkResult,
    num_relevant: np.ndarray,
    candidates: np.ndarray,
    lists: tuple[np.ndarray, ...] | None,
) -> Ranked:
    """A chunk's [`Ranked`][recallkit.metrics.Ranked] from the engine's answer: first-hit ranks
    (with their tie bounds) and, when asked, ``lists = (index, score, relevant, tail_index,
    tail_relevant)``."""
    out: dict[str, Any] = {}
    if part.ranks is not None:
        best, worst = rank_bounds(part.ranks, part.ties_before, part.ties, part.tied_positives)
        out.update(first=part.ranks[:, 0], first_best=best[:, 0], first_worst=worst[:, 0])
    if lists is not None:
        index, score, relevant, tail_index, tail_relevant = lists
        tail_valid = tail_index >= 0
        out.update(
            relevant=relevant,
            valid=index >= 0,
            score=score,
            tail_count=tail_valid.sum(axis=1),
            tail_relevant=(tail_relevant & tail_valid).sum(1),
        )
    return Ranked(num_relevant, candidates, **out)


def chunk_lists(
    part: engine.ChunkResult, query_codes: np.ndarray, reference_codes: np.ndarray
) -> tuple[np.ndarray, ...]:
    """A chunk's ranked lists as numpy, with their relevance by label code."""
    index = part.top_index.cpu().numpy()
    tail = part.tail_index.cpu().numpy()
    codes = query_codes[:, None]
    # The reference codes and, read at the padding's index -1, a code no query has.
    lowest = min(reference_codes.min(initial=0), query_codes.min(initial=0))
    padded = np.append(reference_codes, np.int64(lowest) - 1)
    return (
        index,
        part.top_score.cpu().numpy(),
        np.take(padded, index) == codes,
        tail,
        np.take(padded, tail) == codes,
    )


#: A chunk of at least this many queries computes its values in two halves at once, the first
#: on a thread of its own: numpy's array operations release the GIL, and the halves took
#: 0.57–0.63× the time of the whole at CUB and Cars scale (recall@K, MAP@R, R-precision).
HALVES_ROWS = 2048
_HELPER: list[ThreadPoolExecutor] = []
_HELPER_LOCK = threading.Lock()


def _helper() -> ThreadPoolExecutor:
    """The thread that computes a chunk's first half ([`Values.add`][Values.add])."""
    with _HELPER_LOCK:
        if not _HELPER:
            _HELPER.append(ThreadPoolExecutor(1, thread_name_prefix="recallkit-values"))
        return _HELPER[0]


class Values:
    """Per-query values of ``metrics``, and their worst and best under the other tie orders,
    filled chunk by chunk; and the [`Result`][recallkit.result.Result] they make."""

    def __init__(
        self, metrics: Sequence[Metric], num_relevant: np.ndarray, candidates: np.ndarray
    ) -> None:
        n = len(num_relevant)
        self.metrics = tuple(metrics)
        self.num_relevant = np.asarray(num_relevant, dtype=np.int64)
        self.candidates = np.asarray(candidates, dtype=np.int64)
        self.ranks = np.full(n, -1, dtype=np.int64)
        self.value = {m.name: np.full(n, np.nan) for m in self.metrics}
        self.worst = {m.name: np.full(n, np.nan) for m in self.metrics}
        self.best = {m.name: np.full(n, np.nan) for m in self.metrics}

    @property
    def first_hit(self) -> bool:
        return any(m.reads == "rank" for m in self.metrics)

    def add(self, start: int, stop: int, chunk: Ranked) -> None:
        """Queries ``start:stop`` from their ranked relevance; a chunk of at least
        [`HALVES_ROWS`][HALVES_ROWS] queries in two halves at once (each query's values are its
        own: the same values)."""
        c = stop - start
        if c < HALVES_ROWS or torch.get_num_threads() < 2:
            self._add(start, stop, chunk)
            return
        h = c // 2
        first = _helper().submit(self._add, start, start + h, chunk.take(slice(0, h)))
        try:
            self._add(start + h, stop, chunk.take(slice(h, c)))
        finally:
            wait([first])
        first.result()

    def _add(self, start: int, stop: int, chunk: Ranked) -> None:
        if chunk.first is not None:
            self.ranks[start:stop] = chunk.first
        lone = chunk.num_relevant <= 0
        tied_rank = None if chunk.first is None else chunk.first_best != chunk.first_worst
        tied_list = None
        if chunk.width and chunk.score is not None:
            tied_list = chunk.tied_lists()
        for metric in self.metrics:
            value = metric.values(chunk)
            worst, best = value.copy(), value.copy()
            tied = tied_rank if metric.reads == "rank" else tied_list
            if tied is not None and tied.any():
                low, high = metric.bounds(chunk, tied)
                worst[tied], best[tied] = low, high
            for target, v in ((self.value, value), (self.worst, worst), (self.best, best)):
                target[metric.name][start:stop] = np.where(lone, np.nan, v)

    def result(
        self,
        func: str,
        options: Options,
        *,
        exclusion: str,
        classes: np.ndarray,
        num_reference: int,
        embedding_dim: int,
        parameter: str = "metrics",
        query_ids: list[Any] | None = None,
        query_labels: list[Any] | None = None,
        info: dict[str, Any] | None = None,
    ) -> Result:
        """The result under ``options``: each metric's summary of the queries that count
        (``lone_queries``), over queries or classes (``average``; ``classes`` holds each query's
        label code), the tie bounds, the counts and the definitions (``exclusion`` names the
        self-exclusion rule); a warning when K exceeds some query's candidates (naming
        ``parameter``) or when every query is lone."""
        evaluated = self.num_relevant > 0
        clamped = [
            m.name
            for m in self.metrics
            if m.clamps and m.k is not None and bool((self.candidates[evaluated] < m.k).any())
        ]
        if clamped:
            warn_clamped(func, clamped, self.candidates[evaluated], parameter)
        if not evaluated.any() and options.lone_queries == "skip":
            warn(
                LoneQueriesWarning(
                    func,
                    f"all {len(evaluated)} queries are lone (no reference "
                    "item has their label after self-exclusion); every metric is undefined and "
                    "reported as NaN.",
                )
            )

        def summary(metric: Metric, values: np.ndarray) -> float:
            return averaging.summarize(metric, values, evaluated, options, classes)

        means, bounds = {}, {}
        tied = np.zeros(len(evaluated), dtype=bool)
        for metric in self.metrics:
            name = metric.name
            value, worst, best = self.value[name], self.worst[name], self.best[name]
            means[name] = summary(metric, value)
            differ = evaluated & (worst != best)
            tied |= differ
            if differ.any():
                bounds[name] = (summary(metric, worst), summary(metric, best))
            else:
                bounds[name] = (means[name], means[name])
        ks = tuple(m.k for m in self.metrics if isinstance(m, Recall))
        top = int(self.candidates.max(initial=0))
        return Result(
            means,
            num_queries=len(evaluated),
            evaluated=evaluated,
            per_query=self.value,
            first_hit_ranks=self.ranks if self.first_hit else None,
            ks=ks or None,
            effective_ks=tuple(min(k, max(top, 1)) for k in ks) or None,
            num_reference=num_reference,
            embedding_dim=embedding_dim,
            bounds=bounds,
            tied=tied,
            query_ids=query_ids,
            query_labels=query_labels,
            definitions=definitions_of(options, exclusion, self.metrics),
            info=info,
        )


def warn_clamped(func: str, names: Sequence[str], candidates: np.ndarray, parameter: str) -> None:
    """K above some queries' candidates: clamped per query, said once."""
    low, high = int(candidates.min()), int(candidates.max())
    where = (
        f"the {low} candidates per query"
        if low == high
        else (f"the candidates of some queries (as few as {low})")
    )
    verb = "asks" if len(names) == 1 else "ask"
    text = f"{', '.join(names)} {verb} for more than {where}; K is clamped to each query's."
    warn(RecallkitWarning(func, text, parameter))


def evaluate(
    func: str,
    problem: Problem,
    metrics: Sequence[Metric],
    *,
    parameter: str = "metrics",
    keep: int = 0,
) -> tuple[Result, np.ndarray | None]:
    """The metrics of a problem from one pass, and (``keep > 0``) each query's top-``keep``
    reference indices from the same pass (``-1`` beyond its candidates)."""
    options = problem.options
    space = problem.space
    n = space.num_query
    num_relevant = problem.num_relevant
    averaging.check(metrics, options.lone_queries, func)
    if options.lone_queries == "error" and not (num_relevant > 0).all():
        i = int(np.argmin(num_relevant > 0))
        lone = n - int((num_relevant > 0).sum())
        raise fail(
            func,
            "query_labels",
            Text(
                "labels each shared with a reference item, as {policy} asks",
                policy=("lone_queries", "error"),
            ),
            f"{lone} lone {'query' if lone == 1 else 'queries'}, the first at row {i}",
        )
    values = Values(metrics, num_relevant, problem.candidates)
    ask = request(
        metrics,
        problem.positives,
        problem.exclusions,
        num_relevant,
        problem.candidates,
        keep,
        exact_scores=False,
    )
    from_lists = first_hits.worth_it(problem, ask)
    if from_lists:  # the first-hit ranks from the lists ([`first_hits`][first_hits])
        ask = replace(ask, first_hit=False)
    codes, ref = problem.positives.query_codes, problem.positives.reference_codes
    kept = np.full((n, keep), -1, dtype=np.int64) if keep else None
    for part in engine.run(space, ask):
        a, b = part.start, part.stop
        lists = chunk_lists(part, codes[a:b], ref) if ask.lists else None
        if from_lists:
            part = first_hits.read(problem, a, part, lists)
        if kept is not None:
            width = min(keep, lists[0].shape[1])
            kept[a:b, :width] = lists[0][:, :width]
        values.add(a, b, ranked(part, num_relevant[a:b], problem.candidates[a:b], lists))
        del part, lists  # the next chunk is computed without this one's lists
    result = values.result(
        func,
        options,
        exclusion=problem.self_exclusion,
        classes=codes,
        num_reference=space.num_reference,
        embedding_dim=space.dim,
        parameter=parameter,
        query_ids=problem.query_ids,
        query_labels=problem.query_labels,
    )
    return result, kept


def definitions_of(
    options: Options, exclusion: str, metrics: Sequence[Metric] = ()
) -> dict[str, Any]:
    """The definitions record of a label-form result (``recallkit.runfiles.definitions``): the
    similarity and ``lone_queries`` of ``options``, its other value-changing options that are
    not at their default ([`recallkit.options.changed_values`][recallkit.options.changed_values]:
    ``average``), the self-exclusion rule, and the parameters of ``metrics`` that are not their
    defaults."""
    from recallkit.runfiles import definitions

    parameters = {m.name: m.changed_parameters for m in metrics if m.changed_parameters}
    return definitions.definitions(
        options.metric,
        exclusion,
        options.lone_queries,
        changed=changed_values(options),
        metric_parameters=parameters,
    )


# ----------------------------------------------------------------------------------------------
# Sharded evaluation: one broadcast chunk of queries against this process's reference block.


def shard_chunk(
    reducer: engine.Reducer,
    space: engine.Space,
    reference_labels: np.ndarray,
    reference_ids: np.ndarray | None,
    total_reference: int,
    chunk: engine.Rows,
    meta: np.ndarray,
    leave_one_out: bool,
    metrics: Sequence[Metric],
    merge: Any,
) -> Values:
    """One broadcast chunk's per-query values over every process's reference.

    ``meta`` holds the chunk's labels, dataset indices and ids (``-1``: none); the reference
    block's rows carry their dataset indices. Leave-one-out removes each query's own row (by
    dataset index); ids remove the items sharing the query's. ``R`` and ``C`` are summed across
    processes by ``reducer``; ``merge(part, top_k)`` (communication) returns the chunk's global
    ranked lists ``(index, score, relevant, tail_index, tail_relevant)``.
    """
    c_labels, c_index, c_ids = meta
    c = len(c_labels)
    block = space.single
    positives = engine.LabelPositives(c_labels, reference_labels)
    pairs = []
    if leave_one_out:  # the own row, by dataset index (at most one per process)
        own = engine.Pairs.from_codes(c_index, block.global_index.cpu().numpy())
        pairs.append(engine.Pairs(own.indptr, block.global_index.cpu()[own.indices], c))
    codes = (c_ids, reference_ids) if reference_ids is not None else None
    bound = int(block.global_index.max()) + 1 if block.rows else 1
    exclusions = engine.Exclusions.of(pairs, c, bound, codes)
    local = np.stack(positives.counts(exclusions, block))
    num_relevant, candidates = reducer.reduce("sum", torch.from_numpy(local)).cpu().numpy()
    values = Values(metrics, num_relevant, candidates)
    ask = request(metrics, positives, exclusions, num_relevant, candidates)
    part = engine.run_chunk(space, chunk, ask, reducer)
    lists = merge(part, ask.top_k, c_labels) if ask.lists else None
    values.add(0, c, ranked(part, num_relevant, candidates, lists))
    return values


def joined(parts: Sequence[Values], order: np.ndarray) -> Values:
    """The values of several chunks, concatenated and reordered by ``order``."""
    metrics = parts[0].metrics
    out = Values(
        metrics,
        np.concatenate([p.num_relevant for p in parts])[order],
        np.concatenate([p.candidates for p in parts])[order],
    )
    out.ranks[:] = np.concatenate([p.ranks for p in parts])[order]
    for name in ("value", "worst", "best"):
        for metric in metrics:
            joined_ = np.concatenate([getattr(p, name)[metric.name] for p in parts])[order]
            getattr(out, name)[metric.name][:] = joined_
    return out
