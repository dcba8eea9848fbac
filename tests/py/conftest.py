import gc
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from ingot_ctypes import lib  # noqa: E402


def pytest_collection_finish(session):
    # What importing the test modules made (numpy, scipy, ...) lives all
    # session: keep it out of later collections, so no_leaks' are cheap.
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test releases every tensor it made."""
    gc.collect()
    before = lib.ingot_live_tensors()
    yield
    gc.collect()
    assert lib.ingot_live_tensors() == before


@pytest.fixture(params=["gemvk", "old"])
def gemv_path(request, monkeypatch):
    """Runs a test on the CUDA GEMV's split-K kernel and on the old kernels
    (INGOT_GEMV_OLD=1, read by the library on every call)."""
    if request.param == "old":
        monkeypatch.setenv("INGOT_GEMV_OLD", "1")
    else:
        monkeypatch.delenv("INGOT_GEMV_OLD", raising=False)
    return request.param
