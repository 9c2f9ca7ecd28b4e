"""Encoding images in batches: loading with a bad-image report, progress with throughput.

``encoder_fn`` maps a batch (a list) of images to a ``(batch, dim)`` array or tensor. Image
paths are opened with Pillow, fully decoded (a truncated file fails here, not in the encoder)
and converted to RGB before they reach it; in-memory images are passed as they are. Pillow (the
``images`` extra) is imported when the first path is opened; without it, that raises one
[`recallkit._loading.MissingExtraError`][recallkit._loading.MissingExtraError]. tqdm draws the bar
where it is installed.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from recallkit._inputs.pinned import note_stat
from recallkit._loading import available, require
from recallkit.exceptions import RunnerError, Text, fail

EncoderFn = Callable[[list[Any]], Any]
_MAX_LISTED = 5
UNIDENTIFIED = "Pillow cannot identify it as any image format it reads"
#: How the runner's need of Pillow is named when it is missing.
FEATURE = "recallkit's image runner (reading image files)"


def pil_image() -> Any:
    """``PIL.Image``, or
    [`recallkit._loading.MissingExtraError`][recallkit._loading.MissingExtraError] naming the
    'images' extra."""
    require(FEATURE, "PIL", extra="images")
    from PIL import Image

    return Image


@dataclass(frozen=True)
class BadImage:
    """An image that could not be read, and why."""

    path: str
    reason: str


class BadImagesError(RunnerError):
    """Some images could not be read; ``bad`` lists every one of them.

    >>> print(BadImagesError([BadImage("a.png", "truncated")], what="gallery"))
    1 gallery image could not be read: a.png (truncated). Fix or remove it, or pass \
