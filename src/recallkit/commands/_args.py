"""Small helpers shared by the runner's sub-commands."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from recallkit.errors import UsageError

T = TypeVar("T")


def parse_ks(values: Sequence[str] | None, option: str = "--ks") -> tuple[int, ...] | None:
    """``["1", "5,10"]`` -> ``(1, 5, 10)``; a UsageError for anything but positive integers.

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
            if not part.isdigit() or int(part) <= 0:
                raise UsageError(
                    f"{option} takes positive integers, like {option} 1 5 10. Got {part!r}."
                )
            if int(part) not in out:
                out.append(int(part))
    if not out:
        raise UsageError(f"{option} needs at least one K.")
    return tuple(out)


@contextmanager
def warnings_as_lines(command: str) -> Iterator[None]:
    """Print each Python warning raised inside as one line ``recallkit CMD: warning: ...``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen: set[str] = set()
            for w in caught:
                text = str(w.message)
                if text not in seen:
                    seen.add(text)
                    print(f"recallkit {command}: warning: {text}", file=sys.stderr)


def positive_int(option: str) -> Callable[[str], int]:
    """An argparse ``type`` for positive integers that names the option."""

    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) <= 0:
            raise argparse.ArgumentTypeError(f"{option} takes a positive integer. Got {text!r}.")
        return int(text)

    return parse


def add_quiet(parser: argparse.ArgumentParser | Any) -> None:
    """Add ``--quiet``: the command prints nothing but errors (see :func:`recallkit.cli.main`)."""
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print nothing but errors (no report, progress, notes or warnings)",
    )


def jsonable(value: Any) -> Any:
    """Command-line options as JSON values (paths and other objects as strings)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)
