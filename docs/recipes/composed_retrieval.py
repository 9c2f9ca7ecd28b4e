"""Composed image retrieval recipe: CIRR, CIRCO, FashionIQ and GeneCIS, with submission files.

Run from the repository root (synthetic data, no downloads)::

    uv run --frozen --no-sync python -m docs.recipes.composed_retrieval

For each benchmark the recipe writes miniature annotation files in the official format to a
temporary folder, reads them with the readers of [`recallkit.protocols`][recallkit.protocols],
embeds queries and images with a stand-in encoder (a query is its target's vector plus noise) and
prints the benchmark's table. It then writes the two test-server files: CIRR's ``recall`` (top 50)
and ``recall_subset`` (top 3) JSON, and CIRCO's top-50 JSON.

Row orders, which the real embeddings must follow:

- CIRR: queries in ``captions/cap.rc2.<split>.json`` order, images in ``image_splits/
  split.rc2.<split>.json`` order;
- CIRCO: queries in ``annotations/<split>.json`` order, images in the order of the ids given
  (here ``image_info_unlabeled2017.json``);
- FashionIQ: per category, queries in ``captions/cap.<category>.val.json`` order, gallery in
  ``image_splits/split.<category>.val.json`` order;
- GeneCIS: per sample, candidates ``[target, *gallery]`` (the official order).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from recallkit.protocols import (
    CIRCO_SEMANTIC_ASPECTS,
    FASHIONIQ_CATEGORIES,
    GENECIS_TASKS,
    circo_metrics,
    circo_rankings,
    cirr_rankings,
    cirr_recall,
    fashioniq_recall,
    genecis_recall_from_embeddings,
    genecis_summary,
    read_circo,
    read_cirr,
    read_coco_image_ids,
    read_fashioniq,
    read_genecis_tasks,
    write_circo_submission,
    write_cirr_submission,
)

__all__ = [
    "main",
    "write_circo_files",
    "write_cirr_files",
    "write_fashioniq_files",
    "write_genecis_files",
]

DIM = 32
NOISE = 2.5


def _write(path: Path, payload: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


def write_cirr_files(root: Path, split: str, num_sets: int, rng: np.random.Generator) -> None:
    """CIRR: image sets of 6, two queries per set; ``test1`` has no targets."""
    prefix = "dev" if split == "val" else split
    names = [f"{prefix}-{s}-{i}-img{i % 2}" for s in range(num_sets) for i in range(6)]
    _write(
        root / "image_splits" / f"split.rc2.{split}.json", {n: f"./{prefix}/{n}.png" for n in names}
    )
    captions = []
    for s in range(num_sets):
        members = names[6 * s : 6 * s + 6]
        for q in range(2):
            reference, target, also, no = (members[i] for i in rng.permutation(6)[:4])
            entry = {
                "pairid": 2 * s + q,
                "reference": reference,
                "caption": "make it so",
                "img_set": {"id": s, "members": members},
            }
            if split != "test1":
                entry["target_hard"] = target
                entry["target_soft"] = {target: 1.0, also: 0.5, no: -1.0}
            captions.append(entry)
    _write(root / "captions" / f"cap.rc2.{split}.json", captions)


def write_circo_files(root: Path, num_images: int, rng: np.random.Generator) -> None:
    """CIRCO: val queries with 1-6 ground truths and semantic aspects, test queries without,
    the image-info file."""
    ids = rng.choice(np.arange(1, 600_000), size=num_images, replace=False).tolist()
    _write(
        root / "COCO2017_unlabeled" / "annotations" / "image_info_unlabeled2017.json",
        {"images": [{"id": i, "file_name": f"{i:012d}.jpg"} for i in ids]},
    )
    for split, count in (("val", 40), ("test", 30)):
        entries = []
        for q in range(count):
            picked = rng.choice(ids, size=1 + int(rng.integers(1, 7)), replace=False).tolist()
            entry = {
                "id": q,
                "reference_img_id": picked[0],
                "relative_caption": "is red",
                "shared_concept": "a thing",
            }
            if split == "val":
                entry["target_img_id"], entry["gt_img_ids"] = picked[1], picked[1:]
                # Two semantic aspects per query: the table gets mAP@10 per aspect.
                entry["semantic_aspects"] = [
                    CIRCO_SEMANTIC_ASPECTS[q % 9],
                    CIRCO_SEMANTIC_ASPECTS[(q + 4) % 9],
                ]
            entries.append(entry)
        _write(root / "annotations" / f"{split}.json", entries)


def write_fashioniq_files(root: Path, num_images: int, rng: np.random.Generator) -> None:
    """FashionIQ: per category, a validation image list and caption pairs."""
    for c, category in enumerate(FASHIONIQ_CATEGORIES):
        names = [f"B{c}{i:07d}" for i in range(num_images)]
        _write(root / "image_splits" / f"split.{category}.val.json", names)
        pairs = [rng.choice(num_images, size=2, replace=False) for _ in range(num_images // 2)]
        _write(
            root / "captions" / f"cap.{category}.val.json",
            [
                {
                    "candidate": names[a],
                    "target": names[b],
                    "captions": ["is darker", "has sleeves"],
                }
                for a, b in pairs
            ],
        )


def write_genecis_files(root: Path, num_samples: int, rng: np.random.Generator) -> None:
    """GeneCIS: attribute tasks (VG crops, 10 candidates), object tasks (COCO, 15)."""
    for task in GENECIS_TASKS:
        attribute = task.endswith("attribute")

        def image(attribute: bool = attribute) -> dict:
            if attribute:
                box = rng.integers(0, 300, size=4).tolist()
                return {"image_id": str(rng.integers(1, 10**6)), "instance_bbox": box}
            return {"val_image_id": int(rng.integers(1, 10**6))}

        distractors = 9 if attribute else 14
        samples = [
            {
                "reference": image(),
                "condition": "color",
                "target": image(),
                "gallery": [image() for _ in range(distractors)],
            }
            for _ in range(num_samples)
        ]
        _write(root / f"{task}.json", samples)


def _queries_near(targets: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The stand-in composed query: the target's vector plus noise."""
    return (targets + NOISE * rng.standard_normal(targets.shape)).astype(np.float32)


