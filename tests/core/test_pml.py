"""The PML layer: ExactKNN inside AccuracyCalculator, and RecallCalculator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

import recallkit
from recallkit.exceptions import RecallkitWarning
from recallkit.pml import ExactKNN, RecallCalculator

CPU = torch.device("cpu")
METRICS = ("precision_at_1", "r_precision", "mean_average_precision_at_r", "mean_average_precision")


def test_exact_knn_matches_pml_default_on_tie_free_data():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((150, 6)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 15, size=150))
    # ExactKNN's default geometry is PML's default (FaissKNN, IndexFlatL2): Euclidean.
    ours = AccuracyCalculator(include=METRICS, k="max_bin_count", device=CPU, knn_func=ExactKNN())
    theirs = AccuracyCalculator(include=METRICS, k="max_bin_count", device=CPU)
    a = ours.get_accuracy(x[:60], labels[:60], x, labels, ref_includes_query=True)
    b = theirs.get_accuracy(x[:60], labels[:60], x, labels, ref_includes_query=True)
    assert a == pytest.approx(b, abs=1e-12)


def test_exact_knn_removes_own_row_not_duplicate():
    # Rows 0 and 1 are the same vector with labels 0 and 1; row 2 is far (label 0).
    # Query 0 (own row removed) finds row 1 first: precision_at_1 miss for query 0 and 1.
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    labels = torch.tensor([0, 1, 0])
    calc = AccuracyCalculator(include=("precision_at_1",), device=CPU, knn_func=ExactKNN())
    # Query 1 is lone (label 1 appears once) and left out. Query 0 misses: its duplicate row 1
    # has the other label. Query 2 (label 0) is at distance sqrt(2) from rows 0 and 1 and takes
    # row 0 (lower index): a hit. 1/2.
    assert calc.get_accuracy(x, labels)["precision_at_1"] == 0.5
    dist, idx = ExactKNN()(x, 2, x, True)
    assert idx.tolist() == [[1, 2], [0, 2], [0, 1]]
    # Euclidean distances: the duplicate at 0, row 2 at sqrt(2) (in float32).
    assert dist[0].tolist() == [0.0, float(np.float32(np.sqrt(2.0)))]
    dist, idx = ExactKNN(metric="cosine")(x, 2, x, True)
    assert idx.tolist() == [[1, 2], [0, 2], [0, 1]] and dist[0].tolist() == [1.0, 0.0]


def test_exact_knn_exclude_ids():
    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    _, idx = ExactKNN()(x[:1], 2, x, False, exclude_ids=(["a"], ["a", "a", "b", "c"]))
    assert idx.tolist() == [[2, 3]]


def test_recall_calculator_reports_recall_with_pml_semantics():
    # 1-D dot-product "embeddings" with a lone query (label 9 appears once).
    # Leave-one-out ranking (dot, ties to lower index), values 3, 2, 1, 1, 5:
    # q0 (3, a): order 4(5,c) 1(2,a) ... -> first hit rank 1.
    # q1 (2, a): order 4(c) 0(a) -> rank 1.   q2 (1, b): order 4(c) 0(a) 1(a) 3(b) -> rank 3.
    # q3 (1, b): order 4, 0, 1, 2(b) -> rank 3.   q4 (5, c): lone.
    x = torch.tensor([[3.0], [2.0], [1.0], [1.0], [5.0]])
    labels = ["a", "a", "b", "b", "c"]
    calc = RecallCalculator(ks=(1, 2, 4), metric="dot", device=CPU)
    out = calc.get_accuracy(x, labels, include=("recall_at_1", "recall_at_2", "recall_at_4"))
    assert out == {"recall_at_1": 0.0, "recall_at_2": 0.5, "recall_at_4": 1.0}
    # avg_of_avgs: per class a: hits@2 = (1, 1) -> 1; b: (0, 0) -> 0; mean 0.5.
    calc = RecallCalculator(ks=(2,), metric="dot", device=CPU, avg_of_avgs=True)
    assert calc.get_accuracy(x, labels, include=("recall_at_2",)) == {"recall_at_2": 0.5}


def test_recall_calculator_keeps_huge_labels_apart():
    big = 2**24
    x = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    labels = np.array([big, big + 1, big + 1, big], dtype=np.int64)
    calc = RecallCalculator(ks=(1,), device=CPU)
    out = calc.get_accuracy(x, labels, include=("precision_at_1", "recall_at_1"))
    # Each query's nearest neighbour has the other label: 0 for both metrics. Through a
    # float32 cast the two labels would merge and both metrics would read 1.
    assert out == {"precision_at_1": 0.0, "recall_at_1": 0.0}


def test_recall_calculator_separate_reference():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    ref = torch.tensor([[0.9, 0.1], [0.1, 0.9], [1.0, 1.0]])
    calc = RecallCalculator(ks=(1, 2), device=CPU)
    out = calc.get_accuracy(q, [0, 1], ref, [1, 0, 1], include=("recall_at_1", "recall_at_2"))
    # q0 (1,0): order 0 (label 1), 2, 1 (label 0) -> rank 2. q1: order 1 (label 0), 2 (label 1)
    # -> rank 1.
    assert out == {"recall_at_1": 0.0, "recall_at_2": 0.5}


# --- PML's default geometry, ties, zero rows, ref_includes_query ------------------------------

RANKING = ("precision_at_1", "r_precision", "mean_average_precision_at_r")


def _pml(knn_func=None):
    return AccuracyCalculator(include=RANKING, k="max_bin_count", device=CPU, knn_func=knn_func)


def test_default_geometry_is_pmls_euclidean():
    # Leave-one-out on [[10], [10], [20], [20]], labels [1, 0, 1, 0]. Euclidean: each item's
    # nearest is its twin at distance 0, which has the other label -> precision_at_1 0 (the
    # two farther items tie at distance 10, after the twin: no tie decides precision_at_1).
    # R = 1 for every query, so r_precision and MAP@R are precision_at_1 too.
    x = torch.tensor([[10.0], [10.0], [20.0], [20.0]])
    labels = torch.tensor([1, 0, 1, 0])
    expected = {"mean_average_precision_at_r": 0.0, "precision_at_1": 0.0, "r_precision": 0.0}
    assert _pml().get_accuracy(x, labels) == expected  # PML's own default (FaissKNN)
    assert _pml(ExactKNN()).get_accuracy(x, labels) == expected
    out = RecallCalculator(ks=(1,), device=CPU).get_accuracy(x, labels)
    assert out == {**expected, "recall_at_1": 0.0}
    # Cosine is one argument away. All four rows have cosine 1 with each other: every
    # neighbour ties and the lower index wins. q0 -> row 1 (label 0) miss; q1 -> row 0
    # (label 1) miss; q2 (label 1) -> row 0 (label 1) hit; q3 (label 0) -> row 0 miss: 1/4.
    cosine = {"mean_average_precision_at_r": 0.25, "precision_at_1": 0.25, "r_precision": 0.25}
    assert _pml(ExactKNN(metric="cosine")).get_accuracy(x, labels) == cosine
    out = RecallCalculator(ks=(1,), metric="cosine", device=CPU).get_accuracy(x, labels)
    assert out == {**cosine, "recall_at_1": 0.25}


def test_all_zero_embeddings_under_euclidean():
    # Every distance is 0: all neighbours tie and the lower reference index comes first.
    z = torch.zeros(4, 3)
    dist, idx = ExactKNN()(z, 3, z, True)
    assert idx.tolist() == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]
    assert dist.tolist() == [[0.0] * 3] * 4
    # Labels [1, 0, 1, 0]: q0 -> row 1 (0) miss; q1 -> row 0 (1) miss; q2 (1) -> row 0 hit;
    # q3 (0) -> row 0 (1) miss. precision_at_1 = recall@1 = 1/4; R = 1, so r_precision and
    # MAP@R are the same 1/4.
    labels = [1, 0, 1, 0]
    out = RecallCalculator(ks=(1, 2), device=CPU).get_accuracy(z, labels)
    assert out == {
        "mean_average_precision_at_r": 0.25,
        "precision_at_1": 0.25,
        "r_precision": 0.25,
        "recall_at_1": 0.25,
        # Top 2: q0 [1, 2] (labels 0, 1) hit; q1 [0, 2] (1, 1) miss; q2 [0, 1] hit;
        # q3 [0, 1] (1, 0) hit -> 3/4.
        "recall_at_2": 0.75,
    }


def test_zero_row_and_ref_includes_query_match_pml_default():
    # Reference rows: 0 [0, 0] A; 1 [5, 0] B; 2 [1, 0] B; 3 [0, 0] A (a duplicate of row 0);
    # 4 [6, 0] A. Queries: rows 0 and 1, ref_includes_query=True (own rows removed by index).
    x = torch.tensor([[0.0, 0.0], [5.0, 0.0], [1.0, 0.0], [0.0, 0.0], [6.0, 0.0]])
    labels = torch.tensor([0, 1, 1, 0, 0])
    # q0 (A): row 3 at 0 (A, the duplicate stays), row 2 at 1 (B), row 1 at 5, row 4 at 6.
    #   R = 3 - 1 = 2: top 2 = [A, B] -> precision_at_1 1, r_precision 1/2, AP@R 1/2.
    # q1 (B): row 4 at 1 (A), row 2 at 4 (B), rows 0 and 3 at 5 (both A: their tie decides
    #   nothing). R = 2 - 1 = 1: top 1 = [A] -> 0, 0, 0.
    expected = {"mean_average_precision_at_r": 0.25, "precision_at_1": 0.5, "r_precision": 0.25}
    args = (x[:2], labels[:2], x, labels, True)
    assert _pml().get_accuracy(*args) == expected
    assert _pml(ExactKNN()).get_accuracy(*args) == expected
    dist, idx = ExactKNN()(x[:2], 4, x, True)
    assert idx.tolist() == [[3, 2, 1, 4], [4, 2, 0, 3]]
    assert dist.tolist() == [[0.0, 1.0, 5.0, 6.0], [1.0, 4.0, 5.0, 5.0]]
    out = RecallCalculator(ks=(1, 2), device=CPU).get_accuracy(*args)
    # First-hit ranks: q0 0, q1 1 -> recall@1 1/2, recall@2 1.
    assert out == {**expected, "recall_at_1": 0.5, "recall_at_2": 1.0}
    # Without ref_includes_query each query finds itself at distance 0, as PML's default
    # computes it: both are hits. ExactKNN warns about it, unless told the copies are gallery
    # items.
    theirs = _pml().get_accuracy(x[:2], labels[:2], x, labels, False)
    assert theirs["precision_at_1"] == 1.0
    with pytest.warns(RecallkitWarning, match="ref_includes_query=True"):
        assert _pml(ExactKNN()).get_accuracy(x[:2], labels[:2], x, labels, False) == theirs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _pml(ExactKNN(keep_query_copies=True)).get_accuracy(
            x[:2], labels[:2], x, labels, False
        )
    assert out == theirs


def test_every_label_unique_gives_nan_like_pml():
    # max_bin_count - 1 = 0 neighbours: PML asks for k = 0 and every query is lone.
    x = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0]])
    labels = torch.tensor([0, 1, 2])
    theirs = _pml().get_accuracy(x, labels)
    ours = _pml(ExactKNN()).get_accuracy(x, labels)
    assert set(ours) == set(theirs) == set(RANKING)
    assert all(np.isnan(v) for v in [*ours.values(), *theirs.values()])
    dist, idx = ExactKNN()(x, 0, x, True)
    assert idx.shape == (3, 0) and dist.shape == (3, 0) and idx.dtype == torch.int64


# --- what RecallCalculator computes by default -------------------------------------------------


def test_recall_calculator_default_is_the_ranking_metrics_and_recall():
    x = torch.tensor([[0.0], [1.0], [3.0], [4.5], [6.0]])
    labels = [0, 0, 1, 0, 1]
    out = RecallCalculator(ks=(1, 2), device=CPU).get_accuracy(x, labels)
    # Leave-one-out, Euclidean; ties to the lower index:
    # q0 (0, A): 1 A, 2 B ...            first hit 0; R = 2, top 2 [A, B]
    # q1 (1, A): 0 A, 2 B ...            first hit 0; top 2 [A, B]
    # q2 (3, B): 3 A (1.5), 1 A (2), then 0 A and 4 B tie at 3 -> row 0 first: first hit 3
    # q3 (4.5, A): 2 B and 4 B tie at 1.5 (row 2 first), 1 A (3.5): first hit 2
    # q4 (6, B): 3 A (1.5), 2 B (3): first hit 1; R = 1.
    # precision_at_1 2/5; recall@2 3/5; r_precision and MAP@R: q0, q1 1/2 each, others 0 -> 1/5.
    assert out == pytest.approx(
        {
            "mean_average_precision_at_r": 0.2,
            "precision_at_1": 0.4,
            "r_precision": 0.2,
            "recall_at_1": 0.4,
            "recall_at_2": 0.6,
        },
        abs=1e-15,
    )
    assert list(out) == [
        "mean_average_precision_at_r",
        "precision_at_1",
        "r_precision",
        "recall_at_1",
        "recall_at_2",
    ]
    # exclude= narrows the default; other metrics (clustering too) are asked for by name.
    calc = RecallCalculator(ks=(1,), exclude=("r_precision",), device=CPU)
    assert set(calc.get_accuracy(x, labels)) == {
        "mean_average_precision_at_r",
        "precision_at_1",
        "recall_at_1",
    }
    calc = RecallCalculator(ks=(1,), include=("NMI", "recall_at_1"), device=CPU)
    assert set(calc.get_accuracy(x, labels)) == {"NMI", "recall_at_1"}


# --- errors name the call and the argument -----------------------------------------------------


def test_recall_calculator_errors_name_get_accuracy_and_the_argument():
    x = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0], [3.0, 1.0]])
    labels = [0, 0, 1, 1]
    calc = RecallCalculator(ks=(1,), device=CPU)
    where = "parameter of RecallCalculator.get_accuracy must be"
    with pytest.raises(ValueError, match=f"'query_labels' {where} of length 4.*Got 3"):
        calc.get_accuracy(x, labels[:3])
    with pytest.raises(ValueError, match=f"'reference_labels' {where} of length 4.*Got 5"):
        calc.get_accuracy(x[:2], labels[:2], x, [*labels, 1])
    with pytest.raises(ValueError, match=f"'reference' {where} of the query's dimension 2"):
        calc.get_accuracy(x, labels, x[:, :1], labels)
    with pytest.raises(ValueError, match=f"'query' {where} finite.*row 2"):
        calc.get_accuracy(torch.tensor([[0.0], [1.0], [float("nan")], [2.0]]), labels)
    with pytest.raises(ValueError, match=f"'reference' {where} non-zero rows.*row 1"):
        cosine = RecallCalculator(ks=(1,), metric="cosine", device=CPU)
        cosine.get_accuracy(x[:2], labels[:2], torch.tensor([[1.0, 0.0], [0.0, 0.0]]), [0, 1])
    with pytest.raises(ValueError, match=f"'reference' {where} the query's rows followed by"):
        calc.get_accuracy(x[:2], labels[:2], x.flip(0), labels, True)
    with pytest.raises(ValueError, match=f"'reference_labels' {where} to begin with"):
        calc.get_accuracy(x[:2], labels[:2], x, [1, 1, 0, 0], True)
    with pytest.raises(ValueError, match=f"'reference_labels' {where} given with 'reference'"):
        calc.get_accuracy(x, labels, x)
    with pytest.raises(ValueError, match=f"'include' {where} among the metrics.*'NMI'"):
        calc.get_accuracy(x, labels, include=("NMI",))


def test_exact_knn_errors_name_exact_knn():
    x = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="'query' parameter of ExactKNN must be non-zero rows"):
        ExactKNN(metric="cosine")(x, 1, x, True)
    with pytest.raises(ValueError, match="'k' parameter of ExactKNN must be a non-negative"):
        ExactKNN()(x, -1, x, True)
    with pytest.raises(ValueError, match="'reference' parameter of ExactKNN must be at least 3"):
        ExactKNN()(x, 1, x[:2], True)
    with pytest.raises(ValueError, match="'reference' parameter of ExactKNN must be finite"):
        ExactKNN()(x, 1, torch.tensor([[0.0, 1.0], [float("inf"), 0.0]]), False)
    with pytest.raises(ValueError, match="'chunk_size' parameter of ExactKNN"):
        ExactKNN(chunk_size=0)
    with pytest.raises(ValueError, match=r"'exclude_ids\[1\]' parameter of ExactKNN .* length 3"):
        ExactKNN()(x, 1, x, False, exclude_ids=(["a", "b", "c"], ["a"]))


def test_tiny_rows_under_cosine_are_rows_not_zero_vectors():
    # Norms of about 1e-20: their float32 squares underflow, their float64 squares do not.
    x = torch.tensor([[1e-20, 0.0], [0.0, 2e-20], [3e-21, 1e-21], [1.0, 1.0]])
    labels = [0, 1, 0, 1]
    # Cosine: row 2 ([3, 1] / sqrt(10)) is 0.949 from row 0, 0.316 from row 1, 0.894 from row
    # 3; row 3 is 0.707 from rows 0 and 1.
    _, idx = ExactKNN(metric="cosine")(x, 1, x, True)
    assert idx[:, 0].tolist() == [2, 3, 0, 2]
    out = RecallCalculator(ks=(1,), metric="cosine", device=CPU).get_accuracy(
        x, labels, include=("recall_at_1",)
    )
    # Hits: query 0 (row 2, label 0), query 1 (row 3, label 1), query 2 (row 0); query 3 misses.
    assert out == {"recall_at_1": 0.75}


def test_exact_knn_warns_where_pml_accepts_the_query_as_its_own_reference():
    # PML's contract: ref_includes_query=False with a reference equal to the query is a valid
    # call (each query finds itself, at distance 0). The drop-in computes it as PML does and
    # warns; RecallCalculator and recallkit's own functions refuse it.
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((12, 3)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 3, 12))
    calc = AccuracyCalculator(include=("precision_at_1",), k=1, device=CPU, knn_func=ExactKNN())
    pml = AccuracyCalculator(include=("precision_at_1",), k=1, device=CPU)
    for reference, what in ((x, "the query tensor itself"), (x.clone(), "first rows equal")):
        with pytest.warns(RecallkitWarning) as caught:
            got = calc.get_accuracy(x, labels, reference, labels)
        assert got == pml.get_accuracy(x, labels, reference, labels) == {"precision_at_1": 1.0}
        (warning,) = [w.message for w in caught if isinstance(w.message, RecallkitWarning)]
        assert warning.func == "ExactKNN" and warning.parameter == "ref_includes_query"
        assert what in str(warning)
        assert "ref_includes_query=True" in str(warning)
        assert "keep_query_copies=True" in str(warning)
    # Rows 0 and 1 of the reference equal queries 0 and 1; the rest differ: also warned.
    reference = torch.cat([x[:2], x[2:] + 1, x[:2]])
    ref_labels = torch.cat([labels, labels[:2]])
    with pytest.warns(RecallkitWarning, match="first rows equal"):
        calc.get_accuracy(x[:2], labels[:2], reference, ref_labels)
    # A reference that does not begin with the queries: no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calc.get_accuracy(x, labels, torch.cat([x[1:], x[:1]]), labels.roll(-1))
        # Leave-one-out as PML means it: each query's own row is removed.
        assert calc.get_accuracy(x, labels, x, labels, True)["precision_at_1"] < 1
        keep = AccuracyCalculator(
            include=("precision_at_1",), k=1, device=CPU, knn_func=ExactKNN(keep_query_copies=True)
        )
        assert keep.get_accuracy(x, labels, x, labels) == {"precision_at_1": 1.0}
    # RecallCalculator is not a drop-in: it refuses, naming its own call.
    ours = RecallCalculator(ks=(1,), device=CPU)
    for reference in (x, x.clone()):
        with pytest.raises(ValueError, match=r"RecallCalculator\.get_accuracy"):
            ours.get_accuracy(x, labels, reference, labels)
    # recallkit's own API refuses it too.
    with pytest.raises(ValueError, match="query_in_reference"):
        recallkit.recall_at_k(x, x, labels, labels, ks=(1,))


@pytest.mark.parametrize("seed", range(4))
def test_avg_of_avgs_and_return_per_class_equal_pmls_to_the_last_bit(seed):
    """PML's own AccuracyCalculator (on ExactKNN's neighbour lists, tie-free data) against
    RecallCalculator, which uses recallkit's average="class": bit for bit."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(60, 400))
    x = torch.from_numpy(rng.standard_normal((n, 5)))
    labels = torch.from_numpy(rng.integers(0, int(rng.integers(2, 40)), n))
    names = ("precision_at_1", "r_precision", "mean_average_precision_at_r")
    for per_class in (False, True):
        flags = dict(avg_of_avgs=not per_class, return_per_class=per_class)
        pml = AccuracyCalculator(
            include=names, k="max_bin_count", device=CPU, knn_func=ExactKNN(), **flags
        )
        ours = RecallCalculator(ks=(1,), include=names, device=CPU, **flags)
        want = pml.get_accuracy(x, labels, x, labels, ref_includes_query=True)
        got = ours.get_accuracy(x, labels, x, labels, ref_includes_query=True)
        assert got == want  # floats and per-class lists, bit for bit


