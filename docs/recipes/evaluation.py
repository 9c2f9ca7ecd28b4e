"""Retrieval evaluation recipes: extract embeddings, then evaluate them with an AccuracyCalculator.

Run from the repository root (synthetic tensors, no downloads, well under a second of work)::

    uv run --frozen --no-sync python -m docs.recipes.evaluation

This file is the canonical executable source of the recipes. It is not an installed library API:
it needs torch, numpy and pytorch-metric-learning (PML), and faiss (``pip install faiss-cpu``)
for the k-NN of PML's default ``AccuracyCalculator`` (``FaissKNN``), which PML does not install;
it imports nothing from recallkit, so it can be copied into research code as it is. Without
faiss, [`main`][main] prints one line saying so ([`FAISS_MISSING`][FAISS_MISSING]) and exits with
status 1; in your own code, PML's ``AccuracyCalculator()`` then fails in its constructor
(``NameError: name 'faiss' is not defined``), and one given another ``knn_func`` needs no faiss:
PML's exact ``CustomKNN(LpDistance(normalize_embeddings=False))`` (squared-Euclidean order, as
faiss's ``IndexFlatL2``), or ``recallkit.pml.ExactKNN()``.

Recipes
-------
- [`extract_embeddings`][extract_embeddings]: an ordinary inference loop over a DataLoader.
- [`split_accuracy`][split_accuracy]: a query split against itself, against other splits, or both.
- [`nearest_centroid_accuracy`][nearest_centroid_accuracy]: queries against one mean embedding per
  class.
- [`two_stream_accuracy`][two_stream_accuracy]: anchors against a paired reference stream (row i
  with row i).
- [`parent_conditioned_accuracy`][parent_conditioned_accuracy]: hierarchical labels, each level
  ranked within its parent.

Each evaluation recipe takes ``(embeddings, labels)`` pairs and a calculator: a PML
``AccuracyCalculator`` or anything with the same ``get_accuracy(query, query_labels, reference,
reference_labels, ref_includes_query)`` method (for example a subclass that adds metrics). The
calculator chooses the metrics, the geometry (its ``knn_func``), ``k`` and the class weighting
(``avg_of_avgs``); the recipes choose only which rows are queries and which are references.

Labels may be integer tensors or arrays, or sequences of hashable values (strings, sparse
identifiers, tuples). Before PML sees them, the recipes map them to dense int64 codes over the
full label set (the query's and every reference's labels together), as
``torch.unique(labels, return_inverse=True)`` does: PML casts labels to float32, and float32
represents integers exactly only up to 2**24, so two raw identifiers above 2**24 (for example
16777216 and 16777217) would become the same class inside PML.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "extract_embeddings",
    "main",
    "nearest_centroid_accuracy",
    "parent_conditioned_accuracy",
    "split_accuracy",
    "synthetic_example",
    "two_stream_accuracy",
]

# PML compares labels as float32, which holds every integer in [0, 2**24] exactly.
_MAX_DENSE_LABELS = 2**24
# Bytes of float64 (or float32 on MPS) rows converted at a time while summing class centroids.
_CENTROID_CHUNK_BYTES = 64 * 2**20
# What to do when PML's default k-NN (FaissKNN) finds no faiss: PML imports without it, and
# AccuracyCalculator() then fails with "NameError: name 'faiss' is not defined".
FAISS_MISSING = (
    "PML's default AccuracyCalculator k-NN (FaissKNN) needs faiss, which is not installed: "
    "pip install faiss-cpu, or give the calculator an exact k-NN: AccuracyCalculator(..., "
    "knn_func=CustomKNN(LpDistance(normalize_embeddings=False))) from "
    "pytorch_metric_learning.utils.inference and pytorch_metric_learning.distances"
)


class AccuracyCalculatorLike(Protocol):
    """What the recipes need from a calculator: PML's ``AccuracyCalculator.get_accuracy``."""

    def get_accuracy(
        self,
        query: torch.Tensor,
        query_labels: torch.Tensor,
        reference: torch.Tensor,
        reference_labels: torch.Tensor,
        ref_includes_query: bool = False,
    ) -> dict[str, Any]: ...


# ----------------------------------------------------------------------------------------------
# Embedding extraction
# ----------------------------------------------------------------------------------------------


