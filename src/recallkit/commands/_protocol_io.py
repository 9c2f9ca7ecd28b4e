"""File helpers of the benchmark-protocol sub-commands: arrays, image ids, JSON reports.

Every user error is a :class:`recallkit.errors.UsageError` (one line, exit status 2).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from recallkit.errors import UsageError
from recallkit.io import read_array
from recallkit.protocols._common import write_json
from recallkit.result import Result

T = TypeVar("T")


def load_array(
    spec: str,
    what: str,
    ndims: tuple[int, ...] = (2,),
    allow_nan: bool = False,
    integer: bool = False,
) -> np.ndarray:
    """Read a numeric array from ``.npy``, ``.pt``/``.pth`` or ``.safetensors``.

    ``spec`` is a path, optionally followed by ``#name`` to pick one tensor of a file holding
    several (a dict for ``.pt``). A file with one tensor needs no name. ``integer=True`` asks
    for integer values (indices), returned as int64 without passing through floats.
    """
    path_text, _, key = spec.partition("#")
    path = Path(path_text)
    try:
        array = read_array(
            path,
            key or None,
            what=what,
            ndim=ndims,
            several_hint=f"name one as '{path}#NAME'",
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    if 0 in array.shape:
        raise UsageError(
            f"The {what} file '{path}' must hold a non-empty array. Got shape {array.shape}."
        )
    if integer:
        if array.dtype.kind not in "iu":
            raise UsageError(f"The {what} file '{path}' must hold integers. Got {array.dtype}.")
        return array.astype(np.int64)
    if array.dtype.kind != "f" or array.dtype == np.float16:
        array = array.astype(np.float32)
    bad = np.isnan(array) if allow_nan else ~np.isfinite(array)
    if bad.any():
        row = int(np.nonzero(bad.reshape(len(array), -1).any(axis=1))[0][0])
        raise UsageError(f"The {what} file '{path}' has a NaN or infinite value in row {row}.")
    return array


def load_ids(spec: str, what: str = "image ids") -> np.ndarray:
    """Integer image ids, in row order, from ``.npy``, ``.json`` or ``.txt``.

    JSON: a list of ids, or a COCO image-info object (``{"images": [{"id": ...}]}``). Text: one
    id or image file name (``000000243611.jpg``) per line.
    """
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"the {what} file '{path}' does not exist")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            values: list[Any] = np.load(path, allow_pickle=False).reshape(-1).tolist()
        elif suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("images"), list):
                values = [image["id"] for image in data["images"]]
            elif isinstance(data, list):
                values = data
            else:
                raise ValueError("expected a list of ids or a COCO object with 'images'")
        elif suffix == ".txt":
            values = [
                _id_of_line(line)
                for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()
            ]
        else:
            raise ValueError("the file must end in .npy, .json or .txt")
        ids = np.array([int(v) for v in values], dtype=np.int64)
    except (ValueError, TypeError, KeyError, json.JSONDecodeError) as error:
        raise UsageError(f"the {what} file '{path}' cannot be read: {error}") from None
    if ids.size == 0:
        raise UsageError(f"the {what} file '{path}' holds no id")
    return ids


def _id_of_line(line: str) -> int:
    digits = re.findall(r"\d+", Path(line.strip()).stem)
    if not digits:
        raise ValueError(f"no integer id in line {line.strip()!r}")
    return int(digits[-1])


def report(result: Result, json_path: str | None) -> int:
    """Print the result's table; write its JSON report atomically when asked."""
    print(result.table())
    if json_path:
        write_json(json_path, result.to_dict())
        print(f"wrote {json_path}")
    return 0


def user_errors(call: Callable[[], T]) -> T:
    """Run ``call``; a ValueError or missing file becomes a one-line UsageError."""
    try:
        return call()
    except UsageError:
        raise
    except (ValueError, FileNotFoundError) as error:
        raise UsageError(str(error)) from None


def add_common(
    parser: argparse.ArgumentParser, ks: tuple[int, ...], *, metric: bool = True
) -> None:
    """``--ks``, ``--metric``, ``--device``, ``--chunk-size`` and ``--json``."""
    parser.add_argument(
        "--ks",
        type=int,
        nargs="+",
        default=list(ks),
        metavar="K",
        help=f"cut-offs (default: {' '.join(map(str, ks))})",
    )
    if metric:
        parser.add_argument(
            "--metric",
            choices=("cosine", "dot", "euclidean"),
            default="cosine",
            help="similarity of embeddings (default: cosine)",
        )
        parser.add_argument("--device", default=None, help="torch device (default: cpu)")
        parser.add_argument("--chunk-size", type=int, default=None, help="query rows per chunk")
    parser.add_argument(
        "--json", metavar="OUT", default=None, help="write the metrics as JSON (atomically)"
    )
