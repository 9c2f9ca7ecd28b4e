"""``recallkit demo``: train a small encoder on scikit-learn's digits and track recall@K."""

from __future__ import annotations

import argparse
from typing import Any

from recallkit._loading import require
from recallkit.cli.commands._args import (
    PARAMETERS,
    add_command,
    add_quiet,
    check_output_folder,
    positive_int,
    seed,
)

#: The line of ``recallkit demo`` in ``recallkit --help``.
HELP = "the whole path on real images that ship with scikit-learn (no download)"
#: The paragraph that opens ``recallkit demo --help``.
DESCRIPTION = """\
Write scikit-learn's 1,797 handwritten digits as an image folder, train a small CNN with
pytorch-metric-learning's MultiSimilarityLoss on digits 0-4 and evaluate digits 5-9 against
themselves (leave-one-out) after every epoch: prints each report and writes runs.jsonl,
epoch-N.json, recall.png and grid.png into the --out folder (with --keep-images also digits/ and
epoch-N.npy).
"""
#: The examples that close ``recallkit demo --help``.
EXAMPLES = """\
example:
  recallkit demo --out recallkit-demo --epochs 5"""


def register(subparsers: Any) -> None:
    """Add the ``demo`` sub-command."""
    p = add_command(subparsers, "demo", HELP, DESCRIPTION, EXAMPLES)
    p.add_argument("--out", default="recallkit-demo", metavar="DIR", help="output folder")
    p.add_argument(
        "--epochs",
        type=positive_int("--epochs"),
        default=5,
        metavar="N",
        help="training epochs, one run each in the history (default 5)",
    )
    p.add_argument("--seed", type=seed(), default=0, help="random seed (default 0)")
    p.add_argument(
        "--fast", action="store_true", help="one epoch on 40 images per class (for tests)"
    )
    p.add_argument(
        "--keep-images",
        action="store_true",
        help="write the digits under DIR/digits (and each epoch's embeddings as DIR/epoch-N.npy) "
        "instead of a temporary folder",
    )
    add_quiet(p)
    p.set_defaults(
        func=main, check=check, parameters={**PARAMETERS, "epochs": "--epochs", "out": "--out"}
    )


def check(args: argparse.Namespace) -> None:
    """The extra and the output folder, before the engine's libraries are imported."""
    # scikit-learn's digits, Pillow, matplotlib (the 'demo' extra): one line, nothing written.
    require("recallkit demo", "sklearn", "PIL", "matplotlib", extra="demo")
    check_output_folder(args.out, "--out")


def main(args: argparse.Namespace) -> int:
    """Run ``recallkit demo`` (its arguments [`check`][check]ed); return the exit status."""
    from recallkit.runner.digits_demo import run_demo

    run_demo(
        args.out, epochs=args.epochs, fast=args.fast, seed=args.seed, keep_images=args.keep_images
    )
    return 0
