"""The one validating reader of run files (recallkit.runfiles.records.load_run), fuzzed.

Every field of the shipped JSON Schema is mutated (replaced by values of every JSON kind, NaN,
Infinity, numbers beyond int64 and float64, removed, repeated, joined by an unknown field), and
so is every per-query list at a few queries. For each mutation the reader either refuses the file
with a RecordError (a ParameterError) naming the file and the field, or accepts a record that is
consistent: every metric's value is the summary of its per-query values, computed here from the
definition (independent of the library), and the statistics read it without an error. The
reader is differential: whatever jsonschema's own validator refuses under the shipped schema,
the reader refuses too. Nothing ever ends in another exception.
"""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import re
import sys

import jsonschema
import numpy as np
import pytest

import recallkit
from recallkit.cli import main as cli_main
from recallkit.comparison import as_run
from recallkit.exceptions import ParameterError
from recallkit.runfiles import records

# One value of every JSON kind, and the numbers that broke readers before.
REPLACEMENTS = [
    None,
    True,
    "abc",
    "",
    0,
    -1,
    7,
    0.5,
    -0.5,
    1.5,
    2**70,
    10**400,
    float("nan"),
    float("inf"),
    -float("inf"),
    [],
    [1, 2],
    {},
    {"a": 1},
]


def _base(average: str) -> dict:
    """A run record as evaluate writes it, with lone queries and ties, every optional field of
    the schema filled in."""
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, (24, 3)).astype(np.float64)
    ref = rng.integers(-2, 3, (30, 3)).astype(np.float64)
    labels, ref_labels = rng.integers(0, 7, 24), rng.integers(0, 6, 30)
    metrics = ["recall@1", "recall@4", "MAP@R", "MRR", "nDCG@5", "MnR", "MedR", "MAP@10"]
    result = recallkit.retrieval_metrics(
        x, ref, labels, ref_labels, metrics, metric="dot", average=average
    )
    record = records.evaluation_record(
        result,
        tag="base",
        query_ids=[f"q{i}.png" for i in range(24)],
        extra={
            "query_source": "queries",
            "gallery_source": "gallery",
            "sources": {"images": "imgs"},
            "encoder": {"name": "test"},
            "cache": {"query": "off"},
            "seconds": {"search": 0.5},
            "skipped_images": [["a.png", "unreadable"]],
            "worst_classes": [
                {
                    "label": 1,
                    "queries": 3,
                    "recall": {"recall@1": 0.0},
                    "confused_with": 2,
                    "confused_count": 1,
                    "missed_at_1": 3,
                }
            ],
        },
    )
    record["queries"]["paths"] = [f"q{i}.png" for i in range(24)]
    record["queries"]["nearest_label"] = [int(v) for v in rng.integers(0, 6, 24)]
    assert record["num_tied"] and record["num_excluded"]  # ties and lone queries are exercised
    return json.loads(records.dumps_run(record))


@pytest.fixture(scope="module")
def bases():
    return {"query": _base("query"), "class": _base("class")}


def _paths(value, path=()):
    """Every path in ``value``; of a long list (a per-query list) the first, a middle and the
    last position only."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        positions = range(len(value)) if len(value) <= 3 else (0, len(value) // 2)
        for i in positions:
            yield from _paths(value[i], (*path, i))


def _get(record, path):
    for part in path:
        record = record[part]
    return record


def _copy(record):
    return pickle.loads(pickle.dumps(record))


def _mutations(base, only=None):
    """``(description, record or JSON text)`` of every mutation (``only``: of the paths under
    these top-level fields)."""
    for path in _paths(base):
        if not path or (only is not None and path[0] not in only):
            continue
        parent, last = _get(base, path[:-1]), path[-1]
        for value in REPLACEMENTS:
            mutated = _copy(base)
            _get(mutated, path[:-1])[last] = value
            yield f"{path} = {value!r:.20}", mutated
        if isinstance(parent, dict):
            mutated = _copy(base)
            del _get(mutated, path[:-1])[last]
            yield f"{path} removed", mutated
            mutated = _copy(base)
            _get(mutated, path[:-1])["unknown_field"] = 1
            yield f"{path[:-1]} + unknown field", mutated
            # The same key twice in one object: the second one an edited copy.
            text = json.dumps(base, allow_nan=True)
            inner = json.dumps({last: parent[last]})[1:-1]
            edited = json.dumps({last: 0.99})[1:-1]
            if text.count(inner) == 1:
                yield f"{path} repeated", text.replace(inner, inner + ", " + edited)
        elif isinstance(parent, list) and len(parent) > 1:
            mutated = _copy(base)
            del _get(mutated, path[:-1])[last]
            yield f"{path} entry removed", mutated


def _independent_value(name, column, average, labels, lone):
    """A metric's value from its per-query values, by its definition (docs/metrics.md)."""
    counted = [(v if v is not None else 0.0, lab) for v, lab in zip(column, labels, strict=True)]
    if lone == "skip":
        counted = [(v, lab) for v, lab in zip(column, labels, strict=True) if v is not None]
    if not counted:
        return math.nan

    def summary(vs):
        if name == "MedR":
            return float(math.floor(np.median(vs)))
        return math.fsum(vs) / len(vs)

    if average == "query":
        return summary([v for v, _ in counted])
    classes = sorted({json.dumps(lab) for _, lab in counted})
    per = [summary([v for v, lab in counted if json.dumps(lab) == c]) for c in classes]
    return math.fsum(per) / len(per)


