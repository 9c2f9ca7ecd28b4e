"""The first call: while numba's kernels are not compiled or not loaded, a call on CPU tensors runs
on the torch back end (the same ranks, bit for bit) until numba costs less; a compile prints one
line on stderr, once per process.

The suite runs with ``RECALLKIT_COLD_START=compile`` (``tests/cpu.env``); these tests set the
library's default (``auto``) and make the kernels look cold (``jit.cached``, ``jit.loaded``), or
run a fresh process with an empty cache folder (``NUMBA_CACHE_DIR``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

from recallkit import (
    engine,
    ground_truth_ranks_from_embeddings,
    map_at_r,
    nearest_neighbors,
    recall_at_k,
    retrieval_metrics,
)
from recallkit.engine import cpu, device, exact, filters, jit, lowp, protocol
from recallkit.options import Options

ROOT = Path(__file__).resolve().parents[2]
LINE = "compiling recallkit's kernels, once: about "


def _data(seed: int = 0, n: int = 200, d: int = 12, classes: int = 30):
    """Class clusters with exact duplicates (ties), float32."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    x = (rng.standard_normal((classes, d))[labels] + rng.standard_normal((n, d))).astype(np.float32)
    x[n - 20 :] = x[:20]
    labels[n - 20 :] = labels[:20]
    return x, labels


def _results(x, labels, metric="cosine", **kw):
    """Every kind of request, as plain values: first-hit ranks with their ties, ranked lists,
    targets."""
    rng = np.random.default_rng(1)
    targets = np.stack([rng.choice(len(x), 3, replace=False) for _ in range(len(x))])
    loo = dict(query_in_reference=True, metric=metric, **kw)
    r = recall_at_k(x, x, labels, labels, (1, 4), **loo)
    both = retrieval_metrics(x, x, labels, labels, ["recall@2", "MAP@R", "MRR"], **loo)
    half = len(x) // 2
    qr = recall_at_k(x[:half], x[half:], labels[:half], labels[half:], (1, 3), metric=metric)
    return {
        "recall": r.to_dict(),  # the ranks, the values, the tie bounds
        "tied": r.tied.tolist(),
        "coarse": recall_at_k(x, x, labels % 2, labels % 2, 1, **loo).first_hit_ranks.tolist(),
        "map_at_r": float(map_at_r(x, x, labels, labels, **loo)),
        "one pass": both.to_dict(),
        "per query": {k: v.tolist() for k, v in both.per_query.items()},
        "query/reference": qr.first_hit_ranks.tolist(),
        "nearest": [t.tolist() for t in nearest_neighbors(x, x, 5, **loo)],
        "targets": ground_truth_ranks_from_embeddings(
            x, x, targets, reduce="none", metric=metric
        ).tolist(),
    }


def _cold_kernels(monkeypatch, cold: bool) -> None:
    """Every kernel looks compiled and loaded in this process, or neither (``cold``)."""
    monkeypatch.setattr(jit, "cached", lambda kernel: not cold)
    monkeypatch.setattr(jit, "loaded", lambda kernel, args=None: not cold)


@pytest.fixture
def ran(monkeypatch):
    """The library's default cold start, nothing compiled as far as the engine can tell (and
    compiling as slow as the torch runs never catch up with), and a record of the back ends
    that ran (``"numba"``, ``"torch"``)."""
    monkeypatch.setenv(jit.COLD_START_VARIABLE, "auto")
    monkeypatch.delenv("RECALLKIT_BACKEND", raising=False)
    monkeypatch.setattr(jit, "_allowed", False)
    monkeypatch.setattr(engine, "_paid", 0.0)
    _cold_kernels(monkeypatch, True)
    first_compile = cpu.first_compile  # compiling as slow as torch never catches up with
    monkeypatch.setattr(
        cpu, "first_compile", lambda r, s: [(k, 1e9) for k, _ in first_compile(r, s)]
    )
    record: list[str] = []
    numba_run, torch_run = cpu.BACKEND.run, device.DeviceBackend.run

    def on_numba(*args, **kwargs):
        record.append("numba")
        return numba_run(*args, **kwargs)

    def on_torch(self, *args, **kwargs):
        record.append("torch")
        return torch_run(self, *args, **kwargs)

    monkeypatch.setattr(cpu.BACKEND, "run", on_numba)
    monkeypatch.setattr(device.DeviceBackend, "run", on_torch)
    return record


@pytest.mark.parametrize("metric", ["cosine", "euclidean", "dot"])
def test_a_cold_call_runs_on_torch_with_numba_s_ranks(metric, ran, monkeypatch):
    x, labels = _data()
    cold = _results(x, labels, metric)
    assert set(ran) == {"torch"}
    _cold_kernels(monkeypatch, False)
    ran.clear()
    assert _results(x, labels, metric) == cold
    assert set(ran) == {"numba"}


