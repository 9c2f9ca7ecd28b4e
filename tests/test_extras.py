"""Optional dependencies: the extras of pyproject.toml, and each feature without its extra.

Each test runs a fresh interpreter whose imports of the extra's packages fail as they would on
an install without it (:mod:`tests.blocking`), and checks the one line the feature prints (the
packages, the extra, the install command), the exit status 2 of the command line, and that
nothing was written. The core install's own path (saved embeddings and labels) runs with every
optional package absent.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from recallkit._loading import EXTRAS, PACKAGES, MissingExtraError, available, require
from tests.blocking import NOT_IN_CORE, OPTIONAL, files_under, run_cli, run_python

ROOT = Path(__file__).resolve().parents[1]
NOTHING = "nothing was written"


def _one_error_line(done, command: str, *needles: str) -> str:
    """The run failed with exit status 2 and one line ``recallkit COMMAND: error: ...``."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith(f"recallkit {command}: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    assert "Traceback" not in done.stderr
    return line


def _install_hint(extra: str, *distributions: str) -> list[str]:
    return [
        f"(the '{extra}' extra)",
        f"pip install {' '.join(distributions)}",
        f"pip install '/path/to/recallkit[{extra}]'",
    ]


# ------------------------------------------------------------------------- the declared extras


def _requirement_name(text: str) -> str:
    return re.split(r"[<>=!~;\[ ]", text, maxsplit=1)[0].strip().lower()


def test_the_extras_are_those_of_pyproject():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["optional-dependencies"]
    assert set(declared) == {*EXTRAS, "all"}
    for extra, distributions in EXTRAS.items():
        assert sorted(map(_requirement_name, declared[extra])) == sorted(
            d.lower() for d in distributions
        ), extra
    assert declared["all"] == [f"recallkit[{','.join(EXTRAS)}]"]
    core = {_requirement_name(r) for r in project["dependencies"]}
    assert core == {
        "numpy",
        "torch",
        "numba",
        "threadpoolctl",
        "onnxruntime",
        "pytorch-metric-learning",
        "faiss-cpu",
    }
    for module, (distribution, extra) in PACKAGES.items():
        assert distribution in EXTRAS[extra], module
        assert distribution.lower() not in core, module
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]["dev"]
    assert "recallkit[all]" in dev  # the quick start installs every extra


def test_require_names_every_missing_package_and_one_extra():
    with pytest.raises(MissingExtraError) as caught:
        require("a feature", "json", "no_such_module_a", "no_such_module_b.sub", extra="demo")
    error = caught.value
    assert isinstance(error, ModuleNotFoundError) and error.name == "no_such_module_a"
    assert (error.feature, error.missing, error.extra) == (
        "a feature",
        ["no_such_module_a", "no_such_module_b"],
        "demo",
    )
    assert str(error) == (
        "a feature needs no_such_module_a and no_such_module_b, which are not installed (the "
        "'demo' extra): pip install no_such_module_a no_such_module_b, or pip install "
        "'/path/to/recallkit[demo]' from a clone."
    )
    assert available("json") and not available("no_such_module_a")


