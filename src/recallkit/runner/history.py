"""Run history: one JSON line per evaluation (``--history runs.jsonl --tag epoch-3``).

Each line is a run record (see
[`recallkit.runner.pipeline.run_record`][recallkit.runner.pipeline.run_record]) without the
per-query and per-class detail: the tag, the recall values, the counts and the setup.

The format and the locked, atomic append live in the library,
[`recallkit.runfiles.records`][recallkit.runfiles.records], which
[`recallkit.Evaluator`][recallkit.evaluator.Evaluator] writes with too; this module gives the
runner's errors ([`RunnerError`][recallkit.runner.RunnerError]). A run is appended as one line while
the file is locked (``flock``), so runs that finish at the same time on one history file each add
their line and each learns its own position ("(N runs)"); nothing is lost or counted twice. The file
is appended to in place: a history given as a symbolic link stays a link (its target grows),
and the file keeps its owner and mode. When the line cannot be written whole (a full disk), the
file is cut back to its previous length. On a file system without ``flock`` the line is still
appended in one ``O_APPEND`` write, but concurrent runs may then report the same count.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from recallkit.exceptions import RunnerError
from recallkit.runfiles import records
from recallkit.runfiles.records import HISTORY_HINT, RUN_HINT, file_kind, history_record

__all__ = [
    "HISTORY_HINT",
    "RUN_HINT",
    "append_history",
    "file_kind",
    "history_record",
    "read_history",
    "wrong_kind",
]


@contextlib.contextmanager
def _as_runner_error() -> Iterator[None]:
    try:
        yield
    except records.RecordError as error:
        raise RunnerError(str(error)) from None


def wrong_kind(path: Path, text: str, expected: str) -> RunnerError | None:
    """The error for a recallkit file of another kind than ``expected`` (``None`` otherwise).

    >>> print(wrong_kind(Path("runs.jsonl"), '{"tag": "a", "recall": {}}', "run"))
    'runs.jsonl' is a history file (recallkit evaluate --history); pass a run file (recallkit \
evaluate --json).
    """
    error = records.wrong_kind(path, text, expected)
    return None if error is None else RunnerError(str(error))


def read_history(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a history file, in order; each must have a ``tag`` and a ``recall`` dict.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "runs.jsonl"
    >>> _ = p.write_text('{"tag": "a", "recall": {"recall@1": 0.25}}\\n')
    >>> read_history(p)[0]["recall"]
    {'recall@1': 0.25}
    """
    with _as_runner_error():
        return records.read_history(path)


def append_history(path: str | os.PathLike[str], record: Mapping[str, Any]) -> int:
    """Append ``record`` (compacted) as one line; return the number of records now in the file.

    Under an exclusive lock the existing lines are checked (a damaged file is not appended
    to), the line is appended and synced, and the records are counted, so concurrent runs get
    distinct counts. A record without a tag is named ``run-N`` after its position; a tag that
    the file already holds gives a ``UserWarning`` naming the tag and the file (both runs are
    kept, and ``recallkit plot`` shows both under that tag). On a failed write (``OSError``,
    e.g. a full disk) the file is cut back to its previous length (and removed if this call
    created it) before the error is raised
    ([`recallkit.runfiles.records.append_history`][recallkit.runfiles.records.append_history]).

        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "runs.jsonl"
        >>> append_history(p, {"tag": "epoch-1", "recall": {"recall@1": 0.5}, "queries": {}})
        1
        >>> append_history(p, {"tag": None, "recall": {"recall@1": 0.75}})
        2
        >>> [r["tag"] for r in read_history(p)]
        ['epoch-1', 'run-2']
    """
    with _as_runner_error():
        return records.append_history(path, record, stacklevel=3)
