"""The pruning state Keras saves with the model.

One mask variable per pruned weight (TF layout, the weight's dtype), one
holding the values of its pruned entries (zeros where kept: the kernel holds
zeros where pruned, so the dense weight the core ranks is ``kernel + stored``),
for ``regrowth="rigl"`` one holding the dense gradient of the last step, for
criteria that read activations (``"wanda"``) the per-input-channel sums of
squares of each pruned layer's inputs since the last update and how many calls
they hold (:mod:`.statistics`), the step of the last mask update and the config's fingerprint
(:func:`sparsify.protocol.config_fingerprint`, so a resume with another config
is refused naming the keys) live in a small non-trainable layer attached to
the model as ``model._sparsify_pruning_state``. Keras saves it with the
model's weights (``save_weights``, ``ModelCheckpoint``, ``BackupAndRestore``),
so an interrupted run resumes to exactly the same masks and weights.

Keras 3 models keep theirs in :mod:`sparsify_keras.state`.

Example:
    >>> import tf_keras, numpy as np
    >>> from sparsify_keras.layers import find_prunable_weights
    >>> m = tf_keras.Sequential([tf_keras.layers.InputLayer((4,)), tf_keras.layers.Dense(3, name="fc")])
    >>> st = state_class()(find_prunable_weights(m), np.zeros(3, np.int64))
    >>> [tuple(v.shape) for v in st.masks], [tuple(v.shape) for v in st.stored], st.grads, int(st.last_step.numpy())
    ([(4, 3)], [(4, 3)], [], -1)
    >>> st = state_class()(find_prunable_weights(m), np.zeros(3, np.int64), keep_activations=True)
    >>> [tuple(v.shape) for v in st.activation_sums], [int(c.numpy()) for c in st.activation_calls]
    ([(4,)], [0])
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from sparsify_keras.layers import KerasPrunableWeight

from .compat import keras_module, track_dependency, untrack_dependency
from .statistics import install_recorders, uninstall_recorders

__all__ = ["STATE_ATTR", "state_class", "attach_state", "detach_state", "model_state"]

STATE_ATTR = "_sparsify_pruning_state"
_STATE_CLASS: list[type] = []


def model_state(model: Any) -> Any:
    """The state layer attached to ``model`` (None if it is not being pruned)."""
    return model.__dict__.get(STATE_ATTR)


def state_class() -> type:
    """The tf-keras state layer class (created once, when tf-keras is first needed)."""
    if _STATE_CLASS:
        return _STATE_CLASS[0]
    K = keras_module("tf_keras")

    class PruningState(K.layers.Layer):
        """Mask and stored-value variables, the last update step and the config fingerprint, saved with
        the model's weights (and the dense gradients of the last step with ``keep_grads``; the input
        activation sums of squares and call counts with ``keep_activations``)."""

        def __init__(self, pweights: list[KerasPrunableWeight], fingerprint: Any, keep_grads: bool = False,
                     keep_activations: bool = False, **kwargs: Any) -> None:
            super().__init__(name="sparsify_pruning_state", trainable=False, **kwargs)
            masks = []
            for i, pw in enumerate(pweights):
                masks.append(self.add_weight(name=f"mask_{i}", shape=pw.tf_shape, dtype=pw.variable.dtype,
                                             initializer="ones", trainable=False))
            stored = [self.add_weight(name=f"stored_{i}", shape=pw.tf_shape, dtype=pw.variable.dtype,
                                      initializer="zeros", trainable=False) for i, pw in enumerate(pweights)]
            grads = [self.add_weight(name=f"dense_grad_{i}", shape=pw.tf_shape, dtype=pw.variable.dtype,
                                     initializer="zeros", trainable=False)
                     for i, pw in enumerate(pweights)] if keep_grads else []
            seen = self.add_weight(name="dense_grad_seen", shape=(), dtype="int64", initializer="zeros",
                                   trainable=False) if keep_grads else None
            # per input channel (canonical axis 1), float32 like torch's sums (sparsify_torch.statistics);
            # under a distribution strategy each replica adds its share (aggregation: sum)
            summed = {"aggregation": tf.VariableAggregation.SUM}
            sums = [self.add_weight(name=f"activation_sum_{i}", shape=(pw.canonical_shape[1],), dtype="float32",
                                    initializer="zeros", trainable=False, **summed)
                    for i, pw in enumerate(pweights)] if keep_activations else []
            calls = [self.add_weight(name=f"activation_calls_{i}", shape=(), dtype="int64", initializer="zeros",
                                     trainable=False, **summed) for i in range(len(pweights))] if keep_activations else []
            last = self.add_weight(name="last_update_step", shape=(), dtype="int64",
                                   initializer=K.initializers.Constant(-1), trainable=False)
            fp = self.add_weight(name="config_fingerprint", shape=(len(fingerprint),), dtype="int64",
                                 initializer="zeros", trainable=False)
            fp.assign(fingerprint)
            # Plain attributes: keep them out of Keras' layer/variable tracking.
            object.__setattr__(self, "pweights", list(pweights))
            object.__setattr__(self, "masks", masks)
            object.__setattr__(self, "stored", stored)     # values of the pruned entries (0 where kept)
            object.__setattr__(self, "grads", grads)       # dense gradients of the last step (RigL only)
            object.__setattr__(self, "grads_seen", seen)   # 1 once a step recorded them
            object.__setattr__(self, "activation_sums", sums)    # inputs' sums of squares since the update
            object.__setattr__(self, "activation_calls", calls)  # layer calls they hold
            object.__setattr__(self, "last_step", last)
            object.__setattr__(self, "fingerprint", fp)
            self.record_per_step_paths([pw.path for pw in pweights])
            self.built = True

        def record_per_step_paths(self, paths: list[str]) -> None:
            """Set ``per_step_paths``: the weights the train step re-masks after every step."""
            object.__setattr__(self, "per_step_paths", list(paths))

        def call(self, inputs: Any) -> Any:  # pragma: no cover - never called
            return inputs

        def get_config(self) -> dict:  # pragma: no cover - never serialised as a layer
            return {"name": self.name}

    PruningState.__name__ = PruningState.__qualname__ = "SparsifyPruningState"
    _STATE_CLASS.append(PruningState)
    return PruningState


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
