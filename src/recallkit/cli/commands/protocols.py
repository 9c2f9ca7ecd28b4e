"""The benchmark protocols: ``cirr``, ``circo``, ``fashioniq``, ``genecis`` and ``image-text``.

Each scores saved embeddings (``.npy``/``.pt``/``.safetensors``) or a similarity matrix with the
benchmark's protocol ([`recallkit.protocols`][recallkit.protocols]), prints the table, writes
``--json`` and, for the benchmarks with a test server (CIRR, CIRCO), the submission files. All files
are written atomically.

The commands are one table, [`COMMANDS`][COMMANDS] (at the end): per command its help, description
and epilog, its options (the embeddings-or-matrix options of
[`EmbeddingsOrScores`][EmbeddingsOrScores] declared once for the three commands that take them), its
default cut-offs, the map of the protocol functions' parameters to its options (so that a library
error names the option at fault) and its run function. [`register`][register] builds every parser
from it, adding to each ``--ks``, the engine's options and ``--json`` (``_protocol_io.add_common``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from recallkit._inputs.pinned import read_file
from recallkit._loading import Module
from recallkit.cli.commands import _protocol_io as io
from recallkit.cli.commands._args import (
    add_command,
    check_output_file,
    check_output_folder,
    positive_int,
    unchanged_inputs,
)
from recallkit.cli.errors import UsageError
from recallkit.protocols import _names

# The protocol modules load torch: imported when a command runs, not for its help.
circo = Module("recallkit.protocols.circo")
cirr = Module("recallkit.protocols.cirr")
fashioniq = Module("recallkit.protocols.fashioniq")
genecis = Module("recallkit.protocols.genecis")
image_text = Module("recallkit.protocols.image_text")

#: A library parameter's option: its words, or a function of the arguments giving them.
Parameter = str | Callable[[argparse.Namespace], str]


class Option(NamedTuple):
    """One ``add_argument`` call: the flag and its keywords."""

    flag: str
    keywords: Mapping[str, Any]


def option(flag: str, **keywords: Any) -> Option:
    """``parser.add_argument(flag, **keywords)``, as a row of the table."""
    return Option(flag, keywords)


@dataclass(frozen=True)
class OneOf:
    """Options of which exactly one must be given (a required mutually exclusive group)."""

    options: tuple[Option, ...]


@dataclass(frozen=True)
class Command:
    """One protocol command: what [`register`][register] needs to build its parser."""

    name: str
    help: str
    description: str
    epilog: str
    options: tuple[Option | OneOf, ...]
    ks: tuple[int, ...]  # the default --ks
    parameters: Mapping[str, Parameter]  # beyond io.PARAMETERS, which every command has
    run: Callable[[argparse.Namespace], int]


def register(subparsers: Any) -> None:
    """Add the ``cirr``, ``circo``, ``fashioniq``, ``genecis`` and ``image-text`` sub-commands."""
    for command in COMMANDS:
        parser = add_command(
            subparsers, command.name, command.help, command.description, command.epilog
        )
        for entry in command.options:
            if isinstance(entry, OneOf):
                group = parser.add_mutually_exclusive_group(required=True)
                for one in entry.options:
                    group.add_argument(one.flag, **one.keywords)
            else:
                parser.add_argument(entry.flag, **entry.keywords)
        io.add_common(parser, command.ks)
        parser.set_defaults(
            func=command.run,
            check=io.check_ks,
            parameters={**io.PARAMETERS, **command.parameters},
        )


# ------------------------------------------------------------------------------------ the inputs


@dataclass(frozen=True)
class Inputs:
    """What a command scores: two embedding arrays (or mappings of them) with the engine's
    options, or a similarity matrix (or a mapping of them)."""

    rows: Any = None
    columns: Any = None
    scores: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def score(self, by_embeddings: Callable, by_scores: Callable, *args: Any, **keywords: Any):
        """``by_scores(scores, *args, **keywords)`` for a matrix, else ``by_embeddings(rows,
        columns, *args, **keywords)`` with the engine's options."""
        if self.scores is not None:
            return by_scores(self.scores, *args, **keywords)
        return by_embeddings(self.rows, self.columns, *args, **keywords, **self.options)


class Embeddings(NamedTuple):
    """An embedding file's option: its flag, what the file holds (in messages), its help."""

    flag: str
    what: str
    help: str

    def given(self, args: argparse.Namespace) -> str | None:
        return getattr(args, self.flag[2:])


