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

Every run file is read through one validating reader, [`load_run`][load_run]: the shipped JSON
Schema applied by the reader itself, then what a schema cannot state, each metric's value against
its per-query values ([`check_run`][check_run]). Anything else is one line naming the file, the
field and the query ([`RecordError`][RecordError], a
[`ParameterError`][recallkit.exceptions.ParameterError]).

Writing uses the standard library only (and reads a
[`recallkit.Result`][recallkit.result.Result]); the reader loads numpy and the metrics when it
checks values.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import functools
import json
import math
import numbers
import os
import re
import stat
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recallkit._inputs.pinned import read_file
from recallkit.exceptions import (
    Namer,
    ParameterError,
    RecallkitError,
    did_you_mean,
    fail,
    python_name,
)
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


class RecordError(ParameterError):
    """A history or run file that cannot be read or appended to, or a run record that is not
    one; the message names the file (or run), the field and, where there is one, the query.

    A [`ParameterError`][recallkit.exceptions.ParameterError] (a ``ValueError``): the command
    line prints it as one line with exit status 2.

    Parameters
    ----------
    message : str
        The whole message.
    field : str, optional
        The field at fault (``"queries.values.MAP@R"``), when one is.
    query : int, optional
        The query at fault (its position), when one is.
    """

    def __init__(self, message: str, field: str | None = None, query: int | None = None) -> None:
        self.message = message
        self.field = field
        self.query = query
        RecallkitError.__init__(self, message)
        self.func = "load_run"
        self.name = field or "run"
        self.requirement = self.text
        self.got = None

    def render(self, namer: Namer = python_name, subject: str | None = None) -> str:
        """The message (it names files and fields, no parameter: ``namer`` and ``subject`` do
        not change it).

        Parameters
        ----------
        namer : callable, optional
            Unused.
        subject : str, optional
            Unused.

        Returns
        -------
        str
        """
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message, self.field, self.query))


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
    _regular_file(path, f"The history file '{path}'", HISTORY_HINT)
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
# Reading a run file back: the one validating reader.

#: The largest run file (or history file) read, in bytes, unless the environment variable
#: ``RECALLKIT_RUN_FILE_LIMIT`` says otherwise (``"512MiB"``, ``"2GB"``). A file is read whole,
#: and reading it takes about five times its size in memory; a larger one is refused, naming the
#: limit and the variable, before anything is read.
RUN_FILE_LIMIT = 128 * 2**20
LIMIT_VARIABLE = "RECALLKIT_RUN_FILE_LIMIT"
#: The JSON Schema keywords the reader applies (the shipped schemas use these and no others), and
#: the annotations it reads past.
SCHEMA_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "items",
        "properties",
        "required",
        "additionalProperties",
        "$ref",
        "anyOf",
        "minItems",
        "maxItems",
        "pattern",
        "not",
    }
)
SCHEMA_ANNOTATIONS = frozenset({"$schema", "$id", "title", "description", "$defs"})
# The largest magnitude of a whole number in a run file (int64).
_INT_LIMIT = 2**63
# A per-query value and the run's value agree when they differ by rounding alone.
_REL_TOL, _ABS_TOL = 1e-9, 1e-12
_RANK_RULE = "a rank is a whole number, 0 or more, or -1 for an excluded query"
_MISSING = object()
_KIND_WORDS = {
    "null": "null",
    "boolean": "true or false",
    "string": "a string",
    "array": "a list",
    "object": "an object",
    "integer": "a whole number",
    "number": "a number",
}


class _Invalid(Exception):
    """A value that breaks a rule: where (the path from the record's top), what, which rule."""

    def __init__(self, path: tuple[Any, ...], value: Any, rule: str) -> None:
        super().__init__(rule)
        self.path, self.value, self.rule = path, value, rule


def _shown_value(value: Any) -> str:
    try:
        shown = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError, OverflowError):
        shown = repr(value)
    return shown if len(shown) <= 40 else shown[:39] + "…"


def _field(path: Sequence[Any]) -> tuple[str, int | None]:
    """``("queries.values.MAP@R", 3)``: a path as the field it names and, in a per-query list,
    the query (its position); other positions are written ``ks[2]``."""
    parts, query = list(path), None
    if parts[:1] == ["queries"]:
        depth = 3 if parts[1:2] == ["values"] else 2
        if len(parts) > depth and isinstance(parts[depth], int):
            query = parts[depth]
            del parts[depth]
    field = ""
    for part in parts:
        field += f"[{part}]" if isinstance(part, int) else ("." if field else "") + str(part)
    return field or "(the record)", query


