"""Small helpers shared by the sub-commands: option types, output checks, warnings, Ctrl-C."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recallkit.cli.errors import UsageError, warning_text
from recallkit.options import _positive_flag as positive_flag

#: The largest image side ``--resize`` and ``--crop`` take, far above any model's input size.
MAX_PIXELS = 2**16
#: Seeds are taken by numpy and torch alike: non-negative and below 2**63.
MAX_SEED = 2**63 - 1


def parse_ks(values: Sequence[str] | None, option: str = "--ks") -> tuple[int, ...] | None:
    """``["1", "5,10"]`` -> ``(1, 5, 10)``; a UsageError for anything but distinct positive
    integers (each K names one value: a repeat would be dropped).

    >>> parse_ks(["1", "5,10"])
    (1, 5, 10)
    """
    if values is None:
        return None
    out: list[int] = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if not part:
                continue
            if not (part.isdigit() and part.isascii()) or int(part) <= 0:
                raise UsageError(
                    f"{option} takes positive integers, like {option} 1 5 10. Got {part!r}."
                )
            if int(part) in out:
                raise UsageError(f"{option} takes each K once. Got {part} twice.")
            out.append(int(part))
    if not out:
        raise UsageError(f"{option} needs at least one K.")
    return tuple(out)


@contextmanager
def warnings_as_lines(command: str, parameters: Any = None) -> Iterator[None]:
    """Print each Python warning raised inside as one line ``recallkit CMD: warning: ...``.

    The text is said in the command line's words
    ([`recallkit.cli.errors.warning_text`][recallkit.cli.errors.warning_text]), library parameters
    by ``parameters`` (their options).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen: set[str] = set()
            for w in caught:
                text = warning_text(w.message, parameters)
                if text not in seen:
                    seen.add(text)
                    print(f"recallkit {command}: warning: {text}", file=sys.stderr)


