"""History lines, the plots, and comparing runs on the command line."""

from __future__ import annotations

import json

import pytest

from recallkit.runner.history_plot import history_figure, plot_history
from tests.runner.checks import one_error_line, valid_run

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
    """A run file of recall@K from first-hit ranks (``-1``: a lone query), valid against the
    shipped schema."""
    n = len(ranks)
    kept = [r for r in ranks if r >= 0]
    record = {
        "format": "recallkit.evaluation/4",
        "tag": None,
        "ks": list(ks),
        "metrics": {f"recall@{k}": sum(r < k for r in kept) / len(kept) for k in ks},
        "num_queries": n,
        "queries": {
            "ids": ids or [f"q{i}" for i in range(n)],
            "labels": labels or [0] * n,
            "first_hit_rank": list(ranks),
            "values": {f"recall@{k}": [None if r < 0 else float(r < k) for r in ranks] for k in ks},
        },
    }
    path.write_text(json.dumps(valid_run(record)))
    return record


def test_compare_cli(cli, tmp_path):
    # a: ranks 0,0,0,3 -> recall@1 3/4, recall@5 1. b: ranks 3,3,0,3 -> recall@1 1/4, @5 1.
    _run_file(tmp_path / "a.json", [0, 0, 0, 3])
    _run_file(tmp_path / "b.json", [3, 3, 0, 3])
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--json", tmp_path / "c.json")
    assert res.rc == 0, res.err
    assert res.out.startswith("2 runs, 4 paired queries; McNemar's exact test (0/1 values")
    rows = [line.split() for line in res.out.splitlines()]
    values = {r[0]: (r[1], r[4]) for r in rows if len(r) == 7}
    assert values == {"recall@1": ("0.7500", "0.2500"), "recall@5": ("1.0000", "1.0000")}
    at1 = next(r for r in rows if r[:3] == ["recall@1", "a", "b"])
    at5 = next(r for r in rows if r[:3] == ["recall@5", "a", "b"])
    assert at1[3] == "+0.5000" and at1[-2:] == ["2", "0"]
    assert at5[3] == "+0.0000" and at5[-4:] == ["not", "significant", "0", "0"]
    record = json.loads((tmp_path / "c.json").read_text())
    rows = record["comparisons"]
    assert [(r["metric"], r["only_a"], r["only_b"]) for r in rows] == [
        ("recall@1", 2, 0),
        ("recall@5", 0, 0),
    ]
    assert rows[1]["low"] == rows[1]["high"] == 0.0


def test_compare_pairs_by_identity(cli, tmp_path):
    _run_file(tmp_path / "a.json", [0, 4, 2, -1], ks=(1, 3), ids=["x", "y", "z", "w"])
    # The same queries in another order (w is excluded in both).
    _run_file(tmp_path / "b.json", [-1, 0, 0, 9], ks=(1, 3), ids=["w", "z", "x", "y"])
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--json", tmp_path / "c.json")
    assert res.rc == 0, res.err
    # Evaluated x, y, z: a ranks 0, 4, 2; b ranks 0, 9, 0.
    # recall@1: a 1/3, b 2/3; recall@3: a 2/3, b 2/3.
    record = json.loads((tmp_path / "c.json").read_text())
    assert record["num_queries"] == 3
    assert [
        (r["metric"], r["value_a"], r["value_b"], r["only_a"], r["only_b"])
        for r in record["comparisons"]
    ] == [("recall@1", 1 / 3, 2 / 3, 0, 1), ("recall@3", 2 / 3, 2 / 3, 0, 0)]
    # Repeated ids (a manifest's id column) pair by image path: b lists the two in reverse.
    a = _run_file(tmp_path / "a.json", [0, 5], ks=(1,), ids=["p", "p"])
    b = _run_file(tmp_path / "b.json", [5, 0], ks=(1,), ids=["p", "p"])
    a["queries"]["paths"] = ["/d/1.png", "/d/2.png"]
    b["queries"]["paths"] = ["/d/2.png", "/d/1.png"]
    (tmp_path / "a.json").write_text(json.dumps(valid_run(a)))
    (tmp_path / "b.json").write_text(json.dumps(valid_run(b)))
    res = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--json", tmp_path / "c.json")
    assert res.rc == 0, res.err
    row = json.loads((tmp_path / "c.json").read_text())["comparisons"][0]
    assert (row["difference"], row["only_a"], row["only_b"]) == (0.0, 0, 0)
    # Without paths, repeated ids cannot be paired: an error, not a guess by order.
    del a["queries"]["paths"]
    (tmp_path / "a.json").write_text(json.dumps(valid_run(a)))
    one_error_line(
        cli("compare", tmp_path / "a.json", tmp_path / "b.json"),
        "a has 2 queries with id 'p', so they cannot be paired",
    )


