"""The commands of docs/cli.md write their files into folders that git ignores in a clone.

A reader who runs them from the root of a clone gets no untracked file: every output option of
every documented ``recallkit`` command names a path under a folder that ``.gitignore`` ignores
(``/out/`` and ``/recallkit-demo/``).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_readme import ROOT, bash_commands, parse, without_uv

CLI_MD = ROOT / "docs" / "cli.md"
# The options that name a file or folder a command writes.
OUTPUTS = {"--json", "--history", "--show-out", "-o", "--out", "--submission", "--submission-dir"}


def _ignored_folders() -> set[str]:
    """The root-level folders of .gitignore (lines like ``/out/``)."""
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return {m.group(1) for line in lines if (m := re.fullmatch(r"/([\w.-]+)/", line.strip()))}


def _outputs(argv: list[str]) -> list[str]:
    found = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in OUTPUTS:
            found.append(value if eq else argv[i + 1])
    if argv[:2] == ["recallkit", "demo"] and not any(o in argv for o in ("--out",)):
        found.append("recallkit-demo")  # the demo's default folder
    return found


def documented_outputs() -> list[tuple[str, str]]:
    """``(where, path)`` for every output of every recallkit command in docs/cli.md."""
    out = []
    for block in parse(CLI_MD):
        if block.lang != "bash":
            continue
        for argv in bash_commands(block.code):
            argv = without_uv(argv, block.where)
            if argv[:1] == ["recallkit"]:
                out += [(block.where, path) for path in _outputs(argv)]
    return out


def test_every_documented_output_is_in_an_ignored_folder():
    ignored = _ignored_folders()
    assert {"out", "recallkit-demo"} <= ignored
    outputs = documented_outputs()
    # The page writes plots, grids, run files, a history and submissions.
    assert {Path(p).suffix for _, p in outputs} >= {".png", ".html", ".json", ".jsonl"}
    outside = [(where, p) for where, p in outputs if Path(p).parts[0] not in ignored]
    assert outside == []


def test_the_check_sees_an_output_outside(tmp_path):
    argv = ["recallkit", "plot", "runs.jsonl", "-o", "recall.png"]
    assert _outputs(argv) == ["recall.png"]
    assert Path("recall.png").parts[0] not in _ignored_folders()
    assert _outputs(["recallkit", "evaluate", "--json=out/a.json", "--show-out", "g.html"]) == [
        "out/a.json",
        "g.html",
    ]
