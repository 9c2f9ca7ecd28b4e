"""README and the guides under docs/: every code block runs, and the output shown is current.

Each document runs in a fresh temporary folder, its blocks in order in one namespace:

- a ``python`` block is executed;
- a ``bash`` block runs each command in this process (``uv run`` and its options are dropped):
  ``recallkit ...`` and ``python -m recallkit ...`` call the command line, ``python -m
  docs.recipes.NAME`` runs the recipe; any other command must be marked ``skip``;
- a ``text`` block right after a code block (blank lines between at most) is that block's
  standard output, compared as a doctest with ``...`` for any text.

An HTML comment on the line before a block adjusts this (``<!-- docs-test: KEY=VALUE ... -->``):
``setup=a,b`` runs those functions of :mod:`tests.doc_setups` first (files and names the block
uses); ``skip="reason"`` does not run the block; ``output-unchecked="reason"`` runs it without
comparing its output; ``demo-fast`` adds ``--fast`` to ``recallkit demo``; on a ``text`` block
that is not an output, ``not-output="reason"`` says why it is shown.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import doc_setups

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = sorted((ROOT / "docs").glob("*.md"))
DOCUMENTS = [README, *GUIDES]

LANGUAGES = ("python", "bash", "text")
KEYS = {"setup", "skip", "output-unchecked", "not-output", "demo-fast"}
NEEDS_REASON = {"skip", "output-unchecked", "not-output"}
FENCE = re.compile(r"^```(\S*)\s*$")
DIRECTIVE = re.compile(r"^<!-- docs-test:(.*)-->\s*$")
UV_FLAGS = {"--frozen", "--no-sync"}
UV_OPTIONS = {"--env-file"}  # uv options followed by a value


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    end: int  # 1-based line of the closing fence
    lang: str
    code: str
    directive: dict[str, str] = field(default_factory=dict)
    output: Block | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def setups(self) -> list[str]:
        value = self.directive.get("setup", "")
        return [name for name in value.split(",") if name]


def _directive(text: str, where: str) -> dict[str, str]:
    out = {}
    for token in shlex.split(text):
        key, _, value = token.partition("=")
        assert key in KEYS, f"{where}: unknown docs-test key {key!r} (known: {sorted(KEYS)})"
        assert value or key not in NEEDS_REASON, f'{where}: {key} needs a reason: {key}="..."'
        out[key] = value
    return out


def parse(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, with their directives and outputs; checks the markup."""
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        assert not re.match(r"\s+```", line), f"{path.name}:{number}: an indented fence is not run"
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        where = f"{path.relative_to(ROOT)}:{start + 1}"
        lang = match.group(1)
        assert lang in LANGUAGES, f"{where}: a fence needs one of {LANGUAGES}, got {lang!r}"
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            i += 1
        assert i < len(lines), f"{where}: the block is never closed"
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        directive = {}
        if j >= 0 and (found := DIRECTIVE.match(lines[j].strip())):
            directive = _directive(found.group(1), where)
        code = "\n".join(lines[start + 1 : i]) + "\n"
        blocks.append(Block(path, start + 1, i + 1, lang, code, directive))
        i += 1
    previous: Block | None = None
    for block in blocks:
        if block.lang == "text":
            follows = (
                previous is not None
                and previous.lang != "text"
                and not block.directive
                and all(not s.strip() for s in lines[previous.end : block.line - 1])
            )
            if follows:
                previous.output = block
            else:
                assert set(block.directive) == {"not-output"}, (
                    f"{block.where}: a text block is the output of the code block right before "
                    'it, or is marked not-output="why it is shown"'
                )
        else:
            assert "not-output" not in block.directive, f"{block.where}: not-output is for text"
            for name in block.setups:
                assert hasattr(doc_setups, name), f"{block.where}: no setup named {name!r}"
        previous = block
    for block in blocks:
        if "output-unchecked" in block.directive:
            assert block.output is not None, f"{block.where}: output-unchecked without an output"
    return blocks


def bash_commands(code: str) -> list[list[str]]:
    """Each command of a bash block as argv: continuations joined, comments removed."""
    commands = []
    for raw in code.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw)
        if line.strip():
            commands.append(shlex.split(line))
    return commands


def without_uv(argv: list[str], where: str) -> list[str]:
    if argv[:2] != ["uv", "run"]:
        return argv
    rest = argv[2:]
    while rest and rest[0].startswith("--"):
        option = rest.pop(0)
        name = option.partition("=")[0]
        assert name in UV_FLAGS | UV_OPTIONS, f"{where}: unknown uv option {option}"
        if name in UV_OPTIONS and "=" not in option:
            rest.pop(0)
    return rest


