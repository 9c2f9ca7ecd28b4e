"""Ctrl-C: one line, ``recallkit CMD: interrupted``, exit status 130, and no partial file.

An interrupt is raised from inside the pipeline (the encoder, the evaluation, the writes), and
once as a real SIGINT sent to a ``recallkit`` process while it encodes.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from recallkit.cli.commands import evaluate as evaluate_command
from recallkit.runfiles import _atomic

INTERRUPTED = "recallkit evaluate: interrupted\n"


@pytest.fixture(autouse=True)
def ctrl_c_is_delivered():
    """SIGINT as an interactive shell leaves it (Python's KeyboardInterrupt handler), also when
    the suite itself was started with interrupts ignored (``nohup``, a background job of a
    script), which the command respects and its processes would inherit."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _default_sigint() -> None:
    """In a child before it starts Python: SIGINT not ignored (Python then installs its
    KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _outputs(tmp_path):
    return {
        "json": tmp_path / "out" / "run.json",
        "history": tmp_path / "out" / "runs.jsonl",
        "grid": tmp_path / "out" / "grid.png",
    }


def _run(cli, hand_case, tmp_path, callable_spec, *extra):
    query, gallery = hand_case
    out = _outputs(tmp_path)
    return cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        callable_spec,
        "--ks",
        "1",
        "2",
        "--cache-dir",
        tmp_path / "cache",
        "--json",
        out["json"],
        "--history",
        out["history"],
        "--show-out",
        out["grid"],
        *extra,
    )


def _leftovers(tmp_path):
    """Every file written under the outputs' folder and the cache (temporary ones included)."""
    found = []
    for folder in (tmp_path / "out", tmp_path / "cache"):
        if folder.exists():
            found += sorted(p.name for p in folder.rglob("*") if p.is_file())
    return found


@pytest.fixture
def interrupting_encoder(tmp_path, monkeypatch):
    """A module whose encoder raises KeyboardInterrupt, as Ctrl-C during encoding does."""
    folder = tmp_path / "interrupting"
    folder.mkdir()
    (folder / "rk_interrupting.py").write_text("def encode(images):\n    raise KeyboardInterrupt\n")
    monkeypatch.syspath_prepend(str(folder))
    yield "rk_interrupting:encode"
    sys.modules.pop("rk_interrupting", None)


def test_interrupt_while_encoding(cli, hand_case, tmp_path, interrupting_encoder):
    res = _run(cli, hand_case, tmp_path, interrupting_encoder)
    assert (res.rc, res.out) == (130, "")
    assert res.err.endswith(INTERRUPTED) and "Traceback" not in res.err
    assert [line for line in res.err.splitlines() if "interrupted" in line] == [INTERRUPTED[:-1]]
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("error", ["ImportError", "ValueError", "RuntimeError"])
def test_an_error_that_ctrl_c_caused_is_said_as_the_interrupt(
    cli, hand_case, tmp_path, monkeypatch, error
):
    """A native library whose initialisation a Ctrl-C broke raises its own error (numba: an
    ImportError, "numba._devicearray failed to import"): the command still says it was
    interrupted, in one line, exit 130."""
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "rk_broken.py").write_text(
        textwrap.dedent(
            f"""
            import signal

            def encode(images):
                try:
                    signal.raise_signal(signal.SIGINT)
                except KeyboardInterrupt:
                    raise {error}("a native module failed to initialise") from None
            """
        )
    )
    monkeypatch.syspath_prepend(str(folder))
    try:
        res = _run(cli, hand_case, tmp_path, "rk_broken:encode")
    finally:
        sys.modules.pop("rk_broken", None)
    assert (res.rc, res.out) == (130, "")
    assert res.err.endswith(INTERRUPTED) and "Traceback" not in res.err
    assert [line for line in res.err.splitlines() if "rror" in line or "nterrupt" in line] == [
        INTERRUPTED[:-1]
    ]
    assert _leftovers(tmp_path) == []


