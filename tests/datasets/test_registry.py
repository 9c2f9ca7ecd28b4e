"""The registry, the protocol table and the shared types."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recallkit.datasets import (
    BENCHMARK_INFO,
    BENCHMARKS,
    Benchmark,
    Protocol,
    Split,
    load_benchmark,
    load_cars196,
    load_cub,
    load_inaturalist,
    load_inshop,
    load_sop,
    protocol_table,
)

README_SECTION = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def test_registry_names_and_loaders():
    assert dict(BENCHMARKS) == {
        "cub": load_cub,
        "cars196": load_cars196,
        "sop": load_sop,
        "inaturalist": load_inaturalist,
        "inshop": load_inshop,
    }
    assert list(BENCHMARK_INFO) == list(BENCHMARKS)
    with pytest.raises(TypeError):
        BENCHMARKS["new"] = load_cub  # read-only


def test_protocols_are_the_issue_table():
    # (evaluated, self excluded, K values), as in the issue's protocol table.
    expected = {
        "cub": ("test", None, True, (1, 2, 4, 8)),
        "cars196": ("test", None, True, (1, 2, 4, 8)),
        "sop": ("test", None, True, (1, 10, 100, 1000)),
        "inaturalist": ("test", None, True, (1, 4, 16, 32)),
        "inshop": ("query", "gallery", False, (1, 10, 20, 30, 40, 50)),
    }
    for name, (query, gallery, self_excluded, ks) in expected.items():
        p = BENCHMARK_INFO[name].protocol
        assert (p.query_split, p.gallery_split, p.query_in_reference, p.ks) == (
            query,
            gallery,
            self_excluded,
            ks,
        )
        assert p.citation


def test_documented_counts():
    sizes = {name: dict(info.split_sizes) for name, info in BENCHMARK_INFO.items()}
    assert sizes == {
        "cub": {"train": 5864, "test": 5924},
        "cars196": {"train": 8054, "test": 8131},
        "sop": {"train": 59551, "test": 60502},
        "inaturalist": {"train": 325846, "test": 136093},
        "inshop": {"train": 25882, "query": 14218, "gallery": 12612},
    }
    assert sum(sizes["cub"].values()) == 11788 and sum(sizes["cars196"].values()) == 16185
    assert BENCHMARK_INFO["sop"].label_ranges == {"train": (1, 11318), "test": (11319, 22634)}
    assert BENCHMARK_INFO["cars196"].label_ranges == {"train": (1, 98), "test": (99, 196)}
    assert [n for n, info in BENCHMARK_INFO.items() if info.crop] == ["cub", "cars196"]


def test_readme_section_holds_the_protocol_table():
    table = protocol_table()
    assert table.splitlines()[0] == (
        "| benchmark | evaluated | self excluded | K values | convention |"
    )
    assert (
        "| In-Shop Clothes | query against gallery | no (disjoint) | 1, 10, 20, 30, 40, 50 |"
        in (table)
    )
    assert table in README_SECTION.read_text()


def test_load_benchmark_argument_errors(tmp_path):
    with pytest.raises(ValueError, match="The 'name' parameter of load_benchmark must be one of"):
        load_benchmark("CUB", tmp_path)
    with pytest.raises(ValueError, match="'crop' parameter of load_benchmark can be True only"):
        load_benchmark("sop", tmp_path, crop=True)
    with pytest.raises(ValueError, match="'crop' parameter of load_benchmark must be True or"):
        load_benchmark("cub", tmp_path, crop=1)


def test_split_paths_subset_and_read_only(tmp_path):
    split = Split(
        "test",
        tmp_path,
        ("a/1.jpg", "b/2.jpg", "c/3.jpg"),
        np.array([5, 6, 5], dtype=np.int32),
        np.array([1, 1, 2]),
    )
    assert split.labels.dtype == np.int64 and split.coarse_labels.dtype == np.int64
    assert split.paths == (tmp_path / "a/1.jpg", tmp_path / "b/2.jpg", tmp_path / "c/3.jpg")
    with pytest.raises(ValueError):
        split.labels[0] = 1
    with pytest.raises(AttributeError):
        split.name = "train"
    picked = split.subset(np.array([False, True, True]))
    assert picked.relative_paths == ("b/2.jpg", "c/3.jpg")
    assert picked.labels.tolist() == [6, 5] and picked.coarse_labels.tolist() == [1, 2]
    assert split.subset([2, 0]).labels.tolist() == [5, 5]
    assert len(split.subset([])) == 0


def test_split_and_protocol_validation(tmp_path):
    with pytest.raises(ValueError, match="'labels' parameter of Split must have one entry per"):
        Split("test", tmp_path, ("a", "b"), np.array([1]))
    with pytest.raises(ValueError, match="'bboxes' parameter of Split must have shape"):
        Split("test", tmp_path, ("a",), np.array([1]), bboxes=np.zeros((1, 3)))
    with pytest.raises(ValueError, match="'query_in_reference' parameter of Protocol"):
        Protocol((1,), "query", "gallery", True, "x")


def test_benchmark_evaluation_splits_for_query_and_gallery(tmp_path):
    query = Split("query", tmp_path, ("q",), np.array([1]))
    gallery = Split("gallery", tmp_path, ("g",), np.array([1]))
    shop = Benchmark(
        "inshop",
        "In-Shop Clothes",
        BENCHMARK_INFO["inshop"].protocol,
        {"query": query, "gallery": gallery},
        tmp_path,
    )
    assert shop.evaluation_splits() == (query, gallery, False)
    assert repr(shop).startswith("Benchmark('inshop', query=1, gallery=1")
