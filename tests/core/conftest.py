import pytest


@pytest.fixture(params=["numba", "torch"])
def backend(request, monkeypatch):
    """Run a test with each CPU back end: numba tiles, and the torch path that CUDA runs
    (``RECALLKIT_BACKEND``, the engine's public switch)."""
    monkeypatch.setenv("RECALLKIT_BACKEND", request.param)
    return request.param
