"""Annotation files are read strictly: ASCII decimal numbers only, image paths inside the folder.

Python's ``int`` (and numpy's string conversion) read ``1_0`` as 10 and Arabic-Indic or
full-width digits as numbers; a benchmark file holding them is damaged, not a different
numbering. An image path that is absolute, climbs out with ``..`` or holds a NUL is an error
naming the file and line.
"""

from __future__ import annotations

import numpy as np
import pytest

from recallkit.datasets import load_cars196, load_cub, load_inaturalist, load_inshop, load_sop
from recallkit.datasets._files import parse_floats, parse_ints
from recallkit.datasets.base import DatasetError

ARABIC_101 = "\u0661\u0660\u0661"  # Arabic-Indic digits one, zero, one
FULL_WIDTH_101 = "\uff11\uff10\uff11"  # full-width digits one, zero, one


def _cub(folder, images="1 001.A/a.jpg\n2 101.B/b.jpg\n", labels="1 1\n2 101\n", boxes=None):
    (folder / "images.txt").write_text(images, encoding="utf-8")
    (folder / "image_class_labels.txt").write_text(labels, encoding="utf-8")
    if boxes is not None:
        (folder / "bounding_boxes.txt").write_text(boxes, encoding="utf-8")
    return load_cub(folder, allow_partial=True, check_images=False, crop=boxes is not None)


def test_plain_files_still_load(tmp_path):
    cub = _cub(tmp_path, boxes="1 0 0 5.5 6\n2 1.5 .5 2e1 3\n")
    assert cub.splits["train"].labels.tolist() == [1]
    assert cub.splits["test"].labels.tolist() == [101]
    assert cub.splits["test"].bboxes.tolist() == [[1.5, 0.5, 21.5, 3.5]]


@pytest.mark.parametrize("value", ["1_01", ARABIC_101, FULL_WIDTH_101, "0x65", "101.0"])
def test_class_ids_are_ascii_decimal(tmp_path, value):
    with pytest.raises(DatasetError) as info:
        _cub(tmp_path, labels=f"1 1\n2 {value}\n")
    assert str(info.value) == (
        f"{tmp_path / 'image_class_labels.txt'}, line 2: the class id must be an integer. "
        f"Got {value!r}."
    )


@pytest.mark.parametrize("value", ["1_0", ARABIC_101, FULL_WIDTH_101])
def test_image_ids_are_ascii_decimal(tmp_path, value):
    with pytest.raises(DatasetError, match=r"images\.txt, line 1: the image id must be an integer"):
        _cub(tmp_path, images=f"{value} 001.A/a.jpg\n2 101.B/b.jpg\n")


@pytest.mark.parametrize("value", ["1_0", "\u0665", "\uff15", "nan", "inf"])
def test_box_values_are_ascii_decimal(tmp_path, value):
    with pytest.raises(
        DatasetError, match=r"bounding_boxes\.txt, line 2: the width must be a finite decimal"
    ):
        _cub(tmp_path, boxes=f"1 0 0 5 6\n2 1 1 {value} 3\n")


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/etc/001.A/a.jpg", "is absolute; image paths must be relative to the dataset folder"),
        ("../001.A/a.jpg", "leaves the dataset folder ('..'); image paths must stay inside it"),
        ("001.A/../../a.jpg", "leaves the dataset folder ('..'); image paths must stay inside it"),
        ("001.A/a\x00.jpg", "holds a NUL character"),
    ],
)
def test_cub_image_paths_stay_inside(tmp_path, path, problem):
    with pytest.raises(DatasetError) as info:
        _cub(tmp_path, images=f"1 {path}\n2 101.B/b.jpg\n")
    assert str(info.value) == (
        f"{tmp_path / 'images.txt'}, line 1: the image path {path!r} {problem}."
    )


def test_a_path_that_stays_inside_is_accepted(tmp_path):
    cub = _cub(tmp_path, images="1 001.A/../001.A/a.jpg\n2 101.B/b.jpg\n")
    assert cub.splits["train"].relative_paths == ("001.A/../001.A/a.jpg",)


def test_sop_paths_and_ids(tmp_path):
    header = "image_id class_id super_class_id path\n"
    (tmp_path / "Ebay_train.txt").write_text(header + "1 1 1 bicycle_final/a_0.JPG\n")
    (tmp_path / "Ebay_test.txt").write_text(header + "1 11319 1 ../b_0.JPG\n")
    with pytest.raises(DatasetError, match=r"Ebay_test\.txt, line 2: the path '\.\./b_0\.JPG'"):
        load_sop(tmp_path, allow_partial=True, check_images=False)
    (tmp_path / "Ebay_test.txt").write_text(header + "1 11_319 1 b/b_0.JPG\n")
    with pytest.raises(DatasetError, match=r"line 2: the class_id must be an integer"):
        load_sop(tmp_path, allow_partial=True, check_images=False)


