"""``recallkit compare``: two or more runs, metric by metric, with intervals and paired tests."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from recallkit._loading import require
from recallkit.cli.commands._args import (
    RUNS_PARAMETERS,
    add_command,
    add_names,
    add_quiet,
    add_statistics,
    check_output_file,
    metric_names,
    statistics,
    unchanged_inputs,
    write_error,
)
from recallkit.cli.errors import UsageError
from recallkit.runfiles._atomic import atomic_write

#: The line of ``recallkit compare`` in ``recallkit --help``.
HELP = "compare two or more runs: every metric, intervals, paired tests"
#: The paragraph that opens ``recallkit compare --help``.
DESCRIPTION = """\
Compare two or more runs (recallkit evaluate --json) on the queries they share, metric by metric:
each run's value with its bootstrap interval, and for every pair (or each run against --baseline)
the difference, its paired bootstrap interval, the p-value of a paired test and the p-value
adjusted for the pairs of the metric; a pair is significant when its adjusted p-value is below
--alpha. Queries are paired by id and image path, in any order; the runs must hold the same queries
with the same labels, computed under the same definitions (similarity, tie rule, exclusions: the
'definitions' record of the run files). A run is named by its tag, else its file's stem (--name to
choose).
"""
#: The examples that close ``recallkit compare --help``.
EXAMPLES = """\
examples:
  recallkit compare finetuned.json baseline.json
  recallkit compare a.json b.json c.json --baseline a --metrics recall@1 MAP@R \\
      --json comparison.json --chart differences.svg"""


def register(subparsers: Any) -> None:
    """Add the ``compare`` sub-command."""
    p = add_command(subparsers, "compare", HELP, DESCRIPTION, EXAMPLES)
    p.add_argument("a", metavar="A.json", help="a run file")
    p.add_argument("b", metavar="B.json", help="another run file")
    p.add_argument("more", nargs="*", default=[], metavar="C.json", help="more run files")
    add_names(p)
    p.add_argument(
        "--metrics",
        nargs="+",
        metavar="METRIC",
        help="the metrics to compare (default: every metric all runs hold)",
    )
    add_statistics(p)
    p.add_argument(
        "--json",
        metavar="FILE",
        help="also write the comparison (values, intervals, differences, tests) as JSON",
    )
    p.add_argument(
        "--chart",
        metavar="FILE",
        help="also draw each metric's differences with their intervals (.svg, .png or .pdf)",
    )
    add_quiet(p)
    p.set_defaults(func=main, parameters=RUNS_PARAMETERS)


def main(args: argparse.Namespace) -> int:
    """Run ``recallkit compare``; return the exit status."""
    options = statistics(args)
    check_output_file(args.json, "--json")
    check_output_file(args.chart, "--chart")
    if args.chart is not None:
        from recallkit.reports.figures import FIGURE_FORMATS

        if not args.chart.lower().endswith(FIGURE_FORMATS):
            raise UsageError(
                f"--chart takes a file ending in {', '.join(FIGURE_FORMATS)}. Got '{args.chart}'."
            )
        require("recallkit compare --chart", "matplotlib", extra="plot")
    from recallkit.reports.data import summarize
    from recallkit.reports.tables import text

    paths = [args.a, args.b, *args.more]
    summary = summarize(
        paths,
        names=args.name,
        metrics=metric_names(args.metrics),
        tests=True,
        **options,
    )
    unchanged_inputs("compared")
    comparison = summary.comparison
    if comparison is None:  # summarize compares whenever it is given two runs or more
        raise UsageError("compare needs two or more runs that pair.")
    for note in summary.notes:
        print(f"note: {note}", file=sys.stderr)
    print(text(summary), end="")
    sys.stdout.flush()
    if args.json is not None:
        record = comparison.to_dict()
        record["files"] = {run.name: Path(run.path).name for run in summary.runs}
        try:
            with atomic_write(args.json, "w") as handle:
                handle.write(json.dumps(record, indent=1) + "\n")
        except OSError as error:
            raise write_error(args.json, error, "the comparison file") from None
        print(f"comparison file: {args.json}", file=sys.stderr)
    if args.chart is not None:
        from recallkit.reports.figures import difference_figure, save

        try:
            save(difference_figure(comparison), args.chart)
        except OSError as error:
            raise write_error(args.chart, error, "the chart") from None
        print(f"chart: {args.chart}", file=sys.stderr)
    return 0