def test_cold_float64_rows_and_probed_calls_keep_the_ranks(ran, monkeypatch):
    """Float64 rows; and calls past twice the probe's pairs: first queries, then the rest."""
    x, labels = _data(2, n=300)
    x64 = x.astype(np.float64)
    monkeypatch.setattr(engine, "PROBE_PAIRS", 5_000)
    cold = _results(x64, labels), _results(x, labels, chunk_size=64)
    assert set(ran) == {"torch"}
    assert ran.count("torch") > 2 * 8  # each call: its probe, then the rest
    _cold_kernels(monkeypatch, False)
    assert (_results(x64, labels), _results(x, labels, chunk_size=64)) == cold


@pytest.mark.parametrize("probed", [False, True])
def test_numba_wins_once_the_torch_seconds_pass_its_cost(probed, ran, monkeypatch):
    x, labels = _data(3, n=300)
    if probed:  # the probe is the first queries, not the whole call
        monkeypatch.setattr(engine, "PROBE_PAIRS", 10_000)
    expected = recall_at_k(x, x, labels, labels, (1, 2), query_in_reference=True)
    assert ran == (["torch", "torch"] if probed else ["torch"])
    spent = engine._paid
    assert spent > 0
    # The next call's torch seconds would pass numba's (pretended) cost.
    monkeypatch.setattr(cpu, "first_compile", lambda request, space: [(None, spent * 1.01)])
    monkeypatch.setattr(cpu, "START_SECONDS", 0.0)
    ran.clear()
    again = recall_at_k(x, x, labels, labels, (1, 2), query_in_reference=True)
    # A probe that was the whole call is the answer; else numba answers from the first query.
    assert ran == (["torch", "numba"] if probed else ["torch"])
    assert jit.allowed()  # every later call runs numba, whatever the kernels look like
    third = recall_at_k(x, x, labels, labels, (1, 2), query_in_reference=True)
    assert ran[-1] == "numba" and ran.count("torch") == 1
    for result in (again, third):
        assert result.first_hit_ranks.tolist() == expected.first_hit_ranks.tolist()
        assert result.to_dict() == expected.to_dict()


def test_what_compiles_at_once(ran, monkeypatch, tmp_path):
    """The low precisions, a streamed reference and RECALLKIT_COLD_START=compile run numba."""
    x, labels = _data(4)
    recall_at_k(x, x, labels, labels, 1, query_in_reference=True, precision="bfloat16")
    assert ran == ["numba"]
    monkeypatch.setattr(jit, "_allowed", False)
    ran.clear()
    np.save(tmp_path / "x.npy", x)  # a reference read block by block: no tensor of its rows
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    streamed = recall_at_k(x[:50], mapped, labels[:50], labels, (1, 4), query_in_reference=False)
    assert ran == ["numba"]
    in_memory = recall_at_k(x[:50], x, labels[:50], labels, (1, 4), query_in_reference=False)
    assert streamed.to_dict() == in_memory.to_dict()
    monkeypatch.setattr(jit, "_allowed", False)
    ran.clear()
    monkeypatch.setenv(jit.COLD_START_VARIABLE, "compile")
    recall_at_k(x, x, labels, labels, 1, query_in_reference=True)
    assert ran == ["numba"]
    monkeypatch.setenv(jit.COLD_START_VARIABLE, "later")
    with pytest.raises(ValueError, match="RECALLKIT_COLD_START environment variable must be"):
        recall_at_k(x, x, labels, labels, 1, query_in_reference=True)


def test_cold_preparation_uses_torch_with_numba_s_values(monkeypatch):
    x, _ = _data(5, n=300, d=40)
    x[3] *= 1e-30  # rows whose norms need the scaling
    x[4] *= 1e30
    monkeypatch.setattr(jit, "_allowed", False)
    monkeypatch.setenv(jit.COLD_START_VARIABLE, "auto")
    for metric in ("cosine", "dot", "euclidean"):
        for rows in (x, x.astype(np.float64)):
            _cold_kernels(monkeypatch, False)
            warm = engine.prepare(rows, rows, Options(metric=metric), "f")
            _cold_kernels(monkeypatch, True)
            cold = engine.prepare(rows, rows, Options(metric=metric), "f")
            for name in ("sq", "norm", "gemm"):
                a, b = getattr(warm.single, name), getattr(cold.single, name)
                assert a.dtype == b.dtype and a.numpy().tobytes() == b.numpy().tobytes(), name
            assert warm.single.scale == cold.single.scale
            # The largest norm only bounds the filter: within float64's rounding of its sum.
            assert cold.single.max_norm == pytest.approx(warm.single.max_norm, rel=1e-14)


