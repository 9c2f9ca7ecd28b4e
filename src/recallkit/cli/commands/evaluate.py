"""``recallkit evaluate``: recall@K and any other metric of an encoder, or of saved embeddings."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recallkit import options as _options
from recallkit._loading import require
from recallkit.cli.commands._args import (
    add_command,
    add_quiet,
    check_output_file,
    jsonable,
    parse_ks,
    positive_int,
    size_in_pixels,
    unchanged_inputs,
    usable_device,
    warnings_as_lines,
)
from recallkit.cli.errors import UsageError
from recallkit.exceptions import LoneQueriesWarning
from recallkit.runfiles._atomic import Staging, interrupts_deferred, resolve_target
from recallkit.runner.defaults import DTYPE_NAMES, IMAGENET_MEAN, IMAGENET_STD, default_cache_dir
from recallkit.runner.history import append_history, read_history
from recallkit.runner.sources import ImageSet, from_arrays, from_benchmark, from_path, labels_file

if TYPE_CHECKING:
    from recallkit.runner.encoders import Encoder

# The modules that load numpy, torch and Pillow (the encoders, the pipeline) are imported by
# the functions that run the command, so that ``recallkit evaluate --help`` loads none of them.

EXAMPLES = """\
examples:
  # a new backbone, query and gallery as class-per-subfolder image folders
  recallkit evaluate --query data/query --gallery data/gallery \\
      --model resnet50 --weights resnet50.pth --json resnet50.json
  # one folder (or manifest) against itself, leave-one-out, precomputed embeddings
  recallkit evaluate --images data/test.csv --embeddings test.npy
  # embeddings and labels a training script saved (no images), every metric asked for
  recallkit evaluate --embeddings val.npy --labels val_labels.npy --metrics MAP@R nDCG@10
  # tracking a fine-tune: one history line per checkpoint
  recallkit evaluate --images data/test --callable mypkg.models:load_epoch3 \\
      --history runs.jsonl --tag epoch-3
  # a benchmark's own protocol (--allow-partial for a partial or modified copy)
  recallkit evaluate --benchmark cub --root ~/data/CUB_200_2011 --embeddings cub.npy

PATH is a folder of class subfolders (PATH/<label>/<image>; symbolic links are followed and
each real file counted once) or a CSV/TSV manifest with columns path,label[,id], one row per
line. Self-matches (same resolved path, or same manifest id) are excluded. Saved arrays need no
images: --embeddings FILE --labels FILE is one set against itself, each row's own row excluded;
--query-embeddings/--query-labels with --gallery-embeddings/--gallery-labels a query set and a
gallery. A labels file is a 1-D .npy array or a text file with one label per line. The report
goes to stdout; progress and notes go to stderr.

