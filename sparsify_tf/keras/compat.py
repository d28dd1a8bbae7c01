"""What the tf-keras (Keras 2) driver needs beyond :mod:`sparsify_keras.compat`: the TF variable inside a
Keras variable.

The Keras private attributes themselves are read in :mod:`sparsify_keras.compat` only; the names are
re-exported here for existing imports.

Example:
    >>> import keras
    >>> m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> keras_flavor(m)
    'keras3'
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from sparsify_keras.compat import (FLAVORS, child_layers, iter_tree, keras_flavor, keras_module, optimizer_slots,
                                   own_variables, short_name, steps_per_execution, unwrap_optimizer)

__all__ = ["FLAVORS", "keras_flavor", "keras_module", "child_layers", "own_variables", "short_name", "tf_variable",
           "optimizer_slots", "unwrap_optimizer", "steps_per_execution", "iter_tree"]


def tf_variable(variable: Any) -> tf.Variable:
    """The ``tf.Variable`` behind a Keras 3 variable (tf-keras variables are already one)."""
    inner = getattr(variable, "_value", None)
    if isinstance(inner, tf.Variable):
        return inner
    return variable
