"""The label form's public functions: a reference item is relevant to a query when it has the
query's label.

[`retrieval_metrics`][retrieval_metrics] returns any metrics of the registry (``recallkit.metrics``:
recall@K, precision@K, IR-recall@K, MAP@K, MAP@R, R-precision, MRR, nDCG@K) from one pass of the
engine; [`recall_at_k`][recall_at_k], [`map_at_r`][map_at_r], [`r_precision`][r_precision] and
[`map_at_k`][map_at_k] ask for one family each. The work is
[`recallkit._labels.form`][recallkit._labels.form]'s: one validated problem, one pass.

Self-matches are removed only as the caller says: ``query_in_reference=True`` (PML's
convention: ``reference[:n]`` is the query, row for row; checked by value) or
``query_ids``/``reference_ids`` (every reference item whose id equals the query's). Nothing is
inferred from equal vectors or equal labels; but a reference that begins with the query's rows,
value for value (the query array itself, a copy, the same embeddings loaded twice), without
``query_in_reference`` or ids is an error, since scoring each query against itself is the most
common mistake of the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recallkit import metrics as registry
from recallkit._inputs import checks as _checks
from recallkit._labels import form as label_form
from recallkit.options import Options, accepts, fill_docs
from recallkit.result import Result
from recallkit.typing import Embeddings, Ids, Labels

# The parameters every label-form function takes, documented once (numpydoc entries).
_INPUTS = """query : array_like of shape (n, d)
    The query embeddings ([`recallkit.typing.Embeddings`][recallkit.typing.Embeddings]): numpy,
    torch (any device), nested sequences.
reference : array_like of shape (m, d)
    The reference (gallery) embeddings; a numpy memory map or a
    ``recallkit._inputs.io.EmbeddingFile`` is read from its file block by block.
query_labels : array_like of shape (n,)
    One label per query ([`recallkit.typing.Labels`][recallkit.typing.Labels]): integers of any
    size, strings, bytes or tuples, compared by value (never cast to float); all of one kind.
reference_labels : array_like of shape (m,)
    One label per reference row, of the kind of ``query_labels``."""
_EXCLUSIONS = """query_in_reference : bool, optional
    ``True``: ``reference[:n]`` is the query, row for row (PML's ``ref_includes_query``,
    checked value for value), and each query's own row is removed (leave-one-out, as CUB,
    Cars196, SOP and iNaturalist are evaluated). ``False``: nothing is removed, even when
    vectors or labels are equal. Required (``True`` or ``False``) when the reference begins
    with the query's rows; never inferred.
query_ids, reference_ids : array_like of shape (n,) and (m,), optional
    Ids compared by value ([`recallkit.typing.Ids`][recallkit.typing.Ids]): every reference item
    with the query's id is removed (several photos of one object). Given together."""
_RANKING = """Ranking: scores are cosine similarity (the default), inner product
(``metric="dot"``) or negative Euclidean distance (``metric="euclidean"``), decided on exact
float64 scores: a GEMM only filters, so ranks do not depend on chunking, threads, BLAS,
precision or device. Ties: on equal scores the lower reference index ranks first;
``result.bounds`` gives each value with every tie broken against the queries and in their
favour, ``result.num_tied`` how many queries a tie decides. The full ``n x m`` matrix is never
built."""
_RESULT = """Result
    A read-only mapping ``metric name -> value`` ([`recallkit.Result`][recallkit.result.Result])
    with each query's value (``per_query``, NaN for a lone query), the first-hit ranks where a
    metric reads them, the counts (``num_queries``, ``num_evaluated``, ``num_excluded``), the tie
    bounds (``bounds``, ``num_tied``) and the definitions record."""
_RAISES = """ValueError
    ([`recallkit.ParameterError`][recallkit.exceptions.ParameterError]) When an argument is
    malformed: shapes, lengths, NaN or infinite values, zero rows under cosine, unknown metric
    names, labels of mixed kinds, a reference that begins with the queries without
    ``query_in_reference``, lone queries under ``lone_queries="error"``; the message names the
    argument."""


def _run(
    func: str, chosen: Sequence[registry.Metric], given: dict[str, Any], parameter: str
) -> Result:
    """The one pass of the label-form functions: ``given`` holds their arguments by name."""
    problem = label_form.build(
        func,
        given["query"],
        given["reference"],
        given["query_labels"],
        given["reference_labels"],
        query_in_reference=given["query_in_reference"],
        query_ids=given["query_ids"],
        reference_ids=given["reference_ids"],
        options=given["options"],
    )
    return label_form.evaluate(func, problem, chosen, parameter=parameter)[0]


