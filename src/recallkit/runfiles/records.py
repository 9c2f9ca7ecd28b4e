"""Run records and history files: the JSON that ``recallkit plot`` and ``recallkit compare`` read.

A *run record* is one evaluation as a JSON object: the values (under ``metrics``, each metric by
its own name; files written before ``recallkit.evaluation/3`` hold them under ``recall``, and
[`metrics_of`][metrics_of] reads both), the K values,
the counts, the definitions the values rest on (``recallkit.runfiles.definitions``) and, in a
*run
file*, the per-query first-hit ranks (``queries``) that ``recallkit compare`` pairs two runs
on. A *history file* holds one compact run record per line (the per-query detail left out):
``recallkit plot`` draws its recall@K across the runs, tags (``epoch-3``) on the x axis.
``recallkit evaluate --json/--history`` and [`recallkit.Evaluator`][recallkit.evaluator.Evaluator]
(``history=``, ``run_file=``) write the same format.

A run is appended to a history file as one line while the file is locked (``flock``), so runs
that finish at the same time on one history file each add their line and each learns its own
position ("(N runs)"); nothing is lost or counted twice. The file is appended to in place: a
history given as a symbolic link stays a link (its target grows), and the file keeps its owner
and mode. When the line cannot be written whole (a full disk), the file is cut back to its
previous length. On a file system without ``flock`` the line is still appended in one
``O_APPEND`` write, but concurrent runs may then report the same count. A run file is written
atomically ([`recallkit.runfiles._atomic`][recallkit.runfiles._atomic]).

This module uses the standard library only (and reads a
[`recallkit.Result`][recallkit.result.Result]).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recallkit._inputs.pinned import read_file
from recallkit.exceptions import fail
from recallkit.runfiles import _atomic
from recallkit.runfiles.definitions import _version

if TYPE_CHECKING:
    from recallkit.result import Result

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]

#: The ``format`` field of a run record.
RUN_FORMAT = "recallkit.evaluation/4"
#: The formats this version reads (``/1`` and ``/2`` keep their values under ``recall``; before
#: ``/4`` a run file holds no per-query values but the first-hit ranks).
RUN_FORMATS = (
    "recallkit.evaluation/1",
    "recallkit.evaluation/2",
    "recallkit.evaluation/3",
    RUN_FORMAT,
)
_DETAIL = ("queries", "worst_classes", "skipped_images", "sources")
HISTORY_HINT = "a history file has one run record per line (recallkit evaluate --history)"
RUN_HINT = "a run file is written by recallkit evaluate --json"


def schema(kind: str = "run") -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a run file (``"run"``) or of a history file's lines
    (``"history"``), as shipped in ``recallkit/runfiles/schemas/``.

    >>> schema("run")["properties"]["format"]["const"] == RUN_FORMAT
    True
    """
    from importlib import resources

    if kind not in ("run", "history"):
        raise fail("schema", "kind", "'run' or 'history'", repr(kind))
    text = (
        resources.files("recallkit.runfiles")
        .joinpath(f"schemas/{kind}.schema.json")
        .read_text("utf-8")
    )
    return json.loads(text)


def check_tag(tag: Any, func: str) -> str:
    """``tag`` if it is a plain name: a non-empty string without a path separator or a NUL,
    and not ``.`` or ``..`` (a run file named by a tag stays in its folder).

    >>> check_tag("epoch-3", "f")
    'epoch-3'
    >>> check_tag("../escaped", "f")
    Traceback (most recent call last):
    ...
    recallkit.exceptions.ParameterError: The 'tag' parameter of f must be a plain name (no path \
separator, not '.' or '..'). Got '../escaped'.
    """
    separators = {"/", "\\", "\0", os.sep, os.altsep or "/"}
    if (
        not isinstance(tag, str)
        or not tag
        or tag in (".", "..")
        or any(c in tag for c in separators)
    ):
        raise fail(func, "tag", "a plain name (no path separator, not '.' or '..')", repr(tag))
    return tag


def run_path(template: str | os.PathLike[str], tag: str, func: str) -> Path:
    """The run file of ``tag``: ``template`` with ``{tag}`` replaced by the tag, a plain name
    ([`check_tag`][check_tag]), so that the file stays where the template puts it."""
    return Path(os.fspath(template).format(tag=check_tag(tag, func)))


class RecordError(ValueError):
    """A history or run file that cannot be read or appended to; the message names the file."""


