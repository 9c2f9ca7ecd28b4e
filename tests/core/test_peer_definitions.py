"""recallkit's metrics against the peers' definitions (docs/metrics.md, "recallkit's names and
the peers' names").

Each peer's formula is transcribed below into a small numpy function over a score (or distance)
matrix and a relevance matrix, from the source file named in its docstring; pytorch-metric-learning
is installed and is called itself. Every agreement is checked on random data without exact ties
(each test checks that first), under the conditions the table states; the tests whose name says
``differs`` build a small case where a condition is broken and check the direction of the
difference.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

import recallkit
from recallkit.protocols import image_text_recall_from_scores

CPU = torch.device("cpu")
KS = (1, 3, 5, 8)
EXACT = dict(rel=1e-12, abs=1e-15)  # equal up to the order of a floating-point sum


@pytest.fixture(autouse=True)
def _quiet_pml():
    """PML logs a warning when k is below the largest class (the integer-k test)."""
    logger = logging.getLogger("PML")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


# ----------------------------------------------------------------------------------------------
# Data: one labelled set, its scores, and the guards that it has no exact ties.

# Class sizes from 1 to 17: every K of KS is below some queries' R and above others'; the two
# singletons are lone queries in leave-one-out.
SIZES = (1, 2, 3, 4, 6, 8, 10, 12, 1, 17)


def _labelled(seed: int = 0, d: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(len(SIZES)), SIZES))
    centres = 1.5 * rng.standard_normal((len(SIZES), d))
    x = centres[labels] + rng.standard_normal((len(labels), d))
    return x.astype(np.float32), labels


def _cosine(q: np.ndarray, r: np.ndarray) -> np.ndarray:
    q = q.astype(np.float64)
    r = r.astype(np.float64)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    r = r / np.linalg.norm(r, axis=1, keepdims=True)
    return q @ r.T


def _euclidean(q: np.ndarray, r: np.ndarray) -> np.ndarray:
    diff = q.astype(np.float64)[:, None, :] - r.astype(np.float64)[None, :, :]
    return np.sqrt((diff**2).sum(axis=2))


def _assert_tie_free(scores: np.ndarray, gap: float = 1e-6) -> None:
    """No two scores of a query within ``gap``: any tie rule (and float32 rounding) gives the
    same order as recallkit's exact scores."""
    ordered = np.sort(scores, axis=1)
    assert np.diff(ordered, axis=1).min() > gap


def _relevant(query_labels: np.ndarray, reference_labels: np.ndarray) -> np.ndarray:
    return np.asarray(query_labels)[:, None] == np.asarray(reference_labels)[None, :]


def _loo_metrics(x, labels, names, **kw):
    """recallkit on the set against itself, each query's own row removed."""
    return recallkit.retrieval_metrics(x, x, labels, labels, names, query_in_reference=True, **kw)


# ----------------------------------------------------------------------------------------------
# Transcriptions of the peers' formulas.


def oml_metrics(distances, mask_gt, mask_to_ignore, ks, n_items):
    """OML's ``cmc@k``, ``precision@k`` and ``map@k`` per query.

    Transcribed from open-metric-learning ``oml/functional/knn.py`` (``batched_knn_qg``: ignored
    items get an infinite distance and are dropped from the ``n_items`` nearest, ``n_items``
    clipped to the gallery; relevant = same label and not ignored) and
    ``oml/functional/metrics.py`` (``calc_cmc``, ``calc_precision``, ``calc_map``, OML 3.x/4.0):
    with ``g`` the relevance of the retrieved list, ``n`` the number of relevant items and
    ``k' = min(k, len(g))``: ``cmc@k = any(g[:k])``, ``precision@k = sum(g[:k']) / min(n, k')``
    (0/0 = NaN for a query without relevant items), ``map@k = sum_{i<k'} g_i n_i / (i + 1) / n_k``
    with ``n_i`` the hits among the first ``i + 1`` and ``n_k`` those among the first ``k'``
    (0 when ``n_k = 0``); an empty list scores 1 when ``n = 0`` and 0 otherwise.
    """
    q = len(distances)
    out = {name: {k: np.zeros(q) for k in ks} for name in ("cmc", "precision", "map")}
    for i in range(q):
        d = np.where(mask_to_ignore[i], np.inf, distances[i])
        order = np.argsort(d, kind="stable")[: min(n_items, d.size)]
        order = order[np.isfinite(d[order])]
        g = (mask_gt[i] & ~mask_to_ignore[i])[order]
        n = int((mask_gt[i] & ~mask_to_ignore[i]).sum())
        for k in ks:
            if g.size == 0:
                value = 1.0 if n == 0 else 0.0
                for name in out:
                    out[name][k][i] = value
                continue
            k_ = min(k, g.size)
            hits = np.cumsum(g)
            out["cmc"][k][i] = float(g[:k].any())
            with np.errstate(invalid="ignore"):
                out["precision"][k][i] = np.float64(hits[k_ - 1]) / min(n, k_)
            n_k = hits[k_ - 1] if hits[k_ - 1] >= 1 else np.inf
            out["map"][k][i] = (hits[:k_] / np.arange(1, k_ + 1) * g[:k_]).sum() / n_k
    return out


