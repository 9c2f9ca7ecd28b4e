"""Reports as a person sees them: the tables' exact text, and the HTML report in a real browser.

The tables are compared with text written out by hand for small runs whose values, best cells
and significant pairs are known. The HTML report is opened in headless Chromium (Playwright):
no console error, no request but the file itself, the numbers on the page equal the run
file's, the per-class table sorts when a header is clicked, and the page is not blank.

Without Playwright or Chromium the browser tests are skipped with the reason, or fail when
``RECALLKIT_REQUIRE_BROWSER=1`` (as CI sets it).
"""

from __future__ import annotations

import io
import itertools
import json

import pytest

from recallkit.reports import summarize, table, write_report
from recallkit.reports.data import by_class, load_runs
from recallkit.runfiles.definitions import definitions
from tests.browser import chromium
from tests.runner.checks import one_error_line, valid_run

DEFS = definitions("cosine", "ids")


def record(tag, ranks, labels, *, nearest=None, paths=None, bounds=None, metrics=("recall@1",)):
    """A run record whose values follow from ``ranks`` by hand: recall@K is ``rank < K``, MnR
    ``rank + 1``."""
    n = len(ranks)
    values = {}
    for name in metrics:
        if name == "MnR":
            values[name] = [float(r + 1) for r in ranks]
        else:
            k = int(name.split("@")[1])
            values[name] = [float(r < k) for r in ranks]
    out = {
        "format": "recallkit.evaluation/4",
        "tag": tag,
        "metric": "cosine",
        "definitions": DEFS,
        "metrics": {name: sum(v) / n for name, v in values.items()},
        "num_queries": n,
        "num_evaluated": n,
        "num_excluded": 0,
        "num_gallery": 40,
        "queries": {
            "ids": [f"q{i}" for i in range(n)],
            "labels": list(labels),
            "first_hit_rank": list(ranks),
            "values": values,
        },
    }
    if nearest is not None:
        out["queries"]["nearest_label"] = nearest
    if paths is not None:
        out["queries"]["paths"] = paths
    if bounds is not None:
        out["bounds"] = bounds
        out["num_tied"] = 1
    return valid_run(out)


def write(path, rec):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    valid_run(path)
    return path


# Three runs on 20 queries. base hits q16-q19 at rank 0 (the others at rank 3); mid also hits
# q0-q3; new hits all. recall@1: 0.2, 0.4, 1.0; MnR (rank + 1): 3.4, 2.8, 1.0. new differs from
# base on 16 queries and from mid on 12, all in its favour: Fisher's randomization p is about
# 2^-15 and 2^-11 (1/10001 resolution), significant after Holm; mid and base differ on 4 queries
# (exact p = 2/16 = 0.125): not significant.
LABELS = ["cat", "dog"] * 10
BASE = [3] * 16 + [0] * 4
MID = [0] * 4 + [3] * 12 + [0] * 4
NEW = [0] * 20
METRICS = ("recall@1", "MnR")


@pytest.fixture
def three(tmp_path):
    return [
        write(tmp_path / f"{tag}.json", record(tag, ranks, LABELS, metrics=METRICS))
        for tag, ranks in (("base", BASE), ("mid", MID), ("new", NEW))
    ]


MARKDOWN = """\
| # | run | recall@1 | MnR ↓ |
| --- | --- | ---: | ---: |
| a | base | 0.2000 | 3.4000 |
| b | mid | 0.4000 | 2.8000 |
| c | new | **1.0000**<sup>ab</sup> | **1.0000**<sup>ab</sup> |

Bold: the best value of each column (↓: lower is better). Superscript letters: significantly \
better than the run of that letter (McNemar's exact test (0/1 values, as recall@K's) or Fisher's \
paired randomization test (the other metrics) on 20 paired queries, 10000 resamples, seed 0; \
p-values adjusted by Holm's method over the pairs of each metric; alpha 0.05).
"""

