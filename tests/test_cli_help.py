"""The command line's help: the order of the commands, help text on every option, a light start."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import recallkit
from recallkit.cli import app as cli

ORDER = [
    "evaluate",
    "compare",
    "report",
    "plot",
    "demo",
    "cirr",
    "circo",
    "fashioniq",
    "genecis",
    "image-text",
]


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_the_runner_commands_come_first_then_the_protocols():
    for parser in (cli.build_parser(), cli.build_parser("")):
        assert [a.dest for a in _subcommands(parser)._choices_actions] == ORDER


@pytest.mark.parametrize("command", ORDER)
def test_every_option_has_help(command):
    parser = _subcommands(cli.build_parser())._name_parser_map[command]
    missing = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not a.help or not a.help.strip()
    ]
    assert missing == []


def test_the_listed_help_lines_are_those_the_modules_register():
    """cli.COMMANDS repeats each module's help line, so that ``--help`` imports no module."""
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    for module in dict.fromkeys(module for _, module, _ in cli.COMMANDS):
        importlib.import_module(f"recallkit.cli.commands.{module}").register(subparsers)
    registered = {a.dest: a.help for a in subparsers._choices_actions}
    assert registered == {name: help_line for name, _, help_line in cli.COMMANDS}


def test_one_command_is_registered_in_full_the_others_by_name():
    choices = _subcommands(cli.build_parser("plot"))._name_parser_map
    assert sorted(choices) == sorted(ORDER)
    assert choices["plot"].get_default("func") is not None
    assert choices["evaluate"].get_default("func") is None