@dataclass(frozen=True)
class EmbeddingsOrScores:
    """The options ``ROWS COLUMNS --scores``: two embedding files, or their similarity matrix."""

    rows: Embeddings
    columns: Embeddings
    scores_help: str

    def options(self) -> tuple[Option, ...]:
        files = [option(e.flag, metavar="FILE", help=e.help) for e in (self.rows, self.columns)]
        return (*files, option("--scores", metavar="FILE", help=self.scores_help))

    def check(self, args: argparse.Namespace) -> None:
        """Refuse both kinds of input, or neither."""
        rows, columns = self.rows.flag, self.columns.flag
        given = [self.rows.given(args), self.columns.given(args)]
        if args.scores and any(given):
            raise UsageError(f"give either --scores or {rows} with {columns}, not both")
        if not args.scores and not all(given):
            raise UsageError(f"give {rows} and {columns} (embeddings), or --scores (a matrix)")

    def load(self, args: argparse.Namespace) -> Inputs:
        """The embeddings (of the same dimension) and the engine's options, or the matrix."""
        self.check(args)
        if args.scores:
            return Inputs(scores=io.load_array(args.scores, "scores"))
        rows, columns = (io.load_array(e.given(args), e.what) for e in (self.rows, self.columns))
        io.same_dimension(rows, columns, self.rows.flag, self.columns.flag)
        return Inputs(rows, columns, options=io.engine_options(args))


def _queries_against(columns: str) -> EmbeddingsOrScores:
    """Query embeddings against image embeddings (one row per ``columns``), or the matrix."""
    return EmbeddingsOrScores(
        Embeddings("--queries", "query embeddings", "query embeddings, one row per query"),
        Embeddings("--images", "image embeddings", f"image embeddings, one row per {columns}"),
        f"(query, {columns}) similarity matrix",
    )


def _per_name(flag: str, metavar: tuple[str, ...], help: str) -> Option:
    """An option given once per category or task: the name, then its files."""
    return option(flag, nargs=len(metavar), action="append", default=[], metavar=metavar, help=help)


def _check_names(names: list[str], known: tuple[str, ...], what: str, plural: str) -> None:
    """Each name one of ``known`` (``what``: "FashionIQ category"), none given twice."""
    for name in names:
        if name not in known:
            raise UsageError(f"unknown {what} {name!r}; the {plural} are {', '.join(known)}")
    if len(set(names)) != len(names):
        raise UsageError(f"each {what} may be given once")


# ----------------------------------------------------------------------------------------- CIRR

CIRR_INPUTS = _queries_against("image")


def _run_cirr(args: argparse.Namespace) -> int:
    io.check_common(args)
    check_output_folder(args.submission_dir, "--submission-dir")
    root, name = Path(args.root), f"{args.version}.{args.split}.json"
    with io.reading(root / "image_splits" / f"split.{name}", root / "captions" / f"cap.{name}"):
        data = cirr.read_cirr(args.root, args.split, version=args.version)
    inputs = CIRR_INPUTS.load(args)
    if not data.has_targets and not args.submission_dir:
        raise UsageError(f"split {args.split!r} has no targets to score; pass --submission-dir")
    if data.has_targets:
        result = inputs.score(
            cirr.cirr_recall,
            cirr.cirr_recall_from_scores,
            data,
            ks=args.ks,
            subset_ks=args.subset_ks,
            target=args.target,
        )
        io.report(result, args.json)
    if args.submission_dir:
        k = cirr.SUBMISSION_SIZES["recall"]
        recall, subset = inputs.score(cirr.cirr_rankings, cirr.cirr_rankings_from_scores, data, k=k)
        folder = Path(args.submission_dir)
        unchanged_inputs("evaluated")
        for metric, rankings in (("recall", recall), ("recall_subset", subset)):
            path = folder / f"cirr_{args.split}_{metric}.json"
            io.write_file(
                "--submission-dir",
                cirr.write_cirr_submission,
                path,
                rankings,
                metric=metric,
                version=args.version,
            )
    return 0


# ---------------------------------------------------------------------------------------- CIRCO

