"""The wrapped train step: masking after the optimizer step and the TrainStepExtension hand-off."""
import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from _keras_helpers import first

from sparsify_tf.keras.compat import keras_flavor
from sparsify_tf.keras.layers import find_prunable_weights
from sparsify_tf.keras.state import attach_state, state_class
from sparsify_tf.keras.train_step import TrainStepExtension, install_train_step, uninstall_train_step


class RecordTraces:
    """An extension recording the models whose train step it extended."""

    def __init__(self):
        self.models = []

    def extend_train_step(self, model):
        self.models.append(model.name)


def _pruned_model(K):
    model = K.Sequential([first(K, (3,)), K.layers.Dense(2, name="fc", use_bias=False)], name="tiny")
    mask = np.array([[1, 0], [1, 1], [0, 1]], np.float32)
    model.layers[-1].kernel.assign(np.arange(1.0, 7.0, dtype=np.float32).reshape(3, 2) * mask)
    model.compile(K.optimizers.SGD(0.1), "mse")
    flavor = keras_flavor(model)
    state = state_class(flavor)(find_prunable_weights(model), np.zeros(3, np.int64))
    state.masks[0].assign(mask)
    attach_state(model, state, flavor)
    return model, state, flavor


def test_the_step_keeps_pruned_weights_at_zero_and_hands_itself_to_the_extension(K):
    model, state, flavor = _pruned_model(K)
    ext = RecordTraces()
    assert isinstance(ext, TrainStepExtension)
    install_train_step(model, state, flavor, extension=ext)
    model.fit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32), epochs=2, verbose=0)
    assert ext.models and set(ext.models) == {"tiny"}
    kernel = model.layers[-1].kernel.numpy()
    assert kernel[0, 1] == 0.0 and kernel[2, 0] == 0.0 and kernel[1].all()
    uninstall_train_step(model)
    assert "train_step" not in model.__dict__


def test_the_step_holds_its_extension_weakly(K):
    model, state, flavor = _pruned_model(K)
    ext = RecordTraces()
    install_train_step(model, state, flavor, extension=ext)
    models = ext.models
    del ext
    gc.collect()
    model.fit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32), verbose=0)
    assert models == []