def test_a_broken_package_is_named_with_its_error_and_the_repair(tmp_path):
    """An installed package that fails to import (a torchvision built for another torch, a
    package whose own dependency is missing) is not called missing."""
    (tmp_path / "halfbuilt").mkdir()
    (tmp_path / "halfbuilt" / "__init__.py").write_text("import no_such_dependency_xyz\n")
    done = run_python(
        "import sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from recallkit._loading import MissingExtraError, require\n"
        "for module in ('torchvision', 'halfbuilt'):\n"
        "    try:\n"
        "        require('feature', module, extra='images')\n"
        "    except MissingExtraError as error:\n"
        "        print(error)\n",
        broken={"torchvision": ("RuntimeError", "operator torchvision::nms does not exist")},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    torchvision, halfbuilt = done.stdout.splitlines()
    assert torchvision == (
        "feature needs torchvision, which is installed but cannot be imported (RuntimeError: "
        "operator torchvision::nms does not exist): reinstall torchvision from the index torch "
        "came from (for CPU torch: pip install --force-reinstall torchvision --index-url "
        "https://download.pytorch.org/whl/cpu)."
    )
    assert halfbuilt == (
        "feature needs halfbuilt, which is installed but cannot be imported "
        "(ModuleNotFoundError: No module named 'no_such_dependency_xyz'): reinstall it: "
        "pip install --force-reinstall halfbuilt."
    )


# ------------------------------------------------------------------------------ the core install


def test_no_module_of_recallkit_imports_an_optional_package_when_imported(tmp_path):
    """Every module of the package imports with every optional package absent (each import
    of one is inside the function that needs it); only PML's own import needs scikit-learn."""
    package = ROOT / "src" / "recallkit"
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    names = [n for n in names if n not in ("recallkit.pml", "recallkit.__main__")]
    done = run_python(
        "import importlib\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print('imported', len(" + repr(names) + "))\n",
        missing=OPTIONAL,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["imported", str(len(names))]


@pytest.fixture
def saved(tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 40)
    embeddings = (rng.standard_normal((4, 8))[labels] + rng.standard_normal((40, 8))).astype(
        np.float32
    )
    np.save(tmp_path / "x.npy", embeddings)
    np.save(tmp_path / "y.npy", labels)
    return tmp_path


def test_evaluate_saved_arrays_needs_no_extra(saved):
    """``recallkit evaluate --embeddings --labels`` with every optional package absent (and
    the run file and history written) prints what it prints on a full install."""
    args = ["evaluate", "--embeddings", "x.npy", "--labels", "y.npy", "--metrics", "MAP@R"]
    outputs = ["--json", "run.json", "--history", "runs.jsonl", "--tag", "core"]
    env = {"RECALLKIT_CACHE": str(saved / "cache")}
    core = run_cli([*args, *outputs], missing=OPTIONAL, cwd=saved, env=env)
    assert core.returncode == 0, core.stderr
    full = run_cli(args, cwd=saved, env=env)
    assert full.returncode == 0, full.stderr
    assert core.stdout == full.stdout
    assert "recall@1:" in core.stdout and "MAP@R:" in core.stdout
    assert json.loads((saved / "run.json").read_text())["tag"] == "core"
    assert not (saved / "cache").exists()


def test_safetensors_embeddings_are_read_without_the_safetensors_package(tmp_path):
    from safetensors.numpy import save_file

    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    save_file({"embeddings": x, "other": x[:1]}, str(tmp_path / "e.safetensors"))
    done = run_python(
        "from recallkit._inputs.io import read_array, load_embeddings\n"
        "print(read_array('e.safetensors', 'embeddings').tolist())\n"
        "print(load_embeddings('e.safetensors', 'other').tolist())\n",
        missing=OPTIONAL,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(x.tolist()), str(x[:1].tolist())]


# --------------------------------------------------------------------------------- each extra


@pytest.fixture
def folder(tmp_path):
    """Eight solid-colour images in two class folders, and their precomputed embeddings."""
    from PIL import Image

    for i in range(8):
        label = "red" if i < 4 else "blue"
        path = tmp_path / "images" / label / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4), (200 - 10 * i, 20, 10 * i)).save(path)
    rows = np.array([[1.0, 0.1 * i] for i in range(4)] + [[0.1 * i, 1.0] for i in range(4)])
    np.save(tmp_path / "e.npy", rows.astype(np.float32))
    return tmp_path


IMAGE_ARGS = ["evaluate", "--images", "images"]
OUTPUTS = ["--json", "out/run.json", "--history", "out/runs.jsonl"]


@pytest.mark.parametrize(
    ("encoder", "missing", "feature", "extra", "distributions"),
    [
        (
            ["--callable", "recallkit.runner.encoders:pixels"],
            ["PIL"],
            "recallkit evaluate --callable needs Pillow, which is not installed",
            "images",
            ["Pillow"],
        ),
        (
            ["--model", "resnet18", "--random-init"],
            ["torchvision", "PIL"],
            "recallkit evaluate --model needs torchvision and Pillow, which are not installed",
            "images",
            ["torchvision", "Pillow"],
        ),
    ],
    ids=["callable-without-pillow", "model-without-torchvision"],
)
def test_images_extra_encoding_without_it(folder, encoder, missing, feature, extra, distributions):
    before = files_under(folder)
    env = {"RECALLKIT_CACHE": str(folder / "cache")}
    done = run_cli([*IMAGE_ARGS, *encoder, *OUTPUTS], missing=missing, cwd=folder, env=env)
    _one_error_line(done, "evaluate", feature, *_install_hint(extra, *distributions))
    assert files_under(folder) == before, NOTHING


def test_images_extra_broken_torchvision_is_one_line(folder):
    """A torchvision built for another torch (the CPU-only install's classic mistake)."""
    before = files_under(folder)
    done = run_cli(
        [*IMAGE_ARGS, "--model", "resnet18", "--random-init", *OUTPUTS],
        broken={"torchvision": ("RuntimeError", "operator torchvision::nms does not exist")},
        cwd=folder,
        env={"RECALLKIT_CACHE": str(folder / "cache")},
    )
    _one_error_line(
        done,
        "evaluate",
        "needs torchvision, which is installed but cannot be imported (RuntimeError: "
        "operator torchvision::nms does not exist)",
        "reinstall torchvision from the index torch came from",
    )
    assert files_under(folder) == before, NOTHING


