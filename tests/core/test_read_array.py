"""recallkit._inputs.io.read_array: the one whole-file reader of .npy, .pt/.pth and .safetensors
arrays."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from recallkit._inputs.io import read_array


def test_shapes_dtypes_and_named_tensors(tmp_path):
    ranks = np.array([3, 1, 2], dtype=np.int32)
    cube = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    with_nan = np.array([[0.5, np.nan]], dtype=np.float32)
    np.save(tmp_path / "r.npy", ranks)
    np.save(tmp_path / "c.npy", cube)
    np.save(tmp_path / "n.npy", with_nan)
    np.save(tmp_path / "be.npy", cube.astype(">f8"))
    torch.save({"a": torch.tensor([1, 2]), "b": torch.tensor([[1.5]])}, tmp_path / "two.pth")
    # bfloat16 holds 1.5 and -2.0 exactly
    half = torch.tensor([[1.5, -2.0]], dtype=torch.bfloat16)
    save_file({"x": half}, str(tmp_path / "h.safetensors"))

    got = read_array(tmp_path / "r.npy", ndim=1)
    assert got.dtype == np.int32 and got.tolist() == [3, 1, 2]
    assert read_array(tmp_path / "c.npy", ndim=(2, 3)).tolist() == cube.tolist()
    assert np.isnan(read_array(tmp_path / "n.npy")[0, 1])  # NaN rules belong to the caller
    big_endian = read_array(tmp_path / "be.npy")
    assert big_endian.dtype.isnative and big_endian.tolist() == cube.tolist()
    assert read_array(tmp_path / "two.pth", "a").tolist() == [1, 2]
    assert read_array(tmp_path / "two.pth", default_key="b").tolist() == [[1.5]]
    half = read_array(tmp_path / "h.safetensors")
    assert half.dtype == np.float32 and half.tolist() == [[1.5, -2.0]]


def test_errors_name_the_file(tmp_path):
    np.save(tmp_path / "r.npy", np.array([3, 1, 2]))
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    np.save(tmp_path / "z.npy", np.zeros(2, dtype=np.complex64))
    torch.save({"a": torch.zeros(1), "b": torch.zeros(1)}, tmp_path / "two.pt")
    (tmp_path / "bad.npy").write_bytes(b"nope")
    (tmp_path / "x.txt").write_text("1")
    real = "must hold real numbers (floats or integers of at most 64 bits)."
    cases = [
        ("missing.npy", {}, "The ranks file '{d}/missing.npy' does not exist."),
        ("x.txt", {}, "The ranks file '{d}/x.txt' must end in .npy, .pt, .pth, .safetensors."),
        ("r.npy", {"ndim": 2}, "The ranks file '{d}/r.npy' must hold a 2-D array. Got shape (3,)."),
        (
            "r.npy",
            {"ndim": (2, 3)},
            "The ranks file '{d}/r.npy' must hold a 2-D or 3-D array. Got shape (3,).",
        ),
        (
            "r.npy",
            {"key": "a"},
            "The ranks file '{d}/r.npy' holds one array, not several named ones; drop '#a'.",
        ),
        (
            "two.pt",
            {},
            "The ranks file '{d}/two.pt' holds 2 tensors (a, b); name the one to read.",
        ),
        ("two.pt", {"key": "c"}, "The ranks file '{d}/two.pt' has no tensor 'c' (it has a, b)."),
        ("s.npy", {}, "The ranks file '{d}/s.npy' " + real + " Got dtype <U1."),
        ("z.npy", {}, "The ranks file '{d}/z.npy' " + real + " Got dtype complex64."),
    ]
    (tmp_path / "folder.npy").mkdir()
    os.mkfifo(tmp_path / "pipe.npy")
    cases += [
        ("folder.npy", {}, "The ranks file '{d}/folder.npy' is a folder, not a file."),
        (
            "pipe.npy",
            {},
            "The ranks file '{d}/pipe.npy' is not a regular file (a device, a pipe or a socket).",
        ),
    ]
    for name, kwargs, message in cases:
        with pytest.raises(ValueError) as caught:
            read_array(tmp_path / name, what="ranks", **kwargs)
        assert str(caught.value) == message.format(d=tmp_path)
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "bad.pt").write_bytes(b"nope")
    more = [
        (
            "bad.npy",
            (
                "The ranks file '{d}/bad.npy' cannot be read: it is not a .npy file (it does not "
                "begin with numpy's header)."
            ),
        ),
        ("empty.pt", "The ranks file '{d}/empty.pt' cannot be read: it is empty."),
    ]
    for name, message in more:
        with pytest.raises(ValueError) as caught:
            read_array(tmp_path / name, what="ranks")
        assert str(caught.value) == message.format(d=tmp_path)
    with pytest.raises(ValueError, match=r"The ranks file '.*bad\.pt' cannot be read: "):
        read_array(tmp_path / "bad.pt", what="ranks")


def test_bfloat16_safetensors_through_both_command_line_readers(tmp_path):
    from recallkit.cli.commands._protocol_io import load_array
    from recallkit.runner.encoders import load_embeddings

    values = torch.tensor([[1.5, -2.0], [0.25, 4.0]], dtype=torch.bfloat16)
    save_file({"embeddings": values}, str(tmp_path / "e.safetensors"))
    expected = [[1.5, -2.0], [0.25, 4.0]]
    assert load_embeddings(tmp_path / "e.safetensors").tolist() == expected
    assert load_array(f"{tmp_path / 'e.safetensors'}#embeddings", "scores").tolist() == expected


def _sparse(dense):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes on sparse tensors
        return dense.to_sparse()


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda: _sparse(torch.eye(3)), "a tensor of layout torch.sparse_coo (not dense)"),
        (lambda: {"embeddings": _sparse(torch.eye(3))}, "a tensor of layout torch.sparse_coo"),
        (lambda: _sparse_csr(torch.eye(3)), "a tensor of layout torch.sparse_csr (not dense)"),
        (lambda: torch.empty(2, 2, device="meta"), "a tensor without data (on the meta device)"),
        (lambda: _quantized(torch.eye(2)), "a quantized tensor (torch.qint8)"),
    ],
    ids=["sparse", "sparse-in-dict", "csr", "meta", "quantized"],
)
def test_tensors_that_are_not_dense_are_refused_naming_the_file(tmp_path, make, kind):
    path = tmp_path / "e.pt"
    torch.save(make(), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's own loading warnings are not shown either
        with pytest.raises(ValueError) as caught:
            read_array(path, what="embeddings", default_key="embeddings")
    text = str(caught.value)
    assert text.startswith(f"The embeddings file '{path}' holds {kind}")
    assert text.endswith(
        "; save it as a dense tensor (tensor.to_dense() for a sparse one, "
        "tensor.dequantize() for a quantized one)."
    )


def _sparse_csr(dense):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dense.to_sparse_csr()


def _quantized(dense):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8)
