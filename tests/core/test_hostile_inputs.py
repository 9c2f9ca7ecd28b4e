"""Hostile inputs and objects: a Result that cannot be changed, rank checks, missing extras, and
the command line's refusals of repeated K, edited run files and a CUDA-only precision."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

import recallkit

X = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]])
LABELS = [0, 0, 1, 1]


def _result():
    return recallkit.retrieval_metrics(
        X,
        X,
        LABELS,
        LABELS,
        ["recall@1", "MAP@R"],
        query_in_reference=True,
        query_ids=np.array([1, 2, 3, 4]),
        reference_ids=np.array([1, 2, 3, 4]),
    )


def test_a_result_cannot_be_changed():
    r = _result()
    for change in (
        lambda: r.__setitem__("recall@1", 0.0),
        lambda: r.update({"recall@1": 0.0}),
        lambda: r.pop("recall@1"),
        lambda: r.clear(),
        lambda: r.per_query.__setitem__("recall@1", np.zeros(4)),
        lambda: r.bounds.update({}),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    for name in ("per_query", "first_hit_ranks", "bounds", "query_ids", "info", "ks"):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(r, name, None)
    with pytest.raises(ValueError, match="read-only"):
        r.per_query["MAP@R"][0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        r.first_hit_ranks[0] = 3
    assert dict(r) == {"recall@1": 0.5, "MAP@R": 0.5}  # dict(result) is a copy to change


def test_an_unpickled_result_is_as_read_only_and_equal():
    r = _result()
    copy = pickle.loads(pickle.dumps(r))
    assert dict(copy) == dict(r) and copy.bounds == r.bounds and copy.query_ids == r.query_ids
    for array in (copy.per_query["MAP@R"], copy.first_hit_ranks, copy.evaluated):
        assert not array.flags.writeable
    with pytest.raises(TypeError, match="read-only"):
        copy["recall@1"] = 1.0


def test_a_result_is_json_and_its_dict_is_plain_json():
    r = _result()
    assert json.loads(json.dumps(r)) == {"recall@1": 0.5, "MAP@R": 0.5}  # as PML's dicts
    text = json.dumps(r.to_dict(), allow_nan=False)  # numpy ids become plain integers
    assert json.loads(text)["query_ids"] == [1, 2, 3, 4]
    torch = pytest.importorskip("torch")
    t = recallkit.retrieval_metrics(
        X,
        X,
        LABELS,
        LABELS,
        ["recall@1"],
        query_in_reference=True,
        query_ids=torch.arange(4),
        reference_ids=torch.arange(4),
    )
    assert json.loads(json.dumps(t.to_dict()))["query_ids"] == [0, 1, 2, 3]


def test_recall_from_ranks_checks_its_tie_bounds():
    with pytest.raises(
        ValueError,
        match="'pessimistic' parameter of recall_from_ranks must be given with 'optimistic'",
    ):
        recallkit.recall_from_ranks([0, 1], [1], optimistic=[0, 0])
    with pytest.raises(
        ValueError,
        match=r"'optimistic' parameter .* at most the ranks, which "
        r"are at most the pessimistic ranks. Got optimistic 1, rank 0, "
        r"pessimistic 0 at position 0",
    ):
        recallkit.recall_from_ranks([0, 1], [1], optimistic=[1, 0], pessimistic=[0, 1])
    with pytest.raises(ValueError, match=r"'pessimistic' parameter .* of length 2"):
        recallkit.recall_from_ranks([0, 1], [1], optimistic=[0, 0], pessimistic=[0])
    r = recallkit.recall_from_ranks([0, 1], [1], optimistic=[0, 0], pessimistic=[0, 2])
    assert dict(r) == {"recall@1": 0.5} and r.bounds["recall@1"] == (0.5, 1.0)


@pytest.mark.parametrize("module", ["torchmetrics", "lightning"])
def test_a_missing_extra_says_what_to_install_in_one_line(module):
    name = "RetrievalMetrics" if module == "torchmetrics" else "RetrievalCallback"
    script = (
        "import sys\n"
        f"sys.modules[{module!r}] = None\n"
        f"sys.modules[{module + '.pytorch'!r}] = None\n"
        "try:\n"
        f"    from recallkit.integrations.{module} import {name}\n"
        "except ModuleNotFoundError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    line = done.stdout.strip()
    assert line.count("\n") == 0 and done.stderr == ""
    assert f"recallkit.integrations.{module} needs" in line and f"pip install {module}" in line


def test_cli_refuses_a_repeated_k_edited_run_files_and_float16_on_the_cpu(tmp_path):
    from recallkit.cli import main

    np.save(tmp_path / "e.npy", np.eye(4, dtype=np.float32) + 0.1)
    np.save(tmp_path / "l.npy", np.array([0, 0, 1, 1]))
    base = [
        "evaluate",
        "--embeddings",
        str(tmp_path / "e.npy"),
        "--labels",
        str(tmp_path / "l.npy"),
    ]

    def run(*args):
        import contextlib
        import io

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main([str(a) for a in args])
        return code, err.getvalue()

    code, err = run(*base, "--ks", "1,1")
    assert code == 2 and err == "recallkit evaluate: error: --ks takes each K once. Got 1 twice.\n"
    code, err = run(*base, "--precision", "float16", "--device", "cpu")
    assert code == 2 and "--precision float16 filters on CUDA" in err and "precision=" not in err
    assert run(*base, "--json", tmp_path / "a.json")[0] == 0
    record = json.loads((tmp_path / "a.json").read_text())
    shorter = {**record, "queries": {**record["queries"], "ids": record["queries"]["ids"][:3]}}
    (tmp_path / "b.json").write_text(json.dumps(shorter))
    code, err = run("compare", tmp_path / "a.json", tmp_path / "b.json")
    assert code == 2 and "has 3 query ids but 4 first-hit ranks" in err
    (tmp_path / "c.json").write_text(json.dumps({**record, "format": "recallkit.evaluation/9"}))
    code, err = run("compare", tmp_path / "a.json", tmp_path / "c.json")
    assert code == 2 and "bad 'format' value" in err and "recallkit.evaluation/3" in err
