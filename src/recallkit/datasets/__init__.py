"""The conventional metric-learning splits and protocols of five image-retrieval benchmarks.

Each loader parses the official annotation files a user already has on disk (nothing is
downloaded), checks them against the documented counts, and returns a [`Benchmark`][Benchmark]:
image paths and labels per split, and the [`Protocol`][Protocol] the papers evaluate it with.
[`evaluate_benchmark`][evaluate_benchmark] computes that protocol's recall@K, MAP@R and R-precision
through the core.

=============  ==========================  =============================================
name           benchmark                   protocol
=============  ==========================  =============================================
``cub``        CUB-200-2011                test vs itself, self excluded, K 1, 2, 4, 8
``cars196``    Cars196                     test vs itself, self excluded, K 1, 2, 4, 8
``sop``        Stanford Online Products    test vs itself, self excluded, K 1, 10, 100, 1000
``inaturalist`` iNaturalist 2018           test vs itself, self excluded, K 1, 4, 16, 32
``inshop``     In-Shop Clothes             query vs gallery, K 1, 10, 20, 30, 40, 50
=============  ==========================  =============================================
"""

from recallkit.datasets.base import (
    BENCHMARK_INFO,
    Benchmark,
    BenchmarkInfo,
    DatasetError,
    DatasetFileNotFoundError,
    Protocol,
    Split,
)
from recallkit.datasets.cars import load_cars196
from recallkit.datasets.cub import load_cub
from recallkit.datasets.evaluation import evaluate_benchmark
from recallkit.datasets.inaturalist import INATURALIST_SUPERCATEGORIES, load_inaturalist
from recallkit.datasets.inshop import load_inshop
from recallkit.datasets.registry import BENCHMARKS, load_benchmark, protocol_table
from recallkit.datasets.sop import load_sop

__all__ = [
    "BENCHMARKS",
    "BENCHMARK_INFO",
    "INATURALIST_SUPERCATEGORIES",
    "Benchmark",
    "BenchmarkInfo",
    "DatasetError",
    "DatasetFileNotFoundError",
    "Protocol",
    "Split",
    "evaluate_benchmark",
    "load_benchmark",
    "load_cars196",
    "load_cub",
    "load_inaturalist",
    "load_inshop",
    "load_sop",
    "protocol_table",
]
