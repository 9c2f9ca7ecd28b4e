"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

A write goes to a temporary file beside its target (``.<name>.<random>.tmp``), is flushed and
fsynced, then renamed over the target. When the target is a symbolic link, the link's final
target is replaced and the link is kept; an existing target keeps its permission bits (a
``0600`` file stays ``0600``), a new one gets the mode a plain ``open()`` would give it.
Temporary files left by a killed process (``kill -9``) are never read; those older than
:data:`STALE_SECONDS` are removed by the next write beside them.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

#: Age (seconds since the last modification) after which a leftover ``.tmp`` file is removed.
STALE_SECONDS = 24 * 3600


def resolve_target(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` must change: the final target when ``path`` is a symlink.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> (folder / "link").symlink_to("real.txt")
    >>> resolve_target(folder / "link").name, resolve_target(folder / "plain").name
    ('real.txt', 'plain')
    """
    path = Path(path)
    if path.is_symlink():
        return Path(os.path.realpath(path))
    return path


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _mode_for(target: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return _new_file_mode()


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to the file descriptor ``fd`` (``os.write`` may write less)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def sync(fd: int) -> None:
    """``os.fsync(fd)``: the data is on disk (or the disk's error, e.g. ENOSPC, is raised)."""
    os.fsync(fd)


def remove_stale_temporaries(directory: str | os.PathLike[str], prefix: str = ".") -> int:
    """Remove ``<prefix>*.tmp`` files in ``directory`` not modified for :data:`STALE_SECONDS`.

    These are what a writer killed between creating and renaming its temporary file leaves.
    A younger one may belong to a write in progress and is left alone. Returns the number
    removed; a file that cannot be removed is skipped.
    """
    limit = time.time() - STALE_SECONDS
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp")):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < limit:
                os.unlink(entry.path)
                removed += 1
        except OSError:
            continue
    return removed


class Staged:
    """A complete, synced temporary file waiting to replace its target (see :func:`stage`)."""

    def __init__(self, tmp: str, target: Path) -> None:
        self.tmp: str | None = tmp
        self.target = target

    def commit(self) -> Path:
        """Rename the temporary file over the target; return the target."""
        if self.tmp is None:
            raise RuntimeError(f"The write of '{self.target}' was already committed or discarded.")
        os.replace(self.tmp, self.target)
        self.tmp = None
        return self.target

    def discard(self) -> None:
        """Remove the temporary file (nothing happens to the target)."""
        if self.tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
            self.tmp = None


def _open_temporary(target: Path) -> tuple[int, str]:
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target.parent, f".{target.name}.")
    return tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)


def stage(path: str | os.PathLike[str], write: Callable[[IO[Any]], Any], mode: str = "w") -> Staged:
    """Write a temporary file beside ``path`` with ``write(handle)``, sync it, and return it.

    Nothing visible changes until :meth:`Staged.commit`; :meth:`Staged.discard` drops it.
    Several outputs can so be prepared first and put in place only once all of them were
    written. On an exception (a full disk) the temporary file is removed.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
    >>> pending = stage(target, lambda handle: handle.write("done"))
    >>> target.exists(), pending.commit().read_text()
    (False, 'done')
    """
    target = resolve_target(path)
    fd, tmp = _open_temporary(target)
    try:
        with os.fdopen(fd, mode) as handle:
            write(handle)
            handle.flush()
            sync(handle.fileno())
        os.chmod(tmp, _mode_for(target))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return Staged(tmp, target)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success sync it and rename it over ``path``.

    On an exception the temporary file is removed and ``path`` is left untouched. A symlink
    ``path`` keeps pointing at its target, which is replaced; the target's mode is kept.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
    >>> with atomic_write(target) as handle:
    ...     _ = handle.write("done")
    >>> target.read_text()
    'done'
    """
    target = resolve_target(path)
    fd, tmp = _open_temporary(target)
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            sync(handle.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
