"""The self-match mistake is caught on every entry point: the same array, a copy, a view, the
same embeddings computed or loaded twice, without saying whether the reference holds the
queries; saying so (or giving ids) runs as asked."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import recallkit
from recallkit.pml import RecallCalculator

X = np.random.default_rng(0).standard_normal((40, 6))
Y = np.random.default_rng(1).integers(0, 4, 40)
MESSAGE = r"'query_in_reference' parameter of recall_at_k must be given when the reference is"


@pytest.mark.parametrize(
    "reference",
    [
        lambda x: x,
        lambda x: x.copy(),
        lambda x: x[:],
        lambda x: np.asarray(x),
        lambda x: torch.from_numpy(x),
        lambda x: torch.from_numpy(x).clone(),
        lambda x: np.concatenate([x, x[:5]]),  # the queries' rows, then a gallery
        lambda x: x.astype(np.float32).astype(np.float64),  # computed again, the same values
    ],
    ids=["same", "copy", "view", "asarray", "torch-view", "clone", "queries-then-more", "again"],
)
def test_a_reference_that_begins_with_the_queries_is_refused(reference):
    x = X.astype(np.float32).astype(np.float64)
    r = reference(x)
    labels = np.concatenate([Y, Y[:5]]) if len(r) > len(x) else Y
    with pytest.raises(ValueError, match=MESSAGE) as caught:
        recallkit.recall_at_k(x, r, Y, labels, (1,))
    text = str(caught.value)
    assert "query_in_reference=True" in text and "query_in_reference=False" in text
    # Said either way, it runs: True removes each query's own row, False keeps the copies.
    loo = recallkit.recall_at_k(x, r, Y, labels, (1,), query_in_reference=True)
    kept = recallkit.recall_at_k(x, r, Y, labels, (1,), query_in_reference=False)
    assert kept["recall@1"] == 1.0 and loo["recall@1"] < 1.0
    # Ids say which items are the same: no refusal.
    ids = np.arange(len(r)) % len(x)
    by_id = recallkit.recall_at_k(
        x, r, Y, labels, (1,), query_ids=np.arange(len(x)), reference_ids=ids
    )
    assert by_id.num_queries == len(x)


def test_a_different_gallery_is_not_refused():
    other = X + 1e-9  # one value differs in every row
    assert recallkit.recall_at_k(X, other, Y, Y, (1,)).num_queries == 40
    shorter = X[:20]  # fewer rows than the queries: cannot begin with them
    assert recallkit.recall_at_k(X, shorter, Y, Y[:20], (1,)).num_queries == 40


def test_every_entry_point_refuses_it():
    x = torch.from_numpy(X)
    with pytest.raises(ValueError, match=r"'query_in_reference' parameter of retrieval_metrics"):
        recallkit.retrieval_metrics(X, X.copy(), Y, Y, ["MAP@R"])
    with pytest.raises(ValueError, match=r"'query_in_reference' parameter of map_at_r"):
        recallkit.map_at_r(X, X.copy(), Y, Y)
    calc = RecallCalculator(ks=(1,), device=torch.device("cpu"))
    for reference in (x, x.clone()):
        with pytest.raises(
            ValueError,
            match=r"'ref_includes_query' parameter of "
            r"RecallCalculator.get_accuracy must be given .*pass "
            r"ref_includes_query=True",
        ):
            calc.get_accuracy(x, torch.from_numpy(Y), reference, torch.from_numpy(Y))
    got = calc.get_accuracy(x, torch.from_numpy(Y), x, torch.from_numpy(Y), True)
    want = recallkit.recall_at_k(X, X, Y, Y, (1,), metric="euclidean", query_in_reference=True)
    assert got["recall_at_1"] == want["recall@1"] < 1.0
    # PML's own call without a reference means the query set itself, its own row removed.
    assert calc.get_accuracy(x, torch.from_numpy(Y))["recall_at_1"] == want["recall@1"]
