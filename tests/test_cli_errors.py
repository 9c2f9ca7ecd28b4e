"""Errors of the command line: library messages said with options, never Python keywords.

The library's messages keep their parts (:mod:`recallkit.exceptions`): the parameter at fault
and the settings a message suggests ("pass check_counts=False") are mentions, not text;
:mod:`recallkit.cli.errors` renders them with the command line's options. One test reads the source
of every module the command line can reach and checks that no message spells a keyword hint
in its literal text (it would reach the user as Python); the others pin the rendering.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
from pathlib import Path

import pytest

import recallkit
from recallkit._inputs import checks as _checks
from recallkit.cli.errors import SETTINGS, UsageError, error_text, namer, one_line, warning_text
from recallkit.exceptions import RecallkitError, RecallkitWarning, Text

PACKAGE = Path(recallkit.__file__).parent

# A keyword hint: ``name=value`` with a Python value, or ``name=`` before an f-string field.
HINT = re.compile(r"\b([a-z_][a-z0-9_]*)=(True|False|None|'[^']*'|\"[^\"]*\"|\d+|\{\}|$)")

# Hints in messages that the command line cannot meet, each with the reason.
UNREACHABLE = {
    "check_images=False": "the command line leaves load_benchmark's check_images at True",
    "crop=True": "the command line never asks load_benchmark for cropped images",
    "name={}": "only with crop=True, which the command line never passes",
    "gallery_split={}": "Protocol's own consistency check; its protocols are fixed tables",
}


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != "recallkit":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(path: Path) -> set[str]:
    """Every ``recallkit`` module named by an import in ``path``, at any depth of the code, or
    loaded on first use (``recallkit._loading.Module("recallkit....")``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and _callee(node) == "Module" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if _module_file(name) is not None}


def reachable_modules() -> dict[str, Path]:
    """The modules the command line can load: its own and every one they import, recursively.

    The command modules are imported by name (``importlib``), so all of them are the start.
    """
    start = ["recallkit.cli", "recallkit.cli.app", "recallkit.__main__", "recallkit.cli.errors"]
    commands = PACKAGE / "cli" / "commands"
    start += [f"recallkit.cli.commands.{p.stem}" for p in commands.glob("*.py")]
    found: dict[str, Path] = {}
    todo = list(start)
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in found or path is None:
            continue
        found[name] = path
        parent = name.rsplit(".", 1)[0]
        todo += [*_imports(path), parent]
    return found


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _texts(node: ast.AST) -> list[str]:
    """The literal text of every string in ``node``; ``{}`` stands for an f-string's fields."""
    out: list[str] = []
    inside: set[int] = set()
    for child in ast.walk(node):
        if isinstance(child, ast.JoinedStr):
            parts = []
            for value in child.values:
                inside.add(id(value))
                is_text = isinstance(value, ast.Constant) and isinstance(value.value, str)
                parts.append(value.value if is_text else "{}")
            out.append("".join(parts))
        elif (
            isinstance(child, ast.Constant)
            and isinstance(child.value, str)
            and id(child) not in inside
        ):
            out.append(child.value)
    return out


