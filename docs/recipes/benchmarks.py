"""Benchmark recipe: load five retrieval benchmarks from their official files and evaluate them.

Run from the repository root (no downloads; a few seconds)::

    uv run --frozen --no-sync python -m docs.recipes.benchmarks

The recipe writes a *miniature* copy of each benchmark to a temporary folder: the annotation
files in their official formats (CUB-200-2011's ``images.txt`` and ``image_class_labels.txt``,
Cars196's ``cars_annos.mat``, Stanford Online Products' ``Ebay_{train,test}.txt``, the Smooth-AP
iNaturalist split files, In-Shop's ``list_eval_partition.txt``) and a small JPEG per listed image.
It then loads each with [`recallkit.datasets.load_benchmark`][recallkit.datasets.load_benchmark]
(``allow_partial=True``: a miniature does not have the documented counts), embeds the images of the
protocol's splits with a stand-in encoder, and prints the protocol's recall@K with MAP@R and
R-precision ([`recallkit.datasets.evaluate_benchmark`][recallkit.datasets.evaluate_benchmark]).

With the real data, only the root folder and the encoder change::

    bench = load_benchmark("sop", "/data/Stanford_Online_Products")
    query, gallery, _ = bench.evaluation_splits()
    result = evaluate_benchmark(bench, embed(query), None if gallery is query else embed(gallery))
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from recallkit.datasets import (
    BENCHMARK_INFO,
    Benchmark,
    Split,
    evaluate_benchmark,
    load_benchmark,
)
from recallkit.result import Result

__all__ = ["StandInEncoder", "embed", "main", "run", "write_miniatures"]

_IMAGE_SIZE = 12


def _write_image(path: Path, label: int, index: int) -> None:
    """A small JPEG whose colour is set by the label, with per-image noise."""
    from PIL import Image

    base = np.random.default_rng(label).uniform(40, 215, size=3)
    noise = np.random.default_rng([label, index]).normal(0, 45, size=(_IMAGE_SIZE, _IMAGE_SIZE, 3))
    pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, format="JPEG", quality=95)


def _write_cub(root: Path) -> None:
    """CUB_200_2011/images.txt and image_class_labels.txt: train classes 1-3, test 101-106."""
    folder = root / "CUB_200_2011"
    images, labels = [], []
    image_id = 0
    for cls in [1, 2, 3, *range(101, 107)]:
        for k in range(4):
            image_id += 1
            rel = f"{cls:03d}.Bird_{cls}/Bird_{cls}_{k:04d}_{image_id}.jpg"
            images.append(f"{image_id} {rel}")
            labels.append(f"{image_id} {cls}")
            _write_image(folder / "images" / rel, cls, k)
    (folder / "images.txt").write_text("\n".join(images) + "\n")
    (folder / "image_class_labels.txt").write_text("\n".join(labels) + "\n")


def _write_cars(root: Path) -> None:
    """cars_annos.mat (struct array ``annotations``): train classes 1-3, test 99-104."""
    from scipy.io import savemat

    fields = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]
    classes = [cls for cls in [1, 2, 3, *range(99, 105)] for _ in range(4)]
    annotations = np.zeros((1, len(classes)), dtype=[(f, "O") for f in fields])
    for i, cls in enumerate(classes):
        rel = f"car_ims/{i + 1:06d}.jpg"
        box = [np.uint16(v) for v in (1, 1, _IMAGE_SIZE, _IMAGE_SIZE)]
        annotations[0, i] = (rel, *box, np.uint8(cls), np.uint8(i % 2))
        _write_image(root / rel, cls, i)
    root.mkdir(parents=True, exist_ok=True)
    savemat(root / "cars_annos.mat", {"annotations": annotations})


def _write_sop(root: Path) -> None:
    """Ebay_train.txt (classes 1-2) and Ebay_test.txt (classes 11319-11324, 2 super classes)."""
    folder = root / "Stanford_Online_Products"
    for file_name, classes in (
        ("Ebay_train.txt", [1, 2]),
        ("Ebay_test.txt", list(range(11319, 11325))),
    ):
        lines = ["image_id class_id super_class_id path"]
        for cls in classes:
            super_class, name = (1, "bicycle") if cls % 2 else (2, "cabinet")
            for k in range(3):
                rel = f"{name}_final/{cls:012d}_{k}.JPG"
                lines.append(f"{len(lines)} {cls} {super_class} {rel}")
                _write_image(folder / rel, cls, k)
        (folder / file_name).write_text("\n".join(lines) + "\n")


def _write_inaturalist(root: Path) -> None:
    """Inaturalist_{train,test}_set1.txt: train categories 10-11, test 7000-7005."""
    for file_name, categories in (
        ("Inaturalist_train_set1.txt", [10, 11]),
        ("Inaturalist_test_set1.txt", list(range(7000, 7006))),
    ):
        lines = []
        for category in categories:
            supercategory = "Plantae" if category % 2 else "Insecta"
            for k in range(4):
                rel = f"train_val2018/{supercategory}/{category}/{category}_{k}.jpg"
                lines.append(rel)
                _write_image(root / rel, category, k)
        (root / file_name).write_text("\n".join(lines) + "\n")


def _write_inshop(root: Path) -> None:
    """Eval/list_eval_partition.txt and Img/img/...: train items 1-2, query/gallery items 3-8."""
    rows = []
    for item in range(1, 9):
        statuses = ["train"] * 4 if item <= 2 else ["query", "query", "gallery", "gallery"]
        for k, status in enumerate(statuses):
            name = f"img/WOMEN/Dresses/id_{item:08d}/{k:02d}_{k + 1}_front.jpg"
            rows.append(f"{name:<60}{f'id_{item:08d}':<15}{status}")
            _write_image(root / "Img" / name, item, k)
    (root / "Eval").mkdir(parents=True, exist_ok=True)
    header = [str(len(rows)), "image_name item_id evaluation_status"]
    (root / "Eval" / "list_eval_partition.txt").write_text("\n".join(header + rows) + "\n")


def write_miniatures(folder: Path) -> dict[str, Path]:
    """Write a miniature copy of each benchmark under ``folder``; return name -> root folder."""
    writers = {
        "cub": _write_cub,
        "cars196": _write_cars,
        "sop": _write_sop,
        "inaturalist": _write_inaturalist,
        "inshop": _write_inshop,
    }
    roots = {}
    for name, write in writers.items():
        roots[name] = Path(folder) / name
        roots[name].mkdir(parents=True, exist_ok=True)
        write(roots[name])
    return roots


class StandInEncoder(torch.nn.Module):
    """A stand-in for a trained network: 2x2 average pooling, then a fixed random projection."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d(2)
        self.project = torch.nn.Linear(12, dim, bias=False)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            self.project.weight.copy_(torch.randn(dim, 12, generator=generator))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.project(self.pool(images).flatten(1))


