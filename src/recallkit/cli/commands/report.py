"""``recallkit report``: tables (Markdown, LaTeX, CSV, JSON) and the HTML report of runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from recallkit.cli.commands._args import (
    RUNS_PARAMETERS,
    add_command,
    add_names,
    add_quiet,
    add_statistics,
    bounded_int,
    check_output_file,
    check_output_folder,
    metric_names,
    statistics,
    write_error,
)
from recallkit.cli.errors import UsageError
from recallkit.runfiles._atomic import atomic_write

#: The formats, and the file each takes in --out-dir (recallkit.reports.output.FORMATS).
FORMATS = ("markdown", "latex", "csv", "json", "html")


#: The line of ``recallkit report`` in ``recallkit --help``.
HELP = "tables (Markdown, LaTeX, CSV, JSON) and a self-contained HTML report of runs"
#: The paragraph that opens ``recallkit report --help``.
DESCRIPTION = """\
Report one or more runs (recallkit evaluate --json): a runs x metrics table as Markdown, LaTeX
(booktabs) or CSV, with the best value of each column in bold (by the metric's direction) and
superscript letters naming the runs a run is significantly better than; the flat JSON {run:
{metric: value}}; or one HTML file that opens offline, with the metrics, their intervals and tie
bounds, the differences, recall@K curves, a sortable per-class table, the failures and the
definitions. Without -o or --out-dir the JSON (or the one --format asked) goes to stdout. A run is
named by its tag, else its file's stem (--name to choose).
"""
#: The examples that close ``recallkit report --help``.
EXAMPLES = """\
examples:
  recallkit report a.json b.json                      # {run: {metric: value}}
  recallkit report a.json b.json --format markdown    # the table on stdout
  recallkit report a.json b.json -o table.tex report.html --intervals pm
  recallkit report a.json b.json c.json --out-dir results/   # every format"""


def register(subparsers: Any) -> None:
    """Add the ``report`` sub-command."""
    p = add_command(subparsers, "report", HELP, DESCRIPTION, EXAMPLES)
    p.add_argument("runs", nargs="+", metavar="RUN.json", help="run files")
    p.add_argument(
        "--format",
        nargs="+",
        choices=FORMATS,
        metavar="FORMAT",
        help="markdown, latex, csv, json or html (default: json on stdout, the files' "
        "extensions with -o, every format with --out-dir)",
    )
    p.add_argument(
        "-o",
        "--out",
        nargs="+",
        metavar="FILE",
        help="write to these files, each in the format of its extension (.md, .tex, .csv, "
        ".json, .html)",
    )
    p.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write each format into DIR: table.md, table.tex, table.csv, table.json, report.html",
    )
    add_names(p)
    p.add_argument(
        "--metrics",
        nargs="+",
        metavar="METRIC",
        help="the columns (default: every metric of the runs)",
    )
    p.add_argument(
        "--intervals",
        choices=("none", "ci", "pm"),
        default="none",
        help="in the tables, each value's bootstrap interval as [low, high] (ci), as its "
        "half-width (pm, ±), or not (none, the default); the HTML report always shows them",
    )
    p.add_argument(
        "--digits",
        type=bounded_int("--digits", 0, 12, "a number of decimals from 0 to 12"),
        default=4,
        help="decimals in the Markdown and LaTeX tables (default 4)",
    )
    p.add_argument(
        "--no-tests",
        action="store_true",
        help="compare no runs: no significance letters, no differences",
    )
    add_statistics(p)
    p.add_argument(
        "--images",
        nargs="+",
        metavar="DIR",
        help="folders the queries' paths are relative to, for the HTML report's thumbnails; "
        "images are read only from these folders and each run file's own (default: the image "
        "folder the run file records, when it lies in the run file's folder)",
    )
    add_quiet(p)
    p.set_defaults(func=main, parameters=RUNS_PARAMETERS)


def _outputs(args: argparse.Namespace) -> list[tuple[str, Path | None]]:
    """``(format, file)`` for each output asked; ``None`` for stdout."""
    from recallkit.reports.output import FORMATS as FILES
    from recallkit.reports.output import format_of

    if args.out and args.out_dir:
        raise UsageError("Give -o FILE... or --out-dir DIR, not both.")
    if args.out_dir:
        check_output_folder(args.out_dir, "--out-dir")
        formats = list(dict.fromkeys(args.format or FORMATS))
        return [(f, Path(args.out_dir) / FILES[f]) for f in formats]
    if args.out:
        for path in args.out:
            check_output_file(path, "--out")
        if args.format:
            if len(args.format) != len(args.out):
                raise UsageError(
                    "With -o, each file's format is its extension; --format, if given, names "
                    f"one format per file. Got {len(args.format)} format(s) for "
                    f"{len(args.out)} file(s)."
                )
            return [(f, Path(p)) for f, p in zip(args.format, args.out, strict=True)]
        try:
            return [(format_of(p), Path(p)) for p in args.out]
        except ValueError as error:
            raise UsageError(
                str(error).replace("The report file", "--out") + " Or name it with --format."
            ) from None
    formats = args.format or ["json"]
    if len(formats) > 1:
        raise UsageError(
            "Several formats go to files: give one -o FILE per format, or --out-dir DIR."
        )
    return [(formats[0], None)]


def main(args: argparse.Namespace) -> int:
    """Run ``recallkit report``; return the exit status."""
    options = statistics(args)
    outputs = _outputs(args)
    formats = {f for f, _ in outputs}
    from recallkit.reports.data import summarize
    from recallkit.reports.output import render

    tests = False if args.no_tests or formats <= {"json"} else None
    summary = summarize(
        args.runs,
        names=args.name,
        metrics=metric_names(args.metrics),
        with_intervals="html" in formats or args.intervals != "none",
        tests=tests,
        **options,
    )
    for note in summary.notes:
        print(f"note: {note}", file=sys.stderr)
    texts = []
    for format, path in outputs:
        text = render(
            summary,
            format,
            intervals=args.intervals,
            digits=args.digits,
            image_root=args.images or (),
            log=lambda line: print(f"note: {line}", file=sys.stderr),
        )
        texts.append((format, path, text))
    for format, path, text in texts:
        if path is None:
            sys.stdout.write(text)
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(path, "w") as handle:
                handle.write(text)
        except OSError as error:
            raise write_error(path, error) from None
        print(f"{format}: {path}", file=sys.stderr)
    return 0
