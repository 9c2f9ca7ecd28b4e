"""The ``recallkit`` command line: the sub-commands of the modules in :mod:`recallkit.commands`.

Each module in ``recallkit/commands/`` exposes ``register(subparsers)``, which adds its
sub-commands and sets ``func`` (``args -> int`` exit status) as the parser default. Bad input is
a ``ValueError`` (the commands' :class:`recallkit.errors.UsageError`, the runner's
:class:`recallkit.runner.RunnerError`, the library's own) and is printed as one line, never as a
traceback, with exit status 2; so is an ``OSError`` from the system (a full disk, a read-only
folder). A command run with ``--quiet`` prints nothing but that error line: its report,
progress, notes and warnings are dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
import warnings
from collections.abc import Iterator, Sequence

# (command, module of recallkit.commands that registers it, one-line help), in the order of
# ``recallkit --help``: the image runner first, the benchmark protocols after. The help line is
# the one the module registers (a test keeps them equal); it is written here too so that
# ``recallkit --help`` imports no command module (and so neither torch nor the image pipeline).
COMMANDS = (
    ("evaluate", "evaluate", "recall@K of an encoder on query and gallery images"),
    ("compare", "compare", "compare two runs query by query (paired bootstrap interval per K)"),
    ("plot", "plot", "draw recall@K across the runs of a history file"),
    (
        "demo",
        "demo",
        "the whole path on real images that ship with scikit-learn (no download)",
    ),
    ("cirr", "cir", "CIRR recall@K, recall_subset@K, avg; test-server submission files"),
    (
        "circo",
        "cir",
        "CIRCO mAP@K, recall@K and mAP@10 per semantic aspect; test-server submission file",
    ),
    ("fashioniq", "cir", "FashionIQ recall@10/50 per category and their means (validation)"),
    ("genecis", "cir", "GeneCIS recall@1/2/3 per task and the average recall@1"),
    ("image-text", "image_text", "image-text retrieval recall@K (COCO 5k, Flickr30k 1k)"),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Return the argument parser.

    With no ``command``, every sub-command is registered in full. With one, only the module of
    that sub-command is imported and registered; the others are listed by name and help line.
    """
    parser = argparse.ArgumentParser(
        prog="recallkit",
        description="Exact, reproducible recall@K and retrieval metrics.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = {module for name, module, _ in COMMANDS if command is None or name == command}
    registered: set[str] = set()
    for name, module, help_line in COMMANDS:
        if module in wanted and module not in registered:
            importlib.import_module(f"recallkit.commands.{module}").register(subparsers)
            registered.add(module)
        if module not in wanted:
            subparsers.add_parser(name, help=help_line)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (the first word that is not an option), if known."""
    for word in argv:
        if not word.startswith("-"):
            return word if any(word == name for name, _, _ in COMMANDS) else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 success, 2 user error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command(argv)
    if command is None:  # help, or a mistyped command: no module is needed to say so
        build_parser("").parse_args(argv)
        return 2
    args = build_parser(command).parse_args(argv)
    try:
        with _silenced(getattr(args, "quiet", False)):
            return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as error:  # UsageError, RunnerError, library errors
        print(f"recallkit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a read-only folder: the system's reason, one line
        print(f"recallkit {args.command}: error: {os_error_text(error)}", file=sys.stderr)
        return 2


@contextlib.contextmanager
def _silenced(quiet: bool) -> Iterator[None]:
    """With ``quiet``, drop what is printed inside (stdout, stderr and Python warnings).

    An error raised inside leaves the block before ``main`` prints it, so it still shows.
    """
    if not quiet:
        yield
        return
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        yield


def os_error_text(error: OSError) -> str:
    """One line for an ``OSError``: the system's reason and the file it concerns.

    >>> import errno
    >>> os_error_text(OSError(errno.ENOSPC, "No space left on device", "out.json"))
    "No space left on device: 'out.json'."
    """
    reason = error.strerror or str(error) or type(error).__name__
    if error.filename is not None:
        return f"{reason}: {str(error.filename)!r}."
    return f"{reason}."


if __name__ == "__main__":
    sys.exit(main())
