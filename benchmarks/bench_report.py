"""The HTML report at Stanford Online Products scale: its size, the time to write it and to open it.

Builds synthetic run files of SOP's test split (60,502 queries of 11,316 classes, 2 to 12
images a class, leave-one-out) with realistic per-query values of recall@1/10/100/1000, MAP@R,
R-precision, MnR and MedR (first-hit ranks drawn from a good model's distribution; each query's
MAP@R and R-precision from its class size), writes the report with ``recallkit.reports``, then
opens it in headless Chromium (Playwright) several times and prints:

- the file's size (and the JSON blob's);
- the time to write it (summarize: intervals and tests; then the page);
- the time to open it: from navigation to the load event and to the first render of the
  per-class table (``performance`` marks of the page), median and worst of the repeats;
- the CPU model, its cores and the load average.

Usage (from the repository root)::

    python benchmarks/bench_report.py                  # one run
    python benchmarks/bench_report.py --runs 2         # a comparison of two runs
    python benchmarks/bench_report.py --resamples 1000 --repeats 5 --keep out/

Needs Playwright and a Chromium (``/usr/bin/chromium``, or ``RECALLKIT_CHROMIUM``); without
them only the size and the write time are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

NUM_QUERIES = 60_502
NUM_CLASSES = 11_316
FIRST_CLASS = 11_319  # SOP's test class ids run from 11,319 to 22,634
WORDS = ("bicycle", "cabinet", "chair", "coffee_maker", "fan", "kettle", "lamp", "mug", "sofa",
         "stapler", "table", "toaster")  # fmt: skip


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def class_sizes(rng: np.random.Generator) -> np.ndarray:
    """11,316 class sizes from 2 to 12 that add up to 60,502 (SOP's mean is 5.35)."""
    sizes = np.clip(np.round(rng.gamma(4.0, 5.35 / 4.0, NUM_CLASSES)), 2, 12).astype(np.int64)
    while sizes.sum() != NUM_QUERIES:
        i = rng.integers(NUM_CLASSES)
        step = 1 if sizes.sum() < NUM_QUERIES else -1
        if 2 <= sizes[i] + step <= 12:
            sizes[i] += step
    return sizes


def synthetic_run(tag: str, skill: float, seed: int, labels: np.ndarray) -> dict:
    """A run record of the SOP test split: ranks, values and nearest labels for ``skill``
    (recall@1 about 0.62 + 0.2 * skill)."""
    from recallkit.runfiles.definitions import definitions

    rng = np.random.default_rng(seed)
    n = len(labels)
    sizes = np.bincount(labels - FIRST_CLASS)[labels - FIRST_CLASS]
    relevant = sizes - 1  # leave-one-out: R = the class's other images
    # First-hit ranks: a hit at rank 0 with the model's recall@1, else a heavy tail.
    hit = rng.random(n) < 0.62 + 0.2 * skill
    tail = np.floor(np.exp(rng.normal(1.2 - skill, 1.6, n))).astype(np.int64) + 1
    ranks = np.where(hit, 0, np.minimum(tail, n - 2))
    # R-precision: the share of the R nearest that are relevant, better for early hits.
    p = np.clip(0.55 + 0.3 * skill - 0.08 * np.log1p(ranks) + rng.normal(0, 0.12, n), 0, 1)
    found = rng.binomial(relevant, p)
    found = np.where(ranks < relevant, np.maximum(found, 1), np.minimum(found, relevant - 1))
    found = np.clip(found, 0, relevant)
    r_precision = found / relevant
    map_at_r = r_precision * np.clip(rng.normal(0.85, 0.1, n), 0.3, 1.0)
    values = {
        "recall@1": (ranks < 1).astype(float),
        "recall@10": (ranks < 10).astype(float),
        "recall@100": (ranks < 100).astype(float),
        "recall@1000": (ranks < 1000).astype(float),
        "MAP@R": map_at_r,
        "R-precision": r_precision,
        "MnR": (ranks + 1).astype(float),
        "MedR": (ranks + 1).astype(float),
    }
    metrics = {k: float(v.mean()) for k, v in values.items()}
    metrics["MedR"] = float(np.floor(np.median(values["MedR"])))
    # The nearest gallery item of a miss: most often a class of the same product kind.
    other = labels + rng.integers(1, 40, n) * rng.choice([-1, 1], n)
    other = np.where(
        (other < FIRST_CLASS) | (other >= FIRST_CLASS + NUM_CLASSES), labels + 1, other
    )
    other = np.where(other >= FIRST_CLASS + NUM_CLASSES, labels - 1, other)
    nearest = np.where(ranks == 0, labels, other)
    words = [WORDS[(c - FIRST_CLASS) % len(WORDS)] for c in labels.tolist()]
    ids = [
        f"{w}_final/{c}_{i}.JPG"
        for i, (w, c) in enumerate(zip(words, labels.tolist(), strict=True))
    ]
    return {
        "format": "recallkit.evaluation/4",
        "recallkit_version": "0.1.0",
        "tag": tag,
        "producer": "benchmarks/bench_report.py",
        "metric": "cosine",
        "definitions": definitions("cosine", "ids"),
        "ks": [1, 10, 100, 1000],
        "effective_ks": [1, 10, 100, 1000],
        "metrics": metrics,
        "num_queries": n,
        "num_evaluated": n,
        "num_excluded": 0,
        "num_gallery": n,
        "embedding_dim": 512,
        "query_source": "Stanford Online Products test split (synthetic)",
        "gallery_source": "Stanford Online Products test split (synthetic)",
        "sources": {"images": "images"},
        "encoder": {"encoder": f"synthetic:{tag}", "weights_digest": f"{seed:064x}"},
        "queries": {
            "ids": ids,
            "labels": labels.tolist(),
            "paths": ids,
            "first_hit_rank": ranks.tolist(),
            "values": {k: v.tolist() for k, v in values.items()},
            "nearest_label": nearest.tolist(),
        },
    }


def write_images(folder: Path, records: list[dict], count: int) -> int:
    """Photos (noise, 256×256 JPEG) for the queries the report shows: each run's worst and
    the first that only one run gets right."""
    from PIL import Image

    rng = np.random.default_rng(0)
    wanted: set[int] = set()
    ranks = [np.asarray(r["queries"]["first_hit_rank"]) for r in records]
    for r in ranks:
        missed = np.flatnonzero(r > 0)
        wanted.update(missed[np.lexsort((missed, -r[missed]))][:count].tolist())
    for a in range(len(ranks)):
        for b in range(a + 1, len(ranks)):
            for mask in ((ranks[a] == 0) & (ranks[b] > 0), (ranks[b] == 0) & (ranks[a] > 0)):
                wanted.update(np.flatnonzero(mask)[:count].tolist())
    paths = records[0]["queries"]["paths"]
    for i in sorted(wanted):
        path = folder / paths[i]
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(path, quality=85)
    return len(wanted)


def open_times(path: Path, repeats: int) -> list[tuple[float, float, float]] | str:
    """``(load event, first table render, wall)`` in seconds for each opening, or why not."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "Playwright is not installed"
    executable = os.environ.get("RECALLKIT_CHROMIUM") or shutil.which("chromium")
    executable = executable or "/usr/bin/chromium"
    if not Path(executable).is_file():
        return f"no Chromium at {executable}"
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"]  # fmt: skip
    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=args)
        for _ in range(repeats):
            page = browser.new_page()
            requests: list[str] = []
            page.on("request", lambda r, requests=requests: requests.append(r.url))
            start = time.perf_counter()
            page.goto(path.as_uri(), timeout=120_000)
            page.wait_for_selector("body[data-ready='1']", timeout=120_000)
            wall = time.perf_counter() - start
            load, table = page.evaluate(
                "() => [performance.getEntriesByType('navigation')[0].loadEventEnd, "
                "performance.getEntriesByName('recallkit-table-rendered')[0].startTime]"
            )
            if requests != [path.as_uri()]:
                raise SystemExit(f"the page made requests: {requests}")
            out.append((load / 1000, table / 1000, wall))
            page.close()
        browser.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs in the report (default 1)")
    parser.add_argument("--resamples", type=int, default=10_000, help="default 10000")
    parser.add_argument("--repeats", type=int, default=5, help="openings (default 5)")
    parser.add_argument("--no-images", action="store_true", help="no thumbnails")
    parser.add_argument("--keep", metavar="DIR", help="write the files here and keep them")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from recallkit.reports import summarize, write_report

    folder = Path(args.keep or tempfile.mkdtemp(prefix="recallkit-bench-report-"))
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(FIRST_CLASS, FIRST_CLASS + NUM_CLASSES), class_sizes(rng))
    records = [synthetic_run(f"model-{i}", 0.8 - 0.1 * i, i, labels) for i in range(args.runs)]
    files = []
    for record in records:
        path = folder / f"{record['tag']}.json"
        path.write_text(json.dumps(record))
        files.append(path)
    shown = 0 if args.no_images else write_images(folder / "images", records, 24)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(
        f"{args.runs} run(s) of {NUM_QUERIES:,} queries, {NUM_CLASSES:,} classes, "
        f"{len(records[0]['metrics'])} metrics; run file {files[0].stat().st_size / 1e6:.1f} MB; "
        f"{shown} query images"
    )
    start = time.perf_counter()
    summary = summarize(files, n_resamples=args.resamples)
    middle = time.perf_counter()
    out = write_report(summary, folder / "report.html")
    end = time.perf_counter()
    text = out.read_text()
    blob = text.split("id='report-data'>", 1)[1].split("</script>", 1)[0]
    print(
        f"write: {end - start:.1f} s ({middle - start:.1f} s intervals and tests with "
        f"{args.resamples} resamples, {end - middle:.1f} s the page)"
    )
    print(
        f"size: {out.stat().st_size / 1e6:.2f} MB (of which the JSON data {len(blob) / 1e6:.2f} MB)"
    )
    times = open_times(out, args.repeats)
    if isinstance(times, str):
        print(f"open: not measured ({times})")
    else:
        loads, tables, walls = zip(*times, strict=True)
        print(
            f"open ({len(times)} times): load event median {statistics.median(loads):.2f} s "
            f"(worst {max(loads):.2f}); first table render median "
            f"{statistics.median(tables):.2f} s (worst {max(tables):.2f}); until ready, seen "
            f"from Python, median {statistics.median(walls):.2f} s (worst {max(walls):.2f})"
        )
    if args.keep is None:
        shutil.rmtree(folder)
    else:
        print(f"files in {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