Outputs (--show-out, --json, --history) are written at the end, all of them or, on a failure
such as a full disk, none: a one-line error and exit status 2. A symbolic link given as an
output keeps pointing at its target, which is written with its mode kept. An input file
(embeddings, labels, manifest, cached embeddings, weights, an image) rewritten, truncated or
replaced during the run stops it before the report: a one-line error naming the file, exit
status 2, nothing written. The cache is optional: a --cache-dir that cannot be written gives a
warning and the run goes on.
"""


#: One flag of the table below: its names and ``add_argument``'s keywords; or a function that
#: adds flags to the group (the options' flags, ``--quiet``), built when the parser is.
Flag = tuple[tuple[str, ...], dict[str, Any]] | Callable[[Any], None]


def _flag(*names: str, **keywords: Any) -> Flag:
    return names, keywords


DATA_FLAGS: tuple[Flag, ...] = (
    _flag("--query", metavar="PATH", help="query images: folder or manifest"),
    _flag("--gallery", metavar="PATH", help="gallery images: folder or manifest"),
    _flag("--images", metavar="PATH", help="one folder or manifest evaluated against itself"),
    _flag(
        "--benchmark",
        metavar="NAME",
        help="a benchmark's protocol: cub, cars196, sop, inaturalist or inshop",
    ),
    _flag("--root", metavar="DIR", help="the benchmark's folder"),
    _flag(
        "--allow-partial",
        action="store_true",
        help="with --benchmark: accept split sizes that differ from the benchmark's (a partial or "
        "modified copy); the report says the benchmark is incomplete",
    ),
    _flag(
        "--labels",
        metavar="FILE",
        help="the labels of --embeddings, one per row (.npy or one per line): the saved set is "
        "evaluated against itself, each row's own row excluded; no images needed",
    ),
    _flag("--query-labels", metavar="FILE", help="the labels of --query-embeddings"),
    _flag("--gallery-labels", metavar="FILE", help="the labels of --gallery-embeddings"),
    _flag(
        "--skip-bad",
        action="store_true",
        help="leave unreadable images out and report them (with --benchmark, also the listed "
        "images that are not on disk; the benchmark is then incomplete)",
    ),
)

ENCODER_FLAGS: tuple[Flag, ...] = (
    _flag(
        "--embeddings",
        metavar="FILE",
        help="precomputed embeddings (.npy, .pt, .safetensors) of --images (or a benchmark "
        "whose gallery is its query split), row-aligned",
    ),
    _flag("--query-embeddings", metavar="FILE", help="precomputed query embeddings"),
    _flag("--gallery-embeddings", metavar="FILE", help="precomputed gallery embeddings"),
    _flag("--model", metavar="NAME", help="a torchvision model name, e.g. resnet50"),
    _flag("--weights", metavar="FILE", help="local state dict for --model"),
    _flag(
        "--random-init",
        action="store_true",
        help="with --model, instead of --weights: the model's random initialisation from a "
        "fixed seed (torch seed 0), the same weights and embeddings every run; a baseline "
        "that needs no weights file",
    ),
    _flag(
        "--head",
        choices=("drop", "keep"),
        default="drop",
        help="drop the model's last linear layer (penultimate features; default) or keep it",
    ),
    _flag(
        "--callable",
        metavar="MODULE:NAME",
        help="package.module:callable returning a torch model, a (model, transform) pair or an "
        "encoder function (list of PIL images -> (n, d) array)",
    ),
    _flag(
        "--encoder-id",
        metavar="NAME",
        help="a name for the encoder's version, part of the embedding cache key: give one that "
        "changes whenever the output changes in a way the cache cannot see (an encoder "
        "function holding no torch module is otherwise keyed by its source code alone, so "
        "weights it loads itself or environment variables it reads go unnoticed)",
    ),
)

PREPROCESSING_FLAGS: tuple[Flag, ...] = (
    _flag(
        "--resize",
        type=size_in_pixels("--resize"),
        default=256,
        metavar="N",
        help="shorter side (0: off)",
    ),
    _flag(
        "--crop",
        type=size_in_pixels("--crop"),
        default=224,
        metavar="N",
        help="center crop (0: off)",
    ),
    _flag(
        "--mean",
        type=float,
        nargs=3,
        default=list(IMAGENET_MEAN),
        metavar="M",
        help="per-channel mean (default ImageNet's)",
    ),
    _flag(
        "--std",
        type=float,
        nargs=3,
        default=list(IMAGENET_STD),
        metavar="S",
        help="per-channel std (default ImageNet's)",
    ),
)


def _engine_options(group: Any) -> None:
    """The library's options as flags (``--metric``, ``--device``, ...)."""
    device = (
        "where the encoder and the engine run: cpu, cuda, cuda:N or auto (default: a GPU when one "
        "is visible)"
    )
    _options.add_flags(group, "label", helps={"device": device})


def _cache_dir_flag(group: Any) -> None:
    """``--cache-dir``, its help naming this machine's default folder."""
    group.add_argument(
        "--cache-dir",
        metavar="DIR",
        help=f"embedding cache (default $RECALLKIT_CACHE or {default_cache_dir()}); one that "
        "cannot be written gives a warning and the run goes on without it",
    )


def _metrics_flag(group: Any) -> None:
    """``--metrics``, its help listing one name of each metric of the registry."""
    group.add_argument(
        "--metrics",
        nargs="+",
        metavar="NAME",
        help="more metrics, after recall@K, by name or alias (" + _metric_examples() + ")",
    )


