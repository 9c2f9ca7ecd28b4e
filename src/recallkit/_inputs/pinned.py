"""Files read as they were: their state when read, positional reads, and memory maps read
through the file they map.

[`FileState`][FileState] is a file as it was when read: its identity (device and inode), size,
modification time (nanoseconds) and a digest of sampled bytes (the whole file up to 1 MiB, else
16 windows of 64 KiB spread over it from the first byte to the last: a cheap content check that
sees a rewrite which keeps the size and lands within the clock tick of the modification time).
Two states of one file differ when it was rewritten in place, truncated, removed or replaced.
Every pinned reader of the library compares them: ``recallkit._inputs.io.EmbeddingFile`` on
each
block, [`read_file`][read_file] and [`read_mapped`][read_mapped] before and after a whole read. The
command line records the state of every input file it reads ([`recording`][recording],
[`note`][note]) and compares each with the file as it is before it writes anything
([`changed_input`][changed_input]).

A numpy memory map is never read through its mapping here: a file truncated under a mapping
turns the next read of a lost page into ``SIGBUS``, which kills the process. [`mapped`][mapped]
finds the file and the layout (offset, shape, strides) of any view of a memory map, and
[`read_mapped`][read_mapped] reads its values through one descriptor
([`read_strided`][read_strided]), refusing a file too short for them or changed while they were
read. Two kinds of map are left to their mapping: a copy-on-write map (``mode="c"``), whose pages
may hold writes the file does not, and a map whose path now names another file (replaced, renamed
over: on Linux, where the mapped file's inode is known), whose old file nobody can truncate through
the path any more.

This module imports only the standard library at import time (numpy when an array is read), so
that the command line's help stays fast.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from recallkit.exceptions import fail

#: The content check of [`FileState`][FileState]: the whole file up to ``SAMPLES * SAMPLE_BYTES``
#: bytes, else ``SAMPLES`` windows of ``SAMPLE_BYTES``, the first at byte 0, the last at the end.
SAMPLE_BYTES = 64 * 1024
SAMPLES = 16
#: The most bytes one positional read of [`read_strided`][read_strided] asks for.
READ_BYTES = 16 * 2**20
_SEEK_LOCK = threading.Lock()
_BINARY = getattr(os, "O_BINARY", 0)


def read_at(fd: int, view: memoryview, offset: int) -> int:
    """Read into ``view`` from ``offset`` of the open file ``fd``; return the bytes read.

    The file's own position is not used (``os.preadv``/``os.pread``), so blocks may be read
    from several threads at once; fewer bytes than asked means the file ended.
    """
    wanted = len(view)
    got = 0
    while got < wanted:
        if hasattr(os, "preadv"):
            count = os.preadv(fd, [view[got:]], offset + got)
        elif hasattr(os, "pread"):
            chunk = os.pread(fd, wanted - got, offset + got)
            view[got : got + len(chunk)] = chunk
            count = len(chunk)
        else:  # no positional reads (Windows): seek and read under one lock
            with _SEEK_LOCK:
                os.lseek(fd, offset + got, os.SEEK_SET)
                chunk = os.read(fd, wanted - got)
            view[got : got + len(chunk)] = chunk
            count = len(chunk)
        if not count:
            break
        got += count
    return got


def read_bytes(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes from ``offset`` of ``fd`` (fewer where the file ends)."""
    buffer = bytearray(size)
    got = read_at(fd, memoryview(buffer), offset)
    return bytes(buffer[:got])


