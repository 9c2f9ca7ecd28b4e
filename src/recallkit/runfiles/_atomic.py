"""Atomic file writes: a reader sees the old file or the whole new one, never half of it.

A write goes to a temporary file beside its target (``.<name>.<random>.tmp``), is flushed and
fsynced, then renamed over the target; several files can be written first and renamed together
([`Staging`][Staging]). Ctrl-C at any moment leaves no temporary file: the steps that create one
and put it on the list of files to remove, and the renames, hold the interrupt until they are
done. When the target is a symbolic link, the link's final target is replaced and the link is
kept; an existing target keeps its permission bits (a ``0600`` file stays ``0600``), a new one
gets the mode a plain ``open()`` would give it.
Temporary files left by a killed process (``kill -9``) are never read; those older than
[`STALE_SECONDS`][STALE_SECONDS] are removed by the next write beside them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import threading
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
    """Remove ``<prefix>*.tmp`` files in ``directory`` not modified for
    [`STALE_SECONDS`][STALE_SECONDS].

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


def _open_temporary(target: Path) -> tuple[int, str]:
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target.parent, f".{target.name}.")
    return tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block has run, then act on it as it would have.

    For steps that must happen all together (a temporary file created and put on the list of
    files to remove; renames that put several outputs in place): an interrupt there takes
    effect once they are done, never between them. Outside the main thread, where signals are
    not handled, or when the handler in place was not installed from Python, the block runs
    as it is.

    >>> import signal
    >>> before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own
    >>> steps = []
    >>> try:
    ...     with interrupts_deferred():
    ...         signal.raise_signal(signal.SIGINT)
    ...         steps.append("the block ran to its end")
    ... except KeyboardInterrupt:
    ...     steps.append("then the interrupt")
    >>> steps
    ['the block ran to its end', 'then the interrupt']
    >>> _ = signal.signal(signal.SIGINT, before)
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is None
    ):
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and callable(previous):
        previous(signal.SIGINT, None)
    elif caught and previous == signal.SIG_DFL:
        signal.raise_signal(signal.SIGINT)


class Staging:
    """Files written in full to temporary files, then put in place together, or not at all.

    Each file is written to a temporary file beside its target ([`open`][open], [`add`][add]),
    flushed and synced; [`commit`][commit] renames them all over their targets, in the order they
    were added, with Ctrl-C held until the last rename. Leaving the ``with`` block before
    [`commit`][commit] (an exception, a full disk, Ctrl-C at any moment) removes every temporary
    file and changes no target: a temporary file goes on the list of files to remove in the
    same step, with Ctrl-C held, that creates it.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> with Staging() as staging:
    ...     staging.add(folder / "a.txt", lambda handle: handle.write("first"))
    ...     staging.add(folder / "b.txt", lambda handle: handle.write("second"))
    ...     sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    ...     [target.name for target in staging.commit()]
    []
    ['a.txt', 'b.txt']
    >>> sorted(p.name for p in folder.iterdir())
    ['a.txt', 'b.txt']
    """

    def __init__(self) -> None:
        self._pending: list[tuple[str, Path, IO[Any]]] = []

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard()

    @contextlib.contextmanager
    def open(self, path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
        """Open a temporary file for ``path`` (the final target when ``path`` is a symlink); on
        leaving the block it is flushed, synced and given the target's mode (or a new file's)."""
        target = resolve_target(path)
        with interrupts_deferred():
            fd, tmp = _open_temporary(target)
            entry = (tmp, target, os.fdopen(fd, mode))
            self._pending.append(entry)
        try:
            with entry[2] as handle:
                yield handle
                handle.flush()
                sync(handle.fileno())
            os.chmod(tmp, _mode_for(target))
        except BaseException:
            with interrupts_deferred():
                _remove(entry)
                if entry in self._pending:  # not yet discarded with the others
                    self._pending.remove(entry)
            raise

    def add(
        self, path: str | os.PathLike[str], write: Callable[[IO[Any]], Any], mode: str = "w"
    ) -> None:
        """Write the temporary file for ``path`` with ``write(handle)`` (see [`open`][open])."""
        with self.open(path, mode) as handle:
            write(handle)

    def commit(self) -> list[Path]:
        """Rename every temporary file over its target; return the targets.

        A failed rename (``OSError``) leaves the targets renamed before it in place and the
        other temporary files to [`discard`][discard].
        """
        done = []
        with interrupts_deferred():
            while self._pending:
                tmp, target, _handle = self._pending[0]
                os.replace(tmp, target)
                del self._pending[0]
                done.append(target)
        return done

    def discard(self) -> None:
        """Remove the temporary files not yet renamed (nothing happens to their targets)."""
        with interrupts_deferred():
            while self._pending:
                _remove(self._pending[-1])
                self._pending.pop()


def _remove(entry: tuple[str, Path, IO[Any]]) -> None:
    tmp, _target, handle = entry
    with contextlib.suppress(OSError):  # already closed, unless Ctrl-C came before any write
        handle.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success sync it and rename it over ``path``.

    On an exception (Ctrl-C included) the temporary file is removed and ``path`` is left
    untouched. A symlink ``path`` keeps pointing at its target, which is replaced; the
    target's mode is kept. Several files that must appear together: [`Staging`][Staging].

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "out.txt"
    >>> with atomic_write(target) as handle:
    ...     _ = handle.write("done")
    >>> target.read_text()
    'done'
    """
    with Staging() as staging:
        with staging.open(path, mode) as handle:
            yield handle
        staging.commit()
