"""Slow, obviously correct references that follow each benchmark's official script.

Nothing here imports recallkit. Where the official code sorts with an unspecified tie order
(``np.argsort``, ``torch.sort``, ``torch.topk``), these references use a full stable sort on
``(-score, index)`` — the documented tie rule — in float64, and GeneCIS's pessimistic rule
beside its official (stable sort) order.
"""

from __future__ import annotations

import math

import numpy as np


def order(row) -> list[int]:
    """Indices of one score row, best first: a full stable sort on (-score, index)."""
    row = np.asarray(row, dtype=np.float64)
    return sorted(range(len(row)), key=lambda j: (-row[j], j))


def scores64(query, reference, metric: str) -> np.ndarray:
    q = np.asarray(query, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if metric == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        r = r / np.linalg.norm(r, axis=1, keepdims=True)
    if metric == "euclidean":
        return -((q[:, None, :] - r[None, :, :]) ** 2).sum(axis=2)
    return q @ r.T


# ----------------------------------------------------------------------------- seed 001 / VSE++


def seed001_recall(sim_matrix, ground_truth, ks) -> list[float]:
    """Seed 001 word for word: sort (score, index) pairs, find the ground truth, round to 4."""
    n = len(sim_matrix)
    ranks = []
    for i in range(n):
        items = [(sim_matrix[i][j], j) for j in range(len(sim_matrix[i]))]
        items.sort(key=lambda x: (-x[0], x[1]))
        ranks.append([j for _, j in items].index(ground_truth[i]))
    return [round(sum(r < k for r in ranks) / n, 4) for k in ks]


def vsepp(sim, caption_image, ks):
    """VSE++ ``i2t``/``t2i`` (Faghri et al.): the best caption's rank for i2t.

    meanr = mean(rank) + 1, medr = floor(median(rank)) + 1.
    """
    sim = np.asarray(sim, dtype=np.float64)
    n_img, n_cap = sim.shape
    i2t = []
    for i in range(n_img):
        inds = order(sim[i])
        i2t.append(min(inds.index(j) for j in range(n_cap) if caption_image[j] == i))
    t2i = [order(sim[:, j]).index(caption_image[j]) for j in range(n_cap)]
    out = {}
    for name, ranks in (("i2t", i2t), ("t2i", t2i)):
        ranks = np.asarray(ranks)
        for k in ks:
            out[f"{name}_recall@{k}"] = float(np.mean(ranks < k))
    recalls = list(out.values())
    for name, ranks in (("i2t", i2t), ("t2i", t2i)):
        out[f"{name}_mean_rank"] = float(np.mean(ranks)) + 1
        out[f"{name}_median_rank"] = math.floor(np.median(ranks)) + 1
    out["rmean"] = float(np.mean(recalls))
    return out, np.asarray(t2i), np.asarray(i2t)


# -------------------------------------------------------------------------------------- CIRR


def cirr_hard(sim, names, references, targets, members, ks=(1, 5, 10, 50), subset_ks=(1, 2, 3)):
    """SEARLE/CLIP4Cir ``cirr_compute_val_metrics``: sort, delete the reference, find the target.

    ``members`` are the full img_set member lists (reference included), as the official code
    passes them; the reference is already gone from the sorted names.
    """
    sim = np.asarray(sim, dtype=np.float64)
    labels, group_labels = [], []
    for i in range(len(sim)):
        sorted_names = [names[j] for j in order(sim[i])]
        sorted_names = [n for n in sorted_names if n != references[i]]
        row = [n == targets[i] for n in sorted_names]
        group = [lab for n, lab in zip(sorted_names, row, strict=True) if n in members[i]]
        labels.append(row)
        group_labels.append(group)
    out = {f"recall@{k}": float(np.mean([any(r[:k]) for r in labels])) for k in ks}
    out.update(
        {
            f"recall_subset@{k}": float(np.mean([any(g[:k]) for g in group_labels]))
            for k in subset_ks
        }
    )
    if 5 in ks and 1 in subset_ks:
        out["avg"] = (out["recall@5"] + out["recall_subset@1"]) / 2
    return out


def cirr_soft(sim, names, references, soft, members, ks=(1, 5, 10, 50), subset_ks=(1, 2, 3)):
    """CIRPLANT ``eval_test_scoring_step_CIRR`` with the reference removed from the ranking.

    ``highest_r`` starts at 0 and takes the max soft value found in the top K (so -1 never counts);
    the subset keeps the members other than the reference, in ranking order.
    """
    sim = np.asarray(sim, dtype=np.float64)
    nn_result = []
    for i in range(len(sim)):
        nns = [names[j] for j in order(sim[i]) if names[j] != references[i]]
        nn_result.append(nns)
    out = {}
    for k in ks:
        r = 0.0
        for i, nns in enumerate(nn_result):
            highest = 0.0
            for name, value in soft[i].items():
                if name in nns[:k]:
                    highest = max(highest, value)
            r += highest
        out[f"recall@{k}"] = r / len(nn_result)
    for k in subset_ks:
        r = 0.0
        for i, nns in enumerate(nn_result):
            in_set = [n for n in nns if n in members[i] and n != references[i]]
            highest = 0.0
            for name, value in soft[i].items():
                if name in in_set[:k]:
                    highest = max(highest, value)
            r += highest
        out[f"recall_subset@{k}"] = r / len(nn_result)
    if 5 in ks and 1 in subset_ks:
        out["avg"] = (out["recall@5"] + out["recall_subset@1"]) / 2
    return out


def top_names(sim, names, exclude_names, k):
    """The k best names per row with some names removed (a submission list)."""
    sim = np.asarray(sim, dtype=np.float64)
    return [
        [names[j] for j in order(sim[i]) if names[j] not in exclude_names[i]][:k]
        for i in range(len(sim))
    ]


# ------------------------------------------------------------------------------------- CIRCO


CIRCO_ASPECTS = (
    "cardinality",
    "addition",
    "negation",
    "direct_addressing",
    "compare_change",
    "comparative_statement",
    "statement_with_conjunction",
    "spatial_relations_background",
    "viewpoint",
)


def circo_official(
    predictions: dict, gts: dict, targets: dict, ranks, divisor="min_k_r", aspects=None
):
    """``miccunifi/CIRCO`` ``compute_metrics``: AP from cumsum of hits, divided by min(R, K).

    ``divisor="r"`` divides by R = len(gt) as the SQUARE recipe's ``compute_mAP_at_k`` does.
    ``aspects`` (query id -> semantic aspects) adds the semantic mAP@10 of each official aspect
    that some query has, as ``mAP@10[<aspect>]``.
    """
    aps = {k: [] for k in ranks}
    recalls = {k: [] for k in ranks}
    semantic = {a: [] for a in CIRCO_ASPECTS}
    for query_id, prediction in predictions.items():
        gt_img_ids = gts[query_id]
        prediction = np.array(prediction, dtype=int)
        ap_labels = np.isin(prediction, gt_img_ids)
        precisions = np.cumsum(ap_labels, axis=0) * ap_labels
        precisions = precisions / np.arange(1, ap_labels.shape[0] + 1)
        for k in ranks:
            d = min(len(gt_img_ids), k) if divisor == "min_k_r" else len(gt_img_ids)
            aps[k].append(float(np.sum(precisions[:k]) / d))
        recall_labels = prediction == targets[query_id]
        for k in ranks:
            recalls[k].append(float(np.sum(recall_labels[:k])))
        for aspect in (aspects or {}).get(query_id, ()):
            d = min(len(gt_img_ids), 10) if divisor == "min_k_r" else len(gt_img_ids)
            semantic[aspect].append(float(np.sum(precisions[:10]) / d))
    out = {f"mAP@{k}": float(np.mean(aps[k])) for k in ranks}
    out.update({f"recall@{k}": float(np.mean(recalls[k])) for k in ranks})
    out.update({f"mAP@10[{a}]": float(np.mean(v)) for a, v in semantic.items() if v})
    return out


def square_map(retrieved, gt_indices, k):
    """The SQUARE recipe's ``compute_mAP_at_k`` (seed 004), word for word."""
    relevant = 0
    sum_prec = 0.0
    for i, idx in enumerate(retrieved[:k]):
        if idx in gt_indices:
            relevant += 1
            sum_prec += relevant / (i + 1)
    return sum_prec / len(gt_indices) if gt_indices else 0.0


def ranked_ids(sim, ids, exclude=None, k=None):
    """Each row's image ids, best first (optionally without one id per row), first k."""
    sim = np.asarray(sim, dtype=np.float64)
    out = []
    for i in range(len(sim)):
        row = [ids[j] for j in order(sim[i]) if exclude is None or ids[j] != exclude[i]]
        out.append(row if k is None else row[:k])
    return out


# --------------------------------------------------------------------------------- FashionIQ


def fashioniq_category(sim, names, targets, ks=(10, 50)):
    """SEARLE/CLIP4Cir ``fiq_compute_val_metrics``: sort the gallery, find the target."""
    sim = np.asarray(sim, dtype=np.float64)
    labels = [[names[j] == targets[i] for j in order(sim[i])] for i in range(len(sim))]
    return {f"recall@{k}": float(np.mean([any(row[:k]) for row in labels])) for k in ks}


# ----------------------------------------------------------------------------------- GeneCIS


def genecis_pessimistic(sim, target_index=None, sizes=None, ks=(1, 2, 3)):
    """GeneCIS recall@K with the target ranked after every distractor of equal score.

    The official ``validate`` sorts ``[target, *gallery]`` scores and looks for column 0; with
    the pessimistic rule the target's rank is the number of distractors scoring >= it.
    """
    sim = np.asarray(sim, dtype=np.float64)
    n = len(sim)
    target_index = np.zeros(n, int) if target_index is None else target_index
    sizes = np.full(n, sim.shape[1]) if sizes is None else sizes
    ranks = []
    for i in range(n):
        t = target_index[i]
        ranks.append(sum(1 for j in range(sizes[i]) if j != t and sim[i, j] >= sim[i, t]))
    ranks = np.asarray(ranks)
    return {f"recall@{k}": float(np.mean(ranks < k)) for k in ks}, ranks


def genecis_official(sim, target_index=None, sizes=None, ks=(1, 2, 3)):
    """GeneCIS ``validate``: sort each row descending (stably: column order on equal scores)
    and find the target's position; ``get_recall`` counts it in the top K."""
    sim = np.asarray(sim, dtype=np.float64)
    n = len(sim)
    target_index = np.zeros(n, int) if target_index is None else target_index
    sizes = np.full(n, sim.shape[1]) if sizes is None else sizes
    ranks = np.asarray([order(sim[i, : sizes[i]]).index(target_index[i]) for i in range(n)])
    return {f"recall@{k}": float(np.mean(ranks < k)) for k in ks}, ranks
