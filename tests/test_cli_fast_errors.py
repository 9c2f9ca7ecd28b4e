"""A bad argument, a misspelt metric or a missing extra is said before anything heavy loads.

Each case runs ``recallkit`` in a fresh interpreter and checks its one error line and exit
status 2, then that the engine's native libraries (torch, numba) were never imported: the line
comes before their seconds of loading. A misspelt metric name names the nearest valid one, in the
library and on the command line.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import recallkit
from recallkit import metrics as registry
from tests.blocking import run_python

HEAVY = ("torch", "numba", "onnxruntime", "sklearn", "matplotlib")


def _run(argv: list[str], cwd, missing=()):
    """``recallkit ARGV`` in a fresh interpreter: ``(exit status, stderr, heavy modules
    loaded)``."""
    code = (
        "import json, sys\n"
        "from recallkit.cli.app import main\n"
        f"rc = main({argv!r})\n"
        f"print(json.dumps([rc, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    done = run_python(code, missing=missing, cwd=cwd)
    rc, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    return rc, done.stderr, loaded


@pytest.fixture
def arrays(tmp_path):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "e.npy", rng.standard_normal((12, 4)).astype(np.float32))
    np.save(tmp_path / "l.npy", np.arange(12) % 3)
    return ["--embeddings", str(tmp_path / "e.npy"), "--labels", str(tmp_path / "l.npy")]


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            ["--ks", "0"],
            "recallkit evaluate: error: --ks takes positive integers, like --ks 1 5 10. Got '0'.",
        ),
        (["--ks", "1", "1"], "recallkit evaluate: error: --ks takes each K once. Got 1 twice."),
        (
            ["--model", "resnet18"],
            (
                "recallkit evaluate: error: Give one encoder: --embeddings FILE (or "
                "--query-embeddings and --gallery-embeddings), --model NAME --weights FILE, or "
                "--callable MODULE:NAME."
            ),
        ),
        (
            ["--show-topk", "3"],
            "recallkit evaluate: error: --show-topk needs --show-out FILE (.png or .html).",
        ),
    ],
)
def test_evaluate_bad_arguments_before_the_engine_loads(tmp_path, arrays, extra, line):
    rc, err, loaded = _run(["evaluate", *arrays, *extra], tmp_path)
    assert (rc, err, loaded) == (2, line + "\n", [])
    assert not list(tmp_path.glob("*.json"))


def test_evaluate_misspelt_metric_names_the_nearest(tmp_path, arrays):
    rc, err, loaded = _run(["evaluate", *arrays, "--metrics", "MAP@R", "nDGC@10"], tmp_path)
    assert (rc, loaded) == (2, [])
    assert err.startswith("recallkit evaluate: error: --metrics must be metric names such as ")
    assert err.endswith("Got 'nDGC@10' (did you mean 'nDCG@10'?).\n")
    assert err.count("\n") == 1


@pytest.mark.parametrize("missing", [["sklearn"], ["matplotlib"], ["PIL"]], ids="-".join)
def test_demo_without_its_extra_before_the_engine_loads(tmp_path, missing):
    rc, err, loaded = _run(["demo", "--out", "out", "--fast"], tmp_path, missing=missing)
    assert rc == 2 and loaded == [] and err.count("\n") == 1
    assert err.startswith("recallkit demo: error: recallkit demo needs ")
    assert "(the 'demo' extra)" in err
    assert list(tmp_path.iterdir()) == []


def test_the_checks_do_not_stop_a_good_run(tmp_path, arrays, capsys):
    # The same arguments, good: the run goes through (in this process).
    from recallkit.cli.app import main

    assert main(["evaluate", *arrays, "--ks", "1", "2", "--metrics", "MAP@R", "--quiet"]) == 0


@pytest.mark.parametrize(
    ("given", "nearest"),
    [
        ("recal@1", "recall@1"),
        ("nDGC@10", "nDCG@10"),
        ("ndgc_at_5", "ndcg_at_5"),
        ("mapr", "MAP@R"),
        ("r-precison", "R-precision"),
        ("precison@3", "precision@3"),
        ("median_rnak", "median_rank"),
    ],
)
def test_a_misspelt_metric_names_the_nearest_valid_name(given, nearest):
    x = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.5, 1.0]])
    labels = [0, 1, 0, 1]
    with pytest.raises(ValueError) as caught:
        recallkit.retrieval_metrics(x, x, labels, labels, [given], query_in_reference=True)
    message = str(caught.value)
    assert message.startswith("The 'metrics' parameter of retrieval_metrics must be metric names")
    assert message.endswith(f"Got {given!r} (did you mean {nearest!r}?).")
    assert registry.parse_one(nearest) is not None  # the suggestion is a valid name


def test_a_name_near_nothing_gets_no_suggestion():
    with pytest.raises(ValueError) as caught:
        registry.parse(["xyzzy"], "f")
    assert str(caught.value).endswith("Got 'xyzzy'.")


@pytest.mark.parametrize(
    ("ks", "line"),
    [
        (["0"], "recallkit cirr: error: --ks must be positive integers. Got 0."),
        (
            ["1", "5", "1"],
            (
                "recallkit cirr: error: --ks must be distinct (each K once). Got [1, 5, 1], "
                "with 1 twice."
            ),
        ),
    ],
)
def test_protocol_bad_ks_before_the_engine_loads(tmp_path, arrays, ks, line):
    argv = ["cirr", "--root", str(tmp_path), "--queries", arrays[1], "--images", arrays[1]]
    rc, err, loaded = _run([*argv, "--ks", *ks], tmp_path)
    assert (rc, err, loaded) == (2, line + "\n", [])
