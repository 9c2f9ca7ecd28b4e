"""Contracts of docs/recipes/evaluation.py (the seed "Retrieval evaluation" document).

Expected values are computed by hand on tiny 1-D embeddings whose distances never tie (the
reasoning is written next to each case), or by the brute force below (float64, full stable sort
on (distance, index)), never by the recipes themselves. PML's default knn_func (faiss, squared
L2 in float32) ranks these small integer and half-integer coordinates exactly.
"""

from __future__ import annotations

import doctest
import math
import re
import runpy
from fractions import Fraction

import numpy as np
import pytest
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from docs.recipes import evaluation
from docs.recipes.evaluation import (
    _class_centroids,
    extract_embeddings,
    nearest_centroid_accuracy,
    parent_conditioned_accuracy,
    split_accuracy,
    synthetic_example,
    two_stream_accuracy,
)

CPU = torch.device("cpu")


def calculator(**kwargs) -> AccuracyCalculator:
    kwargs.setdefault("include", ("precision_at_1", "r_precision"))
    kwargs.setdefault("k", None)  # every reference row: R-precision is exact
    return AccuracyCalculator(device=CPU, **kwargs)


def column(*xs: float) -> torch.Tensor:
    """1-D points as an (N, 1) float32 embedding tensor."""
    return torch.tensor([[float(x)] for x in xs])


# ----------------------------------------------------------------------------------------------
# Independent brute force and an exact, tie-breaking knn_func for the random property tests
# ----------------------------------------------------------------------------------------------


