"""Cars196 from both packagings: cars_annos.mat, and the devkit's train/test annotation files."""

from __future__ import annotations

import numpy as np
import pytest

from recallkit.datasets import (
    DatasetError,
    DatasetFileNotFoundError,
    load_benchmark,
    load_cars196,
)


def test_cars_annos_split_by_class_not_by_test_flag(tmp_path, fmt):
    # Entries 1..6 (MATLAB numbering) of classes 1, 98, 99, 196, 5, 120; the test flag alternates
    # 0, 1, 0, 1, ... and must be ignored.
    fmt.write_cars_annos(tmp_path, [1, 98, 99, 196, 5, 120], images=True)
    cars = load_cars196(tmp_path, allow_partial=True)
    train, test = cars.splits["train"], cars.splits["test"]
    assert train.relative_paths == (
        "car_ims/000001.jpg",
        "car_ims/000002.jpg",
        "car_ims/000005.jpg",
    )
    assert train.labels.tolist() == [1, 98, 5]
    assert test.relative_paths == ("car_ims/000003.jpg", "car_ims/000004.jpg", "car_ims/000006.jpg")
    assert test.labels.tolist() == [99, 196, 120]
    assert test.paths[0] == tmp_path / "car_ims" / "000003.jpg"
    assert train.bboxes is None and train.coarse_labels is None
    assert [f.name for f in cars.files] == ["cars_annos.mat"]
    assert not cars.complete
    protocol = cars.protocol
    assert protocol.ks == (1, 2, 4, 8)
    assert (protocol.query_split, protocol.gallery_split, protocol.query_in_reference) == (
        "test",
        None,
        True,
    )
    query, gallery, self_excluded = cars.evaluation_splits()
    assert query is test and gallery is test and self_excluded


def test_cars_annos_crop_boxes(tmp_path, fmt):
    # Entry i (0-based) has bbox (1 + i, 2, 30 + i, 40) in MATLAB's 1-based inclusive pixels,
    # hence the PIL box (i, 1, 30 + i, 40).
    fmt.write_cars_annos(tmp_path, [1, 98, 99, 196, 5, 120])
    cars = load_benchmark("cars196", tmp_path, allow_partial=True, crop=True, check_images=False)
    assert cars.splits["train"].bboxes.tolist() == [
        [0.0, 1.0, 30.0, 40.0],
        [1.0, 1.0, 31.0, 40.0],
        [4.0, 1.0, 34.0, 40.0],
    ]
    assert cars.splits["test"].bboxes[2].tolist() == [5.0, 1.0, 35.0, 40.0]


def test_partial_copy_is_an_error_naming_the_file(tmp_path, fmt):
    fmt.write_cars_annos(tmp_path, [1, 99])
    with pytest.raises(DatasetError, match=r"cars_annos\.mat gives the Cars196 train split 1 "):
        load_cars196(tmp_path, check_images=False)


@pytest.mark.parametrize("folder", ["devkit", "."])
def test_devkit_keys_images_by_folder_and_name(tmp_path, fmt, folder):
    # Train file: 00001.jpg class 1, 00002.jpg class 99, 00003.jpg class 2.
    # Test file: 00001.jpg class 99, 00002.jpg class 3, 00003.jpg class 196.
    fmt.write_cars_devkit(tmp_path, [1, 99, 2], [99, 3, 196], folder=folder, images=True)
    cars = load_cars196(tmp_path, allow_partial=True)
    train, test = cars.splits["train"], cars.splits["test"]
    assert train.relative_paths == (
        "cars_train/00001.jpg",
        "cars_train/00003.jpg",
        "cars_test/00002.jpg",
    )
    assert train.labels.tolist() == [1, 2, 3]
    assert test.relative_paths == (
        "cars_train/00002.jpg",
        "cars_test/00001.jpg",
        "cars_test/00003.jpg",
    )
    assert test.labels.tolist() == [99, 99, 196]
    assert [f.name for f in cars.files] == [
        "cars_train_annos.mat",
        "cars_test_annos_withlabels.mat",
    ]


def test_both_packagings_prefer_cars_annos(tmp_path, fmt):
    fmt.write_cars_devkit(tmp_path, [1], [99])
    fmt.write_cars_annos(tmp_path, [2, 100, 101])
    cars = load_cars196(tmp_path, allow_partial=True, check_images=False)
    assert [f.name for f in cars.files] == ["cars_annos.mat"]
    assert cars.splits["test"].labels.tolist() == [100, 101]


