"""The tf-keras state layer: the one schema (:class:`sparsify_keras.state.StateSchema`) on a ``tf_keras`` layer.

The variables are those of every Keras (masks, stored values, RigL's dense gradients, per-step criterion
scores, input statistics, the last update step, the config fingerprint), made with tf-keras's
``add_weight``: steps and counts are int64 and the fingerprint is kept whole (int64, as the in-graph
update's guard compares it, :mod:`.graph_update`). The layer is attached to the model as
``model._sparsify_pruning_state`` and tracked as a checkpoint dependency, so ``save_weights``,
``ModelCheckpoint`` and ``BackupAndRestore`` save it and an interrupted run resumes exactly.

Example:
    >>> import tf_keras, numpy as np
    >>> from sparsify_keras.layers import find_prunable_weights
    >>> m = tf_keras.Sequential([tf_keras.layers.InputLayer((4,)), tf_keras.layers.Dense(3, name="fc")])
    >>> st = state_class()(find_prunable_weights(m), np.zeros(3, np.int64), keep_activations=True)
    >>> [tuple(v.shape) for v in st.masks], st.grads, int(st.last_step.numpy()), st.activation_calls[0].dtype.name
    ([(4, 3)], [], -1, 'int64')
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from sparsify_keras.compat import keras_module
from sparsify_keras.state import STATE_ATTR, StateSchema, model_state

from .compat import track_dependency, untrack_dependency
from .statistics import install_recorders, uninstall_recorders

__all__ = ["STATE_ATTR", "state_class", "attach_state", "detach_state", "model_state"]

_STATE_CLASS: list[type] = []


def state_class() -> type:
    """The tf-keras state layer class (created once, when tf-keras is first needed); its arguments are
    :class:`sparsify_keras.state.PruningState`'s."""
    if _STATE_CLASS:
        return _STATE_CLASS[0]
    K = keras_module("tf_keras")

    class SparsifyPruningState(StateSchema, K.layers.Layer):
        """:class:`~sparsify_keras.state.StateSchema`'s variables on a tf-keras layer (see the module)."""

        INT_DTYPE = "int64"
        FULL_FINGERPRINT = True

        def _variable(self, value: Any, dtype: str, name: str, summed: bool = False) -> tf.Variable:
            value = np.asarray(value)
            aggregation = tf.VariableAggregation.SUM if summed else tf.VariableAggregation.NONE
            return self.add_weight(name=name, shape=value.shape, dtype=dtype, trainable=False,
                                   initializer=K.initializers.Constant(value), aggregation=aggregation)

        def get_config(self) -> dict:  # pragma: no cover - never serialised as a layer
            return {"name": self.name}

    _STATE_CLASS.append(SparsifyPruningState)
    return SparsifyPruningState


def attach_state(model: Any, state: Any) -> None:
    """Attach ``state`` to the tf-keras ``model`` (a plain attribute, out of Keras' layer tracking) as a
    checkpoint dependency, and record the pruned layers' inputs when it keeps activation sums (Wanda)."""
    object.__setattr__(model, STATE_ATTR, state)
    install_recorders(state)
    track_dependency(model, state, STATE_ATTR)


def detach_state(model: Any) -> Any:
    """Undo :func:`attach_state`; the state it held (None if none)."""
    state = model.__dict__.pop(STATE_ATTR, None)
    uninstall_recorders(state)
    untrack_dependency(model, STATE_ATTR)
    return state