def test_help_imports_no_command_module_nor_torch():
    script = (
        "import sys\n"
        "from recallkit.cli import main\n"
        "code = main(['--help'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'PIL')\n"
        "               or m.startswith(('recallkit.cli.commands.', 'recallkit.runner')))\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stderr.strip() == "0 []"
    listed = re.findall(r"^ {4}(\S+)", done.stdout, flags=re.M)  # a command, not a help line
    assert [name for name in listed if name in ORDER] == ORDER


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_recallkit_alone_prints_the_help(capsys):
    code, out, err = _run(capsys)
    assert (code, err) == (0, "")
    assert out.startswith("usage: recallkit [-h] [--version] COMMAND ...\n")
    assert _run(capsys, "--help") == (0, out, "")


def test_the_help_lists_the_environment_variables(capsys):
    _, out, _ = _run(capsys, "--help")
    environment = out.split("\nenvironment:\n", 1)[1]
    for variable in ("NUMBA_CACHE_DIR", "RECALLKIT_COLD_START", "RECALLKIT_CACHE"):
        assert f"\n  {variable} " in f"\n{environment}"
    assert max(map(len, out.splitlines())) <= 100


def test_version():
    assert recallkit.__version__ == metadata.version("recallkit")
    done = subprocess.run(
        [sys.executable, "-m", "recallkit", "--version"], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"recallkit {recallkit.__version__}\n",
        "",
    )


ALL = "evaluate, compare, report, plot, demo, cirr, circo, fashioniq, genecis, image-text"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["evalute"],
            (
                f"recallkit: error: unknown command 'evalute' (choose from {ALL}); "
                "did you mean evaluate?"
            ),
        ),
        (["frobnicate"], f"recallkit: error: unknown command 'frobnicate' (choose from {ALL})"),
        (
            ["--verison"],
            "recallkit: error: unrecognized arguments: --verison (did you mean --version?)",
        ),
        (
            ["evaluate", "--imgaes", "x"],
            (
                "recallkit evaluate: error: unrecognized arguments: --imgaes x "
                "(did you mean --images?)"
            ),
        ),
        (
            ["evaluate", "--imgaes=x", "--qurey", "y"],
            (
                "recallkit evaluate: error: unrecognized arguments: --imgaes=x --qurey y "
                "(--imgaes: did you mean --images?; --qurey: did you mean --query?)"
            ),
        ),
        (
            ["evaluate", "--metric", "cos"],
            (
                "recallkit evaluate: error: --metric: invalid choice 'cos' (choose from cosine, "
                "dot, euclidean); did you mean cosine?"
            ),
        ),
        (
            ["evaluate", "--metric", "euc"],
            (
                "recallkit evaluate: error: --metric: invalid choice 'euc' (choose from cosine, "
                "dot, euclidean); did you mean euclidean?"
            ),
        ),
        (
            ["evaluate", "--metric", "hamming"],
            (
                "recallkit evaluate: error: --metric: invalid choice 'hamming' (choose from "
                "cosine, dot, euclidean)"
            ),
        ),
        (
            ["evaluate", "--head", "dorp"],
            (
                "recallkit evaluate: error: --head: invalid choice 'dorp' (choose from drop, "
                "keep); did you mean drop?"
            ),
        ),
        (
            ["demo", "--epochs", "0"],
            "recallkit demo: error: --epochs takes a positive integer. Got '0'.",
        ),
        (
            ["demo", "--seed", "-4"],
            "recallkit demo: error: --seed takes a seed, an integer from 0 to 2**63 - 1. Got '-4'.",
        ),
        (
            ["compare", "a.json", "b.json", "--seed", "1" + "0" * 30],
            (
                "recallkit compare: error: --seed takes a seed, an integer from 0 to 2**63 - 1. "
                f"Got '1{'0' * 30}'."
            ),
        ),
        (
            ["evaluate", "--memory-budget", "lots"],
            (
                "recallkit evaluate: error: --memory-budget takes a whole number of bytes, or one "
                "with a unit (512MiB, 8GiB: powers of 1024; 500MB, 8GB: powers of 1000). "
                "Got 'lots'."
            ),
        ),
        (
            ["cirr", "--memory-budget", "0"],
            (
                "recallkit cirr: error: --memory-budget takes a whole number of bytes, or one "
                "with a unit (512MiB, 8GiB: powers of 1024; 500MB, 8GB: powers of 1000). "
                "Got '0'."
            ),
        ),
        (
            ["evaluate", "--batch-size", "0"],
            "recallkit evaluate: error: --batch-size takes a positive integer. Got '0'.",
        ),
        (
            ["evaluate", "--resize", "-3"],
            (
                "recallkit evaluate: error: --resize takes a size in pixels from 0 (off) to 65536. "
                "Got '-3'."
            ),
        ),
        (
            ["evaluate", "--crop", "1" + "0" * 20],
            (
                "recallkit evaluate: error: --crop takes a size in pixels from 0 (off) to 65536. "
                f"Got '1{'0' * 20}'."
            ),
        ),
        (
            ["evaluate", "--worst", "many"],
            "recallkit evaluate: error: --worst takes an integer. Got 'many'.",
        ),
        (
            ["compare", "a.json", "b.json", "--confidence", "high"],
            "recallkit compare: error: --confidence takes a number. Got 'high'.",
        ),
        (
            ["evaluate", "--mean", "1", "2"],
            "recallkit evaluate: error: --mean: expected 3 arguments",
        ),
        (
            # options are spelt out: a prefix is no abbreviation
            ["evaluate", "--embedding", "x"],
            (
                "recallkit evaluate: error: unrecognized arguments: --embedding x (did you mean "
                "--embeddings?)"
            ),
        ),
        (
            ["evaluate", "--k", "1"],
            "recallkit evaluate: error: unrecognized arguments: --k 1 (did you mean --ks?)",
        ),
        (
            ["compare", "a.json"],
            "recallkit compare: error: the following arguments are required: B.json",
        ),
        (
            ["plot", "h.jsonl"],
            "recallkit plot: error: the following arguments are required: -o/--out",
        ),
        (["cirr"], "recallkit cirr: error: the following arguments are required: --root"),
        (
            ["circo"],
            "recallkit circo: error: the following arguments are required: --annotations",
        ),
        (
            ["image-text"],
            (
                "recallkit image-text: error: one of the arguments --karpathy --caption-image is "
                "required"
            ),
        ),
        (
            ["image-text", "--karpathy", "k.json", "--caption-image", "c.npy"],
            ("recallkit image-text: error: --caption-image: not allowed with argument --karpathy"),
        ),
        (
            ["image-text", "--karpathy", "k.json", "--captions-per-image", "0"],
            "recallkit image-text: error: --captions-per-image takes a positive integer. Got '0'.",
        ),
        (
            ["image-text", "--karpathy", "k.json", "--split", "tset"],
            (
                "recallkit image-text: error: --split: invalid choice 'tset' (choose from test, "
                "val, train, restval); did you mean test?"
            ),
        ),
        (
            ["cirr", "--root", "r", "--target", "sof"],
            (
                "recallkit cirr: error: --target: invalid choice 'sof' (choose from hard, soft); "
                "did you mean soft?"
            ),
        ),
        (
            ["circo", "--annotations", "a", "--divisor", "min"],
            (
                "recallkit circo: error: --divisor: invalid choice 'min' (choose from min_k_r, r); "
                "did you mean min_k_r?"
            ),
        ),
        (
            ["genecis", "--root", "g", "--ties", "optimistic"],
            (
                "recallkit genecis: error: --ties: invalid choice 'optimistic' (choose from "
                "pessimistic, official); did you mean pessimistic?"
            ),
        ),
        (
            ["fashioniq", "--root", "f", "--category", "dress", "q.npy"],
            "recallkit fashioniq: error: --category: expected 3 arguments",
        ),
        (
            ["genecis", "--root", "g", "--ks", "one"],
            "recallkit genecis: error: --ks takes an integer. Got 'one'.",
        ),
    ],
)
def test_argparse_errors_are_one_line(capsys, argv, line):
    """No usage block: the one error line, exit status 2, and "did you mean" when one is close."""
    assert _run(capsys, *argv) == (2, "", line + "\n")


