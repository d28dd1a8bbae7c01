"""Keras 3 channel removal (``sparsify_keras.remove_channels``): literal kept channels on tiny models, outputs equal
to the masked dense model's, parameter counts, the .keras round trip, clear errors; and the same on JAX, reloaded
on PyTorch without sparsify, in subprocesses."""
from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from backend_runs import run_python
from channel_models import inputs, masked_by_hand, residual_cnn
from sparsify_keras import channel_plan, remove_channels
from sparsify_keras.channels import ChannelPlan

L = keras.layers


def _mlp():
    model = keras.Sequential([keras.Input((3,)), L.Dense(4, activation="relu", name="a"), L.Dropout(0.1),
                              L.Dense(3, name="b"), L.Dense(2, name="out")])
    model.get_layer("a").set_weights([np.array([[4., -1, 3, 2]] * 3), np.arange(4.)])
    model.get_layer("b").set_weights([np.array([[1., -3, 2]] * 4), np.zeros(3)])
    return model


def test_kept_channels_follow_the_weight_norms():
    plan = channel_plan(_mlp(), 0.5)
    assert {k: v.tolist() for k, v in plan.kept.items()} == {"a": [0, 2], "b": [1, 2], "out": [0, 1]}
    assert plan.widths == {"a": 2, "b": 2} and plan.groups == [("a",), ("b",)]
    assert plan.unprunable == {"out": "model output"}
    plan = channel_plan(residual_cnn(), 0.5)
    assert {k: v.tolist() for k, v in plan.kept.items()} == {"c1": [0, 1], "c2": [0, 1], "fc": [0, 2, 5],
                                                             "head": [0, 1, 2]}
    assert plan.groups == [("c1", "c2"), ("fc",)] and plan.removed_fraction == 0.5
    l2 = channel_plan(residual_cnn(), 0.5, criterion="l2")     # L2: 18, 6, 8, 0.75 against L1: 6, 6, 4, 2
    assert l2.kept["c1"].tolist() == [0, 2] and l2.kept["fc"].tolist() == [0, 2, 5]


def test_the_selection_is_the_one_torch_makes_from_the_same_criteria():
    from sparsify_torch.channels import TopKPruningLabelSelector, UniformPruningLabelSelector
    plan = channel_plan(residual_cnn(), 0.5)
    assert [c.tolist() for c in plan.scores.group_criteria] == [[6.0, 6.0, 4.0, 2.0], [20.0, 4.0, 16.0, 8.0, 12.0,
                                                                                         24.0]]
    assert plan.removed_labels == [2, 3, 5, 7, 8] == UniformPruningLabelSelector(0.5).select(plan.scores)
    counts = channel_plan(residual_cnn(), {"c1": 1, "fc": 0.5})
    assert counts.removed_labels == [3, 5, 7, 8] == TopKPruningLabelSelector([1, 3]).select(counts.scores)


def test_outputs_equal_the_masked_model_and_parameters_shrink():
    model = residual_cnn()
    small = remove_channels(model, 0.5)
    assert [small.get_layer(n).filters for n in ("c1", "c2")] == [2, 2] and small.get_layer("fc").units == 3
    assert small.get_layer("bn").gamma.shape == (2,) and tuple(small.get_layer("dw").kernel.shape) == (3, 3, 2, 1)
    assert (model.count_params(), small.count_params()) == (211, 79)
    x = inputs()
    want = keras.ops.convert_to_numpy(masked_by_hand(model)(x, training=False))
    got = keras.ops.convert_to_numpy(small(x, training=False))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(want - keras.ops.convert_to_numpy(model(x, training=False))).max() > 1e-2   # channels mattered
    assert model.get_layer("c1").filters == 4                   # the original is untouched


def test_per_layer_spec_and_round_to():
    model = keras.Sequential([keras.Input((5,)), L.Dense(10, name="a"), L.Dense(8, name="b"), L.Dense(2, name="c")])
    assert channel_plan(model, {"b": 3}).widths == {"b": 5}                 # a count, only the named layer
    assert channel_plan(model, 0.75).widths == {"a": 3, "b": 2}
    assert channel_plan(model, 0.75, round_to=4).widths == {"a": 4, "b": 4}  # kept counts rounded up
    assert channel_plan(model, 0.1, round_to=4).widths == {}                 # 9 -> 12 > 10 and 7 -> 8: none
    small = remove_channels(model, channel_plan(model, {"a": 0.5}))
    assert [layer.units for layer in small.layers] == [5, 8, 2]


def test_keras_file_round_trip(tmp_path):
    small = remove_channels(residual_cnn(), 0.5)
    path = str(tmp_path / "small.keras")
    small.save(path)
    loaded = keras.saving.load_model(path)
    x = inputs()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(small(x)),
                               rtol=1e-6, atol=1e-6)
    assert loaded.count_params() == 79 and type(loaded).__name__ == "Functional"


def test_a_softmax_layer_keeps_its_channels():
    model = keras.Sequential([keras.Input((3,)), L.Dense(4, activation="softmax", name="gate"),
                              L.Dense(4, name="mid"), L.Activation("softmax", name="sm"), L.Dense(2, name="out")])
    plan = channel_plan(model, 0.5)
    assert plan.widths == {} and plan.unprunable == {"gate": "'gate' applies softmax across its channels",
                                                     "mid": "'sm' applies softmax across channels",
                                                     "out": "model output"}


