"""A differential fuzz of every public entry point against the float64 brute force, in every
precision, back end and chunking: the label form, the ground-truth form, nearest neighbours and
the Evaluator give the definition's values, bit for bit, in each (sharded evaluation: see
tests/distributed/test_sharded.py)."""

from __future__ import annotations

import math
import threading
import warnings

import numpy as np
import pytest
import torch

import recallkit
from tests import brute, registry_cases

# Every metric of the registry (K = 1 and 3 where it has a cut-off).
CASES = registry_cases.cases((1, 3))
NAMES = [name for name, _, _ in CASES]
KINDS = [(family, k) for _, family, k in CASES]
# Labels and ids of every sign and size an int64 holds, and strings: compared by value.
EXTREME = np.array([-(2**63), -7, -1, 0, 2**40 + 1, 2**63 - 1], dtype=np.int64)
# (back end, precision, chunk size): every precision a back end runs, with several chunkings.
CONFIGS = [
    ("numba", "float32", None),
    ("numba", "bfloat16", 3),
    ("numba", "int8", 7),
    ("numba", "auto", 1),
    ("torch", "float32", 5),
    ("torch", "bfloat16", None),
    ("torch", "float16", 4),
    ("torch", "auto", 2),
    ("triton", "float32", 6),
]


def _case(seed: int):
    rng = np.random.default_rng(seed)
    n, d = 24, 5
    x = rng.integers(-3, 4, size=(n, d)).astype(np.float32)  # exact, often tied scores
    x[rng.integers(0, n, 4)] = x[1]
    x[x.sum(axis=1) == 0, 0] = 1.0
    labels = EXTREME[rng.integers(0, 4, n) + seed % 2]
    metric = ("cosine", "dot", "euclidean")[seed % 3]
    return x, labels, metric