def _tm_order(preds):
    return np.argsort(-preds, kind="stable")


def tm_recall(preds, target, top_k=None):
    """torchmetrics ``retrieval_recall`` of one query (``functional/retrieval/recall.py``,
    torchmetrics 1.9): 0 without a relevant item; else the relevant items among the ``top_k``
    best-scored, counting only those with a score > 0, over all relevant items."""
    preds = np.asarray(preds, dtype=np.float32)
    top_k = preds.size if top_k is None else top_k
    if not target.sum():
        return 0.0
    counted = np.where(preds > 0, target, False)
    return counted[_tm_order(preds)][:top_k].sum() / target.sum()


def tm_precision(preds, target, top_k=None, adaptive_k=False):
    """torchmetrics ``retrieval_precision`` (``functional/retrieval/precision.py``): relevant
    items with a score > 0 among the ``top_k`` best, over ``top_k`` (``top_k`` is the number of
    items when it is None, or when ``adaptive_k`` and it exceeds them); 0 without a relevant
    item."""
    preds = np.asarray(preds, dtype=np.float32)
    if top_k is None or (adaptive_k and top_k > preds.size):
        top_k = preds.size
    if not target.sum():
        return 0.0
    counted = np.where(preds > 0, target, False)
    return counted[_tm_order(preds)[: min(top_k, preds.size)]].sum() / top_k


def tm_average_precision(preds, target, top_k=None):
    """torchmetrics ``retrieval_average_precision`` (``functional/retrieval/average_precision.py``):
    over the ``top_k`` best (relevant only with a score > 0), the mean of ``j / p_j`` over the
    relevant ones (``p_j`` the 1-indexed position of the ``j``-th); 0 without one."""
    preds = np.asarray(preds, dtype=np.float32)
    top_k = top_k or preds.size
    counted = np.where(preds > 0, target, False)[_tm_order(preds)[: min(top_k, preds.size)]]
    if not counted.sum():
        return 0.0
    positions = np.flatnonzero(counted) + 1.0
    return float(np.mean(np.arange(1, positions.size + 1) / positions))


def tm_compute(metric, preds_rows, target_rows, empty_target_action="neg", **kw):
    """torchmetrics ``RetrievalMetric.compute`` (``retrieval/base.py``): the mean over queries
    (``indexes``) of ``metric``; a query without a relevant item counts 0 (``"neg"``, the
    default) or 1 (``"pos"``), is skipped (``"skip"``; 0.0 when all are) or raises."""
    values = []
    for preds, target in zip(preds_rows, target_rows, strict=True):
        if not target.sum():
            if empty_target_action == "error":
                raise ValueError("a query with no positive target")
            if empty_target_action in ("neg", "pos"):
                values.append(float(empty_target_action == "pos"))
        else:
            values.append(metric(preds, target, **kw))
    return float(np.mean(values)) if values else 0.0