def extract_embeddings(
    model: torch.nn.Module,
    loader: Iterable[Any],
    *,
    normalize: bool = True,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor | list[Any]]:
    """Run ``model`` over ``loader`` and return ``(embeddings, labels)`` in loader order.

    The loader yields ``(data, labels)`` batches (a ``DataLoader`` without shuffling keeps dataset
    order). Each batch goes through ``model(data)`` under ``torch.inference_mode()``, so the
    outputs carry no autograd graph; the outputs are concatenated in loader order and, with
    ``normalize=True`` (the default), each row is divided by its L2 norm. Pass
    ``normalize=False`` when the calculator's distance should see raw embeddings.

    The model is used as it is: its mode (``model.eval()`` or training mode, which the caller
    chooses; in training mode dropout stays active and batch-norm statistics still update), its
    device and its dtype are never changed. Compose a trunk and an embedder, or reduce
    dimensionality, in the module you pass. ``device``, when given, is where each tensor batch of
    data is moved before the call; otherwise the data is passed as the loader yields it.

    Labels are returned as the loader yields them: concatenated into one tensor when every
    batch of labels is a tensor, otherwise collected into one list (strings, for example). Map
    them to integers over the full label set before evaluation if you use them elsewhere; the
    evaluation recipes here do it themselves.

    Raises ``ValueError`` when the loader yields no batch, a batch that is not a
    ``(data, labels)`` pair, or a model output that is not one 2-D row per label.

    >>> import torch
    >>> from torch.utils.data import DataLoader, TensorDataset
    >>> data = torch.tensor([[3.0, 4.0], [0.0, 2.0], [5.0, 0.0]])
    >>> loader = DataLoader(TensorDataset(data, torch.tensor([7, 7, 9])), batch_size=2)
    >>> embeddings, labels = extract_embeddings(torch.nn.Identity(), loader)
    >>> embeddings
    tensor([[0.6000, 0.8000],
            [0.0000, 1.0000],
            [1.0000, 0.0000]])
    >>> labels
    tensor([7, 7, 9])
    >>> extract_embeddings(torch.nn.Identity(), loader, normalize=False)[0][0]
    tensor([3., 4.])
    """
    func = "extract_embeddings"
    outputs: list[torch.Tensor] = []
    label_batches: list[Any] = []
    with torch.inference_mode():
        for index, batch in enumerate(loader):
            if not isinstance(batch, (tuple, list)) or len(batch) != 2:
                raise ValueError(
                    f"The 'loader' parameter of {func} must yield (data, labels) pairs. "
                    f"Got {type(batch).__name__} as batch {index}."
                )
            data, labels = batch
            if device is not None and isinstance(data, torch.Tensor):
                data = data.to(device)
            output = model(data)
            num_labels = _batch_length(labels)
            if (
                not isinstance(output, torch.Tensor)
                or output.ndim != 2
                or output.shape[0] != num_labels
            ):
                got = (
                    f"shape {tuple(output.shape)}"
                    if isinstance(output, torch.Tensor)
                    else type(output).__name__
                )
                raise ValueError(
                    f"The 'model' parameter of {func} must return one 2-D tensor with a row per "
                    f"label ({num_labels} in batch {index}). Got {got}."
                )
            outputs.append(output)
            label_batches.append(labels)
        if not outputs:
            raise ValueError(f"The 'loader' parameter of {func} must yield batches. Got none.")
        embeddings = torch.cat(outputs)
        if normalize:
            embeddings = F.normalize(embeddings, p=2, dim=1)
    if all(isinstance(labels, torch.Tensor) for labels in label_batches):
        return embeddings, torch.cat([labels.reshape(-1) for labels in label_batches])
    collected: list[Any] = []
    for labels in label_batches:
        if isinstance(labels, (torch.Tensor, np.ndarray)):
            collected.extend(labels.reshape(-1).tolist())
        elif isinstance(labels, (list, tuple)):
            collected.extend(labels)
        else:
            collected.append(labels)
    return embeddings, collected


def _batch_length(labels: Any) -> int:
    if isinstance(labels, (torch.Tensor, np.ndarray)):
        return int(labels.shape[0]) if labels.ndim > 0 else 1
    try:
        return len(labels)
    except TypeError:
        return 1


# ----------------------------------------------------------------------------------------------
# Evaluation recipes
# ----------------------------------------------------------------------------------------------


