"""pytorch-metric-learning layer: an exact ``knn_func``; an ``AccuracyCalculator`` with recall@K.

Both default to PML's default geometry: ``AccuracyCalculator()`` ranks with ``FaissKNN``, an
exact ``faiss.IndexFlatL2`` (Euclidean distance), so ``ExactKNN()`` and ``RecallCalculator()``
rank by Euclidean distance too. Cosine similarity is ``metric="cosine"``.
"""

from __future__ import annotations

import inspect
import numbers
from functools import partial
from typing import Any

import numpy as np
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

from recallkit import engine
from recallkit import metrics as registry
from recallkit._averaging import pml_avg_of_avgs
from recallkit._inputs import checks as _checks
from recallkit._inputs.codes import dense_codes
from recallkit._inputs.io import pin, read_through
from recallkit._labels import form as label_form
from recallkit.engine.exact import row_sq_norms
from recallkit.exceptions import RecallkitWarning, Text, warn
from recallkit.ground_truth import id_codes, nearest_neighbors
from recallkit.options import Options, accepts, check_flag, fill_docs
from recallkit.options import names as option_names
from recallkit.retrieval import retrieval_metrics
from recallkit.typing import Embeddings, Ids, Labels

#: The ranking metrics [`RecallCalculator`][RecallCalculator] computes by default (PML's names),
#: before the ``recall_at_K`` entries.
RANKING_METRICS = ("precision_at_1", "r_precision", "mean_average_precision_at_r")