class Session:
    """One document's run: a namespace, a working folder, captured output."""

    def __init__(self, path: Path, workdir: Path) -> None:
        self.path = path
        self.workdir = workdir
        self.ns: dict = {"__name__": "__docs__"}
        self.finalizers: list = []

    def run(self, block: Block) -> None:
        if "skip" in block.directive or block.lang == "text":
            return
        for name in block.setups:
            getattr(doc_setups, name)(self)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if block.lang == "python":
                    source = "\n" * block.line + block.code  # tracebacks give the document's lines
                    exec(compile(source, str(block.path), "exec"), self.ns)
                else:
                    for argv in bash_commands(block.code):
                        self.command(without_uv(argv, block.where), block)
            except Exception as error:
                raise AssertionError(
                    f"{block.where}: the {block.lang} block failed: {error!r}\n"
                    f"stdout:\n{out.getvalue()}\nstderr:\n{err.getvalue()}"
                ) from error
        if block.output is not None and "output-unchecked" not in block.directive:
            # Trailing blank lines are invisible in the document: compare without them.
            want, got = block.output.code, out.getvalue().rstrip("\n") + "\n"
            checker = doctest.OutputChecker()
            if not checker.check_output(want, got, doctest.ELLIPSIS):
                example = doctest.Example("", want)
                diff = checker.output_difference(example, got, doctest.ELLIPSIS)
                raise AssertionError(
                    f"{block.output.where}: the output shown is not current\n{diff}"
                )

    def command(self, argv: list[str], block: Block) -> None:
        where = block.where
        if argv[0] == "recallkit":
            return self.cli(argv[1:], block)
        if argv[:2] == ["python", "-m"] and len(argv) > 2:
            module, args = argv[2], argv[3:]
            if module == "recallkit":
                return self.cli(args, block)
            if module.startswith("docs.recipes."):
                saved = sys.argv
                sys.argv = [module, *args]
                try:
                    with warnings.catch_warnings():
                        # runpy warns when the recipe module was imported by an earlier block.
                        warnings.simplefilter("ignore", RuntimeWarning)
                        runpy.run_module(module, run_name="__main__", alter_sys=True)
                finally:
                    sys.argv = saved
                return None
        raise AssertionError(f"{where}: cannot run {shlex.join(argv)!r} here; mark the block skip")

    def cli(self, args: list[str], block: Block) -> None:
        from recallkit.cli import main

        if args[:1] == ["demo"] and "demo-fast" in block.directive:
            args = [*args, "--fast"]
        try:
            status = main(args)
        except SystemExit as exit_:  # --help, or argparse's own errors
            status = exit_.code or 0
        assert status == 0, f"{block.where}: recallkit {shlex.join(args)} exited with {status}"


@pytest.fixture
def session(tmp_path, monkeypatch):
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("RECALLKIT_CACHE", str(tmp_path / "cache"))
    sessions = []

    def make(path: Path) -> Session:
        sessions.append(Session(path, workdir))
        return sessions[-1]

    yield make
    for s in sessions:
        for finalizer in reversed(s.finalizers):
            finalizer()


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_runs_and_shows_its_output(path, session):
    run = session(path)
    for block in parse(path):
        run.run(block)


# ---------------------------------------------------------------------------------- the README


def test_readme_is_a_short_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) < 250
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[0] == "## Quick start"
    first = parse(README)[0]
    assert first.lang == "bash"
    assert "uv run python -m docs.recipes.evaluation" in first.code.splitlines()[0]
    assert "uv run --env-file tests/cpu.env python -m pytest" in first.code.splitlines()[1]


def test_quick_start_recipe_prints_what_the_readme_shows(session):
    """The quick start's block is skipped (its second line is this suite); run its first line."""
    first = parse(README)[0]
    recipe = Block(README, first.line, first.end, "bash", first.code.splitlines()[0] + "\n")
    recipe.output = first.output
    assert recipe.output is not None
    session(README).run(recipe)


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "uv run --frozen --env-file tests/cpu.env python -m pytest" in ci
    assert "\n.ci/wheel-check\n" in ci  # the built wheel, installed with the core only


def test_every_guide_is_linked_from_the_readme():
    text = README.read_text()
    for guide in GUIDES:
        assert f"](docs/{guide.name})" in text, guide.name


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    anchors = set()
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_named_paths_exist(path):
    text = path.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.exists(), f"{path.name}: broken link {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{path.name}: no heading for #{anchor}"
    for named in re.findall(r"`((?:src/recallkit|tests|docs|benchmarks|\.ci)/[\w./-]*)`", text):
        if "<" in named or "*" in named:
            continue
        assert (ROOT / named).exists(), f"{path.name}: `{named}` does not exist"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_public_text_names_conventions_not_history(path):
    text = path.read_text().lower()
    for phrase in (
        "the seed's",
        "seed 00",
        "this project's machine",
        "against the goals",
        "this task's session",
        "earlier session",
        "our machine",
    ):
        assert phrase not in text, f"{path.name}: {phrase!r}"


def test_recallkit_command_lists_the_documented_commands():
    """The installed console script (a real subprocess) has every command of docs/cli.md."""
    script = Path(sys.executable).with_name("recallkit")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "recallkit"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [*command, "--help"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    rows = (ROOT / "docs" / "cli.md").read_text().split("| command |")[1].split("\n\n")[0]
    names = set()
    for row in rows.splitlines()[2:]:
        names.update(re.findall(r"`([\w-]+)`", row.split("|")[1]))
    assert names == {
        "evaluate",
        "compare",
        "report",
        "plot",
        "demo",
        "image-text",
        "cirr",
        "circo",
        "fashioniq",
        "genecis",
    }
    for name in names:
        assert re.search(rf"^\s+{name}\b", done.stdout, flags=re.M), name
