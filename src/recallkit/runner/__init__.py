"""The recall@K runner: folders of images to a reproducible, comparable, visual recall@K report.

``evaluate`` and ``encode_all`` are the Python API; ``recallkit evaluate``, ``plot``,
``compare`` and ``demo`` are the command line over the same functions. The metric itself is
:func:`recallkit.recall_at_k`.
"""

from recallkit.runner._errors import RunnerError
from recallkit.runner.bootstrap import (
    Comparison,
    compare_records,
    format_comparison,
    load_run,
    paired_bootstrap,
)
from recallkit.runner.cache import EmbeddingCache, cache_key, default_cache_dir, encode_cached
from recallkit.runner.encode import (
    BadImage,
    BadImagesError,
    Encoding,
    encode_all,
    encode_images,
    load_image,
)
from recallkit.runner.encoders import (
    Encoder,
    Preprocessing,
    callable_encoder,
    function_encoder,
    load_embeddings,
    torchvision_encoder,
)
from recallkit.runner.grid import draw_grid, worst_queries
from recallkit.runner.history import append_history, read_history
from recallkit.runner.history_plot import plot_history
from recallkit.runner.pipeline import (
    Run,
    evaluate,
    failure_grid,
    run_evaluation,
    run_record,
    top_k,
    worst_classes,
)
from recallkit.runner.sources import ImageSet, from_benchmark, from_folder, from_manifest

__all__ = [
    "BadImage",
    "BadImagesError",
    "Comparison",
    "EmbeddingCache",
    "Encoder",
    "Encoding",
    "ImageSet",
    "Preprocessing",
    "Run",
    "RunnerError",
    "append_history",
    "cache_key",
    "callable_encoder",
    "compare_records",
    "default_cache_dir",
    "draw_grid",
    "encode_all",
    "encode_cached",
    "encode_images",
    "evaluate",
    "failure_grid",
    "format_comparison",
    "from_benchmark",
    "from_folder",
    "from_manifest",
    "function_encoder",
    "load_embeddings",
    "load_image",
    "load_run",
    "paired_bootstrap",
    "plot_history",
    "read_history",
    "run_evaluation",
    "run_record",
    "top_k",
    "torchvision_encoder",
    "worst_classes",
    "worst_queries",
]
