"""The benchmark protocols: ``cirr``, ``circo``, ``fashioniq``, ``genecis`` and ``image-text``.

Each scores saved embeddings (``.npy``/``.pt``/``.safetensors``) or a similarity matrix with the
benchmark's protocol (:mod:`recallkit.protocols`), prints the table, writes ``--json`` and, for
the benchmarks with a test server (CIRR, CIRCO), the submission files. All files are written
atomically. Each sub-command maps the protocol functions' parameters to its options
(``parameters``), so that a library error names the option at fault.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from recallkit._lazy import Module
from recallkit._pinned import read_file
from recallkit.commands import _protocol_io as io
from recallkit.commands._args import (
    check_output_file,
    check_output_folder,
    positive_int,
    unchanged_inputs,
)
from recallkit.errors import UsageError
from recallkit.protocols import _names

# The protocol modules load torch: imported when a command runs, not for its help.
circo = Module("recallkit.protocols.circo")
cirr = Module("recallkit.protocols.cirr")
fashioniq = Module("recallkit.protocols.fashioniq")
genecis = Module("recallkit.protocols.genecis")
image_text = Module("recallkit.protocols.image_text")

RAW = argparse.RawDescriptionHelpFormatter


def register(subparsers: Any) -> None:
    """Add the ``cirr``, ``circo``, ``fashioniq``, ``genecis`` and ``image-text`` sub-commands."""
    _register_cirr(subparsers)
    _register_circo(subparsers)
    _register_fashioniq(subparsers)
    _register_genecis(subparsers)
    _register_image_text(subparsers)


def _embeddings_or_scores(parser: argparse.ArgumentParser, rows: str, columns: str) -> None:
    parser.add_argument("--queries", metavar="FILE", help=f"query embeddings, one row per {rows}")
    parser.add_argument("--images", metavar="FILE", help=f"image embeddings, one row per {columns}")
    parser.add_argument("--scores", metavar="FILE", help=f"({rows}, {columns}) similarity matrix")


def _inputs(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """``(queries, images, None)`` or ``(None, None, scores)`` from the command line."""
    if args.scores and (args.queries or args.images):
        raise UsageError("give either --scores or --queries with --images, not both")
    if args.scores:
        return None, None, io.load_array(args.scores, "scores")
    if not (args.queries and args.images):
        raise UsageError("give --queries and --images (embeddings), or --scores (a matrix)")
    queries = io.load_array(args.queries, "query embeddings")
    images = io.load_array(args.images, "image embeddings")
    io.same_dimension(queries, images, "--queries", "--images")
    return queries, images, None


# ----------------------------------------------------------------------------------------- CIRR


def _register_cirr(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cirr",
        help="CIRR recall@K, recall_subset@K, avg; test-server submission files",
        description="CIRR validation metrics (reference removed from the candidates) and the "
        "CIRR server's submission files.",
        epilog="examples:\n"
        "  recallkit cirr --root CIRR --split val --queries q.npy --images img.npy\n"
        "  recallkit cirr --root CIRR --split test1 --queries q.npy --images img.npy "
        "--submission-dir out/\n\n"
        "Query rows follow captions/cap.rc2.<split>.json, image rows image_splits/"
        "split.rc2.<split>.json.",
        formatter_class=RAW,
    )
    parser.add_argument("--root", required=True, help="CIRR folder (captions/, image_splits/)")
    parser.add_argument("--split", default="val", help="val (default), test1 or train")
    parser.add_argument(
        "--version",
        default="rc2",
        help="annotation version: reads captions/cap.VERSION.SPLIT.json and "
        "image_splits/split.VERSION.SPLIT.json (default rc2)",
    )
    _embeddings_or_scores(parser, "query", "image")
    parser.add_argument(
        "--target",
        choices=("hard", "soft"),
        default="hard",
        help="hard: target_hard (default, CLIP4Cir/SEARLE); soft: CIRPLANT's target_soft",
    )
    parser.add_argument(
        "--subset-ks",
        type=int,
        nargs="+",
        default=[1, 2, 3],
        metavar="K",
        help="K values of recall_subset@K, within each query's image subset (default 1 2 3)",
    )
    parser.add_argument(
        "--submission-dir",
        metavar="DIR",
        help="write cirr_<split>_recall.json (top 50) and _recall_subset.json (top 3)",
    )
    io.add_common(parser, (1, 5, 10, 50))
    parser.set_defaults(func=_run_cirr, parameters=CIRR_PARAMETERS)


#: The CIRR functions' parameters -> the options of ``recallkit cirr``.
CIRR_PARAMETERS = {
    **io.PARAMETERS,
    "root": "--root",
    "split": "--split",
    "version": "--version",
    "query": "--queries",
    "images": "--images",
    "scores": "--scores",
    "subset_ks": "--subset-ks",
    "target": "--target",
    "data": "the CIRR split of --root",
}


def _run_cirr(args: argparse.Namespace) -> int:
    io.check_common(args)
    check_output_folder(args.submission_dir, "--submission-dir")
    root, name = Path(args.root), f"{args.version}.{args.split}.json"
    with io.reading(root / "image_splits" / f"split.{name}", root / "captions" / f"cap.{name}"):
        data = cirr.read_cirr(args.root, args.split, version=args.version)
    queries, images, scores = _inputs(args)
    if not data.has_targets and not args.submission_dir:
        raise UsageError(f"split {args.split!r} has no targets to score; pass --submission-dir")
    options = io.engine_options(args)
    if data.has_targets:
        if scores is not None:
            result = cirr.cirr_recall_from_scores(
                scores, data, ks=args.ks, subset_ks=args.subset_ks, target=args.target
            )
        else:
            result = cirr.cirr_recall(
                queries,
                images,
                data,
                ks=args.ks,
                subset_ks=args.subset_ks,
                target=args.target,
                **options,
            )
        io.report(result, args.json)
    if args.submission_dir:
        k = cirr.SUBMISSION_SIZES["recall"]
        if scores is not None:
            recall, subset = cirr.cirr_rankings_from_scores(scores, data, k=k)
        else:
            recall, subset = cirr.cirr_rankings(queries, images, data, k=k, **options)
        folder = Path(args.submission_dir)
        unchanged_inputs("evaluated")
        for metric, rankings in (("recall", recall), ("recall_subset", subset)):
            path = folder / f"cirr_{args.split}_{metric}.json"
            try:
                cirr.write_cirr_submission(path, rankings, metric=metric, version=args.version)
            except OSError as error:
                raise io.cannot_write("--submission-dir", path, error) from None
            print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------------------------------- CIRCO


def _register_circo(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "circo",
        help="CIRCO mAP@K, recall@K and mAP@10 per semantic aspect; test-server submission file",
        description="CIRCO mAP@K (official divisor min(K, R)), recall@K on the primary target and, "
        "for annotations with semantic aspects (val), mAP@10 per aspect, as the evaluation "
        "server reports them; from embeddings, a similarity matrix or a ranked-list (submission) "
        "file.",
        epilog="examples:\n"
        "  recallkit circo --annotations CIRCO --split val --queries q.npy --images img.npy \\\n"
        "      --image-ids CIRCO/COCO2017_unlabeled/annotations/image_info_unlabeled2017.json\n"
        "  recallkit circo --annotations CIRCO/annotations/val.json --predictions val_ranks.json\n"
        "  recallkit circo --annotations CIRCO --split test --queries q.npy --images img.npy \\\n"
        "      --image-ids ids.npy --submission circo_test.json",
        formatter_class=RAW,
    )
    parser.add_argument(
        "--annotations", required=True, help="CIRCO folder or annotations/<split>.json"
    )
    parser.add_argument(
        "--split",
        default="val",
        choices=("val", "test"),
        help="val (default; scored) or test (submission file only)",
    )
    _embeddings_or_scores(parser, "query", "image id")
    parser.add_argument(
        "--image-ids",
        metavar="FILE",
        help="the images' COCO ids in row order (.npy, .json list or COCO image info, .txt)",
    )
    parser.add_argument(
        "--predictions",
        metavar="JSON",
        help="score a ranked-list file {query id: [image ids]} instead of embeddings",
    )
    parser.add_argument(
        "--divisor",
        choices=("min_k_r", "r"),
        default="min_k_r",
        help="AP@K divisor: min(K, R) (official, default) or R (SQUARE recipe)",
    )
    parser.add_argument(
        "--exclude-reference",
        action="store_true",
        help="remove the reference image from the candidates (not official)",
    )
    parser.add_argument("--submission", metavar="JSON", help="write the top-50 submission file")
    io.add_common(parser, (5, 10, 25, 50))
    parser.set_defaults(func=_run_circo, parameters=CIRCO_PARAMETERS)


#: The CIRCO functions' parameters -> the options of ``recallkit circo``.
CIRCO_PARAMETERS = {
    **io.PARAMETERS,
    "path": "--annotations",
    "split": "--split",
    "query": "--queries",
    "images": "--images",
    "scores": "--scores",
    "image_ids": "--image-ids",
    "predictions": "--predictions",
    "divisor": "--divisor",
    "data": "the CIRCO split of --annotations",
}


def _run_circo(args: argparse.Namespace) -> int:
    io.check_common(args)
    check_output_file(args.submission, "--submission")
    annotations = Path(args.annotations)
    with io.reading(annotations, annotations / "annotations" / f"{args.split}.json"):
        data = circo.read_circo(args.annotations, args.split)
    if args.predictions:
        if args.scores or args.queries or args.images or args.submission:
            raise UsageError("--predictions scores a ranked-list file alone; drop the other inputs")
        predictions = io.load_json(args.predictions, "predictions")
        result = circo.circo_metrics_from_predictions(
            predictions, data, ks=args.ks, divisor=args.divisor
        )
        return io.report(result, args.json)
    queries, images, scores = _inputs(args)
    if not args.image_ids:
        raise UsageError("--image-ids is required with --queries/--images or --scores")
    ids = io.load_ids(args.image_ids)
    if not data.has_targets and not args.submission:
        raise UsageError(f"split {args.split!r} has no ground truths to score; pass --submission")
    options = io.engine_options(args)
    common = {"exclude_reference": args.exclude_reference}
    if data.has_targets:
        if scores is not None:
            result = circo.circo_metrics_from_scores(
                scores, ids, data, ks=args.ks, divisor=args.divisor, **common
            )
        else:
            result = circo.circo_metrics(
                queries,
                images,
                ids,
                data,
                ks=args.ks,
                divisor=args.divisor,
                **common,
                **options,
            )
        io.report(result, args.json)
    if args.submission:
        if scores is not None:
            rankings = circo.circo_rankings_from_scores(scores, ids, data, **common)
        else:
            rankings = circo.circo_rankings(queries, images, ids, data, **common, **options)
        unchanged_inputs("evaluated")
        try:
            circo.write_circo_submission(args.submission, rankings)
        except OSError as error:
            raise io.cannot_write("--submission", args.submission, error) from None
        print(f"wrote {args.submission}")
    return 0


# ------------------------------------------------------------------------------------ FashionIQ


def _register_fashioniq(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fashioniq",
        help="FashionIQ recall@10/50 per category and their means (validation)",
        description="FashionIQ validation: per-category gallery, recall@K per category, the mean "
        "over dress/shirt/toptee and the average of the means.",
        epilog="examples:\n"
        "  recallkit fashioniq --root fashionIQ --category dress q_dress.npy g_dress.npy \\\n"
        "      --category shirt q_shirt.npy g_shirt.npy --category toptee q_top.npy g_top.npy\n"
        "  recallkit fashioniq --root fashionIQ --category-scores dress s_dress.npy ...\n\n"
        "Query rows follow captions/cap.<category>.val.json, gallery rows image_splits/"
        "split.<category>.val.json.",
        formatter_class=RAW,
    )
    parser.add_argument("--root", required=True, help="FashionIQ folder (captions/, image_splits/)")
    parser.add_argument(
        "--category",
        nargs=3,
        action="append",
        default=[],
        metavar=("NAME", "QUERIES", "GALLERY"),
        help="a category's embeddings",
    )
    parser.add_argument(
        "--category-scores",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "SCORES"),
        help="a category's (queries, gallery) matrix",
    )
    parser.add_argument(
        "--exclude-reference",
        action="store_true",
        help="remove the reference image from its gallery (not the usual protocol)",
    )
    io.add_common(parser, (10, 50))
    parser.set_defaults(func=_run_fashioniq, parameters=FASHIONIQ_PARAMETERS)


def _category_option(args: argparse.Namespace) -> str:
    return "--category" if args.category else "--category-scores"


#: The FashionIQ functions' parameters -> the options of ``recallkit fashioniq``.
FASHIONIQ_PARAMETERS = {
    **io.PARAMETERS,
    "root": "--root",
    "split": "the split",
    "categories": lambda args: f"{_category_option(args)} NAME",
    "category": lambda args: f"{_category_option(args)} NAME",
    "queries": "--category QUERIES",
    "galleries": "--category GALLERY",
    "scores": "--category-scores SCORES",
    "data": "the FashionIQ split of --root",
}


def _check_names(names: list[str]) -> None:
    for name in names:
        if name not in _names.FASHIONIQ_CATEGORIES:
            raise UsageError(
                f"unknown FashionIQ category {name!r}; the categories are "
                f"{', '.join(_names.FASHIONIQ_CATEGORIES)}"
            )
    if len(set(names)) != len(names):
        raise UsageError("each FashionIQ category may be given once")


def _run_fashioniq(args: argparse.Namespace) -> int:
    if bool(args.category) == bool(args.category_scores):
        raise UsageError(
            "give --category NAME QUERIES GALLERY or --category-scores NAME SCORES "
            "(one per category), not both"
        )
    io.check_common(args)
    entries = args.category or args.category_scores
    names = [entry[0] for entry in entries]
    _check_names(names)
    root = Path(args.root)
    files = [
        root / folder / f"{prefix}.{name}.val.json"
        for name in names
        for folder, prefix in (("image_splits", "split"), ("captions", "cap"))
    ]
    with io.reading(*files):
        data = fashioniq.read_fashioniq(args.root, names)
    common = {"ks": args.ks, "exclude_reference": args.exclude_reference}
    if args.category:
        queries = {n: io.load_array(q, f"{n} query embeddings") for n, q, _ in args.category}
        galleries = {n: io.load_array(g, f"{n} gallery embeddings") for n, _, g in args.category}
        for n in queries:
            io.same_dimension(
                queries[n], galleries[n], f"--category {n} QUERIES", f"--category {n} GALLERY"
            )
        result = fashioniq.fashioniq_recall(
            queries,
            galleries,
            data,
            **io.engine_options(args),
            **common,
        )
    else:
        scores = {n: io.load_array(s, f"{n} scores") for n, s in args.category_scores}
        result = fashioniq.fashioniq_recall_from_scores(scores, data, **common)
    return io.report(result, args.json)


# -------------------------------------------------------------------------------------- GeneCIS


def _register_genecis(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "genecis",
        help="GeneCIS recall@1/2/3 per task and the average recall@1",
        description="GeneCIS: each sample ranks its own gallery [target, *gallery]. Ties: by "
        "default the target ranks below every distractor with an equal score (pessimistic); "
        "--ties official takes the official script's order (target first among equal scores), "
        "which reproduces the published numbers.",
        epilog="examples:\n"
        "  recallkit genecis --root genecis --task focus_attribute fa.pt \\\n"
        "      --task change_object co.npy\n"
        "  recallkit genecis --root genecis --task-embeddings focus_object q.npy cands.npy\n\n"
        "Scores are (samples, 1 + gallery), target in column 0: the matrix the official code\n"
        "saves with --pred_save_name. Candidate embeddings are (samples, 1 + gallery, d).",
        formatter_class=RAW,
    )
    parser.add_argument("--root", required=True, help="folder holding <task>.json")
    parser.add_argument(
        "--task",
        nargs=2,
        action="append",
        default=[],
        metavar=("TASK", "SCORES"),
        help=f"a task ({', '.join(_names.GENECIS_TASKS)}) and its (samples, 1 + gallery) "
        "score file, target in column 0; repeat per task",
    )
    parser.add_argument(
        "--task-embeddings",
        nargs=3,
        action="append",
        default=[],
        metavar=("TASK", "QUERIES", "CANDIDATES"),
        help="a task, its (samples, d) query embeddings and its (samples, 1 + gallery, d) "
        "candidate embeddings, target first; repeat per task",
    )
    parser.add_argument(
        "--ties",
        choices=tuple(_names.TIES),
        default="pessimistic",
        help="pessimistic (default): the target ranks below equal distractors; official: the "
        "official script's column order, target first (reproduces the published numbers)",
    )
    io.add_common(parser, (1, 2, 3))
    parser.set_defaults(func=_run_genecis, parameters=GENECIS_PARAMETERS)


#: The GeneCIS functions' parameters -> the options of ``recallkit genecis``.
GENECIS_PARAMETERS = {
    **io.PARAMETERS,
    "path": "the task file under --root",
    "task": "--task TASK",
    "scores": "--task SCORES",
    "query": "--task-embeddings QUERIES",
    "candidates": "--task-embeddings CANDIDATES",
    "ties": "--ties",
    "gallery_sizes": "the gallery sizes of the task file",
}


def _run_genecis(args: argparse.Namespace) -> int:
    entries = [(t[0], t[1:]) for t in args.task] + [(t[0], t[1:]) for t in args.task_embeddings]
    if not entries:
        raise UsageError(
            "give at least one --task TASK SCORES or --task-embeddings TASK QUERIES CANDIDATES"
        )
    names = [name for name, _ in entries]
    for name in names:
        if name not in _names.GENECIS_TASKS:
            raise UsageError(
                f"unknown GeneCIS task {name!r}; the tasks are {', '.join(_names.GENECIS_TASKS)}"
            )
    if len(set(names)) != len(names):
        raise UsageError("each GeneCIS task may be given once")
    if 1 not in args.ks:
        raise UsageError(
            f"--ks must include 1: the GeneCIS summary is the average recall@1. Got "
            f"{' '.join(map(str, args.ks))}."
        )
    io.check_common(args)
    results = {}
    for name, files in entries:
        path = Path(args.root) / f"{name}.json"
        with io.reading(path):
            task = genecis.read_genecis(path, name)
        sizes = task.gallery_sizes
        if len(files) == 1:
            scores = io.load_array(files[0], f"{name} scores", allow_nan=True)
            _check_layout(scores.shape, len(sizes), int(sizes.max()), name)
            results[name] = genecis.genecis_recall(
                scores[:, : int(sizes.max())],
                args.ks,
                gallery_sizes=sizes,
                ties=args.ties,
                task=name,
            )
        else:
            queries = io.load_array(files[0], f"{name} query embeddings")
            candidates = io.load_array(
                files[1], f"{name} candidate embeddings", ndims=(3,), allow_nan=True
            )
            _check_layout(candidates.shape, len(sizes), int(sizes.max()), name)
            io.same_dimension(
                queries,
                candidates,
                f"--task-embeddings {name} QUERIES",
                f"--task-embeddings {name} CANDIDATES",
            )
            results[name] = genecis.genecis_recall_from_embeddings(
                queries,
                _zero_padding(candidates[:, : int(sizes.max())], sizes),
                args.ks,
                gallery_sizes=sizes,
                ties=args.ties,
                **io.engine_options(args),
                task=name,
            )
    summary = genecis.genecis_summary(results)
    return io.report(summary, args.json)


def _check_layout(shape: tuple[int, ...], samples: int, width: int, task: str) -> None:
    if shape[0] != samples or shape[1] < width:
        raise UsageError(
            f"the {task} input has shape {tuple(shape)}; the task has {samples} samples with up "
            f"to {width} candidates each (target first), so it needs {samples} rows and at least "
            f"{width} columns"
        )


def _zero_padding(candidates: Any, sizes: Any) -> Any:
    """Candidate embeddings with padding rows (past each gallery size) set to a finite value."""
    valid = np.arange(candidates.shape[1])[None, :] < np.asarray(sizes)[:, None]
    if np.isnan(candidates[valid]).any():
        raise UsageError("the candidate embeddings have a NaN inside a gallery")
    out = np.where(valid[:, :, None], candidates, 1.0)
    return out.astype(candidates.dtype)


# ----------------------------------------------------------------------------------- image-text


IMAGE_TEXT_EPILOG = """examples:
  recallkit image-text --karpathy dataset_coco.json --images img.npy --texts txt.npy
  recallkit image-text --karpathy dataset_flickr30k.json --scores sim.npy --json out.json

