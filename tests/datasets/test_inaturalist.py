"""iNaturalist 2018 with the Smooth-AP split files, full size."""

from __future__ import annotations

import numpy as np
import pytest

from recallkit.datasets import (
    INATURALIST_SUPERCATEGORIES,
    DatasetError,
    load_benchmark,
    load_inaturalist,
)

TRAIN_FILE = "Inaturalist_train_set1.txt"
TEST_FILE = "Inaturalist_test_set1.txt"


def test_supercategories_are_the_fourteen_of_inaturalist_2018():
    assert len(INATURALIST_SUPERCATEGORIES) == 14
    assert INATURALIST_SUPERCATEGORIES[:3] == ("Actinopterygii", "Amphibia", "Animalia")
    assert INATURALIST_SUPERCATEGORIES[11] == "Plantae"


def test_full_size_counts_labels_and_protocol(full_inat):
    inat = load_inaturalist(full_inat, check_images=False)
    train, test = inat.splits["train"], inat.splits["test"]
    assert (len(train), len(test)) == (325846, 136093)
    assert (train.labels.min(), train.labels.max()) == (0, 5689)
    assert (test.labels.min(), test.labels.max()) == (5690, 8141)
    assert np.unique(train.labels).size == 5690 and np.unique(test.labels).size == 2452
    # Line 1: "train_val2018/Plantae/0/00000000.jpg" (category 0 is written under Plantae, index
    # 11 of the alphabetical tuple). Category 0 has 58 images, so row 58 is category 1 (Insecta,
    # index 8).
    assert train.relative_paths[0] == "train_val2018/Plantae/0/00000000.jpg"
    assert (train.labels[0], train.coarse_labels[0]) == (0, 11)
    assert (train.labels[57], train.labels[58], train.coarse_labels[58]) == (0, 1, 8)
    # Test line 1 is category 5690, written under INAT_SUPERS[5690 % 7 = 6] = Amphibia (index 1).
    assert (test.labels[0], test.coarse_labels[0]) == (5690, 1)
    assert (
        test.root / test.relative_paths[0]
        == full_inat / "train_val2018" / "Amphibia" / "5690" / "05690000.jpg"
    )
    assert inat.complete
    protocol = inat.protocol
    assert protocol.ks == (1, 4, 16, 32)
    assert (protocol.query_split, protocol.gallery_split, protocol.query_in_reference) == (
        "test",
        None,
        True,
    )
    assert "Smooth-AP" in protocol.citation
    query, gallery, self_excluded = inat.evaluation_splits()
    assert query is test and gallery is test and self_excluded


def _write(folder, train, test):
    (folder / TRAIN_FILE).write_text("\n".join(train) + "\n")
    (folder / TEST_FILE).write_text("\n".join(test) + "\n")


TRAIN = ["train_val2018/Plantae/7477/a.jpg", "train_val2018/Aves/3000/b.jpg"]
TEST = ["train_val2018/Fungi/5000/c.jpg", "train_val2018/Fungi/5000/d.jpg"]


def test_miniature_and_partial_error(tmp_path, fmt):
    _write(tmp_path, TRAIN, TEST)
    fmt.touch(tmp_path, TRAIN + TEST)
    inat = load_benchmark("inaturalist", tmp_path, allow_partial=True)
    assert inat.splits["train"].labels.tolist() == [7477, 3000]
    names = [INATURALIST_SUPERCATEGORIES[i] for i in inat.splits["train"].coarse_labels]
    assert names == ["Plantae", "Aves"]
    assert inat.splits["test"].coarse_labels.tolist() == [7, 7]  # Fungi
    with pytest.raises(DatasetError, match=r"Inaturalist_train_set1\.txt gives the iNaturalist"):
        load_inaturalist(tmp_path, check_images=False)


@pytest.mark.parametrize(
    ("train", "test", "message"),
    [
        ([*TRAIN, "val2018/Aves/3000/x.jpg"], TEST, r"train_set1\.txt, line 3: expected train_v"),
        ([*TRAIN, "x.jpg"], TEST, r"line 3: expected train_val2018"),
        ([*TRAIN, "train_val2018/Aves/3000/"], TEST, r"line 3: expected one path"),
        ([*TRAIN, "train_val2018/Aves/1/x.jpg 2"], TEST, r"line 3: expected one path"),
        (TRAIN, ["train_val2018/Dogs/1/x.jpg"], r"test_set1\.txt, line 1: unknown supercategory"),
        (TRAIN, ["train_val2018/Aves/8142/x.jpg"], r"between 0 and 8141, got 8142"),
        (TRAIN, [*TEST, "train_val2018/Aves/5000/e.jpg"], r"line 3: category 5000 is also under"),
        (TRAIN, ["train_val2018/Aves/3000/z.jpg"], r"line 1: category 3000 is also in the train"),
        ([*TRAIN, TRAIN[0]], TEST, r"duplicate path .* on lines 1 and 3"),
    ],
)
def test_malformed_files(tmp_path, train, test, message):
    _write(tmp_path, train, test)
    with pytest.raises(DatasetError, match=message):
        load_inaturalist(tmp_path, allow_partial=True, check_images=False)


def test_blank_lines_keep_line_numbers(tmp_path):
    _write(tmp_path, ["", TRAIN[0], "", "train_val2018/Nope/1/x.jpg"], TEST)
    with pytest.raises(DatasetError, match=r"train_set1\.txt, line 4: unknown supercategory"):
        load_inaturalist(tmp_path, allow_partial=True, check_images=False)


def test_missing_file(tmp_path):
    (tmp_path / TRAIN_FILE).write_text(TRAIN[0] + "\n")
    with pytest.raises(FileNotFoundError, match=r"Inaturalist_test_set1.txt"):
        load_inaturalist(tmp_path, allow_partial=True)


def test_crop_is_refused_by_name(tmp_path):
    _write(tmp_path, TRAIN, TEST)
    with pytest.raises(ValueError, match="iNaturalist 2018 has no bounding boxes"):
        load_benchmark("inaturalist", tmp_path, crop=True)