LATEX = r"""% recallkit report (needs \usepackage{booktabs})
% Bold: the best value of each column ($\downarrow$: lower is better).
% Superscript letters: significantly better than the run of that letter (McNemar's exact test (0/1 values, as recall@K's) or Fisher's paired randomization test (the other metrics) on 20 paired queries, 10000 resamples, seed 0; p-values adjusted by Holm's method over the pairs of each metric; alpha 0.05).
\begin{tabular}{llrr}
\toprule
\# & run & recall@1 & MnR $\downarrow$ \\
\midrule
a & base & 0.2000 & 3.4000 \\
b & mid & 0.4000 & 2.8000 \\
c & new & \textbf{1.0000}$^{ab}$ & \textbf{1.0000}$^{ab}$ \\
\bottomrule
\end{tabular}
"""  # noqa: E501

CSV = """\
run,recall@1,recall@1 better than,MnR,MnR better than
base,0.2,,3.4,
mid,0.4,,2.8,
new,1.0,base;mid,1.0,base;mid
"""

FLAT = {
    "base": {"recall@1": 0.2, "MnR": 3.4},
    "mid": {"recall@1": 0.4, "MnR": 2.8},
    "new": {"recall@1": 1.0, "MnR": 1.0},
}


def test_tables_are_exact(three):
    summary = summarize(three, with_intervals=False)
    assert table(summary, "markdown") == MARKDOWN
    assert table(summary, "latex") == LATEX
    assert table(summary, "csv") == CSV
    assert json.loads(table(summary, "json")) == FLAT
    # The same from records and from a mapping that names them.
    records = [json.loads(p.read_text()) for p in three]
    assert table(records, "markdown") == MARKDOWN
    named = dict(zip(["x", "y", "z"], records, strict=True))
    assert table(named, "csv") == CSV.replace("base", "x").replace("mid", "y").replace("new", "z")


def test_bold_follows_each_metrics_direction_and_letters_the_baseline(tmp_path):
    # x: recall@1 3/4 but MnR (1 + 1 + 1 + 10) / 4 = 3.25; y: recall@1 1/2, MnR 6/4 = 1.5.
    x = record("x", [0, 0, 0, 9], ["a", "a", "b", "b"], metrics=METRICS)
    y = record("y", [0, 0, 1, 1], ["a", "a", "b", "b"], metrics=METRICS)
    text = table([x, y], "markdown", tests=False)
    assert text.splitlines()[2:4] == [
        "| a | x | **0.7500** | 3.2500 |",
        "| b | y | 0.5000 | **1.5000** |",
    ]
    # Against a baseline only: new beats base; mid is not compared with new.
    records = [record(t, r, LABELS, metrics=METRICS) for t, r in (("base", BASE), ("mid", MID))]
    records.append(record("new", NEW, LABELS, metrics=METRICS))
    lines = table(records, "markdown", baseline="base").splitlines()
    assert lines[4] == "| c | new | **1.0000**<sup>a</sup> | **1.0000**<sup>a</sup> |"
    assert "(each run against base only)" in lines[6]
    assert table(records, "csv", baseline="base").splitlines()[3] == "new,1.0,base,1.0,base"


def test_intervals_as_an_interval_or_a_half_width(three):
    summary = summarize(three)
    spread = summary.intervals["mid"]["recall@1"]
    row = table(summary, "markdown", intervals="ci").splitlines()[3]
    assert row.startswith(f"| b | mid | 0.4000 [{spread.low:.4f}, {spread.high:.4f}] |")
    half = (spread.high - spread.low) / 2
    assert f"| b | mid | 0.4000 ± {half:.4f} |" in table(summary, "markdown", intervals="pm")
    assert f"0.4000 {{\\scriptsize $\\pm$ {half:.4f}}}" in table(summary, "latex", intervals="pm")
    rows = table(summary, "csv", intervals="ci").splitlines()
    assert rows[0].startswith("run,recall@1,recall@1 low,recall@1 high,recall@1 better than,")
    assert rows[2].startswith(f"mid,0.4,{spread.low!r},{spread.high!r},,")
    with pytest.raises(ValueError, match="intervals is one of none, ci, pm"):
        table(summary, "markdown", intervals="sd")


