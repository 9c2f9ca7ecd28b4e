"""``recallkit evaluate`` on saved arrays: the library's numbers, from one engine pass.

The command line and the library give the same value for the same file, for every metric of
the registry and for integer, float16, float32 and float64 files; the engine is prepared once per
run, under the flags' options (precision, device); files of the wrong kind say what the flag
expects."""

from __future__ import annotations

import json

import numpy as np
import pytest

import recallkit
from recallkit import engine
from recallkit.options import Options

NAMES = [
    "recall@1",
    "recall@5",
    "precision@5",
    "IR-recall@5",
    "MAP@5",
    "MAP@R",
    "R-precision",
    "MRR",
    "nDCG@10",
]


def _data(dtype, n: int = 90, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 7, size=n)
    if np.dtype(dtype).kind in "iu":
        # values float32 cannot tell apart: 2**24 and 2**24 + 1
        x = rng.integers(0, 3, size=(n, 5)).astype(dtype) + np.asarray(2**24, dtype=dtype)
        x[:, 0] += rng.integers(0, 2, size=n).astype(dtype)
    else:
        x = (rng.standard_normal((7, 6))[labels] + rng.standard_normal((n, 6))).astype(dtype)
    return x, labels


@pytest.mark.parametrize("dtype", ["int64", "float16", "float32", "float64"])
def test_every_metric_equals_the_library_on_the_same_file(cli, tmp_path, dtype):
    x, labels = _data(dtype)
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    res = cli(
        "evaluate",
        "--embeddings",
        tmp_path / "e.npy",
        "--labels",
        tmp_path / "l.npy",
        "--ks",
        "1",
        "5",
        "--metrics",
        *NAMES[2:],
        "--metric",
        "dot",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    record = json.loads((tmp_path / "r.json").read_text())
    want = recallkit.retrieval_metrics(
        x, x, labels, labels, NAMES, metric="dot", query_in_reference=True
    )
    assert record["metrics"] == {k: v for k, v in want.items()}  # each under its own name
    assert record["queries"]["first_hit_rank"] == want.first_hit_ranks.tolist()
    assert record["definitions"]["self_exclusion"] == "query_in_reference"
    for name in NAMES:
        assert f"  {name}:" in res.out


def test_the_integers_are_scored_exactly_not_as_float32(cli, tmp_path):
    x, labels = _data("int64")
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    res = cli(
        "evaluate",
        "--embeddings",
        tmp_path / "e.npy",
        "--labels",
        tmp_path / "l.npy",
        "--ks",
        "1",
        "--metric",
        "euclidean",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    exact = recallkit.recall_at_k(
        x, x, labels, labels, (1,), metric="euclidean", query_in_reference=True
    )
    cast = recallkit.recall_at_k(
        x.astype(np.float32),
        x.astype(np.float32),
        labels,
        labels,
        (1,),
        metric="euclidean",
        query_in_reference=True,
    )
    assert exact["recall@1"] != cast["recall@1"]  # the case tells the two apart
    got = json.loads((tmp_path / "r.json").read_text())
    assert got["metrics"]["recall@1"] == exact["recall@1"]
    assert got["num_tied"] == exact.num_tied


def test_a_query_set_against_a_gallery(cli, tmp_path):
    x, labels = _data("float32", n=80)
    q, g = x[:30], x[30:]
    for name, value in {"q": q, "g": g, "ql": labels[:30], "gl": labels[30:]}.items():
        np.save(tmp_path / f"{name}.npy", value)
    (tmp_path / "gl.txt").write_text("".join(f"{v}\n" for v in labels[30:]))
    res = cli(
        "evaluate",
        "--query-embeddings",
        tmp_path / "q.npy",
        "--query-labels",
        tmp_path / "ql.npy",
        "--gallery-embeddings",
        tmp_path / "g.npy",
        "--gallery-labels",
        tmp_path / "gl.npy",
        "--metrics",
        "MAP@R",
        "--json",
        tmp_path / "r.json",
    )
    assert res.rc == 0, res.err
    want = recallkit.retrieval_metrics(
        q,
        g,
        labels[:30],
        labels[30:],
        ["recall@1", "recall@5", "recall@10", "MAP@R"],
        query_in_reference=False,
    )
    got = json.loads((tmp_path / "r.json").read_text())
    assert got["metrics"] == dict(want)
    assert got["definitions"]["self_exclusion"] == "none"


def test_one_engine_pass_under_the_flags_options(cli, tmp_path, monkeypatch):
    x, labels = _data("float32")
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    seen: list[Options] = []
    prepare = engine.prepare

    def counted(query, reference, options, func, *args, **kwargs):
        seen.append(options)
        return prepare(query, reference, options, func, *args, **kwargs)

    monkeypatch.setattr(engine, "prepare", counted)
    res = cli(
        "evaluate",
        "--embeddings",
        tmp_path / "e.npy",
        "--labels",
        tmp_path / "l.npy",
        "--metrics",
        "MAP@R",
        "--precision",
        "float32",
        "--device",
        "cpu",
        "--chunk-size",
        "17",
        "--memory-budget",
        "64MiB",
        "--worst",
        "3",
    )
    assert res.rc == 0, res.err
    assert len(seen) == 1  # metrics, worst classes and their confusions: one pass
    assert (seen[0].precision, str(seen[0].device), seen[0].chunk_size) == ("float32", "cpu", 17)
    assert seen[0].memory_budget == 64 * 2**20
    assert "most often ranked first instead" in res.out


def test_lone_queries_flag_reaches_the_library(cli, tmp_path):
    x, labels = _data("float32", n=20)
    labels[0] = 99  # a class of one: lone under leave-one-out
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    base = ("evaluate", "--embeddings", tmp_path / "e.npy", "--labels", tmp_path / "l.npy")
    res = cli(*base, "--lone-queries", "zero", "--json", tmp_path / "r.json")
    assert res.rc == 0, res.err
    want = recallkit.recall_at_k(
        x, x, labels, labels, (1, 5, 10), query_in_reference=True, lone_queries="zero"
    )
    assert json.loads((tmp_path / "r.json").read_text())["metrics"] == dict(want)
    res = cli(*base, "--lone-queries", "error")
    assert res.rc == 2 and res.err.count("\n") == 1
    assert "--lone-queries error" in res.err and "lone_queries" not in res.err


@pytest.mark.parametrize(
    ("flag", "make", "expected"),
    [
        (
            "--labels",
            lambda p: np.save(p, np.eye(4)),
            "--labels takes one label per row: a 1-D .npy array or a text file, one per line; ",
        ),
        ("--images", lambda p: np.save(p, np.arange(4)), "is a NumPy array file, not a folder"),
        ("--embeddings", lambda p: p.write_text("a\nb\n"), "embeddings"),
    ],
)
def test_a_file_of_the_wrong_kind_says_what_the_flag_expects(cli, tmp_path, flag, make, expected):
    path = tmp_path / ("x.npy" if flag != "--embeddings" else "x.txt")
    make(path)
    np.save(tmp_path / "e.npy", np.eye(4, dtype=np.float32))
    np.save(tmp_path / "l.npy", np.array([0, 0, 1, 1]))
    args = {
        "--labels": ["--embeddings", tmp_path / "e.npy", "--labels", path],
        "--images": ["--images", path, "--embeddings", tmp_path / "e.npy"],
        "--embeddings": ["--embeddings", path, "--labels", tmp_path / "l.npy"],
    }[flag]
    res = cli("evaluate", *args)
    assert res.rc == 2 and res.err.count("\n") == 1, res.err
    assert expected in res.err
    assert "codec can't decode" not in res.err


def test_an_old_run_file_with_values_under_recall_is_still_read(cli, tmp_path):
    x, labels = _data("float32", n=30)
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    assert (
        cli(
            "evaluate",
            "--embeddings",
            tmp_path / "e.npy",
            "--labels",
            tmp_path / "l.npy",
            "--json",
            tmp_path / "new.json",
        ).rc
        == 0
    )
    record = json.loads((tmp_path / "new.json").read_text())
    record["recall"] = record.pop("metrics")
    record["format"] = "recallkit.evaluation/2"
    (tmp_path / "old.json").write_text(json.dumps(record))
    res = cli("compare", tmp_path / "new.json", tmp_path / "old.json")
    assert res.rc == 0, res.err
    assert "recall@1" in res.out


def test_the_history_line_counts_its_runs_in_words(cli, tmp_path):
    x, labels = _data("float32", n=20)
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    base = (
        "evaluate",
        "--embeddings",
        tmp_path / "e.npy",
        "--labels",
        tmp_path / "l.npy",
        "--history",
        tmp_path / "runs.jsonl",
    )
    assert f"history: {tmp_path / 'runs.jsonl'} (1 run)\n" in cli(*base).err
    assert f"history: {tmp_path / 'runs.jsonl'} (2 runs)\n" in cli(*base).err
