"""Memory bounded on every path: no K, id set, target count or thread count makes a call hold
memory beyond its budget, and the thread count changes no result.

Each bound is measured in a fresh child process (``python -c``): the peak resident set size
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) after the call minus the peak after the imports,
the inputs and a warm-up call of the same functions on tiny inputs (which loads the compiled
kernels). The resident set counts every allocator: torch's CPU tensors come from its own C++
allocator and numba's buffers from NumPy's, which ``tracemalloc`` would only partly see; and a
fresh process has no earlier peak that could hide the call's. Expected values come from
``tests/brute.py`` (float64, full stable sort), never from recallkit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

import recallkit
from recallkit import engine, nearest_neighbors
from tests import brute

GIB = 2**30

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux (bytes on macOS)"
)

PRELUDE = """
import json, os, resource, sys
import numpy as np
import recallkit as rk

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def backend(name):
    os.environ["RECALLKIT_BACKEND"] = name

out = {}
"""


def run_child(script: str, tmp_path) -> dict:
    """Run ``script`` (after :data:`PRELUDE`) in a fresh interpreter in ``tmp_path``; return
    the dict it leaves in ``out``."""
    code = PRELUDE + textwrap.dedent(script) + "\nprint(json.dumps(out))\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------
# K far beyond the reference (MAP@K, AP@K) and a thousand ground-truth targets per query.


def _ap_at_k_references(x, labels):
    """AP@K per query with K beyond the 49 candidates: the whole ranking, divided by R."""
    s = brute.fixed_order_scores64(x, x, "cosine")
    want = []
    for i, row in enumerate(s):
        order = brute.ranked(row, {i})
        rel = [labels[j] == labels[i] for j in order]
        r = sum(rel)
        want.append(brute.ap_at_k(rel, r, 10**6, "min_k_r") if r else np.nan)
    return want


def _target_ranks(s, targets):
    """Each target's rank: candidates above it, and tied ones of lower index (targets too)."""
    columns = np.arange(len(s))
    b = s[targets][:, None]
    return (s[None, :] > b).sum(axis=1) + ((s[None, :] == b) & (columns < targets[:, None])).sum(
        axis=1
    )