def test_names_tags_stems_and_latex_escapes(tmp_path):
    a = record("run_1 & co", [0, 1], ["x", "x"])
    b = record(None, [0, 0], ["x", "x"])
    paths = [write(tmp_path / "a.json", a), write(tmp_path / "b%.json", b)]
    runs = load_runs(paths)
    assert [r.name for r in runs] == ["run_1 & co", "b%"]
    assert r"a & run\_1 \& co & 0.5000 \\" in table(paths, "latex", tests=False)
    # Runs that share a tag are named by their files.
    c = write(tmp_path / "c.json", record("run_1 & co", [0, 0], ["x", "x"]))
    assert [r.name for r in load_runs([paths[0], c])] == ["a", "c"]
    assert [r.name for r in load_runs([paths[0], c], ["one", "two"])] == ["one", "two"]


def test_a_result_is_reported_too():
    import numpy as np

    from recallkit.result import Result

    result = Result({"recall@1": 0.5}, first_hit_ranks=np.array([0, 2]), ks=[1], num_reference=3)
    assert json.loads(table({"mine": result}, "json")) == {"mine": {"recall@1": 0.5}}


def test_per_class_values_and_confusions():
    rec = record(
        "r",
        [0, 1, 0, 0, 2, 3],
        ["a", "a", "b", "b", "c", "c"],
        nearest=["a", "b", "b", "b", "a", "a"],
        metrics=("recall@1", "MnR"),
    )
    rows = by_class(load_runs([rec])[0])
    assert [(r.label, r.queries, r.values, r.missed_at_1) for r in rows] == [
        ("a", 2, {"recall@1": 0.5, "MnR": 1.5}, 1),
        ("b", 2, {"recall@1": 1.0, "MnR": 1.0}, 0),
        ("c", 2, {"recall@1": 0.0, "MnR": 3.5}, 2),
    ]
    assert [(r.confused_with, r.confused_count) for r in rows] == [("b", 1), (None, 0), ("a", 2)]


# ------------------------------------------------------------------------- command line


