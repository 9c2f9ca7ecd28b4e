"""Reports of run files someone else wrote: every output escapes for its own format, and the HTML
report reads images only from inside the run file's folder or a folder the caller names.

Hostile payloads go into every field a report shows (run names and tags, metric names, labels,
query ids and paths): the Markdown table rendered by python-markdown and the HTML report are
opened in headless Chromium and must run 0 scripts; the CSV holds 0 formula cells; the page's
JSON block parses back to the very names; a name with ``$`` is drawn as written; and a run file
that names images outside its folder (an absolute path, ``..``, a link, an absolute or climbing
image folder, a file that is not an image) gets no thumbnail, and those files are never opened
(an audit hook records every file Python opens while the report is written).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from recallkit.reports import summarize, table, write_report
from recallkit.reports.data import most_telling, only_one_right
from recallkit.reports.html import render_html
from recallkit.reports.tables import csv_cell, markdown_escape
from tests.runner.checks import valid_run
from tests.runner.test_report import _open, browser, record, write  # noqa: F401 (a fixture)

#: Each tries to run ``window.pwned = N`` (or a dialog) wherever a name lands unescaped.
SCRIPTS = [
    '<img src="x" onerror="window.pwned=1">',
    "<script>window.pwned=2</script>",
    "</script><script>window.pwned=3</script>",
    "<!--<script>window.pwned=4</script>",
    '"><svg onload="window.pwned=5">',
    "'><img src='x' onerror='alert(6)'>",
    "[x](javascript:window.pwned=7) ![y](x onerror=window.pwned=8)",
    '<details open ontoggle="window.pwned=9">',
    'a|b</td><td><img src="x" onerror="window.pwned=10">',
    "&lt;img src=x onerror=window.pwned=11&gt;",
    'x\n<img src="x" onerror="window.pwned=12">',
    "<img src=x onerror=window.pwned=13>",
]
FORMULAS = ["=cmd|' /C calc'!A0", "+1+cmd", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1"]
MATH = ["$\\foo$", "$x^2$", "cost $5"]


def _hostile(name, labels, metric=None):
    """A run named ``name`` on 6 queries of ``labels``: recall@1 0.5 (ranks 0, 2, 0, 1, 0, 3),
    and ``metric`` (a hostile name) holding the same per-query values."""
    ranks = [0, 2, 0, 1, 0, 3]
    rec = record(name, ranks, labels, nearest=[labels[(i + 1) % 6] for i in range(6)])
    if metric is not None:
        rec["metrics"][metric] = 0.5
        rec["queries"]["values"][metric] = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    rec["queries"]["ids"] = [f'<img src="x" onerror="window.pwned=20">#{i}' for i in range(6)]
    return valid_run(rec)


def _runs(tmp_path, names, metric_names=None):
    """One run file per hostile name, on the same queries (hostile labels too), each with a
    hostile metric."""
    paths = []
    labels = [names[j % len(names)] for j in range(3)] * 2
    for i, name in enumerate(names):
        metric = None if metric_names is None else metric_names[i % len(metric_names)]
        paths.append(write(tmp_path / f"run-{i}.json", _hostile(name, labels, metric)))
    return paths


# ----------------------------------------------------------------------------------------------
# Markdown: names as text, never markup.


def test_markdown_escape_is_exact():
    assert markdown_escape("<b>a_b*c*</b> | [x](y) `z` \\ &amp;\nq") == (
        "&lt;b&gt;a\\_b\\*c\\*&lt;/b&gt; \\| \\[x\\](y) \\`z\\` \\\\ &amp;amp; q"
    )
    assert markdown_escape("epoch-1 (resnet50).v2") == "epoch-1 (resnet50).v2"


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs, self.cells, self.inside = [], [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [name for name, _ in attrs]
        if tag in ("td", "th"):
            self.cells.append("")
            self.inside = True

    def handle_endtag(self, tag):
        self.inside = self.inside and tag not in ("td", "th")

    def handle_data(self, data):
        if self.inside:
            self.cells[-1] += data


def test_markdown_table_renders_names_as_text(tmp_path, browser):  # noqa: F811
    markdown = pytest.importorskip("markdown")
    names = SCRIPTS + MATH
    metrics = ['<b onmouseover="window.pwned=14">MAP</b>', "*x*_y_"]
    summary = summarize(_runs(tmp_path, names, metrics), with_intervals=False, tests=False)
    text = table(summary, "markdown")
    html = markdown.markdown(text, extensions=["tables"])
    parsed = _Tags()
    parsed.feed(html)
    # Only the table's own markup: no element or attribute a name could bring.
    assert set(parsed.tags) == {"table", "thead", "tbody", "tr", "th", "td", "p", "strong"}
    assert set(parsed.attrs) <= {"align", "style"}
    assert set(re.findall(r'style="([^"]*)"', html)) == {"text-align: right;"}
    columns = 2 + 1 + len(metrics)
    head, rows = parsed.cells[:columns], parsed.cells[columns:]
    assert head == ["#", "run", "recall@1", *metrics]
    # Every run's name reads back as written (a line break as a space).
    assert [rows[i * columns + 1] for i in range(len(names))] == [
        n.replace("\n", " ") for n in names
    ]
    page = browser.new_page()
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        page.set_content(f"<!doctype html><html><body>{html}</body></html>")
        page.wait_for_timeout(200)
        assert page.evaluate("window.pwned === undefined") and dialogs == []
    finally:
        page.close()


# ----------------------------------------------------------------------------------------------
# CSV: no formula cells.

NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def test_csv_cells_are_never_formulas(tmp_path):
    names = [*FORMULAS, "-0.25", "a-b"]
    metrics = ['=HYPERLINK("http://x")', "@A1"]
    summary = summarize(_runs(tmp_path, names, metrics), tests=False)
    text = table(summary, "csv", intervals="ci")
    rows = list(csv.reader(io.StringIO(text)))
    cells = [c for row in rows for c in row]
    formulas = [c for c in cells if c[:1] in "=+-@\t\r" and c and not NUMBER.fullmatch(c)]
    assert formulas == []
    assert [row[0] for row in rows] == [
        "run",
        "'=cmd|' /C calc'!A0",
        "'+1+cmd",
        "'-2+3",
        "'@SUM(A1:A9)",
        "'\t=1",
        "'\n=1",  # a carriage return as the line break CSV quotes
        "-0.25",  # a number stays a number
        "a-b",
    ]
    assert rows[0][4] == '\'=HYPERLINK("http://x")' and rows[0][7] == "'@A1"
    assert csv_cell("-1.5e-3") == "-1.5e-3" and csv_cell("-inf") == "-inf"
    assert csv_cell("-") == "'-" and csv_cell("=1") == "'=1" and csv_cell("1=1") == "1=1"


# ----------------------------------------------------------------------------------------------
# The HTML report: no script from any field, the JSON block valid and exact.


def test_the_html_report_runs_no_script_and_keeps_every_name(tmp_path, browser):  # noqa: F811
    names = SCRIPTS[:6] + MATH[:2]
    paths = _runs(tmp_path, names, ['<img src="x" onerror="window.pwned=15">'])
    for i, path in enumerate(paths):  # hostile paths and an image folder too
        rec = json.loads(path.read_text())
        rec["queries"]["paths"] = [f'<img src="x" onerror="window.pwned=16">/{i}.png'] * 6
        rec["sources"] = {"images": "</script><script>window.pwned=17</script>"}
        write(path, rec)
    out = write_report(paths[:2], tmp_path / "report.html")
    page_text = out.read_text()
    blob = page_text.split("<script type='application/json' id='report-data'>")[1]
    blob = blob.split("</script>")[0]
    assert not set("<>&") & set(blob)  # \u003c-style escapes only
    data = json.loads(blob)
    assert data["runs"] == names[:2]
    assert [row[0] for row in data["classes"]["rows"][names[0]]] == [names[0], names[1], names[2]]
    page, requests, errors = _open(browser, out)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        assert errors == [] and requests == [out.as_uri()]
        assert page.evaluate("window.pwned === undefined") and dialogs == []
        # The per-class table is filled from the JSON block: the labels as text.
        rows = page.eval_on_selector_all(
            "#class-table tbody tr", "rows => rows.map(r => r.cells[0].textContent)"
        )
        assert rows == [names[0], names[1], names[2]]
        shown = page.eval_on_selector_all(
            "#metrics-table td.name", "cells => cells.map(c => c.textContent)"
        )
        assert shown == names[:2]
    finally:
        page.close()


# ----------------------------------------------------------------------------------------------
# Figures: names drawn as written.


def test_names_with_dollars_are_drawn_as_written(tmp_path, cli):
    paths = _runs(tmp_path, MATH)
    summary = summarize(paths, n_resamples=200)
    page = render_html(summary)
    for name in MATH:  # in the SVG figures' text, escaped for XML, not typeset
        assert f">{name}</text>" in page.replace("&lt;", "<")
    res = cli("compare", *paths, "--chart", tmp_path / "d.png", "--resamples", "200")
    assert res.rc == 0 and "Traceback" not in res.err, res.err
    assert (tmp_path / "d.png").stat().st_size > 0
    history = tmp_path / "runs.jsonl"
    lines = []
    for name in MATH:
        rec = json.loads(paths[0].read_text())
        rec.pop("queries")
        rec["tag"] = name
        lines.append(json.dumps(rec))
    history.write_text("\n".join(lines) + "\n")
    res = cli("plot", history, "-o", tmp_path / "p.svg")
    assert res.rc == 0 and "Traceback" not in res.err, res.err


# ----------------------------------------------------------------------------------------------
# Thumbnails: only from inside the run's folder or a folder named.

_OPENED: list[str] | None = None


def _audit(event, args):
    if _OPENED is not None and event == "open" and isinstance(args[0], str | bytes | Path):
        _OPENED.append(str(args[0] if not isinstance(args[0], bytes) else args[0].decode()))


sys.addaudithook(_audit)  # inert unless a test sets _OPENED


def _png(path, shade):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (20, 20), (shade, shade, shade)).save(path, format="PNG")
    return path


def _leaky(tmp_path):
    """A run file in run/ whose 6 queries name images every way but one outside run/."""
    outside = tmp_path / "outside"
    secret = _png(outside / "secret.png", 7)
    _png(outside / "secret.txt", 7)  # an image under another extension
    run = tmp_path / "run"
    _png(run / "images" / "ok.png", 200)
    _png(run / "inside.txt", 9)  # inside, but not an image by its name
    (run / "link.png").symlink_to(secret)
    (run / "linked").symlink_to(outside, target_is_directory=True)
    paths = [
        "ok.png",  # under the recorded image folder: shown
        str(secret),  # absolute
        "../outside/secret.png",  # climbing
        "link.png",  # a link out
        "linked/secret.png",  # a linked folder
        "../outside/secret.txt",  # another extension, outside
    ]
    rec = record("leaky", [1, 2, 3, 4, 5, 6], ["a"] * 6, paths=paths)
    rec["sources"] = {"images": "images", "options": {"images": str(outside), "root": "../outside"}}
    return write(run / "leaky.json", valid_run(rec)), run, outside


def _render(paths, **options):
    global _OPENED
    notes, _OPENED = [], []
    try:
        page = render_html(summarize(paths, n_resamples=50), log=notes.append, **options)
        return page, notes, list(_OPENED)
    finally:
        _OPENED = None


def _images(page):
    return re.findall(r'<img alt="([^"]*)"', page)


@pytest.mark.absolute_paths  # the hostile run file names absolute paths on purpose
def test_thumbnails_only_from_inside_the_run_folder(tmp_path):
    path, run, outside = _leaky(tmp_path)
    page, notes, opened = _render([path])
    read = {Path(p).resolve() for p in opened}
    assert not any(p.is_relative_to(outside.resolve()) for p in read)  # 0 files read outside
    assert run.resolve() / "images" / "ok.png" in read  # the image inside is read and shown
    assert _images(page) == ["q0"]
    note = (
        "5 of the 6 queries shown have no thumbnail: 4 lie outside the run file's folder and the "
        "folders named with --images, so not read (name the folder with --images to show them); "
        "1 does not name an image file (by the extension), so not read. The image folders "
        "'../outside', '" + str(outside) + "' that a run file records lie outside its folder: "
        "not searched."
    )
    assert notes == [f"thumbnails: {note}"]
    assert page.count("Thumbnails: ") == 1
    # A climbing recorded image folder, the paths plain names in it: not searched, not read.
    rec = record("climb", [1], ["a"], paths=["secret.png"])
    rec["sources"] = {"images": "../outside", "options": {"images": "../outside"}}
    climbing = write(run / "climb.json", valid_run(rec))
    page, notes, opened = _render([climbing])
    assert _images(page) == [] and not any("outside" in Path(p).parts for p in opened)
    assert notes == [
        (
            "thumbnails: 1 of the 1 query shown has no thumbnail: 1 is not found in the run "
            "file's folder or the image folder it records (name the folder with --images). The "
            "image folder '../outside' that a run file records lies outside its folder: not "
            "searched."
        )
    ]
    # Named on the command line, the outside folder is allowed: its images show.
    page, notes, opened = _render([path], image_root=[outside])
    assert _images(page) == ["q4", "q3", "q2", "q1", "q0"]  # not the .txt one
    assert not any(Path(p).suffix == ".txt" for p in opened)


def test_odd_paths_and_unreadable_images_never_stop_a_report(tmp_path, cli):
    run = tmp_path / "run"
    (run / "bad.png").parent.mkdir(parents=True)
    (run / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    (run / "pic.eps").write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n")
    paths = ["a" * 300 + ".png", "b" * 300 + "/c.png", "bad.png", "x\x00y.png", "", None]
    paths.append("pic.eps")  # a format Pillow decodes through Ghostscript: not read
    rec = record("odd", [1, 2, 3, 4, 5, 6, 7], ["a"] * 7, paths=paths)
    path = write(run / "odd.json", valid_run(rec))
    page, notes, _ = _render([path])
    assert _images(page) == []
    assert notes == [
        (
            "thumbnails: 7 of the 7 queries shown have no thumbnail: 2 have no image path (saved "
            "arrays or in-memory images); 3 are not found in the run file's folder or the image "
            "folder it records (name the folder with --images); 1 does not name an image file (by "
            "the extension), so not read; 1 cannot be read as an image."
        )
    ]
    # No image at all: a compact table of the failures, not placeholders.
    assert 'class="noimg"' not in page and page.count('<table class="compact"') == 1
    res = cli("report", path, "-o", tmp_path / "r.html", "--images", "c" * 300)
    assert res.rc == 0 and "Traceback" not in res.err, res.err


# ----------------------------------------------------------------------------------------------
# Right in one run only: the queries that say the most.


def _brute(rows, other, labels, n):
    """Round robin over the classes by hand: every class's queries by rank change, largest
    first; classes by their largest change, then first row; then the chosen by rank change."""
    by = {}
    for i in sorted(rows, key=lambda i: (-other[i], i)):
        by.setdefault(labels[i], []).append(i)
    queues, chosen, depth = list(by.values()), [], 0
    while len(chosen) < min(n, len(rows)):
        for q in queues:
            if depth < len(q) and len(chosen) < n:
                chosen.append(q[depth])
        depth += 1
    return sorted(chosen, key=lambda i: (-other[i], i))


def test_most_telling_equals_a_brute_force():
    rng = np.random.default_rng(5)
    for trial in range(200):
        m = int(rng.integers(1, 40))
        other = rng.integers(0, 9, size=m)
        labels = [str(v) for v in rng.integers(0, 5, size=m)]
        rows = np.flatnonzero(rng.random(m) < 0.7)
        n = int(rng.integers(0, 12))
        got = most_telling(rows, other, labels, n).tolist()
        assert got == _brute(rows.tolist(), other.tolist(), labels, n), trial


def test_right_in_one_run_only_spreads_over_classes(tmp_path):
    # 30 queries: classes a (0-19), b (20-24), c (25-29). A is right on all; B misses 0-19 at
    # rank 1, 20-24 at rank 5, 25-29 at rank 3. The first 24 in file order are 20 a's and 4 b's;
    # the 6 that say most: b (rank 5) and c (rank 3) first in turn, then a.
    labels = ["a"] * 20 + ["b"] * 5 + ["c"] * 5
    ranks_b = [1] * 20 + [5] * 5 + [3] * 5
    a = write(tmp_path / "a.json", record("A", [0] * 30, labels))
    b = write(tmp_path / "b.json", record("B", ranks_b, labels))
    (pair,) = only_one_right(summarize([a, b], n_resamples=50), 6)
    assert [(q.id, other) for q, other in pair.only_a] == [
        ("q20", 5),
        ("q21", 5),
        ("q25", 3),
        ("q26", 3),
        ("q0", 1),
        ("q1", 1),
    ]
    assert pair.count_a == 30 and pair.only_b == [] and pair.count_b == 0


def test_the_demos_report_spreads_over_classes_and_pairs_each_miss(cli, tmp_path):
    out = tmp_path / "demo"
    res = cli("demo", "--fast", "--out", out, "--keep-images", "--quiet")
    assert res.rc == 0, res.err
    runs = [out / "epoch-0.json", out / "epoch-1.json"]
    summary = summarize(runs, n_resamples=100)
    (pair,) = only_one_right(summary, 24)
    for listed, total in ((pair.only_a, pair.count_a), (pair.only_b, pair.count_b)):
        assert len(listed) == min(total, 24)
        assert len({q.label for q, _ in listed}) >= 3  # at least three classes each way
        others = [other for _, other in listed]
        assert others == sorted(others, reverse=True)  # the largest rank change first
    page, notes, _ = _render(runs)
    assert notes == []  # every thumbnail shown: no note
    # Each missed query's card shows it beside a digit of the class it was taken for.
    assert page.count('<figure class="card pair"') == 2 * 24
    assert page.count('title="a query of ') == 2 * 24
