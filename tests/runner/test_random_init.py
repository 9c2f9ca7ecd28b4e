"""``--random-init``: a torchvision model's random initialisation from a fixed seed, a baseline."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from recallkit.exceptions import RunnerError
from recallkit.runner.encoders import (
    RANDOM_INIT_SEED,
    Preprocessing,
    state_digest,
    torchvision_encoder,
)
from tests.runner.checks import one_error_line

SMALL = Preprocessing(resize=32, crop=32)


def _images():
    return [Image.new("RGB", (40, 36), c) for c in [(200, 10, 10), (10, 200, 10), (9, 9, 99)]]


def test_the_same_weights_and_embeddings_every_time():
    before = torch.random.get_rng_state()
    first = torchvision_encoder("resnet18", random_init=True, preprocessing=SMALL)
    second = torchvision_encoder("resnet18", random_init=True, preprocessing=SMALL)
    # The caller's generator is untouched.
    assert torch.equal(torch.random.get_rng_state(), before)
    assert first.digest == second.digest
    assert first.identity == "torchvision:resnet18:head=drop:random-init:seed=0"
    assert first.describe()["weights"] == "random initialisation, seed 0"
    # Built independently: torchvision's resnet18 after torch.manual_seed(0), fc dropped.
    assert RANDOM_INIT_SEED == 0
    torch.manual_seed(0)
    reference = torchvision.models.resnet18(weights=None)
    reference.fc = torch.nn.Identity()
    reference.eval()
    assert first.digest == state_digest(reference)
    batch = torch.stack([SMALL.transform()(image) for image in _images()])
    with torch.inference_mode():
        expected = reference(batch).numpy()
    got = first(_images())
    assert got.shape == (3, 512)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(second(_images()), expected)
    # Another seed would give other weights: the digest sees the weights themselves.
    torch.manual_seed(1)
    other = torchvision.models.resnet18(weights=None)
    other.fc = torch.nn.Identity()
    assert state_digest(other) != first.digest


def test_weights_or_random_init_not_both_nor_neither(tmp_path):
    for kwargs in ({}, {"weights": tmp_path / "w.pth", "random_init": True}):
        with pytest.raises(RunnerError, match="needs weights: a weights file"):
            torchvision_encoder("resnet18", **kwargs)


def test_cli_random_init_baseline_is_cached(cli, hand_case, tmp_path, read_json):
    query, gallery = hand_case
    args = (
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--model",
        "resnet18",
        "--random-init",
        "--resize",
        "32",
        "--crop",
        "32",
        "--device",
        "cpu",
        "--ks",
        "1",
        "--cache-dir",
        tmp_path / "cache",
        "--json",
        tmp_path / "r.json",
    )
    res = cli(*args)
    assert res.rc == 0, res.err
    assert "gallery embeddings: cache miss" in res.err
    record = read_json(tmp_path / "r.json")
    assert record["embedding_dim"] == 512
    assert record["encoder"]["encoder"] == "torchvision:resnet18:head=drop:random-init:seed=0"
    again = cli(*args[:-1], tmp_path / "r2.json")
    assert again.rc == 0, again.err
    assert "gallery embeddings: cache hit" in again.err
    assert read_json(tmp_path / "r2.json")["queries"] == record["queries"]
    assert (
        read_json(tmp_path / "r2.json")["encoder"]["weights_digest"]
        == (record["encoder"]["weights_digest"])
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--callable", "recallkit.runner.encoders:pixels", "--random-init"],
            "--random-init goes with --model.",
        ),
        (
            ["--model", "resnet18", "--random-init", "--weights", "{tmp}/w.pth"],
            "Give --weights FILE or --random-init, not both.",
        ),
        (
            ["--model", "resnet18"],
            (
                "--model needs --weights FILE, a local state dict (nothing is downloaded), or "
                "--random-init for the model's random initialisation (fixed seed)."
            ),
        ),
    ],
)
def test_cli_random_init_errors(cli, tmp_path, make_image, extra, message):
    make_image(tmp_path / "imgs" / "a" / "1.png", (1, 2, 3))
    make_image(tmp_path / "imgs" / "a" / "2.png", (3, 2, 1))
    args = [a.format(tmp=tmp_path) for a in extra]
    res = cli("evaluate", "--images", tmp_path / "imgs", "--no-cache", *args)
    assert one_error_line(res) == f"recallkit evaluate: error: {message}"