# The rule said when an entry of these per-query lists is not what the schema allows.
_ENTRY_RULES = {
    "queries.first_hit_rank": _RANK_RULE,
    "queries.ids": "an id is a string",
    "queries.paths": "a path is a string (or null)",
}


def _refusal(where: str, record: Any, error: _Invalid) -> RecordError:
    field, query = _field(error.path)
    value, rule = error.value, error.rule
    if field.startswith("ks[") or (field == "ks" and value is not _MISSING):
        field, value, rule = "ks", record.get("ks"), "the K values are positive integers"
    elif query is not None and len(error.path) == 3 and field in _ENTRY_RULES:
        rule = _ENTRY_RULES[field]
        gallery = record.get("num_gallery")
        if field == "queries.first_hit_rank" and _is_int(value) and value >= 0:
            if _is_int(gallery) and gallery > 0:
                rule = f"a rank is below the {gallery} gallery images (num_gallery)"
    elif query is not None and field == "queries.labels" and value is None:
        rule = "a query's label cannot be null"
    if value is _MISSING:
        text = f"{where} has no '{field}' field; {rule}."
    else:
        at = "" if query is None else f" at query {query}"
        text = f"{where} has a bad '{field}' value{at}: {_shown_value(value)}; {rule}."
    return RecordError(text, field, query)