@pytest.mark.parametrize(
    ("b_kwargs", "fragment"),
    [
        ({"ids": ["q0", "q1", "other"]}, "did not evaluate the same queries"),
        ({"labels": [0, 1, 0]}, "different labels"),
        ({"ranks": [0, -1, 0]}, "exclude different queries"),
        ({"ks": (2,)}, "a metric every run holds"),
    ],
)
def test_compare_errors(cli, tmp_path, b_kwargs, fragment):
    _run_file(tmp_path / "a.json", [0, 1, 2])
    ranks = b_kwargs.pop("ranks", [0, 1, 2])
    _run_file(tmp_path / "b.json", ranks, **b_kwargs)
    one_error_line(cli("compare", tmp_path / "a.json", tmp_path / "b.json"), fragment)


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
    recall = [{"tag": "e1", "metrics": {"recall@1": 0.5, "recall@2": 0.75}}]
    (ax,) = history_figure(recall, ["recall@1", "recall@2"], "t").axes
    assert ax.get_ylabel() == "recall@K"
    mixed = [
        {"tag": "e1", "metrics": {"recall@1": 0.5, "MAP@R": 0.2, "R-precision": 0.3}},
        {"tag": "e2", "recall": {"recall@1": 0.6, "MAP@R": 0.25}},
    ]  # an older line too
    fig = history_figure(mixed, ["recall@1", "MAP@R", "R-precision"], "t")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "recall@1, MAP@R, R-precision"
    assert [line.get_label() for line in ax.get_lines()] == ["recall@1", "MAP@R", "R-precision"]
    assert ax.get_lines()[1].get_ydata().tolist() == [0.2, 0.25]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # beside the axes, over no line


MODELS = [
    {"tag": "resnet50", "metrics": {"recall@1": 0.61, "MAP@R": 0.21, "MnR": 12.5}},
    {"tag": "vit-b16", "metrics": {"recall@1": 0.68, "MAP@R": 0.27, "MnR": 8.1}},
    {"tag": "clip", "metrics": {"recall@1": 0.74, "MAP@R": 0.31, "MnR": 5.9}},
]
EPOCHS = [{**m, "tag": f"epoch-{e}"} for m, e in zip(MODELS, (1, 2, 5), strict=True)]


def test_plots_say_what_they_show(cli, tmp_path):
    from recallkit.runner.history_plot import plot_title, steps

    assert steps(["epoch-1", "epoch-2", "epoch-5"]) == ("epoch", [1, 2, 5])
    assert steps(["step_100", "step_200"]) == ("step", [100, 200])
    assert steps(["resnet50", "vit-b16", "clip"]) is None
    assert steps(["epoch-1", "step-2"]) is None
    # Different models: bars, no line joins them; the title names the metric, not recall@K.
    title = plot_title(["MAP@R"], MODELS, "auto", "models.jsonl")
    assert title == "MAP@R of 3 runs (models.jsonl)"
    (ax,) = history_figure(MODELS, ["MAP@R"], title).axes
    assert ax.get_lines() == [] and len(ax.patches) == 3
    assert (ax.get_title(), ax.get_ylabel(), ax.get_xlabel()) == (title, "MAP@R", "run")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["resnet50", "vit-b16", "clip"]
    (ax,) = history_figure(MODELS, ["MAP@R"], title, kind="points").axes
    assert [line.get_linestyle() for line in ax.get_lines()] == ["None"]
    # Epochs: a line at the epochs' numbers; a lower-is-better metric on its own axis.
    title = plot_title(["recall@1", "MnR"], EPOCHS, "auto", "runs.jsonl")
    assert title == "recall@1 and MnR across epochs (runs.jsonl)"
    top, bottom = history_figure(EPOCHS, ["recall@1", "MnR"], title).axes
    assert top.get_lines()[0].get_xdata().tolist() == [1.0, 2.0, 5.0]
    assert (top.get_ylabel(), bottom.get_ylabel()) == ("recall@1", "MnR (lower is better)")
    assert bottom.get_xlabel() == "epoch"
    assert plot_title(["MAP@R"], EPOCHS, "auto", "runs.jsonl") == "MAP@R across epochs (runs.jsonl)"
    assert plot_title(["recall@1", "recall@5"], EPOCHS, "bars", "h") == (
        "recall@K (K = 1, 5) of 3 runs (h)"
    )
    # On the command line: --metric by name or alias, --kind.
    history = tmp_path / "models.jsonl"
    history.write_text("".join(json.dumps(m) + "\n" for m in MODELS))
    for extra in (["--metric", "map@r", "MnR"], ["--metric", "MAP@R", "--kind", "points"]):
        res = cli("plot", history, "-o", tmp_path / "m.png", *extra)
        assert res.rc == 0 and res.err == f"plot: {tmp_path / 'm.png'}\n", res.err
    one_error_line(
        cli("plot", history, "-o", tmp_path / "m.png", "--metric", "nDCG@10"),
        "has no nDCG@10; it has recall@1, MAP@R, MnR.",
    )
    out = plot_history(EPOCHS, tmp_path / "e.svg", metrics=["MnR"])
    assert out.read_text().lstrip().startswith("<?xml")