def mteb_cv_recall(scores, relevant, ks, skip_first_result=False):
    """MTEB's ``cv_recall_at_k``: ``Any2AnyRetrievalEvaluator.evaluate`` in
    ``mteb/evaluation/evaluators/Image/Any2AnyRetrievalEvaluator.py`` (mteb 1.x) and
    ``calculate_cv_recall`` in ``mteb/_evaluators/retrieval_metrics.py`` (mteb 2.0 to 2.10.1).
    Per query: the retrieved items sorted by score, highest first (a stable sort: equal scores
    keep the retrieval's order, here the corpus order); with ``skip_first_result`` the first one
    is dropped; 1 if a relevant item is among the first ``k``. The mean over all queries,
    rounded to 5 decimals."""
    hits = {k: [] for k in ks}
    for row, rel in zip(scores, relevant, strict=True):
        order = np.argsort(-row, kind="stable")
        if skip_first_result:
            order = order[1:]
        for k in ks:
            hits[k].append(float(rel[order[:k]].any()))
    return {k: round(sum(v) / len(v), 5) for k, v in hits.items()}


def trec_eval_cutoffs(scores, relevant, ks, docnos=None):
    """trec_eval's ``P.k``, ``recall.k`` and ``map_cut.k`` per query (MTEB's ``precision_at_k``,
    ``recall_at_k`` and ``map_at_k``, through pytrec_eval). From usnistgov/trec_eval
    ``form_res_rels.c`` (rank by score, highest first; equal scores by docno, the greater
    string first), ``m_P.c`` (relevant in the first k over k, missing ranks count as
    non-relevant), ``m_recall.c`` (over the relevant items ``R``; 0 when ``R = 0``) and
    ``m_map_cut.c`` (``sum_{i<k} rel_i P@(i+1) / R``; 0 when ``R = 0``). pytrec_eval
    (``src/pytrec_eval.cpp``) evaluates only the queries of the qrels."""
    n, m = scores.shape
    docnos = [str(j) for j in range(m)] if docnos is None else docnos
    out = {name: {k: np.zeros(n) for k in ks} for name in ("P", "recall", "map_cut")}
    for i in range(n):
        order = sorted(range(m), key=lambda j: (scores[i, j], docnos[j]), reverse=True)
        rel = relevant[i, order]
        num_rel = int(relevant[i].sum())
        hits = np.cumsum(rel)
        for k in ks:
            found = hits[min(k, m) - 1]
            out["P"][k][i] = found / k
            if num_rel:
                out["recall"][k][i] = found / num_rel
                precision_at = hits[: min(k, m)] / np.arange(1, min(k, m) + 1)
                out["map_cut"][k][i] = (precision_at * rel[: min(k, m)]).sum() / num_rel
    return out


def clip_benchmark_recall(scores, texts_image_index, ks):
    """CLIP_benchmark's ``image_retrieval_recall@k`` and ``text_retrieval_recall@k``
    (``clip_benchmark/metrics/zeroshot_retrieval.py``: ``evaluate`` and ``recall_at_k``).
    ``scores`` is ``(texts, images)``; per query, the positives among its ``k`` best
    (``torch.topk``, which refuses ``k`` above the candidates) over its positives, and the query
    is a hit when that is > 0 (0/0, a query without a positive, is not). Image retrieval ranks
    images for each text; text retrieval ranks texts for each image."""
    positive = np.zeros(scores.shape, dtype=bool)
    positive[np.arange(len(scores)), texts_image_index] = True
    out = {}
    for name, s, pos in (
        ("image_retrieval", scores, positive),
        ("text_retrieval", scores.T, positive.T),
    ):
        for k in ks:
            if k > s.shape[1]:
                raise ValueError("selected index k out of range")
            top = np.argsort(-s, axis=1, kind="stable")[:, :k]
            true_positive = np.take_along_axis(pos, top, axis=1).sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                hit = (true_positive / pos.sum(axis=1)) > 0
            out[f"{name}_recall@{k}"] = float(hit.mean())
    return out


def open_clip_ranks(logits):
    """open_clip's 0-indexed ranks of paired retrieval (item ``i``'s match is ``i``), main
    branch: ``src/open_clip_train/metrics.py`` (``_paired_retrieval_ranks``): the candidates
    scoring above the match, plus those scoring equal with a lower index. Returns
    ``(image_to_text, text_to_image)`` for ``logits`` ``(images, texts)``."""
    n = len(logits)
    target = np.diag(logits)
    lower = np.arange(n)[None, :] < np.arange(n)[:, None]  # [i, j]: j < i
    i2t = ((logits > target[:, None]) | ((logits == target[:, None]) & lower)).sum(axis=1)
    t2i = ((logits > target[None, :]) | ((logits == target[None, :]) & lower.T)).sum(axis=0)
    return i2t, t2i


