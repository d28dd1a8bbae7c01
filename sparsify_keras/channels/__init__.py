"""Structured channel removal for Keras 3 models: a rebuilt, physically smaller plain Keras model.

* :mod:`~sparsify_keras.channels.graph`: which channels are tied (Add) or fixed (model inputs and outputs);
* :mod:`~sparsify_keras.channels.plan`: weight-norm criteria and the core's selection (:class:`ChannelPlan`);
* :mod:`~sparsify_keras.channels.rebuild`: the new model from its config, weights sliced;
* :mod:`~sparsify_keras.channels.masked`: the reference it must equal (removed channels zeroed);
* :mod:`~sparsify_keras.channels.api`: :func:`remove_channels`.

Example:
    >>> import keras
    >>> model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
    ...                           keras.layers.Dense(2)])
    >>> remove_channels(model, 0.5).layers[0].units
    4
"""
from .api import remove_channels
from .graph import SUPPORTED_LAYERS, ChannelGraph, channel_graph
from .masked import ChannelCheckError, masked_model
from .plan import CRITERIA, ChannelPlan, channel_plan

__all__ = ["remove_channels", "channel_plan", "ChannelPlan", "channel_graph", "ChannelGraph", "masked_model",
           "ChannelCheckError", "SUPPORTED_LAYERS", "CRITERIA"]