def split_accuracy(
    calculator: AccuracyCalculatorLike,
    query: tuple[Any, Any],
    references: Sequence[tuple[Any, Any]],
    query_in_reference: bool,
) -> dict[str, Any]:
    """Evaluate a query split against a reference assembled from splits.

    ``query`` is an ``(embeddings, labels)`` pair and ``references`` a sequence of such pairs.

    - ``query_in_reference=True``: the reference is the query followed by the ``references``
      in the given order, and ``ref_includes_query=True`` is passed to ``get_accuracy``, so each
      query's own row is excluded from its neighbours and from its count of relevant items.
      With ``references=[]`` this is leave-one-out retrieval within the query split.
    - ``query_in_reference=False``: the reference is only the ``references`` (at least one),
      and no row is treated as a self-match.

    ======  ==========  ==================  ==============================================
    Query   References  query_in_reference  Meaning
    ======  ==========  ==================  ==============================================
    val     none        True                Leave-one-out retrieval within val
    val     train       False               Retrieve val queries from a train gallery
    val     train       True                Retrieve from val ∪ train, excluding each query
    ======  ==========  ==================  ==============================================

    Equal shapes or equal labels never imply self-matches: a reference split that happens to
    equal the query is, with ``query_in_reference=False``, a separate gallery whose row i is a
    correct neighbour of query i. Pass the flag that describes how the reference was assembled.
    Labels are mapped densely to int64 over the query's and all references' labels first.
    Queries whose label has no other reference row are lone queries, which PML leaves out.

    Returns the calculator's dictionary (metric name -> value).

    >>> import torch
    >>> from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    >>> val = (torch.tensor([[0.0], [2.0], [3.0], [9.0]]), ["cat", "cat", "dog", "dog"])
    >>> calculator = AccuracyCalculator(include=("precision_at_1",), k=1)
    >>> split_accuracy(calculator, val, [], query_in_reference=True)
    {'precision_at_1': 0.5}
    """
    func = "split_accuracy"
    query_emb, query_labels = _check_split(query, "query", func)
    reference_splits = _check_references(references, func)
    _check_flag(query_in_reference, func)
    if not reference_splits and not query_in_reference:
        raise ValueError(
            f"The 'references' parameter of {func} must hold at least one (embeddings, labels) "
            "pair when query_in_reference is False. Got an empty sequence."
        )
    _check_same_dim(query_emb, reference_splits, "references", func)
    # Dense int64 codes over all splits: PML casts labels to float32, which would merge raw
    # identifiers above 2**24 (16777216 and 16777217 become one class).
    codes = _dense_codes([query_labels, *(labels for _, labels in reference_splits)], func)
    query_codes, reference_codes = codes[0], codes[1:]
    reference_emb, reference_labels = _compose(
        query_emb, query_codes, reference_splits, reference_codes, query_in_reference
    )
    return calculator.get_accuracy(
        query_emb,
        query_codes,
        reference_emb,
        reference_labels,
        ref_includes_query=query_in_reference,
    )


def nearest_centroid_accuracy(
    calculator: AccuracyCalculatorLike,
    query: tuple[Any, Any],
    reference: tuple[Any, Any],
) -> dict[str, Any]:
    """Evaluate queries against one mean embedding per reference class.

    ``query`` and ``reference`` are ``(embeddings, labels)`` pairs. The reference is replaced by
    its class centroids (arithmetic means) and ``get_accuracy`` receives the centroids and their
    classes, with ``ref_includes_query=False``. With one reference per class, ``precision_at_1``
    is nearest-centroid accuracy: 1 for a query whose nearest centroid has its class, else 0.
    The calculator's ``knn_func`` sets the geometry and ``avg_of_avgs`` the class weighting; a
    query whose class has no reference row is a lone query and is left out. Other metrics rank
    against one reference per class, so they are not meaningful here.

    Class sums accumulate in float64 (float32 on MPS, which has no float64), so a large
    low-precision gallery does not overflow before the division; the centroids are returned to
    the reference's dtype and device. For cosine geometry, normalise embeddings before the call
    and use a ``knn_func`` with ``CosineSimilarity``, which normalises each centroid.

    >>> import torch
    >>> from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    >>> reference = torch.tensor([[0.0, 0.0], [2.0, 0.0], [6.0, 0.0], [8.0, 0.0]])
    >>> reference_labels = torch.tensor([0, 0, 1, 1])
    >>> query = torch.tensor([[0.5, 0.0], [3.0, 0.0], [5.0, 0.0]])
    >>> query_labels = torch.tensor([0, 1, 1])
    >>> calculator = AccuracyCalculator(include=("precision_at_1",))
    >>> accuracy = nearest_centroid_accuracy(
    ...     calculator, (query, query_labels), (reference, reference_labels)
    ... )
    >>> accuracy["precision_at_1"] == 2 / 3
    True
    """
    func = "nearest_centroid_accuracy"
    query_emb, query_labels = _check_split(query, "query", func)
    reference_emb, reference_labels = _check_split(reference, "reference", func)
    _check_same_dim(query_emb, [(reference_emb, reference_labels)], "reference", func)
    # Dense int64 codes over both label sets (PML's float32 labels merge ids above 2**24).
    query_codes, reference_codes = _dense_codes([query_labels, reference_labels], func)
    centroids, classes = _class_centroids(reference_emb, reference_codes)
    return calculator.get_accuracy(
        query_emb,
        query_codes.to(query_emb.device),
        centroids,
        classes.to(centroids.device),
        ref_includes_query=False,
    )


