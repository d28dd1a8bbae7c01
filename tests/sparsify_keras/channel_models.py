"""Tiny Keras models with known channel norms, shared by the channel-removal tests (any Keras backend)."""
from __future__ import annotations

import numpy as np


def _columns(shape, scales, rng) -> np.ndarray:
    """A kernel whose output column j holds +-scales[j] (random signs): L1 and L2 norms proportional to scales."""
    signs = rng.choice([-1.0, 1.0], size=shape)
    return (signs * np.asarray(scales, dtype=np.float64)).astype("float32")


def residual_cnn(seed: int = 0):
    """(4, 4, 2) -> c1 1x1 conv 4 -> BN -> ReLU -> depthwise 3x3 -> c2 1x1 conv 4 -> Add(ReLU, c2) -> max pool 2
    -> Flatten -> fc Dense 6 (ReLU) -> Dropout -> head Dense 3. c1 and c2 are tied by the Add."""
    import keras
    L = keras.layers
    x = inp = keras.Input((4, 4, 2), name="image")
    r = L.ReLU(name="relu")(L.BatchNormalization(name="bn")(L.Conv2D(4, 1, name="c1")(x)))
    d = L.DepthwiseConv2D(3, padding="same", name="dw")(r)
    x = L.Add(name="add")([r, L.Conv2D(4, 1, name="c2")(d)])
    x = L.Flatten(name="flat")(L.MaxPooling2D(2, name="pool")(x))
    x = L.Dropout(0.5, name="drop")(L.Dense(6, activation="relu", name="fc")(x))
    model = keras.Model(inp, L.Dense(3, name="head")(x))
    rng = np.random.default_rng(seed)
    model.get_layer("c1").set_weights([_columns((1, 1, 2, 4), [3, 1, 2, 0.5], rng), rng.normal(size=4) / 4])
    model.get_layer("bn").set_weights([1 + rng.random(4), rng.normal(size=4) / 4, rng.normal(size=4) / 4,
                                       0.5 + rng.random(4)])
    model.get_layer("dw").set_weights([rng.normal(size=(3, 3, 4, 1)) / 3, rng.normal(size=4) / 4])
    model.get_layer("c2").set_weights([_columns((1, 1, 4, 4), [0, 1, 0, 0.25], rng), rng.normal(size=4) / 4])
    model.get_layer("fc").set_weights([_columns((16, 6), [5, 1, 4, 2, 3, 6], rng) / 4, rng.normal(size=6) / 4])
    model.get_layer("head").set_weights([rng.normal(size=(6, 3)), rng.normal(size=3)])
    return model


def masked_by_hand(model):
    """The residual CNN with the channels that 50% L1 removes zeroed at their readers (literal positions):
    c1/c2 lose channels 2 and 3, so c2 reads zeros there and fc's Flatten rows 2, 3, 6, 7, ... are zero; fc
    loses 1, 3 and 4, zeroed in the head's rows."""
    import keras
    ref = keras.models.clone_model(model)
    ref.set_weights(model.get_weights())
    for name, rows in (("c2", [2, 3]), ("fc", [p for p in range(16) if p % 4 in (2, 3)]), ("head", [1, 3, 4])):
        kernel, bias = ref.get_layer(name).get_weights()
        kernel[..., rows, :] = 0
        ref.get_layer(name).set_weights([kernel, bias])
    return ref


def inputs(batch: int = 3, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(batch, 4, 4, 2)).astype("float32")
