"""``recallkit compare``: two runs side by side with a paired bootstrap interval per K."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from recallkit._atomic import atomic_write
from recallkit.commands._args import (
    PARAMETERS,
    add_quiet,
    check_output_file,
    parse_ks,
    positive_int,
    seed,
    unchanged_inputs,
)
from recallkit.errors import UsageError
from recallkit.runner.defaults import DEFAULT_RESAMPLES, DEFAULT_SEED, MAX_RESAMPLES


def register(subparsers: Any) -> None:
    """Add the ``compare`` sub-command."""
    p = subparsers.add_parser(
        "compare",
        help="compare two runs query by query (paired bootstrap interval per K)",
        description=(
            "Print the recall@K of two runs (recallkit evaluate --json) side by side, their "
            "difference a - b per K and its paired bootstrap confidence interval over the "
            "queries (fixed seed); the difference is significant when the interval excludes 0. "
            "Queries are paired by id and image path, so manifest ids shared by several images "
            "pair image by image; both runs must hold the same queries, computed under the "
            "same definitions (similarity, tie rule, exclusions: the 'definitions' record of "
            "the run files)."
        ),
        epilog="example:\n  recallkit compare finetuned.json baseline.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("a", metavar="A.json", help="run file of system a")
    p.add_argument("b", metavar="B.json", help="run file of system b")
    p.add_argument("--ks", nargs="+", metavar="K", help="K values (default: those of both runs)")
    p.add_argument(
        "--resamples",
        type=positive_int("--resamples"),
        default=DEFAULT_RESAMPLES,
        metavar="N",
        help=f"bootstrap resamples (default {DEFAULT_RESAMPLES}, at most {MAX_RESAMPLES}; "
        "drawn in batches, so memory does not grow with N)",
    )
    p.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    p.add_argument("--seed", type=seed(), default=DEFAULT_SEED, help="bootstrap seed (default 0)")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    add_quiet(p)
    p.set_defaults(func=main, parameters=COMPARE_PARAMETERS)


#: The runner's parameters -> the options of ``recallkit compare``.
COMPARE_PARAMETERS = {
    **PARAMETERS,
    "n_resamples": "--resamples",
    "confidence": "--confidence",
    "a": "A.json",
    "b": "B.json",
}


def main(args: argparse.Namespace) -> int:
    """Run ``recallkit compare``; return the exit status."""
    from recallkit.runner.bootstrap import (
        compare_records,
        comparison_record,
        format_comparison,
        load_run,
    )

    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence must be between 0 and 1. Got {args.confidence}.")
    if args.resamples > MAX_RESAMPLES:
        raise UsageError(
            f"--resamples takes at most {MAX_RESAMPLES} (about 20 s per K; the interval's own "
            f"sampling error is then far below its four decimals). Got {args.resamples}."
        )
    check_output_file(args.json, "--json")
    a, b = load_run(args.a), load_run(args.b)
    names = (Path(args.a).name, Path(args.b).name)
    if names[0] == names[1]:
        names = (str(args.a), str(args.b))
    comparison = compare_records(
        a,
        b,
        ks=parse_ks(args.ks),
        names=names,
        n_resamples=args.resamples,
        confidence=args.confidence,
        seed=args.seed,
    )
    unchanged_inputs("compared")
    for note in comparison.notes:
        print(f"note: {note}", file=sys.stderr)
    print(format_comparison(comparison))
    if args.json is not None:
        text = json.dumps(comparison_record(comparison), indent=1) + "\n"
        try:
            with atomic_write(args.json, "w") as handle:
                handle.write(text)
        except OSError as error:
            raise UsageError(
                f"Cannot write the comparison file '{args.json}': {error.strerror or error}."
            ) from None
        print(f"comparison file: {args.json}", file=sys.stderr)
    return 0
