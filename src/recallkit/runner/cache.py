"""The embedding cache: encode a gallery once, reuse it while nothing that changes it changes.

An entry is a ``.npy`` array named by a SHA-256 key over everything that changes the embeddings:
the file list with each file's size and modification time (nanoseconds), the encoder identity
and weights digest, the preprocessing, the compute dtype and the device type. Touching an image,
replacing the weights or changing the crop gives a new key, so a stale entry is never read.
A small ``.json`` beside each entry records what the key was made of and which images were
unreadable (their rows are NaN); an entry is the pair, and is read only when both files are
there and agree (a ``.json`` without its ``.npy``, or the reverse, is a miss).

Entries are written atomically: both files are first written in full to temporary files, then
renamed, the ``.json`` first and the ``.npy`` that completes the entry last; a failure on the
way (a full disk) removes what was written. An interrupted run (``kill -9``) leaves at most
``.*.tmp`` files, which are never read and are removed by a later write once a day old.

The cache is optional: a cache folder that cannot be read or written (read-only, not a folder)
gives a warning and the run goes on without it. A full disk is an error (``OSError`` with
``ENOSPC``; one line and exit status 2 on the command line): the files that follow would not fit
either, and the half-written entry is removed.

What the key cannot see: an encoder function that holds no torch module is keyed by its name
and the digest of its source file only. When its output also depends on weights it loads
itself, environment variables or other files, give it an ``encoder_id`` (``--encoder-id``)
that changes with them; a cache hit on such an encoder says so.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import functools
import hashlib
import io
import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recallkit._inputs.pinned import note, read_file_state
from recallkit.runfiles._atomic import Staging, remove_stale_temporaries
from recallkit.runner.encode import BadImage, BadImagesError, Encoding, encode_images
from recallkit.runner.encoders import Encoder

CACHE_FORMAT = "recallkit-embedding-cache/1"


def file_signature(paths: Sequence[str | os.PathLike[str]]) -> list[list[Any]]:
    """``[resolved path, size in bytes, mtime in ns]`` per file (``-1, -1`` if it is missing)."""
    out: list[list[Any]] = []
    for p in paths:
        real = os.path.realpath(os.fspath(p))
        try:
            st = os.stat(real)
            out.append([real, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([real, -1, -1])
    return out


def cache_key(paths: Sequence[str | os.PathLike[str]], encoder: Encoder) -> str:
    """The SHA-256 key of encoding ``paths`` with ``encoder`` (see the module docstring).

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "a.png"
    >>> _ = f.write_bytes(b"x")
    >>> enc = Encoder(lambda b: b, "demo", "d1")
    >>> cache_key([f], enc) == cache_key([f], enc), cache_key([f], enc) == cache_key(
    ...     [f], Encoder(lambda b: b, "demo", "d2"))
    (True, False)
    """
    payload = {
        "format": CACHE_FORMAT,
        "files": file_signature(paths),
        **encoder.key_fields(),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class EmbeddingCache:
    """A folder of cached embedding arrays, ``<key>.npy`` with ``<key>.json`` beside it."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser()

    def array_path(self, key: str) -> Path:
        return self.directory / f"{key}.npy"

    def meta_path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str, rows: int) -> Encoding | None:
        """The cached encoding for ``key`` if a complete entry of ``rows`` rows exists.

        Complete means: the ``.json`` names this key and row count, and the ``.npy`` is a
        ``(rows, dim)`` array. Anything else (a missing or unreadable half) is a miss.
        """
        path = self.array_path(key)
        try:
            if not path.is_file():
                return None
            text, meta_state = read_file_state(self.meta_path(key), "The cache entry")
            meta = json.loads(text.decode("utf-8"))
            data, array_state = read_file_state(path, "The cache entry")
            embeddings = np.load(io.BytesIO(data), allow_pickle=False)
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("key") != key or meta.get("rows") != rows:
            return None
        if embeddings.ndim != 2 or embeddings.shape[0] != rows:
            return None
        kept = ~np.isnan(embeddings).all(axis=1)
        try:
            bad = [BadImage(str(p), str(r)) for p, r in meta.get("bad", [])]
        except (TypeError, ValueError):
            return None
        if len(bad) != int((~kept).sum()):
            return None
        note(meta_state)  # a hit: the entry is an input of the command, checked at its end
        note(array_state)
        return Encoding(embeddings, kept, tuple(bad), 0.0)

    def store(self, key: str, encoding: Encoding, meta: dict[str, Any]) -> Path:
        """Write the entry: both files to temporaries, then the ``.json``, then the ``.npy``.

        On an ``OSError`` (a full disk, a read-only folder) nothing of the entry is left and
        the error is raised.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.directory)
        record = {
            **meta,
            "key": key,
            "rows": int(encoding.embeddings.shape[0]),
            "dim": int(encoding.embeddings.shape[1]),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "bad": [[b.path, b.reason] for b in encoding.bad],
        }
        meta_path, array_path = self.meta_path(key), self.array_path(key)
        with Staging() as staging:
            staging.add(meta_path, lambda handle: json.dump(record, handle, indent=1), "w")
            staging.add(
                array_path,
                lambda handle: np.save(handle, encoding.embeddings, allow_pickle=False),
                "wb",
            )
            try:
                staging.commit()
            except BaseException:
                if not array_path.is_file():
                    with contextlib.suppress(OSError):
                        meta_path.unlink()
                raise
        return array_path


def encode_cached(
    paths: Sequence[Any],
    encoder: Encoder,
    *,
    cache_dir: str | os.PathLike[str] | None,
    batch_size: int = 32,
    skip_bad: bool = False,
    progress: bool | None = None,
    desc: str = "encoding",
    what: str = "",
    log: Callable[[str], None] | None = None,
) -> tuple[Encoding, str]:
    """Encode ``paths`` with ``encoder``, through the cache in ``cache_dir`` when given.

    Returns the encoding and the cache status: ``"hit"``, ``"miss"`` (encoded and stored),
    ``"not stored"`` (encoded; the cache could not be written, with a warning) or ``"off"`` (no
    cache directory, or the items are not all files). A hit is reported through ``log``, with
    a note when the encoder is keyed by its name and source code alone (see the module
    docstring). A cached entry with unreadable images raises [`BadImagesError`][BadImagesError]
    again unless ``skip_bad`` is true.
    """
    say = log or (lambda _message: None)
    label = f"{what} embeddings" if what else "embeddings"
    cacheable = cache_dir is not None and all(isinstance(p, str | os.PathLike) for p in paths)
    encode = functools.partial(
        encode_images,
        paths,
        encoder,
        batch_size,
        skip_bad=skip_bad,
        progress=progress,
        desc=desc,
        what=what,
    )
    if not cacheable:
        return encode(), "off"
    cache = EmbeddingCache(cache_dir)  # type: ignore[arg-type]
    key = cache_key(paths, encoder)
    hit = cache.load(key, len(paths))
    if hit is not None:
        note = ""
        if encoder.keyed_by in ("source", "name"):
            what_key = "name and source code" if encoder.keyed_by == "source" else "name"
            note = (
                f"; the encoder holds no torch weights, so the entry is keyed by its {what_key} "
                "alone: if its output depends on anything else (weights it loads, environment "
                "variables, files), pass --encoder-id (encoder_id=) to tell runs apart"
            )
        say(
            f"{label}: cache hit, {len(paths)} images not re-encoded "
            f"({cache.array_path(key)}){note}"
        )
        if hit.bad and not skip_bad:
            raise BadImagesError(hit.bad, what=what)
        return hit, "hit"
    encoding = encode()
    meta = {"format": CACHE_FORMAT, **encoder.key_fields(), "what": what}
    try:
        stored = cache.store(key, encoding, meta)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise
        reason = error.strerror or str(error)
        warnings.warn(
            f"the embedding cache '{cache.directory}' cannot be written ({reason}); the "
            f"{label} were not stored and the run goes on without the cache",
            RuntimeWarning,
            stacklevel=2,
        )
        return encoding, "not stored"
    say(f"{label}: cache miss, encoded {len(paths)} images and saved them to {stored}")
    return encoding, "miss"
