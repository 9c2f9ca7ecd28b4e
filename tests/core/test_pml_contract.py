"""PML's contract: ``ExactKNN`` as every ``AccuracyCalculator``'s default k-NN.

The cases of pytorch-metric-learning 2.9.0's own accuracy tests,
``tests/utils/test_calculate_accuracies.py`` (github.com/KevinMusgrave/pytorch-metric-learning,
MIT licence; the wheel does not ship its tests), one test here for each of its 15, with the same
inputs and the same expected values (PML's hand computations), run with PML's default
``FaissKNN`` replaced by [`ExactKNN`][recallkit.pml.ExactKNN]: every ``AccuracyCalculator()``
built without a ``knn_func`` ranks with ``ExactKNN()``. A drop-in must give PML's values for
every call PML accepts. Where the file's case only runs on a GPU, the CPU runs its CPU form.
"""

from __future__ import annotations

import itertools
import logging
import warnings

import numpy as np
import pytest
import torch
from pytorch_metric_learning.distances import LpDistance
from pytorch_metric_learning.utils import accuracy_calculator as ac
from pytorch_metric_learning.utils.common_functions import LOGGER
from pytorch_metric_learning.utils.inference import CustomKNN, FaissKMeans, FaissKNN

from recallkit.exceptions import RecallkitWarning
from recallkit.pml import ExactKNN

DEVICE = torch.device("cpu")
FIVE = (
    "precision_at_1",
    "r_precision",
    "mean_average_precision_at_r",
    "mean_average_precision",
    "mean_reciprocal_rank",
)
FOUR = FIVE[:4]


@pytest.fixture(autouse=True)
def exact_default(monkeypatch):
    """``AccuracyCalculator()`` without ``knn_func`` builds ``ExactKNN()`` (PML builds its
    default k-NN by calling the name ``FaissKNN`` in its module)."""
    monkeypatch.setattr(ac, "FaissKNN", ExactKNN)
    assert isinstance(ac.AccuracyCalculator().knn_func, ExactKNN)


def close(x, y) -> bool:
    return bool(np.allclose(x, y, rtol=1e-6, atol=0))


# --- TestCalculateAccuracies.test_accuracy_calculator -------------------------------------------

# Six queries (labels 1, 1, 2, 3, 4, 0) and the labels of their 5 nearest neighbours; the
# reference's label counts: 0: 2, 1: 3, 2: 5, 3: 4, 4: 5. With ref_includes_query, the first
# column is the query itself and is dropped. Each metric per query (PML's hand computation):
KNN_LABELS = [
    [0, 1, 1, 2, 2],
    [1, 0, 1, 1, 3],
    [4, 4, 4, 4, 2],
    [3, 1, 3, 1, 3],
    [0, 0, 4, 2, 2],
    [1, 2, 3, 4, 5],
]
PER_QUERY = {
    False: {
        "precision_at_1": [0, 1, 0, 1, 0, 0],
        "r_precision": [2 / 3, 2 / 3, 1 / 5, 2 / 4, 1 / 5, 0],
        "mean_average_precision_at_r": [
            (1 / 2 + 2 / 3) / 3,
            (1 + 2 / 3) / 3,
            (1 / 5) / 5,
            (1 + 2 / 3) / 4,
            (1 / 3) / 5,
            0,
        ],
        "mean_average_precision": [
            (1 / 2 + 2 / 3) / 3,
            (1 + 2 / 3 + 3 / 4) / 3,
            (1 / 5) / 5,
            (1 + 2 / 3 + 3 / 5) / 4,
            (1 / 3) / 5,
            0,
        ],
        "mean_reciprocal_rank": [1 / 2, 1, 1 / 5, 1, 1 / 3, 0],
    },
    True: {
        "precision_at_1": [1, 0, 0, 0, 0, 0],
        "r_precision": [1, 1 / 2, 1 / 4, 1 / 3, 1 / 4, 0],
        "mean_average_precision_at_r": [1, (1 / 2) / 2, (1 / 4) / 4, (1 / 2) / 3, (1 / 2) / 4, 0],
        "mean_average_precision": [
            1,
            (1 / 2 + 2 / 3) / 2,
            (1 / 4) / 4,
            (1 / 2 + 2 / 4) / 3,
            (1 / 2) / 4,
            0,
        ],
        "mean_reciprocal_rank": [1, 1 / 2, 1 / 4, 1 / 2, 1 / 2, 0],
    },
}


