"""The label form's internals: one pass from validated inputs to each metric's per-query values
([`form`][recallkit._labels.form]), and how per-query values become a metric's value
([`averaging`][recallkit._labels.averaging]: lone queries, query or class average).

Internal: [`recallkit.retrieval`][recallkit.retrieval], [`recallkit.sharded`][recallkit.sharded],
[`recallkit.evaluator`][recallkit.evaluator] and [`recallkit.pml`][recallkit.pml] call these.
"""