@pytest.mark.parametrize(("backend", "precision", "chunk"), CONFIGS)
def test_every_entry_point_is_the_definition(backend, precision, chunk, monkeypatch):
    monkeypatch.setenv("RECALLKIT_BACKEND", backend)
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    options = dict(precision=precision, chunk_size=chunk)
    for seed in range(1 if backend == "triton" else 2):  # the interpreter: one case
        x, labels, metric = _case(seed)
        n = len(x)
        s = brute.fixed_order_scores64(x, x, metric)
        excluded = brute.excluded_sets(n, n, query_in_reference=True)
        # The label form, every kind of metric.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = recallkit.retrieval_metrics(
                x, x, labels, labels, NAMES, metric=metric, query_in_reference=True, **options
            )
        lists = brute.relevance_lists(s, labels, labels, excluded)
        for name, (kind, k) in zip(NAMES, KINDS, strict=True):
            want = [brute.metric(kind, k, rel, r, c) for rel, r, c in lists]
            assert np.array_equal(got.per_query[name], want, equal_nan=True), (name, seed)
            assert got[name] == brute.summary(kind, [w for w in want if w == w]), (name, seed)
        # Ids that repeat, negative and extreme: every item with the query's id is removed.
        ids = EXTREME[np.arange(n) % 5] // 3
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            by_ids = recallkit.retrieval_metrics(
                x,
                x,
                labels,
                labels,
                NAMES,
                metric=metric,
                query_ids=ids,
                reference_ids=ids,
                **options,
            )
        excluded_ids = brute.excluded_sets(n, n, query_ids=ids, reference_ids=ids)
        for name, (kind, k) in zip(NAMES, KINDS, strict=True):
            want = [
                brute.metric(kind, k, rel, r, c)
                for rel, r, c in brute.relevance_lists(s, labels, labels, excluded_ids)
            ]
            assert np.array_equal(by_ids.per_query[name], want, equal_nan=True), (name, seed)
        # The Evaluator: batches in any order, with ids.
        order = np.random.default_rng(seed).permutation(n)
        ev = recallkit.Evaluator(ks=(1, 3), metrics=NAMES, metric=metric, **options)
        for part in np.array_split(order, 3):
            ev.update(
                torch.from_numpy(x[part]), torch.from_numpy(labels[part]), torch.from_numpy(part)
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            by_batches = ev.compute()
        for name in NAMES:
            assert np.array_equal(
                by_batches.per_query[name], got.per_query[name], equal_nan=True
            ), (name, seed)
        # Nearest neighbours: the ranked lists, every item.
        k = 6
        index, score = recallkit.nearest_neighbors(
            x, x, k, query_in_reference=True, metric=metric, **options
        )
        for i in range(n):
            order_i = brute.ranked(s[i], excluded[i])[:k]
            assert index[i].tolist() == order_i, (i, seed)
            assert score[i].tolist() == [s[i, j] for j in order_i]
        # The ground-truth form: ranks of several targets, with their tie bounds.
        targets = np.stack([np.random.default_rng(seed + i).permutation(n)[:3] for i in range(n)])
        ranks = recallkit.ground_truth_ranks_from_embeddings(
            x, x, targets, reduce="none", tie_bounds=True, metric=metric, **options
        )
        for i in range(n):
            row = s[i]
            for t, j in enumerate(targets[i]):
                above = int((row > row[j]).sum())
                equal = int((row == row[j]).sum()) - 1
                before = int(((row == row[j]) & (np.arange(n) < j)).sum())
                assert ranks.ranks[i, t] == above + before
                assert (ranks.optimistic[i, t], ranks.pessimistic[i, t]) == (above, above + equal)
    assert not math.isnan(got["recall@1"])


def test_the_triton_back_end_takes_float64_inputs_in_every_form(monkeypatch):
    monkeypatch.setenv("RECALLKIT_BACKEND", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    x, labels, _ = _case(5)
    x = x.astype(np.float64) / 3.0
    s = brute.fixed_order_scores64(x, x, "dot")
    targets = np.arange(len(x))
    got = recallkit.ground_truth_ranks_from_embeddings(x, x, targets, metric="dot")
    want = [brute.gt_rank(s[i], i, set()) for i in range(len(x))]
    assert got.tolist() == want
    r = recallkit.recall_at_k(x, x, labels, labels, (1,), metric="dot", query_in_reference=True)
    excluded = brute.excluded_sets(len(x), len(x), query_in_reference=True)
    assert r.first_hit_ranks.tolist() == brute.first_hit_ranks(s, labels, labels, excluded).tolist()


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_ranked_lists_over_several_tiles_and_both_workers(precision, monkeypatch):
    """Three blocks of tile rows, two workers: each list's first tile holds far more items than
    its k above its starting floor (the floor is raised from the tile) and the workers share
    their floors. Nearest neighbours (a heap per row) and MAP@R with about 70 relevant items a
    query (a reservoir) are the brute force's, on random and on tie-heavy integer data."""
    monkeypatch.setenv("RECALLKIT_BACKEND", "numba")
    n, d = 2_100, 8
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 30, n)
    for x in (
        rng.standard_normal((n, d)).astype(np.float32),
        rng.integers(-2, 3, (n, d)).astype(np.float32) + np.eye(n, d, dtype=np.float32),
    ):
        s = brute.fixed_order_scores64(x, x, "cosine")
        np.fill_diagonal(s, -np.inf)  # leave-one-out: the query itself is never a candidate
        order = np.lexsort((np.broadcast_to(np.arange(n), s.shape), -s), axis=1)[:, : n - 1]
        index, score = recallkit.nearest_neighbors(
            x, x, 5, query_in_reference=True, precision=precision
        )
        assert np.array_equal(np.asarray(index), order[:, :5])
        assert np.array_equal(np.asarray(score), np.take_along_axis(s, order[:, :5], 1))
        got = recallkit.retrieval_metrics(
            x, x, labels, labels, ["MAP@R"], query_in_reference=True, precision=precision
        )
        want = [
            brute.metric(
                "map_at_r",
                None,
                list(labels[order[i]] == labels[i]),
                int((labels == labels[i]).sum()) - 1,
                n - 1,
            )
            for i in range(n)
        ]
        assert np.array_equal(got.per_query["MAP@R"], want, equal_nan=True)


def test_auto_weighs_a_small_call_pass_by_pass_and_every_pass_is_the_definition(monkeypatch):
    """A call of 16 full tiles (1,024 rows in tiles of 256) under ``auto`` runs each of its
    passes in one kind of tile, weighed across the calls of its shape (here float32 and
    bfloat16, which runs on every CPU): every call gives the brute force's values, whichever
    kind its pass ran, and once both kinds are timed twice the choice runs in the next calls."""
    from recallkit.engine import cpu, lowp

    monkeypatch.setenv("RECALLKIT_BACKEND", "numba")
    monkeypatch.setattr(cpu, "TILE", 256)
    monkeypatch.setattr(lowp, "CHOICES", {})
    monkeypatch.setattr(lowp, "WARM", {})
    both = ("float32", "torch-bfloat16")
    monkeypatch.setattr(lowp, "tile_kinds", lambda *a: ("float32",) if a[3] else both)
    ran = []
    real_passed = lowp.TilePass.passed

    def passed(tp, seconds):
        if tp.space.num_query == n:
            ran.append(tp.names[0])
        real_passed(tp, seconds)

    monkeypatch.setattr(lowp.TilePass, "passed", passed)
    n, d = 1_024, 8
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 16, n)
    x = (rng.standard_normal((16, d))[labels] + 0.8 * rng.standard_normal((n, d))).astype(
        np.float32
    )
    s = brute.fixed_order_scores64(x, x, "cosine")
    np.fill_diagonal(s, -np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(n), s.shape), -s), axis=1)[:, : n - 1]
    relevant = labels[order] == labels[:, None]
    want_map = [
        brute.metric(
            "map_at_r", None, list(relevant[i]), int((labels == labels[i]).sum()) - 1, n - 1
        )
        for i in range(n)
    ]
    want_first = np.where(relevant.any(axis=1), relevant.argmax(axis=1), -1)
    for _ in range(8):
        got = recallkit.retrieval_metrics(
            x, x, labels, labels, ["recall@1", "MAP@R"], query_in_reference=True
        )
        assert np.array_equal(got.per_query["MAP@R"], want_map, equal_nan=True)
        assert got.first_hit_ranks.tolist() == want_first.tolist()
    f32, bf16 = both
    assert ran[:6] == [f32, f32, bf16, bf16, bf16, f32]  # first passes of a kind: warm-ups
    key = ("tiles", torch.float32, d, (n, n, "lists, symmetric"), both)
    chosen = lowp.CHOICES[key].chosen
    assert chosen in both and ran[6:] == [chosen] * (len(ran) - 6)
    assert "least pass times of the calls of 1,024 × 1,024 rows (lists, symmetric)" in (
        cpu.precision_report(d)
    )


