"""Writers of each benchmark's annotation files in its official format, for the dataset tests.

The full-size writers reproduce the documented counts with simple, known class sizes, so a test can
say by hand which class a given line holds. Images are empty files (the loaders only check that
they exist).
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

SOP_SUPER_NAMES = (
    "bicycle",
    "cabinet",
    "chair",
    "coffee_maker",
    "fan",
    "kettle",
    "lamp",
    "mug",
    "sofa",
    "stapler",
    "table",
    "toaster",
)
INAT_SUPERS = ("Plantae", "Insecta", "Aves", "Reptilia", "Mammalia", "Fungi", "Amphibia")


def touch(root: Path, relative_paths) -> None:
    """Create an empty file at each relative path."""
    for rel in relative_paths:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


# ---------------------------------------------------------------- CUB-200-2011


def cub_full_sizes() -> list[tuple[int, int]]:
    """(class, images): classes 1–68 have 58 images and 69–100 have 60 (5,864 in all);
    classes 101–176 have 59 and 177–200 have 60 (5,924 in all)."""
    sizes = [(c, 58 if c <= 68 else 60) for c in range(1, 101)]
    sizes += [(c, 59 if c <= 176 else 60) for c in range(101, 201)]
    return sizes


def write_cub(
    root: Path,
    sizes: list[tuple[int, int]],
    *,
    boxes: bool = False,
    images: bool = False,
    shuffle_labels: bool = True,
) -> Path:
    """CUB_200_2011/ with images.txt, image_class_labels.txt (lines reversed when
    ``shuffle_labels``: ids, not line order, pair the files), train_test_split.txt (the
    classification split, alternating, which the loader must ignore) and bounding_boxes.txt."""
    folder = root / "CUB_200_2011"
    folder.mkdir(parents=True, exist_ok=True)
    image_lines, label_lines, split_lines, box_lines, rels = [], [], [], [], []
    image_id = 0
    for cls, count in sizes:
        for k in range(count):
            image_id += 1
            rel = f"{cls:03d}.Bird_{cls}/Bird_{cls}_{k:04d}_{image_id}.jpg"
            rels.append(rel)
            image_lines.append(f"{image_id} {rel}")
            label_lines.append(f"{image_id} {cls}")
            split_lines.append(f"{image_id} {image_id % 2}")
            box_lines.append(f"{image_id} {image_id % 7}.0 {image_id % 5}.0 {10 + k}.0 20.0")
    if shuffle_labels:
        label_lines.reverse()
    (folder / "images.txt").write_text("\n".join(image_lines) + "\n")
    (folder / "image_class_labels.txt").write_text("\n".join(label_lines) + "\n")
    (folder / "train_test_split.txt").write_text("\n".join(split_lines) + "\n")
    if boxes:
        (folder / "bounding_boxes.txt").write_text("\n".join(box_lines) + "\n")
    if images:
        touch(folder / "images", rels)
    return folder


# ---------------------------------------------------------------- Cars196


def _struct(entries: list[dict]) -> np.ndarray:
    names = list(entries[0])
    array = np.zeros((1, len(entries)), dtype=[(n, "O") for n in names])
    for i, entry in enumerate(entries):
        array[0, i] = tuple(entry[n] for n in names)
    return array


def cars_entry(cls: int, box=(1, 2, 30, 40), **name) -> dict:
    x1, y1, x2, y2 = box
    entry = {
        "bbox_x1": np.uint16(x1),
        "bbox_y1": np.uint16(y1),
        "bbox_x2": np.uint16(x2),
        "bbox_y2": np.uint16(y2),
        "class": np.uint8(cls),
    }
    entry.update(name)
    return entry


def write_cars_annos(root: Path, classes: list[int], *, images: bool = False) -> list[str]:
    """cars_annos.mat: entry i (0-based) is car_ims/{i+1:06d}.jpg of class classes[i]; the
    ``test`` flag alternates (the classification split, to be ignored)."""
    from scipy.io import savemat

    root.mkdir(parents=True, exist_ok=True)
    rels = [f"car_ims/{i + 1:06d}.jpg" for i in range(len(classes))]
    entries = []
    for i, cls in enumerate(classes):
        entry = {"relative_im_path": rels[i]}
        entry.update(cars_entry(cls, box=(1 + i, 2, 30 + i, 40)))
        entry["test"] = np.uint8(i % 2)
        entries.append(entry)
    names = np.array([f"Make Model {c}" for c in range(1, 197)], dtype=object)[None, :]
    savemat(root / "cars_annos.mat", {"annotations": _struct(entries), "class_names": names})
    if images:
        touch(root, rels)
    return rels


def write_cars_devkit(
    root: Path,
    train_classes: list[int],
    test_classes: list[int],
    *,
    folder: str = "devkit",
    with_labels: bool = True,
    images: bool = False,
) -> None:
    """The devkit: cars_train_annos.mat / cars_test_annos_withlabels.mat with file names
    00001.jpg, 00002.jpg, ... restarting in each (as distributed), and cars_meta.mat."""
    from scipy.io import savemat

    devkit = root / folder
    devkit.mkdir(parents=True, exist_ok=True)
    for classes, file_name, image_folder in (
        (train_classes, "cars_train_annos.mat", "cars_train"),
        (
            test_classes,
            "cars_test_annos_withlabels.mat" if with_labels else "cars_test_annos.mat",
            "cars_test",
        ),
    ):
        entries = [cars_entry(c, fname=f"{i + 1:05d}.jpg") for i, c in enumerate(classes)]
        if not with_labels and image_folder == "cars_test":
            for entry in entries:
                del entry["class"]
        savemat(devkit / file_name, {"annotations": _struct(entries)})
        if images:
            touch(root / image_folder, [f"{i + 1:05d}.jpg" for i in range(len(classes))])
    names = np.array([f"Make Model {c}" for c in range(1, 197)], dtype=object)[None, :]
    savemat(devkit / "cars_meta.mat", {"class_names": names})


# ---------------------------------------------------------------- Stanford Online Products


def sop_full_sizes() -> dict[str, list[tuple[int, int]]]:
    """Train: classes 1–2,961 have 6 images, 2,962–11,318 have 5 (59,551 in all).
    Test: classes 11,319–15,240 have 6, 15,241–22,634 have 5 (60,502 in all)."""
    train = [(c, 6 if c <= 2961 else 5) for c in range(1, 11319)]
    test = [(c, 6 if c <= 15240 else 5) for c in range(11319, 22635)]
    return {"train": train, "test": test}


def sop_super(cls: int) -> int:
    """Super class of a class: 12 contiguous blocks of class ids per split."""
    if cls <= 11318:
        return 1 + (cls - 1) * 12 // 11318
    return 1 + (cls - 11319) * 12 // 11316


def write_sop(root: Path, sizes: dict[str, list[tuple[int, int]]], *, images: bool = False) -> Path:
    folder = root / "Stanford_Online_Products"
    folder.mkdir(parents=True, exist_ok=True)
    for split, file_name in (("train", "Ebay_train.txt"), ("test", "Ebay_test.txt")):
        lines = ["image_id class_id super_class_id path"]
        rels = []
        image_id = 0
        for cls, count in sizes[split]:
            sup = sop_super(cls)
            for k in range(count):
                image_id += 1
                rel = f"{SOP_SUPER_NAMES[sup - 1]}_final/{cls:012d}_{k}.JPG"
                rels.append(rel)
                lines.append(f"{image_id} {cls} {sup} {rel}")
        (folder / file_name).write_text("\n".join(lines) + "\n")
        if images:
            touch(folder, rels)
    return folder


# ---------------------------------------------------------------- iNaturalist 2018


def inat_full_sizes() -> dict[str, list[tuple[int, int]]]:
    """Train: categories 0–1,515 have 58 images, 1,516–5,689 have 57 (325,846 in all).
    Test: categories 5,690–6,922 have 56, 6,923–8,141 have 55 (136,093 in all)."""
    train = [(c, 58 if c < 1516 else 57) for c in range(0, 5690)]
    test = [(c, 56 if c < 5690 + 1233 else 55) for c in range(5690, 8142)]
    return {"train": train, "test": test}


def inat_super(category: int) -> str:
    return INAT_SUPERS[category % len(INAT_SUPERS)]


def write_inat(
    root: Path, sizes: dict[str, list[tuple[int, int]]], *, images: bool = False
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for split, file_name in (
        ("train", "Inaturalist_train_set1.txt"),
        ("test", "Inaturalist_test_set1.txt"),
    ):
        rels = [
            f"train_val2018/{inat_super(c)}/{c}/{c:05d}{k:03d}.jpg"
            for c, count in sizes[split]
            for k in range(count)
        ]
        (root / file_name).write_text("\n".join(rels) + "\n")
        if images:
            touch(root, rels)
    return root


# ---------------------------------------------------------------- In-Shop


def inshop_full_items() -> list[tuple[int, str, int]]:
    """(item, status, images) in item order. Train items are odd (1, 3, ..., 7,993): the first
    1,900 have 7 images, the others 6 (25,882 in all). Test items are even (2, ..., 7,970): the
    first 2,263 have 4 query images (others 3: 14,218 in all), the first 657 have 4 gallery
    images (others 3: 12,612 in all)."""
    rows = []
    for k in range(1, 3998):
        item = 2 * k - 1
        rows.append((item, "train", 7 if k <= 1900 else 6))
        if k <= 3985:
            rows.append((2 * k, "query", 4 if k <= 2263 else 3))
            rows.append((2 * k, "gallery", 4 if k <= 657 else 3))
    rows.sort(key=lambda r: r[0])
    return rows


def write_inshop(
    root: Path,
    items: list[tuple[int, str, int]],
    *,
    layout: str = "deepfashion",
    images: bool = False,
    count: int | None = None,
) -> Path:
    """list_eval_partition.txt with the count line, header and space-padded rows. With
    ``layout="deepfashion"`` the file is in Eval/ and images in Img/; with ``"flat"`` both in
    ``root``."""
    lines = []
    for item, status, n in items:
        view = {"train": 1, "query": 2, "gallery": 3}[status]
        gender = "WOMEN" if item % 3 else "MEN"
        for j in range(n):
            name = f"img/{gender}/Dresses/id_{item:08d}/{j:02d}_{view}_front.jpg"
            lines.append((name, f"id_{item:08d}", status))
    text = [str(len(lines) if count is None else count), "image_name item_id evaluation_status"]
    text += [f"{name:<70}{item:<21}{status}" for name, item, status in lines]
    eval_folder = root / "Eval" if layout == "deepfashion" else root
    eval_folder.mkdir(parents=True, exist_ok=True)
    (eval_folder / "list_eval_partition.txt").write_text("\n".join(text) + "\n")
    image_root = root / "Img" if layout == "deepfashion" else root
    image_root.mkdir(parents=True, exist_ok=True)
    if images:
        touch(image_root, [name for name, _, _ in lines])
    return eval_folder / "list_eval_partition.txt"


# ---------------------------------------------------------------- brute-force metrics


def _brute_force(query, gallery, query_labels, gallery_labels, ks, self_excluded, metric="dot"):
    """Recall@K, MAP@R and R-precision with dot-product (or cosine) scores in float64.

    Each query's candidates are ranked by a full stable sort on (-score, index), its own row
    removed when self_excluded. Lone queries (no candidate with their label) are left out.
    """
    q = np.asarray(query, dtype=np.float64)
    g = np.asarray(gallery, dtype=np.float64)
    if metric == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        g = g / np.linalg.norm(g, axis=1, keepdims=True)
    scores = q @ g.T
    hits = {k: [] for k in ks}
    aps, rps = [], []
    for i in range(len(q)):
        candidates = [j for j in range(len(g)) if not (self_excluded and j == i)]
        order = sorted(candidates, key=lambda j: (-scores[i, j], j))
        relevant = [gallery_labels[j] == query_labels[i] for j in order]
        r = sum(relevant)
        if r == 0:
            continue
        first = relevant.index(True)
        for k in ks:
            hits[k].append(first < k)
        rps.append(sum(relevant[:r]) / r)
        found, ap = 0, 0.0
        for position in range(r):
            if relevant[position]:
                found += 1
                ap += found / (position + 1)
        aps.append(ap / r)
    recall = {f"recall@{k}": float(np.mean(hits[k])) for k in ks}
    return recall, float(np.mean(aps)), float(np.mean(rps))


@pytest.fixture
def brute_force():
    """The slow, obviously correct reference metrics above."""
    return _brute_force


@pytest.fixture
def fmt():
    """The writers above, as a namespace."""
    return types.SimpleNamespace(
        touch=touch,
        cub_full_sizes=cub_full_sizes,
        write_cub=write_cub,
        cars_entry=cars_entry,
        write_cars_annos=write_cars_annos,
        write_cars_devkit=write_cars_devkit,
        sop_full_sizes=sop_full_sizes,
        sop_super=sop_super,
        write_sop=write_sop,
        inat_full_sizes=inat_full_sizes,
        inat_super=inat_super,
        write_inat=write_inat,
        inshop_full_items=inshop_full_items,
        write_inshop=write_inshop,
        SOP_SUPER_NAMES=SOP_SUPER_NAMES,
    )


@pytest.fixture(scope="session")
def full_cub(tmp_path_factory) -> Path:
    """Full-size CUB files (11,788 lines, with bounding boxes and empty image files)."""
    root = tmp_path_factory.mktemp("cub_full")
    write_cub(root, cub_full_sizes(), boxes=True, images=True)
    return root


@pytest.fixture(scope="session")
def full_sop(tmp_path_factory) -> Path:
    """Full-size Ebay_train.txt / Ebay_test.txt (no images)."""
    root = tmp_path_factory.mktemp("sop_full")
    write_sop(root, sop_full_sizes())
    return root


@pytest.fixture(scope="session")
def full_inat(tmp_path_factory) -> Path:
    """Full-size Inaturalist_{train,test}_set1.txt (no images)."""
    root = tmp_path_factory.mktemp("inat_full")
    write_inat(root, inat_full_sizes())
    return root


@pytest.fixture(scope="session")
def full_inshop(tmp_path_factory) -> Path:
    """Full-size list_eval_partition.txt in the DeepFashion layout (no images)."""
    root = tmp_path_factory.mktemp("inshop_full")
    write_inshop(root, inshop_full_items())
    return root