METRIC_FLAGS: tuple[Flag, ...] = (
    _flag(
        "--ks",
        nargs="+",
        metavar="K",
        help="the K of recall@K (default 1 5 10, or the benchmark's)",
    ),
    _metrics_flag,
    _engine_options,
    _flag(
        "--batch-size",
        type=positive_int("--batch-size"),
        default=32,
        metavar="N",
        help="images per encoder call (default 32)",
    ),
    _flag("--dtype", choices=DTYPE_NAMES, default="float32", help="model dtype"),
    _cache_dir_flag,
    _flag("--no-cache", action="store_true", help="encode without the cache"),
    add_quiet,
)

OUTPUT_FLAGS: tuple[Flag, ...] = (
    _flag("--json", metavar="FILE", help="write the run (with per-query ranks)"),
    _flag(
        "--history",
        metavar="FILE",
        help="append one JSON line to this file (locked: concurrent runs each add theirs)",
    ),
    _flag("--tag", help="the run's name in the history and JSON (e.g. epoch-3)"),
    _flag(
        "--absolute-paths",
        action="store_true",
        help="record this machine's absolute paths in the run file (default: each image by its "
        "path relative to its folder, manifest or benchmark, so that runs compare across "
        "machines)",
    ),
    _flag("--worst", type=int, default=5, metavar="N", help="worst classes to list (0: none)"),
    _flag(
        "--show-topk",
        type=positive_int("--show-topk"),
        metavar="K",
        help="gallery images per query in the failure grid (default 8)",
    ),
    _flag("--show-out", metavar="FILE", help="failure grid, .png or .html"),
    _flag(
        "--show-queries",
        type=positive_int("--show-queries"),
        default=8,
        metavar="N",
        help="queries in the failure grid: those whose first correct neighbour ranks lowest "
        "(default 8)",
    ),
)

#: The flags of ``recallkit evaluate``, by section of its help.
SECTIONS: tuple[tuple[str, tuple[Flag, ...]], ...] = (
    (
        "data (one of: --query with --gallery, --images, --benchmark, saved arrays with labels)",
        DATA_FLAGS,
    ),
    ("encoder (one of)", ENCODER_FLAGS),
    ("preprocessing (torch models without their own transform)", PREPROCESSING_FLAGS),
    ("metrics and engine", METRIC_FLAGS),
    ("output", OUTPUT_FLAGS),
)


#: The line of ``recallkit evaluate`` in ``recallkit --help``.
HELP = "recall@K of an encoder on query and gallery images"
#: The paragraph that opens ``recallkit evaluate --help``.
DESCRIPTION = """\
Encode query and gallery images (the gallery once, cached), or read saved embeddings, and print
recall@K (the share of queries with a same-label gallery item among their K nearest; cosine, ties
to the lower gallery index) and any other metric asked for with --metrics, all from one exact pass.
"""


def register(subparsers: Any) -> None:
    """Add the ``evaluate`` sub-command: its flags are [`SECTIONS`][SECTIONS]."""
    p = add_command(subparsers, "evaluate", HELP, DESCRIPTION, EXAMPLES)
    for title, flags in SECTIONS:
        group = p.add_argument_group(title)
        for flag in flags:
            if callable(flag):
                flag(group)
            else:
                names, keywords = flag
                group.add_argument(*names, **keywords)
    p.set_defaults(func=main, check=check, parameters=PARAMETERS)


def _metric_examples() -> str:
    from recallkit.metrics import examples

    return examples().replace("'", "")


def _embedding_option(args: argparse.Namespace, side: str) -> str:
    """What supplied the ``side`` ("query" or "gallery") embeddings, in command-line words."""
    if args.embeddings is not None:
        return "--embeddings"
    if getattr(args, f"{side}_embeddings") is not None:
        return f"--{side}-embeddings"
    return f"the {side} embeddings of {_encoder_option(args)}"


