"""Bad input: clear errors naming the parameter or layer, raised before any state changes."""
import numpy as np
import pytest

from sparsify_tf.keras import STATE_ATTR, PruningCallback, strip_pruning

from _keras_helpers import compile_, first, mlp


def _xy(digits, n=64):
    X, y = digits
    return X[:n], y[:n]


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"config": {"target_sparsty": 0.5}}, ValueError, "target_sparsty.*did you mean 'target_sparsity'"),
    ({"config": {"target_sparsity": 1.5}}, ValueError, "target_sparsity must be in"),
    ({"config": 3}, TypeError, "config must be"),
    ({"config": {}, "log_dir": 5}, TypeError, "log_dir must be"),
    ({"config": {}, "verbose": 2}, ValueError, "verbose must be 0 or 1, got 2"),
    ({"config": {}, "log_per_layer": "yes"}, TypeError, "log_per_layer must be True or False"),
    ({"config": {}, "update_in_graph": 1}, TypeError, "update_in_graph must be True, False or None, got 1"),
])
def test_constructor_rejects_bad_arguments(kwargs, exc, match):
    cfg = kwargs.pop("config")
    with pytest.raises(exc, match=match):
        PruningCallback(cfg, **kwargs)


def test_snip_runs_on_both_kerases(K, digits):
    """``snip`` (scored from every step's gradients) on tf-keras too: the scores are kept by the one train-step
    masking, the host reads them at the update."""
    model = compile_(mlp(K), K)
    cb = PruningCallback({"criterion": "snip", "target_sparsity": 0.5, "start_step": 0, "end_step": 2})
    model.fit(*_xy(digits), batch_size=16, epochs=1, verbose=0, callbacks=[cb])
    assert cb.sparsity["total"] == 0.5 and cb.last_update_step == 2
    assert cb._state.scores and int(np.asarray(cb._state.scores_seen.numpy())) == 1


def test_config_matching_no_weight_names_the_prunable_ones(K, digits):
    model = compile_(mlp(K), K)
    before = [w.copy() for w in model.get_weights()]
    cb = PruningCallback({"op_names": ["^conv"]})
    with pytest.raises(ValueError, match=r"op_names=\['\^conv'\].*fc1/kernel, fc2/kernel, out/kernel"):
        model.fit(*_xy(digits), epochs=1, verbose=0, callbacks=[cb])
    assert STATE_ATTR not in model.__dict__ and "train_step" not in model.__dict__
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    assert int(model.optimizer.iterations.numpy()) == 0


@pytest.mark.slow
def test_pattern_that_does_not_fit_names_the_layer(K, digits):
    model = compile_(mlp(K), K)
    cb = PruningCallback({"pattern": "4x1", "target_sparsity": 0.5})
    with pytest.raises(ValueError, match=r"layer 'out/kernel' with 2-D view \(10, 16\) does not fit pattern '4x1'"):
        model.fit(*_xy(digits), epochs=1, verbose=0, callbacks=[cb])
    assert STATE_ATTR not in model.__dict__
    assert int(model.optimizer.iterations.numpy()) == 0
    # skip_incompatible_layers leaves such layers dense instead
    ok = PruningCallback({"pattern": "4x1", "target_sparsity": 0.5, "end_step": 0,
                          "skip_incompatible_layers": True})
    with pytest.warns(UserWarning, match=r"pattern '4x1' does not fit 1 of 3 selected layers, left dense "
                                         r"\(skip_incompatible_layers=True\): 'out/kernel' \(2-D view \(10, 16\)"):
        model.fit(*_xy(digits), epochs=1, verbose=0, callbacks=[ok])
    assert ok.sparsity["out/kernel"] is None and ok.sparsity["fc1/kernel"] == 0.5      # None: skipped
    assert list(ok.protocol.skipped) == ["out/kernel"]


