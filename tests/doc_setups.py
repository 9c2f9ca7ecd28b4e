"""Setups of the documentation's code blocks (``<!-- docs-test: setup=NAME -->``).

Each function takes the running :class:`tests.test_readme.Session` and writes, in its working
folder, the files a block names (stand-in images, embeddings, annotation files in each
benchmark's official format), and defines the names the block uses but does not define (the
reader's own encoder output, for example). Every setup is deterministic and idempotent.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

DIM = 16


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def _near(targets: np.ndarray, rng: np.random.Generator, noise: float = 1.5) -> np.ndarray:
    return (targets + noise * rng.standard_normal(targets.shape)).astype(np.float32)


def _write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


# ------------------------------------------------------------------ metric-learning benchmarks


def _cub_sizes() -> list[tuple[int, int]]:
    """(class, images) with CUB-200-2011's documented totals: 5,864 train and 5,924 test."""
    sizes = [(c, 58 if c <= 68 else 60) for c in range(1, 101)]
    return sizes + [(c, 59 if c <= 176 else 60) for c in range(101, 201)]


def cub(session: Any) -> None:
    """``data/CUB_200_2011`` at full size (empty image files), ``my_model_embed``, ``cub.npy``."""
    folder = session.workdir / "data" / "CUB_200_2011"
    rng = _rng("cub")
    centres = rng.standard_normal((201, DIM))
    if not folder.exists():
        images, labels, image_id = [], [], 0
        for cls, count in _cub_sizes():
            for k in range(count):
                image_id += 1
                rel = f"{cls:03d}.Bird_{cls}/Bird_{cls}_{k:04d}.jpg"
                images.append(f"{image_id} {rel}")
                labels.append(f"{image_id} {cls}")
                path = folder / "images" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
        (folder / "images.txt").write_text("\n".join(images) + "\n")
        (folder / "image_class_labels.txt").write_text("\n".join(labels) + "\n")

    def my_model_embed(paths: Any) -> np.ndarray:
        classes = [int(Path(p).parent.name.split(".")[0]) for p in paths]
        return _near(centres[classes], rng)

    session.ns["my_model_embed"] = my_model_embed
    test = [(c, n) for c, n in _cub_sizes() if c > 100]
    np.save(
        "cub.npy", _near(np.repeat(centres[[c for c, _ in test]], [n for _, n in test], 0), rng)
    )


# --------------------------------------------------------------------- image-text retrieval


def _karpathy(path: Path, dataset: str, num_test: int, captions: list[int]) -> None:
    images, sentid = [], 0
    for imgid, count in enumerate([*captions, 5, 5]):  # two train images after the test split
        sentences = []
        for _ in range(count):
            words = ["a", "photo", "of", f"thing{imgid}"]
            sentences.append(
                {"tokens": words, "raw": " ".join(words), "imgid": imgid, "sentid": sentid}
            )
            sentid += 1
        images.append(
            {
                "filename": f"{dataset}_{imgid:06d}.jpg",
                "imgid": imgid,
                "split": "test" if imgid < num_test else "train",
                "sentences": sentences,
                "sentids": [s["sentid"] for s in sentences],
            }
        )
    _write_json(path, {"images": images, "dataset": dataset})


def karpathy(session: Any) -> None:
    """COCO 5k (25,010 captions) and Flickr30k 1k Karpathy files, embeddings, a score matrix."""
    rng = _rng("karpathy")
    coco = [6] * 10 + [5] * 4990  # 25,010 test captions, as in the published split
    _karpathy(Path("dataset_coco.json"), "coco", 5000, coco)
    _karpathy(Path("dataset_flickr30k.json"), "flickr30k", 1000, [5] * 1000)
    images = rng.standard_normal((5000, DIM)).astype(np.float32)
    texts = _near(np.repeat(images, coco, axis=0), rng)
    session.ns.update(image_emb=images, text_emb=texts)
    np.save("img.npy", images)
    np.save("txt.npy", texts)
    flickr = rng.standard_normal((1000, DIM)).astype(np.float32)
    captions = _near(np.repeat(flickr, 5, axis=0), rng)
    np.save("sim.npy", flickr @ captions.T)


