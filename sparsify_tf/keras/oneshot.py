"""Moved to :mod:`sparsify_keras.oneshot` (one implementation for tf-keras and Keras 3 on every backend).

Example:
    >>> import numpy as np, keras
    >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="fc")])
    >>> m = prune_oneshot(m, {"target_sparsity": 0.5}, None)
    >>> float(np.mean(m.get_layer("fc").kernel.numpy() == 0))
    0.5
"""
from sparsify_keras.oneshot import input_channel_norms, prune_oneshot

__all__ = ["prune_oneshot", "input_channel_norms"]
