"""Assertions shared by the command-line tests."""

from __future__ import annotations


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