def two_stream_accuracy(
    calculator: AccuracyCalculatorLike,
    anchors: Any,
    references: Any,
    labels: Any,
) -> dict[str, Any]:
    """Evaluate anchors against a separate reference stream paired with them row by row.

    ``anchors`` and ``references`` are ``(N, D)`` embeddings; row i of ``references`` has
    label ``labels[i]``, the label of anchor i (for example an image and its caption, with
    ``labels = range(N)`` when only the pair matches, or class labels when every row of the
    class matches). The reference never includes the anchors, so no row is removed:
    ``ref_includes_query=False``.

    >>> import torch
    >>> from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    >>> anchors = torch.tensor([[0.0], [4.0], [10.0]])
    >>> references = torch.tensor([[1.0], [6.0], [15.0]])
    >>> calculator = AccuracyCalculator(include=("precision_at_1",), k=1)
    >>> two_stream_accuracy(calculator, anchors, references, [0, 1, 2])["precision_at_1"] == 2 / 3
    True
    """
    func = "two_stream_accuracy"
    anchor_emb = _check_embeddings(anchors, "anchors", func)
    reference_emb = _check_embeddings(references, "references", func)
    if reference_emb.shape != anchor_emb.shape:
        raise ValueError(
            f"The 'references' parameter of {func} must have the shape of 'anchors' "
            f"{tuple(anchor_emb.shape)}, row i paired with anchor i. "
            f"Got {tuple(reference_emb.shape)}."
        )
    column = _check_labels(labels, anchor_emb.shape[0], "labels", func, hierarchical=False)
    # Dense int64 codes (PML's float32 labels merge ids above 2**24).
    (codes,) = _dense_codes([column], func)
    return calculator.get_accuracy(
        anchor_emb,
        codes.to(anchor_emb.device),
        reference_emb,
        codes.to(reference_emb.device),
        ref_includes_query=False,
    )


def parent_conditioned_accuracy(
    calculator: AccuracyCalculatorLike,
    query: tuple[Any, Any],
    references: Sequence[tuple[Any, Any]],
    query_in_reference: bool,
) -> dict[str, float]:
    """Evaluate hierarchical labels, ranking each level only within its parent.

    Labels are shaped ``(N, L)``, columns ordered from the finest level to the coarsest. The
    reference is composed as in [`split_accuracy`][split_accuracy] (same ``references`` and
    ``query_in_reference``). For each level ``l < L - 1`` and each parent value ``p`` of
    column ``l + 1`` present in the query, the queries with parent ``p`` are evaluated on their
    level-``l`` labels against only the references with parent ``p`` (a cat query is ranked
    only against other animals, a truck query only against other vehicles). The result for the
    level is the unweighted mean over those parent groups, under ``<metric>_level<l>``; with
    more than one evaluated level (``L >= 3``), ``AVERAGE_<metric>`` is the unweighted mean over
    levels. The coarsest column only defines groups; for global, unconditioned evaluation of one
    level, pass that column to [`split_accuracy`][split_accuracy].

    Parent groups are the values of column ``l + 1`` alone, so give each level globally unique
    values. A parent group whose queries are all lone (no other reference row with their label
    in the group) has nothing to evaluate and is left out of the mean; a level where every
    group is left out gets NaN. The calculator must return one number per metric
    (``return_per_class=False``); with an integer ``k``, keep it no larger than the smallest
    parent group's reference, or use ``k=None`` or ``"max_bin_count"``.

    >>> import torch
    >>> from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    >>> embeddings = torch.tensor([[0.0], [1.0], [3.0], [10.0], [12.0], [13.0]])
    >>> labels = [("cat", "animal"), ("dog", "animal"), ("dog", "animal"),
    ...           ("car", "vehicle"), ("car", "vehicle"), ("truck", "vehicle")]
    >>> calculator = AccuracyCalculator(include=("precision_at_1",), k=1)
    >>> parent_conditioned_accuracy(calculator, (embeddings, labels), [], query_in_reference=True)
    {'precision_at_1_level0': 0.5}
    """
    func = "parent_conditioned_accuracy"
    query_emb, query_labels = _check_split(query, "query", func, hierarchical=True)
    reference_splits = _check_references(references, func, hierarchical=True)
    _check_flag(query_in_reference, func)
    if not reference_splits and not query_in_reference:
        raise ValueError(
            f"The 'references' parameter of {func} must hold at least one (embeddings, labels) "
            "pair when query_in_reference is False. Got an empty sequence."
        )
    _check_same_dim(query_emb, reference_splits, "references", func)
    num_levels = _check_levels(query_labels, reference_splits, func)
    # One dense int64 code column per level, over the query's and all references' labels
    # (PML casts labels to float32, which would merge raw identifiers above 2**24).
    label_sets = [query_labels] + [labels for _, labels in reference_splits]
    level_codes = [
        _dense_codes([_level_column(labels, level) for labels in label_sets], func)
        for level in range(num_levels)
    ]
    query_codes = torch.stack([codes[0] for codes in level_codes], dim=1)
    reference_codes = [
        torch.stack([codes[1 + i] for codes in level_codes], dim=1)
        for i in range(len(reference_splits))
    ]
    reference_emb, reference_labels = _compose(
        query_emb, query_codes, reference_splits, reference_codes, query_in_reference
    )
    per_level = [
        _level_accuracy(
            calculator,
            (query_emb, query_codes.cpu()),
            (reference_emb, reference_labels.cpu()),
            level,
            query_in_reference,
            func,
        )
        for level in range(num_levels - 1)
    ]
    return _by_level(calculator, per_level, func)


