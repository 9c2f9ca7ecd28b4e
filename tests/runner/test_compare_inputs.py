"""``recallkit compare``: the metrics compared, bounded resamples, and run files with bad ranks."""

from __future__ import annotations

import json

import pytest

from recallkit.runfiles.definitions import definitions
from recallkit.runfiles.records import RecordError, load_run
from recallkit.runner.defaults import MAX_RESAMPLES
from tests.runner.checks import one_error_line, valid_run


def _run_file(path, ranks, ks=(1, 2), valid=True, **queries):
    """A run file of recall@K from first-hit ranks; with ``valid``, checked against the shipped
    schema (the files with a bad value on purpose are not)."""
    kept = [r for r in ranks if isinstance(r, int) and r >= 0]
    record = {
        "format": "recallkit.evaluation/4",
        "tag": None,
        "ks": list(ks),
        "metrics": {f"recall@{k}": sum(r < k for r in kept) / len(kept) for k in ks},
        "num_queries": len(ranks),
        "num_gallery": 10,
        "definitions": definitions("cosine", "ids"),
        "queries": {
            "ids": [f"q{i}" for i in range(len(ranks))],
            "labels": [0] * len(ranks),
            "first_hit_rank": list(ranks),
            **queries,
        },
    }
    if valid:
        valid_run(record)
    path.write_text(json.dumps(record))
    return path


def test_the_metrics_every_run_holds_are_compared(cli, tmp_path):
    a = _run_file(tmp_path / "a.json", [0, 3, 1, 7], ks=(1, 5, 10))
    b = _run_file(tmp_path / "b.json", [0, 0, 4, 1], ks=(2, 1))
    res = cli("compare", a, b)
    assert res.rc == 0, res.err
    assert (
        res.err == "note: not held by every run, so not compared: recall@5, recall@10, recall@2\n"
    )
    rows = [line.split() for line in res.out.splitlines() if line.startswith("  recall@1  a")]
    # recall@1: a hits q0 (1/4), b hits q0 and q1 (2/4).
    assert [row[:4] for row in rows] == [["recall@1", "a", "b", "-0.2500"]]
    # --metrics chooses among them; one that a run lacks is named.
    one_error_line(cli("compare", a, b, "--metrics", "recall@5"), "--metrics must be metrics")
    # The same metrics in another order: no note.
    b = _run_file(tmp_path / "b.json", [0, 0, 4, 1], ks=(10, 5, 1))
    res = cli("compare", a, b)
    assert res.rc == 0 and res.err == "", res.err


def test_too_many_resamples_is_one_line_before_any_work(cli, tmp_path):
    a = _run_file(tmp_path / "a.json", [0, 1])
    res = cli("compare", a, a, "--resamples", "1000000000000")
    assert one_error_line(res) == (
        "recallkit compare: error: --resamples takes at most 100000000 (the intervals' own "
        "sampling error is far below their four decimals long before). Got 1000000000000."
    )
    assert MAX_RESAMPLES == 10**8
    one_error_line(cli("compare", a, a, "--alpha", "0"), "--alpha must be between 0 and 1")


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
@pytest.mark.invalid_records
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


@pytest.mark.invalid_records
def test_the_half_rank_that_used_to_count(tmp_path):
    """1.5 was read as a rank and moved recall@2; it is refused, naming the file and field."""
    path = _run_file(tmp_path / "r.json", [0, 1, 1.5, 3, 5], valid=False)
    with pytest.raises(RecordError) as info:
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
@pytest.mark.invalid_records
def test_bad_record_fields(tmp_path, record, fragment):
    path = _run_file(tmp_path / "r.json", [0, 1])
    data = json.loads(path.read_text())
    if "ks" in record:
        data["ks"] = record["ks"]
    else:
        data["queries"].update(record)
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError) as info:
        load_run(path)
    assert str(info.value) == f"The run file '{path}' {fragment}"