Embedding rows follow the Karpathy file: test images in file order, and each image's captions
in order (image i's captions before image i+1's). --scores is (images, captions)."""


def _register_image_text(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "image-text",
        help="image-text retrieval recall@K (COCO 5k, Flickr30k 1k)",
        description="Image→text and text→image recall@K, mean and median rank (VSE++ convention).",
        epilog=IMAGE_TEXT_EPILOG,
        formatter_class=RAW,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--karpathy", metavar="JSON", help="dataset_coco.json / dataset_flickr30k.json"
    )
    source.add_argument(
        "--caption-image",
        metavar="FILE",
        help="instead of --karpathy: each caption's image row (.npy or .json list)",
    )
    parser.add_argument(
        "--split",
        default="test",
        choices=("test", "val", "train", "restval"),
        help="the Karpathy split to score (default test)",
    )
    parser.add_argument(
        "--captions-per-image",
        type=positive_int("--captions-per-image"),
        default=None,
        metavar="N",
        help="keep each image's first N captions (VSE++ uses 5; default: all)",
    )
    parser.add_argument(
        "--no-count-check",
        action="store_true",
        help="accept a split whose image/caption counts differ from the published ones",
    )
    parser.add_argument("--images", metavar="FILE", help="image embeddings (.npy/.pt/.safetensors)")
    parser.add_argument("--texts", metavar="FILE", help="caption embeddings")
    parser.add_argument("--scores", metavar="FILE", help="(images, captions) similarity matrix")
    io.add_common(parser, (1, 5, 10))
    parser.set_defaults(func=_run_image_text, parameters=IMAGE_TEXT_PARAMETERS)


#: The image-text functions' parameters -> the options of ``recallkit image-text``.
IMAGE_TEXT_PARAMETERS = {
    **io.PARAMETERS,
    "path": "--karpathy",
    "split": "--split",
    "captions_per_image": "--captions-per-image",
    "images": "--images",
    "texts": "--texts",
    "scores": "--scores",
    "caption_image": lambda args: (
        "--caption-image" if args.caption_image else "the --karpathy split"
    ),
}


def _caption_image(args: argparse.Namespace) -> tuple[np.ndarray, str]:
    if args.karpathy:
        with io.reading(args.karpathy):
            split = image_text.read_karpathy_split(
                args.karpathy,
                args.split,
                captions_per_image=args.captions_per_image,
                check_counts=not args.no_count_check,
            )
        return split.caption_image, f"{split.dataset} {split.split}"
    path = args.caption_image
    if path.endswith(".json"):
        try:
            values = json.loads(read_file(path, f"The caption-image file '{path}'").decode())
        except (OSError, ValueError) as error:
            raise UsageError(f"the caption-image file '{path}' cannot be read: {error}") from None
        if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values
        ):
            raise UsageError(f"the caption-image file '{path}' must hold a list of image rows")
        return np.asarray(values, dtype=np.int64), "image-text"
    return io.load_array(path, "caption-image", ndims=(1,), integer=True), "image-text"


def _run_image_text(args: argparse.Namespace) -> int:
    if args.scores and (args.images or args.texts):
        raise UsageError("give either --scores or --images with --texts, not both")
    if not args.scores and not (args.images and args.texts):
        raise UsageError("give --images and --texts (embeddings), or --scores (a matrix)")
    io.check_common(args)
    caption_image, name = _caption_image(args)
    if args.scores:
        scores = io.load_array(args.scores, "scores")
        result = image_text.image_text_recall_from_scores(scores, caption_image, args.ks, name=name)
    else:
        images = io.load_array(args.images, "image embeddings")
        texts = io.load_array(args.texts, "caption embeddings")
        io.same_dimension(images, texts, "--images", "--texts")
        result = image_text.image_text_recall(
            images,
            texts,
            caption_image,
            args.ks,
            **io.engine_options(args),
            name=name,
        )
    return io.report(result, args.json)