def brute_force(query, query_labels, reference, reference_labels, self_in_reference):
    """precision@1 and R-precision (Musgrave et al. 2020) over non-lone queries, in float64.

    Candidates of query i: every reference row, minus row i when the query is the reference's
    first rows. They are ranked by a full stable sort on (squared distance, index). R is the
    number of candidates with the query's label; a query with R = 0 is lone and left out.
    """
    q = np.asarray(query, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    p1, rp = [], []
    for i in range(len(q)):
        candidates = [j for j in range(len(r)) if not (self_in_reference and j == i)]
        dist = {j: float(((q[i] - r[j]) ** 2).sum()) for j in candidates}
        ranked = sorted(candidates, key=lambda j: (dist[j], j))
        same = [reference_labels[j] == query_labels[i] for j in ranked]
        num_relevant = sum(same)
        if num_relevant == 0:
            continue
        p1.append(float(same[0]))
        rp.append(sum(same[:num_relevant]) / num_relevant)
    if not p1:
        return math.nan, math.nan
    return sum(p1) / len(p1), sum(rp) / len(rp)


class StableKNN:
    """knn_func with PML's call signature: exact squared L2 in float64, ties by lower index.

    With ref_includes_query, row i of the reference is removed from query i's candidates by
    index (as PML does), so k columns come back either way.
    """

    def __call__(self, query, k, reference, ref_includes_query=False):
        q, r = query.double(), reference.double()
        dist = ((q[:, None, :] - r[None, :, :]) ** 2).sum(-1)
        if ref_includes_query:
            idx = torch.arange(len(q))
            dist[idx, idx] = math.inf  # sorts after every real candidate, dropped below
        order = torch.sort(dist, dim=1, stable=True).indices
        # Stable sort keeps equal distances in index order: ties break by lower reference index.
        order = order[:, :k]
        return torch.gather(dist, 1, order).float(), order


# ----------------------------------------------------------------------------------------------
# extract_embeddings
# ----------------------------------------------------------------------------------------------


class Recorder(torch.nn.Module):
    """A linear map that records whether inference mode was on for each call."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2, bias=False, dtype=dtype)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=dtype))
        self.inference_flags: list[bool] = []

    def forward(self, x):
        self.inference_flags.append(torch.is_inference_mode_enabled())
        return self.linear(x)


def loader_of(data, labels, batch_size=2):
    from torch.utils.data import DataLoader, TensorDataset

    return DataLoader(TensorDataset(data, labels), batch_size=batch_size, shuffle=False)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extract_embeddings_order_normalisation_and_untouched_model(training, dtype):
    model = Recorder(dtype).train(training)
    # The model maps (a, b) to (a, 2b): rows become (3, 4), (0, 2), (5, 0), (1, 0), (0, 0.5);
    # L2-normalised: (0.6, 0.8), (0, 1), (1, 0), (1, 0), (0, 1). Batches of 2: 3 calls.
    data = torch.tensor([[3.0, 2.0], [0.0, 1.0], [5.0, 0.0], [1.0, 0.0], [0.0, 0.25]], dtype=dtype)
    labels = torch.tensor([4, 4, 2, 9, 2])
    embeddings, out_labels = extract_embeddings(model, loader_of(data, labels))
    expected = torch.tensor([[0.6, 0.8], [0, 1], [1, 0], [1, 0], [0, 1]], dtype=dtype)
    assert torch.allclose(embeddings, expected, rtol=0, atol=1e-7)
    assert embeddings.dtype == dtype
    assert out_labels.tolist() == [4, 4, 2, 9, 2]
    assert model.inference_flags == [True, True, True]
    assert not embeddings.requires_grad
    # Mode, dtype and device of the model are as they were.
    assert model.training is training
    assert model.linear.weight.dtype == dtype
    assert model.linear.weight.device == CPU
    assert model.linear.weight.requires_grad

    raw, _ = extract_embeddings(model, loader_of(data, labels), normalize=False)
    expected_raw = torch.tensor([[3, 4], [0, 2], [5, 0], [1, 0], [0, 0.5]], dtype=dtype)
    assert torch.equal(raw, expected_raw)


def test_extract_embeddings_string_labels_and_device():
    batches = [
        (torch.tensor([[1.0, 0.0]]), ["cat"]),
        (torch.tensor([[0.0, 3.0], [4.0, 3.0]]), ("dog", "cat")),
    ]
    embeddings, labels = extract_embeddings(torch.nn.Identity(), batches, device="cpu")
    assert labels == ["cat", "dog", "cat"]
    assert torch.allclose(embeddings, torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6]]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_extract_embeddings_cuda_model_stays_on_cuda():
    model = Recorder().cuda()
    data = torch.tensor([[3.0, 2.0], [0.0, 1.0]])
    embeddings, _ = extract_embeddings(model, loader_of(data, torch.tensor([0, 1])), device="cuda")
    assert embeddings.device.type == "cuda"
    assert model.linear.weight.device.type == "cuda"


def test_extract_embeddings_bad_input():
    with pytest.raises(ValueError, match="'loader' parameter of extract_embeddings must yield"):
        extract_embeddings(torch.nn.Identity(), [])
    with pytest.raises(ValueError, match=r"'loader' parameter .* pairs. Got Tensor as batch 0"):
        extract_embeddings(torch.nn.Identity(), [torch.zeros(2, 2)])
    with pytest.raises(ValueError, match=r"'model' parameter .* row per label \(3 in batch 0\)"):
        extract_embeddings(torch.nn.Identity(), [(torch.zeros(2, 2), torch.tensor([0, 1, 2]))])
    with pytest.raises(ValueError, match=r"'model' parameter .* Got shape \(2,\)"):
        extract_embeddings(torch.nn.Identity(), [(torch.zeros(2), torch.tensor([0, 1]))])


# ----------------------------------------------------------------------------------------------
# split_accuracy: the three compositions of the seed's table
# ----------------------------------------------------------------------------------------------

# val: five points on a line; "c" at 30 has no other "c" anywhere, so it is a lone query in every
# composition and is left out (4 evaluated queries, hence exact binary fractions).
VAL = (column(0, 3, 4, 10, 30), ["a", "a", "b", "b", "c"])
# train gallery at half-integers, so no train distance ever ties a val distance.
TRAIN = (column(0.5, 1.5, 8.5), ["b", "a", "a"])


def test_leave_one_out_within_val():
    # Reference = val, each query's own row removed.
    # 0(a):  3a(d3) 4b 10b 30c -> top-1 a: hit.  R = 1 (only 3 is another a): [a] -> 1
    # 3(a):  4b(d1) 0a(d3) ...  -> miss.          R = 1: [b] -> 0
    # 4(b):  3a(d1) 0a(d4) 10b  -> miss.          R = 1: [a] -> 0
    # 10(b): 4b(d6) 3a(d7) ...  -> hit.           R = 1: [b] -> 1
    # precision_at_1 = 2/4, r_precision = 2/4.
    result = split_accuracy(calculator(), VAL, [], query_in_reference=True)
    assert result == {"precision_at_1": 0.5, "r_precision": 0.5}


def test_val_against_train_gallery():
    # Reference = train only; no self-match.
    # 0(a):  0.5b 1.5a 8.5a -> miss.  R = 2 (two a in train): [b, a] -> 1/2
    # 3(a):  1.5a(d1.5) 0.5b(d2.5) 8.5a -> hit.  R = 2: [a, b] -> 1/2
    # 4(b):  1.5a(d2.5) 0.5b(d3.5) 8.5a(d4.5) -> miss.  R = 1: [a] -> 0
    # 10(b): 8.5a(d1.5) 1.5a 0.5b -> miss.  R = 1: [a] -> 0
    # precision_at_1 = 1/4, r_precision = (1/2 + 1/2) / 4 = 1/4.
    result = split_accuracy(calculator(), VAL, [TRAIN], query_in_reference=False)
    assert result == {"precision_at_1": 0.25, "r_precision": 0.25}


def test_val_against_val_union_train_excluding_each_query():
    # Reference = val (first) then train; each query's own row removed.
    # 0(a):  0.5b 1.5a 3a 4b 8.5a ... -> miss.  R = 3 (3, 1.5, 8.5): [b, a, a] -> 2/3
    # 3(a):  4b(d1) 1.5a(d1.5) 0.5b(d2.5) 0a(d3) ... -> miss.  R = 3: [b, a, b] -> 1/3
    # 4(b):  3a(d1) 1.5a(d2.5) 0.5b(d3.5) ... -> miss.  R = 2 (0.5, 10): [a, a] -> 0
    # 10(b): 8.5a(d1.5) 4b(d6) 3a(d7) ... -> miss.  R = 2: [a, b] -> 1/2
    # precision_at_1 = 0, r_precision = (2/3 + 1/3 + 0 + 1/2) / 4 = 3/8.
    result = split_accuracy(calculator(), VAL, [TRAIN], query_in_reference=True)
    assert result["precision_at_1"] == 0.0
    assert result["r_precision"] == pytest.approx(3 / 8, rel=1e-15)


def test_equal_splits_are_not_self_matches_without_the_flag():
    # The "gallery" is a copy of val, passed with query_in_reference=False: a separate gallery.
    # Every query finds its own copy at distance 0 (a hit), and "c" is no longer lone.
    # R-precision, R = the query's label count in the gallery (its copy included):
    # 0(a):  R=2 [0a, 3a] -> 1;  3(a): R=2 [3a, 4b] -> 1/2;  4(b): R=2 [4b, 3a] -> 1/2;
    # 10(b): R=2 [10b, 4b] -> 1;  30(c): R=1 [30c] -> 1.   Mean = 4/5.
    copy = (VAL[0].clone(), list(VAL[1]))
    result = split_accuracy(calculator(), VAL, [copy], query_in_reference=False)
    assert result["precision_at_1"] == 1.0
    assert result["r_precision"] == pytest.approx(4 / 5, rel=1e-15)
    # The same tensors passed as the query itself are not self-matches either.
    result = split_accuracy(calculator(), VAL, [VAL], query_in_reference=False)
    assert result["precision_at_1"] == 1.0


def test_several_reference_splits_follow_in_order():
    # val ∪ train ∪ extra, excluding each query. "extra" adds a "c" at 29, so 30(c) is evaluated:
    # its nearest is 29c -> hit, R = 1 -> 1. The other four queries are unchanged from the
    # val ∪ train case (29 is farther than every candidate they use): p@1 = 1/5, and
    # r_precision = (2/3 + 1/3 + 0 + 1/2 + 1) / 5 = 1/2.
    extra = (column(29), ["c"])
    result = split_accuracy(calculator(), VAL, [TRAIN, extra], query_in_reference=True)
    assert result["precision_at_1"] == pytest.approx(1 / 5, rel=1e-15)
    assert result["r_precision"] == pytest.approx(1 / 2, rel=1e-15)


class RecordingCalculator:
    """Duck-typed calculator: records what the recipe passes and returns a fixed dictionary."""

    def __init__(self):
        self.calls = []

    def get_accuracy(self, query, query_labels, reference, reference_labels, ref_includes_query):
        self.calls.append((query, query_labels, reference, reference_labels, ref_includes_query))
        return {"calls": len(self.calls)}


def test_composition_passed_to_the_calculator():
    recorder = RecordingCalculator()
    split_accuracy(recorder, VAL, [TRAIN], query_in_reference=True)
    _, query_labels, reference, reference_labels, flag = recorder.calls[0]
    assert flag is True
    assert torch.equal(reference, torch.cat([VAL[0], TRAIN[0]]))  # the query goes first
    # Dense int64 codes in first-appearance order over val then train: a=0, b=1, c=2.
    assert query_labels.dtype == torch.int64
    assert query_labels.tolist() == [0, 0, 1, 1, 2]
    assert reference_labels.tolist() == [0, 0, 1, 1, 2, 1, 0, 0]

    split_accuracy(recorder, VAL, [TRAIN], query_in_reference=False)
    _, _, reference, reference_labels, flag = recorder.calls[1]
    assert flag is False
    assert torch.equal(reference, TRAIN[0])
    assert reference_labels.tolist() == [1, 0, 0]


def test_sparse_identifiers_above_2_pow_24_stay_distinct():
    # float32 cannot tell 2**24 from 2**24 + 1, so PML alone would merge the two classes.
    a, b = 2**24, 2**24 + 1
    embeddings = column(0, 2, 3, 9)
    labels = torch.tensor([a, a, b, b])
    # Leave-one-out, k=1: 0a->2a hit; 2a->3b miss; 3b->2a miss; 9b->3b hit: 2/4.
    result = split_accuracy(calculator(), (embeddings, labels), [], query_in_reference=True)
    assert result["precision_at_1"] == 0.5
    # What raw identifiers would do inside PML: one class, every neighbour a "hit".
    raw = calculator().get_accuracy(embeddings, labels, embeddings, labels, True)
    assert raw["precision_at_1"] == 1.0


def test_numpy_inputs_and_string_labels_equal_tensor_inputs():
    val = (VAL[0].numpy(), np.array(VAL[1]))
    train = (TRAIN[0].numpy(), tuple(TRAIN[1]))
    result = split_accuracy(calculator(), val, [train], query_in_reference=False)
    assert result == {"precision_at_1": 0.25, "r_precision": 0.25}


def test_subclassed_calculator_with_extra_metric():
    class WithRecallAt2(AccuracyCalculator):
        """Adds recall_at_2 (a hit in the 2 nearest) the way PML discovers metrics."""

        def requires_knn(self):
            return [*super().requires_knn(), "recall_at_2"]

        def calculate_recall_at_2(self, knn_labels, query_labels, not_lone_query_mask, **kw):
            hits = (knn_labels[:, :2] == query_labels[:, None]).any(dim=1)
            return hits[not_lone_query_mask].double().mean().item()

    calc = WithRecallAt2(include=("precision_at_1", "recall_at_2"), k=None, device=CPU)
    # Leave-one-out within val (see test_leave_one_out_within_val for the neighbour lists):
    # top-2: 0a:[3a,4b] hit; 3a:[4b,0a] hit; 4b:[3a,0a] miss; 10b:[4b,3a] hit -> 3/4.
    result = split_accuracy(calc, VAL, [], query_in_reference=True)
    assert result == {"precision_at_1": 0.5, "recall_at_2": 0.75}


def test_recallkit_recall_calculator():
    pml = pytest.importorskip("recallkit.pml")
    include = ("precision_at_1", "recall_at_1", "recall_at_2")
    calc = pml.RecallCalculator(ks=(1, 2), include=include, metric="euclidean", device=CPU)
    # Same neighbour lists as test_leave_one_out_within_val and test_subclassed_calculator...
    result = split_accuracy(calc, VAL, [], query_in_reference=True)
    assert result["precision_at_1"] == 0.5
    assert result["recall_at_1"] == 0.5
    assert result["recall_at_2"] == 0.75
    # ... and test_val_against_train_gallery: top-2 hits 0a:[b,a] 3a:[a,b] 4b:[a,b] 10b:[a,a].
    result = split_accuracy(calc, VAL, [TRAIN], query_in_reference=False)
    assert (result["recall_at_1"], result["recall_at_2"]) == (0.25, 0.75)


@pytest.mark.parametrize("seed", range(12))
def test_split_compositions_match_brute_force_with_ties_and_duplicates(seed):
    # Small-integer embeddings in 2-D: duplicate rows and exactly tied distances are common.
    # Labels are sparse identifiers above 2**24 with a rare class, so lone queries occur.
    gen = torch.Generator().manual_seed(seed)
    ids = [2**24 + 1, 2**24 + 2, 2**24 + 3, 7]
    weights = torch.tensor([4.0, 4.0, 3.0, 1.0])

    def split(n):
        emb = torch.randint(-2, 3, (n, 2), generator=gen).float()
        labels = [ids[i] for i in torch.multinomial(weights, n, True, generator=gen).tolist()]
        return emb, labels

    val, train = split(9), split(11)
    calc = calculator(knn_func=StableKNN())
    cases = [([], True, val), ([train], False, train), ([train], True, None)]
    for references, flag, reference in cases:
        if reference is None:
            reference = (torch.cat([val[0], train[0]]), val[1] + train[1])
        expected = brute_force(val[0], val[1], reference[0], reference[1], flag)
        result = split_accuracy(calc, val, references, query_in_reference=flag)
        got = (result["precision_at_1"], result["r_precision"])
        if math.isnan(expected[0]):
            assert all(math.isnan(x) for x in got)
        else:
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


# ----------------------------------------------------------------------------------------------
# nearest_centroid_accuracy
# ----------------------------------------------------------------------------------------------

CENTROID_REFERENCE = torch.tensor([[0.0, 0.0], [2.0, 0.0], [6.0, 0.0], [8.0, 0.0]])
CENTROID_QUERY = torch.tensor([[0.5, 0.0], [3.0, 0.0], [5.0, 0.0]])


def test_nearest_centroid_seed_example_is_exactly_two_thirds():
    # Centroids: class 0 = mean(0, 2) = 1, class 1 = mean(6, 8) = 7 (on the x axis).
    # 0.5 (class 0): 1 at d0.5 -> correct.  3 (class 1): 1 at d2 vs 7 at d4 -> wrong.
    # 5 (class 1): 7 at d2 vs 1 at d4 -> correct.  precision_at_1 = 2/3.
    reference = torch.tensor([[0.0, 0.0], [2.0, 0.0], [6.0, 0.0], [8.0, 0.0]])
    reference_labels = torch.tensor([0, 0, 1, 1])
    query = torch.tensor([[0.5, 0.0], [3.0, 0.0], [5.0, 0.0]])
    query_labels = torch.tensor([0, 1, 1])
    calc = AccuracyCalculator(include=("precision_at_1",))
    accuracy = nearest_centroid_accuracy(calc, (query, query_labels), (reference, reference_labels))
    assert accuracy["precision_at_1"] == 2 / 3


def test_nearest_centroid_lone_query_and_class_weighting():
    # A fourth query of class "z" (no reference of that class) is lone and left out: still 2/3.
    # Same points as the seed example, with string labels.
    query = (torch.cat([CENTROID_QUERY, torch.tensor([[7.0, 0.0]])]), ["p", "q", "q", "z"])
    reference = (CENTROID_REFERENCE, ["p", "p", "q", "q"])
    result = nearest_centroid_accuracy(calculator(include=("precision_at_1",)), query, reference)
    assert result["precision_at_1"] == pytest.approx(2 / 3, rel=1e-15)
    # avg_of_avgs: class p: 1/1, class q: 1/2 -> (1 + 1/2) / 2 = 3/4.
    calc = calculator(include=("precision_at_1",), avg_of_avgs=True)
    assert nearest_centroid_accuracy(calc, query, reference)["precision_at_1"] == 0.75


def test_nearest_centroid_passes_centroids_in_the_reference_dtype():
    recorder = RecordingCalculator()
    reference = (torch.tensor([[1.0], [2.0], [4.0], [10.0]], dtype=torch.float16), [5, 9, 5, 5])
    nearest_centroid_accuracy(recorder, (column(3), [9]), reference)
    _, query_labels, centroids, classes, flag = recorder.calls[0]
    # Dense codes over query then reference labels: 9 -> 0, 5 -> 1. Centroids sorted by code:
    # code 0 (label 9) = 2; code 1 (label 5) = (1 + 4 + 10) / 3 = 5.
    assert flag is False
    assert centroids.dtype == torch.float16
    assert centroids.device == CPU
    assert classes.tolist() == [0, 1]
    assert centroids.flatten().tolist() == [2.0, 5.0]
    assert query_labels.tolist() == [0]


def test_class_centroids_accumulate_in_float64():
    # 60000 + 60000 = 120000 overflows float16 (max 65504); the mean 60000 is representable
    # (float16 spacing is 32 there and 60000 = 1875 * 32). A float16 sum would give inf.
    embeddings = torch.tensor([[60000.0, 1.0], [60000.0, 2.0], [-3.0, 0.5]], dtype=torch.float16)
    centroids, classes = _class_centroids(embeddings, torch.tensor([4, 4, 1]))
    assert classes.tolist() == [1, 4]
    assert centroids.dtype == torch.float16
    assert centroids.tolist() == [[-3.0, 0.5], [60000.0, 1.5]]


def test_class_centroids_in_chunks(monkeypatch):
    # One row per chunk: mean of 1, 2, 4 for class 0 is 7/3 (float64, then float32).
    monkeypatch.setattr(evaluation, "_CENTROID_CHUNK_BYTES", 8)
    embeddings = torch.tensor([[1.0], [5.0], [2.0], [4.0]])
    centroids, classes = _class_centroids(embeddings, torch.tensor([0, 1, 0, 0]))
    assert classes.tolist() == [0, 1]
    assert centroids.tolist() == [[torch.tensor(7 / 3, dtype=torch.float32).item()], [5.0]]


@pytest.mark.parametrize("seed", range(6))
def test_nearest_centroid_matches_brute_force(seed):
    gen = torch.Generator().manual_seed(100 + seed)
    reference = torch.randint(-3, 4, (12, 2), generator=gen).float()
    reference_labels = torch.randint(0, 4, (12,), generator=gen).tolist()
    query = torch.randint(-3, 4, (7, 2), generator=gen).float()
    query_labels = torch.randint(0, 5, (7,), generator=gen).tolist()  # 4 may be absent: lone
    # Brute force: float64 class means, centroids in sorted class order (the recipe's order
    # for integer labels), then precision@1 with ties to the lower class.
    classes = sorted(set(reference_labels))
    ref64 = reference.double().numpy()
    means = [
        ref64[[i for i, y in enumerate(reference_labels) if y == c]].mean(axis=0) for c in classes
    ]
    # The recipe hands PML centroids in the reference's dtype (float32): rank those.
    centroids = np.stack(means).astype(np.float32).astype(np.float64)
    expected = brute_force(query.double().numpy(), query_labels, centroids, classes, False)
    calc = calculator(knn_func=StableKNN(), include=("precision_at_1",))
    result = nearest_centroid_accuracy(
        calc, (query, query_labels), (reference, torch.tensor(reference_labels))
    )
    if math.isnan(expected[0]):
        assert math.isnan(result["precision_at_1"])
    else:
        assert result["precision_at_1"] == pytest.approx(expected[0], rel=1e-12)


# ----------------------------------------------------------------------------------------------
# two_stream_accuracy
# ----------------------------------------------------------------------------------------------


def test_two_stream_pairs_only():
    # labels = row index: anchor i's only match is reference i.
    # 0 -> 1(ref 0, d1) hit; 4 -> 6(ref 1, d2) vs 1(d3) hit; 10 -> 6(ref 1, d4) vs 15(d5) miss.
    result = two_stream_accuracy(
        calculator(include=("precision_at_1",)),
        column(0, 4, 10),
        column(1, 6, 15),
        [0, 1, 2],
    )
    assert result["precision_at_1"] == pytest.approx(2 / 3, rel=1e-15)


def test_two_stream_class_labels():
    # Anchors 0a 2a 10b 12b; references (same labels, row by row) 1a 9a 4b 13b.
    # 0(a):  1a 4b 9a 13b -> hit; R = 2: [a, b] -> 1/2
    # 2(a):  1a(d1) 4b(d2) 9a 13b -> hit; R = 2: [a, b] -> 1/2
    # 10(b): 9a(d1) 13b(d3) 4b(d6) -> miss; R = 2: [a, b] -> 1/2
    # 12(b): 13b(d1) 9a(d3) 4b(d8) -> hit; R = 2: [b, a] -> 1/2
    # Nothing is removed: every reference row is a candidate of every anchor.
    labels = torch.tensor([3, 3, 8, 8])
    result = two_stream_accuracy(calculator(), column(0, 2, 10, 12), column(1, 9, 4, 13), labels)
    assert result == {"precision_at_1": 0.75, "r_precision": 0.5}
    recorder = RecordingCalculator()
    two_stream_accuracy(recorder, column(0, 2, 10, 12), column(1, 9, 4, 13), labels)
    _, query_labels, reference, reference_labels, flag = recorder.calls[0]
    assert flag is False
    assert torch.equal(reference, column(1, 9, 4, 13))
    assert query_labels.tolist() == reference_labels.tolist() == [0, 0, 1, 1]


# ----------------------------------------------------------------------------------------------
# parent_conditioned_accuracy
# ----------------------------------------------------------------------------------------------

# (x, fine, mid, coarse): finest to coarsest. Pairwise distances never tie within a group.
HIERARCHY = [
    (0, "cat", "feline", "animal"),
    (-7, "lion", "feline", "animal"),
    (9, "cat", "feline", "animal"),
    (11, "dog", "canine", "animal"),
    (17, "wolf", "canine", "animal"),
    (24, "dog", "canine", "animal"),
    (40, "car", "road", "vehicle"),
    (41, "car", "road", "vehicle"),
    (43, "truck", "road", "vehicle"),
    (47, "car", "road", "vehicle"),
    (60, "tram", "rail", "vehicle"),
]
H_EMB = column(*(row[0] for row in HIERARCHY))
H_LABELS = [row[1:] for row in HIERARCHY]

# Leave-one-out, by hand.
# Level 0 (fine label within each mid group):
#   feline {0 cat, -7 lion, 9 cat}: lion is lone.
#     0 cat: -7 lion(d7), 9 cat(d9) -> miss; R = 1: [lion] -> 0
#     9 cat: 0 cat(d9), -7 lion(d16) -> hit; R = 1 -> 1   (globally 11 dog at d2 would miss)
#     group: p@1 = 1/2, RP = 1/2
#   canine {11 dog, 17 wolf, 24 dog}: wolf is lone.
#     11 dog: 17 wolf(d6) -> miss, RP 0;  24 dog: 17 wolf(d7) -> miss, RP 0.  group: 0, 0
#   road {40 car, 41 car, 43 truck, 47 car}: truck is lone.
#     40 car: 41 car, 43 truck, 47 car -> hit; R = 2: [car, truck] -> 1/2
#     41 car: 40 car, 43 truck, 47 car -> hit; R = 2 -> 1/2
#     47 car: 43 truck(d4), 41 car(d6), 40 car -> miss; R = 2: [truck, car] -> 1/2
#     group: p@1 = 2/3, RP = 1/2
#   rail {60 tram}: only lone queries, so the group is left out.
#   level 0: p@1 = (1/2 + 0 + 2/3) / 3 = 7/18, RP = (1/2 + 0 + 1/2) / 3 = 1/3
#   (a mean over the 7 evaluated queries would give 3/7 and 5/14 instead).
# Level 1 (mid label within each coarse group):
#   animal {0 f, -7 f, 9 f, 11 c, 17 c, 24 c}, R = 2 for every query:
#     0:  -7 f, 9 f -> hit, RP 1;      -7: 0 f, 9 f -> hit, RP 1
#     9:  11 c(d2), 17 c(d8) -> miss, RP 0
#     11: 9 f(d2), 17 c(d6) -> miss, RP 1/2
#     17: 11 c(d6), 24 c(d7) -> hit, RP 1;    24: 17 c, 11 c -> hit, RP 1
#     group: p@1 = 4/6 = 2/3, RP = 4.5/6 = 3/4
#   vehicle {40, 41, 43, 47 road; 60 rail}: rail is lone; each road query has the 3 other roads
#     nearer than 60: p@1 = 1, RP = 1.
#   level 1: p@1 = (2/3 + 1) / 2 = 5/6, RP = (3/4 + 1) / 2 = 7/8
# AVERAGE: p@1 = (7/18 + 5/6) / 2 = 11/18, RP = (1/3 + 7/8) / 2 = 29/48.
H_EXPECTED = {
    "precision_at_1_level0": Fraction(7, 18),
    "precision_at_1_level1": Fraction(5, 6),
    "AVERAGE_precision_at_1": Fraction(11, 18),
    "r_precision_level0": Fraction(1, 3),
    "r_precision_level1": Fraction(7, 8),
    "AVERAGE_r_precision": Fraction(29, 48),
}


def _codes(labels):
    """Integer (N, L) tensor with distinct ids per column (a different label form)."""
    columns = list(zip(*labels, strict=True))
    ids = [
        {v: 1000 * level + i for i, v in enumerate(dict.fromkeys(c))}
        for level, c in enumerate(columns)
    ]
    return torch.tensor([[ids[level][v] for level, v in enumerate(row)] for row in labels])


@pytest.mark.parametrize("form", ["tuples", "tensor", "numpy_strings"])
def test_parent_conditioned_leave_one_out(form):
    labels = {
        "tuples": H_LABELS,
        "tensor": _codes(H_LABELS),
        "numpy_strings": np.array(H_LABELS),
    }[form]
    result = parent_conditioned_accuracy(calculator(), (H_EMB, labels), [], True)
    assert list(result) == list(H_EXPECTED)
    for key, value in H_EXPECTED.items():
        assert result[key] == pytest.approx(float(value), rel=1e-14), key


def test_parent_conditioned_against_a_gallery():
    # Two levels (fine, coarse): one evaluated level, so no AVERAGE key.
    # query: 0 cat/animal, 10 car/vehicle, 13 bus/vehicle, 30 horse/animal (no horse: lone)
    # gallery: 5 dog/animal, 3 cat/animal, 1 car/vehicle, 12 bus/vehicle, 15 car/vehicle
    # animal group: 0 cat vs {5 dog, 3 cat}: 3 cat(d3) -> hit, R = 1 -> 1
    #   (globally 1 car at d1 would be the nearest: the vehicle is not a candidate here)
    # vehicle group: 10 car vs {1 car, 12 bus, 15 car}: 12 bus(d2) -> miss; R = 2: [bus, car] -> 1/2
    #                13 bus: 12 bus(d1) -> hit; R = 1 -> 1.   group: p@1 = 1/2, RP = 3/4
    # level 0: p@1 = (1 + 1/2) / 2 = 3/4, RP = (1 + 3/4) / 2 = 7/8
    query = (
        column(0, 10, 13, 30),
        [("cat", "animal"), ("car", "vehicle"), ("bus", "vehicle"), ("horse", "animal")],
    )
    gallery = (
        column(5, 3, 1, 12, 15),
        [
            ("dog", "animal"),
            ("cat", "animal"),
            ("car", "vehicle"),
            ("bus", "vehicle"),
            ("car", "vehicle"),
        ],
    )
    result = parent_conditioned_accuracy(calculator(), query, [gallery], False)
    assert result == {"precision_at_1_level0": 0.75, "r_precision_level0": 0.875}


def test_parent_conditioned_level_with_only_lone_queries_is_nan():
    # Every fine label is unique within its parent: nothing to evaluate at level 0 -> NaN.
    # Level 1: 0 and 1 (x) vs 5 (y): 0 -> 1 x hit; 1 -> 0 x hit; 5 (y) is lone. p@1 = 1.
    labels = [("a", "x", "top"), ("b", "x", "top"), ("c", "y", "top")]
    calc = calculator(include=("precision_at_1",))
    result = parent_conditioned_accuracy(calc, (column(0, 1, 5), labels), [], True)
    assert math.isnan(result["precision_at_1_level0"])
    assert result["precision_at_1_level1"] == 1.0
    assert math.isnan(result["AVERAGE_precision_at_1"])


# ----------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument
# ----------------------------------------------------------------------------------------------

GOOD = (column(0, 1, 2), [0, 0, 1])
NAN = torch.tensor([[0.0], [math.nan], [2.0]])
INF = torch.tensor([[0.0], [1.0], [math.inf]])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # mismatched embedding / label lengths
        (
            lambda c: split_accuracy(c, (column(0, 1), [0, 0, 1]), [], True),
            r"'query' parameter of split_accuracy must pair .* Got 2 embeddings and 3 labels",
        ),
        (
            lambda c: split_accuracy(c, GOOD, [(column(0, 1), [0])], False),
            r"'references\[0\]' parameter of split_accuracy must pair",
        ),
        (
            lambda c: nearest_centroid_accuracy(c, GOOD, (column(0, 1), [0, 1, 1])),
            r"'reference' parameter of nearest_centroid_accuracy must pair",
        ),
        (
            lambda c: two_stream_accuracy(c, column(0, 1), column(2, 3), [0]),
            r"'labels' parameter of two_stream_accuracy must pair .* 2 embeddings and 1 labels",
        ),
        (
            lambda c: two_stream_accuracy(c, column(0, 1), column(2, 3, 4), [0, 1]),
            r"'references' parameter of two_stream_accuracy must have the shape of 'anchors'",
        ),
        # wrong label shapes
        (
            lambda c: split_accuracy(c, (column(0, 1), torch.zeros(2, 2)), [], True),
            r"'query' parameter of split_accuracy must hold labels of shape \(N,\)",
        ),
        (
            lambda c: split_accuracy(c, (column(0, 1), [[0], [1]]), [], True),
            r"'query' parameter of split_accuracy must hold labels of shape \(N,\)",
        ),
        (
            lambda c: nearest_centroid_accuracy(c, GOOD, (column(0), np.zeros((1, 1)))),
            r"'reference' parameter of nearest_centroid_accuracy must hold labels of shape",
        ),
        # empty query / reference
        (
            lambda c: split_accuracy(c, (torch.zeros(0, 1), []), [], True),
            r"'query' parameter of split_accuracy must hold at least one embedding",
        ),
        (
            lambda c: split_accuracy(c, GOOD, [(torch.zeros(0, 1), [])], False),
            r"'references\[0\]' parameter of split_accuracy must hold at least one embedding",
        ),
        (
            lambda c: split_accuracy(c, GOOD, [], False),
            r"'references' parameter of split_accuracy must hold at least one",
        ),
        (
            lambda c: nearest_centroid_accuracy(c, GOOD, (torch.zeros(0, 1), [])),
            r"'reference' parameter of nearest_centroid_accuracy must hold at least one",
        ),
        (
            lambda c: two_stream_accuracy(c, torch.zeros(0, 1), torch.zeros(0, 1), []),
            r"'anchors' parameter of two_stream_accuracy must hold at least one",
        ),
        # NaN or infinite embeddings
        (
            lambda c: split_accuracy(c, (NAN, [0, 0, 1]), [], True),
            r"'query' parameter of split_accuracy must hold finite embeddings. Got 1 row",
        ),
        (
            lambda c: split_accuracy(c, GOOD, [(INF, [0, 0, 1])], True),
            r"'references\[0\]' parameter of split_accuracy must hold finite embeddings",
        ),
        (
            lambda c: nearest_centroid_accuracy(c, GOOD, (INF, [0, 0, 1])),
            r"'reference' parameter of nearest_centroid_accuracy must hold finite",
        ),
        (
            lambda c: two_stream_accuracy(c, column(0, 1, 2), NAN, [0, 1, 2]),
            r"'references' parameter of two_stream_accuracy must hold finite",
        ),
        (
            lambda c: parent_conditioned_accuracy(c, (NAN, [(0, 1)] * 3), [], True),
            r"'query' parameter of parent_conditioned_accuracy must hold finite",
        ),
        # hierarchical labels that are not (N, L)
        (
            lambda c: parent_conditioned_accuracy(c, GOOD, [], True),
            r"'query' parameter of parent_conditioned_accuracy must hold labels of shape \(N, L\)",
        ),
        (
            lambda c: parent_conditioned_accuracy(c, (column(0, 1), torch.zeros(2)), [], True),
            r"'query' parameter .* shape \(N, L\) with L >= 2 levels. Got shape \(2,\)",
        ),
        (
            lambda c: parent_conditioned_accuracy(c, (column(0, 1), torch.zeros(2, 1)), [], True),
            r"'query' parameter .* L >= 2 levels. Got shape \(2, 1\)",
        ),
        (
            lambda c: parent_conditioned_accuracy(c, (column(0, 1), [(0, 1), (0, 1, 2)]), [], True),
            r"'query' parameter .* \(N, L\) .* Got rows of 2 and 3 levels",
        ),
        (
            lambda c: parent_conditioned_accuracy(c, (column(0, 1), ["ab", "cd"]), [], True),
            r"'query' parameter .* \(N, L\) .* Got a row of type str",
        ),
        (
            lambda c: parent_conditioned_accuracy(
                c, (column(0, 1), [(0, 1), (0, 1)]), [(column(2), [(0, 1, 2)])], True
            ),
            (
                r"'references' parameter of parent_conditioned_accuracy must hold labels with "
                r"the query's 2 levels. Got 3 in references\[0\]"
            ),
        ),
        # other argument errors
        (
            lambda c: split_accuracy(c, GOOD, [(column(0, 1, 2).repeat(1, 2), [0, 0, 1])], True),
            (
                r"'references' parameter of split_accuracy must hold embeddings of the query's "
                r"dimension 1. Got 2 in references\[0\]"
            ),
        ),
        (
            lambda c: split_accuracy(c, GOOD, GOOD, False),
            r"'references' parameter of split_accuracy must be a sequence of .* single pair",
        ),
        (
            lambda c: split_accuracy(c, GOOD, [], None),
            r"'query_in_reference' parameter of split_accuracy must be True or False. Got None",
        ),
        (
            lambda c: split_accuracy(c, (torch.tensor([[0], [1]]), [0, 1]), [], True),
            r"'query' parameter of split_accuracy must hold floating-point embeddings",
        ),
        (
            lambda c: split_accuracy(c, (torch.zeros(3), [0, 0, 1]), [], True),
            r"'query' parameter of split_accuracy must hold embeddings of shape \(N, D\)",
        ),
        (
            lambda c: split_accuracy(c, column(0, 1), [], True),
            r"'query' parameter of split_accuracy must be an \(embeddings, labels\) pair",
        ),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(call, message):
    recorder = RecordingCalculator()
    with pytest.raises(ValueError, match=message):
        call(recorder)
    assert recorder.calls == []


# ----------------------------------------------------------------------------------------------
# The executable recipe and its doctests
# ----------------------------------------------------------------------------------------------


def _expected_main_rows():
    """precision@1 and R-precision of the synthetic example, by brute force."""
    model, val_loader, train_loader = synthetic_example()

    def embed(loader):
        data = torch.cat([x for x, _ in loader])
        labels = torch.cat([y for _, y in loader]).tolist()
        with torch.no_grad():
            return torch.nn.functional.normalize(model(data), dim=1).double().numpy(), labels

    val, train = embed(val_loader), embed(train_loader)
    return [
        brute_force(val[0], val[1], val[0], val[1], True),
        brute_force(val[0], val[1], train[0], train[1], False),
    ]


ROW = re.compile(r"^val\s+(val \(itself\)|train gallery)\s+(True|False)\s+(\S+)\s+(\S+)$")


def _check_main_output(out: str) -> None:
    lines = out.strip().splitlines()
    assert lines[0].startswith("Synthetic retrieval: 50 val rows, 100 train rows, 5 classes")
    assert lines[1].split() == [
        "query",
        "reference",
        "query_in_reference",
        "precision_at_1",
        "r_precision",
    ]
    rows = [ROW.match(line) for line in lines[2:]]
    assert len(rows) == 2 and all(rows), lines
    assert [(m[1], m[2]) for m in rows] == [("val (itself)", "True"), ("train gallery", "False")]
    for match, (p1, rp) in zip(rows, _expected_main_rows(), strict=True):
        assert (match[3], match[4]) == (f"{p1:.4f}", f"{rp:.4f}")
        assert 0.0 < p1 < 1.0 and 0.0 < rp < 1.0  # overlapping clusters: not a trivial score


def test_main_prints_both_splits(capsys):
    evaluation.main()
    _check_main_output(capsys.readouterr().out)


@pytest.mark.filterwarnings("ignore:'docs.recipes.evaluation' found in sys.modules")
def test_module_runs_as_a_script(capsys):
    # What `python -m docs.recipes.evaluation` executes, in this interpreter.
    runpy.run_module("docs.recipes.evaluation", run_name="__main__")
    _check_main_output(capsys.readouterr().out)


def test_docstring_examples():
    failures, tried = doctest.testmod(evaluation, optionflags=doctest.ELLIPSIS)
    assert tried > 0
    assert failures == 0
