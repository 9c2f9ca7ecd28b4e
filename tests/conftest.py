"""Checks every test gets: each run file and history file a test writes under its temporary
folder is valid against the JSON Schema shipped in the package (unless the test is marked
``invalid_records``: it damages one on purpose), and holds no absolute path of this machine's
temporary folder (run files travel), unless the test is marked ``absolute_paths`` (it asks for
them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "absolute_paths: the test writes run files with absolute paths on purpose"
    )
    config.addinivalue_line(
        "markers", "invalid_records: the test writes damaged run files on purpose"
    )


def _recallkit_files(folder: Path):
    from recallkit.runfiles import records

    for path in folder.rglob("*"):
        if path.suffix not in (".json", ".jsonl") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        kind = records.file_kind(text)
        if kind in ("run", "history"):
            yield path, kind, text


@pytest.fixture(autouse=True)
def _check_written_records(request):
    yield
    tmp_path = request.node.funcargs.get("tmp_path")
    if tmp_path is None or not Path(tmp_path).is_dir():
        return
    import jsonschema

    from recallkit.runfiles import records

    validators = {
        kind: jsonschema.Draft202012Validator(records.schema(kind)) for kind in ("run", "history")
    }
    absolute = request.node.get_closest_marker("absolute_paths") is not None
    invalid = request.node.get_closest_marker("invalid_records") is not None
    roots = {str(tmp_path), str(Path(tmp_path).resolve())}
    for path, kind, text in _recallkit_files(Path(tmp_path)):
        records_ = (
            [json.loads(text)]
            if kind == "run"
            else [json.loads(line) for line in text.splitlines() if line.strip()]
        )
        for record in records_:
            if invalid or not str(record.get("format", "")).endswith("/4"):
                continue  # a file of an earlier format, written by a test on purpose
            errors = sorted(validators[kind].iter_errors(record), key=lambda e: list(e.path))
            assert not errors, f"{path}: {errors[0].message} at {list(errors[0].path)}"
        if not absolute:
            leaked = [root for root in roots if root in text]
            assert not leaked, f"{path} holds the machine's temporary folder {leaked[0]}"