def _expected(per_query: list[float], avg_of_avgs: bool, return_per_class: bool):
    # Classes 0..4: query 5; queries 0 and 1; query 2; query 3; query 4.
    v = per_query
    per_class = [v[5], (v[0] + v[1]) / 2, v[2], v[3], v[4]]
    if return_per_class:
        return per_class
    return np.mean(per_class) if avg_of_avgs else np.mean(v)


def test_accuracy_calculator():
    query_labels = torch.tensor([1, 1, 2, 3, 4, 0])
    knn_labels = torch.tensor(KNN_LABELS)
    counts = [2, 3, 5, 4, 5]
    cases = [
        (knn_labels, ([0, 1, 2, 3, 4], counts), torch.ones(6, dtype=torch.bool)),
        # The same labels shifted by 5, every query lone: every value is NaN.
        (knn_labels + 5, ([5, 6, 7, 8, 9], counts), torch.zeros(6, dtype=torch.bool)),
    ]
    for avg_of_avgs, return_per_class in itertools.product((False, True), repeat=2):
        flags = dict(avg_of_avgs=avg_of_avgs, return_per_class=return_per_class)
        if avg_of_avgs and return_per_class:
            with pytest.raises(ValueError):
                ac.AccuracyCalculator(exclude=("NMI", "AMI"), device=DEVICE, **flags)
            continue
        calc = ac.AccuracyCalculator(exclude=("NMI", "AMI"), device=DEVICE, **flags)
        functions = calc.get_function_dict()
        for lone, (labels, label_counts, mask) in enumerate(cases):
            for ref_includes_query in (False, True):
                got = calc._get_accuracy(
                    functions,
                    query_labels=query_labels,
                    label_counts=label_counts,
                    knn_labels=labels[:, 1:] if ref_includes_query else labels,
                    not_lone_query_mask=mask,
                    ref_includes_query=ref_includes_query,
                )
                for name in FIVE:
                    if lone:
                        assert np.all(np.isnan(got[name])), name
                    else:
                        want = _expected(PER_QUERY[ref_includes_query][name], **flags)
                        assert close(got[name], want), (name, ref_includes_query, flags)


# --- the lone-query helpers -------------------------------------------------------------------


