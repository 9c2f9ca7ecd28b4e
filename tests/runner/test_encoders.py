"""Encoders: torchvision by name with local weights, ``module:callable``, embedding files."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import torch
import torchvision

from recallkit.exceptions import RunnerError
from recallkit.runner.encoders import (
    Preprocessing,
    callable_encoder,
    function_encoder,
    load_embeddings,
    torchvision_encoder,
)

MODEL = "mobilenet_v3_small"


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("w") / f"{MODEL}.pth"
    torch.save(torchvision.models.get_model(MODEL, weights=None).state_dict(), path)
    return path


def _model_args(hand_case, tmp_path, weights, *extra):
    query, gallery = hand_case
    return (
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--model",
        MODEL,
        "--weights",
        weights,
        "--resize",
        "32",
        "--crop",
        "32",
        "--device",
        "cpu",
        "--cache-dir",
        tmp_path / "cache",
        "--ks",
        "1",
        "--json",
        tmp_path / "r.json",
        *extra,
    )


def test_torchvision_model_drop_head_and_cache(cli, hand_case, tmp_path, weights, read_json):
    res = cli(*_model_args(hand_case, tmp_path, weights))
    assert res.rc == 0, res.err
    record = read_json(tmp_path / "r.json")
    # mobilenet_v3_small's classifier ends Linear(1024, 1000); dropping it leaves 1024 features.
    assert record["embedding_dim"] == 1024
    assert record["encoder"]["encoder"] == f"torchvision:{MODEL}:head=drop"
    assert record["encoder"]["preprocessing"]["crop"] == 32
    assert "gallery embeddings: cache miss" in res.err

    again = cli(*_model_args(hand_case, tmp_path, weights))
    assert "gallery embeddings: cache hit" in again.err

    cropped = cli(*_model_args(hand_case, tmp_path, weights, "--crop", "16"))
    assert "gallery embeddings: cache miss" in cropped.err  # preprocessing is in the key


def test_changed_weights_invalidate(cli, hand_case, tmp_path, weights):
    local = tmp_path / "w.pth"
    state = torch.load(weights, weights_only=True)
    torch.save(state, local)
    assert cli(*_model_args(hand_case, tmp_path, local)).rc == 0
    state["classifier.0.bias"] += 0.5
    torch.save(state, local)
    res = cli(*_model_args(hand_case, tmp_path, local))
    assert res.rc == 0, res.err
    assert "gallery embeddings: cache miss" in res.err


def test_head_keep_gives_the_logits(cli, hand_case, tmp_path, weights, read_json):
    res = cli(*_model_args(hand_case, tmp_path, weights, "--head", "keep"))
    assert res.rc == 0, res.err
    assert read_json(tmp_path / "r.json")["embedding_dim"] == 1000


def test_backbone_only_weights_load_with_head_drop(tmp_path, weights):
    state = torch.load(weights, weights_only=True)
    backbone = {k: v for k, v in state.items() if not k.startswith("classifier.3.")}
    torch.save({"state_dict": {f"module.{k}": v for k, v in backbone.items()}}, tmp_path / "b.pt")
    enc = torchvision_encoder(MODEL, tmp_path / "b.pt", preprocessing=Preprocessing(32, 32))
    from PIL import Image

    out = enc([Image.new("RGB", (40, 40), (9, 9, 9))])
    assert out.shape == (1, 1024)
    with pytest.raises(RunnerError, match="do not fit"):
        torchvision_encoder(MODEL, tmp_path / "b.pt", head="keep")


def test_model_errors(tmp_path, weights):
    with pytest.raises(RunnerError, match=r"no model named 'resnet-50'\. Did you mean"):
        torchvision_encoder("resnet-50", weights)
    with pytest.raises(RunnerError, match="does not exist"):
        torchvision_encoder(MODEL, tmp_path / "missing.pth")
    (tmp_path / "junk.pth").write_bytes(b"junk")
    with pytest.raises(RunnerError, match="cannot be read"):
        torchvision_encoder(MODEL, tmp_path / "junk.pth")
    with pytest.raises(RunnerError, match="do not fit resnet18"):
        torchvision_encoder("resnet18", weights)


MODULE = """
import torch
from torch import nn


