"""File helpers of the benchmark-protocol sub-commands: arrays, image ids, JSON reports.

Every user error is a ``ValueError`` naming the file (one line, exit status 2).
"""

from __future__ import annotations

import argparse
import io
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recallkit import options as _options
from recallkit._inputs.pinned import read_file
from recallkit.cli.commands._args import check_output_file, unchanged_inputs, usable_device
from recallkit.cli.errors import UsageError

if TYPE_CHECKING:
    from recallkit.result import Result


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
    path_text, _, key = spec.rpartition("#") if "#" in spec else (spec, "", "")
    if Path(spec).is_file():  # a file whose name holds '#' is read whole
        path_text, key = spec, ""
    path = Path(path_text)
    try:
        from recallkit._inputs.io import read_array

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
        raise UsageError(f"The {what} file '{path}' does not exist or is not a file.")
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".json", ".txt"):
        raise UsageError(
            f"The {what} file '{path}' cannot be read: the file must end in .npy, .json or .txt."
        )
    data = read_file(path, f"The {what} file '{path}'")  # checked unchanged, and recorded
    try:
        if suffix == ".npy":
            array = np.load(io.BytesIO(data), allow_pickle=False)
            if array.dtype.kind not in "iu":
                raise ValueError(f"ids must be integers, not {array.dtype}")
            values: list[Any] = array.reshape(-1).tolist()
        elif suffix == ".json":
            value = json.loads(data.decode("utf-8"))
            if isinstance(value, dict) and isinstance(value.get("images"), list):
                values = [image["id"] for image in value["images"]]
            elif isinstance(value, list):
                values = value
            else:
                raise ValueError("expected a list of ids or a COCO object with 'images'")
        else:
            values = [
                _id_of_line(line) for line in data.decode("utf-8").splitlines() if line.strip()
            ]
        wrong = next((v for v in values if isinstance(v, bool) or not isinstance(v, int)), None)
        if wrong is not None:
            raise ValueError(f"ids must be integers, not {wrong!r}")
        ids = np.array(values, dtype=np.int64)
    except OverflowError:
        raise UsageError(f"The {what} file '{path}' holds an id beyond 64-bit integers.") from None
    except (ValueError, TypeError, KeyError, json.JSONDecodeError) as error:
        raise UsageError(f"The {what} file '{path}' cannot be read: {error}.") from None
    if ids.size == 0:
        raise UsageError(f"The {what} file '{path}' holds no id.")
    return ids


def _id_of_line(line: str) -> int:
    digits = re.findall(r"\d+", Path(line.strip()).stem)
    if not digits:
        raise ValueError(f"no integer id in line {line.strip()!r}")
    return int(digits[-1])


def report(result: Result, json_path: str | None) -> int:
    """Print the result's table; write its JSON report atomically when asked. Refused first when
    an input file changed since it was read ([`unchanged_inputs`][unchanged_inputs])."""
    unchanged_inputs("evaluated")
    print(result.table())
    if json_path:
        from recallkit.protocols._common import write_json

        write_file("--json", write_json, json_path, result.to_dict())
    return 0


def write_file(
    option: str, write: Callable[..., Any], path: str | Path, *args: Any, **keywords: Any
):
    """``write(path, *args, **keywords)`` (an atomic writer), then ``wrote PATH``; an OSError is
    the one-line error naming ``option`` ([`cannot_write`][cannot_write])."""
    try:
        write(path, *args, **keywords)
    except OSError as error:
        raise cannot_write(option, path, error) from None
    print(f"wrote {path}")


def cannot_write(option: str, path: str | Path, error: OSError) -> UsageError:
    """The one-line error for an output that could not be written (nothing was written)."""
    reason = error.strerror or str(error)
    return UsageError(f"Cannot write {option} '{path}': {reason}. Nothing was written.")


def check_common(args: argparse.Namespace) -> None:
    """Check the options of [`add_common`][add_common] before anything is read: the device can be
    used here, and ``--json`` names a file that can be written."""
    if getattr(args, "device", None) is not None:
        usable_device(args.device)
    check_output_file(args.json, "--json")


def same_dimension(a: np.ndarray, b: np.ndarray, option_a: str, option_b: str) -> None:
    """Refuse two embedding arrays whose rows have different dimensions."""
    if a.shape[-1] != b.shape[-1]:
        raise UsageError(
            f"{option_a} has embeddings of dimension {a.shape[-1]} but {option_b} has "
            f"{b.shape[-1]}; both must come from the same embedding space."
        )


@contextmanager
def reading(*files: str | Path) -> Iterator[None]:
    """Name the file when a library reader meets text that is not UTF-8.

    ``files`` are the files the reader may open, in the order it opens them; the first one that
    is not UTF-8 text is named in the error.
    """
    try:
        yield
    except UnicodeDecodeError as error:
        bad = next((Path(f) for f in files if _not_utf8(Path(f))), None)
        where = f"The file '{bad}'" if bad is not None else "An annotation file"
        raise UsageError(
            f"{where} is not UTF-8 text (byte {error.start}: {error.reason}); annotation files "
            "are JSON in UTF-8."
        ) from None


def _not_utf8(path: Path) -> bool:
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return True
    except OSError:
        return False
    return False


def load_json(spec: str, what: str) -> Any:
    """The JSON value of the ``what`` file ``spec``; a UsageError names the file otherwise."""
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"The {what} file '{path}' does not exist or is not a file.")
    try:
        return json.loads(read_file(path, f"The {what} file '{path}'").decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"The {what} file '{path}' is not UTF-8 text.") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"The {what} file '{path}' is not valid JSON: {error}.") from None


#: The parameters every protocol command supplies with the same option (see ``add_common``):
#: the engine's options ([`recallkit.options`][recallkit.options]) and the cut-offs.
PARAMETERS = {
    **_options.flag_names("engine"),
    "ks": "--ks",
    "k": "the submission size",
}


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The engine options given on the command line, as the protocol functions' keywords."""
    return _options.from_flags(args, "engine")


def check_ks(args: argparse.Namespace) -> None:
    """``--ks`` as the protocol functions take it (distinct positive integers), checked before
    the engine's libraries are imported, in the library's words."""
    for i, k in enumerate(args.ks):
        if k <= 0:
            raise UsageError(f"--ks must be positive integers. Got {k}.")
        if k in args.ks[:i]:
            raise UsageError(
                f"--ks must be distinct (each K once). Got {list(args.ks)}, with {k} twice."
            )


def add_common(
    parser: argparse.ArgumentParser, ks: tuple[int, ...], *, metric: bool = True
) -> None:
    """``--ks``, the engine's options (``--metric``, ``--chunk-size``, ``--memory-budget``,
    ``--device``, ``--precision``: [`recallkit.options.add_flags`][recallkit.options.add_flags]) and
    ``--json``."""
    parser.add_argument(
        "--ks",
        type=int,
        nargs="+",
        default=list(ks),
        metavar="K",
        help=f"cut-offs (default: {' '.join(map(str, ks))})",
    )
    if metric:
        _options.add_flags(parser, "engine")
    parser.add_argument(
        "--json", metavar="OUT", default=None, help="write the metrics as JSON (atomically)"
    )
