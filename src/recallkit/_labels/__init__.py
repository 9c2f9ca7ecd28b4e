"""The label form's internals: one pass from validated inputs to each metric's per-query values
(:mod:`~recallkit._labels.form`), and how per-query values become a metric's value
(:mod:`~recallkit._labels.averaging`: lone queries, query or class average).

Internal: :mod:`recallkit.retrieval`, :mod:`recallkit.sharded`, :mod:`recallkit.evaluator` and
:mod:`recallkit.pml` call these.
"""
