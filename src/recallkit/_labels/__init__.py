"""The label form's pass: from validated inputs to each metric's per-query values, in one pass
of the engine ([`form`][recallkit._labels.form]).

Internal: [`recallkit.retrieval`][recallkit.retrieval], [`recallkit.sharded`][recallkit.sharded],
[`recallkit.evaluator`][recallkit.evaluator] and [`recallkit.pml`][recallkit.pml] call it; how
per-query values become a metric's value is [`recallkit._averaging`][recallkit._averaging]'s, a
layer below the result type.
"""
