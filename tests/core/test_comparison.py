"""Intervals of every metric and comparisons of runs against scipy's own bootstrap and
permutation test on the same per-query values, and the refusals of runs that do not pair."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

import recallkit
from recallkit import comparison
from recallkit.runfiles import records
from tests import registry_cases

NAMES = registry_cases.names((1, 5))


def _runs(average="query", n=120, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6))
    labels = rng.integers(0, 8, n)
    out = {}
    for name, noise in (("a", 0.0), ("b", 0.6), ("c", 1.5)):
        y = x + noise * rng.standard_normal(x.shape)
        out[name] = recallkit.retrieval_metrics(
            y, y, labels, labels, NAMES, query_in_reference=True, average=average
        )
    return out, labels


def _scipy_statistic(name):
    if name == "MedR":
        return lambda v, axis=-1: np.floor(np.median(v, axis=axis))
    return lambda v, axis=-1: np.mean(v, axis=axis)


def test_every_metric_interval_is_scipys_percentile_bootstrap():
    runs, _ = _runs()
    got = comparison.intervals(runs["a"], n_resamples=999, seed=3)
    assert list(got) == NAMES
    for name in NAMES:
        values = runs["a"].per_query[name][runs["a"].evaluated]
        want = scipy_stats.bootstrap(
            (values,),
            _scipy_statistic(name),
            n_resamples=999,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(3),
        ).confidence_interval
        i = got[name]
        assert i.low == pytest.approx(want.low, abs=1e-12), name
        assert i.high == pytest.approx(want.high, abs=1e-12), name
        assert (i.value, i.resampled) == (runs["a"][name], "queries")
        assert (i.pessimistic, i.optimistic) == runs["a"].bounds[name]


def test_a_class_average_is_resampled_by_class():
    runs, labels = _runs(average="class")
    got = comparison.intervals(runs["b"], metrics=["MAP@R", "MedR"], n_resamples=500, seed=1)
    evaluated = runs["b"].evaluated
    codes = np.unique(labels[evaluated], return_inverse=True)[1]
    for name in ("MAP@R", "MedR"):
        values = runs["b"].per_query[name][evaluated]
        per_class = np.array(
            [_scipy_statistic(name)(values[codes == c]) for c in range(codes.max() + 1)]
        )
        want = scipy_stats.bootstrap(
            (per_class,),
            np.mean,
            n_resamples=500,
            method="percentile",
            rng=np.random.default_rng(1),
        ).confidence_interval
        assert got[name].resampled == "classes"
        assert (got[name].low, got[name].high) == pytest.approx((want.low, want.high), abs=1e-12)


def test_comparisons_are_scipys_permutation_test_and_holm_by_hand():
    runs, _ = _runs()
    c = comparison.compare(runs, test="randomization", n_resamples=999, seed=7)
    assert list(c.metrics) == NAMES  # every metric of the registry
    assert [(r.a, r.b) for r in c.rows[:3]] == [("a", "b"), ("a", "c"), ("b", "c")]
    for name in NAMES:
        rows = [r for r in c.rows if r.metric == name]
        raw = []
        f = _scipy_statistic(name)
        for r in rows:
            x = runs[r.a].per_query[name][runs[r.a].evaluated]
            y = runs[r.b].per_query[name][runs[r.b].evaluated]
            want = scipy_stats.permutation_test(
                (x, y),
                lambda u, v, axis=-1, f=f: f(u, axis=axis) - f(v, axis=axis),
                permutation_type="samples",
                n_resamples=999,
                vectorized=True,
                rng=np.random.default_rng(7),
            ).pvalue
            assert r.p_value == pytest.approx(want, abs=1e-12), (name, r.a, r.b)
            boot = scipy_stats.bootstrap(
                (x, y),
                lambda u, v, axis=-1, f=f: f(u, axis=axis) - f(v, axis=axis),
                paired=True,
                n_resamples=999,
                method="percentile",
                vectorized=True,
                rng=np.random.default_rng(7),
            ).confidence_interval
            assert (r.low, r.high) == pytest.approx((boot.low, boot.high), abs=1e-12)
            assert r.difference == runs[r.a][name] - runs[r.b][name]
            assert r.test == "randomization"
            raw.append(r.p_value)
        # Holm by hand: sorted p_(1) <= p_(2) <= p_(3); adjusted max over j <= i of (3 - j) p_(j).
        order = np.argsort(raw)
        adjusted = np.empty(3)
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (3 - rank) * raw[i]))
            adjusted[i] = running
        assert [r.p_adjusted for r in rows] == pytest.approx(adjusted.tolist(), abs=1e-15)
        for r in rows:
            assert r.significant == (r.p_adjusted < 0.05)
            assert r.tied == (not r.significant)


def test_the_bootstrap_test_is_the_share_of_resampled_differences_across_zero():
    runs, _ = _runs()
    c = comparison.compare(
        {"a": runs["a"], "c": runs["c"]}, metrics=["MAP@R"], test="bootstrap", n_resamples=999
    )
    x = runs["a"].per_query["MAP@R"][runs["a"].evaluated]
    y = runs["c"].per_query["MAP@R"][runs["c"].evaluated]
    draws = scipy_stats.bootstrap(
        (x, y),
        lambda u, v, axis=-1: np.mean(u, axis=axis) - np.mean(v, axis=axis),
        paired=True,
        n_resamples=999,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(0),
    ).bootstrap_distribution
    want = min(1.0, 2 * min(np.mean(draws <= 0), np.mean(draws >= 0)))
    assert c.rows[0].p_value == pytest.approx(want, abs=1e-12)
    assert c.rows[0].p_adjusted == c.rows[0].p_value  # one comparison: nothing to adjust


def test_direction_decides_the_better_run():
    # MnR: lower is better. Run "good" ranks every query's first hit at 1, "bad" at 3 or more.
    x = np.array([[0.0], [0.1], [5.0], [5.1], [10.0], [10.1]])
    y = np.array([[0.0], [5.0], [10.0], [0.1], [5.1], [10.1]])
    labels = [0, 0, 1, 1, 2, 2]
    good = recallkit.retrieval_metrics(
        x, x, labels, labels, ["MnR"], metric="euclidean", query_in_reference=True
    )
    bad = recallkit.retrieval_metrics(
        y, y, labels, labels, ["MnR"], metric="euclidean", query_in_reference=True
    )
    assert good["MnR"] == 1.0 and bad["MnR"] > 2.0
    c = comparison.compare({"good": good, "bad": bad}, n_resamples=200)
    row = c.rows[0]
    # Six pairs: the exact randomization test (2**6 = 64 <= 200 resamples) gives 2/64.
    assert row.p_value == 2 / 64
    assert row.better == "good" and row.difference < 0
    assert c.best("MnR") == ["good"]


def test_run_files_of_every_format_compare_with_results(tmp_path):
    runs, _ = _runs()
    path = tmp_path / "a.json"
    records.write_run(path, records.evaluation_record(runs["a"], tag="a"))
    record = json.loads(path.read_text())
    assert record["format"] == "recallkit.evaluation/4"
    assert list(record["queries"]["values"]) == NAMES
    from_file = comparison.intervals(path, n_resamples=300)
    from_result = comparison.intervals(runs["a"], n_resamples=300)
    assert from_file == from_result
    # A /3 run file (first-hit ranks only): recall@K from the ranks, the rest not compared.
    old = dict(record, format="recallkit.evaluation/3")
    old["queries"] = {k: v for k, v in record["queries"].items() if k != "values"}
    old["ks"] = [1, 5]
    c = comparison.compare({"old": old, "new": runs["b"]}, n_resamples=300)
    assert c.metrics == ("recall@1", "recall@5")
    assert any("not held by every run" in note for note in c.notes)


def test_runs_that_do_not_pair_are_refused_saying_what_differs():
    runs, labels = _runs()
    other = recallkit.retrieval_metrics(
        np.eye(3), np.eye(3), [0, 0, 1], [0, 0, 1], ["recall@1"], query_in_reference=True
    )
    with pytest.raises(ValueError, match=r"a \(120 queries\) and o \(3 queries\) did not"):
        comparison.compare({"a": runs["a"], "o": other})
    dot = recallkit.retrieval_metrics(
        np.eye(120),
        np.eye(120),
        labels,
        labels,
        ["recall@1"],
        metric="dot",
        query_in_reference=True,
    )
    with pytest.raises(ValueError, match=r"different definitions: similarity \('cosine' in a"):
        comparison.compare({"a": runs["a"], "dot": dot})
    with pytest.raises(ValueError, match="'baseline' parameter of compare"):
        comparison.compare(runs, baseline="z")
    with pytest.raises(ValueError, match="'runs' parameter of compare must be two or more"):
        comparison.compare({"a": runs["a"]})
    with pytest.raises(ValueError, match="'test' parameter of compare"):
        comparison.compare(runs, test="t-test")
    assert math.isfinite(comparison.compare(runs, metrics=["recall@1"], n_resamples=50).alpha)


def test_auto_tests_recall_pairs_by_mcnemar_and_the_rest_by_randomization():
    runs, _ = _runs()
    c = comparison.compare(runs, n_resamples=999, seed=7)
    assert c.test == "auto"
    for r in c.rows:
        x = runs[r.a].per_query[r.metric][runs[r.a].evaluated]
        y = runs[r.b].per_query[r.metric][runs[r.b].evaluated]
        binary = np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all()
        if r.metric.startswith("recall@"):
            assert binary
        if binary and r.metric != "MedR":
            # The peer: scipy's exact binomial test on the discordant queries.
            only_a, only_b = int(np.sum((x == 1) & (y == 0))), int(np.sum((x == 0) & (y == 1)))
            want = scipy_stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
            assert r.test == "mcnemar"
            assert r.p_value == pytest.approx(want, rel=1e-12, abs=0), (r.metric, r.a, r.b)
        else:
            assert r.test == "randomization"
            want = comparison.stats.randomization_test(
                x,
                y,
                comparison._statistic(recallkit.metrics.parse_one(r.metric)),
                n_resamples=999,
                seed=7,
            )
            assert r.p_value == want
    assert "McNemar's exact test" in c.format()
    assert {r["test"] for r in c.to_dict()["comparisons"]} == {"mcnemar", "randomization"}


def test_a_comparison_equals_its_intervals_and_tests_computed_one_by_one():
    # One draw serves every run and metric: each value is the one computed alone.
    runs, _ = _runs(n=90, seed=4)
    for test in ("randomization", "bootstrap"):
        c = comparison.compare(runs, test=test, n_resamples=300, seed=5)
        for name in NAMES:
            for run in runs:
                alone = comparison.intervals(runs[run], metrics=[name], n_resamples=300, seed=5)
                assert c.intervals[run][name] == alone[name]
            for r in (r for r in c.rows if r.metric == name):
                x = runs[r.a].per_query[name][runs[r.a].evaluated]
                y = runs[r.b].per_query[name][runs[r.b].evaluated]
                statistic = comparison._statistic(recallkit.metrics.parse_one(name))
                _, low, high = comparison.stats.paired_bootstrap(
                    x, y, statistic, n_resamples=300, seed=5
                )
                assert (r.low, r.high) == (low, high)
                if test == "randomization":
                    p = comparison.stats.randomization_test(
                        x, y, statistic, n_resamples=300, seed=5
                    )
                    assert r.p_value == p


@pytest.mark.filterwarnings("ignore::recallkit.exceptions.LoneQueriesWarning")
def test_runs_with_no_paired_query_that_counts_are_refused():
    # Every query's label is alone in the gallery: nothing counts, nothing to compare.
    x = np.eye(4)
    labels = [0, 1, 2, 3]
    a = recallkit.retrieval_metrics(x, x, labels, labels, ["recall@1"], query_in_reference=True)
    b = recallkit.retrieval_metrics(
        x[::-1].copy(), x[::-1].copy(), labels, labels, ["recall@1"], query_in_reference=True
    )
    with pytest.raises(ValueError, match="0 paired queries that count for recall@1"):
        comparison.compare({"a": a, "b": b})
