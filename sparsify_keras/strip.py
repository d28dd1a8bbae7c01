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

from .backend import to_numpy
from .driver import driver_for
from .layers import pruning_root
from .state import model_state

__all__ = ["strip_pruning"]


def strip_pruning(model: Any) -> Any:
    """Remove the pruning state from ``model`` and return it as a plain model (Keras 3 or tf-keras).

    The masks are applied one last time (pruned weights are exactly zero); the wrapped ``train_step``,
    the optimizer hook, the input recorders and the state variables are removed, so the model saves and
    loads (``.keras``, weights) without sparsify. A :class:`~sparsify_keras.DistillationModel` gives its
    student back (the teacher is not part of it).

    Raises:
        TypeError: ``model`` is not a Keras model.
    """
    driver = driver_for(model)
    state = model_state(model)
    if state is not None:
        with driver.scope(model):
            driver.sync(model)
            for pw, mask in zip(state.pweights, state.masks):
                w = to_numpy(pw.variable)
                pw.variable.assign(w * (to_numpy(mask) != 0).astype(w.dtype))
    driver.uninstall(model)
    return pruning_root(model)
