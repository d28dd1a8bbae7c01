"""The wrapped train step: masking after the optimizer step and the TrainStepExtension hand-off (tf-keras: Keras 3
models train through sparsify_keras' own step)."""
import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from _keras_helpers import first, kmod

from sparsify.patching import patch_of
from sparsify_keras.layers import find_prunable_weights
from sparsify_keras.train_step import TrainStepExtension, install_train_step, uninstall_train_step
from sparsify_tf.keras.state import attach_state, state_class
from sparsify_tf.keras.train_step import TfStepHooks

HOOKS = TfStepHooks()      # the tf-keras driver's hooks of the one train-step masking


@pytest.fixture
def K():
    """tf-keras only (overrides the conftest's fixture over both Kerases)."""
    return kmod("tf_keras")


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
    state = state_class()(find_prunable_weights(model), np.zeros(3, np.int64))
    state.masks[0].assign(mask)
    attach_state(model, state)
    return model, state


def test_the_step_keeps_pruned_weights_at_zero_and_hands_itself_to_the_extension(K):
    model, state = _pruned_model(K)
    ext = RecordTraces()
    assert isinstance(ext, TrainStepExtension)
    install_train_step(model, state, HOOKS, extension=ext)
    model.fit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32), epochs=2, verbose=0)
    assert ext.models and set(ext.models) == {"tiny"}
    kernel = model.layers[-1].kernel.numpy()
    assert kernel[0, 1] == 0.0 and kernel[2, 0] == 0.0 and kernel[1].all()
    uninstall_train_step(model, HOOKS)
    assert "train_step" not in model.__dict__


@pytest.mark.slow
def test_the_step_holds_its_extension_weakly(K):
    model, state = _pruned_model(K)
    ext = RecordTraces()
    install_train_step(model, state, HOOKS, extension=ext)
    models = ext.models
    del ext
    gc.collect()
    model.fit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32), verbose=0)
    assert models == []


def test_installing_twice_wraps_the_models_own_step_once_and_uninstall_gives_it_back(K):
    model, state = _pruned_model(K)
    own = model.train_step
    install_train_step(model, state, HOOKS)
    install_train_step(model, state, HOOKS, extension=RecordTraces())
    found = patch_of(model, "train_step")
    assert found is not None and not found.had_instance_attr and found.original == own
    model.fit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32), verbose=0)
    uninstall_train_step(model, HOOKS)
    assert "train_step" not in model.__dict__ and model.train_function is None
    uninstall_train_step(model, HOOKS)                                         # nothing to undo: no error
