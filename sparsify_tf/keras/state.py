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

Example:
    >>> import keras, numpy as np
    >>> from sparsify_keras.layers import find_prunable_weights
    >>> m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="fc")])
    >>> st = state_class("keras3")(find_prunable_weights(m), np.zeros(3, np.int64))
    >>> [tuple(v.shape) for v in st.masks], [tuple(v.shape) for v in st.stored], st.grads, int(st.last_step.numpy())
    ([(4, 3)], [(4, 3)], [], -1)
    >>> st = state_class("keras3")(find_prunable_weights(m), np.zeros(3, np.int64), keep_activations=True)
    >>> [tuple(v.shape) for v in st.activation_sums], [int(c.numpy()) for c in st.activation_calls]
    ([(4,)], [0])
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from .compat import keras_module
from sparsify_keras.layers import KerasPrunableWeight
from .statistics import install_recorders, uninstall_recorders

__all__ = ["STATE_ATTR", "state_class", "attach_state", "detach_state", "model_state"]

STATE_ATTR = "_sparsify_pruning_state"
_STATE_CLASSES: dict[str, type] = {}


def model_state(model: Any) -> Any:
    """The state layer attached to ``model`` (None if it is not being pruned)."""
    return model.__dict__.get(STATE_ATTR)


def state_class(flavor: str) -> type:
    """The state layer class of a Keras flavour (created once per flavour)."""
    if flavor in _STATE_CLASSES:
        return _STATE_CLASSES[flavor]
    K = keras_module(flavor)

    class PruningState(K.layers.Layer):
        """Mask and stored-value variables, the last update step and the config fingerprint, saved with
        the model's weights (and the dense gradients of the last step with ``keep_grads``; the input
        activation sums of squares and call counts with ``keep_activations``)."""

        def __init__(self, pweights: list[KerasPrunableWeight], fingerprint: Any, keep_grads: bool = False,
                     keep_activations: bool = False, **kwargs: Any) -> None:
            super().__init__(name="sparsify_pruning_state", trainable=False, **kwargs)
            extra = {"autocast": False} if flavor == "keras3" else {}
            masks = []
            for i, pw in enumerate(pweights):
                masks.append(self.add_weight(name=f"mask_{i}", shape=pw.tf_shape, dtype=pw.variable.dtype,
                                             initializer="ones", trainable=False, **extra))
            stored = [self.add_weight(name=f"stored_{i}", shape=pw.tf_shape, dtype=pw.variable.dtype,
                                      initializer="zeros", trainable=False, **extra) for i, pw in enumerate(pweights)]
            grads = [self.add_weight(name=f"dense_grad_{i}", shape=pw.tf_shape, dtype=pw.variable.dtype,
                                     initializer="zeros", trainable=False, **extra)
                     for i, pw in enumerate(pweights)] if keep_grads else []
            seen = self.add_weight(name="dense_grad_seen", shape=(), dtype="int64", initializer="zeros",
                                   trainable=False, **extra) if keep_grads else None
            # per input channel (canonical axis 1), float32 like torch's sums (sparsify_torch.statistics);
            # under a distribution strategy each replica adds its share (aggregation: sum)
            summed = {**extra, "aggregation": "sum" if flavor == "keras3" else tf.VariableAggregation.SUM}
            sums = [self.add_weight(name=f"activation_sum_{i}", shape=(pw.canonical_shape[1],), dtype="float32",
                                    initializer="zeros", trainable=False, **summed)
                    for i, pw in enumerate(pweights)] if keep_activations else []
            calls = [self.add_weight(name=f"activation_calls_{i}", shape=(), dtype="int64", initializer="zeros",
                                     trainable=False, **summed) for i in range(len(pweights))] if keep_activations else []
            last = self.add_weight(name="last_update_step", shape=(), dtype="int64",
                                   initializer=K.initializers.Constant(-1), trainable=False, **extra)
            fp = self.add_weight(name="config_fingerprint", shape=(len(fingerprint),), dtype="int64",
                                 initializer="zeros", trainable=False, **extra)
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
    _STATE_CLASSES[flavor] = PruningState
    return PruningState


def attach_state(model: Any, state: Any, flavor: str) -> None:
    object.__setattr__(model, STATE_ATTR, state)
    install_recorders(state)        # with activation sums (Wanda): the train step records the layers' inputs
    if flavor == "tf_keras":
        # Checkpoint dependency (TF-format save_weights, BackupAndRestore); also triggers
        # deferred restoration when load_weights ran before the state existed.
        model._track_trackable(state, name=STATE_ATTR, overwrite=True)


def detach_state(model: Any) -> Any:
    state = model.__dict__.pop(STATE_ATTR, None)
    uninstall_recorders(state)
    deps = getattr(model, "_self_unconditional_checkpoint_dependencies", None)
    if isinstance(deps, list):
        deps[:] = [d for d in deps if d.name != STATE_ATTR]
    names = getattr(model, "_self_unconditional_dependency_names", None)
    if isinstance(names, dict):
        names.pop(STATE_ATTR, None)
    return state


# --------------------------------------------------------------------------------------------
# Callback
# --------------------------------------------------------------------------------------------