# ------------------------------------------------------------------ composed image retrieval


def cirr(session: Any) -> None:
    """CIRR val and test1 files (the recipe's writer), embeddings in the official row orders."""
    from docs.recipes.composed_retrieval import write_cirr_files
    from recallkit.protocols import read_cirr

    rng = _rng("cirr")
    for split in ("val", "test1"):
        write_cirr_files(Path("CIRR"), split, num_sets=30, rng=rng)
    val, test = read_cirr("CIRR", "val"), read_cirr("CIRR", "test1")
    images = rng.standard_normal((len(val.image_names), DIM)).astype(np.float32)
    row = {n: i for i, n in enumerate(val.image_names)}
    query = _near(images[[row[q.target_hard] for q in val.queries]], rng)
    test_images = rng.standard_normal((len(test.image_names), DIM)).astype(np.float32)
    test_query = rng.standard_normal((len(test.queries), DIM)).astype(np.float32)
    session.ns.update(
        query_emb=query, image_emb=images, test_query=test_query, test_images=test_images
    )
    for name, array in (
        ("q", query),
        ("img", images),
        ("q_test", test_query),
        ("img_test", test_images),
    ):
        np.save(f"{name}.npy", array)


def circo(session: Any) -> None:
    """CIRCO val/test annotations and image info, embeddings, ids, a ranked-list file."""
    from docs.recipes.composed_retrieval import write_circo_files
    from recallkit.protocols import read_circo, read_coco_image_ids

    rng = _rng("circo")
    write_circo_files(Path("CIRCO"), num_images=300, rng=rng)
    ids = read_coco_image_ids("CIRCO/COCO2017_unlabeled/annotations/image_info_unlabeled2017.json")
    images = rng.standard_normal((len(ids), DIM)).astype(np.float32)
    row = {int(i): r for r, i in enumerate(ids)}
    val, test = read_circo("CIRCO", "val"), read_circo("CIRCO", "test")
    query = _near(np.stack([images[row[q.target_img_id]] for q in val.queries]), rng)
    q_test = rng.standard_normal((len(test.queries), DIM)).astype(np.float32)
    session.ns.update(query_emb=query, image_emb=images, q_test=q_test)
    for name, array in (("q", query), ("img", images), ("q_test", q_test)):
        np.save(f"{name}.npy", array)
    np.save("ids.npy", np.asarray(ids, dtype=np.int64))
    order = np.argsort(-(query @ images.T), axis=1, kind="stable")[:, :50]
    rankings = {
        str(q.id): [int(ids[j]) for j in top] for q, top in zip(val.queries, order, strict=True)
    }
    _write_json(Path("val_rankings.json"), rankings)


def fashioniq(session: Any) -> None:
    """FashionIQ validation files per category, and each category's embeddings."""
    from docs.recipes.composed_retrieval import write_fashioniq_files
    from recallkit.protocols import read_fashioniq

    rng = _rng("fashioniq")
    write_fashioniq_files(Path("fashionIQ"), num_images=120, rng=rng)
    queries, galleries = {}, {}
    for category, part in read_fashioniq("fashionIQ").items():
        gallery = rng.standard_normal((len(part.image_names), DIM)).astype(np.float32)
        row = {n: i for i, n in enumerate(part.image_names)}
        queries[category] = _near(gallery[[row[q.target] for q in part.queries]], rng)
        galleries[category] = gallery
        np.save(f"q{category[0]}.npy", queries[category])
        np.save(f"g{category[0]}.npy", gallery)
    session.ns.update(queries_by_category=queries, galleries_by_category=galleries)