def test_report_command_writes_every_format(cli, three, tmp_path):
    res = cli("report", *three)
    assert res.rc == 0, res.err
    assert json.loads(res.out) == FLAT  # the default: the flat JSON on stdout
    res = cli("report", *three, "--format", "markdown")
    assert (res.rc, res.out) == (0, MARKDOWN), res.err
    out = tmp_path / "out"
    res = cli("report", *three, "--out-dir", out)
    assert res.rc == 0, res.err
    names = ["table.md", "table.tex", "table.csv", "table.json", "report.html"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    assert (out / "table.md").read_text() == MARKDOWN
    assert (out / "table.tex").read_text() == LATEX
    assert (out / "table.csv").read_text() == CSV
    assert json.loads((out / "table.json").read_text()) == FLAT
    assert (out / "report.html").read_text().startswith("<!doctype html>")
    res = cli("report", *three, "-o", tmp_path / "t.tex", tmp_path / "t.csv")
    assert res.rc == 0, res.err
    assert (tmp_path / "t.tex").read_text() == LATEX
    assert (tmp_path / "t.csv").read_text() == CSV


def test_report_command_errors_and_notes(cli, three, tmp_path):
    one_error_line(
        cli("report", *three, "--format", "markdown", "latex"),
        "Several formats go to files: give one -o FILE per format, or --out-dir DIR.",
    )
    one_error_line(cli("report", *three, "-o", tmp_path / "t.txt"), "--out", "must end in")
    one_error_line(cli("report", *three, "--alpha", "2"), "--alpha must be between 0 and 1")
    one_error_line(cli("report", *three, "--metrics", "MAP@R"), "No run holds MAP@R")
    one_error_line(
        cli("report", *three, "--name", "x"), "1 name(s) for 3 run(s); give one name per run."
    )
    # Runs on other queries: the table without letters, and a note that says why.
    other = write(tmp_path / "other.json", record("other", [0, 1], ["cat", "dog"]))
    res = cli("report", three[0], other, "--format", "markdown")
    assert res.rc == 0, res.err
    assert "<sup>" not in res.out and "Superscript" not in res.out
    assert res.err.startswith("note: the runs are not compared (no significance markers): ")
    assert "did not evaluate the same queries" in res.err


def test_compare_command(cli, three, tmp_path):
    res = cli("compare", *three, "--json", tmp_path / "c.json", "--chart", tmp_path / "c.svg")
    assert res.rc == 0, res.err
    lines = res.out.splitlines()
    assert lines[0] == (
        "3 runs, 20 paired queries; McNemar's exact test (0/1 values, as recall@K's) or Fisher's "
        "paired randomization test (the other metrics), 10000 resamples, seed 0; "
        "p-values adjusted by Holm per metric; alpha 0.05"
    )
    rows = [line.split() for line in lines if line.startswith("  recall@1 ")]
    assert [r[:3] for r in rows[1:]] == [
        ["recall@1", "base", "mid"],
        ["recall@1", "base", "new"],
        ["recall@1", "mid", "new"],
    ]
    assert rows[0][1] == "0.2000" and rows[0][2].startswith("[")  # base's value, interval
    assert rows[1][-4:] == ["not", "significant", "0", "4"]
    assert rows[2][-4:] == ["new", "better", "0", "16"]
    assert "  (MnR: lower is better, so a - b < 0 favours a)" in lines
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["format"] == "recallkit.comparison/2"
    assert (saved["test"], saved["correction"], saved["n_resamples"]) == (
        "auto",
        "holm",
        10000,
    )
    assert [r["better"] for r in saved["comparisons"]] == [None, "new", "new"] * 2
    assert (tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")
    # Options reach the library: the bootstrap test, no correction, a baseline, one metric.
    res = cli(
        "compare", *three, "--test", "bootstrap", "--correction", "none", "--baseline", "mid",
        "--metrics", "mnr", "--resamples", "500", "--json", tmp_path / "d.json",
    )  # fmt: skip
    assert res.rc == 0, res.err
    saved = json.loads((tmp_path / "d.json").read_text())
    assert (saved["test"], saved["correction"], saved["baseline"]) == ("bootstrap", "none", "mid")
    assert [(r["metric"], r["a"], r["b"]) for r in saved["comparisons"]] == [
        ("MnR", "mid", "base"),
        ("MnR", "mid", "new"),
    ]
    # Runs that do not pair: one line, the library's message.
    other = write(tmp_path / "other.json", record("other", [0, 1], ["cat", "dog"]))
    one_error_line(
        cli("compare", three[0], other), "base (20 queries) and other (2 queries) did not"
    )
    one_error_line(cli("compare", three[0]), "the following arguments are required: B.json")
    one_error_line(cli("compare", *three, "--baseline", "nope"), "--baseline must be one of")
    one_error_line(cli("compare", *three, "--chart", tmp_path / "c.gif"), "--chart takes a file")


# ------------------------------------------------------------------------- in a browser

# Twelve queries of three classes, two runs. alpha: cat ranks 0 0 0 1, dog 0 2 0 0, fox 1 1 3 0;
# beta: cat 0 0 0 0, dog 0 0 0 1, fox 0 2 0 0.
CLASSES = ["cat"] * 4 + ["dog"] * 4 + ["fox"] * 4
ALPHA = [0, 0, 0, 1, 0, 2, 0, 0, 1, 1, 3, 0]
BETA = [0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0]
COLOURS = {"cat": (200, 60, 40), "dog": (40, 160, 60), "fox": (230, 140, 20)}


def _nearest(ranks, wrong):
    return [wrong.get(i, label) for i, label in enumerate(CLASSES)] if ranks else []


@pytest.fixture
def pair(tmp_path):
    from PIL import Image

    paths = []
    for i, label in enumerate(CLASSES):
        path = f"{label}/{i}.png"
        (tmp_path / "images" / label).mkdir(parents=True, exist_ok=True)
        shade = tuple(max(0, c - 12 * (i % 4)) for c in COLOURS[label])
        Image.new("RGB", (24, 24), shade).save(tmp_path / "images" / path)
        paths.append(path)
    metrics = ("recall@1", "recall@2", "MnR")
    alpha = record(
        "alpha",
        ALPHA,
        CLASSES,
        nearest=_nearest(ALPHA, {3: "dog", 5: "fox", 8: "cat", 9: "cat", 10: "dog"}),
        paths=paths,
        bounds={"recall@2": [0.75, 10 / 12]},
        metrics=metrics,
    )
    alpha["sources"] = {"images": "images"}
    beta = record(
        "beta",
        BETA,
        CLASSES,
        nearest=_nearest(BETA, {7: "cat", 9: "dog"}),
        paths=paths,
        metrics=metrics,
    )
    beta["sources"] = {"images": "images"}
    return write(tmp_path / "alpha.json", valid_run(alpha)), write(tmp_path / "beta.json", beta)


@pytest.fixture(scope="module")
def browser():
    yield from chromium("the HTML report's browser test")


def _open(browser, path):
    """Open ``path``; return the page, the requests it made and its console errors."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else 0)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)
    return page, requests, errors


def _column(page, index):
    return page.eval_on_selector_all(
        "#class-table tbody tr", f"rows => rows.map(r => r.cells[{index}].textContent)"
    )


def test_the_html_report_in_a_browser(browser, pair, tmp_path):
    out = write_report(pair, tmp_path / "report.html")
    page, requests, errors = _open(browser, out)
    try:
        assert errors == []
        assert requests == [out.as_uri()]  # nothing but the file itself
        runs = {p.stem: json.loads(p.read_text()) for p in pair}
        # Every value, interval bound and tie bound on the page is the run file's.
        cells = page.eval_on_selector_all(
            "#detail-table tbody tr",
            "rows => rows.map(r => [r.dataset.run, r.dataset.metric, Object.fromEntries("
            "Array.from(r.querySelectorAll('td[data-field]'), c => [c.dataset.field, "
            "[c.dataset.value, c.textContent]]))])",
        )
        assert len(cells) == 6
        for run, metric, fields in cells:
            value = runs[run]["metrics"][metric]
            assert float(fields["value"][0]) == value and fields["value"][1] == f"{value:.4f}"
            low, high = (runs[run].get("bounds") or {}).get(metric, [value, value])
            assert float(fields["pessimistic"][0]) == low
            assert float(fields["optimistic"][0]) == high
            assert float(fields["low"][0]) <= value <= float(fields["high"][0])
        shown = page.eval_on_selector_all(
            "#metrics-table td[data-metric]",
            "cells => cells.map(c => [c.dataset.run, c.dataset.metric, "
            "c.querySelector('.v').textContent, c.classList.contains('best')])",
        )
        assert shown == [
            ["alpha", "recall@1", "0.5833", False],
            ["alpha", "recall@2", "0.8333", False],
            ["alpha", "MnR", "1.6667", False],
            ["beta", "recall@1", "0.8333", True],
            ["beta", "recall@2", "0.9167", True],
            ["beta", "MnR", "1.2500", True],
        ]
        # The per-class table: worst recall@1 first; a click sorts by MnR, a second reverses.
        page.select_option("#class-run", "alpha")
        assert _column(page, 0) == ["fox", "cat", "dog"]
        assert _column(page, 2) == ["0.2500", "0.7500", "0.7500"]
        assert _column(page, 6) == ["cat", "dog", "fox"]  # most confused with
        header = page.locator("#class-table th", has_text="MnR")
        header.click()
        assert header.get_attribute("aria-sort") == "ascending"
        assert _column(page, 4) == ["1.2500", "1.5000", "2.2500"]
        header.click()
        assert header.get_attribute("aria-sort") == "descending"
        assert _column(page, 0) == ["fox", "dog", "cat"]
        page.fill("#class-filter", "do")
        assert _column(page, 0) == ["dog"]
        # Failures and the queries one run only gets right, with thumbnails.
        assert page.locator("#failures ~ .gallery").count() >= 1
        thumbs = page.eval_on_selector_all(".card img", "i => i.map(x => x.src.slice(0, 14))")
        assert thumbs and set(thumbs) == {"data:image/png"}
        text = page.inner_text("main")
        assert "right at rank 0 in beta, not in alpha: 4 queries" in text
        assert "right at rank 0 in alpha, not in beta: 1 query" in text
        assert "worst classes of alpha by recall@1: fox (0.2500, taken for cat)" in text
        from PIL import Image

        shot = Image.open(io.BytesIO(page.screenshot(full_page=True))).convert("RGB")
        assert len(shot.getcolors(1 << 20) or range(1 << 20)) > 50  # not one colour: drawn
    finally:
        page.close()


def test_without_pillow_or_matplotlib_the_page_has_identities_and_no_figures(
    pair, tmp_path, monkeypatch
):
    import sys

    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL fails, as when not installed
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    notes = []
    from recallkit.reports.html import render_html

    page = render_html(summarize(pair), log=notes.append)
    assert "<img" not in page and "<svg" not in page
    # No thumbnail at all: compact tables of the queries (each run's failures, each side of the
    # pair), not cards of grey placeholders.
    assert 'class="noimg"' not in page and "(thumbnails need Pillow)" in page
    assert page.count('<table class="compact"') == 4
    # alpha's worst query: q10 (fox), first hit at rank 3, its nearest item a dog.
    row = '<td class="text">q10</td><td class="text">fox</td><td>3</td><td class="text">dog</td>'
    assert row in page
    assert "The chart of the differences needs matplotlib" in page
    assert notes == [
        "matplotlib is not installed: the report has no figures (pip install matplotlib)",
        "Pillow is not installed: the failure gallery shows the queries' ids, no thumbnails",
    ]


@pytest.mark.parametrize(
    "names",
    [
        ["base", "mid", "new"],
        # Wide tick labels: each panel's title starts left of its axes to stay in the figure.
        ["a-rather-long-run-name-resnet50-arcface-512d", "b", "$x$_under"],
    ],
)
def test_the_figures_keep_every_text_inside_and_apart(tmp_path, names):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from recallkit.reports.figures import difference_figure, recall_curves

    metrics = ("recall@1", "recall@4", "MnR")
    runs = [
        write(tmp_path / f"{tag}.json", record(tag, ranks, LABELS, metrics=metrics))
        for tag, ranks in (("base", BASE), ("mid", MID), ("new", NEW))
    ]
    summary = summarize(runs, names=names)
    for fig in (recall_curves(summary), difference_figure(summary.comparison)):
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        page = fig.bbox
        # What matplotlib itself measures as drawn: each axes with its ticks, labels, titles
        # and legend, and the figure's title.
        boxes = [ax.get_tightbbox(renderer) for ax in fig.axes]
        if fig._suptitle is not None:
            boxes.insert(0, fig._suptitle.get_window_extent(renderer))
        for box in boxes:
            assert page.x0 <= box.x0 and box.x1 <= page.x1, (box, page)
            assert page.y0 <= box.y0 and box.y1 <= page.y1, (box, page)
        for upper, lower in itertools.pairwise(boxes):  # stacked top to bottom, apart
            assert lower.y1 <= upper.y0, (upper, lower)
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:  # beside the axes, not over them
                assert legend.get_window_extent(renderer).x0 >= ax.bbox.x1
    curves, differences = recall_curves(summary), difference_figure(summary.comparison)
    assert [ax.get_title() for ax in curves.axes] == [
        "recall@K of 3 runs, bars: 95% bootstrap intervals"
    ]
    assert [ax.get_title(loc="left") for ax in differences.axes] == [
        "recall@1 (higher is better: right of 0, the first run is better)",
        "recall@4 (higher is better: right of 0, the first run is better)",
        "MnR (lower is better: left of 0, the first run is better)",
    ]