def open_clip_ranks_sorted(logits):
    """open_clip ≤ 3.3: ``get_clip_metrics`` in ``src/open_clip_train/train.py``: the position
    of the match in ``argsort(logits, descending=True)`` (equal scores in an unspecified order;
    a stable sort here)."""
    ranks = []
    for s in (logits, logits.T):
        order = np.argsort(-s, axis=1, kind="stable")
        ranks.append(np.argmax(order == np.arange(len(s))[:, None], axis=1))
    return tuple(ranks)


def open_clip_metrics(ranks, name):
    """``_add_rank_metrics`` (``src/open_clip_train/metrics.py``): 1-indexed mean rank,
    ``floor(median) + 1`` and ``R@k = mean(rank < k)`` for k in 1, 5, 10."""
    out = {
        f"{name}_mean_rank": ranks.mean() + 1,
        f"{name}_median_rank": np.floor(np.median(ranks)) + 1,
    }
    out.update({f"{name}_R@{k}": np.mean(ranks < k) for k in (1, 5, 10)})
    return out


# ----------------------------------------------------------------------------------------------
# PML (pytorch-metric-learning, called itself).

PML_METRICS = (
    "precision_at_1",
    "r_precision",
    "mean_average_precision_at_r",
    "mean_average_precision",
)


@pytest.mark.parametrize("leave_one_out", [True, False])
def test_pml_accuracy_calculator_equals_recallkit(leave_one_out):
    x, labels = _labelled(6)
    # faiss's float32 squared distances are within 1e-4 of the exact ones here.
    _assert_tie_free(-(_euclidean(x, x) ** 2) - 1e3 * np.eye(len(x)), gap=2e-4)
    if leave_one_out:
        q, ql, r, rl = x[:40], labels[:40], x, labels
    else:  # a separate gallery; a query label missing from it makes lone queries
        q, ql, r, rl = x[:40], labels[:40], x[40:], labels[40:]
    counts = {c: int((rl == c).sum()) - int(leave_one_out) for c in np.unique(ql)}
    assert min(counts.values()) <= 0  # lone queries: PML and recallkit both leave them out
    k = max(counts.values())  # PML's k="max_bin_count" lists
    calc = AccuracyCalculator(include=PML_METRICS, k="max_bin_count", device=CPU)
    pml = calc.get_accuracy(
        torch.from_numpy(q),
        torch.from_numpy(ql),
        torch.from_numpy(r),
        torch.from_numpy(rl),
        ref_includes_query=leave_one_out,
    )
    ours = recallkit.retrieval_metrics(
        q,
        r,
        ql,
        rl,
        ["recall@1", "R-precision", "MAP@R", f"MAP@{k}"],
        divisor="r",
        metric="euclidean",
        query_in_reference=leave_one_out,
    )
    assert ours.num_excluded > 0
    assert pml["precision_at_1"] == pytest.approx(ours["recall@1"], **EXACT)
    assert pml["r_precision"] == pytest.approx(ours["R-precision"], **EXACT)
    assert pml["mean_average_precision_at_r"] == pytest.approx(ours["MAP@R"], **EXACT)
    assert pml["mean_average_precision"] == pytest.approx(ours[f"MAP@{k}"], **EXACT)


def test_pml_integer_k_truncates_map_at_r_and_gives_map_at_k_over_r():
    x, labels = _labelled(1)
    t = torch.from_numpy(x), torch.from_numpy(labels)
    calc = AccuracyCalculator(include=PML_METRICS, k=5, device=CPU)
    pml = calc.get_accuracy(t[0], t[1], t[0], t[1], ref_includes_query=True)
    ours = _loo_metrics(x, labels, ["MAP@R", "MAP@5"], divisor="r", metric="euclidean")
    # mean_average_precision at an integer k: AP over the first k, divided by R.
    assert pml["mean_average_precision"] == pytest.approx(ours["MAP@5"], **EXACT)
    # MAP@R with k below R sums only the first k terms (still over R): lower than MAP@R.
    assert pml["mean_average_precision_at_r"] < ours["MAP@R"] - 1e-3


