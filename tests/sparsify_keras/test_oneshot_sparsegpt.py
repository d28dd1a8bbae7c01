"""SparseGPT one-shot in Keras (``sparsify_keras.prune_oneshot(method="sparsegpt")``) equals torch's for the same
weights and calibration inputs: the same masks, and weights equal within float32 rounding."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import sparsify_torch
from sparsify_keras import prune_oneshot

CASES = [({"target_sparsity": 0.5}, True), ({"target_sparsity": 0.5, "pattern": "2:4"}, True),
         ({"target_sparsity": 0.6}, False)]


def _models(seed: int = 0):
    import keras

    rng = np.random.default_rng(seed)
    w1, b1 = rng.normal(size=(32, 16)).astype("float32") / 4, rng.normal(size=32).astype("float32") / 10
    w2, b2 = rng.normal(size=(8, 32)).astype("float32") / 6, rng.normal(size=8).astype("float32") / 10
    tm = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    with torch.no_grad():
        for lin, (w, b) in zip((tm[0], tm[2]), ((w1, b1), (w2, b2))):
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
    km = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu", name="fc1"),
                           keras.layers.Dense(8, name="fc2")])
    km.set_weights([w1.T, b1, w2.T, b2])
    x = rng.normal(size=(4, 64, 16)).astype("float32")            # 4 calibration batches, correlated below
    x[..., 8:] = x[..., :8] + 0.1 * x[..., 8:]
    return tm, km, x


@pytest.mark.parametrize("cfg,sequential", CASES)
def test_keras_sparsegpt_equals_torch(cfg, sequential):
    tm, km, x = _models()
    sparsify_torch.prune_oneshot(tm, cfg, [torch.from_numpy(b) for b in x], method="sparsegpt", block_size=8,
                                 sequential=sequential)
    prune_oneshot(km, cfg, list(x), method="sparsegpt", block_size=8, sequential=sequential)
    for t_lin, name in ((tm[0], "fc1"), (tm[2], "fc2")):
        tw = t_lin.weight.detach().numpy()
        kw = km.get_layer(name).kernel.numpy().T
        np.testing.assert_array_equal(kw == 0, tw == 0, err_msg=name)
        np.testing.assert_allclose(kw, tw, rtol=1e-4, atol=1e-5, err_msg=name)
    if cfg.get("pattern") == "2:4":
        assert ((km.get_layer("fc1").kernel.numpy().T != 0).reshape(32, 4, 4).sum(-1) == 2).all()
    else:
        assert (km.get_layer("fc2").kernel.numpy() == 0).sum() == round(cfg["target_sparsity"] * 256)


def test_sparsegpt_refuses_what_it_cannot_do():
    _, km, x = _models()
    with pytest.raises(ValueError, match="pruning_scope must be 'local'"):
        prune_oneshot(km, {"target_sparsity": 0.5, "pruning_scope": "global"}, list(x), method="sparsegpt")
    with pytest.raises(ValueError, match="pass calibration data"):
        prune_oneshot(km, {"target_sparsity": 0.5}, None, method="sparsegpt")
    with pytest.raises(ValueError, match="block_size=4 applies to method='sparsegpt' only"):
        prune_oneshot(km, {"target_sparsity": 0.5}, list(x), block_size=4)
    with pytest.raises(ValueError, match="method must be one of"):
        prune_oneshot(km, {"target_sparsity": 0.5}, list(x), method="obs")
    assert (km.get_layer("fc1").kernel.numpy() != 0).all()           # nothing changed
