"""The torchmetrics adapter in one process (tests/distributed/test_evaluator.py runs it on 2)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import recallkit
from tests import brute

# torchmetrics loads on first use, in the tests that run here: collecting this file (which every
# worker of the suite does) does not import it.
if importlib.util.find_spec("torchmetrics") is None:
    pytest.skip("needs torchmetrics", allow_module_level=True)


def _cls():
    from recallkit.integrations.torchmetrics import RetrievalMetrics as cls

    return cls


def RetrievalMetrics(*args, **kwargs):
    return _cls()(*args, **kwargs)


def _data(seed=0, n=90, d=6):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, 8, (n,), generator=g)


def test_is_a_metric_equal_to_retrieval_metrics_and_brute_force():
    x, y = _data()
    metric = RetrievalMetrics(ks=(1, 4))
    import torchmetrics

    assert isinstance(metric, torchmetrics.Metric)
    for s in range(0, 90, 32):
        assert metric(x[s : s + 32], y[s : s + 32]) is None  # forward only accumulates
    got = metric.compute()
    expected = recallkit.retrieval_metrics(
        x, x, y, y, ["recall@1", "recall@4", "MAP@R", "R-precision"], query_in_reference=True
    )
    assert list(got) == list(expected)
    assert {k: v.item() for k, v in got.items()} == dict(expected)
    assert all(v.dtype == torch.float64 for v in got.values())
    assert dict(metric.result) == dict(expected)
    ranks = brute.first_hit_ranks(
        brute.scores64(x.numpy(), x.numpy(), "cosine"),
        y.numpy(),
        y.numpy(),
        brute.excluded_sets(90, 90, True),
    )
    assert got["recall@4"].item() == brute.recall(ranks, [4])["recall@4"]


def test_reset_update_and_cache():
    x, y = _data(1)
    metric = RetrievalMetrics(ks=(1,), metrics=["recall@1"])
    metric.update(x[:40], y[:40])
    first = metric.compute()
    metric.update(x[40:], y[40:])  # a new update invalidates the cached value
    whole = recallkit.recall_at_k(x, x, y, y, (1,), query_in_reference=True)
    assert metric.compute()["recall@1"].item() == whole["recall@1"]
    assert (
        first["recall@1"].item()
        == recallkit.recall_at_k(x[:40], x[:40], y[:40], y[:40], (1,), query_in_reference=True)[
            "recall@1"
        ]
    )
    metric.reset()
    assert metric.evaluator.num_rows == 0 and metric.result is None
    with pytest.warns(UserWarning, match="called before the ``update``"):
        with pytest.raises(RuntimeError, match="before any update"):
            metric.compute()


def test_copies_and_pickles_keep_the_rows():
    import copy
    import pickle

    x, y = _data(4, n=40)
    metric = RetrievalMetrics(ks=(1,), metrics=["recall@1"])
    metric.update(x, y)
    expected = recallkit.recall_at_k(x, x, y, y, (1,), query_in_reference=True)["recall@1"]
    for other in (copy.deepcopy(metric), pickle.loads(pickle.dumps(metric))):
        assert type(other) is _cls()
        assert other.compute()["recall@1"].item() == expected


def test_separate_gallery():
    q, ql = _data(2, n=30)
    g, gl = _data(3, n=50)
    metric = RetrievalMetrics(ks=(1, 2), metrics=["recall@1", "recall@2"], query_in_reference=False)
    metric.update(q, ql)
    metric.update_reference(g, gl)
    expected = recallkit.recall_at_k(q, g, ql, gl, (1, 2), query_in_reference=False)
    assert {k: v.item() for k, v in metric.compute().items()} == dict(expected)


@pytest.mark.parametrize("name", ["sync_on_compute", "dist_sync_on_step"])
def test_torchmetrics_sync_is_refused(name):
    with pytest.raises(
        ValueError,
        match=f"'{name}' parameter of RetrievalMetrics must be left "
        "unset: torchmetrics' sync would gather every embedding",
    ):
        RetrievalMetrics(**{name: True})


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="'ks' parameter of Evaluator"):
        RetrievalMetrics(ks=0)
    with pytest.raises(ValueError, match="'metric' parameter of Evaluator"):
        RetrievalMetrics(metric="l1")
    metric = RetrievalMetrics()
    metric.update(torch.ones(3, 4), torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="earlier batches"):
        metric.update(torch.ones(3, 5), torch.tensor([0, 0, 1]))
