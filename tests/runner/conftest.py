"""Fixtures of the runner tests: image folders written with Pillow, an encoder module, the CLI."""

from __future__ import annotations

import itertools
import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from recallkit.cli import main as cli_main

_COUNTER = itertools.count()


@dataclass
class CliResult:
    rc: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def _private_default_cache(tmp_path, monkeypatch):
    """Runs without --cache-dir write under the test's folder, never into ~/.cache."""
    monkeypatch.setenv("RECALLKIT_CACHE", str(tmp_path / "default-cache"))


@pytest.fixture
def cli(capsys):
    """Run ``recallkit ARGS`` in this process; return the exit status, stdout and stderr."""

    def run(*argv: object) -> CliResult:
        capsys.readouterr()
        try:
            rc = cli_main([str(a) for a in argv])
        except SystemExit as exit_:  # argparse errors
            rc = int(exit_.code or 0)
        captured = capsys.readouterr()
        return CliResult(rc, captured.out, captured.err)

    return run


def write_image(path: Path, rgb: tuple[int, int, int], size: tuple[int, int] = (4, 4)) -> Path:
    """A solid-colour PNG: its mean RGB is exactly ``rgb``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, rgb).save(path)
    return path


ENCODER_SOURCE = '''
"""Test encoders for ``--callable``: the mean RGB of each image, exactly."""
import numpy as np

CALLS = {"batches": 0, "images": 0}


def mean_rgb_fn(images):
    CALLS["batches"] += 1
    CALLS["images"] += len(images)
    return np.stack(
        [np.asarray(image, dtype=np.float64).reshape(-1, 3).mean(axis=0) for image in images]
    ).astype(np.float32)


def mean_rgb():
    """The factory --callable calls: returns the encoder function."""
    return mean_rgb_fn


def broken():
    raise RuntimeError("no weights here")


NOT_CALLABLE = 3
'''


@pytest.fixture
def encoder_module(tmp_path, monkeypatch):
    """A fresh importable module holding ``mean_rgb`` (a factory) and a call counter."""
    name = f"rk_test_encoders_{next(_COUNTER)}"
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / f"{name}.py").write_text(textwrap.dedent(ENCODER_SOURCE))
    monkeypatch.syspath_prepend(str(folder))
    yield name, folder / f"{name}.py"
    sys.modules.pop(name, None)


@pytest.fixture
def hand_case(tmp_path):
    """Query and gallery folders whose recall is computed by hand (see test_evaluate_cli).

    Gallery, in folder order (class, then file name):
      0 cat/a.png (255, 0, 0)   1 cat/b.png (0, 255, 0)
      2 dog/a.png (200, 50, 0)  3 dog/b.png (0, 0, 255)
    Queries: cat/q1.png (250, 10, 0), cat/q2.png (0, 0, 250), dog/q3.png (10, 250, 0).
    """
    gallery = tmp_path / "gallery"
    query = tmp_path / "query"
    write_image(gallery / "cat" / "a.png", (255, 0, 0))
    write_image(gallery / "cat" / "b.png", (0, 255, 0))
    write_image(gallery / "dog" / "a.png", (200, 50, 0))
    write_image(gallery / "dog" / "b.png", (0, 0, 255))
    write_image(query / "cat" / "q1.png", (250, 10, 0))
    write_image(query / "cat" / "q2.png", (0, 0, 250))
    write_image(query / "dog" / "q3.png", (10, 250, 0))
    return query, gallery


@pytest.fixture
def make_image():
    """``make_image(path, rgb, size=(4, 4))`` writes a solid-colour PNG."""
    return write_image


@pytest.fixture
def read_json():
    """``read_json(path)`` parses a JSON file."""
    return lambda path: json.loads(Path(path).read_text())
