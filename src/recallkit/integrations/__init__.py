"""Thin adapters of :class:`recallkit.Evaluator` to training frameworks, each loaded only when
imported (``import recallkit`` loads none of them):

* :mod:`recallkit.integrations.torchmetrics`: a torchmetrics ``Metric``
  (needs ``pip install torchmetrics``);
* :mod:`recallkit.integrations.lightning`: a Lightning ``Callback``
  (needs ``pip install lightning``).
"""