def main() -> None:
    """Write every benchmark's files, print each table, write the two submission files."""
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)

        # CIRR validation (both target conventions) and the test1 submission files.
        for split in ("val", "test1"):
            write_cirr_files(tmp / "CIRR", split, num_sets=30, rng=rng)
        val = read_cirr(tmp / "CIRR", "val")
        images = rng.standard_normal((len(val.image_names), DIM)).astype(np.float32)
        position = {n: i for i, n in enumerate(val.image_names)}
        query = _queries_near(images[[position[q.target_hard] for q in val.queries]], rng)
        for target in ("hard", "soft"):
            print(cirr_recall(query, images, val, target=target).table(), end="\n\n")
        test = read_cirr(tmp / "CIRR", "test1")
        test_images = rng.standard_normal((len(test.image_names), DIM)).astype(np.float32)
        test_query = rng.standard_normal((len(test.queries), DIM)).astype(np.float32)
        recall, subset = cirr_rankings(test_query, test_images, test)
        for metric, rankings in (("recall", recall), ("recall_subset", subset)):
            path = write_cirr_submission(tmp / f"cirr_test1_{metric}.json", rankings, metric=metric)
            print(
                f"CIRR submission {path.name}: {len(rankings)} queries, "
                f"{len(next(iter(rankings.values())))} names each"
            )

        # CIRCO validation (official divisor, then the SQUARE recipe's) and the test submission.
        write_circo_files(tmp / "CIRCO", num_images=300, rng=rng)
        ids = read_coco_image_ids(
            tmp / "CIRCO" / "COCO2017_unlabeled" / "annotations" / "image_info_unlabeled2017.json"
        )
        pool = rng.standard_normal((len(ids), DIM)).astype(np.float32)
        where = {int(i): r for r, i in enumerate(ids)}
        circo_val = read_circo(tmp / "CIRCO", "val")
        centre = np.stack(
            [pool[[where[i] for i in q.gt_img_ids]].mean(axis=0) for q in circo_val.queries]
        )
        circo_query = _queries_near(centre, rng)
        print()
        for divisor in ("min_k_r", "r"):
            result = circo_metrics(circo_query, pool, ids, circo_val, divisor=divisor)
            print(result.table(), end="\n\n")
        circo_test = read_circo(tmp / "CIRCO", "test")
        test_query = rng.standard_normal((len(circo_test.queries), DIM)).astype(np.float32)
        path = write_circo_submission(
            tmp / "circo_test.json", circo_rankings(test_query, pool, ids, circo_test)
        )
        print(f"CIRCO submission {path.name}: {len(circo_test.queries)} queries, top 50 ids each\n")

        # FashionIQ validation: one gallery per category.
        write_fashioniq_files(tmp / "fashionIQ", num_images=120, rng=rng)
        fiq = read_fashioniq(tmp / "fashionIQ")
        queries, galleries = {}, {}
        for category, part in fiq.items():
            galleries[category] = rng.standard_normal((len(part.image_names), DIM)).astype(
                np.float32
            )
            index = {n: i for i, n in enumerate(part.image_names)}
            targets = galleries[category][[index[q.target] for q in part.queries]]
            queries[category] = _queries_near(targets, rng)
        print(fashioniq_recall(queries, galleries, fiq).table(), end="\n\n")

        # GeneCIS: each sample ranks its own gallery, target first in the official order.
        # Ties are pessimistic here; ties="official" takes the official script's order (target
        # first among equal scores), which reproduces the published numbers.
        write_genecis_files(tmp / "genecis", num_samples=80, rng=rng)
        results = {}
        for task, data in read_genecis_tasks(tmp / "genecis").items():
            size = int(data.gallery_sizes.max())
            candidates = rng.standard_normal((len(data.samples), size, DIM)).astype(np.float32)
            query = _queries_near(candidates[:, 0], rng) * 0.5 + 0.5 * candidates[:, 1]
            results[task] = genecis_recall_from_embeddings(query, candidates, task=task)
        print(genecis_summary(results).table())


if __name__ == "__main__":
    main()
