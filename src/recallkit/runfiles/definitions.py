"""The definitions a recall@K value was computed under, and a short stable identifier for them.

Two recall@K values can be compared only when they rest on the same definitions: the same
similarity, the same tie rule, the same self-exclusion and lone-query rules, the same K clamp.
Metric-learning papers state these loosely (Musgrave et al. 2020, "A Metric Learning Reality
Check", show how far results move when they differ), so recallkit writes them into every run
file and history record (``recallkit evaluate --json``/``--history``): as fields, and as an
``id`` that is equal exactly when every field but the recallkit version is.

The fields ([`definitions`][definitions]):

* ``similarity``: how two embeddings are scored: ``"cosine"`` (the inner product of the
  L2-normalised embeddings), ``"dot"`` (the raw inner product) or ``"euclidean"`` (the
  negative Euclidean distance);
* ``ties``: ``"lower reference index first"``: of two reference items with equal scores, the
  one with the lower index ranks first;
* ``exactness``: ``"float64 decisions, fixed order"``: every rank decision is taken on scores
  computed in float64 (the float32 product only filters candidates), in an order that does not
  depend on chunking, threads or BLAS, so the ranks are the same on every machine;
* ``self_exclusion``: which reference items a query cannot retrieve: ``"query_in_reference"``
  (the first rows of the reference are the queries, row for row, and each query's own row is
  removed: PML's convention), ``"ids"`` (every reference item whose identity equals the
  query's: a resolved image path or a manifest id), both (``"query_in_reference+ids"``) or
  ``"none"``;
* ``lone_queries``: what a query with no reference item of its label (after self-exclusion)
  does: ``"skip"`` (left out of the means and counted in ``num_excluded``), ``"zero"`` (counted
  as 0) or ``"error"`` (refused);
* ``k_clamp``: ``"clamped to the candidates"``: a K above the number of candidates per query
  is lowered to it (``effective_ks``), so every query with a correct neighbour is a hit there;
* ``average`` (only when it is not ``"query"``): ``"class"``, each class's value first, then
  the unweighted mean over classes (PML's ``avg_of_avgs``); absent, every query weighs the same;
* ``metric_parameters`` (only when a metric's parameter is not its default): per metric name,
  its parameters (``{"MAP@10": {"divisor": "r"}}``);
* ``definitions_version``: an integer, raised whenever one of the definitions above changes
  meaning ([`DEFINITIONS_VERSION`][DEFINITIONS_VERSION]);
* ``recallkit``: the version of recallkit that wrote the record (provenance only: it is not
  part of the ``id``, and a different version alone is no difference of definitions).

``id`` is the first 12 hexadecimal digits of the SHA-256 of the canonical JSON (keys sorted,
``","`` and ``":"`` as separators, ASCII) of every field except ``recallkit`` (and ``id``).

The choices of ``similarity``, ``lone_queries`` and ``average`` are the options' own
([`recallkit.options`][recallkit.options] declares each once), and a run's options are read back
from its record in one place,
[`Options.from_definitions`][recallkit.options.Options.from_definitions].

This module uses the standard library, [`recallkit.options`][recallkit.options] and
[`recallkit.exceptions`][recallkit.exceptions] only.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from recallkit import options as _options
from recallkit.exceptions import did_you_mean

#: Raised whenever one of the definitions changes meaning.
DEFINITIONS_VERSION = 1
#: The choices of the options a record holds, as [`recallkit.options`][recallkit.options] declares
#: them.
SIMILARITIES = _options.BY_NAME["metric"].choices
SELF_EXCLUSIONS = ("query_in_reference", "ids", "query_in_reference+ids", "none")
LONE_QUERIES = _options.BY_NAME["lone_queries"].choices
AVERAGES = _options.BY_NAME["average"].choices
#: The choices of the value-changing options written only when changed (every option of scope
#: ``"label"`` but ``lone_queries``, which every record holds).
CHOICES = {
    o.name: o.choices
    for o in _options.OPTIONS
    if o.scope == "label" and o.name != "lone_queries" and o.choices is not None
}
TIES = "lower reference index first"
EXACTNESS = "float64 decisions, fixed order"
K_CLAMP = "clamped to the candidates"
ID_LENGTH = 12
#: The fields, in the order they are written and reported.
FIELDS = (
    "similarity",
    "ties",
    "exactness",
    "self_exclusion",
    "lone_queries",
    "k_clamp",
    "average",
    "metric_parameters",
    "definitions_version",
    "recallkit",
)
#: Fields written only when they are not the default.
OPTIONAL = ("average", "metric_parameters")
#: Fields that the ``id`` does not cover: provenance, not definitions.
NOT_DEFINITIONS = ("id", "recallkit")


@functools.cache
def _version() -> str:
    """The installed distribution's version, read once a process (every call writes it)."""
    try:
        return metadata.version("recallkit")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree without install
        return "unknown"


