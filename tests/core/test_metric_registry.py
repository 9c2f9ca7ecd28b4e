"""The metric registry: every metric against its definition, its tie bounds against every order
of the tied items, its values bit for bit across chunkings, back ends, precisions and streaming,
and the peers' own code where a peer defines the same metric."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch

import recallkit
from recallkit import metrics as registry
from tests import brute, registry_cases

# (name asked, brute-force name, K): every registered metric, at K = 1, 3 and 50 (above the
# candidates of some queries) where it has a cut-off.
EVERY = registry_cases.cases((1, 3, 50))
NAMES = [name for name, _, _ in EVERY]


def _quiet(call, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # K above the candidates
        return call(*args, **kwargs)


def _case(seed: int, n: int = 40, m: int = 60, d: int = 4, ties: bool = False):
    rng = np.random.default_rng(seed)
    if ties:  # small integers: exact, often equal dot products
        r = rng.integers(-2, 3, size=(m, d)).astype(np.float64)
    else:
        r = rng.standard_normal((m, d))
    labels = rng.integers(0, 6, size=m)
    ids = rng.integers(0, m // 3, size=m)
    return r[:n], r, labels[:n], labels, ids[:n], ids


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("divisor", ["min_k_r", "r", "hits"])
def test_every_metric_is_its_definition_query_by_query(seed, divisor):
    q, r, ql, rl, qi, ri = _case(seed, ties=seed % 2 == 1)
    result = _quiet(
        recallkit.retrieval_metrics,
        q,
        r,
        ql,
        rl,
        NAMES,
        metric="dot",
        query_ids=qi,
        reference_ids=ri,
        divisor=divisor,
    )
    s = brute.fixed_order_scores64(q, r, "dot")
    excluded = brute.excluded_sets(len(q), len(r), query_ids=qi, reference_ids=ri)
    lists = brute.relevance_lists(s, ql, rl, excluded)
    for name, kind, k in EVERY:
        want = [brute.metric(kind, k, rel, big_r, c, divisor) for rel, big_r, c in lists]
        got = result.per_query[name]
        assert np.array_equal(got, np.array(want), equal_nan=True), name
        evaluated = [w for w in want if not math.isnan(w)]
        assert result[name] == brute.summary(kind, evaluated), name


def test_precision_at_k_clamps_per_query_over_the_candidates_left_by_ids():
    # Each row's own id excluded: every query has 2 candidates, so precision@3 reads 2 (0.5),
    # as query_in_reference=True and torchmetrics' adaptive_k give.
    x = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    labels = [0, 0, 1]
    by_ids = _quiet(
        recallkit.retrieval_metrics,
        x,
        x,
        labels,
        labels,
        ["precision@3"],
        metric="euclidean",
        query_ids=[0, 1, 2],
        reference_ids=[0, 1, 2],
    )
    by_row = _quiet(
        recallkit.retrieval_metrics,
        x,
        x,
        labels,
        labels,
        ["precision@3"],
        metric="euclidean",
        query_in_reference=True,
    )
    assert by_ids.per_query["precision@3"][:2].tolist() == [0.5, 0.5]
    assert by_ids["precision@3"] == by_row["precision@3"] == 0.5
    with pytest.warns(UserWarning, match="precision@3 asks for more than the 2 candidates"):
        recallkit.retrieval_metrics(
            x,
            x,
            labels,
            labels,
            ["precision@3"],
            metric="euclidean",
            query_ids=[0, 1, 2],
            reference_ids=[0, 1, 2],
        )


@pytest.mark.parametrize(
    ("scores", "metric"),
    [
        # distances 1, 2, 2, 2 (items 0 and 2 relevant), K = 3
        (np.array([[1.0], [2.0], [2.0], [2.0]]), "euclidean"),
        # dot scores 0.9 (relevant), 0.8, 0.5 (relevant), 0.5
        (np.array([[0.9], [0.8], [0.5], [0.5]]), "dot"),
    ],
)
def test_map_at_k_with_the_hits_divisor_bounds_both_orders(scores, metric):
    query = np.zeros((1, 1)) if metric == "euclidean" else np.ones((1, 1))
    labels = [1, 0, 1, 0]
    r = recallkit.map_at_k(
        query, scores, [1], labels, k=3, divisor="hits", metric=metric, query_in_reference=False
    )
    # Relevant item 2 at 0-indexed rank 2: (1 + 2/3)/2; pushed out of the top 3 by its tie:
    # 1/1. The peers give one or the other depending on the input order.
    assert float(r) == pytest.approx(5 / 6, abs=1e-15)
    assert r.bounds["MAP@3"] == (float(r), 1.0)
    assert r.num_tied == 1


def _orders(scores: np.ndarray, rel: list[bool], order: list[int]):
    """Every relevance sequence the items ``order`` (ranked by the tie rule) take when the
    items of each group of equal scores are reordered in every way."""
    groups = [list(g) for _, g in itertools.groupby(order, key=lambda j: scores[j])]
    choices = []
    for group in groups:
        bits = [rel[order.index(j)] for j in group]
        hits, size = sum(bits), len(bits)
        choices.append(
            [
                [p in chosen for p in range(size)]
                for chosen in map(set, itertools.combinations(range(size), hits))
            ]
        )
    for pick in itertools.product(*choices):
        yield [b for part in pick for b in part]


def test_tie_bounds_are_the_worst_and_best_of_every_order_for_every_metric():
    checked = tied = 0
    for seed in range(6):
        q, r, ql, rl, qi, ri = _case(seed + 10, n=12, m=14, d=2, ties=True)
        s = brute.fixed_order_scores64(q, r, "dot")
        excluded = brute.excluded_sets(len(q), len(r), query_ids=qi, reference_ids=ri)
        for i in range(len(q)):
            order = brute.ranked(s[i], excluded[i])
            rel = [rl[j] == ql[i] for j in order]
            big_r, c = sum(rel), len(order)
            if big_r == 0:
                continue
            arrangements = list(_orders(s[i], rel, order))
            if len(arrangements) > 3000:
                continue
            for divisor in ("min_k_r", "hits"):
                one = _quiet(
                    recallkit.retrieval_metrics,
                    q[i : i + 1],
                    r,
                    ql[i : i + 1],
                    rl,
                    NAMES,
                    metric="dot",
                    query_ids=qi[i : i + 1],
                    reference_ids=ri,
                    divisor=divisor,
                )
                any_tie = False
                for name, kind, k in EVERY:
                    values = [brute.metric(kind, k, a, big_r, c, divisor) for a in arrangements]
                    assert one[name] == brute.metric(kind, k, rel, big_r, c, divisor), name
                    bounds = registry_cases.pessimistic_first(name, values)
                    assert one.bounds[name] == bounds, (seed, i, name)
                    any_tie |= min(values) != max(values)
                assert one.num_tied == int(any_tie)
                checked += 1
                tied += any_tie
    assert checked > 100 and tied > 30  # the enumeration met many real ties


CONFIGS = [
    {"chunk_size": 1},
    {"chunk_size": 7},
    {"chunk_size": 64},
    {"precision": "float32", "chunk_size": 5},
    {"precision": "bfloat16"},
    {"precision": "int8", "chunk_size": 11},
    {"backend": "torch", "chunk_size": 3},
    {"backend": "torch"},
    {"streamed": True, "chunk_size": 9},
]


@pytest.mark.parametrize("seed", range(3))
def test_per_query_values_are_bit_identical_in_every_configuration(seed, tmp_path, monkeypatch):
    rng = np.random.default_rng(seed)
    n, d = 150, 12
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[rng.integers(0, n, 20)] = x[3]  # exact ties across chunks
    labels = rng.integers(0, 9, size=n)
    names = [*NAMES, "MAP@10"]
    base = _quiet(recallkit.retrieval_metrics, x, x, labels, labels, names, query_in_reference=True)
    for config in CONFIGS:
        config = dict(config)
        backend = config.pop("backend", None)
        reference = x
        if config.pop("streamed", False):
            path = tmp_path / f"r{seed}.npy"
            np.save(path, x)
            reference = np.load(path, mmap_mode="r")
        with monkeypatch.context() as patch:
            if backend:
                patch.setenv("RECALLKIT_BACKEND", backend)
            got = _quiet(
                recallkit.retrieval_metrics,
                x,
                reference,
                labels,
                labels,
                names,
                query_in_reference=True,
                **config,
            )
        for name in names:
            a, b = base.per_query[name], got.per_query[name]
            assert a.tobytes() == b.tobytes(), (config, name)
        assert dict(got) == dict(base) and got.bounds == base.bounds


def test_an_unknown_metric_is_an_error_never_a_default():
    for bad in ("recall", "MAP@0", "nDCG", "hit@x", "mrr@-1", "MAP@RR"):
        with pytest.raises(ValueError, match="'metrics' parameter of retrieval_metrics"):
            recallkit.retrieval_metrics(
                np.eye(3), np.eye(3), [0, 0, 1], [0, 0, 1], [bad], query_in_reference=True
            )
    assert registry.parse_one("nDCG@10") == registry.NDCG(10)
    assert registry.parse_one("mean_reciprocal_rank") == registry.MRR()
    assert registry.parse_one("precision_at_1") == registry.Recall(1)


def test_names_and_aliases_of_the_registry():
    names = [
        m.name
        for m in registry.parse(
            [
                "hit@5",
                "cmc@2",
                "p@3",
                "ir_recall@4",
                "map@10",
                "map_at_r",
                "rprecision",
                "mrr@3",
                "ndcg_at_10",
            ],
            "f",
        )
    ]
    assert names == [
        "recall@5",
        "recall@2",
        "precision@3",
        "IR-recall@4",
        "MAP@10",
        "MAP@R",
        "R-precision",
        "MRR@3",
        "nDCG@10",
    ]
    for cls in registry.REGISTRY.values():  # every metric says who else defines it
        assert cls.peers and cls.formula


def test_a_huge_k_is_clamped_for_every_metric():
    x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    big = 10**30
    names = [
        f"recall@{big}",
        f"precision@{big}",
        f"IR-recall@{big}",
        f"MAP@{big}",
        f"MRR@{big}",
        f"nDCG@{big}",
    ]
    r = _quiet(
        recallkit.retrieval_metrics,
        x,
        x,
        [0, 0, 1, 1],
        [0, 0, 1, 1],
        names,
        query_in_reference=True,
    )
    assert r[f"recall@{big}"] == 1.0 and r[f"IR-recall@{big}"] == 1.0
    assert (
        float(
            _quiet(
                recallkit.map_at_k, x, x, [0, 0, 1, 1], [0, 0, 1, 1], k=big, query_in_reference=True
            )
        )
        == r[f"MAP@{big}"]
    )
    assert recallkit.average_precision_at_k([[0, 2]], k=big).tolist() == [(1 + 2 / 3) / 2]


# --------------------------------------------------------------------------------------------
# The peers' own code, where they define the same metric (no ties: the agreement condition).


def _peer_case(seed: int):
    q, r, ql, rl, _, _ = _case(seed, n=30, m=50, d=6)
    s = brute.fixed_order_scores64(q, r, "dot")
    return q, r, ql, rl, s


@pytest.mark.parametrize("seed", range(3))
def test_torchmetrics_agrees_without_ties(seed):
    from torchmetrics.functional import retrieval as tm

    q, r, ql, rl, s = _peer_case(seed)
    ours = recallkit.retrieval_metrics(
        q,
        r,
        ql,
        rl,
        ["MRR", "nDCG@10", "recall@5", "R-precision", "precision@10"],
        metric="dot",
        query_in_reference=False,
    )
    peers = {
        "MRR": lambda p, t: tm.retrieval_reciprocal_rank(p, t),
        "nDCG@10": lambda p, t: tm.retrieval_normalized_dcg(p, t, top_k=10),
        "recall@5": lambda p, t: tm.retrieval_hit_rate(p, t, top_k=5),
        "R-precision": lambda p, t: tm.retrieval_r_precision(p, t),
        "precision@10": lambda p, t: tm.retrieval_precision(p, t, top_k=10, adaptive_k=True),
    }
    for name, peer in peers.items():
        for i in range(len(q)):
            target = torch.from_numpy(rl == ql[i])
            if not target.any():
                continue
            want = float(peer(torch.from_numpy(s[i]), target))
            assert ours.per_query[name][i] == pytest.approx(want, abs=1e-6), (name, i)  # float32


def test_pml_mean_reciprocal_rank_agrees_when_every_first_hit_is_within_k():
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    from recallkit.pml import ExactKNN

    q, r, ql, rl, _ = _peer_case(7)
    # PML 2.9 finds neighbours for mean_reciprocal_rank only beside a metric that asks for them.
    pml = AccuracyCalculator(
        include=("mean_reciprocal_rank", "precision_at_1"),
        k=len(r),
        knn_func=ExactKNN(metric="dot", keep_query_copies=True),  # q is r[:n]
    )
    got = pml.get_accuracy(
        torch.from_numpy(q), torch.from_numpy(ql), torch.from_numpy(r), torch.from_numpy(rl), False
    )
    ours = recallkit.retrieval_metrics(
        q, r, ql, rl, ["MRR"], metric="dot", query_in_reference=False
    )
    assert ours["MRR"] == pytest.approx(got["mean_reciprocal_rank"], abs=1e-7)  # PML: float32


def test_a_new_metric_is_one_class_and_every_entry_point_has_it(tmp_path):
    """docs/development.md's recipe, followed alone: a class registered in the registry."""

    class Successes(registry.Metric):
        family = "successes"
        template = "successes@{K}"
        aliases = ("successes_at_{K}",)
        peers = (("none", "a test metric"),)
        formula = "relevant items among the first K (a count)"

        def values(self, ranked, order="rule"):
            return ranked.at("hits", self.cut, order).astype(np.float64)

    registry.register(Successes)
    try:
        x = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, 1.0]])
        labels = [0, 0, 1, 1]
        r = recallkit.retrieval_metrics(
            x, x, labels, labels, ["successes@2"], query_in_reference=True
        )
        assert r.per_query["successes@2"].tolist() == [1.0, 1.0, 1.0, 1.0]
        ev = recallkit.Evaluator(metrics=["successes@2", "recall@1"])
        ev.update(torch.from_numpy(x), torch.tensor(labels))
        assert dict(ev.compute()) == {"successes@2": 1.0, "recall@1": 0.5}
        from recallkit.pml import RecallCalculator

        calc = RecallCalculator(ks=(1,), include=("successes_at_2", "recall_at_1"))
        got = calc.get_accuracy(torch.from_numpy(x), torch.tensor(labels))
        assert got == {"successes_at_2": 1.0, "recall_at_1": 0.5}
        from recallkit.cli import main

        np.save(tmp_path / "e.npy", x)
        np.save(tmp_path / "l.npy", np.array(labels))
        assert (
            main(
                [
                    "evaluate",
                    "--embeddings",
                    str(tmp_path / "e.npy"),
                    "--labels",
                    str(tmp_path / "l.npy"),
                    "--ks",
                    "1",
                    "--metrics",
                    "successes@2",
                    "--json",
                    str(tmp_path / "r.json"),
                    "--quiet",
                ]
            )
            == 0
        )
        import json

        assert json.loads((tmp_path / "r.json").read_text())["metrics"] == {
            "recall@1": 0.5,
            "successes@2": 1.0,
        }
    finally:
        registry.unregister("successes")