def bounded_int(option: str, low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse ``type`` for integers in ``[low, high]``; ``what`` says which, in words.

    >>> bounded_int("--seed", 0, 9, "a seed from 0 to 9")("7")
    7
    >>> bounded_int("--seed", 0, 9, "a seed from 0 to 9")("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: --seed takes a seed from 0 to 9. Got '-1'.
    """

    def parse(text: str) -> int:
        word = text.strip()
        digits = word[1:] if word[:1] in "+-" else word
        if not (digits.isdigit() and digits.isascii()) or not low <= int(word) <= high:
            raise argparse.ArgumentTypeError(f"{option} takes {what}. Got {text!r}.")
        return int(word)

    return parse


def positive_int(option: str) -> Callable[[str], int]:
    """An argparse ``type`` for positive integers that names the option (the options' own).

    >>> positive_int("--epochs")("3")
    3
    """
    return positive_flag(option)


def size_in_pixels(option: str) -> Callable[[str], int]:
    """An argparse ``type`` for an image side in pixels, 0 (off) to [`MAX_PIXELS`][MAX_PIXELS]."""
    return bounded_int(option, 0, MAX_PIXELS, f"a size in pixels from 0 (off) to {MAX_PIXELS}")


def seed(option: str = "--seed") -> Callable[[str], int]:
    """An argparse ``type`` for a random seed, 0 to [`MAX_SEED`][MAX_SEED]."""
    return bounded_int(option, 0, MAX_SEED, "a seed, an integer from 0 to 2**63 - 1")


def add_command(
    subparsers: Any, name: str, help: str, description: str, epilog: str
) -> argparse.ArgumentParser:
    """Add the sub-command ``name`` and return its parser: ``help`` is its line in ``recallkit
    --help``; its own help opens with ``description`` (a paragraph: its lines joined by single
    spaces) and ends with ``epilog`` (the examples, printed as written)."""
    return subparsers.add_parser(
        name,
        help=help,
        description=" ".join(description.split()),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_quiet(parser: argparse.ArgumentParser | Any) -> None:
    """Add ``--quiet``: the command prints nothing but errors (see
    [`recallkit.cli.main`][recallkit.cli.main])."""
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print nothing but errors (no report, progress, notes or warnings)",
    )


#: The library parameters of the runner's commands -> their options (see ``recallkit.cli.errors``).
PARAMETERS = {"ks": "--ks", "seed": "--seed"}


def jsonable(value: Any) -> Any:
    """Command-line options as JSON values (paths and other objects as strings)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


def unchanged_inputs(doing: str) -> None:
    """Refuse to go on when a file the command read has changed since it was read (its size,
    modification time, identity or sampled contents:
    [`recallkit._inputs.pinned.FileState`][recallkit._inputs.pinned.FileState]): called once the
    command has computed, before it prints its report or writes anything. ``doing`` says what the
    files were read for ("evaluated", "compared").

    >>> from recallkit._inputs.pinned import recording
    >>> with recording():
    ...     unchanged_inputs("evaluated")  # nothing read, nothing changed
    """
    from recallkit._inputs.pinned import changed_input

    found = changed_input()
    if found is not None:
        path, how = found
        raise UsageError(
            f"'{path}' changed while it was being {doing} ({', '.join(how)}); nothing was written."
        )


def check_output_file(path: str | None, option: str) -> None:
    """Refuse an output ``path`` that cannot be written as a file: a folder, a device, a pipe,
    or a path under a file. Outputs are written atomically (a temporary file renamed over the
    target), which would put a plain file in place of a device or a pipe.
    """
    if path is None:
        return
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{option} takes a file name; '{path}' is a folder.")
    if target.exists() and not target.is_file():
        raise UsageError(
            f"{option} '{path}' is not a regular file (a device, a pipe or a socket); give the "
            "name of a file to write."
        )
    _check_parent(target, option, path)


def write_error(path: str | Path, error: OSError, what: str = "") -> UsageError:
    """The one-line error for an output that could not be written: ``Cannot write [what ]'path':
    reason.``"""
    named = f"{what} '{path}'" if what else f"'{path}'"
    return UsageError(f"Cannot write {named}: {error.strerror or error}.")


def add_names(parser: argparse.ArgumentParser | Any) -> None:
    """Add ``--name``: one name per run, for the commands that read run files."""
    parser.add_argument(
        "--name",
        nargs="+",
        metavar="NAME",
        help="one name per run, in order (default: each run's tag, else its file's stem)",
    )


def check_output_folder(path: str | None, option: str) -> None:
    """Refuse an output folder ``path`` that is a file (or lies under one)."""
    if path is None:
        return
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise UsageError(f"{option} takes a folder; '{path}' is a file.")
    _check_parent(target, option, path)


def _check_parent(target: Path, option: str, given: str) -> None:
    """Refuse ``target`` when the nearest existing folder above it is in fact a file."""
    for parent in target.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f"{option} '{given}': '{parent}' is a file, not a folder.")
            return


def usable_device(text: str | None, option: str = "--device") -> str | None:
    """``text`` if torch can allocate on that device here; else a UsageError naming the option.

    >>> usable_device("cpu"), usable_device(None)
    ('cpu', None)
    """
    if text is None:
        return None
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, TypeError, ValueError):
        raise UsageError(
            f"{option} takes a torch device such as cpu, cuda or cuda:1. Got {text!r}."
        ) from None
    if device.type != "cpu":
        try:
            torch.empty(1, device=device)
        except (RuntimeError, AssertionError, AttributeError, ValueError) as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise UsageError(f"{option} {text}: this machine cannot use it ({reason}).") from None
    return text


#: The paired tests and corrections of ``recallkit compare`` and ``recallkit report``.
TESTS = ("auto", "randomization", "bootstrap")
CORRECTIONS = ("holm", "none")


def add_statistics(parser: argparse.ArgumentParser | Any, *, tests: bool = True) -> None:
    """Add the options of intervals and tests (``recallkit compare`` and ``report``):
    ``--resamples``, ``--confidence``, ``--seed`` and, with ``tests``, ``--baseline``,
    ``--test``, ``--correction``, ``--alpha``."""
    from recallkit.runner.defaults import DEFAULT_RESAMPLES, DEFAULT_SEED, MAX_RESAMPLES

    if tests:
        parser.add_argument(
            "--baseline",
            metavar="NAME",
            help="compare every other run with this one only (default: every pair)",
        )
        parser.add_argument(
            "--test",
            choices=TESTS,
            default="auto",
            help="the paired test: auto (default: McNemar's exact test where both runs' values "
            "are 0/1, as recall@K's, Fisher's randomization test for the rest), randomization "
            "for every metric, or the paired bootstrap",
        )
        parser.add_argument(
            "--correction",
            choices=CORRECTIONS,
            default="holm",
            help="adjust each metric's p-values for the pairs compared on it: Holm (default) "
            "or none",
        )
        parser.add_argument(
            "--alpha",
            type=float,
            default=0.05,
            help="adjusted p-values below it are significant (default 0.05)",
        )
    parser.add_argument(
        "--resamples",
        type=positive_int("--resamples"),
        default=DEFAULT_RESAMPLES,
        metavar="N",
        help=f"resamples of every interval and test (default {DEFAULT_RESAMPLES}, at most "
        f"{MAX_RESAMPLES})",
    )
    parser.add_argument(
        "--confidence", type=float, default=0.95, help="interval level (default 0.95)"
    )
    parser.add_argument("--seed", type=seed(), default=DEFAULT_SEED, help="seed (default 0)")


#: The library's parameters of intervals and comparisons -> the options that supply them.
STATISTICS_PARAMETERS = {
    "baseline": "--baseline",
    "test": "--test",
    "correction": "--correction",
    "alpha": "--alpha",
    "n_resamples": "--resamples",
    "confidence": "--confidence",
    "seed": "--seed",
    "metrics": "--metrics",
    "names": "--name",
}

#: The library's parameters -> the options of the commands that read run files (compare, report).
RUNS_PARAMETERS = {**PARAMETERS, **STATISTICS_PARAMETERS, "runs": "the run files"}


def statistics(args: argparse.Namespace) -> dict[str, Any]:
    """The checked options of [`add_statistics`][add_statistics] as keyword arguments of
    [`recallkit.reports.summarize`][recallkit.reports.summarize] (and
    [`recallkit.compare`][recallkit.comparison.compare])."""
    from recallkit.runner.defaults import MAX_RESAMPLES

    if not 0 < args.confidence < 1:
        raise UsageError(f"--confidence must be between 0 and 1. Got {args.confidence}.")
    if args.resamples > MAX_RESAMPLES:
        raise UsageError(
            f"--resamples takes at most {MAX_RESAMPLES} (the intervals' own sampling error is "
            f"far below their four decimals long before). Got {args.resamples}."
        )
    out: dict[str, Any] = {
        "n_resamples": args.resamples,
        "confidence": args.confidence,
        "seed": args.seed,
    }
    if hasattr(args, "alpha"):
        if not 0 < args.alpha < 1:
            raise UsageError(f"--alpha must be between 0 and 1. Got {args.alpha}.")
        out.update(
            baseline=args.baseline, test=args.test, correction=args.correction, alpha=args.alpha
        )
    return out


def metric_names(values: Sequence[str] | None) -> list[str] | None:
    """``--metrics`` as the names run files use (an alias, ``map@r``, as ``MAP@R``).

    >>> metric_names(["map@r", "R@1", "MnR"])
    ['MAP@R', 'recall@1', 'MnR']
    """
    if values is None:
        return None
    from recallkit.metrics import parse_one

    out = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if part:
                metric = parse_one(part)
                out.append(part if metric is None else metric.name)
    return out
