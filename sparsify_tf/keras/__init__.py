"""Keras integration: prune during ``model.fit`` with one callback.

Works with tf-keras (Keras 2, ``import tf_keras``) and Keras 3 on the
TensorFlow backend (``import keras`` / ``tf.keras``), chosen by the model.

Example:
    >>> from sparsify_tf.keras import PruningCallback, strip_pruning
    >>> cb = PruningCallback({"target_sparsity": 0.9, "end_step": 1000, "pruning_frequency": 100})
    >>> model.fit(x, y, epochs=10, callbacks=[cb])     # doctest: +SKIP
    >>> model = strip_pruning(model)                   # doctest: +SKIP
"""
from .callback import PruningCallback, strip_pruning
from .state import STATE_ATTR
from .compat import keras_flavor
from .layers import PrunableWeight, find_prunable_weights, weight_kinds
from .oneshot import prune_oneshot

__all__ = ["PruningCallback", "strip_pruning", "prune_oneshot", "find_prunable_weights", "PrunableWeight",
           "weight_kinds", "keras_flavor", "STATE_ATTR"]