def test_a_second_ctrl_c_while_the_interrupt_is_said_is_ignored(
    cli, hand_case, tmp_path, monkeypatch
):
    """The second Ctrl-C of a double press, landing as the command winds down (after the
    interrupted block, before its line is printed): still the one line, and Python's own
    handler back in place once the command has returned."""
    from recallkit.cli import app as cli_module

    folder = tmp_path / "ctrl_c"
    folder.mkdir()
    (folder / "rk_ctrl_c.py").write_text(
        "import signal\n\ndef encode(images):\n    signal.raise_signal(signal.SIGINT)\n"
    )
    monkeypatch.syspath_prepend(str(folder))
    real = cli_module._second_ctrl_c_ignored

    @contextlib.contextmanager
    def second_press_first():
        signal.raise_signal(signal.SIGINT)
        with real():
            yield

    monkeypatch.setattr(cli_module, "_second_ctrl_c_ignored", second_press_first)
    try:
        res = _run(cli, hand_case, tmp_path, "rk_ctrl_c:encode")
    finally:
        sys.modules.pop("rk_ctrl_c", None)
    assert (res.rc, res.out) == (130, "")
    assert [line for line in res.err.splitlines() if "nterrupt" in line] == [INTERRUPTED[:-1]]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_interrupt_while_evaluating(cli, hand_case, encoder_module, tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    import recallkit.runner.pipeline as pipeline

    monkeypatch.setattr(pipeline, "run_evaluation", interrupted)
    res = _run(cli, hand_case, tmp_path, f"{encoder_module[0]}:mean_rgb")
    assert (res.rc, res.out, res.err) == (130, "", INTERRUPTED)
    assert _leftovers(tmp_path) == []


def test_interrupt_while_the_run_file_is_written(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    # The grid is staged first, then the run file: Ctrl-C once half the run file is written.
    real_add = _atomic.Staging.add

    def add(self, path, write, mode="w"):
        if not str(path).endswith("run.json"):
            return real_add(self, path, write, mode)

        def half_then_ctrl_c(handle):
            handle.write("{")
            handle.flush()
            raise KeyboardInterrupt

        return real_add(self, path, half_then_ctrl_c, mode)

    monkeypatch.setattr(_atomic.Staging, "add", add)
    res = _run(cli, hand_case, tmp_path, f"{encoder_module[0]}:mean_rgb")
    assert res.rc == 130 and res.err.endswith(INTERRUPTED), res.err
    # The staged grid and the half run file are removed; nothing was renamed into place.
    assert list((tmp_path / "out").iterdir()) == []


def test_interrupt_while_the_cache_is_written(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    # The gallery's cache entry is its .json, then its .npy (the .npy completes the entry):
    # Ctrl-C while the .npy is synced leaves no entry, so the next run encodes again.
    real_sync, calls = _atomic.sync, []

    def sync(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real_sync(fd)

    monkeypatch.setattr(_atomic, "sync", sync)
    res = _run(cli, hand_case, tmp_path, f"{encoder_module[0]}:mean_rgb")
    assert res.rc == 130 and res.err.endswith(INTERRUPTED), res.err
    assert _leftovers(tmp_path) == []
    monkeypatch.setattr(_atomic, "sync", real_sync)
    again = _run(cli, hand_case, tmp_path, f"{encoder_module[0]}:mean_rgb")
    assert again.rc == 0, again.err
    assert "cache hit" not in again.err
    assert json.loads(_outputs(tmp_path)["json"].read_text())["queries"]["first_hit_rank"] == [
        0,
        1,
        1,
    ]


def test_interrupt_raised_in_the_history_append(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    def interrupted(path, record):
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluate_command, "append_history", interrupted)
    res = _run(cli, hand_case, tmp_path, f"{encoder_module[0]}:mean_rgb")
    assert res.rc == 130 and res.err.endswith(INTERRUPTED), res.err
    assert list((tmp_path / "out").iterdir()) == []  # staged files removed, nothing renamed


def test_ctrl_c_during_the_final_writes_waits_until_every_output_is_in_place(
    cli, hand_case, encoder_module, tmp_path, monkeypatch
):
    # A real SIGINT while the history line is appended: it takes effect once the run file
    # and the grid are renamed into place too, so the three outputs are all there.
    real_append = evaluate_command.append_history

    def append_then_ctrl_c(path, record):
        count = real_append(path, record)
        os.kill(os.getpid(), signal.SIGINT)
        return count

    monkeypatch.setattr(evaluate_command, "append_history", append_then_ctrl_c)
    res = _run(cli, hand_case, tmp_path, f"{encoder_module[0]}:mean_rgb")
    assert res.rc == 130 and res.err.endswith(INTERRUPTED), res.err
    out = _outputs(tmp_path)
    assert json.loads(out["json"].read_text())["queries"]["first_hit_rank"] == [0, 1, 1]
    assert len(out["history"].read_text().splitlines()) == 1
    assert out["grid"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "grid.png",
        "run.json",
        "runs.jsonl",
    ]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_interrupt_in_a_protocol_command(capsys, tmp_path, monkeypatch):
    from recallkit.cli import main
    from recallkit.protocols import image_text

    np.save(tmp_path / "sim.npy", np.eye(2, dtype=np.float32))
    np.save(tmp_path / "ci.npy", np.arange(2))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(image_text, "image_text_recall_from_scores", interrupted)
    argv = ["image-text", "--caption-image", tmp_path / "ci.npy", "--scores", tmp_path / "sim.npy"]
    code = main([str(a) for a in [*argv, "--json", tmp_path / "m.json"]])
    out, err = capsys.readouterr()
    assert (code, out, err) == (130, "", "recallkit image-text: interrupted\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ci.npy", "sim.npy"]


def test_a_real_sigint_to_a_running_command(tmp_path, hand_case):
    """``recallkit evaluate`` in its own process, interrupted with SIGINT while it encodes."""
    query, gallery = hand_case
    started = tmp_path / "encoding-started"
    (tmp_path / "slow").mkdir()
    (tmp_path / "slow" / "rk_slow.py").write_text(
        textwrap.dedent(
            f"""
            import pathlib, time

            def encode(images):
                pathlib.Path({str(started)!r}).write_text("yes")
                time.sleep(120)
            """
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "slow"),
        "RECALLKIT_CACHE": str(tmp_path / "cache"),
    }
    out = _outputs(tmp_path)
    command = [
        sys.executable,
        "-m",
        "recallkit",
        "evaluate",
        "--query",
        str(query),
        "--gallery",
        str(gallery),
        "--callable",
        "rk_slow:encode",
        "--json",
        str(out["json"]),
        "--history",
        str(out["history"]),
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the encoder was never called"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert stdout == ""
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == "recallkit evaluate: interrupted"
    assert not out["json"].exists() and not out["history"].exists()


LOST_IN_A_CALLBACK = """
import signal, time, weakref

import numpy as np


class Thing:
    pass


def encode(images):
    thing = Thing()
    ref = weakref.ref(thing, lambda ref: signal.raise_signal(signal.SIGINT))
    del thing  # Ctrl-C lands in the weakref's callback, where Python cannot raise it
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the command's own code: raised again here
        pass
    return np.zeros((len(images), 3), dtype=np.float32)
"""

HALF_BUILT = """
import signal


class HalfBuilt:
    def __del__(self):
        raise AttributeError("'HalfBuilt' object has no attribute '_as_parameter_'")


def encode(images):
    thing = HalfBuilt()  # freed once the interrupt has been said; its destructor fails
    signal.raise_signal(signal.SIGINT)
"""


@pytest.mark.parametrize("source", [LOST_IN_A_CALLBACK, HALF_BUILT], ids=["lost", "half-built"])
def test_ctrl_c_in_a_callback_or_destructor_is_still_one_line(tmp_path, hand_case, source):
    """A Ctrl-C that lands in a weakref callback (Python prints it as "Exception ignored" and
    goes on) still stops the command; an object it left half built, whose destructor fails
    later, prints nothing. Both seen in stress runs of ``recallkit demo`` (numba, llvmlite)."""
    query, gallery = hand_case
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "rk_ctrl_c.py").write_text(source)
    command = [
        sys.executable,
        "-m",
        "recallkit",
        "evaluate",
        "--query",
        str(query),
        "--gallery",
        str(gallery),
        "--callable",
        "rk_ctrl_c:encode",
        "--json",
        str(tmp_path / "run.json"),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "enc"),
        "RECALLKIT_CACHE": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, preexec_fn=_default_sigint
    )
    assert (done.returncode, done.stdout) == (130, ""), done.stderr
    assert done.stderr.endswith(INTERRUPTED), done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run.json").exists()


def test_sigint_at_any_moment_of_the_engine_once_or_twice(tmp_path):
    """SIGINT at random moments of a run on saved arrays (torch being imported, its threads busy
    in the engine), once and twice in a row: one line, exit 130 (or the finished run), never a
    traceback or a native abort, and no partial file."""
    rng = np.random.default_rng(0)
    n = 10_000
    labels = rng.integers(0, 300, n)
    x = (rng.standard_normal((300, 48))[labels] + rng.standard_normal((n, 48))).astype("f4")
    np.save(tmp_path / "e.npy", x)
    np.save(tmp_path / "l.npy", labels)
    out = tmp_path / "run.json"
    command = [
        sys.executable,
        "-m",
        "recallkit",
        "evaluate",
        "--embeddings",
        str(tmp_path / "e.npy"),
        "--labels",
        str(tmp_path / "l.npy"),
        "--metrics",
        "MAP@R",
        "--json",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    codes = []
    # The first two land in torch's import, most likely; the others in the engine.
    for trial, delay in enumerate((0.2, 0.5, 0.8, 1.3, 1.8, 2.3)):
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=_default_sigint,
        )
        try:
            time.sleep(delay + rng.uniform(0, 0.3))
            process.send_signal(signal.SIGINT)
            if trial % 2:
                time.sleep(0.02)
                process.send_signal(signal.SIGINT)
            _stdout, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        codes.append(process.returncode)
        assert "Traceback" not in stderr and "terminate called" not in stderr, stderr
        assert process.returncode in (0, 130), (process.returncode, stderr)
        if process.returncode == 130:
            assert stderr.endswith("recallkit evaluate: interrupted\n"), stderr
        assert not list(tmp_path.glob("*.tmp*"))
        # A run file is whole: the finished run's, or one put in place before an interrupt
        # that came while it was renamed, which waits until the outputs are in place.
        if process.returncode == 0 or out.exists():
            assert len(json.loads(out.read_text())["queries"]["first_hit_rank"]) == n
            out.unlink()
    assert 130 in codes  # the interrupts met the run, not only its end


@pytest.mark.parametrize("command", ["evaluate", "plot"])
def test_the_engine_commands_load_its_native_libraries_with_ctrl_c_held(
    cli, tmp_path, monkeypatch, command
):
    """torch, numba and ONNX Runtime are imported before an engine command starts, each under
    a SIGINT handler that holds the interrupt (an interrupt inside their native initialisation
    aborts the process, or breaks the module); a command without the engine imports none."""
    from recallkit.cli import app as cli_module

    seen: dict[str, object] = {}
    real = cli_module.importlib.import_module

    def recording(name, *args, **kwargs):
        if name in ("torch", "numba", "onnxruntime"):
            seen[name] = signal.getsignal(signal.SIGINT)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(cli_module.importlib, "import_module", recording)
    np.save(tmp_path / "e.npy", np.eye(4, dtype=np.float32))
    np.save(tmp_path / "l.npy", np.array([0, 0, 1, 1]))
    if command == "evaluate":
        result = cli(
            "evaluate",
            "--embeddings",
            tmp_path / "e.npy",
            "--labels",
            tmp_path / "l.npy",
            "--ks",
            "1",
            "--quiet",
        )
        assert result.rc == 0, result.err
        assert set(seen) == {"torch", "numba", "onnxruntime"}
        for handler in seen.values():
            assert callable(handler) and handler is not signal.default_int_handler
    else:  # parsed and started (it fails on its input), with neither imported by the CLI
        history = tmp_path / "none.jsonl"
        result = cli("plot", history, "-o", tmp_path / "plot.png")
        assert (result.rc, result.err.strip()) == (
            2,
            f"recallkit plot: error: The history file '{history}' does not exist.",
        )
        assert seen == {}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _sigint_at_instruction(n: int, block) -> bool:
    """Run ``block()`` with SIGINT raised before its ``n``-th bytecode instruction (counted in
    every frame it runs, the standard library's included); return whether it was raised.

    Python runs a signal handler between two instructions, so this reaches every moment a
    real Ctrl-C could take effect at."""
    count = 0
    raised = False

    def trace(frame, event, arg):
        nonlocal count, raised
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
            if count == n:
                raised = True
                signal.raise_signal(signal.SIGINT)
        return trace

    # A write that an interrupt left holding a lock would hang the next one: fail instead.
    faulthandler.dump_traceback_later(60, exit=True)
    sys.settrace(trace)
    try:
        block()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
        faulthandler.cancel_dump_traceback_later()
    return raised


# An interrupt that lands in a weakref callback run by the collector is lost there, as Python
# does (reported as unraisable): the write then goes on, which the test allows.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_at_every_instruction_of_a_write_leaves_the_old_files_or_all_new_ones(
    tmp_path, monkeypatch
):
    """``atomic_write`` over an old file, and two files staged and committed together: Ctrl-C
    before any one instruction leaves no temporary file, and either the old contents or all
    the new ones."""
    monkeypatch.setattr(_atomic, "sync", lambda fd: None)  # the disk plays no part here
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"

    def rewrite():
        with _atomic.atomic_write(one) as handle:
            handle.write("new one")

    def both():
        with _atomic.Staging() as staging:
            staging.add(one, lambda handle: handle.write("new one"))
            staging.add(two, lambda handle: handle.write("new two"))
            staging.commit()

    for block, old, new in [
        (rewrite, {"one.txt": "old one"}, {"one.txt": "new one"}),
        (both, {"one.txt": "old one"}, {"one.txt": "new one", "two.txt": "new two"}),
    ]:
        outcomes = set()
        n = 0
        while True:
            n += 1
            for path in tmp_path.iterdir():
                path.unlink()
            one.write_text("old one")
            raised = _sigint_at_instruction(n, block)
            found = {path.name: path.read_text() for path in tmp_path.iterdir()}
            assert found in (old, new), (block.__name__, n, found)
            outcomes.add(found == new)
            if not raised:  # past the block's last instruction
                break
        assert n > 500 and outcomes == {False, True}, (block.__name__, n, outcomes)