def test_precomputed_embeddings_of_images_need_no_extra(folder):
    done = run_cli(
        [*IMAGE_ARGS, "--embeddings", "e.npy", "--ks", "1", "2"], missing=OPTIONAL, cwd=folder
    )
    assert done.returncode == 0, done.stderr
    assert "recall@1: 1.0000" in done.stdout


@pytest.mark.parametrize(
    ("grid", "missing", "extra", "distributions"),
    [
        ("grid.png", ["matplotlib"], "plot", ["matplotlib"]),
        ("grid.html", ["PIL"], "images", ["Pillow"]),
    ],
)
def test_failure_grid_without_its_extra(folder, grid, missing, extra, distributions):
    before = files_under(folder)
    done = run_cli(
        [*IMAGE_ARGS, "--embeddings", "e.npy", "--show-out", f"out/{grid}", *OUTPUTS],
        missing=missing,
        cwd=folder,
    )
    _one_error_line(
        done,
        "evaluate",
        "recallkit evaluate --show-out",
        *_install_hint(extra, *distributions),
    )
    assert files_under(folder) == before, NOTHING


def test_plot_extra_plot_without_matplotlib(tmp_path):
    history = tmp_path / "runs.jsonl"
    history.write_text(json.dumps({"tag": "a", "recall": {"recall@1": 0.5}}) + "\n")
    before = files_under(tmp_path)
    done = run_cli(["plot", "runs.jsonl", "-o", "recall.png"], missing=["matplotlib"], cwd=tmp_path)
    line = _one_error_line(done, "plot", *_install_hint("plot", "matplotlib"))
    assert line == (
        "recallkit plot: error: recallkit plot needs matplotlib, which is not installed (the "
        "'plot' extra): pip install matplotlib, or pip install '/path/to/recallkit[plot]' from "
        "a clone."
    )
    assert files_under(tmp_path) == before, NOTHING


@pytest.mark.parametrize(
    "missing", [["sklearn"], ["matplotlib"], ["PIL", "matplotlib"]], ids="-".join
)
def test_demo_extra_demo_without_it(tmp_path, missing):
    done = run_cli(["demo", "--out", "demo-out", "--fast"], missing=missing, cwd=tmp_path)
    names = [PACKAGES[m][0] for m in missing]
    _one_error_line(done, "demo", "recallkit demo needs", *_install_hint("demo", *names))
    assert files_under(tmp_path) == [], NOTHING


def test_datasets_extra_cars196_without_scipy(tmp_path):
    (tmp_path / "cars").mkdir()
    (tmp_path / "cars" / "cars_annos.mat").write_bytes(b"MATLAB 5.0 MAT-file")
    np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
    before = files_under(tmp_path)
    args = ["evaluate", "--benchmark", "cars196", "--root", "cars", "--embeddings", "e.npy"]
    done = run_cli(
        [*args, "--json", "run.json"],
        missing=["scipy"],
        cwd=tmp_path,
    )
    _one_error_line(
        done, "evaluate", "Reading Cars196's .mat files", *_install_hint("datasets", "scipy")
    )
    assert files_under(tmp_path) == before, NOTHING