def _encoder_option(args: argparse.Namespace) -> str:
    if args.callable is not None:
        return f"--callable {args.callable}"
    return f"--model {args.model}"


#: The runner's and the library's parameters -> the options of ``recallkit evaluate``.
PARAMETERS = {
    **_options.flag_names("label"),
    "ks": "--ks",
    "metrics": "--metrics",
    "batch_size": "--batch-size",
    "cache_dir": "--cache-dir",
    "root": "--root",
    "name": "--benchmark",
    "query": lambda args: _embedding_option(args, "query"),
    "reference": lambda args: _embedding_option(args, "gallery"),
    "query_embeddings": lambda args: _embedding_option(args, "query"),
    "gallery_embeddings": lambda args: _embedding_option(args, "gallery"),
    "query_labels": lambda args: _labels_option(args, "query"),
    "reference_labels": lambda args: _labels_option(args, "gallery"),
    "encoder_fn": _encoder_option,
}


def _labels_option(args: argparse.Namespace, side: str) -> str:
    """What supplied the ``side`` labels, in command-line words."""
    if getattr(args, "labels", None) is not None:
        return "--labels"
    if getattr(args, f"{side}_labels", None) is not None:
        return f"--{side}-labels"
    return f"the {side} labels"


def _named(args: argparse.Namespace) -> dict[str, str]:
    """[`PARAMETERS`][PARAMETERS] resolved for these arguments (for warnings)."""
    return {k: v(args) if callable(v) else v for k, v in PARAMETERS.items()}


Data = tuple[ImageSet, ImageSet, tuple[int, ...] | None, dict[str, Any] | None]


def _arrays(args: argparse.Namespace) -> bool:
    return any(getattr(args, n) is not None for n in ("labels", "query_labels", "gallery_labels"))


def check(args: argparse.Namespace) -> None:
    """The arguments and the extras they need, checked before the engine's libraries are
    imported and before any file is read (but a history file to append to): a bad one is one
    line at once."""
    parse_ks(args.ks)
    if args.metrics:
        from recallkit.metrics import parse

        parse(args.metrics, "recallkit evaluate", "metrics")
    _check_outputs(args)
    _check_data(args)
    _check_encoder(args)
    _check_extras(args)  # last: a present extra is imported (torchvision loads torch)


def _check_data(args: argparse.Namespace) -> None:
    """The data is given one way, whole."""
    pair = args.query is not None or args.gallery is not None
    chosen = [pair, args.images is not None, args.benchmark is not None, _arrays(args)]
    if sum(chosen) != 1:
        raise UsageError(
            "Give the data one way: --query PATH --gallery PATH, or --images PATH, or "
            "--benchmark NAME --root DIR, or saved arrays: --embeddings FILE --labels FILE "
            "(or --query-embeddings/--query-labels with --gallery-embeddings/--gallery-labels)."
        )
    if args.root is not None and args.benchmark is None:
        raise UsageError("--root goes with --benchmark.")
    if args.allow_partial and args.benchmark is None:
        raise UsageError("--allow-partial goes with --benchmark.")
    if pair and (args.query is None or args.gallery is None):
        missing = "--gallery" if args.gallery is None else "--query"
        raise UsageError(f"--query and --gallery go together; {missing} is missing.")
    if _arrays(args):
        _check_saved_arrays(args)
    elif args.benchmark is not None and args.root is None:
        raise UsageError("--benchmark needs --root DIR, the folder holding its files.")


def _data(args: argparse.Namespace) -> Data:
    """Query set, gallery set, the protocol's K values and, for a benchmark, what it is (the
    arguments [`check`][check]ed)."""
    if args.query is not None:
        query = from_path(args.query, what="query manifest")
        gallery = from_path(args.gallery, what="gallery manifest")
        return query, gallery, None, None
    if args.images is not None:
        images = from_path(args.images, what="manifest")
        return images, images, None, None
    if _arrays(args):
        return _saved_arrays(args)
    return _benchmark(args)


