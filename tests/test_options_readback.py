"""Options declared once and read back in one place; byte units; class averages in a fixed order.

- ``recallkit.options.parse_bytes``: KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB powers of
  1024, a fraction of a byte count is refused;
- each option's choices and command-line parser are its declaration's: the definitions record and
  the JSON Schema hold the same choices, ``add_flags`` takes a flag's type from the declaration;
- a misspelt choice or keyword names the nearest valid spelling;
- ``Options.from_definitions`` is what comparisons, per-class values and the run-file reader read;
- ``average="class"`` is bit-identical under any permutation of the rows.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np
import pytest

import recallkit
from recallkit import options
from recallkit.comparison import as_run
from recallkit.exceptions import ParameterError
from recallkit.options import Option, Options, parse_bytes
from recallkit.runfiles import definitions, records


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("1", 1),
        ("1000000", 1_000_000),
        ("1KB", 1000),
        ("1 kb", 1000),
        ("1k", 1024),
        ("1KiB", 1024),
        ("512MB", 512 * 10**6),
        ("512MiB", 512 * 2**20),
        ("8GB", 8 * 10**9),
        ("8 GiB", 8 * 2**30),
        ("1 TB", 10**12),
        ("1TiB", 2**40),
        ("1.5GiB", 3 * 2**29),
        ("1.5GB", 1_500_000_000),
        ("2b", 2),
    ],
)
def test_byte_units_are_read_as_people_write_them(text, count):
    assert parse_bytes(text) == count


@pytest.mark.parametrize("text", ["0", "1.5", "0.0004KB", "lots", "1 XB", "-1", "1e9", "KB", ""])
def test_what_is_not_a_byte_count_is_refused(text):
    assert parse_bytes(text) is None


def test_a_float_memory_budget_is_refused_naming_the_units():
    with pytest.raises(
        ParameterError, match=r"'memory_budget' .* whole number of bytes.* Got 1\.5"
    ):
        Options.of("f", memory_budget=1.5)
    assert Options.of("f", memory_budget="1 TB").memory_budget == 10**12
    assert Options.of("f", memory_budget=np.int64(4096)).memory_budget == 4096
    assert Options.of("f", memory_budget=2.5e9).memory_budget == 2_500_000_000  # a whole float


def test_the_definitions_record_and_the_schema_hold_the_options_choices():
    schema = records.schema("run")
    fields = schema["$defs"]["definitions"]["properties"]
    assert definitions.SIMILARITIES == options.SIMILARITIES
    assert tuple(fields["similarity"]["enum"]) == options.BY_NAME["metric"].choices
    assert tuple(fields["lone_queries"]["enum"]) == options.BY_NAME["lone_queries"].choices
    # A record names average only when it is not the default.
    average = options.BY_NAME["average"]
    assert tuple(fields["average"]["enum"]) == tuple(
        c for c in average.choices if c != average.default
    )
    assert tuple(schema["properties"]["metric"]["enum"]) == (*options.SIMILARITIES, None)
    # Every value-changing option with choices is one the definitions record knows.
    labelled = {o.name for o in options.OPTIONS if o.scope == "label" and o.choices}
    assert labelled - {"lone_queries"} == set(definitions.CHOICES)


def test_a_flag_takes_its_type_from_the_declaration():
    """A new integer option, declared with its parser, arrives on the command line as an int
    (the flag's type is not chosen from the option's name)."""
    declared = replace(
        options.BY_NAME["chunk_size"], name="decimals", help="digits kept", metavar="N"
    )
    parser = argparse.ArgumentParser()
    saved = dict(options.BY_NAME)
    options.BY_NAME["decimals"] = declared
    try:
        options.add_flags(parser, only=["decimals", "memory_budget", "metric"])
    finally:
        options.BY_NAME.clear()
        options.BY_NAME.update(saved)
    args = parser.parse_args(["--decimals", "4", "--memory-budget", "1KB", "--metric", "dot"])
    assert (args.decimals, args.memory_budget, args.metric) == (4, 1000, "dot")
    assert all(isinstance(o, Option) for o in options.OPTIONS)
    with pytest.raises(SystemExit):
        parser.parse_args(["--memory-budget", "1.5"])


def test_misspelt_choices_and_keywords_name_the_nearest_spelling():
    with pytest.raises(ParameterError, match=r"Got 'cosin' \(did you mean 'cosine'\?\)\.$"):
        Options.of("f", metric="cosin")
    with pytest.raises(ParameterError, match=r"did you mean 'lone_queries'\?"):
        Options.of("f", lone_querys="skip")
    x = np.eye(3)
    with pytest.raises(ParameterError, match=r"unknown keyword \(did you mean 'average'\?\)"):
        recallkit.recall_at_k(x, x, [0, 1, 1], [0, 1, 1], ks=(1,), averag="class")
    with pytest.raises(ParameterError, match=r"Got 'clas' \(did you mean 'class'\?\)"):
        recallkit.recall_at_k(x, x, [0, 1, 1], [0, 1, 1], ks=(1,), average="clas")


def test_options_are_read_back_from_the_definitions_in_one_place():
    record = definitions.definitions("dot", "ids", "zero", changed={"average": "class"})
    assert Options.from_definitions(record) == Options(
        metric="dot", lone_queries="zero", average="class"
    )
    assert Options.from_definitions(None) == Options()
    with pytest.raises(ParameterError, match=r"'average' parameter of intervals .*Got 'classes'"):
        Options.from_definitions({**record, "average": "classes"}, "intervals")
    # What the comparison reads is that reader's.
    rng = np.random.default_rng(0)
    x, labels = rng.standard_normal((30, 3)), rng.integers(0, 4, 30)
    result = recallkit.retrieval_metrics(
        x, x, labels, labels, ["recall@1"], query_in_reference=True, average="class"
    )
    run = as_run(result)
    assert run.options == Options.from_definitions(result.definitions) == Options(average="class")


@pytest.mark.parametrize("tuples", [False, True])
def test_the_class_average_is_bit_identical_under_any_order_of_the_rows(tuples):
    rng = np.random.default_rng(5)
    n, m = 90, 70
    x, ref = rng.standard_normal((n, 4)), rng.standard_normal((m, 4))
    codes, ref_codes = rng.integers(0, 13, n), rng.integers(0, 13, m)

    def labelled(c):
        return [(int(v) % 3, f"c{int(v)}") for v in c] if tuples else c

    first = recallkit.retrieval_metrics(
        x, ref, labelled(codes), labelled(ref_codes), ["MAP@R", "nDCG@3", "MedR"], average="class"
    )
    # The value by its definition: per class the correctly rounded mean, then their mean.
    per = recallkit.retrieval_metrics(
        x, ref, labelled(codes), labelled(ref_codes), ["MAP@R"], average="query"
    ).per_query["MAP@R"]
    means = [
        math.fsum(per[(codes == c) & ~np.isnan(per)].tolist())
        / int(((codes == c) & ~np.isnan(per)).sum())
        for c in sorted(set(codes[~np.isnan(per)].tolist()))
    ]
    assert first["MAP@R"] == math.fsum(means) / len(means)
    for seed in range(6):
        order = np.random.default_rng(seed).permutation(n)
        again = recallkit.retrieval_metrics(
            x[order],
            ref,
            labelled(codes[order]),
            labelled(ref_codes),
            ["MAP@R", "nDCG@3", "MedR"],
            average="class",
        )
        assert dict(again) == dict(first)  # bit for bit