def test_a_chunk_of_many_queries_computes_its_values_in_two_halves_at_once(monkeypatch):
    """A chunk of at least ``HALVES_ROWS`` queries computes its per-query values in two halves,
    the first on a thread of its own: every metric's values are still the brute force's (tied
    integer scores, so the tie bounds differ too), and the first half did run on that thread."""
    from recallkit._labels import form

    monkeypatch.setenv("RECALLKIT_BACKEND", "numba")
    rng = np.random.default_rng(4)
    n, d = form.HALVES_ROWS + 52, 5
    x = rng.integers(-3, 4, size=(n, d)).astype(np.float32)
    x[x.sum(axis=1) == 0, 0] = 1.0
    labels = rng.integers(0, 40, n)
    threads = []
    real = form.Values._add

    def spy(values, start, stop, chunk):
        threads.append((start, stop, threading.current_thread().name))
        real(values, start, stop, chunk)

    monkeypatch.setattr(form.Values, "_add", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = recallkit.retrieval_metrics(x, x, labels, labels, NAMES, query_in_reference=True)
    half = n // 2
    assert sorted(threads)[0][:2] == (0, half) and sorted(threads)[1][:2] == (half, n)
    assert {name.split("_")[0] for _, _, name in threads} == {"recallkit-values", "MainThread"}
    s = brute.fixed_order_scores64(x, x, "cosine")
    lists = brute.relevance_lists(s, labels, labels, brute.excluded_sets(n, n, True))
    for name, (kind, k) in zip(NAMES, KINDS, strict=True):
        want = [brute.metric(kind, k, rel, r, c) for rel, r, c in lists]
        assert np.array_equal(got.per_query[name], want, equal_nan=True), name
    assert any(got.bounds[name][0] != got.bounds[name][1] for name in NAMES)
