"""The recall@K runner: folders of images to a reproducible, comparable, visual recall@K report.

``evaluate`` and ``encode_all`` are the Python API; ``recallkit evaluate``, ``plot`` and
``demo`` are the command line over the same functions. The metric itself is
[`recallkit.recall_at_k`][recallkit.retrieval.recall_at_k]; comparisons of runs are
[`recallkit.compare`][recallkit.comparison.compare]'s (``Comparison`` and ``load_run`` are the
library's, named here too), and their tables and HTML report
[`recallkit.reports`][recallkit.reports]'.
"""

from __future__ import annotations

from recallkit._loading import exports as _exports

# Public name -> the module that defines it; loaded on first use (PEP 562), so that the command
# line's help imports no part of the runner that loads numpy, torch or Pillow.
_HOMES = {
    "BadImage": "recallkit.runner.encode",
    "BadImagesError": "recallkit.runner.encode",
    "Comparison": "recallkit.comparison",
    "EmbeddingCache": "recallkit.runner.cache",
    "Encoder": "recallkit.runner.encoders",
    "Encoding": "recallkit.runner.encode",
    "ImageSet": "recallkit.runner.sources",
    "Preprocessing": "recallkit.runner.encoders",
    "Run": "recallkit.runner.pipeline",
    "RunnerError": "recallkit.exceptions",
    "append_history": "recallkit.runner.history",
    "cache_key": "recallkit.runner.cache",
    "callable_encoder": "recallkit.runner.encoders",
    "default_cache_dir": "recallkit.runner.defaults",
    "draw_grid": "recallkit.runner.grid",
    "encode_all": "recallkit.runner.encode",
    "encode_cached": "recallkit.runner.cache",
    "encode_images": "recallkit.runner.encode",
    "evaluate": "recallkit.runner.pipeline",
    "failure_grid": "recallkit.runner.pipeline",
    "from_benchmark": "recallkit.runner.sources",
    "from_folder": "recallkit.runner.sources",
    "from_manifest": "recallkit.runner.sources",
    "function_encoder": "recallkit.runner.encoders",
    "load_embeddings": "recallkit.runner.encoders",
    "load_image": "recallkit.runner.encode",
    "load_run": "recallkit.runfiles.records",
    "plot_history": "recallkit.runner.history_plot",
    "read_history": "recallkit.runner.history",
    "run_evaluation": "recallkit.runner.pipeline",
    "run_record": "recallkit.runner.pipeline",
    "top_k": "recallkit.runner.pipeline",
    "torchvision_encoder": "recallkit.runner.encoders",
    "worst_classes": "recallkit.runner.pipeline",
    "worst_queries": "recallkit.runner.grid",
}

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
    "default_cache_dir",
    "draw_grid",
    "encode_all",
    "encode_cached",
    "encode_images",
    "evaluate",
    "failure_grid",
    "from_benchmark",
    "from_folder",
    "from_manifest",
    "function_encoder",
    "load_embeddings",
    "load_image",
    "load_run",
    "plot_history",
    "read_history",
    "run_evaluation",
    "run_record",
    "top_k",
    "torchvision_encoder",
    "worst_classes",
    "worst_queries",
]


__getattr__, __dir__ = _exports(__name__, globals(), _HOMES)