def genecis(session: Any) -> None:
    """The four GeneCIS task files, and each task's (samples, 1 + gallery) scores, target first."""
    import torch

    from docs.recipes.composed_retrieval import write_genecis_files
    from recallkit.protocols import read_genecis_tasks

    rng = _rng("genecis")
    write_genecis_files(Path("genecis"), num_samples=40, rng=rng)
    scores = {}
    files = {
        "focus_attribute": "fa",
        "change_attribute": "ca",
        "focus_object": "fo",
        "change_object": "co",
    }
    for task, data in read_genecis_tasks("genecis").items():
        matrix = rng.standard_normal((len(data.samples), int(data.gallery_sizes.max())))
        matrix[:, 0] += 1.0  # the target scores a little higher than the distractors
        scores[task] = matrix.astype(np.float32)
        torch.save(torch.from_numpy(scores[task]), f"{files[task]}.pt")
    session.ns["scores"] = scores


# ---------------------------------------------------------------------------- the runner


def demo(session: Any) -> None:
    """The demo's files (a ``--fast`` run), with epoch 1's run file also saved as epoch 3's.

    The full demo trains five epochs (about 40 s); its files have the same form.
    """
    from recallkit.cli import main

    out = Path("recallkit-demo")
    if not (out / "epoch-1.json").exists():
        assert main(["demo", "--fast", "--out", str(out), "--keep-images"]) == 0
    for suffix in (".json", ".npy"):
        if not (out / f"epoch-3{suffix}").exists():
            shutil.copy(out / f"epoch-1{suffix}", out / f"epoch-3{suffix}")
    record = json.loads((out / "epoch-3.json").read_text())
    if record.get("tag") != "epoch-3":  # named as the full demo's run file is
        record["tag"] = "epoch-3"
        (out / "epoch-3.json").write_text(json.dumps(record))


def folders(session: Any) -> None:
    """``data/query`` and ``data/gallery`` (a subfolder per class), and their embeddings."""
    from PIL import Image

    rng = _rng("folders")
    colours = {"red": (200, 40, 40), "green": (40, 200, 40), "blue": (40, 40, 200)}
    for part, count in (("query", 1), ("gallery", 2)):
        rows = []
        for label, colour in colours.items():
            for i in range(count):
                path = Path("data") / part / label / f"{label}-{i}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                pixel = tuple(int(c + rng.integers(-30, 30)) for c in colour)
                Image.new("RGB", (16, 16), pixel).save(path)
                rows.append(pixel)
        name = "q" if part == "query" else "g"
        np.save(f"{name}.npy", np.asarray(rows, dtype=np.float32))


def resnet50(session: Any) -> None:
    """``resnet50.pth``: a randomly initialised torchvision ResNet-50 state dict."""
    import torch
    import torchvision

    if not Path("resnet50.pth").exists():
        torch.manual_seed(0)
        torch.save(torchvision.models.resnet50(weights=None).state_dict(), "resnet50.pth")


# ----------------------------------------------------------------------------------- scale


def process_group(session: Any) -> None:
    """A one-process gloo group (as under ``torchrun``), ``val_set`` and ``model``."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import TensorDataset

    if not dist.is_initialized():
        store = session.workdir / "process-group"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
        session.finalizers.append(dist.destroy_process_group)
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 50, (400,), generator=g)
    inputs = torch.randn(50, 32, generator=g)[labels] + 0.8 * torch.randn(400, 32, generator=g)
    torch.manual_seed(0)
    session.ns.update(
        val_set=TensorDataset(inputs, labels),
        model=torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 16)
        ),
    )


def gallery_file(session: Any) -> None:
    """``gallery.npy`` (20,000 rows), ``queries``, ``query_labels``, ``gallery_labels``."""
    rng = _rng("gallery")
    centres = rng.standard_normal((500, DIM))
    gallery_labels = rng.integers(0, 500, size=20_000)
    query_labels = rng.integers(0, 500, size=200)
    np.save("gallery.npy", _near(centres[gallery_labels], rng))
    session.ns.update(
        queries=_near(centres[query_labels], rng),
        query_labels=query_labels,
        gallery_labels=gallery_labels,
    )