def test_pml_differs_when_k_exceeds_the_gallery():
    # One query (label 0) against 3 reference items; faiss pads the 10-list with index -1, which
    # PML reads as the last reference item's label (0 here): the padding counts as relevant.
    q = np.array([[0.0]], dtype=np.float32)
    ref = np.array([[1.0], [2.0], [10.0]], dtype=np.float32)
    ql, rl = np.array([0]), np.array([1, 1, 0])
    calc = AccuracyCalculator(include=("mean_average_precision",), k=10, device=CPU)
    pml = calc.get_accuracy(*map(torch.from_numpy, (q, ql, ref, rl)))
    ours = recallkit.retrieval_metrics(q, ref, ql, rl, ["MAP@10"], divisor="r", metric="euclidean")
    assert ours["MAP@10"] == pytest.approx(1 / 3, **EXACT)  # the relevant item at position 3
    assert pml["mean_average_precision"] > 1.0


def test_pml_differs_on_labels_above_2_to_the_24():
    # PML casts labels to float32: 2**24 and 2**24 + 1 become one class.
    x = np.array([[0.0], [1.0], [10.0], [11.0]], dtype=np.float32)
    labels = np.array([2**24, 2**24 + 1, 2**24, 2**24 + 1])
    calc = AccuracyCalculator(include=("precision_at_1",), device=CPU)
    pml = calc.get_accuracy(torch.from_numpy(x), torch.from_numpy(labels))
    ours = _loo_metrics(x, labels, ["recall@1"], metric="euclidean")
    assert (pml["precision_at_1"], ours["recall@1"]) == (1.0, 0.0)


def test_pml_under_ties_lies_within_recallkit_bounds():
    # The query is equally far from reference 0 (other label) and reference 1 (its label).
    q = np.array([[0.0, 0.0]], dtype=np.float32)
    ref = np.array([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0]], dtype=np.float32)
    ql, rl = np.array([0]), np.array([1, 0, 1])
    calc = AccuracyCalculator(include=("precision_at_1",), k=1, device=CPU)
    pml = calc.get_accuracy(*map(torch.from_numpy, (q, ql, ref, rl)))["precision_at_1"]
    ours = recallkit.retrieval_metrics(q, ref, ql, rl, ["recall@1"], metric="euclidean")
    assert ours["recall@1"] == 0.0  # lower index first: reference 0, a miss
    assert ours.bounds["recall@1"] == (0.0, 1.0)
    assert pml in ours.bounds["recall@1"]  # faiss's order among equal distances is its own


# ----------------------------------------------------------------------------------------------
# OML (open-metric-learning).


def _oml_setup(seed=2):
    x, labels = _labelled(seed)
    distances = _euclidean(x, x)
    _assert_tie_free(-distances - 10 * np.eye(len(x)))
    return x, labels, distances, _relevant(labels, labels), np.eye(len(x), dtype=bool)


def test_oml_cmc_and_map_equal_recall_and_map_hits_with_lone_queries_as_zero():
    x, labels, distances, gt, ignore = _oml_setup()
    oml = oml_metrics(distances, gt, ignore, KS, n_items=len(x))
    names = [f"recall@{k}" for k in KS] + [f"MAP@{k}" for k in KS]
    ours = _loo_metrics(x, labels, names, divisor="hits", metric="euclidean", lone_queries="zero")
    lone = (gt & ~ignore).sum(axis=1) == 0
    assert lone.sum() == 2
    for k in KS:
        assert oml["cmc"][k].mean() == pytest.approx(ours[f"recall@{k}"], **EXACT)
        assert oml["map"][k].mean() == pytest.approx(ours[f"MAP@{k}"], **EXACT)
        assert oml["map"][k][lone].tolist() == [0.0, 0.0]  # OML scores a lone query 0


