"""Rebuild a Keras 3 model with fewer units/filters: its config with the new widths, its weights sliced.

The new model is a plain ``keras.Sequential`` or ``keras.Model`` made by ``from_config`` (no sparsify
layer or object in it), so it saves as ``.keras`` and loads without sparsify.

Example:
    >>> import keras, numpy as np
    >>> from sparsify_keras.channels.plan import channel_plan
    >>> L = keras.layers
    >>> model = keras.Sequential([keras.Input((3,)), L.Dense(4, name="a"), L.Dense(2, name="b")])
    >>> small = rebuild(model, channel_plan(model, 0.5))
    >>> small.get_layer("a").units, tuple(small.get_layer("b").kernel.shape)
    (2, (2, 2))
"""
from __future__ import annotations

import copy
from typing import List

import keras
import numpy as np

from .plan import ChannelPlan

__all__ = ["rebuild", "sliced_weights"]


def _config(model, plan: ChannelPlan) -> dict:
    """The model's config with the new widths; layer build configs dropped (layers build on the new shapes)."""
    config = copy.deepcopy(model.get_config())
    for layer_cfg in config["layers"]:
        inner = layer_cfg["config"]
        name = inner.get("name")
        if name in plan.widths:
            inner["units" if layer_cfg["class_name"] == "Dense" else "filters"] = plan.widths[name]
        layer_cfg.pop("build_config", None)
    return config


def sliced_weights(layer, plan: ChannelPlan) -> List[np.ndarray]:
    """``layer``'s weights without the removed input and output channels.

    Dense and Conv2D kernels lose input rows (``keep_in``) and output columns (``keep_out``); a
    DepthwiseConv2D kernel loses input channels, its bias output channels; every BatchNormalization
    weight loses the removed channels.
    """
    weights = [np.asarray(w) for w in layer.get_weights()]
    name = layer.name
    keep_in, keep_out = plan.keep_in.get(name), plan.keep_out.get(name)
    kind = plan.graph.kinds.get(name)
    if kind == "norm" and keep_in is not None:
        return [w[keep_in] for w in weights]
    if kind == "depthwise":
        if keep_in is not None:
            weights[0] = weights[0][:, :, keep_in, :]
        if keep_out is not None and len(weights) > 1:
            weights[1] = weights[1][keep_out]
        return weights
    if kind == "producer":
        kernel = weights[0]
        if keep_in is not None:
            kernel = np.take(kernel, keep_in, axis=kernel.ndim - 2)
        if keep_out is not None:
            kernel = kernel[..., keep_out]
            weights[1:] = [w[keep_out] for w in weights[1:]]
        weights[0] = kernel
    return weights


def rebuild(model, plan: ChannelPlan):
    """A new model of the same class from ``model``'s config with ``plan``'s widths and sliced weights.

    ``model`` is not changed. The new model is not compiled (compile it as you compiled the original).
    """
    config = _config(model, plan)
    cls = keras.Sequential if isinstance(model, keras.Sequential) else keras.Model
    new = cls.from_config(config)
    for layer in new.layers:
        old = model.get_layer(layer.name)
        weights = sliced_weights(old, plan)
        expected = [tuple(w.shape) for w in layer.get_weights()]
        if [tuple(w.shape) for w in weights] != expected:         # pragma: no cover - a bug, not a user error
            raise RuntimeError(f"rebuilt layer {layer.name!r} expects weights {expected}, sliced "
                               f"{[tuple(w.shape) for w in weights]}")
        layer.set_weights(weights)
    return new
