"""The library's one result type: a read-only mapping ``metric name -> float`` and what lies
behind it.

Every metric of recallkit returns a [`Result`][Result]: the label-form metrics
([`recallkit.recall_at_k`][recallkit.retrieval.recall_at_k],
[`recallkit.map_at_r`][recallkit.retrieval.map_at_r],
[`recallkit.retrieval_metrics`][recallkit.retrieval.retrieval_metrics],
...), the ground-truth form, the benchmark protocols, the benchmark splits and sharded
evaluation. A result is a read-only ``dict`` of the values (``json.dumps(result)`` writes them;
``dict(result)`` is a plain copy), ``to_dict()`` is the whole result in plain JSON types (NaN, an
undefined mean, becomes ``None``) and ``report()`` is the text to print. Nothing of a result
can be changed: not its values, its attributes, nor the arrays behind them (read-only numpy
arrays, after unpickling too).

The counts have one meaning wherever they appear (attributes, ``report()``, ``to_dict()``):

* ``num_queries``: every query given, lone ones included;
* ``num_evaluated``: the queries with at least one relevant reference item after
  self-exclusion;
* ``num_excluded``: the lone queries (``num_queries - num_evaluated``): left out of every mean
  under ``lone_queries="skip"`` (the default), counted as 0 under ``"zero"``;
* ``num_reference``: the reference (gallery) items searched;
* ``num_tied``: the queries whose value of some metric depends on the tie rule (the decisive
  item is exactly tied with another); ``bounds[name]`` is ``(pessimistic, optimistic)``, the
  value with every such tie broken against the query and in its favour.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def json_float(value: float) -> float | None:
    """``value``, or ``None`` for NaN (JSON has no NaN)."""
    return None if math.isnan(value) else value


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces.

    >>> print(format_table(["a", "bb"], [["xyz", "1"]]))
    a    bb
    xyz  1
    """
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]
    ]
    return "\n".join(line.rstrip() for line in lines)


def _frozen(array: Any, dtype: Any = None) -> np.ndarray:
    out = np.array(array, dtype=dtype)
    out.setflags(write=False)
    return out


