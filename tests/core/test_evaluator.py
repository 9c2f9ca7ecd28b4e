"""recallkit.Evaluator in one process: batches in, the whole split's exact metrics out."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import recallkit
from recallkit import Evaluator
from recallkit.cli import app as cli
from recallkit.runner import load_run, read_history
from tests import brute


def _data(seed: int = 0, n: int = 101, d: int = 8, classes: int = 12):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


def _feed(ev, x, y, ids=None, size=16, reference=False):
    add = ev.update_reference if reference else ev.update
    for s in range(0, len(x), size):
        add(x[s : s + size], y[s : s + size], None if ids is None else ids[s : s + size])


def _brute(q, r, ql, rl, query_in_reference, ks=(1, 2, 4, 8)):
    """Independent reference: float64 scores, full sort, own row excluded by position."""
    s = brute.scores64(q.numpy(), r.numpy(), "cosine")
    excluded = brute.excluded_sets(len(q), len(r), query_in_reference)
    ql, rl = ql.numpy(), rl.numpy()
    out = brute.recall(brute.first_hit_ranks(s, ql, rl, excluded), ks)
    per = [t for t in brute.top_r_metrics(s, ql, rl, excluded) if t[0] > 0]
    out["MAP@R"] = float(np.mean([t[2] for t in per]))
    out["R-precision"] = float(np.mean([t[1] for t in per]))
    return out


def _assert_brute(result, expected):
    for name, value in expected.items():
        if name.startswith("recall@"):
            assert result[name] == value, name  # a count over n: exact
        else:
            assert result[name] == pytest.approx(value, rel=1e-12, abs=1e-15), name


def test_hand_case():
    # Cosine neighbours (own row left out), by hand: row 0 (label 0) ranks row 1, 3, 2, so its
    # label-0 neighbour row 3 is at rank 1; row 1 (label 1): 3, 0, 2 -> rank 2; row 2
    # (label 1): 3, 1, 0 -> rank 1; row 3 (label 0): 1, 2, 0 -> rank 2.
    x = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    ev = Evaluator(ks=(1, 2, 3))
    ev.update(x[:3], torch.tensor([0, 1, 1]))
    ev.update(x[3:], torch.tensor([0]))
    result = ev.compute()
    assert list(result) == ["recall@1", "recall@2", "recall@3", "MAP@R", "R-precision"]
    assert dict(result) == {
        "recall@1": 0.0,
        "recall@2": 0.5,
        "recall@3": 1.0,
        "MAP@R": 0.0,
        "R-precision": 0.0,
    }
    assert result.first_hit_ranks.tolist() == [1, 2, 1, 2]
    assert result.num_queries == 4 and result.num_reference == 4


def test_equals_retrieval_metrics_and_brute_force():
    x, y = _data()
    ev = Evaluator()
    _feed(ev, x, y)
    assert ev.num_rows == 101
    result = ev.compute()
    whole = recallkit.retrieval_metrics(x, x, y, y, ev.metrics, query_in_reference=True)
    assert dict(result) == dict(whole)
    assert result.first_hit_ranks.tolist() == whole.first_hit_ranks.tolist()
    _assert_brute(result, _brute(x, x, y, y, True))
    assert result.definitions["self_exclusion"] == "query_in_reference"
    assert result.query_ids is None


def test_options_and_metric_names_pass_through():
    x, y = _data(1)
    x = torch.round(x)  # integer-valued rows: exact ties under the dot product
    ev = Evaluator(metrics=["precision_at_1", "MAP@5", "IR-recall@3"], metric="dot", chunk_size=7)
    _feed(ev, x, y, size=10)
    result = ev.compute()
    assert list(result) == ["recall@1", "MAP@5", "IR-recall@3"]
    whole = recallkit.retrieval_metrics(
        x, x, y, y, ["recall@1", "MAP@5", "IR-recall@3"], query_in_reference=True, metric="dot"
    )
    assert dict(result) == dict(whole) and result.bounds == whole.bounds
    assert result.num_tied == whole.num_tied > 0
    assert result.definitions["similarity"] == "dot"
    ranks = brute.first_hit_ranks(
        brute.scores64(x.numpy(), x.numpy(), "dot"),
        y.numpy(),
        y.numpy(),
        brute.excluded_sets(101, 101, True),
    )
    assert result["recall@1"] == brute.recall(ranks, [1])["recall@1"]


def test_separate_gallery():
    q, ql = _data(2, n=37)
    g, gl = _data(3, n=64)
    ev = Evaluator(ks=(1, 5), query_in_reference=False)
    _feed(ev, q, ql, size=8)
    _feed(ev, g, gl, size=20, reference=True)
    assert (ev.num_rows, ev.num_reference_rows) == (37, 64)
    result = ev.compute()
    whole = recallkit.retrieval_metrics(q, g, ql, gl, ev.metrics, query_in_reference=False)
    assert dict(result) == dict(whole)
    _assert_brute(result, _brute(q, g, ql, gl, False, ks=(1, 5)))
    assert result.num_reference == 64 and result.definitions["self_exclusion"] == "none"


def test_ids_order_the_rows_and_count_repeats_once():
    """With ids (dataset indices), rows come in any order, repeated rows count once, and the
    result is that of the split ordered by index: what every world size gives."""
    x, y = _data(4)
    order = torch.from_numpy(np.random.default_rng(0).permutation(101))
    padded = torch.cat([order, order[:5]])  # DistributedSampler-style repeats
    ev = Evaluator(ks=(1, 2, 4))
    _feed(ev, x[padded], y[padded], ids=padded, size=13)
    result = ev.compute()
    whole = recallkit.retrieval_metrics(x, x, y, y, ev.metrics, query_in_reference=True)
    assert dict(result) == dict(whole)
    assert result.query_ids == tuple(range(101))
    assert result.first_hit_ranks.tolist() == whole.first_hit_ranks.tolist()
    _assert_brute(result, _brute(x, x, y, y, True, ks=(1, 2, 4)))


def test_numpy_and_list_inputs_and_copies():
    x, y = _data(5, n=20)
    ev = Evaluator(ks=(1,), metrics=["recall@1"])
    buffer = x.numpy().copy()
    ev.update(buffer, y.tolist())
    buffer[:] = 0  # the evaluator holds its own copy
    assert dict(ev.compute()) == dict(
        recallkit.retrieval_metrics(x, x, y, y, ["recall@1"], query_in_reference=True)
    )


def test_compute_twice_then_the_next_batch_begins_a_new_epoch():
    x, y = _data(6, n=60)
    ev = Evaluator(ks=(1, 2))
    _feed(ev, x[:30], y[:30])
    first = ev.compute()
    assert dict(ev.compute()) == dict(first)  # the same epoch, the same values
    _feed(ev, x[30:], y[30:])  # no reset(): the epoch ended at compute
    assert dict(ev.compute()) == dict(
        recallkit.retrieval_metrics(
            x[30:], x[30:], y[30:], y[30:], ev.metrics, query_in_reference=True
        )
    )
    assert ev.computes == 3 and ev.num_rows == 30


def test_rows_stay_until_reset_when_epochs_end_at_reset():
    x, y = _data(6, n=60)
    ev = Evaluator(ks=(1, 2), epoch_ends="reset")  # torchmetrics' convention
    _feed(ev, x[:30], y[:30])
    ev.compute()
    _feed(ev, x[30:], y[30:])
    assert dict(ev.compute()) == dict(
        recallkit.retrieval_metrics(x, x, y, y, ev.metrics, query_in_reference=True)
    )
    with pytest.raises(ValueError, match="'epoch_ends' parameter of Evaluator"):
        Evaluator(epoch_ends="never")


@pytest.mark.parametrize("with_ids", [True, False])
def test_a_forgotten_reset_returns_the_new_epochs_values(with_ids):
    """Epoch 2's embeddings (the model trained) without reset(): epoch 2's values, neither
    epoch 1's (ids) nor the two epochs' rows together (no ids)."""
    x1, y = _data(11, n=80)
    x2 = x1 + 0.5 * _data(12, n=80)[0]
    ids = torch.arange(80) if with_ids else None
    ev = Evaluator(ks=(1,), metrics=["recall@1"])
    _feed(ev, x1, y, ids)
    first = ev.compute()
    _feed(ev, x2, y, ids)
    second = ev.compute()
    want = recallkit.retrieval_metrics(x2, x2, y, y, ["recall@1"], query_in_reference=True)
    assert dict(second) == dict(want) != dict(first)
    assert second.num_queries == 80


def test_an_id_given_again_with_other_values_names_reset():
    x, y = _data(13, n=20)
    ev = Evaluator(ks=(1,), epoch_ends="reset")
    ev.update(x, y, torch.arange(20))
    ev.compute()
    with pytest.raises(
        ValueError,
        match=r"'ids' parameter of Evaluator.update must be one "
        r"dataset index per item of the epoch.*call reset\(\) at the start of each "
        r"epoch.*Got index 0 in row 0 of batch 1 .* with another embedding than in "
        r"row 0 of batch 0",
    ):
        ev.update(x + 1, y, torch.arange(20))
    ev.update(x[:4], y[:4], torch.arange(4))  # the same rows again (padding): accepted
    z = x[:2].clone()
    with pytest.raises(ValueError, match=r"index 1 in row 1 of batch 2 .* another label"):
        ev.update(z, torch.tensor([y[0], y[1] + 1]), torch.arange(2))
    with pytest.raises(
        ValueError,
        match=r"index 25 in row 1 of batch 2 .* than in row 0 of "
        r"batch 2",
    ):
        ev.update(x[:2], y[:2], torch.tensor([25, 25]))


def test_reset_forgets_the_rows():
    x, y = _data(7, n=50)
    ev = Evaluator(ks=(1, 2))
    _feed(ev, x, y)
    ev.compute()
    ev.reset()
    assert ev.num_rows == 0
    with pytest.raises(RuntimeError, match=r"before any update"):
        ev.compute()
    ev.update(x[:20], y[:20])
    assert dict(ev.compute()) == dict(
        recallkit.retrieval_metrics(
            x[:20], x[:20], y[:20], y[:20], ev.metrics, query_in_reference=True
        )
    )
    ev.reset()
    ev.update(x[:20].double(), y[:20])  # after reset a batch of another dtype is a fresh start
    assert ev.num_rows == 20


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"ks": 0}, "ks"),
        ({"ks": (1, 1)}, "ks"),
        ({"ks": "1"}, "ks"),
        ({"metrics": ["recall@x"]}, "metrics"),
        ({"metrics": []}, "metrics"),
        ({"metric": "hamming"}, "metric"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"precision": "float8"}, "precision"),
        ({"lone_queries": "drop"}, "lone_queries"),
        ({"batch_size": 3}, "batch_size"),
        ({"query_in_reference": "yes"}, "query_in_reference"),
        ({"run_file": "epoch.json"}, "run_file"),
        ({"history": 3}, "history"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=f"'{name}' parameter of Evaluator"):
        Evaluator(**kwargs)


def test_history_folder_refused(tmp_path):
    with pytest.raises(ValueError, match=r"'history' parameter of Evaluator must be a file path"):
        Evaluator(history=tmp_path)


def test_bad_batches_are_named():
    x, y = _data(8, n=10)
    ev = Evaluator()
    ev.update(x, y)
    with pytest.raises(
        ValueError,
        match=r"'embeddings' parameter of Evaluator.update must be "
        r"of the dimension, dtype and device of the earlier batches \(dimension 8, "
        r"torch.float32, cpu\). Got dimension 4, torch.float32, cpu",
    ):
        ev.update(x[:, :4], y)
    with pytest.raises(ValueError, match=r"earlier batches .*Got dimension 8, torch.float64, cpu"):
        ev.update(x.double(), y)
    with pytest.raises(ValueError, match=r"'labels' parameter of Evaluator.update must be int"):
        ev.update(x, y.float())
    with pytest.raises(ValueError, match=r"'labels' parameter .* of length 10"):
        ev.update(x, y[:9])
    with pytest.raises(ValueError, match=r"'labels' parameter .* 1-D"):
        ev.update(x, y[:, None])
    with pytest.raises(ValueError, match=r"'ids' parameter .* every batch or for none"):
        ev.update(x, y, torch.arange(10))
    with pytest.raises(ValueError, match=r"'embeddings' parameter .* 2-D"):
        ev.update(x[0], y[:1])
    with pytest.raises(ValueError, match=r"'query_in_reference' parameter .* must be False"):
        ev.update_reference(x, y)
    assert ev.num_rows == 10  # refused batches are not kept
    z = x.clone()
    z[3, 1] = float("nan")
    ev.update(x[:2], y[:2])
    with pytest.raises(
        ValueError,
        match=r"'embeddings' parameter of Evaluator.update must be "
        r"finite \(no NaN or infinity\). Got a non-finite value in row 3 of batch "
        r"2 \(batches count from 0",
    ):
        ev.update(z, y)


def test_gallery_checks():
    x, y = _data(9, n=10)
    ev = Evaluator(query_in_reference=False)
    ev.update(x, y)
    with pytest.raises(RuntimeError, match=r"before any update_reference"):
        ev.compute()
    with pytest.raises(
        ValueError,
        match=r"'embeddings' parameter of Evaluator.update_reference "
        r"must be of dimension 8, as the embeddings rows",
    ):
        ev.update_reference(x[:, :3], y)
    assert ev.num_reference_rows == 0


def test_compute_before_update():
    with pytest.raises(RuntimeError, match=r"Evaluator.compute was called before any update"):
        Evaluator().compute()


def test_negative_ids_refused():
    x, y = _data(10, n=6)
    ev = Evaluator(ks=(1,))
    with pytest.raises(
        ValueError,
        match=r"'ids' parameter of Evaluator.update must be "
        r"non-negative dataset indices. Got -3 in row 3 of batch 0",
    ):
        ev.update(x, y, torch.tensor([0, 1, 2, -3, 4, 5]))


def test_a_tag_cannot_leave_the_run_folder(tmp_path):
    x, y = _data(14, n=12)
    ev = Evaluator(ks=(1,), run_file=str(tmp_path / "runs" / "{tag}.json"))
    ev.update(x, y)
    for bad in ("../escaped", "a/b", "..", "", "a\\b"):
        with pytest.raises(
            ValueError,
            match=r"'tag' parameter of Evaluator.compute must be a "
            r"plain name",
        ):
            ev.compute(tag=bad)
    assert not (tmp_path / "escaped.json").exists() and not (tmp_path / "runs").exists()
    ev.compute(tag="epoch-1")
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["epoch-1.json"]


def test_history_and_run_files_for_plot_and_compare(tmp_path, capsys):
    x, y = _data(11)
    history = tmp_path / "runs.jsonl"
    runs = tmp_path / "runs" / "{tag}.json"
    ev = Evaluator(ks=(1, 2, 4), history=history, run_file=str(runs))
    results = []
    for epoch in range(3):
        ev.reset()
        _feed(ev, x + 0.5 * epoch * torch.nn.functional.one_hot(y, 12)[:, :8], y)
        results.append(ev.compute())
    records = read_history(history)
    assert [r["tag"] for r in records] == ["epoch-1", "epoch-2", "epoch-3"]
    for record, result in zip(records, results, strict=True):
        assert record["metrics"] == dict(result)  # floats survive JSON exactly
        assert record["ks"] == [1, 2, 4] and record["num_queries"] == 101
        assert record["definitions"] == result.definitions
        assert record["producer"] == "recallkit.Evaluator"
    run = load_run(tmp_path / "runs" / "epoch-3.json")
    assert run["queries"]["first_hit_rank"] == results[2].first_hit_ranks.tolist()
    assert run["queries"]["ids"] == [str(i) for i in range(101)]

    plot = tmp_path / "recall.png"
    assert cli.main(["plot", str(history), "-o", str(plot)]) == 0
    assert plot.stat().st_size > 0
    capsys.readouterr()
    a, b = tmp_path / "runs" / "epoch-3.json", tmp_path / "runs" / "epoch-1.json"
    assert cli.main(["compare", str(a), str(b), "--resamples", "200", "--metrics", "recall@1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 runs, 101 paired queries"), out
    row = next(line.split() for line in out.splitlines() if line.startswith("  recall@1 "))
    assert [row[1], row[4]] == [f"{results[2]['recall@1']:.4f}", f"{results[0]['recall@1']:.4f}"]


def test_repeated_tag_warns(tmp_path):
    x, y = _data(12, n=20)
    ev = Evaluator(ks=(1,), history=tmp_path / "h.jsonl")
    ev.update(x, y)
    ev.compute(tag="e")
    with pytest.warns(UserWarning, match=r"'e' is already in the history file") as caught:
        ev.compute(tag="e")
    assert caught[0].filename == __file__
    with pytest.raises(ValueError, match=r"'tag' parameter"):
        ev.compute(tag=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(read_history(tmp_path / "h.jsonl")) == 2


def test_a_record_is_json_of_the_result(tmp_path):
    from recallkit.runfiles import records

    x, y = _data(13, n=30)
    ev = Evaluator(ks=(1, 2), metrics=["recall@1", "recall@2"])
    ev.update(x, y)
    result = ev.compute()
    record = records.evaluation_record(result, tag="t")
    text = records.dumps_run(record)
    assert json.loads(text)["metrics"] == dict(result)
    assert records.file_kind(text) == "run"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_batches_stay_on_the_gpu():
    x, y = _data(14, n=300)
    ev = Evaluator()
    for s in range(0, 300, 64):
        ev.update(x[s : s + 64].cuda(), y[s : s + 64].cuda(), torch.arange(s, min(s + 64, 300)))
    assert all(t.is_cuda for t in ev._query.rows)
    assert all(t.is_cuda for t in ev._query.labels)
    result = ev.compute()
    whole = recallkit.retrieval_metrics(x, x, y, y, ev.metrics, query_in_reference=True)
    assert dict(result) == dict(whole)


def test_importing_the_evaluator_loads_no_adapter_library():
    code = (
        "import sys, recallkit, recallkit.evaluator, recallkit.runfiles.records\n"
        "import recallkit.integrations.torchmetrics, recallkit.integrations.lightning\n"
        "recallkit.Evaluator\n"
        "print(sorted(m for m in ('torchmetrics', 'lightning', 'pytorch_lightning',"
        " 'recallkit.runner', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.strip() == "[]"