CIRCO_INPUTS = _queries_against("image id")


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
    inputs = CIRCO_INPUTS.load(args)
    if not args.image_ids:
        raise UsageError("--image-ids is required with --queries/--images or --scores")
    ids = io.load_ids(args.image_ids)
    if not data.has_targets and not args.submission:
        raise UsageError(f"split {args.split!r} has no ground truths to score; pass --submission")
    common = {"exclude_reference": args.exclude_reference}
    if data.has_targets:
        result = inputs.score(
            circo.circo_metrics,
            circo.circo_metrics_from_scores,
            ids,
            data,
            ks=args.ks,
            divisor=args.divisor,
            **common,
        )
        io.report(result, args.json)
    if args.submission:
        rankings = inputs.score(
            circo.circo_rankings, circo.circo_rankings_from_scores, ids, data, **common
        )
        unchanged_inputs("evaluated")
        io.write_file("--submission", circo.write_circo_submission, args.submission, rankings)
    return 0


# ------------------------------------------------------------------------------------ FashionIQ


def _category_option(args: argparse.Namespace) -> str:
    return "--category" if args.category else "--category-scores"


def _run_fashioniq(args: argparse.Namespace) -> int:
    if bool(args.category) == bool(args.category_scores):
        raise UsageError(
            "give --category NAME QUERIES GALLERY or --category-scores NAME SCORES "
            "(one per category), not both"
        )
    io.check_common(args)
    entries = args.category or args.category_scores
    names = [entry[0] for entry in entries]
    _check_names(names, _names.FASHIONIQ_CATEGORIES, "FashionIQ category", "categories")
    root = Path(args.root)
    files = [
        root / folder / f"{prefix}.{name}.val.json"
        for name in names
        for folder, prefix in (("image_splits", "split"), ("captions", "cap"))
    ]
    with io.reading(*files):
        data = fashioniq.read_fashioniq(args.root, names)
    if args.category:
        queries = {n: io.load_array(q, f"{n} query embeddings") for n, q, _ in args.category}
        galleries = {n: io.load_array(g, f"{n} gallery embeddings") for n, _, g in args.category}
        for n in queries:
            io.same_dimension(
                queries[n], galleries[n], f"--category {n} QUERIES", f"--category {n} GALLERY"
            )
        inputs = Inputs(queries, galleries, options=io.engine_options(args))
    else:
        inputs = Inputs(
            scores={n: io.load_array(s, f"{n} scores") for n, s in args.category_scores}
        )
    result = inputs.score(
        fashioniq.fashioniq_recall,
        fashioniq.fashioniq_recall_from_scores,
        data,
        ks=args.ks,
        exclude_reference=args.exclude_reference,
    )
    return io.report(result, args.json)


# -------------------------------------------------------------------------------------- GeneCIS