@accepts()
def retrieval_metrics(
    query: Embeddings,
    reference: Embeddings,
    query_labels: Labels,
    reference_labels: Labels,
    metrics: Sequence[str] = ("recall@1", "MAP@R", "R-precision"),
    *,
    query_in_reference: bool | None = None,
    query_ids: Ids | None = None,
    reference_ids: Ids | None = None,
    divisor: str = "min_k_r",
    options: Options,
) -> Result:
    """Any label-form metrics of the registry from one pass of the engine.

    A reference item is relevant to a query when it has the query's label and is not
    excluded. The first-hit ranks and the ranked lists every metric reads are computed once.

    {ranking}

    Parameters
    ----------
    {inputs}
    metrics : sequence of str, default ("recall@1", "MAP@R", "R-precision")
        The metrics by name or alias (case-insensitive; ``recallkit.metrics``):
        ``"recall@K"`` (hit@K), ``"precision@K"``, ``"IR-recall@K"``, ``"MAP@K"``, ``"MAP@R"``,
        ``"R-precision"``, ``"MRR"`` (``"MRR@K"``), ``"nDCG@K"``, ``"MnR"``, ``"MedR"``, and
        the peers' names (PML's ``"precision_at_1"``, ``"mean_average_precision_at_r"``, ...).
    {exclusions}
    divisor : {"min_k_r", "r", "hits"}, default "min_k_r"
        MAP@K's divisor: min(K, R) (CIRCO; a perfect ranking scores 1), R (PML, ranx) or the
        hits in the top K (torchmetrics, OML).
    {options}

    Returns
    -------
    {result}

    Raises
    ------
    {raises}

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> r = retrieval_metrics(x, x, [0, 0, 1, 1], [0, 0, 1, 1], ["recall@1", "MAP@R", "MRR"],
    ...                       query_in_reference=True)
    >>> dict(r)
    {'recall@1': 0.5, 'MAP@R': 0.5, 'MRR': 0.75}
    """
    func = "retrieval_metrics"
    _checks.check_choice(divisor, registry.DIVISORS, func, "divisor")
    chosen = registry.parse(metrics, func, divisor=divisor)
    return _run(func, chosen, locals(), "metrics")


@accepts()
def recall_at_k(
    query: Embeddings,
    reference: Embeddings,
    query_labels: Labels,
    reference_labels: Labels,
    ks: Sequence[int] = (1, 5, 10),
    *,
    query_in_reference: bool | None = None,
    query_ids: Ids | None = None,
    reference_ids: Ids | None = None,
    options: Options,
) -> Result:
    """Recall@K of label-form retrieval: a hit when one of the K nearest shares the label.

    For a query ``q`` with first-hit rank ``r(q)`` (0-indexed rank of its nearest reference
    item with the same label):

        recall@K = |{q evaluated : r(q) < K}| / |{q evaluated}|

    This is the deep-metric-learning convention (Oh Song et al. 2016, CVPR; Musgrave et al.
    2020, "A Metric Learning Reality Check"), equal to PML's ``precision_at_1`` at K = 1. It is
    *not* the information-retrieval recall (``"IR-recall@K"`` of
    [`retrieval_metrics`][retrieval_metrics]). Queries left with no reference item of their label
    are lone: left out and counted in ``num_excluded`` (``lone_queries`` chooses otherwise); when
    all are lone the values are NaN, with a warning. K above a query's candidates is clamped to them
    (``effective_ks``), with a warning.

    {ranking}

    Parameters
    ----------
    {inputs}
    ks : sequence of int, default (1, 5, 10)
        The K values, positive and distinct; the result's keys are ``"recall@K"`` in this
        order.
    {exclusions}
    {options}

    Returns
    -------
    {result}
        ``first_hit_ranks`` holds each query's 0-indexed first-hit rank (``-1`` for a lone
        query).

    Raises
    ------
    {raises}

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> r = recall_at_k(x, x, [0, 1, 1, 0], [0, 1, 1, 0], ks=(1, 2), query_in_reference=True)
    >>> dict(r)
    {'recall@1': 0.0, 'recall@2': 0.5}
    """
    func = "recall_at_k"
    ks = _checks.check_ks(ks, func)
    return _run(func, registry.recall(ks), locals(), "ks")


