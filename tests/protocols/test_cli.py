"""The protocol sub-commands end to end: files in, tables and JSON out, one-line errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from recallkit.cli import main
from tests.protocols import official


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _metrics(path):
    return json.loads(path.read_text())["metrics"]


def _assert_usage_error(capsys, argv, message):
    """Exit status 2 and one line on stderr, ``recallkit CMD: error: ...`` holding ``message``."""
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"recallkit {argv[0]}: error: ") and message in err, err
    return err.rstrip("\n")


def _assert_error_line(capsys, argv, line):
    """Exit status 2 and exactly ``line`` on stderr, nothing else."""
    code, _, err = _run(capsys, *argv)
    assert (code, err) == (2, line + "\n")


# ----------------------------------------------------------------------------------- image-text


@pytest.fixture
def karpathy(tmp_path):
    rng = np.random.default_rng(0)
    images = []
    for imgid in range(12):
        sentences = [
            {"raw": "x", "imgid": imgid, "sentid": 10 * imgid + s}
            for s in range(int(rng.integers(1, 4)))
        ]
        images.append(
            {
                "filename": f"{imgid}.jpg",
                "imgid": imgid,
                "split": "test" if imgid < 9 else "val",
                "sentences": sentences,
            }
        )
    path = tmp_path / "dataset_toy.json"
    path.write_text(json.dumps({"dataset": "toy", "images": images}))
    caption_image = [i for i, im in enumerate(images[:9]) for _ in im["sentences"]]
    img = rng.integers(-2, 3, size=(9, 3)).astype(np.float32)
    txt = rng.integers(-2, 3, size=(len(caption_image), 3)).astype(np.float32)
    np.save(tmp_path / "img.npy", img)
    np.save(tmp_path / "txt.npy", txt)
    expected, _, _ = official.vsepp(official.scores64(img, txt, "dot"), caption_image, (1, 5, 10))
    return path, expected, caption_image


def test_image_text_embeddings_and_scores(tmp_path, capsys, karpathy):
    path, expected, caption_image = karpathy
    out_json = tmp_path / "out" / "m.json"
    code, out, _ = _run(
        capsys,
        "image-text",
        "--karpathy",
        path,
        "--images",
        tmp_path / "img.npy",
        "--texts",
        tmp_path / "txt.npy",
        "--metric",
        "dot",
        "--json",
        out_json,
    )
    assert code == 0 and "t2i_recall@1" in out and "toy test" in out
    assert _metrics(out_json) == pytest.approx(expected)

    sim = official.scores64(np.load(tmp_path / "img.npy"), np.load(tmp_path / "txt.npy"), "dot")
    torch.save(torch.from_numpy(sim), tmp_path / "sim.pt")
    (tmp_path / "ci.json").write_text(json.dumps(caption_image))
    code, _, _ = _run(
        capsys,
        "image-text",
        "--caption-image",
        tmp_path / "ci.json",
        "--scores",
        tmp_path / "sim.pt",
        "--json",
        out_json,
        "--ks",
        "1",
        "5",
        "10",
    )
    assert code == 0 and _metrics(out_json) == pytest.approx(expected)
    np.save(tmp_path / "ci.npy", np.asarray(caption_image, dtype=np.int64))
    code, _, _ = _run(
        capsys,
        "image-text",
        "--caption-image",
        tmp_path / "ci.npy",
        "--scores",
        tmp_path / "sim.pt",
        "--json",
        out_json,
    )
    assert code == 0 and _metrics(out_json) == pytest.approx(expected)
    (tmp_path / "bad.json").write_text(json.dumps([0, 1.5]))
    _assert_usage_error(
        capsys,
        ["image-text", "--caption-image", tmp_path / "bad.json", "--scores", tmp_path / "sim.pt"],
        "must hold a list of image rows",
    )


def test_image_text_user_errors(tmp_path, capsys, karpathy):
    path, _, caption_image = karpathy
    _assert_usage_error(
        capsys,
        ["image-text", "--karpathy", path, "--images", tmp_path / "img.npy"],
        "give --images and --texts",
    )
    _assert_usage_error(
        capsys,
        [
            "image-text",
            "--karpathy",
            path,
            "--images",
            tmp_path / "img.npy",
            "--texts",
            tmp_path / "img.npy",
        ],
        # img.npy holds 9 rows, one per test image; the split has one row per caption.
        f"--texts must be one row per caption of the --karpathy split ({len(caption_image)} "
        "rows). Got 9 rows.",
    )
    _assert_usage_error(
        capsys,
        ["image-text", "--karpathy", path, "--scores", tmp_path / "nope.npy"],
        "does not exist",
    )
    coco = tmp_path / "dataset_coco.json"
    coco.write_text(path.read_text().replace('"toy"', '"coco"'))
    _assert_usage_error(
        capsys,
        ["image-text", "--karpathy", coco, "--scores", tmp_path / "img.npy"],
        "expected 5000",
    )


# ----------------------------------------------------------------------------------------- CIRR


@pytest.fixture
def cirr_root(tmp_path):
    rng = np.random.default_rng(1)
    names = [f"dev-{i}-0-img0" for i in range(30)]
    entries, test_entries = [], []
    for q in range(12):
        members = [names[i] for i in rng.choice(30, size=6, replace=False)]
        entries.append(
            {
                "pairid": q,
                "reference": members[0],
                "target_hard": members[1],
                "target_soft": {members[1]: 1.0, members[2]: 0.5, members[3]: -1.0},
                "caption": "c",
                "img_set": {"id": q, "members": members},
            }
        )
        test_entries.append(
            {
                "pairid": 500 + q,
                "reference": members[0],
                "caption": "c",
                "img_set": {"id": q, "members": members},
            }
        )
    for split, rows in (("val", entries), ("test1", test_entries)):
        (tmp_path / "CIRR" / "captions").mkdir(parents=True, exist_ok=True)
        (tmp_path / "CIRR" / "image_splits").mkdir(parents=True, exist_ok=True)
        (tmp_path / "CIRR" / "captions" / f"cap.rc2.{split}.json").write_text(json.dumps(rows))
        (tmp_path / "CIRR" / "image_splits" / f"split.rc2.{split}.json").write_text(
            json.dumps({n: f"./dev/{n}.png" for n in names})
        )
    query = rng.integers(-2, 3, size=(12, 3)).astype(np.float32)
    images = rng.integers(-2, 3, size=(30, 3)).astype(np.float32)
    np.save(tmp_path / "q.npy", query)
    save_file({"embeddings": images, "other": images[:2]}, str(tmp_path / "img.safetensors"))
    return tmp_path / "CIRR", names, entries, official.scores64(query, images, "dot")


def test_cirr_val_and_test_submission(tmp_path, capsys, cirr_root):
    root, names, entries, sim = cirr_root
    images = f"{tmp_path / 'img.safetensors'}#embeddings"
    out = tmp_path / "cirr.json"
    code, text, _ = _run(
        capsys,
        "cirr",
        "--root",
        root,
        "--queries",
        tmp_path / "q.npy",
        "--images",
        images,
        "--metric",
        "dot",
        "--json",
        out,
    )
    assert code == 0 and "recall_subset@1" in text
    refs = [e["reference"] for e in entries]
    members = [e["img_set"]["members"] for e in entries]
    expected = official.cirr_hard(sim, names, refs, [e["target_hard"] for e in entries], members)
    assert _metrics(out) == pytest.approx(expected)
    code, _, _ = _run(
        capsys,
        "cirr",
        "--root",
        root,
        "--queries",
        tmp_path / "q.npy",
        "--images",
        images,
        "--metric",
        "dot",
        "--json",
        out,
        "--target",
        "soft",
    )
    expected = official.cirr_soft(sim, names, refs, [e["target_soft"] for e in entries], members)
    assert code == 0 and _metrics(out) == pytest.approx(expected)

    np.save(tmp_path / "sim.npy", sim)
    code, text, _ = _run(
        capsys,
        "cirr",
        "--root",
        root,
        "--split",
        "test1",
        "--scores",
        tmp_path / "sim.npy",
        "--submission-dir",
        tmp_path / "sub",
    )
    assert code == 0 and "cirr_test1_recall.json" in text
    recall = json.loads((tmp_path / "sub" / "cirr_test1_recall.json").read_text())
    subset = json.loads((tmp_path / "sub" / "cirr_test1_recall_subset.json").read_text())
    assert recall["version"] == "rc2" and recall["metric"] == "recall"
    assert subset["metric"] == "recall_subset"
    top = official.top_names(sim, names, [[r] for r in refs], 50)
    in_set = official.top_names(
        sim, names, [[n for n in names if n not in m or n == m[0]] for m in members], 3
    )
    assert [recall[str(500 + q)] for q in range(12)] == top
    assert [subset[str(500 + q)] for q in range(12)] == in_set


def test_cirr_user_errors(tmp_path, capsys, cirr_root):
    root = cirr_root[0]
    _assert_usage_error(
        capsys,
        ["cirr", "--root", root, "--split", "test1", "--scores", tmp_path / "q.npy"],
        "has no targets to score",
    )
    _assert_usage_error(
        capsys,
        [
            "cirr",
            "--root",
            root,
            "--queries",
            tmp_path / "q.npy",
            "--images",
            tmp_path / "img.safetensors",
        ],
        "img.safetensors' holds 2 tensors (embeddings, other); name one as '",
    )
    _assert_error_line(
        capsys,
        ["cirr", "--root", root, "--scores", tmp_path / "q.npy"],
        # q.npy is (12 queries, 3): as scores it has 3 columns instead of one per image (30).
        "recallkit cirr: error: --scores must be one column per image of the CIRR split of "
        "--root (30 columns). Got 3 columns.",
    )
    _assert_usage_error(
        capsys,
        ["cirr", "--root", tmp_path, "--scores", tmp_path / "q.npy"],
        "CIRR image split file not found",
    )


# ---------------------------------------------------------------------------------------- CIRCO


def test_circo_embeddings_predictions_and_submission(tmp_path, capsys):
    rng = np.random.default_rng(2)
    ids = rng.choice(np.arange(1, 10**6), size=80, replace=False).tolist()
    entries = []
    for q in range(10):
        picked = rng.choice(ids, size=int(rng.integers(2, 9)), replace=False).tolist()
        entries.append(
            {
                "id": q,
                "reference_img_id": picked[0],
                "target_img_id": picked[1],
                "relative_caption": "c",
                "shared_concept": "s",
                "gt_img_ids": picked[1:],
                "semantic_aspects": rng.choice(
                    official.CIRCO_ASPECTS, size=int(rng.integers(1, 4)), replace=False
                ).tolist(),
            }
        )
    aspects = {e["id"]: e["semantic_aspects"] for e in entries}
    (tmp_path / "CIRCO" / "annotations").mkdir(parents=True)
    (tmp_path / "CIRCO" / "annotations" / "val.json").write_text(json.dumps(entries))
    (tmp_path / "CIRCO" / "annotations" / "test.json").write_text(
        json.dumps(
            [
                {
                    k: v
                    for k, v in e.items()
                    if k not in ("target_img_id", "gt_img_ids", "semantic_aspects")
                }
                for e in entries
            ]
        )
    )
    info = tmp_path / "info.json"
    info.write_text(json.dumps({"images": [{"id": i, "file_name": f"{i:012d}.jpg"} for i in ids]}))
    query = rng.integers(-2, 3, size=(10, 3)).astype(np.float32)
    images = rng.integers(-2, 3, size=(80, 3)).astype(np.float32)
    np.save(tmp_path / "q.npy", query)
    torch.save({"embeddings": torch.from_numpy(images)}, tmp_path / "img.pt")
    sim = official.scores64(query, images, "dot")
    predictions = dict(enumerate(official.ranked_ids(sim, ids, k=50)))
    gts = {e["id"]: e["gt_img_ids"] for e in entries}
    targets = {e["id"]: e["target_img_id"] for e in entries}

    out = tmp_path / "circo.json"
    for divisor in ("min_k_r", "r"):
        code, text, _ = _run(
            capsys,
            "circo",
            "--annotations",
            tmp_path / "CIRCO",
            "--queries",
            tmp_path / "q.npy",
            "--images",
            tmp_path / "img.pt",
            "--image-ids",
            info,
            "--metric",
            "dot",
            "--divisor",
            divisor,
            "--json",
            out,
        )
        assert code == 0 and "mAP@50" in text
        expected = official.circo_official(
            predictions, gts, targets, (5, 10, 25, 50), divisor, aspects
        )
        assert _metrics(out) == pytest.approx(expected)
        semantic = [k for k in expected if k.startswith("mAP@10[")]
        assert len(semantic) >= 3 and all(k in text for k in semantic)

    (tmp_path / "pred.json").write_text(json.dumps({str(k): v for k, v in predictions.items()}))
    code, _, _ = _run(
        capsys,
        "circo",
        "--annotations",
        tmp_path / "CIRCO" / "annotations" / "val.json",
        "--predictions",
        tmp_path / "pred.json",
        "--json",
        out,
    )
    assert code == 0 and _metrics(out) == pytest.approx(
        official.circo_official(predictions, gts, targets, (5, 10, 25, 50), aspects=aspects)
    )

    (tmp_path / "ids.txt").write_text("\n".join(f"unlabeled2017/{i:012d}.jpg" for i in ids))
    code, _, _ = _run(
        capsys,
        "circo",
        "--annotations",
        tmp_path / "CIRCO",
        "--split",
        "test",
        "--queries",
        tmp_path / "q.npy",
        "--images",
        tmp_path / "img.pt",
        "--image-ids",
        tmp_path / "ids.txt",
        "--metric",
        "dot",
        "--submission",
        tmp_path / "sub.json",
    )
    assert code == 0
    submission = json.loads((tmp_path / "sub.json").read_text())
    assert submission == {str(k): v for k, v in predictions.items()}

    duplicated = {str(k): v for k, v in predictions.items()}
    duplicated["3"] = [duplicated["3"][0]] * 2
    (tmp_path / "dup.json").write_text(json.dumps(duplicated))
    _assert_usage_error(
        capsys,
        ["circo", "--annotations", tmp_path / "CIRCO", "--predictions", tmp_path / "dup.json"],
        "a repeated image id in the ranking of query 3",
    )
    keep = [j for j, i in enumerate(ids) if i != entries[4]["gt_img_ids"][-1]]
    np.save(tmp_path / "few_ids.npy", np.array(ids)[keep])
    np.save(tmp_path / "few_scores.npy", sim[:, keep])
    _assert_usage_error(
        capsys,
        [
            "circo",
            "--annotations",
            tmp_path / "CIRCO",
            "--scores",
            tmp_path / "q.npy",
            "--image-ids",
            tmp_path / "few_ids.npy",
        ],
        f"CIRCO query 4: ground-truth image {entries[4]['gt_img_ids'][-1]} is not among the "
        "--image-ids.",
    )


# ------------------------------------------------------------------------------------ FashionIQ


def test_fashioniq_categories(tmp_path, capsys):
    rng = np.random.default_rng(3)
    args, score_args, expected = [], [], {}
    for c, category in enumerate(("dress", "shirt", "toptee")):
        names = [f"B{c}{i}" for i in range(40)]
        pairs = [rng.choice(names, size=2, replace=False).tolist() for _ in range(15)]
        (tmp_path / "captions").mkdir(exist_ok=True)
        (tmp_path / "image_splits").mkdir(exist_ok=True)
        (tmp_path / "image_splits" / f"split.{category}.val.json").write_text(json.dumps(names))
        (tmp_path / "captions" / f"cap.{category}.val.json").write_text(
            json.dumps([{"candidate": a, "target": b, "captions": ["x", "y"]} for a, b in pairs])
        )
        q = rng.integers(-2, 3, size=(15, 3)).astype(np.float32)
        g = rng.integers(-2, 3, size=(40, 3)).astype(np.float32)
        np.save(tmp_path / f"q_{category}.npy", q)
        np.save(tmp_path / f"g_{category}.npy", g)
        sim = official.scores64(q, g, "dot")
        np.save(tmp_path / f"s_{category}.npy", sim)
        args += [
            "--category",
            category,
            tmp_path / f"q_{category}.npy",
            tmp_path / f"g_{category}.npy",
        ]
        score_args += ["--category-scores", category, tmp_path / f"s_{category}.npy"]
        expected[category] = official.fashioniq_category(sim, names, [b for _, b in pairs])
    means = {
        f"mean_recall@{k}": float(np.mean([e[f"recall@{k}"] for e in expected.values()]))
        for k in (10, 50)
    }
    means["average"] = (means["mean_recall@10"] + means["mean_recall@50"]) / 2
    out = tmp_path / "fiq.json"
    for extra in ([*args, "--metric", "dot"], score_args):
        code, text, _ = _run(capsys, "fashioniq", "--root", tmp_path, *extra, "--json", out)
        assert code == 0 and "toptee" in text
        payload = json.loads(out.read_text())
        assert payload["metrics"] == pytest.approx(means)
        for category, values in expected.items():
            assert payload["parts"][category]["metrics"] == pytest.approx(values)
    _assert_usage_error(
        capsys,
        ["fashioniq", "--root", tmp_path, "--category-scores", "shoes", tmp_path / "s_dress.npy"],
        "unknown FashionIQ category 'shoes'",
    )


# -------------------------------------------------------------------------------------- GeneCIS


def test_genecis_tasks(tmp_path, capsys):
    rng = np.random.default_rng(4)
    argv, expected = [], {}
    for task in ("focus_attribute", "change_attribute", "focus_object", "change_object"):
        distractors = 9 if "attribute" in task else 14
        item = (
            {"image_id": "1", "instance_bbox": [0, 0, 5, 5]}
            if "attribute" in task
            else {"val_image_id": 1}
        )
        samples = [
            {"reference": item, "condition": "c", "target": item, "gallery": [item] * distractors}
        ] * 20
        (tmp_path / f"{task}.json").write_text(json.dumps(samples))
        scores = rng.integers(0, 3, size=(20, distractors + 1)).astype(np.float32)
        expected[task], _ = official.genecis_pessimistic(scores)
        if task == "focus_object":
            q = rng.integers(-2, 3, size=(20, 3)).astype(np.float32)
            c = rng.integers(-2, 3, size=(20, distractors + 1, 3)).astype(np.float32)
            np.save(tmp_path / "q.npy", q)
            np.save(tmp_path / "c.npy", c)
            expected[task], _ = official.genecis_pessimistic(
                np.einsum("nd,ngd->ng", q.astype(float), c.astype(float))
            )
            argv += ["--task-embeddings", task, tmp_path / "q.npy", tmp_path / "c.npy"]
        else:
            torch.save(torch.from_numpy(scores), tmp_path / f"{task}.pt")
            argv += ["--task", task, tmp_path / f"{task}.pt"]
    out = tmp_path / "genecis.json"
    code, text, _ = _run(
        capsys, "genecis", "--root", tmp_path, *argv, "--metric", "dot", "--json", out
    )
    assert code == 0 and "average_recall@1" in text
    payload = json.loads(out.read_text())
    for task, values in expected.items():
        assert payload["parts"][task]["metrics"] == pytest.approx(values)
    assert payload["metrics"]["average_recall@1"] == pytest.approx(
        np.mean([e["recall@1"] for e in expected.values()])
    )
    # --ties official: the official script's order (target first among equal scores).
    code, text, _ = _run(
        capsys, "genecis", "--root", tmp_path, *argv, "--metric", "dot", "--ties", "official"
    )
    assert code == 0 and "ties: column order, target first" in text
    scores = torch.load(tmp_path / "change_object.pt").numpy()
    expected_official, _ = official.genecis_official(scores)
    pessimistic, _ = official.genecis_pessimistic(scores)
    assert expected_official["recall@1"] > pessimistic["recall@1"]  # the data has ties
    row = next(line for line in text.splitlines() if line.startswith("change_object"))
    assert row.split()[2:5] == [f"{100 * expected_official[f'recall@{k}']:.2f}" for k in (1, 2, 3)]

    np.save(tmp_path / "narrow.npy", np.zeros((20, 5)))
    _assert_usage_error(
        capsys,
        ["genecis", "--root", tmp_path, "--task", "focus_object", tmp_path / "narrow.npy"],
        "at least 15 columns",
    )
    _assert_usage_error(
        capsys,
        ["genecis", "--root", tmp_path, "--task", "colour", tmp_path / "narrow.npy"],
        "unknown GeneCIS task 'colour'",
    )
    (tmp_path / "change_object.json").write_text(
        json.dumps([{"reference": {"val_image_id": 1}, "gallery": [{"val_image_id": 2}]}])
    )
    _assert_usage_error(
        capsys,
        ["genecis", "--root", tmp_path, "--task", "change_object", tmp_path / "narrow.npy"],
        "sample 0: the sample has no target",
    )


# ------------------------------------------------------------- errors said with the options


def test_a_count_mismatch_names_no_count_check(tmp_path, capsys, karpathy):
    path, _, caption_image = karpathy
    coco = tmp_path / "dataset_coco.json"
    coco.write_text(path.read_text().replace('"toy"', '"coco"'))
    np.save(tmp_path / "sim.npy", np.zeros((9, len(caption_image)), dtype=np.float32))
    argv = ["image-text", "--karpathy", coco, "--scores", tmp_path / "sim.npy"]
    # The toy file has 9 test images; COCO's Karpathy test split has 5000 and 25010 captions.
    _assert_error_line(
        capsys,
        argv,
        f"recallkit image-text: error: {coco}: the Karpathy 'test' split of coco has 9 images "
        f"and {len(caption_image)} captions; expected 5000 and 25010 (pass --no-count-check to "
        "evaluate partial data).",
    )
    code, out, _ = _run(capsys, *argv, "--no-count-check")
    assert code == 0 and "coco test" in out


def test_protocol_inputs_checked_before_scoring(tmp_path, capsys, karpathy):
    path, _, caption_image = karpathy
    n = len(caption_image)
    np.save(tmp_path / "txt4.npy", np.ones((n, 4), dtype=np.float32))
    base = ["image-text", "--karpathy", path, "--images", tmp_path / "img.npy"]
    _assert_error_line(
        capsys,
        [*base, "--texts", tmp_path / "txt4.npy"],
        "recallkit image-text: error: --images has embeddings of dimension 3 but --texts has 4; "
        "both must come from the same embedding space.",
    )
    with_texts = [*base, "--texts", tmp_path / "txt.npy"]
    _assert_error_line(
        capsys,
        [*with_texts, "--device", "gpu0"],
        "recallkit image-text: error: --device takes a torch device such as cpu, cuda or "
        "cuda:1. Got 'gpu0'.",
    )
    _assert_error_line(
        capsys,
        [*with_texts, "--json", tmp_path],
        f"recallkit image-text: error: --json takes a file name; '{tmp_path}' is a folder.",
    )
    _assert_error_line(
        capsys,
        [*with_texts, "--json", "/dev/null"],
        "recallkit image-text: error: --json '/dev/null' is not a regular file (a device, a "
        "pipe or a socket); give the name of a file to write.",
    )
    _assert_error_line(
        capsys,
        [*with_texts, "--chunk-size", "0"],
        "recallkit image-text: error: --chunk-size takes a positive integer. Got '0'.",
    )
    _assert_error_line(
        capsys,
        [*with_texts, "--ks", "0"],
        "recallkit image-text: error: --ks must be positive integers. Got 0.",
    )


def test_annotation_files_that_are_not_utf8_are_named(tmp_path, capsys, karpathy):
    path, _, _ = karpathy
    latin = tmp_path / "latin.json"
    latin.write_bytes(path.read_bytes().replace(b'"raw": "x"', b'"raw": "caf\xe9"', 1))
    np.save(tmp_path / "sim.npy", np.zeros((9, 9), dtype=np.float32))
    start = latin.read_bytes().index(b"\xe9")
    _assert_error_line(
        capsys,
        ["image-text", "--karpathy", latin, "--scores", tmp_path / "sim.npy"],
        f"recallkit image-text: error: The file '{latin}' is not UTF-8 text (byte {start}: "
        "invalid continuation byte); annotation files are JSON in UTF-8.",
    )


def test_cirr_and_circo_outputs_and_inputs(tmp_path, capsys, cirr_root):
    root = cirr_root[0]
    scores = np.zeros((12, 30), dtype=np.float32)
    np.save(tmp_path / "sim.npy", scores)
    _assert_error_line(
        capsys,
        [
            "cirr",
            "--root",
            root,
            "--split",
            "test1",
            "--scores",
            tmp_path / "sim.npy",
            "--submission-dir",
            tmp_path / "q.npy",
        ],
        f"recallkit cirr: error: --submission-dir takes a folder; '{tmp_path / 'q.npy'}' is a "
        "file.",
    )
    np.save(tmp_path / "img4.npy", np.ones((30, 4), dtype=np.float32))
    _assert_error_line(
        capsys,
        [
            "cirr",
            "--root",
            root,
            "--queries",
            tmp_path / "q.npy",
            "--images",
            tmp_path / "img4.npy",
        ],
        "recallkit cirr: error: --queries has embeddings of dimension 3 but --images has 4; both "
        "must come from the same embedding space.",
    )
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "val.json").write_text(
        json.dumps(
            [
                {
                    "id": 0,
                    "reference_img_id": 1,
                    "target_img_id": 2,
                    "relative_caption": "c",
                    "shared_concept": "s",
                    "gt_img_ids": [2],
                }
            ]
        )
    )
    (tmp_path / "p.json").write_text("{0: [1]}")
    _assert_error_line(
        capsys,
        [
            "circo",
            "--annotations",
            tmp_path / "ann" / "val.json",
            "--predictions",
            tmp_path / "p.json",
        ],
        f"recallkit circo: error: The predictions file '{tmp_path / 'p.json'}' is not valid "
        "JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1).",
    )


def test_a_failed_json_write_names_the_option(tmp_path, capsys, karpathy, monkeypatch):
    import errno

    from recallkit.protocols import _common

    def full_disk(path, payload):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(_common, "write_json", full_disk)
    path, _, _ = karpathy
    code, out, err = _run(
        capsys,
        "image-text",
        "--karpathy",
        path,
        "--images",
        tmp_path / "img.npy",
        "--texts",
        tmp_path / "txt.npy",
        "--json",
        tmp_path / "m.json",
    )
    assert code == 2 and "t2i_recall@1" in out  # the table was printed before the write
    assert err == (
        f"recallkit image-text: error: Cannot write --json '{tmp_path / 'm.json'}': No space "
        "left on device. Nothing was written.\n"
    )
    assert not (tmp_path / "m.json").exists()


def test_genecis_needs_recall_at_1_and_dense_scores(tmp_path, capsys):
    item = {"val_image_id": 1}
    sample = {"reference": item, "condition": "c", "target": item, "gallery": [item] * 4}
    (tmp_path / "focus_object.json").write_text(json.dumps([sample] * 3))
    np.save(tmp_path / "s.npy", np.zeros((3, 5), dtype=np.float32))
    base = ["genecis", "--root", tmp_path, "--task", "focus_object"]
    _assert_error_line(
        capsys,
        [*base, tmp_path / "s.npy", "--ks", "2", "3"],
        "recallkit genecis: error: --ks must include 1: the GeneCIS summary is the average "
        "recall@1. Got 2 3.",
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(torch.zeros(3, 5).to_sparse(), tmp_path / "s.pt")
    _assert_error_line(
        capsys,
        [*base, tmp_path / "s.pt"],
        f"recallkit genecis: error: The focus_object scores file '{tmp_path / 's.pt'}' holds a "
        "tensor of layout torch.sparse_coo (not dense); save it as a dense tensor "
        "(tensor.to_dense() for a sparse one, tensor.dequantize() for a quantized one).",
    )


def test_image_ids_must_be_integers(tmp_path):
    from recallkit.cli.commands._protocol_io import load_ids
    from recallkit.cli.errors import UsageError

    np.save(tmp_path / "f.npy", np.array([1.0, 2.5]))
    (tmp_path / "b.json").write_text("[true, 2]")
    (tmp_path / "big.json").write_text(f"[{2**70}]")
    (tmp_path / "ok.json").write_text('{"images": [{"id": 7}, {"id": 3}]}')
    (tmp_path / "ok.txt").write_text("unlabeled2017/000000000012.jpg\n34\n")
    cases = {
        "f.npy": "cannot be read: ids must be integers, not float64.",
        "b.json": "cannot be read: ids must be integers, not True.",
        "big.json": "holds an id beyond 64-bit integers.",
    }
    for name, end in cases.items():
        with pytest.raises(UsageError) as caught:
            load_ids(str(tmp_path / name))
        assert str(caught.value) == f"The image ids file '{tmp_path / name}' {end}"
    assert load_ids(str(tmp_path / "ok.json")).tolist() == [7, 3]
    assert load_ids(str(tmp_path / "ok.txt")).tolist() == [12, 34]


def test_a_file_name_with_a_hash_is_read_whole(tmp_path):
    from recallkit.cli.commands._protocol_io import load_array

    np.save(tmp_path / "run#3.npy", np.eye(2, dtype=np.float32))
    assert load_array(str(tmp_path / "run#3.npy"), "scores").tolist() == [[1, 0], [0, 1]]
    save_file(
        {"a": np.ones((1, 2), np.float32), "b": np.zeros((1, 2), np.float32)},
        str(tmp_path / "two#x.safetensors"),
    )
    assert load_array(f"{tmp_path / 'two#x.safetensors'}#b", "scores").tolist() == [[0, 0]]
