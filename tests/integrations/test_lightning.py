"""The Lightning callback: a short fit logs each epoch's exact validation metrics."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import recallkit
from recallkit.runner import read_history

# Lightning loads on first use, in the tests that run here: collecting this file (which every
# worker of the suite does) does not import it.
if importlib.util.find_spec("lightning") is None:
    pytest.skip("needs Lightning", allow_module_level=True)


def _pl():
    import lightning.pytorch as pl

    return pl


def RetrievalCallback(*args, **kwargs):
    from recallkit.integrations.lightning import RetrievalCallback as cls

    return cls(*args, **kwargs)


NAMES = ["recall@1", "recall@2", "MAP@R", "R-precision"]


def _split(seed, n, classes=6, dim=10):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, dim, generator=torch.Generator().manual_seed(99))
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return TensorDataset(x, y, torch.arange(n))


def Model(outputs=True):
    pl = _pl()

    class Model(pl.LightningModule):
        def __init__(self, outputs=True):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8)
            )
            self.outputs = outputs

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y, _ = batch
            e = torch.nn.functional.normalize(self(x), dim=1)
            same = (y[:, None] == y[None, :]).float()
            return ((e @ e.T - (2 * same - 1)) ** 2).mean()  # pull classes together

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            x, y, i = batch
            if self.outputs:
                return {"embeddings": self(x), "labels": y, "ids": i}
            return None

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    return Model(outputs)


def _trainer(callback, epochs=2):
    return _pl().Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        callbacks=[callback],
    )


def _embed(model, data):
    with torch.no_grad():
        return model(data.tensors[0]), data.tensors[1]


def test_fit_logs_the_exact_metrics_of_each_epoch(tmp_path):
    train, val = _split(0, 120), _split(1, 70)
    history = tmp_path / "runs.jsonl"
    callback = RetrievalCallback(ks=(1, 2), history=history)
    model = Model()
    trainer = _trainer(callback)
    trainer.fit(
        model, DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=16)
    )
    x, y = _embed(model, val)  # the model of the last validation (no step since)
    expected = recallkit.retrieval_metrics(x, x, y, y, NAMES, query_in_reference=True)
    assert dict(callback.result) == dict(expected)
    assert callback.result.query_ids == tuple(range(70))
    for name in NAMES:
        logged = trainer.callback_metrics[f"val/{name}"]
        assert logged.dtype == torch.float64 and logged.item() == expected[name]  # exact
    records = read_history(history)
    assert [r["tag"] for r in records] == ["epoch-0", "epoch-1"]  # not the sanity check
    assert records[1]["metrics"] == dict(expected)
    assert records[0]["metrics"] != records[1]["metrics"]  # the model trained in between


def test_collect_hook_and_separate_gallery():
    train, queries, gallery = _split(2, 60), _split(3, 25), _split(4, 40)

    def collect(pl_module, outputs, batch, batch_idx, dataloader_idx):
        x, y, i = batch
        return pl_module(x), y, i

    callback = RetrievalCallback(
        ks=(1, 2),
        metrics=["recall@1", "recall@2"],
        collect=collect,
        query_in_reference=False,
        gallery_dataloader=1,
        prefix="gal/",
    )
    model = Model(outputs=False)
    trainer = _trainer(callback, epochs=1)
    loaders = [DataLoader(queries, batch_size=10), DataLoader(gallery, batch_size=15)]
    trainer.fit(model, DataLoader(train, batch_size=30), loaders)
    (q, ql), (g, gl) = _embed(model, queries), _embed(model, gallery)
    expected = recallkit.recall_at_k(q, g, ql, gl, (1, 2), query_in_reference=False)
    assert dict(callback.result) == dict(expected)
    assert callback.result.num_reference == 40
    assert "gal/recall@1" in trainer.callback_metrics


def test_the_callback_pickles():
    import pickle

    from recallkit.integrations.lightning import RetrievalCallback as cls

    callback = pickle.loads(pickle.dumps(cls(ks=(1, 2))))
    assert type(callback) is cls and callback.evaluator.ks == (1, 2)


def test_outputs_without_embeddings_are_named():
    callback = RetrievalCallback()
    with pytest.raises(
        ValueError,
        match="'collect' parameter of RetrievalCallback must be given, "
        "or validation_step must return a dict with 'embeddings', 'labels'",
    ):
        callback.collect(None, {"loss": 1.0}, None, 0, 0)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"collect": 3}, "collect"),
        ({"prefix": None}, "prefix"),
        ({"gallery_dataloader": 1}, "gallery_dataloader"),
        ({"query_in_reference": False, "gallery_dataloader": -1}, "gallery_dataloader"),
        ({"ks": (1, 1)}, "ks"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=f"'{name}' parameter of"):
        RetrievalCallback(**kwargs)
