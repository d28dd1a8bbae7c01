"""Helpers shared by the Keras callback tests (models, data, flavours)."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

FLAVORS = ("tf_keras", "keras3")


def kmod(flavor):
    """The Keras package for a flavour."""
    if flavor == "tf_keras":
        import tf_keras

        return tf_keras
    import keras

    return keras


def inp(K, shape, name=None):
    """A symbolic input for either Keras."""
    return K.Input(shape, name=name)


def first(K, shape):
    """First element of a Sequential: an input layer for either Keras."""
    return K.layers.InputLayer(shape) if K.__name__ == "tf_keras" else K.Input(shape)


def mlp(K, seed=0):
    """A small MLP for digits."""
    K.utils.set_random_seed(seed)
    return K.Sequential([first(K, (64,)), K.layers.Dense(32, activation="relu", name="fc1"),
                         K.layers.Dense(16, activation="relu", name="fc2"), K.layers.Dense(10, name="out")])


def cnn(K, seed=0):
    """A small CNN for digits (8x8x1 images)."""
    K.utils.set_random_seed(seed)
    return K.Sequential([first(K, (8, 8, 1)), K.layers.Conv2D(8, 3, activation="relu", name="conv1"),
                         K.layers.Conv2D(16, 3, activation="relu", name="conv2"), K.layers.Flatten(),
                         K.layers.Dense(32, activation="relu", name="fc"), K.layers.Dense(10, name="out")])


def compile_(model, K, opt="adam", lr=0.01, **kw):
    """Compile for sparse categorical cross-entropy."""
    o = {"adam": K.optimizers.Adam, "sgd": K.optimizers.SGD}[opt]
    o = o(lr, momentum=0.9) if opt == "sgd" else o(lr)
    model.compile(o, K.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"], **kw)
    return model


def exact_pruned(s, n):
    """Number of pruned units the core promises for ratio s of n units."""
    return min(int(np.ceil(s * n - 0.5)), n - 1)


def interrupted_run(K, digits, cfg, tmp_path, first_in_graph, callback_cls):
    """An uninterrupted reference run (5 epochs of 10 steps on the digits MLP) and a run that stops after
    3 epochs (``ModelCheckpoint``), restored into a fresh model with other initial weights and a new callback.

    Returns ``(ref, ref_cb, resumed, cb, rest)``: ``rest()`` trains the resumed model to the end.
    """
    init = compile_(mlp(K), K).get_weights()
    X, y = digits

    def fresh(seed=0):
        m = compile_(mlp(K, seed), K)
        if seed == 0:
            m.set_weights(init)
        return m

    ref, ref_cb = fresh(), callback_cls(cfg)
    ref.fit(X[:640], y[:640], batch_size=64, epochs=5, verbose=0, shuffle=False, callbacks=[ref_cb])
    path = str(tmp_path / ("ckpt.weights.h5" if K.__name__ == "keras" else "ckpt"))
    fresh().fit(X[:640], y[:640], batch_size=64, epochs=3, verbose=0, shuffle=False,
                callbacks=[callback_cls(cfg, update_in_graph=first_in_graph),
                           K.callbacks.ModelCheckpoint(path, save_weights_only=True)])
    resumed, cb = fresh(seed=5), callback_cls(cfg)
    if K.__name__ == "keras":
        resumed.optimizer.build(resumed.trainable_variables)
    cb.attach(resumed)
    resumed.load_weights(path)

    def rest():
        resumed.fit(X[:640], y[:640], batch_size=64, epochs=5, initial_epoch=3, verbose=0, shuffle=False,
                    callbacks=[cb])
    return ref, ref_cb, resumed, cb, rest