@pytest.mark.parametrize("command", ORDER)
def test_every_command_refuses_an_unknown_option_in_one_line(capsys, command):
    # Named even when a required argument is missing too: the misspelling is the likelier cause.
    code, out, err = _run(capsys, command, "--no-such-option")
    line = f"recallkit {command}: error: unrecognized arguments: --no-such-option\n"
    assert (code, out, err) == (2, "", line)


def test_a_misspelt_required_option_is_named_with_its_correction(capsys):
    assert _run(capsys, "cirr", "--rot", "CIRR", "--scores", "s.npy") == (
        2,
        "",
        "recallkit cirr: error: unrecognized arguments: --rot (did you mean --root?)\n",
    )


@pytest.mark.parametrize(
    ("word", "candidates", "hint"),
    [
        ("--imgaes", ["--images", "--query", "--gallery"], "; did you mean --images?"),
        ("cos", ["cosine", "dot", "euclidean"], "; did you mean cosine?"),
        ("euc", ["cosine", "dot", "euclidean"], "; did you mean euclidean?"),  # a prefix
        ("e", ["evaluate", "euclidean"], ""),  # a prefix of two: no guess
        ("zzz", ["cosine", "dot", "euclidean"], ""),
        ("--x", ["--xy", "--ab"], "; did you mean --xy?"),  # dashes are not counted as alike
    ],
)
def test_did_you_mean(word, candidates, hint):
    assert cli.did_you_mean(word, candidates) == hint


def test_the_error_lines_shown_in_the_guide_are_current(capsys):
    """docs/cli.md shows mistyped commands and their error lines; each is run here."""
    guide = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    block = guide.split('not-output="error lines of mistyped commands')[1].split("```text\n")[1]
    lines = block.split("```")[0].splitlines()
    pairs = list(zip(lines[::2], lines[1::2], strict=True))
    assert len(pairs) == 5
    for command, line in pairs:
        assert command.startswith("$ recallkit ")
        argv = shlex.split(command[len("$ recallkit ") :])
        assert _run(capsys, *argv) == (2, "", line + "\n")
