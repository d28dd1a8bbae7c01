"""Input-activation statistics of the pruned layers during ``model.fit`` (criteria that read them: Wanda).

With ``criterion="wanda"`` (``|w_ij| * ||x_j||_2``) :class:`~sparsify_tf.keras.PruningCallback`
wraps the ``call`` of every pruned layer (on the instance, :func:`install_recorders`). While
the wrapped train step is traced (:func:`recording_activations`), each call adds, per input
channel, the sum of squares of the layer's input over the batch (and the spatial positions
of a convolution) to a float32 variable of the pruning state, and counts the call. These
are torch's statistics (:class:`sparsify_torch.statistics.ActivationNorms`), laid out along
the canonical weight's input axis. Evaluation and prediction steps add nothing.

At a mask update the core gets their square roots, shaped to broadcast against the
canonical weight (``(1, in)`` for Dense, ``(1, in, 1, ...)`` for Conv1D/2D/3D), and the sums
start again from zero (:func:`sparsify_keras.statistics.activation_window` on the host; inside the train step the guarded update reads and resets
:func:`statistics_variables`, :func:`sparsify_tf.common.guarded_update.build_guarded_update`). The sums live in the state layer, so a
checkpoint keeps them and a resumed run continues exactly. Under a distribution strategy
the variables aggregate by sum: each replica adds its share of the global batch (the call
counts then count replica calls).

Example:
    >>> import keras
    >>> from sparsify_keras.layers import find_prunable_weights
    >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name="fc")])
    >>> window = window_of(list(find_prunable_weights(m)), [np.array([25.0, 1.0], np.float32)], [np.int64(2)])
    >>> window.read()["fc/kernel"].tolist()
    [[5.0, 1.0]]
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from sparsify_keras.statistics import install_recorders as keras_install_recorders
from sparsify_keras.statistics import input_channels, uninstall_recorders, window_of

from .compat import tf_variable

__all__ = ["install_recorders", "uninstall_recorders", "window_of", "statistics_variables"]


def _sum_of_squares(x: Any, channels: int) -> tf.Tensor:
    """Per input channel (the input as ``(-1, channels)``): the sum of squares over every other axis (batch,
    positions), in float32."""
    x = tf.reshape(tf.cast(tf.convert_to_tensor(x), tf.float32), (-1, channels))
    return tf.reduce_sum(tf.square(x), axis=0)


def _add_call(state: Any, index: int, x: Any) -> None:
    """Add one call's input statistics to a tf-keras state (TF variables, int64 counts)."""
    tf_variable(state.activation_sums[index]).assign_add(_sum_of_squares(x, input_channels(state.pweights[index])),
                                                          read_value=False)
    tf_variable(state.activation_calls[index]).assign_add(tf.constant(1, tf.int64), read_value=False)


def install_recorders(state: Any) -> None:
    """:func:`sparsify_keras.statistics.install_recorders` with TensorFlow's additions (the train step is traced)."""
    keras_install_recorders(state, add=_add_call)


def statistics_variables(state: Any) -> list[tf.Variable]:
    """The sums then the call counts (TF variables; [] if none): what the in-graph update reads and resets."""
    return [tf_variable(v) for v in [*getattr(state, "activation_sums", []), *getattr(state, "activation_calls", [])]]