skip_bad=True to continue without it.
    """

    def __init__(self, bad: Sequence[BadImage], *, what: str = "") -> None:
        self.bad = list(bad)
        n = len(self.bad)
        listed = "; ".join(f"{b.path} ({b.reason})" for b in self.bad[:_MAX_LISTED])
        if n > _MAX_LISTED:
            listed += f"; and {n - _MAX_LISTED} more"
        noun = f"{what} image" if what else "image"
        noun += "s" if n != 1 else ""
        them = "them" if n != 1 else "it"
        super().__init__(
            Text(
                f"{n} {noun} could not be read: {listed}. Fix or remove {them}, or pass {{fix}} to "
                f"continue without {them}.",
                fix=("skip_bad", True),
            )
        )


def load_image(path: str | os.PathLike[str]) -> Any:
    """Open ``path``, decode it completely and return it as an RGB image.

    Raises ``OSError`` for a missing, unreadable, truncated or non-image file (for a file whose
    format Pillow cannot identify, ``PIL.UnidentifiedImageError`` naming the file: "'x.png'
    is not a readable image: ..."), and for anything that is not a regular file (a FIFO, socket or
    device named like an image is refused without being read, never waited on). An image
    over Pillow's decompression-bomb limit raises ``PIL.Image.DecompressionBombError``.

    >>> import tempfile, pathlib
    >>> from PIL import Image
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.png"
    >>> Image.new("L", (3, 2), 7).save(path)
    >>> load_image(path).mode, load_image(path).size
    ('RGB', (3, 2))
    """
    Image = pil_image()
    # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        note_stat(fd, path)  # by size and modification time, for the command line's check
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    name = os.fspath(path)
    try:
        with handle, Image.open(handle) as image:
            image.load()
            return image.convert("RGB")
    except Image.UnidentifiedImageError:
        message = f"'{name}' is not a readable image: {UNIDENTIFIED}"
        raise Image.UnidentifiedImageError(message) from None
    except (OSError, ValueError) as error:
        text = str(error)
        if "<_io." not in text:  # Pillow names the file object, not the file
            raise
        raise type(error)(re.sub(r"<_io\.\w+ name=[^>]*>", f"'{name}'", text)) from None


def _reason(error: BaseException) -> str:
    """Why an image could not be read, to follow its path in a listing."""
    text = str(error).strip() or type(error).__name__
    if isinstance(error, FileNotFoundError):
        return "no such file"
    pil = sys.modules.get("PIL.Image")  # imported by the reader that raised ``error``
    if pil is not None and isinstance(error, pil.UnidentifiedImageError):
        return f"not a readable image: {UNIDENTIFIED}"
    if isinstance(error, OSError) and error.strerror == "not a regular file":
        return "not a regular file"
    return text.splitlines()[0]


@dataclass(frozen=True)
class Encoding:
    """The result of [`encode_images`][encode_images].

    ``embeddings`` has one row per input image, float32; rows of unreadable images (only with
    ``skip_bad=True``) are NaN and ``kept`` is False there; ``bad`` lists them.
    """

    embeddings: np.ndarray
    kept: np.ndarray
    bad: tuple[BadImage, ...]
    seconds: float


class Progress:
    """Progress of an encoding run: a tqdm bar with throughput on a terminal, else one line.

    ``enabled=None`` draws the bar when stderr is a terminal and prints a one-line summary at
    the end otherwise; ``False`` prints nothing.
    """

    def __init__(self, total: int, desc: str, enabled: bool | None = None) -> None:
        self.total, self.desc, self.count = total, desc, 0
        self.start = time.perf_counter()
        self.quiet = enabled is False
        self.bar = None
        interactive = enabled is True or (enabled is None and _stderr_is_terminal())
        if not self.quiet and interactive and available("tqdm"):  # else the summary line
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="img", file=sys.stderr, leave=True)

    def update(self, n: int) -> None:
        self.count += n
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> float:
        """Close the bar (or print the summary line); return the elapsed seconds."""
        seconds = time.perf_counter() - self.start
        if self.bar is not None:
            self.bar.close()
        elif not self.quiet:
            rate = self.count / seconds if seconds > 0 else math.inf
            print(
                f"{self.desc}: {self.count} images in {seconds:.1f} s ({rate:,.0f} images/s)",
                file=sys.stderr,
            )
        return seconds


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _as_rows(out: Any, expected: int) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        out = out.detach().to("cpu", torch.float32).numpy()
    array = np.asarray(out, dtype=np.float32)
    if array.ndim != 2 or array.shape[0] != expected:
        raise fail(
            "encode_all",
            "encoder_fn",
            f"a function that returns one embedding row per image, a ({expected}, dim) array",
            f"shape {tuple(array.shape)}",
        )
    return array


@contextmanager
def _progress(total: int, desc: str, enabled: bool | None) -> Iterator[Progress]:
    bar = Progress(total, desc, enabled)
    try:
        yield bar
    finally:
        bar.close()


def encode_images(
    images: Sequence[Any],
    encoder_fn: EncoderFn,
    batch_size: int = 32,
    *,
    skip_bad: bool = False,
    progress: bool | None = None,
    desc: str = "encoding",
    what: str = "",
) -> Encoding:
    """Encode ``images`` in batches of ``batch_size``, reading paths with
    [`load_image`][load_image].

    An unreadable image stops the encoding; the remaining images are still opened so that the
    error ([`BadImagesError`][BadImagesError]) lists every bad one. With ``skip_bad=True`` bad
    images are left out of the batches instead, their rows are NaN and ``kept`` marks them.

    >>> enc = encode_images([np.ones(2), np.zeros(2)], lambda b: np.stack(b), progress=False)
    >>> enc.embeddings.tolist(), enc.kept.tolist()
    ([[1.0, 1.0], [0.0, 0.0]], [True, True])
    """
    func = "encode_all"
    if not callable(encoder_fn):
        raise fail(func, "encoder_fn", "callable", type(encoder_fn))
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise fail(func, "batch_size", "a positive integer", repr(batch_size))
    n = len(images)
    if n == 0:
        raise fail(func, "images", "non-empty", "0 images")
    embeddings: np.ndarray | None = None  # allocated once the first batch gives the dimension
    kept = np.zeros(n, dtype=bool)
    bad: list[BadImage] = []
    unreadable: tuple[type[BaseException], ...] = ()  # with Pillow's, once a path is read
    with _progress(n, desc, progress) as bar:
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            batch, where = [], []
            for i in range(start, stop):
                item = images[i]
                if isinstance(item, str | os.PathLike):
                    if not unreadable:
                        unreadable = (OSError, ValueError, pil_image().DecompressionBombError)
                    try:
                        item = load_image(item)
                    except unreadable as error:
                        bad.append(BadImage(os.fspath(images[i]), _reason(error)))
                        continue
                batch.append(item)
                where.append(i)
            if batch and (skip_bad or not bad):
                out = _as_rows(encoder_fn(batch), len(batch))
                if embeddings is None:
                    embeddings = np.full((n, out.shape[1]), np.nan, dtype=np.float32)
                elif out.shape[1] != embeddings.shape[1]:
                    got = f"{embeddings.shape[1]} and then {out.shape[1]}"
                    raise fail(
                        func, "encoder_fn", "a function returning embeddings of one dimension", got
                    )
                embeddings[where] = out
                kept[where] = True
            bar.update(stop - start)
        seconds = time.perf_counter() - bar.start
    if bad and not skip_bad:
        raise BadImagesError(bad, what=what)
    if embeddings is None:  # skip_bad=True and not one image could be read
        raise RunnerError(f"None of the {n} {what + ' ' if what else ''}images could be read.")
    return Encoding(embeddings, kept, tuple(bad), seconds)


def encode_all(
    images: Sequence[Any],
    encoder_fn: EncoderFn,
    batch_size: int = 32,
    *,
    progress: bool | None = None,
) -> np.ndarray:
    """Encode every image once, in batches, and return the ``(n, dim)`` float32 embeddings.

    ``encoder_fn(images[i:i + batch_size])`` is called for each batch and the outputs are
    concatenated. Paths are read with [`load_image`][load_image] first (RGB, fully decoded);
    an unreadable image raises [`BadImagesError`][BadImagesError] listing all of them.

    >>> encode_all([np.array([3.0, 4.0])] * 3, lambda b: np.stack(b), batch_size=2,
    ...            progress=False).shape
    (3, 2)
    """
    return encode_images(images, encoder_fn, batch_size, progress=progress).embeddings