def test_cached_reads_numba_s_cache_for_this_cpu(tmp_path, monkeypatch):
    source = tmp_path / "kernel_here.py"
    source.write_text(
        textwrap.dedent(
            """
            import numba

            @numba.njit(cache=True)
            def twice(x):
                return 2 * x
            """
        )
    )

    def load(name):
        spec = importlib.util.spec_from_file_location(name, source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.twice

    first = load("kernel_here_a")
    assert not jit.cached(first) and not jit.loaded(first) and not jit.loaded(first, (1.5,))
    assert first(1.5) == 3.0
    assert jit.cached(first) and jit.loaded(first, (2.5,)) and not jit.loaded(first, (2,))
    again = load("kernel_here_b")  # a new dispatcher: what the next process finds
    assert jit.cached(again) and not jit.loaded(again)
    if not numba.config.CACHE_DIR:
        assert jit.cache_folder(again) == str(tmp_path / "__pycache__")
    assert jit.cached(object()) and jit.loaded(object())  # no dispatcher: numba decides


def test_the_line_is_printed_once(capsys, monkeypatch):
    monkeypatch.setattr(jit, "_announced", False)
    jit.expect(6.4)
    assert jit.announce(cpu.kernels.window_rows)
    assert not jit.announce(cpu.kernels.window_rows)
    err = capsys.readouterr().err
    folder = jit.cache_folder(cpu.kernels.window_rows)
    assert err == f"{LINE}6 s; cached in {folder}\n"
    for kernel in (
        cpu.kernels.top_rows,
        exact.NUMBA_KERNELS["sq"],
        filters.NUMBA_KERNELS["filter_rows"],
        lowp.NUMBA_KERNELS["quantise"],
    ):
        assert jit.cache_folder(kernel) == folder  # one folder for all


def test_first_compile_names_the_groups_of_kernels_a_pass_compiles():
    def names(n, precision="auto", metric="cosine", thresholds=True, lists=False):
        rows = engine.Rows(torch.ones(n, 16), torch.ones(n), torch.ones(n))
        space = engine.Space(
            rows,
            metric,
            n,
            16,
            torch.device("cpu"),
            lambda: iter(()),
            options=Options(precision=precision),
        )
        space.query_is_reference = True
        request = protocol.Request(
            positives=object() if thresholds else None,
            top_k=np.ones(n, dtype=np.int64) if lists else None,
        )
        return [kernel.py_func.__name__ for kernel, _ in cpu.first_compile(request, space)]

    common = ["_robust_norms_numba", "_exact_numba"]
    assert names(300) == [*common, "window_rows"]
    assert names(300, thresholds=False, lists=True) == [*common, "top_rows"]
    both = [*common, "window_rows", "window_cols", "top_rows", "top_cols"]
    assert names(3000, lists=True) == both
    assert names(3000, metric="euclidean") == [*common, "window_rows"]  # never symmetric
    assert names(300, precision="bfloat16")[-1] == "_quantise"
    wide = names(4 * cpu.TILE, precision="float32")
    assert wide == [*common, "window_rows", "window_cols"]
    if len(lowp.worth_timing()) > 1:  # auto weighs a low precision from 16 full tiles
        assert names(4 * cpu.TILE) == [*wide, "_quantise"]
    assert names(4 * cpu.TILE - 1) == wide


def _process(code: str, folder: Path, cold_start: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != jit.COLD_START_VARIABLE}
    env.pop("RECALLKIT_BACKEND", None)
    env["NUMBA_CACHE_DIR"] = str(folder)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    if cold_start:
        env[jit.COLD_START_VARIABLE] = cold_start
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


CALL = """
import numpy as np, recallkit
from numba.core import event
compiled = []

class Compiles(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__module__)

    def on_end(self, ev):
        pass

event.register("numba:compile", Compiles())
rng = np.random.default_rng(0)
x = rng.standard_normal((300, 16)).astype(np.float32)
y = rng.integers(0, 30, 300)
r = recallkit.recall_at_k(x, x, y, y, ks=(1, 10), query_in_reference=True)
print(r.first_hit_ranks.tolist())
first = len(compiled)
again = recallkit.recall_at_k(x[::-1], x[::-1], y[::-1], y[::-1], ks=1, query_in_reference=True)
print(first, len(compiled) - first)
"""


def test_a_fresh_process_prints_the_line_once_and_a_warm_one_nothing(tmp_path):
    folder = tmp_path / "kernels"
    cold = _process(CALL, folder, None)  # the default: torch, nothing compiled, no line
    assert cold.returncode == 0, cold.stderr
    assert cold.stderr == ""
    assert cold.stdout.splitlines()[1] == "0 0"
    assert not list(folder.rglob("*.nbi"))
    compiling = _process(CALL, folder, "compile")
    assert compiling.returncode == 0, compiling.stderr
    lines = compiling.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(LINE), compiling.stderr
    assert f"; cached in {folder}{os.sep}engine_" in lines[0]
    assert list(folder.rglob("*.nbi"))
    # The first call compiled what the second needs, its rows' preparation included.
    first, second = map(int, compiling.stdout.splitlines()[1].split())
    assert first > 0 and second == 0
    warm = _process(CALL, folder, None)
    assert warm.returncode == 0 and warm.stderr == "", warm.stderr
    assert warm.stdout.splitlines()[1] == "0 0"
    assert cold.stdout.splitlines()[0] == compiling.stdout.splitlines()[0]
    assert warm.stdout.splitlines()[0] == compiling.stdout.splitlines()[0]
