"""``recallkit compare``: the K compared, bounded resamples, and run files with bad ranks."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from recallkit.definitions import definitions
from recallkit.runner._errors import RunnerError
from recallkit.runner.bootstrap import BATCH, MAX_RESAMPLES, load_run, paired_bootstrap
from tests.runner.checks import one_error_line


def _run_file(path, ranks, ks=(1, 2), **queries):
    record = {
        "ks": list(ks),
        "num_gallery": 10,
        "definitions": definitions("cosine", "ids"),
        "queries": {
            "ids": [f"q{i}" for i in range(len(ranks))],
            "labels": [0] * len(ranks),
            "first_hit_rank": list(ranks),
            **queries,
        },
    }
    path.write_text(json.dumps(record))
    return path


def test_different_k_sets_are_named(cli, tmp_path):
    a = _run_file(tmp_path / "a.json", [0, 3, 1, 7], ks=(1, 5, 10))
    b = _run_file(tmp_path / "b.json", [0, 0, 4, 1], ks=(2, 1))
    res = cli("compare", a, b)
    assert res.rc == 0, res.err
    assert res.err.splitlines()[-1] == (
        "note: the runs report different K: comparing K = 1 (in both); skipped K = 5, 10 "
        "(only in a.json); 2 (only in b.json); --ks chooses others (ranks give any K)."
    )
    rows = [line.split() for line in res.out.splitlines() if line.startswith("  recall@")]
    # recall@1: a hits q0 (1/4), b hits q0 and q1 (2/4).
    assert [row[:4] for row in rows] == [["recall@1", "0.2500", "0.5000", "-0.2500"]]
    # With --ks, any K is computed from the ranks, and nothing is skipped.
    res = cli("compare", a, b, "--ks", "2", "5")
    assert res.rc == 0 and "different K" not in res.err, res.err
    rows = [line.split() for line in res.out.splitlines() if line.startswith("  recall@")]
    # recall@2: a q0, q2 (2/4); b q0, q1, q3 (3/4). recall@5: a 3/4; b 4/4.
    assert [row[:4] for row in rows] == [
        ["recall@2", "0.5000", "0.7500", "-0.2500"],
        ["recall@5", "0.7500", "1.0000", "-0.2500"],
    ]
    # The same K sets in another order: no note.
    b = _run_file(tmp_path / "b.json", [0, 0, 4, 1], ks=(10, 5, 1))
    res = cli("compare", a, b)
    assert res.rc == 0 and res.err == "", res.err


def test_too_many_resamples_is_one_line_before_any_work(cli, tmp_path):
    a = _run_file(tmp_path / "a.json", [0, 1])
    res = cli("compare", a, a, "--resamples", "1000000000000")
    assert one_error_line(res) == (
        "recallkit compare: error: --resamples takes at most 100000000 (about 20 s per K; the "
        "interval's own sampling error is then far below its four decimals). Got 1000000000000."
    )
    with pytest.raises(ValueError, match="must be at most 100,000,000"):
        paired_bootstrap([1, 0], [0, 1], n_resamples=10**12)
    with pytest.raises(ValueError, match="'n_resamples' parameter of paired_bootstrap"):
        paired_bootstrap([1, 0], [0, 1], n_resamples=0)
    assert MAX_RESAMPLES == 10**8


def _reference_interval(a, b, n_resamples, confidence, seed):
    """The bootstrap with every resample in memory: one multinomial draw, numpy.quantile."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    n = a.size
    a_only, b_only = int((a & ~b).sum()), int((~a & b).sum())
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, [a_only / n, b_only / n, (n - a_only - b_only) / n], n_resamples)
    diffs = (counts[:, 0] - counts[:, 1]) / n
    tail = (1 - confidence) / 2
    low, high = np.quantile(diffs, [tail, 1 - tail])
    return (a_only - b_only) / n, float(low), float(high)


