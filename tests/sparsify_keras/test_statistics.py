"""sparsify_keras.statistics: Wanda's input statistics during fit reach attention's EinsumDense projections."""
from __future__ import annotations

import numpy as np
import pytest

import keras

from sparsify_keras import PruningCallback, find_prunable_weights, prune_oneshot, strip_pruning
from sparsify_keras.statistics import einsum_input_channels, reads_input_channels


def _attention_model():
    keras.utils.set_random_seed(0)
    inp = keras.Input((6, 8))
    h = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")(inp, inp)
    out = keras.layers.Dense(3, name="fc")(keras.layers.Flatten()(h))
    model = keras.Model(inp, out)
    model.compile(keras.optimizers.SGD(0.0), "mse")      # learning rate 0: the weights stay as built
    return model


def test_attention_projections_read_their_input_channels():
    pws = find_prunable_weights(_attention_model())
    assert [(pw.path.split("/")[-2], pw.canonical_shape, einsum_input_channels(pw)) for pw in pws[:4]] == [
        ("query", (8, 8), True), ("key", (8, 8), True), ("value", (8, 8), True), ("attention_output", (8, 8), True)]
    assert all(reads_input_channels(pw) for pw in pws)


@pytest.mark.slow          # a fit on the default backend: several seconds on a 2-core machine
def test_wanda_during_fit_equals_oneshot_wanda_on_the_same_batch():
    x = np.random.default_rng(1).normal(size=(8, 6, 8)).astype("float32")
    x[..., :4] *= 5.0                                  # input channels of very different norms
    y = np.zeros((8, 3), "float32")
    cfg = {"target_sparsity": 0.5, "criterion": "wanda", "start_step": 0, "end_step": 1, "pruning_frequency": 1}
    model = _attention_model()
    cb = PruningCallback(cfg)
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[cb])   # update at step 1: batch 0
    assert cb.last_update_step == 1
    fit_masks = {p.split("/", 1)[1]: m for p, m in cb.masks.items()}
    strip_pruning(model)
    twin = _attention_model()
    prune_oneshot(twin, {"target_sparsity": 0.5, "criterion": "wanda"}, x)
    once = {pw.path.split("/", 1)[1]: np.asarray(pw.variable.numpy()) != 0 for pw in find_prunable_weights(twin)}
    assert set(fit_masks) == set(once) and len(once) == 5
    for path, mask in fit_masks.items():
        np.testing.assert_array_equal(mask, once[path], err_msg=path)
        assert (~mask).sum() == mask.size // 2