def test_oml_precision_is_precision_at_k_or_ir_recall_by_query():
    x, labels, distances, gt, ignore = _oml_setup()
    oml = oml_metrics(distances, gt, ignore, KS, n_items=len(x))
    names = [f"precision@{k}" for k in KS] + [f"IR-recall@{k}" for k in KS]
    ours = _loo_metrics(x, labels, names, metric="euclidean")
    r = (gt & ~ignore).sum(axis=1)
    for k in KS:
        deep, shallow = r >= k, (r > 0) & (r <= k)
        oml_k = oml["precision"][k]
        # sum(g[:k]) / min(k, R): precision@K where R >= K, IR-recall@K where R <= K.
        np.testing.assert_allclose(oml_k[deep], ours.per_query[f"precision@{k}"][deep], rtol=1e-12)
        np.testing.assert_allclose(
            oml_k[shallow], ours.per_query[f"IR-recall@{k}"][shallow], rtol=1e-12
        )
        assert np.isnan(oml_k[r == 0]).all()  # 0/0 for a lone query: OML's mean is NaN
    # Where both kinds of query exist the mean is neither of recallkit's.
    evaluated = r > 0
    mixed = oml["precision"][5][evaluated].mean()
    assert mixed > ours["precision@5"] + 1e-3 and mixed > ours["IR-recall@5"] + 1e-3


def test_oml_differs_when_the_list_is_shorter_than_k():
    # RetrievalResults(n_items=3): cmc@8 reads only 3 items, i.e. recall@3.
    x, labels, distances, gt, ignore = _oml_setup()
    oml = oml_metrics(distances, gt, ignore, (8,), n_items=3)
    ours = _loo_metrics(
        x, labels, ["recall@3", "recall@8"], metric="euclidean", lone_queries="zero"
    )
    assert oml["cmc"][8].mean() == pytest.approx(ours["recall@3"], **EXACT)
    assert oml["cmc"][8].mean() < ours["recall@8"]


# ----------------------------------------------------------------------------------------------
# torchmetrics (RetrievalRecall, RetrievalPrecision, RetrievalMAP with top_k).


def _tm_rows(scores, relevant, offset):
    """Each query's candidates (its own item left out), as torchmetrics groups them by
    ``indexes``: scores shifted by ``offset`` (the order is the same) and cast to float32."""
    n = len(scores)
    keep = ~np.eye(n, dtype=bool)
    preds = [(scores[i][keep[i]] + offset).astype(np.float32) for i in range(n)]
    target = [relevant[i][keep[i]] for i in range(n)]
    return preds, target


@pytest.mark.parametrize(("action", "lone"), [("neg", "zero"), ("skip", "skip")])
def test_torchmetrics_equal_recallkit_on_positive_scores(action, lone):
    x, labels = _labelled(8)
    scores = _cosine(x, x)
    _assert_tie_free(scores)
    preds, target = _tm_rows(scores, _relevant(labels, labels), offset=2.0)  # all > 0
    _assert_tie_free(np.stack(preds), gap=0.0)  # distinct after the float32 cast: same order
    ks = (*KS, 40)  # deep enough for relevant items with a negative cosine
    names = [f"{m}@{k}" for m in ("IR-recall", "precision", "MAP") for k in ks]
    ours = _loo_metrics(x, labels, names, divisor="hits", lone_queries=lone)
    assert ours.num_excluded == 2
    for k in ks:
        kw = dict(empty_target_action=action, top_k=k)
        assert tm_compute(tm_recall, preds, target, **kw) == pytest.approx(
            ours[f"IR-recall@{k}"], **EXACT
        )
        assert tm_compute(tm_precision, preds, target, **kw) == pytest.approx(
            ours[f"precision@{k}"], **EXACT
        )
        assert tm_compute(tm_average_precision, preds, target, **kw) == pytest.approx(
            ours[f"MAP@{k}"], **EXACT
        )


def test_torchmetrics_differs_on_non_positive_scores():
    # torchmetrics >= 1.8 does not count a relevant item whose score is <= 0: with raw cosine
    # scores, IR-recall over the whole list (1 for every query) drops below 1.
    x, labels = _labelled(8)
    scores = _cosine(x, x)
    relevant = _relevant(labels, labels)
    preds, target = _tm_rows(scores, relevant, offset=0.0)
    assert any((p <= 0)[t].any() for p, t in zip(preds, target, strict=True))
    k = len(x) - 1
    ours = _loo_metrics(x, labels, [f"IR-recall@{k}"])
    assert ours[f"IR-recall@{k}"] == 1.0
    assert tm_compute(tm_recall, preds, target, empty_target_action="skip", top_k=k) < 1.0 - 1e-3


