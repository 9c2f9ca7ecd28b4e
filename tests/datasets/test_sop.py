"""Stanford Online Products from full-size Ebay_train.txt / Ebay_test.txt."""

from __future__ import annotations

import numpy as np
import pytest

from recallkit.datasets import DatasetError, load_benchmark, load_sop

HEADER = "image_id class_id super_class_id path"


def test_full_size_counts_labels_and_protocol(full_sop):
    sop = load_sop(full_sop, check_images=False)
    train, test = sop.splits["train"], sop.splits["test"]
    assert (len(train), len(test)) == (59551, 60502)
    assert (train.labels.min(), train.labels.max()) == (1, 11318)
    assert (test.labels.min(), test.labels.max()) == (11319, 22634)
    assert np.unique(train.labels).size == 11318 and np.unique(test.labels).size == 11316
    assert train.labels.dtype == np.int64 and train.coarse_labels.dtype == np.int64
    assert set(np.unique(train.coarse_labels).tolist()) == set(range(1, 13))
    assert set(np.unique(test.coarse_labels).tolist()) == set(range(1, 13))
    # Line 2 (row 0): "1 1 1 bicycle_final/000000000001_0.JPG". Class 1 has 6 images, so line 8
    # (row 6) is the first of class 2.
    assert (train.labels[0], train.coarse_labels[0]) == (1, 1)
    assert train.relative_paths[0] == "bicycle_final/000000000001_0.JPG"
    assert (train.labels[5], train.labels[6]) == (1, 2)
    # Last train line: class 11318 in super class 1 + 11317 * 12 // 11318 = 12 (toaster).
    assert (train.labels[-1], train.coarse_labels[-1]) == (11318, 12)
    assert train.relative_paths[-1].startswith("toaster_final/")
    assert (test.labels[0], test.coarse_labels[0]) == (11319, 1)
    assert (
        test.root / test.relative_paths[0]
        == full_sop / "Stanford_Online_Products" / test.relative_paths[0]
    )
    assert sop.complete
    protocol = sop.protocol
    assert protocol.ks == (1, 10, 100, 1000)
    assert (protocol.query_split, protocol.gallery_split, protocol.query_in_reference) == (
        "test",
        None,
        True,
    )
    query, gallery, self_excluded = sop.evaluation_splits()
    assert query is test and gallery is test and self_excluded


def test_load_by_name_from_the_inner_folder(full_sop):
    sop = load_benchmark("sop", full_sop / "Stanford_Online_Products", check_images=False)
    assert len(sop.splits["test"]) == 60502


def _write(folder, train_lines, test_lines):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Ebay_train.txt").write_text("\n".join([HEADER, *train_lines]) + "\n")
    (folder / "Ebay_test.txt").write_text("\n".join([HEADER, *test_lines]) + "\n")


TRAIN = ["1 1 1 bicycle_final/a_0.JPG", "2 1 1 bicycle_final/a_1.JPG", "3 2 5 fan_final/b_0.JPG"]
TEST = ["1 11319 1 bicycle_final/c_0.JPG", "2 22634 12 toaster_final/d_0.JPG"]


def test_miniature_and_partial_error(tmp_path):
    _write(tmp_path, TRAIN, TEST)
    sop = load_sop(tmp_path, allow_partial=True, check_images=False)
    assert sop.splits["train"].labels.tolist() == [1, 1, 2]
    assert sop.splits["train"].coarse_labels.tolist() == [1, 1, 5]
    assert sop.splits["test"].labels.tolist() == [11319, 22634]
    assert not sop.complete
    with pytest.raises(DatasetError, match=r"Ebay_train\.txt gives the Stanford Online Products"):
        load_sop(tmp_path, check_images=False)


@pytest.mark.parametrize(
    ("train", "test", "message"),
    [
        (["x"], TEST, r"Ebay_train\.txt, line 2: expected 4 fields"),
        (TRAIN, [*TEST, "3 11320 1"], r"Ebay_test\.txt, line 4: expected 4 fields"),
        (TRAIN, ["1 11318 1 a/b.JPG"], r"Ebay_test\.txt, line 2: the class_id must be between "),
        (["1 11319 1 a/b.JPG"], TEST, r"between 1 and 11318 in the train split\. Got 11319"),
        (["1 1 13 a/b.JPG"], TEST, r"line 2: the super_class_id must be between 1 and 12"),
        ([*TRAIN, "1 3 1 a/z.JPG"], TEST, r"duplicate image_id 1 on lines 2 and 5"),
        ([*TRAIN, "4 3 1 fan_final/b_0.JPG"], TEST, r"duplicate path 'fan_final/b_0\.JPG'"),
        (["1 1.5 1 a/b.JPG"], TEST, r"line 2: the class_id must be an integer\. Got '1\.5'"),
    ],
)
def test_malformed_files(tmp_path, train, test, message):
    _write(tmp_path, train, test)
    with pytest.raises(DatasetError, match=message):
        load_sop(tmp_path, allow_partial=True, check_images=False)


def test_header_is_required(tmp_path):
    _write(tmp_path, TRAIN, TEST)
    text = (tmp_path / "Ebay_test.txt").read_text().splitlines()[1:]
    (tmp_path / "Ebay_test.txt").write_text("\n".join(text) + "\n")
    with pytest.raises(DatasetError, match=r"Ebay_test\.txt, line 1: expected the header"):
        load_sop(tmp_path, allow_partial=True, check_images=False)


def test_missing_file(tmp_path):
    _write(tmp_path, TRAIN, TEST)
    (tmp_path / "Ebay_test.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"needs the annotation file Ebay_test.txt"):
        load_sop(tmp_path, allow_partial=True)


def test_images_are_checked(tmp_path, fmt):
    _write(tmp_path, TRAIN, TEST)
    fmt.touch(tmp_path, [line.split()[3] for line in TRAIN + TEST])
    assert len(load_sop(tmp_path, allow_partial=True).splits["train"]) == 3
    (tmp_path / "fan_final" / "b_0.JPG").unlink()
    with pytest.raises(FileNotFoundError, match=r"1 of the 5 images"):
        load_sop(tmp_path, allow_partial=True)
