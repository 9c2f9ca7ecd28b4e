import pytest

from recallkit import _kernels


@pytest.fixture(params=["numba", "torch"])
def backend(request, monkeypatch):
    """Run a test with each kernel back end (torch is the one CUDA uses)."""
    monkeypatch.setattr(_kernels, "_use_numba", lambda scores, b: request.param == "numba")
    return request.param