@pytest.mark.parametrize(
    ("n", "n_resamples", "confidence", "seed"),
    [(7, 1, 0.95, 0), (50, BATCH - 1, 0.9, 1), (400, 3 * BATCH + 17, 0.95, 2), (1, 999, 0.5, 3)],
)
def test_streamed_bootstrap_equals_the_in_memory_one(n, n_resamples, confidence, seed):
    rng = np.random.default_rng(100 + seed)
    a, b = rng.random(n) < 0.6, rng.random(n) < 0.4
    got = paired_bootstrap(a, b, n_resamples=n_resamples, confidence=confidence, seed=seed)
    want = _reference_interval(a, b, n_resamples, confidence, seed)
    assert got[0] == want[0]
    assert got[1:] == pytest.approx(want[1:], abs=1e-15)


def test_bootstrap_memory_does_not_grow_with_the_resamples():
    # Holding 2,000,000 resamples (three int64 counts each) takes 48 MB; in batches, the
    # memory is one batch (1.5 MB) and the histogram.
    a = np.zeros(1000, bool)
    a[:100] = True
    tracemalloc.start()
    try:
        paired_bootstrap(a, np.zeros(1000, bool), n_resamples=2_000_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak


RANK = "a rank is a whole number, 0 or more, or -1 for an excluded query"
BELOW = "a rank is below the 10 gallery images (num_gallery)"


@pytest.mark.parametrize(
    ("field", "value", "shown", "rule"),
    [
        ("first_hit_rank", 1e30, "1e+30", RANK),
        ("first_hit_rank", 1.5, "1.5", RANK),
        ("first_hit_rank", -2, "-2", RANK),
        ("first_hit_rank", True, "true", RANK),
        ("first_hit_rank", "3", '"3"', RANK),
        ("first_hit_rank", None, "null", RANK),
        ("first_hit_rank", 10**30, "1" + "0" * 30, BELOW),
        ("first_hit_rank", 10, "10", BELOW),
        ("ids", None, "null", "an id is a string"),
        ("ids", 1.5, "1.5", "an id is a string"),
        ("labels", None, "null", "a query's label cannot be null"),
        ("paths", 3, "3", "a path is a string (or null)"),
    ],
)
def test_bad_per_query_values_are_refused(cli, tmp_path, field, value, shown, rule):
    good = _run_file(tmp_path / "good.json", [0, 1, 2], paths=["/a", "/b", "/c"])
    record = json.loads(good.read_text())
    record["queries"][field][2] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(record))
    for args in ((good, bad), (bad, good)):
        res = cli("compare", *args)
        assert one_error_line(res) == (
            f"recallkit compare: error: The run file '{bad}' has a bad 'queries.{field}' value "
            f"at query 2: {shown}; {rule}."
        )
        assert res.out == ""


def test_the_half_rank_that_used_to_count(tmp_path):
    """1.5 was read as a rank and moved recall@2; it is refused, naming the file and field."""
    path = _run_file(tmp_path / "r.json", [0, 1, 1.5, 3, 5])
    with pytest.raises(RunnerError) as info:
        load_run(path)
    assert str(info.value) == (
        f"The run file '{path}' has a bad 'queries.first_hit_rank' value at query 2: 1.5; a "
        "rank is a whole number, 0 or more, or -1 for an excluded query."
    )


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ({"ks": [0, 1]}, "has a bad 'ks' value: [0, 1]; the K values are positive integers."),
        ({"ks": "1"}, "has a bad 'ks' value: \"1\"; the K values are positive integers."),
        ({"labels": [0]}, "has a bad 'queries.labels' value: [0]; it is a list of 2 entries."),
    ],
)
def test_bad_record_fields(tmp_path, record, fragment):
    path = _run_file(tmp_path / "r.json", [0, 1])
    data = json.loads(path.read_text())
    if "ks" in record:
        data["ks"] = record["ks"]
    else:
        data["queries"].update(record)
    path.write_text(json.dumps(data))
    with pytest.raises(RunnerError) as info:
        load_run(path)
    assert str(info.value) == f"The run file '{path}' {fragment}"