def test_memory_does_not_grow_with_k_or_the_number_of_targets(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 8)).astype(np.float32)
    labels = rng.integers(0, 5, 50)
    scores = rng.standard_normal((64, 4000)).astype(np.float32)
    scores[:, 100:200] = scores[:, :100]  # exact ties between targets and other candidates
    targets = np.stack([rng.permutation(4000)[:400] for _ in range(64)])
    query = rng.standard_normal((100, 16)).astype(np.float32)
    reference = rng.standard_normal((4000, 16)).astype(np.float32)
    e_targets = np.stack([rng.permutation(4000)[:400] for _ in range(100)])
    inputs = dict(x=x, labels=labels, s=scores, t=targets, q=query, r=reference, et=e_targets)
    for name, value in inputs.items():
        np.save(tmp_path / f"{name}.npy", value)
    # One child, one baseline: each "extra" is the peak since the baseline, so it includes the
    # earlier calls' peaks too and bounds each call from above.
    out = run_child(
        """
        x, labels, s, t, q, r, et = (
            np.load(f"{name}.npy") for name in ("x", "labels", "s", "t", "q", "r", "et")
        )
        rk.average_precision_at_k([[0]], k=3)
        for name in ("numba", "torch"):
            backend(name)
            rk.map_at_k(x[:4], x[:4], labels[:4], labels[:4], k=3, query_in_reference=True)
            rk.ground_truth_ranks_from_embeddings(q[:2], r[:10], [[0, 1], [2, 3]],
                                                  reduce="none")
        rk.ground_truth_ranks(s[:2, :10], [[0, 1], [2, 3]], reduce="none")
        base = peak()
        out["first"] = rk.average_precision_at_k([[0]], k=10**8).tolist()
        out["sixth"] = rk.average_precision_at_k([[5], [0, 99_999_999]], k=10**8).tolist()
        out["beyond"] = rk.average_precision_at_k([[10**8]], k=10**8).tolist()
        out["r"] = rk.average_precision_at_k([[0, 2]], [4], k=10**12, divisor="r").tolist()
        out["ap_extra"] = peak() - base
        for name in ("numba", "torch"):
            backend(name)
            for k in (10**6, 10**12):
                result = rk.map_at_k(x, x, labels, labels, k=k, query_in_reference=True)
                out[f"{name} {k}"] = result.per_query[f"MAP@{k}"].tolist()
        out["map_extra"] = peak() - base
        np.save("matrix.npy", rk.ground_truth_ranks(s, t, reduce="none"))
        backend("numba")
        np.save("numba.npy", rk.ground_truth_ranks_from_embeddings(q, r, et, reduce="none"))
        out["targets_extra"] = peak() - base
        # The device back end on the CPU: its values only. Its live memory is as small, but
        # with two torch threads glibc's heap may keep from ~60 MiB to several GiB resident
        # across the 400 per-target passes, from run to run.
        backend("torch")
        np.save("torch.npy", rk.ground_truth_ranks_from_embeddings(q, r, et, reduce="none"))
        """,
        tmp_path,
    )
    assert out["ap_extra"] < GIB / 2
    assert out["first"] == [1.0]  # rank 0 of one relevant item: precision 1, D = 1
    # Rank 5 alone: 1/6. Ranks 0 and 10**8 - 1 (both within K): (1 + 2/10**8) / 2.
    assert out["sixth"] == [1.0 / 6.0, (1.0 + 2.0 / 10**8) / 2.0]
    assert out["beyond"] == [0.0]  # rank 10**8 is the (10**8 + 1)-th item: outside K
    assert out["r"] == [(1.0 + 2.0 / 3.0) / 4.0]

    assert out["map_extra"] < GIB / 2
    want = _ap_at_k_references(x, labels)
    for key in ("numba 1000000", "numba 1000000000000", "torch 1000000", "torch 1000000000000"):
        np.testing.assert_allclose(out[key], want, rtol=1e-12, err_msg=key)

    # An (n, targets, m) comparison would be 64 x 400 x 4000 = 102 M entries (0.8 GiB).
    assert out["targets_extra"] < GIB / 2
    exact = brute.fixed_order_scores64(query, reference, "cosine")
    cases = [("matrix", scores.astype(np.float64), targets)]
    cases += [(name, exact, e_targets) for name in ("numba", "torch")]
    for name, s, t in cases:
        got = np.load(tmp_path / f"{name}.npy")
        assert got.shape == t.shape, name
        for i in range(0, len(s), 7):
            np.testing.assert_array_equal(got[i], _target_ranks(s[i], t[i]), err_msg=name)


# ----------------------------------------------------------------------------------------------
# recall@K on 20,000 x 20,000 with ten distinct ids (each excludes a tenth of the reference).