@accepts()
def r_precision(
    query: Embeddings,
    reference: Embeddings,
    query_labels: Labels,
    reference_labels: Labels,
    *,
    query_in_reference: bool | None = None,
    query_ids: Ids | None = None,
    reference_ids: Ids | None = None,
    options: Options,
) -> Result:
    """R-precision: the fraction of relevant items among the first R, averaged over queries.

    ``R`` is the number of reference items with the query's label after self-exclusion; lone
    queries (R = 0) are left out, as in PML (Musgrave et al. 2020, "A Metric Learning Reality
    Check").

    {one_metric}

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(r_precision(x, x, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True))
    0.5
    """
    return _run("r_precision", (registry.RPrecision(),), locals(), "metrics")


@accepts()
def map_at_r(
    query: Embeddings,
    reference: Embeddings,
    query_labels: Labels,
    reference_labels: Labels,
    *,
    query_in_reference: bool | None = None,
    query_ids: Ids | None = None,
    reference_ids: Ids | None = None,
    options: Options,
) -> Result:
    """MAP@R (Musgrave et al. 2020): the mean over queries of ``(1/R) Σ_{i ≤ R} rel(i) P@i``.

    ``R`` is the number of reference items with the query's label after self-exclusion; lone
    queries are left out. Identical to PML's ``mean_average_precision_at_r`` on the same
    inputs (with ``k="max_bin_count"``), except that ties rank the lower reference index first.

    {one_metric}

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(map_at_r(x, x, [0, 0, 1, 1], [0, 0, 1, 1], query_in_reference=True))
    0.5
    """
    return _run("map_at_r", (registry.MAPAtR(),), locals(), "metrics")


@accepts()
def map_at_k(
    query: Embeddings,
    reference: Embeddings,
    query_labels: Labels,
    reference_labels: Labels,
    k: int = 10,
    *,
    divisor: str = "min_k_r",
    query_in_reference: bool | None = None,
    query_ids: Ids | None = None,
    reference_ids: Ids | None = None,
    options: Options,
) -> Result:
    """Mean AP@K over the evaluated queries, label form (``recallkit.metrics.MAPAtK``).

    ``AP@K = (1/D) Σ_{i ≤ K} rel(i) P@i`` with the divisor ``D`` chosen by ``divisor``; a
    query with ``D = 0`` scores 0. Lone queries (R = 0) are left out. K above the reference
    size reads the whole ranking.

    {ranking}

    Parameters
    ----------
    {inputs}
    k : int, default 10
        The cut-off K, positive.
    divisor : {"min_k_r", "r", "hits"}, default "min_k_r"
        min(K, R) (CIRCO; a perfect ranking scores 1), R (PML, ranx) or the hits in the top K
        (torchmetrics, OML).
    {exclusions}
    {options}

    Returns
    -------
    {result}
        It holds ``"MAP@K"``; ``float(result)`` is its value.

    Raises
    ------
    {raises}

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(map_at_k(x, x, [0, 0, 1, 1], [0, 0, 1, 1], k=2, query_in_reference=True))
    0.75
    """
    func = "map_at_k"
    k = _checks.check_positive_int(k, func, "k")
    _checks.check_choice(divisor, registry.DIVISORS, func, "divisor")
    return _run(func, (registry.MAPAtK(k, divisor=divisor),), locals(), "k")


def _shared(text: str) -> str:
    """A shared docstring part, indented as the function docstrings' sections are."""
    return text.replace("\n", "\n    ")


# The sections of a function that computes one metric without parameters of its own.
_ONE_METRIC = """{ranking}

Parameters
----------
{inputs}
{exclusions}
{options}

Returns
-------
{result}
    It holds ``"NAME"``; ``float(result)`` is its value.

Raises
------
{raises}"""
for _function, _name in ((r_precision, "R-precision"), (map_at_r, "MAP@R")):
    _function.__doc__ = fill_docs(
        _function.__doc__.replace("{one_metric}", _shared(_ONE_METRIC.replace("NAME", _name)))
    )
for _function in (retrieval_metrics, recall_at_k, r_precision, map_at_r, map_at_k):
    for _marker, _text in (
        ("{inputs}", _INPUTS),
        ("{exclusions}", _EXCLUSIONS),
        ("{ranking}", _RANKING),
        ("{result}", _RESULT),
        ("{raises}", _RAISES),
    ):
        _function.__doc__ = _function.__doc__.replace(_marker, _shared(_text))
