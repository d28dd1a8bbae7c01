"""The reference a channel-removed Keras model must equal: the dense model with the removed channels zeroed.

"Zeroed" at their readers: every Dense or Conv2D input row that reads a removed channel is set to 0 in a
copy of the dense model, so a removed channel no longer contributes to anything the model outputs.
The rebuilt (smaller) model must compute the same outputs within float tolerance.

Example:
    >>> import keras, numpy as np
    >>> from sparsify_keras.channels.plan import channel_plan
    >>> L = keras.layers
    >>> model = keras.Sequential([keras.Input((3,)), L.Dense(4, name="a"), L.Dense(2, name="b")])
    >>> ref = masked_model(model, channel_plan(model, 0.5))
    >>> int((ref.get_layer("b").kernel.numpy() == 0).all(axis=1).sum())
    2
"""
from __future__ import annotations

import keras
import numpy as np

from .plan import ChannelPlan

__all__ = ["masked_model", "check_outputs", "ChannelCheckError"]


class ChannelCheckError(RuntimeError):
    """The rebuilt model's outputs differ from the masked dense model's (a bug: please report it)."""


def masked_model(model, plan: ChannelPlan):
    """A copy of ``model`` whose Dense/Conv2D kernels read zeros where ``plan`` removes channels."""
    ref = keras.models.clone_model(model)
    ref.set_weights(model.get_weights())
    for name, keep in plan.keep_in.items():
        if plan.graph.kinds.get(name) != "producer":
            continue
        layer = ref.get_layer(name)
        weights = layer.get_weights()
        kernel = weights[0]
        gone = np.setdiff1d(np.arange(kernel.shape[-2]), keep)
        index = [slice(None)] * kernel.ndim
        index[-2] = gone
        kernel[tuple(index)] = 0
        layer.set_weights([kernel] + weights[1:])
    return ref


def _example_inputs(model, batch: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for tensor in model.inputs:
        shape = tuple(tensor.shape)[1:]
        if any(s is None for s in shape):
            raise ValueError(f"check=True needs static input shapes, but input {tensor.name!r} has shape "
                             f"{tuple(tensor.shape)}; pass check=False to skip the output check")
        out.append(rng.standard_normal((batch,) + shape).astype("float32"))
    return out


def check_outputs(model, small, plan: ChannelPlan, batch: int = 2, seed: int = 0) -> float:
    """Run ``small`` and the masked ``model`` on random inputs; return the largest relative difference.

    Raises:
        ChannelCheckError: a difference above 1e-4 of the output's scale.
    """
    ref = masked_model(model, plan)
    x = _example_inputs(model, batch, seed)
    x = x[0] if len(x) == 1 else x
    got = keras.tree.flatten(small(x, training=False))
    want = keras.tree.flatten(ref(x, training=False))
    worst = 0.0
    for g, w in zip(got, want):
        g, w = keras.ops.convert_to_numpy(g), keras.ops.convert_to_numpy(w)
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        worst = max(worst, float(np.abs(g - w).max(initial=0.0)) / scale)
    if not np.isfinite(worst) or worst > 1e-4:
        raise ChannelCheckError(f"the channel-removed model differs from the masked dense model by {worst:.3g} "
                                "(relative); this is a bug in sparsify_keras.remove_channels")
    return worst