def metrics_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The values of a run record by metric name (``metrics``; ``recall`` in older files).

    >>> metrics_of({"metrics": {"MAP@R": 0.5}}), metrics_of({"recall": {"recall@1": 0.25}})
    ({'MAP@R': 0.5}, {'recall@1': 0.25})
    """
    values = record.get("metrics")
    if not isinstance(values, dict):
        values = record.get("recall")
    return dict(values) if isinstance(values, dict) else {}


def history_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The compact form of a run record kept in the history file.

    >>> history_record({"tag": "e1", "metrics": {"recall@1": 0.5}, "queries": {"ids": []}})
    {'tag': 'e1', 'metrics': {'recall@1': 0.5}}
    """
    out = {k: v for k, v in record.items() if k not in _DETAIL}
    if record.get("skipped_images"):
        out["num_skipped_images"] = len(record["skipped_images"])
    return out


def evaluation_record(
    result: Result,
    *,
    tag: str | None,
    metric: str | None = None,
    query_ids: Sequence[Any] | None = None,
    producer: str = "recallkit",
    extra: Mapping[str, Any] | None = None,
    queries: bool = True,
) -> dict[str, Any]:
    """A label-form [`recallkit.Result`][recallkit.result.Result] as a run record (the ``--json``
    run file).

    ``metric`` is the similarity (default: the result's definitions'), ``query_ids`` the
    queries' ids (default: ``result.query_ids``, else their positions ``0, 1, ...``),
    ``producer`` what wrote it (``"recallkit evaluate"``, ``"recallkit.Evaluator"``), ``extra``
    further fields. With ``queries`` (the default) the record holds, per query, its id, its
    label, its first-hit rank and its value of every metric (``null`` for a lone query): what
    ``recallkit compare`` pairs runs on and what intervals resample; the history file keeps the
    record without them ([`history_record`][history_record]).

    >>> import numpy as np
    >>> from recallkit.result import Result
    >>> r = Result({"recall@1": 0.5}, first_hit_ranks=np.array([0, 2]), ks=[1], num_reference=3)
    >>> record = evaluation_record(r, tag="epoch-1", metric="cosine")
    >>> record["metrics"], record["num_gallery"], record["queries"]["first_hit_rank"]
    ({'recall@1': 0.5}, 3, [0, 2])
    """
    definitions = dict(result.definitions) if result.definitions is not None else None
    if metric is None and definitions is not None:
        metric = definitions.get("similarity")
    record: dict[str, Any] = {
        "format": RUN_FORMAT,
        "recallkit_version": _version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tag": tag,
        "producer": producer,
        "metric": metric,
        "definitions": definitions,
        "ks": list(result.ks or ()),
        "effective_ks": list(result.effective_ks or result.ks or ()),
        "metrics": result.json_metrics(),
        "num_queries": result.num_queries,
        "num_evaluated": result.num_evaluated,
        "num_excluded": result.num_excluded,
        "num_gallery": result.num_reference,
        "embedding_dim": result.embedding_dim,
        **dict(extra or {}),
    }
    if result.num_tied:
        tied = result.to_dict()
        record["num_tied"], record["bounds"] = tied["num_tied"], tied["bounds"]
    if queries and result.first_hit_ranks is not None:
        ids = query_ids if query_ids is not None else result.query_ids
        if ids is None:
            ids = range(result.num_queries)
        record["queries"] = {"ids": [str(i) for i in ids]}
        if result.query_labels is not None:
            record["queries"]["labels"] = [json_label(v) for v in result.query_labels]
        record["queries"]["first_hit_rank"] = result.first_hit_ranks.tolist()
        record["queries"]["values"] = {
            name: [None if v != v else float(v) for v in result.per_query[name].tolist()]
            for name in result
            if name in result.per_query
        }
    return record