def _bad(where: str, field: str, index: int | None, value: Any, rule: str) -> RecordError:
    at = "" if index is None else f" at query {index}"
    return RecordError(
        f"{where} has a bad '{field}' value{at}: {_shown_value(value)}; {rule}.", field, index
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number_rule(value: Any) -> str | None:
    """Why a number cannot be read as one (``None``: it can)."""
    if isinstance(value, float) or (
        isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
    ):
        if not math.isfinite(value):
            return "a value is a finite number (NaN and Infinity are not values)"
        return None
    if abs(int(value)) >= _INT_LIMIT:
        return "a number is below 2**63 in size"
    return None


def _type_test(name: str) -> Callable[[Any], bool]:
    if name == "null":
        return lambda v: v is None
    if name == "boolean":
        return lambda v: isinstance(v, bool)
    if name == "string":
        return lambda v: isinstance(v, str)
    if name == "array":
        return lambda v: isinstance(v, list)
    if name == "object":
        return lambda v: isinstance(v, dict)
    if name == "integer":
        return lambda v: (
            type(v) is int or (isinstance(v, numbers.Integral) and not isinstance(v, bool))
        )
    if name == "number":
        return lambda v: (
            type(v) in (int, float) or (isinstance(v, numbers.Real) and not isinstance(v, bool))
        )
    raise ValueError(f"the schema names an unknown type {name!r}")


def _words(kinds: Sequence[str]) -> str:
    words = [_KIND_WORDS[k] for k in kinds if not (k == "integer" and "number" in kinds)]
    return " or ".join(dict.fromkeys(words))


Check = Callable[[Any, tuple[Any, ...]], None]


def _compile(node: Any, root: dict[str, Any], cache: dict[int, Check]) -> Check:
    """A function that raises [`_Invalid`][_Invalid] for a value ``node`` refuses: the schema's
    keywords ([`SCHEMA_KEYWORDS`][SCHEMA_KEYWORDS]) as JSON Schema (draft 2020-12) defines them,
    a number also finite and below 2**63 in size, an ``integer`` an ``int`` (``1.0`` is not a
    rank)."""
    if node is True or node == {}:
        return lambda value, path: None
    if node is False:

        def never(value: Any, path: tuple[Any, ...]) -> None:
            raise _Invalid(path, value, "the field is not one a run file holds")

        return never
    unknown = set(node) - SCHEMA_KEYWORDS - SCHEMA_ANNOTATIONS
    if unknown:
        raise ValueError(f"the reader does not apply the schema keyword(s) {sorted(unknown)}")
    key = id(node)
    if key in cache:
        return cache[key]
    steps: list[Check] = []

    def run(value: Any, path: tuple[Any, ...]) -> None:
        for step in steps:
            step(value, path)

    cache[key] = run
    if "$ref" in node:
        steps.append(_compile(_resolve(root, node["$ref"]), root, cache))
    if "anyOf" in node:
        steps.append(_any_of_step(node, root, cache))
    if "not" in node:
        steps.append(_not_step(node, root, cache))
    if "type" in node:
        steps.append(_type_step(node, root, cache))
    steps += _choice_steps(node)
    if "minimum" in node:
        low = node["minimum"]

        def minimum(value: Any, path: tuple[Any, ...]) -> None:
            if type(value) in (int, float) and value < low:
                raise _Invalid(path, value, f"it is {low} or more")

        steps.append(minimum)
    if "pattern" in node:
        pattern = re.compile(node["pattern"])

        def matches(value: Any, path: tuple[Any, ...]) -> None:
            if isinstance(value, str) and not pattern.search(value):
                raise _Invalid(path, value, f"it matches {node['pattern']}")

        steps.append(matches)
    if "minItems" in node or "maxItems" in node:
        least, most = node.get("minItems", 0), node.get("maxItems", math.inf)
        size = f"{least}" if least == most else f"{least} to {most}"

        def sized(value: Any, path: tuple[Any, ...]) -> None:
            if isinstance(value, list) and not least <= len(value) <= most:
                raise _Invalid(path, value, f"it is a list of {size} entries")

        steps.append(sized)
    if "required" in node:
        required = list(node["required"])

        def present(value: Any, path: tuple[Any, ...]) -> None:
            if isinstance(value, dict):
                for name in required:
                    if name not in value:
                        raise _Invalid((*path, name), _MISSING, "a run file holds it")

        steps.append(present)
    if "properties" in node or "additionalProperties" in node:
        known = {k: _compile(v, root, cache) for k, v in node.get("properties", {}).items()}
        other = _compile(node.get("additionalProperties", True), root, cache)

        def members(value: Any, path: tuple[Any, ...]) -> None:
            if isinstance(value, dict):
                for name, item in value.items():
                    known.get(name, other)(item, (*path, name))

        steps.append(members)
    if "items" in node:
        steps.append(_items(node["items"], root, cache))
    return run


def _any_of_step(node: Any, root: dict[str, Any], cache: dict[int, Check]) -> Check:
    """One of the ``anyOf`` branches holds; else the deepest branch's refusal."""
    branches = [_compile(b, root, cache) for b in node["anyOf"]]
    kinds = [k for b in node["anyOf"] for k in _kinds_of(b, root)]

    def any_of(value: Any, path: tuple[Any, ...]) -> None:
        errors = []
        for branch in branches:
            try:
                branch(value, path)
                return
            except _Invalid as error:
                errors.append(error)
        deepest = max(errors, key=lambda e: len(e.path))
        if deepest.path != path:
            raise deepest
        raise _Invalid(path, value, f"it is {_words(kinds)}")

    return any_of


def _not_step(node: Any, root: dict[str, Any], cache: dict[int, Check]) -> Check:
    """The ``not`` schema refuses the value."""
    refused = _compile(node["not"], root, cache)

    def negated(value: Any, path: tuple[Any, ...]) -> None:
        try:
            refused(value, path)
        except _Invalid:
            return
        raise _Invalid(path, value, "it is not a record of this kind")

    return negated


def _type_step(node: Any, root: dict[str, Any], cache: dict[int, Check]) -> Check:
    """The value is of one of the ``type`` kinds (a number also finite and in range)."""
    kinds = [node["type"]] if isinstance(node["type"], str) else list(node["type"])
    tests = [_type_test(k) for k in kinds]
    numeric = "number" in kinds or "integer" in kinds
    rule = f"it is {_words(kinds)}"

    def typed(value: Any, path: tuple[Any, ...]) -> None:
        if not any(test(value) for test in tests):
            raise _Invalid(path, value, rule)
        if numeric and value is not None and not isinstance(value, bool | str | list | dict):
            why = _number_rule(value)
            if why is not None:
                raise _Invalid(path, value, why)

    return typed


def _choice_steps(node: Any) -> list[Check]:
    """The value is one of ``enum``, or ``const``."""
    steps: list[Check] = []
    for name in ("enum", "const"):
        if name in node:
            allowed = node[name] if name == "enum" else [node[name]]
            shown = ", ".join(json.dumps(a) for a in allowed)
            rule = f"it is {shown}" if len(allowed) == 1 else f"it is one of {shown}"

            def one_of(value: Any, path: tuple[Any, ...], allowed=allowed, rule=rule) -> None:
                if not any(type(value) is type(a) and value == a for a in allowed):
                    raise _Invalid(path, value, rule + did_you_mean(value, map(str, allowed)))

            steps.append(one_of)
    return steps


def _kinds_of(node: Any, root: dict[str, Any]) -> list[str]:
    if isinstance(node, dict) and "$ref" in node:
        return _kinds_of(_resolve(root, node["$ref"]), root)
    kind = node.get("type", []) if isinstance(node, dict) else []
    return [kind] if isinstance(kind, str) else list(kind)


def _items(node: Any, root: dict[str, Any], cache: dict[int, Check]) -> Check:
    """Each item of a list checked; a list whose items the schema constrains by type alone (the
    per-query lists: the bulk of a run file) in one tight loop, the slow path taken only to say
    what is wrong."""
    each = _compile(node, root, cache)
    target = node
    while isinstance(target, dict) and set(target) - {"description"} == {"$ref"}:
        target = _resolve(root, target["$ref"])
    plain = isinstance(target, dict) and set(target) - {"description"} <= {"type", "minimum"}
    kinds = set(_kinds_of(target, root)) if plain else set()
    if not kinds:

        def items(value: Any, path: tuple[Any, ...]) -> None:
            if isinstance(value, list):
                for position, item in enumerate(value):
                    each(item, (*path, position))

        return items
    simple = tuple(
        kind
        for name, kind in (
            ("string", str),
            ("boolean", bool),
            ("array", list),
            ("object", dict),
            ("null", type(None)),
        )
        if name in kinds
    )
    whole = "integer" in kinds or "number" in kinds
    fraction = "number" in kinds
    low = target.get("minimum", -math.inf)

    def fast(value: Any, path: tuple[Any, ...]) -> None:
        if not isinstance(value, list):
            return
        for position, item in enumerate(value):
            kind = type(item)
            if kind in simple:
                continue
            if kind is int:
                if whole and -_INT_LIMIT < item < _INT_LIMIT and item >= low:
                    continue
            elif kind is float:
                if fraction and item - item == 0.0 and item >= low:
                    continue
            each(item, (*path, position))  # the slow path says what is wrong (or accepts it)

    return fast


def _resolve(root: dict[str, Any], reference: str) -> Any:
    target: Any = root
    for part in reference.removeprefix("#/").split("/"):
        target = target[part]
    return target


@functools.lru_cache(maxsize=4)
def _validator(kind: str, legacy: bool) -> Check:
    """The shipped schema of ``kind``, compiled; ``legacy``: for a record of an earlier format (or
    one without ``format``, a record built in memory), every format this version reads and only
    ``queries`` required."""
    shipped = schema(kind)
    if legacy:
        shipped = {
            **shipped,
            "required": ["queries"] if kind == "run" else ["tag"],
            "properties": {**shipped["properties"], "format": {"enum": list(RUN_FORMATS)}},
        }
    return _compile(shipped, shipped, {})


class _RepeatedKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return out


def loads_record(text: str | bytes, where: str) -> Any:
    """``text`` parsed as JSON, refusing what a JSON reader would otherwise pass silently: a key
    repeated in one object (which one is meant?). NaN and Infinity are parsed here and refused by
    [`check_run`][check_run], which names the field. A ``RecordError`` starting with ``where``
    otherwise.

    >>> loads_record('{"metrics": {}, "metrics": {"recall@1": 1.0}}', "The run 'a'")
    Traceback (most recent call last):
    ...
    recallkit.runfiles.records.RecordError: The run 'a' repeats the key 'metrics' in one object; \
a JSON object names each field once (which one was meant?).
    """
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _RepeatedKey as error:
        key = error.args[0]
        raise RecordError(
            f"{where} repeats the key {key!r} in one object; a JSON object names each field "
            "once (which one was meant?).",
            key,
        ) from None
    except RecursionError:
        raise RecordError(f"{where} is not JSON: it nests too deep; {RUN_HINT}.") from None
    except ValueError as error:  # JSONDecodeError, or a number of over 4300 digits
        raise RecordError(f"{where} is not JSON: {error}; {RUN_HINT}.") from None


def check_run(record: Any, where: str) -> dict[str, Any]:
    """Check a run record; return it, or raise [`RecordError`][RecordError] (a
    [`ParameterError`][recallkit.exceptions.ParameterError]) starting with ``where`` (``"The run
    file 'a.json'"``) and naming the field and the query. The one check of every run that
    ``report``, ``compare``, ``recallkit.intervals`` and ``recallkit.compare`` read.

    First the shipped JSON Schema ([`schema`][schema]): every field of the right type; numbers
    finite (no NaN or Infinity) and below 2**63 in size; ranks whole numbers. A record of the
    current format holds every field the schema requires; one of an earlier format
    ([`RUN_FORMATS`][RUN_FORMATS]), or without ``format`` (built in memory), needs ``queries``
    alone. Then what a schema cannot state:

    * every per-query list (``ids``, ``first_hit_rank``, ``labels``, ``paths``,
      ``nearest_label``, each of ``values``) has one entry per query, and ``num_queries`` (when
      given) is their number; each rank is below ``num_gallery`` (when given);
    * the ``definitions`` record is whole (its ``id`` matches its fields:
      [`check_definitions`][recallkit.runfiles.definitions.check_definitions]), and the options
      it names are read back as evaluating read them
      ([`Options.from_definitions`][recallkit.options.Options.from_definitions]);
    * each value of a known metric ([`recallkit.metrics`][recallkit.metrics]) lies in the metric's
      range ([`value_range`][recallkit.metrics.Metric.value_range]: recall in [0, 1], ranks 1 or
      more), and so does each of its per-query values, ``null`` exactly at the lone queries (rank
      -1); recall@K agrees with the ranks (a hit when the rank is below K), and a rank metric's
      per-query value is the rank plus one;
    * each metric's value is the summary of its per-query values
      ([`recallkit._averaging.summarize`][recallkit._averaging.summarize], the code
      that computed it, under the run's ``lone_queries`` and ``average``), within rounding
      (relative 1e-9); a value is ``null`` only where no query counts; without per-query values
      recall@K is checked against the ranks;
    * each tie bound ``[pessimistic, optimistic]`` lies in the metric's range, on either side of
      the metric's value.

    Parameters
    ----------
    record : dict
        A run record (a run file's JSON).
    where : str
        How the messages open: ``"The run file 'a.json'"``.

    Returns
    -------
    dict
        ``record``, unchanged.

    Raises
    ------
    RecordError
        The first thing wrong, one line naming the field and (where there is one) the query.

    Examples
    --------
    >>> check_run({"queries": {"ids": ["q"], "first_hit_rank": [1.5]}}, "The run a")
    Traceback (most recent call last):
    ...
    recallkit.runfiles.records.RecordError: The run a has a bad 'queries.first_hit_rank' \
value at query 0: 1.5; a rank is a whole number, 0 or more, or -1 for an excluded query.
    """
    if not isinstance(record, dict):
        raise RecordError(
            f"{where} is a JSON {type(record).__name__}, not an object of fields; {RUN_HINT}.",
        )
    queries = record.get("queries")
    if not isinstance(queries, dict) or "ids" not in queries or "first_hit_rank" not in queries:
        raise RecordError(
            f"{where} has no per-query ranks ('queries' with 'ids' and 'first_hit_rank', one "
            "per query); write it with recallkit evaluate --json.",
            "queries",
        )
    legacy = record.get("format") != RUN_FORMAT
    try:
        _validator("run", legacy)(record, ())
        _semantics(record, where)
    except _Invalid as error:
        raise _refusal(where, record, error) from None
    return record


def _semantics(record: dict[str, Any], where: str) -> None:
    """What a schema cannot state ([`check_run`][check_run]); raises ``_Invalid`` or
    ``RecordError``."""
    import numpy as np

    queries = record["queries"]
    n = _check_lengths(record, where)
    options, parameters = _run_options(record, where)
    rank = np.fromiter(queries["first_hit_rank"], dtype=np.int64, count=n)
    evaluated = rank >= 0
    _check_counts(record, n, evaluated)
    classes = _classes(queries) if options.average == "class" else None
    stated = metrics_of(record)
    _check_metrics(record, stated, parameters, options, rank, evaluated, classes)
    _check_bounds(record, stated, parameters)


def _check_lengths(record: dict[str, Any], where: str) -> int:
    """The number of queries, once every per-query list holds one entry per query and every
    first-hit rank lies below the gallery's size."""
    queries = record["queries"]
    ids, ranks = queries["ids"], queries["first_hit_rank"]
    n = len(ids)
    if len(ranks) != n:
        raise RecordError(
            f"{where} has {n} query ids but {len(ranks)} first-hit ranks ('queries.ids' and "
            "'queries.first_hit_rank' have one entry per query); was the file edited?",
            "queries.first_hit_rank",
        )
    columns: list[tuple[tuple[Any, ...], Any]] = [
        (("queries", name), queries[name])
        for name in ("first_hit_rank", "labels", "paths", "nearest_label")
        if name in queries
    ]
    values = queries.get("values", {})
    columns += [(("queries", "values", name), column) for name, column in values.items()]
    for path, column in columns:
        if len(column) != n:
            raise _Invalid(path, column, f"it is a list of {n} entries")
    if "num_queries" in record and record["num_queries"] != n:
        raise _Invalid(("num_queries",), record["num_queries"], f"the run holds {n} queries")
    gallery = record.get("num_gallery")
    if _is_int(gallery) and gallery > 0:
        for i, rank in enumerate(ranks):
            if rank >= gallery:
                raise _Invalid(
                    ("queries", "first_hit_rank", i),
                    rank,
                    f"a rank is below the {gallery} gallery images (num_gallery)",
                )
    return n


def _run_options(record: dict[str, Any], where: str) -> tuple[Any, dict[str, Any]]:
    """The run's options, rebuilt from its definitions record, and its metrics' parameters."""
    from recallkit.options import Options
    from recallkit.runfiles.definitions import check_definitions

    definitions = record.get("definitions")
    if definitions is not None:
        try:
            check_definitions(definitions, f"{where} has a 'definitions' record that")
            options = Options.from_definitions(definitions, "load_run")
        except ValueError as error:
            raise RecordError(str(error), "definitions") from None
        parameters = definitions.get("metric_parameters", {})
    else:
        options, parameters = Options(), {}
    return options, parameters


def _check_counts(record: dict[str, Any], n: int, evaluated: Any) -> None:
    """The counts the record states agree with its first-hit ranks; the worst classes' recalls
    lie in [0, 1]."""
    counts = {"num_evaluated": int(evaluated.sum()), "num_excluded": int(n - evaluated.sum())}
    for name, count in counts.items():
        if name in record and record[name] != count:
            raise _Invalid(
                (name,),
                record[name],
                f"the first-hit ranks count {count} "
                + ("lone queries (rank -1)" if "excl" in name else "queries with a rank 0 or more"),
            )
    if record.get("num_tied", 0) > n:
        raise _Invalid(("num_tied",), record["num_tied"], f"the run holds {n} queries")
    for i, row in enumerate(record.get("worst_classes", [])):
        for name, value in row["recall"].items():
            if value is not None and not 0.0 <= value <= 1.0:
                raise _Invalid(("worst_classes", i, "recall", name), value, "it lies in [0, 1]")
        if row["queries"] > n:
            raise _Invalid(("worst_classes", i, "queries"), row["queries"], f"at most {n}")


def _classes(queries: dict[str, Any]) -> Any:
    """The query labels as dense codes (a class average needs them)."""
    from recallkit._inputs.codes import dense_codes

    if "labels" not in queries:
        raise _Invalid(
            ("queries", "labels"), _MISSING, "a run whose values average classes holds them"
        )
    labels = [tuple(v) if isinstance(v, list) else v for v in queries["labels"]]
    try:
        classes, _ = dense_codes(labels, [], ("labels", "labels"), "load_run")
    except (ValueError, TypeError) as error:
        raise _Invalid(("queries", "labels"), queries["labels"][:3], str(error)) from None
    return classes


def _check_metrics(
    record: dict[str, Any],
    stated: dict[str, Any],
    parameters: dict[str, Any],
    options: Any,
    rank: Any,
    evaluated: Any,
    classes: Any,
) -> None:
    """Each stated value is a number in its metric's range and the summary of its per-query
    values (or of the first-hit ranks, for recall@K), under the run's options."""
    import numpy as np

    from recallkit import _averaging as averaging
    from recallkit import metrics as registry

    values = record["queries"].get("values", {})
    for name, value in stated.items():
        if value is not None and not (
            isinstance(value, int | float) and not isinstance(value, bool)
        ):
            raise _Invalid(("metrics", name), value, "a value is a number, or null")
        if value is not None and _number_rule(value) is not None:
            raise _Invalid(("metrics", name), value, _number_rule(value))
    for name, value in stated.items():
        metric = registry.parse_one(name, **parameters.get(name, {}))
        if metric is None:
            continue  # a metric this recallkit does not know: its value is a number, no more
        if options.lone_queries == "zero" and metric.lone_value is None:
            raise _Invalid(
                ("definitions", "lone_queries"),
                "zero",
                f"{name} has no value for a lone query: 'skip' or 'error'",
            )
        low, high = metric.value_range
        rule = f"{name} lies in [{low}, {high}]".replace("inf]", "inf)")
        if value is not None and not low <= value <= high:
            raise _Invalid(("metrics", name), value, f"a value of {rule}")
        column = values.get(name)
        if column is not None:
            per = _per_query(metric, column, rank, evaluated, rule, np)
            expected = averaging.summarize(metric, per, evaluated, options, classes)
            what = f"the {metric.summary} of its per-query values"
        elif metric.family == "recall" and metric.k in record.get("ks", ()):
            per = np.where(evaluated, (rank < metric.k).astype(np.float64), math.nan)
            expected = averaging.summarize(metric, per, evaluated, options, classes)
            what = "the mean of the hits the first-hit ranks give"
        else:
            continue
        if not _agrees(value, expected):
            raise _Invalid(
                ("metrics", name),
                value,
                f"it is {what} ({_shown_value(_plain(expected))}, lone queries "
                f"{options.lone_queries!r}, averaged over each {options.average}); was the file "
                "edited?",
            )


def _check_bounds(
    record: dict[str, Any], stated: dict[str, Any], parameters: dict[str, Any]
) -> None:
    """Each metric's tie bounds lie on either side of its value, within its range."""
    from recallkit import metrics as registry

    for name, pair in record.get("bounds", {}).items():
        metric = registry.parse_one(name, **parameters.get(name, {}))
        if name not in stated:
            raise _Invalid(("bounds", name), pair, "a bound is given for a metric of the run")
        value = stated[name]
        if metric is None or value is None or None in pair:
            continue
        low, high = metric.value_range
        worst, best = pair
        if metric.direction == "lower":
            worst, best, value, low, high = -worst, -best, -value, -high, -low
        if not (low <= worst <= value + _slack(value) and value - _slack(value) <= best <= high):
            raise _Invalid(
                ("bounds", name),
                pair,
                f"the bounds are [pessimistic, optimistic] around the value {stated[name]!r}",
            )


def _slack(value: float) -> float:
    return max(_ABS_TOL, abs(value) * _REL_TOL)


def _plain(value: Any) -> Any:
    return None if value is None or value != value else float(value)


def _agrees(stated: Any, computed: float) -> bool:
    if stated is None or computed != computed:
        return stated is None and computed != computed
    return math.isclose(stated, computed, rel_tol=_REL_TOL, abs_tol=_ABS_TOL)


def _per_query(
    metric: Any, column: list[Any], rank: Any, evaluated: Any, rule: str, np: Any
) -> Any:
    """A metric's per-query values as float64 (NaN at lone queries), each checked: ``null``
    exactly at the lone queries, in the metric's range, and agreeing with the rank where the
    rank decides it (recall@K, MnR, MedR)."""
    name = metric.name
    lone = np.fromiter((v is None for v in column), dtype=bool, count=len(column))
    per = np.fromiter(
        (math.nan if v is None else v for v in column), dtype=np.float64, count=len(column)
    )
    wrong = np.flatnonzero(lone == evaluated)
    if len(wrong):
        i = int(wrong[0])
        rule_ = (
            "a lone query (rank -1) has no value (null)"
            if not evaluated[i]
            else "only a lone query (rank -1) has no value"
        )
        raise _Invalid(("queries", "values", name, i), column[i], rule_)
    low, high = metric.value_range
    outside = np.flatnonzero(evaluated & ~((per >= low) & (per <= high)))
    if len(outside):
        i = int(outside[0])
        raise _Invalid(("queries", "values", name, i), column[i], f"a value of {rule}")
    if metric.family == "recall":
        implied = (rank < metric.k).astype(np.float64)
        said = "recall@K is 1 when the first-hit rank is below K, else 0"
    elif metric.reads == "rank" and metric.direction == "lower":
        implied = rank + 1.0
        said = "a rank metric's value is the first-hit rank plus one"
    else:
        return per
    wrong = np.flatnonzero(evaluated & (per != implied))
    if len(wrong):
        i = int(wrong[0])
        raise _Invalid(("queries", "values", name, i), column[i], f"{said} ({int(rank[i])} here)")
    return per


def _run_file_limit() -> int:
    from recallkit.options import parse_bytes

    text = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not text:
        return RUN_FILE_LIMIT
    limit = parse_bytes(text)
    if limit is None:
        raise RecordError(
            f"The environment variable {LIMIT_VARIABLE} must be a number of bytes, or one with a "
            f"unit (512MiB, 2GB). Got {text!r}."
        )
    return limit


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB"


def _regular_file(path: Path, where: str, hint: str) -> int:
    """The size of ``path``, a regular file of at most the run-file limit; a ``RecordError``
    saying what else it is (absent, a folder, a FIFO, a device, too large) before it is
    opened (a FIFO would block the read, a device never end it)."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        raise RecordError(f"{where} does not exist.") from None
    except (OSError, ValueError) as error:  # a name too long, a NUL in it, no permission
        reason = getattr(error, "strerror", None) or str(error)
        raise RecordError(f"{where} cannot be read: {reason}.") from None
    mode = status.st_mode
    if stat.S_ISDIR(mode):
        raise RecordError(f"{where} is a folder, not a file; {hint}.")
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode)
            else "a character device"
            if stat.S_ISCHR(mode)
            else "a block device"
            if stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "not a regular file"
        )
        raise RecordError(f"{where} is {kind}, not a regular file; {hint}.")
    limit = _run_file_limit()
    if status.st_size > limit:
        raise RecordError(
            f"{where} is {_mib(status.st_size)}, over the {_mib(limit)} a run file may take "
            f"(it is read whole, at about five times its size in memory); set {LIMIT_VARIABLE} "
            "(such as 1GiB) to read it."
        )
    return status.st_size


def load_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run file written by ``recallkit evaluate --json`` (or ``Evaluator(run_file=)``)
    through the one validating reader: a regular file of at most
    [`RUN_FILE_LIMIT`][RUN_FILE_LIMIT] bytes, UTF-8 JSON without repeated keys
    ([`loads_record`][loads_record]), a run record [`check_run`][check_run] accepts. Earlier
    formats ([`RUN_FORMATS`][RUN_FORMATS]) are read too.

    Parameters
    ----------
    path : str or os.PathLike
        The run file.

    Returns
    -------
    dict
        The run record the file holds, checked.

    Raises
    ------
    RecordError
        When the path is not a regular file, the file is over the size limit, or its record is
        not a valid run: one line naming the file, the field and (where there is one) the query.
    """
    path = Path(path)
    where = f"The run file '{path}'"
    _regular_file(path, where, RUN_HINT)
    try:  # through one descriptor, checked unchanged (and recorded for the command line)
        data = read_file(path, where)
    except OSError as error:
        raise RecordError(f"{where} cannot be read: {error.strerror or error}.") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordError(
            f"{where} is not UTF-8 text (byte {error.start} cannot be decoded); {RUN_HINT}."
        ) from None
    del data
    return parse_run(text, path)


def parse_run(text: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The run record in ``text``, the content of the run file ``path``, read as
    [`load_run`][load_run] reads it once the file is read: JSON without repeated keys, of the
    run kind, that [`check_run`][check_run] accepts.

    Parameters
    ----------
    text : str
        The file's text.
    path : str or os.PathLike
        The file, named in the messages.

    Returns
    -------
    dict
        The run record ``text`` holds, checked.

    Raises
    ------
    RecordError
        When ``text`` is not JSON, repeats a key, or is not a valid run record: one line naming
        the file, the field and (where there is one) the query.
    """
    path = Path(path)
    where = f"The run file '{path}'"
    try:
        record = loads_record(text, where)
    except RecordError:
        wrong = wrong_kind(path, text, "run")
        if wrong is not None:
            raise wrong from None
        raise
    if not isinstance(record, dict) or not isinstance(record.get("queries"), dict):
        wrong = wrong_kind(path, text, "run")
        if wrong is not None:
            raise wrong
    del text
    return check_run(record, where)
