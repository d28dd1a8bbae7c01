"""The one Keras driver base (sparsify_keras.driver.KerasDriver) on both Kerases: the state each driver
creates, and the refusals at the start of fit under a tf.distribute strategy (the gradients are per replica)."""
import numpy as np
import pytest
import tensorflow as tf
from _keras_helpers import first

from sparsify_keras import PruningCallback
from sparsify_keras.driver import driver_for
from sparsify_keras.state import StateSchema

_WORDS = {"tf_keras": "a distribution strategy", "keras": "a tf.distribute strategy"}


def _model(K, strategy=None):
    def build():
        K.utils.set_random_seed(0)
        m = K.Sequential([first(K, (8,)), K.layers.Dense(4, name="fc")])
        m.compile(K.optimizers.SGD(0.1), "mse")
        return m

    if strategy is None:
        return build()
    with strategy.scope():
        return build()


@pytest.mark.parametrize("config, parts", [
    ({}, (0, 0, False, 0.0)),
    ({"criterion": "snip", "regrowth": "rigl", "pruned_gradient": "straight_through", "pruned_decay": 0.5},
     (1, 1, True, 0.5))])
def test_create_state_holds_what_the_config_needs(K, config, parts):
    model = _model(K)
    cb = PruningCallback({"target_sparsity": 0.5, **config})
    cb.set_model(model)                        # the driver's create_state, in its scope
    state = cb._state
    assert isinstance(state, StateSchema) and isinstance(state, driver_for(model).state_class())
    assert [pw.path for pw in state.pweights] == ["fc/kernel"]
    assert len(state.masks) == 1 and np.all(np.asarray(state.masks[0]) == 1)
    assert (len(state.grads), len(state.scores), state.straight_through, state.pruned_decay) == parts


@pytest.mark.parametrize("change, what", [({"regrowth": "rigl"}, "regrowth='rigl'"),
                                          ({"criterion": "snip"}, "criterion 'snip'")])
def test_fit_under_a_strategy_refuses_per_replica_gradients_before_any_step(K, change, what):
    model = _model(K, tf.distribute.MirroredStrategy(["/cpu:0"]))
    before = [w.copy() for w in model.get_layer("fc").get_weights()]
    cb = PruningCallback({"target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2, **change})
    with pytest.raises(ValueError, match=f"{what}.* is not supported under {_WORDS[K.__name__]}") as e:
        model.fit(np.ones((8, 8), "float32"), np.ones((8, 4), "float32"), batch_size=4, verbose=0, callbacks=[cb])
    assert "train without a strategy" in str(e.value)
    assert int(model.optimizer.iterations.numpy()) == 0
    after = model.get_layer("fc").get_weights()
    assert len(after) == 2 and all(np.array_equal(a, b) for a, b in zip(before, after))