def test_datasets_extra_library_readers_without_it(tmp_path):
    """In Python: the loader and ``Split.open_image`` raise one MissingExtraError."""
    (tmp_path / "cars").mkdir()
    (tmp_path / "cars" / "cars_annos.mat").write_bytes(b"MATLAB 5.0 MAT-file")
    done = run_python(
        "import numpy as np\n"
        "from recallkit._loading import MissingExtraError\n"
        "from recallkit.datasets import load_cars196\n"
        "from recallkit.datasets.base import Split\n"
        "try:\n"
        "    load_cars196('cars')\n"
        "except MissingExtraError as error:\n"
        "    print(error.extra, error.missing)\n"
        "split = Split('test', __import__('pathlib').Path('.'), ('a.jpg',), np.array([1]))\n"
        "try:\n"
        "    split.open_image(0)\n"
        "except MissingExtraError as error:\n"
        "    print(error.extra, error.missing)\n",
        missing=["scipy", "PIL"],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["datasets ['scipy']", "datasets ['PIL']"]


@pytest.mark.parametrize(
    ("module", "name", "package"),
    [
        ("recallkit.integrations.torchmetrics", "RetrievalMetrics", "torchmetrics"),
        ("recallkit.integrations.lightning", "RetrievalCallback", "lightning"),
    ],
)
def test_integration_extras_without_them(tmp_path, module, name, package):
    done = run_python(
        f"import {module} as m\n"
        "try:\n"
        f"    m.{name}\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n",
        missing=[package],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"MissingExtraError {module} needs {package}, which is not installed (the '{package}' "
        f"extra): pip install {package}, or pip install '/path/to/recallkit[{package}]' from a "
        "clone.\n"
    )


def test_int8_without_onnxruntime_is_left_out_not_an_error(tmp_path):
    """ONNX Runtime is in the core install; absent or broken, ``precision='auto'`` leaves the
    int8 kernel out (the report says why) and the values are the same."""
    done = run_python(
        "import numpy as np, recallkit\n"
        "from recallkit.engine import lowp\n"
        "print(lowp.KERNELS['onnxruntime'].available())\n"
        "print([line for line in lowp.precision_report(128).splitlines() if 'onnx' in line])\n"
        "x = np.random.default_rng(0).standard_normal((50, 8))\n"
        "labels = np.arange(50) % 5\n"
        "r = recallkit.recall_at_k(x, x, labels, labels, ks=(1,), query_in_reference=True)\n"
        "print(r['recall@1'])\n",
        broken={"onnxruntime": ("OSError", "libonnxruntime.so: cannot open shared object file")},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    reason, report, value = done.stdout.splitlines()
    assert reason == (
        "onnxruntime cannot be imported: OSError: libonnxruntime.so: cannot open shared object file"
    )
    assert f"onnxruntime (int8): {reason}" in report
    import recallkit

    x = np.random.default_rng(0).standard_normal((50, 8))
    labels = np.arange(50) % 5
    expected = recallkit.recall_at_k(x, x, labels, labels, ks=(1,), query_in_reference=True)
    assert float(value) == expected["recall@1"]


# ---------------------------------------------------------------------------- the recipe copy

README_TABLE = """\
Synthetic retrieval: 50 val rows, 100 train rows, 5 classes, 8-d L2-normalised embeddings
query  reference      query_in_reference  precision_at_1  r_precision
val    val (itself)   True                0.8800          0.6467
val    train gallery  False               0.7400          0.6570
"""


@pytest.fixture
def recipe_copy(tmp_path):
    """docs/recipes/evaluation.py copied alone into an empty folder, as a user copies it."""
    shutil.copy(ROOT / "docs" / "recipes" / "evaluation.py", tmp_path / "evaluation.py")
    return tmp_path


def _run_copy(folder: Path, missing: list[str]):
    # recallkit and the repository are absent too: the copy needs torch, numpy, PML and faiss.
    return run_python(
        "import runpy\nrunpy.run_path('evaluation.py', run_name='__main__')\n",
        missing=["recallkit", "docs", "tests", *missing],
        cwd=folder,
        env={"PYTHONPATH": ""},
    )


def test_recipe_copy_prints_the_readme_table(recipe_copy):
    done = _run_copy(recipe_copy, [])
    assert done.returncode == 0, done.stderr
    assert done.stdout == README_TABLE
    assert README_TABLE in (ROOT / "README.md").read_text()


def test_recipe_copy_without_faiss_says_so_in_one_line(recipe_copy):
    done = _run_copy(recipe_copy, ["faiss"])
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("evaluation recipe: PML's default AccuracyCalculator k-NN")
    assert "pip install faiss-cpu" in lines[0] and "knn_func=CustomKNN(" in lines[0]


def test_recipe_functions_without_faiss_take_an_exact_knn_func(recipe_copy):
    """Without faiss, a calculator given an exact knn_func (the one the message names) runs
    the recipes; PML's default one fails in PML's own constructor."""
    done = run_python(
        "import torch\n"
        "from pytorch_metric_learning.distances import LpDistance\n"
        "from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator\n"
        "from pytorch_metric_learning.utils.inference import CustomKNN\n"
        "from evaluation import FAISS_MISSING, split_accuracy\n"
        "val = (torch.tensor([[0.0], [2.0], [3.0], [9.0]]), ['cat', 'cat', 'dog', 'dog'])\n"
        "exact = CustomKNN(LpDistance(normalize_embeddings=False))\n"
        "calculator = AccuracyCalculator(include=('precision_at_1',), k=1, knn_func=exact)\n"
        "print(split_accuracy(calculator, val, [], query_in_reference=True))\n"
        "print('knn_func=CustomKNN(LpDistance(normalize_embeddings=False))' in FAISS_MISSING)\n"
        "try:\n"
        "    AccuracyCalculator(include=('precision_at_1',), k=1)\n"
        "except NameError as error:\n"
        "    print(error.name)\n",
        missing=["faiss", "recallkit"],
        cwd=recipe_copy,
        env={"PYTHONPATH": str(recipe_copy)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["{'precision_at_1': 0.5}", "True", "faiss"]


def test_this_interpreter_is_the_one_the_blocked_runs_use():
    assert Path(sys.executable).exists()
    assert set(NOT_IN_CORE) <= set(OPTIONAL) == set(PACKAGES)
