"""Fixtures for the Keras callback tests (tf-keras and Keras 3)."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest
from _keras_helpers import FLAVORS, kmod


@pytest.fixture(params=FLAVORS)
def K(request):
    """The Keras package under test (tf_keras or keras)."""
    return kmod(request.param)


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's bundled digits: X (n, 64) in [0, 1], y int (n,)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype("float32"), d.target.astype("int32")
