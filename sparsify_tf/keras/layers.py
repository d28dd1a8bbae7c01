"""Moved to :mod:`sparsify_keras.layers` (no TensorFlow needed); the names are re-exported here.

Example:
    >>> import keras
    >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc")])
    >>> [w.path for w in find_prunable_weights(m)]
    ['fc/kernel']
"""
from sparsify_keras.layers import KerasPrunableWeight, find_prunable_weights, in_model_order, weight_kinds

__all__ = ["KerasPrunableWeight", "find_prunable_weights", "weight_kinds", "in_model_order"]
