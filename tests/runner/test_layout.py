"""The runner's modules: names that say what they hold, none shared with another module."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import recallkit
from recallkit import runner

PACKAGE = Path(recallkit.__file__).parent

# The public API of ``recallkit.runner`` (its ``__all__``), unchanged by the module names (the
# comparison of runs is the library's recallkit.compare since it covers every metric).
PUBLIC = [
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


def _names(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}


def test_no_runner_module_shares_a_name_with_another_module():
    ours = _names(PACKAGE / "runner")
    others = {p.stem for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE / "runner"}
    assert ours & others == set()
    assert {"pipeline", "history_plot", "digits_demo"} <= ours
    assert importlib.util.find_spec("recallkit.runner.bootstrap") is None  # recallkit.compare
    # The command modules keep the command names; the runner has none of them.
    assert {"evaluate", "compare", "plot", "demo"} <= _names(PACKAGE / "cli" / "commands")
    for old in ("evaluate", "compare", "plot", "demo"):
        assert importlib.util.find_spec(f"recallkit.runner.{old}") is None, old


def test_the_public_api_is_unchanged():
    assert sorted(runner.__all__) == sorted(PUBLIC)
    assert all(hasattr(runner, name) for name in PUBLIC)
    # ``recallkit.runner.evaluate`` is the function, never shadowed by a module of that name.
    assert inspect.isfunction(runner.evaluate)
    homes = {
        "evaluate": "pipeline",
        "run_evaluation": "pipeline",
        "failure_grid": "pipeline",
        "plot_history": "history_plot",
    }
    for name, module in homes.items():
        assert getattr(runner, name).__module__ == f"recallkit.runner.{module}", name
    # Comparisons and run files are the library's, named here too.
    assert runner.load_run.__module__ == "recallkit.runfiles.records"
    assert runner.Comparison.__module__ == "recallkit.comparison"
    from recallkit.runner.digits_demo import run_demo

    assert run_demo.__module__ == "recallkit.runner.digits_demo"