class Doubler(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        return x.flatten(1) * self.scale


def model():
    return Doubler()


def model_and_transform():
    import numpy as np

    def transform(image):
        return torch.from_numpy(np.asarray(image, dtype=np.float32).mean(axis=(0, 1)))

    return Doubler(), transform


INSTANCE = Doubler()


def returns_number():
    return 3
"""


@pytest.fixture
def model_module(tmp_path, monkeypatch):
    (tmp_path / "rk_model_mod.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "rk_model_mod"
    sys.modules.pop("rk_model_mod", None)


def test_callable_variants(model_module):
    from PIL import Image

    red = Image.new("RGB", (2, 2), (10, 20, 30))
    # (module, transform): the mean RGB doubled.
    enc = callable_encoder(f"{model_module}:model_and_transform")
    np.testing.assert_array_equal(enc([red]), [[20.0, 40.0, 60.0]])
    assert enc.preprocessing["transform"].startswith("<function")
    # A bare module gets the preprocessing given (resize/crop off, mean 0, std 1 -> x / 255).
    pre = Preprocessing(None, None, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    enc = callable_encoder(f"{model_module}:model", preprocessing=pre)
    out = enc([red])
    assert out.shape == (1, 12)
    np.testing.assert_allclose(out[0, [0, 4, 8]], [20 / 255, 40 / 255, 60 / 255], rtol=1e-6)
    # A module instance is used as it is; its digest follows its weights.
    a = callable_encoder(f"{model_module}:INSTANCE", preprocessing=pre)
    b = callable_encoder(f"{model_module}:model", preprocessing=pre)
    assert a.digest == b.digest
    with pytest.raises(RunnerError, match="returned a int"):
        callable_encoder(f"{model_module}:returns_number")


def test_function_encoder_digest_follows_module_weights():
    net = torch.nn.Linear(2, 2)

    def encode(batch):
        return net(torch.stack(batch))

    before = function_encoder(encode).digest
    with torch.no_grad():
        net.weight += 1
    assert function_encoder(encode).digest != before
    assert function_encoder(encode, "my-encoder").identity == "my-encoder"


def test_load_embeddings_formats_and_errors(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.save(tmp_path / "e.npy", x)
    torch.save({"embeddings": torch.from_numpy(x), "labels": torch.zeros(3)}, tmp_path / "e.pt")
    from safetensors.numpy import save_file

    save_file({"only": x}, str(tmp_path / "e.safetensors"))
    for name in ("e.npy", "e.pt", "e.safetensors"):
        np.testing.assert_array_equal(load_embeddings(tmp_path / name), x)
    np.save(tmp_path / "v.npy", np.zeros(3))
    with pytest.raises(RunnerError, match="2-D numeric array"):
        load_embeddings(tmp_path / "v.npy")
    np.save(tmp_path / "n.npy", np.array([[0.0, 1.0], [np.nan, 0.0]]))
    with pytest.raises(RunnerError, match="NaN or infinite value in row 1"):
        load_embeddings(tmp_path / "n.npy")
    torch.save({"a": torch.zeros(2, 2), "b": torch.zeros(2, 2)}, tmp_path / "two.pt")
    with pytest.raises(RunnerError, match="holds 2 tensors"):
        load_embeddings(tmp_path / "two.pt")
    (tmp_path / "e.txt").write_text("1 2")
    with pytest.raises(RunnerError, match="must end in"):
        load_embeddings(tmp_path / "e.txt")
    (tmp_path / "bad.npy").write_bytes(b"nope")
    with pytest.raises(RunnerError, match="cannot be read"):
        load_embeddings(tmp_path / "bad.npy")


def test_pixels_encoder_rows():
    from PIL import Image

    from recallkit.runner.encoders import pixels

    images = [Image.new("RGB", (5, 3), (255, 0, 0)), Image.new("L", (4, 4), 51)]
    out = pixels(images)
    expected = np.stack(
        [
            np.concatenate([np.tile([1.0, 0.0, 0.0], 256), [1.0]]),
            np.concatenate([np.full(768, 0.2), [1.0]]),
        ]
    ).astype(np.float32)
    assert out.dtype == np.float32 and out.shape == (2, 769)
    np.testing.assert_array_equal(out, expected)
    assert pixels([]).shape == (0, 769)