class ExactKNN:
    """A drop-in ``knn_func`` for PML's ``AccuracyCalculator``: exact, chunked, deterministic.

    Called as ``knn(query, k, reference, ref_includes_query)`` it returns ``(distances,
    indices)`` of shape ``(n, k)``, best first, as PML's ``FaissKNN`` does.

    Geometry: the default ``metric="euclidean"`` is PML's default (``FaissKNN`` with
    ``faiss.IndexFlatL2``), so swapping one for the other keeps every neighbour list on data
    without exact ties. ``metric="cosine"`` ranks by cosine similarity (zero rows are an
    error), ``metric="dot"`` by inner product. ``distances`` are Euclidean distances for
    ``"euclidean"`` (``IndexFlatL2`` returns their squares; PML's metrics read only the
    indices) and similarities (higher is better) for ``"cosine"``/``"dot"``. All-zero rows are
    valid under ``"euclidean"`` and ``"dot"``.

    Ties: on equal scores the lower reference index comes first, always. faiss orders equal
    distances as its search happens to (its CPU flat index usually yields the lower index
    first, but this is not specified and differs on GPUs and with other index types), so on
    data with exact ties PML's default and ``ExactKNN`` may return different lists; with
    ``ExactKNN`` the lists, and every metric computed from them, are a function of the inputs.
    Example: on ``[[10], [10], [20], [20]]`` with labels ``[1, 0, 1, 0]`` (leave-one-out),
    each item's nearest neighbour is its unique twin at distance 0, with the other label:
    ``precision_at_1`` is 0 for PML's default and for ``ExactKNN()``. Under
    ``metric="cosine"`` all four are at similarity 1 (all tied): queries 0, 1, 3 take the lowest
    other index (label 0, 1, 1: misses) and query 2 takes row 0 (label 1, a hit): 0.25.

    ``ref_includes_query`` (PML's convention: ``reference[:len(query)]`` is the query) removes
    the query's own row ``i`` by index, even when an exact duplicate of the query sits elsewhere
    in the reference (that duplicate is a real neighbour at distance 0). ``k = 0`` returns
    empty ``(n, 0)`` lists, as PML asks when every label is unique. Without it, a reference
    that is the query tensor itself, or begins with the queries' rows value for value, is
    searched as given, as PML's ``FaissKNN`` searches it (a drop-in accepts every call PML
    accepts): each query finds itself first, at distance 0, and PML's
    ``get_accuracy(x, labels, x, labels)`` scores each query against itself. That is most often
    a forgotten ``ref_includes_query=True``, so ``ExactKNN`` warns
    ([`RecallkitWarning`][recallkit.exceptions.RecallkitWarning]);
    ``keep_query_copies=True`` says the copies are meant as gallery items and keeps them
    without a warning. recallkit's own functions and [`RecallCalculator`][RecallCalculator]
    refuse such a call instead.

    ``exclude_ids=(query_ids, reference_ids)`` also removes every reference item whose id equals
    the query's (ids are compared as codes: memory does not grow with the items sharing an id).

    Parameters
    ----------
    keep_query_copies : bool, default False
        Keep a reference that begins with the queries' rows as gallery items, without a
        warning, when ``ref_includes_query`` is False (warned otherwise).
    {options}

    Examples
    --------
    >>> import torch
    >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    >>> dist, idx = ExactKNN()(x, 2, x, True)
    >>> idx.tolist(), dist[0].tolist()
    ([[1, 2], [0, 2], [0, 1]], [0.0, 1.4142135381698608])
    """

    @accepts("ExactKNN", scope="engine", defaults={"metric": "euclidean"})
    def __init__(self, *, keep_query_copies: bool = False, options: Options) -> None:
        self.keep_query_copies = check_flag(keep_query_copies, "ExactKNN", "keep_query_copies")
        self.options = options
        self.metric = options.metric
        self.chunk_size = options.chunk_size
        self.device = options.device
        self.precision = options.precision

    def __call__(
        self,
        query: Embeddings,
        k: int,
        reference: Embeddings | None = None,
        ref_includes_query: bool = False,
        *,
        exclude_ids: tuple[Ids, Ids] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` nearest reference items of each query, best first (PML's ``knn_func``).

        Parameters
        ----------
        query : array_like of shape (n, d)
            The queries.
        k : int
            The list length, 0 or more.
        reference : array_like of shape (m, d), optional
            The reference (default: the queries, leave-one-out).
        ref_includes_query : bool, default False
            ``reference[:n]`` is the query (PML's convention): each query's own row is removed.
        exclude_ids : tuple (query_ids, reference_ids), optional
            Remove every reference item whose id equals the query's.

        Returns
        -------
        distances : Tensor, shape (n, k)
            Euclidean distances (``metric="euclidean"``) or similarities, in the query's float
            type, on the query's device.
        indices : Tensor of int64, shape (n, k)
            The reference indices, best first; on equal scores the lower reference index first.
        """
        func = "ExactKNN"
        if reference is None:
            reference, ref_includes_query = query, True
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise _checks.fail(func, "k", "a non-negative integer", repr(k))
        tensor_input = torch.is_tensor(query)
        query, reference = _checked_embeddings(query, reference, self.metric, func)
        n, m = query.shape[0], reference.shape[0]
        if ref_includes_query and m < n:
            raise _checks.fail(
                func, "reference", f"at least {n} rows when ref_includes_query=True", m
            )
        if exclude_ids is not None:
            id_codes(exclude_ids, n, m, func)  # checked here, to name ExactKNN
        elif not ref_includes_query and not self.keep_query_copies and m >= n:
            same = label_form.same_memory(query, reference)
            if same or _starts_with(query, reference):
                warn(_query_copies_warning(same))
        if k == 0:
            on_query = tensor_input or self.device is None
            device = query.device if on_query else self.device
            empty = torch.empty((n, 0), dtype=query.dtype, device=device)
            return empty, torch.empty((n, 0), dtype=torch.int64, device=device)
        indices, scores = nearest_neighbors(
            query,
            reference,
            int(k),
            query_in_reference=bool(ref_includes_query),
            exclude_ids=exclude_ids,
            options=self.options,
        )
        if self.metric == "euclidean":
            q = query.to(device=scores.device, dtype=scores.dtype)
            # score = 2 q·r - |r|², so |q - r|² = |q|² - score.
            scores = ((q * q).sum(dim=1, keepdim=True) - scores).clamp(min=0).sqrt()
        out_device = query.device if tensor_input else indices.device
        # Exact float64 scores, returned in the query's floating type as PML's knn_funcs do.
        dtype = query.dtype if query.is_floating_point() else torch.float64
        return scores.to(out_device, dtype), indices.to(out_device)


def _query_copies_warning(same: bool) -> RecallkitWarning:
    what = "the query tensor itself" if same else "a tensor whose first rows equal the queries"
    return RecallkitWarning(
        "ExactKNN",
        Text(
            f"{{flag}} is False with {what} as the reference: each query finds itself "
            "first, at distance 0, as PML computes it; pass {loo} to "
            "AccuracyCalculator.get_accuracy for leave-one-out, or build ExactKNN with {keep} "
            "when the gallery really holds copies of the queries (no warning then)",
            flag="ref_includes_query",
            loo=("ref_includes_query", True),
            keep=("keep_query_copies", True),
        ),
        "ref_includes_query",
    )


def _checked_embeddings(
    query: Any, reference: Any, metric: str, func: str
) -> tuple[torch.Tensor, Any]:
    """Validate ``query`` and ``reference`` under ``func``'s name (no copy of tensors).

    Shapes, dimensions, finiteness and, for cosine, zero rows are checked here, so that errors
    name the function the user called. A streamed reference is checked for its shape; its rows
    are checked block by block as they are read. A memory-mapped one comes back pinned
    ([`recallkit._inputs.io.pin`][recallkit._inputs.io.pin]: read from its file, never through the
    mapping), and a query that
    maps the same file is read through its descriptor.
    """
    same = reference is query
    if isinstance(reference, np.memmap):
        reference = pin(reference, func)
        query = read_through(reference, query)
    q = _checks.as_embeddings(query, "query", func)
    if engine.is_streamed(reference):
        r = reference
        shape = tuple(r.shape)
        if len(shape) != 2 or shape[0] == 0:
            raise _checks.fail(func, "reference", "a non-empty 2-D array", f"shape {shape}")
    else:
        r = q if same else _checks.as_embeddings(reference, "reference", func)
    if r.shape[1] != q.shape[1]:
        raise _checks.fail(
            func, "reference", f"of the query's dimension {q.shape[1]}", f"dimension {r.shape[1]}"
        )
    checked = [("query", q)]
    if not same and not engine.is_streamed(reference):
        checked.append(("reference", r))
    for name, x in checked:
        _checks.check_finite_rows(x, 0, name, func)
        if metric == "cosine":  # the engine's rule: sums of squares in float64 never underflow
            rows = x.detach().to(engine.work_dtype(x.dtype))
            _checks.check_zero_rows(row_sq_norms(rows), 0, name, func)
    return q, r


class RecallCalculator(AccuracyCalculator):
    """PML's ``AccuracyCalculator`` with recall@K, exact neighbours and PML's default geometry.

    By default ``get_accuracy`` returns exactly these keys (PML's names, in PML's alphabetical
    order): ``mean_average_precision_at_r`` (MAP@R), ``precision_at_1``, ``r_precision``, and
    ``recall_at_K`` for each K in ``ks``; no clustering metric (AMI and NMI run k-means: slow at
    scale and noisy) and no ``mean_average_precision``/``mean_reciprocal_rank`` (truncated at
    ``k`` by PML). ``include=`` chooses other metrics, as for PML (``include=()`` is PML's
    "everything", clustering included); ``exclude=`` removes some from the default.

    - Geometry: ``metric="euclidean"`` (default, PML's default ``FaissKNN`` is an exact
      ``IndexFlatL2``), ``"cosine"`` or ``"dot"``. The default ``knn_func`` is
      [`ExactKNN`][ExactKNN] with the same ``metric`` (ties: lower reference index first), and
      ``k`` defaults to ``"max_bin_count"`` so that MAP@R and R-precision are exact.
    - One pass: ``recall_at_K``, and with the default ``knn_func`` also ``precision_at_1``,
      ``r_precision`` and ``mean_average_precision_at_r``, come from one call of
      [`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics] (the one implementation
      of each; names in ``recallkit.metrics.REGISTRY``), with PML's ``ref_includes_query`` and
      lone-query semantics; ``avg_of_avgs`` is recallkit's ``average="class"`` (equal to PML's to
      the last bit) and ``return_per_class`` reads
      [`recallkit.Result.by_class`][recallkit.result.Result.by_class]. PML's other metrics (and all
      of them with another ``knn_func``) are PML's own. ``metric``, ``chunk_size``, ``precision``
      and every other engine option are those of [`recallkit.Options`][recallkit.options.Options];
      the engine runs on the calculator's ``device``.
    - Labels are mapped to dense int64 codes before PML sees them (PML casts labels to
      float32, which merges identifiers above 2**24); labels are compared by equality (a
      custom ``label_comparison_fn`` is refused).
    - Bad input (shapes, lengths, NaN, zero rows under cosine, metric names that are not
      computed, ``ref_includes_query`` with a reference that does not start with the query)
      raises ``ValueError`` naming ``RecallCalculator.get_accuracy`` and the argument.

    Ties: on equal scores the lower reference index ranks first ([`ExactKNN`][ExactKNN]).

    Parameters
    ----------
    ks : sequence of int, default (1, 2, 4, 8)
        The K of ``recall_at_K``, positive and distinct.
    include : tuple of str, optional
        The metrics to compute, PML's names or recallkit's (default: above).
    {options}
    **kwargs
        PML's ``AccuracyCalculator`` options (``exclude``, ``avg_of_avgs``,
        ``return_per_class``, ``k``, ``knn_func``, ``device``, ...).

    Examples
    --------
    >>> import torch
    >>> x = torch.tensor([[0.0], [1.0], [3.0], [4.5], [6.0]])
    >>> calc = RecallCalculator(ks=(1, 2), device=torch.device("cpu"))
    >>> for name, value in calc.get_accuracy(x, [0, 0, 1, 0, 1]).items():
    ...     print(name, round(value, 6))
    mean_average_precision_at_r 0.2
    precision_at_1 0.4
    r_precision 0.2
    recall_at_1 0.4
    recall_at_2 0.6
    """

    @accepts(
        "RecallCalculator",
        scope="engine",
        defaults={"metric": "euclidean"},
        only=tuple(n for n in option_names("engine") if n != "device"),
    )
    def __init__(
        self,
        ks: Any = (1, 2, 4, 8),
        *,
        include: Any = None,
        options: Options,
        **kwargs: Any,
    ) -> None:
        func = "RecallCalculator"
        self.ks = _checks.check_ks(ks, func)
        self.options = options
        self.metric = options.metric
        if kwargs.get("label_comparison_fn") is not None:
            raise _checks.fail(
                func,
                "label_comparison_fn",
                "None (labels are compared by equality)",
                "a custom comparison",
            )
        if include is None:
            include = (*RANKING_METRICS, *(f"recall_at_{k}" for k in self.ks))
        exact = "knn_func" not in kwargs
        ours: dict[str, registry.Metric] = {f"recall_at_{k}": registry.Recall(k) for k in self.ks}
        pml_own = {
            name[len("calculate_") :]
            for name in dir(AccuracyCalculator)
            if name.startswith("calculate_")
        }
        for name in include if isinstance(include, tuple | list) else ():
            if isinstance(name, str) and name not in ours and name not in pml_own:
                metric = registry.parse_one(name)
                if metric is not None:  # a recallkit metric asked by name ("ndcg_at_10")
                    ours[name] = metric
        for name in ours:  # PML discovers metrics by their "calculate_" attribute names
            setattr(self, f"calculate_{name}", partial(_not_called, name))
        # The calculator checks for a reference that repeats the queries itself (get_accuracy).
        kwargs.setdefault(
            "knn_func",
            ExactKNN(keep_query_copies=True, options=Options.of(func, options, device=None)),
        )
        kwargs.setdefault("k", "max_bin_count")
        super().__init__(include=include, **kwargs)
        if exact:  # PML's own names of the metrics recallkit computes exactly
            for metric in registry.parse([*RANKING_METRICS, "mean_reciprocal_rank"], func):
                ours.setdefault(metric.pml_name, metric)
        self._ours = ours

    def get_accuracy(
        self,
        query: Embeddings,
        query_labels: Labels,
        reference: Embeddings | None = None,
        reference_labels: Labels | None = None,
        ref_includes_query: bool | None = None,
        include: tuple = (),
        exclude: tuple = (),
    ) -> dict[str, Any]:
        """PML's ``get_accuracy``: the metrics of ``query`` against ``reference``.

        A reference that is the query array, or begins with the query's rows value for value,
        without ``ref_includes_query`` raises ``ValueError`` (each query would find itself
        first): pass ``True``, or ``False`` to keep the copies as gallery items.

        Parameters
        ----------
        query : array_like of shape (n, d)
            The queries.
        query_labels : array_like of shape (n,)
            Their labels (any kind recallkit compares by value).
        reference : array_like of shape (m, d), optional
            The reference (default: the query set itself, leave-one-out).
        reference_labels : array_like of shape (m,), optional
            Its labels (with ``reference``).
        ref_includes_query : bool, optional
            ``reference[:len(query)]`` is the query: its own row is removed.
        include, exclude : tuple of str, default ()
            The metrics of this call, among the calculator's (PML's semantics).

        Returns
        -------
        dict of str to float (or list of float with ``return_per_class``)
            Each metric by PML's name, in PML's order.
        """
        func = "RecallCalculator.get_accuracy"
        self._check_names(include, "include", func)
        self._check_names(exclude, "exclude", func)
        if reference is None:
            if reference_labels is not None:
                raise _checks.fail(
                    func, "reference_labels", "given only with 'reference'", "labels alone"
                )
            reference, reference_labels, ref_includes_query = query, query_labels, True
        elif reference_labels is None:
            raise _checks.fail(func, "reference_labels", "given with 'reference'", None)
        q, r = _checked_embeddings(query, reference, self.metric, func)
        q_codes, r_codes = dense_codes(
            query_labels, reference_labels, ("query_labels", "reference_labels"), func
        )
        _checks.check_length(q_codes, q.shape[0], "query_labels", func, "query")
        _checks.check_length(r_codes, r.shape[0], "reference_labels", func, "reference")
        if ref_includes_query is None:
            if r.shape[0] >= q.shape[0] and (r is q or _starts_with(q, r)):
                raise label_form.self_match_error(func, r is q, "ref_includes_query")
            ref_includes_query = False
        ref_includes_query = bool(ref_includes_query)
        if ref_includes_query:
            _check_reference_starts_with_query(q, r, q_codes, r_codes, func)
        current = list(self.get_function_dict(include, exclude))
        ours = [name for name in current if name in self._ours]
        out = self._ours_of(q, r, q_codes, r_codes, ours, ref_includes_query) if ours else {}
        others = tuple(name for name in current if name not in self._ours)
        if others:
            if engine.is_streamed(r):  # PML's own metrics read the reference whole
                r = torch.from_numpy(
                    _checks.real_array(np.array(r[0 : r.shape[0]]), "reference", func)
                )
            out.update(
                super().get_accuracy(
                    q,
                    torch.from_numpy(q_codes),
                    r,
                    torch.from_numpy(r_codes),
                    ref_includes_query,
                    others,
                    (),
                )
            )
        self.curr_function_dict = self.get_function_dict(include, exclude)
        return {name: out[name] for name in current}

    def _ours_of(
        self,
        q: Any,
        r: Any,
        q_codes: np.ndarray,
        r_codes: np.ndarray,
        ours: list[str],
        ref_includes_query: bool,
    ) -> dict[str, Any]:
        """recallkit's values of the metrics ``ours`` (PML's names), from one pass; a class
        average, and per-class values, in PML's arithmetic, bit for bit."""
        func = "RecallCalculator.get_accuracy"
        average = "class" if self.avg_of_avgs else "query"
        result = retrieval_metrics(
            q,
            r,
            q_codes,
            r_codes,
            [self._ours[name].name for name in ours],
            query_in_reference=ref_includes_query,
            options=Options.of(func, self.options, device=self.device, average=average),
        )
        lone = Options.from_definitions(result.definitions, func).lone_queries
        out: dict[str, Any] = {}
        for name in ours:
            key = self._ours[name].name
            if self.avg_of_avgs or self.return_per_class:
                out[name] = pml_avg_of_avgs(
                    self._ours[name],
                    result.per_query[key],
                    result.evaluated,
                    lone,
                    q_codes,
                    per_class=self.return_per_class,
                )
            else:
                out[name] = result[key]
        return out

    def _check_names(self, names: Any, name: str, func: str) -> None:
        """``include``/``exclude`` of ``get_accuracy`` must name metrics this calculator has."""
        available = tuple(self.original_function_dict)
        if not isinstance(names, tuple | list):
            raise _checks.fail(func, name, "a tuple of metric names", type(names).__name__)
        unknown = [m for m in names if m not in available]
        if unknown:
            raise _checks.fail(
                func,
                name,
                f"among the metrics this calculator computes, {available} (choose others "
                "with the constructor's include=)",
                repr(tuple(unknown)),
            )


