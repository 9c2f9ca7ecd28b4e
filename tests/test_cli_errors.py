"""Errors of the command line: library messages said with options, never Python keywords.

The library's messages name Python parameters ("The 'images' parameter of cirr_recall ...",
"pass check_counts=False"); :mod:`recallkit.errors` says them in the command line's words.
One test reads the source of every module the command line can reach and checks that no
keyword hint in a message escapes that translation; the others pin the translation itself.
"""

from __future__ import annotations

import ast
import json
import pickle
import re
from pathlib import Path

import pytest

import recallkit
from recallkit import _checks
from recallkit.errors import KEYWORD_HINTS, UsageError, error_text, translate

PACKAGE = Path(recallkit.__file__).parent

# A keyword hint: ``name=value`` with a Python value, or ``name=`` before an f-string field.
HINT = re.compile(r"\b([a-z_][a-z0-9_]*)=(True|False|None|'[^']*'|\"[^\"]*\"|\d+|\{\}|$)")

# Hints in messages that the command line cannot meet, each with the reason.
UNREACHABLE = {
    "check_images=True": "the command line leaves load_benchmark's check_images at True",
    "check_images=False": "the command line leaves load_benchmark's check_images at True",
    "crop=True": "the command line never asks load_benchmark for cropped images",
    "name={}": "only with crop=True, which the command line never passes",
    "gallery_split={}": "Protocol's own consistency check; its protocols are fixed tables",
    "query_in_reference=False": "the runner excludes self-matches by ids and refuses one array "
    "as both sides without them; it never leaves query_in_reference unset or passes True",
    "lone_queries='error'": "the command line keeps lone_queries='skip' and counts lone queries",
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
    """Every ``recallkit`` module named by an import in ``path``, at any depth of the code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if _module_file(name) is not None}


def reachable_modules() -> dict[str, Path]:
    """The modules the command line can load: its own and every one they import, recursively.

    The command modules are imported by name (``importlib``), so all of them are the start.
    """
    start = ["recallkit.cli", "recallkit.__main__", "recallkit.errors"]
    start += [f"recallkit.commands.{p.stem}" for p in (PACKAGE / "commands").glob("*.py")]
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
        "recallkit.commands.protocols",
        "recallkit.commands.evaluate",
        "recallkit.io",
        "recallkit._checks",
        "recallkit.protocols.image_text",
        "recallkit.datasets._files",
        "recallkit.runner.encode",
        "recallkit.runner.sources",
    ):
        assert name in modules, name


def test_the_walk_finds_the_hints_it_is_about():
    """The reported hints are in the walked messages: the check below can fail."""
    found = {
        hint
        for path in reachable_modules().values()
        for _, text in messages(path)
        for hint in _hints(text)
    }
    assert {"check_counts=False", "allow_partial=True", "skip_bad=True"} <= found


def test_no_message_the_command_line_can_print_names_a_python_keyword():
    escaped = []
    seen = set()
    for name, path in sorted(reachable_modules().items()):
        for line, text in messages(path):
            for hint in _hints(translate(text, full_stop=False)):
                seen.add(hint)
                if hint not in UNREACHABLE:
                    escaped.append(f"{name}:{line}: {hint} in {text!r}")
    assert escaped == []
    # Each exception above still exists: the list does not outlive its reasons.
    assert set(UNREACHABLE) <= seen


def test_every_keyword_hint_becomes_an_option_or_words():
    for hint, words in KEYWORD_HINTS.items():
        assert "=" not in words and words
        assert translate(f"pass {hint} to go on") == f"pass {words} to go on."


@pytest.mark.parametrize(
    ("text", "parameters", "line"),
    [
        (
            # protocols/image_text.py, with the Karpathy split's counts.
            (
                "dataset_coco.json: the Karpathy 'test' split of coco has 9 images and 13 "
                "captions; expected 5000 and 25010 (pass check_counts=False to evaluate partial "
                "data)"
            ),
            {},
            (
                "dataset_coco.json: the Karpathy 'test' split of coco has 9 images and 13 "
                "captions; expected 5000 and 25010 (pass --no-count-check to evaluate partial "
                "data)."
            ),
        ),
        (
            # datasets/_files.py, the size check.
            (
                "/d/images.txt gives the CUB-200-2011 test split 4 images of 2 classes; the "
                "benchmark has 5,924 images of 100 classes. Pass allow_partial=True to load a "
                "partial or modified copy (its results are not comparable with published "
                "numbers)."
            ),
            {},
            (
                "/d/images.txt gives the CUB-200-2011 test split 4 images of 2 classes; the "
                "benchmark has 5,924 images of 100 classes. Pass --allow-partial to load a "
                "partial or modified copy (its results are not comparable with published "
                "numbers)."
            ),
        ),
        (
            # runner/encode.py: the flag was already there, the keyword goes.
            (
                "1 gallery image could not be read: a.png (truncated). Fix or remove it, or pass "
                "--skip-bad (skip_bad=True) to continue without it."
            ),
            {},
            (
                "1 gallery image could not be read: a.png (truncated). Fix or remove it, or pass "
                "--skip-bad to continue without it."
            ),
        ),
        (
            # datasets/_files.py: the images check; check_images has no option, so it goes.
            (
                "3 of the 5 images listed in /d/images.txt are not on disk (e.g. /d/a.jpg). None "
                "of them exists: is 'root' the folder that holds the images? Pass "
                "skip_missing=True to leave them out, or check_images=False to skip the check."
            ),
            {"root": "--root"},
            (
                "3 of the 5 images listed in /d/images.txt are not on disk (e.g. /d/a.jpg). None "
                "of them exists: is --root the folder that holds the images? Pass --skip-bad to "
                "leave them out."
            ),
        ),
        (
            # protocols: a parameter with an option, and the data argument in words.
            (
                "The 'images' parameter of cirr_recall must be one row per image of 'data' (30 "
                "rows). Got 12 rows."
            ),
            {"images": "--images", "data": "the CIRR split of --root"},
            (
                "--images must be one row per image of the CIRR split of --root (30 rows). Got 12 "
                "rows."
            ),
        ),
        (
            # a parameter no option supplies: plain words, capitalised at the start.
            "The 'query_labels' parameter of recall_at_k must be of length 3. Got 4.",
            {},
            "The query labels must be of length 3. Got 4.",
        ),
        (
            # a library message wrapped by the runner, which ended it with its own full stop.
            (
                "Cannot load benchmark 'cub' from 'x': The 'root' parameter of load_cub must be an "
                "existing folder. Got '/w/x', which does not exist or is not a folder.."
            ),
            {"root": "--root"},
            (
                "Cannot load benchmark 'cub' from 'x': --root must be an existing folder. Got "
                "'/w/x', which does not exist or is not a folder."
            ),
        ),
        (
            # several lines (a torch message) become one; a quoted file name stays as it is.
            "The model 'images' raised RuntimeError:\n  shapes do not match\n",
            {"images": "--images"},
            "The model 'images' raised RuntimeError: shapes do not match.",
        ),
        (
            "non-zero rows under metric='cosine'; a zero vector in row 2?",
            {},
            "non-zero rows under --metric cosine; a zero vector in row 2?",
        ),
    ],
)
def test_translate(text, parameters, line):
    assert translate(text, parameters) == line


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
    assert translate(f"The weights file 'w.pt' cannot be read: {TORCH_REFUSAL}") == (
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
    assert translate(f"The scores file 's.pt' cannot be read: {junk}") == (
        "The scores file 's.pt' cannot be read: only tensors, dicts and lists are read from a "
        "torch file, and this one holds something else (Unsupported operand 0)."
    )


def test_a_parameter_error_keeps_its_parts_and_its_message():
    error = _checks.fail("cirr_recall", "images", "one row per image (30 rows)", "12 rows")
    assert isinstance(error, _checks.ParameterError) and isinstance(error, ValueError)
    assert (error.func, error.name, error.requirement, error.got) == (
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
            sys.executable, "-m", "recallkit", "evaluate", "--images", str(tmp_path / "imgs"),
            "--embeddings", str(tmp_path / "e.npy"), "--ks", "1",
            "--json", str(tmp_path / "r.json"),
        ]  # fmt: skip
        done = subprocess.run(command, stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"run file: {tmp_path / 'r.json'}\n"
    assert json.loads((tmp_path / "r.json").read_text())["recall"] == {"recall@1": 1.0}


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
