"""Every metric of the registry, as the tests that cover "every metric" take them.

The list is built from :data:`recallkit.metrics.REGISTRY`, never written by hand: a metric
registered there gets every check that reads it (its definition against the brute force in
``tests/brute.py``, its tie bounds, bit identity across configurations, the differential fuzz,
sharded evaluation, the command line and the docs' tables).
"""

from __future__ import annotations

from recallkit import metrics as registry


def cases(ks: tuple[int, ...] = (1, 4)) -> list[tuple[str, str, int | None]]:
    """``(name, family, K)`` for every registered metric: each K of ``ks`` for a metric with a
    cut-off, and its name without K where it has one (``MRR``, ``MAP@R``, ``MnR``)."""
    out = []
    for cls in registry.REGISTRY.values():
        if "{K}" in cls.template:
            out += [(cls.template.replace("{K}", str(k)), cls.family, k) for k in ks]
        if "{K}" not in cls.template or cls.name_without_k is not None:
            out.append((cls.name_without_k or cls.template, cls.family, None))
    return out


def names(ks: tuple[int, ...] = (1, 4)) -> list[str]:
    """The names of :func:`cases`."""
    return [name for name, _, _ in cases(ks)]


def pessimistic_first(name: str, values) -> tuple[float, float]:
    """``(pessimistic, optimistic)`` of ``values`` by the metric's declared direction."""
    metric = registry.parse_one(name)
    low, high = min(values), max(values)
    return (low, high) if metric.direction == "higher" else (high, low)


def counts_zero(name: str) -> bool:
    """Whether the metric takes ``lone_queries="zero"`` (rank metrics refuse it)."""
    return registry.parse_one(name).lone_value is not None