def _consistent(record):
    """What an accepted record must be: each known metric's value the summary of its per-query
    values, and readable by the statistics."""
    definitions = record.get("definitions") or {}
    average = definitions.get("average", "query")
    lone = definitions.get("lone_queries", "skip")
    queries = record["queries"]
    values = queries.get("values", {})
    labels = queries.get("labels", [0] * len(queries["ids"]))
    for name, value in records.metrics_of(record).items():
        if name in values:
            want = _independent_value(name, values[name], average, labels, lone)
            got = math.nan if value is None else value
            assert (math.isnan(want) and math.isnan(got)) or math.isclose(
                got, want, rel_tol=1e-9
            ), (name, got, want)
    run = as_run(record, "run")
    for name in values:
        if recallkit.metrics.parse_one(name) is not None:
            run.sample(name)


def _load(tmp_path, content, counter=[0]):  # noqa: B006 (a counter shared by the calls)
    counter[0] += 1
    path = tmp_path / f"run-{counter[0]}.json"
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content, allow_nan=True))
    return path


@pytest.mark.invalid_records
@pytest.mark.parametrize("average", ["query", "class"])
def test_every_mutation_is_refused_naming_the_file_and_field_or_read_consistently(
    bases, tmp_path, average
):
    base = bases[average]
    validator = jsonschema.Draft202012Validator(records.schema("run"))
    legacy = jsonschema.Draft202012Validator({**records.schema("run"), "required": ["queries"]})
    assert not list(validator.iter_errors(base))
    assert records.load_run(_load(tmp_path, base)) == base
    # The base holds every field of the schema, so that each is mutated.
    shipped = records.schema("run")
    assert set(shipped["properties"]) <= set(base)
    assert set(shipped["properties"]["queries"]["properties"]) <= set(base["queries"])
    defined = set(shipped["$defs"]["definitions"]["properties"]) - {"metric_parameters"}
    assert defined - {"average"} <= set(base["definitions"])
    assert average == "query" or "average" in base["definitions"]
    refused = accepted = 0
    fields = set()
    # Every field under the query average; under the class average those that change a value.
    only = None if average == "query" else ("metrics", "queries", "definitions", "bounds")
    for number, (what, content) in enumerate(_mutations(base, only)):
        text = content if isinstance(content, str) else json.dumps(content, allow_nan=True)
        path = tmp_path / f"run-{number}.json"
        try:
            if number % 10 == 0:  # the whole reader, from the file
                path.write_text(text)
                record = records.load_run(path)
            else:  # the same reader once the file is read
                record = records.parse_run(text, path)
        except records.RecordError as error:
            refused += 1
            message = str(error)
            assert isinstance(error, ParameterError)
            assert f"'{path}'" in message, (what, message)
            assert "\n" not in message, (what, message)
            if "pass a run file" in message:  # another kind of recallkit file, named
                assert "queries" in what, (what, message)
            elif not isinstance(content, str):  # valid JSON: the refusal names the field
                assert error.field, (what, message)
                assert f"'{error.field}'" in message, (what, message)
                fields.add(error.field.split(".")[0])
            continue
        accepted += 1
        if not isinstance(content, str):
            # Differential: what the schema refuses, the reader refuses (a record without a
            # format, written by hand, against the schema of the formats read).
            schema = validator if "format" in content else legacy
            errors = [e.message for e in schema.iter_errors(content)]
            assert not errors, (what, errors[:2])
        _consistent(record)
    assert refused > 300 and accepted > 30, (refused, accepted)
    if only is None:  # every top-level field of the schema was found at fault by some mutation
        assert set(records.schema("run")["properties"]) - {"tag"} <= fields | {"format"}, fields


def _first_value(record, value):
    record["queries"]["values"]["MAP@R"][0] = value


