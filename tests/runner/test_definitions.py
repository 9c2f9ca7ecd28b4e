"""The definitions record: its fields and id, in run files and history lines; compare and plot."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata

import numpy as np
import pytest

from recallkit.comparison import compare
from recallkit.exceptions import RunnerError
from recallkit.runfiles.definitions import (
    check_definitions,
    definitions,
    definitions_id,
    differences,
)
from recallkit.runner.history_plot import definitions_marks, history_figure
from tests.runner.checks import one_error_line, valid_run

VERSION = metadata.version("recallkit")
# The canonical JSON of the default definitions, typed out: keys sorted, no spaces.
CANONICAL = (
    '{"definitions_version":1,"exactness":"float64 decisions, fixed order",'
    '"k_clamp":"clamped to the candidates","lone_queries":"skip","self_exclusion":"ids",'
    '"similarity":"cosine","ties":"lower reference index first"}'
)
COSINE_IDS = hashlib.sha256(CANONICAL.encode()).hexdigest()[:12]


def test_fields_and_id():
    assert COSINE_IDS == "0df9bf47ae64"  # stable: it changes only when a definition does
    assert definitions("cosine", "ids") == {
        "id": COSINE_IDS,
        "similarity": "cosine",
        "ties": "lower reference index first",
        "exactness": "float64 decisions, fixed order",
        "self_exclusion": "ids",
        "lone_queries": "skip",
        "k_clamp": "clamped to the candidates",
        "definitions_version": 1,
        "recallkit": VERSION,
    }
    # The id covers every field but the recallkit version.
    base = definitions("cosine", "ids")
    assert definitions_id({**base, "recallkit": "99.0"}) == COSINE_IDS
    ids = {COSINE_IDS}
    for field, value in [
        ("similarity", "dot"),
        ("ties", "random"),
        ("exactness", "float32"),
        ("self_exclusion", "none"),
        ("lone_queries", "zero"),
        ("k_clamp", "none"),
        ("definitions_version", 2),
    ]:
        ids.add(definitions_id({**base, field: value}))
    assert len(ids) == 8
    other = definitions("euclidean", "query_in_reference")
    canonical = CANONICAL.replace('"ids"', '"query_in_reference"').replace("cosine", "euclidean")
    assert other["id"] == hashlib.sha256(canonical.encode()).hexdigest()[:12]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("cosin", "ids"), "The 'metric' parameter of definitions must be one of 'cosine'"),
        (("cosine", "id"), "The 'self_exclusion' parameter of definitions must be one of"),
        (("cosine", "ids", "one"), "The 'lone_queries' parameter of definitions must be one of"),
    ],
)
def test_bad_arguments(args, fragment):
    with pytest.raises(ValueError, match=fragment):
        definitions(*args)


def test_check_and_differences():
    base = definitions("cosine", "ids")
    assert check_definitions(base) is base
    # A field added by a later recallkit is accepted when the id covers it.
    later = {**base, "extra": "x"}
    later["id"] = definitions_id(later)
    assert check_definitions(later) is later
    for value, message in [
        ([], "The definitions record is a list, not an object of fields."),
        ({k: v for k, v in base.items() if k != "ties"}, "The definitions record has no 'ties'"),
        ({**base, "similarity": None}, "has 'similarity' null; it must be a string."),
        ({**base, "definitions_version": True}, "has 'definitions_version' true; it must be a"),
        ({**base, "self_exclusion": "none"}, "an 'id' that does not match its fields"),
    ]:
        with pytest.raises(ValueError) as info:
            check_definitions(value)
        assert message in str(info.value)
    assert differences(base, definitions("dot", "none")) == ["similarity", "self_exclusion"]
    assert differences(base, {**base, "recallkit": "0.0.1"}) == []
    assert differences(base, later) == ["extra"]


# --------------------------------------------------------------- what evaluate writes


def _folder(tmp_path, make_image):
    # a/1 (1, 0), a/2 (1, 0.2), b/1 (0, 1), b/2 (0.2, 1): each image's nearest other image is
    # its class partner under every metric, so recall@1 = 1.
    root = tmp_path / "imgs"
    for rel in ("a/1.png", "a/2.png", "b/1.png", "b/2.png"):
        make_image(root / rel, (1, 2, 3))
    emb = np.array([[1, 0], [1, 0.2], [0, 1], [0.2, 1]], dtype=np.float32)
    np.save(tmp_path / "e.npy", emb)
    return root


def _evaluate(cli, tmp_path, root, tag, metric="cosine", *extra):
    return cli(
        "evaluate",
        "--images",
        root,
        "--embeddings",
        tmp_path / "e.npy",
        "--ks",
        "1",
        "--metric",
        metric,
        "--history",
        tmp_path / "runs.jsonl",
        "--tag",
        tag,
        "--json",
        tmp_path / f"{tag}.json",
        *extra,
    )


def test_run_file_and_history_carry_the_definitions(cli, tmp_path, make_image, read_json):
    root = _folder(tmp_path, make_image)
    res = _evaluate(cli, tmp_path, root, "e1")
    assert res.rc == 0, res.err
    record = read_json(tmp_path / "e1.json")
    # Folder images have path identities: self-matches are excluded by id.
    assert record["definitions"] == definitions("cosine", "ids")
    assert record["definitions"]["id"] == COSINE_IDS
    (line,) = (tmp_path / "runs.jsonl").read_text().splitlines()
    assert json.loads(line)["definitions"] == record["definitions"]
    res = _evaluate(cli, tmp_path, root, "e2", "dot")
    assert read_json(tmp_path / "e2.json")["definitions"]["similarity"] == "dot"


def test_api_runs_without_ids_say_none():
    from recallkit.runner.pipeline import run_evaluation, run_record
    from recallkit.runner.sources import ImageSet

    emb = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    s = ImageSet((0, 1, 2), ("x", "x", "y"), None, "toy")
    run = run_evaluation(s, s, None, (1,), query_embeddings=emb, gallery_embeddings=emb.copy())
    assert run_record(run)["definitions"] == definitions("cosine", "none")


def test_api_refuses_one_array_as_both_sides_without_ids():
    from recallkit.runner.pipeline import run_evaluation
    from recallkit.runner.sources import ImageSet

    emb = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    s = ImageSet((0, 1, 2), ("x", "x", "y"), None, "toy")
    with pytest.raises(ValueError, match="each query would retrieve itself: give query_ids"):
        run_evaluation(s, s, None, (1,), query_embeddings=emb, gallery_embeddings=emb)


# ------------------------------------------------------------------------------ compare


def _run_file(path, ranks, ks=(1, 2), defs=None, valid=True, **extra):
    """A run file of recall@K from first-hit ranks; with ``valid``, checked against the shipped
    schema (a damaged definitions record is written on purpose with ``valid=False``)."""
    record = {
        "format": "recallkit.evaluation/4",
        "tag": None,
        "ks": list(ks),
        "metrics": {f"recall@{k}": sum(r < k for r in ranks) / len(ranks) for k in ks},
        "num_queries": len(ranks),
        "queries": {"ids": [f"q{i}" for i in range(len(ranks))], "first_hit_rank": list(ranks)},
        **extra,
    }
    if defs is not None:
        record["definitions"] = defs
    if valid:
        valid_run(record)
    path.write_text(json.dumps(record))
    return record


def test_compare_refuses_other_definitions(cli, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _run_file(a, [0, 1], defs=definitions("cosine", "ids"))
    _run_file(b, [0, 0], defs=definitions("dot", "none"))
    res = cli("compare", a, b)
    line = one_error_line(res)
    assert line == (
        "recallkit compare: error: a and b were computed under different definitions: "
        "similarity ('cosine' in a, 'dot' in b); self_exclusion ('ids' in a, 'none' in b); "
        "values are comparable only under the same definitions."
    )
    assert res.out == ""
    # A field only one record has (a later recallkit's) is a difference too.
    later = definitions("cosine", "ids") | {"extra": "x"}
    later["id"] = definitions_id(later)
    _run_file(b, [0, 0], defs=later)
    one_error_line(cli("compare", a, b), "extra (None in a, 'x' in b)")


def test_compare_notes_a_version_or_a_missing_record(cli, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _run_file(a, [0, 1], defs=definitions("cosine", "ids"))
    _run_file(b, [0, 0], defs={**definitions("cosine", "ids"), "recallkit": "0.0.1"})
    res = cli("compare", a, b)
    assert res.rc == 0, res.err
    assert res.err == (
        f"note: the runs were written by recallkit 0.0.1, {VERSION}, under the same "
        f"definitions ({COSINE_IDS}).\n"
    )
    # Without a record in one file: a note, and the comparison goes on (b hits q1 at 1, a not).
    _run_file(b, [0, 0])
    res = cli("compare", a, b, "--json", tmp_path / "c.json")
    assert res.rc == 0, res.err
    assert res.err.splitlines()[0] == (
        "note: b has no definitions record (written before recallkit recorded them): the "
        "similarity, tie rule and exclusions cannot be checked to match; compared anyway."
    )
    assert "  recall@1  a  b  -0.5000" in res.out
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["definitions_id"] is None and saved["notes"][0].startswith("b has no")
    _run_file(a, [0, 1])
    res = cli("compare", a, b)
    assert res.rc == 0, res.err
    assert res.err.splitlines()[0] == (
        "note: a, b have no definitions record (written before recallkit recorded them): the "
        "similarity, tie rule and exclusions cannot be checked to match; compared anyway."
    )


def test_compare_api_keeps_the_shared_id(tmp_path):
    defs = definitions("cosine", "ids")
    a = _run_file(tmp_path / "a.json", [0, 1], defs=defs)
    b = _run_file(tmp_path / "b.json", [0, 1], defs=defs)
    c = compare({"a": a, "b": b}, n_resamples=100)
    assert (c.definitions_id, c.notes) == (COSINE_IDS, ())
    with pytest.raises(ValueError, match=r"^a and b were computed under different definitions"):
        compare({"a": a, "b": {**b, "definitions": definitions("cosine", "none")}})


@pytest.mark.invalid_records
def test_compare_refuses_a_damaged_definitions_record(cli, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _run_file(a, [0, 1], defs=definitions("cosine", "ids"))
    _run_file(b, [0, 1], defs={**definitions("cosine", "ids"), "similarity": "dot"}, valid=False)
    one_error_line(
        cli("compare", a, b),
        f"The run file '{b}' has a 'definitions' record that has an 'id' that does not match "
        "its fields",
    )
    _run_file(b, [0, 1], defs="cosine", valid=False)
    one_error_line(
        cli("compare", a, b),
        f"The run file '{b}' has a bad 'definitions' value: \"cosine\"; it is an object or null.",
    )


# --------------------------------------------------------------------------------- plot


def test_plot_marks_runs_under_other_definitions(cli, tmp_path, make_image):
    root = _folder(tmp_path, make_image)
    for tag, metric in (("e1", "cosine"), ("e2", "dot"), ("e3", "cosine")):
        assert _evaluate(cli, tmp_path, root, tag, metric).rc == 0
    history = tmp_path / "runs.jsonl"
    # An old line without a definitions record, as written before they were recorded.
    old = json.loads(history.read_text().splitlines()[0])
    del old["definitions"]
    old["tag"] = "old"
    with history.open("a") as handle:
        handle.write(json.dumps(old) + "\n")
    res = cli("plot", history, "-o", tmp_path / "p.png")
    assert res.rc == 0, res.err
    assert res.err.splitlines() == [
        "note: run 2 (e2) of " + str(history) + " uses other definitions than run 1 (e1): "
        "similarity; marked * on the plot.",
        "note: run 4 (old) of " + str(history) + " records no definitions (written before "
        "recallkit recorded them); marked ? on the plot.",
        f"plot: {tmp_path / 'p.png'}",
    ]
    records = [json.loads(line) for line in history.read_text().splitlines()]
    marks, _ = definitions_marks(records)
    assert marks == ["", "*", "", "?"]
    (ax,) = history_figure(records, ["recall@1"], "t", marks).axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["e1", "e2 *", "e3", "old ?"]
    assert ax.get_xlabel() == ("run   (* other definitions than run 1; ? definitions not recorded)")


def test_plot_of_runs_under_one_set_of_definitions_marks_nothing(cli, tmp_path, make_image):
    root = _folder(tmp_path, make_image)
    for tag in ("e1", "e2"):
        assert _evaluate(cli, tmp_path, root, tag).rc == 0
    res = cli("plot", tmp_path / "runs.jsonl", "-o", tmp_path / "p.png")
    assert res.rc == 0 and res.err == f"plot: {tmp_path / 'p.png'}\n", res.err
    # A history of old lines only (no run records its definitions): nothing to mark either.
    old = [{"tag": "a", "recall": {"recall@1": 0.5}}, {"tag": "b", "recall": {"recall@1": 0.6}}]
    assert definitions_marks(old) == (["", ""], [])
    (ax,) = history_figure(old, ["recall@1"], "t").axes
    assert ax.get_xlabel() == "run"
    # A damaged record names the run.
    with pytest.raises(RunnerError, match=r"^Run 2 \(b\) of h.jsonl has a 'definitions' record"):
        definitions_marks([old[0], {**old[1], "definitions": [1]}], "h.jsonl")
