"""History lines, the recall plot, and comparing two runs with a paired bootstrap interval."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from recallkit.runner._errors import RunnerError
from recallkit.runner.bootstrap import compare_records, paired_bootstrap

PNG = b"\x89PNG\r\n\x1a\n"


def _evaluate(cli, hand_case, encoder_module, tmp_path, *extra):
    query, gallery = hand_case
    return cli(
        "evaluate",
        "--query",
        query,
        "--gallery",
        gallery,
        "--callable",
        f"{encoder_module[0]}:mean_rgb",
        "--ks",
        "1",
        "2",
        "--cache-dir",
        tmp_path / "c",
        *extra,
    )


def test_history_lines_and_plot(cli, hand_case, encoder_module, tmp_path):
    history = tmp_path / "runs.jsonl"
    for tag in ("epoch-1", "epoch-2"):
        res = _evaluate(
            cli, hand_case, encoder_module, tmp_path, "--history", history, "--tag", tag
        )
        assert res.rc == 0, res.err
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, "--history", history)
    assert "history: " in res.err and "(3 runs)" in res.err
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    assert [r["tag"] for r in lines] == ["epoch-1", "epoch-2", "run-3"]
    assert all(r["metrics"] == {"recall@1": 1 / 3, "recall@2": 1.0} for r in lines)
    assert all("queries" not in r for r in lines)  # per-query detail stays in --json files

    res = cli("plot", history, "-o", tmp_path / "recall.png")
    assert res.rc == 0, res.err
    data = (tmp_path / "recall.png").read_bytes()
    assert data[:8] == PNG and len(data) < 200_000
    res = cli("plot", history, "-o", tmp_path / "recall.svg", "--ks", "2", "--title", "t")
    assert res.rc == 0, res.err
    assert (tmp_path / "recall.svg").read_text().lstrip().startswith("<?xml")


def test_reusing_a_history_tag_warns(cli, hand_case, encoder_module, tmp_path):
    history = tmp_path / "runs.jsonl"
    extra = ("--history", history, "--tag", "epoch-1")
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, *extra)
    assert res.rc == 0 and "warning" not in res.err, res.err
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, *extra)
    assert res.rc == 0, res.err
    warning = (
        f"recallkit evaluate: warning: The tag 'epoch-1' is already in the history file "
        f"'{history}' (run 1); run 2 is added under the same tag."
    )
    assert [line for line in res.err.splitlines() if "warning" in line] == [warning]
    assert [json.loads(line)["tag"] for line in history.read_text().splitlines()] == [
        "epoch-1",
        "epoch-1",
    ]


def test_history_and_plot_errors(cli, tmp_path, hand_case, encoder_module):
    history = tmp_path / "runs.jsonl"
    history.write_text('{"tag": "a", "recall": {"recall@1": 0.5}}\nnot json\n')
    before = history.read_text()
    extra = ("--history", history, "--json", tmp_path / "r.json")
    res = _evaluate(cli, hand_case, encoder_module, tmp_path, *extra)
    assert res.rc == 2 and "line 2 is not JSON" in res.err
    assert history.read_text() == before
    assert not (tmp_path / "r.json").exists()  # checked before anything is written
    res = cli("plot", history, "-o", tmp_path / "p.png")
    assert res.rc == 2 and "line 2 is not JSON" in res.err
    history.write_text('{"tag": "a", "recall": {"recall@1": 0.5}}\n')
    for args, fragment in [
        (["-o", tmp_path / "p.gif"], "must end in .png, .svg, .pdf"),
        (["-o", tmp_path / "p.png", "--ks", "5"], "has no recall@5; it has recall@1"),
    ]:
        res = cli("plot", history, *args)
        assert res.rc == 2 and fragment in res.err, res.err
    res = cli("plot", tmp_path / "missing.jsonl", "-o", tmp_path / "p.png")
    assert res.rc == 2 and "does not exist" in res.err
    assert not (tmp_path / "p.png").exists() and not (tmp_path / "p.gif").exists()


def _run_file(path, ranks, ks=(1, 5), ids=None, labels=None):
    n = len(ranks)
    record = {
        "ks": list(ks),
        "queries": {
            "ids": ids or [f"q{i}" for i in range(n)],
            "labels": labels or [0] * n,
            "first_hit_rank": list(ranks),
        },
    }
    path.write_text(json.dumps(record))
    return record


def test_paired_bootstrap_known_answers():
    # Every query a hit for a and a miss for b: each resample gives 1.
    assert paired_bootstrap([1] * 5, [0] * 5) == (1.0, 1.0, 1.0)
    # Identical systems: each resample gives 0.
    assert paired_bootstrap([1, 0, 1, 1], [1, 0, 1, 1]) == (0.0, 0.0, 0.0)
    # 40 of 400 queries hit by a only, none by b: a resample's difference is X / 400 with
    # X ~ Binomial(400, 0.1), so the 95% percentile interval is that binomial's 2.5% and
    # 97.5% quantiles over 400 (to one grid step of 1/400: the interval is empirical).
    a = np.zeros(400, bool)
    a[:40] = True
    diff, low, high = paired_bootstrap(a, np.zeros(400, bool))
    assert diff == 0.1
    assert abs(low - stats.binom.ppf(0.025, 400, 0.1) / 400) <= 1 / 400
    assert abs(high - stats.binom.ppf(0.975, 400, 0.1) / 400) <= 1 / 400
    # 60 queries favour a, 20 favour b, 320 tie: d = +1 (p .15), -1 (p .05), 0. Mean 0.1,
    # variance E[d^2] - E[d]^2 = 0.2 - 0.01 = 0.19, so the mean of 400 has sd sqrt(0.19/400)
    # = 0.02179 and the interval is close to 0.1 -+ 1.96 * 0.02179 = [0.0573, 0.1427].
    a = np.zeros(400, bool)
    b = np.zeros(400, bool)
    a[:60] = True
    b[60:80] = True
    diff, low, high = paired_bootstrap(a, b)
    assert diff == 0.1
    assert abs(low - 0.0573) < 0.006 and abs(high - 0.1427) < 0.006
    # The seed is fixed: the same interval every time; another seed may differ slightly.
    assert paired_bootstrap(a, b) == (diff, low, high)


def test_compare_cli(cli, tmp_path):
    # a: ranks 0,0,0,3 -> recall@1 3/4, recall@5 1. b: ranks 3,3,0,3 -> recall@1 1/4, @5 1.
    _run_file(tmp_path / "a.json", [0, 0, 0, 3])
    _run_file(tmp_path / "b.json", [3, 3, 0, 3])
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--json", tmp_path / "c.json")
    assert res.rc == 0, res.err
    assert "4 paired queries; 95% paired bootstrap interval (10000 resamples, seed 0)" in res.out
    lines = res.out.splitlines()
    at1 = next(line for line in lines if line.strip().startswith("recall@1"))
    at5 = next(line for line in lines if line.strip().startswith("recall@5"))
    assert at1.split()[1:4] == ["0.7500", "0.2500", "+0.5000"]
    assert at5.split()[1:4] == ["1.0000", "1.0000", "+0.0000"]
    assert at5.endswith("no")
    record = json.loads((tmp_path / "c.json").read_text())
    assert [(k["k"], k["a_only"], k["b_only"]) for k in record["ks"]] == [(1, 2, 0), (5, 0, 0)]
    assert record["ks"][1]["low"] == record["ks"][1]["high"] == 0.0


def test_compare_pairs_by_identity(tmp_path):
    a = _run_file(tmp_path / "a.json", [0, 4, 2, -1], ids=["x", "y", "z", "w"])
    # The same queries in another order (w is excluded in both).
    b = _run_file(tmp_path / "b.json", [-1, 0, 0, 9], ids=["w", "z", "x", "y"])
    c = compare_records(a, b, ks=[1, 3])
    # Evaluated x, y, z: a ranks 0, 4, 2; b ranks 0, 9, 0.
    # recall@1: a 1/3, b 2/3; recall@3: a 2/3, b 2/3.
    assert [(r.k, r.recall_a, r.recall_b, r.a_only, r.b_only) for r in c.rows] == [
        (1, 1 / 3, 2 / 3, 0, 1),
        (3, 2 / 3, 2 / 3, 0, 0),
    ]
    assert c.num_queries == 3
    # Repeated ids (a manifest's id column) pair by image path: b lists the two in reverse.
    a = _run_file(tmp_path / "a.json", [0, 5], ids=["p", "p"])
    b = _run_file(tmp_path / "b.json", [5, 0], ids=["p", "p"])
    a["queries"]["paths"] = ["/d/1.png", "/d/2.png"]
    b["queries"]["paths"] = ["/d/2.png", "/d/1.png"]
    row = compare_records(a, b, ks=[1]).rows[0]
    assert (row.diff, row.a_only, row.b_only) == (0.0, 0, 0)
    # Without paths, repeated ids cannot be paired: an error, not a guess by order.
    del a["queries"]["paths"]
    with pytest.raises(RunnerError, match=r"a has 2 queries with id 'p', so they cannot be paired"):
        compare_records(a, b, ks=[1])


@pytest.mark.parametrize(
    ("b_kwargs", "fragment"),
    [
        ({"ids": ["q0", "q1", "other"]}, "did not evaluate the same queries"),
        ({"labels": [0, 1, 0]}, "different labels"),
        ({"ranks": [0, -1, 0]}, "exclude different queries"),
        ({"ks": (2,)}, "no common K"),
    ],
)
def test_compare_errors(cli, tmp_path, b_kwargs, fragment):
    _run_file(tmp_path / "a.json", [0, 1, 2])
    ranks = b_kwargs.pop("ranks", [0, 1, 2])
    _run_file(tmp_path / "b.json", ranks, **b_kwargs)
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json")
    assert res.rc == 2 and fragment in res.err, res.err
    assert "Traceback" not in res.err


def test_compare_file_errors(cli, tmp_path):
    (tmp_path / "x.json").write_text("{")
    (tmp_path / "y.json").write_text('{"recall": {}}')
    for a, fragment in [
        ("x.json", "is not JSON"),
        ("y.json", "has no per-query ranks"),
        ("z.json", "does not exist"),
    ]:
        res = cli("compare", tmp_path / a, tmp_path / a)
        assert res.rc == 2 and fragment in res.err, res.err
    _run_file(tmp_path / "a.json", [0])
    res = cli("compare", tmp_path / "a.json", tmp_path / "a.json", "--confidence", "1.5")
    assert res.rc == 2 and "--confidence must be between 0 and 1" in res.err


def test_plot_and_compare_say_which_file_kind_they_expect(cli, tmp_path):
    history = tmp_path / "runs.jsonl"
    history.write_text(
        '{"tag": "a", "recall": {"recall@1": 0.5}}\n{"tag": "b", "recall": {"recall@1": 0.75}}\n'
    )
    one_line = tmp_path / "one.jsonl"
    one_line.write_text('{"tag": "a", "recall": {"recall@1": 0.5}}\n')
    run = tmp_path / "run.json"
    _run_file(run, [0, 1])
    indented = tmp_path / "indented.json"
    indented.write_text(json.dumps(json.loads(run.read_text()), indent=1))
    comparison = tmp_path / "cmp.json"
    assert cli("compare", run, run, "--json", comparison).rc == 0
    csv = tmp_path / "x.csv"
    csv.write_text("tag,recall\na,0.5\n")

    for path in (history, one_line):
        res = cli("compare", run, path)
        assert res.rc == 2 and res.err == (
            f"recallkit compare: error: '{path}' is a history file (recallkit evaluate "
            "--history); pass a run file (recallkit evaluate --json).\n"
        )
    res = cli("compare", comparison, run)
    assert res.rc == 2 and res.err == (
        f"recallkit compare: error: '{comparison}' is a comparison file (recallkit compare "
        "--json); pass a run file (recallkit evaluate --json).\n"
    )
    res = cli("compare", csv, run)
    assert res.rc == 2 and res.err.startswith(
        f"recallkit compare: error: The run file '{csv}' is not JSON: "
    )
    assert res.err.endswith("; a run file is written by recallkit evaluate --json.\n")

    for path in (run, indented):
        res = cli("plot", path, "-o", tmp_path / "p.png")
        assert res.rc == 2 and res.err == (
            f"recallkit plot: error: '{path}' is a run file (recallkit evaluate --json); "
            "pass a history file (recallkit evaluate --history).\n"
        )
    res = cli("plot", comparison, "-o", tmp_path / "p.png")
    assert res.rc == 2 and "is a comparison file (recallkit compare --json); pass a history" in (
        res.err
    )
    res = cli("plot", csv, "-o", tmp_path / "p.png")
    assert res.rc == 2 and res.err.startswith(
        f"recallkit plot: error: The history file '{csv}' line 1 is not JSON: "
    )
    assert res.err.endswith(
        "; a history file has one run record per line (recallkit evaluate --history).\n"
    )
    assert not (tmp_path / "p.png").exists()


def test_recall_plot_y_axis_fits_the_data():
    from recallkit.runner.history_plot import history_figure

    runs = [
        {"tag": "e1", "recall": {"recall@1": 0.73, "recall@5": 0.90}},
        {"tag": "e2", "recall": {"recall@1": 0.80, "recall@5": 0.95}},
        {"tag": "e3", "recall": {"recall@1": None, "recall@5": 0.93}},
    ]
    # Both lines: 0.73 .. 0.95, range 0.22, margin 0.022 either side.
    (ax,) = history_figure(runs, ["recall@1", "recall@5"], "t").axes
    assert ax.get_ylim() == pytest.approx((0.708, 0.972), abs=1e-12)
    # recall@1 alone: 0.73 .. 0.80, range 0.07, margin at least 0.02.
    (ax,) = history_figure(runs, ["recall@1"], "t").axes
    assert ax.get_ylim() == pytest.approx((0.71, 0.82), abs=1e-12)
    # Margins never leave [0, 1].
    ends = [{"tag": "a", "recall": {"recall@1": 0.01}}, {"tag": "b", "recall": {"recall@1": 1.0}}]
    (ax,) = history_figure(ends, ["recall@1"], "t").axes
    assert ax.get_ylim() == (0.0, 1.0)
    # Nothing to plot: the full 0-1 range.
    (ax,) = history_figure([{"tag": "a", "recall": {"recall@1": None}}], ["recall@1"], "t").axes
    assert ax.get_ylim() == (0.0, 1.0)


def test_the_axis_names_what_is_drawn_and_the_legend_stays_beside_the_lines():
    from recallkit.runner.history_plot import history_figure

    recall = [{"tag": "e1", "metrics": {"recall@1": 0.5, "recall@2": 0.75}}]
    (ax,) = history_figure(recall, ["recall@1", "recall@2"], "t").axes
    assert ax.get_ylabel() == "recall@K"
    mixed = [
        {"tag": "e1", "metrics": {"recall@1": 0.5, "MAP@R": 0.2, "R-precision": 0.3}},
        {"tag": "e2", "recall": {"recall@1": 0.6, "MAP@R": 0.25}},
    ]  # an older line too
    fig = history_figure(mixed, ["recall@1", "MAP@R", "R-precision"], "t")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "value"
    assert [line.get_label() for line in ax.get_lines()] == ["recall@1", "MAP@R", "R-precision"]
    assert ax.get_lines()[1].get_ydata().tolist() == [0.2, 0.25]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # beside the axes, over no line