def _not_called(name: str, **kwargs: Any) -> float:  # pragma: no cover - get_accuracy does it
    raise RuntimeError(f"{name} is computed by RecallCalculator.get_accuracy")


def _starts_with(q: torch.Tensor, r: Any) -> bool:
    """Whether ``r`` begins with ``q``'s rows, value for value (stops at the first row that
    differs)."""
    n = q.shape[0]
    head = torch.as_tensor(np.asarray(r[:n])) if not torch.is_tensor(r) else r[:n]
    head = head.to(q.device)
    if not torch.equal(head[:1].to(torch.float64), q[:1].to(torch.float64)):
        return False
    return bool(torch.equal(head.to(torch.float64), q.to(torch.float64)))


def _check_reference_starts_with_query(
    q: torch.Tensor, r: torch.Tensor, q_codes: np.ndarray, r_codes: np.ndarray, func: str
) -> None:
    """PML's ``ref_includes_query`` contract: ``reference[:n]`` is the query, row for row."""
    n, m = q.shape[0], r.shape[0]
    if m < n:
        raise _checks.fail(func, "reference", f"at least {n} rows when ref_includes_query=True", m)
    if not _starts_with(q, r):
        raise _checks.fail(
            func,
            "reference",
            "the query's rows followed by the gallery, value for value, when "
            "ref_includes_query=True",
            "rows that differ from the query",
        )
    if not np.array_equal(q_codes, r_codes[:n]):
        raise _checks.fail(
            func,
            "reference_labels",
            "to begin with 'query_labels' when ref_includes_query=True",
            "labels that differ",
        )


def _defaults(cls: type) -> dict[str, Any]:
    """The defaults of ``cls``'s signature, which its docstring's options name."""
    return {
        name: p.default
        for name, p in inspect.signature(cls).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


ExactKNN.__doc__ = fill_docs(ExactKNN.__doc__, "engine", defaults=_defaults(ExactKNN))
RecallCalculator.__doc__ = fill_docs(
    RecallCalculator.__doc__,
    "engine",
    tuple(n for n in option_names("engine") if n != "device"),
    defaults=_defaults(RecallCalculator),
)
