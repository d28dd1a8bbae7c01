"""``strip_pruning(model)``: a pruned Keras 3 model as a plain Keras model.

Example:
    >>> import numpy as np, keras
    >>> from sparsify_keras import PruningCallback
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)])
    >>> model.compile("sgd", "mse")
    >>> _ = model.fit(np.ones((4, 4)), np.zeros((4, 8)), verbose=0,
    ...               callbacks=[PruningCallback({"target_sparsity": 0.5, "end_step": 0})])
    >>> plain = strip_pruning(model)      # then plain.save("pruned.keras"): loads without sparsify
    >>> float((plain.layers[0].kernel.numpy() == 0).mean())
    0.5
"""
from __future__ import annotations

from typing import Any

from .backend import sync_to_variables, to_numpy
from .compat import keras_flavor
from .state import detach_state, model_state
from .statistics import uninstall_recorders
from .train_step import uninstall_train_step

__all__ = ["strip_pruning"]


def strip_pruning(model: Any) -> Any:
    """Remove the pruning state from ``model`` and return it as a plain model.

    The masks are applied one last time (pruned weights are exactly zero); the wrapped ``train_step``,
    the optimizer hook, the input recorders and the state variables are removed, so the model saves and
    loads (``.keras``, weights) without sparsify. tf-keras models: :func:`sparsify_tf.keras.strip_pruning`
    (which also takes Keras 3 models).

    Raises:
        TypeError: ``model`` is not a Keras 3 model.
    """
    if keras_flavor(model) != "keras3":
        raise TypeError(f"model {model.name!r} is a tf-keras (Keras 2) model: use sparsify_tf.keras.strip_pruning")
    state = model_state(model)
    if state is not None:
        sync_to_variables(model)
        for pw, mask in zip(state.pweights, state.masks):
            w = to_numpy(pw.variable)
            pw.variable.assign(w * (to_numpy(mask) != 0).astype(w.dtype))
    uninstall_train_step(model)
    uninstall_recorders(state)
    detach_state(model)
    return model
