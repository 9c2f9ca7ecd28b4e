"""The demo: train a small encoder on real images and track recall@K, with nothing to download.

scikit-learn ships 1,797 handwritten digits (8×8 grey images, 10 classes; Alpaydin & Kaynak,
UCI "Optical Recognition of Handwritten Digits"). The demo writes them as an image folder
(``train/<digit>/`` for 0–4, ``test/<digit>/`` for 5–9: train and test classes are disjoint, the
metric-learning protocol), trains a small CNN with pytorch-metric-learning's
``MultiSimilarityLoss`` and ``MultiSimilarityMiner`` on the train classes, and after each epoch
evaluates the test folder against itself (leave-one-out: each query's own image is excluded by
path) with the runner, exactly as ``recallkit evaluate --images`` does. It prints the report of
each epoch and writes the history (``runs.jsonl``), one run file per epoch (``epoch-N.json``),
the recall plot (``recall.png``) and the failure grid of the last epoch (``grid.png``). It
needs the ``demo`` extra (scikit-learn, Pillow, matplotlib): without one of them, it raises one
[`recallkit._loading.MissingExtraError`][recallkit._loading.MissingExtraError] before it writes
anything.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from recallkit._loading import require
from recallkit.runfiles._atomic import atomic_write
from recallkit.runner.encode import load_image, pil_image
from recallkit.runner.encoders import Encoder, state_digest
from recallkit.runner.pipeline import (
    Run,
    dumps_record,
    run_evaluation,
    run_record,
    worst_classes,
)
from recallkit.runner.sources import from_folder

TRAIN_CLASSES = (0, 1, 2, 3, 4)
#: What the demo imports beyond the core: scikit-learn's digits, Pillow, matplotlib.
NEEDS = ("sklearn", "PIL", "matplotlib")


def check_demo(feature: str = "recallkit.runner.digits_demo") -> None:
    """Raise [`recallkit._loading.MissingExtraError`][recallkit._loading.MissingExtraError] (the
    ``demo`` extra) unless scikit-learn, Pillow and matplotlib import."""
    require(feature, *NEEDS, extra="demo")


def write_digits(root: str | os.PathLike[str], *, per_class: int | None = None) -> Path:
    """Write scikit-learn's digits as PNG image folders ``root/train/<d>/`` and ``root/test/<d>/``.

    Digits 0–4 go to ``train``, 5–9 to ``test``; ``per_class`` keeps the first images of each
    class only. Pixel values 0–16 are scaled to 0–255 (``round(v * 255 / 16)``).

    >>> import tempfile
    >>> root = write_digits(tempfile.mkdtemp(), per_class=2)
    >>> sorted(p.relative_to(root).as_posix() for p in root.rglob("*.png"))[:3]
    ['test/5/0005.png', 'test/5/0015.png', 'test/6/0006.png']
    """
    require("recallkit.runner.digits_demo.write_digits", "sklearn", "PIL", extra="demo")
    from sklearn.datasets import load_digits

    Image = pil_image()
    root = Path(root)
    digits = load_digits()
    pixels = np.rint(digits.images * (255.0 / 16.0)).astype(np.uint8)
    written: dict[int, int] = {}
    for index, (image, label) in enumerate(zip(pixels, digits.target, strict=True)):
        label = int(label)
        if per_class is not None and written.get(label, 0) >= per_class:
            continue
        split = "train" if label in TRAIN_CLASSES else "test"
        folder = root / split / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image, mode="L").save(folder / f"{index:04d}.png")
        written[label] = written.get(label, 0) + 1
    return root


class DigitNet(nn.Module):
    """A small CNN for 8×8 grey images to a compact ``dim``-dimensional embedding.

    Two 3×3 convolutions (32 and 64 channels, ReLU, max-pooling between, 2×2 average pooling
    after) and one linear layer to ``dim`` (8 by default: small enough that what the features
    keep matters, so training shows in recall).
    """

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 2 * 2, dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def to_tensor(image: Any) -> torch.Tensor:
    """A PIL image as a ``(1, 8, 8)`` float tensor in [0, 1] (grey, resized to 8×8 if needed)."""
    grey = image.convert("L")
    if grey.size != (8, 8):
        grey = grey.resize((8, 8), pil_image().BILINEAR)
    return torch.from_numpy(np.asarray(grey, dtype=np.float32) / 255.0)[None]


def digits_encoder(model: DigitNet, tag: str) -> Encoder:
    """An encoder for the runner: a batch of PIL images through ``model`` in eval mode."""

    def encode(images: list[Any]) -> np.ndarray:
        batch = torch.stack([to_tensor(image) for image in images])
        was_training = model.training
        model.eval()
        with torch.inference_mode():
            out = model(batch)
        model.train(was_training)
        return out.numpy()

    return Encoder(encode, f"demo:DigitNet:{tag}", state_digest(model), {"grey": 8})


@dataclass
class DemoResult:
    """What the demo produced."""

    out: Path
    runs: list[Run]
    history: Path
    plot: Path
    grid: Path
    seconds: float


@contextlib.contextmanager
def _image_root(out: Path, keep: bool) -> Iterator[Path]:
    if keep:
        root = out / "digits"
        if root.exists():
            shutil.rmtree(root)
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="recallkit-digits-") as tmp:
        yield Path(tmp)


def run_demo(
    out: str | os.PathLike[str] = "recallkit-demo",
    *,
    epochs: int = 5,
    fast: bool = False,
    seed: int = 0,
    keep_images: bool = False,
    ks: tuple[int, ...] = (1, 5, 10),
    show_topk: int = 8,
    echo: Callable[[str], None] = print,
) -> DemoResult:
    """Run the demo (see the module docstring); ``fast`` is one epoch on 40 images per class."""
    check_demo()  # before anything is written
    from pytorch_metric_learning import losses, miners

    from recallkit.runner.history import append_history
    from recallkit.runner.history_plot import plot_history
    from recallkit.runner.pipeline import failure_grid

    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if fast:
        epochs = 1
    per_class = 40 if fast else None
    history = out / "runs.jsonl"
    for stale in [history, *out.glob("epoch-*.json"), *out.glob("epoch-*.npy")]:
        stale.unlink(missing_ok=True)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    runs: list[Run] = []
    with _image_root(out, keep_images) as root:
        write_digits(root, per_class=per_class)
        train = from_folder(root / "train", what="train folder")
        test = from_folder(root / "test", what="test folder")
        where = (
            str(root)
            if keep_images
            else "a temporary folder (removed at the end; --keep-images keeps them in "
            f"{out / 'digits'})"
        )
        echo(
            f"digits written to {where}: {len(train)} train images (classes 0-4), "
            f"{len(test)} test images (classes 5-9)"
        )
        x_train = torch.stack([to_tensor(load_image(p)) for p in train.paths])
        y_train = torch.tensor([int(label) for label in train.labels])
        model = DigitNet()
        loss_fn = losses.MultiSimilarityLoss()
        miner = miners.MultiSimilarityMiner(epsilon=0.1)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
        batch_size = 128
        for epoch in range(epochs + 1):
            loss_value = float("nan")
            if epoch > 0:
                step = (model, loss_fn, miner, optimizer)
                loss_value = _train_epoch(step, x_train, y_train, generator, batch_size)
            tag = f"epoch-{epoch}"
            run = run_evaluation(
                test,
                test,
                digits_encoder(model, tag),
                ks,
                batch_size=256,
                progress=False,
                neighbors=8,
            )
            runs.append(run)
            # The kept images' folder, relative to the run file's: the report's thumbnails.
            images = os.path.relpath(root / "test", out) if keep_images else None
            append_history(history, _save_epoch(run, out, tag, loss_value, images))
            title = "untrained" if epoch == 0 else f"train loss {loss_value:.4f}"
            echo(f"\n== {tag} ({title}) ==")
            echo(run.result.report())
        plot = plot_history(history, out / "recall.png", title="digits 5-9, leave-one-out")
        grid = failure_grid(
            runs[-1],
            out / "grid.png",
            k=show_topk,
            queries=6,
            title=f"digits 5-9 after {epochs} epoch(s): worst queries and their top-{show_topk}",
        )
    seconds = time.perf_counter() - started
    tags = [f"epoch-{epoch}" for epoch in range(epochs + 1)]
    written = [history.name, *(f"{tag}.json" for tag in tags), plot.name, grid.name]
    if keep_images:
        written += [*(f"{tag}.npy" for tag in tags), "digits/"]
    echo(f"\nwrote in {out}: {', '.join(written)} ({seconds:.1f} s)")
    return DemoResult(out, runs, history, plot, grid, seconds)


def _train_epoch(
    step: tuple[Any, Any, Any, Any],
    x: torch.Tensor,
    y: torch.Tensor,
    generator: torch.Generator,
    batch_size: int,
) -> float:
    """One epoch of ``(model, loss, miner, optimizer)`` over ``x`` in a random order drawn from
    ``generator``; returns the mean training loss over the images."""
    model, loss_fn, miner, optimizer = step
    model.train()
    order = torch.randperm(len(x), generator=generator)
    total, count = 0.0, 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        embeddings = model(x[idx])
        pairs = miner(embeddings, y[idx])
        loss = loss_fn(embeddings, y[idx], pairs)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item() * len(idx)
        count += len(idx)
    return total / count


def _save_epoch(run: Run, out: Path, tag: str, loss: float, images: str | None) -> dict[str, Any]:
    """Writes the epoch's run file (and, with the images kept, its gallery embeddings beside
    it); returns its record for the history."""
    sources = {"images": images} if images is not None else None
    record = run_record(run, tag=tag, worst=worst_classes(run, 3), sources=sources)
    record["train_loss"] = None if np.isnan(loss) else round(loss, 6)
    with atomic_write(out / f"{tag}.json", "w") as handle:
        handle.write(dumps_record(record))
    if images is not None:
        np.save(out / f"{tag}.npy", run.gallery_embeddings)
    return record


def main() -> int:  # pragma: no cover - convenience for ``python -m recallkit.runner.digits_demo``
    run_demo(fast="--fast" in sys.argv)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