def test_a_new_summary_metric_is_one_class_and_every_check_reads_it():
    """docs/development.md's recipe for a metric summarised otherwise than by the mean: its
    summary, direction and lone-query refusal are the class's, and every entry point, the
    averaging over classes and the registry-driven test lists pick it up."""

    class UpperRank(registry.MeanRank):
        family = "upper_rank"
        template = "Q3R"
        aliases = ("upper_quartile_rank",)
        peers = (("none", "a test metric"),)
        summary = "upper quartile"
        formula = "r + 1; the value is the floored upper quartile over queries"

        def summarize(self, values):  # over the last axis, as the mean's
            out = np.floor(np.quantile(values, 0.75, axis=-1))
            return float(out) if values.ndim == 1 else out

    registry.register(UpperRank)
    try:
        assert ("Q3R", "upper_rank", None) in registry_cases.cases()
        x = np.array([[1.0], [2.0], [3.0], [5.0], [4.0], [0.5]])
        labels = [0, 0, 1, 0, 1, 1]
        # Dot products, leave-one-out: 1-indexed first-hit ranks by a full sort on (-s, j).
        s = x @ x.T
        firsts = []
        for i in range(6):
            order = sorted((j for j in range(6) if j != i), key=lambda j: (-s[i, j], j))
            firsts.append(1 + [labels[j] for j in order].index(labels[i]))
        r = recallkit.retrieval_metrics(
            x, x, labels, labels, ["Q3R"], metric="dot", query_in_reference=True
        )
        assert r.per_query["Q3R"].tolist() == firsts
        assert r["Q3R"] == np.floor(np.quantile(firsts, 0.75))
        by_class = recallkit.retrieval_metrics(
            x, x, labels, labels, ["Q3R"], metric="dot", query_in_reference=True, average="class"
        )
        per = [
            np.floor(np.quantile([f for f, c in zip(firsts, labels, strict=True) if c == k], 0.75))
            for k in (0, 1)
        ]
        assert by_class["Q3R"] == (per[0] + per[1]) / 2
        with pytest.raises(ValueError, match=r"'lone_queries' parameter .* with Q3R"):
            recallkit.retrieval_metrics(
                x, x, labels, labels, ["Q3R"], query_in_reference=True, lone_queries="zero"
            )
        ev = recallkit.Evaluator(metrics=["Q3R"], metric="dot")
        ev.update(torch.from_numpy(x), torch.tensor(labels))
        assert dict(ev.compute()) == {"Q3R": r["Q3R"]}
        from recallkit.pml import RecallCalculator

        calc = RecallCalculator(ks=(1,), metric="dot", include=("upper_quartile_rank",))
        assert calc.get_accuracy(torch.from_numpy(x), labels) == {"upper_quartile_rank": r["Q3R"]}
    finally:
        registry.unregister("upper_rank")


def _doc_table(path, header):
    """The rows of the Markdown table whose header row starts with ``header``, as cells."""
    from pathlib import Path

    lines = Path(path).read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_docs_metric_table_and_cli_names_are_the_registry():
    """docs/metrics.md's table has a row for every registered metric, with its summary and its
    direction as the metric object declares them; docs/cli.md names every metric."""
    from pathlib import Path

    table = _doc_table("docs/metrics.md", "| metric |")
    rows = {row[0].split("`")[1]: row for row in table if row[0].startswith("`")}
    cli = Path("docs/cli.md").read_text(encoding="utf-8")
    for cls in registry.REGISTRY.values():
        metric = cls(1) if "{K}" in cls.template else cls()
        shown = cls.name_without_k or cls.template.replace("{K}", "K")
        assert shown in rows, f"docs/metrics.md has no row for {shown}"
        value, better = rows[shown][3], rows[shown][4]
        assert better == metric.direction, shown
        assert value.startswith("mean" if metric.summary == "mean" else "floor of the median")
        example = cls.name_without_k or cls.template.replace("{K}", "10")
        assert f"`{example}`" in cli, f"docs/cli.md does not name {example}"
