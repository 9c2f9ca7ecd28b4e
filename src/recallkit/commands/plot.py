"""``recallkit plot``: recall@K against run tag from a history file."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from recallkit._extras import require
from recallkit.commands._args import PARAMETERS, add_quiet, check_output_file, parse_ks
from recallkit.errors import UsageError


def register(subparsers: Any) -> None:
    """Add the ``plot`` sub-command."""
    p = subparsers.add_parser(
        "plot",
        help="draw recall@K across the runs of a history file",
        description=(
            "Draw one line per recall@K over the runs of a history file (written by "
            "recallkit evaluate --history FILE --tag TAG), in file order, tags on the x axis. "
            "Runs computed under other definitions than the first run (similarity, tie rule, "
            "exclusions) are marked * and named in a note; runs that record none, ?."
        ),
        epilog="example:\n  recallkit plot runs.jsonl -o recall.png --ks 1 10",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("history", metavar="HISTORY", help="a .jsonl history file")
    p.add_argument("-o", "--out", required=True, metavar="FILE", help=".png, .svg or .pdf")
    p.add_argument("--ks", nargs="+", metavar="K", help="only these K (default: all)")
    p.add_argument("--title", help="the plot's title")
    add_quiet(p)
    p.set_defaults(func=main, parameters={**PARAMETERS, "title": "--title", "out": "--out"})


def main(args: argparse.Namespace) -> int:
    """Run ``recallkit plot``; return the exit status."""
    require("recallkit plot", "matplotlib", extra="plot")  # one line, nothing read or written
    from recallkit.runner.history_plot import plot_history

    check_output_file(args.out, "--out")
    try:
        out = plot_history(
            args.history,
            args.out,
            ks=parse_ks(args.ks),
            title=args.title,
            log=lambda note: print(f"note: {note}", file=sys.stderr),
        )
    except OSError as error:
        raise UsageError(
            f"Cannot write the plot '{args.out}': {error.strerror or error}."
        ) from None
    print(f"plot: {out}", file=sys.stderr)
    return 0