def _check_levels(query_labels: Any, reference_splits: Sequence[tuple[Any, Any]], func: str) -> int:
    """The number of label levels, the same in the query and every reference."""
    num_levels = (
        query_labels.shape[1] if isinstance(query_labels, torch.Tensor) else len(query_labels[0])
    )
    for index, (_, labels) in enumerate(reference_splits):
        width = labels.shape[1] if isinstance(labels, torch.Tensor) else len(labels[0])
        if width != num_levels:
            raise ValueError(
                f"The 'references' parameter of {func} must hold labels with the query's "
                f"{num_levels} levels. Got {width} in references[{index}]."
            )
    return num_levels


def _level_accuracy(
    calculator: AccuracyCalculatorLike,
    query: tuple[torch.Tensor, torch.Tensor],
    reference: tuple[torch.Tensor, torch.Tensor],
    level: int,
    query_in_reference: bool,
    func: str,
) -> dict[str, float]:
    """One level's metrics: the unweighted mean over the parent groups (column ``level + 1``)
    of the calculator's result on that group's queries against that group's references."""
    query_emb, query_codes = query
    reference_emb, reference_codes = reference
    group_values: dict[str, list[float]] = {}
    query_parents = query_codes[:, level + 1]
    reference_parents = reference_codes[:, level + 1]
    for parent in torch.unique(query_parents).tolist():
        query_mask = query_parents == parent
        reference_mask = reference_parents == parent
        group_query = query_codes[query_mask, level]
        group_reference = reference_codes[reference_mask, level]
        # Lone queries: no reference with their label in the group, once their own row is
        # discounted. A group of lone queries only has nothing to evaluate.
        counts = torch.bincount(group_reference, minlength=int(group_query.max()) + 1)
        if not bool((counts[group_query] - int(query_in_reference) > 0).any()):
            continue
        result = calculator.get_accuracy(
            query_emb[query_mask.to(query_emb.device)],
            group_query.to(query_emb.device),
            reference_emb[reference_mask.to(reference_emb.device)],
            group_reference.to(reference_emb.device),
            ref_includes_query=query_in_reference,
        )
        for name, value in result.items():
            if not isinstance(value, (int, float)):
                raise ValueError(
                    f"The 'calculator' parameter of {func} must return one number per "
                    f"metric (return_per_class=False). Got {type(value).__name__} for "
                    f"{name!r}."
                )
            group_values.setdefault(name, []).append(float(value))
    return {name: _mean(values) for name, values in group_values.items()}