def _benchmark(args: argparse.Namespace) -> Data:
    """The benchmark's query and gallery splits (``recallkit.runner.from_benchmark``):
    ``--allow-partial`` and ``--skip-bad`` are the loader's ``allow_partial`` and
    ``skip_missing``; the last item says whether the copy loaded so is complete."""
    with warnings_as_lines("evaluate", _named(args)):
        sets = from_benchmark(
            args.benchmark, args.root, allow_partial=args.allow_partial, skip_missing=args.skip_bad
        )
    info = {"name": args.benchmark, "title": sets.title, "complete": sets.complete}
    return sets.query, sets.gallery, sets.ks, info


def _check_saved_arrays(args: argparse.Namespace) -> None:
    if args.labels is not None:
        if args.query_labels is not None or args.gallery_labels is not None:
            raise UsageError("Give --labels, or --query-labels with --gallery-labels, not both.")
        if args.embeddings is None:
            raise UsageError("--labels goes with --embeddings FILE, the rows it labels.")
        return
    if args.query_labels is None or args.gallery_labels is None:
        missing = "--gallery-labels" if args.gallery_labels is None else "--query-labels"
        raise UsageError(f"--query-labels and --gallery-labels go together; {missing} is missing.")
    if args.query_embeddings is None or args.gallery_embeddings is None:
        raise UsageError(
            "--query-labels and --gallery-labels go with --query-embeddings FILE and "
            "--gallery-embeddings FILE, the rows they label."
        )


def _saved_arrays(args: argparse.Namespace) -> Data:
    """The label sets of saved arrays: ``--labels`` (one set against itself) or
    ``--query-labels`` with ``--gallery-labels``; each row's items are its row numbers."""
    if args.labels is not None:
        labels = labels_file(args.labels, option="--labels")
        images = from_arrays(labels, f"--embeddings {args.embeddings}")
        return images, images, None, None
    query = from_arrays(
        labels_file(args.query_labels, option="--query-labels"),
        f"--query-embeddings {args.query_embeddings}",
    )
    gallery = from_arrays(
        labels_file(args.gallery_labels, option="--gallery-labels"),
        f"--gallery-embeddings {args.gallery_embeddings}",
    )
    return query, gallery, None, None


def _encoder(
    args: argparse.Namespace, query: ImageSet, gallery: ImageSet, device: str
) -> tuple[Encoder | None, Any, Any]:
    from recallkit.runner.encoders import (
        Preprocessing,
        callable_encoder,
        load_embeddings,
        torchvision_encoder,
    )

    if _precomputed(args):
        same = query is gallery or (query.has_paths() and query.items == gallery.items)
        if args.embeddings is not None:
            if not same:
                raise UsageError(
                    "--embeddings is for one image set evaluated against itself (--images); "
                    "with separate query and gallery images give --query-embeddings and "
                    "--gallery-embeddings."
                )
            array = load_embeddings(args.embeddings, what="embeddings")
            _rows(array, len(gallery), args.embeddings, _row_names(gallery))
            return None, array, array
        q = load_embeddings(args.query_embeddings, what="query embeddings")
        _rows(q, len(query), args.query_embeddings, "query " + _row_names(query))
        g = load_embeddings(args.gallery_embeddings, what="gallery embeddings")
        _rows(g, len(gallery), args.gallery_embeddings, "gallery " + _row_names(gallery))
        if q.shape[1] != g.shape[1]:
            raise UsageError(
                f"The query embeddings have dimension {q.shape[1]} but the gallery embeddings "
                f"have {g.shape[1]}."
            )
        return None, q, g
    preprocessing = Preprocessing(
        args.resize or None, args.crop or None, tuple(args.mean), tuple(args.std)
    )
    if args.model is not None:
        encoder = torchvision_encoder(
            args.model,
            args.weights,
            random_init=args.random_init,
            preprocessing=preprocessing,
            device=device,
            dtype=args.dtype,
            head=args.head,
            encoder_id=args.encoder_id,
        )
    else:
        encoder = callable_encoder(
            args.callable,
            preprocessing=preprocessing,
            device=device,
            dtype=args.dtype,
            encoder_id=args.encoder_id,
        )
    return _named_errors(encoder, _encoder_option(args)), None, None