def test_median_rank_per_class_is_the_mean_of_the_class_medians():
    # 1-D dot products, leave-one-out: the 1-indexed rank of each query's first relevant item
    # from a full sort on (-score, index), then VSE++'s floor of the median, per class.
    x = torch.tensor([[3.0], [2.0], [1.0], [1.0], [5.0], [0.5], [4.0]])
    labels = [0, 0, 1, 1, 2, 1, 2]
    s = (x @ x.T).numpy()
    firsts = []
    for i in range(len(x)):
        order = sorted((j for j in range(len(x)) if j != i), key=lambda j: (-s[i, j], j))
        firsts.append(1 + [labels[j] for j in order].index(labels[i]))
    per = {
        c: np.floor(np.median([f for f, k in zip(firsts, labels, strict=True) if k == c]))
        for c in (0, 1, 2)
    }
    calc = RecallCalculator(ks=(1,), metric="dot", include=("median_rank",), device=CPU)
    assert calc.get_accuracy(x, labels)["median_rank"] == np.floor(np.median(firsts))
    calc = RecallCalculator(
        ks=(1,), metric="dot", include=("median_rank",), device=CPU, avg_of_avgs=True
    )
    assert calc.get_accuracy(x, labels)["median_rank"] == sum(per.values()) / 3
    calc = RecallCalculator(
        ks=(1,), metric="dot", include=("median_rank",), device=CPU, return_per_class=True
    )
    assert calc.get_accuracy(x, labels)["median_rank"] == [per[0], per[1], per[2]]