def _shown(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _choice(value: Any, allowed: tuple[str, ...], name: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        raise ValueError(
            f"The '{name}' parameter of definitions must be one of {choices}. Got "
            f"{value!r}{did_you_mean(value, allowed)}."
        )
    return value


def definitions_id(fields: Mapping[str, Any]) -> str:
    """The ``id`` of a definitions record: 12 hex digits of the SHA-256 of its canonical JSON.

    Every field except ``id`` and ``recallkit`` is hashed, so two records of different
    recallkit versions under the same definitions share their ``id``.

    >>> a = definitions("cosine", "ids")
    >>> definitions_id(a) == a["id"], definitions_id({**a, "recallkit": "9.9"}) == a["id"]
    (True, True)
    >>> definitions_id({**a, "similarity": "dot"}) == a["id"]
    False
    """
    hashed = {k: v for k, v in fields.items() if k not in NOT_DEFINITIONS}
    text = json.dumps(hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:ID_LENGTH]


def definitions(
    metric: str,
    self_exclusion: str,
    lone_queries: str = "skip",
    *,
    changed: Mapping[str, str] | None = None,
    metric_parameters: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The definitions of a recall@K computation: ``id`` first, then the fields (see above).

    ``metric`` is the similarity (``"cosine"``, ``"dot"`` or ``"euclidean"``),
    ``self_exclusion`` the self-match rule (``"query_in_reference"``, ``"ids"``,
    ``"query_in_reference+ids"`` or ``"none"``), ``lone_queries`` the lone-query policy
    (``"skip"``, ``"zero"``, ``"error"``), ``changed`` the other options that change values
    and are not at their default (``{"average": "class"}``), ``metric_parameters`` the
    metrics' parameters that are not their defaults (each written only when there are some).

    >>> d = definitions("cosine", "ids")
    >>> d["id"], d["similarity"], d["ties"], d["self_exclusion"], d["definitions_version"]
    ('0df9bf47ae64', 'cosine', 'lower reference index first', 'ids', 1)
    """
    fields: dict[str, Any] = {
        "similarity": _choice(metric, SIMILARITIES, "metric"),
        "ties": TIES,
        "exactness": EXACTNESS,
        "self_exclusion": _choice(self_exclusion, SELF_EXCLUSIONS, "self_exclusion"),
        "lone_queries": _choice(lone_queries, LONE_QUERIES, "lone_queries"),
        "k_clamp": K_CLAMP,
    }
    for name, value in (changed or {}).items():
        fields[name] = _choice(value, CHOICES[name], name) if name in CHOICES else value
    if metric_parameters:
        fields["metric_parameters"] = {k: dict(v) for k, v in metric_parameters.items()}
    fields["definitions_version"] = DEFINITIONS_VERSION
    fields["recallkit"] = _version()
    return {"id": definitions_id(fields), **fields}


def check_definitions(value: Any, where: str = "The definitions record") -> dict[str, Any]:
    """``value`` if it is a definitions record as written by [`definitions`][definitions], else
    raise.

    A record is a JSON object with a string for every field of [`FIELDS`][FIELDS] but
    ``definitions_version`` (a positive integer), and an ``id`` equal to
    [`definitions_id`][definitions_id] of its fields (so a record edited by hand is caught). Fields
    that a later recallkit adds are accepted, and covered by the ``id``. The ``ValueError`` starts
    with ``where`` and names the field at fault.

    >>> check_definitions({**definitions("dot", "none"), "ties": "random"})
    Traceback (most recent call last):
    ...
    ValueError: The definitions record has an 'id' that does not match its fields (was a field \
edited?).
    """
    if not isinstance(value, dict):
        raise ValueError(f"{where} is a {type(value).__name__}, not an object of fields.")
    for name in FIELDS:
        if name not in value:
            if name in OPTIONAL:
                continue
            raise ValueError(f"{where} has no {name!r} field.")
        field = value[name]
        if name == "metric_parameters":
            if not isinstance(field, dict) or not all(
                isinstance(p, dict) and all(isinstance(v, str) for v in p.values())
                for p in field.values()
            ):
                raise ValueError(
                    f"{where} has {name!r} {_shown(field)}; it must map metric names to their "
                    "parameters (strings)."
                )
        elif name == "definitions_version":
            if isinstance(field, bool) or not isinstance(field, int) or field <= 0:
                raise ValueError(
                    f"{where} has {name!r} {_shown(field)}; it must be a positive integer."
                )
        elif not isinstance(field, str):
            raise ValueError(f"{where} has {name!r} {_shown(field)}; it must be a string.")
    if value.get("id") != definitions_id(value):
        raise ValueError(
            f"{where} has an 'id' that does not match its fields (was a field edited?)."
        )
    return value


def differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The fields of two definitions records that differ, the ``recallkit`` version aside.

    In the order of [`FIELDS`][FIELDS], then any other field by name.

    >>> differences(definitions("cosine", "ids"), definitions("dot", "none"))
    ['similarity', 'self_exclusion']
    >>> older = {**definitions("cosine", "ids"), "recallkit": "0.0.1"}
    >>> differences(definitions("cosine", "ids"), older)
    []
    """
    names = [f for f in FIELDS if f in a or f in b]
    names += sorted((set(a) | set(b)) - set(FIELDS))
    return [f for f in names if f not in NOT_DEFINITIONS and a.get(f) != b.get(f)]