def sampled_spans(size: int) -> tuple[tuple[int, int], ...]:
    """The ``(offset, length)`` windows of a file of ``size`` bytes that its digest covers.

    >>> sampled_spans(10)
    ((0, 10),)
    >>> spans = sampled_spans(2**30)
    >>> len(spans), spans[0], spans[-1] == (2**30 - SAMPLE_BYTES, SAMPLE_BYTES)
    (16, (0, 65536), True)
    """
    if size <= SAMPLES * SAMPLE_BYTES:
        return ((0, size),)
    last = size - SAMPLE_BYTES
    return tuple((i * last // (SAMPLES - 1), SAMPLE_BYTES) for i in range(SAMPLES))


@dataclass(frozen=True)
class FileState:
    """A file as it was when read (see the module docstring).

    ``spans`` are the byte windows the ``digest`` covers (none: identity, size and time only)
    and ``what`` is how a change of them is named ("contents", or "header" when the spans are
    a file's header).
    """

    path: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    spans: tuple[tuple[int, int], ...]
    digest: bytes
    what: str = "contents"

    @classmethod
    def of(
        cls,
        fd: int,
        path: str | os.PathLike[str],
        spans: Sequence[tuple[int, int]] | None = None,
        what: str = "contents",
    ) -> FileState:
        """The state of the open file ``fd`` (named ``path``): its digest over ``spans``
        (default: [`sampled_spans`][sampled_spans] of its size)."""
        stat = os.fstat(fd)
        spans = sampled_spans(stat.st_size) if spans is None else tuple(spans)
        content = b"".join(read_bytes(fd, length, offset) for offset, length in spans)
        return cls.known(stat, path, spans, content, what)

    @classmethod
    def known(
        cls,
        stat: os.stat_result,
        path: str | os.PathLike[str],
        spans: Sequence[tuple[int, int]],
        content: bytes,
        what: str = "contents",
    ) -> FileState:
        """The state of a file whose ``stat`` and bytes at ``spans`` (``content``, concatenated)
        were read already (a header parsed)."""
        digest = hashlib.blake2b(content, digest_size=16).digest()
        return cls(
            os.fspath(path),
            stat.st_dev,
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
            tuple(spans),
            digest,
            what,
        )

    def stat_only(self, what: str = "contents") -> FileState:
        """This state without its content check: identity, size and modification time (a
        check that reads nothing)."""
        empty = hashlib.blake2b(digest_size=16).digest()
        return dataclasses.replace(self, spans=(), digest=empty, what=what)

    def now(self) -> FileState | None:
        """The file at [`path`][path] now, its digest over the same spans; ``None`` when it
        cannot be opened (removed)."""
        try:
            # O_NONBLOCK: a FIFO put in the file's place is not waited on.
            fd = os.open(self.path, os.O_RDONLY | _BINARY | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return None
        try:
            return FileState.of(fd, self.path, self.spans, self.what)
        finally:
            os.close(fd)

    def differences(self, now: FileState | None) -> list[str]:
        """How the file ``now`` differs from this state, in words; empty when it does not.

        >>> a = FileState("g.npy", 1, 2, 100, 5, ((0, 100),), b"x")
        >>> a.differences(a), a.differences(None)
        ([], ['it was removed'])
        >>> b = FileState("g.npy", 1, 2, 60, 6, ((0, 100),), b"y")
        >>> a.differences(b)
        ['size 100 -> 60 bytes', 'modification time', 'contents']
        """
        if now is None:
            return ["it was removed"]
        if (now.device, now.inode) != (self.device, self.inode):
            return ["it was replaced by another file"]
        changed = []
        if now.size != self.size:
            changed.append(f"size {self.size} -> {now.size} bytes")
        if now.mtime_ns != self.mtime_ns:
            changed.append("modification time")
        if now.digest != self.digest:
            changed.append(self.what)
        return changed


class FileChanged(ValueError):
    """A file that changed while it was read."""


def read_file(path: str | os.PathLike[str], name: str) -> bytes:
    r"""The whole file at ``path``, read through one descriptor and checked unchanged
    ([`FileState`][FileState]) after the read; [`FileChanged`][FileChanged] naming it as ``name``
    (``"The labels file 'l.txt'"``) otherwise. Its state is [`note`][note]\ d."""
    data, state = read_file_state(path, name)
    note(state)
    return data


def read_file_state(path: str | os.PathLike[str], name: str) -> tuple[bytes, FileState]:
    """[`read_file`][read_file]'s bytes and the state they were read in, not noted (a cache entry is
    noted only once it is known to be used)."""
    fd = os.open(path, os.O_RDONLY | _BINARY)
    try:
        before = FileState.of(fd, path)
        data = read_bytes(fd, before.size, 0)
        after = FileState.of(fd, path, before.spans)
    finally:
        os.close(fd)
    if before.differences(after) or len(data) != before.size:
        raise FileChanged(
            f"{name} changed while it was read (it was rewritten in place); read it "
            "again once it is written."
        )
    return data, before


# ----------------------------------------------------------------------------------------------
# The files a command read.

_READ: contextvars.ContextVar[dict[str, FileState] | None] = contextvars.ContextVar(
    "recallkit_files_read", default=None
)


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Record the state of every file read inside ([`note`][note]), for
    [`changed_input`][changed_input]."""
    token = _READ.set({})
    try:
        yield
    finally:
        _READ.reset(token)


def note(state: FileState) -> None:
    """Record ``state``, the file as it was read, when [`recording`][recording]; the first state
    noted for a path is the one kept."""
    read = _READ.get()
    if read is not None:
        read.setdefault(state.path, state)


def note_stat(fd: int, path: str | os.PathLike[str]) -> None:
    """Record the open file ``fd`` by its identity, size and modification time alone (no content
    read: an image the encoder decodes), when [`recording`][recording]."""
    if _READ.get() is not None:
        note(FileState.of(fd, path, spans=()))


def changed_input() -> tuple[str, list[str]] | None:
    """The first file recorded since [`recording`][recording] began (in the order they were read)
    that differs now from the state it was read in, and how; ``None`` when none does."""
    for state in list((_READ.get() or {}).values()):
        differences = state.differences(state.now())
        if differences:
            return state.path, differences
    return None


# ----------------------------------------------------------------------------------------------
# Memory maps, read through the file they map.


@dataclass(frozen=True)
class Mapped:
    """Where the values of a memory-mapped array lie in its file: element ``[0, ..., 0]`` at
    byte ``offset``, then ``strides`` bytes along each axis (negative ones too). ``inode`` is
    the mapped file's inode where the system says it (Linux), else ``None``."""

    path: str
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: Any
    inode: int | None

    def extent(self) -> tuple[int, int]:
        """The bytes ``[low, high)`` of the file that hold the values."""
        return extent(self.offset, self.shape, self.strides, self.dtype.itemsize)


def extent(
    offset: int, shape: Sequence[int], strides: Sequence[int], itemsize: int
) -> tuple[int, int]:
    """The bytes ``[low, high)`` an array of ``shape`` and ``strides`` at ``offset`` spans."""
    if 0 in shape:
        return offset, offset
    low = offset + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    high = offset + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides, strict=True))
    return low, high + itemsize


def mapped(x: Any) -> Mapped | None:
    """The file and layout of ``x`` when it is a numpy memory map of a file or a view of one
    (``np.load(path, mmap_mode="r")``, a slice of it, ``np.asarray`` of it); ``None`` for
    anything else and for a copy-on-write map (``mode="c"``)."""
    import mmap

    import numpy as np

    if not isinstance(x, np.ndarray):
        return None
    root = x
    while isinstance(root.base, np.ndarray):
        root = root.base
    if not isinstance(root, np.memmap) or not isinstance(root.base, mmap.mmap):
        return None
    if not root.filename or getattr(root, "mode", "r") == "c":
        return None
    start = root.ctypes.data
    offset = int(root.offset) + (x.__array_interface__["data"][0] - start)
    return Mapped(
        str(root.filename),
        offset,
        tuple(int(n) for n in x.shape),
        tuple(int(s) for s in x.strides),
        x.dtype,
        _mapped_inode(start),
    )


def _mapped_inode(address: int) -> int | None:
    """The inode of the file mapped at ``address``, from ``/proc/self/maps`` (Linux)."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                low, _, high = fields[0].partition("-")
                if int(low, 16) <= address < int(high, 16):
                    return int(fields[4]) or None
    except (OSError, ValueError, IndexError):
        return None
    return None


class ShortRead(ValueError):
    """The file ended before the bytes asked for: ``offset``, ``wanted`` and ``got`` bytes."""

    def __init__(self, offset: int, wanted: int, got: int) -> None:
        super().__init__(f"{wanted} bytes at offset {offset}, read {got}")
        self.offset, self.wanted, self.got = offset, wanted, got


def read_strided(
    fd: int, offset: int, shape: Sequence[int], strides: Sequence[int], dtype: Any
) -> Any:
    """The array of ``shape``, ``strides`` and ``dtype`` whose element ``[0, ..., 0]`` lies at
    byte ``offset`` of the open file ``fd``, read into a new C-ordered array: C-ordered values
    in one positional read straight into it, any other layout in reads of at most
    [`READ_BYTES`][READ_BYTES] (plus one slice); [`ShortRead`][ShortRead] where the file ends
    early."""
    import numpy as np

    out = np.empty(tuple(shape), dtype=dtype)
    _fill(fd, out, offset, tuple(strides))
    return out


def _fill(fd: int, out: Any, offset: int, strides: tuple[int, ...]) -> None:
    import numpy as np

    if out.size == 0:
        return
    itemsize = out.dtype.itemsize
    low, high = extent(offset, out.shape, strides, itemsize)
    if out.flags.c_contiguous and strides == out.strides and high - low == out.nbytes:
        got = read_at(fd, memoryview(out).cast("B"), low)  # the rows as they lie: one read
        if got != out.nbytes:
            raise ShortRead(low, out.nbytes, got)
        return
    axes = [a for a in range(out.ndim) if out.shape[a] > 1 and strides[a] != 0]
    if high - low <= READ_BYTES or not axes:
        buffer = bytearray(high - low)
        got = read_at(fd, memoryview(buffer), low)
        if got != len(buffer):
            raise ShortRead(low, len(buffer), got)
        out[...] = np.ndarray(
            out.shape, out.dtype, buffer=buffer, offset=offset - low, strides=strides
        )
        return
    # Split along the axis of the largest stride, in groups whose bytes fit one read.
    axis = max(axes, key=lambda a: abs(strides[a]))
    step = abs(strides[axis])
    rest = [n for a, n in enumerate(out.shape) if a != axis]
    rest_strides = [s for a, s in enumerate(strides) if a != axis]
    one = extent(0, rest, rest_strides, itemsize)
    group = max(1, (READ_BYTES - (one[1] - one[0])) // step + 1)
    for start in range(0, out.shape[axis], group):
        stop = min(start + group, out.shape[axis])
        part = out[(slice(None),) * axis + (slice(start, stop),)]
        _fill(fd, part, offset + start * strides[axis], strides)


def open_mapped(place: Mapped, func: str, name: str) -> tuple[int, FileState] | None:
    """Open the file of ``place``: its descriptor and state; ``None`` when the path now names
    another file than the one mapped. A file too short for the values is a ``ValueError``
    naming parameter ``name`` of ``func``."""
    try:
        fd = os.open(place.path, os.O_RDONLY | _BINARY)
    except OSError as error:
        if place.inode is not None:  # removed or renamed: the mapping still holds the file
            return None
        reason = error.strerror or str(error)
        raise fail(func, name, "a readable memory-mapped file", f"{place.path}: {reason}") from None
    try:
        state = FileState.of(fd, place.path)
        if place.inode is not None and state.inode != place.inode:
            os.close(fd)
            return None
        end = place.extent()[1]
        if state.size < end:
            raise fail(
                func,
                name,
                f"a memory map within its file ({end} bytes)",
                f"{state.size} bytes in {place.path} (truncated)",
            )
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    return fd, state


def read_mapped(x: Any, func: str, name: str) -> Any:
    """``x`` itself, or, when it is a memory map of a file ([`mapped`][mapped]), its values read
    whole through one descriptor into a new array (never through the mapping): a file too
    short for them, or changed while they were read, is a ``ValueError`` naming it."""
    place = mapped(x)
    if place is None:
        return x
    opened = open_mapped(place, func, name)
    if opened is None:
        return x
    fd, before = opened
    try:
        values = read_strided(fd, place.offset, place.shape, place.strides, place.dtype)
        after = FileState.of(fd, place.path, before.spans)
    except ShortRead as short:
        raise FileChanged(
            f"The memory-mapped file '{place.path}' ended early: {short} (was it truncated "
            "while it was read?)."
        ) from None
    finally:
        os.close(fd)
    changed = before.differences(after)
    if changed:
        raise FileChanged(
            f"The memory-mapped file '{place.path}' changed while it was read (it was "
            f"rewritten in place: {', '.join(changed)}); map it again to read it."
        )
    return values
