"""Image-text retrieval recipe: COCO 5k and Flickr30k 1k (Karpathy test splits).

Run from the repository root (synthetic data, no downloads)::

    uv run --frozen --no-sync python -m docs.recipes.image_text

The recipe writes a miniature ``dataset_coco.json`` and ``dataset_flickr30k.json`` in the
Karpathy format to a temporary folder, reads each test split with
[`recallkit.protocols.read_karpathy_split`][recallkit.protocols.read_karpathy_split], embeds images
and captions with a stand-in encoder and prints both directions' recall@1/5/10 with mean and median
rank ([`recallkit.protocols.image_text_recall`][recallkit.protocols.image_text_recall]). On the real
files, drop ``check_counts=False``: the reader then checks the published counts (COCO: 5,000 images
and 25,010 captions; Flickr30k: 1,000 and 5,000). Embedding rows follow the file: test images in
file order, each image's captions in order.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from recallkit.protocols import KarpathySplit, image_text_recall, read_karpathy_split

__all__ = ["main", "stand_in_embeddings", "write_karpathy_file"]


def write_karpathy_file(
    folder: Path, dataset: str, num_test: int, captions_per_image: int, seed: int = 0
) -> Path:
    """Write ``dataset_<dataset>.json``: ``num_test`` test images plus a few train images."""
    rng = np.random.default_rng(seed)
    images, sentid = [], 0
    splits = ["test"] * num_test + ["train"] * 3
    for imgid, split in enumerate(splits):
        sentences = []
        extra = int(rng.integers(0, 2)) if dataset == "coco" else 0  # COCO has a few sixths
        for _ in range(captions_per_image + extra):
            words = ["a", "photo", "of", f"thing{imgid}"]
            sentences.append(
                {"tokens": words, "raw": " ".join(words), "imgid": imgid, "sentid": sentid}
            )
            sentid += 1
        image = {
            "filename": f"{dataset}_{imgid:06d}.jpg",
            "imgid": imgid,
            "split": split,
            "sentences": sentences,
            "sentids": [s["sentid"] for s in sentences],
        }
        if dataset == "coco":
            image["filepath"], image["cocoid"] = "val2014", 100000 + imgid
        images.append(image)
    path = Path(folder) / f"dataset_{dataset}.json"
    path.write_text(json.dumps({"images": images, "dataset": dataset}))
    return path


def stand_in_embeddings(split: KarpathySplit, dim: int = 32, noise: float = 2.5, seed: int = 0):
    """A stand-in encoder: random image vectors, captions near their image's vector."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((split.num_images, dim)).astype(np.float32)
    texts = images[split.caption_image] + noise * rng.standard_normal((split.num_captions, dim))
    return images, texts.astype(np.float32)


def main() -> None:
    """Write both annotation files, evaluate each test split, print the tables."""
    with tempfile.TemporaryDirectory() as tmp:
        for dataset, num_test in (("coco", 200), ("flickr30k", 100)):
            path = write_karpathy_file(Path(tmp), dataset, num_test, captions_per_image=5)
            # check_counts=False: the miniature file does not have the published counts.
            split = read_karpathy_split(path, "test", check_counts=False)
            images, texts = stand_in_embeddings(split)
            result = image_text_recall(
                images,
                texts,
                split.caption_image,
                ks=(1, 5, 10),
                name=f"{dataset} test (synthetic)",
            )
            print(result.table())
            print()


if __name__ == "__main__":
    main()
