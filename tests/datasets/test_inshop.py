"""In-Shop Clothes Retrieval from a full-size list_eval_partition.txt."""

from __future__ import annotations

import numpy as np
import pytest

from recallkit.datasets import DatasetError, load_benchmark, load_inshop

HEADER = "image_name item_id evaluation_status"


def test_full_size_counts_labels_and_protocol(full_inshop):
    shop = load_inshop(full_inshop, check_images=False)
    train, query, gallery = (shop.splits[name] for name in ("train", "query", "gallery"))
    assert (len(train), len(query), len(gallery)) == (25882, 14218, 12612)
    assert np.unique(train.labels).size == 3997
    assert np.unique(query.labels).size == 3985 and np.unique(gallery.labels).size == 3985
    assert set(query.labels.tolist()) == set(gallery.labels.tolist())
    assert not set(train.labels.tolist()) & set(query.labels.tolist())
    # Lines 3-9 are item 1 (train, 7 images), lines 10-13 item 2's queries, 14-17 its gallery
    # images, line 18 item 3 (train).
    assert train.labels[:8].tolist() == [1] * 7 + [3]
    assert train.relative_paths[0] == "img/WOMEN/Dresses/id_00000001/00_1_front.jpg"
    assert query.labels[:5].tolist() == [2, 2, 2, 2, 4]
    assert gallery.labels[:5].tolist() == [2, 2, 2, 2, 4]
    assert gallery.relative_paths[0] == "img/WOMEN/Dresses/id_00000002/00_3_front.jpg"
    # The last train item is 2 * 3997 - 1 = 7993; the last test item 2 * 3985 = 7970.
    assert (train.labels.max(), query.labels.max()) == (7993, 7970)
    assert query.root == full_inshop / "Img"
    assert query.root / query.relative_paths[0] == (
        full_inshop / "Img" / "img" / "WOMEN" / "Dresses" / "id_00000002" / "00_2_front.jpg"
    )
    assert shop.complete and [f.name for f in shop.files] == ["list_eval_partition.txt"]
    protocol = shop.protocol
    assert protocol.ks == (1, 10, 20, 30, 40, 50)
    assert (protocol.query_split, protocol.gallery_split, protocol.query_in_reference) == (
        "query",
        "gallery",
        False,
    )
    assert "DeepFashion" in protocol.citation
    q, g, self_excluded = shop.evaluation_splits()
    assert q is query and g is gallery and self_excluded is False


def _write(folder, rows, count=None):
    lines = [str(len(rows) if count is None else count), HEADER]
    lines += [f"{name:<60}{item:<15}{status}" for name, item, status in rows]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "list_eval_partition.txt").write_text("\n".join(lines) + "\n")


ROWS = [
    ("img/MEN/Denim/id_00000001/01_1_front.jpg", "id_00000001", "train"),
    ("img/MEN/Denim/id_00000001/01_2_side.jpg", "id_00000001", "train"),
    ("img/MEN/Denim/id_00000080/01_1_front.jpg", "id_00000080", "query"),
    ("img/MEN/Denim/id_00000080/01_2_side.jpg", "id_00000080", "gallery"),
]


def test_flat_layout_and_partial_error(tmp_path, fmt):
    _write(tmp_path, ROWS)
    fmt.touch(tmp_path, [r[0] for r in ROWS])
    shop = load_benchmark("inshop", tmp_path, allow_partial=True)
    assert shop.splits["train"].labels.tolist() == [1, 1]
    assert shop.splits["query"].labels.tolist() == [80]
    assert shop.splits["gallery"].relative_paths == ("img/MEN/Denim/id_00000080/01_2_side.jpg",)
    assert shop.splits["query"].root == tmp_path
    with pytest.raises(DatasetError, match=r"list_eval_partition\.txt gives the In-Shop Clothes"):
        load_inshop(tmp_path, check_images=False)


def test_missing_images_under_img(tmp_path):
    _write(tmp_path / "Eval", ROWS)
    (tmp_path / "Img").mkdir()
    with pytest.raises(FileNotFoundError, match=r"4 of the 4 images .*None of them exists"):
        load_inshop(tmp_path, allow_partial=True)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([*ROWS[:3], ("a.jpg", "id_80", "query")], r"line 6: the item_id must be id_ followed"),
        ([*ROWS[:3], ("a.jpg", "id_00000000", "query")], r"line 6: the item_id must be"),
        ([*ROWS, ("a.jpg", "id_00000080", "val")], r"line 7: the evaluation_status must be one"),
        ([*ROWS, ("a.jpg", "id_00000080", "train")], r"line 7: train item id_00000080 is also"),
        ([*ROWS, (ROWS[0][0], "id_00000001", "train")], r"duplicate image_name .* lines 3 and 7"),
    ],
)
def test_malformed_rows(tmp_path, rows, message):
    _write(tmp_path, rows)
    with pytest.raises(DatasetError, match=message):
        load_inshop(tmp_path, allow_partial=True, check_images=False)


def test_count_line_header_and_field_count(tmp_path):
    _write(tmp_path, ROWS, count=5)
    with pytest.raises(DatasetError, match=r"line 1: the file declares 5 images but lists 4"):
        load_inshop(tmp_path, allow_partial=True, check_images=False)
    _write(tmp_path, ROWS, count="many")
    with pytest.raises(DatasetError, match=r"line 1: expected the number of images"):
        load_inshop(tmp_path, allow_partial=True, check_images=False)
    text = (tmp_path / "list_eval_partition.txt").read_text().splitlines()
    (tmp_path / "list_eval_partition.txt").write_text("\n".join(["4", *text[2:]]) + "\n")
    with pytest.raises(DatasetError, match=r"line 2: expected the header"):
        load_inshop(tmp_path, allow_partial=True, check_images=False)
    _write(tmp_path, [*ROWS[:3], ("a.jpg", "query", "")])
    with pytest.raises(DatasetError, match=r"line 6: expected 3 fields"):
        load_inshop(tmp_path, allow_partial=True, check_images=False)


def test_query_and_gallery_items_must_match_unless_partial(tmp_path, fmt):
    items = fmt.inshop_full_items()
    # Drop the gallery images of item 2: it keeps its 4 queries but has no gallery image.
    items = [row for row in items if row[:2] != (2, "gallery")]
    fmt.write_inshop(tmp_path, items)
    with pytest.raises(DatasetError, match=r"1 item\(s\) have query images but no gallery image"):
        load_inshop(tmp_path, check_images=False)
    shop = load_inshop(tmp_path, allow_partial=True, check_images=False)
    assert len(shop.splits["gallery"]) == 12612 - 4 and not shop.complete