def json_label(value: Any) -> Any:
    """A label as JSON holds it: numbers and strings as they are, tuples as lists, bytes and
    anything else as text.

    >>> json_label(3), json_label("cat"), json_label((1, "a")), json_label(b"x")
    (3, 'cat', [1, 'a'], 'x')
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, tuple | list):
        return [json_label(v) for v in value]
    item = getattr(value, "item", None)
    return json_label(item()) if callable(item) else str(value)


def dumps_run(record: Mapping[str, Any]) -> str:
    """JSON text of a run record: indented, with the long per-query lists kept on one line each.

    >>> print(dumps_run({"tag": "a", "queries": {"ids": ["x"], "first_hit_rank": [0]}}), end="")
    {
     "tag": "a",
     "queries": {"ids": ["x"], "first_hit_rank": [0]}
    }
    """
    head = {k: v for k, v in record.items() if k != "queries"}
    text = json.dumps(head, indent=1)
    if "queries" not in record:
        return text + "\n"
    queries = json.dumps(record["queries"])
    body = text[:-2] + ",\n" if head else "{\n"
    return body + f' "queries": {queries}\n}}\n'


def write_run(path: str | os.PathLike[str], record: Mapping[str, Any]) -> Path:
    """Write ``record`` as a run file ([`dumps_run`][dumps_run]), atomically; return its path.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "epoch-1.json"
    >>> record = {"tag": "epoch-1", "metrics": {}, "queries": {"ids": ["0"], "first_hit_rank": [0]}}
    >>> file_kind(write_run(p, record).read_text())
    'run'
    """
    path = Path(path)
    if path.is_dir():
        raise RecordError(f"The run file '{path}' is a folder.")
    text = dumps_run(record)
    with _atomic.atomic_write(path, "w") as handle:
        handle.write(text)
    return path


def _is_history_line(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and "tag" in record
        and isinstance(record.get("metrics", record.get("recall")), dict)
        and "queries" not in record
    )


def file_kind(text: str) -> str | None:
    """``"run"``, ``"history"`` or ``"comparison"``: the kind of recallkit file ``text`` is.

    A run file (``evaluate --json``) is one JSON object with per-query ``queries``; a history
    file (``evaluate --history``) one run record per line, without them; a comparison file
    (``compare --json``) one object of format ``recallkit.comparison/N`` (or, before, with
    ``a``, ``b`` and ``ks``). ``None`` for anything else.

    >>> file_kind('{"tag": "a", "recall": {}}\\n{"tag": "b", "recall": {}}\\n')
    'history'
    >>> file_kind('{\\n "tag": "a",\\n "recall": {},\\n "queries": {"ids": []}\\n}\\n')
    'run'
    >>> file_kind("tag,recall") is None
    True
    """
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        whole = None
    if isinstance(whole, dict):
        if isinstance(whole.get("queries"), dict):
            return "run"
        if {"a", "b", "ks"} <= whole.keys() or str(whole.get("format", "")).startswith(
            "recallkit.comparison/"
        ):
            return "comparison"
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        if lines and all(_is_history_line(json.loads(line)) for line in lines):
            return "history"
    except (json.JSONDecodeError, RecursionError):
        pass
    return None


# Each kind of recallkit file with the option that writes it.
_WRITTEN_BY = {
    "run": "recallkit evaluate --json",
    "history": "recallkit evaluate --history",
    "comparison": "recallkit compare --json",
}


def wrong_kind(path: Path, text: str, expected: str) -> RecordError | None:
    """The error for a recallkit file of another kind than ``expected`` (``None`` otherwise)."""
    kind = file_kind(text)
    if kind is None or kind == expected:
        return None
    return RecordError(
        f"'{path}' is a {kind} file ({_WRITTEN_BY[kind]}); pass a {expected} file "
        f"({_WRITTEN_BY[expected]})."
    )


def _not_a_history(path: Path, text: str, problem: str) -> RecordError:
    return wrong_kind(path, text, "history") or RecordError(
        f"The history file '{path}' {problem}; {HISTORY_HINT}."
    )


def _parse(text: str, path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise _not_a_history(path, text, f"line {number} is not JSON: {error}") from None
        if not _is_history_line(record):
            raise _not_a_history(
                path, text, f"line {number} is not a run record (it needs 'tag' and 'recall')"
            )
        records.append(record)
    return records


def _decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordError(
            f"The history file '{path}' is not UTF-8 text (byte {error.start} cannot be decoded)."
        ) from None


def read_history(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a history file, in order; each must have a ``tag`` and a ``recall`` dict.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "runs.jsonl"
    >>> _ = p.write_text('{"tag": "a", "recall": {"recall@1": 0.25}}\\n')
    >>> read_history(p)[0]["recall"]
    {'recall@1': 0.25}
    """
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"The history file '{path}' does not exist.")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RecordError(
            f"The history file '{path}' cannot be read: {error.strerror or error}."
        ) from None
    return _parse(_decode(data, path), path)


