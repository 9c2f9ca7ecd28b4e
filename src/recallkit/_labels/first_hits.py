"""First-hit ranks read from the ranked lists of the same pass.

A call that asks for each query's first-hit rank (recall@K, MRR, the hit rates) and for ranked
lists as long as its number of relevant items ``R`` (MAP@R, R-precision) would otherwise find
each query's best positive first, then count, in the pass, every item scoring above it. Where
the best positive lies within the query's list, the list already says all of it: its rank is
its position (from 0; the list is in the tie rule's order), and the items of equal exact score
around it, the list's tail included, are its ties. Only queries whose lists hold no relevant
item are counted, in a second pass over those queries alone ([`counted`][counted]).

Whether a call reads its ranks from the lists is decided before its pass ([`worth_it`][worth_it]):
on the CPU, with the reference in memory, at least [`MIN_QUERIES`][MIN_QUERIES] queries, and at
most a [`MISS_LIMIT`][MISS_LIMIT] share of an evenly spaced sample of [`SAMPLE`][SAMPLE] queries
whose first hit lies beyond its list (embeddings early in training rank most positives deep;
those calls count in the one pass, as the counting costs less than a second pass). The choice
changes no value: the fields are those of the count, bit for bit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from recallkit import engine
from recallkit.engine import matrix

#: Fewer queries: the sample's own pass costs about what reading the lists saves.
MIN_QUERIES = 1024
#: Queries in the sample that decides a call's path.
SAMPLE = 32
#: The largest share of the sample whose first hit lies beyond its list that still reads ranks
#: from the lists (each such query is counted again, in a pass of its own).
MISS_LIMIT = 0.125

#: Up to this many pairs, the queries counted again are scored exactly against every reference
#: item and counted on those scores ([`engine.matrix`][recallkit.engine.matrix]), not in a pass.
EXACT_PAIRS = 1 << 18

FIELDS = ("ranks", "ties_before", "ties", "tied_positives")


def worth_it(problem: Any, ask: engine.Request) -> bool:
    """Whether ``problem``'s call reads its first-hit ranks from the lists ``ask`` computes
    (module docstring). The sample's ranks are estimated from its filter scores (a choice of
    path, not a value)."""
    space = problem.space
    if not (ask.lists and ask.first_hit) or space.single is None or space.device.type != "cpu":
        return False
    evaluated = np.flatnonzero(problem.num_relevant > 0)
    if len(evaluated) < max(MIN_QUERIES, SAMPLE):
        return False
    sample = evaluated[np.linspace(0, len(evaluated) - 1, SAMPLE).astype(np.int64)]
    scores = engine.filter_scores(space, sample)
    if problem.exclusions is not None:
        excluded = problem.exclusions.subset(sample)
        if excluded.pairs is not None:
            rows, cols = excluded.pairs.expand(0, SAMPLE, torch.device("cpu"))
            scores[rows.to(scores.device), cols.to(scores.device)] = -torch.inf
        if excluded.has_codes:
            codes = torch.from_numpy(excluded.query_codes[:, None])
            same = (codes >= 0) & (codes == torch.from_numpy(excluded.reference_codes[None, :]))
            scores[same.to(scores.device)] = -torch.inf
    # Each query's best positive, from its label's members (ascending positions by code).
    groups = problem.positives.groups(space.single)
    lo, hi = groups.ranges(problem.positives.query_codes[sample])
    rows, members = groups.expand(lo, hi)
    values = scores.cpu().numpy()
    best = np.full(SAMPLE, -np.inf, dtype=values.dtype)
    np.maximum.at(best, rows, values[rows, members])
    above = (values > best[:, None]).sum(axis=1)
    return float(np.mean(above >= ask.top_k[sample])) <= MISS_LIMIT


def counted(problem: Any, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The first-hit fields of [`engine.ChunkResult`][recallkit.engine.ChunkResult] for queries
    ``rows`` (int64, ascending) of ``problem``, counted in a pass of their own (a few: on their
    exact scores against every reference item)."""
    n = len(rows)
    out = {
        "ranks": np.empty((n, 1), dtype=np.int64),
        "ties_before": np.empty((n, 1), dtype=np.int64),
        "ties": np.empty((n, 1), dtype=np.int64),
        "tied_positives": np.empty(n, dtype=np.int64),
    }
    if not n:
        return out
    positives = problem.positives
    exclusions = problem.exclusions
    ask = engine.Request(
        positives=engine.LabelPositives(positives.query_codes[rows], positives.reference_codes),
        exclusions=None if exclusions is None else exclusions.subset(rows),
    )
    space = problem.space
    if n * space.num_reference <= EXACT_PAIRS:  # a few queries: every pair scored exactly
        parts = matrix.run(engine.exact_rows(space, rows), ask, problem.options)
    else:
        parts = engine.run(space.subset(rows), ask)
    for part in parts:
        for name in FIELDS:
            out[name][part.start : part.stop] = np.asarray(getattr(part, name))
    return out


def read(
    problem: Any, start: int, part: engine.ChunkResult, lists: tuple[np.ndarray, ...]
) -> engine.ChunkResult:
    """``part`` (queries ``start:start + c``, asked for lists only) with its first-hit fields
    read from its ``lists`` (``(index, score, relevant, tail_index, tail_relevant)``, the
    chunk's lists as [`form.chunk_lists`][recallkit._labels.form.chunk_lists] gives them), and
    counted for the queries whose lists hold no relevant item."""
    index, score, relevant, tail_index, tail_relevant = lists
    tail_score = part.tail_score.cpu().numpy()  # as chunk_lists reads the lists
    c, width = index.shape
    num_relevant = problem.num_relevant[start : start + c]
    rows = np.arange(c)
    at = np.argmax(relevant, axis=1) if width else np.zeros(c, dtype=np.int64)
    found = relevant[rows, at] if width else np.zeros(c, dtype=bool)
    fields = {
        "ranks": np.where(found, at, -1)[:, None],
        "ties_before": np.zeros((c, 1), dtype=np.int64),
        "ties": np.zeros((c, 1), dtype=np.int64),
        "tied_positives": np.zeros(c, dtype=np.int64),
    }
    if width:
        # Ties only where an equal score lies beside the item (the lists are in score order)
        # or in the tail (every item tied with the k-th).
        best = score[rows, at]
        tied = (at > 0) & (score[rows, np.maximum(at - 1, 0)] == best)
        tied |= (at + 1 < width) & (score[rows, np.minimum(at + 1, width - 1)] == best)
        if tail_index.shape[1]:
            tied |= (tail_index[:, 0] >= 0) & (tail_score[:, 0] == best)
        t = np.flatnonzero(found & tied)
        if len(t):
            group = (index[t] >= 0) & (score[t] == best[t, None])
            tail_group = (tail_index[t] >= 0) & (tail_score[t] == best[t, None])
            size = group.sum(axis=1) + tail_group.sum(axis=1)
            hits = (group & relevant[t]).sum(axis=1) + (tail_group & tail_relevant[t]).sum(axis=1)
            fields["ties_before"][t, 0] = at[t] - np.argmax(group, axis=1)
            fields["ties"][t, 0] = size - 1
            fields["tied_positives"][t] = hits - 1
    missing = np.flatnonzero(~found & (num_relevant > 0))
    if len(missing):
        again = counted(problem, start + missing)
        for name in FIELDS:
            fields[name][missing] = again[name]
    return replace(part, **fields)