def test_torchmetrics_precision_differs_when_k_exceeds_the_candidates():
    x, labels = _labelled(8)
    preds, target = _tm_rows(_cosine(x, x), _relevant(labels, labels), offset=2.0)
    k = 100  # above the 63 candidates: recallkit clamps K to them, torchmetrics divides by 100
    with pytest.warns(UserWarning, match="clamped"):
        ours = _loo_metrics(x, labels, [f"precision@{k}"])
    candidates = len(x) - 1
    plain = tm_compute(tm_precision, preds, target, empty_target_action="skip", top_k=k)
    adaptive = tm_compute(
        tm_precision, preds, target, empty_target_action="skip", top_k=k, adaptive_k=True
    )
    assert adaptive == pytest.approx(ours[f"precision@{k}"], **EXACT)
    assert plain == pytest.approx(ours[f"precision@{k}"] * candidates / k, **EXACT)


# ----------------------------------------------------------------------------------------------
# MTEB (cv_recall_at_k of the image retrieval evaluators; trec_eval's cut-off metrics).


def test_mteb_cv_recall_equals_recall_with_lone_queries_as_zero():
    # An image-to-image task (CUB200I2IRetrieval): the corpus holds the queries, and
    # skip_first_result drops each query's first result, itself under cosine scores.
    x, labels = _labelled(4)
    scores = _cosine(x, x)
    _assert_tie_free(scores)
    assert (np.argmax(scores, axis=1) == np.arange(len(x))).all()
    mteb = mteb_cv_recall(scores, _relevant(labels, labels), KS, skip_first_result=True)
    ours = _loo_metrics(x, labels, [f"recall@{k}" for k in KS], lone_queries="zero")
    assert ours.num_excluded == 2
    for k in KS:
        assert mteb[k] == round(ours[f"recall@{k}"], 5)


def test_mteb_skip_first_result_differs_from_self_exclusion_under_dot_scores():
    # Dot-product scores: item 1 (other label, longer) outscores query 0's own item, so
    # skip_first_result drops item 1 and keeps the query itself, which is relevant.
    x = np.array([[1.0, 0.0], [2.0, 0.0], [0.9, 0.3], [0.0, 1.0]])
    labels = np.array([0, 1, 0, 1])
    scores = x @ x.T
    mteb = mteb_cv_recall(scores[:1], _relevant(labels[:1], labels), (1,), skip_first_result=True)
    ours = recallkit.retrieval_metrics(
        x[:1], x, labels[:1], labels, ["recall@1"], query_in_reference=True, metric="dot"
    )
    assert (mteb[1], ours["recall@1"]) == (1.0, 0.0)


def test_mteb_trec_eval_metrics_equal_ir_recall_precision_and_map_over_r():
    x, labels = _labelled(5)
    scores = _cosine(x, x)
    _assert_tie_free(scores)
    keep = ~np.eye(len(x), dtype=bool)  # ignore_identical_ids: each query's own document
    scores = scores[keep].reshape(len(x), -1)
    relevant = _relevant(labels, labels)[keep].reshape(len(x), -1)
    trec = trec_eval_cutoffs(scores, relevant, KS)
    names = [f"{m}@{k}" for m in ("IR-recall", "precision", "MAP") for k in KS]
    ours = _loo_metrics(x, labels, names, divisor="r", lone_queries="zero")
    for k in KS:
        assert trec["recall"][k].mean() == pytest.approx(ours[f"IR-recall@{k}"], **EXACT)
        assert trec["P"][k].mean() == pytest.approx(ours[f"precision@{k}"], **EXACT)
        assert trec["map_cut"][k].mean() == pytest.approx(ours[f"MAP@{k}"], **EXACT)