def test_recall_with_few_distinct_ids_stays_within_budget(tmp_path):
    rng = np.random.default_rng(1)
    n, d = 20_000, 16
    x = rng.standard_normal((n, d)).astype(np.float32)
    labels = rng.integers(0, 100, n)
    ids = np.arange(n) % 10
    for name, value in (("x", x), ("labels", labels), ("ids", ids)):
        np.save(tmp_path / f"{name}.npy", value)
    out = run_child(
        """
        x, labels, ids = np.load("x.npy"), np.load("labels.npy"), np.load("ids.npy")
        small = slice(0, 40)
        for name in ("torch", "numba"):
            backend(name)
            rk.recall_at_k(x[small], x[small], labels[small], labels[small], ks=(1,),
                           query_ids=ids[small], reference_ids=ids[small])
        base = peak()
        # The device back end on the CPU (what CUDA runs), on 3,072 queries: one chunk of its
        # budgeted size holds the filter scores and their masks.
        backend("torch")
        q = slice(0, 3072)
        result = rk.recall_at_k(x[q], x, labels[q], labels, ks=(1, 10), query_ids=ids[q],
                                reference_ids=ids)
        np.save("torch_ranks.npy", result.first_hit_ranks)
        out["torch_extra"] = peak() - base
        backend("numba")
        result = rk.recall_at_k(x, x, labels, labels, ks=(1, 10), query_ids=ids,
                                reference_ids=ids)
        np.save("ranks.npy", result.first_hit_ranks)
        out["extra"] = peak() - base
        """,
        tmp_path,
    )
    # The full 20,000² float32 matrix alone would be 1.49 GiB; the budget is 256 MiB a chunk.
    assert out["torch_extra"] < GIB / 2
    assert out["extra"] < 1.5 * GIB
    ranks = np.load(tmp_path / "ranks.npy")
    torch_ranks = np.load(tmp_path / "torch_ranks.npy")
    sample = np.sort(rng.choice(3072, 150, replace=False))
    sample = np.concatenate([sample, rng.choice(np.arange(3072, n), 50, replace=False)])
    s = brute.fixed_order_scores64(x[sample], x, "cosine")
    for row, i in zip(s, sample, strict=True):
        order = np.lexsort((np.arange(n), -row))  # higher score, then lower index
        order = order[ids[order] != ids[i]]  # every item with the query's id is skipped
        hits = np.nonzero(labels[order] == labels[i])[0]
        want = int(hits[0]) if hits.size else -1
        assert ranks[i] == want, i
        if i < 3072:
            assert torch_ranks[i] == want, i


# ----------------------------------------------------------------------------------------------
# Coarse labels: MAP@R's lists of R items per query within the memory budget.


def test_two_classes_stay_within_the_memory_budget(tmp_path):
    # Two classes on 12,000 rows: R is about 6,000, so each query's ranked list (and the tile
    # pass's state for it) takes hundreds of KiB, and at most about 50 queries fit in a chunk
    # of the 32 MiB budget (64, the least chunk before, would need about 40 MiB).
    rng = np.random.default_rng(5)
    n, d = 12_000, 32
    x = rng.standard_normal((n, d)).astype(np.float32)
    labels = rng.integers(0, 2, n)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "labels.npy", labels)
    out = run_child(
        """
        x, labels = np.load("x.npy"), np.load("labels.npy")
        budget = 32 * 2**20
        rk.map_at_r(x[:100], x[:300], labels[:100], labels[:300], query_in_reference=True,
                    memory_budget=budget)
        base = peak()
        result = rk.map_at_r(x[:600], x, labels[:600], labels, query_in_reference=True,
                             memory_budget=budget)
        out["extra"] = peak() - base
        out["budget"] = budget
        np.save("map.npy", result.per_query["MAP@R"])
        """,
        tmp_path,
    )
    # Besides a chunk's working memory (the budget), the call holds the prepared copy of the
    # rows (4 d bytes a row: 1.5 MiB), the per-query results (a few KiB) and what glibc keeps
    # of the chunks' freed buffers: 16 MiB covers them (the call measured about 24 MiB here).
    margin = 16 * 2**20
    assert out["extra"] < out["budget"] + margin
    got = np.load(tmp_path / "map.npy")
    s = brute.fixed_order_scores64(x[:600:60], x, "cosine")
    for row, i in zip(s, range(0, 600, 60), strict=True):
        order = brute.ranked(row, {i})
        rel = [labels[j] == labels[i] for j in order]
        want = brute.metric("map_at_r", None, rel, sum(rel), len(rel))
        np.testing.assert_allclose(got[i], want, rtol=1e-12, err_msg=str(i))


def _chunks_of(monkeypatch) -> list[list[int]]:
    """The first query of each chunk, per engine call (the engine's answers spied on)."""
    calls: list[list[int]] = []
    run = engine.run

    def spy(*args, **kwargs):
        calls.append([])
        for part in run(*args, **kwargs):
            calls[-1].append(part.start)
            yield part

    monkeypatch.setattr(engine, "run", spy)
    return calls


