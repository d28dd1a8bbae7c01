"""Fixtures for the tfmot compatibility tests: both Kerases, small offline data."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest


@pytest.fixture(params=["tf_keras", "keras3"])
def K(request):
    """The Keras package under test (tf_keras or keras)."""
    if request.param == "tf_keras":
        import tf_keras

        return tf_keras
    import keras

    return keras


@pytest.fixture(scope="session")
def digits():
    """scikit-learn's bundled digits, 512 samples: X (512, 64) in [0, 1], one-hot y (512, 10)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data[:512] / 16.0).astype("float32")
    y = np.eye(10, dtype="float32")[d.target[:512]]
    return x, y
