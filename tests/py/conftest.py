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