@pytest.mark.parametrize("build,match", [
    (lambda: keras.Sequential([keras.Input((4, 2)), L.Conv1D(3, 1, name="conv1d"), L.Flatten(), L.Dense(2)]),
     r"layer 'conv1d' \(Conv1D\): this layer type is not supported"),
    (lambda: keras.Sequential([keras.Input((4, 4, 4)), L.Conv2D(4, 1, groups=2, name="g"), L.Flatten(), L.Dense(2)]),
     r"layer 'g' \(Conv2D\): groups=2; grouped convolutions are not supported"),
    (lambda: keras.Sequential([keras.Input((4, 4, 2)), L.Conv2D(4, 1, name="c"),
                               L.BatchNormalization(axis=1, name="bn1"), L.Flatten(), L.Dense(2)]),
     r"layer 'bn1' \(BatchNormalization\): axis=1; only the last \(channel\) axis"),
    (lambda: keras.Sequential([L.Dense(2)]), "a Sequential model without an Input"),
])
def test_unsupported_models_are_refused_with_the_layer_and_why(build, match):
    with pytest.raises(ValueError, match=match):
        remove_channels(build(), 0.5)


def test_concatenate_is_refused():
    a, b = keras.Input((3,)), keras.Input((2,))
    model = keras.Model([a, b], L.Dense(2)(L.Concatenate(name="cat")([L.Dense(4)(a), b])))
    with pytest.raises(ValueError, match=r"layer 'cat' \(Concatenate\): this layer type is not supported"):
        channel_plan(model, 0.5)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"sparsity": 1.0}, ValueError, r"sparsity must be a fraction of channels to remove in \[0, 1\), got 1.0"),
    ({"sparsity": -0.1}, ValueError, r"sparsity must be a fraction .* got -0.1"),
    ({"sparsity": "half"}, TypeError, "sparsity must be a fraction in .* got 'half'"),
    ({"sparsity": {"nope": 0.5}}, ValueError, r"sparsity names 'nope', which is not a Dense or Conv2D layer of the "
                                              r"model; prunable layers: \['a', 'b'\]"),
    ({"sparsity": {"out": 0.5}}, ValueError, "sparsity names layer 'out', whose channels cannot be removed: model "
                                             "output"),
    ({"sparsity": {"a": 4}}, ValueError, "asks to remove 4 of the 4 channels of 'a'; at most 3"),
    ({"sparsity": 0.5, "criterion": "l3"}, ValueError, r"criterion must be one of \('l1', 'l2'\), got 'l3'"),
    ({"sparsity": 0.5, "round_to": 0}, ValueError, "round_to must be a positive integer, got 0"),
    ({"sparsity": 0.5, "check": "yes"}, TypeError, "check must be a bool, got 'yes'"),
])
def test_bad_arguments_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        remove_channels(_mlp(), **kwargs)


def test_a_plan_for_another_model_is_refused():
    plan = channel_plan(_mlp(), 0.5)
    other = keras.Sequential([keras.Input((3,)), L.Dense(5, name="a"), L.Dense(3, name="b"), L.Dense(2, name="out")])
    with pytest.raises(ValueError, match="a ChannelPlan made for another model: its layer 'a' has 4 channels, the "
                                         "model's has 5"):
        remove_channels(other, plan)


def test_subclassed_model_is_refused():
    class Net(keras.Model):
        def call(self, x):
            return x
    with pytest.raises(TypeError, match="must be a Keras 3 Sequential or Functional model, got Net"):
        channel_plan(Net(), 0.5)
    assert isinstance(channel_plan(_mlp(), 0.0), ChannelPlan)


_JAX = """
import json, sys
sys.path.insert(0, "tests/sparsify_keras")
import keras, numpy as np
from channel_models import inputs, masked_by_hand, residual_cnn
from sparsify_keras import channel_plan, remove_channels
model = residual_cnn()
small = remove_channels(model, 0.5)
x = inputs()
diff = np.abs(np.asarray(small(x, training=False)) - np.asarray(masked_by_hand(model)(x, training=False))).max()
small.save(sys.argv[1])
np.save(sys.argv[2], np.asarray(small(x)))
print(json.dumps({"backend": keras.backend.backend(), "diff": float(diff), "params": small.count_params(),
                  "kept": {k: v.tolist() for k, v in channel_plan(model, 0.5).kept.items()}}))
"""
_LOAD = """
import json, sys
import keras, numpy as np
sys.path.insert(0, "tests/sparsify_keras")
from channel_models import inputs
model = keras.saving.load_model(sys.argv[1])
diff = np.abs(keras.ops.convert_to_numpy(model(inputs())) - np.load(sys.argv[2])).max()
print(json.dumps({"backend": keras.backend.backend(), "diff": float(diff), "sparsify": "sparsify" in sys.modules}))
"""


@pytest.mark.slow
def test_jax_removes_the_same_channels_and_torch_loads_the_file_without_sparsify(tmp_path):
    path, out = str(tmp_path / "small.keras"), str(tmp_path / "out.npy")
    got = json.loads(run_python(["-c", _JAX, path, out], "jax").stdout.strip().splitlines()[-1])
    assert got["backend"] == "jax" and got["params"] == 79 and got["diff"] < 1e-5
    assert got["kept"] == {"c1": [0, 1], "c2": [0, 1], "fc": [0, 2, 5], "head": [0, 1, 2]}
    loaded = json.loads(run_python(["-c", _LOAD, path, out], "torch").stdout.strip().splitlines()[-1])
    assert loaded == {"backend": "torch", "diff": loaded["diff"], "sparsify": False} and loaded["diff"] < 1e-5
