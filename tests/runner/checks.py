"""Assertions shared by the command-line tests."""

from __future__ import annotations

import json
from pathlib import Path


def one_error_line(res, *fragments):
    """The command failed as the README promises: exit 2, no traceback, exactly one ``error:``
    line, holding every fragment. Returns that line."""
    assert res.rc == 2, (res.out, res.err)
    assert "Traceback" not in res.err
    lines = [line for line in res.err.splitlines() if "error:" in line]
    assert len(lines) == 1, res.err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def only_error_line(res, line):
    """The command failed with exactly ``line`` on stderr (nothing else) and nothing on stdout."""
    assert "Traceback" not in res.err, res.err
    assert (res.rc, res.out, res.err) == (2, "", line + "\n")


def valid_run(run, kind="run"):
    """``run`` (a run record, or the path of a run file) is valid against the JSON Schema that
    recallkit ships (``recallkit.runfiles.records.schema(kind)``); returns the record."""
    import jsonschema

    from recallkit.runfiles.records import schema

    record = run if isinstance(run, dict) else json.loads(Path(run).read_text())
    validator = jsonschema.Draft202012Validator(schema(kind))
    errors = sorted(validator.iter_errors(record), key=lambda e: list(e.absolute_path))
    assert not errors, "; ".join(
        f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:5]
    )
    return record
