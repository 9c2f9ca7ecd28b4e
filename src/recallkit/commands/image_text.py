"""``recallkit image-text``: COCO / Flickr30k image-text retrieval from embeddings or scores."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from recallkit.commands import _protocol_io as io
from recallkit.errors import UsageError
from recallkit.protocols import image_text

EPILOG = """examples:
  recallkit image-text --karpathy dataset_coco.json --images img.npy --texts txt.npy
  recallkit image-text --karpathy dataset_flickr30k.json --scores sim.npy --json out.json

Embedding rows follow the Karpathy file: test images in file order, and each image's captions
in order (image i's captions before image i+1's). --scores is (images, captions)."""


def register(subparsers: Any) -> None:
    """Add the ``image-text`` sub-command."""
    parser = subparsers.add_parser(
        "image-text",
        help="image-text retrieval recall@K (COCO 5k, Flickr30k 1k)",
        description="Image→text and text→image recall@K, mean and median rank (VSE++ convention).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
        type=int,
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
    parser.set_defaults(func=run)


def _caption_image(args: argparse.Namespace) -> tuple[np.ndarray, str]:
    if args.karpathy:
        split = io.user_errors(
            lambda: image_text.read_karpathy_split(
                args.karpathy,
                args.split,
                captions_per_image=args.captions_per_image,
                check_counts=not args.no_count_check,
            )
        )
        return split.caption_image, f"{split.dataset} {split.split}"
    path = args.caption_image
    if path.endswith(".json"):
        try:
            values = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise UsageError(f"the caption-image file '{path}' cannot be read: {error}") from None
        if not isinstance(values, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values
        ):
            raise UsageError(f"the caption-image file '{path}' must hold a list of image rows")
        return np.asarray(values, dtype=np.int64), "image-text"
    return io.load_array(path, "caption-image", ndims=(1,), integer=True), "image-text"


def run(args: argparse.Namespace) -> int:
    """Score the embeddings or the matrix; print the table (and write --json)."""
    if args.scores and (args.images or args.texts):
        raise UsageError("give either --scores or --images with --texts, not both")
    if not args.scores and not (args.images and args.texts):
        raise UsageError("give --images and --texts (embeddings), or --scores (a matrix)")
    caption_image, name = _caption_image(args)
    if args.scores:
        scores = io.load_array(args.scores, "scores")
        result = io.user_errors(
            lambda: image_text.image_text_recall_from_scores(
                scores, caption_image, args.ks, name=name
            )
        )
    else:
        images = io.load_array(args.images, "image embeddings")
        texts = io.load_array(args.texts, "caption embeddings")
        result = io.user_errors(
            lambda: image_text.image_text_recall(
                images,
                texts,
                caption_image,
                args.ks,
                metric=args.metric,
                chunk_size=args.chunk_size,
                device=args.device,
                name=name,
            )
        )
    return io.report(result, args.json)