def _run_genecis(args: argparse.Namespace) -> int:
    entries = [(t[0], t[1:]) for t in args.task] + [(t[0], t[1:]) for t in args.task_embeddings]
    if not entries:
        raise UsageError(
            "give at least one --task TASK SCORES or --task-embeddings TASK QUERIES CANDIDATES"
        )
    _check_names([name for name, _ in entries], _names.GENECIS_TASKS, "GeneCIS task", "tasks")
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
        width = int(sizes.max())
        if len(files) == 1:
            scores = io.load_array(files[0], f"{name} scores", allow_nan=True)
            _check_layout(scores.shape, len(sizes), width, name)
            inputs = Inputs(scores=scores[:, :width])
        else:
            queries = io.load_array(files[0], f"{name} query embeddings")
            candidates = io.load_array(
                files[1], f"{name} candidate embeddings", ndims=(3,), allow_nan=True
            )
            _check_layout(candidates.shape, len(sizes), width, name)
            io.same_dimension(
                queries,
                candidates,
                f"--task-embeddings {name} QUERIES",
                f"--task-embeddings {name} CANDIDATES",
            )
            padded = _zero_padding(candidates[:, :width], sizes)
            inputs = Inputs(queries, padded, options=io.engine_options(args))
        results[name] = inputs.score(
            genecis.genecis_recall_from_embeddings,
            genecis.genecis_recall,
            args.ks,
            gallery_sizes=sizes,
            ties=args.ties,
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

IMAGE_TEXT_INPUTS = EmbeddingsOrScores(
    Embeddings("--images", "image embeddings", "image embeddings (.npy/.pt/.safetensors)"),
    Embeddings("--texts", "caption embeddings", "caption embeddings"),
    "(images, captions) similarity matrix",
)


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
    IMAGE_TEXT_INPUTS.check(args)
    io.check_common(args)
    caption_image, name = _caption_image(args)
    result = IMAGE_TEXT_INPUTS.load(args).score(
        image_text.image_text_recall,
        image_text.image_text_recall_from_scores,
        caption_image,
        args.ks,
        name=name,
    )
    return io.report(result, args.json)


# ------------------------------------------------------------------------------- the commands

COMMANDS = (
    Command(
        name="cirr",
        help="CIRR recall@K, recall_subset@K, avg; test-server submission files",
        description="CIRR validation metrics (reference removed from the candidates) and the "
        "CIRR server's submission files.",
        epilog="examples:\n"
        "  recallkit cirr --root CIRR --split val --queries q.npy --images img.npy\n"
        "  recallkit cirr --root CIRR --split test1 --queries q.npy --images img.npy "
        "--submission-dir out/\n\n"
        "Query rows follow captions/cap.rc2.<split>.json, image rows image_splits/"
        "split.rc2.<split>.json.",
        options=(
            option("--root", required=True, help="CIRR folder (captions/, image_splits/)"),
            option("--split", default="val", help="val (default), test1 or train"),
            option(
                "--version",
                default="rc2",
                help="annotation version: reads captions/cap.VERSION.SPLIT.json and "
                "image_splits/split.VERSION.SPLIT.json (default rc2)",
            ),
            *CIRR_INPUTS.options(),
            option(
                "--target",
                choices=("hard", "soft"),
                default="hard",
                help="hard: target_hard (default, CLIP4Cir/SEARLE); soft: CIRPLANT's target_soft",
            ),
            option(
                "--subset-ks",
                type=int,
                nargs="+",
                default=[1, 2, 3],
                metavar="K",
                help="K values of recall_subset@K, within each query's image subset "
                "(default 1 2 3)",
            ),
            option(
                "--submission-dir",
                metavar="DIR",
                help="write cirr_<split>_recall.json (top 50) and _recall_subset.json (top 3)",
            ),
        ),
        ks=(1, 5, 10, 50),
        parameters={
            "root": "--root",
            "split": "--split",
            "version": "--version",
            "query": "--queries",
            "images": "--images",
            "scores": "--scores",
            "subset_ks": "--subset-ks",
            "target": "--target",
            "data": "the CIRR split of --root",
        },
        run=_run_cirr,
    ),
    Command(
        name="circo",
        help="CIRCO mAP@K, recall@K and mAP@10 per semantic aspect; test-server submission file",
        description="CIRCO mAP@K (official divisor min(K, R)), recall@K on the primary target "
        "and, for annotations with semantic aspects (val), mAP@10 per aspect, as the evaluation "
        "server reports them; from embeddings, a similarity matrix or a ranked-list (submission) "
        "file.",
        epilog="examples:\n"
        "  recallkit circo --annotations CIRCO --split val --queries q.npy --images img.npy \\\n"
        "      --image-ids CIRCO/COCO2017_unlabeled/annotations/image_info_unlabeled2017.json\n"
        "  recallkit circo --annotations CIRCO/annotations/val.json --predictions val_ranks.json\n"
        "  recallkit circo --annotations CIRCO --split test --queries q.npy --images img.npy \\\n"
        "      --image-ids ids.npy --submission circo_test.json",
        options=(
            option("--annotations", required=True, help="CIRCO folder or annotations/<split>.json"),
            option(
                "--split",
                default="val",
                choices=("val", "test"),
                help="val (default; scored) or test (submission file only)",
            ),
            *CIRCO_INPUTS.options(),
            option(
                "--image-ids",
                metavar="FILE",
                help="the images' COCO ids in row order (.npy, .json list or COCO image info, "
                ".txt)",
            ),
            option(
                "--predictions",
                metavar="JSON",
                help="score a ranked-list file {query id: [image ids]} instead of embeddings",
            ),
            option(
                "--divisor",
                choices=("min_k_r", "r"),
                default="min_k_r",
                help="AP@K divisor: min(K, R) (official, default) or R (SQUARE recipe)",
            ),
            option(
                "--exclude-reference",
                action="store_true",
                help="remove the reference image from the candidates (not official)",
            ),
            option("--submission", metavar="JSON", help="write the top-50 submission file"),
        ),
        ks=(5, 10, 25, 50),
        parameters={
            "path": "--annotations",
            "split": "--split",
            "query": "--queries",
            "images": "--images",
            "scores": "--scores",
            "image_ids": "--image-ids",
            "predictions": "--predictions",
            "divisor": "--divisor",
            "data": "the CIRCO split of --annotations",
        },
        run=_run_circo,
    ),
    Command(
        name="fashioniq",
        help="FashionIQ recall@10/50 per category and their means (validation)",
        description="FashionIQ validation: per-category gallery, recall@K per category, the "
        "mean over dress/shirt/toptee and the average of the means.",
        epilog="examples:\n"
        "  recallkit fashioniq --root fashionIQ --category dress q_dress.npy g_dress.npy \\\n"
        "      --category shirt q_shirt.npy g_shirt.npy --category toptee q_top.npy g_top.npy\n"
        "  recallkit fashioniq --root fashionIQ --category-scores dress s_dress.npy ...\n\n"
        "Query rows follow captions/cap.<category>.val.json, gallery rows image_splits/"
        "split.<category>.val.json.",
        options=(
            option("--root", required=True, help="FashionIQ folder (captions/, image_splits/)"),
            _per_name("--category", ("NAME", "QUERIES", "GALLERY"), "a category's embeddings"),
            _per_name(
                "--category-scores", ("NAME", "SCORES"), "a category's (queries, gallery) matrix"
            ),
            option(
                "--exclude-reference",
                action="store_true",
                help="remove the reference image from its gallery (not the usual protocol)",
            ),
        ),
        ks=(10, 50),
        parameters={
            "root": "--root",
            "split": "the split",
            "categories": lambda args: f"{_category_option(args)} NAME",
            "category": lambda args: f"{_category_option(args)} NAME",
            "queries": "--category QUERIES",
            "galleries": "--category GALLERY",
            "scores": "--category-scores SCORES",
            "data": "the FashionIQ split of --root",
        },
        run=_run_fashioniq,
    ),
    Command(
        name="genecis",
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
        options=(
            option("--root", required=True, help="folder holding <task>.json"),
            _per_name(
                "--task",
                ("TASK", "SCORES"),
                f"a task ({', '.join(_names.GENECIS_TASKS)}) and its (samples, 1 + gallery) "
                "score file, target in column 0; repeat per task",
            ),
            _per_name(
                "--task-embeddings",
                ("TASK", "QUERIES", "CANDIDATES"),
                "a task, its (samples, d) query embeddings and its (samples, 1 + gallery, d) "
                "candidate embeddings, target first; repeat per task",
            ),
            option(
                "--ties",
                choices=tuple(_names.TIES),
                default="pessimistic",
                help="pessimistic (default): the target ranks below equal distractors; official: "
                "the official script's column order, target first (reproduces the published "
                "numbers)",
            ),
        ),
        ks=(1, 2, 3),
        parameters={
            "path": "the task file under --root",
            "task": "--task TASK",
            "scores": "--task SCORES",
            "query": "--task-embeddings QUERIES",
            "candidates": "--task-embeddings CANDIDATES",
            "ties": "--ties",
            "gallery_sizes": "the gallery sizes of the task file",
        },
        run=_run_genecis,
    ),
    Command(
        name="image-text",
        help="image-text retrieval recall@K (COCO 5k, Flickr30k 1k)",
        description="Image→text and text→image recall@K, mean and median rank (VSE++ convention).",
        epilog="""examples:
  recallkit image-text --karpathy dataset_coco.json --images img.npy --texts txt.npy
  recallkit image-text --karpathy dataset_flickr30k.json --scores sim.npy --json out.json

Embedding rows follow the Karpathy file: test images in file order, and each image's captions
in order (image i's captions before image i+1's). --scores is (images, captions).""",
        options=(
            OneOf(
                (
                    option(
                        "--karpathy",
                        metavar="JSON",
                        help="dataset_coco.json / dataset_flickr30k.json",
                    ),
                    option(
                        "--caption-image",
                        metavar="FILE",
                        help="instead of --karpathy: each caption's image row (.npy or .json list)",
                    ),
                )
            ),
            option(
                "--split",
                default="test",
                choices=("test", "val", "train", "restval"),
                help="the Karpathy split to score (default test)",
            ),
            option(
                "--captions-per-image",
                type=positive_int("--captions-per-image"),
                default=None,
                metavar="N",
                help="keep each image's first N captions (VSE++ uses 5; default: all)",
            ),
            option(
                "--no-count-check",
                action="store_true",
                help="accept a split whose image/caption counts differ from the published ones",
            ),
            *IMAGE_TEXT_INPUTS.options(),
        ),
        ks=(1, 5, 10),
        parameters={
            "path": "--karpathy",
            "split": "--split",
            "captions_per_image": "--captions-per-image",
            "images": "--images",
            "texts": "--texts",
            "scores": "--scores",
            "caption_image": lambda args: (
                "--caption-image" if args.caption_image else "the --karpathy split"
            ),
        },
        run=_run_image_text,
    ),
)