@torch.inference_mode()
def embed(split: Split, encoder: torch.nn.Module, batch_size: int = 64) -> torch.Tensor:
    """Embed every image of a split, row for row (``Split.open_image`` crops when boxes are
    loaded)."""
    rows = []
    for start in range(0, len(split), batch_size):
        batch = [
            torch.from_numpy(np.asarray(split.open_image(i), dtype=np.float32) / 255.0)
            for i in range(start, min(start + batch_size, len(split)))
        ]
        rows.append(encoder(torch.stack(batch).permute(0, 3, 1, 2)))
    return torch.cat(rows) if rows else torch.empty(0, 8)


def run(
    folder: Path,
) -> dict[str, tuple[Benchmark, torch.Tensor, torch.Tensor | None, Result]]:
    """Write, load, embed and evaluate every benchmark; name -> (benchmark, query embeddings,
    gallery embeddings or None, Result)."""
    encoder = StandInEncoder().eval()
    out = {}
    for name, root in write_miniatures(folder).items():
        benchmark = load_benchmark(name, root, allow_partial=True)
        query, gallery, _ = benchmark.evaluation_splits()
        query_embeddings = embed(query, encoder)
        gallery_embeddings = None if gallery is query else embed(gallery, encoder)
        with warnings.catch_warnings():
            # A miniature has fewer candidates than SOP's K = 1000: K is clamped, as documented.
            warnings.filterwarnings("ignore", message=r"recall_at_k: ks .* are clamped")
            result = evaluate_benchmark(benchmark, query_embeddings, gallery_embeddings)
        out[name] = (benchmark, query_embeddings, gallery_embeddings, result)
    return out


def _describe(benchmark: Benchmark, result: Result) -> str:
    query, gallery, _ = benchmark.evaluation_splits()
    if gallery is query:
        searched = f"{query.name} ({len(query)} images) against itself, self excluded"
    else:
        searched = f"{query.name} ({len(query)}) against {gallery.name} ({len(gallery)})"
    clamped = [k for k, e in zip(result.ks, result.effective_ks, strict=True) if k != e]
    note = f"; K {', '.join(map(str, clamped))} clamped to the candidates" if clamped else ""
    return f"{benchmark.title} ({benchmark.name}): {searched}{note}"


def main() -> dict[str, tuple[Benchmark, torch.Tensor, torch.Tensor | None, Result]]:
    """Write the miniatures to a temporary folder, evaluate each, print its recall@K table.

    Returns what [`run`][run] returns (the folder is gone by then; the embeddings are kept).
    """
    with tempfile.TemporaryDirectory() as folder:
        results = run(Path(folder))
    print(
        "Miniature copies of the official annotation files (not the real data, so the numbers "
        "are not comparable with papers); stand-in encoder, cosine similarity."
    )
    for name, (benchmark, _, _, result) in results.items():
        print()
        print(_describe(benchmark, result))
        print(f"  convention: {BENCHMARK_INFO[name].protocol.citation}")
        print(result.table())
    return results


if __name__ == "__main__":
    main()