def plain(value: Any) -> Any:
    """``value`` in plain JSON types: numpy and torch scalars unwrapped, tuples and arrays as
    lists, mappings with string keys; anything else as its ``str``.

    >>> plain({"ids": [np.int64(3), (1, "a")], "n": np.float32(0.5)})
    {'ids': [3, [1, 'a']], 'n': 0.5}
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:
        return plain(item())
    return str(value)


def _read_only(*_: Any, **__: Any) -> Any:
    raise TypeError("a Result is read-only: dict(result) is a copy to change")


class FrozenDict(dict):
    """A read-only ``dict`` (the mappings a [`Result`][Result] holds): it pickles and writes as
    JSON as a dict does, and refuses every change."""

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _read_only
    __ior__ = _read_only

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self


class Result(dict):
    """A read-only ``dict`` ``metric name -> float``, in the order the metrics were asked for,
    with the per-query values and counts behind it (module docstring).

    Every metric of recallkit returns one; it is built by the library, and read. Its attributes
    are the constructor's parameters (``None`` where a result has no such thing), made
    read-only (arrays included); the counts are properties.

    Parameters
    ----------
    values : mapping of str to float
        The metrics' values by name.
    num_queries : int, optional
        Every query given, lone ones included (default: ``len(evaluated)``).
    evaluated : ndarray of bool, shape (n,), optional
        The queries counted in the values (default: ``first_hit_ranks >= 0``, else all).
    per_query : mapping of str to ndarray of shape (n,), optional
        Per metric name, the value of each query (NaN for a lone query), and any other
        per-query array of a protocol (0-indexed ranks, ...).
    first_hit_ranks : ndarray of int64, shape (n,), optional
        Label form: the 0-indexed rank of each query's first correct neighbour among its
        non-excluded reference items, ``-1`` for a lone query.
    ks, effective_ks : sequence of int, optional
        The K values asked for recall@K, and as clamped to the candidates.
    num_reference : int, optional
        The reference (gallery) items searched.
    embedding_dim : int, optional
        The embeddings' dimension.
    bounds : mapping of str to (float, float), optional
        Per metric, ``(pessimistic, optimistic)``: the value with every exact tie broken
        against the queries and in their favour.
    tied : ndarray of bool, shape (n,), optional
        The queries whose value of some metric depends on the tie rule.
    query_ids : list, optional
        The queries' ids, when the caller gave them.
    query_labels : list, optional
        Label form: the queries' labels, as given (plain Python values).
    definitions : mapping, optional
        The definitions that produced the values (``recallkit.runfiles.definitions``).
    title, convention : str, optional
        What was evaluated and under which definition (protocol results).
    parts : mapping of str to Result, optional
        The per-category or per-task results of a benchmark that averages several.
    plain : sequence of str, default ()
        The values printed as they are in a protocol's table (ranks), not in percent.
    info : mapping, optional
        Context: a benchmark's name, split and completeness; bytes communicated.
    style : {"evaluation", "protocol", "benchmark"}, default "evaluation"
        How [`report`][report] and [`to_dict`][to_dict] lay it out.

    Examples
    --------
    >>> r = Result({"recall@1": 0.5, "MAP@R": float("nan")}, num_queries=2)
    >>> dict(r), r.to_dict()["metrics"]
    ({'recall@1': 0.5, 'MAP@R': nan}, {'recall@1': 0.5, 'MAP@R': None})
    >>> import json
    >>> json.dumps(r)
    '{"recall@1": 0.5, "MAP@R": NaN}'
    """

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _read_only
    __ior__ = _read_only

    def __init__(
        self,
        values: Mapping[str, float],
        *,
        num_queries: int | None = None,
        evaluated: np.ndarray | None = None,
        per_query: Mapping[str, Any] | None = None,
        first_hit_ranks: np.ndarray | None = None,
        ks: Sequence[int] | None = None,
        effective_ks: Sequence[int] | None = None,
        num_reference: int | None = None,
        embedding_dim: int | None = None,
        bounds: Mapping[str, tuple[float, float]] | None = None,
        tied: np.ndarray | None = None,
        query_ids: list[Any] | None = None,
        query_labels: list[Any] | None = None,
        definitions: Mapping[str, Any] | None = None,
        title: str | None = None,
        convention: str | None = None,
        parts: Mapping[str, Result] | None = None,
        plain: Sequence[str] = (),
        info: Mapping[str, Any] | None = None,
        style: str = "evaluation",
    ) -> None:
        put = object.__setattr__
        put(
            self,
            "_fields",
            dict(
                num_queries=num_queries,
                evaluated=evaluated,
                per_query=per_query,
                first_hit_ranks=first_hit_ranks,
                ks=ks,
                effective_ks=effective_ks,
                num_reference=num_reference,
                embedding_dim=embedding_dim,
                bounds=bounds,
                tied=tied,
                query_ids=query_ids,
                query_labels=query_labels,
                definitions=definitions,
                title=title,
                convention=convention,
                parts=parts,
                plain=plain,
                info=info,
                style=style,
            ),
        )
        values = {str(k): float(v) for k, v in values.items()}
        dict.__init__(self, values)
        put(self, "_values", FrozenDict(values))
        put(
            self,
            "first_hit_ranks",
            None if first_hit_ranks is None else _frozen(first_hit_ranks, np.int64),
        )
        if evaluated is None and self.first_hit_ranks is not None:
            evaluated = self.first_hit_ranks >= 0
        if num_queries is None:
            num_queries = len(evaluated) if evaluated is not None else 0
        attributes = dict(
            _num_queries=int(num_queries),
            _evaluated=None if evaluated is None else _frozen(evaluated, bool),
            per_query=FrozenDict({k: _frozen(v) for k, v in (per_query or {}).items()}),
            ks=None if ks is None else tuple(int(k) for k in ks),
            effective_ks=None if effective_ks is None else tuple(int(k) for k in effective_ks),
            num_reference=None if num_reference is None else int(num_reference),
            embedding_dim=None if embedding_dim is None else int(embedding_dim),
            bounds=FrozenDict({k: (float(a), float(b)) for k, (a, b) in (bounds or {}).items()}),
            _tied=None if tied is None else _frozen(tied, bool),
            query_ids=None if query_ids is None else tuple(query_ids),
            query_labels=None if query_labels is None else tuple(query_labels),
            definitions=None if definitions is None else FrozenDict(dict(definitions)),
            title=title,
            convention=convention,
            parts=FrozenDict(dict(parts or {})),
            plain=frozenset(plain),
            info=FrozenDict(dict(info or {})),
            style=style,
        )
        for name, value in attributes.items():
            put(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Result is read-only: its {name!r} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Result is read-only: its {name!r} cannot be deleted")

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt by the constructor, so that its arrays are read-only again once unpickled.
        return (_rebuild, (dict(self._values), self._fields))

    def __copy__(self) -> Result:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Result:
        return self

    def replace(self, values: Mapping[str, float] | None = None, **changes: Any) -> Result:
        """A copy with some values or attributes changed.

        Parameters
        ----------
        values : mapping of str to float, optional
            New values (default: these).
        **changes
            Keywords of the constructor.

        Returns
        -------
        Result
        """
        return Result(self._values if values is None else values, **{**self._fields, **changes})

    # -- the mapping ----------------------------------------------------------------------------

    def __float__(self) -> float:
        """The value of a single-metric result (``float(map_at_r(...))``)."""
        if len(self._values) != 1:
            raise TypeError(
                f"float() needs a result with one metric; this one has {list(self._values)}: "
                "read one by name, result['name']."
            )
        return next(iter(self._values.values()))

    def metrics(self) -> dict[str, float]:
        """The values as a plain dict, in order.

        Returns
        -------
        dict of str to float
        """
        return dict(self._values)

    # -- counts ---------------------------------------------------------------------------------

    @property
    def num_queries(self) -> int:
        """Every query given, lone ones included."""
        return self._num_queries

    @property
    def evaluated(self) -> np.ndarray:
        """Mask of the queries counted in the means (not lone)."""
        if self._evaluated is None:
            return np.ones(self._num_queries, dtype=bool)
        return self._evaluated

    @property
    def num_evaluated(self) -> int:
        """The queries counted in the means: at least one relevant reference item."""
        return int(np.count_nonzero(self.evaluated))

    @property
    def num_excluded(self) -> int:
        """Lone queries: no reference item with their label after self-exclusion."""
        return self.num_queries - self.num_evaluated

    @property
    def tied(self) -> np.ndarray:
        """Mask of the queries whose value of some metric depends on the tie rule."""
        if self._tied is None:
            return np.zeros(self._num_queries, dtype=bool)
        return self._tied

    @property
    def num_tied(self) -> int:
        """The number of queries whose value of some metric depends on the tie rule (the
        ``True`` rows of ``tied``)."""
        return int(np.count_nonzero(self.tied))

    def counts(self) -> dict[str, int]:
        """The counts.

        Returns
        -------
        dict of str to int
            ``num_queries``, ``num_evaluated``, ``num_excluded`` (and ``num_reference``).
        """
        out = {
            "num_queries": self.num_queries,
            "num_evaluated": self.num_evaluated,
            "num_excluded": self.num_excluded,
        }
        if self.num_reference is not None:
            out["num_reference"] = self.num_reference
        return out

    def by_class(self, name: str) -> dict[Any, float]:
        """Each class's value of the label-form metric ``name``: the metric's summary of the
        class's queries that count under the result's ``lone_queries`` (as ``average="class"``
        averages them; ``recallkit._averaging.by_class``), keyed by label, classes in
        increasing order of label (tuples: in order of first appearance). A class whose
        queries are all lone has no entry under ``lone_queries="skip"``.

        Parameters
        ----------
        name : str
            A label-form metric of the result.

        Returns
        -------
        dict
            ``label -> value``.

        Raises
        ------
        KeyError
            When the result has no such metric or no labels.

        Examples
        --------
        >>> import recallkit
        >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9], [0.2, 0.8]])
        >>> labels = ["b", "b", "a", "a", "b"]  # the last b's nearest neighbour is an a
        >>> r = recallkit.recall_at_k(x, x, labels, labels, ks=(1,), query_in_reference=True)
        >>> r.by_class("recall@1")
        {'a': 1.0, 'b': 0.6666666666666666}
        """
        from recallkit import _averaging as averaging
        from recallkit import metrics as registry
        from recallkit._inputs.codes import dense_codes
        from recallkit.options import Options

        if self.query_labels is None or name not in self.per_query:
            raise KeyError(f"this result has no per-class values of {name!r}")
        metric = registry.parse_one(name)
        if metric is None:
            raise KeyError(f"{name!r} is not a label-form metric")
        lone = Options.from_definitions(self.definitions, "by_class").lone_queries
        codes, _ = dense_codes(self.query_labels, [], ("query_labels", "labels"), "by_class")
        kept, mask = averaging.counted(metric, self.per_query[name], self.evaluated, lone)
        present, values = averaging.by_class(metric, kept, codes[mask])
        first = {}
        for code, label in zip(codes.tolist(), self.query_labels, strict=True):
            first.setdefault(code, label)
        return {first[c]: float(v) for c, v in zip(present.tolist(), values, strict=True)}

    def hits(self, k: int) -> np.ndarray:
        """Per-query hit at ``k`` (False for lone queries): label and ground-truth forms.

        Parameters
        ----------
        k : int
            The cut-off.

        Returns
        -------
        ndarray of bool, shape (n,)
            ``0 <= first_hit_rank < k``.
        """
        ranks = self.first_hit_ranks
        if ranks is None:
            raise AttributeError("this result has no first-hit ranks")
        return (ranks >= 0) & (ranks < k)

    # -- text and JSON -------------------------------------------------------------------------

    def json_metrics(self) -> dict[str, float | None]:
        """The values as a plain dict, NaN as ``None``.

        Returns
        -------
        dict of str to float or None
        """
        return {k: json_float(v) for k, v in self._values.items()}

    def _json_bounds(self) -> dict[str, list[float | None]]:
        return {k: [json_float(a), json_float(b)] for k, (a, b) in self.bounds.items()}

    def __repr__(self) -> str:
        values = ", ".join(f"{k!r}: {v:.4f}" for k, v in self._values.items())
        extra = ""
        if self.style == "evaluation" and self._evaluated is not None:
            extra = f", num_evaluated={self.num_evaluated}, num_excluded={self.num_excluded}"
            if self.num_reference is not None:
                extra += f", num_reference={self.num_reference}"
        return f"Result({{{values}}}{extra})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the values (NaN as ``None``), the counts, the tie bounds when a
        query is tied, and what else the result holds.

        Returns
        -------
        dict
        """
        if self.style == "protocol":
            out: dict[str, Any] = {
                "benchmark": self.title,
                "convention": self.convention,
                "num_queries": self.num_queries,
                "metrics": self.json_metrics(),
            }
            if self.parts:
                out["parts"] = {name: part.to_dict() for name, part in self.parts.items()}
        elif self.style == "benchmark":
            out = {**self.info.get("header", {}), "metrics": self.json_metrics()}
            out.update(self.info.get("fields", {}))
            out.update(self.counts())
            if "citation" in self.info:
                out["citation"] = self.info["citation"]
        else:
            out = {"metrics": self.json_metrics()}
            if self.ks is not None:
                out["ks"] = list(self.ks)
                out["effective_ks"] = list(self.effective_ks or self.ks)
            out.update(self.counts())
            if self.embedding_dim is not None:
                out["embedding_dim"] = self.embedding_dim
            if self.first_hit_ranks is not None:
                out["first_hit_ranks"] = self.first_hit_ranks.tolist()
            if self.query_ids is not None:
                out["query_ids"] = plain(list(self.query_ids))
            for key in ("bytes_communicated",):
                if key in self.info:
                    out[key] = plain(self.info[key])
        if self.num_tied:
            out["num_tied"] = self.num_tied
            out["bounds"] = self._json_bounds()
        if self.definitions is not None:
            out["definitions"] = dict(self.definitions)
        return plain(out)

    def report(self) -> str:
        """The text to print: an ``[evaluation]`` section with the counts and one line per
        metric (label form), a table in percent (protocols), or a two-line table (benchmark
        splits). Tie bounds follow when a query is tied.

        Returns
        -------
        str

        Examples
        --------
        >>> r = Result({"recall@1": 0.5, "recall@10": 1.0}, first_hit_ranks=np.array([0, 3]),
        ...            num_reference=5, embedding_dim=4)
        >>> print(r.report())
        [evaluation]
          num queries:   2
          num gallery:   5
          embedding_dim: 4
        <BLANKLINE>
        [metrics]
          recall@1:  0.5000
          recall@10: 1.0000
        """
        if self.style == "protocol":
            text = self._protocol_report()
        elif self.style == "benchmark":
            text = self._table_report()
        else:
            text = self._evaluation_report()
        if self.num_tied:
            text += "\n" + self._ties_report()
        return text

    def table(self) -> str:
        """The same text as [`report`][report].

        Returns
        -------
        str
        """
        return self.report()

    def _evaluation_report(self) -> str:
        lines = ["[evaluation]", f"  {'num queries:':<15}{self.num_queries}"]
        if self.num_excluded:
            lines.append(f"  {'num excluded:':<15}{self.num_excluded}")
        if self.num_reference is not None:
            lines.append(f"  {'num gallery:':<15}{self.num_reference}")
        if self.embedding_dim is not None:
            lines.append(f"  {'embedding_dim:':<15}{self.embedding_dim}")
        lines += ["", "[metrics]"]
        width = max((len(k) for k in self._values), default=0) + 1
        lines += [
            f"  {k + ':':<{width + 1}}{'-' if math.isnan(v) else f'{v:.4f}'}"
            for k, v in self._values.items()
        ]
        return "\n".join(lines)

    def _ties_report(self) -> str:
        head = (
            f"[ties] {self.num_tied} of {self.num_queries} queries depend on the tie rule "
            "(lower reference index first); pessimistic - optimistic:"
        )
        lines = ["", head]
        width = max((len(k) for k in self.bounds), default=0) + 1
        for name, (low, high) in self.bounds.items():
            if name in self._values and low != high:
                lines.append(f"  {name + ':':<{width + 1}}{low:.4f} - {high:.4f}")
        return "\n".join(lines)

    def _table_report(self) -> str:
        widths = [max(len(name), 6) for name in self]
        head = "  ".join(f"{name:<{w}}" for name, w in zip(self, widths, strict=True))
        cells = zip(self.values(), widths, strict=True)
        values = "  ".join(f"{value:<{w}.4f}" for value, w in cells)
        return f"{head.rstrip()}\n{values.rstrip()}"

    def _format(self, key: str, value: float) -> str:
        if math.isnan(value):
            return "-"
        return f"{value:.2f}" if key in self.plain else f"{100 * value:.2f}"

    def _protocol_report(self) -> str:
        title = f"{self.title} ({self.num_queries} queries; {self.convention})"
        if not self.parts:
            rows = [[k, self._format(k, v)] for k, v in self._values.items()]
            return title + "\n" + format_table(["metric", "value"], rows)
        columns: list[str] = []
        for part in self.parts.values():
            columns += [k for k in part if k not in columns]
        rows = [
            [name, str(part.num_queries)]
            + [part._format(c, part.get(c, math.nan)) for c in columns]
            for name, part in self.parts.items()
        ]
        text = title + "\n" + format_table(["part", "queries", *columns], rows)
        overall = [[k, self._format(k, v)] for k, v in self._values.items()]
        if overall:
            text += "\n" + format_table(["average", "value"], overall)
        return text


def _rebuild(values: dict[str, float], fields: dict[str, Any]) -> Result:
    return Result(values, **fields)