def test_unbuilt_model_is_refused(K, digits):
    class Net(K.Model):
        def __init__(self):
            super().__init__(name="net")
            self.d = K.layers.Dense(4)

        def call(self, x):
            return self.d(x)

    net = Net()
    with pytest.raises(ValueError, match="model 'net' is not built"):
        PruningCallback({}).attach(net)
    if K.__name__ == "tf_keras":      # Keras 3 builds subclassed models before callbacks run
        net.compile("sgd", "mse")
        with pytest.raises(ValueError, match="model 'net' is not built"):
            net.fit(np.ones((8, 3), "float32"), np.ones((8, 4), "float32"), verbose=0,
                    callbacks=[PruningCallback({})])


@pytest.mark.slow
def test_fit_with_a_different_model_is_refused(K, digits):
    a, b = compile_(mlp(K, seed=0), K), compile_(mlp(K, seed=1), K)
    cb = PruningCallback({"end_step": 2, "pruning_frequency": 1})
    a.fit(*_xy(digits), epochs=1, verbose=0, callbacks=[cb])
    with pytest.raises(ValueError, match=f"bound to model '{a.name}' but fit was called on model '{b.name}'"):
        b.fit(*_xy(digits), epochs=1, verbose=0, callbacks=[cb])
    assert STATE_ATTR not in b.__dict__
    # after strip_pruning the callback may be reused
    strip_pruning(a)
    b.fit(*_xy(digits), epochs=1, verbose=0, callbacks=[cb])
    assert cb.pruned_weights == ["fc1/kernel", "fc2/kernel", "out/kernel"]


def test_not_a_keras_model_and_different_selection_on_same_model(K):
    with pytest.raises(TypeError, match="model must be a tf_keras.Model or a keras.Model"):
        PruningCallback({}).attach(object())
    with pytest.raises(TypeError, match="model must be a tf_keras.Model or a keras.Model"):
        strip_pruning(object())
    model = K.Sequential([first(K, (4,)), K.layers.Dense(3, name="a"), K.layers.Dense(2, name="b")])
    PruningCallback({"op_names": ["^a/"]}).attach(model)
    with pytest.raises(ValueError, match=r"already carries pruning state for \['a/kernel'\]"):
        PruningCallback({"op_names": ["^b/"]}).attach(model)


def test_frozen_model_is_refused_before_training(K, digits):
    model = mlp(K)
    model.trainable = False
    compile_(model, K)
    with pytest.raises(ValueError, match="has no trainable weights .*the pruning schedule could never move"):
        model.fit(*_xy(digits), epochs=1, verbose=0, callbacks=[PruningCallback({"end_step": 0})])


def test_tf_keras_runs_straight_through_and_sr_ste(digits):
    """tf-keras models: with straight-through (and SR-STE's pruned_decay) the optimizer steps the pruned entries'
    stored values while the kernel keeps zeros there."""
    from _keras_helpers import kmod

    K = kmod("tf_keras")
    model = compile_(mlp(K), K)
    cb = PruningCallback({"pruned_gradient": "straight_through", "pruned_decay": 2e-4, "target_sparsity": 0.5,
                          "start_step": 0, "end_step": 2})
    model.fit(*_xy(digits), batch_size=16, epochs=1, verbose=0, callbacks=[cb])
    state = cb._state
    at_update = state.stored[0].numpy().copy()
    kernel, mask = model.get_layer("fc1").kernel.numpy(), state.masks[0].numpy()
    assert cb.sparsity["total"] == 0.5 and cb.per_step_paths == []
    assert np.all(kernel[mask == 0] == 0) and np.all(at_update[mask == 1] == 0) and np.any(at_update[mask == 0] != 0)
    model.fit(*_xy(digits), batch_size=16, epochs=1, verbose=0, callbacks=[cb])
    assert not np.array_equal(state.stored[0].numpy()[mask == 0], at_update[mask == 0])    # the optimizer moved them
    assert np.all(model.get_layer("fc1").kernel.numpy()[mask == 0] == 0)