def test_devkit_without_test_labels(tmp_path, fmt):
    fmt.write_cars_devkit(tmp_path, [1], [99], with_labels=False)
    with pytest.raises(FileNotFoundError, match=r"cars_test_annos.mat has no class labels"):
        load_cars196(tmp_path, allow_partial=True)


def test_no_packaging(tmp_path):
    with pytest.raises(DatasetFileNotFoundError, match=r"needs cars_annos.mat .* or the devkit"):
        load_cars196(tmp_path)


@pytest.mark.parametrize("bad", [0, 197])
def test_class_out_of_range_names_the_entry(tmp_path, fmt, bad):
    fmt.write_cars_annos(tmp_path, [1, 99, bad])
    with pytest.raises(DatasetError, match=rf"cars_annos\.mat, annotations\(3\): .* Got {bad}\."):
        load_cars196(tmp_path, allow_partial=True, check_images=False)


def test_missing_field_and_unreadable_file(tmp_path, fmt):
    from scipy.io import savemat

    entries = np.zeros((1, 1), dtype=[("relative_im_path", "O"), ("class", "O")])
    entries[0, 0] = ("car_ims/000001.jpg", np.uint8(1))
    savemat(tmp_path / "cars_annos.mat", {"annotations": entries})
    with pytest.raises(DatasetError, match=r"lacks the field.*bbox_x1"):
        load_cars196(tmp_path, allow_partial=True, check_images=False)
    savemat(tmp_path / "cars_annos.mat", {"other": np.ones(2)})
    with pytest.raises(DatasetError, match="has no variable 'annotations'"):
        load_cars196(tmp_path, allow_partial=True, check_images=False)
    (tmp_path / "cars_annos.mat").write_text("not a mat file")
    with pytest.raises(DatasetError, match="not a readable MATLAB"):
        load_cars196(tmp_path, allow_partial=True, check_images=False)


def test_non_integer_class_and_empty_path(tmp_path, fmt):
    from scipy.io import savemat

    dtype = [(n, "O") for n in ("relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2")]
    dtype.append(("class", "O"))
    entries = np.zeros((1, 2), dtype=dtype)
    entries[0, 0] = ("car_ims/000001.jpg", 1, 1, 5, 5, 1.0)
    entries[0, 1] = ("car_ims/000002.jpg", 1, 1, 5, 5, 2.5)
    savemat(tmp_path / "cars_annos.mat", {"annotations": entries})
    with pytest.raises(DatasetError, match=r"annotations\(2\): the class field must be an integer"):
        load_cars196(tmp_path, allow_partial=True, check_images=False)
    entries[0, 1] = ("", 1, 1, 5, 5, 2)
    savemat(tmp_path / "cars_annos.mat", {"annotations": entries})
    with pytest.raises(DatasetError, match=r"annotations\(2\): the relative_im_path field"):
        load_cars196(tmp_path, allow_partial=True, check_images=False)


def test_duplicate_image(tmp_path, fmt):
    from scipy.io import savemat

    fmt.write_cars_annos(tmp_path, [1, 99])
    entries = [fmt.cars_entry(1, relative_im_path="car_ims/000001.jpg") for _ in range(2)]
    array = np.zeros((1, 2), dtype=[(n, "O") for n in entries[0]])
    for i, entry in enumerate(entries):
        array[0, i] = tuple(entry.values())
    savemat(tmp_path / "cars_annos.mat", {"annotations": array})
    with pytest.raises(DatasetError, match=r"annotations\(2\): duplicate image .*annotations\(1\)"):
        load_cars196(tmp_path, allow_partial=True, check_images=False)


def test_missing_image(tmp_path, fmt):
    fmt.write_cars_devkit(tmp_path, [1, 2], [99], images=True)
    (tmp_path / "cars_test" / "00001.jpg").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"1 of the 3 images .*withlabels\.mat are not on disk .*cars_test/00001\.jpg",
    ):
        load_cars196(tmp_path, allow_partial=True)
    with pytest.warns(UserWarning, match="left out 1 of the 3"):
        cars = load_cars196(tmp_path, allow_partial=True, skip_missing=True)
    assert len(cars.splits["test"]) == 0 and len(cars.splits["train"]) == 2
