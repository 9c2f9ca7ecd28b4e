"""The README's core example prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_core_example_output_is_current():
    text = README.read_text()
    section = text[text.index("## The recall@K core") :]
    code, shown = re.findall(r"```(?:python)?\n(.*?)```", section, flags=re.S)[:2]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue() == shown


def test_quick_start_commands_are_present():
    text = README.read_text()
    assert "uv run python -m docs.recipes.evaluation" in text
    assert "uv run --env-file tests/cpu.env python -m pytest" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "uv run --frozen --env-file tests/cpu.env python -m pytest" in ci