@pytest.mark.parametrize("classes", [2, 40])
def test_the_memory_budget_sizes_chunks_never_values(monkeypatch, classes):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((700, 16)).astype(np.float32)
    x[350:400] = x[:50]  # exact ties
    labels = rng.integers(0, classes, 700)
    names = ["recall@1", "recall@10", "MAP@R", "R-precision", "MAP@20", "nDCG@20"]
    calls = _chunks_of(monkeypatch)
    results = {}
    for budget in ("1MiB", None, "1GiB"):
        r = recallkit.retrieval_metrics(
            x, x, labels, labels, names, query_in_reference=True, memory_budget=budget
        )
        nn = nearest_neighbors(x, x, 30, memory_budget=budget)
        results[budget] = (r, nn)
    small, default, large = (results[b] for b in ("1MiB", None, "1GiB"))
    assert len(calls) == 6
    assert len(calls[0]) > len(calls[2]) >= len(calls[4])  # smaller budget: smaller chunks
    assert len(calls[1]) > len(calls[3]) >= len(calls[5])
    for r, nn in (small, large):
        assert r.first_hit_ranks.tolist() == default[0].first_hit_ranks.tolist()
        for name in r.per_query:  # bit for bit
            assert r.per_query[name].tobytes() == default[0].per_query[name].tobytes(), name
        assert np.array_equal(nn[0], default[1][0]) and nn[1].tobytes() == default[1][1].tobytes()


@pytest.mark.parametrize("budget", [0, -5, 0.5, True, "lots", "1.5 parsecs", "-1MiB", [1]])
@pytest.mark.parametrize(
    "call",
    [
        lambda b: recallkit.map_at_r(
            np.eye(4), np.eye(4), [0, 0, 1, 1], [0, 0, 1, 1], memory_budget=b
        ),
        lambda b: nearest_neighbors(np.eye(4), np.eye(4), 2, memory_budget=b),
        lambda b: recallkit.Options.of("f", memory_budget=b),
    ],
    ids=["map_at_r", "nearest_neighbors", "Options"],
)
def test_a_bad_memory_budget_is_a_one_line_error_naming_it(call, budget):
    with pytest.raises(ValueError, match=r"'memory_budget' parameter of \w+ must be") as error:
        call(budget)
    assert "\n" not in str(error.value)
    assert re.search(r"Got .+\.$", str(error.value))


def test_the_memory_budget_option_reads_bytes_and_binary_units():
    from recallkit.engine.space import memory_budget
    from recallkit.options import DEFAULT_MEMORY_BUDGET, Options

    cpu = torch.device("cpu")
    assert memory_budget(Options(), cpu) == DEFAULT_MEMORY_BUDGET == 256 * 2**20
    for given, want in (("512MiB", 2**29), ("8 GiB", 2**33), ("1.5g", 3 * 2**29), (1000, 1000)):
        assert memory_budget(Options.of("f", memory_budget=given), cpu) == want
    assert memory_budget(Options.of("f", memory_budget=2.5e9), cpu) == 2_500_000_000


# ----------------------------------------------------------------------------------------------
# Thread counts: identical lists, whatever torch's and the BLAS's thread settings.


def test_nearest_neighbors_do_not_depend_on_thread_counts(backend):
    rng = np.random.default_rng(3)
    query = rng.standard_normal((120, 16)).astype(np.float32)
    reference = rng.standard_normal((6000, 16)).astype(np.float32)
    reference[3000:3100] = reference[:100]  # exact ties: lower index first
    k = 5000
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append(nearest_neighbors(query, reference, k))
            with threadpool_limits(limits=1, user_api="blas"):
                results.append(nearest_neighbors(query, reference, k))
    finally:
        torch.set_num_threads(before)
    index, score = results[0]
    assert isinstance(index, np.ndarray) and index.shape == (120, k)
    for other_index, other_score in results[1:]:
        np.testing.assert_array_equal(other_index, index)
        np.testing.assert_array_equal(other_score, score)
    s = brute.fixed_order_scores64(query, reference, "cosine")
    want = np.lexsort((np.broadcast_to(np.arange(6000), s.shape), -s), axis=1)[:, :k]
    np.testing.assert_array_equal(index, want)
    np.testing.assert_array_equal(score, np.take_along_axis(s, want, axis=1))