def _precomputed(args: argparse.Namespace) -> bool:
    precomputed = [args.embeddings, args.query_embeddings, args.gallery_embeddings]
    return any(x is not None for x in precomputed)


def _check_encoder(args: argparse.Namespace) -> None:
    """One encoder is given, whole."""
    kinds = [_precomputed(args), args.model is not None, args.callable is not None]
    if sum(kinds) != 1:
        raise UsageError(
            "Give one encoder: --embeddings FILE (or --query-embeddings and "
            "--gallery-embeddings), --model NAME --weights FILE, or --callable MODULE:NAME."
        )
    if args.weights is not None and args.model is None:
        raise UsageError("--weights goes with --model.")
    if args.random_init and args.model is None:
        raise UsageError("--random-init goes with --model.")
    if args.random_init and args.weights is not None:
        raise UsageError("Give --weights FILE or --random-init, not both.")
    if args.encoder_id is not None and kinds[0]:
        raise UsageError("--encoder-id goes with --model or --callable (it names an encoder).")
    if kinds[0]:
        if args.embeddings is not None:
            if args.query_embeddings is not None or args.gallery_embeddings is not None:
                raise UsageError(
                    "Give --embeddings, or --query-embeddings with --gallery-embeddings, not both."
                )
        elif args.query_embeddings is None or args.gallery_embeddings is None:
            raise UsageError("--query-embeddings and --gallery-embeddings go together.")
        return
    if not all(math.isfinite(m) for m in args.mean):
        raise UsageError(f"--mean takes three finite numbers. Got {args.mean}.")
    if not all(math.isfinite(s) and s > 0 for s in args.std):
        raise UsageError(f"--std takes three positive finite numbers. Got {args.std}.")
    if args.model is not None and args.weights is None and not args.random_init:
        raise UsageError(
            "--model needs --weights FILE, a local state dict (nothing is downloaded), or "
            "--random-init for the model's random initialisation (fixed seed)."
        )


def _named_errors(encoder: Encoder, option: str) -> Encoder:
    """``encoder`` whose errors (from the user's code or model) are one line naming ``option``.

    Only the call of the encoder is wrapped: its identity, weights digest and cache key stay.
    """
    fn = encoder.fn

    def call(batch: list[Any]) -> Any:
        try:
            return fn(batch)
        except Exception as error:  # the encoder's own code: any error is the encoder's
            reason = str(error).strip() or "no message"
            raise UsageError(
                f"The encoder {option} raised {type(error).__name__} on a batch of "
                f"{len(batch)} image(s): {reason}"
            ) from error

    return dataclasses.replace(encoder, fn=call)


def _cache_dir(args: argparse.Namespace) -> Path:
    """The embedding cache folder: ``--cache-dir``, else ``$RECALLKIT_CACHE``, else the default.

    ``~`` and ``~user`` are expanded; one that names no known home folder is a UsageError
    naming the option or the variable.
    """
    if args.cache_dir is not None:
        text, source = args.cache_dir, "--cache-dir"
    elif os.environ.get("RECALLKIT_CACHE"):
        text, source = os.environ["RECALLKIT_CACHE"], "The environment variable RECALLKIT_CACHE"
    else:
        return default_cache_dir()
    if not text.strip():
        raise UsageError(f"{source} is empty; give a folder (or --no-cache).")
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        user = text[1:].split("/", 1)[0]
        whose = f"user {user!r}, who is not known here" if user else "the current user"
        raise UsageError(
            f"{source} '{text}' starts with the home folder of {whose}; give the folder's full "
            "path."
        )
    return Path(expanded)


def _row_names(images: ImageSet) -> str:
    return "labels" if images.meta.get("arrays") else "images"


def _rows(array: Any, expected: int, path: str, what: str) -> None:
    if array.shape[0] != expected:
        order = (
            "row i must be labelled by line or entry i of the labels file"
            if what.endswith("labels")
            else "row i must be the embedding of image i (in manifest or sorted folder order)"
        )
        raise UsageError(
            f"The embeddings file '{path}' has {array.shape[0]} rows but there are {expected} "
            f"{what}; {order}."
        )


