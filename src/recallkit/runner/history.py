"""Run history: one JSON line per evaluation (``--history runs.jsonl --tag epoch-3``).

Each line is a run record (see :func:`recallkit.runner.evaluate.run_record`) without the
per-query and per-class detail: the tag, the recall values, the counts and the setup. The file
is rewritten atomically on each append, so a reader never sees half a line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recallkit._atomic import atomic_write
from recallkit.errors import UsageError

_DETAIL = ("queries", "worst_classes", "skipped_images", "sources")


def history_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The compact form of a run record kept in the history file.

    >>> history_record({"tag": "e1", "recall": {"recall@1": 0.5}, "queries": {"ids": []}})
    {'tag': 'e1', 'recall': {'recall@1': 0.5}}
    """
    out = {k: v for k, v in record.items() if k not in _DETAIL}
    if record.get("skipped_images"):
        out["num_skipped_images"] = len(record["skipped_images"])
    return out


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
        raise UsageError(f"The history file '{path}' does not exist.")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(
                f"The history file '{path}' line {number} is not JSON: {error}."
            ) from None
        if (
            not isinstance(record, dict)
            or "tag" not in record
            or not isinstance(record.get("recall"), dict)
        ):
            raise UsageError(
                f"The history file '{path}' line {number} is not a run record "
                "(it needs 'tag' and 'recall')."
            )
        records.append(record)
    return records


def append_history(path: str | os.PathLike[str], record: Mapping[str, Any]) -> int:
    """Append ``record`` (compacted) as one line; return the number of records now in the file.

    The existing lines are checked first; the whole file is then rewritten atomically.

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
    old = read_history(path) if path.exists() else []
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    compact = history_record(record)
    if compact.get("tag") is None:
        compact["tag"] = f"run-{len(old) + 1}"
    with atomic_write(path, "w") as handle:
        handle.write(text + json.dumps(compact) + "\n")
    return len(old) + 1
