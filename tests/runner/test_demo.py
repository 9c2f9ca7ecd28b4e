"""``recallkit demo --fast``: the whole path on scikit-learn's digits, in a few seconds."""

from __future__ import annotations

import json

PNG = b"\x89PNG\r\n\x1a\n"


def test_demo_fast(cli, tmp_path):
    out = tmp_path / "demo"
    res = cli("demo", "--fast", "--out", out, "--keep-images")
    assert res.rc == 0, res.err
    # One report per evaluation: before training (epoch-0) and after the one epoch.
    assert res.out.count("[metrics]") == 2
    assert "== epoch-0 (untrained) ==" in res.out and "== epoch-1 (train loss" in res.out
    assert "200 train images (classes 0-4), 200 test images (classes 5-9)" in res.out
    history = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["tag"] for r in history] == ["epoch-0", "epoch-1"]
    for name in ("recall.png", "grid.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG and len(data) < 200_000
    record = json.loads((out / "epoch-1.json").read_text())
    assert (record["num_queries"], record["num_gallery"], record["embedding_dim"]) == (200, 200, 8)
    assert len(list((out / "digits" / "test").rglob("*.png"))) == 200

    # The README's follow-up commands work on what the demo wrote: the saved embeddings of
    # epoch 1, row-aligned with the test folder, give the same recall through `evaluate`.
    res = cli(
        "evaluate",
        "--images",
        out / "digits" / "test",
        "--embeddings",
        out / "epoch-1.npy",
        "--json",
        tmp_path / "again.json",
    )
    assert res.rc == 0, res.err
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["metrics"] == record["metrics"]
    assert again["queries"]["first_hit_rank"] == record["queries"]["first_hit_rank"]
    res = cli("compare", out / "epoch-1.json", out / "epoch-0.json")
    assert res.rc == 0, res.err
    assert "200 paired queries" in res.out


def _written(out_text):
    """The folder and the names of the demo's last line: ``wrote in DIR: a, b, c (N s)``."""
    last = out_text.strip().splitlines()[-1]
    assert last.startswith("wrote in ") and last.endswith(" s)"), last
    folder, names = last[len("wrote in ") :].rsplit(" (", 1)[0].split(": ", 1)
    return folder, names.split(", ")


def test_demo_writes_where_it_says(cli, tmp_path):
    out = tmp_path / "elsewhere" / "demo"
    res = cli("demo", "--fast", "--out", out)
    assert res.rc == 0, res.err
    first = res.out.splitlines()[0]
    assert first.startswith(
        "digits written to a temporary folder (removed at the end; --keep-images keeps them "
        f"in {out / 'digits'}): "
    )
    folder, names = _written(res.out)
    assert folder == str(out)
    expected = ["runs.jsonl", "epoch-0.json", "epoch-1.json", "recall.png", "grid.png"]
    assert names == expected
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)

    res = cli("demo", "--fast", "--out", out, "--keep-images")
    assert res.rc == 0, res.err
    assert res.out.splitlines()[0].startswith(f"digits written to {out / 'digits'}: ")
    folder, names = _written(res.out)
    assert folder == str(out)
    assert names == [*expected, "epoch-0.npy", "epoch-1.npy", "digits/"]
    listed = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir())
    assert listed == sorted(names)
