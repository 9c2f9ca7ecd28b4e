"""``recallkit plot``: metrics against run tag from a history file."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from recallkit._loading import require
from recallkit.cli.commands._args import (
    PARAMETERS,
    add_command,
    add_quiet,
    check_output_file,
    parse_ks,
    write_error,
)

#: How the runs are drawn (recallkit.runner.history_plot.KINDS).
KINDS = ("auto", "line", "points", "bars")


#: The line of ``recallkit plot`` in ``recallkit --help``.
HELP = "draw a metric across the runs of a history file"
#: The paragraph that opens ``recallkit plot --help``.
DESCRIPTION = """\
Draw metrics over the runs of a history file (written by recallkit evaluate --history FILE --tag
TAG), in file order, tags on the x axis: a line when the tags read as steps of one training
(epoch-1, epoch-2, ...; step_500; 3), bars when they name different models (--kind chooses). The
title and the axes name the metrics; lower-is-better metrics (MnR, MedR) get an axis of their own
that says so. Runs computed under other definitions than the first run (similarity, tie rule,
exclusions) are marked * and named in a note; runs that record none, ?.
"""
#: The examples that close ``recallkit plot --help``.
EXAMPLES = """\
examples:
  recallkit plot runs.jsonl -o recall.png --ks 1 10
  recallkit plot models.jsonl -o map.svg --metric MAP@R MnR --kind points"""


def register(subparsers: Any) -> None:
    """Add the ``plot`` sub-command."""
    p = add_command(subparsers, "plot", HELP, DESCRIPTION, EXAMPLES)
    p.add_argument("history", metavar="HISTORY", help="a .jsonl history file")
    p.add_argument("-o", "--out", required=True, metavar="FILE", help=".png, .svg or .pdf")
    p.add_argument(
        "--metric",
        nargs="+",
        metavar="METRIC",
        help="the metrics to draw, by name or alias (default: every metric of the history)",
    )
    p.add_argument("--ks", nargs="+", metavar="K", help="recall@K at these K (with --metric too)")
    p.add_argument(
        "--kind",
        choices=KINDS,
        default="auto",
        help="line (steps of one training), points or bars (different models), or auto "
        "(default: a line when the tags read as steps, else bars)",
    )
    p.add_argument("--title", help="the plot's title (default: the metrics and the runs)")
    add_quiet(p)
    p.set_defaults(
        func=main,
        parameters={**PARAMETERS, "title": "--title", "out": "--out", "metrics": "--metric"},
    )


def main(args: argparse.Namespace) -> int:
    """Run ``recallkit plot``; return the exit status."""
    require("recallkit plot", "matplotlib", extra="plot")  # one line, nothing read or written
    from recallkit.runner.history_plot import plot_history

    check_output_file(args.out, "--out")
    metrics = None
    if args.metric is not None:
        metrics = [part.strip() for m in args.metric for part in m.split(",") if part.strip()]
    try:
        out = plot_history(
            args.history,
            args.out,
            ks=parse_ks(args.ks),
            metrics=metrics,
            kind=args.kind,
            title=args.title,
            log=lambda note: print(f"note: {note}", file=sys.stderr),
        )
    except OSError as error:
        raise write_error(args.out, error, "the plot") from None
    print(f"plot: {out}", file=sys.stderr)
    return 0
