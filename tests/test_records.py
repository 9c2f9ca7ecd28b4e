"""recallkit.runfiles.records: the library's run-record writer, shared by the runner and
Evaluator."""

from __future__ import annotations

import multiprocessing
import sys

import pytest

from recallkit.runfiles import records
from recallkit.runner import RunnerError, read_history


def _run(path: str, worker: int, epochs: int, barrier, results) -> None:
    try:
        import torch

        from recallkit import Evaluator

        torch.set_num_threads(1)
        g = torch.Generator().manual_seed(worker)
        x, y = torch.randn(30, 4, generator=g), torch.randint(0, 3, (30,), generator=g)
        ev = Evaluator(ks=(1,), metrics=["recall@1"], history=path)
        ev.update(x, y)
        barrier.wait()
        got = [(ev.compute(tag=f"w{worker}-e{e}")["recall@1"]) for e in range(epochs)]
    except BaseException as error:  # reported to the test, which must not wait forever
        got = [f"{type(error).__name__}: {error}"]
    results.put((worker, got))


@pytest.mark.skipif(sys.platform != "linux", reason="flock is POSIX")
def test_two_training_runs_sharing_a_history_lose_no_record(tmp_path):
    history = tmp_path / "runs.jsonl"
    workers, epochs = 2, 15
    # Fresh interpreters: a fork after this process ran torch's thread pool could hang.
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(workers), context.Queue()
    processes = [
        context.Process(target=_run, args=(str(history), w, epochs, barrier, results))
        for w in range(workers)
    ]
    for p in processes:
        p.start()
    returned = dict(results.get(timeout=240) for _ in range(workers))
    for p in processes:
        p.join(timeout=60)
    assert all(isinstance(v, float) for got in returned.values() for v in got), returned
    lines = read_history(history)
    assert len(lines) == workers * epochs
    by_tag = {r["tag"]: r["metrics"]["recall@1"] for r in lines}
    assert by_tag == {f"w{w}-e{e}": returned[w][e] for w in range(workers) for e in range(epochs)}


def test_the_runner_reports_record_errors_as_its_own(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"tag": "a", "recall": {}}\nnot json\n')
    with pytest.raises(records.RecordError, match="line 2 is not JSON"):
        records.read_history(bad)
    with pytest.raises(RunnerError, match="line 2 is not JSON"):
        read_history(bad)
    with pytest.raises(records.RecordError, match="line 2 is not JSON"):
        records.append_history(bad, {"tag": "b", "recall": {}})
    assert bad.read_text() == '{"tag": "a", "recall": {}}\nnot json\n'  # not appended to


def test_a_run_file_is_not_a_history(tmp_path):
    queries = {"ids": [], "first_hit_rank": []}
    run = records.write_run(tmp_path / "e.json", {"tag": "e", "recall": {}, "queries": queries})
    with pytest.raises(records.RecordError, match=r"is a run file .*pass a history file"):
        records.read_history(run)
    with pytest.raises(records.RecordError, match="is a folder"):
        records.write_run(tmp_path, {"tag": "e", "recall": {}})


def test_the_run_file_table_of_cli_md_is_the_schema():
    """docs/cli.md names every field of the run file's schema (top level and ``queries``), and
    nothing else."""
    import re
    from pathlib import Path

    from recallkit.runfiles import records

    schema = records.schema("run")
    text = Path(__file__).resolve().parents[1].joinpath("docs", "cli.md").read_text("utf-8")
    start = text.index("### The run file (`--json`)")
    table = text[start : text.index("### The definitions of a run")]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    queries_row = next(row for row in rows if row.startswith("| `queries`"))
    assert named == set(schema["properties"])
    assert set(re.findall(r"`([a-z_]+)`", queries_row.split("|")[2])) >= set(
        schema["properties"]["queries"]["properties"]
    )
    history = records.schema("history")
    assert set(history["properties"]) == set(schema["properties"]) - {
        "queries",
        "worst_classes",
        "skipped_images",
        "sources",
    } | {"num_skipped_images"}
