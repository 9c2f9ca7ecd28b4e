"""The fused Triton kernels are checked on their first use in a process, against the torch back
end, and a difference or an error falls back to the torch back end with one warning.

Run on CPU tensors through Triton's interpreter (``TRITON_INTERPRET=1``), with faults injected
into the kernels: a tie broken the wrong way in the exact scores, an error from the filter pass.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from recallkit import engine
from recallkit.engine import triton_backend as tb
from recallkit.engine import triton_kernels as tk
from recallkit.exceptions import RecallkitWarning

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """The interpreter on, no back end forced, no device checked yet in this process."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("RECALLKIT_BACKEND", raising=False)
    monkeypatch.setattr(tb, "_CHECKED", {})


def _usable_with_warnings() -> tuple[bool, list[RecallkitWarning]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = tb.usable(CPU)
    return ok, [w.message for w in caught if isinstance(w.message, RecallkitWarning)]


def test_the_probe_data_is_tie_heavy():
    rows, labels = tb.probe_data()
    # Every third row repeats another: exact duplicates tie under every metric.
    assert len({r.tobytes() for r in rows}) < len(rows)
    assert not (np.abs(rows).sum(axis=1) == 0).any()  # no zero row under cosine
    dots = rows.astype(np.float64) @ rows.T.astype(np.float64)
    np.fill_diagonal(dots, np.nan)
    tied = sum(len(row) - len(np.unique(row)) for row in dots[:, :].tolist())
    assert tied > 10 * len(rows)  # many equal scores in each row
    assert sorted(set(labels.tolist())) == [0, 1, 2, 3]


def test_the_kernels_pass_and_are_used():
    ok, said = _usable_with_warnings()
    assert ok and said == []
    assert engine._device_backend("triton", CPU).name == "triton"
    assert tb._CHECKED == {"cpu": True}


def _tie_broken(original):
    """``exact_scores`` that raises the score of every pair but the first of each chunk by one
    unit in the last place: scores that tie exactly no longer do."""

    def scores(*args, **kwargs):
        out = original(*args, **kwargs).clone()
        out[1:] = torch.nextafter(out[1:], torch.full_like(out[1:], torch.inf))
        return out

    return scores


def test_a_difference_falls_back_to_torch_with_one_warning(monkeypatch):
    monkeypatch.setattr(tk, "exact_scores", _tie_broken(tk.exact_scores))
    ok, said = _usable_with_warnings()
    assert not ok
    (warning,) = said
    text = str(warning)
    assert text.startswith("recallkit: the fused Triton kernels on cpu (Triton's interpreter) ")
    assert "did not give the torch back end's ranks on a small tie-heavy check (" in text
    assert ", torch " in text  # the difference: what each back end gave
    assert "this process runs the torch back end there" in text
    # Said once: later uses of the device run torch without a word.
    assert _usable_with_warnings() == (False, [])
    assert engine._device_backend("triton", CPU).name == "torch"


def test_an_error_falls_back_to_torch_with_one_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected: no kernel image for this card")

    monkeypatch.setattr(tk, "filter_window", broken)
    ok, said = _usable_with_warnings()
    assert not ok
    (warning,) = said
    assert "RuntimeError: injected: no kernel image for this card" in str(warning)
    assert "cpu (Triton's interpreter)" in str(warning)
    assert engine._device_backend("triton", CPU).name == "torch"


def test_forced_triton_runs_unchecked(monkeypatch):
    def not_called(device):
        raise AssertionError("the probe ran")

    monkeypatch.setattr(tb, "probe", not_called)
    monkeypatch.setenv("RECALLKIT_BACKEND", "triton")
    assert tb.usable(CPU)


def test_the_card_is_named():
    assert tb.card(CPU) == "cpu (Triton's interpreter)"
    if torch.cuda.is_available():
        assert tb.card(torch.device("cuda:0")).endswith("(cuda:0)")
        assert torch.cuda.get_device_name(0) in tb.card(torch.device("cuda:0"))
