"""CUB-200-2011: the metric-learning split (classes 1–100 / 101–200) from the official files."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from recallkit.datasets import (
    BENCHMARK_INFO,
    DatasetError,
    DatasetFileNotFoundError,
    load_benchmark,
    load_cub,
)

# Miniature: classes 1 and 2 train, 101 and 102 test; ids 1–3 class 1, 4–5 class 2,
# 6–8 class 101, 9 class 102.
MINI = [(1, 3), (2, 2), (101, 3), (102, 1)]


def test_full_size_counts_labels_and_protocol(full_cub):
    cub = load_cub(full_cub)  # images checked: all 11,788 exist
    train, test = cub.splits["train"], cub.splits["test"]
    assert (len(train), len(test)) == (5864, 5924)
    assert (train.labels.min(), train.labels.max()) == (1, 100)
    assert (test.labels.min(), test.labels.max()) == (101, 200)
    assert np.unique(train.labels).size == 100 and np.unique(test.labels).size == 100
    assert train.labels.dtype == np.int64 and train.coarse_labels is None
    # Classes 1–68 have 58 images: ids 1–58 are class 1, id 59 (train row 58) is class 2.
    assert train.labels[57] == 1 and train.labels[58] == 2
    assert train.relative_paths[58] == "002.Bird_2/Bird_2_0000_59.jpg"
    # Test starts at id 5865, class 101; the last image (id 11788) is class 200.
    assert test.labels[0] == 101 and test.relative_paths[0].endswith("_5865.jpg")
    assert test.labels[-1] == 200
    assert test.paths[0] == full_cub / "CUB_200_2011" / "images" / test.relative_paths[0]
    assert test.paths[0].is_absolute()
    assert cub.complete and cub.skipped == ()
    assert [f.name for f in cub.files] == ["images.txt", "image_class_labels.txt"]
    protocol = cub.protocol
    assert protocol.ks == (1, 2, 4, 8)
    assert (protocol.query_split, protocol.gallery_split) == ("test", None)
    assert protocol.query_in_reference is True
    assert "Oh Song" in protocol.citation and "CVPR 2016" in protocol.citation
    query, gallery, self_excluded = cub.evaluation_splits()
    assert query is test and gallery is test and self_excluded is True
    assert protocol == BENCHMARK_INFO["cub"].protocol


def test_crop_boxes_are_x_y_x_plus_w_y_plus_h(full_cub):
    cub = load_cub(full_cub / "CUB_200_2011", crop=True, check_images=False)
    # Line of id 1: "1 1.0 1.0 10.0 20.0" (x = 1 % 7, y = 1 % 5, width 10 + 0, height 20).
    assert cub.splits["train"].bboxes[0].tolist() == [1.0, 1.0, 11.0, 21.0]
    # id 5865 is test row 0 and image 0 of class 101: x = 5865 % 7 = 6, y = 5865 % 5 = 0.
    assert cub.splits["test"].bboxes[0].tolist() == [6.0, 0.0, 16.0, 20.0]
    assert [f.name for f in cub.files][-1] == "bounding_boxes.txt"
    assert load_cub(full_cub, check_images=False).splits["test"].bboxes is None


def test_root_is_the_folder_or_its_parent(tmp_path, fmt):
    folder = fmt.write_cub(tmp_path, MINI)
    for root in (tmp_path, folder, str(folder)):
        cub = load_cub(root, allow_partial=True, check_images=False)
        assert cub.splits["train"].labels.tolist() == [1, 1, 1, 2, 2]
        assert cub.splits["test"].labels.tolist() == [101, 101, 101, 102]
        assert not cub.complete


def test_label_file_is_matched_by_id_not_by_line(tmp_path, fmt):
    fmt.write_cub(tmp_path, MINI, shuffle_labels=True)  # labels file reversed
    cub = load_cub(tmp_path, allow_partial=True, check_images=False)
    assert cub.splits["train"].relative_paths[0] == "001.Bird_1/Bird_1_0000_1.jpg"
    assert cub.splits["test"].relative_paths[-1] == "102.Bird_102/Bird_102_0000_9.jpg"


def test_partial_copy_is_an_error_naming_the_file(tmp_path, fmt):
    fmt.write_cub(tmp_path, MINI)
    with pytest.raises(DatasetError, match=r"images\.txt gives the CUB-200-2011 train split 5 "):
        load_cub(tmp_path, check_images=False)


def test_missing_files(tmp_path, fmt):
    with pytest.raises(DatasetFileNotFoundError, match=r"images.txt"):
        load_cub(tmp_path)
    folder = fmt.write_cub(tmp_path, MINI)
    (folder / "image_class_labels.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"image_class_labels.txt"):
        load_cub(tmp_path, allow_partial=True)
    fmt.write_cub(tmp_path, MINI)
    with pytest.raises(DatasetFileNotFoundError, match=r"bounding_boxes.txt"):
        load_cub(tmp_path, allow_partial=True, crop=True, check_images=False)


@pytest.mark.parametrize(
    ("file", "line_no", "text", "message"),
    [
        ("images.txt", 3, "3 a.jpg extra", r"images\.txt, line 3: expected 2 fields"),
        ("images.txt", 2, "x 001.Bird_1/b.jpg", r"images\.txt, line 2: the image id must be an"),
        ("images.txt", 2, "1 001.Bird_1/b.jpg", r"duplicate image id 1 on lines 1 and 2"),
        ("images.txt", 2, "2 001.Bird_1/._b.jpg", r"line 2: .* resource-fork"),
        ("image_class_labels.txt", 9, "9 201", r"labels\.txt, line 9: the class id must be"),
        ("image_class_labels.txt", 9, "9 0", r"between 1 and 200\. Got 0"),
        ("image_class_labels.txt", 10, "10 102", r"line 10: image id 10 is not listed"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, fmt, file, line_no, text, message):
    folder = fmt.write_cub(tmp_path, MINI, shuffle_labels=False)
    lines = (folder / file).read_text().splitlines()
    if line_no > len(lines):
        lines.append(text)  # an extra line
    else:
        lines[line_no - 1] = text
    (folder / file).write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=message):
        load_cub(tmp_path, allow_partial=True, check_images=False)


def test_image_without_label_line(tmp_path, fmt):
    folder = fmt.write_cub(tmp_path, MINI, shuffle_labels=False)
    lines = (folder / "image_class_labels.txt").read_text().splitlines()
    (folder / "image_class_labels.txt").write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DatasetError, match=r"has no line for image id 9 \(listed in images\.txt"):
        load_cub(tmp_path, allow_partial=True, check_images=False)


def test_blank_lines_are_skipped_and_line_numbers_kept(tmp_path, fmt):
    folder = fmt.write_cub(tmp_path, MINI, shuffle_labels=False)
    lines = (folder / "images.txt").read_text().splitlines()
    lines.insert(1, "")
    lines[4] = "4 x y"  # id 4 is now on line 5
    (folder / "images.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"images\.txt, line 5: expected 2 fields"):
        load_cub(tmp_path, allow_partial=True, check_images=False)


def test_missing_images_are_reported_or_skipped(tmp_path, fmt):
    folder = fmt.write_cub(tmp_path, MINI, images=True)
    missing = folder / "images" / "101.Bird_101" / "Bird_101_0001_7.jpg"
    os.remove(missing)
    with pytest.raises(FileNotFoundError, match=r"1 of the 9 images listed in .*images\.txt"):
        load_cub(tmp_path, allow_partial=True)
    with pytest.warns(UserWarning, match="left out 1 of the 9 images"):
        cub = load_cub(tmp_path, allow_partial=True, skip_missing=True)
    assert cub.skipped == (missing,)
    assert cub.splits["test"].labels.tolist() == [101, 101, 102]
    assert "Bird_101_0001_7.jpg" not in " ".join(cub.splits["test"].relative_paths)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load_cub(tmp_path, allow_partial=True, check_images=False).splits["test"]) == 4


def test_no_image_exists_hints_at_the_root(tmp_path, fmt):
    fmt.write_cub(tmp_path, MINI)
    with pytest.raises(FileNotFoundError, match="None of them exists"):
        load_cub(tmp_path, allow_partial=True)


def test_open_image_crops_to_the_box(tmp_path, fmt):
    from PIL import Image

    folder = fmt.write_cub(tmp_path, MINI, boxes=True, images=True)
    first = folder / "images" / "001.Bird_1" / "Bird_1_0000_1.jpg"
    Image.new("RGB", (64, 48), (10, 20, 30)).save(first, format="PNG")
    cub = load_cub(tmp_path, allow_partial=True, crop=True)
    # Box of id 1: x = 1, y = 1, width 10, height 20.
    assert cub.splits["train"].open_image(0).size == (10, 20)
    uncropped = load_cub(tmp_path, allow_partial=True)
    assert uncropped.splits["train"].open_image(0).size == (64, 48)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"allow_partial": 1}, "The 'allow_partial' parameter of load_cub must be True or False"),
        ({"skip_missing": True, "check_images": False}, "'skip_missing' parameter of load_cub"),
        ({"crop": "yes"}, "The 'crop' parameter of load_cub must be True or False"),
    ],
)
def test_bad_arguments(tmp_path, fmt, kwargs, message):
    fmt.write_cub(tmp_path, MINI)
    with pytest.raises(ValueError, match=message):
        load_cub(tmp_path, **kwargs)


def test_bad_root(tmp_path):
    with pytest.raises(ValueError, match="The 'root' parameter of load_cub must be a folder"):
        load_cub(3)
    with pytest.raises(FileNotFoundError, match="must be an existing folder"):
        load_cub(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="The 'root' parameter of load_cub"):
        load_benchmark("cub", tmp_path / "absent")