def _cli(capsys, *argv):
    capsys.readouterr()
    try:
        rc = cli_main([str(a) for a in argv])
    except SystemExit as exit_:
        rc = int(exit_.code or 0)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


@pytest.mark.invalid_records
@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r["metrics"].update({"MAP@R": 0.99}), "metrics.MAP@R"),
        (lambda r: r["metrics"].update({"recall@1": 7}), "metrics.recall@1"),
        (lambda r: r["metrics"].update({"MnR": -2.0}), "metrics.MnR"),
        (lambda r: r["metrics"].update({"MAP@R": {"a": 1}}), "metrics.MAP@R"),
        (lambda r: r.update({"bounds": "abc"}), "bounds"),
        (lambda r: _first_value(r, 10**400), "queries.values.MAP@R"),
        (
            lambda r: _first_value(r, math.nan),
            "queries.values.MAP@R",
        ),
        (lambda r: _first_value(r, "abc"), "queries.values.MAP@R"),
    ],
)
def test_the_command_line_refuses_an_edited_run_file_in_one_line(
    bases, tmp_path, capsys, edit, field
):
    good = _load(tmp_path, bases["query"])
    mutated = copy.deepcopy(bases["query"])
    edit(mutated)
    bad = _load(tmp_path, mutated)
    for argv in (("compare", good, bad), ("report", bad, "--out", tmp_path / "report.md")):
        rc, out, err = _cli(capsys, *argv)
        assert rc == 2, (argv, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        assert str(bad) in lines[0] and f"'{field}'" in lines[0], lines[0]


@pytest.mark.invalid_records
def test_the_messages_name_the_query_and_the_rule(bases, tmp_path):
    record = copy.deepcopy(bases["query"])
    record["queries"]["values"]["MAP@R"][2] = math.inf
    path = _load(tmp_path, record)
    with pytest.raises(records.RecordError) as caught:
        records.load_run(path)
    assert str(caught.value) == (
        f"The run file '{path}' has a bad 'queries.values.MAP@R' value at query 2: Infinity; "
        "a value is a finite number (NaN and Infinity are not values)."
    )
    assert (caught.value.field, caught.value.query) == ("queries.values.MAP@R", 2)
    record = copy.deepcopy(bases["query"])
    record["metrics"]["MAP@R"] = 0.99
    with pytest.raises(records.RecordError, match=r"'metrics.MAP@R' value: 0.99; it is the mean"):
        records.load_run(_load(tmp_path, record))
    text = json.dumps(bases["query"]).replace('"metrics": {', '"metrics": {}, "metrics": {', 1)
    with pytest.raises(records.RecordError, match="repeats the key 'metrics'"):
        records.load_run(_load(tmp_path, text))


@pytest.mark.skipif(sys.platform != "linux", reason="FIFOs and /dev/zero are POSIX")
def test_what_is_not_a_regular_file_is_named(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    cases = [
        (fifo, "is a FIFO (named pipe), not a regular file"),
        ("/dev/zero", "is a character device, not a regular file"),
        (tmp_path, "is a folder, not a file"),
        (tmp_path / "absent.json", "does not exist"),
        (tmp_path / ("x" * 300 + ".json"), "cannot be read: File name too long"),
    ]
    for path, fragment in cases:
        with pytest.raises(records.RecordError, match=re.escape(fragment)):
            records.load_run(path)
    with pytest.raises(records.RecordError, match=r"history file .* is a FIFO \(named pipe\)"):
        records.read_history(fifo)


def test_a_file_over_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    with open(path, "wb") as handle:
        handle.truncate(3 * 2**20)  # sparse: 3 MiB of zero bytes
    monkeypatch.setenv(records.LIMIT_VARIABLE, "2MiB")
    with pytest.raises(records.RecordError) as caught:
        records.load_run(path)
    assert str(caught.value) == (
        f"The run file '{path}' is 3.0 MiB, over the 2.0 MiB a run file may take (it is read "
        f"whole, at about five times its size in memory); set {records.LIMIT_VARIABLE} (such "
        "as 1GiB) to read it."
    )
    monkeypatch.setenv(records.LIMIT_VARIABLE, "4MiB")
    with pytest.raises(records.RecordError, match=r"is not UTF-8|is not JSON"):
        records.load_run(path)  # under the limit it is read (and is not JSON)
    assert records.RUN_FILE_LIMIT == 128 * 2**20


def test_the_reader_applies_every_keyword_of_the_shipped_schemas():
    """The reader compiles each shipped schema whole (an unknown keyword would raise)."""
    for kind in ("run", "history"):
        for legacy in (False, True):
            records._validator(kind, legacy)
    with pytest.raises(ValueError, match="does not apply the schema keyword"):
        records._compile({"oneOf": []}, {}, {})
