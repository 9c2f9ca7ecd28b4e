"""The ``recallkit`` command line: one sub-command per module of :mod:`recallkit.commands`.

Each module in ``recallkit/commands/`` exposes ``register(subparsers)``, which adds its
sub-command and sets ``func`` (``args -> int`` exit status) as the parser default. User errors are
raised as :class:`recallkit.errors.UsageError` and printed as one line, never as a traceback,
with exit status 2; so is an ``OSError`` from the system (a full disk, a read-only folder).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from recallkit import commands
from recallkit.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every sub-command registered, in module-name order."""
    parser = argparse.ArgumentParser(
        prog="recallkit",
        description="Exact, reproducible recall@K and retrieval metrics.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 success, 2 user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as error:
        print(f"recallkit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as error:
        print(f"recallkit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a read-only folder: the system's reason, one line
        print(f"recallkit {args.command}: error: {os_error_text(error)}", file=sys.stderr)
        return 2


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