def _check_extras(args: argparse.Namespace) -> None:
    """What the chosen encoder and outputs import beyond the core install, checked before
    anything is read or written: one line naming the extra when it is missing or broken.
    Saved embeddings (with their labels, images or a benchmark) need none of it."""
    if args.model is not None:
        modules = ["torchvision", "PIL"]
        if args.weights is not None and Path(args.weights).suffix.lower() == ".safetensors":
            modules.append("safetensors")
        require("recallkit evaluate --model", *modules, extra="images")
    elif args.callable is not None:
        require("recallkit evaluate --callable", "PIL", extra="images")
    suffix = Path(args.show_out).suffix.lower() if args.show_out is not None else ""
    if suffix in (".png", ".html", ".htm"):  # _check_outputs refused any other
        from recallkit.runner.grid import check_grid

        check_grid(suffix, "recallkit evaluate --show-out")


def _check_outputs(args: argparse.Namespace) -> None:
    if args.show_topk is not None and args.show_out is None:
        raise UsageError("--show-topk needs --show-out FILE (.png or .html).")
    if args.show_out is not None:
        suffix = Path(args.show_out).suffix.lower()
        if suffix not in (".png", ".html", ".htm"):
            raise UsageError(f"--show-out must end in .png or .html. Got '{args.show_out}'.")
    if args.worst < 0:
        raise UsageError(f"--worst takes a number of classes, 0 or more. Got {args.worst}.")
    for option in ("json", "history", "show_out"):
        check_output_file(getattr(args, option), "--" + option.replace("_", "-"))
    if args.history is not None and Path(args.history).exists():
        read_history(args.history)  # a damaged history stops the run before anything is written


def main(args: argparse.Namespace) -> int:
    """Run ``recallkit evaluate`` (its arguments [`check`][check]ed); return the exit status."""
    from recallkit.runner.encoders import resolve_device
    from recallkit.runner.pipeline import (
        format_worst_classes,
        num_query_classes,
        run_evaluation,
        run_record,
        worst_classes,
    )

    ks = parse_ks(args.ks)  # every argument is checked (check) before this runs
    query, gallery, protocol_ks, benchmark = _data(args)
    ks = ks or protocol_ks or (1, 5, 10)
    arrays = bool(query.meta.get("arrays"))
    if arrays and args.show_out is not None:
        raise UsageError("--show-out draws the failing queries' images; saved arrays have none.")
    device = usable_device(resolve_device(args.device))
    encoder, q_emb, g_emb = _encoder(args, query, gallery, device)
    # One neighbour at least: each query's nearest label goes to the run file.
    neighbors = max(1, (args.show_topk or 8) if args.show_out else 0)
    cache_dir = None
    if encoder is not None and not args.no_cache:
        cache_dir = _cache_dir(args)
    progress = False if args.quiet else None
    with warnings_as_lines("evaluate", _named(args)), warnings.catch_warnings():
        # Every query lone: said below in one line, not also as the library's warning.
        warnings.simplefilter("ignore", LoneQueriesWarning)
        run = run_evaluation(
            query,
            gallery,
            encoder,
            ks,
            metrics=args.metrics or (),
            query_embeddings=q_emb,
            gallery_embeddings=g_emb,
            batch_size=args.batch_size,
            cache_dir=cache_dir,
            skip_bad=args.skip_bad,
            progress=progress,
            neighbors=neighbors,
            query_in_reference=True if arrays and query is gallery else None,
            **{**_options.from_flags(args, "label"), "device": device},
        )
    unchanged_inputs("evaluated")  # a file rewritten meanwhile: no report, no output
    result = run.result
    item = "row" if arrays else "image"
    lone = (result.definitions or {}).get("lone_queries", "skip")
    if result.num_evaluated == 0 and lone != "zero":
        raise UsageError(
            f"None of the {result.num_queries} queries has a gallery {item} with its label "
            "(after excluding itself), so every metric is undefined; --lone-queries zero counts "
            "such queries as 0."
        )
    worst = worst_classes(run, args.worst)
    print(result.report())
    if benchmark is not None and not benchmark["complete"]:
        print()
        print("[benchmark]")
        print(
            f"  {benchmark['title']}: incomplete (a partial or modified copy); the numbers are "
            "not comparable with published ones"
        )
    if worst:
        print()
        print(format_worst_classes(worst, num_query_classes(run), result.ks[0]))
    sys.stdout.flush()
    if result.num_excluded:
        counted = (
            "count as 0 (--lone-queries zero)"
            if lone == "zero"
            else "are excluded (counted in num_excluded of the JSON)"
        )
        print(
            f"note: {result.num_excluded} of {result.num_queries} queries have no gallery {item} "
            f"with their label and {counted}.",
            file=sys.stderr,
        )
    internal = ("func", "parameters")
    options = {k: jsonable(v) for k, v in vars(args).items() if k not in internal}
    sources: dict[str, Any] = {"options": options}
    if benchmark is not None:
        sources["benchmark"] = benchmark
    record = run_record(
        run, tag=args.tag, worst=worst, sources=sources, absolute_paths=args.absolute_paths
    )
    _write_outputs(args, run, record)
    return 0