def _by_level(
    calculator: AccuracyCalculatorLike, per_level: list[dict[str, float]], func: str
) -> dict[str, float]:
    """``<metric>_level<l>`` for every level (NaN where nothing was evaluated) and, with more
    than one level, ``AVERAGE_<metric>``."""
    metric_names = list(dict.fromkeys(name for values in per_level for name in values))
    if not metric_names:
        get_curr_metrics = getattr(calculator, "get_curr_metrics", None)
        if get_curr_metrics is None:
            raise ValueError(
                f"The 'query' parameter of {func} has no query with another reference of its "
                "label in its parent group at any level, so there is nothing to evaluate."
            )
        metric_names = list(get_curr_metrics())
    result: dict[str, float] = {}
    for name in metric_names:
        levels = [values.get(name, math.nan) for values in per_level]
        for level, value in enumerate(levels):
            result[f"{name}_level{level}"] = value
        if len(levels) > 1:
            result[f"AVERAGE_{name}"] = _mean(levels)
    return result


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


def _class_centroids(
    embeddings: torch.Tensor, codes: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(centroids, classes)``: one arithmetic mean row per class, sorted by class.

    Sums accumulate in float64 (float32 on MPS) in row chunks; the centroids are returned in the
    dtype and on the device of ``embeddings``.
    """
    codes = codes.to(embeddings.device)
    classes, inverse = torch.unique(codes, return_inverse=True)
    accumulate = torch.float32 if embeddings.device.type == "mps" else torch.float64
    itemsize = torch.empty((), dtype=accumulate).element_size()
    sums = torch.zeros(
        (classes.shape[0], embeddings.shape[1]), dtype=accumulate, device=embeddings.device
    )
    rows = max(1, _CENTROID_CHUNK_BYTES // (itemsize * embeddings.shape[1]))
    for start in range(0, embeddings.shape[0], rows):
        chunk = embeddings[start : start + rows].to(accumulate)
        sums.index_add_(0, inverse[start : start + rows], chunk)
    counts = torch.bincount(inverse, minlength=classes.shape[0]).to(accumulate)
    centroids = (sums / counts[:, None]).to(embeddings.dtype)
    return centroids, classes


def _compose(
    query_emb: torch.Tensor,
    query_codes: torch.Tensor,
    reference_splits: Sequence[tuple[torch.Tensor, Any]],
    reference_codes: Sequence[torch.Tensor],
    query_in_reference: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate the reference: the query first when it is part of it, then the splits."""
    device = query_emb.device
    embeddings = [emb.to(device) for emb, _ in reference_splits]
    codes = list(reference_codes)
    if query_in_reference:
        embeddings.insert(0, query_emb)
        codes.insert(0, query_codes)
    reference = embeddings[0] if len(embeddings) == 1 else torch.cat(embeddings)
    labels = torch.cat(codes).to(device)
    return reference, labels


def _dense_codes(columns: Sequence[Any], func: str) -> list[torch.Tensor]:
    """Map 1-D label columns to dense int64 codes 0..C-1 over their union, one tensor each.

    Never hand PML raw identifiers: it casts labels to float32, so identifiers above 2**24
    would collide (16777217 becomes 16777216). Dense codes stay below 2**24.
    """
    lengths = [len(column) for column in columns]
    if all(isinstance(column, torch.Tensor) for column in columns):
        # torch.unique(..., return_inverse=True) over the full label set, as the docs advise.
        _, codes = torch.unique(
            torch.cat([column.cpu() for column in columns]), return_inverse=True
        )
        codes = codes.to(torch.int64)
        num_classes = int(codes.max()) + 1
    else:
        mapping: dict[Hashable, int] = {}
        flat = [
            mapping.setdefault(value, len(mapping))
            for column in columns
            for value in (column.tolist() if isinstance(column, torch.Tensor) else column)
        ]
        codes = torch.tensor(flat, dtype=torch.int64)
        num_classes = len(mapping)
    if num_classes > _MAX_DENSE_LABELS:
        raise ValueError(
            f"The 'query' parameter of {func} and its references must hold at most 2**24 "
            f"distinct labels, which PML's float32 labels represent exactly. Got {num_classes}."
        )
    return list(codes.split(lengths))


def _level_column(labels: torch.Tensor | list[tuple[Any, ...]], level: int) -> Any:
    if isinstance(labels, torch.Tensor):
        return labels[:, level]
    return [row[level] for row in labels]


def _check_flag(query_in_reference: Any, func: str) -> None:
    if not isinstance(query_in_reference, (bool, np.bool_)):
        raise ValueError(
            f"The 'query_in_reference' parameter of {func} must be True or False. "
            f"Got {query_in_reference!r}."
        )


def _check_references(
    references: Any, func: str, *, hierarchical: bool = False
) -> list[tuple[torch.Tensor, Any]]:
    if isinstance(references, (torch.Tensor, np.ndarray)) or not isinstance(references, Sequence):
        raise ValueError(
            f"The 'references' parameter of {func} must be a sequence of (embeddings, labels) "
            f"pairs, e.g. [(train_embeddings, train_labels)]. Got {type(references).__name__}."
        )
    if len(references) > 0 and isinstance(references[0], (torch.Tensor, np.ndarray)):
        raise ValueError(
            f"The 'references' parameter of {func} must be a sequence of (embeddings, labels) "
            "pairs. Got a single pair; wrap it in a list: [(embeddings, labels)]."
        )
    return [
        _check_split(split, f"references[{index}]", func, hierarchical=hierarchical)
        for index, split in enumerate(references)
    ]


def _check_split(
    split: Any, name: str, func: str, *, hierarchical: bool = False
) -> tuple[torch.Tensor, Any]:
    """Validate an ``(embeddings, labels)`` pair; return the embeddings tensor and the labels.

    Labels come back as a 1-D (or, hierarchical, 2-D) numeric CPU tensor, or as a list of
    hashable values (or, hierarchical, a list of equal-length tuples).
    """
    if not isinstance(split, (tuple, list)) or len(split) != 2:
        raise ValueError(
            f"The '{name}' parameter of {func} must be an (embeddings, labels) pair. "
            f"Got {type(split).__name__}."
        )
    embeddings = _check_embeddings(split[0], name, func)
    labels = _check_labels(split[1], embeddings.shape[0], name, func, hierarchical=hierarchical)
    return embeddings, labels


def _check_embeddings(embeddings: Any, name: str, func: str) -> torch.Tensor:
    if isinstance(embeddings, np.ndarray):
        embeddings = torch.from_numpy(embeddings)
    if not isinstance(embeddings, torch.Tensor):
        raise ValueError(
            f"The '{name}' parameter of {func} must hold embeddings as a 2-D floating-point "
            f"tensor or array. Got {type(embeddings).__name__}."
        )
    if embeddings.ndim != 2:
        raise ValueError(
            f"The '{name}' parameter of {func} must hold embeddings of shape (N, D). "
            f"Got shape {tuple(embeddings.shape)}."
        )
    if embeddings.shape[0] == 0 or embeddings.shape[1] == 0:
        raise ValueError(
            f"The '{name}' parameter of {func} must hold at least one embedding of at least one "
            f"dimension. Got an empty tensor of shape {tuple(embeddings.shape)}."
        )
    if not embeddings.is_floating_point():
        raise ValueError(
            f"The '{name}' parameter of {func} must hold floating-point embeddings. "
            f"Got dtype {embeddings.dtype}."
        )
    bad_rows = int((~torch.isfinite(embeddings)).any(dim=1).sum())
    if bad_rows:
        raise ValueError(
            f"The '{name}' parameter of {func} must hold finite embeddings. "
            f"Got {bad_rows} row(s) with NaN or infinite values."
        )
    return embeddings


def _check_labels(labels: Any, num_rows: int, name: str, func: str, *, hierarchical: bool) -> Any:
    expected = "(N, L) with L >= 2 levels" if hierarchical else "(N,)"
    if isinstance(labels, np.ndarray):
        labels = torch.from_numpy(labels) if labels.dtype.kind in "biuf" else labels.tolist()
    if isinstance(labels, torch.Tensor):
        if (
            labels.is_complex()
            or labels.ndim != (2 if hierarchical else 1)
            or (hierarchical and labels.shape[1] < 2)
        ):
            raise ValueError(
                f"The '{name}' parameter of {func} must hold labels of shape {expected}. "
                f"Got shape {tuple(labels.shape)}."
            )
        if labels.is_floating_point() and not bool(torch.isfinite(labels).all()):
            raise ValueError(
                f"The '{name}' parameter of {func} must hold finite labels. Got NaN or infinity."
            )
        labels = labels.cpu()
    elif isinstance(labels, Sequence) and not isinstance(labels, (str, bytes)):
        labels = list(labels)
        if hierarchical:
            labels = _check_label_rows(labels, name, func, expected)
        else:
            for value in labels:
                if not isinstance(value, Hashable) or isinstance(value, (torch.Tensor, np.ndarray)):
                    raise ValueError(
                        f"The '{name}' parameter of {func} must hold labels of shape "
                        f"{expected}: one hashable label per row. Got {type(value).__name__}."
                    )
    else:
        raise ValueError(
            f"The '{name}' parameter of {func} must hold labels as a tensor, array or sequence "
            f"of shape {expected}. Got {type(labels).__name__}."
        )
    if len(labels) != num_rows:
        raise ValueError(
            f"The '{name}' parameter of {func} must pair each embedding with one label. "
            f"Got {num_rows} embeddings and {len(labels)} labels."
        )
    return labels


def _check_label_rows(labels: list[Any], name: str, func: str, expected: str) -> list[tuple]:
    rows: list[tuple] = []
    width = None
    for row in labels:
        if isinstance(row, (str, bytes)) or not isinstance(row, (Sequence, torch.Tensor)):
            raise ValueError(
                f"The '{name}' parameter of {func} must hold labels of shape {expected}. "
                f"Got a row of type {type(row).__name__}."
            )
        row = tuple(row.tolist() if isinstance(row, torch.Tensor) else row)
        if width is None:
            width = len(row)
        if len(row) != width or len(row) < 2:
            raise ValueError(
                f"The '{name}' parameter of {func} must hold labels of shape {expected}. "
                f"Got rows of {width} and {len(row)} levels."
                if len(row) != width
                else f"The '{name}' parameter of {func} must hold labels of shape {expected}. "
                f"Got {len(row)} level(s)."
            )
        rows.append(row)
    return rows


def _check_same_dim(
    query_emb: torch.Tensor, splits: Sequence[tuple[torch.Tensor, Any]], name: str, func: str
) -> None:
    for index, (embeddings, _) in enumerate(splits):
        if embeddings.shape[1] != query_emb.shape[1]:
            where = name if name == "reference" else f"{name}[{index}]"
            raise ValueError(
                f"The '{name}' parameter of {func} must hold embeddings of the query's dimension "
                f"{query_emb.shape[1]}. Got {embeddings.shape[1]} in {where}."
            )


# ----------------------------------------------------------------------------------------------
# The executable example
# ----------------------------------------------------------------------------------------------


def synthetic_example(
    seed: int = 0,
) -> tuple[torch.nn.Module, torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    """Return ``(model, val_loader, train_loader)``: a random projection and two labelled splits.

    Five classes with Gaussian clusters in 16 dimensions that overlap enough for imperfect
    retrieval; 10 val and 20 train rows per class; the model projects to 8 dimensions. Everything
    is drawn from a ``torch.Generator`` seeded with ``seed``, so the global RNG is untouched.
    """
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(seed)
    num_classes, input_dim, embedding_dim = 5, 16, 8
    centres = 1.2 * torch.randn(num_classes, input_dim, generator=generator)

    def split(per_class: int) -> TensorDataset:
        labels = torch.arange(num_classes).repeat_interleave(per_class)
        data = centres[labels] + torch.randn(len(labels), input_dim, generator=generator)
        return TensorDataset(data, labels)

    val, train = split(10), split(20)
    model = torch.nn.Linear(input_dim, embedding_dim, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.randn(embedding_dim, input_dim, generator=generator))
    model.eval()
    return model, DataLoader(val, batch_size=16), DataLoader(train, batch_size=16)


def main() -> None:
    """Extract synthetic embeddings and print precision_at_1 and r_precision for two splits.

    PML's default calculator needs faiss: without it, one line on stderr and exit status 1.
    """
    try:
        import faiss  # noqa: F401  (PML's FaissKNN; PML itself imports without it)
    except ImportError:
        raise SystemExit(f"evaluation recipe: {FAISS_MISSING}.") from None
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    model, val_loader, train_loader = synthetic_example()
    val = extract_embeddings(model, val_loader)
    train = extract_embeddings(model, train_loader)
    # k="max_bin_count" retrieves enough neighbours for R-precision (R = same-class references).
    calculator = AccuracyCalculator(include=("precision_at_1", "r_precision"), k="max_bin_count")
    rows = [
        ("val", "val (itself)", True, split_accuracy(calculator, val, [], True)),
        ("val", "train gallery", False, split_accuracy(calculator, val, [train], False)),
    ]
    print(
        f"Synthetic retrieval: {len(val[0])} val rows, {len(train[0])} train rows, "
        f"{int(torch.unique(val[1]).numel())} classes, {val[0].shape[1]}-d L2-normalised embeddings"
    )
    print(f"{'query':<6} {'reference':<14} {'query_in_reference':<19} precision_at_1  r_precision")
    for query_name, reference_name, flag, accuracy in rows:
        print(
            f"{query_name:<6} {reference_name:<14} {flag!s:<19} "
            f"{accuracy['precision_at_1']:<15.4f} {accuracy['r_precision']:.4f}"
        )


if __name__ == "__main__":
    main()
