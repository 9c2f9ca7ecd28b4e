"""The command line's help: the order of the commands, help text on every option, a light start."""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys

import pytest

from recallkit import cli

ORDER = ["evaluate", "compare", "plot", "demo", "cirr", "circo", "fashioniq", "genecis",
         "image-text"]  # fmt: skip


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
        importlib.import_module(f"recallkit.commands.{module}").register(subparsers)
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
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit as exit:\n"
        "    code = exit.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'PIL')\n"
        "               or m.startswith(('recallkit.commands.', 'recallkit.runner')))\n"
        "print(code, heavy, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stderr.strip() == "0 []"
    listed = re.findall(r"^ {4}(\S+)", done.stdout, flags=re.M)  # a command, not a help line
    assert [name for name in listed if name in ORDER] == ORDER


def test_a_mistyped_command_is_one_usage_error(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["evalute"])
    assert exit.value.code == 2
    assert "invalid choice: 'evalute'" in capsys.readouterr().err