def _cannot_write(what: str, path: str, error: OSError, written: Sequence[str] = ()) -> UsageError:
    reason = error.strerror or str(error)
    if written:
        return UsageError(
            f"Cannot write the {what} '{path}': {reason}. Written before it: {', '.join(written)}."
        )
    return UsageError(f"Cannot write the {what} '{path}': {reason}. Nothing was written.")


def _write_outputs(args: argparse.Namespace, run: Any, record: dict[str, Any]) -> None:
    """Write the grid, the run file and the history line: all of them, or none.

    The grid and the run file are first written in full to temporary files; then the history
    line is appended (under its lock; cut back if it fails); only then are the temporary
    files renamed into place. A failure on the way (a full disk) leaves no output, except a
    rename that fails (the target turned into a folder meanwhile): the error then names what
    was already written, the history line and the outputs renamed before it. Ctrl-C
    while the temporary files are written leaves none, and once the history line is being
    appended it waits until every output is in place.
    """
    from recallkit.runner.pipeline import dumps_record, render_failure_grid

    done: list[str] = []
    with Staging() as staging:
        if args.show_out is not None:
            with warnings_as_lines("evaluate", _named(args)):
                data = render_failure_grid(
                    run,
                    Path(args.show_out).suffix,
                    k=args.show_topk or 8,
                    queries=args.show_queries,
                )
            unchanged_inputs("evaluated")  # the images drawn too
            try:
                staging.add(args.show_out, lambda h: h.write(data), "wb")
            except OSError as error:
                raise _cannot_write("failure grid", args.show_out, error) from None
            done.append(f"failure grid: {args.show_out}")
        if args.json is not None:
            text = dumps_record(record)
            try:
                staging.add(args.json, lambda h: h.write(text), "w")
            except OSError as error:
                raise _cannot_write("run file", args.json, error) from None
            done.append(f"run file: {args.json}")
        # From here on Ctrl-C waits until every output is in place: all of them, or none.
        with interrupts_deferred():
            if args.history is not None:
                try:
                    with warnings_as_lines("evaluate", _named(args)):
                        count = append_history(args.history, record)
                except OSError as error:
                    raise _cannot_write("history file", args.history, error) from None
                runs = "run" if count == 1 else "runs"
                done.append(f"history: {args.history} ({count} {runs})")
            outputs = [str(path) for path in (args.show_out, args.json) if path is not None]
            renamed = [str(resolve_target(path)) for path in outputs]  # in the order of commit
            try:
                staging.commit()
            except OSError as error:
                target = str(error.filename2 or error.filename)
                at = renamed.index(target) if target in renamed else 0
                before = [args.history] if args.history is not None else []
                raise _cannot_write("output", target, error, before + outputs[:at]) from None
    for line in done:
        print(line, file=sys.stderr)