def test_get_lone_query_labels_custom():
    labels = torch.tensor([0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100])
    unique = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100]
    cases = [
        # Labels within 1 of each other match: only 100 is alone.
        (
            lambda x, y: abs(x - y) < 2,
            [3, 4, 3, 3, 3, 3, 3, 3, 3, 2, 1],
            [100],
            [True] * 11 + [False],
        ),
        # Labels more than 99 apart match: 0 and 100 only.
        (
            lambda x, y: abs(x - y) > 99,
            [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            [1, 2, 3, 4, 5, 6, 7, 8, 9],
            [True, True] + [False] * 9 + [True],
        ),
    ]
    for fn, counts, lone, mask in cases:
        label_counts = ac.get_label_match_counts(labels, labels, fn)
        assert label_counts[0].tolist() == unique
        assert label_counts[1].tolist() == counts
        got_lone, got_mask = ac.get_lone_query_labels(labels, label_counts, True, fn)
        assert got_lone.tolist() == lone
        assert got_mask.tolist() == mask


def test_get_lone_query_labels_multi_dim():
    labels = torch.tensor([(1, 3), (0, 3), (0, 3), (0, 3), (1, 2), (4, 5)])

    def equal(x, y):
        return (x[..., 0] == y[..., 0]) & (x[..., 1] == y[..., 1])

    def first_equal_second_not(x, y):
        return (x[..., 0] == y[..., 0]) & (x[..., 1] != y[..., 1])

    cases = [
        (
            equal,
            [3, 1, 1, 1],
            {
                True: ([[1, 2], [1, 3], [4, 5]], [False, True, True, True, False, False]),
                False: ([], [True] * 6),
            },
        ),
        (
            first_equal_second_not,
            [0, 1, 1, 0],
            {
                True: ([[0, 3], [4, 5]], [True, False, False, False, True, False]),
                False: ([[0, 3], [4, 5]], [True, False, False, False, True, False]),
            },
        ),
    ]
    for fn, counts, by_source in cases:
        label_counts = ac.get_label_match_counts(labels, labels, fn)
        assert label_counts[0].tolist() == [[0, 3], [1, 2], [1, 3], [4, 5]]
        assert label_counts[1].tolist() == counts
        for same_source, (lone, mask) in by_source.items():
            got_lone, got_mask = ac.get_lone_query_labels(labels, label_counts, same_source, fn)
            if lone:
                assert got_lone.tolist() == lone
            else:
                assert got_lone.numel() == 0
            assert got_mask.tolist() == mask


def test_get_lone_query_labels():
    query_labels = torch.tensor([0, 1, 2, 3, 4, 5, 6])
    reference_labels = torch.tensor([0, 0, 0, 1, 2, 2, 3, 4, 5])
    label_counts = ac.get_label_match_counts(query_labels, reference_labels, ac.EQUALITY)
    for same_source, lone in ((True, [1, 3, 4, 5, 6]), (False, [6])):
        got, _ = ac.get_lone_query_labels(query_labels, label_counts, same_source, ac.EQUALITY)
        assert got.tolist() == lone


# --- TestCalculateAccuraciesAndFaiss ------------------------------------------------------------


def _arrays(use_numpy: bool, *values):
    return [np.array(v) if use_numpy else torch.tensor(v) for v in values]


def _column(use_numpy: bool, values):
    (x,) = _arrays(use_numpy, values)
    return x[:, None]


def _check(got: dict, want: dict) -> None:
    for name, value in want.items():
        assert close(got[name], value), (name, got[name], value)


def _reference_is_query(use_numpy: bool) -> None:
    # The reference is the query (0..9, each its own label) with ref_includes_query=False: PML
    # accepts the call and each query finds itself. ExactKNN computes it as PML does, and warns.
    knns = [
        None,
        CustomKNN(LpDistance(normalize_embeddings=False, power=2)),
        CustomKNN(LpDistance(normalize_embeddings=False, power=2), batch_size=3),
    ]
    for knn_func in knns:
        calc = ac.AccuracyCalculator(device=DEVICE, knn_func=knn_func)
        query, reference = _column(use_numpy, range(10)), _column(use_numpy, range(10))
        labels, ref_labels = _arrays(use_numpy, range(10), range(10))
        if knn_func is None:
            with pytest.warns(RecallkitWarning, match="ref_includes_query=True"):
                got = calc.get_accuracy(query, labels, reference, ref_labels, False)
        else:
            got = calc.get_accuracy(query, labels, reference, ref_labels, False)
        _check(got, dict.fromkeys(FOUR, 1.0))

        # Reference 0, 0.5, ..., 9.5 reordered: the integers (the queries, labels 0..9) first,
        # then the halves (label 1): ref_includes_query=True.
        halves = np.arange(20) / 2.0
        reference = _column(use_numpy, np.concatenate([halves[::2], halves[1::2]]).tolist())
        (ref_labels,) = _arrays(use_numpy, [*range(10), *[1.0] * 10])
        got = calc.get_accuracy(query, labels, reference, ref_labels, True)
        _check(
            got,
            {
                "precision_at_1": 1.0,
                "r_precision": 0.5,
                "mean_average_precision_at_r": (1 + 2 / 2 + 3 / 5 + 4 / 7 + 5 / 9) / 10,
                "mean_average_precision": (
                    1 + 2 / 2 + 3 / 5 + 4 / 7 + 5 / 9 + 6 / 11 + 7 / 13 + 8 / 15 + 9 / 17 + 10 / 19
                )
                / 10,
            },
        )


def _avg_of_avgs(use_numpy: bool) -> None:
    query = _column(use_numpy, range(10))
    reference = _column(use_numpy, range(10))
    query[-1] = 100
    reference[0] = -100
    labels, ref_labels = _arrays(use_numpy, [0] * 9 + [1], [1] + [0] * 9)
    by_query = ac.AccuracyCalculator(avg_of_avgs=False, device=DEVICE)
    by_class = ac.AccuracyCalculator(avg_of_avgs=True, device=DEVICE)
    got = by_query.get_accuracy(query, labels, reference, ref_labels, False)
    _check(got, {**dict.fromkeys(FOUR[:3], 0.9), "mean_average_precision": 0.9 + 0.01})
    got = by_class.get_accuracy(query, labels, reference, ref_labels, False)
    _check(got, {**dict.fromkeys(FOUR[:3], 0.5), "mean_average_precision": (1 + 0.1) / 2})


def _custom_comparison(use_numpy: bool) -> None:
    def compare(x, y):
        return (x[..., 0] == y[..., 0]) & (x[..., 1] != y[..., 1])

    with pytest.raises(NotImplementedError):
        ac.AccuracyCalculator(include=("NMI", "AMI"), label_comparison_fn=compare, device=DEVICE)
    calcs = [
        ac.AccuracyCalculator(
            exclude=("NMI", "AMI"), avg_of_avgs=avg, label_comparison_fn=compare, device=DEVICE
        )
        for avg in (False, True)
    ]
    query = _column(use_numpy, range(10))
    reference = _column(use_numpy, range(10))
    query[-1] = 100
    reference[0] = -100
    labels, ref_labels = _arrays(use_numpy, [(0, 2)] * 9 + [(1, 2)], [(1, 3)] + [(0, 3)] * 9)
    got = calcs[0].get_accuracy(query, labels, reference, ref_labels, False)
    _check(got, {**dict.fromkeys(FOUR[:3], 0.9), "mean_average_precision": 0.9 + 0.01})
    got = calcs[1].get_accuracy(query, labels, reference, ref_labels, False)
    _check(got, {**dict.fromkeys(FOUR[:3], 0.5), "mean_average_precision": (1 + 0.1) / 2})

    query, reference = _column(use_numpy, range(2)), _column(use_numpy, range(5))
    labels, ref_labels = _arrays(
        use_numpy, [(1, 3), (7, 3)], [(1, 3), (7, 4), (1, 4), (1, 5), (1, 6)]
    )
    want = {
        "precision_at_1": 0.5,
        "r_precision": (1 / 3 + 1) / 2,
        "mean_average_precision_at_r": ((1 / 3) / 3 + 1) / 2,
        "mean_average_precision": ((1 / 3 + 2 / 4 + 3 / 5) / 3 + 1) / 2,
    }
    for calc in calcs:
        _check(calc.get_accuracy(query, labels, reference, ref_labels, False), want)


def _float_custom_comparison(use_numpy: bool) -> None:
    def compare(x, y):
        return torch.abs(x - y) < 1

    with pytest.raises(NotImplementedError):
        ac.AccuracyCalculator(include=("NMI", "AMI"), label_comparison_fn=compare, device=DEVICE)
    calc = ac.AccuracyCalculator(exclude=("NMI", "AMI"), label_comparison_fn=compare, device=DEVICE)
    query, reference = _column(use_numpy, [0, 3]), _column(use_numpy, [0, 3, 1, 2])
    labels, ref_labels = _arrays(use_numpy, [0.01, 0.02], [10.0, 0.03, 0.04, 0.05])
    got = calc.get_accuracy(query, labels, reference, ref_labels, False)
    _check(
        got,
        {
            "precision_at_1": (0 + 1) / 2,
            "r_precision": (2 / 3 + 3 / 3) / 2,
            "mean_average_precision_at_r": ((0 + 1 / 2 + 2 / 3) / 3 + 1) / 2,
            "mean_average_precision": ((0 + 1 / 2 + 2 / 3 + 3 / 4) / 3 + 1) / 2,
        },
    )
    # The query within the reference.
    (ref_labels,) = _arrays(use_numpy, [0.01, 0.02, 10, 0.03])
    got = calc.get_accuracy(query, labels, reference, ref_labels, True)
    _check(
        got,
        {
            "precision_at_1": 0.5,
            "r_precision": 0.5,
            "mean_average_precision_at_r": ((0 + 1 / 2) / 2 + 1 / 2) / 2,
            "mean_average_precision": ((0 + 1 / 2 + 2 / 3) / 2 + (1 + 2 / 3) / 2) / 2,
        },
    )


def test_accuracy_calculator_and_faiss_with_torch_and_numpy():
    for use_numpy in (True, False):
        _reference_is_query(use_numpy)
        _avg_of_avgs(use_numpy)
        _custom_comparison(use_numpy)
        _float_custom_comparison(use_numpy)


# --- k ------------------------------------------------------------------------------------------


def test_valid_k():
    for k in (-1, 0, 1.5, "max"):
        with pytest.raises(ValueError):
            ac.AccuracyCalculator(k=k)


def test_k_warning(caplog):
    # k below the largest class size (1000 of each of 10 labels, about) warns; others inform.
    torch.manual_seed(0)
    for k in (10, 100, 2000, "max_bin_count"):
        calc = ac.AccuracyCalculator(k=k)
        embeddings = torch.randn(10000, 32)
        labels = torch.randint(0, 10, size=(10000,))
        caplog.clear()
        with caplog.at_level(logging.INFO):
            calc.get_accuracy(embeddings, labels)
        level = logging.WARNING if k in (10, 100) else logging.INFO
        assert any(r.levelno == level for r in caplog.records), k


# --- explicit k-NN functions --------------------------------------------------------------------


def test_specify_gpu():
    # FaissKNN on each set of visible GPUs (none on a CPU machine), ExactKNN on each GPU.
    torch.manual_seed(0)
    count = min(4, torch.cuda.device_count())
    for size in range(1, count + 1):
        for gpus in itertools.combinations(range(count), size):
            calc = ac.AccuracyCalculator(knn_func=FaissKNN(gpus=gpus))
            calc.get_accuracy(torch.randn(1000, 32), torch.randint(0, 10, size=(1000,)))
    for gpu in range(count):
        calc = ac.AccuracyCalculator(knn_func=ExactKNN(device=f"cuda:{gpu}"))
        calc.get_accuracy(torch.randn(1000, 32), torch.randint(0, 10, size=(1000,)))


def test_index_type():
    import faiss

    torch.manual_seed(0)
    calc = ac.AccuracyCalculator(
        knn_func=FaissKNN(reset_after=False, index_init_fn=faiss.IndexFlatIP)
    )
    calc.get_accuracy(torch.randn(1000, 32), torch.randint(0, 10, size=(1000,)))
    assert isinstance(calc.knn_func.index, faiss.IndexFlatIP)


def test_custom_knn():
    # CustomKNN (batched or not), FaissKNN and the default (ExactKNN): the same metrics, to
    # PML's tolerance, on random data.
    LOGGER.setLevel(logging.CRITICAL)
    torch.manual_seed(6920)
    try:
        for size, batch_size, ref_includes_query, k in itertools.product(
            (200, 1000), (None, 32, 33, 2000), (False, True), (None, 1, 2, 10, 100)
        ):
            custom = CustomKNN(LpDistance(normalize_embeddings=False, power=2), batch_size)
            knns = (custom, FaissKNN(), None)
            calcs = [ac.AccuracyCalculator(k=k, knn_func=f, exclude=("AMI", "NMI")) for f in knns]
            embeddings = torch.randn(size, 32)
            labels = torch.randint(0, 10, size=(size,))
            args = (embeddings, labels, embeddings, labels, ref_includes_query)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                first, faiss_values, exact = [c.get_accuracy(*args) for c in calcs]
            # The reference is the query: without ref_includes_query ExactKNN says so, once.
            warned = [w for w in caught if issubclass(w.category, RecallkitWarning)]
            assert len(warned) == (0 if ref_includes_query else 1)
            for name, value in first.items():
                assert np.isclose(value, faiss_values[name], rtol=1e-3), name
                assert np.isclose(value, exact[name], rtol=1e-3), name
    finally:
        LOGGER.setLevel(logging.INFO)


def test_within_autocast():
    # PML runs it on CUDA under float16 autocast (and returns at once on the CPU); the CPU runs
    # its CPU form, bfloat16 autocast.
    torch.manual_seed(0)
    calc = ac.AccuracyCalculator()
    embeddings = torch.randn(1000, 32)
    labels = torch.randint(0, 10, size=(1000,))
    if torch.cuda.is_available():
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            calc.get_accuracy(embeddings, labels)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        got = calc.get_accuracy(embeddings, labels)
    assert got == ac.AccuracyCalculator().get_accuracy(embeddings, labels)


def test_mutual_information():
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_mutual_info_score, normalized_mutual_info_score

    def sklearn_kmeans(x, nmb_clusters):
        return KMeans(n_clusters=2).fit_predict(x.cpu().numpy())

    torch.manual_seed(0)
    size = 2000
    for offset in (0.5, 1):
        for kmeans_func in (None, FaissKMeans(niter=300, nredo=10), sklearn_kmeans):
            emb = torch.cat([torch.randn(size, 32), torch.randn(size, 32) + offset])
            labels = torch.cat([torch.zeros(size), torch.ones(size)])
            calc = ac.AccuracyCalculator(kmeans_func=kmeans_func, include=("AMI", "NMI"))
            got = calc.get_accuracy(emb, labels, emb, labels, False)
            clusters = KMeans(n_clusters=2).fit_predict(emb)
            ami = adjusted_mutual_info_score(labels.numpy(), clusters)
            nmi = normalized_mutual_info_score(labels.numpy(), clusters)
            assert np.isclose(got["AMI"], ami, rtol=1e-1)
            assert np.isclose(got["NMI"], nmi, rtol=1e-1)


# --- TestEmbeddingsComeFromSameSource -----------------------------------------------------------


def test_tied_distances():
    # Items with different labels at the same place: removing "the first neighbour" instead of
    # the query's own row would remove the wrong item.
    emb = torch.tensor([[10], [10], [20], [20]])
    labels = torch.tensor([1, 0, 1, 0])
    got = ac.AccuracyCalculator(include=("precision_at_1",)).get_accuracy(emb, labels)
    assert got["precision_at_1"] == 0


def test_many_tied_distances():
    torch.manual_seed(0)
    emb = torch.zeros(10000, 2)
    labels = torch.randint(0, 2, size=(10000,))
    calc = ac.AccuracyCalculator(include=("precision_at_1",), k=1)
    got = calc.get_accuracy(emb, labels)
    assert np.isclose(got["precision_at_1"], 0.5, rtol=0.1)


def test_query_within_reference():
    query = torch.tensor([0, 10, 20]).unsqueeze(1)
    ref = torch.tensor([0, 5, 10, 15, 20]).unsqueeze(1)
    query_labels = torch.tensor([0, 1, 2])
    ref_labels = torch.tensor([0, 9, 1, 8, 2])
    calc = ac.AccuracyCalculator(include=("precision_at_1",))
    calc.get_accuracy(query, query_labels, ref, ref_labels, False)
    with pytest.raises(ValueError):  # the reference does not begin with the query
        calc.get_accuracy(query, query_labels, ref, ref_labels, True)
    ref = torch.tensor([0, 10, 20, 5, 15]).unsqueeze(1)
    ref_labels[:3] = query_labels
    calc.get_accuracy(query, query_labels, ref, ref_labels, True)
