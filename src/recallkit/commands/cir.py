"""``recallkit cirr | circo | fashioniq | genecis``: composed image retrieval benchmarks.

Each scores saved embeddings (``.npy``/``.pt``/``.safetensors``) or a similarity matrix with the
benchmark's protocol (:mod:`recallkit.protocols`), prints the table, writes ``--json`` and, for
the benchmarks with a test server (CIRR, CIRCO), the submission files. All files are written
atomically.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from recallkit.commands import _protocol_io as io
from recallkit.errors import UsageError
from recallkit.protocols import circo, cirr, fashioniq, genecis

RAW = argparse.RawDescriptionHelpFormatter


def register(subparsers: Any) -> None:
    """Add the ``cirr``, ``circo``, ``fashioniq`` and ``genecis`` sub-commands."""
    _register_cirr(subparsers)
    _register_circo(subparsers)
    _register_fashioniq(subparsers)
    _register_genecis(subparsers)


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
    return (
        io.load_array(args.queries, "query embeddings"),
        io.load_array(args.images, "image embeddings"),
        None,
    )


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
    parser.set_defaults(func=_run_cirr)


def _run_cirr(args: argparse.Namespace) -> int:
    data = io.user_errors(lambda: cirr.read_cirr(args.root, args.split, version=args.version))
    queries, images, scores = _inputs(args)
    if not data.has_targets and not args.submission_dir:
        raise UsageError(f"split {args.split!r} has no targets to score; pass --submission-dir")
    options = {"metric": args.metric, "chunk_size": args.chunk_size, "device": args.device}
    if data.has_targets:
        if scores is not None:
            result = io.user_errors(
                lambda: cirr.cirr_recall_from_scores(
                    scores, data, ks=args.ks, subset_ks=args.subset_ks, target=args.target
                )
            )
        else:
            result = io.user_errors(
                lambda: cirr.cirr_recall(
                    queries,
                    images,
                    data,
                    ks=args.ks,
                    subset_ks=args.subset_ks,
                    target=args.target,
                    **options,
                )
            )
        io.report(result, args.json)
    if args.submission_dir:
        k = cirr.SUBMISSION_SIZES["recall"]
        if scores is not None:
            recall, subset = io.user_errors(
                lambda: cirr.cirr_rankings_from_scores(scores, data, k=k)
            )
        else:
            recall, subset = io.user_errors(
                lambda: cirr.cirr_rankings(queries, images, data, k=k, **options)
            )
        folder = Path(args.submission_dir)
        for metric, rankings in (("recall", recall), ("recall_subset", subset)):
            path = folder / f"cirr_{args.split}_{metric}.json"
            cirr.write_cirr_submission(path, rankings, metric=metric, version=args.version)
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
    parser.set_defaults(func=_run_circo)


def _run_circo(args: argparse.Namespace) -> int:
    data = io.user_errors(lambda: circo.read_circo(args.annotations, args.split))
    if args.predictions:
        if args.scores or args.queries or args.images or args.submission:
            raise UsageError("--predictions scores a ranked-list file alone; drop the other inputs")
        predictions = io.user_errors(
            lambda: json.loads(Path(args.predictions).read_text(encoding="utf-8"))
        )
        result = io.user_errors(
            lambda: circo.circo_metrics_from_predictions(
                predictions, data, ks=args.ks, divisor=args.divisor
            )
        )
        return io.report(result, args.json)
    queries, images, scores = _inputs(args)
    if not args.image_ids:
        raise UsageError("--image-ids is required with --queries/--images or --scores")
    ids = io.load_ids(args.image_ids)
    if not data.has_targets and not args.submission:
        raise UsageError(f"split {args.split!r} has no ground truths to score; pass --submission")
    options = {"metric": args.metric, "chunk_size": args.chunk_size, "device": args.device}
    common = {"exclude_reference": args.exclude_reference}
    if data.has_targets:
        if scores is not None:
            result = io.user_errors(
                lambda: circo.circo_metrics_from_scores(
                    scores, ids, data, ks=args.ks, divisor=args.divisor, **common
                )
            )
        else:
            result = io.user_errors(
                lambda: circo.circo_metrics(
                    queries,
                    images,
                    ids,
                    data,
                    ks=args.ks,
                    divisor=args.divisor,
                    **common,
                    **options,
                )
            )
        io.report(result, args.json)
    if args.submission:
        if scores is not None:
            rankings = io.user_errors(
                lambda: circo.circo_rankings_from_scores(scores, ids, data, **common)
            )
        else:
            rankings = io.user_errors(
                lambda: circo.circo_rankings(queries, images, ids, data, **common, **options)
            )
        circo.write_circo_submission(args.submission, rankings)
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
    parser.set_defaults(func=_run_fashioniq)


def _check_names(names: list[str]) -> None:
    for name in names:
        if name not in fashioniq.FASHIONIQ_CATEGORIES:
            raise UsageError(
                f"unknown FashionIQ category {name!r}; the categories are "
                f"{', '.join(fashioniq.FASHIONIQ_CATEGORIES)}"
            )
    if len(set(names)) != len(names):
        raise UsageError("each FashionIQ category may be given once")


def _run_fashioniq(args: argparse.Namespace) -> int:
    if bool(args.category) == bool(args.category_scores):
        raise UsageError(
            "give --category NAME QUERIES GALLERY or --category-scores NAME SCORES "
            "(one per category), not both"
        )
    entries = args.category or args.category_scores
    names = [entry[0] for entry in entries]
    _check_names(names)
    data = io.user_errors(lambda: fashioniq.read_fashioniq(args.root, names))
    common = {"ks": args.ks, "exclude_reference": args.exclude_reference}
    if args.category:
        queries = {n: io.load_array(q, f"{n} query embeddings") for n, q, _ in args.category}
        galleries = {n: io.load_array(g, f"{n} gallery embeddings") for n, _, g in args.category}
        result = io.user_errors(
            lambda: fashioniq.fashioniq_recall(
                queries,
                galleries,
                data,
                metric=args.metric,
                chunk_size=args.chunk_size,
                device=args.device,
                **common,
            )
        )
    else:
        scores = {n: io.load_array(s, f"{n} scores") for n, s in args.category_scores}
        result = io.user_errors(
            lambda: fashioniq.fashioniq_recall_from_scores(scores, data, **common)
        )
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
        help=f"a task ({', '.join(genecis.GENECIS_TASKS)}) and its (samples, 1 + gallery) "
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
        choices=tuple(genecis.TIES),
        default="pessimistic",
        help="pessimistic (default): the target ranks below equal distractors; official: the "
        "official script's column order, target first (reproduces the published numbers)",
    )
    io.add_common(parser, (1, 2, 3))
    parser.set_defaults(func=_run_genecis)


def _run_genecis(args: argparse.Namespace) -> int:
    entries = [(t[0], t[1:]) for t in args.task] + [(t[0], t[1:]) for t in args.task_embeddings]
    if not entries:
        raise UsageError(
            "give at least one --task TASK SCORES or --task-embeddings TASK QUERIES CANDIDATES"
        )
    names = [name for name, _ in entries]
    for name in names:
        if name not in genecis.GENECIS_TASKS:
            raise UsageError(
                f"unknown GeneCIS task {name!r}; the tasks are {', '.join(genecis.GENECIS_TASKS)}"
            )
    if len(set(names)) != len(names):
        raise UsageError("each GeneCIS task may be given once")
    results = {}
    for name, files in entries:
        task = io.user_errors(
            lambda name=name: genecis.read_genecis(Path(args.root) / f"{name}.json", name)
        )
        sizes = task.gallery_sizes
        if len(files) == 1:
            scores = io.load_array(files[0], f"{name} scores", allow_nan=True)
            _check_layout(scores.shape, len(sizes), int(sizes.max()), name)
            results[name] = io.user_errors(
                lambda scores=scores, sizes=sizes, name=name: genecis.genecis_recall(
                    scores[:, : int(sizes.max())],
                    args.ks,
                    gallery_sizes=sizes,
                    ties=args.ties,
                    task=name,
                )
            )
        else:
            queries = io.load_array(files[0], f"{name} query embeddings")
            candidates = io.load_array(
                files[1], f"{name} candidate embeddings", ndims=(3,), allow_nan=True
            )
            _check_layout(candidates.shape, len(sizes), int(sizes.max()), name)
            results[name] = io.user_errors(
                lambda q=queries, c=candidates, sizes=sizes, name=name: (
                    genecis.genecis_recall_from_embeddings(
                        q,
                        _zero_padding(c[:, : int(sizes.max())], sizes),
                        args.ks,
                        gallery_sizes=sizes,
                        ties=args.ties,
                        metric=args.metric,
                        device=args.device,
                        task=name,
                    )
                )
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
    import numpy as np

    valid = np.arange(candidates.shape[1])[None, :] < np.asarray(sizes)[:, None]
    if np.isnan(candidates[valid]).any():
        raise UsageError("the candidate embeddings have a NaN inside a gallery")
    out = np.where(valid[:, :, None], candidates, 1.0)
    return out.astype(candidates.dtype)
