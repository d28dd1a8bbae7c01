"""``strip_pruning(model)``: the pruned model as a plain Keras model.

Example:
    >>> import numpy as np, keras
    >>> from sparsify_tf.keras import PruningCallback
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

from .compat import keras_flavor, tf_variable
from .grad_masking import uninstall_grad_hook
from .state import detach_state, model_state
from .train_step import mask_all, strategy_of, uninstall_train_step

__all__ = ["strip_pruning"]


def strip_pruning(model: Any) -> Any:
    """Remove the pruning state from ``model`` and return it as a plain model.

    The masks are applied one last time (pruned weights are exactly zero), the
    wrapped ``train_step`` and the state layer are removed, so the model saves
    and loads (``.keras``, SavedModel, weights) without sparsify.

    """
    if keras_flavor(model) == "keras3":
        from sparsify_keras.strip import strip_pruning as strip_keras3

        return strip_keras3(model)
    state = model_state(model)
    if state is not None:
        with strategy_of(model).scope():
            mask_all([(tf_variable(pw.variable), tf_variable(m)) for pw, m in zip(state.pweights, state.masks)])
    uninstall_train_step(model)
    uninstall_grad_hook(model)
    detach_state(model)
    return model