def test_inshop_count_and_paths(tmp_path):
    rows = (
        "image_name item_id evaluation_status\n"
        "img/MEN/Denim/id_00000080/01_1_front.jpg   id_00000080  query\n"
        "img/MEN/Denim/id_00000080/01_2_side.jpg    id_00000080  gallery\n"
    )
    path = tmp_path / "list_eval_partition.txt"
    for count in ("\u0662", "\uff12", "0_2"):
        path.write_text(f"{count}\n{rows}", encoding="utf-8")
        with pytest.raises(DatasetError, match=r"line 1: expected the number of images"):
            load_inshop(tmp_path, allow_partial=True, check_images=False)
    path.write_text("2\n" + rows.replace("img/MEN/Denim/id_00000080/01_2", "/img/01_2"))
    with pytest.raises(DatasetError, match=r"line 4: the image_name '/img/01_2_side.jpg' is abs"):
        load_inshop(tmp_path, allow_partial=True, check_images=False)
    path.write_text("2\n" + rows)
    shop = load_inshop(tmp_path, allow_partial=True, check_images=False)
    assert shop.splits["gallery"].labels.tolist() == [80]


def test_inaturalist_paths(tmp_path):
    (tmp_path / "Inaturalist_train_set1.txt").write_text("train_val2018/Plantae/7477/a.jpg\n")
    (tmp_path / "Inaturalist_test_set1.txt").write_text(
        "train_val2018/Aves/3000/c.jpg\n../train_val2018/Aves/3000/d.jpg\n"
    )
    with pytest.raises(DatasetError, match=r"Inaturalist_test_set1\.txt, line 2: the path"):
        load_inaturalist(tmp_path, allow_partial=True, check_images=False)


def test_cars_paths_and_string_classes(tmp_path, fmt):
    from scipy.io import savemat

    fmt.write_cars_annos(tmp_path, [1, 99])
    entries = [
        fmt.cars_entry(1, relative_im_path="car_ims/000001.jpg"),
        fmt.cars_entry(99, relative_im_path="/car_ims/000002.jpg"),
    ]
    array = np.zeros((1, 2), dtype=[(n, "O") for n in entries[0]])
    for i, entry in enumerate(entries):
        array[0, i] = tuple(entry.values())
    savemat(tmp_path / "cars_annos.mat", {"annotations": array})
    with pytest.raises(DatasetError, match=r"annotations\(2\): the image path '/car_ims/0000"):
        load_cars196(tmp_path, allow_partial=True, check_images=False)
    entries[1]["relative_im_path"] = "car_ims/000002.jpg"
    entries[1]["class"] = "9_9"
    for i, entry in enumerate(entries):
        array[0, i] = tuple(entry.values())
    savemat(tmp_path / "cars_annos.mat", {"annotations": array})
    with pytest.raises(DatasetError, match=r"annotations\(2\): the class field must be an integ"):
        load_cars196(tmp_path, allow_partial=True, check_images=False)


def test_parsers_directly(tmp_path):
    from recallkit.datasets._files import check_relative_paths

    def line(i):
        return i + 1

    assert parse_ints(["7", "-3", "+2", "0012"], "n", tmp_path, line).tolist() == [7, -3, 2, 12]
    assert parse_ints([], "n", tmp_path, line).tolist() == []
    with pytest.raises(DatasetError, match=r"line 2: the n must be an integer. Got '1_0'"):
        parse_ints(["5", "1_0"], "n", tmp_path, line)
    with pytest.raises(DatasetError, match=r"line 1: the n must be an integer"):
        parse_ints([str(2**63)], "n", tmp_path, line)
    assert parse_floats(["1", "-2.5", ".5", "3e2"], "x", tmp_path, line).tolist() == [
        1.0,
        -2.5,
        0.5,
        300.0,
    ]
    with pytest.raises(DatasetError, match=r"line 1: the x must be a finite decimal number"):
        parse_floats(["1_0.5"], "x", tmp_path, line)
    check_relative_paths(["a/b.jpg", "a/../b.jpg", "..a/b.jpg"], "p", tmp_path, line)
    with pytest.raises(DatasetError, match=r"line 1: the p 'C:\\\\x.jpg' is absolute"):
        check_relative_paths(["C:\\x.jpg"], "p", tmp_path, line)
