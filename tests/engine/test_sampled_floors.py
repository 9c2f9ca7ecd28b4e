"""The ranked lists' running top-k floors (``recallkit.engine.consumers``): a floor raised from a
tile taken for a sample of the block (``tiles_sample``, ``top_rows``'s ``columns``), checked once
the pass ends, and the positives offered before the pass only where they pay (``seeds_pay``).
Values against the float64 brute force of tests/brute.py, with the paths forced both ways."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import recallkit
from recallkit.engine import consumers, cpu
from recallkit.engine import cpu_kernels as kernels
from recallkit.engine.pairs import LabelPositives, Pairs
from tests import brute

NAMES = ["recall@1", "recall@4", "MAP@R", "R-precision"]
TILE = 256  # small tiles: a thousand items make four


class _Block:
    """What ``tiles_sample`` reads of a block: its rows and its place."""

    def __init__(self, rows: int) -> None:
        self.rows, self.offset, self.global_index = rows, 0, None


def _tiles_sample(codes, tile):
    block = _Block(len(codes))
    return consumers.tiles_sample(LabelPositives(codes[:1], np.asarray(codes)), block, tile)


def test_tiles_sample_by_hand():
    """Codes 0 0 1 1 0 0 1 1 in tiles of 4: each label has 4 items, 12 ordered pairs, 4 of them
    in one tile (2 · 1 in each of its two tiles); 8 of the 24 pairs against 1.5 · 24 / 2 = 18:
    a sample. Sorted (0 0 0 0 1 1 1 1): all 24 pairs share a tile: not one."""
    assert _tiles_sample(np.array([0, 0, 1, 1, 0, 0, 1, 1]), 4)
    assert not _tiles_sample(np.array([0, 0, 0, 0, 1, 1, 1, 1]), 4)
    # Codes 0 0 0 1 | 0 1 1 1: 3 · 2 pairs of each label in one tile, 12 of the 24.
    assert _tiles_sample(np.array([0, 0, 0, 1, 0, 1, 1, 1]), 4)
    assert not _tiles_sample(np.array([0, 0, 1, 1, 0, 0, 1, 1]), 8)  # one tile: nothing to do
    assert not _tiles_sample(np.array([-1, -1, -1, -1, -1, -1]), 2)  # no labelled item
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(20), 30)
    assert _tiles_sample(rng.permutation(labels), TILE)
    assert not _tiles_sample(labels, TILE)
    assert not consumers.tiles_sample(Pairs.diagonal(8), _Block(8), 4)  # listed positives


def _clusters(seed: int, n: int, classes: int, noise: float, d: int = 16):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    centres = rng.standard_normal((classes, d))
    x = (centres[labels] + noise * rng.standard_normal((n, d))).astype(np.float32)
    x[rng.integers(0, n, 8)] = x[3]  # equal rows: ties at every score they take
    return x, labels


def _check(x, labels, metric="cosine"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = recallkit.retrieval_metrics(
            x, x, labels, labels, NAMES, metric=metric, query_in_reference=True
        )
    n = len(x)
    s = brute.fixed_order_scores64(x, x, metric)
    excluded = brute.excluded_sets(n, n, query_in_reference=True)
    ranks = brute.first_hit_ranks(s, labels, labels, excluded)
    assert np.array_equal(got.first_hit_ranks, ranks)
    for k in (1, 4):
        want = np.where(ranks >= 0, (ranks < k).astype(float), np.nan)
        assert np.array_equal(got.per_query[f"recall@{k}"], want, equal_nan=True)
    top = brute.top_r_metrics(s, labels, labels, excluded)
    assert np.array_equal(got.per_query["R-precision"], [t[1] for t in top], equal_nan=True)
    assert np.array_equal(got.per_query["MAP@R"], [t[2] for t in top], equal_nan=True)


@pytest.fixture
def watched(monkeypatch):
    """Small tiles; every Top's ``sample_of`` and every row its pass computed again."""
    monkeypatch.setattr(cpu, "TILE", TILE)
    seen = {"sampled": [], "redone": 0}
    init, row_scores = consumers.Top.__init__, cpu._row_scores

    def top(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen["sampled"].append(self.sample_of)

    def again(space, qf, block, excluded, rows):
        seen["redone"] += len(rows)
        return row_scores(space, qf, block, excluded, rows)

    monkeypatch.setattr(consumers.Top, "__init__", top)
    monkeypatch.setattr(cpu, "_row_scores", again)
    return seen


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("offered", [True, False])
def test_floors_from_a_sample_give_the_definition(backend, metric, offered, watched, monkeypatch):
    """Items in no order of their labels: each row's first tile is taken for a sample (the
    floor rises to a likely bound), and the values are the brute force's, with the positives
    offered before the pass (skipped in it) or not."""
    monkeypatch.setenv("RECALLKIT_BACKEND", backend)
    monkeypatch.setattr(cpu, "seeds_pay", lambda *args: offered)
    for seed in range(2):
        x, labels = _clusters(seed, 1000, 20, 1.6)
        _check(x, labels, metric)
    if backend == "numba":  # the torch back end has no tile pass
        assert watched["sampled"] and all(s == 1000 for s in watched["sampled"])


@pytest.mark.parametrize("few", [0, 10**9])
def test_a_sample_that_misleads_is_caught(watched, monkeypatch, few):
    """Items listed class by class, taken for a sample all the same: a row's first tile holds
    its own class, its floor rises too high, and the check at the pass's end computes those
    rows again (their scores on the workers, or, ``few`` rows or fewer, in one product:
    ``cpu.FEW_ROWS``) and puts their lists in their places; the values are still the brute
    force's. Without the guard's refusal (``SPREAD``) this order would mislead every call."""
    monkeypatch.setattr(cpu, "FEW_ROWS", few)
    x, labels = _clusters(5, 1000, 20, 1.6)
    order = np.argsort(labels, kind="stable")
    x, labels = np.ascontiguousarray(x[order]), labels[order]
    monkeypatch.setattr(consumers, "SPREAD", 1e9)
    monkeypatch.setattr(cpu, "seeds_pay", lambda *args: False)  # floors from the tiles alone
    _check(x, labels)
    assert watched["sampled"] == [1000] and watched["redone"] > 0
    # The guard: the same call in label order takes no sample, and no row is computed again.
    monkeypatch.setattr(consumers, "SPREAD", 1.5)
    watched["sampled"].clear()
    watched["redone"] = 0
    _check(x, labels)
    assert watched["sampled"] == [0] and watched["redone"] == 0


def test_sampled_raise_stops_near_its_share():
    """``top_rows`` with ``columns``: a row of 1,000 distinct values, k = 200 of a block of
    10,000 columns (μ = 200 · 1000 / 10000 = 20 of the row's top k in the tile on average),
    raises its floor until ⌈20 + 4 √20⌉ + 2 = 40 of them (at most RAISE_CLOSE more) are at or
    above it plus the slack; without, until 200."""
    rng = np.random.default_rng(1)
    n, width, k = 4, 1000, 200
    tile = rng.permutation(np.arange(width * n, dtype=np.float32)).reshape(n, width) / 1024
    # The raise's first range, every RAISE_STRIDE-th value, too narrow: row 1's are its largest
    # (fewer than k items at or above their smallest), row 2's its smallest (k or more above
    # their largest).
    every = np.arange(0, width, kernels.RAISE_STRIDE)
    for r, largest in ((1, True), (2, False)):
        ranked = np.sort(tile[r])[::-1] if largest else np.sort(tile[r])
        rest = np.setdiff1d(np.arange(width), every)
        tile[r, every] = ranked[: len(every)]
        tile[r, rest] = rng.permutation(ranked[len(every) :])
    ks = np.full(n, k, dtype=np.int64)
    slack = np.full(n, 1e-6)
    above = {}
    for columns in (0, 10_000):
        floor = np.full(n, -np.inf, np.float32)
        state = (
            np.empty((n, 0), np.float32),
            np.zeros(n, np.int64),
            floor,
            np.empty((n, 2 * k + 64), np.int64),
            np.empty((n, 2 * k + 64), np.float32),
            np.zeros(n, np.int64),
            np.zeros(n, bool),
        )
        kernels.top_rows(
            tile,
            np.ones(n, np.float32),
            0,
            0,
            ks,
            slack,
            np.zeros(n),
            0.0,
            *state,
            False,
            np.zeros((n, 1), np.float32),
            np.zeros((width, 1), np.float32),
            floor[None, :].copy(),
            kernels.NO_CODES,
            kernels.NO_CODES,
            columns,
        )
        above[columns] = (tile >= floor[:, None].astype(np.float64) + slack[:, None]).sum(axis=1)
        assert np.array_equal(state[5], (tile >= floor[:, None]).sum(axis=1))  # all kept
    want = 40
    assert (kernels.SAMPLE_SPREAD, kernels.SAMPLE_EXTRA) == (4.0, 2)
    assert ((above[10_000] >= want) & (above[10_000] <= want + kernels.RAISE_CLOSE)).all()
    assert ((above[0] >= k) & (above[0] <= k + kernels.RAISE_CLOSE)).all()


@pytest.mark.parametrize("noise, pays", [(0.2, True), (3.0, False)])
def test_positives_offered_where_they_pay(noise, pays, monkeypatch):
    """Tight classes rank a row's positives first (its k-th best positive near rank k): they
    are offered before the pass. Wide ones spread them over the ranking: not offered. Both give
    the brute force's values; so does a chunk under ``SEED_MIN_ROWS``, which offers them."""
    monkeypatch.setattr(cpu, "TILE", TILE)
    monkeypatch.setattr(consumers, "SEED_MIN_ROWS", 500)
    said = []
    decide = cpu.seeds_pay

    def spy(*args):
        said.append(decide(*args))
        return said[-1]

    monkeypatch.setattr(cpu, "seeds_pay", spy)
    monkeypatch.setenv("RECALLKIT_BACKEND", "numba")
    x, labels = _clusters(2, 600, 30, noise)
    _check(x, labels)
    assert said == [pays]
    said.clear()
    monkeypatch.setattr(consumers, "SEED_MIN_ROWS", 601)
    _check(x, labels)
    assert said == [True]


@pytest.mark.parametrize("noise, pays", [(0.3, True), (3.0, False)])
def test_the_floors_choice_reads_the_scores_the_first_hit_choice_kept(noise, pays, monkeypatch):
    """A call that asks for first-hit ranks and lists of 1,024 queries or more samples the same
    queries for both choices of path (every query has a list): ``seeds_pay`` reads the filter
    scores ``first_hits.worth_it`` kept and decides as on its own product; the values are the
    brute force's."""
    monkeypatch.setattr(cpu, "TILE", TILE)
    monkeypatch.setenv("RECALLKIT_BACKEND", "numba")
    said = []
    decide = cpu.seeds_pay

    def spy(tp, *args):
        kept = tp.space.extra.pop("sampled_scores", None)
        own = decide(tp, *args)  # nothing kept: its own product
        tp.space.extra["sampled_scores"] = kept
        read = []
        sampled = type(tp.space).sampled_scores

        def watch(space, rows, scores=None):
            read.append(sampled(space, rows, scores))
            return read[-1]

        monkeypatch.setattr(type(tp.space), "sampled_scores", watch)
        said.append((own, decide(tp, *args), kept is not None, read[0] is not None))
        monkeypatch.setattr(type(tp.space), "sampled_scores", sampled)
        return said[-1][1]

    monkeypatch.setattr(cpu, "seeds_pay", spy)
    x, labels = _clusters(3, 1200, 30, noise)
    _check(x, labels)
    assert said == [(pays, pays, True, True)]
