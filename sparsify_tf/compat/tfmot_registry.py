"""Which weights tfmot prunes in each built-in Keras layer (its registry), for both Kerases.

A layer is matched by its exact class name among the Keras layers (as tfmot
matches exact classes), so a subclass of ``Dense`` needs its own
``get_prunable_weights`` (:class:`PrunableLayer`). Layers with nothing to prune
(``Flatten``, pooling, normalisation, ...) are accepted and pruned nowhere;
``DepthwiseConv2D`` is accepted with nothing pruned and ``SeparableConv*``
prune only the pointwise kernel, as in tfmot.

Example:
    >>> import keras
    >>> d = keras.layers.Dense(3); d.build((None, 4))
    >>> [short_name(w) for w in prunable_weights(d)]
    ['kernel']
"""
from __future__ import annotations

import abc
from typing import Any

from sparsify_keras.compat import short_name

__all__ = ["PrunableLayer", "prunable_weights", "supports", "short_name"]

_WEIGHTS = {
    "Dense": ["kernel"], "Conv1D": ["kernel"], "Conv2D": ["kernel"], "Conv3D": ["kernel"],
    "Conv1DTranspose": ["kernel"], "Conv2DTranspose": ["kernel"], "Conv3DTranspose": ["kernel"],
    "SeparableConv1D": ["pointwise_kernel"], "SeparableConv2D": ["pointwise_kernel"],
    "Embedding": ["embeddings"], "LocallyConnected1D": ["kernel"], "LocallyConnected2D": ["kernel"],
}
_NOTHING = {
    "ELU", "LeakyReLU", "ReLU", "Softmax", "ThresholdedReLU", "PReLU", "Activation", "ActivityRegularization",
    "Cropping1D", "Cropping2D", "Cropping3D", "DepthwiseConv2D", "UpSampling1D", "UpSampling2D", "UpSampling3D",
    "ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D", "Dropout", "Flatten", "Lambda", "Masking", "Permute",
    "RepeatVector", "Reshape", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "Add", "Average",
    "Concatenate", "Dot", "Maximum", "Minimum", "Multiply", "Subtract", "AlphaDropout", "GaussianDropout",
    "GaussianNoise", "BatchNormalization", "SyncBatchNormalization", "LayerNormalization",
    "GroupNormalization", "UnitNormalization", "Rescaling", "Identity", "TFOpLambda", "TensorFlowOpLayer",
    "AveragePooling1D", "AveragePooling2D", "AveragePooling3D", "MaxPooling1D", "MaxPooling2D", "MaxPooling3D",
    "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D",
    "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D",
}
_RNN = {"GRU", "LSTM", "SimpleRNN", "RNN"}
_RNN_CELLS = {"GRUCell", "LSTMCell", "SimpleRNNCell"}
_MHA = ("_query_dense", "_key_dense", "_value_dense", "_output_dense")


class PrunableLayer(abc.ABC):
    """Mix into a custom Keras layer and list the weights to prune in ``get_prunable_weights``.

    Example:
        >>> import keras
        >>> class MyDense(keras.layers.Dense, PrunableLayer):
        ...     def get_prunable_weights(self):
        ...         return [self.kernel, self.bias]
        >>> layer = MyDense(2); layer.build((None, 3))
        >>> [short_name(w) for w in prunable_weights(layer)]
        ['kernel', 'bias']
    """

    @abc.abstractmethod
    def get_prunable_weights(self) -> list:
        """The weight variables of this layer to prune."""


def _is_keras_layer(layer: Any) -> bool:
    return any((c.__module__ or "").split(".")[0] in ("keras", "tf_keras") for c in type(layer).__mro__)


def _rnn_cells(layer: Any) -> list:
    cell = layer.cell
    return list(getattr(cell, "cells", None) or [cell])


def supports(layer: Any) -> bool:
    """Whether ``prune_low_magnitude`` can wrap ``layer`` (registry or ``get_prunable_weights``)."""
    if hasattr(layer, "get_prunable_weights"):
        return True
    if not _is_keras_layer(layer):
        return False
    name = type(layer).__name__
    if name in _WEIGHTS or name in _NOTHING or name == "MultiHeadAttention":
        return True
    if name in _RNN:
        return all(type(c).__name__ in _RNN_CELLS or hasattr(c, "get_prunable_weights") for c in _rnn_cells(layer))
    return False


def prunable_weights(layer: Any) -> list:
    """The variables tfmot prunes in ``layer`` (the layer must be built).

    Raises:
        ValueError: the layer is neither a supported built-in layer nor has ``get_prunable_weights``.
    """
    if hasattr(layer, "get_prunable_weights"):
        return list(layer.get_prunable_weights())
    if not supports(layer):
        raise ValueError(f"layer {layer.name!r} of class {type(layer).__name__} cannot be pruned: it is not one of "
                         "the supported built-in Keras layers; give it a get_prunable_weights() method "
                         "(subclass PrunableLayer) or leave it out of prune_low_magnitude")
    name = type(layer).__name__
    if name in _WEIGHTS:
        return [getattr(layer, w) for w in _WEIGHTS[name]]
    if name == "MultiHeadAttention":
        return [getattr(layer, d).kernel for d in _MHA]
    if name in _RNN:
        out = []
        for cell in _rnn_cells(layer):
            out += list(cell.get_prunable_weights()) if hasattr(cell, "get_prunable_weights") \
                else [cell.kernel, cell.recurrent_kernel]
        return out
    return []