def test_trec_eval_differs_on_ties_greater_docno_first():
    # Candidates 0 (relevant) and 1 score the same: recallkit ranks 0 first, trec_eval the
    # greater docno ("1") first.
    q = np.array([[1.0, 0.0]])
    ref = np.array([[1.0, 1.0], [1.0, -1.0], [0.0, 1.0]])
    relevant = np.array([[True, False, False]])
    trec = trec_eval_cutoffs(q @ ref.T, relevant, (1,))
    ours = recallkit.retrieval_metrics(q, ref, [0], [0, 1, 2], ["precision@1"], metric="dot")
    assert ours["precision@1"] == 1.0 and trec["P"][1].tolist() == [0.0]
    assert ours.bounds["precision@1"] == (0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# Image-text: CLIP_benchmark and open_clip.


def test_clip_benchmark_recall_equals_image_text_recall():
    rng = np.random.default_rng(6)
    caption_image = np.repeat(np.arange(12), rng.integers(1, 6, size=12))
    scores = rng.standard_normal((12, len(caption_image)))  # (images, captions)
    _assert_tie_free(scores)
    _assert_tie_free(scores.T)
    ks = (1, 5, 10)
    peer = clip_benchmark_recall(scores.T, caption_image, ks)  # the peer takes (texts, images)
    ours = image_text_recall_from_scores(scores, caption_image, ks)
    for k in ks:
        assert peer[f"image_retrieval_recall@{k}"] == pytest.approx(
            ours[f"t2i_recall@{k}"], **EXACT
        )
        assert peer[f"text_retrieval_recall@{k}"] == pytest.approx(ours[f"i2t_recall@{k}"], **EXACT)
    with pytest.raises(ValueError):  # torch.topk refuses k above the 12 images
        clip_benchmark_recall(scores.T, caption_image, (20,))


@pytest.mark.parametrize("rule", [open_clip_ranks, open_clip_ranks_sorted])
def test_open_clip_metrics_equal_image_text_recall(rule):
    rng = np.random.default_rng(7)
    logits = (100.0 * rng.standard_normal((30, 30))).astype(np.float32)
    _assert_tie_free(logits, gap=1e-4)
    _assert_tie_free(logits.T, gap=1e-4)
    i2t, t2i = rule(logits)
    peer = {**open_clip_metrics(i2t, "image_to_text"), **open_clip_metrics(t2i, "text_to_image")}
    ours = image_text_recall_from_scores(logits, np.arange(30), ks=(1, 5, 10))
    for theirs, mine in (("image_to_text", "i2t"), ("text_to_image", "t2i")):
        for k in (1, 5, 10):
            assert peer[f"{theirs}_R@{k}"] == ours[f"{mine}_recall@{k}"]
        assert peer[f"{theirs}_mean_rank"] == pytest.approx(ours[f"{mine}_mean_rank"], **EXACT)
        assert peer[f"{theirs}_median_rank"] == ours[f"{mine}_median_rank"]


def test_open_clip_main_tie_rule_is_recallkits():
    # Scores on a coarse grid: many exact ties, broken by the lower index in both.
    rng = np.random.default_rng(8)
    logits = rng.integers(0, 3, size=(12, 12)).astype(np.float32)
    i2t, t2i = open_clip_ranks(logits)
    ours = image_text_recall_from_scores(logits, np.arange(12), ks=(1,))
    assert ours.num_tied > 0
    assert ours.per_query["i2t_ranks"].tolist() == i2t.tolist()
    assert ours.per_query["t2i_ranks"].tolist() == t2i.tolist()


def test_recallkit_keys_follow_the_table():
    # The names the table maps the peers to are recallkit's result keys.
    x, labels = _labelled(0)
    names = ["recall@1", "precision@5", "IR-recall@5", "MAP@5", "MAP@R", "R-precision"]
    assert list(_loo_metrics(x, labels, names)) == names
    keys = set(image_text_recall_from_scores(np.eye(3), [0, 1, 2], ks=(1,)))
    assert {"i2t_recall@1", "t2i_recall@1", "i2t_mean_rank", "t2i_median_rank"} <= keys
    assert list(_loo_metrics(x, labels, ["precision_at_1", "mean_average_precision_at_r"])) == [
        "recall@1",
        "MAP@R",
    ]  # PML's names are aliases of recallkit's