def _lock(fd: int) -> None:
    if fcntl is None:  # pragma: no cover - not on POSIX
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as error:  # a file system without locks: the single O_APPEND write remains
        if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def _open_locked(path: Path) -> tuple[int, bool]:
    """Open ``path`` for appending, locked; create it if needed. Returns ``(fd, created)``.

    After the lock is taken the descriptor is checked to still be the file at ``path``: a
    writer that removed or replaced it meanwhile would otherwise leave this one appending to
    a file nobody reads.
    """
    flags = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
    while True:
        created = False
        target = _atomic.resolve_target(path)  # O_EXCL would not follow a dangling link
        try:
            fd = os.open(target, flags)
        except FileNotFoundError:
            try:
                fd = os.open(target, flags | os.O_CREAT | os.O_EXCL, 0o666)
                created = True
            except FileExistsError:
                continue
        try:
            _lock(fd)
            here = os.fstat(fd)
            try:
                there = os.stat(target)
            except FileNotFoundError:
                there = None
        except BaseException:
            os.close(fd)
            raise
        if there is not None and (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
            return fd, created
        os.close(fd)


def _read_fd(fd: int, size: int) -> bytes:
    chunks = []
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(size - offset, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def append_history(
    path: str | os.PathLike[str], record: Mapping[str, Any], *, stacklevel: int = 2
) -> int:
    """Append ``record`` (compacted) as one line; return the number of records now in the file.

    Under an exclusive lock the existing lines are checked (a damaged file is not appended
    to), the line is appended and synced, and the records are counted, so concurrent runs get
    distinct counts. A record without a tag is named ``run-N`` after its position; a tag that
    the file already holds gives a ``UserWarning`` naming the tag and the file (both runs are
    kept, and ``recallkit plot`` shows both under that tag; ``stacklevel`` as in
    [`warnings.warn`][warnings.warn]). On a failed write (``OSError``, e.g. a full disk) the file is
    cut back to its previous length (and removed if this call created it) before the error is
    raised.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "runs.jsonl"
    >>> append_history(p, {"tag": "epoch-1", "recall": {"recall@1": 0.5}, "queries": {}})
    1
    >>> append_history(p, {"tag": None, "recall": {"recall@1": 0.75}})
    2
    >>> [r["tag"] for r in read_history(p)]
    ['epoch-1', 'run-2']
    """
    path = Path(path)
    if path.is_dir():
        raise RecordError(f"The history file '{path}' is a folder.")
    path.parent.mkdir(parents=True, exist_ok=True)
    compact = history_record(record)
    fd, created = _open_locked(path)
    size = 0
    try:
        size = os.fstat(fd).st_size
        text = _decode(_read_fd(fd, size), path)
        old = _parse(text, path)
        if compact.get("tag") is None:
            compact["tag"] = f"run-{len(old) + 1}"
        reused = [n for n, r in enumerate(old, start=1) if r.get("tag") == compact["tag"]]
        line = json.dumps(compact) + "\n"
        if text and not text.endswith("\n"):
            line = "\n" + line
        _atomic.write_all(fd, line.encode("utf-8"))
        _atomic.sync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
            if created and size == 0:
                os.unlink(_atomic.resolve_target(path))
        os.close(fd)
        raise
    os.close(fd)
    if reused:
        runs = "run" if len(reused) == 1 else "runs"
        warnings.warn(
            f"The tag {compact['tag']!r} is already in the history file '{path}' "
            f"({runs} {', '.join(map(str, reused))}); run {len(old) + 1} is added under the "
            "same tag.",
            UserWarning,
            stacklevel=stacklevel,
        )
    return len(old) + 1


# ----------------------------------------------------------------------------------------------
# Reading a run file back.

_RANK_RULE = "a rank is a whole number, 0 or more, or -1 for an excluded query"


def _bad(where: str, field: str, index: int | None, value: Any, rule: str) -> RecordError:
    at = "" if index is None else f" at query {index}"
    try:
        shown = json.dumps(value)
    except (TypeError, ValueError):
        shown = repr(value)
    if len(shown) > 40:
        shown = shown[:39] + "…"
    return RecordError(f"{where} has a bad '{field}' value{at}: {shown}; {rule}.")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_run(record: Any, where: str) -> dict[str, Any]:
    """Check the parts of a run record that intervals and comparisons read; return it, or raise
    [`RecordError`][RecordError] (a ``ValueError``) starting with ``where`` (``"The run file
    'a.json'"``) and naming the field and the query.

    ``queries`` must hold ``ids`` (strings or integers) and ``first_hit_rank`` (whole numbers,
    0 or more, or -1 for an excluded query, below ``num_gallery`` when the record gives it),
    one per query; ``labels`` (no ``null``), ``paths`` (strings, or ``null`` for an in-memory
    image), ``nearest_label`` and each list of ``values`` (numbers, or ``null`` for a lone
    query), when present, one per query too. ``ks``, when present, are positive integers, and
    ``definitions``, when present, is a definitions record
    ([`recallkit.runfiles.definitions.check_definitions`][recallkit.runfiles.definitions.check_definitions]).

    >>> check_run({"queries": {"ids": ["q"], "first_hit_rank": [1.5]}}, "The run a")
    Traceback (most recent call last):
    ...
    recallkit.runfiles.records.RecordError: The run a has a bad 'queries.first_hit_rank' \
value at query 0: 1.5; a rank is a whole number, 0 or more, or -1 for an excluded query.
    """
    from recallkit.runfiles.definitions import check_definitions

    queries = record.get("queries") if isinstance(record, dict) else None
    if (
        not isinstance(queries, dict)
        or not isinstance(queries.get("ids"), list)
        or not isinstance(queries.get("first_hit_rank"), list)
    ):
        raise RecordError(
            f"{where} has no per-query ranks ('queries' with 'ids' and 'first_hit_rank', one "
            "per query); write it with recallkit evaluate --json."
        )
    kind = record.get("format")
    if kind is not None and kind not in RUN_FORMATS:
        raise _bad(where, "format", None, kind, f"this recallkit reads {', '.join(RUN_FORMATS)}")
    if len(queries["ids"]) != len(queries["first_hit_rank"]):
        raise RecordError(
            f"{where} has {len(queries['ids'])} query ids but {len(queries['first_hit_rank'])} "
            "first-hit ranks ('queries.ids' and 'queries.first_hit_rank' have one entry per "
            "query); was the file edited?"
        )
    n = len(queries["ids"])
    for i, ident in enumerate(queries["ids"]):
        if not (isinstance(ident, str) or _is_int(ident)):
            raise _bad(where, "queries.ids", i, ident, "an id is a string")
    gallery = record.get("num_gallery")
    bound = gallery if _is_int(gallery) and gallery > 0 else 2**62
    for i, rank in enumerate(queries["first_hit_rank"]):
        if not _is_int(rank) or rank < -1:
            raise _bad(where, "queries.first_hit_rank", i, rank, _RANK_RULE)
        if rank >= bound:
            rule = (
                f"a rank is below the {gallery} gallery images (num_gallery)"
                if bound == gallery
                else _RANK_RULE
            )
            raise _bad(where, "queries.first_hit_rank", i, rank, rule)
    number = (int, float)
    lists = [
        (
            "labels",
            queries.get("labels"),
            lambda v: v is not None,
            "a query's label cannot be null",
        ),
        (
            "paths",
            queries.get("paths"),
            lambda v: v is None or isinstance(v, str),
            "a path is a string (or null)",
        ),
    ]
    if "nearest_label" in queries:
        lists.append(
            (
                "nearest_label",
                queries["nearest_label"],
                lambda v: v is None or isinstance(v, str | int | float | list),
                "a nearest label is a label (a number, a string or a list), or null",
            )
        )
    values = queries.get("values", {})
    if not isinstance(values, dict):
        raise _bad(where, "queries.values", None, values, "it maps metric names to lists")
    for name, column in values.items():
        lists.append(
            (
                f"values.{name}",
                column,
                lambda v: v is None or (isinstance(v, number) and not isinstance(v, bool)),
                "a value is a number (or null for a lone query)",
            )
        )
    for field, column, allowed, rule in lists:
        if column is None and field in ("labels", "paths"):
            continue
        if not isinstance(column, list) or len(column) != n:
            raise _bad(where, f"queries.{field}", None, column, f"it is a list of {n} entries")
        for i, value in enumerate(column):
            if not allowed(value):
                raise _bad(where, f"queries.{field}", i, value, rule)
    if "ks" in record:
        ks = record["ks"]
        if not isinstance(ks, list) or not all(_is_int(k) and k > 0 for k in ks):
            raise _bad(where, "ks", None, ks, "the K values are positive integers")
    if record.get("definitions") is not None:
        try:
            check_definitions(record["definitions"], f"{where} has a 'definitions' record that")
        except ValueError as error:
            raise RecordError(str(error)) from None
    return record


def load_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run file written by ``recallkit evaluate --json`` (or ``Evaluator(run_file=)``)
    and check it ([`check_run`][check_run]); earlier formats ([`RUN_FORMATS`][RUN_FORMATS]) are read
    too."""
    path = Path(path)
    if not path.is_file():
        raise RecordError(f"The run file '{path}' does not exist.")
    try:  # through one descriptor, checked unchanged (and recorded for the command line)
        text = read_file(path, f"The run file '{path}'").decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RecordError(f"The run file '{path}' cannot be read as text: {error}.") from None
    wrong = wrong_kind(path, text, "run")
    if wrong is not None:
        raise wrong
    try:
        record = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise RecordError(f"The run file '{path}' is not JSON: {error}; {RUN_HINT}.") from None
    return check_run(record, f"The run file '{path}'")