def messages(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of the strings of ``path`` that become messages.

    They are the strings of a ``raise``, and of the calls that build an error or a warning
    wherever they stand: ``fail(...)``, ``SomethingError(...)``, ``warnings.warn(...)`` and an
    error class's ``super().__init__(...)``.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[tuple[int, str], None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            found.update(dict.fromkeys((node.lineno, text) for text in _texts(node.exc)))
        elif isinstance(node, ast.Call):
            name = _callee(node)
            if name in ("fail", "warn", "__init__") or name.endswith(("Error", "Warning")):
                found.update(dict.fromkeys((node.lineno, text) for text in _texts(node)))
    return list(found)


def _hints(text: str) -> list[str]:
    return [m.group(0) for m in HINT.finditer(text)]


def test_the_walk_reaches_the_modules_behind_every_command():
    modules = reachable_modules()
    for name in (
        "recallkit.cli.commands.protocols",
        "recallkit.cli.commands.evaluate",
        "recallkit._inputs.io",
        "recallkit._inputs.checks",
        "recallkit.protocols.image_text",
        "recallkit.datasets._files",
        "recallkit.runner.encode",
        "recallkit.runner.sources",
    ):
        assert name in modules, name


def test_the_walk_finds_a_literal_hint(tmp_path):
    """The check below can fail: a message spelling a keyword hint is found."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(x):\n    raise ValueError(f'pass skip_bad=True to go on, not {x}')\n"
        "def g():\n    fail('g', 'k', \"a K (see ks='all')\", 0)\n"
    )
    found = [hint for _, text in messages(bad) for hint in _hints(text)]
    assert found == ["skip_bad=True", "ks='all'"]


def test_no_message_the_command_line_can_print_names_a_python_keyword():
    escaped = []
    seen = set()
    for name, path in sorted(reachable_modules().items()):
        for line, text in messages(path):
            for hint in _hints(text):
                seen.add(hint)
                if hint not in UNREACHABLE:
                    escaped.append(f"{name}:{line}: {hint} in {text!r}")
    assert escaped == []
    # Each exception above still exists: the list does not outlive its reasons.
    assert set(UNREACHABLE) <= seen


def test_every_setting_becomes_an_option_or_words_or_is_left_out():
    name = namer({})
    for (parameter, value), words in SETTINGS.items():
        assert name(parameter, value) == words
        assert words is None or ("=" not in words and words)


def _raised(call):
    with pytest.raises(ValueError) as caught:
        call()
    return caught.value


def test_library_errors_are_said_with_the_options_from_their_parts():
    from recallkit.datasets import _files
    from recallkit.runner.encode import BadImage, BadImagesError

    cases = [
        (
            RecallkitError(
                Text(
                    "x.json: 3 images; expected 5 (pass {fix} to evaluate partial data)",
                    fix=("check_counts", False),
                )
            ),
            {},
            "x.json: 3 images; expected 5 (pass --no-count-check to evaluate partial data).",
        ),
        (
            BadImagesError([BadImage("a.png", "truncated")], what="gallery"),
            {},
            (
                "1 gallery image could not be read: a.png (truncated). Fix or remove it, or pass "
                "--skip-bad to continue without it."
            ),
        ),
        (
            # a clause offering a setting the command line has no option for is left out
            RecallkitError(
                Text(
                    "3 images are not on disk. None exists: is {root} the folder? Pass {skip} to "
                    "leave them out{nocheck}.",
                    root="root",
                    skip=("skip_missing", True),
                    nocheck=Text(", or {off} to skip the check", off=("check_images", False)),
                )
            ),
            {"root": "--root"},
            (
                "3 images are not on disk. None exists: is --root the folder? Pass --skip-bad to "
                "leave them out."
            ),
        ),
        (
            _checks.fail(
                "cirr_recall",
                "images",
                Text("one row per image of {d} (30 rows)", d="data"),
                "12 rows",
            ),
            {"images": "--images", "data": "the CIRR split of --root"},
            (
                "--images must be one row per image of the CIRR split of --root (30 rows). Got 12 "
                "rows."
            ),
        ),
        (
            _checks.fail("recall_at_k", "query_labels", "of length 3", 4),
            {},
            "The query labels must be of length 3. Got 4.",
        ),
        (
            _checks.fail(
                "f",
                "query_labels",
                Text("shared, as {p} asks", p=("lone_queries", "error")),
                "1 lone query",
            ),
            {"lone_queries": "--lone-queries"},
            "The query labels must be shared, as --lone-queries error asks. Got 1 lone query.",
        ),
        (
            _checks.fail("f", "x", Text("non-zero under {m}", m=("metric", "cosine")), "0"),
            {"x": "--embeddings", "metric": "--metric"},
            "--embeddings must be non-zero under --metric cosine. Got 0.",
        ),
    ]
    for error, parameters, line in cases:
        assert error_text(error, parameters) == line
    # A library raise keeps its parts: Python callers read keywords, the command line options.
    error = _raised(lambda: _files.check_flags("load_cub", skip_missing=True, check_images=False))
    assert "False unless check_images=True" in str(error)
    assert error.requirement.parameters() == [("check_images", True)]


def test_warnings_are_said_from_their_parts():
    w = RecallkitWarning("recall_at_k", Text("{ks} asks for more than 3 candidates", ks="ks"), "ks")
    assert warning_text(w, {"ks": "--ks"}) == "--ks asks for more than 3 candidates"
    assert str(w) == "recall_at_k: 'ks' asks for more than 3 candidates"
    assert warning_text(UserWarning("multi\nline")) == "multi line"


def test_the_clamp_warning_reaches_the_command_line_without_a_function_name(tmp_path):
    import numpy as np

    np.save(tmp_path / "e.npy", np.eye(3, dtype=np.float32))
    np.save(tmp_path / "l.npy", np.array([0, 0, 1]))
    import contextlib
    import io

    from recallkit.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert (
            main(
                [
                    "evaluate",
                    "--embeddings",
                    str(tmp_path / "e.npy"),
                    "--labels",
                    str(tmp_path / "l.npy"),
                    "--ks",
                    "1",
                    "5",
                ]
            )
            == 0
        )
    text = err.getvalue()
    assert "warning: recall@5 asks for more than the 2 candidates per query" in text
    assert "recall_at_k" not in text and "evaluate:" not in text.split("warning:")[1]


TORCH_REFUSAL = (
    "Weights only load failed. This file can still be loaded, to do so you have two options, "
    "\x1b[1mdo those steps only if you trust the source of the checkpoint\x1b[0m. \n\t(1) In "
    "PyTorch 2.6, we changed the default value of the `weights_only` argument in `torch.load` "
    "from `False` to `True`. Re-running `torch.load` with `weights_only` set to `False` will "
    "likely succeed, but it can result in arbitrary code execution. Do it only if you got the "
    "file from a trusted source.\n\t(2) Alternatively, to load with `weights_only=True` please "
    "check the recommended steps in the following error message.\n\tWeightsUnpickler error: "
    "Unsupported global: GLOBAL print was not an allowed global by default. Please use "
    "`torch.serialization.add_safe_globals([print])` or the "
    "`torch.serialization.safe_globals([print])` context manager to allowlist this global if "
    "you trust this class/function.\n\nCheck the documentation of torch.load to learn more "
    "about types accepted by default with weights_only "
    "https://pytorch.org/docs/stable/generated/torch.load.html."
)


def test_torchs_advice_on_keywords_is_said_for_the_command_line():
    # torch.load's refusal (here of a file holding a function) advises its own keywords.
    assert one_line(f"The weights file 'w.pt' cannot be read: {TORCH_REFUSAL}") == (
        "The weights file 'w.pt' cannot be read: only tensors, dicts and lists are read from a "
        "torch file, and this one holds something else (Unsupported global: GLOBAL print was "
        "not an allowed global by default)."
    )
    junk = (
        "Weights only load failed. In PyTorch 2.6, we changed the default value of the "
        "`weights_only` argument in `torch.load` from `False` to `True`. Do it only if you got "
        "the file from a trusted source.\nPlease file an issue with the following so that we "
        "can make `weights_only=True` compatible with your use case: WeightsUnpickler error: "
        "\n\nUnsupported operand 0\n\nCheck the documentation of torch.load to learn more about "
        "types accepted by default with weights_only "
        "https://pytorch.org/docs/stable/generated/torch.load.html."
    )
    assert one_line(f"The scores file 's.pt' cannot be read: {junk}") == (
        "The scores file 's.pt' cannot be read: only tensors, dicts and lists are read from a "
        "torch file, and this one holds something else (Unsupported operand 0)."
    )


def test_a_parameter_error_keeps_its_parts_and_its_message():
    error = _checks.fail("cirr_recall", "images", "one row per image (30 rows)", "12 rows")
    assert isinstance(error, _checks.ParameterError) and isinstance(error, ValueError)
    assert (error.func, error.name, str(error.requirement), error.got) == (
        "cirr_recall",
        "images",
        "one row per image (30 rows)",
        "12 rows",
    )
    message = (
        "The 'images' parameter of cirr_recall must be one row per image (30 rows). Got 12 rows."
    )
    assert str(error) == message
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.name, copy.got) == (message, "images", "12 rows")


def test_error_text_says_a_parameter_error_with_the_option():
    error = _checks.fail("image_text_recall", "texts", "non-empty", "0 rows")
    assert error_text(error, {"texts": "--texts"}) == "--texts must be non-empty. Got 0 rows."
    assert error_text(error, {}) == "The texts must be non-empty. Got 0 rows."
    phrase = {"texts": "the caption embeddings of --callable m:f"}
    assert error_text(error, phrase) == (
        "The caption embeddings of --callable m:f must be non-empty. Got 0 rows."
    )


def test_error_text_of_system_errors_and_usage_errors():
    assert error_text(FileNotFoundError(2, "No such file or directory", "a.npy")) == (
        "No such file or directory: 'a.npy'."
    )
    assert error_text(UsageError("--ks takes positive integers. Got '0'.")) == (
        "--ks takes positive integers. Got '0'."
    )
    assert error_text(ValueError("")) == "ValueError."


# ---------------------------------------------------------------- error lines of the commands


def _main(capsys, *argv):
    from recallkit.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["demo", "--out", "{tmp}/file.txt", "--fast"],
            "recallkit demo: error: --out takes a folder; '{tmp}/file.txt' is a file.",
        ),
        (
            ["plot", "{tmp}/runs.jsonl", "-o", "{tmp}"],
            "recallkit plot: error: --out takes a file name; '{tmp}' is a folder.",
        ),
        (
            ["plot", "{tmp}/runs.jsonl", "-o", "{tmp}/p.png", "--ks", "\u00b2"],  # a superscript 2
            "recallkit plot: error: --ks takes positive integers, like --ks 1 5 10. Got '\u00b2'.",
        ),
        (
            ["compare", "{tmp}/a.json", "{tmp}/b.json", "--json", "/dev/null"],
            (
                "recallkit compare: error: --json '/dev/null' is not a regular file (a device, "
                "a pipe or a socket); give the name of a file to write."
            ),
        ),
        (
            ["compare", "{tmp}/a.json", "{tmp}/b.json", "--confidence", "1.5"],
            "recallkit compare: error: --confidence must be between 0 and 1. Got 1.5.",
        ),
        (
            ["evaluate", "--images", "{tmp}", "--callable", "m:f", "--mean", "nan", "0", "0"],
            "recallkit evaluate: error: --mean takes three finite numbers. Got [nan, 0.0, 0.0].",
        ),
    ],
)
def test_options_checked_before_any_work(tmp_path, capsys, argv, line):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "a" / "0.png").parent.mkdir()
    from PIL import Image

    Image.new("RGB", (2, 2)).save(tmp_path / "a" / "0.png")
    argv = [a.format(tmp=tmp_path) for a in argv]
    if argv[0] == "evaluate":  # --mean is checked once the callable has been imported
        argv[argv.index("m:f")] = "recallkit.runner.encoders:pixels"
    assert _main(capsys, *argv) == (2, "", line.format(tmp=tmp_path) + "\n")


def test_a_reader_that_stops_reading_does_not_stop_the_command(tmp_path):
    """``recallkit evaluate ... --json r.json | head -1``: the run file is still written."""
    import os
    import subprocess
    import sys

    import numpy as np
    from PIL import Image

    for i, label in enumerate(("a", "a", "b", "b")):
        (tmp_path / "imgs" / label).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (2, 2), (i, 0, 0)).save(tmp_path / "imgs" / label / f"{i}.png")
    np.save(tmp_path / "e.npy", np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], np.float32))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        command = [
            sys.executable,
            "-m",
            "recallkit",
            "evaluate",
            "--images",
            str(tmp_path / "imgs"),
            "--embeddings",
            str(tmp_path / "e.npy"),
            "--ks",
            "1",
            "--json",
            str(tmp_path / "r.json"),
        ]
        done = subprocess.run(command, stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"run file: {tmp_path / 'r.json'}\n"
    assert json.loads((tmp_path / "r.json").read_text())["metrics"] == {"recall@1": 1.0}


def test_running_out_of_memory_is_one_line(tmp_path, capsys, monkeypatch):
    import numpy as np

    from recallkit.protocols import image_text

    np.save(tmp_path / "sim.npy", np.eye(2, dtype=np.float32))
    np.save(tmp_path / "ci.npy", np.arange(2))
    argv = ["image-text", "--caption-image", tmp_path / "ci.npy", "--scores", tmp_path / "sim.npy"]

    def too_big(*args, **kwargs):
        raise MemoryError("Unable to allocate 74.5 GiB for an array with shape (100000, 100000)")

    monkeypatch.setattr(image_text, "image_text_recall_from_scores", too_big)
    assert _main(capsys, *argv) == (
        2,
        "",
        (
            "recallkit image-text: error: Not enough memory: Unable to allocate 74.5 GiB for an "
            "array with shape (100000, 100000).\n"
        ),
    )

    class OutOfMemoryError(RuntimeError):  # torch.OutOfMemoryError's name and base
        pass

    def out_of_device_memory(*args, **kwargs):
        raise OutOfMemoryError("CUDA out of memory.\nTried to allocate 20.00 GiB")

    monkeypatch.setattr(image_text, "image_text_recall_from_scores", out_of_device_memory)
    assert _main(capsys, *argv) == (
        2,
        "",
        (
            "recallkit image-text: error: Not enough memory: CUDA out of memory. Tried to allocate "
            "20.00 GiB.\n"
        ),
    )

    def a_bug(*args, **kwargs):
        raise RuntimeError("an internal error")

    monkeypatch.setattr(image_text, "image_text_recall_from_scores", a_bug)
    with pytest.raises(RuntimeError, match="an internal error"):  # a fault shows its traceback
        _main(capsys, *argv)
