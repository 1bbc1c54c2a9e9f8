"""Shared setup for the binding tests: the package directory on sys.path and the library
from $FLOTILLA_CLIENT_LIB (ctest sets it to the built .so)."""

import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "client-sdk", "python"))

import flotilla_client as fc  # noqa: E402


@pytest.fixture
def counting():
    """A counting allocator that must end with nothing outstanding and no bad frees."""
    a = fc.CountingAllocator()
    yield a
    assert a.errors == []
    assert a.outstanding == 0, "%d blocks (%d bytes) leaked" % (a.outstanding, a.live)


def blobs(n, dim=8, classes=3, seed=0, spread=0.3):
    """n examples of `classes` well-separated Gaussian blobs in dim dimensions."""
    import numpy as np
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, (classes, dim)).astype(np.float32) * 3
    y = rng.integers(0, classes, n).astype(np.int32)
    x = centres[y] + rng.normal(0, spread, (n, dim)).astype(np.float32)
    return x.astype(np.float32), y
